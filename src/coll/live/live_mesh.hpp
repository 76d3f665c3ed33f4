// coll/live/live_mesh.hpp — live mode: the ranks of a collective job are processes on one host,
// joined in a full mesh of direct-mode links (src/io: one shared-memory medium and one
// weft::Device per pair of ranks), with src/coll running over the verbs API on top.
//
// Rendezvous (no daemon): rank r binds the abstract socket "weft/coll/<job>/<r>" and connects to
// every lower rank's, then accepts the higher ranks (connects only go downwards, so the mesh
// forms in rank order without a cycle). The connector's first out-of-band message is its rank.
// Per pair: a PD, a 2-rank VerbsTransport (its own CQ, inboxes and RC QPs, one per lane) on that
// pair's Device; QP numbers, PSNs, inbox addresses and rkeys cross on the link's out-of-band
// socket; each side says "ready" once its receives are posted. MeshTransport joins the per-peer
// transports into the one coll::Transport a Communicator needs; one io::Driver drives every link
// (inline mode: run() calls Communicator::progress inside the Driver's passes).
// Zero copy: the shared-memory medium lets the receiver pull payloads (process_vm_readv). A
// direct node names one ptracer (its peer); with several peers the mesh names any process
// (PR_SET_PTRACER_ANY) before it says ready, which only matters under Yama ptrace_scope 1.
// Thread-safety: single owner thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/coll/communicator.hpp"
#include "src/coll/transport.hpp"
#include "src/coll/verbs_transport.hpp"
#include "src/io/direct_node.hpp"
#include "src/io/driver.hpp"

namespace weft::coll::live {

// coll::Transport over one 2-rank VerbsTransport per peer (each on that peer's Device).
class MeshTransport final : public Transport {
 public:
  MeshTransport(int rank, int size, int lanes, std::uint32_t slots, std::uint32_t slot_bytes);
  // `t` was created with rank = local_index(peer), size 2.
  void set_peer(int peer, std::unique_ptr<VerbsTransport> t);
  VerbsTransport* peer_transport(int peer) const {
    return subs_[static_cast<std::size_t>(peer)].get();
  }
  // This rank's index in the 2-rank transport it shares with `peer` (the lower rank is 0).
  int local_index(int peer) const { return rank_ < peer ? 0 : 1; }
  void clear() { subs_.clear(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int lanes() const override { return lanes_; }
  std::uint32_t slots() const override { return slots_; }
  std::uint32_t slot_bytes() const override { return slot_bytes_; }
  TransportErrc register_memory(const void* addr, std::size_t bytes) override;
  void unregister_memory(const void* addr) override;
  TransportErrc post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                           std::uint32_t slot, std::uint64_t wr_id) override;
  TransportErrc post_grant(int peer, int lane, std::uint32_t credits) override;
  std::size_t poll(std::span<TransportEvent> out) override;
  const std::uint8_t* inbox(int peer, int lane, std::uint32_t slot) const override;

 private:
  int other(int peer) const { return 1 - local_index(peer); }
  int rank_, size_, lanes_;
  std::uint32_t slots_, slot_bytes_;
  std::vector<std::unique_ptr<VerbsTransport>> subs_;  // by peer (null for this rank)
  std::size_t next_poll_ = 0;                          // round robin over peers
};

struct LiveOptions {
  int rank = 0;
  int size = 1;
  std::string job = "coll";  // rendezvous names weft/coll/<job>/<rank>
  int lanes = 2;
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 128 * 1024;
  bool zero_copy = true;                     // WEFT_SHM_ZERO_COPY=0 forces false
  TimeNs setup_timeout_ns = 30'000'000'000;  // rendezvous, handshakes and the exchange
  io::DriverConfig driver{};                 // the one Driver of every link
  std::uint8_t rc_timeout = 16;              // 268 ms per try: ranks outnumber cores here
};

class LiveMesh {
 public:
  ~LiveMesh();
  // Joins the job's mesh (every rank must call it with the same job, size and transport shape).
  static Result<std::unique_ptr<LiveMesh>, std::string> create(const LiveOptions& o);

  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }
  Transport& transport() { return *transport_; }
  io::Driver& driver() { return *driver_; }
  bool zero_copy() const { return zero_copy_; }
  // The links' Device counters, summed (retransmissions, timeouts, RNR waits, drops).
  DeviceCounters counters() const;

  // Starts `a` on `comm` (built over transport()) and drives the links until it finishes or
  // limit_ns passes. Returns kDone, or kFailed with the reason in *error.
  CollState run(Communicator& comm, const CollArgs& a, TimeNs limit_ns, std::string* error);
  // A barrier on the out-of-band sockets (every rank with every peer); false on a lost peer.
  bool barrier(TimeNs timeout_ns);

 private:
  LiveMesh() = default;
  LiveOptions opts_;
  std::vector<std::unique_ptr<io::DirectNode>> nodes_;  // by peer
  std::unique_ptr<MeshTransport> transport_;
  std::unique_ptr<io::Driver> driver_;
  bool zero_copy_ = false;
};

}  // namespace weft::coll::live
