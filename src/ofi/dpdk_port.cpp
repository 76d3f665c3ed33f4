// src/ofi/dpdk_port.cpp — the MediumPort over DPDK (FI_WEFT_MEDIUM=dpdk): src/io's DpdkMedium
// carries the Device's packets as RoCEv2 frames (Ethernet/IPv4/UDP 4791/BTH.../ICRC) on one DPDK
// ethdev per domain.
//
// The device. FI_WEFT_DPDK_VDEV names it (any vdev string rte_dev_probe takes: e.g.
// "net_af_packet0,iface=veth0,framesz=8192" for an interface, which is how more than two
// processes meet: one af_packet port each, on veths joined by a bridge). Without it the port is
// one end of a net_memif pair between two processes (fi_pingpong's case), named P =
// FI_WEFT_DPDK_MEMIF (default "weft-ofi-memif-<fabric>"; concurrent pairs need their own): the
// first domain to bind the abstract claim "weft/ofi-dpdk/P/memif-server" is the memif server,
// the other the client, on the abstract memif socket P (no file). A memif client
// can only connect to a listening server, so the server binds a second claim, ".../memif-up",
// once its port is started, and the client waits (at most kServerWaitNs) for it. On close each
// side makes sure its peer has read every frame it sent (a memif link drops what is unread when
// either side leaves: DpdkMedium's destructor sends a BYE behind its last frames and waits,
// bounded, for the answer), and the server leaves after its client (it waits for the link to go
// down).
//
// EAL. Once per process (src/io/dpdk): FI_WEFT_DPDK_ARGS, else WEFT_DPDK_ARGS, else the defaults
// (--no-huge -m 256 --no-pci --no-shconf --no-telemetry ...; src/io/dpdk/README.md). Released
// by the provider's cleanup (fi_fini) if a port ever started it. One DPDK port per process at a
// time (a vdev names one port): a second domain gets -FI_ENODEV and a warning.
//
// Identity and routes. The LID is claimed on this host like the other ports' (the abstract
// socket "weft/ofi-dpdk/<fabric>/<lid>", which is also the control socket). node id =
// MAC << 16 | LID, and the port's IPv4 address is 10.0.0.0 + LID (the frames need one; it is
// not an address of the host): so an endpoint address is a route, learnt from fi_av_insert
// (add_peer) or an arriving control datagram.
//
// Control datagrams (connection set-up) travel on that abstract Unix datagram socket: reliable
// and ordered, and so are the DPDK peers of one host in one network namespace (a known limit:
// peers on other hosts would need a control path over the wire, README).
//
// Waiting. wait_fd() is an epoll descriptor over the control socket, never the socket itself:
// a waiter drains wait_fd() with a read(2) of 8 bytes (medium.hpp), and on the socket that read
// takes a whole control datagram (truncated to 8 bytes) that ctrl_poll then never sees. That
// was the hang of about one connection set-up in four to fifty over dpdk: fi_cq_sread's nap
// ate the ConnRep that arrived while it slept, and the initiator waited for it for ever.
//
// Without DPDK at configure time (meson -Ddpdk=disabled, or no libdpdk) only the stubs at the
// end are built: getinfo refuses FI_WEFT_MEDIUM=dpdk with a warning that says so.
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_map>

#include "src/ofi/ctrl_socket.hpp"
#include "src/ofi/ofi.hpp"
#ifdef WEFT_HAVE_DPDK
#include "src/io/dpdk/dpdk_medium.hpp"
#endif

