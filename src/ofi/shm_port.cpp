// src/ofi/shm_port.cpp — the shared-memory MediumPort (FI_WEFT_MEDIUM=shm, the default): one
// src/io ShmMedium link per pair of ports, in as many processes as there are.
//
// Identity. A port claims a LID by binding the abstract Unix socket "weft/ofi/<fabric>/<lid>"
// (abstract: system-wide unique, nothing in the file system, gone with the process); the first
// candidate is a hash of the pid, then the next free one. The node id is (pid << 32 | a clock
// stamp << 16 | lid), so a LID reused by a later process does not match an old address. The
// endpoint address (getname) carries both: enough to reach the peer.
//
// Links. The first ctrl_send (or packet) towards a LID this port has no link to connects to that
// socket (the connector is side A of src/io's segment): it creates the memfd segment and both
// doorbell eventfds, sends them with a Hello (SCM_RIGHTS) and may use the link at once (what it
// writes waits in the ring until the peer maps it). The peer accepts during its progress and
// answers HelloAck; each side then probes whether it can read the other's memory
// (process_vm_readv) and tells it, so payloads of 1 KiB and more travel by reference in the
// directions where that works. Nothing here blocks: the handshake advances in ctrl_poll.
// If both sides connect at once, the pair has two links; each side keeps sending on the first
// one it had and receives on both, so every direction stays on one link (RC needs the order).
//
// Control datagrams (the provider's ConnReq/ConnRep/ConnRej) travel on the link's socket
// (SOCK_SEQPACKET: reliable, ordered, message boundaries).
//
// Peer death: the link's pidfd or a hang-up on its socket marks it dead; tx and ctrl_send towards
// it fail from then on (the RC engine's retries then move the QPs to the error state).
//
// Waiting: wait_fd() is an epoll descriptor over the listener, every link socket and pidfd. The
// rings' doorbells are not armed (manual progress never announces that it sleeps), so a blocked
// fi_cq_sread sees ring traffic through its bounded poll timeout (at most 1 ms).
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "src/io/shm/shm_medium.hpp"
#include "src/ofi/ofi.hpp"
#include "weft/forwarding_device.hpp"

namespace weft::ofi {
namespace {

namespace shm = weft::io::shm;

constexpr std::uint32_t kMagic = 0x5746'4F53;  // "WFOS"
constexpr std::uint16_t kLidFirst = 1, kLidCount = 0xBFFF;
constexpr std::uint32_t kCanRead = 1;
constexpr TimeNs kEventCheckNs = 100'000;  // ctrl_poll looks at the sockets at most this often
constexpr std::size_t kDrainBurst = 256;
constexpr std::uint64_t kProbeValue = 0x57454654'4F464950ull;
volatile std::uint64_t g_probe = kProbeValue;

enum class Kind : std::uint32_t { kHello = 1, kHelloAck = 2, kVerdict = 3, kCtrl = 4 };

struct Msg {
  std::uint32_t magic;
  Kind kind;
  std::uint64_t node_id;      // the sender's
  std::uint64_t dst_node_id;  // Hello: whom the connector means (0: whoever has the LID)
  std::uint64_t probe_addr;   // Hello/HelloAck: a word the peer reads to test cross-memory attach
  std::uint64_t ring_bytes;
  std::uint16_t lid;  // the sender's
  std::uint16_t len;  // kCtrl: bytes used in data
  std::uint32_t flags;
  std::uint8_t data[kCtrlBytesMax];
};

TimeNs now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + static_cast<TimeNs>(ts.tv_nsec);
}

sockaddr_un address(const std::string& fabric, std::uint16_t lid, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = "weft/ofi/" + fabric + "/" + std::to_string(lid);
  const std::size_t n = std::min(path.size(), sizeof(a.sun_path) - 2);
  std::memcpy(a.sun_path + 1, path.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

bool can_read(pid_t pid, std::uint64_t addr) {
  std::uint64_t v = 0;
  iovec l{&v, sizeof v};
  iovec r{reinterpret_cast<void*>(addr), sizeof v};
  return process_vm_readv(pid, &l, 1, &r, 1, 0) == sizeof v && v == kProbeValue;
}

bool zero_copy_wanted() {
  const char* env = std::getenv("WEFT_SHM_ZERO_COPY");
  return !(env && std::strcmp(env, "0") == 0);
}

bool send_msg(int sock, const Msg& m, const int* fds, std::size_t nfds) {
  iovec iov{const_cast<Msg*>(&m), sizeof m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 3)]{};
  if (nfds) {
    h.msg_control = ctl;
    h.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do n = sendmsg(sock, &h, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof m);
}

// One message, nonblocking: >0 got one (fds filled, *nfds set), 0 nothing, <0 closed or error.
int recv_msg(int sock, Msg& m, int* fds, int* nfds) {
  iovec iov{&m, sizeof m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)]{};
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  const ssize_t n = recvmsg(sock, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
  if (n == 0) return -1;
  *nfds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int k = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*nfds < 4)
        fds[(*nfds)++] = fd;
      else
        close(fd);
    }
  }
  if (n != static_cast<ssize_t>(sizeof m) || m.magic != kMagic) {
    for (int i = 0; i < *nfds; ++i) close(fds[i]);
    return -1;
  }
  return 1;
}

