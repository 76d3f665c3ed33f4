// emu/collsim/switch_paths.cpp — see switch_paths.hpp.
#include "emu/collsim/switch_paths.hpp"

#include "emu/routing/fabric.hpp"
#include "emu/topo/spec.hpp"
#include "src/base/assert.hpp"

namespace weft::collsim {

Result<SwitchPaths, std::string> SwitchPaths::create(const std::string& topology, int nodes,
                                                     int gpus,
                                                     const routing::RoutingOptions& routing,
                                                     int lmc) {
  auto t = topo::from_spec(topology);
  if (!t) return std::string("topology: ") + t.error().message;
  SwitchPaths s;
  s.topo_ = std::move(*t);
  // NIC index -> HCA as FabricNet numbers its ranks.
  const auto& doms = s.topo_.nvlink_domains();
  if (doms.empty()) {
    for (topo::NodeId i = 0; i < s.topo_.node_count(); ++i)
      if (!s.topo_.node(i).is_switch()) s.hca_.push_back(i);
    if (gpus != 1 || static_cast<int>(s.hca_.size()) != nodes)
      return std::string("the topology's HCAs do not match the cluster");
  } else {
    if (static_cast<int>(doms.size()) != nodes) return std::string("node count mismatch");
    for (const auto& d : doms) {
      if (static_cast<int>(d.hcas.size()) != gpus) return std::string("GPU count mismatch");
      s.hca_.insert(s.hca_.end(), d.hcas.begin(), d.hcas.end());
    }
  }
  // Routed as the SM's heavy sweep routes (subnet_manager.cpp: assign LIDs, routing::route
  // with SmConfig's RoutingOptions and LMC). Messages go to base LIDs (path bits 0).
  const routing::Fabric rf = routing::Fabric::from_topology(s.topo_);
  auto lids = routing::assign_lids(rf, lmc);
  if (!lids) return std::string("LIDs: ") + lids.error().message;
  s.lids_ = std::move(*lids);
  auto routes = routing::route(rf, s.lids_, routing);
  if (!routes) return std::string("routing: ") + routes.error().message;
  s.routes_ = std::move(*routes);
  // One id per switch port; its rate relative to the HCA link of NIC 0.
  const topo::Node& h0 = s.topo_.node(s.hca_.front());
  const double nic_mbps = static_cast<double>(s.topo_.link(h0.ports[1].link).rate_mbps());
  s.first_.assign(s.topo_.node_count(), UINT32_MAX);
  for (topo::NodeId i = 0; i < s.topo_.node_count(); ++i) {
    const topo::Node& n = s.topo_.node(i);
    if (!n.is_switch()) continue;
    s.first_[i] = static_cast<std::uint32_t>(s.port_of_.size());
    for (int p = 1; p <= n.num_ports(); ++p) {
      const topo::LinkId l = n.ports[static_cast<std::size_t>(p)].link;
      s.port_of_.push_back(topo::PortRef{i, p});
      s.port_rate_.push_back(
          l == topo::kNoLink ? 1.0 : static_cast<double>(s.topo_.link(l).rate_mbps()) / nic_mbps);
    }
  }
  return s;
}

// Calls visit(sw, in_port, out_port) for each switch on the route from HCA `from` to HCA `to`,
// in order.
template <class Visit>
void SwitchPaths::walk(int from, int to, Visit visit) const {
  const topo::NodeId src = hca_[static_cast<std::size_t>(from)];
  const topo::NodeId dst = hca_[static_cast<std::size_t>(to)];
  const routing::Lid dlid = lids_.lid_of(dst, 1);
  auto at = topo_.peer(topo::PortRef{src, 1});
  WEFT_ASSERT_MSG(at.has_value(), "a NIC is not cabled");
  // A route visits each switch at most once; the bound only guards against a looping table.
  for (std::size_t hops = 0; hops <= topo_.node_count(); ++hops) {
    const topo::NodeId sw = at->node;
    if (!topo_.node(sw).is_switch()) {
      WEFT_ASSERT_MSG(sw == dst, "a route ends at the wrong HCA");
      return;
    }
    const std::uint8_t port = routes_.out_port(routes_.switch_index[sw], dlid);
    WEFT_ASSERT_MSG(port != routing::kDropPort && port != 0, "no route between two NICs");
    visit(sw, static_cast<std::uint8_t>(at->port), port);
    at = topo_.peer(topo::PortRef{sw, port});
    WEFT_ASSERT_MSG(at.has_value(), "a route leaves through an uncabled port");
  }
  WEFT_ASSERT_MSG(false, "a route loops");
}

void SwitchPaths::path(int from, int to, std::vector<std::uint32_t>& out) const {
  const std::size_t base = out.size();
  walk(from, to, [&](topo::NodeId sw, std::uint8_t, std::uint8_t port) {
    out.push_back(first_[sw] + port - 1U);
  });
  if (out.size() > base) out.pop_back();  // the last switch's port: the NIC's ingress
}

void SwitchPaths::hops(int from, int to, std::vector<SwitchHop>& out) const {
  walk(from, to, [&](topo::NodeId sw, std::uint8_t in, std::uint8_t port) {
    out.push_back(SwitchHop{first_[sw] + in - 1U, first_[sw] + port - 1U});
  });
}

TimeNs SwitchPaths::route_ns(int from, int to, TimeNs switch_ns) const {
  const topo::Node& h = topo_.node(hca_[static_cast<std::size_t>(from)]);
  TimeNs ns = topo_.link(h.ports[1].link).propagation_ns();
  walk(from, to, [&](topo::NodeId sw, std::uint8_t, std::uint8_t port) {
    ns += switch_ns + topo_.link(topo_.node(sw).ports[port].link).propagation_ns();
  });
  return ns;
}

std::string SwitchPaths::port_name(std::uint32_t id) const {
  const topo::PortRef p = port_of_[id];
  return topo_.node(p.node).description + "/p" + std::to_string(p.port);
}

}  // namespace weft::collsim
