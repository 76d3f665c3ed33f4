// src/ofi/ofi_wait.cpp — wait sets (fi_wait_open, fi_wait): one blocking wait over several CQs
// and counters, possibly of different domains.
//
// A CQ or counter opened with FI_WAIT_SET and `wait_set` joins the set (WaitSet::add) and
// signals the set's eventfd whenever it gets an entry, an error or a new value. fi_wait runs
// each member domain's manual progress, then looks at the members: it returns 0 as soon as a CQ
// holds an entry or an error, or a counter's value or error count differs from what the last
// fi_wait saw; otherwise it sleeps on the eventfd and the domains' medium fds with a timeout
// growing from 1 us to 1 ms (the engines' ACK and retransmission timers need progress) and
// tries again, until `timeout` ms (-FI_ETIMEDOUT; negative: forever). FI_GETWAIT gives the
// eventfd (FI_WAIT_FD or FI_WAIT_UNSPEC sets): readable after an arrival, but as with every
// manual-progress provider, something must call in (fi_wait, a CQ read) for arrivals to happen.
//
// Thread-safety: the member lists are under the set's mutex; a member's state is read under its
// domain's lock. A member must not be closed while a fi_wait on its set is running.
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "src/ofi/enosys.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {

void WaitSet::signal() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(efd, &one, sizeof one);
}
void WaitSet::add(Cq* q) {
  std::lock_guard lk(mu);
  cqs.push_back(q);
}
void WaitSet::add(Cntr* c) {
  std::lock_guard lk(mu);
  cntrs.push_back({c, c->value, c->errors});
}
void WaitSet::remove(Cq* q) {
  std::lock_guard lk(mu);
  std::erase(cqs, q);
}
void WaitSet::remove(Cntr* c) {
  std::lock_guard lk(mu);
  std::erase_if(cntrs, [c](const CntrSeen& s) { return s.c == c; });
}

namespace {

// One look: progress every member domain once, then whether a member has something.
bool ready(WaitSet* w, std::vector<Domain*>& doms) {
  std::lock_guard lk(w->mu);
  doms.clear();
  for (Cq* q : w->cqs) doms.push_back(q->dom);
  for (auto& s : w->cntrs) doms.push_back(s.c->dom);
  std::sort(doms.begin(), doms.end());
  doms.erase(std::unique(doms.begin(), doms.end()), doms.end());
  for (Domain* d : doms) {
    std::lock_guard dl(d->mu);
    d->progress();
  }
  bool any = false;
  for (Cq* q : w->cqs) {
    std::lock_guard dl(q->dom->mu);
    any = any || !q->entries.empty() || !q->errors.empty();
  }
  for (auto& s : w->cntrs) {
    std::lock_guard dl(s.c->dom->mu);
    if (s.c->value != s.value || s.c->errors != s.errors) {
      s.value = s.c->value;
      s.errors = s.c->errors;
      any = true;
    }
  }
  return any;
}

int wait_wait(fid_wait* f, int timeout) {
  return guard(-FI_ENOMEM, [&] {
    WaitSet* w = ofi_container<WaitSet>(f);
    const TimeNs end = timeout < 0 ? kNoDeadline : mono_ns() + TimeNs(timeout) * 1'000'000;
    std::vector<Domain*> doms;
    std::vector<pollfd> fds;
    int sleep_us = 1;
    for (;;) {
      if (ready(w, doms)) return 0;
      const TimeNs now = mono_ns();
      if (now >= end) return -FI_ETIMEDOUT;
      fds.assign(1, pollfd{w->efd, POLLIN, 0});
      for (Domain* d : doms) {
        const int fd = d->port->wait_fd();
        if (fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
      }
      int wait_ms = sleep_us >= 1000 ? 1 : 0;
      if (end != kNoDeadline)
        wait_ms = std::min<int>(wait_ms, static_cast<int>((end - now) / 1'000'000));
      if (wait_ms == 0) {
        timespec ts{0, sleep_us * 1000L};
        nanosleep(&ts, nullptr);
      } else {
        ::poll(fds.data(), fds.size(), wait_ms);
      }
      sleep_us = std::min(sleep_us * 2, 1000);
      std::uint64_t drain;
      [[maybe_unused]] auto r = ::read(w->efd, &drain, sizeof drain);
    }
  });
}

int wait_close(fid* f) {
  WaitSet* w = ofi_container<WaitSet>(f);
  {
    std::lock_guard lk(w->mu);
    if (!w->cqs.empty() || !w->cntrs.empty()) return -FI_EBUSY;
  }
  ::close(w->efd);
  delete w;
  return 0;
}

int wait_control(fid* f, int command, void* arg) {
  WaitSet* w = ofi_container<WaitSet>(f);
  if (command != FI_GETWAIT || !arg) return -FI_ENOSYS;
  *static_cast<int*>(arg) = w->efd;
  return 0;
}

fi_ops g_wait_fi_ops = {sizeof(fi_ops), wait_close, no_bind,   wait_control,
                        no_ops_open,    no_tostr,   no_ops_set};
fi_ops_wait g_wait_ops = {sizeof(fi_ops_wait), wait_wait};

}  // namespace

int wait_open(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** out) {
  if (!attr || !out) return -FI_EINVAL;
  if (attr->flags) return -FI_EBADFLAGS;
  if (attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD) return -FI_ENOSYS;
  auto w = std::make_unique<WaitSet>();
  w->fabric = ofi_container<Fabric>(fabric);
  w->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->efd < 0) return -FI_ENOMEM;
  attr->wait_obj = FI_WAIT_FD;
  w->wait.fid.fclass = FI_CLASS_WAIT;
  w->wait.fid.context = nullptr;
  w->wait.fid.ops = &g_wait_fi_ops;
  w->wait.ops = &g_wait_ops;
  *out = &w.release()->wait;
  return 0;
}

}  // namespace weft::ofi
