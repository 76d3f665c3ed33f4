// emu/fabricd/cross_host.cpp — fabric daemons on several hosts as one subnet (see
// cross_host.hpp).
#include "emu/fabricd/cross_host.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <sstream>

#include "emu/fabricd/stub_device.hpp"
#include "src/io/clock.hpp"
#include "src/link/credit.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/packet.hpp"

namespace weft::fabricd {
namespace {

// kEvFc data, as emu/fabric/node.cpp packs it.
constexpr std::uint64_t pack_fc(int port, std::uint16_t gen, const link::FcPacket& fc) {
  return static_cast<std::uint64_t>(fc.fctbs) | static_cast<std::uint64_t>(fc.fccl) << 12 |
         static_cast<std::uint64_t>(fc.vl) << 24 | static_cast<std::uint64_t>(fc.op) << 28 |
         static_cast<std::uint64_t>(port) << 32 | static_cast<std::uint64_t>(gen) << 40;
}

void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}
std::uint32_t get32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}

constexpr std::size_t kHelloBytes = 9;     // boot id, epoch, up
constexpr std::size_t kNoPeer = SIZE_MAX;  // a crossing link whose peer is not known yet

}  // namespace

Result<Split, std::string> split_topology(const topo::Topology& t,
                                          const std::vector<std::string>& patterns) {
  Split s;
  s.local.assign(t.node_count(), false);
  if (patterns.empty()) return std::string("no switches named for this host (--part)");
  for (const std::string& pat : patterns) {
    const bool index = !pat.empty() && pat.find_first_not_of("0123456789") == std::string::npos;
    bool any = false;
    for (topo::NodeId n = 0; n < t.node_count(); ++n) {
      if (!t.node(n).is_switch()) continue;
      if ((index && std::stoul(pat) == n) ||
          fnmatch(pat.c_str(), t.node(n).description.c_str(), 0) == 0) {
        s.local[n] = any = true;
      }
    }
    if (!any) return "part pattern '" + pat + "' matches no switch";
  }
  for (topo::NodeId n = 0; n < t.node_count(); ++n) {
    if (t.node(n).is_switch()) continue;
    for (int p = 1; p <= t.node(n).num_ports(); ++p) {
      if (auto peer = t.peer({n, p})) {
        s.local[n] = s.local[peer->node];
        break;
      }
    }
  }
  for (topo::LinkId l = 0; l < t.link_count(); ++l) {
    const topo::Link& k = t.link(l);
    if (s.local[k.a.node] == s.local[k.b.node]) continue;
    if (!t.node(k.a.node).is_switch() || !t.node(k.b.node).is_switch())
      return "link " + t.node(k.a.node).description + "/" + std::to_string(k.a.port) + " - " +
             t.node(k.b.node).description + "/" + std::to_string(k.b.port) +
             " joins an HCA to a switch of the other host (split between switches)";
    if (l > 0xFFFF) return std::string("more than 65536 links: the tunnel's link id is 16 bits");
    s.crossing.push_back(l);
  }
  if (s.crossing.empty()) return std::string("no link joins this host's part to the other's");
  return s;
}

// The far end of a crossing link, inside this daemon's Fabric: what the local port sends to it
// goes to the tunnel.
class RemoteEnd final : public fabric::Node {
 public:
  RemoteEnd(fabric::Fabric& f, topo::NodeId ghost, CrossHost::Impl* owner, std::size_t index)
      : Node(f, ghost), owner_(owner), index_(index) {}
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;
  void orphan() { owner_ = nullptr; }

 protected:
  std::uint32_t head_packet(int, std::uint8_t) override { return fabric::kNoPacket; }
  void take_head(int, std::uint8_t) override {}
  void accept(int, std::uint32_t) override {}
  void on_tx_done(int, std::uint64_t) override {}
  void on_link_down(int) override {}
  void on_node_event(const sim::Event&) override {}
  bool has_pending(int) override { return false; }
  void send_mad(std::span<const std::uint8_t>, std::uint16_t, std::uint8_t, bool, bool) override {}

 private:
  CrossHost::Impl* owner_;
  std::size_t index_;
};

