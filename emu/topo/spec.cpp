// emu/topo/spec.cpp — the spec-string parser (see spec.hpp).
#include "emu/topo/spec.hpp"

#include <charconv>
#include <map>
#include <optional>
#include <set>

namespace weft::topo {

namespace {

constexpr int kSpecIntMax = 1 << 20;

struct Args {
  std::string kind;
  std::map<std::string, std::string> kv;
  std::set<std::string> used;
};

std::optional<std::string> split(std::string_view spec, Args& out) {
  auto colon = spec.find(':');
  out.kind = std::string(spec.substr(0, colon));
  if (out.kind.empty()) return "empty topology kind in \"" + std::string(spec) + "\"";
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) return "empty parameter in \"" + std::string(spec) + "\"";
    auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      return "parameter \"" + std::string(item) + "\" is not key=value";
    std::string key(item.substr(0, eq));
    if (!out.kv.emplace(key, std::string(item.substr(eq + 1))).second)
      return "parameter " + key + " given twice";
  }
  return std::nullopt;
}

class Reader {
 public:
  explicit Reader(Args& a) : a_(a) {}
  std::optional<std::string> error;

  bool has(const std::string& key) const { return a_.kv.count(key) != 0; }

  int integer(const std::string& key, std::optional<int> def, int lo = 0, int hi = kSpecIntMax) {
    a_.used.insert(key);
    auto it = a_.kv.find(key);
    if (it == a_.kv.end()) {
      if (!def) fail("missing required parameter " + key + " for " + a_.kind);
      return def.value_or(0);
    }
    const std::string& v = it->second;
    int x = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc{} || ptr != v.data() + v.size()) {
      fail(key + "=" + v + " is not a whole number");
      return 0;
    }
    if (x < lo || x > hi) {
      fail(key + "=" + v + " is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) +
           ")");
      return 0;
    }
    return x;
  }

  std::string text(const std::string& key) {
    a_.used.insert(key);
    auto it = a_.kv.find(key);
    return it == a_.kv.end() ? std::string{} : it->second;
  }

  void fail(std::string m) {
    if (!error) error = std::move(m);
  }

  // Unknown keys: anything given but never read.
  void check_unused(const char* known) {
    for (const auto& [k, v] : a_.kv)
      if (!a_.used.count(k)) {
        fail("unknown parameter " + k + " for " + a_.kind + " (known: " + known + ")");
        return;
      }
  }

 private:
  Args& a_;
};

std::optional<LinkProps> link_overrides(Reader& r, LinkProps base) {
  std::string sp = r.text("speed"), w = r.text("width");
  if (!sp.empty()) {
    auto s = parse_speed(sp);
    if (!s) {
      r.fail("speed=" + sp + " is not one of SDR DDR QDR FDR10 FDR EDR HDR NDR XDR");
      return std::nullopt;
    }
    base.speed = *s;
  }
  if (!w.empty()) {
    auto x = parse_width(w);
    if (!x) {
      r.fail("width=" + w + " is not one of 1x 2x 4x 8x 12x");
      return std::nullopt;
    }
    base.width = *x;
  }
  return base;
}

void apply(TierLinks& t, Reader& r) {
  for (LinkProps* p : {&t.host, &t.tier1, &t.tier2})
    if (auto q = link_overrides(r, *p)) *p = *q;
}

// oversub=N or N:1 -> hosts per leaf on a radix-R leaf.
std::optional<int> oversub_hosts(Reader& r, int radix) {
  if (!r.has("oversub")) return std::nullopt;
  std::string v = r.text("oversub");
  if (v.size() > 2 && v.compare(v.size() - 2, 2, ":1") == 0) v.resize(v.size() - 2);
  int n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || ptr != v.data() + v.size() || n < 1 || n > radix) {
    r.fail("oversub=" + r.text("oversub") + " is not a ratio N or N:1 with N in 1..radix");
    return std::nullopt;
  }
  if ((radix * n) % (n + 1) != 0) {
    r.fail("oversub=" + std::to_string(n) + ":1 does not split a radix-" + std::to_string(radix) +
           " leaf into whole ports");
    return std::nullopt;
  }
  return radix * n / (n + 1);
}

template <class F>
Result<Topology, SpecError> finish(Reader& r, const char* known, F&& make) {
  r.check_unused(known);
  if (r.error) return SpecError{*r.error};
  GenResult g = make();
  if (!g) return SpecError{g.error().message};
  return std::move(g).value();
}

}  // namespace

