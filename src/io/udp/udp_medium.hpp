// io/udp/udp_medium.hpp — RoCEv2 over ordinary UDP sockets: the Medium that carries a Device's
// packets as RoCEv2 (IBA Annex A17) datagrams — BTH, extension headers, payload, pad and the
// RoCEv2 ICRC — to UDP port 4791 (configurable) of the peers' IPv4 addresses.
//
// Two back ends behind one Medium: io_uring (liburing; batched recvmsg/sendmsg submissions and
// completions) and sendmmsg/recvmmsg. kAuto is mmsg (measured faster: see udp_medium.cpp);
// kUring (UdpConfig::backend or WEFT_UDP_BACKEND=uring) tries io_uring and falls back to mmsg
// when the kernel refuses it (EPERM in containers that block it, ENOSYS on old kernels), logging
// that once per process. The mmsg back end sends runs of equal datagrams as one UDP GSO message
// and receives with UDP GRO (UdpConfig::gso/gro; udp(7)): one RoCEv2 packet per datagram still.
//
// Addressing (GRH semantics mapped to IP): a packet with a GRH goes to the IPv4 address of its
// DGID when that is IPv4-mapped (::ffff:a.b.c.d); otherwise its DLID is looked up in the peer
// table (add_peer). On receipt the medium rebuilds an LRH (DLID = the Device's LID, SLID = the
// sender's LID from the table by source address) in front of the BTH, checks the RoCEv2 ICRC and
// hands the packet to the Device. The ICRC covers the IPv4 header as the kernel sends it: DF set
// and identification 0 (what Linux puts in DF datagrams of unconnected sockets), the real source
// and destination ports; TOS, TTL and the checksums are masked (Annex A17), so a RoCE NIC or
// Wireshark sees correct ICRCs.
//
// With pcap_path set, every datagram sent and received is written there as an Ethernet/IPv4/UDP
// frame (LINKTYPE_ETHERNET), which Wireshark decodes as RoCE.
//
// Thread-safety: owned by one Driver; all calls from its thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/io/medium.hpp"
#include "src/io/udp/roce_frame.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"

struct io_uring;

