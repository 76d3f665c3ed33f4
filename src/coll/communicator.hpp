// coll/communicator.hpp — one rank of a communicator: runs collectives as a sans-IO state
// machine over a Transport. start() compiles the call into a Plan; progress(now) polls the
// transport, posts what credits and dependencies allow, applies arrived chunks, returns
// credits, and never blocks. One collective runs at a time; chunks of the next one that a
// faster peer already sent wait in their inbox slots (holding their credits) until it starts.
//
// Flow control (README.md): per (peer, lane), the sender holds `slots` credits at start and
// spends one per chunk written into the receiver's inbox slot (cyclic); the receiver returns
// credits with a grant once it has applied (reduced or copied) the chunk out of the slot.
// Thread-safety: single owner; the Transport is used only from progress() and start().
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <weft/types.hpp>

#include "src/coll/plan.hpp"
#include "src/coll/transport.hpp"

namespace weft::coll {

enum class CollState : std::uint8_t { kIdle, kRunning, kDone, kFailed };
std::string_view to_string(CollState s);

struct CommStats {
  std::uint64_t chunks_sent = 0, chunks_applied = 0, grants_sent = 0, grants_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t credit_stalls = 0;  // a ready send found no credit
  std::uint64_t reduce_bytes = 0;   // bytes run through a reduction kernel
};

class Communicator {
 public:
  Communicator(Transport& transport, const Topology& topo);

  // Starts a collective; kOk or the reason it cannot run (nothing started then).
  CollErrc start(const CollArgs& args);
  // Advances the running collective. Returns its state; kDone/kFailed are reported once, after
  // which the communicator is idle again.
  CollState progress(TimeNs now);
  CollState state() const { return state_; }
  // When progress() must next be called even if nothing arrives (the collective's timeout), or
  // kNoDeadline.
  TimeNs next_deadline() const;
  // Why the last collective failed: kTransport (a completion failed) or kTimeout.
  CollErrc failure() const { return failure_; }
  // After kFailed: the peer whose connection failed.
  int failed_peer() const { return failed_peer_; }
  Algo algo() const { return plan_.algo; }
  // The channels and chunk size the last collective used (auto may choose them).
  int channels() const { return plan_.channels; }
  std::size_t chunk_bytes() const { return plan_.chunk_bytes; }
  // True if the last progress() call posted or applied anything.
  bool did_work() const { return did_work_; }
  const CommStats& stats() const { return stats_; }
  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }

 private:
  struct Arrived {
    std::uint32_t slot, bytes;
  };
  struct Conn {  // one (peer, lane)
    std::uint32_t credits = 0;
    std::uint32_t next_send_slot = 0;
    std::uint32_t next_recv_slot = 0;
    std::uint32_t grant_pending = 0;
    std::deque<Arrived> arrived;
    std::deque<std::uint32_t> sends, recvs;  // op indices, program order
  };
  struct OpState {
    std::uint32_t deps_left = 0;
    std::vector<std::uint32_t> dependents;
    std::uint32_t frags = 0, frags_posted = 0, frags_done = 0;
    bool done = false;
  };

  void compute_deps();
  void complete(std::uint32_t op);
  void run_local(std::uint32_t op);
  std::uint8_t* ptr(const Ref& r) const;
  bool pump_send(Conn& c, int peer, int lane);
  bool pump_recv(Conn& c, int peer, int lane);
  void finish();
  void fail(CollErrc why, int peer);
  int waiting_for() const;
  Conn& conn(int peer, int lane) {
    return conns_[static_cast<std::size_t>(peer * t_.lanes() + lane)];
  }

  Transport& t_;
  Topology topo_;
  CollArgs args_{};
  Plan plan_{};
  std::vector<OpState> ops_;
  std::vector<Conn> conns_;
  std::unique_ptr<std::uint8_t[]> tmp_;  // the plan's scratch
  std::size_t tmp_bytes_ = 0;
  std::vector<std::uint32_t> ready_local_;
  std::vector<std::uint32_t> active_;    // conns_ indices the running collective uses
  std::vector<std::uint32_t> granting_;  // conns_ indices with grant_pending > 0
  std::vector<TransportEvent> evs_;      // poll() buffer
  std::size_t ops_done_ = 0;
  CollState state_ = CollState::kIdle;
  int failed_peer_ = -1;
  CollErrc failure_ = CollErrc::kOk;
  TimeNs started_ns_ = kNoDeadline;  // the first progress() call of the running collective
  bool did_work_ = false;
  CommStats stats_{};
};

}  // namespace weft::coll