Result<Topology, SpecError> from_spec(std::string_view spec) {
  Args a;
  if (auto e = split(spec, a)) return SpecError{*e};
  Reader r(a);
  if (a.kind == "fat-tree") {
    if (r.has("k")) {
      int k = r.integer("k", std::nullopt, 2, kPortsMax);
      int levels = r.integer("levels", 3, 2, 3);
      if (k % 2) r.fail("k=" + std::to_string(k) + " must be even");
      if (levels == 2) {
        FatTree2Params p{.radix = k, .leaves = k, .hosts_per_leaf = k / 2, .spines = k / 2};
        apply(p.links, r);
        return finish(r, "k levels speed width", [&] { return fat_tree_2(p); });
      }
      FatTree3Params p{.radix = k,
                       .pods = k,
                       .leaves_per_pod = k / 2,
                       .hosts_per_leaf = k / 2,
                       .aggs_per_pod = k / 2,
                       .cores_per_group = k / 2};
      apply(p.links, r);
      return finish(r, "k levels speed width", [&] { return fat_tree_3(p); });
    }
    int levels = r.integer("levels", std::nullopt, 2, 3);
    int radix = r.integer("radix", 36, 2, kPortsMax);
    int half = radix / 2;
    int hosts_default = oversub_hosts(r, radix).value_or(half);
    if (levels == 2) {
      FatTree2Params p;
      p.radix = radix;
      p.hosts_per_leaf = r.integer("hosts", hosts_default, 1, kPortsMax);
      p.spines = r.integer("spines", radix - p.hosts_per_leaf, 1, kSpecIntMax);
      p.leaves = r.integer("leaves", radix, 1, kSpecIntMax);
      apply(p.links, r);
      return finish(r, "levels radix leaves hosts spines oversub speed width",
                    [&] { return fat_tree_2(p); });
    }
    FatTree3Params p;
    p.radix = radix;
    p.hosts_per_leaf = r.integer("hosts", hosts_default, 1, kPortsMax);
    p.aggs_per_pod = r.integer("aggs", radix - p.hosts_per_leaf, 1, kSpecIntMax);
    p.leaves_per_pod = r.integer("leaves", half, 1, kSpecIntMax);
    p.cores_per_group = r.integer("cores", half, 1, kSpecIntMax);
    p.pods = r.integer("pods", radix, 1, kSpecIntMax);
    apply(p.links, r);
    return finish(r, "levels radix pods leaves hosts aggs cores oversub speed width",
                  [&] { return fat_tree_3(p); });
  }
  if (a.kind == "leaf-spine") {
    LeafSpineParams p;
    p.leaves = r.integer("leaves", std::nullopt, 1);
    p.spines = r.integer("spines", std::nullopt, 1);
    p.hosts_per_leaf = r.integer("hosts", std::nullopt, 0);
    p.links_per_spine = r.integer("links", 1, 1);
    p.radix = r.integer("radix", 0, 0, kPortsMax);
    apply(p.links, r);
    return finish(r, "leaves spines hosts links radix speed width", [&] { return leaf_spine(p); });
  }
  if (a.kind == "rail") {
    RailParams p;
    p.nodes = r.integer("nodes", std::nullopt, 1);
    p.gpus = r.integer("gpus", std::nullopt, 1, kPortsMax);
    p.spines = r.integer("spines", std::nullopt, 0);
    p.links_per_spine = r.integer("links", 0, 0);
    p.radix = r.integer("radix", 0, 0, kPortsMax);
    apply(p.links, r);
    return finish(r, "nodes gpus spines links radix speed width", [&] { return rail(p); });
  }
  if (a.kind == "torus" || a.kind == "mesh") {
    TorusParams p;
    p.wrap = a.kind == "torus";
    std::string dims = r.text("dims");
    if (dims.empty()) {
      r.fail("missing required parameter dims for " + a.kind + " (e.g. dims=4x4x4)");
    } else {
      p.dims.clear();
      std::string_view rest = dims;
      while (true) {
        auto x = rest.find('x');
        std::string_view part = rest.substr(0, x);
        int d = 0;
        auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
        if (part.empty() || ec != std::errc{} || ptr != part.data() + part.size() || d < 1 ||
            d > kSpecIntMax) {
          r.fail("dims=" + dims + " is not a list of positive sizes like 4x4x4");
          break;
        }
        p.dims.push_back(d);
        if (x == std::string_view::npos) break;
        rest = rest.substr(x + 1);
      }
    }
    p.hosts = r.integer("hosts", 1, 0, kPortsMax);
    if (auto q = link_overrides(r, p.host_link)) p.host_link = *q;
    if (auto q = link_overrides(r, p.switch_link)) p.switch_link = *q;
    return finish(r, "dims hosts speed width", [&] { return torus(p); });
  }
  if (a.kind == "dragonfly") {
    DragonflyParams p;
    p.groups = r.integer("groups", std::nullopt, 1);
    p.routers = r.integer("routers", std::nullopt, 1, kPortsMax);
    p.hosts = r.integer("hosts", std::nullopt, 0, kPortsMax);
    p.global = r.integer("global", std::nullopt, 0, kPortsMax);
    for (LinkProps* l : {&p.host_link, &p.local_link, &p.global_link})
      if (auto q = link_overrides(r, *l)) *l = *q;
    return finish(r, "groups routers hosts global speed width", [&] { return dragonfly(p); });
  }
  return SpecError{"unknown topology kind \"" + a.kind +
                   "\" (known: fat-tree, leaf-spine, rail, torus, mesh, dragonfly)"};
}

}  // namespace weft::topo
