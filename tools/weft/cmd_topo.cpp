// tools/weft/cmd_topo.cpp — `weft topo` and `weft route`: look at a fabric before simulating it.
//   weft topo SPEC|NETFILE [--netfile OUT] [--dot OUT] [--json]
//       summary (switches, HCAs, links, levels, bisection); writes an ibnetdiscover/ibsim net
//       file (so OpenSM on ibsim can run the same fabric) or Graphviz dot.
//   weft route SPEC|NETFILE [--engine minhop|updn|ftree|dor|all] [--lmc N] [--root GUID]...
//   [--json]
//       routes the fabric with each engine and checks every HCA pair through the tables: reach,
//       loops, hops, credit loops, balance of destinations over switch links, table memory.
// SPEC is a generator spec (emu/topo/spec.hpp, e.g. fat-tree:k=8); anything that names an
// existing file is read as a net file. Bad input exits 2 with the line and the problem.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emu/routing/fabric.hpp"
#include "emu/routing/lid.hpp"
#include "emu/routing/report.hpp"
#include "emu/topo/netfile.hpp"
#include "emu/topo/spec.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/topo_input.hpp"

namespace weft::cli {

namespace {

void write_file(const std::string& cmd, const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) input_error(cmd, path + ": cannot write");
}

struct TopoArgs {
  std::string what, netfile, dot;
  bool json = false;
};

struct RouteArgs {
  std::string what, engine = "all";
  int lmc = 0;
  std::vector<std::string> roots;
  bool json = false;
};

nlohmann::json stats_json(const topo::TopologyStats& s) {
  return {{"switches", s.switches},
          {"hcas", s.hcas},
          {"links", s.links},
          {"switch_links", s.switch_links},
          {"hca_links", s.hca_links},
          {"ports_used", s.ports_used},
          {"ports_total", s.ports_total},
          {"switch_levels", s.switch_levels},
          {"bisection_links", s.bisection_links},
          {"bisection_gbps", s.bisection_mbps / 1000.0},
          {"oversubscription", s.oversubscription}};
}

void run_topo(const TopoArgs& a) {
  const topo::Topology t = load_topology("topo", a.what);
  const topo::TopologyStats s = t.stats();
  if (!a.netfile.empty()) write_file("topo", a.netfile, topo::write_netfile(t));
  if (!a.dot.empty()) write_file("topo", a.dot, t.to_dot());
  if (a.json) {
    nlohmann::json j = stats_json(s);
    j["source"] = a.what;
    j["nvlink_domains"] = t.nvlink_domains().size();
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s\n", a.what.c_str());
  std::printf("  %zu switches, %zu HCAs, %zu links (%zu switch-switch, %zu to HCAs)\n", s.switches,
              s.hcas, s.links, s.switch_links, s.hca_links);
  std::printf("  ports used %zu of %zu\n", s.ports_used, s.ports_total);
  if (s.switch_levels > 0) {
    std::printf("  levelled tree: %d switch levels, oversubscription %.2f:1\n", s.switch_levels,
                s.oversubscription);
    if (s.bisection_links > 0)
      std::printf("  bisection: %.0f links, %.1f Tb/s\n", s.bisection_links,
                  static_cast<double>(s.bisection_mbps) / 1e6);
  }
  if (!t.nvlink_domains().empty())
    std::printf("  %zu NVLink domains (not managed by the SM)\n", t.nvlink_domains().size());
  if (!a.netfile.empty()) std::printf("  wrote net file %s\n", a.netfile.c_str());
  if (!a.dot.empty()) std::printf("  wrote dot %s\n", a.dot.c_str());
}

void run_route(const RouteArgs& a) {
  const topo::Topology t = load_topology("route", a.what);
  std::vector<routing::Engine> engines;
  if (a.engine == "all") {
    engines = {routing::Engine::kMinHop, routing::Engine::kUpDn, routing::Engine::kFtree,
               routing::Engine::kDor};
  } else {
    routing::Engine e;
    if (!routing::parse_engine(a.engine, &e))
      input_error("route", "unknown engine '" + a.engine + "' (minhop, updn, ftree, dor or all)");
    engines = {e};
  }
  if (a.lmc < 0 || a.lmc > 7) input_error("route", "--lmc must be 0..7");
  const routing::Fabric fabric = routing::Fabric::from_topology(t);
  auto lids = routing::assign_lids(fabric, a.lmc);
  if (!lids.ok()) input_error("route", lids.error().message);
  routing::RoutingOptions opt;
  for (const std::string& r : a.roots) {
    try {
      opt.root_guids.push_back(std::stoull(r, nullptr, 0));
    } catch (...) {
      input_error("route", "--root " + r + ": not a GUID");
    }
  }
  const topo::TopologyStats s = t.stats();
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json) {
    std::printf("%s: %zu switches, %zu HCAs, LMC %d\n\n", a.what.c_str(), s.switches, s.hcas,
                a.lmc);
    std::printf("%-7s %-6s %9s %9s %7s %7s %6s %6s %11s %12s %9s %9s\n", "engine", "valid",
                "route_s", "check_s", "hopmax", "hopavg", "VLs", "cdl", "sw-link max",
                "avg (dests)", "upspread", "tables");
  }
  bool any_invalid = false;
  for (routing::Engine e : engines) {
    opt.engine = e;
    const routing::EngineReport r = routing::evaluate_engine(fabric, lids.value(), opt);
    if (r.routed && !r.valid()) any_invalid = true;
    if (a.json) {
      nlohmann::json row = {{"engine", routing::to_string(e)}, {"routed", r.routed}};
      if (!r.routed) {
        row["refusal"] = r.refusal;
      } else {
        row["valid"] = r.valid();
        row["problems"] = r.check.problems;
        row["route_cpu_s"] = r.route_cpu_s;
        row["check_cpu_s"] = r.check_cpu_s;
        row["hca_pairs"] = r.check.hca_pairs;
        row["unreachable_pairs"] = r.check.unreachable_pairs;
        row["loops"] = r.check.loops;
        row["hops_max"] = r.check.hops_max;
        row["hops_avg"] = r.check.hops_avg;
        row["credit_loop"] = r.check.credit_loop;
        row["vls"] = r.vls;
        row["switch_link_dests_max"] = r.stats.switch_links.max;
        row["switch_link_dests_min"] = r.stats.switch_links.min;
        row["switch_link_dests_avg"] = r.stats.switch_links.avg;
        row["up_spread_max"] = r.stats.up_spread_max;
        row["table_bytes"] = r.stats.table_bytes;
      }
      rows.push_back(std::move(row));
      continue;
    }
    if (!r.routed) {
      std::printf("%-7s %-6s  refused: %s\n", routing::to_string(e), "-", r.refusal.c_str());
      continue;
    }
    std::printf("%-7s %-6s %9.3f %9.3f %7d %7.2f %6d %6s %11u %12.1f %9u %8.1fK\n",
                routing::to_string(e), r.valid() ? "yes" : "NO", r.route_cpu_s, r.check_cpu_s,
                r.check.hops_max, r.check.hops_avg, r.vls,
                !r.check.cdg_checked  ? "-"
                : r.check.credit_loop ? "YES"
                                      : "no",
                r.stats.switch_links.max, r.stats.switch_links.avg, r.stats.up_spread_max,
                static_cast<double>(r.stats.table_bytes) / 1024.0);
    for (const std::string& p : r.check.problems)
      std::printf("          %s%s\n", r.valid() ? "warning: " : "", p.c_str());
  }
  if (a.json) {
    nlohmann::json j = {
        {"source", a.what}, {"lmc", a.lmc}, {"topology", stats_json(s)}, {"engines", rows}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "\nhops: switch-to-switch hops between HCA pairs; cdl: a credit loop (cycle in the "
        "channel\n"
        "dependency graph, a deadlock risk); sw-link: HCA destinations routed over one\n"
        "switch-to-switch link; upspread: worst difference between a switch's busiest and\n"
        "idlest up link (0-1 = balanced).\n");
  }
  if (any_invalid) throw CLI::RuntimeError(1);
}

}  // namespace

void add_topo(CLI::App& app) {
  auto a = std::make_shared<TopoArgs>();
  auto* cmd = app.add_subcommand("topo", "Describe a topology; write it as a net file or dot");
  cmd->add_option("topology", a->what,
                  "Generator spec (fat-tree:k=8, rail:nodes=4,gpus=8, ...) "
                  "or an ibnetdiscover/ibsim net file")
      ->required();
  cmd->add_option("--netfile", a->netfile, "Write an ibnetdiscover/ibsim net file");
  cmd->add_option("--dot", a->dot, "Write Graphviz dot");
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->callback([a] { run_topo(*a); });
}

void add_route(CLI::App& app) {
  auto a = std::make_shared<RouteArgs>();
  auto* cmd = app.add_subcommand(
      "route", "Route a topology with each engine and check every HCA pair through the tables");
  cmd->add_option("topology", a->what, "Generator spec or net file")->required();
  cmd->add_option("--engine", a->engine, "minhop, updn, ftree, dor or all (default all)");
  cmd->add_option("--lmc", a->lmc, "LID mask control for HCA ports (0..7)");
  cmd->add_option("--root", a->roots, "updn root switch GUID (repeatable)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a] { run_route(*a); });
}

}  // namespace weft::cli