namespace weft::ofi {

#ifdef WEFT_HAVE_DPDK
namespace {

constexpr std::uint16_t kLidFirst = 1, kLidCount = 0xBFFF;
constexpr TimeNs kCtrlCheckNs = 20'000;           // ctrl_poll reads the socket at most this often
constexpr TimeNs kServerWaitNs = 10'000'000'000;  // a memif client waits this long for its server
constexpr std::uint32_t kIpBase = 0x0A000000;     // 10.0.0.0 + LID
constexpr int kAnnounceTries = 100;               // 1 ms apart

std::atomic<int> g_ports{0};          // DPDK ports open in this process (at most one)
std::atomic<bool> g_eal_used{false};  // a port started the EAL: cleanup releases it

std::uint64_t mac_bits(const io::roce::Mac& m) {
  std::uint64_t v = 0;
  for (std::uint8_t b : m) v = (v << 8) | b;
  return v;
}
io::roce::Mac mac_of(const NodeAddr& a) {
  io::roce::Mac m;
  for (int i = 0; i < 6; ++i) m[5 - i] = static_cast<std::uint8_t>(a.node_id >> (16 + 8 * i));
  return m;
}

TimeNs now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + static_cast<TimeNs>(ts.tv_nsec);
}

class DpdkPort final : public IoMediumPort {
 public:
  DpdkPort(std::unique_ptr<CtrlSocket> ctrl, std::unique_ptr<CtrlSocket> role_claim,
           std::unique_ptr<CtrlSocket> up_claim)
      : ctrl_(std::move(ctrl)), role_(std::move(role_claim)), up_(std::move(up_claim)) {}
  ~DpdkPort() override {
    if (epfd_ >= 0) close(epfd_);
    if (medium_) {
      const auto& c = medium_->counters();
      WEFT_INFO(FI_LOG_DOMAIN,
                "dpdk lid %u: tx %llu rx %llu no-route %llu full %llu other %llu bad-icrc %llu "
                "zero-copy %llu chained %llu",
                self_.lid, (unsigned long long)c.tx_packets, (unsigned long long)c.rx_packets,
                (unsigned long long)c.tx_no_route, (unsigned long long)c.tx_full,
                (unsigned long long)c.rx_other, (unsigned long long)c.rx_bad_icrc,
                (unsigned long long)c.tx_zero_copy, (unsigned long long)c.rx_chained);
    }
    medium_.reset();  // the graceful end of a memif session; a server waits for its client
    g_ports.fetch_sub(1);
  }

  bool start(const io::dpdk::DpdkConfig& cfg, std::uint16_t lid) {
    // The descriptor waiters may read (see the file comment), readable with the socket.
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = ctrl_->fd();
    if (epfd_ < 0 || epoll_ctl(epfd_, EPOLL_CTL_ADD, ctrl_->fd(), &ev) != 0) {
      WEFT_WARN(FI_LOG_DOMAIN, "dpdk: epoll for the control socket: %s", std::strerror(errno));
      return false;
    }
    medium_ = std::make_unique<io::dpdk::DpdkMedium>(cfg);
    io_ = medium_.get();
    g_eal_used = true;
    if (!medium_->ok()) {
      WEFT_WARN(FI_LOG_DOMAIN, "dpdk: %s", medium_->error().c_str());
      return false;
    }
    if (medium_->roce_mtu() < g_params.mtu_bytes) {
      WEFT_WARN(FI_LOG_DOMAIN,
                "dpdk: %s carries RoCE MTU %u at most (interface MTU %u); FI_WEFT_MTU is %zu",
                cfg.vdev.c_str(), medium_->roce_mtu(), medium_->if_mtu(), g_params.mtu_bytes);
      return false;
    }
    self_ = NodeAddr{(mac_bits(medium_->mac()) << 16) | lid, lid};
    return true;
  }
  // The memif server says it listens (see the file comment); false if the claim is taken.
  // The client probes it with connect(2) (CtrlSocket::abstract_bound), which never holds the
  // name. Its probe used to bind the name for an instant when free, so an announce could find
  // it taken: retried kAnnounceTries times 1 ms apart, which a probe descheduled while holding
  // the name on this loaded machine could outlast (fi_domain -FI_ENODEV). Kept for a server
  // whose predecessor of the same pair name is still exiting.
  bool announce_up(const std::string& name) {
    up_ = std::make_unique<CtrlSocket>();
    for (int i = 0; i < kAnnounceTries; ++i) {
      if (up_->bind_abstract(name)) return true;
      usleep(1000);
    }
    return false;
  }

