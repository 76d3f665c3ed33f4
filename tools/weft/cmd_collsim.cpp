// tools/weft/cmd_collsim.cpp — see cmd_collsim.hpp.
#include "tools/weft/cmd_collsim.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "emu/collsim/collsim.hpp"
#include "emu/collsim/train.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/topo/spec.hpp"

namespace weft::cli {

namespace {

[[noreturn]] void bad_input(const std::string& what) {
  std::fprintf(stderr, "weft sim: %s\n", what.c_str());
  throw CLI::RuntimeError(2);
}

// "8", "64K", "8M", "8G" (binary multiples, as nccl-tests).
std::optional<std::size_t> parse_bytes(const std::string& s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  std::string rest(end);
  std::size_t mul = 1;
  if (rest == "K" || rest == "k") {
    mul = std::size_t{1} << 10;
  } else if (rest == "M" || rest == "m") {
    mul = std::size_t{1} << 20;
  } else if (rest == "G" || rest == "g") {
    mul = std::size_t{1} << 30;
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(v) * mul;
}

}  // namespace

std::optional<std::size_t> parse_size(const std::string& s) {
  return parse_bytes(s);
}

namespace {

std::size_t need_bytes(const std::string& flag, const std::string& s) {
  auto v = parse_bytes(s);
  if (!v) bad_input(flag + " must be a size such as 8, 64K, 8M or 8G, not \"" + s + "\"");
  return *v;
}

// "auto" or a non-negative number.
std::optional<double> parse_auto(const std::string& flag, const std::string& s) {
  if (s == "auto") return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= 0))
    bad_input(flag + " must be auto or a number, not \"" + s + "\"");
  return v;
}

collsim::ClusterConfig cluster_of(std::string spec) {
  // The spines do not matter to the collective model (rails and spines are non-blocking), so
  // rail:nodes=N,gpus=G is accepted without them (emu/topo's parser requires spines=).
  if (spec.starts_with("rail:") && spec.find("spines=") == std::string::npos) spec += ",spines=2";
  auto t = topo::from_spec(spec);
  if (!t) bad_input("--topology: " + t.error().message);
  collsim::ClusterConfig c;
  const auto& doms = t->nvlink_domains();
  std::size_t hcas = 0;
  for (const auto& n : t->nodes()) hcas += n.is_switch() ? 0 : 1;
  if (doms.empty()) {
    c.nodes = static_cast<int>(hcas);
    c.gpus = 1;
  } else {
    c.nodes = static_cast<int>(doms.size());
    c.gpus = static_cast<int>(doms.front().hcas.size());
    for (const auto& d : doms)
      if (d.hcas.size() != doms.front().hcas.size())
        bad_input("--topology: NVLink domains of different sizes are not supported");
  }
  if (c.nodes * c.gpus < 1) bad_input("--topology has no HCAs");
  c.topology = spec;
  for (const auto& l : t->links()) {
    if (!t->node(l.a.node).is_switch() || !t->node(l.b.node).is_switch()) {
      c.nic_Bps = static_cast<double>(l.rate_mbps()) * 1e6 / 8;
      break;
    }
  }
  return c;
}

void print_fabric(const collsim::FabricInfo& f, std::FILE* out) {
  std::fprintf(
      out,
      "#   fabric: %llu packets, %llu events, %llu QPs, %llu discarded; SM: bring-up %llu "
      "MADs in %.2f ms virtual, %u re-route(s)\n",
      static_cast<unsigned long long>(f.packets), static_cast<unsigned long long>(f.events),
      static_cast<unsigned long long>(f.qps), static_cast<unsigned long long>(f.discards),
      static_cast<unsigned long long>(f.sm_mads), f.sm_bringup_virtual_s * 1e3, f.reroutes);
  for (const auto& e : f.log)
    std::fprintf(out, "#   fault log %10.3f us  %s\n", static_cast<double>(e.at_ns) / 1e3,
                 e.what.c_str());
}

}  // namespace

bool is_coll_workload(const std::string& workload) {
  return collsim::parse_kind(workload).has_value() || workload.starts_with("train:");
}

