// emu/topo/topology.cpp — Topology construction, lookups, validation, stats, dot export.
#include "emu/topo/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_set>

#include "src/base/assert.hpp"

namespace weft::topo {

const char* to_string(NodeKind k) {
  return k == NodeKind::kSwitch ? "switch" : "hca";
}

namespace {
constexpr const char* kSpeedNames[] = {"SDR", "DDR", "QDR", "FDR10", "FDR",
                                       "EDR", "HDR", "NDR", "XDR"};
constexpr std::uint64_t kLaneMbps[] = {2000,  4000,  8000,   10000, 13636,
                                       25000, 50000, 100000, 200000};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'a' && x <= 'z') x = static_cast<char>(x - 32);
    if (y >= 'a' && y <= 'z') y = static_cast<char>(y - 32);
    if (x != y) return false;
  }
  return true;
}
}  // namespace

const char* to_string(LinkSpeed s) {
  return kSpeedNames[static_cast<int>(s)];
}
std::uint64_t lane_rate_mbps(LinkSpeed s) {
  return kLaneMbps[static_cast<int>(s)];
}

std::optional<LinkSpeed> parse_speed(std::string_view s) {
  for (int i = 0; i < 9; ++i)
    if (iequal(s, kSpeedNames[i])) return static_cast<LinkSpeed>(i);
  return std::nullopt;
}

std::optional<LinkWidth> parse_width(std::string_view s) {
  if (!s.empty() && (s.back() == 'x' || s.back() == 'X')) s.remove_suffix(1);
  if (s == "1") return LinkWidth::k1x;
  if (s == "2") return LinkWidth::k2x;
  if (s == "4") return LinkWidth::k4x;
  if (s == "8") return LinkWidth::k8x;
  if (s == "12") return LinkWidth::k12x;
  return std::nullopt;
}

NodeId Topology::add_switch(std::uint64_t guid, int num_ports, std::string description) {
  WEFT_ASSERT(num_ports >= 1 && num_ports <= kPortsMax);
  Node n;
  n.kind = NodeKind::kSwitch;
  n.guid = guid;
  n.system_image_guid = guid;
  n.device_id = 0xd2f0;  // Quantum-2
  n.description = std::move(description);
  n.ports.resize(static_cast<std::size_t>(num_ports) + 1);
  n.ports[0].guid = guid;
  auto id = static_cast<NodeId>(nodes_.size());
  by_guid_.emplace(guid, id);
  nodes_.push_back(std::move(n));
  return id;
}

NodeId Topology::add_hca(std::uint64_t guid, int num_ports, std::string description,
                         std::uint64_t system_image_guid) {
  WEFT_ASSERT(num_ports >= 1 && num_ports <= kPortsMax);
  Node n;
  n.kind = NodeKind::kHca;
  n.guid = guid;
  n.system_image_guid = system_image_guid ? system_image_guid : guid;
  n.device_id = 0x1021;  // ConnectX-7
  n.description = std::move(description);
  n.ports.resize(static_cast<std::size_t>(num_ports) + 1);
  for (int p = 1; p <= num_ports; ++p) n.ports[p].guid = guid + static_cast<std::uint64_t>(p);
  auto id = static_cast<NodeId>(nodes_.size());
  by_guid_.emplace(guid, id);
  nodes_.push_back(std::move(n));
  return id;
}

LinkId Topology::connect(PortRef a, PortRef b, const LinkProps& props) {
  WEFT_ASSERT(a.node < nodes_.size() && b.node < nodes_.size());
  WEFT_ASSERT_MSG(a.node != b.node, "self-link");
  WEFT_ASSERT(a.port >= 1 && a.port <= nodes_[a.node].num_ports());
  WEFT_ASSERT(b.port >= 1 && b.port <= nodes_[b.node].num_ports());
  WEFT_ASSERT_MSG(nodes_[a.node].ports[a.port].link == kNoLink, "port already linked");
  WEFT_ASSERT_MSG(nodes_[b.node].ports[b.port].link == kNoLink, "port already linked");
  auto id = static_cast<LinkId>(links_.size());
  links_.push_back(Link{a, b, props});
  nodes_[a.node].ports[a.port].link = id;
  nodes_[b.node].ports[b.port].link = id;
  return id;
}

std::optional<PortRef> Topology::peer(PortRef p) const {
  if (p.node >= nodes_.size() || p.port < 1 || p.port > nodes_[p.node].num_ports())
    return std::nullopt;
  LinkId l = nodes_[p.node].ports[p.port].link;
  if (l == kNoLink) return std::nullopt;
  const Link& k = links_[l];
  return (k.a == p) ? k.b : k.a;
}

std::optional<NodeId> Topology::find_guid(std::uint64_t node_guid) const {
  auto it = by_guid_.find(node_guid);
  if (it == by_guid_.end()) return std::nullopt;
  return it->second;
}

