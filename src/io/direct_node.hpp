// io/direct_node.hpp — direct mode: two processes connected point to point over the
// shared-memory medium, with no switch between them (the default of weft perf).
//
// Rendezvous: the listener binds the abstract Unix socket "weft/<name>" (abstract: nothing in the
// file system, gone when the process is). On accept it creates the segment (a memfd), formats it,
// and sends it with both doorbell eventfds (SCM_RIGHTS) in a Hello; each side learns the other's
// pid from SO_PEERCRED, names it as its ptracer (prctl PR_SET_PTRACER, so Yama's ptrace_scope=1
// allows the peer's process_vm_readv) and probes whether it can read the peer's memory. Zero copy
// is used in a direction only when the reader's probe succeeded and both sides want it; otherwise
// the side says so once in the log and payloads are copied through the ring.
// The socket stays open for out-of-band messages (QP numbers, keys, test control).
//
// A DirectNode owns a Device (LID 1 on the listener's side, 2 on the connector's), its ShmMedium
// and a Driver. Thread-safety: as the Driver's threading model (driver.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/device.hpp>

#include "src/io/driver.hpp"
#include "src/io/shm/shm_medium.hpp"
#include "src/io/shm/shm_pool.hpp"

namespace weft::io {

enum class IoError : std::uint8_t {
  kAddressInUse,  // another listener has the name
  kTimeout,
  kProtocol,  // the peer spoke something else (version, magic, missing fds)
  kClosed,    // the peer closed the socket
  kSystem,    // a system call failed (details in the log)
};
std::string_view to_string(IoError e);

struct DirectOptions {
  bool zero_copy = true;  // WEFT_SHM_ZERO_COPY=0 in the environment forces false
  std::size_t ring_bytes = shm::kRingBytesDefault;
  TimeNs timeout_ns = 10'000'000'000;  // accept / connect / handshake
  DriverConfig driver{};
  std::uint64_t seed = 1;  // the Device's Rng
  // The Device's delayed ACKs (DeviceConfig::ack_delay_ns; both ends of a direct link are Weft):
  // an unsignaled WR's ACK may wait this long to coalesce with later ones. 0: off.
  TimeNs ack_delay_ns = 20'000;
  // ... and the responder acknowledges requests that did not ask (AckReq) at least every this
  // many (DeviceConfig::ack_coalesce_max; the Device's default is 4). perf's WRITE latency
  // ping-pong asks on every 16th WRITE (perftest's CQ moderation): an ACK for the three before it
  // made every fourth reply a batch of two records, ACK first, and the receiver took the ACK and
  // waited for the second line before it saw the WRITE: 16 cut the direct 8 B latency by ~35 ns
  // a hop (bench/io/README.md, session 22). A stream's ACKs come by its AckReq every 32 packets.
  std::uint32_t ack_coalesce_max = 16;
  // Payload a side may have in flight by reference (ShmLinkConfig::by_ref_bytes_max; 0: the
  // ring's size, 4 MiB). Under load (load average ~10 on 2 vCPUs) each process gets its CPU in
  // stretches of ~1-3 ms with waits of ~1-10 ms between: the receiver can go on copying only
  // while the sender has queued work for it, so the two processes had to be on their CPUs at the
  // same time (write --bw -s 1M: 12.5 Gb/s with 4 MiB, 25 with 32 MiB, 30 with 128 MiB,
  // process_vm_writev 42). Session 20 (bench/io/README.md): with --shm-buffers at load 6-7 the
  // sender sat at the 64 MiB bound in ~97 % of its passes, and 128 MiB beat 64 MiB in 5 of 5
  // alternating rounds (median ratio to memcpy 0.69x against 0.61x); 256 MiB was no better than
  // 128 (weft perf's 128 WRs of 1 MiB then bind first). The consumer index it waits on lags by
  // at most kRecordsPerPublish records (128 KiB of payload), so the bound is what holds the
  // sender, not the index's publication. The queue's depth is no retransmission risk: the
  // requester's timer restarts on every ACK that moves (IBA 9.7.6.1.3 forward progress), and the
  // receiver acknowledges as it goes, not at the end of the queue. 128 MiB of 4 KiB packets is
  // 2 MiB of 64-byte records: half the 4 MiB ring.
  std::size_t by_ref_bytes_max = std::size_t{128} << 20;
  // Runs of a message's MIDDLE packets by reference go as one ring record each
  // (ShmLinkConfig::run_records; shm_medium.hpp ByRefRun). WEFT_SHM_RUNS=0 turns it off
  // (measurements).
  bool run_records = true;
};

class DirectNode {
 public:
  ~DirectNode();
  // Connects to a listener of that name, retrying until opts.timeout_ns.
  static Result<std::unique_ptr<DirectNode>, IoError> connect(const std::string& name,
                                                              const DirectOptions& opts = {});

