// emu/sa/managed_subnet.cpp — SM bring-up over an emu/fabric Fabric, and the QP1 agents
// (SA, CM, SA client) carried by it. See managed_subnet.hpp.
// Thread-safety: the Simulator's thread.
#include "emu/sa/managed_subnet.hpp"

#include <algorithm>

#include "src/base/assert.hpp"
#include "src/wire/gmp.hpp"

namespace weft::sa {
namespace {

enum : sim::EventKind { kEvDeadline = 1, kEvLoopback = 2, kEvPump = 3 };

}  // namespace

ManagedSubnet::ManagedSubnet(fabric::Fabric& fabric, SubnetOptions opts)
    : fabric_(fabric), opts_(std::move(opts)), sa_(opts_.sa) {
  comp_ = fabric_.sim().add_component(*this, "gsi");
  agents_.resize(fabric_.topology().node_count());
}

ManagedSubnet::~ManagedSubnet() {
  for (topo::NodeId n : fabric_.hcas()) fabric_.hca(n).set_gsi_agent({});
  fsm_.reset();
}

std::uint16_t ManagedSubnet::sm_lid() const {
  return fsm_ ? fsm_->sm().sm_lid() : 0;
}

std::uint16_t ManagedSubnet::lid(topo::NodeId hca, int port) const {
  return fabric_.node(hca).state().ports[static_cast<std::size_t>(port)].lid;
}

cm::CommManager& ManagedSubnet::cm(topo::NodeId hca) {
  WEFT_ASSERT(agents_.at(hca).cm != nullptr);
  return *agents_[hca].cm;
}

cm::SaClient& ManagedSubnet::sa_client(topo::NodeId hca) {
  WEFT_ASSERT(agents_.at(hca).sa_client != nullptr);
  return *agents_[hca].sa_client;
}

bool ManagedSubnet::bring_up() {
  const topo::Topology& topo = fabric_.topology();
  sm_node_ = opts_.sm_node;
  if (sm_node_ == topo::kNoNode) {
    for (topo::NodeId n = 0; n < topo.node_count(); ++n) {
      if (!topo.node(n).is_switch()) {
        sm_node_ = n;
        break;
      }
    }
  }
  if (sm_node_ == topo::kNoNode || topo.node(sm_node_).is_switch()) {
    error_ = "no HCA to run the SM on";
    return false;
  }
  sm::SmOptions so;
  so.sm = opts_.sm;
  // Event forwarding: the SM's traps and its in/out-of-service changes go to the SA's
  // InformInfo subscribers (chained after any hooks of the caller's).
  so.sm.on_trap = [this, user = opts_.sm.on_trap](const wire::Notice& n, TimeNs now) {
    if (user) user(n, now);
    cm::SaNotice sn;
    sn.notice = n;
    sn.issuer_gid = gid_of_lid(n.issuer_lid);
    forward(sn, now);
  };
  so.sm.on_port_service = [this, user = opts_.sm.on_port_service](
                              std::uint64_t guid, std::uint16_t port_lid, bool in, TimeNs now) {
    if (user) user(guid, port_lid, in, now);
    // Traps 64 / 65 (14.2.5.1): produced by the SM (a class manager) at its own LID;
    // DataDetails: 6 reserved bytes, then GIDADDR.
    cm::SaNotice sn;
    sn.notice.is_generic = true;
    sn.notice.type = cm::kNoticeTypeInfo;
    sn.notice.producer_type = cm::kProducerClassManager;
    sn.notice.trap_number = in ? cm::kTrapGidInService : cm::kTrapGidOutOfService;
    sn.notice.issuer_lid = fsm_ ? fsm_->sm().sm_lid() : 0;
    const auto gid = cm::port_gid(guid);
    std::copy(gid.begin(), gid.end(), sn.notice.data_details.begin() + 6);
    sn.issuer_gid = gid_of_lid(sn.notice.issuer_lid);
    forward(sn, now);
  };
  so.sm_node = sm_node_;
  so.limit_ns = opts_.bring_up_limit_ns;
  report_ = sm::bring_up(fabric_, so, fsm_);
  if (!report_.ok) {
    error_ = "subnet did not come up: " + report_.error;
    return false;
  }
  sa_.set_tables(build_tables(
      topo, [&](topo::NodeId n) -> const sma::NodeState& { return fabric_.node(n).state(); }));
  // MCMemberRecord joins and leaves become the SM's multicast groups (it programs the MFTs).
  sa_.on_group_change = [this](std::uint16_t mlid, std::vector<std::uint64_t> guids) {
    if (fsm_) fsm_->set_multicast_group(mlid, std::move(guids));
  };
  for (topo::NodeId n : fabric_.hcas()) {
    Agent& a = agents_[n];
    cm::CmConfig c = opts_.cm;
    c.port = 1;
    c.lid = lid(n);
    c.ca_guid = fabric_.node(n).state().node_guid;
    c.comm_id_base = (static_cast<std::uint32_t>(n) + 1) << 16 | 1;
    c.psn_seed = static_cast<std::uint32_t>(fabric_.sim().seed() * 2654435761u) ^ (n * 40503u + 1);
    a.cm = std::make_unique<cm::CommManager>(c);
    cm::SaClientConfig s = opts_.sa_client;
    s.port = 1;
    s.sm_lid = fsm_->sm().sm_lid();
    s.tid_high = 0x53410000u | (static_cast<std::uint32_t>(n) & 0xFFFF);
    a.sa_client = std::make_unique<cm::SaClient>(s);
    fabric_.hca(n).set_gsi_agent(
        [this, n](std::uint8_t port, std::uint16_t slid, std::span<const std::uint8_t> mad) {
          on_gsi(n, port, slid, mad);
        });
  }
  return true;
}

std::array<std::uint8_t, 16> ManagedSubnet::gid_of_lid(std::uint16_t lid) const {
  if (!fsm_ || lid == 0) return {};
  const routing::LidMap& lids = fsm_->sm().lids();
  if (lid >= lids.owner.size() || lids.owner[lid].node == routing::kNoNode) return {};
  const routing::LidOwner o = lids.owner[lid];
  const routing::FabricNode& n = fsm_->sm().fabric().nodes[o.node];
  return cm::port_gid(n.ports[o.port].guid ? n.ports[o.port].guid : n.guid);
}

void ManagedSubnet::forward(const cm::SaNotice& n, TimeNs now) {
  if (sm_node_ == topo::kNoNode || !agents_[sm_node_].cm) return;  // no SA yet
  sa_.notify(n, now);
  // Sent from an event of our own, not from inside the SM's MAD handler.
  fabric_.sim().post_in(0, comp_, kEvPump, sm_node_);
}

void ManagedSubnet::on_gsi(topo::NodeId n, std::uint8_t port, std::uint16_t slid,
                           std::span<const std::uint8_t> mad) {
  stats_.mads_received++;
  cm::GsiMad in;
  in.lid = slid;
  in.port = port;
  std::copy_n(mad.begin(), std::min(mad.size(), in.mad.size()), in.mad.begin());
  dispatch(n, in);
  pump(n);
}

void ManagedSubnet::dispatch(topo::NodeId n, const cm::GsiMad& in) {
  Agent& a = agents_[n];
  const TimeNs now = fabric_.sim().now();
  const std::uint8_t cls = in.mad[1], method = in.mad[3];
  if (cls == wire::kMgmtClassSa) {
    // Requests and ReportResps go to the SA; responses and Reports to the port's client.
    const bool to_sa = method == cm::kSaMethodReportResp ||
                       (!(method & wire::kMethodResponseBit) && method != cm::kSaMethodReport);
    if (n == sm_node_ && to_sa) {
      sa_.on_mad(in, now);
    } else {
      a.sa_client->on_mad(in, now);
    }
  } else if (cls == wire::kMgmtClassCm) {
    a.cm->on_mad(in, now);
  }
}

void ManagedSubnet::send(topo::NodeId n, const cm::GsiMad& out) {
  if (drop_filter && drop_filter(n, out.mad)) {
    stats_.mads_dropped++;
    return;
  }
  stats_.mads_sent++;
  if (out.lid == lid(n, out.port)) {  // to ourselves: no wire (an HCA does not hairpin)
    agents_[n].loopback.push_back(out);
    fabric_.sim().post_in(opts_.loopback_ns, comp_, kEvLoopback, n);
    return;
  }
  if (!fabric_.send_mad(n, out.lid, out.mad, /*smp=*/false)) stats_.send_failed++;
}

void ManagedSubnet::pump(topo::NodeId n) {
  Agent& a = agents_[n];
  const TimeNs now = fabric_.sim().now();
  cm::GsiMad out;
  while (a.cm->poll_mad(now, out)) send(n, out);
  while (a.sa_client->poll_mad(now, out)) send(n, out);
  if (n == sm_node_) {
    while (sa_.poll_mad(now, out)) send(n, out);
  }
  arm(n);
}

void ManagedSubnet::arm(topo::NodeId n) {
  Agent& a = agents_[n];
  TimeNs t = std::min(a.cm->next_deadline(), a.sa_client->next_deadline());
  if (n == sm_node_) t = std::min(t, sa_.next_deadline());
  sim::Simulator& sim = fabric_.sim();
  if (t == kNoDeadline) {
    sim.cancel(a.timer);
    a.armed_ns = kNoDeadline;
    return;
  }
  t = std::max(t, sim.now());
  if (t == a.armed_ns && sim.pending(a.timer)) return;
  a.armed_ns = t;
  if (!sim.reschedule(a.timer, t)) a.timer = sim.schedule_at(t, comp_, kEvDeadline, n);
}

void ManagedSubnet::kick(topo::NodeId hca) {
  pump(hca);
  fabric_.kick(hca);
}

void ManagedSubnet::on_event(sim::Simulator& sim, const sim::Event& ev) {
  const auto n = static_cast<topo::NodeId>(ev.data);
  Agent& a = agents_.at(n);
  if (ev.kind == kEvLoopback) {
    if (!a.loopback.empty()) {
      cm::GsiMad in = a.loopback.front();
      a.loopback.pop_front();
      in.lid = lid(n, in.port);
      stats_.mads_received++;
      dispatch(n, in);
    }
  } else if (ev.kind == kEvPump) {
    // nothing more: pump() below sends what the SA queued
  } else if (ev.kind == kEvDeadline) {
    a.armed_ns = kNoDeadline;
    const TimeNs now = sim.now();
    a.cm->on_deadline(now);
    a.sa_client->on_deadline(now);
    if (n == sm_node_) sa_.on_deadline(now);
  }
  pump(n);
  fabric_.kick(n);  // the CM may have moved QPs: let the HCA pull what they queued
}

}  // namespace weft::sa
