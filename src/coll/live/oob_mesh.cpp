// coll/live/oob_mesh.cpp — see oob_mesh.hpp.
#include "src/coll/live/oob_mesh.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <thread>

#include "src/io/clock.hpp"
#include "src/io/fabric_attach.hpp"

namespace weft::coll::live {
namespace {

constexpr std::uint32_t kHelloMagic = 0x57434f48;    // "WCOH"
constexpr std::uint32_t kBarrierMagic = 0x57434f42;  // "WCOB"
// How long a connector waits before trying a name nobody listens on yet again.
constexpr auto kConnectRetry = std::chrono::milliseconds(5);

struct Hello {
  std::uint32_t magic, rank, size, reserved;
  std::uint64_t shape;
};

TimeNs left(TimeNs end) {
  const TimeNs now = io::monotonic_ns();
  return end > now ? end - now : 0;
}

}  // namespace

OobMesh::OobMesh(int rank, int size) : rank_(rank), socks_(static_cast<std::size_t>(size), -1) {}

OobMesh::~OobMesh() {
  for (int s : socks_)
    if (s >= 0) close(s);
}

Result<std::unique_ptr<OobMesh>, std::string> OobMesh::create(const std::string& prefix, int rank,
                                                              int size, std::uint64_t shape,
                                                              TimeNs timeout_ns) {
  if (size < 1 || rank < 0 || rank >= size) return std::string("bad rank or size");
  std::unique_ptr<OobMesh> m(new OobMesh(rank, size));
  const TimeNs end = io::monotonic_ns() + timeout_ns;
  const auto name = [&](int r) { return "weft/" + prefix + std::to_string(r); };
  int ls = -1;
  if (rank + 1 < size) {
    ls = io::fabric_proto::listen_abstract(name(rank));
    if (ls < 0)
      return "cannot bind " + name(rank) + ": " + std::string(std::strerror(errno)) +
             " (another job with the same name?)";
  }
  struct CloseListener {
    int fd;
    ~CloseListener() {
      if (fd >= 0) close(fd);
    }
  } closer{ls};
  const Hello mine{kHelloMagic, static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size),
                   0, shape};
  for (int p = 0; p < rank; ++p) {
    int s = -1;
    for (;;) {
      s = io::fabric_proto::connect_abstract(name(p));
      if (s >= 0) break;
      if (errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN)
        return "cannot connect to rank " + std::to_string(p) + ": " + std::strerror(errno);
      if (left(end) == 0) return "timed out connecting to rank " + std::to_string(p);
      std::this_thread::sleep_for(kConnectRetry);
    }
    m->socks_[static_cast<std::size_t>(p)] = s;
    if (!m->send(p, &mine, sizeof mine))
      return "lost rank " + std::to_string(p) + " during the handshake";
  }
  for (int k = rank + 1; k < size; ++k) {
    if (!io::sock::wait_readable(ls, left(end)))
      return "timed out waiting for rank " + std::to_string(k);
    const int s = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) return std::string("accept failed: ") + std::strerror(errno);
    Hello h{};
    int fds[io::sock::kFdsMax];
    if (io::sock::recv_with_fds(s, &h, sizeof h, fds, left(end)) != 0 || h.magic != kHelloMagic) {
      close(s);
      return std::string("bad or no hello from a peer");
    }
    if (h.size != mine.size || h.shape != mine.shape || static_cast<int>(h.rank) <= rank ||
        h.rank >= mine.size || m->socks_[h.rank] >= 0) {
      close(s);
      return "rank " + std::to_string(h.rank) +
             " disagrees on the job (size, medium, lanes, slots, slot size) or its rank is taken";
    }
    m->socks_[h.rank] = s;
  }
  return m;
}

bool OobMesh::send(int peer, const void* data, std::size_t len) {
  return io::sock::send_with_fds(socks_[static_cast<std::size_t>(peer)], data, len, nullptr, 0);
}

bool OobMesh::recv(int peer, void* data, std::size_t len, TimeNs timeout_ns) {
  int fds[io::sock::kFdsMax];
  return io::sock::recv_with_fds(socks_[static_cast<std::size_t>(peer)], data, len, fds,
                                 timeout_ns) == 0;
}

bool OobMesh::barrier(TimeNs timeout_ns, const std::function<void(TimeNs)>& idle) {
  // How long idle() runs before the sockets are looked at again (a barrier waits this long
  // more at most).
  constexpr TimeNs kIdleSliceNs = 1'000'000;
  const TimeNs end = io::monotonic_ns() + timeout_ns;
  const std::uint32_t here = kBarrierMagic;
  for (int p = 0; p < size(); ++p)
    if (p != rank_ && !send(p, &here, sizeof here)) return false;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    while (idle && !io::sock::wait_readable(socks_[static_cast<std::size_t>(p)], 0)) {
      if (left(end) == 0) return false;
      idle(std::min(left(end), kIdleSliceNs));
    }
    std::uint32_t got = 0;
    if (!recv(p, &got, sizeof got, left(end)) || got != kBarrierMagic) return false;
  }
  return true;
}

int OobMesh::hung_up_peer() const {
  std::vector<pollfd> fds;
  fds.reserve(socks_.size());
  for (int s : socks_) fds.push_back({s, POLLRDHUP, 0});  // poll() skips the -1 entry
  int r;
  do r = poll(fds.data(), fds.size(), 0);
  while (r < 0 && errno == EINTR);
  if (r <= 0) return -1;
  for (std::size_t p = 0; p < fds.size(); ++p)
    if (fds[p].revents & (POLLRDHUP | POLLHUP | POLLERR)) return static_cast<int>(p);
  return -1;
}

}  // namespace weft::coll::live
