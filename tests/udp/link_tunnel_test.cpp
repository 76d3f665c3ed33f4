// tests/udp/link_tunnel_test.cpp — fabric links between two daemons over UDP
// (emu/fabricd/link_tunnel): between two network namespaces joined by a veth pair that the test
// creates and removes, a child in the second namespace echoes every frame it receives; LRH
// packets of every VL (a 256-byte SMP on VL15, 4 KiB-payload data packets) and flow-control
// packets come back byte for byte. Corrupted, truncated and foreign datagrams are counted and
// dropped; lost ones show as sequence gaps. Endpoint parsing (IPv4, [IPv6]:port).
#include <fcntl.h>
#include <sys/socket.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/fabricd/link_tunnel.hpp"
#include <weft/types.hpp>
#include "src/io/clock.hpp"
#include "src/wire/packet.hpp"

namespace weft::fabricd {
namespace {

bool sh(const std::string& c) {
  return std::system(c.c_str()) == 0;
}

// A veth pair: end a in our namespace (10.215.x.1), end b in a namespace of its own (.2).
class Netns {
 public:
  Netns() {
    const std::string id = std::to_string(getpid() % 100000);
    ns_ = "weft-lt-" + id;
    a_ = "wlta" + id;
    b_ = "wltb" + id;
    const unsigned x = static_cast<unsigned>(getpid()) % 250 + 1;
    net_ = "10.215." + std::to_string(x) + ".";
    ok_ = sh("ip netns add " + ns_) && sh("ip link add " + a_ + " type veth peer name " + b_) &&
          sh("ip link set " + b_ + " netns " + ns_) &&
          sh("ip addr add " + net_ + "1/24 dev " + a_) &&
          sh("ip link set " + a_ + " mtu 9000 up") &&
          sh("ip -n " + ns_ + " addr add " + net_ + "2/24 dev " + b_) &&
          sh("ip -n " + ns_ + " link set " + b_ + " mtu 9000 up");
  }
  ~Netns() {
    sh("ip link del " + a_ + " 2>/dev/null");
    sh("ip netns del " + ns_ + " 2>/dev/null");
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return ns_; }
  std::string ip(int which) const { return net_ + std::to_string(which); }

