// tests/sm/triangle.hpp — the smallest fabric with a link the SM's first sweep can miss: three
// 4-port switches in a triangle, one HCA on each. s1 (node 0) - s2 (1) through ports 2/2,
// s1 - s3 (2) through 3/2, s2 - s3 through 3/3 (link 5), h0..h2 (nodes 3..5) on port 1. Shared by
// the DirectFabric and packet-level fabric tests of a port that trains during a sweep.
#pragma once

#include <string>

#include "emu/topo/generators.hpp"

namespace weft::test_util {

inline topo::Topology triangle() {
  topo::Topology t;
  for (int s = 0; s < 3; ++s)
    t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, s), 4, "s" + std::to_string(s + 1));
  for (int h = 0; h < 3; ++h) {
    const auto n = t.add_hca(topo::make_guid(topo::NodeKind::kHca, h), 1, "h" + std::to_string(h));
    t.connect({static_cast<topo::NodeId>(h), 1}, {n, 1});
  }
  t.connect({0, 2}, {1, 2});
  t.connect({0, 3}, {2, 2});
  t.connect({1, 3}, {2, 3});
  return t;
}

}  // namespace weft::test_util
