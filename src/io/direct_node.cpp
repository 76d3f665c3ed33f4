// io/direct_node.cpp — rendezvous, handshake and QP helpers of direct mode (see direct_node.hpp).
#include "src/io/direct_node.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "src/base/log.hpp"
#include "src/io/unix_socket.hpp"

namespace weft::io {
namespace {

constexpr std::uint32_t kHelloMagic = 0x5746444E;  // "WFDN"
constexpr std::uint32_t kHelloVersion = 1;
constexpr std::uint32_t kWantZeroCopy = 1;
constexpr std::uint32_t kCanReadPeer = 2;
constexpr std::uint64_t kProbeValue = 0x57454654'50524F42ull;
// The word a peer reads to learn whether cross-memory attach works between us.
volatile std::uint64_t g_probe = kProbeValue;

// share_pool's message (with the memfd) and accept_pool's answer.
constexpr std::uint32_t kPoolMagic = 0x5746504C;   // "WFPL"
constexpr std::uint32_t kPoolMapped = 0x5746504D;  // "WFPM"
struct PoolMsg {
  std::uint32_t magic;
  std::uint32_t reserved;
  std::uint64_t base;  // the pool's address in the sender
  std::uint64_t bytes;
};

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t flags;
  std::uint16_t lid;
  std::uint16_t reserved;
  std::uint64_t ring_bytes;
  std::uint64_t probe_addr;
};

std::shared_ptr<spdlog::logger> log() {
  return base::get_logger("weft.io");
}

sockaddr_un address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = "weft/" + name;  // abstract: sun_path[0] = 0
  const std::size_t n = std::min(path.size(), sizeof(a.sun_path) - 2);
  std::memcpy(a.sun_path + 1, path.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

using sock::recv_with_fds;  // src/io/unix_socket.hpp
using sock::send_with_fds;
using sock::wait_readable;

bool can_read(pid_t pid, std::uint64_t addr) {
  std::uint64_t v = 0;
  iovec l{&v, sizeof v};
  iovec r{reinterpret_cast<void*>(addr), sizeof v};
  return process_vm_readv(pid, &l, 1, &r, 1, 0) == sizeof v && v == kProbeValue;
}

bool zero_copy_wanted(const DirectOptions& o) {
  const char* env = std::getenv("WEFT_SHM_ZERO_COPY");
  if (env && std::strcmp(env, "0") == 0) return false;
  return o.zero_copy;
}

}  // namespace

std::string_view to_string(IoError e) {
  switch (e) {
    case IoError::kAddressInUse:
      return "address in use";
    case IoError::kTimeout:
      return "timeout";
    case IoError::kProtocol:
      return "protocol error";
    case IoError::kClosed:
      return "peer closed";
    case IoError::kSystem:
      return "system error";
  }
  return "?";
}

DirectNode::~DirectNode() {
  driver_.reset();
  if (medium_) {
    const auto& c = medium_->counters();
    log()->info(
        "shm stats: tx wire {} by-ref {} full {} | rx wire {} by-ref {} | cma calls {} bytes {} "
        "errors {} | pool bytes {} | copied by peer {} for peer {} | doorbells {} dropped {}",
        c.tx_wire, c.tx_by_ref, c.tx_full, c.rx_wire, c.rx_by_ref, c.cma_calls, c.cma_bytes,
        c.cma_errors, c.pool_bytes, c.delegated_bytes, c.served_bytes, c.doorbells, c.dropped_dead);
  }
  if (sock_ >= 0) close(sock_);
}

void DirectNode::use_medium(std::unique_ptr<Medium> m) {
  driver_->detach(*device_);
  data_medium_ = std::move(m);
  driver_->attach(*device_, *data_medium_);
}

Result<std::unique_ptr<DirectNode>, IoError> DirectNode::handshake(int sock, bool side_a,
                                                                   const DirectOptions& opts) {
  auto node = std::unique_ptr<DirectNode>(new DirectNode());
  node->sock_ = sock;
  ucred cred{};
  socklen_t cl = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) return IoError::kSystem;
  node->peer_pid_ = cred.pid;
  // Let exactly this peer attach to our memory (Yama ptrace_scope 1); EINVAL without Yama.
  prctl(PR_SET_PTRACER, static_cast<unsigned long>(cred.pid), 0, 0, 0);
  const bool want = zero_copy_wanted(opts);
  node->lid_ = side_a ? 1 : 2;
  node->peer_lid_ = side_a ? 2 : 1;