std::string Topology::id_string(NodeId n) const {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%c-%016" PRIx64, nodes_[n].is_switch() ? 'S' : 'H',
                nodes_[n].guid);
  return buf;
}

std::vector<std::string> Topology::validate() const {
  std::vector<std::string> problems;
  auto say = [&](const std::string& s) {
    if (problems.size() < 100) problems.push_back(s);
  };
  std::unordered_set<std::uint64_t> guids;
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    if (node.num_ports() < 1 || node.num_ports() > kPortsMax)
      say("node " + id_string(n) + " has " + std::to_string(node.num_ports()) + " ports");
    if (!guids.insert(node.guid).second) say("duplicate node GUID " + id_string(n));
    for (int p = 0; p <= node.num_ports(); ++p) {
      const Port& port = node.ports[p];
      if (port.guid != 0 && port.guid != node.guid && !guids.insert(port.guid).second)
        say("duplicate port GUID on " + id_string(n) + " port " + std::to_string(p));
      if (port.link == kNoLink) continue;
      if (p == 0) {
        say(id_string(n) + " port 0 is linked");
        continue;
      }
      if (port.link >= links_.size()) {
        say(id_string(n) + " port " + std::to_string(p) + " names a missing link");
        continue;
      }
      const Link& l = links_[port.link];
      if (!(l.a == PortRef{n, p}) && !(l.b == PortRef{n, p}))
        say(id_string(n) + " port " + std::to_string(p) + " names a link that does not end there");
    }
  }
  for (LinkId i = 0; i < links_.size(); ++i) {
    const Link& l = links_[i];
    bool ok = true;
    for (const PortRef& e : {l.a, l.b}) {
      if (e.node >= nodes_.size() || e.port < 1 || e.port > nodes_[e.node].num_ports()) {
        say("link " + std::to_string(i) + " has an end out of range (port " +
            std::to_string(e.port) + ")");
        ok = false;
      } else if (nodes_[e.node].ports[e.port].link != i) {
        say("link " + std::to_string(i) + " is not listed by " + id_string(e.node) + " port " +
            std::to_string(e.port));
      }
    }
    if (ok && l.a.node == l.b.node)
      say("link " + std::to_string(i) + " is a self-link on " + id_string(l.a.node));
  }
  // Connectivity: BFS over links from node 0.
  if (!nodes_.empty()) {
    std::vector<char> seen(nodes_.size(), 0);
    std::vector<NodeId> stack{0};
    seen[0] = 1;
    std::size_t reached = 1;
    while (!stack.empty()) {
      NodeId n = stack.back();
      stack.pop_back();
      for (int p = 1; p <= nodes_[n].num_ports(); ++p) {
        LinkId li = nodes_[n].ports[p].link;
        if (li == kNoLink || li >= links_.size()) continue;
        NodeId m = links_[li].other(n).node;
        if (m < nodes_.size() && !seen[m]) {
          seen[m] = 1;
          ++reached;
          stack.push_back(m);
        }
      }
    }
    if (reached != nodes_.size()) {
      NodeId first = 0;
      while (seen[first]) ++first;
      say("not connected: " + std::to_string(nodes_.size() - reached) + " nodes unreachable from " +
          id_string(0) + ", e.g. " + id_string(first) + " \"" + nodes_[first].description + "\"");
    }
  }
  for (const NvlinkDomain& d : nvlink_domains_)
    for (NodeId h : d.hcas)
      if (h >= nodes_.size() || nodes_[h].is_switch())
        say("NVLink domain " + d.name + " names a node that is not an HCA");
  return problems;
}

TopologyStats Topology::stats() const {
  TopologyStats s;
  for (const Node& n : nodes_) {
    (n.is_switch() ? s.switches : s.hcas)++;
    s.ports_total += static_cast<std::size_t>(n.num_ports());
    for (int p = 1; p <= n.num_ports(); ++p) s.ports_used += n.ports[p].link != kNoLink;
  }
  s.links = links_.size();
  std::uint64_t slowest = UINT64_MAX;
  for (const Link& l : links_) {
    if (nodes_[l.a.node].is_switch() && nodes_[l.b.node].is_switch()) {
      ++s.switch_links;
      slowest = std::min(slowest, l.rate_mbps());
    } else {
      ++s.hca_links;
    }
  }
  // Levels: HCAs are level 0, a switch's level is its distance (in switch hops + 1) from the
  // nearest HCA. A levelled tree has every switch link between adjacent levels.
  if (s.switches == 0 || s.hcas == 0) return s;
  std::vector<int> level(nodes_.size(), -1);
  std::vector<NodeId> frontier;
  for (NodeId n = 0; n < nodes_.size(); ++n)
    if (!nodes_[n].is_switch()) {
      level[n] = 0;
      frontier.push_back(n);
    }
  int max_level = 0;
  while (!frontier.empty()) {
    std::vector<NodeId> next;
    for (NodeId n : frontier)
      for (int p = 1; p <= nodes_[n].num_ports(); ++p) {
        LinkId li = nodes_[n].ports[p].link;
        if (li == kNoLink) continue;
        NodeId m = links_[li].other(n).node;
        if (level[m] < 0) {
          level[m] = level[n] + 1;
          max_level = std::max(max_level, level[m]);
          next.push_back(m);
        }
      }
    frontier.swap(next);
  }
  std::vector<double> down(max_level + 2, 0), up(max_level + 2, 0);
  for (const Link& l : links_) {
    int la = level[l.a.node], lb = level[l.b.node];
    if (la < 0 || lb < 0) return s;  // unreachable part: not a tree
    if (la == 0 && lb == 0) return s;
    if (std::abs(la - lb) != 1) return s;  // not levelled (torus, dragonfly, ...)
    int lo = std::min(la, lb);
    up[lo] += 1;        // from level lo upward
    down[lo + 1] += 1;  // into level lo+1 from below
  }
  s.switch_levels = max_level;
  double ratio = 1.0;
  for (int l = 1; l < max_level; ++l)
    if (up[l] > 0 && down[l] > up[l]) ratio *= down[l] / up[l];
  s.oversubscription = ratio;
  s.bisection_links = static_cast<double>(s.hcas) / 2.0 / ratio;
  if (slowest != UINT64_MAX)
    s.bisection_mbps = static_cast<std::uint64_t>(s.bisection_links * static_cast<double>(slowest));
  return s;
}

