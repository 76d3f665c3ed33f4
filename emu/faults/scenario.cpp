// emu/faults/scenario.cpp — parsing fault scenarios (TOML files and flags) into a Scenario,
// with every name checked against the Topology. See scenario.hpp.
#include "emu/faults/scenario.hpp"

#include <charconv>
#include <cstdlib>
#include <map>
#include <sstream>

#include <toml++/toml.h>

namespace weft::faults {

namespace {

// One key of a [[fault]]/[[event]] table or a flag: its text (numbers too) and where it was.
struct Value {
  std::string text;
  std::optional<double> number;
  std::string where;
};
using Table = std::map<std::string, Value, std::less<>>;

FaultError fail(const std::string& where, const std::string& what) {
  return FaultError{where + ": " + what};
}

std::optional<double> parse_number(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size()) return std::nullopt;
  return v;
}

std::optional<topo::NodeId> find_node(const topo::Topology& t, std::string_view name) {
  if (name.starts_with("0x") || name.starts_with("0X")) {
    std::uint64_t guid = 0;
    const auto r = std::from_chars(name.data() + 2, name.data() + name.size(), guid, 16);
    if (r.ec != std::errc() || r.ptr != name.data() + name.size()) return std::nullopt;
    return t.find_guid(guid);
  }
  for (topo::NodeId n = 0; n < t.node_count(); ++n) {
    if (t.node(n).description == name) return n;
  }
  return std::nullopt;
}

Result<double, FaultError> probability(const Value& v, const std::string& key) {
  if (!v.number || *v.number < 0.0 || *v.number > 1.0) {
    return fail(v.where, key + " must be a probability in [0, 1], not \"" + v.text + "\"");
  }
  return *v.number;
}

Result<TimeNs, FaultError> time_of(const Value& v, const std::string& key) {
  std::optional<TimeNs> t;
  if (v.number && *v.number >= 0) {
    t = static_cast<TimeNs>(*v.number);
  } else {
    t = parse_time(v.text);
  }
  if (!t) return fail(v.where, key + " must be a time such as 300us, not \"" + v.text + "\"");
  return *t;
}

Result<PortFaultSpec, FaultError> build_fault(const topo::Topology& t, const Table& kv,
                                              const std::string& where) {
  PortFaultSpec spec;
  spec.where = where;
  const auto link = kv.find("link");
  const auto port = kv.find("port");
  if ((link == kv.end()) == (port == kv.end())) {
    return fail(where, "a fault needs exactly one of link= or port=");
  }
  const Value& pv = link != kv.end() ? link->second : port->second;
  auto pr = parse_port(t, pv.text);
  if (!pr) return fail(pv.where, pr.error().message);
  spec.port = *pr;
  spec.both_ends = link != kv.end();
  fabric::PortFaults& f = spec.faults;
  for (const auto& [key, v] : kv) {
    if (key == "link" || key == "port") continue;
    if (key == "drop" || key == "duplicate" || key == "reorder") {
      auto p = probability(v, key);
      if (!p) return p.error();
      (key == "drop" ? f.drop : key == "duplicate" ? f.duplicate : f.reorder) = *p;
    } else if (key == "ber") {
      if (!v.number || *v.number < 0.0 || *v.number >= 0.5) {
        return fail(v.where, "ber must be a bit error rate in [0, 0.5), not \"" + v.text + "\"");
      }
      f.ber = *v.number;
    } else if (key == "reorder_max" || key == "delay" || key == "jitter") {
      auto tm = time_of(v, key);
      if (!tm) return tm.error();
      (key == "reorder_max" ? f.reorder_max_ns : key == "delay" ? f.delay_ns : f.jitter_ns) = *tm;
    } else {
      return fail(v.where, "unknown fault key \"" + key +
                               "\" (link, port, drop, ber, duplicate, reorder, reorder_max, "
                               "delay, jitter)");
    }
  }
  if (f.reorder > 0.0 && f.reorder_max_ns == 0) {
    return fail(where, "reorder needs reorder_max (how far a packet may be held back)");
  }
  return spec;
}

std::optional<Action> parse_action(std::string_view s) {
  static constexpr std::pair<const char*, Action> kNames[] = {
      {"link-down", Action::kLinkDown}, {"link-up", Action::kLinkUp},
      {"flap", Action::kFlap},          {"switch-down", Action::kSwitchDown},
      {"switch-up", Action::kSwitchUp}, {"sm-down", Action::kSmDown},
      {"sm-up", Action::kSmUp}};
  for (const auto& [n, a] : kNames) {
    if (s == n) return a;
  }
  return std::nullopt;
}

Result<EventSpec, FaultError> build_event(const topo::Topology& t, const Table& kv,
                                          const std::string& where) {
  EventSpec e;
  e.where = where;
  auto need = [&](const char* key) -> const Value* {
    const auto it = kv.find(key);
    return it == kv.end() ? nullptr : &it->second;
  };
  const Value* at = need("at");
  const Value* action = need("action");
  if (!at) return fail(where, "an event needs at= (its virtual time)");
  if (!action) return fail(where, "an event needs action=");
  auto tm = time_of(*at, "at");
  if (!tm) return tm.error();
  e.at_ns = *tm;
  const auto a = parse_action(action->text);
  if (!a) {
    return fail(action->where, "unknown action \"" + action->text +
                                   "\" (link-down, link-up, flap, switch-down, switch-up, "
                                   "sm-down, sm-up)");
  }
  e.action = *a;
  std::vector<std::string> allowed = {"at", "action"};
  if (e.action == Action::kLinkDown || e.action == Action::kLinkUp || e.action == Action::kFlap) {
    const Value* l = need("link");
    if (!l) return fail(where, std::string(to_string(e.action)) + " needs link=");
    auto pr = parse_port(t, l->text);
    if (!pr) return fail(l->where, pr.error().message);
    e.link = t.node(pr->node).ports[pr->port].link;
    allowed.push_back("link");
  }
  if (e.action == Action::kFlap) {
    const Value* period = need("period");
    if (!period) return fail(where, "flap needs period= (one down-up cycle)");
    auto pt = time_of(*period, "period");
    if (!pt) return pt.error();
    if (*pt < 2) return fail(period->where, "period must be at least 2ns");
    e.period_ns = *pt;
    if (const Value* c = need("count")) {
      if (!c->number || *c->number < 1 || *c->number > 1e6) {
        return fail(c->where, "count must be a number of cycles in [1, 1000000]");
      }
      e.count = static_cast<std::uint32_t>(*c->number);
    }
    allowed.insert(allowed.end(), {"period", "count"});
  }
  if (e.action == Action::kSwitchDown || e.action == Action::kSwitchUp) {
    const Value* s = need("switch");
    if (!s) return fail(where, std::string(to_string(e.action)) + " needs switch=");
    const auto n = find_node(t, s->text);
    if (!n) return fail(s->where, "no node named \"" + s->text + "\"");
    if (!t.node(*n).is_switch()) return fail(s->where, "\"" + s->text + "\" is not a switch");
    e.node = *n;
    allowed.push_back("switch");
  }
  for (const auto& [key, v] : kv) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return fail(v.where, "key \"" + key + "\" does not apply to " + to_string(e.action));
    }
  }
  return e;
}

