// io/fabric_attach.hpp — the client side of the fabric daemon (emu/fabricd, `weft fabric up`):
// a process attaches its Device to one HCA of a running emulated fabric over the shared-memory
// medium. Its packets enter the fabric at that HCA's port; packets leaving the fabric there come
// back. The LID is the one the fabric's subnet manager gave the HCA port.
//
// Rendezvous: the abstract Unix socket "weft/fabric/<name>" (SOCK_SEQPACKET). The client sends an
// AttachRequest (the HCA wanted, or any free one); the daemon answers with an AttachReply and,
// on success, the segment memfd and both doorbell eventfds (SCM_RIGHTS). The daemon is side A of
// the ShmMedium. The socket stays open: the daemon frees the HCA when it closes.
// Zero copy toward the daemon: the client names the daemon its ptracer (PR_SET_PTRACER, so Yama's
// ptrace_scope=1 allows it) and sends the address of a probe word; when the daemon can read it
// (process_vm_readv), the reply says kAttachZeroCopyTx and the client sends payloads of at least
// shm::kZeroCopyBytesMin by reference: the daemon pulls them straight from the client's buffer
// into the packet it puts on the fabric. Otherwise (denied, or WEFT_SHM_ZERO_COPY=0) they are
// copied through the ring, and the daemon says why once in its log. Toward the client: a payload
// the daemon did not pull (it forwards a zero-copy sender's record untouched when the fabric
// needs no payload bytes) arrives as a kByRefFrom record naming the sender, and the client pulls
// it from there (one copy, sender to receiver); everything else is copied through the ring.
// WEFT_SHM_ZERO_COPY=0 turns both off.
//
// Thread-safety: as DirectNode (driver.hpp's threading model).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <weft/device.hpp>

#include "src/io/direct_node.hpp"
#include "src/io/driver.hpp"
#include "src/io/shm/shm_medium.hpp"
#include "src/io/unix_socket.hpp"

