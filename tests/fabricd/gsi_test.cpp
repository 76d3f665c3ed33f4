// QP1 for processes attached to the fabric daemon (emu/fabricd gsi_relay, fabric_gsi): SA
// PathRecord queries across the fabric and on the SM's own HCA, an unknown LID, and two
// processes (tests/fabricd/cm_peer) that connect an RC QP through the CM over the fabric and
// exchange 1 MiB each way byte-exact.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <thread>

#include "emu/fabricd/fabric_daemon.hpp"
#include "emu/fabricd/fabric_gsi.hpp"
#include "emu/topo/generators.hpp"
#include "tests/fabricd/two_switches.hpp"

extern char** environ;

namespace weft {
namespace {

using test::two_switches;

using test::Daemon;

std::unique_ptr<fabricd::FabricGsi> attach(const std::string& name, std::uint32_t hca) {
  io::FabricAttachOptions o;
  o.hca = hca;
  auto r = fabricd::FabricGsi::connect(name, o);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r).value() : nullptr;
}

// The status line of HCA index h, and one "key value" field of it.
std::string hca_line(const std::string& name, std::uint32_t h) {
  std::string st;
  EXPECT_TRUE(fabricd::control(name, "status", st));
  std::istringstream in(st);
  std::string line;
  while (std::getline(in, line))
    if (line.find(" hca_index " + std::to_string(h) + " ") != std::string::npos) return line;
  return {};
}
using test::field;

TEST(FabricdGsi, PathRecordQueriesFromAttachedProcesses) {
  const std::string name = "gsi-pr-" + std::to_string(getpid());
  Daemon d(name);
  ASSERT_TRUE(d.d);
  auto x = attach(name, 0);  // h0: the SM's (and the SA's) HCA
  auto y = attach(name, 3);  // h3, behind the second switch
  ASSERT_TRUE(x && y);
  ASSERT_NE(x->lid(), 0);
  ASSERT_NE(y->lid(), 0);
  // Across both switches to the SA on h0, and back.
  auto p = y->path_record(x->lid());
  ASSERT_TRUE(p.ok()) << fabricd::to_string(p.error());
  EXPECT_EQ(p->slid, y->lid());
  EXPECT_EQ(p->dlid, x->lid());
  EXPECT_EQ(p->sl, 0);
  EXPECT_EQ(p->mtu, 5);  // 4096: every port's NeighborMTU
  EXPECT_EQ(p->pkey, 0xFFFF);
  EXPECT_EQ(p->packet_life_time, 13);  // DaemonOptions::sa
  // From the SA's own HCA (the relay turns it around: no hairpin on the wire).
  auto q = x->path_record(y->lid());
  ASSERT_TRUE(q.ok()) << fabricd::to_string(q.error());
  EXPECT_EQ(q->slid, x->lid());
  EXPECT_EQ(q->dlid, y->lid());
  EXPECT_EQ(q->mtu, 5);
  // The same with the driver on its own thread (the helper waits for it).
  y->driver().start();
  auto t = y->path_record(x->lid());
  y->driver().stop();
  ASSERT_TRUE(t.ok()) << fabricd::to_string(t.error());
  EXPECT_EQ(*t, *p);
  // A LID nobody has: the SA answers, with no record.
  auto none = y->path_record(0x0BAD, 2'000'000'000);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error(), fabricd::GsiError::kSaError);
  // The MADs went through the HCAs' relays.
  const std::string l3 = hca_line(name, 3);
  EXPECT_GE(field(l3, "gsi_out"), 3u) << l3;
  EXPECT_GE(field(l3, "gsi_in"), 3u) << l3;
  EXPECT_EQ(y->gsi().gsi_stats().mads_ignored, 0u);
}

// A REQ for a service nobody listens on: the peer's CM answers REJ "invalid service ID" (IBA
// 12.6.7.2, reason 8), which connect_rc reports with its reason; the QP is not connected.
TEST(FabricdGsi, AConnectToAServiceNobodyListensOnIsRejectedWithItsReason) {
  const std::string name = "gsi-rej-" + std::to_string(getpid());
  Daemon d(name);
  ASSERT_TRUE(d.d);
  auto x = attach(name, 0);
  auto y = attach(name, 3);
  ASSERT_TRUE(x && y);
  Device& dev = x->device();
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* cq = *dev.create_cq(16);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  QueuePair* qp = *dev.create_qp(qa);
  y->driver().start();  // y's CM answers on its own thread
  auto r = x->connect_rc(*qp, y->lid(), 0x5151, {}, 5'000'000'000);
  y->driver().stop();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), fabricd::GsiError::kRejected);
  EXPECT_EQ(x->last_rej_reason(), static_cast<std::uint16_t>(wire::RejReason::kInvalidServiceId));
  EXPECT_NE(qp->state(), QpState::kRts);
}

TEST(FabricdGsi, TwoProcessesConnectThroughTheCmAndExchangeData) {
  const std::string name = "gsi-cm-" + std::to_string(getpid());
  Daemon d(name);
  ASSERT_TRUE(d.d);
  const std::uint64_t lid3 = field(hca_line(name, 3), "lid");
  ASSERT_NE(lid3, UINT64_MAX);
  auto spawn = [&](std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>(CM_PEER_PATH)};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, CM_PEER_PATH, nullptr, nullptr, argv.data(), environ), 0);
    return pid;
  };
  const pid_t passive = spawn({"--fabric", name, "--hca", "3", "--listen", "0x1234"});
  const pid_t active =
      spawn({"--fabric", name, "--hca", "0", "--connect", "0x1234", std::to_string(lid3)});
  ASSERT_GT(passive, 0);
  ASSERT_GT(active, 0);
  int sa = -1, sp = -1;
  ASSERT_EQ(waitpid(active, &sa, 0), active);
  ASSERT_EQ(waitpid(passive, &sp, 0), passive);
  EXPECT_TRUE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0) << "active: status " << sa;
  EXPECT_TRUE(WIFEXITED(sp) && WEXITSTATUS(sp) == 0) << "passive: status " << sp;
  // The CM's MADs crossed the fabric through both HCAs' relays: the active side sent at least
  // the PathRecord query, REQ, RTU and DREQ; the passive side REP and DREP. A process's last
  // MAD may still wait in its HCA's queue behind its data when it exits (the daemon sends it
  // after the hang-up), so the counts are read until they settle, for at most 5 s.
  std::string l0, l3;
  for (int i = 0; i < 500; ++i) {
    l0 = hca_line(name, 0);
    l3 = hca_line(name, 3);
    if (field(l0, "gsi_out") >= 4u && field(l3, "gsi_out") >= 2u && field(l3, "gsi_in") >= 3u)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(l0.empty() || l3.empty());  // field() of a missing line would pass any >=
  EXPECT_GE(field(l0, "gsi_out"), 4u) << l0;
  EXPECT_GE(field(l3, "gsi_out"), 2u) << l3;
  EXPECT_GE(field(l3, "gsi_in"), 3u) << l3;
}

}  // namespace
}  // namespace weft
