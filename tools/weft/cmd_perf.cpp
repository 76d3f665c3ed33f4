// tools/weft/cmd_perf.cpp — `weft perf`: perftest's tools in one command, over direct mode.
//   weft perf write|read|send|atomic [--bw|--lat] [-s SIZE | -a] [-n ITERS] [-t DEPTH]
//             [--server [--name N] | --client N | --local] [--copy] [--shm-buffers] [--json]
//             [--fabric F | --direct]
//             [--medium shm|udp|dpdk] [--udp-ip A] [--dpdk-vdev V] [--dpdk-args "..."]
//             [--pcap FILE]
// Direct mode by default; through the fabric daemon F with --fabric F (or WEFT_FABRIC in the
// environment, unless --direct): each side attaches to a free HCA (WEFT_HCA picks one).
// The runner lives in src/io/perf.{hpp,cpp}; this file parses and prints. --medium (or
// WEFT_MEDIUM) moves the data path off the shared-memory ring after the rendezvous: udp carries
// RoCEv2 datagrams between the two processes' sockets (127.0.0.1 unless --udp-ip), dpdk RoCEv2
// frames between two DPDK ports (default: net_memif between the two processes, named after the
// rendezvous; --dpdk-vdev for another device, --dpdk-args / WEFT_DPDK_ARGS for the EAL).
// --pcap FILE (or WEFT_PCAP) captures what the medium carries on this side (with --local: the
// client's, which sees every packet both ways): udp and dpdk their RoCEv2 frames
// (LINKTYPE_ETHERNET, ICRC included), shm the IBA packets LRH..VCRC (ERF InfiniBand records,
// src/io/capture.hpp).
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "src/io/capture.hpp"
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
       json = false, direct = false, shm_buffers = false, memif_zero_copy = false;
  std::string fabric, cpus;
  std::string size = "65536";
  std::uint32_t iters = 0, tx_depth = 128;
  std::string client, name = "weft-perf";
  std::string medium, udp_ip = "127.0.0.1", dpdk_vdev, dpdk_args;
  std::string pcap;  // --pcap / WEFT_PCAP: this side's capture
};

// What each side tells the other about its end of the data path.
struct MediumHello {
  std::uint32_t ip;  // host order
  std::uint16_t port;
  std::uint16_t lid;
  std::uint8_t mac[6];
  std::uint8_t v6;  // udp: ip6 instead of ip
  std::uint8_t pad;
  std::uint8_t ip6[16];
};

// perf's QPs use a 4 KiB path MTU: a medium whose interface carries less says how to fix it.
std::string mtu_problem(std::uint32_t roce_mtu, std::uint32_t if_mtu, std::string_view where) {
  if (roce_mtu >= 4096) return "";
  const bool memif = where.starts_with("net_memif");
  return std::string(where) + " has MTU " + std::to_string(if_mtu) + ", which carries RoCE MTU " +
         std::to_string(roce_mtu) + " at most; weft perf uses 4096: raise it to at least 4160 " +
         (memif ? "(net_memif: its buffers bound it, so a bsize of at least 4174)"
                : "(e.g. ip link set dev IFACE mtu 9000)");
}

