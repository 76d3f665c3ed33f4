// tools/weft/cmd_run.cpp — `weft run -n N [--fabric F | --topology SPEC] -- prog args...`: starts
// a fabric daemon when none is named, launches N ranks attached to it (WEFT_RANK, WEFT_SIZE,
// WEFT_FABRIC, WEFT_HCA, and WEFT_FABRIC_DEFAULT=1 when it started one of its default topology),
// forwards SIGINT/SIGTERM, names a rank that fails, and tears down.
// `weft run -n N --medium shm|udp|dpdk [--dpdk-args "..."] [--pcap FILE] -- prog args...` starts
// no fabric: the ranks talk over that medium directly (WEFT_MEDIUM and FI_WEFT_MEDIUM for weft
// perf and the libfabric provider; WEFT_DPDK_ARGS and FI_WEFT_DPDK_ARGS; WEFT_PCAP and
// FI_WEFT_PCAP naming FILE with the rank before its extension, cap.pcap -> cap.3.pcap, to which
// the provider adds its pid), with WEFT_RANK and WEFT_SIZE as before.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/fabricd/fabric_daemon.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/topo_input.hpp"

extern char** environ;

namespace weft::cli {
namespace {

// One write(2) per message: ranks share our stderr and log from their own processes, and
// std::cerr writes a message in pieces, so another process's line could land inside ours.
// A write of fewer than PIPE_BUF bytes to a pipe is atomic (pipe(7)).
void say(const std::string& msg) {
  const char* p = msg.data();
  std::size_t left = msg.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

struct RunArgs {
  int n = 2;
  std::string fabric, topology;
  bool pace = false;
  std::string medium, dpdk_args, pcap;
  std::vector<std::string> cmd;
};

// Whether the inherited variable `v` gives way to one this command sets for the rank.
bool replaced(const std::string& v, const RunArgs& a) {
  const auto is = [&](const char* k) { return v.rfind(k, 0) == 0; };
  if (is("WEFT_RANK=") || is("WEFT_SIZE=") || is("WEFT_FABRIC=") || is("WEFT_HCA=") ||
      is("WEFT_FABRIC_DEFAULT="))
    return true;
  if (a.medium.empty()) return false;
  return is("WEFT_MEDIUM=") || is("FI_WEFT_MEDIUM=") ||
         (!a.dpdk_args.empty() && (is("WEFT_DPDK_ARGS=") || is("FI_WEFT_DPDK_ARGS="))) ||
         (!a.pcap.empty() && (is("WEFT_PCAP=") || is("FI_WEFT_PCAP=")));
}

// FILE with the rank before its extension: cap.pcap -> cap.3.pcap, cap -> cap.3.
std::string rank_file(const std::string& f, int rank) {
  const std::size_t slash = f.rfind('/');
  const std::size_t dot = f.rfind('.');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (dot == std::string::npos || dot <= base) return f + "." + std::to_string(rank);
  return f.substr(0, dot) + "." + std::to_string(rank) + f.substr(dot);
}

// Combinations that make no sense, said before anything starts. Empty: fine.
std::string check_args(const RunArgs& a) {
  if (a.medium.empty()) {
    if (!a.dpdk_args.empty()) return "--dpdk-args needs --medium dpdk";
    if (!a.pcap.empty())
      return "--pcap captures a medium: give --medium (a run on a fabric crosses the daemon's "
             "links)";
    return "";
  }
  if (a.medium != "shm" && a.medium != "udp" && a.medium != "dpdk")
    return "--medium must be shm, udp or dpdk";
  if (!a.fabric.empty() || !a.topology.empty() || a.pace)
    return "--medium runs the ranks without a fabric: it excludes --fabric, --topology and "
           "--pace";
  if (!a.dpdk_args.empty() && a.medium != "dpdk") return "--dpdk-args needs --medium dpdk";
  if (a.medium == "dpdk" && a.n > 2 && !std::getenv("FI_WEFT_DPDK_VDEV"))
    return "--medium dpdk pairs two ranks over net_memif; more need a shared device "
           "(FI_WEFT_DPDK_VDEV, e.g. net_af_packet on veths joined by a bridge)";
  return "";
}

int run(const RunArgs& a) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread: all inherit it

  std::string name = a.fabric;
  std::unique_ptr<fabricd::FabricDaemon> daemon;
  std::thread daemon_thread;
  const bool direct = !a.medium.empty();
  if (name.empty() && !direct) {
    const int leaves = a.n > 1 ? 2 : 1;
    const std::string spec =
        !a.topology.empty() ? a.topology
                            : "leaf-spine:leaves=" + std::to_string(leaves) +
                                  ",spines=1,hosts=" + std::to_string((a.n + leaves - 1) / leaves);
    const topo::Topology t = load_topology("run", spec);
    fabricd::DaemonOptions o;
    o.name = name = "run-" + std::to_string(getpid());
    o.pace = a.pace;
    auto r = fabricd::FabricDaemon::create(t, o);
    if (!r.ok()) {
      std::cerr << "weft run: " << r.error() << "\n";
      return 1;
    }
    daemon = std::move(r).value();
    if (daemon->hca_count() < static_cast<std::size_t>(a.n)) {
      std::cerr << "weft run: the topology has " << daemon->hca_count() << " HCAs, fewer than "
                << a.n << " ranks\n";
      return 2;
    }
    daemon_thread = std::thread([&] { daemon->run(); });
  }

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (const auto& s : a.cmd) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<pid_t> pids(static_cast<std::size_t>(a.n), 0);
  int live = 0, rc = 0;
  for (int r = 0; r < a.n; ++r) {
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      if (!replaced(v, a)) env_s.push_back(v);
    }
    env_s.push_back("WEFT_RANK=" + std::to_string(r));
    env_s.push_back("WEFT_SIZE=" + std::to_string(a.n));
    if (direct) {
      env_s.push_back("WEFT_MEDIUM=" + a.medium);
      env_s.push_back("FI_WEFT_MEDIUM=" + a.medium);
      // The provider's net_memif pair is named per job, so concurrent jobs do not pair up.
      if (a.medium == "dpdk" && !std::getenv("FI_WEFT_DPDK_MEMIF"))
        env_s.push_back("FI_WEFT_DPDK_MEMIF=weft-run-" + std::to_string(getpid()));
      if (!a.dpdk_args.empty()) {
        env_s.push_back("WEFT_DPDK_ARGS=" + a.dpdk_args);
        env_s.push_back("FI_WEFT_DPDK_ARGS=" + a.dpdk_args);
      }
      if (!a.pcap.empty()) {
        env_s.push_back("WEFT_PCAP=" + rank_file(a.pcap, r));
        env_s.push_back("FI_WEFT_PCAP=" + rank_file(a.pcap, r));
      }
    } else {
      env_s.push_back("WEFT_FABRIC=" + name);
      env_s.push_back("WEFT_HCA=" + std::to_string(r));
      // Nobody chose this fabric (neither --fabric nor --topology): a rank that can also run
      // without one may (weft coll-bench uses direct links then).
      if (a.fabric.empty() && a.topology.empty()) env_s.push_back("WEFT_FABRIC_DEFAULT=1");
    }
    std::vector<char*> envp;
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid;
    const int e = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
    if (e != 0) {
      say("weft run: cannot start " + a.cmd[0] + ": " + std::strerror(e) + "\n");
      rc = 127;
      break;
    }
    pids[static_cast<std::size_t>(r)] = pid;
    ++live;
  }
  posix_spawnattr_destroy(&attr);
  auto kill_all = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) kill(p, sig);
  };
  if (rc) kill_all(SIGTERM);
  while (live > 0) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGINT || sig == SIGTERM) {
      kill_all(sig);
      if (!rc) rc = 128 + sig;
      continue;
    }
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      for (int r = 0; r < a.n; ++r) {
        if (pids[static_cast<std::size_t>(r)] != p) continue;
        pids[static_cast<std::size_t>(r)] = 0;
        --live;
        int code = 0;
        if (WIFSIGNALED(st)) {
          say("weft run: rank " + std::to_string(r) + " (pid " + std::to_string(p) +
              ") killed by signal " + std::to_string(WTERMSIG(st)) + " (" +
              strsignal(WTERMSIG(st)) + ")\n");
          code = 128 + WTERMSIG(st);
        } else if (WEXITSTATUS(st) != 0) {
          say("weft run: rank " + std::to_string(r) + " (pid " + std::to_string(p) +
              ") exited with status " + std::to_string(WEXITSTATUS(st)) + "\n");
          code = WEXITSTATUS(st);
        }
        if (code && !rc) {
          rc = code;
          kill_all(SIGTERM);  // the job failed: stop the other ranks
        }
      }
    }
  }
  if (daemon) {
    daemon->stop();
    daemon_thread.join();
  }
  return rc;
}

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* c = app.add_subcommand(
      "run",
      "launch N processes attached to an emulated fabric (started here unless --fabric), or "
      "with --medium talking over shm, udp or dpdk directly");
  c->add_option("-n", a->n, "number of ranks")->check(CLI::Range(1, 4096));
  auto* f = c->add_option("--fabric", a->fabric, "attach to this running fabric");
  c->add_option("--topology", a->topology,
                "start a fabric of this topology (default: 2 leaves, 1 spine, N hosts)")
      ->excludes(f);
  c->add_flag("--pace", a->pace, "the started fabric emulates link timing in real time");
  c->add_option("--medium", a->medium,
                "no fabric: the ranks talk over shm, udp (RoCEv2 over UDP) or dpdk (RoCEv2 over "
                "DPDK; net_memif pairs two ranks) - WEFT_MEDIUM and FI_WEFT_MEDIUM");
  c->add_option("--dpdk-args", a->dpdk_args,
                "with --medium dpdk: EAL arguments (WEFT_DPDK_ARGS, FI_WEFT_DPDK_ARGS)");
  c->add_option("--pcap", a->pcap,
                "with --medium: each rank captures what its medium carries into FILE with the "
                "rank before the extension (WEFT_PCAP, FI_WEFT_PCAP; the provider adds its pid)");
  c->add_option("cmd", a->cmd, "program and arguments (after --)")->required();
  c->callback([a] {
    if (const std::string e = check_args(*a); !e.empty()) throw CLI::ValidationError("run", e);
    if (const int rc = run(*a)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace weft::cli
