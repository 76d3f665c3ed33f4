// tests/topo/spec_test.cpp — spec strings: accepted forms, overrides, and every error.
#include "emu/topo/spec.hpp"

#include <gtest/gtest.h>

namespace weft::topo {
namespace {

TEST(Spec, LinkOverrides) {
  auto r = from_spec("leaf-spine:leaves=2,spines=1,hosts=2,speed=hdr,width=2x");
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const Link& l : r->links()) {
    EXPECT_EQ(l.props.speed, LinkSpeed::kHdr);
    EXPECT_EQ(l.props.width, LinkWidth::k2x);
    EXPECT_EQ(l.rate_mbps(), 100'000u);
  }
}

TEST(Spec, RadixAndOversubForms) {
  auto a = from_spec("fat-tree:levels=2,radix=36,oversub=2");
  auto b = from_spec("fat-tree:levels=2,radix=36,hosts=24");
  ASSERT_TRUE(a.ok() && b.ok());
  std::string why;
  EXPECT_TRUE(a->same_as(*b, &why)) << why;
  auto c = from_spec("fat-tree:levels=2,radix=8,leaves=4");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->stats().hcas, 16u);
  EXPECT_EQ(c->stats().switches, 8u);
}

struct Bad {
  const char* spec;
  const char* message_contains;
};

const Bad kBad[] = {
    {"", "empty topology kind"},
    {"hypercube:dims=4", "unknown topology kind \"hypercube\""},
    {"fat-tree:k=7", "must be even"},
    {"fat-tree:k=eight", "k=eight is not a whole number"},
    {"fat-tree:k=8,radix=4", "unknown parameter radix for fat-tree"},
    {"fat-tree:radix=36", "missing required parameter levels"},
    {"fat-tree:levels=4,radix=36", "levels=4 is out of range (2..3)"},
    {"fat-tree:levels=2,radix=36,spines=7", "do not divide evenly over 7 spines"},
    {"fat-tree:levels=2,radix=36,leaves=40", "spine radix exceeded"},
    {"fat-tree:levels=3,radix=36,pods=40", "core radix exceeded"},
    {"fat-tree:levels=2,radix=36,oversub=4", "does not split a radix-36 leaf"},
    {"fat-tree:levels=2,radix=300", "radix=300 is out of range"},
    {"leaf-spine:leaves=4,spines=2", "missing required parameter hosts for leaf-spine"},
    {"leaf-spine:leaves=4,spines=2,hosts=8,radix=4", "radix 4 is too small"},
    {"leaf-spine:leaves=4,spines=2,hosts=8,hosts=9", "parameter hosts given twice"},
    {"leaf-spine:leaves=4,,spines=2,hosts=8", "empty parameter"},
    {"leaf-spine:leaves=4,spines,hosts=8", "\"spines\" is not key=value"},
    {"leaf-spine:leaves=-4,spines=2,hosts=8", "leaves=-4 is out of range"},
    {"leaf-spine:leaves=4,spines=2,hosts=8,speed=fast", "speed=fast is not one of"},
    {"leaf-spine:leaves=4,spines=2,hosts=8,width=3x", "width=3x is not one of"},
    {"rail:nodes=4,gpus=8", "missing required parameter spines for rail"},
    {"rail:nodes=4,gpus=8,spines=0", "rails need at least one spine"},
    {"torus:hosts=1", "missing required parameter dims"},
    {"torus:dims=4xx4", "dims=4xx4 is not a list of positive sizes"},
    {"mesh:dims=4x0", "dims=4x0 is not a list"},
    {"torus:dims=1000x1000x1000", "too many switches"},
    {"dragonfly:groups=9,routers=4,hosts=2", "missing required parameter global"},
    {"dragonfly:groups=8,routers=4,hosts=2,global=2", "must be a multiple of groups-1"},
    {"dragonfly:groups=20,routers=4,hosts=2,global=2", "cannot reach the other 19 groups"},
};

TEST(Spec, ErrorsSayWhatIsWrong) {
  for (const Bad& b : kBad) {
    SCOPED_TRACE(b.spec);
    auto r = from_spec(b.spec);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(b.message_contains), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace weft::topo