Result<Table, FaultError> split_flag(std::string_view flag, const std::string& where) {
  Table kv;
  std::size_t pos = 0;
  while (pos <= flag.size()) {
    const std::size_t comma = std::min(flag.find(',', pos), flag.size());
    const std::string_view item = flag.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      if (comma == flag.size()) break;
      continue;
    }
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return fail(where, "\"" + std::string(item) + "\" is not key=value");
    }
    Value v;
    v.text = std::string(item.substr(eq + 1));
    v.number = parse_number(v.text);
    v.where = where;
    if (!kv.emplace(std::string(item.substr(0, eq)), std::move(v)).second) {
      return fail(where, "key \"" + std::string(item.substr(0, eq)) + "\" given twice");
    }
  }
  return kv;
}

std::string line_of(std::string_view file, const toml::source_region& r) {
  return std::string(file) + ":" + std::to_string(r.begin.line);
}

Result<Table, FaultError> table_of(const toml::table& tbl, std::string_view file) {
  Table kv;
  for (const auto& [k, node] : tbl) {
    Value v;
    v.where = line_of(file, node.source());
    if (const auto* s = node.as_string()) {
      v.text = s->get();
      v.number = parse_number(v.text);
    } else if (const auto* i = node.as_integer()) {
      v.number = static_cast<double>(i->get());
      v.text = std::to_string(i->get());
    } else if (const auto* d = node.as_floating_point()) {
      v.number = d->get();
      std::ostringstream o;
      o << d->get();
      v.text = o.str();
    } else {
      return fail(v.where, "\"" + std::string(k.str()) + "\" must be a string or a number");
    }
    kv.emplace(std::string(k.str()), std::move(v));
  }
  return kv;
}

}  // namespace