 private:
  std::string ns_, a_, b_, net_;
  bool ok_ = false;
};

// An LRH (LNH "IBA local") + BTH + payload + ICRC + VCRC image on `vl`.
std::vector<std::uint8_t> lrh_packet(std::uint8_t vl, std::uint16_t dlid, std::uint16_t slid,
                                     std::size_t payload, SeededRng& rng) {
  std::vector<std::uint8_t> p(wire::kLrhBytes + wire::kBthBytes + payload + 4 + 2);
  const std::size_t words = (p.size() - 2) / 4;
  p[0] = static_cast<std::uint8_t>(vl << 4);
  p[1] = 0x02;
  p[2] = static_cast<std::uint8_t>(dlid >> 8);
  p[3] = static_cast<std::uint8_t>(dlid);
  p[4] = static_cast<std::uint8_t>(words >> 8);
  p[5] = static_cast<std::uint8_t>(words);
  p[6] = static_cast<std::uint8_t>(slid >> 8);
  p[7] = static_cast<std::uint8_t>(slid);
  for (std::size_t i = wire::kLrhBytes; i < p.size() - 6; ++i)
    p[i] = static_cast<std::uint8_t>(rng.next_u64());
  const std::size_t icrc_at = p.size() - 6;
  wire::put_icrc(std::span<std::uint8_t, 4>(p.data() + icrc_at, 4),
                 wire::icrc(std::span<const std::uint8_t>(p.data(), wire::kLrhBytes + 12),
                            std::span<const std::uint8_t>(p.data() + 20, payload)));
  wire::put_vcrc(std::span<std::uint8_t, 2>(p.data() + p.size() - 2, 2),
                 wire::vcrc(std::span<const std::uint8_t>(p.data(), p.size() - 2)));
  return p;
}

// The child: enters the namespace, opens its end and echoes every frame until a hello on
// link 0xFFFF (or 10 s of silence).
[[noreturn]] void echo_child(const std::string& ns, const TunnelEndpoint& me,
                             const TunnelEndpoint& peer, int ready_fd) {
  const int nsfd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) _exit(10);
  LinkTunnel t(me, peer);
  if (!t.ok()) _exit(11);
  if (write(ready_fd, "r", 1) != 1) _exit(12);
  bool done = false;
  TimeNs last = io::monotonic_ns();
  while (!done && io::monotonic_ns() - last < 10'000'000'000) {
    const std::size_t n = t.poll([&](const LinkTunnel::Frame& f) {
      switch (f.kind) {
        case TunnelKind::kPacket:
          t.send_packet(f.link, f.body);
          break;
        case TunnelKind::kFlowControl:
          t.send_fc(f.link, f.fc);
          break;
        case TunnelKind::kHello:
          if (f.link == 0xFFFF) {  // the end: report what this end dropped
            done = true;
            const auto& c = t.counters();
            t.send_hello(static_cast<std::uint16_t>(c.rx_bad_crc << 8 | c.rx_malformed));
          } else {
            t.send_hello(f.link);
          }
          break;
      }
      if (t.queued() >= 32) t.flush();
    });
    t.flush();
    if (n)
      last = io::monotonic_ns();
    else
      usleep(100);  // a test peer: a short back-off, not a spin
  }
  _exit(done ? 0 : 13);
}

TEST(LinkTunnel, EndpointsParse) {
  TunnelEndpoint e;
  ASSERT_TRUE(parse_endpoint("10.1.2.3:5000", e));
  EXPECT_EQ(e.host, "10.1.2.3");
  EXPECT_EQ(e.port, 5000);
  ASSERT_TRUE(parse_endpoint("10.1.2.3", e));
  EXPECT_EQ(e.port, kLinkTunnelPort);
  ASSERT_TRUE(parse_endpoint("[fd00::1]:6000", e));
  EXPECT_EQ(e.host, "fd00::1");
  EXPECT_EQ(e.port, 6000);
  ASSERT_TRUE(parse_endpoint("::1", e));
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, kLinkTunnelPort);
  ASSERT_TRUE(parse_endpoint("host.example:1", e));  // a name: resolved when the tunnel opens
  EXPECT_EQ(e.host, "host.example");
  EXPECT_EQ(e.port, 1);
  for (const char* bad : {"10.1.2.3:0", "10.1.2.3:70000", "[::1", "[::1]x", "10.1.2.3:12a", "",
                          "host:", ":5000", "[]:5000"})
    EXPECT_FALSE(parse_endpoint(bad, e)) << bad;
  LinkTunnel mixed({"127.0.0.1", 0}, {"::1", 1});
  EXPECT_FALSE(mixed.ok());
  EXPECT_NE(mixed.error().find("different families"), std::string::npos) << mixed.error();
}

// Host names go through getaddrinfo: "localhost" (/etc/hosts) in the family asked for; a name
// that does not resolve is an error that names it (RFC 6761: .invalid never resolves).
TEST(LinkTunnel, HostNamesResolveAndUnresolvableOnesAreNamed) {
  auto v4 = resolve_endpoint({"localhost", 4000}, AF_INET);
  ASSERT_TRUE(v4.ok()) << v4.error();
  EXPECT_EQ(v4.value().to_string(), "127.0.0.1:4000");
  auto lit6 = resolve_endpoint({"::1", 4001}, AF_UNSPEC);
  ASSERT_TRUE(lit6.ok()) << lit6.error();
  EXPECT_EQ(lit6.value().to_string(), "[::1]:4001");
  auto bad = resolve_endpoint({"no-such-host.invalid", 4000}, AF_UNSPEC);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("cannot resolve host 'no-such-host.invalid'"), std::string::npos)
      << bad.error();
  auto wrong = resolve_endpoint({"127.0.0.1", 4000}, AF_INET6);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error(), "host '127.0.0.1' has no IPv6 address");
  LinkTunnel t({"127.0.0.1", 0},
               std::vector<TunnelEndpoint>{{"localhost", 9}, {"nope.invalid", 9}});
  EXPECT_FALSE(t.ok());
  EXPECT_NE(t.error().find("'nope.invalid'"), std::string::npos) << t.error();
}

