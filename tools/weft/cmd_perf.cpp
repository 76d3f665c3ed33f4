// tools/weft/cmd_perf.cpp — `weft perf`: perftest's tools in one command, over direct mode.
//   weft perf write|read|send|atomic [--bw|--lat] [-s SIZE | -a] [-n ITERS] [-t DEPTH]
//             [--server [--name N] | --client N | --local] [--copy] [--json]
//             [--medium shm|udp|dpdk] [--udp-ip A] [--dpdk-vdev V] [--dpdk-args "..."]
// The runner lives in src/io/perf.{hpp,cpp}; this file parses and prints. --medium (or
// WEFT_MEDIUM) moves the data path off the shared-memory ring after the rendezvous: udp carries
// RoCEv2 datagrams between the two processes' sockets (127.0.0.1 unless --udp-ip), dpdk RoCEv2
// frames between two DPDK ports (default: net_memif between the two processes, named after the
// rendezvous; --dpdk-vdev for another device, --dpdk-args / WEFT_DPDK_ARGS for the EAL).
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "src/io/perf.hpp"
#include "src/io/udp/udp_medium.hpp"
#ifdef WEFT_HAVE_DPDK
#include "src/io/dpdk/dpdk_medium.hpp"
#endif
#include "tools/weft/commands.hpp"

