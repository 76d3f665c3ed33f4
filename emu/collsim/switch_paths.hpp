// emu/collsim/switch_paths.hpp — the switch links a NIC-to-NIC message crosses on the packet-level
// fabric's routes, for the coarse model (plan_sim.hpp) to share those links between the flows
// that cross them.
//
// Why: the coarse model's NIC ports alone treat the rail switches and spines as non-blocking.
// They are, in aggregate (rail: nodes / spines uplinks per rail-spine pair), but the subnet
// manager's static routes (minhop: one output port per destination LID, IBA 18.2.4.3.2) send
// some cross-rail flows of ring x8 and tree over the same uplink or spine downlink, where the
// packet-level fabric shares the link's bandwidth. So each message also passes the switch
// output ports of its route, each one a port of the coarse model (serialised whole, as the NIC
// ports).
//
// How: the topology (emu/topo spec) is routed as the SM routes it — routing::Fabric from the
// topology, LIDs from a fresh assigner (ascending GUID order, as the SM's), routing::route with
// the SM's options (default minhop, LMC 0; create()'s arguments) — with no SMP bring-up.
// CollSim.SwitchPathsAreThe SubnetManagersRoutes checks that the walk equals the LFTs the SM
// programs on the fabric. Ports: the output ports of switches toward another switch (the last hop,
// toward the destination HCA, is that NIC's ingress port, already in the model; the first, the
// source HCA's link, its egress port). Thread-safety: a value; path() is const.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <weft/types.hpp>

#include "emu/routing/lid.hpp"
#include "emu/routing/routes.hpp"
#include "emu/topo/topology.hpp"

namespace weft::collsim {

class SwitchPaths {
 public:
  // `nodes` x `gpus` must match the topology's NVLink domains (NIC index = node x gpus + GPU,
  // as FabricNet's ranks). Errors: one sentence.
  // `routing` and `lmc` as the SM's (SmConfig): the routes are those the SM would program.
  static Result<SwitchPaths, std::string> create(const std::string& topology, int nodes, int gpus,
                                                 const routing::RoutingOptions& routing = {},
                                                 int lmc = 0);

  // Switch-to-switch output ports (ids 0..ports()-1) of the route from NIC `from` to NIC `to`,
  // in order, appended to `out`. Asserts the route exists (the fabric is connected).
  void path(int from, int to, std::vector<std::uint32_t>& out) const;
  // Every switch the route from NIC `from` to NIC `to` crosses, in order: the port it enters by
  // and the port it leaves by (ids as path()'s, here including the ports facing HCAs), appended
  // to `out`. What packets of two routes meet in one switch input buffer (the fabric's switches
  // are input-buffered: one FIFO per input port and VL, README of emu/fabric).
  struct SwitchHop {
    std::uint32_t in = 0, out = 0;
  };
  void hops(int from, int to, std::vector<SwitchHop>& out) const;
  // The route's fixed delay for a packet without payload, NIC port to NIC port: every link's
  // propagation plus `switch_ns` per switch crossed (a zero-length packet's serialisation,
  // ~26 bytes, is left out).
  TimeNs route_ns(int from, int to, TimeNs switch_ns) const;
  std::size_t ports() const { return port_rate_.size(); }
  // A port's link rate over the source NIC link's (1 on rail: every link is the same NDR 4x).
  double rate_scale(std::uint32_t id) const { return port_rate_[id]; }
  // "rail03/p12" (the switch's description and port), for diagnostics.
  std::string port_name(std::uint32_t id) const;

 private:
  template <class Visit>
  void walk(int from, int to, Visit visit) const;
  SwitchPaths() = default;
  topo::Topology topo_;
  routing::LidMap lids_;
  routing::Routes routes_;
  std::vector<topo::NodeId> hca_;     // by NIC index
  std::vector<std::uint32_t> first_;  // by topology node: id of its port 1 (switches)
  std::vector<topo::PortRef> port_of_;
  std::vector<double> port_rate_;
};

}  // namespace weft::collsim