const char* to_string(Action a) {
  switch (a) {
    case Action::kLinkDown:
      return "link-down";
    case Action::kLinkUp:
      return "link-up";
    case Action::kFlap:
      return "flap";
    case Action::kSwitchDown:
      return "switch-down";
    case Action::kSwitchUp:
      return "switch-up";
    case Action::kSmDown:
      return "sm-down";
    case Action::kSmUp:
      return "sm-up";
  }
  return "?";
}

void Scenario::append(const Scenario& o) {
  if (o.seed) seed = o.seed;
  ports.insert(ports.end(), o.ports.begin(), o.ports.end());
  events.insert(events.end(), o.events.begin(), o.events.end());
}

std::optional<TimeNs> parse_time(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  const auto v = parse_number(s.substr(0, i));
  if (!v) return std::nullopt;
  const std::string_view unit = s.substr(i);
  double scale = 0;
  if (unit.empty() || unit == "ns") {
    scale = 1;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "s") {
    scale = 1e9;
  } else {
    return std::nullopt;
  }
  const double ns = *v * scale;
  if (ns > 1e18) return std::nullopt;
  return static_cast<TimeNs>(ns + 0.5);
}

Result<topo::PortRef, FaultError> parse_port(const topo::Topology& t, std::string_view s) {
  const std::size_t slash = s.rfind('/');
  if (slash == std::string_view::npos || slash + 1 >= s.size() || s[slash + 1] != 'p') {
    return FaultError{"\"" + std::string(s) + "\" is not NODE/pPORT (e.g. p00leaf00/p1)"};
  }
  const std::string_view name = s.substr(0, slash), num = s.substr(slash + 2);
  int port = 0;
  const auto r = std::from_chars(num.data(), num.data() + num.size(), port);
  if (r.ec != std::errc() || r.ptr != num.data() + num.size()) {
    return FaultError{"\"" + std::string(s) + "\" has no port number after /p"};
  }
  const auto n = find_node(t, name);
  if (!n) return FaultError{"no node named \"" + std::string(name) + "\""};
  if (port < 1 || port > t.node(*n).num_ports()) {
    return FaultError{"\"" + std::string(name) + "\" has no port " + std::to_string(port) +
                      " (ports 1.." + std::to_string(t.node(*n).num_ports()) + ")"};
  }
  if (t.node(*n).ports[port].link == topo::kNoLink) {
    return FaultError{"no link at \"" + std::string(s) + "\" (the port is not cabled)"};
  }
  return topo::PortRef{*n, port};
}

Result<Scenario, FaultError> parse_scenario(const topo::Topology& t, std::string_view text,
                                            std::string_view file) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return FaultError{std::string(file) + ":" + std::to_string(e.source().begin.line) + ": " +
                      std::string(e.description())};
  }
  Scenario sc;
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    const std::string where = line_of(file, node.source());
    if (key == "seed") {
      const auto* i = node.as_integer();
      if (!i || i->get() < 0) return fail(where, "seed must be a non-negative integer");
      sc.seed = static_cast<std::uint64_t>(i->get());
    } else if (key == "fault" || key == "event") {
      const auto* arr = node.as_array();
      if (!arr) return fail(where, key + " must be an array of tables ([[" + key + "]])");
      for (const auto& el : *arr) {
        const auto* tbl = el.as_table();
        const std::string ew = line_of(file, el.source());
        if (!tbl) return fail(ew, key + " entries must be tables ([[" + key + "]])");
        auto kv = table_of(*tbl, file);
        if (!kv) return kv.error();
        if (key == "fault") {
          auto f = build_fault(t, *kv, ew);
          if (!f) return f.error();
          sc.ports.push_back(std::move(*f));
        } else {
          auto e = build_event(t, *kv, ew);
          if (!e) return e.error();
          sc.events.push_back(std::move(*e));
        }
      }
    } else {
      return fail(where, "unknown key \"" + key + "\" (seed, [[fault]], [[event]])");
    }
  }
  return sc;
}

Result<Scenario, FaultError> load_scenario(const topo::Topology& t, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return FaultError{path + ": cannot open the scenario file"};
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return parse_scenario(t, text, path);
}

Result<PortFaultSpec, FaultError> parse_fault_flag(const topo::Topology& t, std::string_view flag,
                                                   int index) {
  const std::string where = "--fault #" + std::to_string(index);
  auto kv = split_flag(flag, where);
  if (!kv) return kv.error();
  return build_fault(t, *kv, where);
}

Result<EventSpec, FaultError> parse_event_flag(const topo::Topology& t, std::string_view flag,
                                               int index) {
  const std::string where = "--event #" + std::to_string(index);
  auto kv = split_flag(flag, where);
  if (!kv) return kv.error();
  return build_event(t, *kv, where);
}

}  // namespace weft::faults
