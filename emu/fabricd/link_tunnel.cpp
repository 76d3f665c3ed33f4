// emu/fabricd/link_tunnel.cpp — fabric links between daemons over UDP (see link_tunnel.hpp).
#include "emu/fabricd/link_tunnel.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "src/wire/packet.hpp"

namespace weft::fabricd {
namespace {

constexpr std::uint8_t kMagic0 = 'W', kMagic1 = 'L', kVersion = 1;

void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
std::uint16_t get16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

// host (IPv4 or IPv6 literal) and port into a sockaddr; false when host is neither.
bool to_sockaddr(const TunnelEndpoint& e, sockaddr_storage& out, socklen_t& len) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET, e.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(e.port);
    len = sizeof *v4;
    return true;
  }
  if (inet_pton(AF_INET6, e.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(e.port);
    len = sizeof *v6;
    return true;
  }
  return false;
}

bool same_peer(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return x.sin6_port == y.sin6_port && !std::memcmp(&x.sin6_addr, &y.sin6_addr, 16);
}

}  // namespace

bool parse_endpoint(const std::string& s, TunnelEndpoint& out) {
  TunnelEndpoint e;
  std::string port;
  if (!s.empty() && s[0] == '[') {  // [v6]:port
    const auto close = s.find(']');
    if (close == std::string::npos) return false;
    e.host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return false;
      port = s.substr(close + 2);
    }
  } else if (std::count(s.begin(), s.end(), ':') == 1) {  // v4:port
    e.host = s.substr(0, s.find(':'));
    port = s.substr(s.find(':') + 1);
  } else {  // a bare v4 or v6 address
    e.host = s;
  }
  if (!port.empty()) {
    char* end = nullptr;
    const unsigned long p = std::strtoul(port.c_str(), &end, 10);
    if (*end || p == 0 || p > 65535) return false;
    e.port = static_cast<std::uint16_t>(p);
  }
  sockaddr_storage ss;
  socklen_t len;
  if (!to_sockaddr(e, ss, len)) return false;
  out = e;
  return true;
}

LinkTunnel::LinkTunnel(const TunnelEndpoint& local, const TunnelEndpoint& peer) {
  sockaddr_storage me{};
  socklen_t me_len = 0;
  if (!to_sockaddr(local, me, me_len) || !to_sockaddr(peer, peer_, peer_len_)) {
    error_ = "link tunnel: addresses must be IPv4 or IPv6 literals (" + local.host + ", " +
             peer.host + ")";
    return;
  }
  if (me.ss_family != peer_.ss_family) {
    error_ = "link tunnel: " + local.host + " and " + peer.host + " are of different families";
    return;
  }
  const int fd = socket(me.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error_ = std::string("link tunnel: socket: ") + std::strerror(errno);
    return;
  }
  const int buf = 16 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (me.ss_family == AF_INET6) {
    const int on = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&me), me_len) != 0) {
    error_ = "link tunnel: cannot bind " + local.host + ":" + std::to_string(local.port) + ": " +
             std::strerror(errno) + (errno == EADDRINUSE ? " (choose another port)" : "");
    close(fd);
    return;
  }
  socklen_t l = sizeof me;
  getsockname(fd, reinterpret_cast<sockaddr*>(&me), &l);
  local_port_ = ntohs(me.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(me).sin_port
                                              : reinterpret_cast<sockaddr_in6&>(me).sin6_port);
  fd_ = fd;
  for (auto* v : {&tx_, &rx_}) {
    v->resize(kBatch);
    for (auto& s : *v) s.buf.resize(kTunnelHeaderBytes + kTunnelBodyMax);
  }
  tx_mm_.resize(kBatch);
  rx_mm_.resize(kBatch);
}

LinkTunnel::~LinkTunnel() {
  if (fd_ >= 0) close(fd_);
}

std::uint16_t& LinkTunnel::seq(std::vector<std::uint16_t>& v, std::uint16_t link) {
  if (v.size() <= link) v.resize(link + 1u, 0);
  return v[link];
}

