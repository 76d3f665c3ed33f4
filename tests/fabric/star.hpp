// tests/fabric/star.hpp — the smallest subnet the fabric tests use: `hosts` HCAs, each with one
// port, on one switch (host i on switch port i + 1).
#pragma once

#include <string>
#include <vector>

#include "emu/topo/topology.hpp"

namespace weft::fabric::test {

struct Star {
  topo::Topology t;
  topo::NodeId sw = 0;
  std::vector<topo::NodeId> hosts;
};

// `hosts` HCAs on one switch of `radix` ports, every link with `props`.
inline Star star(int hosts, int radix = 36, topo::LinkProps props = {}) {
  Star s;
  s.sw = s.t.add_switch(0x1000, radix, "sw");
  for (int i = 0; i < hosts; ++i) {
    const topo::NodeId h = s.t.add_hca(0x2000 + 16 * i, 1, "h" + std::to_string(i));
    s.t.connect({h, 1}, {s.sw, i + 1}, props);
    s.hosts.push_back(h);
  }
  return s;
}

}  // namespace weft::fabric::test