class CrossHost::Impl {
 public:
  struct Cross {
    topo::LinkId link = topo::kNoLink;
    topo::NodeId node = topo::kNoNode;  // the local end
    int port = 0;
    std::size_t peer = kNoPeer;  // which of cfg.peers runs the far end
    RemoteEnd* end = nullptr;
    bool up = false;
    bool heard = false;
    std::uint32_t epoch = 1, peer_boot = 0;
    std::uint16_t gen = 0;  // the local port's generation once the posted changes are done
    TimeNs last_rx = 0;
    std::uint64_t ups = 0, downs = 0, dropped_down = 0;
    // Per data VL: the latest FC packet sent, when (wall), and the blocks of data sent on the
    // VL since (what the port's FCTBS has counted beyond the packet's).
    struct FcLast {
      bool valid = false;
      link::FcPacket fc{};
      std::uint32_t blocks_since = 0;
      TimeNs sent_wall = 0;
      TimeNs wait = 0;  // until the next repeat: fc_refresh_ns, doubling per repeat
    };
    std::array<FcLast, link::kVl15> fc_last{};
    std::uint64_t fc_refreshes = 0;
  };

  class TunnelDevice final : public StubDevice {
   public:
    explicit TunnelDevice(Impl& d) : StubDevice(DeviceConfig{}), d_(d) {}
    TimeNs next_deadline() const override { return std::min(d_.next_hello, d_.next_refresh); }
    void on_deadline(TimeNs now) override { d_.tick(now); }

   private:
    Impl& d_;
  };

  class TunnelMedium final : public io::Medium {
   public:
    explicit TunnelMedium(Impl& d) : d_(d) {}
    std::size_t rx_burst(Device&, TimeNs now, std::size_t) override {
      return d_.tunnel.poll([this, now](const LinkTunnel::Frame& f) { d_.on_frame(f, now); });
    }
    std::size_t tx_burst(Device&, TimeNs, std::size_t) override { return d_.tunnel.flush(); }
    int rx_wait_fd() const override { return d_.tunnel.fd(); }
    bool prepare_sleep() override { return d_.tunnel.queued() == 0; }
    bool tx_blocked() const override { return d_.tunnel.queued() > 0; }

   private:
    Impl& d_;
  };

  Impl(fabric::Fabric& f, const CrossHostConfig& c, Split s, std::function<TimeNs()> vn,
       std::function<void()> wk)
      : fabric(f),
        cfg(c),
        split(std::move(s)),
        tunnel(c.bind, endpoints(c)),
        vnow(std::move(vn)),
        wake(std::move(wk)),
        dev(*this),
        med(*this) {
    std::random_device rd;
    boot = rd() | 1;
  }
  ~Impl() {
    for (Cross& c : cross) c.end->orphan();
  }

  static std::vector<TunnelEndpoint> endpoints(const CrossHostConfig& c) {
    std::vector<TunnelEndpoint> v;
    for (const PeerConfig& p : c.peers) v.push_back(p.addr);
    return v;
  }

  // ---- from the Fabric to the tunnel ----
  bool send(const std::function<bool()>& put) {
    if (put()) return true;
    tunnel.flush();
    if (put()) return true;
    ++tx_dropped;
    return false;
  }

