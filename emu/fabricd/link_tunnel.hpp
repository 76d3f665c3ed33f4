// emu/fabricd/link_tunnel.hpp — a link of the emulated fabric carried between two fabric
// daemons over UDP (issue 7, section 5: fabrics that span hosts). RoCEv2 cannot express what a
// link carries — LRH packets of every VL (SMPs on VL15 included) and the link-level flow-control
// packets — so each goes whole in a small Weft encapsulation, one per UDP datagram:
//
//   byte 0-1  magic 'W' 'L'
//   byte 2    version (1)
//   byte 3    kind: 0 = packet (LRH .. VCRC, the wire image), 1 = flow control (6 bytes,
//             IBA 7.9.4.1, LPCRC included), 2 = hello (no body: the peer is there)
//   byte 4-5  link id (big-endian): which link of the topology, so one socket pair carries
//             every link between two daemons
//   byte 6-7  sequence (big-endian, per link and direction): a gap counts datagrams lost
//             underneath (the fabric's own credits and the transport's retries deal with them)
//   byte 8-   the body
//
// A received datagram is checked before it is handed on: the header, the body's own length
// (LRH PktLen x 4 + the VCRC) and its CRC (VCRC; LPCRC for flow control). What fails is counted
// and dropped, as a real link drops a frame with a bad CRC.
//
// Sends are queued and go out in batches (sendmmsg) on flush(); poll() reads in batches
// (recvmmsg). IPv4 or IPv6 (a peer address of either family). The Fabric side (ports whose
// partner is on the other daemon, link training, one SM) is emu/fabricd/cross_host.hpp.
//
// Thread-safety: owned by one thread (the daemon's driver thread).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "src/link/fc_packet.hpp"

namespace weft::fabricd {

inline constexpr std::uint16_t kLinkTunnelPort = 4792;  // next to RoCEv2's 4791
inline constexpr std::size_t kTunnelHeaderBytes = 8;
// The largest body: LRH + GRH + BTH + extensions (96), 4 KiB payload, pad, ICRC, VCRC.
inline constexpr std::size_t kTunnelBodyMax = 96 + 4096 + 3 + 4 + 2;

enum class TunnelKind : std::uint8_t { kPacket = 0, kFlowControl = 1, kHello = 2 };

struct TunnelEndpoint {
  std::string host;  // an IPv4 or IPv6 address (no names: the fabric is configured, not looked up)
  std::uint16_t port = kLinkTunnelPort;
};
// "HOST:PORT", "[V6]:PORT" or just the host (kLinkTunnelPort).
bool parse_endpoint(const std::string& s, TunnelEndpoint& out);

struct TunnelCounters {
  std::uint64_t tx_packets = 0, tx_fc = 0, tx_bytes = 0, tx_errors = 0;
  std::uint64_t rx_packets = 0, rx_fc = 0, rx_hello = 0, rx_bytes = 0;
  std::uint64_t rx_malformed = 0;  // bad header, unknown kind, length not what the LRH says
  std::uint64_t rx_bad_crc = 0;    // VCRC (packets) or LPCRC (flow control)
  std::uint64_t rx_foreign = 0;    // from an address that is not the peer's
  std::uint64_t rx_lost = 0;       // sequence gaps
  std::uint64_t rx_dropped = 0;    // dropped on purpose on receipt (set_rx_drop: loss injection)
};

class LinkTunnel {
 public:
  // What poll() hands on: the link, the kind, and the body (the LRH..VCRC image for packets;
  // fc is decoded for flow control). Valid during the call only.
  struct Frame {
    std::uint16_t link = 0;
    TunnelKind kind = TunnelKind::kPacket;
    std::span<const std::uint8_t> body;
    link::FcPacket fc{};
  };

  // Binds `local` and sends to `peer` (same address family). ok() false when that failed.
  LinkTunnel(const TunnelEndpoint& local, const TunnelEndpoint& peer);
  ~LinkTunnel();
  LinkTunnel(const LinkTunnel&) = delete;
  LinkTunnel& operator=(const LinkTunnel&) = delete;
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  std::uint16_t local_port() const { return local_port_; }
  int fd() const { return fd_; }  // readable when poll() has work

  // Queue one frame (copied); false when the queue is full (flush first) or the packet is not
  // an LRH..VCRC image of a sane length.
  bool send_packet(std::uint16_t link, std::span<const std::uint8_t> lrh_to_vcrc);
  bool send_fc(std::uint16_t link, const link::FcPacket& fc);
  bool send_hello(std::uint16_t link);
  // A hello with a body (at most kTunnelBodyMax bytes; the cross-host link training's state).
  bool send_hello(std::uint16_t link, std::span<const std::uint8_t> body);
  // Puts the queued frames on the wire; returns how many went (the rest stay queued when the
  // socket buffer is full).
  std::size_t flush();
  std::size_t queued() const { return tx_n_ - tx_sent_; }

  // Reads what arrived (without waiting), checks it and hands each good frame to `on`; returns
  // how many datagrams were read.
  std::size_t poll(const std::function<void(const Frame&)>& on);

  const TunnelCounters& counters() const { return counters_; }

  // Loss injection (tests, `weft fabric up --tunnel-drop P`): each datagram read is dropped with
  // probability `p` before it is checked, as if lost on the way (counted in rx_dropped, and in
  // rx_lost once a later frame of its link shows the gap). Seeded: the same seed and the same
  // arrivals drop the same frames. p <= 0 turns it off.
  void set_rx_drop(double p, std::uint64_t seed);

 private:
  static constexpr std::size_t kBatch = 64;
  struct Slot {
    std::vector<std::uint8_t> buf;
    iovec iov{};
    sockaddr_storage from{};
  };
  std::uint8_t* next_tx(TunnelKind kind, std::uint16_t link);
  void check(Slot& s, std::size_t n, const std::function<void(const Frame&)>& on);
  std::uint16_t& seq(std::vector<std::uint16_t>& v, std::uint16_t link);

  int fd_ = -1;
  std::string error_;
  std::uint16_t local_port_ = 0;
  sockaddr_storage peer_{};
  socklen_t peer_len_ = 0;
  std::vector<Slot> tx_, rx_;
  std::vector<mmsghdr> tx_mm_, rx_mm_;
  std::size_t tx_n_ = 0, tx_sent_ = 0;
  std::vector<std::uint16_t> tx_seq_, rx_seq_;
  std::vector<bool> rx_seen_;
  TunnelCounters counters_{};
  double rx_drop_ = 0.0;
  std::mt19937_64 drop_rng_;
};

}  // namespace weft::fabricd
