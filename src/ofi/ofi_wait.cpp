// src/ofi/ofi_wait.cpp — native waits: wait sets (fi_wait_open, fi_wait), fi_trywait and the
// descriptor FI_GETWAIT hands out, and poll sets (fi_poll_open, fi_poll).
//
// A CQ or counter opened with FI_WAIT_SET and `wait_set` joins the set (WaitSet::add) and
// signals the set's eventfd whenever it gets an entry, an error or a new value. A CQ opened with
// FI_WAIT_FD (or UNSPEC) has a WaitFd of its own.
//
// Native waits (README, "Native waits"). Progress is manual: arrivals become completions only
// in a progress pass, so the descriptor an application blocks on must wake it when a pass has
// work, not only when a completion exists. man fi_poll (fi_trywait): the application calls
// fi_trywait and, on FI_SUCCESS, may block in poll/select/epoll on the FI_GETWAIT descriptor.
// So that descriptor is an epoll set (WaitFd::epfd) over
// - the object's eventfd (a completion or counter change made by another thread's pass, or
//   fi_cq_signal),
// - a timerfd set to the earliest engine deadline (ACK, retransmission and RNR timers: software
//   here, so nothing answers a peer while everyone sleeps past them),
// - and, armed by fi_trywait, each domain's doorbells (MediumPort::arm_sleep: on shm every
//   link's ring asks its producer to ring us at its next publish, ring.hpp consumer_sleeping)
//   and control descriptor (connection requests, new links, a peer's death).
// fi_trywait (trywait_arm) drains the object's fds, progresses its domains, answers -FI_EAGAIN
// when there is something to read or a domain cannot sleep now, and otherwise arms all of the
// above. The doorbells stay armed until a producer rings once (the ring clears the flag) or the
// next arm; a rung doorbell keeps the epoll set readable until the next fi_trywait drains it,
// which is what the contract asks (the application reads, then calls fi_trywait again).
// A medium without doorbells (dpdk) gets a tick instead: the
// timer fires at most tick_ns after the arm (1 ms for fi_trywait), as the old polling did.
// fi_wait is fi_trywait plus a ppoll of the epoll set, so it wakes at a peer's publish too.
//
// Thread-safety: the member lists are under the set's mutex; a member's state is read under its
// domain's lock. A member must not be closed while a fi_wait on its set is running.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "src/ofi/enosys.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {

namespace {
// What a medium without doorbells waits at most between progress passes in fi_trywait's
// descriptor: the old fi_wait's longest nap (the engines' timers are a few ms and longer).
constexpr TimeNs kTrywaitTickNs = 1'000'000;
// fi_wait on such a medium starts with short naps (a reply often follows at once) and doubles.
constexpr TimeNs kWaitTickFirstNs = 1'000;

// Consecutive "cannot sleep now" answers after which fi_wait naps one tick anyway: a descriptor
// that stays readable without a pass consuming it must not make fi_wait spin.
constexpr int kWaitRetriesMax = 64;

timespec to_timespec(TimeNs ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}
}  // namespace

