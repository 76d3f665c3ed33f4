// coll/communicator.cpp — the per-rank collective state machine (see communicator.hpp).
#include "src/coll/communicator.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "src/base/assert.hpp"
#include "src/coll/reduce.hpp"

namespace weft::coll {

std::string_view to_string(CollState s) {
  switch (s) {
    case CollState::kIdle:
      return "idle";
    case CollState::kRunning:
      return "running";
    case CollState::kDone:
      return "done";
    case CollState::kFailed:
      return "failed";
  }
  return "?";
}

Communicator::Communicator(Transport& transport, const Topology& topo)
    : t_(transport), topo_(topo) {
  conns_.resize(static_cast<std::size_t>(t_.size() * t_.lanes()));
  for (auto& c : conns_) c.credits = t_.slots();
}

std::uint8_t* Communicator::ptr(const Ref& r) const {
  switch (r.buf) {
    case Buf::kIn:
      return static_cast<std::uint8_t*>(const_cast<void*>(args_.send)) + r.off;
    case Buf::kOut:
      return static_cast<std::uint8_t*>(args_.recv) + r.off;
    case Buf::kTmp:
      return tmp_.get() + r.off;
  }
  return nullptr;
}

CollErrc Communicator::start(const CollArgs& args) {
  if (state_ == CollState::kRunning) return CollErrc::kInvalidArgument;
  const std::size_t es = elem_bytes(args.dtype);
  if (args.count > 0 && args.count > SIZE_MAX / es / static_cast<std::size_t>(t_.size())) {
    return CollErrc::kInvalidArgument;
  }
  auto plan = build_plan(args, t_.rank(), t_.size(), t_.lanes(), topo_);
  if (!plan) return plan.error();
  args_ = args;
  plan_ = std::move(plan.value());
  if (plan_.tmp_bytes != tmp_bytes_) {
    // Uninitialised when nothing reads it (timing only): untouched pages cost nothing.
    tmp_.reset(plan_.tmp_bytes == 0 ? nullptr : new std::uint8_t[plan_.tmp_bytes]);
    tmp_bytes_ = plan_.tmp_bytes;
  }
  if (!args.skip_arithmetic && tmp_bytes_ > 0) std::memset(tmp_.get(), 0, tmp_bytes_);
  // Every buffer that a send reads from must be registered; register the extent of each.
  std::array<std::size_t, 3> extent{};
  for (const PlanOp& op : plan_.ops) {
    if (op.kind != PlanOp::Kind::kSend) continue;
    auto& e = extent[static_cast<std::size_t>(op.a.buf)];
    e = std::max(e, op.a.off + op.bytes);
  }
  if (args.send == args.recv) {  // one registration covers both
    extent[1] = std::max(extent[0], extent[1]);
    extent[0] = 0;
  }
  for (std::size_t b = 0; b < 3; ++b) {
    if (extent[b] == 0) continue;
    if ((b != static_cast<std::size_t>(Buf::kTmp) && ptr(Ref{static_cast<Buf>(b), 0}) == nullptr) ||
        t_.register_memory(ptr(Ref{static_cast<Buf>(b), 0}), extent[b]) != TransportErrc::kOk) {
      for (std::size_t u = 0; u < b; ++u) {
        if (extent[u] > 0) t_.unregister_memory(ptr(Ref{static_cast<Buf>(u), 0}));
      }
      return CollErrc::kRegistration;
    }
  }
  ops_.assign(plan_.ops.size(), OpState{});
  ops_done_ = 0;
  failed_peer_ = -1;
  failure_ = CollErrc::kOk;
  started_ns_ = kNoDeadline;
  compute_deps();
  active_.clear();
  for (std::uint32_t i = 0; i < plan_.ops.size(); ++i) {
    const PlanOp& op = plan_.ops[i];
    if (op.kind == PlanOp::Kind::kSend || op.kind == PlanOp::Kind::kRecv) {
      ops_[i].frags =
          static_cast<std::uint32_t>((op.bytes + t_.slot_bytes() - 1) / t_.slot_bytes());
      Conn& c = conn(op.peer, op.lane);
      (op.kind == PlanOp::Kind::kSend ? c.sends : c.recvs).push_back(i);
      active_.push_back(static_cast<std::uint32_t>(op.peer * t_.lanes() + op.lane));
    } else if (ops_[i].deps_left == 0) {
      ready_local_.push_back(i);
    }
  }
  // The connections this collective uses, in (peer, lane) order: progress() visits only these.
  std::sort(active_.begin(), active_.end());
  active_.erase(std::unique(active_.begin(), active_.end()), active_.end());
  state_ = CollState::kRunning;
  return CollErrc::kOk;
}

// Dependencies from byte ranges, in program order: an op waits for every earlier op that
// touches an overlapping range of the same memory where either of the two writes. An interval
// map per memory space keeps, for each byte range, its last writer and the readers since, so a
// write depends on those and a read on the last writer only (the rest follows transitively):
// O(ops x segments touched) instead of comparing every pair.
void Communicator::compute_deps() {
  struct Segment {
    std::uintptr_t end;
    std::uint32_t writer;  // kNone: no write yet
    std::vector<std::uint32_t> readers;
  };
  constexpr std::uint32_t kNone = UINT32_MAX;
  // Space 0: kIn and kOut by address (they may alias: in place); space 1: kTmp by offset.
  std::map<std::uintptr_t, Segment> spaces[2];
  auto where = [&](Buf b, std::size_t off) -> std::pair<int, std::uintptr_t> {
    if (b == Buf::kTmp) return {1, off};
    return {0, reinterpret_cast<std::uintptr_t>(ptr(Ref{b, 0})) + off};
  };
  std::vector<std::uint32_t> stamp(plan_.ops.size(), kNone);  // dedupes deps of op i
  auto depend = [&](std::uint32_t i, std::uint32_t j) {
    if (j == kNone || j == i || stamp[j] == i) return;
    stamp[j] = i;
    ++ops_[i].deps_left;
    ops_[j].dependents.push_back(i);
  };
  // Splits the map so that lo and hi are segment boundaries; gaps become fresh segments.
  auto carve = [&](std::map<std::uintptr_t, Segment>& m, std::uintptr_t lo, std::uintptr_t hi) {
    auto split_at = [&](std::uintptr_t x) {
      auto it = m.upper_bound(x);
      if (it == m.begin()) return;
      --it;
      if (it->first < x && x < it->second.end) {
        Segment tail = it->second;
        it->second.end = x;
        m.emplace(x, std::move(tail));
      }
    };
    split_at(lo);
    split_at(hi);
    std::uintptr_t at = lo;
    auto it = m.lower_bound(lo);
    while (at < hi) {
      if (it == m.end() || it->first > at) {
        const std::uintptr_t end = it == m.end() ? hi : std::min(hi, it->first);
        it = m.emplace_hint(it, at, Segment{end, kNone, {}});
      }
      at = it->second.end;
      ++it;
    }
  };
  auto access = [&](std::uint32_t i, Buf b, std::size_t off, std::size_t bytes, bool write) {
    const auto [space, lo] = where(b, off);
    const std::uintptr_t hi = lo + bytes;
    auto& m = spaces[space];
    carve(m, lo, hi);
    for (auto it = m.find(lo); it != m.end() && it->first < hi; ++it) {
      Segment& seg = it->second;
      depend(i, seg.writer);
      if (write) {
        for (std::uint32_t r : seg.readers) depend(i, r);
        seg.readers.clear();
        seg.writer = i;
      } else {
        seg.readers.push_back(i);
      }
    }
  };
  for (std::uint32_t i = 0; i < plan_.ops.size(); ++i) {
    const PlanOp& op = plan_.ops[i];
    if (op.bytes == 0) continue;
    switch (op.kind) {
      case PlanOp::Kind::kSend:
        access(i, op.a.buf, op.a.off, op.bytes, false);
        break;
      case PlanOp::Kind::kRecv:
      case PlanOp::Kind::kAvg:
        access(i, op.a.buf, op.a.off, op.bytes, true);
        break;
      case PlanOp::Kind::kCopy:
        access(i, op.a.buf, op.a.off, op.bytes, false);
        access(i, op.b.buf, op.b.off, op.bytes, true);
        break;
    }
  }
}

void Communicator::complete(std::uint32_t i) {
  WEFT_ASSERT(!ops_[i].done);
  ops_[i].done = true;
  ++ops_done_;
  for (std::uint32_t d : ops_[i].dependents) {
    WEFT_ASSERT(ops_[d].deps_left > 0);
    if (--ops_[d].deps_left == 0) {
      const auto k = plan_.ops[d].kind;
      if (k == PlanOp::Kind::kCopy || k == PlanOp::Kind::kAvg) ready_local_.push_back(d);
    }
  }
}

void Communicator::run_local(std::uint32_t i) {
  const PlanOp& op = plan_.ops[i];
  if (op.kind == PlanOp::Kind::kCopy) {
    std::uint8_t* src = ptr(op.a);
    std::uint8_t* dst = ptr(op.b);
    if (src != dst && !args_.skip_arithmetic) std::memmove(dst, src, op.bytes);
  } else if (!args_.skip_arithmetic) {
    finish_avg(args_.dtype, ptr(op.a), op.bytes / elem_bytes(args_.dtype), t_.size());
  }
  complete(i);
}

bool Communicator::pump_send(Conn& c, int peer, int lane) {
  bool work = false;
  while (!c.sends.empty()) {
    const std::uint32_t i = c.sends.front();
    OpState& s = ops_[i];
    if (s.deps_left > 0) break;
    const PlanOp& op = plan_.ops[i];
    while (s.frags_posted < s.frags) {
      if (c.credits == 0) {
        ++stats_.credit_stalls;
        return work;
      }
      const std::size_t off = std::size_t{s.frags_posted} * t_.slot_bytes();
      const auto len =
          static_cast<std::uint32_t>(std::min<std::size_t>(t_.slot_bytes(), op.bytes - off));
      const TransportErrc e = t_.post_write(peer, lane, ptr(op.a) + off, len, c.next_send_slot, i);
      if (e == TransportErrc::kBusy) return work;
      if (e != TransportErrc::kOk) {
        fail(CollErrc::kTransport, peer);
        return work;
      }
      --c.credits;
      c.next_send_slot = (c.next_send_slot + 1) % t_.slots();
      ++s.frags_posted;
      ++stats_.chunks_sent;
      stats_.bytes_sent += len;
      work = true;
    }
    c.sends.pop_front();  // fully posted; completes on its last kWriteDone
  }
  return work;
}

bool Communicator::pump_recv(Conn& c, int peer, int lane) {
  bool work = false;
  while (!c.recvs.empty() && !c.arrived.empty()) {
    const std::uint32_t i = c.recvs.front();
    OpState& s = ops_[i];
    if (s.deps_left > 0) break;
    const PlanOp& op = plan_.ops[i];
    while (s.frags_done < s.frags && !c.arrived.empty()) {
      const Arrived a = c.arrived.front();
      const std::size_t off = std::size_t{s.frags_done} * t_.slot_bytes();
      const std::size_t len = std::min<std::size_t>(t_.slot_bytes(), op.bytes - off);
      WEFT_ASSERT_MSG(a.slot == c.next_recv_slot && a.bytes == len,
                      "chunk stream out of step with the plan (mismatched collectives?)");
      c.arrived.pop_front();
      c.next_recv_slot = (c.next_recv_slot + 1) % t_.slots();
      const std::uint8_t* src = t_.inbox(peer, lane, a.slot);
      if (op.reduce) {
        if (!args_.skip_arithmetic)
          reduce(args_.dtype, args_.op, ptr(op.a) + off, src, len / elem_bytes(args_.dtype));
        stats_.reduce_bytes += len;
      } else if (!args_.skip_arithmetic) {
        std::memcpy(ptr(op.a) + off, src, len);
      }
      ++s.frags_done;
      if (c.grant_pending++ == 0)
        granting_.push_back(static_cast<std::uint32_t>(peer * t_.lanes() + lane));
      ++stats_.chunks_applied;
      work = true;
    }
    if (s.frags_done < s.frags) break;
    c.recvs.pop_front();
    complete(i);
  }
  return work;
}

void Communicator::fail(CollErrc why, int peer) {
  state_ = CollState::kFailed;
  failure_ = why;
  failed_peer_ = peer;
}

// The peer of the earliest unfinished transfer: the one this rank is waiting for.
int Communicator::waiting_for() const {
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    if (!ops_[i].done && plan_.ops[i].peer >= 0) return plan_.ops[i].peer;
  }
  return -1;
}