namespace {
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}
}  // namespace

std::string Topology::to_dot() const {
  std::ostringstream o;
  o << "graph fabric {\n  node [fontsize=10];\n";
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    o << "  n" << n << " [label=\"" << dot_escape(nodes_[n].description)
      << "\", shape=" << (nodes_[n].is_switch() ? "box" : "ellipse") << "];\n";
  }
  for (std::size_t d = 0; d < nvlink_domains_.size(); ++d) {
    o << "  subgraph cluster_nvl" << d << " {\n    label=\"" << dot_escape(nvlink_domains_[d].name)
      << " (NVLink)\";\n    style=dashed;\n   ";
    for (NodeId h : nvlink_domains_[d].hcas) o << " n" << h << ";";
    o << "\n  }\n";
  }
  for (const Link& l : links_) {
    o << "  n" << l.a.node << " -- n" << l.b.node << " [taillabel=\"" << l.a.port
      << "\", headlabel=\"" << l.b.port << "\"];\n";
  }
  o << "}\n";
  return o.str();
}

bool Topology::same_as(const Topology& other, std::string* why) const {
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (nodes_.size() != other.nodes_.size())
    return fail("node count " + std::to_string(nodes_.size()) + " vs " +
                std::to_string(other.nodes_.size()));
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    const Node& x = nodes_[n];
    const Node& y = other.nodes_[n];
    std::string at = "node " + std::to_string(n) + " (" + x.description + "): ";
    if (x.kind != y.kind) return fail(at + "kind");
    if (x.guid != y.guid) return fail(at + "GUID");
    if (x.system_image_guid != y.system_image_guid) return fail(at + "system image GUID");
    if (x.vendor_id != y.vendor_id || x.device_id != y.device_id)
      return fail(at + "vendor/device id");
    if (x.description != y.description) return fail(at + "description \"" + y.description + "\"");
    if (x.num_ports() != y.num_ports()) return fail(at + "port count");
    for (int p = 0; p <= x.num_ports(); ++p)
      if (x.ports[p].guid != y.ports[p].guid)
        return fail(at + "port " + std::to_string(p) + " GUID");
  }
  if (links_.size() != other.links_.size())
    return fail("link count " + std::to_string(links_.size()) + " vs " +
                std::to_string(other.links_.size()));
  using Canon = std::tuple<NodeId, int, NodeId, int, int, int, double>;
  auto canon = [](const Link& l) {
    PortRef a = l.a, b = l.b;
    if (std::tie(b.node, b.port) < std::tie(a.node, a.port)) std::swap(a, b);
    return Canon{a.node,
                 a.port,
                 b.node,
                 b.port,
                 static_cast<int>(l.props.width),
                 static_cast<int>(l.props.speed),
                 l.props.length_m};
  };
  std::vector<Canon> xs, ys;
  for (const Link& l : links_) xs.push_back(canon(l));
  for (const Link& l : other.links_) ys.push_back(canon(l));
  std::sort(xs.begin(), xs.end());
  std::sort(ys.begin(), ys.end());
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i] != ys[i]) {
      const auto& [an, ap, bn, bp, w, sp, len] = xs[i];
      return fail("link " + nodes_[an].description + "[" + std::to_string(ap) + "] - " +
                  nodes_[bn].description + "[" + std::to_string(bp) + "] differs (width " +
                  std::to_string(w) + ", speed " + std::to_string(sp) + ", length " +
                  std::to_string(len) + ")");
    }
  if (nvlink_domains_ != other.nvlink_domains_) return fail("NVLink domains differ");
  return true;
}

}  // namespace weft::topo