namespace weft::io {

// ---- the attach protocol (shared with emu/fabricd) -----------------------------------------
inline constexpr std::uint32_t kAttachMagic = 0x57464154;  // "WFAT"
inline constexpr std::uint32_t kAttachVersion = 2;
inline constexpr std::uint32_t kAnyHca = UINT32_MAX;
inline constexpr std::uint32_t kAttachWantZeroCopy = 1;  // AttachRequest::flags
// AttachRequest::flags: the client takes shm::RecordKind::kByRefFrom records (payloads it pulls
// straight from the sending process; ShmMedium handles them).
inline constexpr std::uint32_t kAttachForwardedRx = 2;
inline constexpr std::uint32_t kAttachZeroCopyTx = 1;  // AttachReply::flags
inline constexpr std::uint64_t kAttachProbeValue = 0x57464154'50524F42ull;

struct AttachRequest {
  std::uint32_t magic = kAttachMagic;
  std::uint32_t version = kAttachVersion;
  std::uint32_t hca = kAnyHca;  // index among the fabric's HCAs (node order), or kAnyHca
  std::uint32_t flags = 0;
  std::uint64_t probe_addr = 0;  // a word holding kAttachProbeValue in the client
};

enum class AttachStatus : std::uint32_t { kOk = 0, kNoFreeHca, kNoSuchHca, kHcaBusy, kSystem };

struct AttachReply {
  std::uint32_t magic = kAttachMagic;
  std::uint32_t version = kAttachVersion;
  AttachStatus status = AttachStatus::kOk;
  std::uint32_t hca = 0;  // the HCA index taken
  std::uint16_t lid = 0;  // the SM's LID of its port 1
  std::uint16_t sm_lid = 0;
  std::uint32_t flags = 0;
  std::uint64_t ring_bytes = 0;
  std::uint64_t node_guid = 0;
};

// "weft/fabric/<name>" as an abstract socket address; the helpers of the handshake.
namespace fabric_proto {
int connect_abstract(const std::string& path);  // -1 on failure (errno kept)
int listen_abstract(const std::string& path);   // -1 on failure (errno kept)
using sock::recv_with_fds;                      // src/io/unix_socket.hpp
using sock::send_with_fds;
using sock::wait_readable;
}  // namespace fabric_proto

// The idle policy of a process attached to a fabric daemon (DriverConfig's peer checks). Its peer
// is the daemon: a relay for every attached process, whose CPU the processes it serves share. The
// process it has just handed a packet to preempts it for that one's wake-up and pass (~10-15 us
// here), so its heartbeat ages while the answer is on its way: with the direct mode's
// peer_stall_ns (20 us) a ping-pong of ~22 us round trips took the daemon for stalled in 70-90 %
// of rounds and slept, each round then paying a doorbell wake-up on both sides (one-way 11 ->
// 28 us; bench/io/README.md, 2026-12-04). So here the heartbeat's age is not looked at while the
// Driver spins (peer_stall_ns = spin_ns); a daemon last seen on this CPU still makes the Driver
// block at once, and it still blocks spin_ns after its last work.
inline DriverConfig fabric_driver_config() {
  DriverConfig c;
  c.peer_stall_ns = c.spin_ns;
  return c;
}

struct FabricAttachOptions {
  std::uint32_t hca = kAnyHca;  // WEFT_HCA in the environment overrides when kAnyHca
  TimeNs timeout_ns = 10'000'000'000;
  DriverConfig driver = fabric_driver_config();
  std::uint64_t seed = 1;
  bool zero_copy = true;  // WEFT_SHM_ZERO_COPY=0 in the environment forces false
  // When set, FabricAttach::connect hands it the Device it created (and the daemon's reply) and
  // drives what it returns instead: a decorator such as cm::GsiDevice (QP1, emu/fabricd's
  // fabric_gsi.hpp).
  std::function<std::unique_ptr<Device>(std::unique_ptr<Device>, const AttachReply&)> wrap_device;
};

// The attach handshake alone, for a client that owns its Device and progress (the libfabric
// provider's fabric port): the daemon's socket (keep it open: closing it frees the HCA), its
// reply (the LID, node GUID) and the link (the client is side B).
struct FabricLink {
  FabricLink() = default;
  FabricLink(const FabricLink&) = delete;
  FabricLink& operator=(const FabricLink&) = delete;
  ~FabricLink();
  int sock = -1;
  AttachReply reply{};
  std::unique_ptr<shm::ShmMedium> medium;
};
// Attaches to fabric `name` (WEFT_FABRIC when empty) as FabricAttach::connect does, but creates
// no Device or Driver.
Result<std::unique_ptr<FabricLink>, IoError> attach_fabric_link(std::string name,
                                                                const FabricAttachOptions& o = {});

class FabricAttach {
 public:
  ~FabricAttach();
  // Attaches to fabric `name` (WEFT_FABRIC when empty), retrying until the timeout.
  static Result<std::unique_ptr<FabricAttach>, IoError> connect(std::string name,
                                                                const FabricAttachOptions& o = {});

  Device& device() { return *device_; }
  Driver& driver() { return *driver_; }
  shm::ShmMedium& medium() { return *medium_; }
  std::uint16_t lid() const { return reply_.lid; }
  std::uint32_t hca() const { return reply_.hca; }
  AttachStatus status() const { return reply_.status; }
  bool zero_copy_tx() const { return medium_->zero_copy_tx(); }

 private:
  FabricAttach() = default;
  SeededRng rng_{1};
  std::unique_ptr<Device> device_;
  std::unique_ptr<FabricLink> link_;
  shm::ShmMedium* medium_ = nullptr;  // link_'s
  std::unique_ptr<Driver> driver_;    // declared last: stops before the rest goes
  AttachReply reply_{};
};

}  // namespace weft::io
