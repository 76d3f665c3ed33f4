// tests/topo/netfile_test.cpp — ibnetdiscover/ibsim net files: the fixture, round trips of
// every generator, gen_fattree.py's output (when ../shared is present), and every parse error
// with its line number.
#include "emu/topo/netfile.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "emu/topo/spec.hpp"

namespace weft::topo {
namespace {

TEST(NetFile, ReadsIbnetdiscoverFixture) {
  auto r = read_netfile_path(std::string(WEFT_TOPO_TEST_DIR) + "/data/small.net");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const Topology& t = *r;
  ASSERT_EQ(t.node_count(), 4u);
  ASSERT_EQ(t.link_count(), 5u);
  EXPECT_TRUE(t.validate().empty());
  const Node& sw = t.node(0);
  EXPECT_TRUE(sw.is_switch());
  EXPECT_EQ(sw.guid, 0x2c90300a1b2c3u);
  EXPECT_EQ(sw.num_ports(), 36);
  EXPECT_EQ(sw.description, "MF0;sw-a:SX6036/U1");
  EXPECT_EQ(sw.device_id, 0xc738u);
  const Node& ca = t.node(3);
  EXPECT_FALSE(ca.is_switch());
  EXPECT_EQ(ca.guid, 0x2c903000e0b80u);
  EXPECT_EQ(ca.system_image_guid, 0x2c903000e0b83u);
  EXPECT_EQ(ca.device_id, 0x1017u);
  EXPECT_EQ(ca.num_ports(), 2);
  EXPECT_EQ(ca.ports[2].guid, 0x2c903000e0b82u);
  EXPECT_EQ(ca.description, "node02 HCA-1");
  PortRef p = *t.peer({3, 2});
  EXPECT_EQ(p, (PortRef{0, 2}));
  const Link& l = t.link(t.node(3).ports[2].link);
  EXPECT_EQ(l.props.speed, LinkSpeed::kEdr);
  EXPECT_EQ(l.props.width, LinkWidth::k4x);
  EXPECT_EQ(t.link(t.node(0).ports[1].link).props.speed, LinkSpeed::kFdr);
  // Parallel switch-switch links, crossed ports.
  EXPECT_EQ(*t.peer({0, 35}), (PortRef{1, 36}));
  // Round trip of a file read from outside.
  auto again = read_netfile(write_netfile(t));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  std::string why;
  EXPECT_TRUE(t.same_as(*again, &why)) << why;
}

TEST(NetFile, RoundTripEveryGenerator) {
  for (const char* spec :
       {"fat-tree:k=8", "fat-tree:levels=2,radix=36",
        "leaf-spine:leaves=4,spines=2,hosts=8,speed=hdr", "rail:nodes=4,gpus=8,spines=2",
        "torus:dims=4x4x4,hosts=1", "mesh:dims=8x8,width=1x",
        "dragonfly:groups=9,routers=4,hosts=2,global=2"}) {
    SCOPED_TRACE(spec);
    auto g = from_spec(spec);
    ASSERT_TRUE(g.ok());
    // Non-default lengths survive too.
    std::string text = write_netfile(*g);
    auto r = read_netfile(text);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    std::string why;
    EXPECT_TRUE(g->same_as(*r, &why)) << why;
    EXPECT_EQ(write_netfile(*r), text);
  }
}

// ibsim-style names without GUIDs: GUIDs are assigned in file order, descriptions = ids.
TEST(NetFile, ReadsIbsimStyleWithoutGuids) {
  const char* text =
      "Hca\t1 \"hca0\"\n[1]\t\"leaf\"[1]\n\n"
      "Hca\t1 \"hca1\"\n[1]\t\"leaf\"[2]\n\n"
      "Switch\t8 \"leaf\"\n[1]\t\"hca0\"[1]\n[2]\t\"hca1\"[1]\n";
  auto r = read_netfile(text);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->node(0).description, "hca0");
  EXPECT_EQ(r->node(2).description, "leaf");
  EXPECT_EQ(r->node(0).guid, make_guid(NodeKind::kHca, 0));
  EXPECT_EQ(r->node(1).guid, make_guid(NodeKind::kHca, 1));
  EXPECT_EQ(r->node(2).guid, make_guid(NodeKind::kSwitch, 0));
  EXPECT_EQ(r->link_count(), 2u);
}

struct BadFile {
  const char* what;
  const char* text;
  int line;
  const char* message_contains;
};

const BadFile kBadFiles[] = {
    {"port line first", "[1] \"a\"[1]\n", 1, "port line before any Switch"},
    {"unknown word", "Switch 4 \"a\"\nBridge 2 \"b\"\n", 2, "expected Switch, Ca, Hca"},
    {"router", "\nRt 4 \"r\"\n", 2, "routers (Rt) are not supported"},
    {"missing port count", "Switch\n", 1, "missing port count"},
    {"bad port count", "Switch x4 \"a\"\n", 1, "port count is not a number"},
    {"port count too big", "Switch 255 \"a\"\n", 1, "port count 255 out of range"},
    {"unquoted id", "Switch 4 a\n", 1, "expected a quoted node id"},
    {"trailing junk", "Switch 4 \"a\" junk\n", 1, "unexpected text \"junk\""},
    {"bad attribute", "vendid=0xzz\nSwitch 4 \"a\"\n", 1, "malformed vendid= value"},
    {"unknown attribute", "color=0x1\n", 1, "unknown attribute \"color\""},
    {"malformed port", "Switch 4 \"a\"\n[x] \"b\"[1]\n", 2, "expected [port]"},
    {"missing peer port", "Switch 4 \"a\"\n[1] \"b\"\n", 2, "expected [port] after the peer id"},
    {"missing peer", "Switch 4 \"a\"\n[1] [2]\n", 2, "expected the peer's quoted id"},
    {"bad port guid", "Ca 1 \"a\"\n[1](xyz) \"b\"[1]\n", 2, "malformed port GUID"},
    {"port out of range",
     "Switch 4 \"a\"\n[1] \"b\"[1]\n[5] \"b\"[2]\n\nSwitch 4 \"b\"\n[1] \"a\"[1]\n", 3,
     "port 5 out of range 1..4 of \"a\""},
    {"port zero", "Switch 4 \"a\"\n[0] \"b\"[1]\n", 2, "port 0 out of range"},
    {"peer port out of range", "Switch 4 \"a\"\n[1] \"b\"[7]\n\nSwitch 4 \"b\"\n[1] \"a\"[1]\n", 2,
     "peer port 7 out of range 1..4 of \"b\""},
    {"port twice", "Switch 4 \"a\"\n[1] \"b\"[1]\n[1] \"b\"[2]\n", 3,
     "listed twice (first on line 2)"},
    {"unknown peer", "Switch 4 \"a\"\n\n\n[3] \"ghost\"[1]\n", 4,
     "links to \"ghost\", which is not in the file"},
    {"dangling: not listed back",
     "Switch 4 \"a\"\n[1] \"b\"[1]\n[2] \"b\"[2]\n\nSwitch 4 \"b\"\n[1] \"a\"[1]\n", 3,
     "dangling link: \"b\" port 2 does not list \"a\"[2] back"},
    {"dangling: lists something else",
     "Switch 4 \"a\"\n[1] \"b\"[1]\n\nSwitch 4 \"b\"\n[1] \"a\"[2]\n", 2,
     "lists \"a\"[2] (line 5), not \"a\"[1]"},
    {"self link", "Switch 4 \"a\"\n[1] \"a\"[2]\n[2] \"a\"[1]\n", 2, "self-link on \"a\""},
    {"duplicate id", "Switch 4 \"a\"\n\nSwitch 4 \"a\"\n", 3,
     "duplicate node id \"a\" (first on line 1)"},
    {"duplicate guid", "switchguid=0x10\nSwitch 4 \"a\"\nswitchguid=0x10\nSwitch 4 \"b\"\n", 4,
     "duplicate GUID 0x0000000000000010"},
    {"duplicate guid from id", "Switch 4 \"S-0000000000000010\"\nswitchguid=0x10\nSwitch 4 \"b\"\n",
     3, "duplicate GUID"},
    {"duplicate port guid",
     "caguid=0x100\nCa 2 \"a\"\n[1](200) \"s\"[1]\n[2](200) \"s\"[2]\n\nSwitch 4 \"s\"\n[1] "
     "\"a\"[1]\n[2] \"a\"[2]\n",
     4, "duplicate port GUID 0x0000000000000200"},
    {"bad nvlink", "#weft nvlink \"n\" \"missing\"\nCa 1 \"a\"\n", 1,
     "names \"missing\", which is not in the file"},
    {"nvlink on switch", "#weft nvlink \"n\" \"s\"\nSwitch 1 \"s\"\n", 1, "names switch \"s\""},
    {"empty", "# nothing\n\n", 0, "no nodes"},
    {"unterminated quote", "Switch 4 \"a\n", 1, "expected a quoted node id"},
};

TEST(NetFile, ErrorsCarryLineAndProblem) {
  for (const BadFile& b : kBadFiles) {
    SCOPED_TRACE(b.what);
    auto r = read_netfile(b.text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().line, b.line) << r.error().to_string();
    EXPECT_NE(r.error().message.find(b.message_contains), std::string::npos)
        << r.error().to_string();
  }
}

TEST(NetFile, GarbageNeverCrashes) {
  // Every prefix and a byte-flipped copy of a valid file parses or fails cleanly.
  auto g = from_spec("leaf-spine:leaves=2,spines=2,hosts=2");
  ASSERT_TRUE(g.ok());
  std::string text = write_netfile(*g);
  for (std::size_t n = 0; n < text.size(); n += 7)
    (void)read_netfile(std::string_view(text).substr(0, n));
  SeededRng rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string t = text;
    for (int k = 0; k < 3; ++k) t[rng.below(t.size())] = static_cast<char>(rng.below(256));
    auto r = read_netfile(t);
    if (r.ok()) (void)r->validate();
  }
}

