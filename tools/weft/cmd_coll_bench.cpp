// tools/weft/cmd_coll_bench.cpp — `weft coll-bench`: live-mode collectives, nccl-tests style.
//   weft run -n 8 -- weft coll-bench --workload allreduce -b 8 -e 8M -f 2 --dtype bf16 --op sum
//   weft run -n 8 --fabric F -- weft coll-bench ...        (through the fabric daemon F)
// Each process is one rank (WEFT_RANK, WEFT_SIZE, and WEFT_JOB or weft run's WEFT_FABRIC name the
// job; --rank/--size/--job override them); rank 0 prints nccl-tests' table. The logic is
// src/coll/live (LiveMesh, run_bench).
// The medium (--medium): `direct` joins the ranks in a full mesh of shared-memory links; `fabric`
// puts each rank on its own HCA of a fabric daemon (WEFT_FABRIC or --fabric F) and every packet
// through its emulated switches. `auto` (the default) goes through the fabric when the user chose
// one: --fabric, `weft run --fabric F` or `--topology T`, or WEFT_FABRIC set by hand; under a plain
// `weft run -n N` it uses direct links. weft run always starts a fabric when it is given none and
// says so with WEFT_FABRIC_DEFAULT=1; nobody asked for that one, and the direct links measure the
// library without the daemon's relay (one thread for every rank's packets) in the way.
// Exit status: 0, 1 when a collective failed or an element was wrong, 2 on bad input.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "emu/collsim/collsim.hpp"
#include "src/coll/live/coll_bench.hpp"
#include "tools/weft/cmd_collsim.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {
namespace {

struct CollBenchArgs {
  std::string workload = "allreduce", algo = "auto", dtype = "float", op = "sum";
  std::string minbytes = "8", maxbytes = "8M", stepfactor = "2", chunk = "128K";
  int channels = 1, iters = 20, warmup = 5, check = 1, root = 0, gpus_per_node = 0;
  int rank = -1, size = -1, slots = 8;
  std::string job, medium = "auto", fabric;
  bool json = false, copy = false, stats = false;
  double timeout_s = 60;
  double spin_us = 50;
  int rc_timeout = 16;
  std::string recovery = "sr";
};

[[noreturn]] void bad(const std::string& what) {
  std::fprintf(stderr, "weft coll-bench: %s\n", what.c_str());
  throw CLI::RuntimeError(2);
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}

std::size_t need_size(const std::string& flag, const std::string& s) {
  auto v = parse_size(s);
  if (!v) bad(flag + " must be a size such as 8, 64K, 8M or 8G, not \"" + s + "\"");
  return *v;
}

// --medium, with `auto` resolved as the file's header says.
coll::live::LiveMedium pick_medium(const CollBenchArgs& a) {
  using coll::live::LiveMedium;
  if (a.medium == "direct") {
    if (!a.fabric.empty()) bad("--fabric goes with --medium fabric or auto, not direct");
    return LiveMedium::kDirect;
  }
  const char* env = std::getenv("WEFT_FABRIC");
  const bool attached = env && *env;
  if (a.medium == "fabric") {
    if (a.fabric.empty() && !attached)
      bad("--medium fabric needs a fabric: run under `weft run`, or give --fabric F");
    return LiveMedium::kFabric;
  }
  if (a.medium != "auto") bad("--medium must be auto, direct or fabric");
  if (!a.fabric.empty()) return LiveMedium::kFabric;
  const char* dflt = std::getenv("WEFT_FABRIC_DEFAULT");
  return attached && !(dflt && std::strcmp(dflt, "1") == 0) ? LiveMedium::kFabric
                                                            : LiveMedium::kDirect;
}

void run(const CollBenchArgs& a) {
  coll::live::BenchOptions o;
  const auto kind = collsim::parse_kind(a.workload);
  if (!kind)
    bad("--workload must be allreduce, reducescatter, allgather, broadcast, reduce or alltoall");
  o.kind = *kind;
  const auto algo = collsim::parse_algo(a.algo);
  if (!algo) bad("--algo must be ring, ring2, ring2-pipe, tree, rhd, direct or auto");
  o.algo = *algo;
  const auto dt = collsim::parse_dtype(a.dtype);
  if (!dt) bad("--dtype must be a type such as float, half, bf16 or int32");
  o.dtype = *dt;
  const auto op = collsim::parse_op(a.op);
  if (!op) bad("--op must be sum, prod, min, max or avg");
  o.op = *op;
  if (a.channels < 1 || a.channels > 16) bad("--channels must be in 1..16");
  o.channels = a.channels;
  o.chunk_bytes = need_size("--chunk", a.chunk);
  if (o.chunk_bytes < 4096 || o.chunk_bytes > (std::size_t{4} << 20))
    bad("--chunk must be between 4K and 4M");
  o.min_bytes = need_size("-b", a.minbytes);
  o.max_bytes = need_size("-e", a.maxbytes);
  if (o.max_bytes < o.min_bytes) bad("-e must not be smaller than -b");
  char* end = nullptr;
  o.factor = std::strtod(a.stepfactor.c_str(), &end);
  if (a.stepfactor.empty() || *end != '\0' || !(o.factor > 1.0))
    bad("-f must be a number greater than 1");
  if (a.iters < 0 || a.warmup < 0) bad("-n and -w must not be negative");
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.check = a.check != 0;
  o.timeout_ns = static_cast<TimeNs>(a.timeout_s * 1e9);

  coll::live::LiveOptions lo;
  lo.rank = a.rank >= 0 ? a.rank : env_int("WEFT_RANK", 0);
  lo.size = a.size >= 0 ? a.size : env_int("WEFT_SIZE", 1);
  if (lo.size < 1 || lo.rank < 0 || lo.rank >= lo.size)
    bad("rank " + std::to_string(lo.rank) + " of " + std::to_string(lo.size) +
        ": run it under `weft run -n N` or give --rank and --size");
  if (a.root < 0 || a.root >= lo.size) bad("--root must be a rank");
  o.root = a.root;
  if (a.gpus_per_node < 0 || (a.gpus_per_node > 0 && lo.size % a.gpus_per_node != 0))
    bad("--gpus-per-node must divide the number of ranks");
  o.ranks_per_node = a.gpus_per_node;
  lo.medium = pick_medium(a);
  lo.fabric = a.fabric;
  lo.job = a.job;
  if (lo.job.empty())
    if (const char* j = std::getenv("WEFT_JOB"); j && *j) lo.job = j;
  if (lo.job.empty() && !a.fabric.empty()) lo.job = a.fabric;
  if (lo.job.empty())
    if (const char* f = std::getenv("WEFT_FABRIC"); f && *f) lo.job = f;  // weft run's
  if (lo.job.empty()) lo.job = "coll-bench";
  // ring2-pipe uses two lanes per channel.
  lo.lanes = 2 * o.channels;
  lo.slot_bytes = static_cast<std::uint32_t>(o.chunk_bytes / 8 * 8);
  if (a.slots < 1 || a.slots > 64) bad("--slots must be in 1..64");
  lo.slots = static_cast<std::uint32_t>(a.slots);
  lo.zero_copy = !a.copy;
  if (!(a.spin_us >= 0) || a.spin_us > 1e6) bad("--spin-us must be in 0..1000000");
  lo.driver.spin_ns = static_cast<TimeNs>(a.spin_us * 1e3);
  if (a.rc_timeout < 1 || a.rc_timeout > 31) bad("--rc-timeout must be in 1..31");
  lo.rc_timeout = static_cast<std::uint8_t>(a.rc_timeout);
  if (a.recovery != "gbn" && a.recovery != "sr") bad("--recovery must be gbn or sr");
  lo.recovery = a.recovery == "sr" ? RecoveryMode::kSelectiveRepeat : RecoveryMode::kGoBackN;
  auto mesh = coll::live::LiveMesh::create(lo);
  if (!mesh) {
    std::fprintf(stderr, "weft coll-bench: rank %d: %s\n", lo.rank, mesh.error().c_str());
    throw CLI::RuntimeError(1);
  }
  coll::live::LiveMesh& m = **mesh;
  const bool printer = lo.rank == 0;
  if (printer && !a.json) coll::live::print_bench_header(stdout, m, o);
  nlohmann::json rows = nlohmann::json::array();
  std::uint64_t wrong = 0;
  const auto err = coll::live::run_bench(m, o, [&](const coll::live::BenchRow& r) {
    if (r.wrong) wrong += *r.wrong;
    if (!printer) return;
    if (!a.json) {
      coll::live::print_bench_row(stdout, o, r);
      if (a.stats)
        std::printf(
            "#   per collective and rank: %.0f us CPU, %.0f us runnable waiting for a CPU\n",
            r.cpu_us, r.runq_us);
      return;
    }
    nlohmann::json row{{"size", r.bytes},
                       {"count", r.count},
                       {"type", std::string(coll::to_string(o.dtype))},
                       {"redop", std::string(coll::to_string(o.op))},
                       {"algo", std::string(coll::to_string(r.algo))},
                       {"time_us", r.time_us},
                       {"algbw", r.algbw},
                       {"busbw", r.busbw},
                       {"cpu_us", r.cpu_us},
                       {"runq_us", r.runq_us}};
    row["wrong"] = r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr);
    rows.push_back(row);
  });
  if (a.stats) {  // also after a failure: the counters say what went wrong
    const DeviceCounters c = m.counters();
    std::fprintf(
        stderr,
        "# rank %d: %llu packets out, %llu in, %llu ACKs, %llu retransmitted, %llu "
        "timeouts, %llu RNR waits, %llu out of sequence, %llu duplicates\n",
        lo.rank, static_cast<unsigned long long>(c.tx_packets),
        static_cast<unsigned long long>(c.rx_packets), static_cast<unsigned long long>(c.acks_tx),
        static_cast<unsigned long long>(c.retransmit_packets),
        static_cast<unsigned long long>(c.timeouts), static_cast<unsigned long long>(c.rnr_waits),
        static_cast<unsigned long long>(c.rx_dropped_ooo),
        static_cast<unsigned long long>(c.dup_requests));
    const io::DriverCounters& d = m.driver().counters();
    std::fprintf(stderr,
                 "# rank %d: driver %llu passes, %llu sleeps (woken: %llu by packets, %llu by "
                 "timers, %llu by kicks)\n",
                 lo.rank, static_cast<unsigned long long>(d.passes),
                 static_cast<unsigned long long>(d.sleeps),
                 static_cast<unsigned long long>(d.wakeups_rx),
                 static_cast<unsigned long long>(d.wakeups_timer),
                 static_cast<unsigned long long>(d.wakeups_kick));
  }
  if (err) {
    std::fprintf(stderr, "weft coll-bench: %s\n", err->c_str());
    throw CLI::RuntimeError(1);
  }
  // Everyone finished every collective: nobody waits for an ACK from a rank that leaves.
  const bool parted = m.barrier(o.timeout_ns);
  if (printer && a.json) {
    nlohmann::json out{{"workload", a.workload},
                       {"ranks", lo.size},
                       {"ranks_per_node", o.ranks_per_node > 0 ? o.ranks_per_node : lo.size},
                       {"medium", std::string(coll::live::to_string(m.medium()))},
                       {"via", m.describe()},
                       {"zero_copy", m.zero_copy()},
                       {"channels", o.channels},
                       {"chunk", o.chunk_bytes},
                       {"iters", o.iters},
                       {"rows", rows}};
    std::printf("%s\n", out.dump().c_str());
  }
  if (wrong > 0) {
    if (printer)
      std::fprintf(stderr, "weft coll-bench: %llu wrong element(s)\n",
                   static_cast<unsigned long long>(wrong));
    throw CLI::RuntimeError(1);
  }
  if (!parted) throw CLI::RuntimeError(1);
}

}  // namespace