TimeNs Communicator::next_deadline() const {
  if (state_ != CollState::kRunning || args_.timeout_ns == 0 || started_ns_ == kNoDeadline) {
    return kNoDeadline;
  }
  return started_ns_ + args_.timeout_ns;
}

CollState Communicator::progress(TimeNs now) {
  did_work_ = false;
  if (state_ == CollState::kRunning && started_ns_ == kNoDeadline) started_ns_ = now;
  // Arrivals and grants are recorded even when idle: a faster peer may be a collective ahead.
  // A member, not a local: 64 value-initialised events per call were a measurable memset.
  if (evs_.empty()) evs_.resize(64);
  std::size_t got;
  while ((got = t_.poll(evs_)) > 0) {
    for (std::size_t k = 0; k < got; ++k) {
      const TransportEvent& ev = evs_[k];
      Conn& c = conn(ev.peer, ev.lane);
      switch (ev.kind) {
        case TransportEvent::Kind::kWriteDone: {
          // After a failure, late completions of the failed collective are stale.
          if (state_ != CollState::kRunning) break;
          WEFT_ASSERT(ev.wr_id < ops_.size());
          OpState& s = ops_[ev.wr_id];
          if (++s.frags_done == s.frags) complete(static_cast<std::uint32_t>(ev.wr_id));
          break;
        }
        case TransportEvent::Kind::kData:
          c.arrived.push_back({ev.slot, ev.bytes});
          break;
        case TransportEvent::Kind::kGrant:
          c.credits += ev.credits;
          WEFT_ASSERT(c.credits <= t_.slots());
          ++stats_.grants_received;
          break;
        case TransportEvent::Kind::kError:
          if (state_ == CollState::kRunning || state_ == CollState::kIdle) {
            fail(CollErrc::kTransport, ev.peer);
          }
          break;
      }
    }
    did_work_ = true;
  }
  if (state_ == CollState::kRunning) {
    bool changed = true;
    while (changed && state_ == CollState::kRunning) {
      changed = false;
      while (!ready_local_.empty()) {
        const std::uint32_t i = ready_local_.back();
        ready_local_.pop_back();
        run_local(i);
        changed = true;
      }
      const int lanes = t_.lanes();
      for (std::uint32_t ci : active_) {
        const int p = static_cast<int>(ci) / lanes, l = static_cast<int>(ci) % lanes;
        Conn& c = conns_[ci];
        if (!c.recvs.empty()) changed |= pump_recv(c, p, l);
        if (!c.sends.empty()) changed |= pump_send(c, p, l);
        if (state_ != CollState::kRunning) break;
      }
      did_work_ |= changed;
    }
  }
  // Return credits for every slot applied (one grant per connection per call).
  if (!granting_.empty()) {
    std::sort(granting_.begin(), granting_.end());
    std::size_t keep = 0;
    const int lanes = t_.lanes();
    for (std::uint32_t ci : granting_) {
      Conn& c = conns_[ci];
      const int p = static_cast<int>(ci) / lanes, l = static_cast<int>(ci) % lanes;
      const TransportErrc e = t_.post_grant(p, l, c.grant_pending);
      if (e == TransportErrc::kOk) {
        c.grant_pending = 0;
        ++stats_.grants_sent;
        did_work_ = true;
      } else {
        granting_[keep++] = ci;  // busy (retried next call) or failed
        if (e != TransportErrc::kBusy) fail(CollErrc::kTransport, p);
      }
    }
    granting_.resize(keep);
  }
  if (state_ == CollState::kRunning && ops_done_ != ops_.size() && args_.timeout_ns != 0 &&
      now >= started_ns_ + args_.timeout_ns) {
    fail(CollErrc::kTimeout, waiting_for());
  }
  if (state_ == CollState::kRunning && ops_done_ == ops_.size()) {
    finish();
    state_ = CollState::kIdle;
    return CollState::kDone;
  }
  if (state_ == CollState::kFailed) {
    finish();
    state_ = CollState::kIdle;
    return CollState::kFailed;
  }
  return state_;
}

void Communicator::finish() {
  t_.unregister_memory(ptr(Ref{Buf::kIn, 0}));
  if (args_.recv != args_.send) t_.unregister_memory(ptr(Ref{Buf::kOut, 0}));
  if (tmp_bytes_ > 0) t_.unregister_memory(tmp_.get());
  for (auto& c : conns_) {
    c.sends.clear();
    c.recvs.clear();
  }
  ready_local_.clear();
}

}  // namespace weft::coll