  void add_peer(const NodeAddr& peer) override { learn(peer); }
  Stats stats() const override {
    const auto& c = medium_->counters();
    Stats s;
    s.tx_packets = c.tx_packets;
    s.rx_packets = c.rx_packets;
    s.tx_zero_copy = c.tx_zero_copy;
    s.regions = medium_->regions();
    return s;
  }
  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    if (!learn(dst)) return false;
    expect_ = true;  // an answer is likely: read the socket on the next poll
    return ctrl_->send_abstract(self_, dst, name_of(fabric_, dst.lid), msg);
  }
  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    if (!expect_ && !urgent && now - last_check_ < kCtrlCheckNs) return 0;
    last_check_ = now;
    std::size_t got = 0;
    ctrl_->poll(
        self_,
        [&](const NodeAddr& src, std::span<const std::uint8_t> m) {
          if (!learn(src)) return;
          fn(src, m);
          ++got;
        },
        max_msgs);
    expect_ = got > 0;
    return got;
  }
  // Readable with the control socket (an epoll set over it, not the socket: see the file
  // comment); packets are noticed by the callers' bounded waits, or by arm_sleep's doorbell.
  int wait_fd() const override { return epfd_; }

  // Sleeping (a CQ nap, fi_trywait + poll, fi_wait): on the medium's memif doorbell
  // (src/io/dpdk, "Sleeping") once the peer has said it rings (its HELLO or a ring): the
  // medium's sleep descriptor (the doorbell's socket and a 100 ms safety timer) and the control
  // socket; prepare_sleep sends the peer SLEEPING and says whether frames wait already. Before
  // that, on ports without a doorbell (af_packet), and while the port has not taken frames we
  // sent (a link not up yet, a full ring: only passes move them, and a spin would be the
  // alternative), nothing: the caller's 1 ms tick.
  bool arm_sleep(std::vector<pollfd>& fds) override {
    armed_ = medium_->peer_rings() && !medium_->tx_pending();
    if (!armed_) return false;
    fds.push_back({epfd_, POLLIN, 0});
    fds.push_back({medium_->rx_wait_fd(), POLLIN, 0});
    return medium_->prepare_sleep();
  }
  void disarm_sleep(std::span<const pollfd> fds) override {
    if (!armed_) return;
    armed_ = false;
    medium_->finish_sleep();
    // Woken by the control socket: the next ctrl_poll looks at once.
    for (const pollfd& p : fds)
      if (p.fd == epfd_ && p.revents) expect_ = true;
  }

  static std::string name_of(const std::string& fabric, std::uint16_t lid) {
    return "weft/ofi-dpdk/" + fabric + "/" + std::to_string(lid);
  }
  std::string fabric_;

 private:
  // Routes peer.lid to the MAC in its node id (IPv4 10.0.0.0 + LID, UDP 4791).
  bool learn(const NodeAddr& peer) {
    if (peer.lid == 0 || peer.lid == self_.lid || peer.lid >= kLidFirst + kLidCount) return false;
    auto [it, fresh] = macs_.emplace(peer.lid, peer.node_id);
    if (!fresh && it->second != peer.node_id) {
      // The LID now belongs to another port (its process exited, a new one took it).
      it->second = peer.node_id;
      fresh = true;
    }
    if (fresh) medium_->add_peer(peer.lid, kIpBase | peer.lid, wire::kRoceV2UdpPort, mac_of(peer));
    return true;
  }

  std::unique_ptr<CtrlSocket> ctrl_, role_, up_;
  std::unique_ptr<io::dpdk::DpdkMedium> medium_;
  std::unordered_map<std::uint16_t, std::uint64_t> macs_;  // LID -> node id
  TimeNs last_check_ = 0;
  bool expect_ = true;
  bool armed_ = false;  // arm_sleep prepared the medium's sleep: disarm_sleep finishes it
  int epfd_ = -1;
};

}  // namespace