void add_coll_bench(CLI::App& app) {
  auto a = std::make_shared<CollBenchArgs>();
  auto* c = app.add_subcommand(
      "coll-bench",
      "live collectives between processes (one rank each; launch with `weft run -n N --`)");
  c->add_option("--workload", a->workload,
                "allreduce|reducescatter|allgather|broadcast|reduce|alltoall")
      ->capture_default_str();
  c->add_option("--algo", a->algo, "ring|ring2|ring2-pipe|tree|rhd|direct|auto")
      ->capture_default_str();
  c->add_option("--channels", a->channels, "Parallel rings")->capture_default_str();
  c->add_option("-b,--minbytes", a->minbytes, "Smallest size")->capture_default_str();
  c->add_option("-e,--maxbytes", a->maxbytes, "Largest size")->capture_default_str();
  c->add_option("-f,--stepfactor", a->stepfactor, "Size multiplication factor")
      ->capture_default_str();
  c->add_option("-d,--dtype", a->dtype, "float|half|bfloat16|double|int32|int64|uint8")
      ->capture_default_str();
  c->add_option("-o,--op", a->op, "sum|prod|min|max|avg")->capture_default_str();
  c->add_option("--chunk", a->chunk, "Pipelining chunk and inbox slot size")->capture_default_str();
  c->add_option("--slots", a->slots, "Inbox slots (credits) per connection")->capture_default_str();
  c->add_option("-n,--iters", a->iters, "Timed iterations per size")->capture_default_str();
  c->add_option("-w,--warmup", a->warmup, "Untimed iterations per size")->capture_default_str();
  c->add_option("-c,--check", a->check, "Check every element of one more iteration (0/1)")
      ->capture_default_str();
  c->add_option("-r,--root", a->root, "Root of broadcast and reduce")->capture_default_str();
  c->add_option("--gpus-per-node", a->gpus_per_node,
                "Ranks per emulated node, for ring2/ring2-pipe/auto (0: all on one)")
      ->capture_default_str();
  c->add_option("--rank", a->rank, "This rank (default WEFT_RANK)");
  c->add_option("--size", a->size, "Ranks (default WEFT_SIZE)");
  c->add_option("--job", a->job, "Rendezvous name (default WEFT_JOB, or weft run's WEFT_FABRIC)");
  c->add_option("--medium", a->medium,
                "direct (shared-memory links) | fabric (each rank on an HCA of the fabric "
                "daemon) | auto (fabric when one was chosen: --fabric, weft run --fabric/"
                "--topology, WEFT_FABRIC by hand; direct under a plain weft run)")
      ->capture_default_str();
  c->add_option("--fabric", a->fabric, "Attach to this fabric daemon (default WEFT_FABRIC)");
  c->add_option("--timeout", a->timeout_s, "Seconds a size may take before the run fails")
      ->capture_default_str();
  c->add_option("--spin-us", a->spin_us,
                "Microseconds the driver polls after the last work before it sleeps")
      ->capture_default_str();
  c->add_option("--rc-timeout", a->rc_timeout,
                "RC ACK timeout exponent: 4.096 us x 2^T per try, 7 tries")
      ->capture_default_str();
  c->add_option("--recovery", a->recovery,
                "Through a fabric: RC loss recovery, sr (selective repeat, Weft's extension) or "
                "gbn (go-back-N, the IBA's; direct links always use it)")
      ->capture_default_str();
  c->add_flag("--copy", a->copy, "Copy payloads through the rings (no cross-memory attach)");
  c->add_flag("--json", a->json, "One JSON object instead of the table");
  c->add_flag("--stats", a->stats, "Each rank prints its links' transport counters (stderr)");
  c->callback([a] { run(*a); });
}

}  // namespace weft::cli
