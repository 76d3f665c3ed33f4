// emu/topo/topology.hpp — a fabric's shape as a plain value: nodes (switches and HCAs), their
// ports, the links between ports, and NVLink domains (HCAs of one server joined by a fabric the
// subnet manager does not manage).
//
// What it is: the input of everything that builds a fabric (switch and link models, the subnet
// manager's discovery and routing tests). Generators (generators.hpp), the spec parser
// (spec.hpp) and the net-file reader (netfile.hpp) produce it; the net-file writer and the
// Graphviz export consume it. It holds no behaviour beyond lookups, validation and statistics.
//
// Numbering follows the IBA: a switch has ports 1..num_ports plus the management port 0
// (IBA 14.2.1, switch port 0 carries the switch's one port GUID); an HCA (channel adapter) has
// ports 1..num_ports, each with its own port GUID. Links join two external ports (>= 1).
//
// Thread-safety: a plain value; concurrent const use is safe. Lifetime: NodeId/LinkId are
// indices, stable for the life of the value (nothing is ever removed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <weft/types.hpp>

namespace weft::topo {

using NodeId = std::uint32_t;
using LinkId = std::uint32_t;
inline constexpr NodeId kNoNode = UINT32_MAX;
inline constexpr LinkId kNoLink = UINT32_MAX;
inline constexpr int kPortsMax = 254;  // IBA: switch ports are numbered 0..254

enum class NodeKind : std::uint8_t { kSwitch, kHca };
const char* to_string(NodeKind k);

// Link width (lanes), IBA PortInfo:LinkWidthActive.
enum class LinkWidth : std::uint8_t { k1x = 1, k2x = 2, k4x = 4, k8x = 8, k12x = 12 };
// Per-lane signalling generation, IBA PortInfo:LinkSpeedActive / LinkSpeedExtActive.
enum class LinkSpeed : std::uint8_t { kSdr, kDdr, kQdr, kFdr10, kFdr, kEdr, kHdr, kNdr, kXdr };
const char* to_string(LinkSpeed s);
std::optional<LinkSpeed> parse_speed(std::string_view s);  // "HDR", "hdr", ...
std::optional<LinkWidth> parse_width(std::string_view s);  // "4x", "4X", "4"
// Data rate of one lane after line coding, Mb/s (SDR 2000 ... NDR 100000).
std::uint64_t lane_rate_mbps(LinkSpeed s);

struct PortRef {
  NodeId node = kNoNode;
  int port = 0;
  friend bool operator==(const PortRef&, const PortRef&) = default;
};

struct LinkProps {
  LinkWidth width = LinkWidth::k4x;
  LinkSpeed speed = LinkSpeed::kNdr;  // 4x NDR = 400 Gb/s
  double length_m = 2.0;
  friend bool operator==(const LinkProps&, const LinkProps&) = default;
};

struct Link {
  PortRef a;
  PortRef b;
  LinkProps props;
  std::uint64_t rate_mbps() const {
    return static_cast<std::uint64_t>(props.width) * lane_rate_mbps(props.speed);
  }
  // One-way propagation delay: 5 ns per metre (signal speed ~0.67 c in copper and fibre).
  TimeNs propagation_ns() const { return static_cast<TimeNs>(props.length_m * 5.0 + 0.5); }
  PortRef other(NodeId n) const { return a.node == n ? b : a; }
};

struct Port {
  std::uint64_t guid = 0;  // HCA ports 1..n; switches: port 0 only (0 elsewhere)
  LinkId link = kNoLink;
};

struct Node {
  NodeKind kind = NodeKind::kHca;
  std::uint64_t guid = 0;
  std::uint64_t system_image_guid = 0;  // HCAs of one server share it
  std::uint32_t vendor_id = 0x02c9;
  std::uint32_t device_id = 0;
  std::string description;  // NodeDescription (IBA 14.2.5.2), at most 64 bytes
  std::vector<Port> ports;  // index = port number; size num_ports + 1
  int num_ports() const { return static_cast<int>(ports.size()) - 1; }
  bool is_switch() const { return kind == NodeKind::kSwitch; }
};

// HCAs of one server that share a private interconnect (NVLink/NVSwitch). Not IB-managed.
struct NvlinkDomain {
  std::string name;
  std::vector<NodeId> hcas;
  friend bool operator==(const NvlinkDomain&, const NvlinkDomain&) = default;
};

struct TopologyStats {
  std::size_t switches = 0;
  std::size_t hcas = 0;
  std::size_t links = 0;
  std::size_t switch_links = 0;  // switch <-> switch
  std::size_t hca_links = 0;     // switch <-> HCA (or HCA <-> HCA)
  std::size_t ports_used = 0;
  std::size_t ports_total = 0;  // external ports of all nodes
  int switch_levels = 0;        // tree levels above the HCAs; 0 if not a levelled tree
  // Fat trees: links that cross the worst bisection, estimated as hcas/2 divided by the
  // product of the per-level oversubscription (down/up) ratios, when the fabric is a levelled
  // tree (every switch link joins adjacent levels). 0 when the estimate does not apply.
  double bisection_links = 0;
  std::uint64_t bisection_mbps = 0;  // bisection_links x the slowest switch-link rate
  double oversubscription = 1.0;     // product of per-level ratios (1.0 = non-blocking)
};

class Topology {
 public:
  // Adds a node with ports 1..num_ports unconnected. Asserts num_ports in 1..kPortsMax.
  NodeId add_switch(std::uint64_t guid, int num_ports, std::string description);
  // HCA ports get GUIDs guid + port unless set afterwards through mutable_node().
  NodeId add_hca(std::uint64_t guid, int num_ports, std::string description,
                 std::uint64_t system_image_guid = 0);
  // Joins two free ports. Asserts (generator bugs): ports in range and free, no self-link.
  LinkId connect(PortRef a, PortRef b, const LinkProps& props = {});
  void add_nvlink_domain(NvlinkDomain domain) { nvlink_domains_.push_back(std::move(domain)); }

  std::size_t node_count() const { return nodes_.size(); }
  std::size_t link_count() const { return links_.size(); }
  const Node& node(NodeId id) const { return nodes_[id]; }
  Node& mutable_node(NodeId id) { return nodes_[id]; }
  const Link& link(LinkId id) const { return links_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const std::vector<NvlinkDomain>& nvlink_domains() const { return nvlink_domains_; }

  // The port at the other end of `p`'s link, if connected.
  std::optional<PortRef> peer(PortRef p) const;
  std::optional<NodeId> find_guid(std::uint64_t node_guid) const;
  // Net-file identifier: "S-<guid>" for switches, "H-<guid>" for HCAs (ibnetdiscover style).
  std::string id_string(NodeId n) const;

  // Structural checks: connected (every node reachable), port numbers within the radix, no
  // self-links, link ends consistent with the ports that name them, unique node/port GUIDs.
  // Returns the problems found (empty = valid), each one sentence.
  std::vector<std::string> validate() const;
  TopologyStats stats() const;

  // Graphviz: switches as boxes, HCAs as ellipses, port numbers as edge labels, each NVLink
  // domain as a cluster.
  std::string to_dot() const;

  // Same nodes (in order: kind, GUIDs, description, ids, radix), the same set of links
  // (order-insensitive) with the same properties, the same NVLink domains. On a difference,
  // says the first one in *why.
  bool same_as(const Topology& other, std::string* why = nullptr) const;

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<NvlinkDomain> nvlink_domains_;
  std::unordered_map<std::uint64_t, NodeId> by_guid_;
};

}  // namespace weft::topo