// Runs gen_fattree.py; returns its stdout, or nullopt when python3/../shared is missing.
std::optional<std::string> run_gen_fattree(const std::string& args) {
  std::string script = std::string(WEFT_SHARED_DIR) + "/tools/anchors/gen_fattree.py";
  if (!std::filesystem::exists(script)) return std::nullopt;
  std::string cmd = "python3 '" + script + "' " + args + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return std::nullopt;
  std::string out;
  char buf[65536];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  if (pclose(f) != 0 || out.empty()) return std::nullopt;
  return out;
}

// Same links by (description, port) on both sides.
void expect_same_by_description(const Topology& a, const Topology& b) {
  using Key = std::tuple<std::string, int, std::string, int>;
  auto keys = [](const Topology& t) {
    std::set<Key> s;
    for (const Link& l : t.links()) {
      Key k1{t.node(l.a.node).description, l.a.port, t.node(l.b.node).description, l.b.port};
      Key k2{t.node(l.b.node).description, l.b.port, t.node(l.a.node).description, l.a.port};
      s.insert(std::min(k1, k2));
    }
    return s;
  };
  EXPECT_EQ(a.node_count(), b.node_count());
  EXPECT_TRUE(keys(a) == keys(b));
}

TEST(NetFile, GenFattreeTwoLevel648) {
  auto text = run_gen_fattree("2 36 18 18");
  if (!text)
    GTEST_SKIP() << "gen_fattree.py not found under " << WEFT_SHARED_DIR << " (or no python3)";
  auto r = read_netfile(*text);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  TopologyStats s = r->stats();
  EXPECT_EQ(s.hcas, 648u);
  EXPECT_EQ(s.switches, 54u);
  EXPECT_EQ(s.links, 1296u);
  EXPECT_TRUE(r->validate().empty());
  auto g = from_spec("fat-tree:levels=2,radix=36");
  ASSERT_TRUE(g.ok());
  expect_same_by_description(*g, *r);
  // And through our writer and reader again.
  auto again = read_netfile(write_netfile(*r));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  std::string why;
  EXPECT_TRUE(r->same_as(*again, &why)) << why;
}

TEST(NetFile, GenFattreeThreeLevel2268) {
  auto text = run_gen_fattree("3 7 18 18 18 6");
  if (!text)
    GTEST_SKIP() << "gen_fattree.py not found under " << WEFT_SHARED_DIR << " (or no python3)";
  auto r = read_netfile(*text);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  TopologyStats s = r->stats();
  EXPECT_EQ(s.hcas, 2268u);
  EXPECT_EQ(s.switches, 360u);
  EXPECT_EQ(s.links, 6804u);
  EXPECT_EQ(s.switch_levels, 3);
  EXPECT_DOUBLE_EQ(s.oversubscription, 1.0);
  EXPECT_TRUE(r->validate().empty());
  auto g = from_spec("fat-tree:levels=3,radix=36,pods=7,cores=6");
  ASSERT_TRUE(g.ok());
  expect_same_by_description(*g, *r);
}

}  // namespace
}  // namespace weft::topo
