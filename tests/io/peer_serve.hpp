// tests/io/peer_serve.hpp — the child side of the two-process medium tests (udp_peer,
// dpdk_peer): exposes a BYTES-long region to RC and UD traffic and answers the control messages
// of peer_protocol.hpp, checking byte for byte what the parent's verbs did to its memory. Returns
// the process's exit status (0 after kExit). Header-only, test code.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "src/io/direct_node.hpp"
#include "tests/io/peer_protocol.hpp"

namespace weft::test {

inline bool wait_wc(io::Driver& drv, CompletionQueue* cq, WorkCompletion& wc) {
  for (int i = 0; i < 300000; ++i) {
    {
      auto g = drv.lock();
      if (cq->poll({&wc, 1}) == 1) return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

// node: a MediumEnd that has been introduced to the parent.
template <class End>
int serve_peer(End& node, std::size_t bytes) {
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
  const PeerInfo mine{rc->qp_num(), ud->qp_num(), reinterpret_cast<std::uint64_t>(buf),
                      bytes,        mr->rkey(),   0x777};
  if (!node.send(&mine, sizeof mine)) return 4;
  auto theirs_msg = node.recv(30);
  if (!theirs_msg || theirs_msg->size() != sizeof(PeerInfo)) return 5;
  PeerInfo theirs;
  std::memcpy(&theirs, theirs_msg->data(), sizeof theirs);
  if (io::connect_rc(rc, {node.peer_lid(), theirs.rc_qpn, theirs.psn}, mine.psn) != Errc::kOk ||
      io::connect_ud(ud, kPeerQkey) != Errc::kOk)
    return 6;
  node.driver().start();

  std::unique_lock<std::mutex> paused;  // kPause .. kResume
  for (;;) {
    auto m = node.recv(600);
    if (!m || m->size() != sizeof(PeerMsg)) return 7;
    PeerMsg c;
    std::memcpy(&c, m->data(), sizeof c);
    PeerReply rep{1, 0, 0};
    if (c.off + c.len > bytes) {
      rep.ok = 0;
    } else {
      switch (c.cmd) {
        case PeerCmd::kFill: {
          auto g = node.driver().lock();
          fill_pattern(buf + c.off, c.len, c.seed);
          break;
        }
        case PeerCmd::kCheck: {
          auto g = node.driver().lock();
          rep.value = check_pattern(buf + c.off, c.len, c.seed);
          rep.ok = rep.value == c.len;
          break;
        }
        case PeerCmd::kPostRecvRc:
        case PeerCmd::kPostRecvUd: {
          Sge sge{reinterpret_cast<std::uint64_t>(buf + c.off), c.len, mr->lkey()};
          RecvWr wr{c.seed, {&sge, 1}};
          auto g = node.driver().lock();
          rep.ok = (c.cmd == PeerCmd::kPostRecvRc ? rc : ud)->post_recv(wr) == Errc::kOk;
          break;
        }
        case PeerCmd::kWaitRecvRc:
        case PeerCmd::kWaitRecvUd: {
          WorkCompletion wc{};
          rep.ok = wait_wc(node.driver(), c.cmd == PeerCmd::kWaitRecvRc ? rc_rcq : ud_rcq, wc);
          rep.status = static_cast<std::uint32_t>(wc.status);
          rep.value = wc.byte_len;
          break;
        }
        case PeerCmd::kPause:
          paused = node.driver().lock();
          break;
        case PeerCmd::kResume:
          if (paused.owns_lock()) paused.unlock();
          break;
        case PeerCmd::kExit:
          if (paused.owns_lock()) paused.unlock();
          node.driver().stop();
          if (std::getenv("WEFT_PEER_COUNTERS")) {
            const auto& m = node.medium().counters();
            const auto& d = node.device().counters();
            std::fprintf(stderr,
                         "peer: medium tx %llu rx %llu bad_icrc %llu malformed %llu "
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

}  // namespace weft::test