std::uint8_t* LinkTunnel::next_tx(TunnelKind kind, std::uint16_t link) {
  if (tx_n_ == tx_.size()) return nullptr;
  std::uint8_t* h = tx_[tx_n_].buf.data();
  h[0] = kMagic0;
  h[1] = kMagic1;
  h[2] = kVersion;
  h[3] = static_cast<std::uint8_t>(kind);
  put16(h + 4, link);
  put16(h + 6, seq(tx_seq_, link)++);
  return h;
}

bool LinkTunnel::send_packet(std::uint16_t link, std::span<const std::uint8_t> p) {
  if (p.size() < wire::kLrhBytes + wire::kVcrcBytes || p.size() > kTunnelBodyMax) return false;
  std::uint8_t* h = next_tx(TunnelKind::kPacket, link);
  if (!h) return false;
  std::memcpy(h + kTunnelHeaderBytes, p.data(), p.size());
  tx_[tx_n_++].iov = {h, kTunnelHeaderBytes + p.size()};
  ++counters_.tx_packets;
  counters_.tx_bytes += p.size();
  return true;
}

bool LinkTunnel::send_fc(std::uint16_t link, const link::FcPacket& fc) {
  std::uint8_t* h = next_tx(TunnelKind::kFlowControl, link);
  if (!h) return false;
  link::encode_fc_packet(fc, std::span<std::uint8_t, link::kFcPacketBytes>(h + kTunnelHeaderBytes,
                                                                           link::kFcPacketBytes));
  tx_[tx_n_++].iov = {h, kTunnelHeaderBytes + link::kFcPacketBytes};
  ++counters_.tx_fc;
  return true;
}

bool LinkTunnel::send_hello(std::uint16_t link) {
  return send_hello(link, {});
}

bool LinkTunnel::send_hello(std::uint16_t link, std::span<const std::uint8_t> body) {
  if (body.size() > kTunnelBodyMax) return false;
  std::uint8_t* h = next_tx(TunnelKind::kHello, link);
  if (!h) return false;
  if (!body.empty()) std::memcpy(h + kTunnelHeaderBytes, body.data(), body.size());
  tx_[tx_n_++].iov = {h, kTunnelHeaderBytes + body.size()};
  return true;
}

std::size_t LinkTunnel::flush() {
  std::size_t sent = 0;
  while (tx_sent_ < tx_n_) {
    const std::size_t k = tx_n_ - tx_sent_;
    for (std::size_t i = 0; i < k; ++i) {
      tx_mm_[i] = {};
      msghdr& m = tx_mm_[i].msg_hdr;
      m.msg_name = &peer_;
      m.msg_namelen = peer_len_;
      m.msg_iov = &tx_[tx_sent_ + i].iov;
      m.msg_iovlen = 1;
    }
    const int r = sendmmsg(fd_, tx_mm_.data(), static_cast<unsigned>(k), 0);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
      ++counters_.tx_errors;  // this datagram is lost (e.g. no route yet); the rest go on
      ++tx_sent_;
      continue;
    }
    tx_sent_ += static_cast<std::size_t>(r);
    sent += static_cast<std::size_t>(r);
  }
  if (tx_sent_ == tx_n_) {
    tx_sent_ = tx_n_ = 0;
  } else if (tx_sent_ > 0) {  // keep the unsent ones at the front
    for (std::size_t i = tx_sent_; i < tx_n_; ++i) {
      std::swap(tx_[i - tx_sent_].buf, tx_[i].buf);
      tx_[i - tx_sent_].iov = {tx_[i - tx_sent_].buf.data(), tx_[i].iov.iov_len};
    }
    tx_n_ -= tx_sent_;
    tx_sent_ = 0;
  }
  return sent;
}

void LinkTunnel::set_rx_drop(double p, std::uint64_t seed) {
  rx_drop_ = p;
  drop_rng_.seed(seed);
}