// One tunnel, two peers (a fabric split over three daemons), on loopback with three ports: each
// frame goes to the peer asked for and arrives tagged with the peer it came from; sequence
// numbers run per peer and link, so interleaving peers on one link loses nothing; a sender that
// is no peer is counted as foreign.
TEST(LinkTunnel, SeveralPeersOnOneSocket) {
  const auto base = static_cast<std::uint16_t>(21000 + getpid() % 9000 * 3);
  const TunnelEndpoint ea{"127.0.0.1", base}, eb{"localhost", static_cast<std::uint16_t>(base + 1)},
      ec{"127.0.0.1", static_cast<std::uint16_t>(base + 2)};
  LinkTunnel a(ea, std::vector<TunnelEndpoint>{eb, ec}), b(eb, ea), c(ec, ea);
  if (!a.ok() || !b.ok() || !c.ok()) GTEST_SKIP() << "loopback ports taken: " << a.error();
  EXPECT_EQ(a.peer_count(), 2u);
  EXPECT_EQ(a.peer_address(0).to_string(), "127.0.0.1:" + std::to_string(base + 1));
  for (std::uint8_t i = 0; i < 10; ++i) {
    const std::uint8_t body[1] = {i};
    ASSERT_TRUE(a.send_hello_to(i % 2, 7, body));
  }
  a.flush();
  std::vector<int> at_b, at_c;
  for (int spin = 0; spin < 1000 && at_b.size() + at_c.size() < 10; ++spin) {
    b.poll([&](const LinkTunnel::Frame& f) { at_b.push_back(f.body[0]); });
    c.poll([&](const LinkTunnel::Frame& f) { at_c.push_back(f.body[0]); });
    if (at_b.size() + at_c.size() < 10) usleep(1000);
  }
  EXPECT_EQ(at_b, (std::vector<int>{0, 2, 4, 6, 8}));
  EXPECT_EQ(at_c, (std::vector<int>{1, 3, 5, 7, 9}));
  EXPECT_EQ(b.counters().rx_lost + c.counters().rx_lost, 0u);
  // Answers: the frame says which peer it came from.
  ASSERT_TRUE(c.send_hello(7));
  c.flush();
  ASSERT_TRUE(b.send_hello(7));
  b.flush();
  std::vector<std::size_t> from;
  for (int spin = 0; spin < 1000 && from.size() < 2; ++spin) {
    a.poll([&](const LinkTunnel::Frame& f) { from.push_back(f.peer); });
    if (from.size() < 2) usleep(1000);
  }
  std::sort(from.begin(), from.end());
  EXPECT_EQ(from, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(a.counters().rx_lost, 0u);
  LinkTunnel stranger({"127.0.0.1", 0}, ea);
  ASSERT_TRUE(stranger.ok()) << stranger.error();
  ASSERT_TRUE(stranger.send_hello(7));
  stranger.flush();
  for (int spin = 0; spin < 1000 && a.counters().rx_foreign == 0; ++spin) {
    a.poll([](const LinkTunnel::Frame&) { ADD_FAILURE() << "a stranger's frame was handed on"; });
    if (a.counters().rx_foreign == 0) usleep(1000);
  }
  EXPECT_EQ(a.counters().rx_foreign, 1u);
}

TEST(LinkTunnel, FramesCrossTwoNamespacesByteExact) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to create a network namespace and a veth pair (ip netns add)";
  if (!sh("command -v ip >/dev/null 2>&1")) GTEST_SKIP() << "iproute2 not installed";
  std::string ns_name;
  {
    Netns ns;
    ns_name = ns.name();
    ASSERT_TRUE(ns.ok()) << "could not set up namespace " << ns.name();
    const TunnelEndpoint a{ns.ip(1), kLinkTunnelPort}, b{ns.ip(2), kLinkTunnelPort};
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t child = fork();
    if (child == 0) echo_child(ns.name(), b, a, ready[1]);
    close(ready[1]);
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child could not open its end";
    close(ready[0]);
    LinkTunnel t(a, b);
    ASSERT_TRUE(t.ok()) << t.error();

    // What goes out: a 256-byte SMP on VL15 (link 0), data packets on VL0..VL7 up to 4 KiB of
    // payload (links 0..2), flow-control packets of every data VL.
    SeededRng rng(7);
    std::vector<std::pair<std::uint16_t, std::vector<std::uint8_t>>> sent;
    sent.emplace_back(0, lrh_packet(15, 0xFFFF, 1, 256, rng));
    for (int i = 0; i < 300; ++i) {
      const std::size_t payload =
          i % 3 == 0 ? 4096 : static_cast<std::size_t>(rng.next_u64() % 4096);
      sent.emplace_back(static_cast<std::uint16_t>(i % 3),
                        lrh_packet(static_cast<std::uint8_t>(i % 8), 2, 1, payload & ~3u, rng));
    }
    std::vector<link::FcPacket> fcs;
    for (std::uint8_t vl = 0; vl < 8; ++vl)
      fcs.push_back({vl == 0 ? link::FcOp::kInit : link::FcOp::kNormal,
                     static_cast<std::uint16_t>(100 * vl + 1), vl,
                     static_cast<std::uint16_t>(4095 - vl)});

    std::vector<std::pair<std::uint16_t, std::vector<std::uint8_t>>> got;
    std::vector<link::FcPacket> got_fc;
    bool bye = false;
    std::uint16_t child_report = 0;
    bool greeted = false;
    const auto on = [&](const LinkTunnel::Frame& f) {
      if (f.kind == TunnelKind::kPacket)
        got.emplace_back(f.link, std::vector(f.body.begin(), f.body.end()));
      if (f.kind == TunnelKind::kFlowControl) got_fc.push_back(f.fc);
      if (f.kind == TunnelKind::kHello && f.link == 0xFFFE) {
        greeted = true;
      } else if (f.kind == TunnelKind::kHello) {
        bye = true;
        child_report = f.link;
      }
    };
    // Hellos until one comes back (as a link trains): the neighbours are resolved both ways, so
    // nothing is lost to ARP while the packets go.
    const TimeNs until = io::monotonic_ns() + 10'000'000'000;
    for (int i = 0; !greeted && io::monotonic_ns() < until; ++i) {
      if (i % 100 == 0) {
        t.send_hello(0xFFFE);
        t.flush();
      }
      if (!t.poll(on)) usleep(100);
    }
    ASSERT_TRUE(greeted) << "no hello came back";
    std::size_t next = 0;
    while (got.size() < sent.size() && io::monotonic_ns() < until) {
      // At most 32 packets in flight each way: the echo's buffers never overflow.
      for (; next < sent.size() && next < got.size() + 32; ++next)
        ASSERT_TRUE(t.send_packet(sent[next].first, sent[next].second));
      t.flush();
      if (!t.poll(on)) usleep(50);
    }
    for (const auto& fc : fcs) ASSERT_TRUE(t.send_fc(5, fc));
    t.flush();
    while (got_fc.size() < fcs.size() && io::monotonic_ns() < until)
      if (!t.poll(on)) usleep(50);

    ASSERT_EQ(got.size(), sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(got[i].first, sent[i].first) << "packet " << i;
      EXPECT_EQ(got[i].second, sent[i].second) << "packet " << i;
    }
    EXPECT_EQ(got[0].second[0] >> 4, 15) << "the SMP stays on VL15";
    ASSERT_EQ(got_fc.size(), fcs.size());
    for (std::size_t i = 0; i < fcs.size(); ++i) EXPECT_EQ(got_fc[i], fcs[i]) << "fc " << i;

    // Damage on the way: a flipped payload bit (bad VCRC) and a truncated packet (length no
    // longer what the LRH says) are counted and dropped by the child, which echoes nothing of
    // them: only the good packet after them comes back. A datagram from a stranger is dropped
    // here.
    std::vector<std::uint8_t> p = lrh_packet(0, 2, 1, 64, rng);
    std::vector<std::uint8_t> flipped = p;
    flipped[30] ^= 0x10;
    ASSERT_TRUE(t.send_packet(1, flipped));
    ASSERT_TRUE(t.send_packet(1, std::span(p).first(p.size() - 4)));
    t.flush();
    {
      LinkTunnel stranger({ns.ip(1), 0}, a);
      ASSERT_TRUE(stranger.ok()) << stranger.error();
      ASSERT_TRUE(stranger.send_hello(9));
      stranger.flush();
    }
    const std::size_t before = got.size();
    ASSERT_TRUE(t.send_packet(1, p));
    t.send_hello(0xFFFF);
    t.flush();
    while (!bye && io::monotonic_ns() < until)
      if (!t.poll(on)) usleep(50);
    EXPECT_TRUE(bye);
    EXPECT_EQ(child_report, 0x0101) << "the child's rx_bad_crc << 8 | rx_malformed";
    ASSERT_EQ(got.size(), before + 1);
    EXPECT_EQ(got.back().second, p);
    EXPECT_EQ(t.counters().rx_foreign, 1u);
    EXPECT_EQ(t.counters().rx_lost, 0u);
    EXPECT_EQ(t.counters().tx_packets, sent.size() + 3);
    EXPECT_EQ(t.counters().rx_packets, sent.size() + 1);
    EXPECT_EQ(t.counters().rx_fc, fcs.size());
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
  }
  EXPECT_FALSE(sh("ip netns list | grep -q '^" + ns_name + "\\b'")) << "namespace left behind";
}

