// io/driver.cpp — the Driver's passes and its spin-then-block sleep (see driver.hpp).
#include "src/io/driver.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "src/base/assert.hpp"

namespace weft::io {
namespace {

// epoll data tags: attachment index, or one of these.
constexpr std::uint64_t kTagKick = ~0ull;
constexpr std::uint64_t kTagTimer = ~0ull - 1;
constexpr std::uint64_t kTagEventBit = 1ull << 32;  // | attachment index: its event fd

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Driver::Driver(const DriverConfig& config) : config_(config) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  kickfd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  WEFT_ASSERT(epfd_ >= 0 && kickfd_ >= 0 && timerfd_ >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagKick;
  WEFT_ASSERT(epoll_ctl(epfd_, EPOLL_CTL_ADD, kickfd_, &ev) == 0);
  ev.data.u64 = kTagTimer;
  WEFT_ASSERT(epoll_ctl(epfd_, EPOLL_CTL_ADD, timerfd_, &ev) == 0);
}

Driver::~Driver() {
  stop();
  close(timerfd_);
  close(kickfd_);
  close(epfd_);
}

void Driver::attach(Device& dev, Medium& medium) {
  for (const auto& a : att_) WEFT_ASSERT(a.dev != &dev);
  att_.push_back({&dev, &medium});
  // Re-register every fd: indices are the epoll tags.
  const std::uint64_t i = att_.size() - 1;
  epoll_event ev{};
  if (medium.rx_wait_fd() >= 0) {
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    WEFT_ASSERT(epoll_ctl(epfd_, EPOLL_CTL_ADD, medium.rx_wait_fd(), &ev) == 0);
  }
  if (medium.event_fd() >= 0) {
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u64 = kTagEventBit | i;
    WEFT_ASSERT(epoll_ctl(epfd_, EPOLL_CTL_ADD, medium.event_fd(), &ev) == 0);
  }
}

void Driver::detach(Device& dev) {
  auto it =
      std::find_if(att_.begin(), att_.end(), [&](const Attachment& a) { return a.dev == &dev; });
  if (it == att_.end()) return;
  // Drop every medium's registration and re-add the rest under their new indices.
  for (const auto& a : att_) {
    if (a.medium->rx_wait_fd() >= 0)
      epoll_ctl(epfd_, EPOLL_CTL_DEL, a.medium->rx_wait_fd(), nullptr);
    if (a.medium->event_fd() >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, a.medium->event_fd(), nullptr);
  }
  att_.erase(it);
  auto rest = std::move(att_);
  att_.clear();
  for (const auto& a : rest) attach(*a.dev, *a.medium);
}

bool Driver::pass_in() {
  // The clock costs ~100 ns here (kvm-clock through the vDSO), a third of an idle pass: while
  // idle, read it every kClockEveryPasses passes only. Engines then see a time up to a few
  // microseconds stale — far below the IBA timers' granularity (4.096 us x 2^timeout) — and the
  // first pass after any work reads it afresh.
  constexpr std::uint64_t kClockEveryPasses = 8;
  // For the same reason the Devices' deadlines are compared only when the clock moved or
  // something happened (a Device's deadline changes only when it works: a packet in or out, a
  // timer, a post, which shows as a packet out): next_deadline() walks the timer heap.
  // With a fresh clock here; after a packet came in on a pass without one, in pass_out, once
  // the pass's packets are out: between a request's arrival and its reply's publish it was
  // ~50 instructions (the heap's top checked against the QP's rto/rnr/ACK deadlines) on the
  // critical path of every latency hop, for a `now` the last fresh pass had already compared
  // (bench/io/README.md, session 24).
  // A due reading waits one pass when watch_media has just seen a packet waiting (the reading
  // would delay it, and a pass that works makes the next one read the clock), never two: a
  // medium may say ready without a packet (a dead peer's), and time must still move.
  if (counters_.passes % kClockEveryPasses == 0) clock_due_ = true;
  const bool fresh = last_worked_ || (clock_due_ && (!rx_seen_ || clock_waited_));
  clock_waited_ = clock_due_ && !fresh;
  if (fresh) clock_due_ = false;
  rx_seen_ = false;
  if (fresh) {
    last_now_ = monotonic_ns();
    account(last_now_);
  }
  const TimeNs now = last_now_;
  ++counters_.passes;
  bool worked = false;
  for (const auto& a : att_)
    if (a.medium->rx_burst(*a.dev, now, config_.burst_max) != 0) worked = true;
  deadlines_due_ = false;
  if (fresh) {
    if (fire_deadlines(now)) worked = true;
  } else {
    deadlines_due_ = worked;
  }
  last_worked_ = worked;
  return worked;
}

bool Driver::fire_deadlines(TimeNs now) {
  bool fired = false;
  for (const auto& a : att_)
    if (a.dev->next_deadline() <= now) {
      a.dev->on_deadline(now);
      fired = true;
    }
  return fired;
}

bool Driver::pass_out() {
  const TimeNs now = last_now_;
  bool worked = false;
  for (const auto& a : att_)
    if (a.medium->tx_burst(*a.dev, now, config_.burst_max)) worked = true;
  // pass_in's deferred comparison (a packet came in without a fresh clock). A timer fired here
  // sends on the next pass, which follows at once: this one worked.
  if (deadlines_due_) {
    deadlines_due_ = false;
    ++counters_.late_deadline_checks;
    if (fire_deadlines(now)) worked = true;
  }
  if (now - last_event_poll_ >= config_.event_poll_ns) {
    last_event_poll_ = now;
    poll_events(0);
  }
  if (worked) last_worked_ = true;
  return worked;
}

void Driver::account(TimeNs now) {
  if (clock_mark_ != 0 && now > clock_mark_) {
    const TimeNs d = now - clock_mark_;
    if (last_worked_) {
      counters_.busy_ns += d;
    } else {
      bool blocked = false;
      for (const auto& a : att_) blocked = blocked || a.medium->tx_blocked();
      (blocked ? counters_.idle_blocked_ns : counters_.idle_ns) += d;
    }
  }
  clock_mark_ = now;
}

TimeNs Driver::spin_limit_ns() const {
  for (const auto& a : att_)
    if (a.medium->tx_blocked() || a.medium->tx_in_flight())
      return std::max(config_.spin_ns, config_.blocked_spin_ns);
  return config_.spin_ns;
}

Medium::PeerState Driver::peers(TimeNs now, TimeNs last_work) const {
  // Within peer_stall_ns of our own last work a silent peer is not judged by its age: it may
  // just have been woken by what we sent (a doorbell takes ~10-50 us here to run it).
  const TimeNs seen_after =
      now - last_work < config_.peer_stall_ns ? 0 : now - config_.peer_stall_ns;
  const int cpu = sched_getcpu();
  bool unknown = att_.empty();
  for (const auto& a : att_) {
    switch (a.medium->peer_state(seen_after, cpu)) {
      case Medium::PeerState::kRunning:
        return Medium::PeerState::kRunning;
      case Medium::PeerState::kUnknown:
        unknown = true;
        break;
      case Medium::PeerState::kStalled:
        break;
    }
  }
  return unknown ? Medium::PeerState::kUnknown : Medium::PeerState::kStalled;
}

void Driver::watch_media() {
  // An idle pass (both bursts, the Device's transmit poll, the clock every few passes) is
  // ~0.1 us here; a packet landing during one waits for the rest of it and the next pass's
  // start: ~half a pass. Watching the media's rx_ready between pauses cuts that to about half a
  // pause (bench/io/README.md, session 19).
  // Bounded, so that whatever only a pass notices (a post by another thread in threaded mode,
  // a deadline) waits at most ~kWatchPausesMax pauses longer; not while a medium is
  // back-pressured (its room shows in tx_burst, not in rx_ready).
  // 16 pauses (~0.3 us here) between passes, and a look before the first: with 8 and a pause
  // first, a packet landing during the pass or its first pause waited that much longer, about
  // 5-10 ns a message (session 21, alternating runs).
  constexpr int kWatchPausesMax = 16;
  for (const auto& a : att_)
    if (a.medium->tx_blocked()) {
      cpu_relax();
      return;
    }
  for (int i = 0; i < kWatchPausesMax; ++i) {
    for (const auto& a : att_)
      if (a.medium->rx_ready()) {
        rx_seen_ = true;
        return;
      }
    cpu_relax();
  }
}

bool Driver::idle_pause(TimeNs now, TimeNs last_work, TimeNs& last_check) {
  // One pause (~40 ns here): an idle pass is then ~0.1 us, the delay to notice a packet; `now`
  // is up to a few passes stale, which only delays a look at the peers a little.
  const TimeNs every = config_.peer_check_ns ? config_.peer_check_ns : config_.yield_ns;
  if (every == 0 || now < last_check + every) {
    watch_media();
    return false;
  }
  last_check = now;
  switch (config_.peer_check_ns ? peers(now, last_work) : Medium::PeerState::kUnknown) {
    case Medium::PeerState::kRunning:
      watch_media();
      return false;
    case Medium::PeerState::kStalled:
      ++counters_.stalled_peers;
      return true;
    case Medium::PeerState::kUnknown:
      break;
  }
  // Two processes sharing one core would stall each other for a scheduler tick if we only
  // paused (anchors: ~8 ms round trips when spinning on a shared vCPU): yield now and then.
  if (config_.yield_ns && now >= std::max(last_work, last_yield_) + config_.yield_ns) {
    last_yield_ = now;
    ++counters_.yields;
    sched_yield();
  } else {
    cpu_relax();
  }
  return false;
}

void Driver::poll_events(int timeout_ms) {
  epoll_event evs[16];
  const int n = epoll_wait(epfd_, evs, 16, timeout_ms);
  // On the driver thread, block() calls this without the lock: take it to handle what fired.
  std::unique_lock<std::mutex> g(mu_, std::defer_lock);
  if (timeout_ms != 0 && in_thread_) g.lock();
  for (int k = 0; k < n; ++k) {
    const std::uint64_t tag = evs[k].data.u64;
    if (tag == kTagKick) {
      std::uint64_t v;
      [[maybe_unused]] auto r = read(kickfd_, &v, sizeof v);
      ++counters_.wakeups_kick;
    } else if (tag == kTagTimer) {
      std::uint64_t v;
      [[maybe_unused]] auto r = read(timerfd_, &v, sizeof v);
      ++counters_.wakeups_timer;
    } else if (tag & kTagEventBit) {
      const std::size_t i = tag & 0xFFFFFFFFu;
      if (i < att_.size()) {
        ++counters_.events;
        att_[i].medium->on_event(monotonic_ns());
      }
    } else {
      ++counters_.wakeups_rx;  // the medium drains its doorbell in finish_sleep
    }
  }
}

void Driver::block(TimeNs until) {
  // Announce the sleep first, then look once more, so a kick or a packet that lands in between
  // is never lost (the waker checks the flag after publishing its work).
  sleeping_.store(1, std::memory_order_seq_cst);
  std::unique_lock<std::mutex> g(mu_, std::defer_lock);
  if (in_thread_) g.lock();
  std::size_t prepared = 0;
  bool sleep = true;
  for (; prepared < att_.size(); ++prepared) {
    if (!att_[prepared].medium->prepare_sleep()) {
      sleep = false;
      break;
    }
  }
  TimeNs deadline = until;
  for (const auto& a : att_) deadline = std::min(deadline, a.dev->next_deadline());
  const TimeNs now = monotonic_ns();
  if (sleep && deadline <= now) sleep = false;
  if (sleep) {
    ++counters_.sleeps;
    int timeout_ms = -1;
    if (deadline != kNoDeadline) {
      itimerspec its{};
      its.it_value.tv_sec = static_cast<time_t>(deadline / 1'000'000'000u);
      its.it_value.tv_nsec = static_cast<long>(deadline % 1'000'000'000u);
      timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);
    }
    // A kick between the flag and here is pending on kickfd_, so epoll returns at once.
    if (g.owns_lock()) g.unlock();
    account(now);
    poll_events(timeout_ms);
    const TimeNs woke = monotonic_ns();
    counters_.sleep_ns += woke - now;
    clock_mark_ = woke;
    if (in_thread_) g.lock();
    if (deadline != kNoDeadline) {
      itimerspec off{};
      timerfd_settime(timerfd_, 0, &off, nullptr);
    }
  }
  for (std::size_t i = 0; i < prepared; ++i) att_[i].medium->finish_sleep();
  sleeping_.store(0, std::memory_order_relaxed);
}

void Driver::kick() {
  if (sleeping_.load(std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = write(kickfd_, &one, sizeof one);
  }
}

void Driver::start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { thread_main(); });
}

void Driver::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = write(kickfd_, &one, sizeof one);
  thread_.join();
}

void Driver::thread_main() {
  in_thread_ = true;
  TimeNs last_work = monotonic_ns();
  TimeNs idle = last_work;  // when the peers were last looked at (or work was done)
  while (!stop_.load(std::memory_order_relaxed)) {
    bool worked;
    {
      std::lock_guard<std::mutex> g(mu_);
      worked = progress();
    }
    const TimeNs now = last_now_;
    if (worked) {
      last_work = idle = now;
      continue;
    }
    if (now < last_work + spin_limit_ns() && !idle_pause(now, last_work, idle)) continue;
    // Block without the lock so application threads can post; the sleeping_ flag set inside
    // block() before its last look makes their kick() wake us.
    {
      std::unique_lock<std::mutex> g(mu_);
      sleeping_.store(1, std::memory_order_seq_cst);
      const bool more = progress();
      g.unlock();
      if (more || stop_.load()) {
        sleeping_.store(0);
        last_now_ = last_work = idle = monotonic_ns();
        continue;
      }
    }
    block(kNoDeadline);
    last_now_ = last_work = idle = monotonic_ns();
  }
  in_thread_ = false;
}

}  // namespace weft::io
