// emu/fabricd/link_tunnel.cpp — fabric links between daemons over UDP (see link_tunnel.hpp).
#include "emu/fabricd/link_tunnel.hpp"

#include <arpa/inet.h>
#include <netdb.h>
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
  } else if (std::count(s.begin(), s.end(), ':') == 1) {  // v4 or name:port
    e.host = s.substr(0, s.find(':'));
    port = s.substr(s.find(':') + 1);
    if (port.empty()) return false;
  } else {  // a bare v4 or v6 address, or a name
    e.host = s;
  }
  if (e.host.empty()) return false;
  if (!port.empty()) {
    char* end = nullptr;
    const unsigned long p = std::strtoul(port.c_str(), &end, 10);
    if (*end || p == 0 || p > 65535) return false;
    e.port = static_cast<std::uint16_t>(p);
  }
  out = e;
  return true;
}

std::string SocketAddress::to_string() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
  }
  const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
  inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(a.sin6_port));
}

Result<SocketAddress, std::string> resolve_endpoint(const TunnelEndpoint& e, int family) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.port);
  const int rc = getaddrinfo(e.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    return "cannot resolve host '" + e.host +
           "': " + (rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc));
  // The first address of the family wanted; with AF_UNSPEC IPv4 first (what a name with both
  // most likely means on a test network), else the first IPv6 one.
  const addrinfo* pick = nullptr;
  for (const int f : {AF_INET, AF_INET6}) {
    if (family != AF_UNSPEC && f != family) continue;
    for (const addrinfo* a = res; a && !pick; a = a->ai_next)
      if (a->ai_family == f) pick = a;
    if (pick) break;
  }
  SocketAddress out;
  if (pick) {
    std::memcpy(&out.ss, pick->ai_addr, pick->ai_addrlen);
    out.len = pick->ai_addrlen;
  }
  freeaddrinfo(res);
  if (!pick)
    return "host '" + e.host + "' has no " +
           (family == AF_INET6  ? "IPv6"
            : family == AF_INET ? "IPv4"
                                : "IPv4 or IPv6") +
           " address";
  return out;
}

LinkTunnel::LinkTunnel(const TunnelEndpoint& local, const std::vector<TunnelEndpoint>& peers) {
  auto bound = resolve_endpoint(local, AF_UNSPEC);
  if (!bound.ok()) {
    error_ = "link tunnel: bind address: " + bound.error();
    return;
  }
  sockaddr_storage me = bound.value().ss;
  const socklen_t me_len = bound.value().len;
  for (const TunnelEndpoint& p : peers) {
    auto r = resolve_endpoint(p, me.ss_family);
    if (!r.ok()) {
      // Say "different families" when the host has an address, only of the other family.
      error_ = resolve_endpoint(p, AF_UNSPEC).ok()
                   ? "link tunnel: peer " + p.host + " and bind address " + local.host +
                         " are of different families (" + r.error() + ")"
                   : "link tunnel: peer: " + r.error();
      return;
    }
    peers_.push_back(Peer{r.value(), {}, {}, {}});
  }
  if (peers_.empty()) {
    error_ = "link tunnel: no peer";
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

std::uint8_t* LinkTunnel::next_tx(std::size_t peer, TunnelKind kind, std::uint16_t link) {
  if (tx_n_ == tx_.size() || peer >= peers_.size()) return nullptr;
  tx_[tx_n_].peer = peer;
  std::uint8_t* h = tx_[tx_n_].buf.data();
  h[0] = kMagic0;
  h[1] = kMagic1;
  h[2] = kVersion;
  h[3] = static_cast<std::uint8_t>(kind);
  put16(h + 4, link);
  put16(h + 6, seq(peers_[peer].tx_seq, link)++);
  return h;
}

bool LinkTunnel::send_packet_to(std::size_t peer, std::uint16_t link,
                                std::span<const std::uint8_t> p) {
  if (p.size() < wire::kLrhBytes + wire::kVcrcBytes || p.size() > kTunnelBodyMax) return false;
  std::uint8_t* h = next_tx(peer, TunnelKind::kPacket, link);
  if (!h) return false;
  std::memcpy(h + kTunnelHeaderBytes, p.data(), p.size());
  tx_[tx_n_++].iov = {h, kTunnelHeaderBytes + p.size()};
  ++counters_.tx_packets;
  counters_.tx_bytes += p.size();
  return true;
}

bool LinkTunnel::send_fc_to(std::size_t peer, std::uint16_t link, const link::FcPacket& fc) {
  std::uint8_t* h = next_tx(peer, TunnelKind::kFlowControl, link);
  if (!h) return false;
  link::encode_fc_packet(fc, std::span<std::uint8_t, link::kFcPacketBytes>(h + kTunnelHeaderBytes,
                                                                           link::kFcPacketBytes));
  tx_[tx_n_++].iov = {h, kTunnelHeaderBytes + link::kFcPacketBytes};
  ++counters_.tx_fc;
  return true;
}

bool LinkTunnel::send_hello_to(std::size_t peer, std::uint16_t link,
                               std::span<const std::uint8_t> body) {
  if (body.size() > kTunnelBodyMax) return false;
  std::uint8_t* h = next_tx(peer, TunnelKind::kHello, link);
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
      Peer& to = peers_[tx_[tx_sent_ + i].peer];
      m.msg_name = &to.addr.ss;
      m.msg_namelen = to.addr.len;
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
      tx_[i - tx_sent_].peer = tx_[i].peer;
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
  const auto from = std::find_if(peers_.begin(), peers_.end(),
                                 [&](const Peer& p) { return same_peer(s.from, p.addr.ss); });
  if (from == peers_.end()) {
    ++counters_.rx_foreign;
    return;
  }
  Peer& peer = *from;
  const std::uint8_t* h = s.buf.data();
  if (n < kTunnelHeaderBytes || h[0] != kMagic0 || h[1] != kMagic1 || h[2] != kVersion ||
      h[3] > static_cast<std::uint8_t>(TunnelKind::kHello)) {
    ++counters_.rx_malformed;
    return;
  }
  Frame f;
  f.peer = static_cast<std::size_t>(from - peers_.begin());
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
  if (peer.rx_seen.size() <= f.link) peer.rx_seen.resize(f.link + 1u, false);
  std::uint16_t& want = seq(peer.rx_seq, f.link);
  if (peer.rx_seen[f.link]) {
    const auto gap = static_cast<std::uint16_t>(got - want);
    if (gap < 0x8000) counters_.rx_lost += gap;
  }
  if (!peer.rx_seen[f.link] || static_cast<std::uint16_t>(got - want) < 0x8000) {
    want = static_cast<std::uint16_t>(got + 1);
    peer.rx_seen[f.link] = true;
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
