// emu/topo/netfile.cpp — ibnetdiscover/ibsim net-file reader and writer (see netfile.hpp).
#include "emu/topo/netfile.hpp"

#include <cctype>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "emu/topo/generators.hpp"

namespace weft::topo {

namespace {

constexpr std::size_t kLineBytesMax = 4096;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// Hex number with or without 0x.
std::optional<std::uint64_t> parse_hex(std::string_view s) {
  if (starts_with(s, "0x") || starts_with(s, "0X")) s.remove_prefix(2);
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Reads a quoted string at the front of s; advances s past it.
std::optional<std::string_view> take_quoted(std::string_view& s) {
  s = trim(s);
  if (s.empty() || s.front() != '"') return std::nullopt;
  auto end = s.find('"', 1);
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view q = s.substr(1, end - 1);
  s.remove_prefix(end + 1);
  return q;
}

// Reads "[n]" at the front of s (no leading space skipping); advances s.
std::optional<int> take_bracket_int(std::string_view& s) {
  if (s.empty() || s.front() != '[') return std::nullopt;
  auto end = s.find(']');
  if (end == std::string_view::npos) return std::nullopt;
  auto v = parse_int(s.substr(1, end - 1));
  s.remove_prefix(end + 1);
  return v;
}

// Reads "(hex)" at the front of s if present; advances s.
bool take_paren_guid(std::string_view& s, std::optional<std::uint64_t>& out, bool& bad) {
  if (s.empty() || s.front() != '(') return false;
  auto end = s.find(')');
  if (end == std::string_view::npos) {
    bad = true;
    return false;
  }
  out = parse_hex(s.substr(1, end - 1));
  if (!out) bad = true;
  s.remove_prefix(end + 1);
  return true;
}

struct PortEntry {
  int line;
  int port;
  std::optional<std::uint64_t> port_guid;  // "[p](guid)" on a CA's own port
  std::string peer;
  int peer_port;
  std::optional<LinkWidth> width;
  std::optional<LinkSpeed> speed;
  std::optional<double> length_m;
};

struct NodeEntry {
  int line;
  NodeKind kind;
  int ports;
  std::string id;
  std::string desc;
  std::optional<std::uint64_t> guid, sysimg;
  std::optional<std::uint32_t> vendid, devid;
  std::vector<PortEntry> entries;
};

struct NvlEntry {
  int line;
  std::string name;
  std::vector<std::string> ids;
};

// Scans a comment for "4xHDR"-style and "length_m=" tokens outside quoted descriptions.
void scan_comment(std::string_view comment, PortEntry& e) {
  std::string unquoted;
  bool in_quote = false;
  for (char ch : comment) {
    if (ch == '"') {
      in_quote = !in_quote;
      unquoted += ' ';
    } else if (!in_quote) {
      unquoted += ch;
    }
  }
  std::string_view c = unquoted;
  while (!c.empty()) {
    c = trim(c);
    auto sp = c.find_first_of(" \t");
    std::string_view tok = c.substr(0, sp);
    c = sp == std::string_view::npos ? std::string_view{} : c.substr(sp);
    if (starts_with(tok, "length_m=")) {
      std::string v(tok.substr(9));
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end && *end == '\0' && d >= 0) e.length_m = d;
      continue;
    }
    auto x = tok.find_first_of("xX");
    if (x == std::string_view::npos || x == 0) continue;
    auto w = parse_width(tok.substr(0, x + 1));
    auto s = parse_speed(tok.substr(x + 1));
    if (w && s) {
      e.width = w;
      e.speed = s;
    }
  }
}

struct Pending {
  std::optional<std::uint64_t> guid, sysimg;
  std::optional<std::uint32_t> vendid, devid;
};

ParseError err(int line, std::string m) {
  return ParseError{line, std::move(m)};
}

std::optional<std::uint64_t> guid_from_id(std::string_view id, NodeKind kind) {
  char want = kind == NodeKind::kSwitch ? 'S' : 'H';
  if (id.size() != 18 || id[0] != want || id[1] != '-') return std::nullopt;
  return parse_hex(id.substr(2));
}

}  // namespace

Result<Topology, ParseError> read_netfile(std::string_view text) {
  std::vector<NodeEntry> nodes;
  std::vector<NvlEntry> nvl;
  std::unordered_map<std::string, std::size_t> by_id;
  Pending pend;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (raw.size() > kLineBytesMax)
      return err(line_no, "line longer than " + std::to_string(kLineBytesMax) + " bytes");
    std::string_view line = trim(raw);
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (starts_with(line, "#weft nvlink")) {
        std::string_view rest = line.substr(12);
        NvlEntry e{line_no, {}, {}};
        auto name = take_quoted(rest);
        if (!name)
          return err(line_no, "malformed #weft nvlink line: expected a quoted domain name");
        e.name = std::string(*name);
        while (!trim(rest).empty()) {
          auto id = take_quoted(rest);
          if (!id) return err(line_no, "malformed #weft nvlink line: expected quoted node ids");
          e.ids.emplace_back(*id);
        }
        nvl.push_back(std::move(e));
      }
      continue;
    }
    // Attribute lines for the next node.
    auto eq = line.find('=');
    auto first_space = line.find_first_of(" \t");
    if (eq != std::string_view::npos &&
        (first_space == std::string_view::npos || eq < first_space) && line.front() != '[') {
      std::string_view key = line.substr(0, eq);
      std::string_view val = trim(line.substr(eq + 1));
      auto paren = val.find('(');
      std::string_view num = paren == std::string_view::npos ? val : val.substr(0, paren);
      auto v = parse_hex(num);
      if (!v)
        return err(line_no,
                   "malformed " + std::string(key) + "= value \"" + std::string(val) + "\"");
      if (key == "vendid")
        pend.vendid = static_cast<std::uint32_t>(*v);
      else if (key == "devid")
        pend.devid = static_cast<std::uint32_t>(*v);
      else if (key == "sysimgguid")
        pend.sysimg = *v;
      else if (key == "switchguid" || key == "caguid" || key == "hcaguid")
        pend.guid = *v;
      else if (key == "rtguid")
        return err(line_no, "routers (rtguid) are not supported");
      else
        return err(line_no, "unknown attribute \"" + std::string(key) + "\"");
      continue;
    }
    if (line.front() == '[') {
      if (nodes.empty()) return err(line_no, "port line before any Switch or Ca line");
      PortEntry e{};
      e.line = line_no;
      std::string_view s = line;
      auto p = take_bracket_int(s);
      if (!p) return err(line_no, "malformed port line: expected [port]");
      e.port = *p;
      bool bad = false;
      take_paren_guid(s, e.port_guid, bad);
      if (bad) return err(line_no, "malformed port GUID");
      // Optional "[ext N]" (ibnetdiscover's external port numbers): skip.
      if (starts_with(s, "[ext")) {
        auto end = s.find(']');
        if (end == std::string_view::npos) return err(line_no, "malformed [ext N]");
        s.remove_prefix(end + 1);
      }
      auto peer = take_quoted(s);
      if (!peer) return err(line_no, "malformed port line: expected the peer's quoted id");
      e.peer = std::string(*peer);
      auto q = take_bracket_int(s);
      if (!q) return err(line_no, "malformed port line: expected [port] after the peer id");
      e.peer_port = *q;
      std::optional<std::uint64_t> peer_guid;
      take_paren_guid(s, peer_guid, bad);
      if (bad) return err(line_no, "malformed peer port GUID");
      if (starts_with(s, "[ext")) {
        auto end = s.find(']');
        if (end == std::string_view::npos) return err(line_no, "malformed [ext N]");
        s.remove_prefix(end + 1);
      }
      s = trim(s);
      if (!s.empty()) {
        if (s.front() != '#')
          return err(line_no, "unexpected text \"" + std::string(s) + "\" after the link");
        scan_comment(s.substr(1), e);
      }
      NodeEntry& n = nodes.back();
      if (e.port < 1 || e.port > n.ports)
        return err(line_no, "port " + std::to_string(e.port) + " out of range 1.." +
                                std::to_string(n.ports) + " of \"" + n.id + "\"");
      for (const PortEntry& o : n.entries)
        if (o.port == e.port)
          return err(line_no, "port " + std::to_string(e.port) + " of \"" + n.id +
                                  "\" listed twice (first on line " + std::to_string(o.line) + ")");
      n.entries.push_back(std::move(e));
      continue;
    }
    // Node header: Switch|Ca|Hca N "id" [# "desc" ...]
    std::string_view s = line;
    auto sp = s.find_first_of(" \t");
    std::string_view word = s.substr(0, sp);
    NodeKind kind;
    if (word == "Switch")
      kind = NodeKind::kSwitch;
    else if (word == "Ca" || word == "Hca")
      kind = NodeKind::kHca;
    else if (word == "Rt")
      return err(line_no, "routers (Rt) are not supported");
    else
      return err(line_no,
                 "malformed line: expected Switch, Ca, Hca, [port] or attribute=value, got \"" +
                     std::string(word) + "\"");
    if (sp == std::string_view::npos)
      return err(line_no, "malformed " + std::string(word) + " line: missing port count");
    s = trim(s.substr(sp));
    sp = s.find_first_of(" \t\"");
    auto nports = parse_int(s.substr(0, sp));
    if (!nports)
      return err(line_no, "malformed " + std::string(word) + " line: port count is not a number");
    if (*nports < 1 || *nports > kPortsMax)
      return err(line_no, "port count " + std::to_string(*nports) + " out of range 1..254");
    s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp);
    auto id = take_quoted(s);
    if (!id || id->empty())
      return err(line_no, "malformed " + std::string(word) + " line: expected a quoted node id");
    NodeEntry n{};
    n.line = line_no;
    n.kind = kind;
    n.ports = *nports;
    n.id = std::string(*id);
    n.desc = n.id;
    s = trim(s);
    if (!s.empty()) {
      if (s.front() != '#')
        return err(line_no, "unexpected text \"" + std::string(s) + "\" after the node id");
      s.remove_prefix(1);
      if (auto d = take_quoted(s)) n.desc = std::string(*d);
    }
    n.guid = pend.guid;
    n.sysimg = pend.sysimg;
    n.vendid = pend.vendid;
    n.devid = pend.devid;
    pend = Pending{};
    if (!by_id.emplace(n.id, nodes.size()).second)
      return err(line_no, "duplicate node id \"" + n.id + "\" (first on line " +
                              std::to_string(nodes[by_id[n.id]].line) + ")");
    if (nodes.size() >= kNodesMax)
      return err(line_no, "more than " + std::to_string(kNodesMax) + " nodes");
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return err(0, "no nodes");

  // Build the topology: nodes with GUIDs, then links (checked from both ends).
  Topology topo;
  std::uint64_t auto_sw = 0, auto_ca = 0;
  std::unordered_set<std::uint64_t> guids;
  for (NodeEntry& n : nodes) {
    std::uint64_t guid;
    bool assigned = false;
    if (n.guid)
      guid = *n.guid;
    else if (auto g = guid_from_id(n.id, n.kind))
      guid = *g;
    else {
      guid = make_guid(n.kind, n.kind == NodeKind::kSwitch ? auto_sw++ : auto_ca++);
      assigned = true;
    }
    if (!guids.insert(guid).second) {
      char b[32];
      std::snprintf(b, sizeof b, "0x%016" PRIx64, guid);
      return err(n.line, std::string("duplicate GUID ") + b +
                             (assigned ? " (assigned to an id without GUID)" : "") + " on \"" +
                             n.id + "\"");
    }
    NodeId id = n.kind == NodeKind::kSwitch
                    ? topo.add_switch(guid, n.ports, n.desc)
                    : topo.add_hca(guid, n.ports, n.desc, n.sysimg.value_or(0));
    Node& node = topo.mutable_node(id);
    if (n.sysimg) node.system_image_guid = *n.sysimg;
    if (n.vendid) node.vendor_id = *n.vendid;
    if (n.devid) node.device_id = *n.devid;
    if (n.kind == NodeKind::kHca) {
      for (const PortEntry& e : n.entries)
        if (e.port_guid) node.ports[e.port].guid = *e.port_guid;
      for (int p = 1; p <= n.ports; ++p) {
        if (node.ports[p].guid == guid) continue;
        if (!guids.insert(node.ports[p].guid).second) {
          char b[32];
          std::snprintf(b, sizeof b, "0x%016" PRIx64, node.ports[p].guid);
          int line = n.line;
          for (const PortEntry& e : n.entries)
            if (e.port == p) line = e.line;
          return err(line, std::string("duplicate port GUID ") + b + " on \"" + n.id + "\" port " +
                               std::to_string(p));
        }
      }
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeEntry& n = nodes[i];
    for (const PortEntry& e : n.entries) {
      auto it = by_id.find(e.peer);
      if (it == by_id.end())
        return err(e.line, "\"" + n.id + "\" port " + std::to_string(e.port) + " links to \"" +
                               e.peer + "\", which is not in the file");
      std::size_t j = it->second;
      if (j == i)
        return err(e.line, "self-link on \"" + n.id + "\" (port " + std::to_string(e.port) +
                               " to port " + std::to_string(e.peer_port) + ")");
      const NodeEntry& m = nodes[j];
      if (e.peer_port < 1 || e.peer_port > m.ports)
        return err(e.line, "peer port " + std::to_string(e.peer_port) + " out of range 1.." +
                               std::to_string(m.ports) + " of \"" + m.id + "\"");
      const PortEntry* back = nullptr;
      for (const PortEntry& o : m.entries)
        if (o.port == e.peer_port) back = &o;
      if (back == nullptr)
        return err(e.line, "dangling link: \"" + m.id + "\" port " + std::to_string(e.peer_port) +
                               " does not list \"" + n.id + "\"[" + std::to_string(e.port) +
                               "] back");
      if (back->peer != n.id || back->peer_port != e.port)
        return err(e.line, "dangling link: \"" + m.id + "\" port " + std::to_string(e.peer_port) +
                               " lists \"" + back->peer + "\"[" + std::to_string(back->peer_port) +
                               "] (line " + std::to_string(back->line) + "), not \"" + n.id +
                               "\"[" + std::to_string(e.port) + "]");
      if (j < i) continue;  // created from the other end
      LinkProps props;
      if (e.width)
        props.width = *e.width;
      else if (back->width)
        props.width = *back->width;
      if (e.speed)
        props.speed = *e.speed;
      else if (back->speed)
        props.speed = *back->speed;
      if (e.length_m)
        props.length_m = *e.length_m;
      else if (back->length_m)
        props.length_m = *back->length_m;
      topo.connect({static_cast<NodeId>(i), e.port}, {static_cast<NodeId>(j), e.peer_port}, props);
    }
  }
  for (const NvlEntry& d : nvl) {
    NvlinkDomain dom{d.name, {}};
    for (const std::string& id : d.ids) {
      auto it = by_id.find(id);
      if (it == by_id.end())
        return err(d.line, "NVLink domain \"" + d.name + "\" names \"" + id +
                               "\", which is not in the file");
      if (nodes[it->second].kind != NodeKind::kHca)
        return err(d.line, "NVLink domain \"" + d.name + "\" names switch \"" + id + "\"");
      dom.hcas.push_back(static_cast<NodeId>(it->second));
    }
    topo.add_nvlink_domain(std::move(dom));
  }
  return topo;
}

