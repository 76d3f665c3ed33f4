// tests/cm/cm_test_util.hpp — a small managed subnet for the SA and CM tests: a topology on the
// emulated fabric, brought up by the SM (emu/sa ManagedSubnet), and helpers that run the
// Simulator until a condition holds.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>

#include "emu/fabric/fabric.hpp"
#include "emu/fabric/workload.hpp"
#include "emu/sa/managed_subnet.hpp"
#include "emu/sim/simulator.hpp"
#include "emu/topo/generators.hpp"
#include "emu/topo/spec.hpp"
#include "emu/topo/topology.hpp"

namespace weft::test {

// Two 4-port switches joined by one link, two HCAs on each: h0 h1 | h2 h3.
inline topo::Topology two_switches() {
  topo::Topology t;
  const auto s1 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 0), 4, "s1");
  const auto s2 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 1), 4, "s2");
  for (int h = 0; h < 4; ++h) {
    const auto n = t.add_hca(topo::make_guid(topo::NodeKind::kHca, static_cast<std::uint64_t>(h)),
                             1, "h" + std::to_string(h));
    t.connect({n, 1}, {h < 2 ? s1 : s2, 1 + h % 2});
  }
  t.connect({s1, 4}, {s2, 4});
  return t;
}

struct Subnet {
  topo::Topology topo;
  sim::Simulator sim;
  std::unique_ptr<fabric::Fabric> fab;
  std::unique_ptr<sa::ManagedSubnet> net;
  std::vector<topo::NodeId> hcas;

  explicit Subnet(topo::Topology t, sa::SubnetOptions o = {}, std::uint64_t seed = 1)
      : topo(std::move(t)), sim({.seed = seed}) {
    fabric::FabricConfig fc;
    fc.sm_managed = true;  // ManagedSubnet's SM programs the fabric over the fabric
    fab = std::make_unique<fabric::Fabric>(sim, topo, fc);
    net = std::make_unique<sa::ManagedSubnet>(*fab, std::move(o));
    const bool up = net->bring_up();
    EXPECT_TRUE(up) << net->error();
    hcas = fab->hcas();
  }
  // Runs until `done()` holds (true) or virtual `limit_ns` more passed / nothing is left.
  bool run_until(const std::function<bool()>& done, TimeNs limit_ns = 1'000'000'000) {
    const TimeNs end = sim.now() + limit_ns;
    while (!done()) {
      if (sim.next_time() > end) return false;
      if (sim.step() == sim::StopReason::kEmpty) return done();
    }
    return true;
  }
};

}  // namespace weft::test
