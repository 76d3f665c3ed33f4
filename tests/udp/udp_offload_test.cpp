// tests/udp/udp_offload_test.cpp — the UDP medium's offloads and its io_uring fall-back, between
// two processes on loopback (this test and tests/io's udp_peer, which it forks and execs):
// - GSO runs (UDP_SEGMENT) and GRO receives (UDP_GRO) carry every verb byte for byte, each alone,
//   both, and neither (WEFT_UDP_GSO=0 / WEFT_UDP_GRO=0 reach the peer through the environment),
//   and the counters show which were used;
// - with io_uring_setup refused (a seccomp filter in a child, as container runtimes install), a
//   medium asked for io_uring falls back to sendmmsg/recvmmsg and still carries every verb.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "src/io/udp/udp_medium.hpp"
#include "tests/io/medium_peer.hpp"
#include "tests/io/udp_end.hpp"

namespace weft::io::udp {
namespace {

class Peer : public test::MediumPeer<test::UdpEnd> {
 public:
  Peer(std::size_t bytes, const UdpConfig& cfg)
      : MediumPeer(bytes,
                   {UDP_PEER_PATH, "{fd}", std::to_string(bytes),
                    cfg.backend == UdpBackend::kUring ? "uring" : "mmsg",
                    std::to_string(cfg.local_ip), "0"},
                   cfg) {}
};

// Sizes that make runs of every shape: one packet, a short run, 1 MiB (FIRST alone, then runs of
// full MIDDLEs, a LAST that may be shorter), and a READ of it (the peer's runs come to us).
void check_sizes(Peer& p, std::uint64_t seed) {
  for (std::uint32_t size : {1u, 4097u, 65539u, (1u << 20) + 5}) {
    test::check_rc_verbs(p, size, seed += 10);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

struct Case {
  const char* name;
  bool gso, gro;  // our end's UdpConfig
  bool env_off;   // WEFT_UDP_GSO=0 WEFT_UDP_GRO=0 for both ends
};

class Offloads : public ::testing::TestWithParam<Case> {};

TEST_P(Offloads, EveryVerbByteExact) {
  const Case c = GetParam();
  if (c.env_off) {
    setenv("WEFT_UDP_GSO", "0", 1);
    setenv("WEFT_UDP_GRO", "0", 1);
  }
  UdpConfig cfg;
  cfg.port = 0;
  cfg.backend = UdpBackend::kMmsg;
  cfg.gso = c.gso;
  cfg.gro = c.gro;
  {
    Peer p(4 << 20, cfg);
    if (c.env_off) {
      unsetenv("WEFT_UDP_GSO");
      unsetenv("WEFT_UDP_GRO");
    }
    ASSERT_TRUE(p.ready());
    const UdpMedium& m = p.end().medium();
    EXPECT_EQ(m.gso(), c.gso && !c.env_off);
    EXPECT_EQ(m.gro(), c.gro && !c.env_off);
    check_sizes(p, 300);
    const auto& k = m.counters();
    EXPECT_EQ(k.rx_bad_icrc, 0u);
    EXPECT_EQ(k.rx_malformed, 0u);
    EXPECT_EQ(k.tx_errors, 0u);
    // Our WRITEs of 1 MiB leave in runs when we use GSO; the peer's READ responses arrive as
    // runs when we use GRO and the peer uses GSO (on loopback a run is never cut on the way).
    if (m.gso())
      EXPECT_GT(k.tx_gso_runs, 0u);
    else
      EXPECT_EQ(k.tx_gso_runs, 0u);
    if (m.gro() && !c.env_off)
      EXPECT_GT(k.rx_gro_runs, 0u);
    else
      EXPECT_EQ(k.rx_gro_runs, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Udp, Offloads,
                         ::testing::Values(Case{"Both", true, true, false},
                                           Case{"GsoIntoNoGro", true, false, false},
                                           Case{"GroOnly", false, true, false},
                                           Case{"NeitherByEnvironment", true, true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Makes io_uring_setup fail with EPERM in this process and its children, as the default seccomp
// profiles of Docker and containerd do. seccomp(2): a classic BPF program over seccomp_data.
bool block_io_uring() {
  sock_filter prog[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog fp{static_cast<unsigned short>(sizeof prog / sizeof prog[0]), prog};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) == 0;
}

TEST(UdpFallback, WithIoUringRefusedTheMediumUsesSendmmsgAndCarriesEveryVerb) {
  // In a child: the filter cannot be removed, and gtest's failures there are reported through
  // the exit status (the child's messages go to the same output).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!block_io_uring()) _exit(3);
    UdpConfig cfg;
    cfg.port = 0;
    cfg.backend = UdpBackend::kUring;
    {
      Peer p(4 << 20, cfg);  // udp_peer, asked for io_uring too, inherits the filter
      if (!p.ready()) _exit(4);
      if (p.end().medium().backend() != UdpBackend::kMmsg) _exit(5);
      check_sizes(p, 500);
    }
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: no seccomp here, 4: no link, 5: not sendmmsg, 1: a check";
}

}  // namespace
}  // namespace weft::io::udp
