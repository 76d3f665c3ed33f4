// emu/topo/generators.cpp — fat tree, leaf-spine, rail, torus/mesh, dragonfly generators.
#include "emu/topo/generators.hpp"

#include <algorithm>
#include <cstdio>

namespace weft::topo {

std::uint64_t make_guid(NodeKind kind, std::uint64_t index) {
  const std::uint64_t role = kind == NodeKind::kSwitch ? 1 : 2;
  return (0x0002c9ULL << 40) | (role << 32) | (index << 8);
}

namespace {

std::string fmt(const char* f, int a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
std::string fmt(const char* f, int a, int c) {
  char b[64];
  std::snprintf(b, sizeof b, f, a, c);
  return b;
}
std::string fmt(const char* f, int a, int c, int d) {
  char b[64];
  std::snprintf(b, sizeof b, f, a, c, d);
  return b;
}

// Allocates ports in order, as gen_fattree.py's port(): each node's next free port.
class Builder {
 public:
  Topology topo;
  std::uint64_t switches = 0;
  std::uint64_t hcas = 0;
  std::vector<int> next_port;

  NodeId sw(int ports, std::string desc) {
    NodeId id = topo.add_switch(make_guid(NodeKind::kSwitch, switches++), ports, std::move(desc));
    next_port.push_back(1);
    return id;
  }
  NodeId hca(std::string desc, std::uint64_t sysimg = 0) {
    NodeId id = topo.add_hca(make_guid(NodeKind::kHca, hcas++), 1, std::move(desc), sysimg);
    next_port.push_back(1);
    return id;
  }
  void link(NodeId a, NodeId b, const LinkProps& props) {
    topo.connect({a, next_port[a]++}, {b, next_port[b]++}, props);
  }
};

bool too_big(std::uint64_t nodes, std::string* err) {
  if (nodes <= kNodesMax) return false;
  *err = "fabric would have " + std::to_string(nodes) + " nodes, more than the limit of " +
         std::to_string(kNodesMax);
  return true;
}

#define WEFT_GEN_REQUIRE(cond, msg)    \
  do {                                 \
    if (!(cond)) return GenError{msg}; \
  } while (0)

}  // namespace

GenResult fat_tree_2(const FatTree2Params& p) {
  WEFT_GEN_REQUIRE(p.radix >= 2 && p.radix <= kPortsMax, "radix must be in 2..254");
  WEFT_GEN_REQUIRE(p.leaves >= 1 && p.spines >= 1 && p.hosts_per_leaf >= 1,
                   "leaves, spines and hosts per leaf must be at least 1");
  WEFT_GEN_REQUIRE(p.hosts_per_leaf < p.radix,
                   "hosts per leaf (" + std::to_string(p.hosts_per_leaf) +
                       ") leave no uplink on a radix-" + std::to_string(p.radix) + " leaf");
  int k = p.uplinks_per_spine;
  if (k == 0) {
    int up = p.radix - p.hosts_per_leaf;
    WEFT_GEN_REQUIRE(up % p.spines == 0, "the " + std::to_string(up) +
                                             " uplinks of a leaf do not divide evenly over " +
                                             std::to_string(p.spines) + " spines");
    k = up / p.spines;
  }
  WEFT_GEN_REQUIRE(k >= 1, "uplinks per spine must be at least 1");
  WEFT_GEN_REQUIRE(
      p.hosts_per_leaf + k * p.spines <= p.radix,
      "leaf radix exceeded: " + std::to_string(p.hosts_per_leaf + k * p.spines) + " ports");
  WEFT_GEN_REQUIRE(p.leaves * k <= p.radix,
                   "spine radix exceeded: " + std::to_string(p.leaves * k) + " ports");
  std::string err;
  if (too_big(static_cast<std::uint64_t>(p.leaves) * (p.hosts_per_leaf + 1) + p.spines, &err))
    return GenError{err};
  Builder b;
  // HCAs are created first (hca00000...), as gen_fattree.py writes them first.
  std::vector<NodeId> hca(static_cast<std::size_t>(p.leaves) * p.hosts_per_leaf);
  for (std::size_t i = 0; i < hca.size(); ++i) hca[i] = b.hca(fmt("hca%05d", static_cast<int>(i)));
  std::vector<NodeId> leaf, spine;
  for (int l = 0; l < p.leaves; ++l) leaf.push_back(b.sw(p.radix, fmt("leaf%03d", l)));
  for (int s = 0; s < p.spines; ++s) spine.push_back(b.sw(p.radix, fmt("spine%03d", s)));
  for (int l = 0; l < p.leaves; ++l)
    for (int h = 0; h < p.hosts_per_leaf; ++h)
      b.link(leaf[l], hca[static_cast<std::size_t>(l) * p.hosts_per_leaf + h], p.links.host);
  for (int l = 0; l < p.leaves; ++l)
    for (int s = 0; s < p.spines; ++s)
      for (int i = 0; i < k; ++i) b.link(leaf[l], spine[s], p.links.tier1);
  return std::move(b.topo);
}

GenResult fat_tree_3(const FatTree3Params& p) {
  WEFT_GEN_REQUIRE(p.radix >= 2 && p.radix <= kPortsMax, "radix must be in 2..254");
  WEFT_GEN_REQUIRE(p.pods >= 1 && p.leaves_per_pod >= 1 && p.hosts_per_leaf >= 1 &&
                       p.aggs_per_pod >= 1 && p.cores_per_group >= 1,
                   "pods, leaves, hosts, aggs and cores must be at least 1");
  int up = p.radix - p.hosts_per_leaf;
  WEFT_GEN_REQUIRE(up >= 1, "hosts per leaf leave no uplink");
  WEFT_GEN_REQUIRE(up % p.aggs_per_pod == 0,
                   "the " + std::to_string(up) + " uplinks of a leaf do not divide evenly over " +
                       std::to_string(p.aggs_per_pod) + " aggregation switches");
  int k1 = up / p.aggs_per_pod;
  int adown = p.leaves_per_pod * k1;
  WEFT_GEN_REQUIRE(adown < p.radix, "aggregation radix exceeded by " + std::to_string(adown) +
                                        " downlinks (no port left for uplinks)");
  int aup = p.radix - adown;
  WEFT_GEN_REQUIRE(aup % p.cores_per_group == 0,
                   "the " + std::to_string(aup) +
                       " uplinks of an aggregation switch do not divide evenly over " +
                       std::to_string(p.cores_per_group) + " cores");
  int k2 = aup / p.cores_per_group;
  WEFT_GEN_REQUIRE(p.pods * k2 <= p.radix,
                   "core radix exceeded: " + std::to_string(p.pods * k2) + " ports");
  std::uint64_t leaves = static_cast<std::uint64_t>(p.pods) * p.leaves_per_pod;
  std::string err;
  if (too_big(leaves * (p.hosts_per_leaf + 1) +
                  static_cast<std::uint64_t>(p.pods) * p.aggs_per_pod +
                  static_cast<std::uint64_t>(p.aggs_per_pod) * p.cores_per_group,
              &err))
    return GenError{err};
  Builder b;
  std::vector<NodeId> hca(leaves * p.hosts_per_leaf);
  for (std::size_t i = 0; i < hca.size(); ++i) hca[i] = b.hca(fmt("hca%05d", static_cast<int>(i)));
  std::vector<NodeId> leaf, agg, core;
  for (int q = 0; q < p.pods; ++q) {
    for (int l = 0; l < p.leaves_per_pod; ++l)
      leaf.push_back(b.sw(p.radix, fmt("p%02dleaf%02d", q, l)));
    for (int a = 0; a < p.aggs_per_pod; ++a)
      agg.push_back(b.sw(p.radix, fmt("p%02dagg%02d", q, a)));
  }
  for (int g = 0; g < p.aggs_per_pod; ++g)
    for (int c = 0; c < p.cores_per_group; ++c)
      core.push_back(b.sw(p.radix, fmt("core%02d_%02d", g, c)));
  std::size_t h = 0;
  for (int q = 0; q < p.pods; ++q) {
    for (int l = 0; l < p.leaves_per_pod; ++l)
      for (int i = 0; i < p.hosts_per_leaf; ++i)
        b.link(leaf[q * p.leaves_per_pod + l], hca[h++], p.links.host);
    for (int l = 0; l < p.leaves_per_pod; ++l)
      for (int a = 0; a < p.aggs_per_pod; ++a)
        for (int i = 0; i < k1; ++i)
          b.link(leaf[q * p.leaves_per_pod + l], agg[q * p.aggs_per_pod + a], p.links.tier1);
  }
  for (int q = 0; q < p.pods; ++q)
    for (int g = 0; g < p.aggs_per_pod; ++g)
      for (int c = 0; c < p.cores_per_group; ++c)
        for (int i = 0; i < k2; ++i)
          b.link(agg[q * p.aggs_per_pod + g], core[g * p.cores_per_group + c], p.links.tier2);
  return std::move(b.topo);
}

GenResult leaf_spine(const LeafSpineParams& p) {
  WEFT_GEN_REQUIRE(
      p.leaves >= 1 && p.spines >= 1 && p.hosts_per_leaf >= 0 && p.links_per_spine >= 1,
      "leaves, spines and links per spine must be at least 1");
  int leaf_ports = p.hosts_per_leaf + p.spines * p.links_per_spine;
  int spine_ports = p.leaves * p.links_per_spine;
  int need = std::max(leaf_ports, spine_ports);
  int radix = p.radix ? p.radix : need;
  WEFT_GEN_REQUIRE(radix <= kPortsMax,
                   "switches would need " + std::to_string(radix) + " ports (at most 254)");
  WEFT_GEN_REQUIRE(need <= radix, "radix " + std::to_string(radix) + " is too small: leaves need " +
                                      std::to_string(leaf_ports) + " ports, spines " +
                                      std::to_string(spine_ports));
  std::string err;
  if (too_big(static_cast<std::uint64_t>(p.leaves) * (p.hosts_per_leaf + 1) + p.spines, &err))
    return GenError{err};
  Builder b;
  std::vector<NodeId> hca(static_cast<std::size_t>(p.leaves) * p.hosts_per_leaf), leaf, spine;
  for (std::size_t i = 0; i < hca.size(); ++i) hca[i] = b.hca(fmt("hca%05d", static_cast<int>(i)));
  for (int l = 0; l < p.leaves; ++l) leaf.push_back(b.sw(radix, fmt("leaf%03d", l)));
  for (int s = 0; s < p.spines; ++s) spine.push_back(b.sw(radix, fmt("spine%03d", s)));
  for (int l = 0; l < p.leaves; ++l)
    for (int h = 0; h < p.hosts_per_leaf; ++h)
      b.link(leaf[l], hca[static_cast<std::size_t>(l) * p.hosts_per_leaf + h], p.links.host);
  for (int l = 0; l < p.leaves; ++l)
    for (int s = 0; s < p.spines; ++s)
      for (int i = 0; i < p.links_per_spine; ++i) b.link(leaf[l], spine[s], p.links.tier1);
  return std::move(b.topo);
}

GenResult rail(const RailParams& p) {
  WEFT_GEN_REQUIRE(p.nodes >= 1 && p.gpus >= 1 && p.spines >= 0,
                   "nodes and gpus must be at least 1, spines at least 0");
  WEFT_GEN_REQUIRE(p.gpus == 1 || p.spines >= 1, "rails need at least one spine to be connected");
  int k = p.links_per_spine;
  if (k == 0 && p.spines > 0) k = std::max(1, p.nodes / p.spines);
  int rail_ports = p.nodes + p.spines * k;
  int spine_ports = p.gpus * k;
  int need = std::max(rail_ports, spine_ports);
  int radix = p.radix ? p.radix : need;
  WEFT_GEN_REQUIRE(radix <= kPortsMax,
                   "switches would need " + std::to_string(need) + " ports (at most 254)");
  WEFT_GEN_REQUIRE(need <= radix, "radix " + std::to_string(radix) +
                                      " is too small: rail switches need " +
                                      std::to_string(rail_ports) + " ports, spines " +
                                      std::to_string(spine_ports));
  std::string err;
  if (too_big(static_cast<std::uint64_t>(p.nodes) * p.gpus + p.gpus + p.spines, &err))
    return GenError{err};
  Builder b;
  std::vector<NodeId> hca;
  for (int n = 0; n < p.nodes; ++n) {
    // The server's system image GUID: that of its first HCA, shared by all of them.
    std::uint64_t sysimg = make_guid(NodeKind::kHca, b.hcas);
    NvlinkDomain dom{fmt("node%03d", n), {}};
    for (int g = 0; g < p.gpus; ++g) {
      hca.push_back(b.hca(fmt("node%03d-hca%d", n, g), sysimg));
      dom.hcas.push_back(hca.back());
    }
    b.topo.add_nvlink_domain(std::move(dom));
  }
  std::vector<NodeId> rails, spine;
  for (int g = 0; g < p.gpus; ++g) rails.push_back(b.sw(radix, fmt("rail%02d", g)));
  for (int s = 0; s < p.spines; ++s) spine.push_back(b.sw(radix, fmt("spine%03d", s)));
  for (int g = 0; g < p.gpus; ++g)
    for (int n = 0; n < p.nodes; ++n)
      b.link(rails[g], hca[static_cast<std::size_t>(n) * p.gpus + g], p.links.host);
  for (int g = 0; g < p.gpus; ++g)
    for (int s = 0; s < p.spines; ++s)
      for (int i = 0; i < k; ++i) b.link(rails[g], spine[s], p.links.tier1);
  return std::move(b.topo);
}

GenResult torus(const TorusParams& p) {
  WEFT_GEN_REQUIRE(!p.dims.empty() && p.dims.size() <= 8, "dims must have 1 to 8 dimensions");
  std::uint64_t count = 1;
  for (int d : p.dims) {
    WEFT_GEN_REQUIRE(d >= 1, "every dimension must be at least 1");
    count *= static_cast<std::uint64_t>(d);
    WEFT_GEN_REQUIRE(count <= kNodesMax, "too many switches");
  }
  WEFT_GEN_REQUIRE(p.hosts >= 0, "hosts must be at least 0");
  const int nd = static_cast<int>(p.dims.size());
  const int radix = p.hosts + 2 * nd;
  WEFT_GEN_REQUIRE(radix >= 1 && radix <= kPortsMax,
                   "switches would need " + std::to_string(radix) + " ports");
  std::string err;
  if (too_big(count * (static_cast<std::uint64_t>(p.hosts) + 1), &err)) return GenError{err};
  Builder b;
  auto coord_name = [&](std::uint64_t idx, const char* prefix) {
    std::vector<int> c(nd);
    for (int d = nd - 1; d >= 0; --d) {
      c[d] = static_cast<int>(idx % p.dims[d]);
      idx /= p.dims[d];
    }
    std::string s = prefix;
    for (int d = 0; d < nd; ++d) s += "_" + std::to_string(c[d]);
    return s;
  };
  std::vector<NodeId> sw(count);
  for (std::uint64_t i = 0; i < count; ++i) sw[i] = b.sw(radix, coord_name(i, "sw"));
  for (std::uint64_t i = 0; i < count; ++i)
    for (int h = 0; h < p.hosts; ++h) {
      NodeId hc = b.hca(coord_name(i, "hca") + "_" + std::to_string(h));
      b.topo.connect({sw[i], h + 1}, {hc, 1}, p.host_link);
    }
  // Stride of dimension d in row-major order.
  std::vector<std::uint64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * p.dims[d + 1];
  for (int d = 0; d < nd; ++d) {
    const int n = p.dims[d];
    for (std::uint64_t i = 0; i < count; ++i) {
      int c = static_cast<int>((i / stride[d]) % n);
      int plus_port = p.hosts + 2 * d + 1, minus_port = p.hosts + 2 * d + 2;
      if (c + 1 < n) {
        b.topo.connect({sw[i], plus_port}, {sw[i + stride[d]], minus_port}, p.switch_link);
      } else if (p.wrap && n > 2) {
        // Wrap link from the last coordinate back to 0.
        b.topo.connect({sw[i], plus_port}, {sw[i - stride[d] * (n - 1)], minus_port},
                       p.switch_link);
      }
    }
  }
  return std::move(b.topo);
}

GenResult dragonfly(const DragonflyParams& p) {
  WEFT_GEN_REQUIRE(p.groups >= 1 && p.routers >= 1 && p.hosts >= 0 && p.global >= 0,
                   "groups and routers must be at least 1");
  const int gports = p.routers * p.global;  // global ports per group
  int per_pair = 0;
  if (p.groups > 1) {
    WEFT_GEN_REQUIRE(gports >= p.groups - 1,
                     "routers*global (" + std::to_string(gports) +
                         ") global ports per group cannot reach the other " +
                         std::to_string(p.groups - 1) + " groups");
    WEFT_GEN_REQUIRE(gports % (p.groups - 1) == 0, "routers*global (" + std::to_string(gports) +
                                                       ") must be a multiple of groups-1 (" +
                                                       std::to_string(p.groups - 1) + ")");
    per_pair = gports / (p.groups - 1);
  }
  const int radix = p.hosts + (p.routers - 1) + (p.groups > 1 ? p.global : 0);
  WEFT_GEN_REQUIRE(radix >= 1 && radix <= kPortsMax,
                   "routers would need " + std::to_string(radix) + " ports");
  std::string err;
  if (too_big(static_cast<std::uint64_t>(p.groups) * p.routers * (p.hosts + 1), &err))
    return GenError{err};
  Builder b;
  std::vector<NodeId> r;
  for (int g = 0; g < p.groups; ++g)
    for (int i = 0; i < p.routers; ++i) r.push_back(b.sw(radix, fmt("g%02dr%02d", g, i)));
  auto R = [&](int g, int i) { return r[static_cast<std::size_t>(g) * p.routers + i]; };
  for (int g = 0; g < p.groups; ++g)
    for (int i = 0; i < p.routers; ++i)
      for (int h = 0; h < p.hosts; ++h) {
        NodeId hc = b.hca(fmt("g%02dr%02dh%02d", g, i, h));
        b.topo.connect({R(g, i), h + 1}, {hc, 1}, p.host_link);
      }
  // Local: router i's port toward router j is hosts + (j < i ? j : j - 1) + 1.
  for (int g = 0; g < p.groups; ++g)
    for (int i = 0; i < p.routers; ++i)
      for (int j = i + 1; j < p.routers; ++j)
        b.topo.connect({R(g, i), p.hosts + (j - 1) + 1}, {R(g, j), p.hosts + i + 1}, p.local_link);
  // Global: group i, copy c, target t: global port j = c*(G-1) + ((t - i - 1) mod G).
  const int G = p.groups;
  for (int gi = 0; gi < G; ++gi)
    for (int gt = gi + 1; gt < G; ++gt)
      for (int c = 0; c < per_pair; ++c) {
        int ji = c * (G - 1) + ((gt - gi - 1 + G) % G);
        int jt = c * (G - 1) + ((gi - gt - 1 + 2 * G) % G);
        PortRef a{R(gi, ji / p.global), p.hosts + (p.routers - 1) + ji % p.global + 1};
        PortRef z{R(gt, jt / p.global), p.hosts + (p.routers - 1) + jt % p.global + 1};
        b.topo.connect(a, z, p.global_link);
      }
  return std::move(b.topo);
}

}  // namespace weft::topo
