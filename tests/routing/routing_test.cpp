// tests/routing/routing_test.cpp — every engine on every fabric shape it applies to, checked by
// the independent checker; exact hop counts; balance; credit loops; error cases.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include <string>
#include <vector>

#include "emu/routing/checker.hpp"
#include "emu/routing/routes.hpp"
#include "emu/routing/stats.hpp"
#include "emu/topo/generators.hpp"
#include "emu/topo/netfile.hpp"
#include "emu/topo/spec.hpp"

namespace weft::routing {
namespace {

Fabric fabric_of(const std::string& spec) {
  auto t = topo::from_spec(spec);
  EXPECT_TRUE(t.ok()) << spec << ": " << (t.ok() ? "" : t.error().message);
  return Fabric::from_topology(*t);
}

Routes must_route(const Fabric& f, const LidMap& lids, Engine e) {
  auto r = route(f, lids, {e, {}});
  EXPECT_TRUE(r.ok()) << to_string(e) << ": " << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

// Links from HCA port a to the HCA port owning dlid, following LFTs; -1 if not delivered.
int walk_hops(const Fabric& f, const Routes& r, NodeIdx a, int port, Lid dlid) {
  const FabricPort* fp = &f.nodes[a].ports[port];
  int hops = 1;
  for (int guard = 0; guard < 64; ++guard) {
    if (!f.nodes[fp->peer].is_switch) return hops;
    std::uint8_t out = r.out_port(r.switch_index[fp->peer], dlid);
    if (out == kDropPort || out == 0) return -1;
    fp = &f.nodes[fp->peer].ports[out];
    ++hops;
  }
  return -1;
}

struct Case {
  const char* spec;
  std::vector<Engine> engines;
};

const Case kCases[] = {
    {"fat-tree:k=4", {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}},
    {"fat-tree:k=8", {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}},
    {"fat-tree:levels=2,radix=36", {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}},
    {"leaf-spine:leaves=4,spines=2,hosts=8,links=2",
     {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}},
    {"rail:nodes=4,gpus=8,spines=2", {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}},
    {"mesh:dims=4x4", {Engine::kMinHop, Engine::kUpDn, Engine::kDor}},
    {"torus:dims=4x4x4", {Engine::kUpDn, Engine::kDor}},
    {"torus:dims=5x3,hosts=2", {Engine::kUpDn, Engine::kDor}},
    {"dragonfly:groups=5,routers=4,hosts=2,global=1", {Engine::kMinHop, Engine::kUpDn}},
};

bool promises_deadlock_freedom(Engine e) {
  return e != Engine::kMinHop;
}

TEST(Routing, EveryEngineOnEveryShapeIsValid) {
  for (const Case& c : kCases) {
    Fabric f = fabric_of(c.spec);
    auto lids = assign_lids(f);
    ASSERT_TRUE(lids.ok());
    for (Engine e : c.engines) {
      SCOPED_TRACE(std::string(c.spec) + " " + to_string(e));
      Routes r = must_route(f, *lids, e);
      CheckReport rep = check_routes(f, *lids, r);
      for (const auto& p : rep.problems)
        if (promises_deadlock_freedom(e) || p.find("credit loop") != 0) ADD_FAILURE() << p;
      EXPECT_GT(rep.hca_pairs, 0u);
      EXPECT_EQ(rep.unreachable_pairs, 0u);
      EXPECT_EQ(rep.loops, 0u);
      EXPECT_TRUE(rep.cdg_checked);
      if (promises_deadlock_freedom(e)) {
        EXPECT_FALSE(rep.credit_loop) << (rep.credit_cycle.empty() ? "" : rep.credit_cycle[0]);
      }
      // Switch LIDs answer on port 0 at their own switch.
      for (std::uint32_t s = 0; s < r.switches.size(); ++s)
        EXPECT_EQ(r.out_port(s, lids->lid_of(r.switches[s], 0)), 0);
    }
  }
}

// Hops are links from source HCA port to destination HCA port (checker.hpp's convention).
// k=4 fat tree: 2 HCAs per edge switch, 2 edge switches per pod: HCA 0-1 same edge switch,
// 0-2 same pod, 0-4 other pod.
TEST(Routing, FatTreeK4ExactHops) {
  Fabric f = fabric_of("fat-tree:k=4");
  auto lids = assign_lids(f);
  std::vector<NodeIdx> hca;
  for (NodeIdx n = 0; n < f.nodes.size(); ++n)
    if (!f.nodes[n].is_switch) hca.push_back(n);
  ASSERT_EQ(hca.size(), 16u);
  struct Want {
    int a, b, hops;
  };
  const Want kWant[] = {{0, 1, 2},  {0, 2, 4},   {0, 3, 4},  {0, 4, 6},
                        {5, 15, 6}, {14, 15, 2}, {12, 15, 4}};
  for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}) {
    Routes r = must_route(f, *lids, e);
    for (const Want& w : kWant)
      EXPECT_EQ(walk_hops(f, r, hca[w.a], 1, lids->lid_of(hca[w.b], 1)), w.hops)
          << to_string(e) << " hca" << w.a << " -> hca" << w.b;
    CheckReport rep = check_routes(f, *lids, r);
    EXPECT_EQ(rep.hops_max, 6);
  }
}

// ftree on full trees: each up link of a switch carries the same number of HCA LIDs, +-1.
TEST(Routing, FtreeBalancesUpLinks) {
  for (const char* spec :
       {"fat-tree:k=4", "fat-tree:k=8", "fat-tree:levels=2,radix=36", "fat-tree:levels=3,radix=12",
        "leaf-spine:leaves=6,spines=3,hosts=6,links=2"}) {
    SCOPED_TRACE(spec);
    Fabric f = fabric_of(spec);
    auto lids = assign_lids(f);
    Routes r = must_route(f, *lids, Engine::kFtree);
    RoutingStats st = routing_stats(f, *lids, r);
    EXPECT_GT(st.up_links.links, 0u);
    EXPECT_LE(st.up_spread_max, 1u);
    EXPECT_TRUE(check_routes(f, *lids, r).ok());
  }
}

TEST(Routing, FtreeRefusesNonTrees) {
  for (const char* spec :
       {"torus:dims=4x4", "mesh:dims=3x3", "dragonfly:groups=5,routers=4,hosts=2,global=1"}) {
    Fabric f = fabric_of(spec);
    auto lids = assign_lids(f);
    auto r = route(f, *lids, {Engine::kFtree, {}});
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.error().code, RoutingErrc::kNotFatTree);
    EXPECT_NE(r.error().message.find("not a fat tree"), std::string::npos) << r.error().message;
  }
}