// After the rendezvous on `name`: both sides open the medium, swap addresses over the rendezvous
// socket and move the Device onto it. Empty string: done; otherwise what failed.
std::string switch_medium(io::DirectNode& node, const PerfArgs& a, const std::string& name,
                          bool server) {
  if (a.medium == "shm") {
    if (!a.pcap.empty()) {
      // The node keeps its ring; the capture sits between it and the Device.
      auto cap = std::make_unique<io::CaptureMedium>(node.medium(), a.pcap);
      if (!cap->ok()) return "cannot write the capture " + a.pcap;
      node.use_medium(std::move(cap));
    }
    return "";
  }
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
    in6_addr ia6{};
    if (inet_pton(AF_INET, a.udp_ip.c_str(), &ia) == 1) {
      c.local_ip = ntohl(ia.s_addr);
    } else if (inet_pton(AF_INET6, a.udp_ip.c_str(), &ia6) == 1) {
      c.ipv6 = true;
      std::memcpy(c.local_ip6.data(), &ia6, 16);
    } else {
      return "bad --udp-ip " + a.udp_ip + " (an IPv4 or IPv6 address)";
    }
    c.port = 0;  // ephemeral: both ends may share the address
    c.pcap_path = a.pcap;
    // A capturing side takes RoCEv2's port if it can, so that Wireshark, which decodes RoCE on
    // UDP 4791 only, sees every datagram of the run as RoCE (one end of each is on 4791).
    if (!a.pcap.empty()) c.port = wire::kRoceV2UdpPort;
    auto u = std::make_unique<io::udp::UdpMedium>(c);
    if (!u->ok() && c.port != 0) {
      c.port = 0;
      u = std::make_unique<io::udp::UdpMedium>(c);
      if (u->ok())
        std::fprintf(stderr,
                     "weft perf: UDP port %u of %s is taken: the capture's datagrams use port "
                     "%u (tshark -d udp.port==%u,infiniband decodes them)\n",
                     wire::kRoceV2UdpPort, a.udp_ip.c_str(), u->local_port(), u->local_port());
    }
    if (!u->ok()) return u->error();
    if (std::string e = mtu_problem(u->roce_mtu(), u->if_mtu(), u->if_name()); !e.empty()) return e;
    mine.ip = c.local_ip;
    mine.v6 = c.ipv6;
    std::memcpy(mine.ip6, c.local_ip6.data(), 16);
    mine.port = u->local_port();
    if (!send_hello() || !recv_hello()) return "no medium address from the peer";
    if (theirs.v6 != mine.v6)
      return "the peer's --udp-ip is IPv" + std::string(theirs.v6 ? "6" : "4") + ", ours IPv" +
             (mine.v6 ? "6" : "4");
    if (c.ipv6) {
      io::roce::Ip6 ip6;
      std::memcpy(ip6.data(), theirs.ip6, 16);
      u->add_peer6(theirs.lid, ip6, theirs.port);
    } else {
      u->add_peer(theirs.lid, theirs.ip, theirs.port);
    }
    m = std::move(u);
  } else if (a.medium == "dpdk") {
#ifdef WEFT_HAVE_DPDK
    io::dpdk::DpdkConfig c;
    c.vdev = a.dpdk_vdev;
    // net_memif between the two processes (abstract socket: no file). Its server listens, so
    // its port starts first. --dpdk-memif-zero-copy: our server side (the receiver of --bw) is
    // memif's zero-copy client, whose mbufs are the rings' buffers (the other side copies both
    // ways); src/io/dpdk/README.md.
    const bool memif_server = server != a.memif_zero_copy;
    if (c.vdev.empty())
      c.vdev = std::string("net_memif0,role=") + (memif_server ? "server" : "client") +
               ",socket=weft-perf-memif-" + name + io::dpdk::memif_ring_args() +
               (memif_server        ? ""
                : a.memif_zero_copy ? ",zero-copy=yes"
                                    : "");
    std::istringstream in(a.dpdk_args);
    for (std::string w; in >> w;) c.eal_args.push_back(w);
    c.local_ip = 0x0A000000u | node.lid();  // 10.0.0.LID: the frames need some address
    c.link_wait_ns = 0;
    c.pcap_path = a.pcap;
    // The memif server's port first (a memif client connects to a listening server), then the
    // client's; then both wait for the link.
    if (!memif_server && !recv_hello()) return "no medium address from the peer";
    auto d = std::make_unique<io::dpdk::DpdkMedium>(c);
    if (!d->ok()) return d->error();
    if (std::string e = mtu_problem(d->roce_mtu(), d->if_mtu(), c.vdev); !e.empty()) return e;
    mine.ip = c.local_ip;
    mine.port = d->local_port();
    std::memcpy(mine.mac, d->mac().data(), 6);
    if (!send_hello() || (memif_server && !recv_hello())) return "no medium address from the peer";
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
  if (a.pcap.empty())
    if (const char* e = std::getenv("WEFT_PCAP"); e && *e) a.pcap = e;
  if (!a.pcap.empty()) {
    // Said now rather than by a medium's log in the middle of the run.
    std::FILE* f = std::fopen(a.pcap.c_str(), "wb");
    if (!f) throw CLI::ValidationError("perf", "--pcap " + a.pcap + ": " + std::strerror(errno));
    std::fclose(f);
  }
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
  o.shm_buffers = a.shm_buffers;
  if (a.shm_buffers && a.medium != "shm")
    throw CLI::ValidationError("perf", "--shm-buffers needs the shared-memory medium");
  io::DirectOptions d;
  d.zero_copy = !a.copy;
  const int modes = int{a.server} + int{!a.client.empty()} + int{a.local};
  if (modes != 1)
    throw CLI::ValidationError("perf", "give one of --server, --client NAME, --local");
  std::string fabric = a.fabric;
  if (fabric.empty() && !a.direct)
    if (const char* env = std::getenv("WEFT_FABRIC")) fabric = env;
  if (!fabric.empty()) {
    if (a.medium != "shm")
      throw CLI::ValidationError("perf", "--medium is for direct mode (a fabric daemon uses shm)");
    if (!a.pcap.empty())
      throw CLI::ValidationError("perf",
                                 "--pcap is for direct mode (the fabric's links are the "
                                 "daemon's)");
    if (a.copy) throw CLI::ValidationError("perf", "--copy is for direct mode (a fabric copies)");
    if (a.shm_buffers)
      throw CLI::ValidationError("perf", "--shm-buffers is for direct mode (a fabric copies)");
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
    if (child == 0) {
      pin_to(local_cpu(a, true));
      PerfArgs sa = a;
      sa.pcap.clear();  // the client's capture holds both directions
      _exit(serve(*listener, d, sa));
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
  cmd->add_flag("--shm-buffers", a->shm_buffers,
                "Buffers from Weft's shared-memory allocator, mapped by both sides: one memcpy "
                "per payload, no system call (direct mode)");
  cmd->add_option("--cpus", a->cpus, "With --local: pin the server to CPU A, the client to B");
  cmd->add_flag("--json", a->json, "One JSON object per size instead of the table");
  auto* fab = cmd->add_option("--fabric", a->fabric,
                              "Through the fabric daemon F (default: WEFT_FABRIC if set)");
  cmd->add_flag("--direct", a->direct, "Direct mode even when WEFT_FABRIC is set")->excludes(fab);
  cmd->add_option("--medium", a->medium,
                  "Data path: shm (default), udp (RoCEv2 over UDP sockets) or dpdk (RoCEv2 "
                  "frames over DPDK ports); default WEFT_MEDIUM");
  cmd->add_option("--udp-ip", a->udp_ip,
                  "--medium udp: the local IPv4 or IPv6 address (127.0.0.1; e.g. ::1)");
  cmd->add_option("--dpdk-vdev", a->dpdk_vdev,
                  "--medium dpdk: the device (default: net_memif between the two processes)");
  cmd->add_flag("--dpdk-memif-zero-copy", a->memif_zero_copy,
                "--medium dpdk over the default net_memif: the server side (the receiver of "
                "--bw) is memif's zero-copy client");
  cmd->add_option("--dpdk-args", a->dpdk_args,
                  "--medium dpdk: EAL arguments replacing the defaults (or WEFT_DPDK_ARGS)");
  cmd->add_option("--pcap", a->pcap,
                  "Capture what the medium carries on this side into FILE (default WEFT_PCAP): "
                  "RoCEv2 frames on udp and dpdk, IBA packets (ERF) on shm; with --local the "
                  "client's side");
  cmd->callback([a] { run(*a); });
}

}  // namespace weft::cli
