// coll/live/live_mesh.hpp — live mode: the ranks of a collective job are processes on one host,
// with src/coll running over the verbs API between them on one of two media (LiveMedium):
//
// - Direct: a full mesh of direct-mode links (src/io: one shared-memory medium and one
//   weft::Device per pair of ranks). Nothing sits between two ranks, so this measures the library
//   and the transport.
// - Fabric: every rank attaches ONE Device to its own HCA of an emulated fabric (emu/fabricd, the
//   daemon `weft run` or `weft fabric up` starts; src/io/fabric_attach) and reaches every peer by
//   RC QPs through the emulated switches, addressed by the LIDs the fabric's subnet manager gave
//   (fabric_mesh.hpp). Faults injected on the fabric's links hit the collective's packets.
//
// Direct rendezvous (no daemon): rank r binds the abstract socket "weft/coll/<job>/<r>" and
// connects to every lower rank's, then accepts the higher ranks (connects only go downwards, so the
// mesh forms in rank order without a cycle). The connector's first out-of-band message is its rank.
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/coll/communicator.hpp"
#include "src/coll/transport.hpp"
#include "src/coll/verbs_transport.hpp"
#include "src/io/direct_node.hpp"
#include "src/io/driver.hpp"
#include "src/io/fabric_attach.hpp"

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

enum class LiveMedium : std::uint8_t { kDirect, kFabric };
std::string_view to_string(LiveMedium m);

struct LiveOptions {
  int rank = 0;
  int size = 1;
  std::string job = "coll";  // rendezvous names weft/coll/<job>/...
  LiveMedium medium = LiveMedium::kDirect;
  std::string fabric;               // kFabric: the fabric's name (WEFT_FABRIC when empty)
  std::uint32_t hca = io::kAnyHca;  // kFabric: the HCA to attach (WEFT_HCA when kAnyHca)
  int lanes = 2;
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 128 * 1024;
  bool zero_copy = true;                     // WEFT_SHM_ZERO_COPY=0 forces false
  TimeNs setup_timeout_ns = 30'000'000'000;  // rendezvous, handshakes and the exchange
  io::DriverConfig driver{};                 // the one Driver of every link
  // RC ACK timeout exponent (4.096 us x 2^t per try, IBA 9.7.6.1.3; retry_cnt 7): 268 ms. On
  // direct links nothing is lost and ranks outnumber cores here. Through a fabric daemon a
  // packet can wait in its sender's ring, the daemon's queues and the emulated switches behind
  // every rank's window (8 ranks x 14 QPs x slots x chunk) for longer than 67 ms (14): with 14,
  // 8-rank 16 MiB all-reduces failed with RETRY_EXC at load 18, with 16 none did. A lost packet
  // is mostly recovered by the next one's sequence NAK; only a lost tail waits this long.
  std::uint8_t rc_timeout = 16;
  // kFabric: how the RC QPs recover from a lost or out-of-order packet (QpAttr::recovery, Weft's
  // extension; both ends are Weft). Selective repeat: through the daemon packets also arrive out
  // of order without any drop (2-4 % out of sequence at 2 ranks, not root-caused), and with 1 %
  // dropped on a link go-back-N ended with RETRY_EXC in ~1 of 20 4-rank runs (the receiver
  // counting every retransmission as out of sequence), selective repeat in none of 24. Both
  // since root-caused and fixed: the fabric's receive timing let a zero-length grant overtake the
  // WRITE packets ahead of it (emu/fabric HcaNode), and a rank in the final barrier stopped
  // answering a peer whose last ACK was lost (FabricMesh::barrier); go-back-N then passed 120 of
  // 120 such runs. Direct links keep the IBA's go-back-N: they never lose or reorder a packet.
  RecoveryMode recovery = RecoveryMode::kSelectiveRepeat;
};

// One rank's end of a live job on either medium. Subclasses (the direct mesh in live_mesh.cpp,
// FabricMesh) build the transport and own the Devices; run() and the bench are medium-blind.
class LiveMesh {
 public:
  virtual ~LiveMesh() = default;
  LiveMesh(const LiveMesh&) = delete;
  LiveMesh& operator=(const LiveMesh&) = delete;
  // Joins the job (every rank must call it with the same job, size, medium and transport shape).
  static Result<std::unique_ptr<LiveMesh>, std::string> create(const LiveOptions& o);

  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }
  LiveMedium medium() const { return opts_.medium; }
  // What carries the data, for the table's header ("direct shared memory (zero copy)", ...).
  virtual std::string describe() const = 0;
  Transport& transport() { return *transport_; }
  io::Driver& driver() { return *driver_; }
  bool zero_copy() const { return zero_copy_; }
  // The Devices' counters, summed (retransmissions, timeouts, RNR waits, drops).
  virtual DeviceCounters counters() const = 0;

  // Starts `a` on `comm` (built over transport()) and drives the links until it finishes or
  // limit_ns passes. Returns kDone, or kFailed with the reason in *error.
  CollState run(Communicator& comm, const CollArgs& a, TimeNs limit_ns, std::string* error);
  // A barrier on the out-of-band sockets (every rank with every peer); false on a lost peer.
  virtual bool barrier(TimeNs timeout_ns) = 0;

 protected:
  explicit LiveMesh(const LiveOptions& o) : opts_(o) {}
  // Why waiting any longer is pointless: a peer (or the fabric daemon) whose process exited, as
  // one sentence. `cheap`: asked on every pass of the Driver (memory loads only); otherwise
  // between slices of at most kLivenessSliceNs (may make system calls).
  virtual std::optional<std::string> lost(bool cheap) const = 0;

  LiveOptions opts_;
  Transport* transport_ = nullptr;  // set by the subclass
  io::Driver* driver_ = nullptr;    // set by the subclass
  bool zero_copy_ = false;
};

// The longest the Driver sleeps inside run() before the mesh asks lost(false): how late a rank
// that only waits to receive notices a dead peer on a medium without a cheap signal.
inline constexpr TimeNs kLivenessSliceNs = 100'000'000;

}  // namespace weft::coll::live