  shm::ShmLinkConfig link;
  // Until the medium owns them, the link's fds close with this guard (every error return).
  struct FdGuard {
    shm::ShmLinkConfig* l;
    ~FdGuard() {
      if (!l) return;
      for (int fd : {l->memfd, l->rx_doorbell, l->tx_doorbell})
        if (fd >= 0) close(fd);
    }
  } guard{&link};
  link.side_a = side_a;
  link.peer_pid = cred.pid;
  Hello mine{kHelloMagic,
             kHelloVersion,
             want ? kWantZeroCopy : 0u,
             node->lid_,
             0,
             opts.ring_bytes,
             reinterpret_cast<std::uint64_t>(&g_probe)};
  Hello theirs{};
  bool peer_reads_me = false;
  if (side_a) {
    const int memfd = memfd_create("weft-shm", MFD_CLOEXEC);
    const int efd_a = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int efd_b = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (memfd < 0 || efd_a < 0 || efd_b < 0 || !shm::ShmMedium::format(memfd, opts.ring_bytes)) {
      for (int fd : {memfd, efd_a, efd_b})
        if (fd >= 0) close(fd);
      return IoError::kSystem;
    }
    const int fds[3] = {memfd, efd_a, efd_b};
    const bool sent = send_with_fds(sock, &mine, sizeof mine, fds, 3);
    link.memfd = memfd;
    link.rx_doorbell = efd_a;  // B rings it when it fills our rx ring
    link.tx_doorbell = efd_b;  // we ring B's
    if (!sent) return IoError::kClosed;
    // B answers with its Hello (flags: whether it can read us).
    int none[4];
    if (recv_with_fds(sock, &theirs, sizeof theirs, none, opts.timeout_ns) < 0)
      return IoError::kTimeout;
    if (theirs.magic != kHelloMagic || theirs.version != kHelloVersion) return IoError::kProtocol;
    peer_reads_me = (theirs.flags & kCanReadPeer) != 0;
    node->zero_copy_rx_ =
        want && (theirs.flags & kWantZeroCopy) && can_read(cred.pid, theirs.probe_addr);
    Hello verdict = mine;
    verdict.flags |= node->zero_copy_rx_ ? kCanReadPeer : 0u;
    if (!send_with_fds(sock, &verdict, sizeof verdict, nullptr, 0)) return IoError::kClosed;
  } else {
    int fds[4] = {-1, -1, -1, -1};
    const int n = recv_with_fds(sock, &theirs, sizeof theirs, fds, opts.timeout_ns);
    if (n != 3 || theirs.magic != kHelloMagic || theirs.version != kHelloVersion) {
      for (int fd : fds)
        if (fd >= 0) close(fd);
      return n < 0 ? IoError::kTimeout : IoError::kProtocol;
    }
    link.memfd = fds[0];
    link.tx_doorbell = fds[1];
    link.rx_doorbell = fds[2];
    link.ring_bytes = theirs.ring_bytes;
    node->zero_copy_rx_ =
        want && (theirs.flags & kWantZeroCopy) && can_read(cred.pid, theirs.probe_addr);
    Hello reply = mine;
    reply.flags |= node->zero_copy_rx_ ? kCanReadPeer : 0u;
    if (!send_with_fds(sock, &reply, sizeof reply, nullptr, 0)) return IoError::kClosed;
    Hello verdict{};
    int none[4];
    if (recv_with_fds(sock, &verdict, sizeof verdict, none, opts.timeout_ns) < 0)
      return IoError::kTimeout;
    peer_reads_me = (verdict.flags & kCanReadPeer) != 0;
  }
  if (side_a) link.ring_bytes = opts.ring_bytes;
  link.zero_copy_tx = want && (theirs.flags & kWantZeroCopy) && peer_reads_me;
  // WEFT_SHM_DELEGATE=1: the peer copies parts of what it sends us by reference (shm_medium.hpp
  // CopyArea). Opt-in: it measured no gain at load 7-15 and was slower on a quiet machine
  // (bench/io/README.md, session 16), and a preempted peer holding a claimed chunk stalls our
  // burst. A peer denied writing here stops.
  const char* delegate = std::getenv("WEFT_SHM_DELEGATE");
  link.delegate_copies = delegate && std::strcmp(delegate, "1") == 0;
  link.by_ref_bytes_max = opts.by_ref_bytes_max;
  // WEFT_SHM_BY_REF_MIB=N: the by-reference bound in MiB (measurements; DirectOptions).
  if (const char* e = std::getenv("WEFT_SHM_BY_REF_MIB"); e && std::atoi(e) > 0)
    link.by_ref_bytes_max = static_cast<std::size_t>(std::atoi(e)) << 20;
  link.run_records = opts.run_records;
  if (const char* e = std::getenv("WEFT_SHM_RUNS"); e && std::strcmp(e, "0") == 0)
    link.run_records = false;
  if (want && !node->zero_copy_rx_)
    log()->warn("shm: cross-memory attach to pid {} not available{}; copying through the ring",
                cred.pid, (theirs.flags & kWantZeroCopy) ? "" : " (peer copies)");

