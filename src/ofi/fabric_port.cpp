// src/ofi/fabric_port.cpp — the MediumPort through an emulated fabric (WEFT_FABRIC=F): each
// domain attaches to one free HCA of the running fabric daemon F (`weft fabric up --name F`,
// src/io's attach protocol) and is that HCA from then on: its LID is the one the fabric's subnet
// manager gave the HCA's port, its packets enter the fabric there (and meet its switches, links
// and injected faults), and what the fabric delivers to that port comes back on the link's ring.
//
// Packets: one src/io ShmMedium link to the daemon (the port is side B). tx_burst is the
// medium's own (a full ring keeps packets in the Device: back-pressure, no drop); payloads of
// 1 KiB and more go by reference when the daemon can read this process (the daemon pulls them).
//
// Control datagrams (connection set-up) do not cross the emulated fabric: the attach protocol
// has no path for them (no QP1 relay, emu/fabricd README), so they travel on the abstract Unix
// datagram socket "weft/ofi-fabric/<F>/<lid>" (reliable, one host, like the daemon itself).
//
// Identity: node id = pid << 32 | clock stamp << 16 | lid, so a later process on the same HCA
// does not match an old address (control frames carry the node id they mean).
//
// Waiting: wait_fd() is an epoll descriptor over the control socket and the link's doorbell.
// arm_sleep arms that doorbell as the shm port arms its links': the daemon's side of the link is
// a ShmMedium too, so its next publish toward us sees the ring's consumer_sleeping flag and
// writes the eventfd (src/io/shm/ring.hpp). A blocked fi_cq_sread, fi_trywait + poll or fi_wait
// then wakes when the fabric delivers a packet, not on a 1 ms tick.
#include <poll.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "src/io/fabric_attach.hpp"
#include "src/ofi/ctrl_socket.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

constexpr TimeNs kCtrlCheckNs = 20'000;  // ctrl_poll reads the socket at most this often

class FabricPort final : public MediumPort {
 public:
  FabricPort(std::string daemon, std::unique_ptr<io::FabricLink> link, NodeAddr self, int epfd)
      : daemon_(std::move(daemon)), link_(std::move(link)), self_(self), epfd_(epfd) {}
  ~FabricPort() override {
    if (link_->medium) {
      const auto& c = link_->medium->counters();
      WEFT_INFO(FI_LOG_DOMAIN,
                "fabric %s hca %u lid %u: tx wire %llu by-ref %llu full %llu | rx wire %llu",
                daemon_.c_str(), link_->reply.hca, self_.lid, (unsigned long long)c.tx_wire,
                (unsigned long long)c.tx_by_ref, (unsigned long long)c.tx_full,
                (unsigned long long)c.rx_wire);
    }
    close(epfd_);
  }

  bool init() {
    if (!ctrl_.bind_abstract(name_of(self_.lid))) {
      WEFT_WARN(FI_LOG_DOMAIN, "fabric %s: control socket for lid %u: %s", daemon_.c_str(),
                self_.lid, std::strerror(errno));
      return false;
    }
    for (int fd : {ctrl_.fd(), link_->medium->rx_wait_fd()}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (fd >= 0) epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    }
    return true;
  }

  NodeAddr local() const override { return self_; }
  void bind_device(const Device& dev) override { dev_ = &dev; }

  bool tx(const TxPacket& pkt) override { return dev_ && link_->medium->tx_packet(*dev_, pkt); }
  void tx_flush() override { link_->medium->tx_publish(); }
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return link_->medium->tx_burst(dev, now, max_packets);
  }
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return link_->medium->rx_burst(dev, now, max_packets);
  }

  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    expect_ = true;  // an answer is likely: read the socket on the next poll
    return ctrl_.send_abstract(self_, dst, name_of(dst.lid), msg);
  }
  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    if (!expect_ && !urgent && now - last_check_ < kCtrlCheckNs) return 0;
    last_check_ = now;
    const std::size_t got = ctrl_.poll(self_, fn, max_msgs);
    expect_ = got > 0;
    return got;
  }
  int wait_fd() const override { return epfd_; }

  // epfd_ holds the doorbell and the control socket: one descriptor to poll. It is appended
  // even when the ring has records already (false): an empty list would mean "no doorbells".
  bool arm_sleep(std::vector<pollfd>& fds) override {
    fds.push_back({epfd_, POLLIN, 0});
    return link_->medium->prepare_sleep();
  }
  void disarm_sleep(std::span<const pollfd> fds) override {
    link_->medium->finish_sleep();
    // Woken by the control socket (or the doorbell): the next ctrl_poll looks at once, past its
    // rate limit.
    for (const pollfd& p : fds)
      if (p.fd == epfd_ && p.revents) expect_ = true;
  }

 private:
  std::string name_of(std::uint16_t lid) const {
    return "weft/ofi-fabric/" + daemon_ + "/" + std::to_string(lid);
  }

  std::string daemon_;
  std::unique_ptr<io::FabricLink> link_;
  NodeAddr self_;
  int epfd_;
  CtrlSocket ctrl_;
  const Device* dev_ = nullptr;
  TimeNs last_check_ = 0;
  bool expect_ = true;
};

}  // namespace

std::unique_ptr<MediumPort> open_fabric_port(std::string_view fabric_name,
                                             std::string_view daemon_name) {
  (void)fabric_name;
  io::FabricAttachOptions o;
  o.hca = io::kAnyHca;
  o.timeout_ns = 5'000'000'000;
  auto link = io::attach_fabric_link(std::string(daemon_name), o);
  if (!link) {
    WEFT_WARN(FI_LOG_DOMAIN, "fabric %.*s: cannot attach (no daemon, or no free HCA)",
              static_cast<int>(daemon_name.size()), daemon_name.data());
    return nullptr;
  }
  const std::uint16_t lid = link.value()->reply.lid;
  if (lid == 0) {
    WEFT_WARN(FI_LOG_DOMAIN, "fabric %.*s: the HCA has no LID yet",
              static_cast<int>(daemon_name.size()), daemon_name.data());
    return nullptr;
  }
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const auto pid = static_cast<std::uint64_t>(getpid());
  const std::uint64_t stamp = static_cast<std::uint64_t>(ts.tv_nsec >> 10) & 0xFFFF;
  const NodeAddr self{(pid << 32) | (stamp << 16) | lid, lid};
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return nullptr;
  auto port =
      std::make_unique<FabricPort>(std::string(daemon_name), std::move(link).value(), self, epfd);
  if (!port->init()) return nullptr;
  return port;
}

}  // namespace weft::ofi
