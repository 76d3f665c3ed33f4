// tests/routing/lid_test.cpp — LID assignment: sequential, aligned, stable across runs and
// across fabric changes elsewhere.
#include <gtest/gtest.h>

#include "emu/routing/lid.hpp"
#include "emu/topo/spec.hpp"

namespace weft::routing {
namespace {

Fabric fabric_of(const std::string& spec) {
  auto t = topo::from_spec(spec);
  EXPECT_TRUE(t.ok());
  return Fabric::from_topology(*t);
}

// Uncable every port of node n.
void remove_node(Fabric& f, NodeIdx n) {
  for (FabricPort& p : f.nodes[n].ports) {
    if (p.peer == kNoNode) continue;
    f.nodes[p.peer].ports[p.peer_port].peer = kNoNode;
    p.peer = kNoNode;
  }
}

TEST(Lid, SequentialUniqueAligned) {
  for (int lmc : {0, 1, 3}) {
    Fabric f = fabric_of("fat-tree:k=4");
    auto m = assign_lids(f, lmc);
    ASSERT_TRUE(m.ok());
    std::vector<int> seen(m->lid_top(), 0);
    std::size_t assigned = 0;
    for (NodeIdx n = 0; n < f.nodes.size(); ++n) {
      const int count = m->lids_per_port(f, n);
      for (int p = f.nodes[n].is_switch ? 0 : 1;
           p <= (f.nodes[n].is_switch ? 0 : f.nodes[n].num_ports()); ++p) {
        Lid l = m->lid_of(n, p);
        ASSERT_NE(l, kNoLid);
        EXPECT_EQ(l % count, 0) << "aligned to 2^LMC";
        for (int k = 0; k < count; ++k) {
          ++seen[l + k];
          EXPECT_EQ(m->owner[l + k].node, n);
        }
        assigned += count;
      }
    }
    for (std::size_t l = 0; l < seen.size(); ++l) EXPECT_LE(seen[l], 1);
    // 20 switches (1 LID each) then 16 HCAs: with LMC 0 exactly 1..36.
    if (lmc == 0) {
      EXPECT_EQ(m->lid_top(), 37u);
    }
    EXPECT_EQ(assigned, 20u + 16u * (1u << lmc));
  }
}

TEST(Lid, SameGuidsSameLids) {
  Fabric f = fabric_of("fat-tree:k=8");
  auto a = assign_lids(f, 1), b = assign_lids(f, 1);
  EXPECT_EQ(a->base, b->base);
  LidAssigner keep(1);
  auto c = keep.assign(f), d = keep.assign(f);
  EXPECT_EQ(c->base, a->base);
  EXPECT_EQ(d->base, a->base);
}

TEST(Lid, StableWhenANodeIsRemovedOrAdded) {
  for (int lmc : {0, 2}) {
    SCOPED_TRACE("LMC " + std::to_string(lmc));
    Fabric f = fabric_of("fat-tree:k=4");
    LidAssigner sm(lmc);
    auto before = sm.assign(f);
    ASSERT_TRUE(before.ok());
    // Remove HCA #3 (the 4th HCA node): the others keep their LIDs.
    Fabric g = f;
    NodeIdx victim = 0;
    for (int seen = 0; victim < g.nodes.size(); ++victim)
      if (!g.nodes[victim].is_switch && ++seen == 4) break;
    const NodeIdx sw = g.nodes[victim].ports[1].peer;
    const int free_port = g.nodes[victim].ports[1].peer_port;
    remove_node(g, victim);
    auto after = sm.assign(g);
    for (NodeIdx n = 0; n < f.nodes.size(); ++n) {
      if (n == victim) {
        EXPECT_EQ(after->lid_of(n, 1), kNoLid);
        continue;
      }
      EXPECT_EQ(after->base[n], before->base[n]) << f.nodes[n].name;
    }
    // Persisted and reloaded (an SM restart), then a new HCA added: nobody moves, the newcomer
    // gets a LID nobody held, the removed HCA's LID stays reserved for it.
    LidAssigner restarted(lmc);
    restarted.load(sm.cache());
    Fabric h = g;
    NodeIdx added = h.add_hca(0x0002c9ff00000000ull, 1, "newcomer");
    h.connect(sw, free_port, added, 1);
    auto later = restarted.assign(h);
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      if (n != victim) {
        EXPECT_EQ(later->base[n], before->base[n]);
      }
    const Lid fresh = later->lid_of(added, 1);
    EXPECT_NE(fresh, kNoLid);
    EXPECT_NE(fresh, before->lid_of(victim, 1));
    for (NodeIdx n = 0; n < f.nodes.size(); ++n)
      for (Lid l : before->base[n]) EXPECT_NE(l, fresh);
    // The victim returns: it gets its old LID back.
    remove_node(h, added);
    h.connect(sw, free_port, victim, 1);
    auto back = restarted.assign(h);
    EXPECT_EQ(back->lid_of(victim, 1), before->lid_of(victim, 1));
  }
}

TEST(Lid, SpaceExhausted) {
  Fabric f;
  NodeIdx s = f.add_switch(1, 200, "s");
  for (int i = 0; i < 200; ++i) f.connect(s, i + 1, f.add_hca(0x1000 + 0x100 * i, 1), 1);
  EXPECT_TRUE(assign_lids(f, 7).ok());  // 200 x 128 = 25,600 LIDs fit
  Fabric big;
  for (int k = 0; k < 2; ++k) {
    NodeIdx sw = big.add_switch(10 + k, 254, "s");
    for (int i = 0; i < 200; ++i)
      big.connect(sw, i + 1, big.add_hca(0x100000 * (k + 1) + 0x100 * i, 1), 1);
  }
  auto r = assign_lids(big, 7);  // 400 x 128 = 51,200 > 49,151
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("LID space"), std::string::npos);
}

}  // namespace
}  // namespace weft::routing