  void from_fabric(std::size_t i, const sim::Event& ev) {
    Cross& c = cross[i];
    fabric::PacketPool& pool = fabric.pool();
    switch (ev.kind) {
      case fabric::kEvArrive: {
        const auto pk = static_cast<std::uint32_t>(ev.data);
        fabric::Packet& p = pool[pk];
        // The port's FCTBS counts it, sent on or not (unless it left before the link reset).
        if (p.vl < link::kVl15 && p.link_gen == fabric.node(c.node).port(c.port).gen)
          c.fc_last[p.vl].blocks_since += link::credit_blocks(p.wire_bytes);
        if (c.up && p.bytes.size() >= wire::kLrhBytes + wire::kVcrcBytes) {
          // The VL it is on here (a switch changes VLs without rewriting its copy), and a VCRC
          // over that (packets from attached processes carry none: CrcMode::kModel).
          scratch.assign(p.bytes.begin(), p.bytes.end());
          scratch[0] = static_cast<std::uint8_t>(p.vl << 4 | (scratch[0] & 0x0F));
          const std::size_t at = scratch.size() - wire::kVcrcBytes;
          wire::put_vcrc(std::span<std::uint8_t, wire::kVcrcBytes>(scratch.data() + at, 2),
                         wire::vcrc(std::span<const std::uint8_t>(scratch.data(), at)));
          send([&] {
            return tunnel.send_packet_to(c.peer, static_cast<std::uint16_t>(c.link), scratch);
          });
        } else {
          ++c.dropped_down;
        }
        pool.free(pk);
        wake();
        return;
      }
      case fabric::kEvSmp: {
        const auto pk = static_cast<std::uint32_t>(ev.data);
        const fabric::Packet& p = pool[pk];
        if (c.up && p.bytes.size() >= wire::kMadBytes) {
          smp_image(p);
          send([&] {
            return tunnel.send_packet_to(c.peer, static_cast<std::uint16_t>(c.link), scratch);
          });
        } else {
          ++c.dropped_down;
        }
        pool.free(pk);
        wake();
        return;
      }
      case fabric::kEvFc: {
        if (!c.up) return;
        link::FcPacket fc;
        fc.fctbs = static_cast<std::uint16_t>(ev.data & 0xFFF);
        fc.fccl = static_cast<std::uint16_t>((ev.data >> 12) & 0xFFF);
        fc.vl = static_cast<std::uint8_t>((ev.data >> 24) & 0xF);
        fc.op = static_cast<link::FcOp>((ev.data >> 28) & 0x1);
        if (fc.vl < link::kVl15) {
          Cross::FcLast& l = c.fc_last[fc.vl];
          l = {true, fc, 0, io::monotonic_ns(), cfg.fc_refresh_ns};
          arm_refresh(l.sent_wall + l.wait);
        }
        send([&] { return tunnel.send_fc_to(c.peer, static_cast<std::uint16_t>(c.link), fc); });
        wake();
        return;
      }
      default:
        return;
    }
  }

  // ---- the periodic FC update (IBA 7.9.4) ----
  void arm_refresh(TimeNs at) {
    if (at < next_refresh) {
      next_refresh = at;
      wake();  // the Driver reads the tunnel device's deadline again
    }
  }

  // Sends again every VL's latest FC packet whose wait has passed without a newer one, its FCTBS
  // brought up to the data sent since, and doubles the wait; sets next_refresh.
  void refresh_fc(TimeNs now) {
    next_refresh = kNoDeadline;
    for (Cross& c : cross) {
      if (!c.up) continue;
      for (Cross::FcLast& l : c.fc_last) {
        if (!l.valid) continue;
        if (now >= l.sent_wall + l.wait) {
          link::FcPacket fc = l.fc;
          fc.op = link::FcOp::kNormal;
          fc.fctbs = link::fc_mod(fc.fctbs + l.blocks_since);
          l.fc = fc;
          l.blocks_since = 0;
          l.sent_wall = now;
          l.wait = std::min(2 * l.wait, std::max(cfg.fc_refresh_max_ns, cfg.fc_refresh_ns));
          if (send([&] {
                return tunnel.send_fc_to(c.peer, static_cast<std::uint16_t>(c.link), fc);
              }))
            ++c.fc_refreshes;
        }
        next_refresh = std::min(next_refresh, l.sent_wall + l.wait);
      }
    }
  }