Result<Topology, ParseError> read_netfile_path(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ParseError{0, "cannot open " + path};
  std::ostringstream ss;
  ss << f.rdbuf();
  return read_netfile(ss.str());
}

namespace {
std::string fmt_len(double m) {
  char b[32];
  auto [p, ec] = std::to_chars(b, b + sizeof b, m);
  return std::string(b, p);
}
}  // namespace

std::string write_netfile(const Topology& topo) {
  std::string o;
  o.reserve(topo.node_count() * 200 + topo.link_count() * 160);
  char b[512];
  o += "#\n# Topology file: written by weft (ibnetdiscover format)\n#\n";
  for (const NvlinkDomain& d : topo.nvlink_domains()) {
    o += "#weft nvlink \"" + d.name + "\"";
    for (NodeId h : d.hcas) o += " \"" + topo.id_string(h) + "\"";
    o += "\n";
  }
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    const Node& node = topo.node(n);
    const std::string id = topo.id_string(n);
    std::snprintf(b, sizeof b,
                  "\nvendid=0x%" PRIx32 "\ndevid=0x%" PRIx32 "\nsysimgguid=0x%016" PRIx64 "\n",
                  node.vendor_id, node.device_id, node.system_image_guid);
    o += b;
    if (node.is_switch()) {
      std::snprintf(b, sizeof b,
                    "switchguid=0x%016" PRIx64 "(%" PRIx64
                    ")\nSwitch\t%d \"%s\"\t\t# \"%s\" enhanced port 0 lid 0 lmc 0\n",
                    node.guid, node.ports[0].guid, node.num_ports(), id.c_str(),
                    node.description.c_str());
    } else {
      std::snprintf(b, sizeof b, "caguid=0x%016" PRIx64 "\nCa\t%d \"%s\"\t\t# \"%s\"\n", node.guid,
                    node.num_ports(), id.c_str(), node.description.c_str());
    }
    o += b;
    for (int p = 1; p <= node.num_ports(); ++p) {
      LinkId li = node.ports[p].link;
      if (li == kNoLink) continue;
      const Link& l = topo.link(li);
      PortRef peer = (l.a == PortRef{n, p}) ? l.b : l.a;
      const Node& pn = topo.node(peer.node);
      std::string rate = std::to_string(static_cast<int>(l.props.width)) + "x" +
                         to_string(l.props.speed) + " length_m=" + fmt_len(l.props.length_m);
      std::string peer_guid;
      if (!pn.is_switch()) {
        std::snprintf(b, sizeof b, "(%" PRIx64 ")", pn.ports[peer.port].guid);
        peer_guid = b;
      }
      if (node.is_switch()) {
        std::snprintf(b, sizeof b, "[%d]\t\"%s\"[%d]%s\t\t# \"%s\" lid 0 %s\n", p,
                      topo.id_string(peer.node).c_str(), peer.port, peer_guid.c_str(),
                      pn.description.c_str(), rate.c_str());
      } else {
        std::snprintf(b, sizeof b,
                      "[%d](%" PRIx64 ") \t\"%s\"[%d]%s\t\t# lid 0 lmc 0 \"%s\" lid 0 %s\n", p,
                      node.ports[p].guid, topo.id_string(peer.node).c_str(), peer.port,
                      peer_guid.c_str(), pn.description.c_str(), rate.c_str());
      }
      o += b;
    }
  }
  return o;
}

}  // namespace weft::topo