namespace weft::io::udp {

enum class UdpBackend : std::uint8_t { kAuto, kUring, kMmsg };
std::string_view to_string(UdpBackend b);

struct UdpConfig {
  std::uint32_t local_ip = 0x7F000001;        // IPv4, host order; the address the ICRC names
  bool ipv6 = false;                          // an IPv6 socket on local_ip6 instead
  roce::Ip6 local_ip6{};                      // e.g. ::1 (network order bytes)
  std::uint16_t port = wire::kRoceV2UdpPort;  // 0: an ephemeral port (see local_port())
  UdpBackend backend = UdpBackend::kAuto;     // kAuto reads WEFT_UDP_BACKEND first
  std::string pcap_path;                      // empty: no capture
  std::size_t rx_slots = 128;  // receive buffers (io_uring: recvmsg requests kept armed)
  std::size_t tx_slots = 256;  // send buffers in flight
  // Both directions. Loopback and veth drop what does not fit the receiver's buffer, and the
  // transport (go-back-N by default) pays for each loss with a window of retransmits: at 8 MiB a
  // 1 MiB WRITE stream lost ~30 % of its datagrams here. There is no congestion control, so the
  // buffer must hold what a sender may have in flight while the receiving process waits for a
  // CPU: `weft perf --bw -s 1M` keeps 128 WRs of 1 MiB in flight, and at 64 MiB (128 MiB of
  // kernel accounting, socket(7)) a loaded machine overflowed it (RcvbufErrors) in 3 of 6 runs,
  // each costing 80-175 k go-back-N retransmits. Kernel memory is charged only for what waits in
  // the buffer. Set with SO_{RCV,SND}BUFFORCE (root or CAP_NET_ADMIN), else capped by
  // net.core.[rw]mem_max.
  int socket_buffer_bytes = 128 << 20;
  // Payloads of at least this many bytes in registered memory go to the kernel in place (a
  // gathered sendmsg: no copy in user space); smaller ones and captured ones are copied.
  std::size_t gather_min_bytes = 512;
  // UDP GSO (udp(7) UDP_SEGMENT): a run of datagrams to one peer, each the size of the first
  // (the last may be shorter), goes to the kernel as one message that it cuts into exactly those
  // datagrams — still one RoCEv2 packet per datagram on the wire — so the stack is walked once
  // per run instead of once per packet. Off where the kernel refuses it (logged once) or with
  // WEFT_UDP_GSO=0.
  bool gso = true;
  // UDP GRO (udp(7) UDP_GRO): the kernel may hand over a run of equal datagrams from one sender
  // in one receive (on loopback a GSO run arrives whole, never cut); the medium splits it at the
  // segment size it reports. Receive buffers then hold kGroBytesMax each. WEFT_UDP_GRO=0: off.
  bool gro = true;
};

// The largest run one GSO message carries: the kernel's limits are 64 segments (UDP_MAX_SEGMENTS
// before Linux 6.x raised it) and one IPv4 datagram's 65,507 bytes of UDP payload.
inline constexpr std::size_t kGsoSegmentsMax = 64;
inline constexpr std::size_t kGsoBytesMax = 65'507;
// A GRO receive is at most one maximal IP packet.
inline constexpr std::size_t kGroBytesMax = 65'536;

struct UdpCounters {
  std::uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  std::uint64_t tx_no_route = 0;  // no peer for the DLID / DGID: dropped
  std::uint64_t tx_errors = 0;    // the kernel refused a datagram
  std::uint64_t tx_full = 0;      // tx_burst stopped for lack of a free send buffer
  std::uint64_t rx_bad_icrc = 0, rx_malformed = 0;
  std::uint64_t syscalls = 0;     // sendmmsg / recvmmsg / io_uring_enter
  std::uint64_t tx_gso_runs = 0;  // messages that carried more than one datagram (GSO)
  std::uint64_t rx_gro_runs = 0;  // receives that held more than one datagram (GRO)
};

class UdpMedium final : public Medium {
 public:
  // Opens and binds the socket and sets up the back end; ok() false on failure, error() says why
  // (a taken port names rdma_rxe and the way out).
  explicit UdpMedium(const UdpConfig& cfg);
  ~UdpMedium() override;
  UdpMedium(const UdpMedium&) = delete;
  UdpMedium& operator=(const UdpMedium&) = delete;
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  UdpBackend backend() const { return backend_; }
  bool gso() const { return gso_; }  // UdpConfig::gso, and the kernel accepted it
  bool gro() const { return gro_; }
  std::uint16_t local_port() const { return local_port_; }
  // The MTU of the interface that holds the local address (0: not found, e.g. a wildcard
  // address), and the largest RoCE MTU (256..4096 bytes) whose datagrams it carries without
  // fragmenting (4096 when unknown). A QP's path MTU must not exceed it: larger datagrams fail
  // with EMSGSIZE (tx_errors) since RoCEv2 sets DF.
  std::uint32_t if_mtu() const { return if_mtu_; }
  std::uint32_t roce_mtu() const { return if_mtu_ ? roce::roce_mtu_for(if_mtu_, cfg_.ipv6) : 4096; }
  std::string_view if_name() const { return if_name_; }

  // Where packets for `lid` go (and which LID a datagram from ip:port comes from).
  void add_peer(std::uint16_t lid, std::uint32_t ip, std::uint16_t port);
  // The same for an IPv6 medium (UdpConfig::ipv6). A GRH DGID that is not IPv4-mapped is
  // looked up among these addresses.
  void add_peer6(std::uint16_t lid, const roce::Ip6& ip, std::uint16_t port);

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override;
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override;
  int rx_wait_fd() const override;
  bool prepare_sleep() override;

  const UdpCounters& counters() const { return counters_; }

  // The IPv4-mapped GID (::ffff:a.b.c.d) of an address, for AddressVector::grh.dgid.
  static std::array<std::uint8_t, 16> gid_of(std::uint32_t ip);