  // An SMP of the management path (the Packet holds the 256-byte MAD) as a VL15 wire image:
  // LRH, BTH (UD SEND to QP0), DETH, MAD, ICRC, VCRC.
  void smp_image(const fabric::Packet& p) {
    wire::Headers hd;
    hd.lrh.vl = link::kVl15;
    hd.lrh.dlid = p.directed ? 0xFFFF : p.dlid;
    hd.lrh.slid = p.slid;
    hd.bth.opcode = wire::Opcode::kUdSendOnly;
    hd.bth.dest_qp = 0;
    hd.deth.qkey = 0;
    hd.deth.src_qp = 0;
    wire::fill_lengths(hd, wire::kMadBytes);
    std::array<std::uint8_t, TxPacket::kHeaderBytesMax> h{};
    const std::size_t hb = wire::encode_headers(hd, h);
    const std::size_t body = hb + wire::kMadBytes + hd.bth.pad_cnt;
    scratch.assign(body + wire::kIcrcBytes + wire::kVcrcBytes, 0);
    std::copy_n(h.begin(), hb, scratch.begin());
    std::copy_n(p.bytes.begin(), wire::kMadBytes, scratch.begin() + static_cast<long>(hb));
    const wire::PacketCrcs crcs = wire::packet_crcs(
        std::span<const std::uint8_t>(scratch.data(), hb),
        std::span<const std::uint8_t>(scratch.data() + hb, wire::kMadBytes), hd.bth.pad_cnt);
    wire::put_icrc(std::span<std::uint8_t, 4>(scratch.data() + body, 4), crcs.icrc);
    wire::put_vcrc(std::span<std::uint8_t, 2>(scratch.data() + body + 4, 2), crcs.vcrc);
  }

  // ---- from the tunnel to the Fabric ----
  void on_frame(const LinkTunnel::Frame& f, TimeNs wall) {
    const auto it = std::lower_bound(
        cross.begin(), cross.end(), f.link,
        [](const Cross& c, std::uint16_t l) { return c.link < static_cast<topo::LinkId>(l); });
    if (it == cross.end() || it->link != f.link) {
      ++rx_unknown;
      return;
    }
    Cross& c = *it;
    if (c.peer == kNoPeer) c.peer = f.peer;  // the peer running the far end answered first
    if (c.peer != f.peer) {
      ++rx_wrong_peer;
      return;
    }
    c.last_rx = wall;
    switch (f.kind) {
      case TunnelKind::kHello:
        if (f.body.size() >= kHelloBytes)
          hello(c, get32(f.body.data()), get32(f.body.data() + 4), wall);
        return;
      case TunnelKind::kFlowControl:
        if (!c.up) {
          ++rx_while_down;
          return;
        }
        fabric.sim().post_at(vnow(), fabric.node(c.node).component(), fabric::kEvFc,
                             pack_fc(c.port, c.gen, f.fc));
        wake();
        return;
      case TunnelKind::kPacket:
        if (!c.up) {
          ++rx_while_down;
          return;
        }
        inject(c, f.body);
        return;
    }
  }

  void inject(Cross& c, std::span<const std::uint8_t> body) {
    auto r = wire::parse_packet(body, wire::ParseOptions{false, false});
    if (!r.ok() || r.value().header_bytes > TxPacket::kHeaderBytesMax) {
      ++rx_unparsed;
      return;
    }
    const wire::ParsedPacket& pp = r.value();
    fabric::PacketPool& pool = fabric.pool();
    const std::uint32_t pk = pool.alloc();
    fabric::Packet& p = pool[pk];
    std::vector<std::uint8_t> keep = std::move(p.bytes);
    p = fabric::Packet{};
    p.bytes = std::move(keep);
    const TimeNs t = vnow();
    p.dlid = pp.h.lrh.dlid;
    p.slid = pp.h.lrh.slid;
    p.in_port = static_cast<std::uint8_t>(c.port);
    p.link_gen = c.gen;
    p.tail_ns = t;
    sim::EventKind kind = fabric::kEvArrive;
    if (pp.h.lrh.vl == link::kVl15) {  // the management path: the Packet holds the MAD
      if (pp.payload.size() < wire::kMadBytes) {
        pool.free(pk);
        ++rx_unparsed;
        return;
      }
      p.bytes.assign(pp.payload.begin(), pp.payload.begin() + wire::kMadBytes);
      p.smp = true;
      p.directed = p.dlid == 0xFFFF;
      p.sl = 15;
      p.vl = link::kVl15;
      p.wire_bytes = fabric::kSmpWireBytes;
      p.payload_bytes = wire::kMadBytes;
      kind = fabric::kEvSmp;
    } else {
      p.bytes.assign(body.begin(), body.end());
      std::copy_n(body.begin(), pp.header_bytes, p.headers.begin());
      p.header_bytes = static_cast<std::uint16_t>(pp.header_bytes);
      p.payload_bytes = static_cast<std::uint32_t>(pp.payload.size());
      p.pad_bytes = pp.h.bth.pad_cnt;
      p.wire_bytes = static_cast<std::uint32_t>(body.size());
      p.sl = pp.h.lrh.sl;
      p.vl = pp.h.lrh.vl;
      p.data = p.payload_bytes > 0;
    }
    fabric.sim().post_at(t, fabric.node(c.node).component(), kind, pk);
    wake();
  }