TEST(Routing, DorRefusesNonGrids) {
  Fabric f = fabric_of("fat-tree:k=4");
  auto lids = assign_lids(f);
  auto r = route(f, *lids, {Engine::kDor, {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, RoutingErrc::kNotTorus);
}

TEST(Routing, UpdnRootsByGuid) {
  Fabric f = fabric_of("mesh:dims=4x4");
  auto lids = assign_lids(f);
  // A corner as the only root.
  std::uint64_t corner = 0;
  for (const auto& n : f.nodes)
    if (n.is_switch && n.name == "sw_0_0") corner = n.guid;
  auto r = route(f, *lids, {Engine::kUpDn, {corner}});
  ASSERT_TRUE(r.ok());
  CheckReport rep = check_routes(f, *lids, *r);
  EXPECT_TRUE(rep.ok());
  EXPECT_FALSE(rep.credit_loop);
  auto bad = route(f, *lids, {Engine::kUpDn, {0x1234}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, RoutingErrc::kBadRoot);
}

// The checker can fail: minhop on rings has a credit loop; dor with dateline VLs has none; the
// same dor tables without their SL/VL tables have one again.
TEST(Routing, CreditLoops) {
  for (const char* spec : {"torus:dims=8", "torus:dims=4x4x4"}) {
    SCOPED_TRACE(spec);
    Fabric f = fabric_of(spec);
    auto lids = assign_lids(f);
    CheckReport minhop = check_routes(f, *lids, must_route(f, *lids, Engine::kMinHop));
    EXPECT_EQ(minhop.unreachable_pairs, 0u);
    EXPECT_TRUE(minhop.credit_loop);
    EXPECT_FALSE(minhop.credit_cycle.empty());
    Routes dor = must_route(f, *lids, Engine::kDor);
    EXPECT_EQ(dor.vls, 2);
    CheckReport ok = check_routes(f, *lids, dor);
    EXPECT_TRUE(ok.ok()) << (ok.problems.empty() ? "" : ok.problems[0]);
    EXPECT_FALSE(ok.credit_loop);
    Routes no_vl = dor;
    no_vl.sl2vl.clear();
    no_vl.sl_by_switch.clear();
    no_vl.vls = 1;
    CheckReport bad = check_routes(f, *lids, no_vl);
    EXPECT_TRUE(bad.credit_loop);
    EXPECT_EQ(bad.unreachable_pairs, 0u);
  }
}

TEST(Routing, DorPathSlMarksDatelineCrossings) {
  Fabric f = fabric_of("torus:dims=4x4,hosts=1");
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kDor);
  auto hca_lid = [&](const char* name) {
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (f.nodes[n].name == name) return lids->lid_of(n, 1);
    ADD_FAILURE() << name;
    return Lid{0};
  };
  // x: 3 -> 0 goes + through the wrap link (bit 0); 0 -> 1 does not cross.
  EXPECT_EQ(r.path_sl(hca_lid("hca_3_0_0"), hca_lid("hca_0_0_0")), 1);
  EXPECT_EQ(r.path_sl(hca_lid("hca_0_0_0"), hca_lid("hca_1_0_0")), 0);
  // y: 0 -> 3 goes - through the wrap (bit 1); x 2 -> 1 does not.
  EXPECT_EQ(r.path_sl(hca_lid("hca_2_0_0"), hca_lid("hca_1_3_0")), 2);
}

TEST(Routing, DisconnectedFabricNamesUnreachableHcas) {
  Fabric f;
  NodeIdx s0 = f.add_switch(0x100, 4, "s0"), s1 = f.add_switch(0x200, 4, "s1");
  NodeIdx h[4];
  for (int i = 0; i < 4; ++i) {
    h[i] = f.add_hca(0x1000 + 0x10 * i, 1, "h" + std::to_string(i));
    f.connect(i < 2 ? s0 : s1, 1 + i % 2, h[i], 1);
  }
  auto lids = assign_lids(f);
  for (Engine e : {Engine::kMinHop, Engine::kUpDn}) {
    Routes r = must_route(f, *lids, e);
    CheckReport rep = check_routes(f, *lids, r);
    EXPECT_FALSE(rep.ok());
    EXPECT_EQ(rep.hca_pairs, 12u);
    EXPECT_EQ(rep.unreachable_pairs, 8u);
    EXPECT_EQ(rep.unreachable_hcas, (std::vector<NodeIdx>{h[0], h[1], h[2], h[3]}));
    ASSERT_FALSE(rep.unreachable_examples.empty());
    EXPECT_NE(rep.problems[0].find("not delivered"), std::string::npos);
  }
  auto ft = route(f, *lids, {Engine::kFtree, {}});
  EXPECT_FALSE(ft.ok());
}

TEST(Routing, CheckerCatchesLoopsAndMisdelivery) {
  Fabric f = fabric_of("fat-tree:k=4");
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kMinHop);
  // Send one HCA LID from an edge switch to an aggregation switch and back: a loop.
  NodeIdx hca0 = 0;
  while (f.nodes[hca0].is_switch) ++hca0;
  const Lid d = lids->lid_of(hca0, 1);
  const std::uint32_t edge = r.switch_index[f.nodes[hca0].ports[1].peer];
  const std::uint8_t up = r.out_port(edge, d == 1 ? 2 : d);  // some port toward another switch
  (void)up;
  const FabricNode& en = f.nodes[r.switches[edge]];
  int agg_port = 0;
  for (int p = 1; p <= en.num_ports(); ++p)
    if (en.ports[p].peer != kNoNode && f.nodes[en.ports[p].peer].is_switch) agg_port = p;
  ASSERT_NE(agg_port, 0);
  const NodeIdx agg = en.ports[agg_port].peer;
  Routes broken = r;
  broken.lft[static_cast<std::size_t>(edge) * broken.lid_top + d] =
      static_cast<std::uint8_t>(agg_port);
  broken.lft[static_cast<std::size_t>(broken.switch_index[agg]) * broken.lid_top + d] =
      en.ports[agg_port].peer_port;
  CheckReport rep = check_routes(f, *lids, broken);
  EXPECT_GT(rep.loops, 0u);
  EXPECT_GT(rep.unreachable_pairs, 0u);
  EXPECT_EQ(rep.unreachable_hcas, std::vector<NodeIdx>{hca0});
}

TEST(Routing, LmcGivesEachLidItsOwnUpPort) {
  Fabric f = fabric_of("fat-tree:k=4");
  auto lids = assign_lids(f, 2);
  ASSERT_TRUE(lids.ok());
  for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}) {
    Routes r = must_route(f, *lids, e);
    EXPECT_TRUE(check_routes(f, *lids, r).ok()) << to_string(e);
    // From the first edge switch, the 4 LIDs of an HCA in another pod leave by 2 up ports,
    // each used twice (k=4: 2 up ports).
    NodeIdx far = 0;
    int seen = 0;
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (!f.nodes[n].is_switch && ++seen == 16) far = n;
    NodeIdx near = 0;
    while (f.nodes[near].is_switch) ++near;
    const std::uint32_t edge = r.switch_index[f.nodes[near].ports[1].peer];
    std::vector<int> used(256, 0);
    for (int k = 0; k < 4; ++k) ++used[r.out_port(edge, lids->lid_of(far, 1) + k)];
    int distinct = 0;
    for (int u : used) distinct += u > 0;
    EXPECT_EQ(distinct, 2) << to_string(e);
  }
}