void add_collsim_options(CLI::App* cmd, CollSimArgs& a) {
  auto* g = "Collectives (--workload allreduce|reducescatter|allgather|broadcast|reduce|alltoall)";
  cmd->add_option("--algo", a.algo, "ring|ring2|ring2-pipe|tree|rhd|direct|auto")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--channels", a.channels, "Parallel rings (ring, ring2)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("-b,--minbytes", a.minbytes, "Smallest size")->group(g)->capture_default_str();
  cmd->add_option("-e,--maxbytes", a.maxbytes, "Largest size")->group(g)->capture_default_str();
  cmd->add_option("-f,--stepfactor", a.stepfactor, "Size multiplication factor")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype,
                  "float|half|bfloat16|double|int32|int64|uint8 (or f32 bf16 ...)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--op", a.op, "sum|prod|min|max|avg")->group(g)->capture_default_str();
  cmd->add_option("--chunk", a.chunk, "Pipelining chunk and inbox slot size")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--slots", a.slots, "Inbox slots (credits) per connection")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--nvl-bw", a.nvl_gbps, "NVLink GB/s per GPU each way")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--nvl-latency", a.nvl_latency_us, "NVLink latency, us")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--nic-latency", a.nic_latency_us,
                  "NIC to NIC latency over a rail, us (auto: the packet-level fabric's)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--nic-bw", a.nic_gbps,
                  "NIC GB/s each way (auto: the fabric's payload goodput at 4 KiB MTU)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--fabric", a.fabric,
                  "coarse: whole-message NIC model (timing only: on the plans directly); "
                  "with a topology, also the switch links of the SM's routes; coarse-free: "
                  "the plans with non-blocking switches; coarse-comm: the NIC model under a "
                  "Communicator per rank (non-blocking switches); packet: "
                  "emu/fabric HCAs, switches and SM (with --fault/--event)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--timeout", a.timeout, "A collective fails after this virtual time (0: none)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--reduce-rate", a.reduce_gbps, "Reduction GB/s per GPU (0 = free)")
      ->group(g)
      ->capture_default_str();
  cmd->add_option("--verify-limit", a.verify_limit,
                  "Carry and check payload while ranks x buffer bytes stay under this")
      ->group(g)
      ->capture_default_str();
}

