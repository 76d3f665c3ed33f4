// io/driver.hpp — the real-time driver: runs sans-IO Devices against the monotonic clock.
//
// One Driver drives any number of (Device, Medium) attachments from one thread: each pass moves a
// burst in from every medium, fires due deadlines (Device::on_deadline) and moves a burst out.
// When a pass finds nothing to do the Driver spins a little (spin_ns, pausing) while its peers run
// on other CPUs, blocks at once when they do not (DriverConfig::peer_stall_ns), and yields now
// and then where a medium cannot tell (so a peer on the same core is never starved). It blocks in
// epoll on the media's doorbells, a timerfd armed for the earliest Device deadline, the media's
// event fds (peer death) and its own kick eventfd. An idle process therefore costs almost no CPU.
//
// Threading model (see src/io/README.md):
// - Inline: the thread that owns the Driver calls progress() / run_until() itself; no lock needed.
//   This is what latency-sensitive code (weft perf) does: no thread hop at all.
// - Threaded: start() runs the loop on a driver thread, which then owns every attached Device.
//   Any other thread that touches a Device or one of its objects (post_send, post_recv, CQ poll,
//   modify, create/destroy) does so while holding lock(), and calls kick() after posting work so a
//   sleeping driver thread wakes up. The driver thread holds the same lock while it runs a pass.
// attach/detach are called while the driver thread is stopped or under lock().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <weft/device.hpp>

#include "src/io/clock.hpp"
#include "src/io/medium.hpp"

namespace weft::io {

struct DriverConfig {
  TimeNs spin_ns = 50'000;  // busy-poll this long after the last work before blocking
  // ... or this long while a medium is back-pressured (Medium::tx_blocked): the peer is
  // draining the wire and will make room soon; a sleeping sender costs the receiver a doorbell
  // (an eventfd write, ~5-30 us here with the wake-up) per refill.
  TimeNs blocked_spin_ns = 1'000'000;
  // While spinning, the Driver asks its media about their peers (Medium::peer_state) once per
  // peer_check_ns of idling. A peer running on another CPU is polled for without yielding; a
  // peer stalled (not seen running for peer_stall_ns since this Driver's last work, or last seen
  // on this CPU) makes the Driver block at once rather than spin on. Why: under load (8 agents
  // on 2 vCPUs) a sched_yield() hands the CPU to the other runnable tasks for their whole slice
  // (EEVDF pushes the yielder's deadline back), milliseconds during which the peer, still
  // running, has nobody to talk to; and spinning for a preempted peer only burns this process's
  // share. A blocked process is woken by the peer's doorbell when it sends, and the scheduler
  // runs a woken task soon. peer_stall_ns is above a normal pass (a 2 MiB burst's copy takes
  // ~100 us at most here, so a busy peer may look stalled for a while: then it rings us).
  TimeNs peer_check_ns = 2'000;
  TimeNs peer_stall_ns = 20'000;
  // With media that cannot tell (kUnknown): sched_yield() once per yield_ns of idling (0:
  // never), so a peer sharing this core gets it back within yield_ns. A yield costs 0.5-3 us
  // here on a quiet machine (it runs whoever else waits), milliseconds under load.
  TimeNs yield_ns = 4'000;
  std::size_t burst_max = 512;       // packets per rx/tx burst per attachment
  TimeNs event_poll_ns = 1'000'000;  // how often a busy Driver checks event fds (peer death)
};

struct DriverCounters {
  std::uint64_t passes = 0, sleeps = 0, wakeups_kick = 0, wakeups_timer = 0, wakeups_rx = 0,
                events = 0;
  std::uint64_t yields = 0;         // sched_yield() calls (peers kUnknown)
  std::uint64_t stalled_peers = 0;  // spins cut short because every peer was stalled
  // Deadline comparisons pass_out made after its tx bursts for a pass that took packets without
  // reading the clock (pass_in's deferred comparison).
  std::uint64_t late_deadline_checks = 0;
  // Where the wall time went, from the clock readings the passes take anyway (pass_in): the
  // interval up to each reading goes to busy_ns when the pass before it worked, else to
  // idle_blocked_ns when a medium was back-pressured (Medium::tx_blocked: the sender waits for
  // the receiver), else to idle_ns; sleep_ns is the time inside block()'s epoll_wait. Time off
  // the CPU (preempted) lands in whichever interval it fell in.
  std::uint64_t busy_ns = 0, idle_ns = 0, idle_blocked_ns = 0, sleep_ns = 0;
};

class Driver {
 public:
  explicit Driver(const DriverConfig& config = {});
  ~Driver();  // stops the driver thread if running
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Both must outlive the attachment. A Device may have one medium per Driver.
  void attach(Device& dev, Medium& medium);
  void detach(Device& dev);