TEST(Routing, LftBlocks) {
  Fabric f = fabric_of("fat-tree:k=4");
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kFtree);
  EXPECT_EQ(r.lft_blocks(), static_cast<int>((r.lid_top + 63) / 64));
  auto b = r.lft_block(0, 0);
  EXPECT_EQ(b[0], r.out_port(0, 0));
  EXPECT_EQ(b[5], r.out_port(0, 5));
  auto last = r.lft_block(0, r.lft_blocks() - 1);
  EXPECT_EQ(last[63],
            r.lid_top % 64 == 0 ? r.out_port(0, static_cast<Lid>(r.lid_top - 1)) : kDropPort);
}

TEST(Routing, EngineNames) {
  for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree, Engine::kDor}) {
    Engine back;
    ASSERT_TRUE(parse_engine(to_string(e), &back));
    EXPECT_EQ(back, e);
  }
  Engine x;
  EXPECT_FALSE(parse_engine("lash", &x));
}

}  // namespace
}  // namespace weft::routing

namespace weft::routing {
namespace {

// The irregular real tree of anchors.md: 7 pods of 18 leaves x 18 HCAs, 18 aggregation
// switches per pod, 6 cores per group joined by 3 parallel links each (2,268 HCAs).
TEST(Routing, RealThreeLevelTreeWithParallelLinks) {
  topo::FatTree3Params p;
  p.pods = 7;
  p.cores_per_group = 6;
  auto t = topo::fat_tree_3(p);
  ASSERT_TRUE(t.ok());
  Fabric f = Fabric::from_topology(*t);
  auto lids = assign_lids(f);
  for (Engine e : {Engine::kFtree, Engine::kUpDn, Engine::kMinHop}) {
    Routes r = must_route(f, *lids, e);
    CheckReport rep = check_routes(f, *lids, r);
    EXPECT_TRUE(rep.ok()) << to_string(e) << ": " << (rep.problems.empty() ? "" : rep.problems[0]);
    EXPECT_FALSE(rep.credit_loop) << to_string(e);
    EXPECT_EQ(rep.hca_pairs, 2268u * 2267u);
    EXPECT_EQ(rep.hops_max, 6);
    if (e == Engine::kFtree) {
      EXPECT_LE(routing_stats(f, *lids, r).up_spread_max, 1u);
    }
  }
}

// gen_fattree.py's net file read through emu/topo's reader routes like the generator's tree.
TEST(Routing, GenFattreeNetFile) {
  const std::string script = std::string(WEFT_SHARED_DIR) + "/tools/anchors/gen_fattree.py";
  const std::string cmd = "python3 " + script + " 2 36 18 18 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) GTEST_SKIP() << "no python3";
  std::string text;
  char buf[65536];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
  if (pclose(pipe) != 0 || text.empty())
    GTEST_SKIP() << "gen_fattree.py not available at " << script;
  auto t = topo::read_netfile(text);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  Fabric f = Fabric::from_topology(*t);
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kFtree);
  CheckReport rep = check_routes(f, *lids, r);
  EXPECT_TRUE(rep.ok());
  EXPECT_EQ(rep.hca_pairs, 648u * 647u);
  EXPECT_EQ(rep.hops_max, 4);
  EXPECT_LE(routing_stats(f, *lids, r).up_spread_max, 1u);
}

// DOR goes X first, then Y, then Z; hops = links HCA to HCA.
TEST(Routing, DorDimensionOrderAndHops) {
  Fabric f = fabric_of("torus:dims=4x4x4");
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kDor);
  auto node = [&](const std::string& name) {
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (f.nodes[n].name == name) return n;
    ADD_FAILURE() << name;
    return NodeIdx{0};
  };
  const NodeIdx src = node("hca_0_0_0_0"), dst = node("hca_2_1_3_0");
  // x +2, y +1, z -1 (3 is one step back around the ring): 4 switch hops + 2 HCA links.
  EXPECT_EQ(walk_hops(f, r, src, 1, lids->lid_of(dst, 1)), 6);
  // First hop from sw_0_0_0 leaves on the X+ port (hosts=1: port 2).
  EXPECT_EQ(r.out_port(r.switch_index[node("sw_0_0_0")], lids->lid_of(dst, 1)), 2);
  // At sw_2_0_0 X is done: Y+ (port 4).
  EXPECT_EQ(r.out_port(r.switch_index[node("sw_2_0_0")], lids->lid_of(dst, 1)), 4);
  // At sw_2_1_0 Z- (port 7).
  EXPECT_EQ(r.out_port(r.switch_index[node("sw_2_1_0")], lids->lid_of(dst, 1)), 7);
  // The path crosses the Z dateline (0 -> 3 on the wrap link): SL bit 2. The wrap hop itself
  // is still on VL 0 (the packet crosses on it).
  const int sl = r.path_sl(lids->lid_of(src, 1), lids->lid_of(dst, 1));
  EXPECT_EQ(sl, 4);
  const std::uint32_t s = r.switch_index[node("sw_2_1_0")];
  const int np = f.nodes[r.switches[s]].num_ports();
  EXPECT_EQ(r.vl(s, np, 5, 7, sl), 0);
}