bool dpdk_built() {
  return true;
}

std::unique_ptr<MediumPort> open_dpdk_port(std::string_view fabric_name,
                                           const std::string& pcap_path) {
  const std::string fabric(fabric_name);
  if (g_ports.fetch_add(1) != 0) {
    g_ports.fetch_sub(1);
    WEFT_WARN(FI_LOG_DOMAIN, "dpdk: one DPDK domain per process (a vdev is one port)");
    return nullptr;
  }
  // Claim a LID on this host; its socket carries the control datagrams.
  auto ctrl = std::make_unique<CtrlSocket>();
  const std::uint16_t lid = ctrl->claim_lid(
      kLidFirst, kLidCount, [&](std::uint16_t l) { return DpdkPort::name_of(fabric, l); });
  if (!lid) {
    g_ports.fetch_sub(1);
    return nullptr;
  }
  io::dpdk::DpdkConfig cfg;
  cfg.vdev = g_params.dpdk_vdev;
  std::istringstream args(g_params.dpdk_args);
  for (std::string w; args >> w;) cfg.eal_args.push_back(w);
  cfg.local_ip = kIpBase | lid;
  cfg.link_wait_ns = 0;  // a memif peer may come later; frames wait in the port meanwhile
  cfg.pcap_path = pcap_path;
  std::unique_ptr<CtrlSocket> role;
  bool memif_server = false;
  const std::string pair =
      g_params.dpdk_memif.empty() ? "weft-ofi-memif-" + fabric : g_params.dpdk_memif;
  const std::string claim = "weft/ofi-dpdk/" + pair + "/memif-";
  if (cfg.vdev.empty()) {
    role = std::make_unique<CtrlSocket>();
    memif_server = role->bind_abstract(claim + "server");
    if (!memif_server) {
      role.reset();
      // The client connects to a listening server only.
      const TimeNs until = now_ns() + kServerWaitNs;
      while (!CtrlSocket::abstract_bound(claim + "up") && now_ns() < until) usleep(1000);
      if (!CtrlSocket::abstract_bound(claim + "up")) {
        WEFT_WARN(FI_LOG_DOMAIN, "dpdk: the net_memif server of fabric %s did not start",
                  fabric.c_str());
        g_ports.fetch_sub(1);
        return nullptr;
      }
    }
    cfg.vdev = std::string("net_memif0,role=") + (memif_server ? "server" : "client") +
               ",socket=" + pair + io::dpdk::memif_ring_args();
  }
  auto port = std::make_unique<DpdkPort>(std::move(ctrl), std::move(role), nullptr);
  port->fabric_ = fabric;
  if (!port->start(cfg, lid)) return nullptr;
  if (memif_server && !port->announce_up(claim + "up")) {
    WEFT_WARN(FI_LOG_DOMAIN, "dpdk: %sup is taken", claim.c_str());
    return nullptr;
  }
  WEFT_INFO(FI_LOG_DOMAIN, "dpdk: lid %u on %s", lid, cfg.vdev.c_str());
  return port;
}

void dpdk_cleanup() {
  // A domain the application never closed still holds its port: then the EAL stays (releasing
  // it under a started port is not safe), as the process is exiting anyway.
  if (g_ports.load() == 0 && g_eal_used.exchange(false)) io::dpdk::eal_cleanup();
}

#else  // !WEFT_HAVE_DPDK

bool dpdk_built() {
  return false;
}

std::unique_ptr<MediumPort> open_dpdk_port(std::string_view fabric_name,
                                           const std::string& pcap_path) {
  (void)fabric_name;
  (void)pcap_path;
  WEFT_WARN(FI_LOG_DOMAIN, "FI_WEFT_MEDIUM=dpdk: %s", kNoDpdk);
  return nullptr;
}

void dpdk_cleanup() {}

#endif

}  // namespace weft::ofi