  Device& device() { return *device_; }
  Driver& driver() { return *driver_; }
  shm::ShmMedium& medium() { return *medium_; }
  // Moves the Device's traffic to another medium (UDP, DPDK: weft perf --medium); the shared-memory
  // link stays idle and the rendezvous socket keeps carrying the out-of-band messages. Call with
  // the driver thread stopped (inline mode). The zero-copy flags then no longer apply.
  void use_medium(std::unique_ptr<Medium> m);
  std::uint16_t lid() const { return lid_; }
  std::uint16_t peer_lid() const { return peer_lid_; }
  pid_t peer_pid() const { return peer_pid_; }
  bool zero_copy_tx() const { return !data_medium_ && medium_->zero_copy_tx(); }  // peer pulls
  bool zero_copy_rx() const { return !data_medium_ && zero_copy_rx_; }  // we pull the peer's

  // Out-of-band messages on the rendezvous socket (at most kOobBytesMax each). recv_oob waits
  // up to timeout_ns (0: just look); nothing drives the Device meanwhile.
  static constexpr std::size_t kOobBytesMax = 65536;
  bool send_oob(std::span<const std::uint8_t> msg);
  Result<std::vector<std::uint8_t>, IoError> recv_oob(TimeNs timeout_ns);

  // Shared-memory buffers (shm_pool.hpp), over the rendezvous socket: share_pool sends the
  // pool's memfd and address to the peer and waits until the peer's accept_pool has mapped it;
  // from then on packets whose payload lies in `pool` travel by reference (the peer memcpys them
  // from its mapping). `pool` must outlive this node's traffic from it. accept_pool maps the
  // pool the peer shares (the node keeps the mapping) and answers. The two calls pair up in the
  // order the sides make them, like any out-of-band message. Not with use_medium. Both return
  // the pool's size.
  Result<std::size_t, IoError> share_pool(const shm::ShmPool& pool, TimeNs timeout_ns);
  Result<std::size_t, IoError> accept_pool(TimeNs timeout_ns);

 private:
  friend class DirectListener;
  DirectNode() = default;
  // Runs the handshake on a connected socket (side_a: the listener's side).
  static Result<std::unique_ptr<DirectNode>, IoError> handshake(int sock, bool side_a,
                                                                const DirectOptions& opts);

  SeededRng rng_{1};
  std::unique_ptr<Device> device_;
  std::unique_ptr<shm::ShmMedium> medium_;
  std::unique_ptr<Medium> data_medium_;                    // use_medium's, when set
  std::vector<std::unique_ptr<shm::ShmPool>> peer_pools_;  // accept_pool's mappings
  std::unique_ptr<Driver> driver_;  // declared last: stops before the rest goes
  int sock_ = -1;
  std::uint16_t lid_ = 0, peer_lid_ = 0;
  pid_t peer_pid_ = 0;
  bool zero_copy_rx_ = false;
};

class DirectListener {
 public:
  ~DirectListener();
  static Result<std::unique_ptr<DirectListener>, IoError> bind(const std::string& name);
  // Waits for one peer (up to opts.timeout_ns) and runs the handshake.
  Result<std::unique_ptr<DirectNode>, IoError> accept(const DirectOptions& opts = {});
  const std::string& name() const { return name_; }

 private:
  DirectListener() = default;
  int fd_ = -1;
  std::string name_;
};

// ---- connecting QPs across a DirectNode (values exchanged out of band) ----
struct RcPeer {
  std::uint16_t lid = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // the peer's first send PSN (our rq_psn)
};
struct RcOptions {
  Mtu mtu = Mtu::k4096;
  std::uint8_t timeout = 14;  // 67 ms per try: with retry_cnt 7 a dead peer is noticed in ~0.54 s
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 1;
  std::uint8_t rd_atomic = 16;
};
// RESET -> INIT -> RTR -> RTS with remote read/write/atomic access allowed.
Errc connect_rc(QueuePair* qp, const RcPeer& peer, std::uint32_t sq_psn, const RcOptions& o = {});
// RESET -> INIT -> RTR -> RTS for a UD QP.
Errc connect_ud(QueuePair* qp, std::uint32_t qkey);

}  // namespace weft::io
