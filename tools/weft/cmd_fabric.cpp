// tools/weft/cmd_fabric.cpp — `weft fabric up|status|inject|down`: the fabric daemon
// (emu/fabricd) in the foreground, and its control requests.
#include <signal.h>

#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include "emu/fabricd/fabric_daemon.hpp"
#include "emu/faults/scenario.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/sm_flags.hpp"
#include "tools/weft/topo_input.hpp"

namespace weft::cli {
namespace {

struct UpArgs {
  std::string name, topology, faults;
  bool pace = false;
  std::vector<std::string> peer;  // across hosts: NAME=HOST[:PORT] each
  std::string bind;               // HOST[:PORT]
  std::vector<std::string> part;  // the switches this daemon runs
  std::string host;               // or: this daemon's name in the topology file's hosts section
  double tunnel_drop = 0.0;       // loss injection on the tunnel's receive side
  std::uint64_t tunnel_seed = 1;
  SmFlags sm;             // --engine, --lmc, --root, --sm-sweep, --sm-heavy-every, --sm-node
  std::string hold_life;  // --hold-life: a time, as faults::parse_time reads it
  std::size_t client_queue = 4096;  // --client-queue: packets queued toward one process
};

// --client-queue: at least 2 (the stall mark is half of it), at most 2^20 packets (each may
// hold a 4 KiB MTU's payload: 4 GiB of queue toward one process is past any use).
constexpr std::size_t kClientQueueMin = 2, kClientQueueMax = std::size_t{1} << 20;

[[noreturn]] void up_fail(const std::string& m) {
  std::cerr << "weft fabric up: " << m << "\n";
  throw CLI::RuntimeError(2);
}

// A peer's address: a host name must resolve now (the tunnel resolves it again when it opens),
// so a typo is reported with the flag or line that gave it.
void check_resolves(const std::string& what, const fabricd::TunnelEndpoint& e) {
  auto r = fabricd::resolve_endpoint(e, AF_UNSPEC);
  if (!r.ok()) up_fail(what + ": " + r.error());
}

// Across hosts, from the topology file's hosts section: this daemon is `--host NAME`.
fabricd::CrossHostConfig from_hosts_section(const UpArgs& a) {
  std::ifstream in(a.topology);
  if (!in)
    up_fail("--host needs a topology file with a hosts section (#weft host lines); " + a.topology +
            " is not a file");
  std::stringstream text;
  text << in.rdbuf();
  auto hosts = fabricd::read_hosts_section(text.str());
  if (!hosts.ok()) up_fail(a.topology + ": " + hosts.error());
  if (hosts.value().empty()) up_fail(a.topology + ": no hosts section (#weft host lines)");
  auto c = fabricd::cross_host_from_hosts(hosts.value(), a.host);
  if (!c.ok()) up_fail(a.topology + ": " + c.error());
  if (!a.bind.empty() && !fabricd::parse_endpoint(a.bind, c.value().bind))
    up_fail("--bind: not HOST[:PORT] or [IPV6]:PORT: " + a.bind);
  for (const auto& p : c.value().peers)
    check_resolves(a.topology + ": host " + p.name + " " + p.addr.host, p.addr);
  return std::move(c).value();
}

// Across hosts (--peer (one or more)/--bind/--part, all three or none; or --host): the tunnel,
// the peers and this daemon's part.
std::optional<fabricd::CrossHostConfig> cross_host(const UpArgs& a) {
  std::optional<fabricd::CrossHostConfig> out;
  if (!a.host.empty()) {
    if (!a.peer.empty() || !a.part.empty())
      up_fail("--host takes the peers and the part from the topology file: no --peer or --part");
    out = from_hosts_section(a);
  } else if (a.peer.empty() && a.bind.empty() && a.part.empty()) {
    if (a.tunnel_drop > 0.0) up_fail("--tunnel-drop needs --peer, --bind and --part (or --host)");
    return std::nullopt;
  } else {
    if (a.peer.empty() || a.bind.empty() || a.part.empty())
      up_fail("a fabric across hosts needs --peer, --bind and --part together (or --host)");
    fabricd::CrossHostConfig c;
    for (const std::string& spec : a.peer) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0)
        up_fail("--peer wants NAME=HOST[:PORT], got '" + spec + "'");
      fabricd::PeerConfig p;
      p.name = spec.substr(0, eq);
      if (!fabricd::parse_endpoint(spec.substr(eq + 1), p.addr))
        up_fail("--peer " + spec + ": not HOST[:PORT] or [IPV6]:PORT: '" + spec.substr(eq + 1) +
                "'");
      for (const auto& q : c.peers)
        if (q.name == p.name) up_fail("--peer " + p.name + " given twice");
      check_resolves("--peer " + spec, p.addr);
      c.peers.push_back(std::move(p));
    }
    if (!fabricd::parse_endpoint(a.bind, c.bind))
      up_fail("--bind: not HOST[:PORT] or [IPV6]:PORT: " + a.bind);
    c.part = a.part;
    out = std::move(c);
  }
  out->rx_drop = a.tunnel_drop;
  out->rx_drop_seed = a.tunnel_seed;
  return out;
}