// On a ring of 8, 6 -> 1 goes + across the dateline: VL 0 on the hops out of 6 and 7 (the wrap),
// VL 1 out of 0 once it has crossed. 1 -> 3 does not cross: VL 0 throughout.
TEST(Routing, DorMovesToVl1AfterTheDateline) {
  Fabric f = fabric_of("torus:dims=8");
  auto lids = assign_lids(f);
  Routes r = must_route(f, *lids, Engine::kDor);
  auto lid = [&](const std::string& name) {
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (f.nodes[n].name == name) return lids->lid_of(n, 1);
    ADD_FAILURE() << name;
    return Lid{0};
  };
  auto sw = [&](const std::string& name) {
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (f.nodes[n].name == name) return r.switch_index[n];
    ADD_FAILURE() << name;
    return 0u;
  };
  const int sl = r.path_sl(lid("hca_6_0"), lid("hca_1_0"));
  EXPECT_EQ(sl, 1);
  const int plus = 2, host = 1;
  EXPECT_EQ(r.vl(sw("sw_6"), 3, host, plus, sl), 0);
  EXPECT_EQ(r.vl(sw("sw_7"), 3, 3, plus, sl), 0);
  EXPECT_EQ(r.vl(sw("sw_0"), 3, 3, plus, sl), 1);
  EXPECT_EQ(r.path_sl(lid("hca_1_0"), lid("hca_3_0")), 0);
  EXPECT_EQ(r.vl(sw("sw_1"), 3, host, plus, 0), 0);
  EXPECT_EQ(r.vl(sw("sw_2"), 3, 3, plus, 0), 0);
}

}  // namespace
}  // namespace weft::routing

