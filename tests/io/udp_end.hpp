// tests/io/udp_end.hpp — one end of an Ethernet-medium test link: a Device, a medium (UdpMedium
// on 127.0.0.1 or the address and port in the config; DpdkMedium in tests/dpdk) and a Driver,
// plus the SOCK_SEQPACKET control socket to the other process (udp_test / dpdk_test is the
// parent, udp_peer / dpdk_peer the child it execs). Header-only, test code.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "src/io/driver.hpp"
#include "src/io/udp/udp_medium.hpp"

namespace weft::test {

struct UdpHello {
  std::uint32_t ip;    // the sender's IPv4 address, host order
  std::uint16_t port;  // the sender's UDP port
  std::uint16_t lid;
  std::uint8_t mac[6];  // the sender's MAC (DPDK; zeros for UDP)
  std::uint8_t pad[2];
  std::uint8_t ip6[16];  // the sender's IPv6 address (UdpConfig::ipv6)
};

template <class M, class Cfg>
class MediumEnd {
 public:
  using Config = Cfg;

 public:
  MediumEnd(int ctrl_fd, std::uint16_t lid, const Cfg& cfg)
      : ctrl_(ctrl_fd), ip_(cfg.local_ip), rng_(lid) {
    if constexpr (requires { cfg.local_ip6; }) {
      ipv6_ = cfg.ipv6;
      ip6_ = cfg.local_ip6;
    }
    medium_ = std::make_unique<M>(cfg);
    DeviceConfig dc;
    dc.name = "weft-udp";
    dc.node_guid = 0x5746'5544'0000'0000ull | lid;
    dc.ports[0].lid = lid;
    dc.crc = CrcMode::kModel;  // the medium computes and checks the RoCEv2 ICRC itself
    device_ = Device::create(dc, rng_);
    driver_ = std::make_unique<io::Driver>();
    driver_->attach(*device_, *medium_);
  }
  ~MediumEnd() {
    driver_.reset();
    if (ctrl_ >= 0) close(ctrl_);
  }
  bool ok() const { return medium_->ok(); }
  M& medium() { return *medium_; }
  Device& device() { return *device_; }
  io::Driver& driver() { return *driver_; }

  bool send(const void* p, std::size_t n) {
    return ::send(ctrl_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // One control message, or nullopt on timeout / EOF.
  std::optional<std::vector<std::uint8_t>> recv(int timeout_s) {
    timeval tv{timeout_s, 0};
    setsockopt(ctrl_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<std::uint8_t> b(4096);
    ssize_t r;
    do {  // io_uring's completion work interrupts blocking calls of the submitting thread
      r = ::recv(ctrl_, b.data(), b.size(), 0);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) return std::nullopt;
    b.resize(static_cast<std::size_t>(r));
    return b;
  }
  // Exchanges ports and LIDs with the other end and adds it as a peer.
  bool introduce(std::uint16_t my_lid) {
    UdpHello mine{ip_, medium_->local_port(), my_lid, {}, {}, {}};
    std::memcpy(mine.ip6, ip6_.data(), 16);
    if constexpr (requires(M & m) { m.mac(); }) std::memcpy(mine.mac, medium_->mac().data(), 6);
    if (!send(&mine, sizeof mine)) return false;
    auto m = recv(30);
    if (!m || m->size() != sizeof(UdpHello)) return false;
    UdpHello theirs;
    std::memcpy(&theirs, m->data(), sizeof theirs);
    if constexpr (requires(M & m) { m.mac(); }) {
      io::roce::Mac mac;
      std::memcpy(mac.data(), theirs.mac, 6);
      medium_->add_peer(theirs.lid, theirs.ip, theirs.port, mac);
    } else if (ipv6_) {
      io::roce::Ip6 ip6;
      std::memcpy(ip6.data(), theirs.ip6, 16);
      medium_->add_peer6(theirs.lid, ip6, theirs.port);
    } else {
      medium_->add_peer(theirs.lid, theirs.ip, theirs.port);
    }
    peer_lid_ = theirs.lid;
    return true;
  }
  std::uint16_t peer_lid() const { return peer_lid_; }

 private:
  int ctrl_;
  std::uint32_t ip_;
  bool ipv6_ = false;
  io::roce::Ip6 ip6_{};
  SeededRng rng_;
  std::unique_ptr<M> medium_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<io::Driver> driver_;
  std::uint16_t peer_lid_ = 0;
};

using UdpEnd = MediumEnd<io::udp::UdpMedium, io::udp::UdpConfig>;

}  // namespace weft::test
