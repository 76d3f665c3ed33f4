// tests/io/medium_peer.hpp — the parent side of the two-process medium tests (udp_test,
// dpdk_test): forks and execs a peer (udp_peer, dpdk_peer: tests/io/peer_serve.hpp), connects an
// RC and a UD queue pair to it and checks every verb byte for byte in the peer's memory.
// Header-only, test code (gtest assertions).
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/io/direct_node.hpp"
#include "tests/io/peer_protocol.hpp"

namespace weft::test {

using io::connect_rc;
using io::connect_ud;

// One peer child and our side of the link (inline Driver mode).
template <class End>
class MediumPeer {
 public:
  // argv: the child's command line, "{fd}" standing for its end of the control socket; netns:
  // run it in that network namespace (ip netns exec).
  MediumPeer(std::size_t bytes, std::vector<std::string> argv, const typename End::Config& cfg,
             const std::string& netns = "") {
    init(bytes, std::move(argv), cfg, netns);
  }
  void init(std::size_t bytes, std::vector<std::string> argv, const typename End::Config& cfg,
            const std::string& netns) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    if (!netns.empty()) argv.insert(argv.begin(), {"ip", "netns", "exec", netns});
    child_ = fork();
    if (child_ == 0) {
      const int fd = dup(sv[1]);  // without CLOEXEC
      std::vector<char*> cargv;
      for (auto& a : argv) {
        if (a == "{fd}") a = std::to_string(fd);
        cargv.push_back(a.data());
      }
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    close(sv[1]);
    end_ = std::make_unique<End>(sv[0], 1, cfg);
    ASSERT_TRUE(end_->ok()) << end_->medium().error();
    ASSERT_TRUE(end_->introduce(1));
    Device& dev = end_->device();
    buf_.reset(
        static_cast<std::uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~std::size_t{4095})));
    pd_ = *dev.alloc_pd();
    cq_ = *dev.create_cq(1024);
    mr_ = *dev.reg_mr(pd_, buf_.get(), bytes, kAccessLocalWrite);
    QpInitAttr qa;
    qa.pd = pd_;
    qa.send_cq = qa.recv_cq = cq_;
    rc_ = *dev.create_qp(qa);
    qa.type = QpType::kUd;
    ud_ = *dev.create_qp(qa);
    auto m = end_->recv(30);
    ASSERT_TRUE(m && m->size() == sizeof info_)
        << (m ? m->size() : 0) << " " << std::strerror(errno);
    std::memcpy(&info_, m->data(), sizeof info_);
    const PeerInfo mine{rc_->qp_num(), ud_->qp_num(), 0, 0, 0, 0x999};
    end_->send(&mine, sizeof mine);
    ASSERT_EQ(connect_rc(rc_, {end_->peer_lid(), info_.rc_qpn, info_.psn}, mine.psn), Errc::kOk);
    ASSERT_EQ(connect_ud(ud_, kPeerQkey), Errc::kOk);
    AddressVector av;
    av.dlid = end_->peer_lid();
    ah_ = *dev.create_ah(pd_, av);
    ready_ = true;
  }
  ~MediumPeer() {
    if (child_ <= 0) return;
    if (ready_) {
      PeerMsg m{PeerCmd::kExit, 0, 0, 0};
      end_->send(&m, sizeof m);
    }
    for (int i = 0; i < 500; ++i) {
      int st = 0;
      if (waitpid(child_, &st, WNOHANG) == child_) {
        EXPECT_TRUE(!ready_ || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) << "peer status " << st;
        return;
      }
      usleep(10000);
    }
    ADD_FAILURE() << "peer did not exit";
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  End& end() { return *end_; }
  std::uint8_t* buf() { return buf_.get(); }

  PeerReply cmd(PeerCmd c, std::uint64_t off, std::uint32_t len, std::uint64_t seed) {
    PeerMsg m{c, len, off, seed};
    PeerReply r{0, 0, 0};
    if (!end_->send(&m, sizeof m)) return r;
    auto a = end_->recv(120);
    if (a && a->size() == sizeof r) std::memcpy(&r, a->data(), sizeof r);
    return r;
  }
  Errc post(WrOpcode op, std::uint32_t len, std::uint64_t wr_id, std::uint64_t remote_off = 0,
            std::uint64_t cmp = 0, std::uint64_t swap = 0, std::uint32_t imm = 0,
            bool signaled = true) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf_.get()), len, mr_->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    if (signaled) wr.send_flags = kSignaled;
    wr.sg_list = {&sge, len ? 1u : 0u};
    wr.remote_addr = info_.addr + remote_off;
    wr.rkey = info_.rkey;
    wr.compare_add = cmp;
    wr.swap = swap;
    wr.imm_data = imm;
    return rc_->post_send(wr);
  }
  Errc post_ud(std::uint32_t len, std::uint64_t wr_id) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf_.get()), len, mr_->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.ah = ah_;
    wr.remote_qpn = info_.ud_qpn;
    wr.remote_qkey = kPeerQkey;
    return ud_->post_send(wr);
  }
  std::vector<WorkCompletion> wait(std::size_t n, TimeNs timeout_ns = 60'000'000'000) {
    std::vector<WorkCompletion> out;
    end_->driver().run_until(
        [&] {
          WorkCompletion wc[16];
          std::size_t k;
          while ((k = cq_->poll(wc)) > 0) out.insert(out.end(), wc, wc + k);
          return out.size() >= n;
        },
        timeout_ns);
    return out;
  }

 private:
  struct FreeDeleter {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  pid_t child_ = -1;
  bool ready_ = false;
  std::unique_ptr<End> end_;
  std::unique_ptr<std::uint8_t, FreeDeleter> buf_;
  ProtectionDomain* pd_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  MemoryRegion* mr_ = nullptr;
  QueuePair* rc_ = nullptr;
  QueuePair* ud_ = nullptr;
  AddressHandle* ah_ = nullptr;
  PeerInfo info_{};
};