// Loss injection on the receive side (no root: one tunnel on loopback whose peer is itself):
// about the asked share of the frames is dropped, counted in rx_dropped and seen as sequence
// gaps (rx_lost); the same seed drops the same frames.
std::vector<std::uint16_t> received_after_drop(std::uint64_t seed, TunnelCounters& k) {
  std::vector<std::uint16_t> got;
  for (std::uint16_t port = static_cast<std::uint16_t>(20000 + getpid() % 20000), n = 0; n < 50;
       ++n, ++port) {
    LinkTunnel t({"127.0.0.1", port}, {"127.0.0.1", port});
    if (!t.ok()) continue;
    t.set_rx_drop(0.1, seed);
    constexpr int kFrames = 2000;
    for (int i = 0; i < kFrames;) {
      for (int j = 0; j < 32 && i < kFrames; ++j, ++i) {
        std::uint8_t body[2] = {static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)};
        EXPECT_TRUE(t.send_hello(3, body));
      }
      t.flush();
      for (int spin = 0; spin < 1000 && t.poll([&](const LinkTunnel::Frame& f) {
             got.push_back(static_cast<std::uint16_t>(f.body[0] << 8 | f.body[1]));
           }) == 0;
           ++spin)
        usleep(100);
    }
    for (int spin = 0; spin < 20; ++spin) {
      t.poll([&](const LinkTunnel::Frame& f) {
        got.push_back(static_cast<std::uint16_t>(f.body[0] << 8 | f.body[1]));
      });
      usleep(1000);
    }
    k = t.counters();
    return got;
  }
  ADD_FAILURE() << "no free loopback port";
  return got;
}

TEST(LinkTunnel, RxDropIsSeededAndCounted) {
  TunnelCounters k1, k2, k3;
  const auto a = received_after_drop(11, k1);
  const auto b = received_after_drop(11, k2);
  const auto c = received_after_drop(12, k3);
  EXPECT_EQ(a.size() + k1.rx_dropped, 2000u);
  EXPECT_GT(k1.rx_dropped, 120u);  // 10 % of 2000 is 200
  EXPECT_LT(k1.rx_dropped, 280u);
  EXPECT_EQ(k1.rx_hello, a.size());
  // Every drop but trailing ones shows as a gap.
  EXPECT_LE(k1.rx_lost, k1.rx_dropped);
  EXPECT_GE(k1.rx_lost + 10, k1.rx_dropped);
  EXPECT_EQ(a, b) << "seed 11 dropped different frames in two runs";
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace weft::fabricd