  // ---- link training ----
  void send_hello(Cross& c) {
    std::uint8_t b[kHelloBytes];
    put32(b, boot);
    put32(b + 4, c.epoch);
    b[8] = c.up ? 1 : 0;
    // Before its peer is known, to every peer: only the one running the far end answers.
    for (std::size_t p = 0; p < tunnel.peer_count(); ++p)
      if (c.peer == kNoPeer || c.peer == p)
        send([&] { return tunnel.send_hello_to(p, static_cast<std::uint16_t>(c.link), b); });
  }

  void set_port(Cross& c, bool up, TimeNs wall) {
    c.up = up;
    c.fc_last = {};  // a new link generation: its FC init packets start over
    (up ? c.ups : c.downs)++;
    c.last_rx = wall;
    c.gen++;
    if (up) send_hello(c);  // before the FC init packets the Fabric sends at link up
    fabric.sim().post_at(vnow(), fabric.node(c.node).component(), fabric::kEvLinkState,
                         static_cast<std::uint64_t>(c.port) | static_cast<std::uint64_t>(up) << 8);
    wake();
  }

  void hello(Cross& c, std::uint32_t peer_boot, std::uint32_t epoch, TimeNs wall) {
    if (c.heard && peer_boot != c.peer_boot && c.up) {  // the peer restarted
      set_port(c, false, wall);
      c.epoch++;
      send_hello(c);
    }
    c.peer_boot = peer_boot;
    c.heard = true;
    if (epoch > c.epoch) {
      if (c.up) set_port(c, false, wall);
      c.epoch = epoch;
      set_port(c, true, wall);
    } else if (epoch == c.epoch) {
      // A port that goes down moves to a newer epoch, so a "down" at this epoch is only the
      // peer not having heard us yet (or a hello sent before it did): no reason to go down.
      if (!c.up) set_port(c, true, wall);
    } else {
      send_hello(c);  // the peer is behind: it catches up on this
    }
  }

  void tick(TimeNs now) {
    if (now >= next_refresh) refresh_fc(now);
    if (now < next_hello) {
      tunnel.flush();
      return;
    }
    for (Cross& c : cross) {
      if (c.up && now > c.last_rx + cfg.dead_ns) {  // a silent peer: the link is down
        set_port(c, false, now);
        c.epoch++;
      }
      send_hello(c);
    }
    next_hello = now + cfg.hello_ns;
    tunnel.flush();
  }

  fabric::Fabric& fabric;
  CrossHostConfig cfg;
  Split split;
  LinkTunnel tunnel;
  std::function<TimeNs()> vnow;
  std::function<void()> wake;
  TunnelDevice dev;
  TunnelMedium med;
  std::vector<Cross> cross;  // by link id
  std::uint32_t boot = 1;
  TimeNs next_hello = 0;
  TimeNs next_refresh = kNoDeadline;
  std::vector<std::uint8_t> scratch;
  std::uint64_t tx_dropped = 0, rx_unknown = 0, rx_while_down = 0, rx_unparsed = 0;
  std::uint64_t rx_wrong_peer = 0;
};

void RemoteEnd::on_event(sim::Simulator& /*sim*/, const sim::Event& ev) {
  if (owner_) {
    owner_->from_fabric(index_, ev);
  } else if (ev.kind == fabric::kEvArrive || ev.kind == fabric::kEvSmp) {
    fabric_.pool().free(static_cast<std::uint32_t>(ev.data));
  }
}

