// tests/io/io_peer.cpp — the child process of shm_test: `io_peer NAME BYTES [pool]` connects to
// the listener NAME in direct mode, runs its Driver on a driver thread (the threaded mode), exposes
// a BYTES-long region to RC and UD traffic, and answers control messages (peer_protocol.hpp) that
// check, byte for byte, what the parent's verbs did to its memory. With `pool` the region comes
// from a shared-memory pool (shm_pool.hpp): it shares its pool, then maps the parent's. Exits 0 on
// kExit.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "src/io/direct_node.hpp"
#include "tests/io/peer_protocol.hpp"

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
  const bool use_pool = argc == 4 && std::strcmp(argv[3], "pool") == 0;
  if (argc != 3 && !use_pool) {
    std::fprintf(stderr, "usage: io_peer NAME BYTES [pool]\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  auto r = io::DirectNode::connect(argv[1]);
  if (!r) {
    std::fprintf(stderr, "io_peer: connect: %s\n", std::string(io::to_string(r.error())).c_str());
    return 3;
  }
  io::DirectNode& node = **r;
  Device& dev = node.device();
  std::unique_ptr<io::shm::ShmPool> pool;
  std::uint8_t* buf = nullptr;
  if (use_pool) {
    pool = io::shm::ShmPool::create(bytes);
    if (!pool) return 9;
    buf = static_cast<std::uint8_t*>(pool->alloc(bytes));
    if (!node.share_pool(*pool, 30'000'000'000) || !node.accept_pool(30'000'000'000)) return 10;
  } else {
    buf = static_cast<std::uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~std::size_t{4095}));
  }
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
  if (!node.send_oob({reinterpret_cast<const std::uint8_t*>(&mine), sizeof mine})) return 4;
  auto theirs_msg = node.recv_oob(30'000'000'000);
  if (!theirs_msg || theirs_msg->size() != sizeof(test::PeerInfo)) return 5;
  test::PeerInfo theirs;
  std::memcpy(&theirs, theirs_msg->data(), sizeof theirs);
  if (io::connect_rc(rc, {node.peer_lid(), theirs.rc_qpn, theirs.psn}, mine.psn) != Errc::kOk ||
      io::connect_ud(ud, test::kPeerQkey) != Errc::kOk)
    return 6;
  node.driver().start();

  std::unique_lock<std::mutex> paused;  // kPause .. kResume
  for (;;) {
    auto m = node.recv_oob(600'000'000'000);
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
        case test::PeerCmd::kPause:
          paused = node.driver().lock();
          break;
        case test::PeerCmd::kResume:
          if (paused.owns_lock()) paused.unlock();
          break;
        case test::PeerCmd::kExit:
          if (paused.owns_lock()) paused.unlock();
          node.driver().stop();
          if (!pool) std::free(buf);
          return 0;
      }
    }
    if (!node.send_oob({reinterpret_cast<const std::uint8_t*>(&rep), sizeof rep})) return 8;
  }
}
