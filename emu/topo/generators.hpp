// emu/topo/generators.hpp — deterministic topology generators.
//
// Every generator is a pure function of its parameters: the same parameters give the same
// Topology, node for node and port for port. GUIDs are derived from position:
//   node GUID = 0x0002c9 (Mellanox OUI) << 40 | role << 32 | index << 8
// with role 1 for switches and 2 for HCAs, and `index` the node's position among its role in
// the order documented per generator; HCA port p has GUID node GUID + p. Descriptions name the
// position ("leaf003", "p01agg02", "node002-hca5", "sw_1_2_3", "g03r01h00").
//
// Port numbering is documented per generator, because routing engines and tests depend on it
// (e.g. DOR on a torus uses the fixed direction ports).
//
// Errors: parameters that cannot form the fabric (a radix exceeded, uplinks that do not divide
// evenly, a size past kNodesMax) return GenError with one sentence; generators never assert on
// user input.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emu/topo/topology.hpp"

namespace weft::topo {

inline constexpr std::size_t kNodesMax = 1u << 20;  // nodes in one generated fabric

struct GenError {
  std::string message;
};
using GenResult = Result<Topology, GenError>;

std::uint64_t make_guid(NodeKind kind, std::uint64_t index);

// Link properties per tier; defaults: 4x NDR, 2 m to hosts, 10 m leaf-spine, 30 m above.
struct TierLinks {
  LinkProps host{LinkWidth::k4x, LinkSpeed::kNdr, 2.0};
  LinkProps tier1{LinkWidth::k4x, LinkSpeed::kNdr, 10.0};
  LinkProps tier2{LinkWidth::k4x, LinkSpeed::kNdr, 30.0};
};

// Two-level folded Clos, port numbering identical to gen_fattree.py 2: each leaf's ports
// 1..hosts go to its HCAs, then its uplinks spine by spine (uplinks_per_spine each); spine
// ports in leaf order. Names leafNNN, spineNNN, hcaNNNNN (gen_fattree.py's).
// Switch index order: leaves, then spines.
struct FatTree2Params {
  int radix = 36;
  int leaves = 36;
  int hosts_per_leaf = 18;
  int spines = 18;
  int uplinks_per_spine = 0;  // 0: (radix - hosts_per_leaf) / spines, must divide evenly
  TierLinks links{};
};
GenResult fat_tree_2(const FatTree2Params& p);

// Three-level: `pods` pods of leaves_per_pod leaves and aggs_per_pod aggregation switches
// (full mesh leaf-agg), core group g (cores_per_group switches) joined to agg g of every pod.
// Port numbering identical to gen_fattree.py 3; names pPPleafLL, pPPaggAA, coreGG_CC. With
// radix k, pods=k, the rest k/2, it is the k-ary fat tree of Al-Fares et al. (k^3/4 hosts,
// 5k^2/4 switches). Switch index order: per pod leaves then aggs, then cores.
struct FatTree3Params {
  int radix = 36;
  int pods = 36;
  int leaves_per_pod = 18;
  int hosts_per_leaf = 18;
  int aggs_per_pod = 18;
  int cores_per_group = 18;
  TierLinks links{};
};
GenResult fat_tree_3(const FatTree3Params& p);

// Leaf-spine: every leaf joined to every spine by links_per_spine parallel links. Leaf ports:
// 1..hosts, then spine by spine. Spine ports in leaf order. radix 0 = the smallest that fits.
struct LeafSpineParams {
  int leaves = 4;
  int spines = 2;
  int hosts_per_leaf = 8;
  int links_per_spine = 1;
  int radix = 0;
  TierLinks links{};
};
GenResult leaf_spine(const LeafSpineParams& p);

// Rail-optimized GPU cluster: `nodes` servers with `gpus` GPUs each; GPU g of every server has
// its own single-port HCA (nodeNNN-hcaG) on rail switch g (railGG, port n+1 for server n); rail
// switches join `spines` spines with links_per_spine links each (default: nodes / spines,
// at least 1, so rails are non-blocking). The HCAs of one server share its system image GUID
// and form an NVLink domain nodeNNN. Switch index order: rails, then spines.
struct RailParams {
  int nodes = 4;
  int gpus = 8;
  int spines = 2;
  int links_per_spine = 0;
  int radix = 0;
  TierLinks links{};
};
GenResult rail(const RailParams& p);

// Torus or mesh of any dimensions: one switch per coordinate (sw_x_y_z), `hosts` HCAs on each
// (hca_x_y_z_h). Switch ports: 1..hosts to the HCAs, then for dimension d port hosts+2d+1
// toward +1 and hosts+2d+2 toward -1. A torus wraps each dimension of size > 2 (size 2 has one
// link, not two parallel ones); a mesh leaves edge ports free. Switch index = coordinate in
// row-major order (last dimension fastest).
struct TorusParams {
  std::vector<int> dims{4, 4, 4};
  int hosts = 1;
  bool wrap = true;  // false: mesh
  LinkProps host_link{LinkWidth::k4x, LinkSpeed::kNdr, 2.0};
  LinkProps switch_link{LinkWidth::k4x, LinkSpeed::kNdr, 1.0};
};
GenResult torus(const TorusParams& p);

// Dragonfly (Kim et al. 2008): `groups` groups of `routers` routers, all-to-all inside a
// group; each router has `global` global links; group i's global port j (router j / global)
// goes to group (i + 1 + j mod (groups-1)) mod groups, so every pair of groups is joined by
// routers*global/(groups-1) links (which must divide evenly). Router ports: 1..hosts, then
// local links to the other routers in router order, then the global ports. Names gGGrRR and
// gGGrRRhHH.
struct DragonflyParams {
  int groups = 9;
  int routers = 4;
  int hosts = 2;
  int global = 2;
  LinkProps host_link{LinkWidth::k4x, LinkSpeed::kNdr, 2.0};
  LinkProps local_link{LinkWidth::k4x, LinkSpeed::kNdr, 3.0};
  LinkProps global_link{LinkWidth::k4x, LinkSpeed::kNdr, 50.0};
};
GenResult dragonfly(const DragonflyParams& p);

}  // namespace weft::topo
