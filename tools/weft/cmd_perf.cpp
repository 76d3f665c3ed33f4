// tools/weft/cmd_perf.cpp — `weft perf`: perftest's tools in one command, over direct mode.
//   weft perf write|read|send|atomic [--bw|--lat] [-s SIZE | -a] [-n ITERS] [-t DEPTH]
//             [--server [--name N] | --client N | --local] [--copy] [--json]
// The runner lives in src/io/perf.{hpp,cpp}; this file parses and prints.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "src/io/perf.hpp"
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
    if (child == 0) _exit(serve(*listener, d));
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
  cmd->add_flag("--json", a->json, "One JSON object per size instead of the table");
  cmd->callback([a] { run(*a); });
}

}  // namespace weft::cli