Result<std::unique_ptr<CrossHost>, std::string> CrossHost::create(fabric::Fabric& fabric,
                                                                  const CrossHostConfig& config,
                                                                  std::function<TimeNs()> vnow,
                                                                  std::function<void()> wake) {
  auto split = split_topology(fabric.topology(), config.part);
  if (!split.ok()) return split.error();
  if (config.peers.empty()) return std::string("no peer daemon");
  const topo::Topology& t = fabric.topology();
  // Where the peers' parts are known: each node's owner (kNoPeer: here or unknown).
  std::vector<std::size_t> owner(t.node_count(), kNoPeer);
  bool all_known = true;
  for (std::size_t p = 0; p < config.peers.size(); ++p) {
    const PeerConfig& pc = config.peers[p];
    if (pc.part.empty()) {
      all_known = false;
      continue;
    }
    auto ps = split_topology(t, pc.part);
    if (!ps.ok()) return "peer " + pc.name + ": " + ps.error();
    for (topo::NodeId n = 0; n < t.node_count(); ++n) {
      if (!ps.value().local[n] || !t.node(n).is_switch()) continue;
      if (split.value().local[n])
        return "switch " + t.node(n).description + " is in this daemon's part and in peer " +
               pc.name + "'s";
      if (owner[n] != kNoPeer)
        return "switch " + t.node(n).description + " is in the parts of peers " +
               config.peers[owner[n]].name + " and " + pc.name;
      owner[n] = p;
    }
  }
  if (all_known)
    for (topo::NodeId n = 0; n < t.node_count(); ++n)
      if (t.node(n).is_switch() && !split.value().local[n] && owner[n] == kNoPeer)
        return "switch " + t.node(n).description + " is in no daemon's part";
  auto impl =
      std::make_unique<Impl>(fabric, config, split.value(), std::move(vnow), std::move(wake));
  if (!impl->tunnel.ok()) return impl->tunnel.error();
  if (config.rx_drop > 0.0) impl->tunnel.set_rx_drop(config.rx_drop, config.rx_drop_seed);
  for (const topo::LinkId l : split.value().crossing) {
    const topo::Link& k = t.link(l);
    const bool a_here = split.value().local[k.a.node];
    const topo::PortRef here = a_here ? k.a : k.b, there = a_here ? k.b : k.a;
    Impl::Cross c;
    c.link = l;
    c.node = here.node;
    c.port = here.port;
    c.peer = owner[there.node];
    auto end = std::make_unique<RemoteEnd>(fabric, there.node, impl.get(), impl->cross.size());
    c.end = end.get();
    const sim::ComponentId id =
        fabric.adopt_component(std::move(end), "remote:" + std::to_string(l));
    fabric::PortEnd& pe = fabric.node(here.node).port(here.port);
    pe.peer = id;
    pe.peer_node = c.end;
    // The ghost's end never takes part (what it was sent at the start is ignored).
    fabric::PortEnd& ge = fabric.node(there.node).port(there.port);
    ge.connected = false;
    ge.up = false;
    // Down until the peer answers (its FC init packets from the start are stale then).
    c.gen = static_cast<std::uint16_t>(pe.gen + 1);
    fabric.sim().post_at(fabric.sim().now(), fabric.node(here.node).component(),
                         fabric::kEvLinkState, static_cast<std::uint64_t>(here.port));
    impl->cross.push_back(c);
  }
  auto ch = std::unique_ptr<CrossHost>(new CrossHost(std::move(impl)));
  ch->split_ = std::move(split).value();
  return ch;
}