  node->rng_.reseed(opts.seed);
  DeviceConfig cfg;
  cfg.name = side_a ? "weft-shm-a" : "weft-shm-b";
  cfg.node_guid = 0x5746'0000'0000'0000ull | static_cast<std::uint64_t>(getpid());
  cfg.ports[0].lid = node->lid_;
  cfg.crc = CrcMode::kModel;  // shared memory does not corrupt; the ring carries no CRC work
  cfg.ack_delay_ns = opts.ack_delay_ns;
  cfg.ack_coalesce_max = opts.ack_coalesce_max;
  node->device_ = Device::create(cfg, node->rng_);
  node->medium_ = std::make_unique<shm::ShmMedium>(link);
  guard.l = nullptr;
  if (!node->medium_->ok()) return IoError::kSystem;
  node->driver_ = std::make_unique<Driver>(opts.driver);
  node->driver_->attach(*node->device_, *node->medium_);
  return node;
}

Result<std::unique_ptr<DirectNode>, IoError> DirectNode::connect(const std::string& name,
                                                                 const DirectOptions& opts) {
  socklen_t len;
  const sockaddr_un a = address(name, len);
  const TimeNs end = monotonic_ns() + opts.timeout_ns;
  for (;;) {
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return IoError::kSystem;
    if (::connect(s, reinterpret_cast<const sockaddr*>(&a), len) == 0) {
      return handshake(s, false, opts);  // the node owns s, also on failure
    }
    const int e = errno;
    close(s);
    if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN) return IoError::kSystem;
    if (monotonic_ns() >= end) return IoError::kTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool DirectNode::send_oob(std::span<const std::uint8_t> msg) {
  if (msg.size() > kOobBytesMax) return false;
  return send(sock_, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
}

Result<std::vector<std::uint8_t>, IoError> DirectNode::recv_oob(TimeNs timeout_ns) {
  if (!wait_readable(sock_, timeout_ns)) return IoError::kTimeout;
  std::vector<std::uint8_t> buf(kOobBytesMax);
  const ssize_t n = recv(sock_, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n == 0) return IoError::kClosed;
  if (n < 0) return errno == EAGAIN ? IoError::kTimeout : IoError::kSystem;
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

Result<std::size_t, IoError> DirectNode::share_pool(const shm::ShmPool& pool, TimeNs timeout_ns) {
  if (data_medium_) return IoError::kProtocol;
  const PoolMsg m{kPoolMagic, 0, reinterpret_cast<std::uint64_t>(pool.base()), pool.bytes()};
  const int fd = pool.fd();
  if (!send_with_fds(sock_, &m, sizeof m, &fd, 1)) return IoError::kClosed;
  PoolMsg answer{};
  int none[sock::kFdsMax];
  if (recv_with_fds(sock_, &answer, sizeof answer, none, timeout_ns) < 0) return IoError::kTimeout;
  if (answer.magic != kPoolMapped || answer.base != m.base) return IoError::kProtocol;
  // Only now: a by-reference packet from the pool must find it mapped at the peer.
  medium_->add_tx_pool(pool.base(), pool.bytes());
  return pool.bytes();
}

Result<std::size_t, IoError> DirectNode::accept_pool(TimeNs timeout_ns) {
  if (data_medium_) return IoError::kProtocol;
  PoolMsg m{};
  int fds[sock::kFdsMax] = {-1, -1, -1};
  const int n = recv_with_fds(sock_, &m, sizeof m, fds, timeout_ns);
  if (n < 0) return IoError::kTimeout;
  if (n != 1 || m.magic != kPoolMagic) {
    for (int k = 0; k < n; ++k) close(fds[k]);
    return IoError::kProtocol;
  }
  auto pool = shm::ShmPool::map(fds[0], m.bytes);  // owns the fd from here
  if (!pool) return IoError::kSystem;
  medium_->add_rx_pool(m.base, pool->base(), pool->bytes());
  peer_pools_.push_back(std::move(pool));
  const PoolMsg answer{kPoolMapped, 0, m.base, m.bytes};
  if (!send_with_fds(sock_, &answer, sizeof answer, nullptr, 0)) return IoError::kClosed;
  return static_cast<std::size_t>(m.bytes);
}

DirectListener::~DirectListener() {
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<DirectListener>, IoError> DirectListener::bind(const std::string& name) {
  socklen_t len;
  const sockaddr_un a = address(name, len);
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return IoError::kSystem;
  if (::bind(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    close(s);
    return e == EADDRINUSE ? IoError::kAddressInUse : IoError::kSystem;
  }
  if (listen(s, 4) != 0) {
    close(s);
    return IoError::kSystem;
  }
  auto l = std::unique_ptr<DirectListener>(new DirectListener());
  l->fd_ = s;
  l->name_ = name;
  return l;
}

Result<std::unique_ptr<DirectNode>, IoError> DirectListener::accept(const DirectOptions& opts) {
  if (!wait_readable(fd_, opts.timeout_ns)) return IoError::kTimeout;
  const int s = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (s < 0) return IoError::kSystem;
  return DirectNode::handshake(s, true, opts);  // the node owns s, also on failure
}

Errc connect_rc(QueuePair* qp, const RcPeer& peer, std::uint32_t sq_psn, const RcOptions& o) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  if (Errc e = qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags); e != Errc::kOk)
    return e;
  a.qp_state = QpState::kRtr;
  a.av.dlid = peer.lid;
  a.path_mtu = o.mtu;
  a.dest_qpn = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = o.rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  if (Errc e = qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer);
      e != Errc::kOk)
    return e;
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.max_rd_atomic = o.rd_atomic;
  return qp->modify(a,
                    kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic);
}

Errc connect_ud(QueuePair* qp, std::uint32_t qkey) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = qkey;
  if (Errc e = qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey); e != Errc::kOk) return e;
  a.qp_state = QpState::kRtr;
  if (Errc e = qp->modify(a, kQpState); e != Errc::kOk) return e;
  a.qp_state = QpState::kRts;
  a.sq_psn = 0;
  return qp->modify(a, kQpState | kQpSqPsn);
}

}  // namespace weft::io
