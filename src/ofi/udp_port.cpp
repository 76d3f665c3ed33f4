// src/ofi/udp_port.cpp — the MediumPort over RoCEv2/UDP (FI_WEFT_MEDIUM=udp): src/io's UdpMedium
// carries the Device's packets as RoCEv2 datagrams (BTH onwards, ICRC) between UDP sockets.
//
// Identity and routes. The data socket is bound to an ephemeral port of FI_WEFT_UDP_IP
// (default 127.0.0.1), the control socket (a second UDP socket) to another. node id =
// ip << 32 | data port << 16 | control port, so an endpoint address names everything a peer
// needs; the medium learns a peer's route (LID -> ip:port, and back for the SLID) when the
// provider names it (add_peer: fi_av_insert, ctrl_send) or a control datagram arrives from it.
// The LID is claimed system-wide on this host by binding the abstract socket
// "weft/ofi-udp/<fabric>/<lid>" (first candidate a hash of the pid, then the next free one);
// across hosts LIDs are only unique per peer table, which is what routing needs as long as no
// two peers of one node share a LID (a known limit, README).
//
// Control datagrams are UDP: ordered and, on one host, lost only when the receiver's socket
// buffer (1 MiB) overflows; the connection set-up has no retransmission of its own.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>

#include "src/io/udp/udp_medium.hpp"
#include "src/ofi/ctrl_socket.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

constexpr std::uint16_t kLidFirst = 1, kLidCount = 0xBFFF;
constexpr TimeNs kCtrlCheckNs = 20'000;

std::uint32_t ip_of(const NodeAddr& a) {
  return static_cast<std::uint32_t>(a.node_id >> 32);
}
std::uint16_t data_port_of(const NodeAddr& a) {
  return static_cast<std::uint16_t>(a.node_id >> 16);
}
std::uint16_t ctrl_port_of(const NodeAddr& a) {
  return static_cast<std::uint16_t>(a.node_id);
}

class UdpPort final : public MediumPort {
 public:
  UdpPort(std::unique_ptr<io::udp::UdpMedium> medium, CtrlSocket* claim, NodeAddr self, int epfd)
      : medium_(std::move(medium)), claim_(claim), self_(self), epfd_(epfd) {}
  ~UdpPort() override {
    const auto& c = medium_->counters();
    WEFT_INFO(FI_LOG_DOMAIN,
              "udp lid %u: tx %llu rx %llu no-route %llu errors %llu full %llu bad-icrc %llu",
              self_.lid, (unsigned long long)c.tx_packets, (unsigned long long)c.rx_packets,
              (unsigned long long)c.tx_no_route, (unsigned long long)c.tx_errors,
              (unsigned long long)c.tx_full, (unsigned long long)c.rx_bad_icrc);
    delete claim_;
    close(epfd_);
  }

  CtrlSocket& ctrl() { return ctrl_; }
  void set_self(NodeAddr self) { self_ = self; }
  bool watch() {
    for (int fd : {ctrl_.fd(), medium_->rx_wait_fd()}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (fd >= 0 && epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    }
    return true;
  }

  NodeAddr local() const override { return self_; }
  // Packets leave through tx_burst (the medium polls the Device itself); tx() is not used.
  bool tx(const TxPacket&) override { return false; }
  void tx_flush() override {}
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return medium_->tx_burst(dev, now, max_packets);
  }
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return medium_->rx_burst(dev, now, max_packets);
  }
  void add_peer(const NodeAddr& peer) override { learn(peer); }
  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    // An address whose ip:port belongs to a node with another LID names no node on the medium.
    if (!learn(dst)) return false;
    expect_ = true;
    return ctrl_.send_udp(self_, dst, ip_of(dst), ctrl_port_of(dst), msg);
  }
  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    if (!expect_ && !urgent && now - last_check_ < kCtrlCheckNs) return 0;
    last_check_ = now;
    const std::size_t got = ctrl_.poll(
        self_,
        [&](const NodeAddr& src, std::span<const std::uint8_t> m) {
          if (learn(src)) fn(src, m);
        },
        max_msgs);
    expect_ = got > 0;
    return got;
  }
  int wait_fd() const override { return epfd_; }

 private:
  // Routes peer.lid to the data socket named by peer.node_id; false when that socket is known
  // under another LID (one LID per socket: the medium maps a source address back to one SLID).
  bool learn(const NodeAddr& peer) {
    if (peer.lid == 0 || peer.lid == self_.lid) return false;
    const std::uint64_t sock = peer.node_id >> 16;  // ip and data port
    auto [it, fresh] = lids_.emplace(sock, peer.lid);
    if (!fresh) return it->second == peer.lid;
    medium_->add_peer(peer.lid, ip_of(peer), data_port_of(peer));
    return true;
  }

  std::unique_ptr<io::udp::UdpMedium> medium_;
  CtrlSocket* claim_;  // owns the LID claim
  CtrlSocket ctrl_;
  NodeAddr self_;
  int epfd_;
  std::unordered_map<std::uint64_t, std::uint16_t> lids_;  // ip << 16 | data port -> LID
  TimeNs last_check_ = 0;
  bool expect_ = true;
};

}  // namespace

std::unique_ptr<MediumPort> open_udp_port(std::string_view fabric_name, std::uint32_t ip) {
  static std::atomic<std::uint32_t> opened{0};
  const std::string fabric(fabric_name);
  // Claim a LID on this host.
  auto claim = std::make_unique<CtrlSocket>();
  const auto pid = static_cast<std::uint64_t>(getpid());
  const std::uint32_t start =
      static_cast<std::uint32_t>((pid * 2654435761u + opened.fetch_add(1) * 40503u) % kLidCount);
  std::uint16_t lid = 0;
  for (std::uint32_t i = 0; i < kLidCount && !lid; ++i) {
    const auto cand = static_cast<std::uint16_t>(kLidFirst + (start + i) % kLidCount);
    if (claim->bind_abstract("weft/ofi-udp/" + fabric + "/" + std::to_string(cand)))
      lid = cand;
    else if (errno != EADDRINUSE)
      break;
  }
  if (!lid) return nullptr;
  io::udp::UdpConfig cfg;
  cfg.local_ip = ip;
  cfg.port = 0;  // ephemeral
  auto medium = std::make_unique<io::udp::UdpMedium>(cfg);
  if (!medium->ok()) {
    WEFT_WARN(FI_LOG_DOMAIN, "udp: %s", medium->error().c_str());
    return nullptr;
  }
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return nullptr;
  const std::uint16_t data_port = medium->local_port();
  auto port = std::make_unique<UdpPort>(std::move(medium), claim.release(), NodeAddr{}, epfd);
  if (!port->ctrl().bind_udp(ip)) return nullptr;
  port->set_self(NodeAddr{
      (std::uint64_t{ip} << 32) | (std::uint64_t{data_port} << 16) | port->ctrl().udp_port(), lid});
  if (!port->watch()) return nullptr;
  return port;
}

}  // namespace weft::ofi