struct InjectArgs {
  std::string name, link;
  double drop = -1;
  double ber = -1;
  bool down = false, up = false;
};

// A rate as the daemon's request reads it, every digit kept (std::to_string would print 1e-7 as
// 0.000000).
std::string rate_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

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
                "across hosts: another host's daemon, NAME=HOST[:PORT] (its --bind; HOST an "
                "address or a name); once per other daemon");
  u->add_option("--bind", up->bind,
                "across hosts: this daemon's tunnel address, HOST[:PORT] "
                "(UDP, port 4792 by default)");
  u->add_option("--part", up->part,
                "across hosts: the switches this daemon runs (descriptions, globs or indices, "
                "comma-separated); HCAs go with their switch, the rest is the peer's")
      ->delimiter(',');
  u->add_option("--host", up->host,
                "across hosts, instead of --peer/--part: this daemon's NAME in the topology "
                "file's hosts section (lines `#weft host NAME HOST[:PORT] SWITCH...`)");
  u->add_option("--tunnel-drop", up->tunnel_drop,
                "across hosts, testing: drop this share of the tunnel frames received "
                "(0..1, seeded by --tunnel-seed)")
      ->check(CLI::Range(0.0, 1.0));
  u->add_option("--tunnel-seed", up->tunnel_seed, "seed of --tunnel-drop");
  add_sm_flags(u, up->sm);
  u->add_option("--hold-life", up->hold_life,
                "how long packets toward a process that reads nothing are held (its switch port "
                "out of credits) before they are dropped, as a switch's HOQLife (default 537ms)");
  u->add_option("--client-queue", up->client_queue,
                "packets the daemon queues toward one process; past half of it (at most 64) the "
                "HCAs sending to it stop injecting and arrivals are held (default 4096)");
  u->callback([up] {
    const topo::Topology t = load_topology("fabric up", up->topology);
    // Signals go to a waiting thread (the daemon's threads inherit the mask).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // Whoever reads our standard output (a pipe: `| head`, a test's popen) may be gone before the
    // "down" line: that write must fail (EPIPE), not kill the daemon before its destructor
    // removes the fabric's segments and sockets.
    std::signal(SIGPIPE, SIG_IGN);
    fabricd::DaemonOptions o;
    o.name = up->name;
    o.pace = up->pace;
    o.cross_host = cross_host(*up);
    if (!up->hold_life.empty()) {
      const auto t = faults::parse_time(up->hold_life);
      if (!t || *t <= 0)
        up_fail("--hold-life must be a time above zero such as 500ms, not \"" + up->hold_life +
                "\"");
      o.rx_hold_life_ns = *t;
    }
    if (up->client_queue < kClientQueueMin || up->client_queue > kClientQueueMax)
      up_fail("--client-queue must be " + std::to_string(kClientQueueMin) + ".." +
              std::to_string(kClientQueueMax) + " packets, not " +
              std::to_string(up->client_queue));
    o.to_client_packets_max = up->client_queue;
    if (const std::string e = apply_sm_flags(up->sm, t, &o.sm); !e.empty()) up_fail(e);
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
  auto* i =
      fab->add_subcommand("inject", "change a link: drop probability, bit errors, down or up");
  i->add_option("name", inj->name, "fabric name")->required();
  i->add_option("--link", inj->link, "NODE/PORT (node description or index)")->required();
  auto* drop = i->add_option("--drop", inj->drop, "drop probability per packet, both ways");
  auto* ber = i->add_option("--ber", inj->ber,
                            "bit error rate, both ways (before FEC; what FEC cannot repair fails "
                            "the VCRC and is dropped, counted in PortRcvErrors)");
  auto* down = i->add_flag("--down", inj->down, "take the link down");
  auto* upf = i->add_flag("--up", inj->up, "bring the link up");
  drop->excludes(down)->excludes(upf);
  ber->excludes(down)->excludes(upf);
  down->excludes(upf);
  i->callback([inj] {
    const std::string req = "inject " + inj->link + " ";
    std::vector<std::string> reqs;
    if (inj->down) reqs.push_back(req + "down");
    if (inj->up) reqs.push_back(req + "up");
    if (inj->drop >= 0) reqs.push_back(req + "drop " + rate_text(inj->drop));
    if (inj->ber >= 0) reqs.push_back(req + "ber " + rate_text(inj->ber));
    if (reqs.empty()) {
      std::cerr << "weft fabric inject: give --drop P, --ber B, --down or --up\n";
      throw CLI::RuntimeError(2);
    }
    for (const std::string& r : reqs)
      if (const int rc = request(inj->name, r)) throw CLI::RuntimeError(rc);
  });

  auto dn = std::make_shared<std::string>();
  auto* d = fab->add_subcommand("down", "stop the fabric daemon");
  d->add_option("name", *dn, "fabric name")->required();
  d->callback([dn] {
    if (const int rc = request(*dn, "down")) throw CLI::RuntimeError(rc);
  });
}

}  // namespace weft::cli