  // One pass over every attachment. Returns true when anything moved or fired.
  bool progress() {
    const bool in = pass_in();
    return pass_out() || in;
  }
  // The two halves of a pass: pass_in() reads the clock, moves bursts in and fires deadlines;
  // pass_out() moves bursts out (and now and then polls event fds).
  bool pass_in();
  bool pass_out();
  // Inline mode: passes until done() returns true or timeout_ns passes; done() runs in the middle
  // of every pass, after what came in and before what goes out, so work it posts (a reply) leaves
  // in the same burst as the ACKs for what came in, and nothing is left unsent when it returns;
  // spins then blocks like the driver thread. Returns done()'s last value. done() must consume
  // everything it is waiting on (drain the CQ): the Driver may block after it returns false, and
  // it wakes only for packets, deadlines and events, not for completions already queued.
  template <class Done>
  bool run_until(Done done, TimeNs timeout_ns = kNoDeadline) {
    const TimeNs start = monotonic_ns();
    const TimeNs end = timeout_ns == kNoDeadline ? kNoDeadline : start + timeout_ns;
    TimeNs last_work = start;
    TimeNs idle = start;  // when the peers were last looked at (or work was done)
    for (;;) {
      bool worked = pass_in();
      const bool finished = done();
      if (pass_out()) worked = true;
      if (finished) return true;
      const TimeNs now = last_now_;
      if (now >= end) return false;
      if (worked) {
        last_work = idle = now;
        continue;
      }
      // now may be a few passes stale (progress()), so it can lag last_work.
      if (now < last_work + spin_limit_ns() && !idle_pause(now, last_work, idle)) continue;
      // done() may have posted work: one more pass moves it before we sleep.
      if (progress()) {
        last_work = last_now_;
        continue;
      }
      block(end);
      last_now_ = last_work = idle = monotonic_ns();
    }
  }

  // Threaded mode.
  void start();
  void stop();
  bool running() const { return thread_.joinable(); }
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }
  // Wakes the driver thread if it sleeps (cheap when it does not: one atomic load).
  void kick();

  const DriverCounters& counters() const { return counters_; }
  // The clock as the latest pass read it: afresh at the start of every pass after one that
  // worked, else every few idle passes (pass_in), so up to a few microseconds old while idle.
  TimeNs last_now() const { return last_now_; }
  const DriverConfig& config() const { return config_; }

 private:
  struct Attachment {
    Device* dev;
    Medium* medium;
  };
  // How long to keep polling after the last work.
  TimeNs spin_limit_ns() const;
  // One idle pass's pause: watch_media(); every peer_check_ns (since `last_check`, then
  // updated) a look at the peers (DriverConfig::peer_check_ns), which may yield or say to block
  // now (returns true). `last_work`: when this Driver last did anything.
  bool idle_pause(TimeNs now, TimeNs last_work, TimeNs& last_check);
  void watch_media();  // pauses until a medium may have a packet (at most kWatchPausesMax)
  Medium::PeerState peers(TimeNs now, TimeNs last_work) const;
  // Sleeps until a doorbell, the earliest deadline, an event or `until`, whichever is first.
  void block(TimeNs until);
  void poll_events(int timeout_ms);
  void thread_main();

  DriverConfig config_;
  std::vector<Attachment> att_;
  int epfd_ = -1, kickfd_ = -1, timerfd_ = -1;
  // Charges [clock_mark_, now) to busy/idle (DriverCounters::busy_ns) and moves the mark.
  void account(TimeNs now);
  // Fires every Device whose deadline is due by `now`; true when any was.
  bool fire_deadlines(TimeNs now);
  TimeNs last_now_ = 0, last_event_poll_ = 0;
  TimeNs clock_mark_ = 0;  // the clock reading the time accounting has reached
  TimeNs last_yield_ = 0;
  bool last_worked_ = true;
  bool rx_seen_ = false;  // watch_media returned on a medium's rx_ready (pass_in skips the clock)
  bool clock_due_ = false, clock_waited_ = false;  // pass_in's idle clock reading
  // pass_in took packets without a fresh clock: pass_out compares the Devices' deadlines after
  // its tx bursts (off the path from a request to its reply).
  bool deadlines_due_ = false;
  std::mutex mu_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool in_thread_ = false;  // set on the driver thread while it runs thread_main
  std::atomic<std::uint32_t> sleeping_{0};
  DriverCounters counters_{};
};

}  // namespace weft::io