namespace {

// `--workload train:FILE`: one training step (emu/collsim/train.hpp).
void run_train_step(const std::string& file, const collsim::ClusterConfig& c,
                    const collsim::RunConfig& run, const std::string& topology, bool json) {
  std::ifstream in(file);
  if (!in) bad_input("--workload train: cannot read \"" + file + "\"");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string error;
  const auto m = collsim::parse_train_model(ss.str(), file, error);
  if (!m) bad_input(error);
  if (run.packet) bad_input("--workload train runs on the coarse model (no --fabric packet)");
  const auto o = collsim::run_train(c, run, *m);
  if (!o.report) bad_input("--workload train: " + o.error);
  const auto& r = *o.report;
  const auto ms = [](double s) { return s * 1e3; };
  if (json) {
    nlohmann::json b = nlohmann::json::array();
    for (const auto& k : r.buckets)
      b.push_back({{"bytes", k.bytes},
                   {"ready_ms", ms(k.ready_s)},
                   {"start_ms", ms(k.start_s)},
                   {"end_ms", ms(k.end_s)}});
    nlohmann::json out{{"workload", "train"},
                       {"model", m->name},
                       {"topology", topology},
                       {"nodes", c.nodes},
                       {"gpus_per_node", c.gpus},
                       {"dp", m->dp},
                       {"tp", m->tp},
                       {"pp", m->pp},
                       {"microbatches", m->microbatches},
                       {"step_ms", ms(r.step_s)},
                       {"compute_ms", ms(r.compute_s)},
                       {"forward_ms", ms(r.forward_s)},
                       {"backward_ms", ms(r.backward_s)},
                       {"bubble_ms", ms(r.bubble_s)},
                       {"tp_comm_ms", ms(r.tp_comm_s)},
                       {"pp_comm_ms", ms(r.pp_comm_s)},
                       {"dp_comm_ms", ms(r.dp_comm_s)},
                       {"dp_exposed_ms", ms(r.dp_exposed_s)},
                       {"comm_ms", ms(r.comm_s)},
                       {"exposed_comm_ms", ms(r.exposed_comm_s)},
                       {"dp_algo", std::string(coll::to_string(r.dp_algo))},
                       {"buckets", b}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("# train %s on %s: %d nodes x %d GPUs = dp %d x tp %d x pp %d, %d microbatch(es)\n",
              m->name.c_str(), topology.c_str(), c.nodes, c.gpus, m->dp, m->tp, m->pp,
              m->microbatches);
  std::printf("  step time               %10.3f ms\n", ms(r.step_s));
  std::printf("  compute                 %10.3f ms  (forward %.3f, backward %.3f)\n",
              ms(r.compute_s), ms(r.forward_s), ms(r.backward_s));
  std::printf("  pipeline bubble         %10.3f ms\n", ms(r.bubble_s));
  std::printf("  tensor-parallel comm    %10.3f ms  (%d collectives of %zu B in NVLink, exposed)\n",
              ms(r.tp_comm_s), r.tp_collectives, r.tp_bytes);
  std::printf("  pipeline comm           %10.3f ms  (exposed)\n", ms(r.pp_comm_s));
  std::printf(
      "  data-parallel comm      %10.3f ms  (%zu buckets, all-reduce on %d nodes x %d GPUs, %s)\n",
      ms(r.dp_comm_s), r.buckets.size(), r.dp_nodes, r.dp_gpus,
      std::string(coll::to_string(r.dp_algo)).c_str());
  std::printf("  data-parallel exposed   %10.3f ms  (after the backward pass)\n",
              ms(r.dp_exposed_s));
  std::printf("  communication           %10.3f ms\n", ms(r.comm_s));
  std::printf("  exposed communication   %10.3f ms  (%.1f %% of the step)\n", ms(r.exposed_comm_s),
              r.step_s > 0 ? 100 * r.exposed_comm_s / r.step_s : 0.0);
}

}  // namespace

void run_collsim(const CollSimArgs& a, const std::string& topology, const std::string& workload,
                 bool json, bool timing_only, const CollSimFaults& faults) {
  collsim::RunConfig run;
  run.kind = collsim::parse_kind(workload).value_or(coll::CollKind::kAllReduce);
  const auto algo = collsim::parse_algo(a.algo);
  if (!algo)
    bad_input("--algo must be ring, ring2, ring2-pipe, tree, rhd, direct or auto, not \"" + a.algo +
              "\"");
  run.algo = *algo;
  const auto dt = collsim::parse_dtype(a.dtype);
  if (!dt)
    bad_input("--dtype must be a type such as float, half, bf16 or int32, not \"" + a.dtype + "\"");
  run.dtype = *dt;
  const auto op = collsim::parse_op(a.op);
  if (!op) bad_input("--op must be sum, prod, min, max or avg, not \"" + a.op + "\"");
  run.op = *op;
  if (a.channels < 1 || a.channels > 64) bad_input("--channels must be in 1..64");
  run.channels = a.channels;
  run.chunk_bytes = need_bytes("--chunk", a.chunk);
  if (run.chunk_bytes < 4096 || run.chunk_bytes > (std::size_t{16} << 20))
    bad_input("--chunk must be between 4K and 16M");
  if (a.slots < 1 || a.slots > 1024) bad_input("--slots must be in 1..1024");
  run.slots = static_cast<std::uint32_t>(a.slots);
  const std::size_t lo = need_bytes("-b", a.minbytes), hi = need_bytes("-e", a.maxbytes);
  if (hi < lo) bad_input("-e must not be smaller than -b");
  char* end = nullptr;
  const double factor = std::strtod(a.stepfactor.c_str(), &end);
  if (a.stepfactor.empty() || *end != '\0' || !(factor > 1.0) || factor > 1e6)
    bad_input("-f must be a number greater than 1, not \"" + a.stepfactor + "\"");
  if (!(a.nvl_gbps > 0) || !(a.nvl_latency_us >= 0) || !(a.reduce_gbps >= 0))
    bad_input("--nvl-bw must be positive; latencies and --reduce-rate must not be negative");
  if (a.fabric != "coarse" && a.fabric != "coarse-comm" && a.fabric != "coarse-free" &&
      a.fabric != "packet")
    bad_input("--fabric must be coarse, coarse-comm, coarse-free or packet, not \"" + a.fabric +
              "\"");
  run.packet = a.fabric == "packet";
  run.plan_engine = a.fabric == "coarse" || a.fabric == "coarse-free";
  run.switch_links = a.fabric == "coarse";
  const auto timeout = faults::parse_time(a.timeout);
  if (!timeout) bad_input("--timeout must be a time such as 10ms, not \"" + a.timeout + "\"");
  run.timeout_ns = *timeout;
  run.seed = faults.seed;
  const std::size_t verify_limit = need_bytes("--verify-limit", a.verify_limit);

  collsim::ClusterConfig c = cluster_of(topology);
  c.routing = faults.routing;
  c.lmc = faults.lmc;
  c.nvl_Bps = a.nvl_gbps * 1e9;
  c.nvl_latency_s = a.nvl_latency_us * 1e-6;
  const auto cal = collsim::calibrate_nic(c.topology);
  if (auto v = parse_auto("--nic-latency", a.nic_latency_us)) {
    c.nic_latency_s = *v * 1e-6;
  } else if (cal) {
    c.nic_latency_s = cal->nic_latency_s;
  }
  if (auto v = parse_auto("--nic-bw", a.nic_gbps)) {
    if (!(*v > 0)) bad_input("--nic-bw must be positive");
    c.nic_Bps = *v * 1e9;
  } else if (cal) {
    c.nic_Bps = cal->nic_Bps;
  }
  const bool has_faults =
      !faults.faults_file.empty() || !faults.fault_flags.empty() || !faults.event_flags.empty();
  if (has_faults && !run.packet) bad_input("--fault, --event and --faults need --fabric packet");
  if (has_faults) {
    auto t = topo::from_spec(c.topology);
    if (!t) bad_input("--topology: " + t.error().message);
    if (!faults.faults_file.empty()) {
      auto sc = faults::load_scenario(*t, faults.faults_file);
      if (!sc) bad_input(sc.error().message);
      run.faults = *sc;
    }
    for (std::size_t i = 0; i < faults.fault_flags.size(); ++i) {
      auto f = faults::parse_fault_flag(*t, faults.fault_flags[i], static_cast<int>(i + 1));
      if (!f) bad_input(f.error().message);
      run.faults.ports.push_back(*f);
    }
    for (std::size_t i = 0; i < faults.event_flags.size(); ++i) {
      auto e = faults::parse_event_flag(*t, faults.event_flags[i], static_cast<int>(i + 1));
      if (!e) bad_input(e.error().message);
      run.faults.events.push_back(*e);
    }
  }
  c.reduce_Bps = a.reduce_gbps * 1e9;
  const int n = c.nodes * c.gpus;
  if (workload.starts_with("train:")) {
    run_train_step(workload.substr(6), c, run, topology, json);
    return;
  }

  nlohmann::json rows = nlohmann::json::array();
  std::string caveat_shown;  // a caveat is printed once, under the first row it concerns
  if (!json) {
    std::printf(
        "# %s on %s: %d nodes x %d GPUs, NVLink %.0f GB/s, NIC %.1f GB/s, algo %s, "
        "channels %d, chunk %zu, %s fabric, routing %s\n",
        workload.c_str(), topology.c_str(), c.nodes, c.gpus, c.nvl_Bps / 1e9, c.nic_Bps / 1e9,
        a.algo.c_str(), run.channels, run.chunk_bytes, run.packet ? "packet-level" : "coarse",
        routing::to_string(c.routing.engine));
    std::printf("#%11s %12s %9s %6s %10s %9s %9s %7s  %10s %7s %-10s\n", "size", "count", "type",
                "redop", "time", "algbw", "busbw", "#wrong", "model", "meas/", "algo");
    std::printf("#%11s %12s %9s %6s %10s %9s %9s %7s  %10s %7s %-10s\n", "(B)", "(elements)", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "busbw", "model", "");
  }
  for (double s = static_cast<double>(lo);; s = s > 0 ? s * factor : 1) {
    const auto bytes = static_cast<std::size_t>(s);
    run.verify =
        !timing_only && static_cast<double>(bytes) * 2.0 * n <= static_cast<double>(verify_limit);
    const auto o = collsim::run_collective(c, run, bytes);
    if (!o.result) {
      if (o.fabric) print_fabric(*o.fabric, stderr);
      if (o.failed_rank >= 0) {
        std::fprintf(stderr, "weft sim: %s\n", o.error.c_str());
        throw CLI::RuntimeError(1);
      }
      bad_input(o.error);
    }
    const auto& r = *o.result;
    const std::string type(coll::to_string(run.dtype)), redop(coll::to_string(run.op));
    std::string algo_name(coll::to_string(r.algo));
    if (json) {
      nlohmann::json row{{"size", r.bytes},        {"count", r.count},
                         {"type", type},           {"redop", redop},
                         {"algo", algo_name},      {"time_us", r.time_s * 1e6},
                         {"algbw", r.algbw / 1e9}, {"busbw", r.busbw / 1e9}};
      row["wrong"] = r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr);
      row["model_busbw"] =
          r.model_busbw ? nlohmann::json(*r.model_busbw / 1e9) : nlohmann::json(nullptr);
      row["channels"] = r.channels;
      row["messages"] = r.messages;
      row["wall_s"] = r.wall_s;
      row["cpu_s"] = r.cpu_s;
      row["switch_flows_max"] = r.max_flows_per_switch_port;
      row["coarse_caveat"] =
          r.coarse_caveat.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.coarse_caveat);
      if (r.fabric) {
        nlohmann::json log = nlohmann::json::array();
        for (const auto& e : r.fabric->log)
          log.push_back({{"at_us", static_cast<double>(e.at_ns) / 1e3}, {"what", e.what}});
        row["fabric"] = {{"events", r.fabric->events},
                         {"packets", r.fabric->packets},
                         {"qps", r.fabric->qps},
                         {"discards", r.fabric->discards},
                         {"reroutes", r.fabric->reroutes},
                         {"sm_mads", r.fabric->sm_mads},
                         {"log", log}};
      }
      rows.push_back(row);
    } else {
      const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
      if (r.channels > 1) algo_name += " x" + std::to_string(r.channels);  // channels
      char model[32] = "-", ratio[32] = "-";
      if (r.model_busbw) {
        std::snprintf(model, sizeof model, "%.2f", *r.model_busbw / 1e9);
        std::snprintf(ratio, sizeof ratio, "%.2f", r.busbw / *r.model_busbw);
      }
      std::printf(" %11zu %12zu %9s %6s %10.2f %9.2f %9.2f %7s  %10s %7s %-10s\n", r.bytes, r.count,
                  type.c_str(), redop.c_str(), r.time_s * 1e6, r.algbw / 1e9, r.busbw / 1e9,
                  wrong.c_str(), model, ratio, algo_name.c_str());
      if (r.fabric) print_fabric(*r.fabric, stdout);
      if (!r.coarse_caveat.empty() && r.coarse_caveat != caveat_shown) {
        std::printf("#   warning: %s\n", r.coarse_caveat.c_str());
        caveat_shown = r.coarse_caveat;
      }
      std::fflush(stdout);
    }
    if (s * factor > static_cast<double>(hi) * (1 + 1e-9)) break;
  }
  if (json) {
    nlohmann::json out{{"workload", workload},
                       {"topology", topology},
                       {"nodes", c.nodes},
                       {"gpus_per_node", c.gpus},
                       {"ranks", n},
                       {"nvl_GBps", c.nvl_Bps / 1e9},
                       {"nic_GBps", c.nic_Bps / 1e9},
                       {"channels", run.channels},
                       {"fabric", a.fabric},
                       {"routing", routing::to_string(c.routing.engine)},
                       {"lmc", c.lmc},
                       {"rows", rows}};
    std::printf("%s\n", out.dump().c_str());
  }
}

}  // namespace weft::cli
