// tools/weft/cmd_perf.cpp — `weft perf`: perftest's tools in one command, over direct mode.
//   weft perf write|read|send|atomic [--bw|--lat] [-s SIZE | -a] [-n ITERS] [-t DEPTH]
//             [--server [--name N] | --client N | --local] [--copy] [--json]
//             [--fabric F | --direct]
// Direct mode by default; through the fabric daemon F with --fabric F (or WEFT_FABRIC in the
// environment, unless --direct): each side attaches to a free HCA (WEFT_HCA picks one).
// The runner lives in src/io/perf.{hpp,cpp}; this file parses and prints.
#include <sys/wait.h>
#include <unistd.h>

#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "src/io/perf.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {
namespace {

struct PerfArgs {
  std::string verb = "write";
  bool bw = false, lat = false, all = false, server = false, local = false, copy = false,
       json = false, direct = false;
  std::string fabric, cpus;
  std::string size = "65536";
  std::uint32_t iters = 0, tx_depth = 128;
  std::string client, name = "weft-perf";
};

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

int serve(io::DirectListener& l, const io::DirectOptions& d) {
  auto node = l.accept(d);
  if (!node) {
    std::fprintf(stderr, "weft perf: accept: %s\n",
                 std::string(io::to_string(node.error())).c_str());
    return 1;
  }
  std::string err;
  if (!io::perf_server(**node, &err)) {
    std::fprintf(stderr, "weft perf server: %s\n", err.c_str());
    return 1;
  }
  return 0;
}

int serve_fabric(int listen_fd, const std::string& fabric, const io::FabricAttachOptions& fo) {
  auto link = io::FabricPerfLink::accept(listen_fd, fabric, fo);
  if (!link) {
    std::fprintf(stderr, "weft perf: fabric %s: %s\n", fabric.c_str(),
                 std::string(io::to_string(link.error())).c_str());
    return 1;
  }
  std::string err;
  if (!io::perf_server(**link, &err)) {
    std::fprintf(stderr, "weft perf server: %s\n", err.c_str());
    return 1;
  }
  return 0;
}

// --cpus A,B of --local: the server side on CPU A, the client on CPU B (as io_baseline's
// ping-pong, so a benchmark compares like with like). Returns the CPU for this side, or -1.
int local_cpu(const PerfArgs& a, bool server) {
  if (a.cpus.empty()) return -1;
  int x = -1, y = -1;
  if (std::sscanf(a.cpus.c_str(), "%d,%d", &x, &y) != 2 || x < 0 || y < 0)
    throw CLI::ValidationError("perf", "--cpus wants A,B");
  return server ? x : y;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    std::fprintf(stderr, "weft perf: cannot pin to CPU %d: %s\n", cpu, std::strerror(errno));
}

// weft perf through the fabric daemon `fabric`.
void run_fabric(const PerfArgs& a, const io::PerfOptions& o, const std::string& fabric) {
  io::FabricAttachOptions fo;
  if (a.server) {
    const int fd = io::FabricPerfLink::listen(a.name);
    if (fd < 0) {
      std::fprintf(stderr, "weft perf: bind weft/perf/%s: %s\n", a.name.c_str(),
                   std::strerror(errno));
      throw CLI::RuntimeError(1);
    }
    fo.timeout_ns = 3'600'000'000'000;
    const int rc = serve_fabric(fd, fabric, fo);
    close(fd);
    if (rc != 0) throw CLI::RuntimeError(1);
    return;
  }
  std::string name = a.client;
  pid_t child = -1;
  if (a.local) {
    unsetenv("WEFT_HCA");  // both sides take a free HCA
    name = "perf-" + std::to_string(getpid());
    const int fd = io::FabricPerfLink::listen(name);
    if (fd < 0) throw CLI::RuntimeError(1);
    std::fflush(nullptr);
    child = fork();
    if (child < 0) throw CLI::RuntimeError(1);
    if (child == 0) {
      pin_to(local_cpu(a, true));
      _exit(serve_fabric(fd, fabric, fo));
    }
    pin_to(local_cpu(a, false));
    close(fd);
  }
  std::vector<io::PerfResult> r;
  {
    auto link = io::FabricPerfLink::connect(name, fabric, fo);
    if (!link) {
      std::fprintf(stderr, "weft perf: fabric %s, server %s: %s\n", fabric.c_str(), name.c_str(),
                   std::string(io::to_string(link.error())).c_str());
      if (child > 0) {
        kill(child, SIGTERM);
        waitpid(child, nullptr, 0);
      }
      throw CLI::RuntimeError(1);
    }
    r = io::perf_client(**link, o);
  }
  if (child > 0) {
    int st = 0;
    waitpid(child, &st, 0);
    if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && (r.empty() || r.back().ok)) {
      io::PerfResult f;
      f.ok = false;
      f.error = "the server side failed";
      r.push_back(f);
    }
  }
  if (a.json)
    io::perf_print_json(stdout, o, r, false);
  else
    io::perf_print_table(stdout, o, r, false, "fabric " + fabric + ", shared memory");
  if (!r.empty() && !r.back().ok) {
    std::fprintf(stderr, "weft perf: %s\n", r.back().error.c_str());
    throw CLI::RuntimeError(1);
  }
}

void run(const PerfArgs& a) {
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
  std::string fabric = a.fabric;
  if (fabric.empty() && !a.direct)
    if (const char* env = std::getenv("WEFT_FABRIC")) fabric = env;
  if (!fabric.empty()) {
    if (a.copy) throw CLI::ValidationError("perf", "--copy is for direct mode (a fabric copies)");
    run_fabric(a, o, fabric);
    return;
  }

  if (a.server) {
    auto l = io::DirectListener::bind(a.name);
    if (!l) {
      std::fprintf(stderr, "weft perf: bind weft/%s: %s\n", a.name.c_str(),
                   std::string(io::to_string(l.error())).c_str());
      throw CLI::RuntimeError(1);
    }
    d.timeout_ns = 3'600'000'000'000;
    if (serve(**l, d) != 0) throw CLI::RuntimeError(1);
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
    if (child == 0) {
      pin_to(local_cpu(a, true));
      _exit(serve(*listener, d));
    }
    pin_to(local_cpu(a, false));
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
    zc = (*node)->zero_copy_tx() && (*node)->zero_copy_rx();
    r = io::perf_client(**node, o);
  }
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
  cmd->add_option("--cpus", a->cpus, "With --local: pin the server to CPU A, the client to B");
  cmd->add_flag("--json", a->json, "One JSON object per size instead of the table");
  auto* fab = cmd->add_option("--fabric", a->fabric,
                              "Through the fabric daemon F (default: WEFT_FABRIC if set)");
  cmd->add_flag("--direct", a->direct, "Direct mode even when WEFT_FABRIC is set")->excludes(fab);
  cmd->callback([a] { run(*a); });
}

}  // namespace weft::cli