void LinkTunnel::check(Slot& s, std::size_t n, const std::function<void(const Frame&)>& on) {
  if (rx_drop_ > 0.0 && std::uniform_real_distribution<double>(0.0, 1.0)(drop_rng_) < rx_drop_) {
    ++counters_.rx_dropped;
    return;
  }
  if (!same_peer(s.from, peer_)) {
    ++counters_.rx_foreign;
    return;
  }
  const std::uint8_t* h = s.buf.data();
  if (n < kTunnelHeaderBytes || h[0] != kMagic0 || h[1] != kMagic1 || h[2] != kVersion ||
      h[3] > static_cast<std::uint8_t>(TunnelKind::kHello)) {
    ++counters_.rx_malformed;
    return;
  }
  Frame f;
  f.kind = static_cast<TunnelKind>(h[3]);
  f.link = get16(h + 4);
  f.body = {h + kTunnelHeaderBytes, n - kTunnelHeaderBytes};
  switch (f.kind) {
    case TunnelKind::kPacket: {
      // LRH PktLen (bytes 4-5, low 11 bits) counts 4-byte words from the LRH through the ICRC.
      const std::size_t words =
          f.body.size() >= wire::kLrhBytes ? get16(f.body.data() + 4) & 0x7FF : 0;
      if (f.body.size() < wire::kLrhBytes + wire::kVcrcBytes ||
          words * 4 + wire::kVcrcBytes != f.body.size()) {
        ++counters_.rx_malformed;
        return;
      }
      const std::size_t crc_at = f.body.size() - wire::kVcrcBytes;
      if (wire::vcrc(f.body.first(crc_at)) !=
          wire::get_vcrc(std::span<const std::uint8_t, wire::kVcrcBytes>(f.body.data() + crc_at,
                                                                         wire::kVcrcBytes))) {
        ++counters_.rx_bad_crc;
        return;
      }
      ++counters_.rx_packets;
      counters_.rx_bytes += f.body.size();
      break;
    }
    case TunnelKind::kFlowControl: {
      auto fc = link::decode_fc_packet(f.body);
      if (!fc) {
        if (fc.error() == link::FcError::kBadLpcrc)
          ++counters_.rx_bad_crc;
        else
          ++counters_.rx_malformed;
        return;
      }
      f.fc = *fc;
      ++counters_.rx_fc;
      break;
    }
    case TunnelKind::kHello:
      ++counters_.rx_hello;
      break;
  }
  // Sequence: count what went missing in between (late or duplicated ones are not gaps).
  const std::uint16_t got = get16(h + 6);
  if (rx_seen_.size() <= f.link) rx_seen_.resize(f.link + 1u, false);
  std::uint16_t& want = seq(rx_seq_, f.link);
  if (rx_seen_[f.link]) {
    const auto gap = static_cast<std::uint16_t>(got - want);
    if (gap < 0x8000) counters_.rx_lost += gap;
  }
  if (!rx_seen_[f.link] || static_cast<std::uint16_t>(got - want) < 0x8000) {
    want = static_cast<std::uint16_t>(got + 1);
    rx_seen_[f.link] = true;
  }
  on(f);
}

std::size_t LinkTunnel::poll(const std::function<void(const Frame&)>& on) {
  std::size_t total = 0;
  for (;;) {
    for (std::size_t i = 0; i < kBatch; ++i) {
      rx_[i].iov = {rx_[i].buf.data(), rx_[i].buf.size()};
      rx_mm_[i] = {};
      msghdr& m = rx_mm_[i].msg_hdr;
      m.msg_name = &rx_[i].from;
      m.msg_namelen = sizeof rx_[i].from;
      m.msg_iov = &rx_[i].iov;
      m.msg_iovlen = 1;
    }
    const int r = recvmmsg(fd_, rx_mm_.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (r <= 0) break;
    for (int i = 0; i < r; ++i) {
      if (rx_mm_[i].msg_hdr.msg_flags & MSG_TRUNC) {
        ++counters_.rx_malformed;
        continue;
      }
      check(rx_[i], rx_mm_[i].msg_len, on);
    }
    total += static_cast<std::size_t>(r);
    if (static_cast<std::size_t>(r) < kBatch) break;
  }
  return total;
}

}  // namespace weft::fabricd