struct Link {
  int sock = -1;
  std::unique_ptr<shm::ShmMedium> medium;  // null on the accepting side until the Hello
  NodeAddr peer{};
  pid_t pid = 0;
  bool dead = false;
  bool dying = false;  // the peer is gone: rx_burst drains what it left in the ring, then dead
  bool dirty = false;  // tx since the last flush
  bool can_read_peer = false;  // our probe of the peer's memory worked (process_vm_readv)
  std::size_t ring_bytes = 0;  // of each direction's ring; a record's body is at most a quarter
  ~Link() {
    if (medium) {
      const auto& c = medium->counters();
      WEFT_INFO(FI_LOG_DOMAIN,
                "shm link to lid %u (pid %d): tx wire %llu by-ref %llu full %llu | rx wire %llu "
                "by-ref %llu | cma calls %llu errors %llu | dropped %llu | prefaulted pages %llu",
                peer.lid, (int)pid, (unsigned long long)c.tx_wire, (unsigned long long)c.tx_by_ref,
                (unsigned long long)c.tx_full, (unsigned long long)c.rx_wire,
                (unsigned long long)c.rx_by_ref, (unsigned long long)c.cma_calls,
                (unsigned long long)c.cma_errors, (unsigned long long)c.dropped_dead,
                (unsigned long long)c.prefaulted_pages);
    }
    if (sock >= 0) close(sock);
  }
};

// Direct messages (MediumPort::tx_direct) travel as IBA-shaped packets with a BTH opcode from
// the manufacturer-specific range (IBA 9.2, Table 35: 0xC0-0xFF), so they are ordinary records
// on the ring, ordered with the Device's packets, and src/io's ShmMedium carries them unchanged
// (always copied: by reference needs an RC opcode). LRH (no GRH) + BTH, then the message.
constexpr std::uint8_t kDirectOpcode = 0xC0;
constexpr std::size_t kDirectHeaderBytes = 8 + 12;  // LRH + BTH (IBA 7.7, 9.2)

// What ShmMedium::rx_burst hands packets to: the port's Device, except that direct messages go
// to the provider's handler. Everything else is the Device's own.
class TapDevice final : public ForwardingDevice {
 public:
  MediumPort::DirectFn fn = nullptr;
  void* ctx = nullptr;

  using ForwardingDevice::on_packet;
  void on_packet(std::span<const std::uint8_t> wire, TimeNs now) override {
    if (wire.size() >= kDirectHeaderBytes + 6 && wire[8] == kDirectOpcode && (wire[1] & 3) == 2) {
      const std::size_t pad = (wire[9] >> 4) & 3;
      if (wire.size() >= kDirectHeaderBytes + pad + 6)
        fn(ctx, wire.subspan(kDirectHeaderBytes, wire.size() - kDirectHeaderBytes - pad - 6));
      return;
    }
    target_->on_packet(wire, now);
  }
};

class ShmPort final : public MediumPort {
 public:
  ShmPort(std::string fabric, NodeAddr self, int listen_fd, int epfd)
      : fabric_(std::move(fabric)), self_(self), listen_fd_(listen_fd), epfd_(epfd) {}
  ~ShmPort() override {
    links_.clear();
    close(listen_fd_);
    close(epfd_);
  }

  NodeAddr local() const override { return self_; }
  void bind_device(const Device& dev) override { dev_ = &dev; }