bool WaitFd::open() {
  efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epfd = ::epoll_create1(EPOLL_CLOEXEC);
  tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  bool ok = efd >= 0 && epfd >= 0 && tfd >= 0;
  for (int fd : {efd, tfd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ok = ok && ::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  if (!ok) close();
  return ok;
}
void WaitFd::close() {
  for (int* fd : {&efd, &epfd, &tfd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}
void WaitFd::signal() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(efd, &one, sizeof one);
}
void WaitFd::drain() const {
  std::uint64_t v;
  [[maybe_unused]] auto r = ::read(efd, &v, sizeof v);
  r = ::read(tfd, &v, sizeof v);
}

int trywait_arm(WaitFd& w, std::span<Domain* const> doms, bool (*has_events)(void*), void* arg,
                TimeNs tick_ns) {
  w.drain();
  // Drain what a previous arm left rung, then a pass, so that what it finds is seen below.
  thread_local std::vector<pollfd> fds;
  for (Domain* d : doms) {
    std::lock_guard lk(d->mu);
    fds.clear();
    d->port->disarm_sleep(fds);
    d->clock_due =
        true;  // the caller may have slept since its last call (ofi_domain.cpp pass_clock)
    d->progress();
  }
  if (has_events(arg)) return kTrywaitEvents;
  TimeNs wake = kNoDeadline;
  bool can_sleep = true;
  for (Domain* d : doms) {
    std::lock_guard lk(d->mu);
    fds.clear();
    const bool armed = d->port->arm_sleep(fds);
    if (fds.empty()) {  // no doorbells: the medium's fd where it has one, and a tick
      const int fd = d->port->wait_fd();
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
      wake = std::min(wake, mono_ns() + tick_ns);
    } else if (!armed) {
      can_sleep = false;  // records arrived meanwhile
    }
    wake = std::min(wake, d->next_deadline());
    for (const pollfd& p : fds) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = p.fd;
      if (::epoll_ctl(w.epfd, EPOLL_CTL_ADD, p.fd, &ev) != 0 && errno != EEXIST) can_sleep = false;
    }
    // Already readable (a control datagram the pass's rate limit left, a doorbell rung after
    // the pass): no sleep, and the next control poll looks at once (disarm_sleep's revents).
    if (can_sleep && ::poll(fds.data(), fds.size(), 0) > 0) can_sleep = false;
    if (!can_sleep) {
      d->port->disarm_sleep(fds);
      return -FI_EAGAIN;
    }
  }
  if (wake != kNoDeadline && wake <= mono_ns()) return -FI_EAGAIN;  // a timer is due
  itimerspec its{};
  if (wake != kNoDeadline) its.it_value = to_timespec(wake);
  ::timerfd_settime(w.tfd, TFD_TIMER_ABSTIME, &its, nullptr);
  return 0;
}

void WaitSet::signal() const {
  wfd.signal();
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

// The member domains, sorted and unique.
void member_domains(WaitSet* w, std::vector<Domain*>& doms) {
  std::lock_guard lk(w->mu);
  doms.clear();
  for (Cq* q : w->cqs) doms.push_back(q->dom);
  for (auto& s : w->cntrs) doms.push_back(s.c->dom);
  std::sort(doms.begin(), doms.end());
  doms.erase(std::unique(doms.begin(), doms.end()), doms.end());
}

// Whether a member has something: a CQ entry or error, or a counter's value or error count
// different from what the last look saw (the look takes the change).
bool set_has_events(void* arg) {
  auto* w = static_cast<WaitSet*>(arg);
  std::lock_guard lk(w->mu);
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

// (Not fi_cq_signal's flag: only fi_cq_sread consumes it, and an application that waits
// natively and reads with fi_cq_read would be told -FI_EAGAIN for ever. The signal wrote the
// eventfd, which woke it once.)
bool cq_has_events(void* arg) {
  auto* q = static_cast<Cq*>(arg);
  std::lock_guard lk(q->dom->mu);
  return !q->entries.empty() || !q->errors.empty();
}

int set_trywait(WaitSet* w, TimeNs tick_ns) {
  thread_local std::vector<Domain*> doms;
  member_domains(w, doms);
  return trywait_arm(w->wfd, doms, set_has_events, w, tick_ns);
}

// fi_wait: fi_trywait, then a sleep in the epoll set it armed, until a member has something.
// -FI_EAGAIN from the arm with nothing to report (a ring had records, a timer was due) means
// only "progress again", which the next arm does.
int wait_wait(fid_wait* f, int timeout) {
  return guard(-FI_ENOMEM, [&] {
    WaitSet* w = ofi_container<WaitSet>(f);
    const TimeNs end = timeout < 0 ? kNoDeadline : mono_ns() + TimeNs(timeout) * 1'000'000;
    TimeNs tick = kWaitTickFirstNs;
    int retries = 0;
    for (;;) {
      const int r = set_trywait(w, tick);
      if (r == kTrywaitEvents) return 0;
      const TimeNs now = mono_ns();
      if (now >= end) return -FI_ETIMEDOUT;
      if (r != 0 && ++retries < kWaitRetriesMax) continue;  // progress again
      retries = 0;
      pollfd p{w->wfd.epfd, POLLIN, 0};
      TimeNs nap = end == kNoDeadline ? kNoDeadline : end - now;
      if (r != 0) nap = std::min(nap, tick);
      const timespec ts = to_timespec(nap);
      ::ppoll(&p, 1, nap == kNoDeadline ? nullptr : &ts, nullptr);
      tick = std::min(tick * 2, kTrywaitTickNs);
    }
  });
}

int wait_close(fid* f) {
  WaitSet* w = ofi_container<WaitSet>(f);
  {
    std::lock_guard lk(w->mu);
    if (!w->cqs.empty() || !w->cntrs.empty()) return -FI_EBUSY;
  }
  w->wfd.close();
  delete w;
  return 0;
}

int wait_control(fid* f, int command, void* arg) {
  WaitSet* w = ofi_container<WaitSet>(f);
  if (!arg) return -FI_EINVAL;
  if (command == FI_GETWAIT) {
    *static_cast<int*>(arg) = w->wfd.epfd;
    return 0;
  }
  if (command == FI_GETWAITOBJ) {
    *static_cast<fi_wait_obj*>(arg) = FI_WAIT_FD;
    return 0;
  }
  return -FI_ENOSYS;
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
  if (!w->wfd.open()) return -FI_ENOMEM;
  attr->wait_obj = FI_WAIT_FD;
  w->wait.fid.fclass = FI_CLASS_WAIT;
  w->wait.fid.context = nullptr;
  w->wait.fid.ops = &g_wait_fi_ops;
  w->wait.ops = &g_wait_ops;
  *out = &w.release()->wait;
  return 0;
}

// man fi_poll: every fid must have a native wait object of the same type (ours: FI_WAIT_FD);
// a CQ or counter of a wait set is answered for by its set. Each object is armed on its own (a
// domain behind two of them is progressed twice), which keeps the objects independent.
int trywait(fid** fids, int count) {
  if (count < 0 || (count > 0 && !fids)) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    fid* f = fids[i];
    if (!f) return -FI_EINVAL;
    int r;
    switch (f->fclass) {
      case FI_CLASS_CQ: {
        Cq* q = ofi_container<Cq>(reinterpret_cast<fid_cq*>(f));
        if (q->ws) {
          r = set_trywait(q->ws, kTrywaitTickNs);
        } else if (q->wait == FI_WAIT_FD) {
          Domain* d = q->dom;
          r = trywait_arm(q->wfd, std::span<Domain* const>(&d, 1), cq_has_events, q,
                          kTrywaitTickNs);
        } else {
          return -FI_EINVAL;  // FI_WAIT_NONE: nothing to block on
        }
        break;
      }
      case FI_CLASS_CNTR: {
        Cntr* c = ofi_container<Cntr>(reinterpret_cast<fid_cntr*>(f));
        if (!c->ws) return -FI_EINVAL;  // a counter's own wait object is not exposed
        r = set_trywait(c->ws, kTrywaitTickNs);
        break;
      }
      case FI_CLASS_WAIT:
        r = set_trywait(ofi_container<WaitSet>(reinterpret_cast<fid_wait*>(f)), kTrywaitTickNs);
        break;
      default:
        return -FI_EAGAIN;  // an EQ: its events come from progress and it has no descriptor
    }
    if (r != 0) return -FI_EAGAIN;
  }
  return 0;
}

// ---- poll sets ----------------------------------------------------------------------------
// man fi_poll: fi_poll progresses every member and returns the contexts of the CQs that are not
// empty and of the counters whose value or error count changed since the last fi_poll.
namespace {

struct PollSet {
  fid_poll poll{};
  Domain* dom = nullptr;
  std::mutex mu;
  std::vector<Cq*> cqs;
  struct CntrSeen {
    Cntr* c;
    std::uint64_t value, errors;
  };
  std::vector<CntrSeen> cntrs;
};

int pollset_poll(fid_poll* f, void** context, int count) {
  return guard(-FI_ENOMEM, [&] {
    PollSet* p = ofi_container<PollSet>(f);
    if (count < 0 || (count > 0 && !context)) return -FI_EINVAL;
    std::lock_guard lk(p->mu);
    thread_local std::vector<Domain*> doms;
    doms.clear();
    for (Cq* q : p->cqs) doms.push_back(q->dom);
    for (auto& s : p->cntrs) doms.push_back(s.c->dom);
    std::sort(doms.begin(), doms.end());
    doms.erase(std::unique(doms.begin(), doms.end()), doms.end());
    for (Domain* d : doms) {
      std::lock_guard dl(d->mu);
      d->progress();
    }
    int n = 0;
    for (Cq* q : p->cqs) {
      if (n == count) break;
      std::lock_guard dl(q->dom->mu);
      if (!q->entries.empty() || !q->errors.empty()) context[n++] = q->cq.fid.context;
    }
    for (auto& s : p->cntrs) {
      if (n == count) break;
      std::lock_guard dl(s.c->dom->mu);
      if (s.c->value == s.value && s.c->errors == s.errors) continue;
      s.value = s.c->value;
      s.errors = s.c->errors;
      context[n++] = s.c->cntr.fid.context;
    }
    return n;
  });
}

int pollset_add(fid_poll* f, fid* event, std::uint64_t flags) {
  return guard(-FI_ENOMEM, [&] {
    PollSet* p = ofi_container<PollSet>(f);
    if (!event || flags) return -FI_EINVAL;
    std::lock_guard lk(p->mu);
    if (event->fclass == FI_CLASS_CQ) {
      Cq* q = ofi_container<Cq>(reinterpret_cast<fid_cq*>(event));
      if (std::find(p->cqs.begin(), p->cqs.end(), q) != p->cqs.end()) return -FI_EALREADY;
      p->cqs.push_back(q);
      std::lock_guard dl(q->dom->mu);
      ++q->refs;
      return 0;
    }
    if (event->fclass == FI_CLASS_CNTR) {
      Cntr* c = ofi_container<Cntr>(reinterpret_cast<fid_cntr*>(event));
      for (auto& s : p->cntrs)
        if (s.c == c) return -FI_EALREADY;
      std::lock_guard dl(c->dom->mu);
      p->cntrs.push_back({c, c->value, c->errors});
      ++c->refs;
      return 0;
    }
    return -FI_ENOSYS;
  });
}

int pollset_del(fid_poll* f, fid* event, std::uint64_t flags) {
  PollSet* p = ofi_container<PollSet>(f);
  if (!event || flags) return -FI_EINVAL;
  std::lock_guard lk(p->mu);
  for (auto it = p->cqs.begin(); it != p->cqs.end(); ++it) {
    if (&(*it)->cq.fid != event) continue;
    std::lock_guard dl((*it)->dom->mu);
    --(*it)->refs;
    p->cqs.erase(it);
    return 0;
  }
  for (auto it = p->cntrs.begin(); it != p->cntrs.end(); ++it) {
    if (&it->c->cntr.fid != event) continue;
    std::lock_guard dl(it->c->dom->mu);
    --it->c->refs;
    p->cntrs.erase(it);
    return 0;
  }
  return -FI_ENOENT;
}

int pollset_close(fid* f) {
  PollSet* p = ofi_container<PollSet>(reinterpret_cast<fid_poll*>(f));
  {
    std::lock_guard lk(p->mu);
    if (!p->cqs.empty() || !p->cntrs.empty()) return -FI_EBUSY;
  }
  {
    std::lock_guard dl(p->dom->mu);
    --p->dom->refs;
  }
  delete p;
  return 0;
}

fi_ops g_poll_fi_ops = {sizeof(fi_ops), pollset_close, no_bind,   no_control,
                        no_ops_open,    no_tostr,      no_ops_set};
fi_ops_poll g_poll_ops = {sizeof(fi_ops_poll), pollset_poll, pollset_add, pollset_del};

}  // namespace

int poll_open(fid_domain* domain, fi_poll_attr* attr, fid_poll** out) {
  if (!domain || !out) return -FI_EINVAL;
  if (attr && attr->flags) return -FI_EBADFLAGS;
  auto p = std::make_unique<PollSet>();
  p->dom = ofi_container<Domain>(domain);
  p->poll.fid.fclass = FI_CLASS_POLL;
  p->poll.fid.context = nullptr;
  p->poll.fid.ops = &g_poll_fi_ops;
  p->poll.ops = &g_poll_ops;
  std::lock_guard lk(p->dom->mu);
  ++p->dom->refs;
  *out = &p.release()->poll;
  return 0;
}

}  // namespace weft::ofi