#define EXPECT_ONE_OK(peer)                                                     \
  do {                                                                          \
    auto wcs_ = (peer).wait(1);                                                 \
    ASSERT_EQ(wcs_.size(), 1u);                                                 \
    ASSERT_EQ(wcs_[0].status, WcStatus::kSuccess) << to_string(wcs_[0].status); \
  } while (0)

// The same checks as shm_test: WRITE, WRITE with immediate, READ and SEND of one size.
template <class P>
void check_rc_verbs(P& p, std::uint32_t size, std::uint64_t seed) {
  SCOPED_TRACE("size " + std::to_string(size) + " seed " + std::to_string(seed));
  fill_pattern(p.buf(), size, seed);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, size, 1), Errc::kOk);
  EXPECT_ONE_OK(p);
  auto r = p.cmd(PeerCmd::kCheck, 0, size, seed);
  EXPECT_EQ(r.ok, 1u) << "WRITE: first bad byte " << r.value;
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvRc, 0, 0, 5).ok, 1u);
  fill_pattern(p.buf(), size, seed + 1);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWriteWithImm, size, 2, 0, 0, 0, 0xABCD), Errc::kOk);
  EXPECT_ONE_OK(p);
  r = p.cmd(PeerCmd::kWaitRecvRc, 0, 0, 0);
  EXPECT_EQ(r.ok, 1u);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size);
  r = p.cmd(PeerCmd::kCheck, 0, size, seed + 1);
  EXPECT_EQ(r.ok, 1u) << "WRITE_WITH_IMM: first bad byte " << r.value;
  ASSERT_EQ(p.cmd(PeerCmd::kFill, 0, size, seed + 2).ok, 1u);
  std::memset(p.buf(), 0, size);
  ASSERT_EQ(p.post(WrOpcode::kRdmaRead, size, 3), Errc::kOk);
  EXPECT_ONE_OK(p);
  EXPECT_EQ(check_pattern(p.buf(), size, seed + 2), size) << "READ";
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvRc, 0, size, 6).ok, 1u);
  fill_pattern(p.buf(), size, seed + 3);
  ASSERT_EQ(p.post(WrOpcode::kSend, size, 4), Errc::kOk);
  EXPECT_ONE_OK(p);
  r = p.cmd(PeerCmd::kWaitRecvRc, 0, 0, 0);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size);
  r = p.cmd(PeerCmd::kCheck, 0, size, seed + 3);
  EXPECT_EQ(r.ok, 1u) << "SEND: first bad byte " << r.value;
}

template <class P>
void check_atomics(P& p) {
  std::uint64_t v = 0x1122334455667788ull;
  std::memcpy(p.buf(), &v, 8);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, 8, 1, 64), Errc::kOk);
  EXPECT_ONE_OK(p);
  ASSERT_EQ(p.post(WrOpcode::kAtomicFetchAndAdd, 8, 2, 64, 5), Errc::kOk);
  EXPECT_ONE_OK(p);
  std::memcpy(&v, p.buf(), 8);
  EXPECT_EQ(v, 0x1122334455667788ull) << "FETCH_ADD returns the original";
  ASSERT_EQ(p.post(WrOpcode::kAtomicCmpAndSwp, 8, 3, 64, 0x112233445566778Dull, 42), Errc::kOk);
  EXPECT_ONE_OK(p);
  std::memcpy(&v, p.buf(), 8);
  EXPECT_EQ(v, 0x112233445566778Dull) << "CMP_SWAP returns the added value";
  ASSERT_EQ(p.post(WrOpcode::kRdmaRead, 8, 4, 64), Errc::kOk);
  EXPECT_ONE_OK(p);
  std::memcpy(&v, p.buf(), 8);
  EXPECT_EQ(v, 42u) << "the swap landed";
}

template <class P>
void check_ud(P& p, std::uint32_t size, std::uint64_t seed) {
  SCOPED_TRACE("UD size " + std::to_string(size));
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvUd, 4096, size + kUdGrhBytes, 9).ok, 1u);
  fill_pattern(p.buf(), size, seed);
  ASSERT_EQ(p.post_ud(size, 7), Errc::kOk);
  EXPECT_ONE_OK(p);
  auto r = p.cmd(PeerCmd::kWaitRecvUd, 0, 0, 0);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size + kUdGrhBytes);
  r = p.cmd(PeerCmd::kCheck, 4096 + kUdGrhBytes, size, seed);
  EXPECT_EQ(r.ok, 1u) << "UD: first bad byte " << r.value;
}

}  // namespace weft::test