CrossHost::CrossHost(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CrossHost::~CrossHost() = default;

bool CrossHost::all_up() const {
  // Trained, and the Fabric has taken the change (the SM must not sweep before it has).
  return std::all_of(impl_->cross.begin(), impl_->cross.end(), [this](const Impl::Cross& c) {
    return c.up && impl_->fabric.node(c.node).port(c.port).up;
  });
}

Device& CrossHost::device() {
  return impl_->dev;
}
io::Medium& CrossHost::medium() {
  return impl_->med;
}

std::string CrossHost::status() const {
  const Impl& d = *impl_;
  const TunnelCounters& k = d.tunnel.counters();
  std::uint64_t refreshes = 0;
  for (const Impl::Cross& c : d.cross) refreshes += c.fc_refreshes;
  std::ostringstream o;
  o << "tunnel tx_packets " << k.tx_packets << " tx_fc " << k.tx_fc << " tx_errors " << k.tx_errors
    << " tx_dropped " << d.tx_dropped << " rx_packets " << k.rx_packets << " rx_fc " << k.rx_fc
    << " rx_hello " << k.rx_hello << " rx_malformed " << k.rx_malformed << " rx_bad_crc "
    << k.rx_bad_crc << " rx_foreign " << k.rx_foreign << " rx_lost " << k.rx_lost
    << " rx_while_down " << d.rx_while_down << " rx_dropped " << k.rx_dropped << " rx_unknown "
    << d.rx_unknown << " rx_wrong_peer " << d.rx_wrong_peer << " fc_refreshes " << refreshes
    << "\n";
  for (std::size_t p = 0; p < d.cfg.peers.size(); ++p) {
    const auto links = std::count_if(d.cross.begin(), d.cross.end(),
                                     [p](const Impl::Cross& c) { return c.peer == p; });
    o << "tunnel peer " << d.cfg.peers[p].name << " " << d.tunnel.peer_address(p).to_string()
      << " (" << d.cfg.peers[p].addr.host << ") links " << links << "\n";
  }
  const topo::Topology& t = d.fabric.topology();
  for (const Impl::Cross& c : d.cross)
    o << "cross link " << c.link << " " << t.node(c.node).description << "/" << c.port << " "
      << (c.up ? "up" : "down") << " epoch " << c.epoch << " ups " << c.ups << " downs " << c.downs
      << " dropped_down " << c.dropped_down << " fc_refreshes " << c.fc_refreshes << " peer "
      << (c.peer == kNoPeer ? std::string("?") : d.cfg.peers[c.peer].name) << "\n";
  return o.str();
}

Result<std::vector<HostEntry>, std::string> read_hosts_section(std::string_view text) {
  std::vector<HostEntry> hosts;
  int line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    constexpr std::string_view kTag = "#weft host";
    const std::size_t lead = line.find_first_not_of(" \t");
    if (lead == std::string_view::npos || line.substr(lead, kTag.size()) != kTag) continue;
    line.remove_prefix(lead + kTag.size());
    if (!line.empty() && line[0] != ' ' && line[0] != '\t') continue;  // e.g. "#weft hosts"
    // Tokens: blank-separated, or in double quotes (switch descriptions with blanks).
    std::vector<std::string> tok;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    for (std::size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
        ++i;
      } else if (line[i] == '"') {
        const std::size_t close = line.find('"', i + 1);
        if (close == std::string_view::npos) return where + "unclosed quote in #weft host";
        tok.emplace_back(line.substr(i + 1, close - i - 1));
        i = close + 1;
      } else {
        const std::size_t end = std::min(line.find_first_of(" \t\r", i), line.size());
        tok.emplace_back(line.substr(i, end - i));
        i = end;
      }
    }
    if (tok.size() < 3) return where + "#weft host wants NAME HOST[:PORT] SWITCH...";
    HostEntry h;
    h.name = tok[0];
    if (!parse_endpoint(tok[1], h.addr))
      return where + "host " + h.name + ": not HOST[:PORT] or [IPV6]:PORT: " + tok[1];
    h.part.assign(tok.begin() + 2, tok.end());
    for (const HostEntry& o : hosts)
      if (o.name == h.name) return where + "host " + h.name + " given twice";
    hosts.push_back(std::move(h));
  }
  return hosts;
}

Result<CrossHostConfig, std::string> cross_host_from_hosts(const std::vector<HostEntry>& hosts,
                                                           const std::string& me) {
  CrossHostConfig c;
  bool found = false;
  for (const HostEntry& h : hosts) {
    if (h.name == me) {
      c.bind = h.addr;
      c.part = h.part;
      found = true;
    } else {
      c.peers.push_back(PeerConfig{h.name, h.addr, h.part});
    }
  }
  if (!found) {
    std::string names;
    for (const HostEntry& h : hosts) names += (names.empty() ? "" : ", ") + h.name;
    return "no host " + me + " in the topology's hosts section (" +
           (names.empty() ? std::string("none") : names) + ")";
  }
  if (c.peers.empty()) return "host " + me + " is alone in the topology's hosts section";
  return c;
}

}  // namespace weft::fabricd