namespace weft::cli {
namespace {

struct PerfArgs {
  std::string verb = "write";
  bool bw = false, lat = false, all = false, server = false, local = false, copy = false,
       json = false;
  std::string size = "65536";
  std::uint32_t iters = 0, tx_depth = 128;
  std::string client, name = "weft-perf";
  std::string medium, udp_ip = "127.0.0.1", dpdk_vdev, dpdk_args;
};

// What each side tells the other about its end of the data path.
struct MediumHello {
  std::uint32_t ip;  // host order
  std::uint16_t port;
  std::uint16_t lid;
  std::uint8_t mac[6];
  std::uint8_t pad[2];
};

// After the rendezvous on `name`: both sides open the medium, swap addresses over the rendezvous
// socket and move the Device onto it. Empty string: done; otherwise what failed.
std::string switch_medium(io::DirectNode& node, const PerfArgs& a, const std::string& name,
                          bool server) {
  if (a.medium == "shm") return "";
  MediumHello mine{}, theirs{};
  mine.lid = node.lid();
  const auto send_hello = [&] {
    return node.send_oob({reinterpret_cast<const std::uint8_t*>(&mine), sizeof mine});
  };
  const auto recv_hello = [&] {
    auto r = node.recv_oob(30'000'000'000);
    if (!r || r->size() != sizeof theirs) return false;
    std::memcpy(&theirs, r->data(), sizeof theirs);
    return true;
  };
  std::unique_ptr<io::Medium> m;
  if (a.medium == "udp") {
    io::udp::UdpConfig c;
    in_addr ia{};
    if (inet_pton(AF_INET, a.udp_ip.c_str(), &ia) != 1) return "bad --udp-ip " + a.udp_ip;
    c.local_ip = ntohl(ia.s_addr);
    c.port = 0;  // ephemeral: both ends may share the address
    auto u = std::make_unique<io::udp::UdpMedium>(c);
    if (!u->ok()) return u->error();
    mine.ip = c.local_ip;
    mine.port = u->local_port();
    if (!send_hello() || !recv_hello()) return "no medium address from the peer";
    u->add_peer(theirs.lid, theirs.ip, theirs.port);
    m = std::move(u);
  } else if (a.medium == "dpdk") {
#ifdef WEFT_HAVE_DPDK
    io::dpdk::DpdkConfig c;
    c.vdev = a.dpdk_vdev;
    if (c.vdev.empty())  // net_memif between the two processes (abstract socket: no file)
      c.vdev = std::string("net_memif0,role=") + (server ? "server" : "client") +
               ",socket=weft-perf-memif-" + name + ",bsize=8192";
    std::istringstream in(a.dpdk_args);
    for (std::string w; in >> w;) c.eal_args.push_back(w);
    c.local_ip = 0x0A000000u | node.lid();  // 10.0.0.LID: the frames need some address
    c.link_wait_ns = 0;
    // The server's port first (a memif client connects to a listening server), then the
    // client's; then both wait for the link.
    if (!server && !recv_hello()) return "no medium address from the peer";
    auto d = std::make_unique<io::dpdk::DpdkMedium>(c);
    if (!d->ok()) return d->error();
    mine.ip = c.local_ip;
    mine.port = d->local_port();
    std::memcpy(mine.mac, d->mac().data(), 6);
    if (!send_hello() || (server && !recv_hello())) return "no medium address from the peer";
    io::roce::Mac mac;
    std::memcpy(mac.data(), theirs.mac, 6);
    d->add_peer(theirs.lid, theirs.ip, theirs.port, mac);
    if (!d->wait_link(10'000'000'000)) return "the DPDK link did not come up in 10 s";
    m = std::move(d);
#else
    (void)name;
    (void)server;
    return "this weft was built without DPDK (libdpdk not found or -Ddpdk=disabled)";
#endif
  } else {
    return "unknown medium '" + a.medium + "' (shm, udp or dpdk)";
  }
  node.use_medium(std::move(m));
  return "";
}

// "8", "4K", "1M" (binary units).
bool parse_size(const std::string& s, std::uint32_t& out) {
  if (s.empty()) return false;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    return false;
  }
  const std::string suffix = s.substr(pos);
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    v <<= 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    v <<= 20;
  else if (!suffix.empty())
    return false;
  if (v == 0 || v > io::kPerfSizeMax) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

void report(const PerfArgs& a, const io::PerfOptions& o, const std::vector<io::PerfResult>& r,
            bool zero_copy) {
  if (a.json)
    io::perf_print_json(stdout, o, r, zero_copy);
  else
    io::perf_print_table(stdout, o, r, zero_copy);
  if (!r.empty() && !r.back().ok) {
    std::fprintf(stderr, "weft perf: %s\n", r.back().error.c_str());
    throw CLI::RuntimeError(1);
  }
}

// The EAL (and its run-time directory) goes once the medium is gone.
void release_medium(const PerfArgs& a) {
#ifdef WEFT_HAVE_DPDK
  if (a.medium == "dpdk") io::dpdk::eal_cleanup();
#else
  (void)a;
#endif
}

int serve_once(io::DirectListener& l, const io::DirectOptions& d, const PerfArgs& a) {
  auto node = l.accept(d);
  if (!node) {
    std::fprintf(stderr, "weft perf: accept: %s\n",
                 std::string(io::to_string(node.error())).c_str());
    return 1;
  }
  if (const std::string e = switch_medium(**node, a, l.name(), true); !e.empty()) {
    std::fprintf(stderr, "weft perf server: medium %s: %s\n", a.medium.c_str(), e.c_str());
    return 1;
  }
  std::string err;
  if (!io::perf_server(**node, &err)) {
    std::fprintf(stderr, "weft perf server: %s\n", err.c_str());
    return 1;
  }
  return 0;
}

int serve(io::DirectListener& l, const io::DirectOptions& d, const PerfArgs& a) {
  const int rc = serve_once(l, d, a);
  release_medium(a);
  return rc;
}

void run(PerfArgs a) {
  if (a.medium.empty()) {
    const char* e = std::getenv("WEFT_MEDIUM");
    a.medium = e && *e ? e : "shm";
  }
  if (a.medium != "shm" && a.medium != "udp" && a.medium != "dpdk")
    throw CLI::ValidationError("perf", "--medium must be shm, udp or dpdk");
  io::PerfOptions o;
  if (a.verb == "write")
    o.verb = io::PerfVerb::kWrite;
  else if (a.verb == "read")
    o.verb = io::PerfVerb::kRead;
  else if (a.verb == "send")
    o.verb = io::PerfVerb::kSend;
  else if (a.verb == "atomic")
    o.verb = io::PerfVerb::kAtomic;
  else
    throw CLI::ValidationError("perf", "verb must be write, read, send or atomic");
  o.mode = a.lat ? io::PerfMode::kLat : io::PerfMode::kBw;
  if (a.all) {
    o.sizes = io::perf_all_sizes();
  } else {
    std::uint32_t s;
    if (!parse_size(a.size, s)) throw CLI::ValidationError("perf", "bad -s SIZE (1 B .. 8M)");
    o.sizes = {s};
  }
  o.iters = a.iters;
  o.tx_depth = a.tx_depth;
  io::DirectOptions d;
  d.zero_copy = !a.copy;
  const int modes = int{a.server} + int{!a.client.empty()} + int{a.local};
  if (modes != 1)
    throw CLI::ValidationError("perf", "give one of --server, --client NAME, --local");

  if (a.server) {
    auto l = io::DirectListener::bind(a.name);
    if (!l) {
      std::fprintf(stderr, "weft perf: bind weft/%s: %s\n", a.name.c_str(),
                   std::string(io::to_string(l.error())).c_str());
      throw CLI::RuntimeError(1);
    }
    d.timeout_ns = 3'600'000'000'000;
    if (serve(**l, d, a) != 0) throw CLI::RuntimeError(1);
    return;
  }
  std::string name = a.client;
  std::unique_ptr<io::DirectListener> listener;
  pid_t child = -1;
  if (a.local) {
    name = "perf-" + std::to_string(getpid());
    auto l = io::DirectListener::bind(name);
    if (!l) throw CLI::RuntimeError(1);
    listener = std::move(*l);
    std::fflush(nullptr);
    child = fork();
    if (child < 0) throw CLI::RuntimeError(1);
    if (child == 0) _exit(serve(*listener, d, a));
    listener.reset();
  }
  std::vector<io::PerfResult> r;
  bool zc = false;
  {
    auto node = io::DirectNode::connect(name, d);
    if (!node) {
      std::fprintf(stderr, "weft perf: connect weft/%s: %s\n", name.c_str(),
                   std::string(io::to_string(node.error())).c_str());
      if (child > 0) waitpid(child, nullptr, 0);
      throw CLI::RuntimeError(1);
    }
    if (const std::string e = switch_medium(**node, a, name, false); !e.empty()) {
      io::PerfResult f;
      f.ok = false;
      f.error = "medium " + a.medium + ": " + e;
      r.push_back(f);
    } else {
      zc = (*node)->zero_copy_tx() && (*node)->zero_copy_rx();
      r = io::perf_client(**node, o);
    }
  }
  release_medium(a);
  if (child > 0) {
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (r.empty() || r.back().ok) {
        io::PerfResult f;
        f.ok = false;
        f.error = "the server side failed";
        r.push_back(f);
      }
    }
  }
  report(a, o, r, zc);
}

}  // namespace

void add_perf(CLI::App& app) {
  auto a = std::make_shared<PerfArgs>();
  auto* cmd = app.add_subcommand("perf", "perftest-style bandwidth and latency over direct mode");
  cmd->add_option("verb", a->verb, "write | read | send | atomic")->required();
  auto* bw = cmd->add_flag("--bw", a->bw, "Bandwidth test (default)");
  cmd->add_flag("--lat", a->lat, "Latency test")->excludes(bw);
  auto* size =
      cmd->add_option("-s,--size", a->size, "Message size: bytes, or with K/M (default 65536)");
  cmd->add_flag("-a,--all", a->all, "All sizes from 2 B to 8 MiB")->excludes(size);
  cmd->add_option("-n,--iters", a->iters, "Iterations per size (default 1000 lat / 5000 bw)");
  cmd->add_option("-t,--tx-depth", a->tx_depth, "WRs in flight for --bw (default 128)");
  cmd->add_flag("--server", a->server, "Wait for one client on weft/NAME");
  cmd->add_option("--name", a->name, "Rendezvous name of --server (default weft-perf)");
  cmd->add_option("--client", a->client, "Connect to the server of that rendezvous name");
  cmd->add_flag("--local", a->local, "Run both sides: fork a server, connect to it");
  cmd->add_flag("--copy", a->copy, "No zero copy: payloads go through the ring");
  cmd->add_flag("--json", a->json, "One JSON object per size instead of the table");
  cmd->add_option("--medium", a->medium,
                  "Data path: shm (default), udp (RoCEv2 over UDP sockets) or dpdk (RoCEv2 "
                  "frames over DPDK ports); default WEFT_MEDIUM");
  cmd->add_option("--udp-ip", a->udp_ip, "--medium udp: the local IPv4 address (127.0.0.1)");
  cmd->add_option("--dpdk-vdev", a->dpdk_vdev,
                  "--medium dpdk: the device (default: net_memif between the two processes)");
  cmd->add_option("--dpdk-args", a->dpdk_args,
                  "--medium dpdk: EAL arguments replacing the defaults (or WEFT_DPDK_ARGS)");
  cmd->callback([a] { run(*a); });
}

}  // namespace weft::cli
