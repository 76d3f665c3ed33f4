// tests/faults/faults_test.cpp — emu/faults and emu/simrun: scenario parsing (errors with the
// line and the problem), every fault kind visible in its counter, replay determinism, and the
// `weft sim` command line (JSON output, exit 2 on bad input).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "emu/faults/scenario.hpp"
#include "emu/simrun/simrun.hpp"
#include "emu/topo/spec.hpp"

namespace weft {
namespace {

const topo::Topology& k4() {
  static const topo::Topology t = *topo::from_spec("fat-tree:k=4");
  return t;
}

std::string parse_error(const std::string& toml) {
  auto r = faults::parse_scenario(k4(), toml, "s.toml");
  return r ? std::string("(parsed)") : r.error().message;
}

TEST(Scenario, ParsesFaultsAndEvents) {
  auto r = faults::parse_scenario(k4(), R"(seed = 9
[[fault]]
link = "p00leaf00/p1"
drop = 0.01
ber = 1e-7
duplicate = 0.02
reorder = 0.05
reorder_max = "3us"
delay = "1us"
jitter = 200
[[event]]
at = "50us"
action = "flap"
link = "p00leaf00/p1"
period = "10us"
count = 3
[[event]]
at = "1ms"
action = "switch-down"
switch = "p00agg00"
[[event]]
at = 7
action = "sm-down"
)",
                                  "s.toml");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->seed, 9u);
  ASSERT_EQ(r->ports.size(), 1u);
  const fabric::PortFaults& f = r->ports[0].faults;
  EXPECT_EQ(f.drop, 0.01);
  EXPECT_EQ(f.ber, 1e-7);
  EXPECT_EQ(f.reorder_max_ns, 3000u);
  EXPECT_EQ(f.delay_ns, 1000u);
  EXPECT_EQ(f.jitter_ns, 200u);
  EXPECT_TRUE(r->ports[0].both_ends);
  ASSERT_EQ(r->events.size(), 3u);
  EXPECT_EQ(r->events[0].action, faults::Action::kFlap);
  EXPECT_EQ(r->events[0].at_ns, 50'000u);
  EXPECT_EQ(r->events[0].period_ns, 10'000u);
  EXPECT_EQ(r->events[0].count, 3u);
  EXPECT_EQ(r->events[1].at_ns, 1'000'000u);
  EXPECT_EQ(r->events[2].action, faults::Action::kSmDown);
}

TEST(Scenario, ErrorsNameTheLineAndTheProblem) {
  struct Case {
    const char* toml;
    const char* expect;
  };
  const Case cases[] = {
      {"[[fault]]\nlink = \"p00leaf00/p1\"\ndrop = 2\n", "s.toml:3: drop must be a probability"},
      {"[[fault]]\nlink = \"nosuch/p1\"\n", "s.toml:2: no node named \"nosuch\""},
      {"\n[[fault]]\nlink = \"p00leaf00/p9\"\n", "s.toml:3: \"p00leaf00\" has no port 9"},
      {"[[fault]]\nlink = \"p00leaf00\"\n", "s.toml:2: \"p00leaf00\" is not NODE/pPORT"},
      {"[[fault]]\nlink = \"p00leaf00/p1\"\nwobble = 1\n",
       "s.toml:3: unknown fault key \"wobble\""},
      {"[[fault]]\ndrop = 0.1\n", "s.toml:1: a fault needs exactly one of link= or port="},
      {"[[fault]]\nlink = \"p00leaf00/p1\"\nreorder = 0.1\n",
       "s.toml:1: reorder needs reorder_max"},
      {"[[event]]\naction = \"link-down\"\nlink = \"p00leaf00/p1\"\n",
       "s.toml:1: an event needs at="},
      {"[[event]]\nat = \"5us\"\naction = \"explode\"\n", "s.toml:3: unknown action \"explode\""},
      {"[[event]]\nat = \"5parsecs\"\naction = \"sm-up\"\n", "s.toml:2: at must be a time"},
      {"[[event]]\nat = \"5us\"\naction = \"switch-down\"\nswitch = \"hca00000\"\n",
       "s.toml:4: \"hca00000\" is not a switch"},
      {"[[event]]\nat = \"5us\"\naction = \"flap\"\nlink = \"p00leaf00/p1\"\n",
       "s.toml:1: flap needs period="},
      {"[[event]]\nat = \"5us\"\naction = \"sm-up\"\nlink = \"p00leaf00/p1\"\n",
       "s.toml:4: key \"link\" does not apply to sm-up"},
      {"seed = 1\n[[fault]\n", "s.toml:2: "},
      {"colour = 1\n", "s.toml:1: unknown key \"colour\""},
  };
  for (const Case& c : cases) {
    const std::string err = parse_error(c.toml);
    EXPECT_EQ(err.rfind(c.expect, 0), 0u) << "scenario:\n" << c.toml << "gave: " << err;
  }
}

TEST(Scenario, FlagsAndTimes) {
  auto f = faults::parse_fault_flag(k4(), "port=hca00000/p1,drop=0.5,delay=2us", 1);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_FALSE(f->both_ends);
  EXPECT_EQ(f->faults.delay_ns, 2000u);
  auto bad = faults::parse_fault_flag(k4(), "link=p00leaf00/p1,drop", 3);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--fault #3: \"drop\" is not key=value");
  auto e = faults::parse_event_flag(k4(), "at=1ms,action=link-up,link=nowhere/p1", 2);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "--event #2: no node named \"nowhere\"");
  EXPECT_EQ(faults::parse_time("1.5us"), 1500u);
  EXPECT_EQ(faults::parse_time("2s"), 2'000'000'000u);
  EXPECT_EQ(faults::parse_time("7"), 7u);
  EXPECT_FALSE(faults::parse_time("us"));
  EXPECT_FALSE(faults::parse_time("3 weeks"));
}

simrun::SimReport run(const std::string& fault, const std::string& event = "",
                      std::uint64_t seed = 1,
                      const std::string& workload = "pairs:flows=0:5,size=16K,mtu=1024") {
  simrun::SimOptions o;
  o.topology = "fat-tree:k=4";
  o.workload = workload;
  o.seed = seed;
  o.duration_ns = 40'000;
  if (!fault.empty()) o.scenario.ports.push_back(*faults::parse_fault_flag(k4(), fault, 1));
  if (!event.empty()) o.scenario.events.push_back(*faults::parse_event_flag(k4(), event, 1));
  auto r = simrun::run_sim(o);
  EXPECT_TRUE(r) << (r ? "" : r.error());
  return r ? *r : simrun::SimReport{};
}

TEST(Faults, EachKindShowsInItsCounter) {
  const simrun::SimReport clean = run("");
  EXPECT_TRUE(clean.sm.routes_valid);
  EXPECT_GT(clean.completed, 0u);
  EXPECT_EQ(clean.lost, 0u);
  EXPECT_EQ(clean.counters.fault_dropped + clean.counters.fault_duplicated +
                clean.counters.fault_delayed + clean.counters.fault_reordered,
            0u);

  const simrun::SimReport drop = run("link=hca00000/p1,drop=0.02");
  EXPECT_GT(drop.counters.fault_dropped, 0u);
  EXPECT_EQ(drop.counters.buffer_overflows, 0u);
  EXPECT_EQ(drop.lost, 0u);  // the transport repairs every loss
  EXPECT_EQ(drop.in_flight, 0u);

  const simrun::SimReport dup = run("link=hca00000/p1,duplicate=0.05");
  EXPECT_GT(dup.counters.fault_duplicated, 0u);
  EXPECT_EQ(dup.counters.buffer_overflows, 0u);
  EXPECT_EQ(dup.lost, 0u);

  const simrun::SimReport reo = run("link=hca00000/p1,reorder=0.05,reorder_max=2us");
  EXPECT_GT(reo.counters.fault_reordered, 0u);
  EXPECT_EQ(reo.lost, 0u);

  const simrun::SimReport delay = run("port=hca00005/p1,delay=5us,jitter=1us");
  EXPECT_GT(delay.counters.fault_delayed, 0u);
  EXPECT_GT(delay.lat_p50_ns, clean.lat_p50_ns + 4'000);

  const simrun::SimReport ber = run("link=hca00000/p1,ber=1e-6");
  EXPECT_GT(ber.counters.symbol_error_counter, 0u);
  EXPECT_GT(ber.counters.fec_corrected_blocks, 0u);
}

TEST(Faults, ScheduledEventsAreLogged) {
  const simrun::SimReport down = run("", "at=10us,action=link-down,link=p00leaf00/p3");
  EXPECT_GT(down.counters.link_downed_counter, 0u);
  ASSERT_GE(down.fault_log.size(), 1u);
  EXPECT_EQ(down.fault_log[0].what.rfind("link down: p00leaf00/p3", 0), 0u)
      << down.fault_log[0].what;
  bool rerouted = false;
  for (const auto& e : down.fault_log) rerouted |= e.what.rfind("SM re-routed", 0) == 0;
  EXPECT_TRUE(rerouted);
  EXPECT_EQ(down.lost, 0u);

  const simrun::SimReport sw = run("", "at=5us,action=switch-down,switch=p00agg00");
  ASSERT_GE(sw.fault_log.size(), 1u);
  EXPECT_EQ(sw.fault_log[0].what, "switch p00agg00 fails (4 links down)");

  const simrun::SimReport flap = run("", "at=5us,action=flap,link=p00leaf00/p3,period=4us,count=2");
  EXPECT_EQ(flap.counters.link_downed_counter, 4u);  // two cycles, both ends

  const simrun::SimReport sm = run("", "at=1us,action=sm-down");
  ASSERT_EQ(sm.fault_log.size(), 1u);
  EXPECT_EQ(sm.fault_log[0].what, "SM fails");
}

// A failed SM does not re-route around a failed link; once it recovers, it does.
TEST(Faults, FailedSmReroutesOnlyAfterRecovery) {
  auto sc = faults::parse_scenario(k4(), R"(seed = 4
[[event]]
at = "1us"
action = "sm-down"
[[event]]
at = "5us"
action = "link-down"
link = "p00leaf00/p3"
[[event]]
at = "30us"
action = "sm-up"
)",
                                   "sm.toml");
  ASSERT_TRUE(sc) << sc.error().message;
  simrun::SimOptions o;
  o.topology = "fat-tree:k=4";
  o.workload = "pairs:flows=0:5,size=16K,mtu=1024";
  o.seed = *sc->seed;
  o.duration_ns = 40'000;
  o.scenario = *sc;
  auto r = simrun::run_sim(o);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->fault_log.size(), 4u);
  EXPECT_EQ(r->fault_log[0].what, "SM fails");
  EXPECT_EQ(r->fault_log[2].what, "SM recovers");
  EXPECT_EQ(r->fault_log[3].what.rfind("SM re-routed", 0), 0u) << r->fault_log[3].what;
  EXPECT_GT(r->fault_log[3].at_ns, r->fault_log[2].at_ns);
  EXPECT_EQ(r->sm.reroutes, 1u);
}

// The SM runs over the fabric itself: a link on the flows' path fails under traffic, the
// switches' SMAs send trap 128 to the SM, it sweeps and re-programs the LFTs over the fabric,
// and every message completes (the default retry budget outlasts the re-route).
TEST(Faults, LinkFailureIsReroutedByTheFabricSm) {
  simrun::SimOptions o;
  o.topology = "fat-tree:k=4";
  o.workload = "pairs:flows=0:5+1:4,size=16K,mtu=1024";
  o.seed = 3;
  o.duration_ns = 200'000;
  o.scenario.events.push_back(
      *faults::parse_event_flag(k4(), "at=5us,action=link-down,link=p00leaf00/p3", 1));
  auto r = simrun::run_sim(o);
  ASSERT_TRUE(r) << r.error();
  ASSERT_TRUE(r->sm.routes_valid) << r->sm.error;
  ASSERT_EQ(r->fault_log.size(), 2u);
  EXPECT_EQ(r->fault_log[0].what.rfind("link down: p00leaf00/p3", 0), 0u) << r->fault_log[0].what;
  EXPECT_EQ(r->fault_log[1].what.rfind("SM re-routed", 0), 0u) << r->fault_log[1].what;
  EXPECT_NE(r->fault_log[1].what.find("routes valid"), std::string::npos) << r->fault_log[1].what;
  EXPECT_GT(r->fault_log[1].at_ns, r->fault_log[0].at_ns);
  EXPECT_EQ(r->sm.reroutes, 1u);
  EXPECT_GE(r->sm.traps, 1u) << "the re-route starts from trap 128, not a timed sweep";
  EXPECT_EQ(r->counters.link_downed_counter, 2u);
  EXPECT_GT(r->counters.port_xmit_discards, 0u) << "the failed link was on the flows' path";
  EXPECT_GT(r->posted, 0u);
  EXPECT_EQ(r->completed, r->posted);
  EXPECT_EQ(r->lost, 0u);
  EXPECT_EQ(r->in_flight, 0u);
  for (const simrun::FlowReport& f : r->flows) {
    EXPECT_EQ(f.completed, f.posted) << f.src_name << " -> " << f.dst_name;
    EXPECT_EQ(f.errors, 0u) << f.src_name << " -> " << f.dst_name << ": " << f.first_error;
  }
}

TEST(Faults, ReplayIsDeterministic) {
  const std::string f = "link=p00leaf00/p1,drop=0.01,duplicate=0.02,reorder=0.05,reorder_max=3us";
  const std::string ev = "at=20us,action=link-down,link=p00agg00/p3";
  const std::string wl = "permutation:size=8K";
  const simrun::SimReport a = run(f, ev, 7, wl), b = run(f, ev, 7, wl), c = run(f, ev, 8, wl);
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "seed 7";
  EXPECT_EQ(a.completed, b.completed);
  EXPECT_NE(a.trace_hash, c.trace_hash) << "seeds 7 and 8";
}

// The issue's determinism case: a 256-HCA fabric under a permutation with per-port faults and
// a link failure (re-routed by the SM) gives the same trace hash for the same seed.
TEST(Faults, ReplayIsDeterministicOn256Hcas) {
  const std::string spec = "leaf-spine:leaves=16,spines=8,hosts=16";
  const topo::Topology t = *topo::from_spec(spec);
  auto once = [&](std::uint64_t seed) {
    simrun::SimOptions o;
    o.topology = spec;
    o.workload = "permutation:size=8K";
    o.seed = seed;
    o.duration_ns = 10'000;
    o.scenario.ports.push_back(*faults::parse_fault_flag(
        t, "link=leaf000/p1,drop=0.01,duplicate=0.02,reorder=0.05,reorder_max=3us", 1));
    o.scenario.events.push_back(
        *faults::parse_event_flag(t, "at=5us,action=link-down,link=leaf003/p17", 1));
    auto r = simrun::run_sim(o);
    EXPECT_TRUE(r) << (r ? "" : r.error());
    return r ? *r : simrun::SimReport{};
  };
  const simrun::SimReport a = once(5), b = once(5), c = once(6);
  EXPECT_EQ(a.hcas, 256u);
  EXPECT_TRUE(a.sm.routes_valid);
  EXPECT_GT(a.counters.fault_dropped + a.counters.fault_duplicated, 0u) << "seed 5";
  EXPECT_EQ(a.counters.link_downed_counter, 2u);
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "seed 5";
  EXPECT_EQ(a.completed, b.completed) << "seed 5";
  EXPECT_NE(a.trace_hash, c.trace_hash) << "seeds 5 and 6";
  EXPECT_EQ(a.lost, 0u) << "seed 5";
}

TEST(Workload, SpecsAndErrors) {
  auto w = simrun::parse_workload("pairs:flows=0:5+2:3,op=read,size=4K,mtu=2048,depth=4");
  ASSERT_TRUE(w) << w.error();
  EXPECT_EQ(w->flows.size(), 2u);
  EXPECT_EQ(w->op, simrun::WorkloadSpec::Op::kRead);
  EXPECT_EQ(w->size_bytes, 4096u);
  EXPECT_EQ(w->mtu, Mtu::k2048);
  EXPECT_EQ(simrun::parse_workload("incast:4,size=1K")->incast_senders, 4u);
  EXPECT_EQ(simrun::parse_workload("ring").error(),
            "unknown workload \"ring\" (pairs, all-to-all, incast:N, permutation)");
  EXPECT_EQ(simrun::parse_workload("pairs:flows=3:3").error(),
            "flow \"3:3\" is not SRC:DST (two different HCA indices)");
  EXPECT_EQ(simrun::parse_workload("pairs:size=1K").error(),
            "pairs needs flows=SRC:DST[+SRC:DST...]");
  const simrun::SimReport send = run("", "", 1, "incast:3,op=send,size=2K");
  EXPECT_EQ(send.flows.size(), 3u);
  EXPECT_GT(send.completed, 0u);
  EXPECT_EQ(send.lost, 0u);
}

// The weft binary, from the environment meson sets.
std::string weft() {
  const char* p = std::getenv("WEFT_BIN");
  return p ? p : "weft";
}

int shell(const std::string& cmd, std::string& out) {
  out.clear();
  std::FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(WeftSim, JsonReport) {
  std::string out;
  ASSERT_EQ(shell(weft() + " sim --topology fat-tree:k=4 --workload pairs:flows=0:5,size=4K "
                           "--duration 20us --seed 3 --json --fault "
                           "link=p00leaf00/p1,drop=0.01",
                  out),
            0);
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["trace_hash"].get<std::string>().size(), 16u);
  EXPECT_TRUE(j["sm"]["routes_valid"].get<bool>());
  EXPECT_GT(j["sm"]["mads"].get<std::uint64_t>(), 0u);
  EXPECT_GT(j["sm"]["virtual_s"].get<double>(), 0.0);
  EXPECT_TRUE(j["sm"].contains("wall_s"));
  EXPECT_GT(j["messages"]["completed"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["messages"]["posted"], j["messages"]["completed"]);
  EXPECT_EQ(j["messages"]["lost"], 0);
  EXPECT_EQ(j["counters"]["buffer_drops"], 0);
  EXPECT_EQ(j["fault_log"].size(), 2u);  // both ends of the link
}

// The subnet manager's flags (tools/weft/sm_flags.hpp): the engine chosen routes differently,
// the report names the engine, the LMC and the SM's HCA, and the sweep periods are applied.
TEST(WeftSim, SubnetManagerFlags) {
  const std::string base = weft() +
                           " sim --topology fat-tree:k=4 --workload all-to-all:size=4K "
                           "--duration 20us --json ";
  std::string out;
  ASSERT_EQ(shell(base, out), 0);
  const auto minhop = nlohmann::json::parse(out);
  EXPECT_EQ(minhop["sm"]["engine"], "minhop");
  EXPECT_EQ(minhop["sm"]["lmc"], 0);
  EXPECT_EQ(minhop["sm"]["node"], "hca00000");
  EXPECT_EQ(minhop["sm"]["light_sweeps"], 0);  // the default period (10 s) is not reached
  ASSERT_EQ(shell(base + "--engine updn --lmc 1 --sm-node hca00005 --sm-sweep 5us", out), 0);
  const auto updn = nlohmann::json::parse(out);
  EXPECT_EQ(updn["sm"]["engine"], "updn");
  EXPECT_EQ(updn["sm"]["lmc"], 1);
  EXPECT_EQ(updn["sm"]["node"], "hca00005");
  EXPECT_TRUE(updn["sm"]["routes_valid"].get<bool>());
  EXPECT_GT(updn["sm"]["light_sweeps"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(updn["sm"]["heavy_sweeps"], 1);
  EXPECT_EQ(updn["messages"]["posted"], updn["messages"]["completed"]);
  // Other routes, so another trace.
  EXPECT_NE(updn["trace_hash"], minhop["trace_hash"]);
  // A forced heavy sweep (OpenSM's force_heavy_sweep) every 100 us of a 1 ms run: one at least
  // completes after the bring-up's (a heavy sweep re-reads every port, so it takes a while).
  ASSERT_EQ(shell(weft() + " sim --topology fat-tree:k=4 --workload pairs:flows=0:5,size=4K "
                           "--duration 1ms --json --sm-heavy-every 100us",
                  out),
            0);
  const auto forced = nlohmann::json::parse(out);
  EXPECT_GT(forced["sm"]["heavy_sweeps"].get<std::uint64_t>(), 1u);
  EXPECT_EQ(forced["sm"]["light_sweeps"], 0);
  EXPECT_EQ(forced["messages"]["lost"], 0);
  // dor needs a torus or mesh: the SM's error, exit 2.
  std::FILE* f = popen((base + "--engine dor 2>&1").c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string err;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) err += buf;
  EXPECT_EQ(WEXITSTATUS(pclose(f)), 2);
  EXPECT_NE(err.find("not a mesh or torus"), std::string::npos) << err;
}

// A topology from an ibnetdiscover/ibsim net file runs as its generator spec does.
TEST(WeftSim, NetFileTopology) {
  char dir[] = "/tmp/weft-simnet-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string net = std::string(dir) + "/ft.net";
  std::string out;
  ASSERT_EQ(shell(weft() + " topo fat-tree:k=4 --netfile " + net, out), 0);
  const std::string run = " --workload pairs:flows=0:5,size=4K --duration 20us --json";
  ASSERT_EQ(shell(weft() + " sim --topology " + net + run, out), 0);
  const auto j = nlohmann::json::parse(out);
  std::remove(net.c_str());
  rmdir(dir);
  EXPECT_EQ(j["topology"]["switches"], 20);
  EXPECT_EQ(j["topology"]["hcas"], 16);
  EXPECT_TRUE(j["sm"]["routes_valid"].get<bool>());
  EXPECT_GT(j["messages"]["completed"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["messages"]["posted"], j["messages"]["completed"]);
}

TEST(WeftSim, BadInputExitsTwo) {
  const char* bad[] = {
      "--topology fat-tree:k=3",
      "--workload ring",
      "--fault link=p00leaf00/p9,drop=0.1",
      "--event at=1us,action=explode",
      "--duration soon",
      "--faults /nonexistent/scenario.toml",
      "--workload pairs:flows=0:99",
      "--seed abc",
      "--bogus",
      "--engine bogus",
      "--lmc 8",
      "--root 0x1",
      "--engine updn --root 0x1",
      "--sm-sweep soon",
      "--sm-node nosuch",
      "--sm-node p00leaf00",
      "--topology /nonexistent/fabric.net",
      "--workload allreduce --sm-sweep 1s",
      "--workload allreduce --engine dor",
  };
  for (const char* args : bad) {
    std::string out;
    EXPECT_EQ(shell(weft() + " sim " + args, out), 2) << args;
  }
  std::string err;
  std::FILE* f = popen((weft() + " sim --fault link=nosuch/p1 2>&1").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) err += buf;
  pclose(f);
  EXPECT_EQ(err, "weft sim: --fault #1: no node named \"nosuch\"\n");
}

}  // namespace
}  // namespace weft