  bool tx(const TxPacket& pkt) override {
    Link* l = route(pkt.dlid, 0);
    if (!l || !dev_) return false;
    if (!l->medium->tx_packet(*dev_, pkt)) return false;
    if (!l->dirty) {
      l->dirty = true;
      dirty_.push_back(l);
    }
    return true;
  }

  void tx_flush() override {
    for (Link* l : dirty_) {
      l->dirty = false;
      l->medium->tx_publish();
    }
    dirty_.clear();
  }

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    std::size_t n = 0;
    // By index: a direct message's handler may send (a FIN), which may append a link.
    for (std::size_t i = 0; i < links_.size(); ++i) {
      Link* l = links_[i].get();
      if (!l->medium || l->dead) continue;
      if (l->dying) {
        // What the peer published before it exited (its last ACKs) still counts.
        while (l->medium->rx_burst(dev, now, kDrainBurst) > 0) {
        }
        l->medium->on_event(now);
        mark_dead(*l);
        continue;
      }
      if (n >= max_packets) continue;
      if (tap_.fn) {
        tap_.set_target(&dev);
        n += l->medium->rx_burst(tap_, now, max_packets - n);
      } else {
        n += l->medium->rx_burst(dev, now, max_packets - n);
      }
    }
    return n;
  }

  bool tx_direct(const NodeAddr& dst, std::span<const std::uint8_t> head,
                 std::span<const std::uint8_t> body) override {
    direct_full_ = false;
    if (!dev_ || head.size() > TxPacket::kHeaderBytesMax - kDirectHeaderBytes) return false;
    Link* l = route(dst.lid, dst.node_id);
    if (!l || l->dying || l->dead || !l->medium || l->medium->peer_dead()) return false;
    const auto pad = static_cast<std::uint8_t>((4 - body.size() % 4) % 4);
    // The ring's record bound (RingProducer::body_max): a larger message takes the rendezvous.
    if (kDirectHeaderBytes + head.size() + body.size() + pad + 6 > l->ring_bytes / 4) return false;
    TxPacket pkt;
    // LRH PktLen (IBA 7.7.8) is 11 bits of 4-byte words: a direct record above 8 KiB cannot say
    // its length there and says 0; the tap takes the length from the ring record.
    std::size_t words = (kDirectHeaderBytes + head.size() + body.size() + pad + 4) / 4;
    if (words > 0x7FF) words = 0;
    std::uint8_t* h = pkt.headers.data();
    h[0] = 0;  // VL 0, LVer 0
    h[1] = 2;  // SL 0, LNH 2: IBA local, BTH follows (IBA 7.7.1)
    h[2] = static_cast<std::uint8_t>(dst.lid >> 8);
    h[3] = static_cast<std::uint8_t>(dst.lid);
    h[4] = static_cast<std::uint8_t>((words >> 8) & 7);
    h[5] = static_cast<std::uint8_t>(words);
    h[6] = static_cast<std::uint8_t>(self_.lid >> 8);
    h[7] = static_cast<std::uint8_t>(self_.lid);
    std::memset(h + 8, 0, 12);
    h[8] = kDirectOpcode;
    h[9] = static_cast<std::uint8_t>(pad << 4);
    std::memcpy(h + kDirectHeaderBytes, head.data(), head.size());
    pkt.header_bytes = static_cast<std::uint16_t>(kDirectHeaderBytes + head.size());
    pkt.payload = body.data();
    pkt.payload_bytes = static_cast<std::uint32_t>(body.size());
    pkt.pad_bytes = pad;
    if (!l->medium->tx_packet(*dev_, pkt)) {
      direct_full_ = true;
      return false;
    }
    if (!l->dirty) {
      l->dirty = true;
      dirty_.push_back(l);
    }
    tx_flush();
    return true;
  }
  bool direct_full() const override { return direct_full_; }

  void set_direct_handler(DirectFn fn, void* ctx) override {
    tap_.fn = fn;
    tap_.ctx = ctx;
  }

  // The node id starts with the owner's pid (open_shm_port): a peer in this process answers
  // only when this process progresses its domain, which a waiting fi_av_insert does not.
  bool settles_before_use(const NodeAddr& peer) const override {
    return (peer.node_id >> 32) != (self_.node_id >> 32);
  }

  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    if (msg.size() > kCtrlBytesMax) return false;
    Link* l = route(dst.lid, dst.node_id);
    if (!l || l->dying) return false;
    if (dst.node_id && l->peer.node_id && l->peer.node_id != dst.node_id) return false;
    Msg m = header(Kind::kCtrl);
    m.len = static_cast<std::uint16_t>(msg.size());
    std::memcpy(m.data, msg.data(), msg.size());
    if (send_msg(l->sock, m, nullptr, 0)) return true;
    mark_dead(*l);
    return false;
  }

  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    if (now - last_check_ < kEventCheckNs && !expect_ && !urgent) return 0;
    last_check_ = now;
    epoll_event evs[16];
    const int ready = epoll_wait(epfd_, evs, 16, 0);
    if (ready <= 0) {
      expect_ = false;
      return 0;
    }
    std::size_t got = 0;
    for (int i = 0; i < ready; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      // By index: a control datagram's handler may send to a new peer, which appends a link
      // (Links are heap objects, so `l` stays valid).
      for (std::size_t j = 0; j < links_.size(); ++j) {
        Link& l = *links_[j];
        if (l.dead || l.dying) continue;
        if (l.medium && fd == l.medium->event_fd()) {
          dying(l);
        } else if (fd == l.sock) {
          got += read_link(l, fn, max_msgs - std::min(max_msgs, got));
        }
      }
    }
    reap();
    // Something may still be queued (max_msgs reached): look again on the next call.
    expect_ = got >= max_msgs;
    return got;
  }

  int wait_fd() const override { return epfd_; }

  // Every live link's ring asks its producer to ring our doorbell (ShmMedium::prepare_sleep);
  // the epoll set covers control traffic, new links and peer deaths.
  bool arm_sleep(std::vector<pollfd>& fds) override {
    fds.push_back({epfd_, POLLIN, 0});
    for (const auto& lp : links_) {
      Link& l = *lp;
      if (!l.medium || l.dead) continue;
      if (l.dying || !l.medium->prepare_sleep()) return false;  // something to read already
      fds.push_back({l.medium->rx_wait_fd(), POLLIN, 0});
    }
    return true;
  }
  void disarm_sleep(std::span<const pollfd> fds) override {
    for (const auto& lp : links_)
      if (lp->medium && !lp->dead) lp->medium->finish_sleep();
    // Woken by a socket or pidfd: let the next ctrl_poll look at once, past its rate limit.
    for (const pollfd& p : fds)
      if (p.fd == epfd_ && p.revents) expect_ = true;
  }

  int direct_read_pid(const NodeAddr& peer) const override {
    auto it = routes_.find(peer.lid);
    if (it == routes_.end()) return 0;
    const Link& l = *it->second;
    if (l.dead || l.dying || !l.can_read_peer) return 0;
    if (peer.node_id && l.peer.node_id && peer.node_id != l.peer.node_id) return 0;
    return l.pid;
  }

 private:
  Msg header(Kind k) const {
    Msg m{};
    m.magic = kMagic;
    m.kind = k;
    m.node_id = self_.node_id;
    m.lid = self_.lid;
    m.probe_addr = reinterpret_cast<std::uint64_t>(&g_probe);
    return m;
  }

  void watch(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  void unwatch(int fd) {
    if (fd >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  }

  // The peer exited or hung up: no more control traffic; rx_burst drains the ring, then kills.
  void dying(Link& l) {
    if (!l.medium) {
      mark_dead(l);
      return;
    }
    l.dying = true;
    unwatch(l.sock);
    unwatch(l.medium->event_fd());
  }

  void mark_dead(Link& l) {
    if (l.dead) return;
    l.dead = true;
    if (!l.dying) {
      unwatch(l.sock);
      if (l.medium) unwatch(l.medium->event_fd());
    }
    for (auto it = routes_.begin(); it != routes_.end();)
      it = it->second == &l ? routes_.erase(it) : std::next(it);
    if (cache_ == &l) cache_ = nullptr;
    WEFT_INFO(FI_LOG_DOMAIN, "shm: link to lid %u (pid %d) is down", l.peer.lid, (int)l.pid);
  }

  // Frees dead links (not while tx has them in the dirty list: tx_flush runs before ctrl_poll).
  void reap() {
    if (!dirty_.empty()) return;
    std::erase_if(links_, [](const std::unique_ptr<Link>& l) { return l->dead; });
  }

  // The link packets and control datagrams for `lid` go on; connects on first use.
  Link* route(std::uint16_t lid, std::uint64_t node_id) {
    if (cache_ && cache_lid_ == lid) return cache_;
    auto it = routes_.find(lid);
    Link* l = it != routes_.end() ? it->second : connect(lid, node_id);
    if (l) {
      cache_ = l;
      cache_lid_ = lid;
    }
    return l;
  }

  Link* connect(std::uint16_t lid, std::uint64_t node_id) {
    if (lid == self_.lid) return nullptr;
    socklen_t alen;
    const sockaddr_un a = address(fabric_, lid, alen);
    auto l = std::make_unique<Link>();
    l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->sock < 0) return nullptr;
    if (::connect(l->sock, reinterpret_cast<const sockaddr*>(&a), alen) != 0) {
      WEFT_INFO(FI_LOG_DOMAIN, "shm: no node with lid %u: %s", lid, std::strerror(errno));
      return nullptr;
    }
    ucred cred{};
    socklen_t cl = sizeof cred;
    if (getsockopt(l->sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) return nullptr;
    l->pid = cred.pid;
    l->peer = {node_id, lid};
    const std::size_t ring = shm::kRingBytesDefault;
    const int memfd = memfd_create("weft-ofi-shm", MFD_CLOEXEC);
    const int efd_a = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int efd_b = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (memfd < 0 || efd_a < 0 || efd_b < 0 || !shm::ShmMedium::format(memfd, ring)) {
      for (int fd : {memfd, efd_a, efd_b})
        if (fd >= 0) close(fd);
      return nullptr;
    }
    Msg hello = header(Kind::kHello);
    hello.dst_node_id = node_id;
    hello.ring_bytes = ring;
    hello.flags = zero_copy_wanted() ? kCanRead : 0;  // Hello: "I want zero copy"
    const int fds[3] = {memfd, efd_a, efd_b};
    const bool sent = send_msg(l->sock, hello, fds, 3);
    shm::ShmLinkConfig cfg;
    cfg.memfd = memfd;
    cfg.ring_bytes = ring;
    cfg.side_a = true;
    cfg.rx_doorbell = efd_a;
    cfg.tx_doorbell = efd_b;
    cfg.peer_pid = cred.pid;
    cfg.zero_copy_tx = false;  // until the peer says it can read us
    l->ring_bytes = ring;
    l->medium = std::make_unique<shm::ShmMedium>(cfg);
    if (!sent || !l->medium->ok()) return nullptr;
    // Before anything is sent on it, while the peer maps its side (ShmMedium::prefault_rings:
    // otherwise the first pass through the rings pays the hypervisor's first-touch cost per page).
    l->medium->prefault_rings(true);
    watch(l->sock);
    if (l->medium->event_fd() >= 0) watch(l->medium->event_fd());
    Link* raw = l.get();
    links_.push_back(std::move(l));
    routes_.emplace(lid, raw);
    expect_ = true;
    return raw;
  }

  void accept_all() {
    for (;;) {
      const int s = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (s < 0) return;
      auto l = std::make_unique<Link>();
      l->sock = s;
      ucred cred{};
      socklen_t cl = sizeof cred;
      if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) continue;
      l->pid = cred.pid;
      watch(s);
      links_.push_back(std::move(l));
      expect_ = true;
    }
  }

  std::size_t read_link(Link& l, const CtrlFn& fn, std::size_t max_msgs) {
    std::size_t got = 0;
    while (got < max_msgs && !l.dead && !l.dying) {
      Msg m;
      int fds[4];
      int nfds = 0;
      const int r = recv_msg(l.sock, m, fds, &nfds);
      if (r == 0) break;
      if (r < 0) {
        dying(l);
        break;
      }
      switch (m.kind) {
        case Kind::kHello:
          on_hello(l, m, fds, nfds);
          break;
        case Kind::kHelloAck: {
          // The connector: the peer told whether it can read us; now we probe it.
          l.peer.node_id = m.node_id;
          const bool want = zero_copy_wanted();
          l.medium->set_zero_copy_tx(want && (m.flags & kCanRead));
          Msg v = header(Kind::kVerdict);
          l.can_read_peer = want && can_read(l.pid, m.probe_addr);
          v.flags = l.can_read_peer ? kCanRead : 0;
          if (!send_msg(l.sock, v, nullptr, 0)) mark_dead(l);
          break;
        }
        case Kind::kVerdict:
          if (l.medium) l.medium->set_zero_copy_tx(zero_copy_wanted() && (m.flags & kCanRead));
          break;
        case Kind::kCtrl:
          if (m.len <= kCtrlBytesMax) {
            fn(l.peer, std::span<const std::uint8_t>(m.data, m.len));
            ++got;
          }
          break;
      }
      for (int i = 0; i < nfds; ++i) close(fds[i]);  // fds not taken by on_hello are -1
    }
    return got;
  }

  void on_hello(Link& l, const Msg& m, int* fds, int nfds) {
    if (l.medium || nfds != 3 || (m.dst_node_id && m.dst_node_id != self_.node_id)) {
      WEFT_WARN(FI_LOG_DOMAIN, "shm: refusing a hello from lid %u (pid %d)", m.lid, (int)l.pid);
      mark_dead(l);
      return;
    }
    shm::ShmLinkConfig cfg;
    cfg.memfd = fds[0];
    cfg.tx_doorbell = fds[1];
    cfg.rx_doorbell = fds[2];
    fds[0] = fds[1] = fds[2] = -1;  // the medium owns them now
    cfg.ring_bytes = m.ring_bytes;
    cfg.side_a = false;
    cfg.peer_pid = l.pid;
    cfg.zero_copy_tx = false;  // until the connector's verdict
    l.ring_bytes = m.ring_bytes;
    l.medium = std::make_unique<shm::ShmMedium>(cfg);
    l.peer = {m.node_id, m.lid};
    if (!l.medium->ok()) {
      mark_dead(l);
      return;
    }
    if (l.medium->event_fd() >= 0) watch(l.medium->event_fd());
    // Keeps an existing link (simultaneous connects): then we never write this one's tx ring.
    const bool sends_here = routes_.emplace(m.lid, &l).second;
    l.medium->prefault_rings(sends_here);  // before the HelloAck lets the connector send (above)
    Msg ack = header(Kind::kHelloAck);
    l.can_read_peer = zero_copy_wanted() && (m.flags & kCanRead) && can_read(l.pid, m.probe_addr);
    ack.flags = l.can_read_peer ? kCanRead : 0;
    if (!send_msg(l.sock, ack, nullptr, 0)) mark_dead(l);
  }

  std::string fabric_;
  NodeAddr self_;
  int listen_fd_;
  int epfd_;
  const Device* dev_ = nullptr;
  TapDevice tap_;
  bool direct_full_ = false;  // the last tx_direct found the ring full
  std::vector<std::unique_ptr<Link>> links_;
  std::map<std::uint16_t, Link*> routes_;
  std::vector<Link*> dirty_;
  Link* cache_ = nullptr;
  std::uint16_t cache_lid_ = 0;
  TimeNs last_check_ = 0;
  bool expect_ = true;  // a socket likely has something: skip the rate limit once
};

}  // namespace