 private:
  union SockAddr {
    sockaddr_in v4;
    sockaddr_in6 v6;
  };
  struct Slot {
    std::vector<std::uint8_t> buf;  // Ethernet/IP/UDP headers (for ICRC and pcap), datagram
    SockAddr addr{};
    iovec iov[3]{};  // the datagram; gathered: headers, payload (in place), pad + ICRC
    msghdr msg{};
    std::size_t frame_bytes = 0;
    std::size_t datagram_bytes = 0;  // transmit: the sum of the iovecs
    std::uint8_t trailer[8]{};
    alignas(cmsghdr) std::uint8_t control[CMSG_SPACE(sizeof(int))]{};  // receive: UDP_GRO
  };
  // Transmit messages: one per datagram, or one per GSO run (with its UDP_SEGMENT cmsg).
  struct TxMsg {
    alignas(cmsghdr) std::uint8_t control[CMSG_SPACE(sizeof(std::uint16_t))]{};
    std::size_t slot_end = 0;  // one past its last slot
  };
  bool setup_uring();
  // Builds slot's frame from pkt; false when there is no route.
  bool build(Device& dev, const TxPacket& pkt, Slot& s, TimeNs now);
  // The datagram at s.buf[head_ + offset, + datagram_bytes) (offset: its place in a GRO run).
  void deliver(Device& dev, Slot& s, std::size_t offset, std::size_t datagram_bytes, TimeNs now);
  // A completed receive of `bytes`: one datagram, or a GRO run cut at the size its cmsg gives.
  // Returns how many datagrams it held.
  std::size_t deliver_run(Device& dev, Slot& s, std::size_t bytes, TimeNs now);
  void arm_rx_msg(Slot& s);
  std::size_t group_unsent();
  void flatten_unsent();
  void arm_recv(std::size_t i);
  void reap();
  void submit();
  std::size_t rx_uring(Device& dev, TimeNs now, std::size_t max);
  std::size_t tx_uring(Device& dev, TimeNs now, std::size_t max);
  std::size_t rx_mmsg(Device& dev, TimeNs now, std::size_t max);
  std::size_t tx_mmsg(Device& dev, TimeNs now, std::size_t max);

  UdpConfig cfg_;
  std::string error_;
  int fd_ = -1;
  std::uint16_t local_port_ = 0;
  std::uint32_t if_mtu_ = 0;
  std::string if_name_;
  std::size_t head_ = roce::kFrameHead;  // where the datagram starts in a slot's buffer
  UdpBackend backend_ = UdpBackend::kMmsg;
  roce::PeerTable peers_;
  std::vector<Slot> rx_, tx_;
  std::vector<mmsghdr> mm_;
  std::vector<TxMsg> tx_msgs_;  // parallel to mm_ on transmit
  std::vector<iovec> tx_iov_;   // the messages' gathered iovecs
  bool gso_ = false, gro_ = false;
  std::size_t rx_bytes_ = roce::kDatagramMax;  // a receive buffer (kGroBytesMax with GRO)
  std::vector<std::uint32_t> tx_free_;         // io_uring: free send slots
  std::vector<std::uint32_t> rx_ready_;        // io_uring: completed receives (slot << 0), in order
  std::vector<std::int32_t> rx_res_;           // their results
  std::size_t rx_ready_head_ = 0;
  std::size_t tx_sent_ = 0, tx_built_ = 0;  // mmsg: frames [tx_sent_, tx_built_) not yet sent
  std::unique_ptr<io_uring> ring_;
  bool sq_dirty_ = false;
  std::size_t inflight_ =
      0;  // requests the kernel has not completed  // SQEs prepared but not yet submitted
  wire::PcapWriter pcap_;
  UdpCounters counters_{};
  // The last Device served: WEFT_UDP_STATS=1 prints its counters with ours at destruction, so
  // with it set the Device must outlive the medium (as in DirectNode).
  const Device* dev_ = nullptr;
};

}  // namespace weft::io::udp