namespace weft::routing {
namespace {

void uncable(Fabric& f, NodeIdx n, int port) {
  FabricPort& p = f.nodes[n].ports[port];
  f.nodes[p.peer].ports[p.peer_port].peer = kNoNode;
  p.peer = kNoNode;
}

// A tree that lost a link still routes with ftree and updn (up ports toward switches that can
// still reach the destination); a leaf cut off entirely is refused by ftree with its name.
TEST(Routing, DegradedFatTree) {
  Fabric f = fabric_of("fat-tree:k=4");
  NodeIdx leaf = 0;
  while (!f.nodes[leaf].is_switch) ++leaf;
  int up = 0;
  for (int p = 1; p <= f.nodes[leaf].num_ports(); ++p)
    if (f.nodes[leaf].ports[p].peer != kNoNode && f.nodes[f.nodes[leaf].ports[p].peer].is_switch)
      up = p;
  ASSERT_NE(up, 0);
  Fabric g = f;
  uncable(g, leaf, up);
  auto lids = assign_lids(g);
  for (Engine e : {Engine::kFtree, Engine::kUpDn, Engine::kMinHop}) {
    Routes r = must_route(g, *lids, e);
    CheckReport rep = check_routes(g, *lids, r);
    EXPECT_TRUE(rep.ok()) << to_string(e) << ": " << (rep.problems.empty() ? "" : rep.problems[0]);
    if (e != Engine::kMinHop) {
      EXPECT_FALSE(rep.credit_loop) << to_string(e);
    }
  }
  for (int p = 1; p <= g.nodes[leaf].num_ports(); ++p)
    if (g.nodes[leaf].ports[p].peer != kNoNode && g.nodes[g.nodes[leaf].ports[p].peer].is_switch)
      uncable(g, leaf, p);
  auto cut = route(g, *assign_lids(g), {Engine::kFtree, {}});
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find(g.nodes[leaf].name), std::string::npos) << cut.error().message;
}

}  // namespace
}  // namespace weft::routing

