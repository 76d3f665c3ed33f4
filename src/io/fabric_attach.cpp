// io/fabric_attach.cpp — attaching a Device to an HCA of the fabric daemon (see fabric_attach.hpp).
#include "src/io/fabric_attach.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "src/base/log.hpp"

namespace weft::io {
namespace {
// The word the daemon reads to learn whether it may pull our payloads (cross-memory attach).
volatile std::uint64_t g_attach_probe = kAttachProbeValue;
}  // namespace

namespace fabric_proto {
namespace {

sockaddr_un address(const std::string& path, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;  // abstract: sun_path[0] = 0
  const std::size_t n = std::min(path.size(), sizeof(a.sun_path) - 2);
  std::memcpy(a.sun_path + 1, path.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

}  // namespace

int connect_abstract(const std::string& path) {
  socklen_t len;
  const sockaddr_un a = address(path, len);
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (::connect(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  return s;
}

int listen_abstract(const std::string& path) {
  socklen_t len;
  const sockaddr_un a = address(path, len);
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (::bind(s, reinterpret_cast<const sockaddr*>(&a), len) != 0 || listen(s, 16) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  return s;
}

}  // namespace fabric_proto

FabricLink::~FabricLink() {
  medium.reset();
  if (sock >= 0) close(sock);
}

FabricAttach::~FabricAttach() {
  driver_.reset();
  link_.reset();
}

Result<std::unique_ptr<FabricLink>, IoError> attach_fabric_link(std::string name,
                                                                const FabricAttachOptions& o) {
  auto log = base::get_logger("weft.io");
  if (name.empty()) {
    const char* env = std::getenv("WEFT_FABRIC");
    if (!env || !*env) return IoError::kProtocol;
    name = env;
  }
  AttachRequest req;
  req.hca = o.hca;
  if (req.hca == kAnyHca) {
    const char* env = std::getenv("WEFT_HCA");
    if (env && *env) req.hca = static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10));
  }
  const std::string path = "weft/fabric/" + name;
  const TimeNs end = monotonic_ns() + o.timeout_ns;
  int s = -1;
  for (;;) {
    s = fabric_proto::connect_abstract(path);
    if (s >= 0) break;
    const int e = errno;
    if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN) return IoError::kSystem;
    if (monotonic_ns() >= end) return IoError::kTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto a = std::make_unique<FabricLink>();
  a->sock = s;
  ucred cred{};
  socklen_t cl = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) return IoError::kSystem;
  const char* zc = std::getenv("WEFT_SHM_ZERO_COPY");
  if (o.zero_copy && !(zc && std::strcmp(zc, "0") == 0)) {
    // Let exactly the daemon read our memory (Yama ptrace_scope 1); EINVAL without Yama.
    prctl(PR_SET_PTRACER, static_cast<unsigned long>(cred.pid), 0, 0, 0);
    req.flags |= kAttachWantZeroCopy | kAttachForwardedRx;
    req.probe_addr = reinterpret_cast<std::uint64_t>(&g_attach_probe);
  }
  if (!fabric_proto::send_with_fds(s, &req, sizeof req, nullptr, 0)) return IoError::kClosed;
  int fds[3] = {-1, -1, -1};
  const TimeNs now = monotonic_ns();
  const int n =
      fabric_proto::recv_with_fds(s, &a->reply, sizeof a->reply, fds, end > now ? end - now : 0);
  if (n < 0) return IoError::kTimeout;
  const AttachReply& r = a->reply;
  if (r.magic != kAttachMagic || r.version != kAttachVersion || r.status != AttachStatus::kOk ||
      n != 3) {
    for (int i = 0; i < n; ++i) close(fds[i]);
    log->warn("fabric {}: attach refused (status {})", name, static_cast<unsigned>(r.status));
    return IoError::kProtocol;
  }
  shm::ShmLinkConfig link;
  link.memfd = fds[0];
  link.tx_doorbell = fds[1];
  link.rx_doorbell = fds[2];
  link.ring_bytes = r.ring_bytes;
  link.side_a = false;
  link.peer_pid = cred.pid;
  link.zero_copy_tx = (r.flags & kAttachZeroCopyTx) != 0;
  a->medium = std::make_unique<shm::ShmMedium>(link);
  if (!a->medium->ok()) return IoError::kSystem;
  return a;
}

Result<std::unique_ptr<FabricAttach>, IoError> FabricAttach::connect(std::string name,
                                                                     const FabricAttachOptions& o) {
  auto link = attach_fabric_link(std::move(name), o);
  if (!link) return link.error();
  auto a = std::unique_ptr<FabricAttach>(new FabricAttach());
  a->link_ = std::move(link).value();
  a->medium_ = a->link_->medium.get();
  a->reply_ = a->link_->reply;
  const AttachReply& r = a->reply_;
  a->rng_.reseed(o.seed);
  DeviceConfig cfg;
  cfg.name = "weft-fabric-hca" + std::to_string(r.hca);
  cfg.node_guid = r.node_guid;
  cfg.ports[0].lid = r.lid;
  cfg.crc = CrcMode::kModel;  // the emulated links model CRC failures as drops
  a->device_ = Device::create(cfg, a->rng_);
  if (o.wrap_device) a->device_ = o.wrap_device(std::move(a->device_), r);
  a->driver_ = std::make_unique<Driver>(o.driver);
  a->driver_->attach(*a->device_, *a->medium_);
  return a;
}

}  // namespace weft::io
