// src/ofi/ctrl_socket.cpp — control datagrams on a datagram socket (see ctrl_socket.hpp).
#include "src/ofi/ctrl_socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace weft::ofi {
namespace {

constexpr std::uint32_t kFrameMagic = 0x5746'4354;  // "WFCT"
constexpr std::int64_t kSendRetryNs = 200'000'000;  // a receiver queue full for longer: failed

struct CtrlFrame {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t lid = 0;  // the sender's
  std::uint16_t len = 0;
  std::uint64_t node_id = 0;      // the sender's
  std::uint64_t dst_node_id = 0;  // whom the sender means (0: whoever has the LID)
  std::uint16_t dst_lid = 0;
  std::uint16_t reserved[3] = {};
  std::uint8_t data[kCtrlBytesMax];
};
static_assert(sizeof(CtrlFrame) == 32 + kCtrlBytesMax);

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof(a.sun_path) - 2);
  std::memcpy(a.sun_path + 1, name.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

}  // namespace

CtrlSocket::~CtrlSocket() {
  if (fd_ >= 0) close(fd_);
}

bool CtrlSocket::bind_abstract(const std::string& name) {
  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return false;
  socklen_t len;
  const sockaddr_un a = abstract_address(name, len);
  if (::bind(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return false;
  }
  fd_ = s;
  return true;
}

bool CtrlSocket::abstract_bound(const std::string& name) {
  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return false;
  socklen_t len;
  const sockaddr_un a = abstract_address(name, len);
  // ECONNREFUSED: nobody has the name. Anything else (EPERM: the owner is connected elsewhere,
  // EAGAIN: its queue is full) still means it is bound.
  const bool bound =
      ::connect(s, reinterpret_cast<const sockaddr*>(&a), len) == 0 || errno != ECONNREFUSED;
  close(s);
  return bound;
}

bool CtrlSocket::bind_udp(std::uint32_t ip) {
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return false;
  const int buf = 1 << 20;
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return false;
  }
  udp_port_ = ntohs(a.sin_port);
  fd_ = s;
  return true;
}

bool CtrlSocket::send(const NodeAddr& self, const NodeAddr& dst, const sockaddr* to,
                      socklen_t to_len, std::span<const std::uint8_t> msg) {
  if (msg.size() > kCtrlBytesMax || fd_ < 0) return false;
  CtrlFrame f;
  f.lid = self.lid;
  f.node_id = self.node_id;
  f.dst_node_id = dst.node_id;
  f.dst_lid = dst.lid;
  f.len = static_cast<std::uint16_t>(msg.size());
  std::memcpy(f.data, msg.data(), msg.size());
  const std::size_t bytes = offsetof(CtrlFrame, data) + msg.size();
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    const ssize_t n = sendto(fd_, &f, bytes, MSG_NOSIGNAL, to, to_len);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n >= 0 || (errno != EAGAIN && errno != EINTR && errno != ENOBUFS)) return false;
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1'000'000'000LL + (t.tv_nsec - t0.tv_nsec) > kSendRetryNs)
      return false;
    timespec nap{0, 50'000};
    nanosleep(&nap, nullptr);
  }
}

bool CtrlSocket::send_abstract(const NodeAddr& self, const NodeAddr& dst, const std::string& name,
                               std::span<const std::uint8_t> msg) {
  socklen_t len;
  const sockaddr_un a = abstract_address(name, len);
  return send(self, dst, reinterpret_cast<const sockaddr*>(&a), len, msg);
}

bool CtrlSocket::send_udp(const NodeAddr& self, const NodeAddr& dst, std::uint32_t ip,
                          std::uint16_t port, std::span<const std::uint8_t> msg) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  return send(self, dst, reinterpret_cast<const sockaddr*>(&a), sizeof a, msg);
}

std::size_t CtrlSocket::poll(const NodeAddr& self, const MediumPort::CtrlFn& fn,
                             std::size_t max_msgs) {
  std::size_t got = 0;
  while (got < max_msgs) {
    CtrlFrame f;
    const ssize_t n = recv(fd_, &f, sizeof f, MSG_DONTWAIT);
    if (n < 0) break;
    if (n < static_cast<ssize_t>(offsetof(CtrlFrame, data)) || f.magic != kFrameMagic ||
        f.len > kCtrlBytesMax || static_cast<std::size_t>(n) != offsetof(CtrlFrame, data) + f.len)
      continue;  // not a control frame
    // Meant for a former owner of the name, or an address naming this socket with another LID.
    if ((f.dst_node_id && f.dst_node_id != self.node_id) || (f.dst_lid && f.dst_lid != self.lid))
      continue;
    fn(NodeAddr{f.node_id, f.lid}, std::span<const std::uint8_t>(f.data, f.len));
    ++got;
  }
  return got;
}

std::uint16_t CtrlSocket::claim_lid(std::uint16_t first, std::uint16_t count,
                                    const std::function<std::string(std::uint16_t)>& name_of) {
  static std::atomic<std::uint32_t> opened{0};
  const auto pid = static_cast<std::uint64_t>(getpid());
  const std::uint32_t start =
      static_cast<std::uint32_t>((pid * 2654435761u + opened.fetch_add(1) * 40503u) % count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto cand = static_cast<std::uint16_t>(first + (start + i) % count);
    if (bind_abstract(name_of(cand))) return cand;
    if (errno != EADDRINUSE) break;
  }
  return 0;
}

}  // namespace weft::ofi
