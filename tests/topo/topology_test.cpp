// tests/topo/topology_test.cpp — the Topology value: construction, peers, validation, stats,
// Graphviz export, comparison.
#include "emu/topo/topology.hpp"

#include <gtest/gtest.h>

namespace weft::topo {
namespace {

TEST(Topology, ConnectAndPeer) {
  Topology t;
  NodeId sw = t.add_switch(0x100, 4, "sw");
  NodeId h = t.add_hca(0x200, 2, "h");
  LinkId l = t.connect({sw, 3}, {h, 2}, LinkProps{LinkWidth::k4x, LinkSpeed::kHdr, 10.0});
  EXPECT_EQ(t.link(l).rate_mbps(), 200'000u);
  EXPECT_EQ(t.link(l).propagation_ns(), 50u);
  EXPECT_EQ(*t.peer({sw, 3}), (PortRef{h, 2}));
  EXPECT_EQ(*t.peer({h, 2}), (PortRef{sw, 3}));
  EXPECT_FALSE(t.peer({sw, 1}).has_value());
  EXPECT_FALSE(t.peer({sw, 9}).has_value());
  EXPECT_EQ(t.node(h).ports[2].guid, 0x202u);
  EXPECT_EQ(t.node(sw).ports[0].guid, 0x100u);
  EXPECT_TRUE(t.validate().empty());
}

TEST(Topology, ValidateFindsProblems) {
  Topology t;
  NodeId a = t.add_switch(0x100, 4, "a");
  NodeId b = t.add_switch(0x200, 4, "b");
  t.add_hca(0x300, 1, "lonely");
  t.connect({a, 1}, {b, 4});
  auto p = t.validate();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("not connected: 1 nodes unreachable"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("lonely"), std::string::npos);

  // A radix shrunk under a link: the link's end is out of range.
  Topology u;
  NodeId x = u.add_switch(0x100, 4, "x");
  NodeId y = u.add_switch(0x200, 4, "y");
  u.connect({x, 1}, {y, 4});
  u.mutable_node(y).ports.resize(3);
  p = u.validate();
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p[0].find("out of range (port 4)"), std::string::npos) << p[0];

  // Duplicate GUIDs.
  Topology v;
  NodeId s1 = v.add_switch(0x100, 4, "s1");
  NodeId s2 = v.add_switch(0x100, 4, "s2");
  v.connect({s1, 1}, {s2, 1});
  p = v.validate();
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p[0].find("duplicate node GUID"), std::string::npos) << p[0];
}

TEST(Topology, DotExport) {
  Topology t;
  NodeId sw = t.add_switch(0x100, 4, "leaf0");
  NodeId h = t.add_hca(0x200, 1, "gpu0");
  t.connect({sw, 2}, {h, 1});
  t.add_nvlink_domain({"server0", {h}});
  std::string dot = t.to_dot();
  EXPECT_NE(dot.find("graph fabric {"), std::string::npos);
  EXPECT_NE(dot.find("n0 [label=\"leaf0\", shape=box]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n1 [label=\"gpu0\", shape=ellipse]"), std::string::npos);
  EXPECT_NE(dot.find("n0 -- n1 [taillabel=\"2\", headlabel=\"1\"]"), std::string::npos);
  EXPECT_NE(dot.find("subgraph cluster_nvl0"), std::string::npos);
}

TEST(Topology, SameAsIgnoresLinkOrderButNotProperties) {
  auto build = [](bool reversed, double len) {
    Topology t;
    NodeId a = t.add_switch(0x100, 4, "a");
    NodeId b = t.add_switch(0x200, 4, "b");
    if (reversed) {
      t.connect({b, 2}, {a, 2}, LinkProps{.length_m = len});
      t.connect({a, 1}, {b, 1});
    } else {
      t.connect({a, 1}, {b, 1});
      t.connect({a, 2}, {b, 2}, LinkProps{.length_m = len});
    }
    return t;
  };
  std::string why;
  EXPECT_TRUE(build(false, 5).same_as(build(true, 5), &why)) << why;
  EXPECT_FALSE(build(false, 5).same_as(build(true, 6), &why));
  EXPECT_NE(why.find("differs"), std::string::npos);
}

TEST(Topology, SpeedAndWidthNames) {
  EXPECT_EQ(parse_speed("fdr10"), LinkSpeed::kFdr10);
  EXPECT_EQ(parse_speed("NDR"), LinkSpeed::kNdr);
  EXPECT_FALSE(parse_speed("ZDR").has_value());
  EXPECT_EQ(parse_width("12x"), LinkWidth::k12x);
  EXPECT_FALSE(parse_width("3x").has_value());
  EXPECT_STREQ(to_string(LinkSpeed::kEdr), "EDR");
  EXPECT_EQ(lane_rate_mbps(LinkSpeed::kNdr), 100'000u);
}

}  // namespace
}  // namespace weft::topo
