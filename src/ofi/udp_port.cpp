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
// Control datagrams are UDP, which may lose, duplicate or reorder them; the medium seam promises
// reliable, ordered delivery, so each carries a Rel header: the sender's epoch (random per port,
// so a later process reusing the ports starts afresh), a sequence number per destination, and
// the kind (data or ack). The receiver acknowledges every data datagram, delivers in sequence
// order (holding any that arrive early) and drops duplicates; the sender retransmits an
// unacknowledged datagram after 1 ms, doubling to 256 ms, and gives up after kRetriesMax tries
// (the connection request then stays unanswered, as with a peer that never progresses).
// FI_WEFT_UDP_CTRL_DROP (per million, seeded by FI_WEFT_LOOPBACK_SEED) drops sent control
// datagrams, for the loss test.
#include <poll.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "src/io/udp/udp_medium.hpp"
#include "src/ofi/ctrl_socket.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

constexpr std::uint16_t kLidFirst = 1, kLidCount = 0xBFFF;
constexpr TimeNs kCtrlCheckNs = 100'000;
constexpr TimeNs kRetryFirstNs = 1'000'000, kRetryMaxNs = 256'000'000;
constexpr int kRetriesMax = 40;
constexpr std::uint32_t kRelData = 0x5744'0001, kRelAck = 0x5744'0002;

// Before the provider's bytes in every control datagram.
struct Rel {
  std::uint32_t kind;
  std::uint32_t seq;
  std::uint64_t epoch;
};
static_assert(sizeof(Rel) + 20 <= kCtrlBytesMax);

std::uint32_t ip_of(const NodeAddr& a) {
  return static_cast<std::uint32_t>(a.node_id >> 32);
}
std::uint16_t data_port_of(const NodeAddr& a) {
  return static_cast<std::uint16_t>(a.node_id >> 16);
}
std::uint16_t ctrl_port_of(const NodeAddr& a) {
  return static_cast<std::uint16_t>(a.node_id);
}

