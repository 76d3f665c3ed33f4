// tools/weft/cmd_fabric.cpp — `weft fabric up|status|inject|down`: the fabric daemon
// (emu/fabricd) in the foreground, and its control requests.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include "emu/fabricd/fabric_daemon.hpp"
#include "emu/faults/scenario.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/topo_input.hpp"

namespace weft::cli {
namespace {

struct UpArgs {
  std::string name, topology, faults;
  bool pace = false;
  std::string peer, bind;         // across hosts: NAME=HOST:PORT, HOST[:PORT]
  std::vector<std::string> part;  // the switches this daemon runs
  double tunnel_drop = 0.0;       // loss injection on the tunnel's receive side
  std::uint64_t tunnel_seed = 1;
};

// Across hosts (--peer/--bind/--part, all three or none): the tunnel and this daemon's part.
std::optional<fabricd::CrossHostConfig> cross_host(const UpArgs& a) {
  if (a.peer.empty() && a.bind.empty() && a.part.empty()) {
    if (a.tunnel_drop > 0.0) {
      std::cerr << "weft fabric up: --tunnel-drop needs --peer, --bind and --part\n";
      throw CLI::RuntimeError(2);
    }
    return std::nullopt;
  }
  auto fail = [](const std::string& m) {
    std::cerr << "weft fabric up: " << m << "\n";
    throw CLI::RuntimeError(2);
  };
  if (a.peer.empty() || a.bind.empty() || a.part.empty())
    fail("a fabric across hosts needs --peer, --bind and --part together");
  fabricd::CrossHostConfig c;
  const auto eq = a.peer.find('=');
  if (eq == std::string::npos || eq == 0) fail("--peer wants NAME=HOST:PORT, got " + a.peer);
  c.peer_name = a.peer.substr(0, eq);
  if (!fabricd::parse_endpoint(a.peer.substr(eq + 1), c.peer))
    fail("--peer: not an IPv4/IPv6 address with an optional port: " + a.peer.substr(eq + 1));
  if (!fabricd::parse_endpoint(a.bind, c.bind))
    fail("--bind: not an IPv4/IPv6 address with an optional port: " + a.bind);
  c.part = a.part;
  c.rx_drop = a.tunnel_drop;
  c.rx_drop_seed = a.tunnel_seed;
  return c;
}

struct InjectArgs {
  std::string name, link;
  double drop = -1;
  bool down = false, up = false;
};

int request(const std::string& name, const std::string& req) {
  std::string ans;
  if (!fabricd::control(name, req, ans)) {
    std::cerr << "weft fabric: " << ans << "\n";
    return 1;
  }
  std::cout << ans;
  return ans.rfind("error:", 0) == 0 ? 1 : 0;
}

}  // namespace

void add_fabric(CLI::App& app) {
  auto* fab = app.add_subcommand("fabric", "run an emulated fabric daemon processes attach to");
  fab->require_subcommand(1);

  auto up = std::make_shared<UpArgs>();
  auto* u = fab->add_subcommand(
      "up",
      "run the fabric (switches, links, subnet manager) in the foreground until "
      "`weft fabric down` or a signal; processes attach with WEFT_FABRIC=NAME");
  u->add_option("--name", up->name, "fabric name (socket weft/fabric/NAME)")->required();
  u->add_option("--topology", up->topology, "topology spec or net file")->required();
  u->add_flag("--pace", up->pace, "emulate link rates and latencies against the wall clock");
  u->add_option("--faults", up->faults,
                "fault scenario (TOML, as weft sim's): port faults at once, events at their "
                "times after the start on the wall clock");
  u->add_option("--peer", up->peer,
                "across hosts: the other host's daemon, NAME=HOST:PORT (its --bind)");
  u->add_option("--bind", up->bind,
                "across hosts: this daemon's tunnel address, HOST[:PORT] "
                "(UDP, port 4792 by default)");
  u->add_option("--part", up->part,
                "across hosts: the switches this daemon runs (descriptions, globs or indices, "
                "comma-separated); HCAs go with their switch, the rest is the peer's")
      ->delimiter(',');
  u->add_option("--tunnel-drop", up->tunnel_drop,
                "across hosts, testing: drop this share of the tunnel frames received "
                "(0..1, seeded by --tunnel-seed)")
      ->check(CLI::Range(0.0, 1.0));
  u->add_option("--tunnel-seed", up->tunnel_seed, "seed of --tunnel-drop");
  u->callback([up] {
    const topo::Topology t = load_topology("fabric up", up->topology);
    // Signals go to a waiting thread (the daemon's threads inherit the mask).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    fabricd::DaemonOptions o;
    o.name = up->name;
    o.pace = up->pace;
    o.cross_host = cross_host(*up);
    if (!up->faults.empty()) {
      auto sc = faults::load_scenario(t, up->faults);
      if (!sc.ok()) {
        std::cerr << "weft fabric up: " << sc.error().message << "\n";
        throw CLI::RuntimeError(2);
      }
      o.faults = std::move(sc).value();
    }
    auto r = fabricd::FabricDaemon::create(t, o);
    if (!r.ok()) {
      std::cerr << "weft fabric up: " << r.error() << "\n";
      throw CLI::RuntimeError(1);
    }
    auto d = std::move(r).value();
    std::cout << "fabric " << up->name << " up: " << d->hca_count() << " HCAs" << std::endl;
    fabricd::FabricDaemon* raw = d.get();
    std::thread([raw, set] {
      int sig = 0;
      sigwait(&set, &sig);
      raw->stop();
    }).detach();
    d->run();
    std::cout << "fabric " << up->name << " down" << std::endl;
  });

  auto status = std::make_shared<std::string>();
  auto* s = fab->add_subcommand("status", "nodes, LIDs, port states and counters");
  s->add_option("name", *status, "fabric name")->required();
  s->callback([status] {
    if (const int rc = request(*status, "status")) throw CLI::RuntimeError(rc);
  });

  auto inj = std::make_shared<InjectArgs>();
  auto* i = fab->add_subcommand("inject", "change a link: drop probability, down or up");
  i->add_option("name", inj->name, "fabric name")->required();
  i->add_option("--link", inj->link, "NODE/PORT (node description or index)")->required();
  auto* drop = i->add_option("--drop", inj->drop, "drop probability per packet, both ways");
  auto* down = i->add_flag("--down", inj->down, "take the link down");
  auto* upf = i->add_flag("--up", inj->up, "bring the link up");
  drop->excludes(down)->excludes(upf);
  down->excludes(upf);
  i->callback([inj] {
    std::string req = "inject " + inj->link + " ";
    if (inj->down)
      req += "down";
    else if (inj->up)
      req += "up";
    else if (inj->drop >= 0)
      req += "drop " + std::to_string(inj->drop);
    else {
      std::cerr << "weft fabric inject: give --drop P, --down or --up\n";
      throw CLI::RuntimeError(2);
    }
    if (const int rc = request(inj->name, req)) throw CLI::RuntimeError(rc);
  });

  auto dn = std::make_shared<std::string>();
  auto* d = fab->add_subcommand("down", "stop the fabric daemon");
  d->add_option("name", *dn, "fabric name")->required();
  d->callback([dn] {
    if (const int rc = request(*dn, "down")) throw CLI::RuntimeError(rc);
  });
}

}  // namespace weft::cli
