// tests/routing/report_test.cpp — evaluate_engine(): engines that apply route a fabric validly,
// engines that do not apply refuse it with a reason, and minhop's credit loop on a torus is
// reported but does not make it invalid (it promises no deadlock freedom), while updn and dor
// on the same torus have none.
#include "emu/routing/report.hpp"

#include <gtest/gtest.h>

#include "emu/routing/fabric.hpp"
#include "emu/routing/lid.hpp"
#include "emu/topo/spec.hpp"

namespace weft::routing {
namespace {

struct Prepared {
  Fabric fabric;
  LidMap lids;
};

Prepared prepare(const char* spec) {
  auto t = topo::from_spec(spec);
  EXPECT_TRUE(t.ok()) << spec;
  Prepared p{Fabric::from_topology(t.value()), {}};
  auto l = assign_lids(p.fabric);
  EXPECT_TRUE(l.ok());
  p.lids = std::move(l).value();
  return p;
}

EngineReport eval(const Prepared& p, Engine e) {
  RoutingOptions o;
  o.engine = e;
  return evaluate_engine(p.fabric, p.lids, o);
}

TEST(EngineReportTest, FatTreeEveryTreeEngineValidDorRefuses) {
  const Prepared p = prepare("fat-tree:k=4");
  for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree}) {
    const EngineReport r = eval(p, e);
    EXPECT_TRUE(r.valid()) << to_string(e);
    EXPECT_EQ(r.check.hca_pairs, 16u * 15u) << to_string(e);
    EXPECT_EQ(r.check.unreachable_pairs, 0u);
    EXPECT_EQ(r.check.hops_max, 6) << to_string(e);  // leaf-agg-core-agg-leaf: 5 links + 1
    EXPECT_FALSE(r.check.credit_loop);
    EXPECT_GT(r.stats.table_bytes, 0u);
  }
  const EngineReport dor = eval(p, Engine::kDor);
  EXPECT_FALSE(dor.routed);
  EXPECT_FALSE(dor.valid());
  EXPECT_NE(dor.refusal.find("not a mesh or torus"), std::string::npos) << dor.refusal;
}

TEST(EngineReportTest, TorusCreditLoopsOnlyWhereNotPromised) {
  const Prepared p = prepare("torus:dims=4x4x4,hosts=1");
  const EngineReport minhop = eval(p, Engine::kMinHop);
  EXPECT_TRUE(minhop.routed);
  EXPECT_TRUE(minhop.check.credit_loop);
  EXPECT_TRUE(minhop.valid());  // reachable and loop-free; deadlock freedom not promised
  const EngineReport updn = eval(p, Engine::kUpDn);
  EXPECT_TRUE(updn.valid());
  EXPECT_FALSE(updn.check.credit_loop);
  const EngineReport dor = eval(p, Engine::kDor);
  EXPECT_TRUE(dor.valid());
  EXPECT_FALSE(dor.check.credit_loop);
  EXPECT_EQ(dor.vls, 2);  // dateline VLs
  const EngineReport ftree = eval(p, Engine::kFtree);
  EXPECT_FALSE(ftree.routed);
  EXPECT_NE(ftree.refusal.find("not a fat tree"), std::string::npos) << ftree.refusal;
}

}  // namespace
}  // namespace weft::routing
