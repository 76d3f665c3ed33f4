// tests/io/udp_peer.cpp — the child process of udp_test: `udp_peer CTRL_FD BYTES uring|mmsg IP
// PORT` opens a UdpMedium on 127.0.0.1 with the given back end, exchanges ports with the parent
// over the control socket CTRL_FD, runs its Driver on a driver thread, exposes a BYTES-long region
// to RC and UD traffic and answers the same control messages as io_peer (peer_protocol.hpp),
// checking byte for byte what the parent's verbs did to its memory. Exits 0 on kExit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "src/io/direct_node.hpp"
#include "tests/io/peer_protocol.hpp"
#include "tests/io/udp_end.hpp"

using namespace weft;

namespace {

bool wait_wc(io::Driver& drv, CompletionQueue* cq, WorkCompletion& wc) {
  for (int i = 0; i < 300000; ++i) {
    {
      auto g = drv.lock();
      if (cq->poll({&wc, 1}) == 1) return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: udp_peer CTRL_FD BYTES uring|mmsg IP PORT\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  io::udp::UdpConfig cfg;
  cfg.backend =
      std::strcmp(argv[3], "uring") == 0 ? io::udp::UdpBackend::kUring : io::udp::UdpBackend::kMmsg;
  cfg.local_ip = static_cast<std::uint32_t>(std::strtoul(argv[4], nullptr, 10));
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[5]));
  test::UdpEnd node(std::atoi(argv[1]), 2, cfg);
  if (!node.ok() || !node.introduce(2)) {
    std::fprintf(stderr, "udp_peer: %s\n", node.medium().error().c_str());
    return 3;
  }
  Device& dev = node.device();
  auto* buf =
      static_cast<std::uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~std::size_t{4095}));
  std::memset(buf, 0, bytes);
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* scq = *dev.create_cq(1024);
  CompletionQueue* rc_rcq = *dev.create_cq(1024);
  CompletionQueue* ud_rcq = *dev.create_cq(1024);
  MemoryRegion* mr =
      *dev.reg_mr(pd, buf, bytes,
                  kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = scq;
  qa.recv_cq = rc_rcq;
  QueuePair* rc = *dev.create_qp(qa);
  qa.type = QpType::kUd;
  qa.recv_cq = ud_rcq;
  QueuePair* ud = *dev.create_qp(qa);
  const test::PeerInfo mine{rc->qp_num(), ud->qp_num(), reinterpret_cast<std::uint64_t>(buf),
                            bytes,        mr->rkey(),   0x777};
  if (!node.send(&mine, sizeof mine)) return 4;
  auto theirs_msg = node.recv(30);
  if (!theirs_msg || theirs_msg->size() != sizeof(test::PeerInfo)) return 5;
  test::PeerInfo theirs;
  std::memcpy(&theirs, theirs_msg->data(), sizeof theirs);
  if (io::connect_rc(rc, {node.peer_lid(), theirs.rc_qpn, theirs.psn}, mine.psn) != Errc::kOk ||
      io::connect_ud(ud, test::kPeerQkey) != Errc::kOk)
    return 6;
  node.driver().start();

  for (;;) {
    auto m = node.recv(600);
    if (!m || m->size() != sizeof(test::PeerMsg)) return 7;
    test::PeerMsg c;
    std::memcpy(&c, m->data(), sizeof c);
    test::PeerReply rep{1, 0, 0};
    if (c.off + c.len > bytes) {
      rep.ok = 0;
    } else {
      switch (c.cmd) {
        case test::PeerCmd::kFill: {
          auto g = node.driver().lock();
          test::fill_pattern(buf + c.off, c.len, c.seed);
          break;
        }
        case test::PeerCmd::kCheck: {
          auto g = node.driver().lock();
          rep.value = test::check_pattern(buf + c.off, c.len, c.seed);
          rep.ok = rep.value == c.len;
          break;
        }
        case test::PeerCmd::kPostRecvRc:
        case test::PeerCmd::kPostRecvUd: {
          Sge sge{reinterpret_cast<std::uint64_t>(buf + c.off), c.len, mr->lkey()};
          RecvWr wr{c.seed, {&sge, 1}};
          auto g = node.driver().lock();
          rep.ok = (c.cmd == test::PeerCmd::kPostRecvRc ? rc : ud)->post_recv(wr) == Errc::kOk;
          break;
        }
        case test::PeerCmd::kWaitRecvRc:
        case test::PeerCmd::kWaitRecvUd: {
          WorkCompletion wc{};
          rep.ok =
              wait_wc(node.driver(), c.cmd == test::PeerCmd::kWaitRecvRc ? rc_rcq : ud_rcq, wc);
          rep.status = static_cast<std::uint32_t>(wc.status);
          rep.value = wc.byte_len;
          break;
        }
        case test::PeerCmd::kExit:
          node.driver().stop();
          if (std::getenv("WEFT_UDP_PEER_COUNTERS")) {
            const auto& m = node.medium().counters();
            const auto& d = node.device().counters();
            std::fprintf(stderr,
                         "udp_peer: medium tx %llu rx %llu bad_icrc %llu malformed %llu "
                         "no_route %llu; device rx %llu malformed %llu bad_dlid %llu no_qp %llu\n",
                         (unsigned long long)m.tx_packets, (unsigned long long)m.rx_packets,
                         (unsigned long long)m.rx_bad_icrc, (unsigned long long)m.rx_malformed,
                         (unsigned long long)m.tx_no_route, (unsigned long long)d.rx_packets,
                         (unsigned long long)d.rx_malformed, (unsigned long long)d.rx_bad_dlid,
                         (unsigned long long)d.rx_no_qp);
          }
          std::free(buf);
          return 0;
      }
    }
    if (!node.send(&rep, sizeof rep)) return 8;
  }
}
