// tests/topo/generators_test.cpp — every generator: exact node and link counts, port
// numbering, GUID derivation, determinism, validity.
#include "emu/topo/generators.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "emu/topo/spec.hpp"

namespace weft::topo {
namespace {

Topology make(const std::string& spec) {
  auto r = from_spec(spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : Topology{};
}

struct Counts {
  const char* spec;
  std::size_t hcas, switches, links;
};

// Table: spec -> exact counts. Every entry must also validate and be deterministic.
const Counts kCounts[] = {
    {"fat-tree:k=8", 128, 80, 384},  // k^3/4, 5k^2/4, 3 k^3/4
    {"fat-tree:k=4", 16, 20, 48},
    {"fat-tree:k=8,levels=2", 32, 12, 64},
    {"fat-tree:levels=2,radix=36", 648, 54, 1296},  // gen_fattree.py 2 36 18 18
    {"fat-tree:levels=3,radix=36,pods=7,cores=6", 2268, 360,
     6804},                                              // gen_fattree.py 3 7 18 18 18 6
    {"fat-tree:levels=3,radix=36", 11664, 1620, 34992},  // full 3-tier
    {"fat-tree:levels=2,radix=36,oversub=2", 864, 48, 1296},
    {"leaf-spine:leaves=4,spines=2,hosts=8", 32, 6, 40},
    {"leaf-spine:leaves=4,spines=2,hosts=8,links=3", 32, 6, 56},
    {"rail:nodes=4,gpus=8,spines=2", 32, 10, 64},
    {"rail:nodes=16,gpus=8,spines=4", 128, 12, 128 + 8 * 4 * 4},
    {"torus:dims=4x4x4,hosts=1", 64, 64, 64 + 192},
    {"torus:dims=2x3", 6, 6, 6 + 3 + 6},
    {"torus:dims=8,hosts=2", 16, 8, 16 + 8},
    {"mesh:dims=8x8", 64, 64, 64 + 112},
    {"mesh:dims=3x3x3,hosts=0", 0, 27, 54},
    {"dragonfly:groups=9,routers=4,hosts=2,global=2", 72, 36, 72 + 54 + 36},
    {"dragonfly:groups=5,routers=4,hosts=1,global=2", 20, 20, 20 + 30 + 20},
};

TEST(Generators, ExactCountsValidAndDeterministic) {
  for (const Counts& c : kCounts) {
    SCOPED_TRACE(c.spec);
    Topology t = make(c.spec);
    TopologyStats s = t.stats();
    EXPECT_EQ(s.hcas, c.hcas);
    EXPECT_EQ(s.switches, c.switches);
    EXPECT_EQ(s.links, c.links);
    std::vector<std::string> problems = t.validate();
    EXPECT_TRUE(problems.empty()) << problems.front();
    std::string why;
    EXPECT_TRUE(t.same_as(make(c.spec), &why)) << why;
  }
}

TEST(Generators, GuidsDerivedFromPosition) {
  Topology t = make("fat-tree:k=4");
  // HCAs first (index 0..15), then switches.
  EXPECT_EQ(t.node(0).guid, 0x0002c90200000000ULL);
  EXPECT_EQ(t.node(1).guid, 0x0002c90200000100ULL);
  EXPECT_EQ(t.node(0).ports[1].guid, 0x0002c90200000001ULL);
  EXPECT_EQ(t.node(16).guid, 0x0002c90100000000ULL);
  EXPECT_EQ(t.node(16).ports[0].guid, t.node(16).guid);
  EXPECT_EQ(*t.find_guid(0x0002c90100000100ULL), 17u);
  EXPECT_EQ(t.id_string(16), "S-0002c90100000000");
  EXPECT_EQ(t.id_string(0), "H-0002c90200000000");
}

TEST(Generators, FatTreeKaryStructure) {
  Topology t = make("fat-tree:k=8");
  TopologyStats s = t.stats();
  EXPECT_EQ(s.switch_levels, 3);
  EXPECT_DOUBLE_EQ(s.oversubscription, 1.0);
  EXPECT_DOUBLE_EQ(s.bisection_links, 64.0);
  // Every switch uses all 8 ports.
  for (const Node& n : t.nodes()) {
    if (!n.is_switch()) continue;
    for (int p = 1; p <= 8; ++p) EXPECT_NE(n.ports[p].link, kNoLink) << n.description;
  }
}

TEST(Generators, OversubscribedFatTreeStats) {
  Topology t = make("fat-tree:levels=2,radix=36,oversub=2:1");
  TopologyStats s = t.stats();
  EXPECT_EQ(s.switch_levels, 2);
  EXPECT_DOUBLE_EQ(s.oversubscription, 2.0);
  EXPECT_DOUBLE_EQ(s.bisection_links, 864.0 / 2 / 2);
  EXPECT_EQ(s.bisection_mbps, 216ULL * 400'000);
}

TEST(Generators, FatTree2PortNumberingMatchesGenFattree) {
  // gen_fattree.py 2 36 18 18: leaf000 ports 1..18 to hca00000..17, 19..36 to spine000..017.
  Topology t = make("fat-tree:levels=2,radix=36");
  NodeId leaf0 = 648;
  EXPECT_EQ(t.node(leaf0).description, "leaf000");
  for (int p = 1; p <= 18; ++p)
    EXPECT_EQ(t.node(t.peer({leaf0, p})->node).description,
              "hca" + std::string(p - 1 < 10 ? "0000" : "000") + std::to_string(p - 1));
  auto up = *t.peer({leaf0, 19});
  EXPECT_EQ(t.node(up.node).description, "spine000");
  EXPECT_EQ(up.port, 1);
  auto up2 = *t.peer({leaf0 + 1, 20});
  EXPECT_EQ(t.node(up2.node).description, "spine001");
  EXPECT_EQ(up2.port, 2);
}

TEST(Generators, RailStructure) {
  Topology t = make("rail:nodes=4,gpus=8,spines=2");
  ASSERT_EQ(t.nvlink_domains().size(), 4u);
  for (int n = 0; n < 4; ++n) {
    const NvlinkDomain& d = t.nvlink_domains()[n];
    ASSERT_EQ(d.hcas.size(), 8u);
    for (int g = 0; g < 8; ++g) {
      const Node& h = t.node(d.hcas[g]);
      EXPECT_EQ(h.system_image_guid, t.node(d.hcas[0]).system_image_guid);
      // GPU g's NIC sits on rail g, port n+1.
      PortRef sw = *t.peer({d.hcas[g], 1});
      char want[16];
      std::snprintf(want, sizeof want, "rail%02d", g);
      EXPECT_EQ(t.node(sw.node).description, want);
      EXPECT_EQ(sw.port, n + 1);
    }
  }
  EXPECT_NE(t.node(t.nvlink_domains()[0].hcas[0]).system_image_guid,
            t.node(t.nvlink_domains()[1].hcas[0]).system_image_guid);
  EXPECT_EQ(t.stats().switch_levels, 2);
  EXPECT_DOUBLE_EQ(t.stats().oversubscription, 1.0);
}

TEST(Generators, TorusDirectionPorts) {
  Topology t = make("torus:dims=4x4x4,hosts=1");
  // Switch (x,y,z) has index 16x+4y+z. Port 1 host; dimension d: 2+2d toward +1, 3+2d toward -1.
  auto sw = [](int x, int y, int z) { return static_cast<NodeId>(16 * x + 4 * y + z); };
  EXPECT_EQ(t.node(sw(1, 2, 3)).description, "sw_1_2_3");
  for (int x = 0; x < 4; ++x)
    for (int y = 0; y < 4; ++y)
      for (int z = 0; z < 4; ++z) {
        EXPECT_EQ(*t.peer({sw(x, y, z), 2}), (PortRef{sw((x + 1) % 4, y, z), 3}));
        EXPECT_EQ(*t.peer({sw(x, y, z), 4}), (PortRef{sw(x, (y + 1) % 4, z), 5}));
        EXPECT_EQ(*t.peer({sw(x, y, z), 6}), (PortRef{sw(x, y, (z + 1) % 4), 7}));
      }
  EXPECT_EQ(t.stats().switch_levels, 0);  // not a tree
  Topology m = make("mesh:dims=4x4x4");
  EXPECT_FALSE(m.peer({sw(3, 0, 0), 2}).has_value());
  EXPECT_FALSE(m.peer({sw(0, 0, 0), 3}).has_value());
}

TEST(Generators, DragonflyEveryGroupPairJoinedOnce) {
  Topology t = make("dragonfly:groups=9,routers=4,hosts=2,global=2");
  std::map<std::pair<int, int>, int> pairs;
  for (const Link& l : t.links()) {
    const Node& a = t.node(l.a.node);
    const Node& b = t.node(l.b.node);
    if (!a.is_switch() || !b.is_switch()) continue;
    int ga = std::stoi(a.description.substr(1, 2)), gb = std::stoi(b.description.substr(1, 2));
    if (ga != gb) ++pairs[{std::min(ga, gb), std::max(ga, gb)}];
  }
  EXPECT_EQ(pairs.size(), 36u);
  for (const auto& [k, n] : pairs) EXPECT_EQ(n, 1) << k.first << "-" << k.second;
  // Every router uses all 2 + 3 + 2 ports.
  for (const Node& n : t.nodes())
    if (n.is_switch()) {
      EXPECT_EQ(n.num_ports(), 7);
      for (int p = 1; p <= 7; ++p) EXPECT_NE(n.ports[p].link, kNoLink) << n.description << " " << p;
    }
}

TEST(Generators, RefuseImpossibleParameters) {
  FatTree2Params f2;
  f2.spines = 7;
  EXPECT_FALSE(fat_tree_2(f2).ok());
  f2 = {};
  f2.leaves = 37;
  auto r = fat_tree_2(f2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("spine radix exceeded"), std::string::npos);
  FatTree3Params f3;
  f3.pods = 37;
  EXPECT_FALSE(fat_tree_3(f3).ok());
  DragonflyParams d;
  d.groups = 8;  // 8 global ports per group over 7 other groups
  EXPECT_FALSE(dragonfly(d).ok());
  RailParams rp;
  rp.spines = 0;
  EXPECT_FALSE(rail(rp).ok());
  TorusParams tp;
  tp.dims = {1024, 1024, 4};
  EXPECT_FALSE(torus(tp).ok());
}

}  // namespace
}  // namespace weft::topo