std::unique_ptr<MediumPort> open_shm_port(std::string_view fabric_name) {
  static std::atomic<std::uint32_t> opened{0};
  const std::string fabric(fabric_name);
  const auto pid = static_cast<std::uint64_t>(getpid());
  const std::uint32_t k = opened.fetch_add(1);
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return nullptr;
  const std::uint32_t start =
      static_cast<std::uint32_t>((pid * 2654435761u + k * 40503u) % kLidCount);
  for (std::uint32_t i = 0; i < kLidCount; ++i) {
    const auto lid = static_cast<std::uint16_t>(kLidFirst + (start + i) % kLidCount);
    socklen_t len;
    const sockaddr_un a = address(fabric, lid, len);
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) break;
    if (bind(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
      const int e = errno;
      close(s);
      if (e == EADDRINUSE) continue;
      break;
    }
    if (listen(s, 128) != 0) {
      close(s);
      break;
    }
    const std::uint64_t stamp = static_cast<std::uint64_t>(now_ns()) & 0xFFFF;
    const NodeAddr self{(pid << 32) | (stamp << 16) | lid, lid};
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = s;
    epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev);
    return std::make_unique<ShmPort>(fabric, self, s, epfd);
  }
  close(epfd);
  return nullptr;
}

}  // namespace weft::ofi