class UdpPort final : public IoMediumPort {
 public:
  UdpPort(std::unique_ptr<io::udp::UdpMedium> medium, CtrlSocket* claim, NodeAddr self, int epfd)
      : medium_(std::move(medium)), claim_(claim), epfd_(epfd) {
    io_ = medium_.get();
    self_ = self;
  }
  ~UdpPort() override {
    const auto& c = medium_->counters();
    WEFT_INFO(FI_LOG_DOMAIN,
              "udp lid %u: tx %llu rx %llu no-route %llu errors %llu full %llu bad-icrc %llu",
              self_.lid, (unsigned long long)c.tx_packets, (unsigned long long)c.rx_packets,
              (unsigned long long)c.tx_no_route, (unsigned long long)c.tx_errors,
              (unsigned long long)c.tx_full, (unsigned long long)c.rx_bad_icrc);
    WEFT_INFO(FI_LOG_DOMAIN, "udp lid %u control: dropped %llu retransmitted %llu duplicates %llu",
              self_.lid, (unsigned long long)dropped_, (unsigned long long)retransmitted_,
              (unsigned long long)duplicates_);
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

  void add_peer(const NodeAddr& peer) override { learn(peer); }
  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    // An address whose ip:port belongs to a node with another LID names no node on the medium.
    if (!learn(dst)) return false;
    if (msg.size() + sizeof(Rel) > kCtrlBytesMax) return false;
    expect_ = true;
    Pending p;
    p.dst = dst;
    const Rel r{kRelData, ++next_seq_[dst.node_id], epoch_};
    p.bytes.resize(sizeof r + msg.size());
    std::memcpy(p.bytes.data(), &r, sizeof r);
    std::memcpy(p.bytes.data() + sizeof r, msg.data(), msg.size());
    p.seq = r.seq;
    p.backoff = kRetryFirstNs;
    p.due = now_ns() + p.backoff;
    if (!send_frame(dst, p.bytes)) return false;
    // retransmit() sets next_due_ from what is pending, kNoDeadline when it gave up on the last
    // one: a later datagram must lower it again, or it would never be resent.
    next_due_ = std::min(next_due_, p.due);
    pending_.push_back(std::move(p));
    return true;
  }
  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    if (!pending_.empty() && now >= next_due_) retransmit(now);
    if (!expect_ && !urgent && now - last_check_ < kCtrlCheckNs) return 0;
    last_check_ = now;
    std::size_t got = 0;
    ctrl_.poll(
        self_,
        [&](const NodeAddr& src, std::span<const std::uint8_t> m) {
          if (learn(src)) got += on_frame(src, m, fn);
        },
        max_msgs);
    expect_ = got > 0;
    return got;
  }
  int wait_fd() const override { return epfd_; }

  // Sleeping: epfd_ holds the control socket and the medium's receive descriptor (io_uring's
  // ring, readable once a completion is queued, or the data socket), which become readable by
  // themselves when a datagram arrives: no peer has to ring. prepare_sleep submits what is
  // queued and says whether received packets wait already (then: false, no sleep). The epoll
  // set is appended either way (an empty list would mean "no doorbells": a 1 ms tick).
  bool arm_sleep(std::vector<pollfd>& fds) override {
    fds.push_back({epfd_, POLLIN, 0});
    return medium_->prepare_sleep();
  }
  TimeNs next_deadline() const override { return pending_.empty() ? kNoDeadline : next_due_; }
  void disarm_sleep(std::span<const pollfd> fds) override {
    medium_->finish_sleep();
    // Woken by the control socket (or data): the next ctrl_poll looks at once.
    for (const pollfd& p : fds)
      if (p.fd == epfd_ && p.revents) expect_ = true;
  }

 private:
  struct Pending {
    NodeAddr dst;
    std::uint32_t seq = 0;
    std::vector<std::uint8_t> bytes;  // Rel + the provider's message
    TimeNs due = 0, backoff = 0;
    int tries = 1;
  };
  // What arrived from one peer port instance (node id and epoch).
  struct Inbound {
    std::uint64_t epoch = 0;
    std::uint32_t next = 1;  // the sequence number delivered next
    std::map<std::uint32_t, std::vector<std::uint8_t>> early;
  };

  static TimeNs now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + static_cast<TimeNs>(ts.tv_nsec);
  }

  // Sends one datagram (or, with FI_WEFT_UDP_CTRL_DROP, pretends to: a loss on the way).
  bool send_frame(const NodeAddr& dst, std::span<const std::uint8_t> bytes) {
    if (drop_ppm_ && drop_rng_.next_u64() % 1'000'000 < drop_ppm_) {
      ++dropped_;
      return true;
    }
    return ctrl_.send_udp(self_, dst, ip_of(dst), ctrl_port_of(dst), bytes);
  }

  void retransmit(TimeNs now) {
    next_due_ = kNoDeadline;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->due <= now) {
        if (it->tries >= kRetriesMax) {
          WEFT_WARN(FI_LOG_EP_CTRL, "udp: control datagram %u to lid %u unanswered after %d tries",
                    it->seq, it->dst.lid, it->tries);
          it = pending_.erase(it);
          continue;
        }
        ++it->tries;
        ++retransmitted_;
        send_frame(it->dst, it->bytes);
        it->backoff = std::min(it->backoff * 2, kRetryMaxNs);
        it->due = now + it->backoff;
      }
      next_due_ = std::min(next_due_, it->due);
      ++it;
    }
  }

  // One arriving datagram: an ack retires a pending send; data is acknowledged, then delivered in
  // sequence order (early ones wait, duplicates are dropped). Returns how many were delivered.
  std::size_t on_frame(const NodeAddr& src, std::span<const std::uint8_t> m, const CtrlFn& fn) {
    Rel r;
    if (m.size() < sizeof r) return 0;
    std::memcpy(&r, m.data(), sizeof r);
    if (r.kind == kRelAck) {
      std::erase_if(pending_, [&](const Pending& p) {
        return p.seq == r.seq && p.dst.node_id == src.node_id && r.epoch == epoch_;
      });
      return 0;
    }
    if (r.kind != kRelData) return 0;
    const Rel ack{kRelAck, r.seq, r.epoch};
    send_frame(src, {reinterpret_cast<const std::uint8_t*>(&ack), sizeof ack});
    Inbound& in = inbound_[src.node_id];
    if (in.epoch != r.epoch) in = Inbound{r.epoch, 1, {}};  // a new instance of that port
    if (r.seq < in.next || in.early.count(r.seq)) {
      ++duplicates_;
      return 0;
    }
    if (r.seq > in.next) {
      in.early.emplace(r.seq, std::vector<std::uint8_t>(m.begin() + sizeof r, m.end()));
      return 0;
    }
    fn(src, m.subspan(sizeof r));
    std::size_t got = 1;
    ++in.next;
    for (auto it = in.early.find(in.next); it != in.early.end(); it = in.early.find(in.next)) {
      fn(src, it->second);
      in.early.erase(it);
      ++in.next;
      ++got;
    }
    return got;
  }

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
  int epfd_;
  std::unordered_map<std::uint64_t, std::uint16_t> lids_;  // ip << 16 | data port -> LID
  TimeNs last_check_ = 0;
  bool expect_ = true;
  // Reliable control datagrams (see the file comment).
  std::uint64_t epoch_ = (static_cast<std::uint64_t>(getpid()) << 32) ^ now_ns();
  std::unordered_map<std::uint64_t, std::uint32_t> next_seq_;  // per destination node id
  std::vector<Pending> pending_;
  TimeNs next_due_ = 0;
  std::unordered_map<std::uint64_t, Inbound> inbound_;  // per source node id
  std::size_t drop_ppm_ = g_params.udp_ctrl_drop_ppm;
  SeededRng drop_rng_{g_params.loopback_seed};
  std::uint64_t dropped_ = 0, retransmitted_ = 0, duplicates_ = 0;
};

}  // namespace

std::unique_ptr<MediumPort> open_udp_port(std::string_view fabric_name, std::uint32_t ip,
                                          const std::string& pcap_path) {
  const std::string fabric(fabric_name);
  // Claim a LID on this host.
  auto claim = std::make_unique<CtrlSocket>();
  const std::uint16_t lid = claim->claim_lid(kLidFirst, kLidCount, [&](std::uint16_t l) {
    return "weft/ofi-udp/" + fabric + "/" + std::to_string(l);
  });
  if (!lid) return nullptr;
  io::udp::UdpConfig cfg;
  cfg.local_ip = ip;
  cfg.port = 0;  // ephemeral
  cfg.pcap_path = pcap_path;
  // A capturing port takes RoCEv2's port if it is free, so that Wireshark (RoCE on UDP 4791
  // only) decodes its traffic; two capturing processes on one address: the first gets it.
  if (!pcap_path.empty()) cfg.port = wire::kRoceV2UdpPort;
  auto medium = std::make_unique<io::udp::UdpMedium>(cfg);
  if (!medium->ok() && cfg.port != 0) {
    cfg.port = 0;
    medium = std::make_unique<io::udp::UdpMedium>(cfg);
    if (medium->ok())
      WEFT_INFO(FI_LOG_DOMAIN, "udp: port %u is taken; %s shows port %u", wire::kRoceV2UdpPort,
                pcap_path.c_str(), medium->local_port());
  }
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
