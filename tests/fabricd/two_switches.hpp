// tests/fabricd/two_switches.hpp — the daemon tests' fabric: two 4-port switches, two HCAs on
// each (h0, h1 on s1 ports 1-2; h2, h3 on s2 ports 1-2), one inter-switch link (s1 port 3 - s2
// port 3); a daemon running it on its own thread for a test's lifetime; and reading the daemon's
// status lines.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "emu/fabricd/fabric_daemon.hpp"
#include "emu/topo/generators.hpp"

namespace weft::test {

inline topo::Topology two_switches() {
  topo::Topology t;
  const auto s1 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 0), 4, "s1");
  const auto s2 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 1), 4, "s2");
  for (int h = 0; h < 4; ++h) {
    const auto n = t.add_hca(topo::make_guid(topo::NodeKind::kHca, h), 1, "h" + std::to_string(h));
    t.connect({h < 2 ? s1 : s2, h % 2 + 1}, {n, 1});
  }
  t.connect({s1, 3}, {s2, 3});
  return t;
}

struct Daemon {
  explicit Daemon(const std::string& name, fabricd::DaemonOptions o = {}) {
    o.name = name;
    auto r = fabricd::FabricDaemon::create(two_switches(), o);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
    if (!r.ok()) return;
    d = std::move(r).value();
    th = std::thread([this] { d->run(); });
  }
  ~Daemon() {
    if (d) d->stop();
    if (th.joinable()) th.join();
  }
  std::unique_ptr<fabricd::FabricDaemon> d;
  std::thread th;
};

// The value of `key` in a status line of "key value" pairs; UINT64_MAX when absent.
inline std::uint64_t field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string k;
  while (in >> k)
    if (k == key) {
      std::uint64_t v = 0;
      in >> v;
      return v;
    }
  return UINT64_MAX;
}

}  // namespace weft::test