namespace weft::routing {
namespace {

// Property: trees that lost 1-3 random switch links. Whenever the fabric is still connected
// (minhop delivers everything), updn delivers everything without a credit loop, and ftree
// either refuses cleanly or does the same. Each failure prints the seed.
TEST(RoutingProperty, DegradedTreesOverSeeds) {
  const char* kSpecs[] = {"fat-tree:k=4", "fat-tree:k=6", "leaf-spine:leaves=6,spines=3,hosts=4",
                          "fat-tree:levels=2,radix=12"};
  constexpr int kSeeds = 400;
  int refused = 0, routed = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    std::mt19937_64 rng(seed);
    const char* spec = kSpecs[rng() % std::size(kSpecs)];
    SCOPED_TRACE("SEED=" + std::to_string(seed) + " " + spec);
    Fabric f = fabric_of(spec);
    std::vector<std::pair<NodeIdx, int>> sw_links;
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      for (int p = 1; p <= f.nodes[n].num_ports(); ++p) {
        const FabricPort& fp = f.nodes[n].ports[p];
        if (f.nodes[n].is_switch && fp.peer != kNoNode && f.nodes[fp.peer].is_switch && n < fp.peer)
          sw_links.push_back({n, p});
      }
    const int cuts = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < cuts; ++c) {
      auto [n, p] = sw_links[rng() % sw_links.size()];
      if (f.nodes[n].ports[p].peer != kNoNode) uncable(f, n, p);
    }
    auto lids = assign_lids(f);
    CheckReport mh = check_routes(f, *lids, must_route(f, *lids, Engine::kMinHop), {0, false});
    if (mh.unreachable_pairs > 0) {
      EXPECT_FALSE(mh.unreachable_hcas.empty());
      continue;  // disconnected: reported, nothing more to promise
    }
    CheckReport ud = check_routes(f, *lids, must_route(f, *lids, Engine::kUpDn));
    EXPECT_TRUE(ud.ok()) << (ud.problems.empty() ? "" : ud.problems[0]);
    auto ft = route(f, *lids, {Engine::kFtree, {}});
    if (!ft.ok()) {
      EXPECT_EQ(ft.error().code, RoutingErrc::kNotFatTree);
      ++refused;
      continue;
    }
    ++routed;
    CheckReport fr = check_routes(f, *lids, *ft);
    EXPECT_TRUE(fr.ok()) << (fr.problems.empty() ? "" : fr.problems[0]);
  }
  EXPECT_GT(routed, 0);
  std::printf("degraded trees: ftree routed %d, refused %d of %d seeds\n", routed, refused, kSeeds);
}

}  // namespace
}  // namespace weft::routing
