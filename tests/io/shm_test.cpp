// tests/io/shm_test.cpp — direct mode over the shared-memory medium between two processes: this
// test forks and execs io_peer, drives every verb at it and has the peer check its memory byte for
// byte, on the zero-copy path (cross-memory attach), the copy path (through the ring) and between
// buffers of shared-memory pools (shm_pool.hpp: one memcpy, no system call). Also:
// SIGKILL of the peer ends in RETRY_EXC_ERR + flushed WRs within a bound, and nothing is left
// behind (no child process, nothing in /dev/shm).
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/eventfd.h>
#include <sys/mman.h>

#include <weft/forwarding_device.hpp>

#include "emu/fabricd/stub_device.hpp"
#include "src/io/direct_node.hpp"
#include "src/io/driver.hpp"
#include "tests/io/peer_protocol.hpp"

namespace weft::io {
namespace {

using test::PeerCmd;

// Weft's entries in /dev/shm (it makes none: segments are memfds). Only names with "weft" count:
// other programs on the machine, and tests running in parallel, come and go there (seen: a
// "PID:0:0" entry of another process failing this check).
std::set<std::string> dev_shm_entries() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (n.find("weft") != std::string::npos) out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}
const std::set<std::string> g_dev_shm_at_start = dev_shm_entries();

std::string children_of_self() {
  std::string all;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
      std::string s;
      std::getline(f, s);
      all += s;
    }
    closedir(d);
  }
  return all;
}

// One io_peer child and our side of the connection (inline Driver mode).
class Peer {
 public:
  // pools: both buffers come from shared-memory pools, each mapped by the other side.
  Peer(std::size_t bytes, bool zero_copy, RcOptions rc = {}, bool pools = false) : bytes_(bytes) {
    static int counter = 0;
    name_ = "io-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    auto l = DirectListener::bind(name_);
    EXPECT_TRUE(l.ok());
    if (!l) return;
    child_ = fork();
    if (child_ == 0) {
      if (!zero_copy) setenv("WEFT_SHM_ZERO_COPY", "0", 1);
      const std::string b = std::to_string(bytes);
      execl(IO_PEER_PATH, "io_peer", name_.c_str(), b.c_str(), pools ? "pool" : nullptr,
            static_cast<char*>(nullptr));
      _exit(127);
    }
    DirectOptions o;
    o.zero_copy = zero_copy;
    auto n = (*l)->accept(o);
    EXPECT_TRUE(n.ok()) << (n ? "" : to_string(n.error()));
    if (!n) return;
    node_ = std::move(*n);
    Device& dev = node_->device();
    if (pools) {
      // The peer shares first (io_peer), then maps ours.
      pool_ = shm::ShmPool::create(bytes);
      EXPECT_TRUE(pool_);
      if (!pool_) return;
      pool_buf_ = static_cast<std::uint8_t*>(pool_->alloc(bytes));
      const bool shared =
          node_->accept_pool(30'000'000'000).ok() && node_->share_pool(*pool_, 30'000'000'000).ok();
      EXPECT_TRUE(shared);
      if (!shared) return;
    } else {
      buf_.reset(static_cast<std::uint8_t*>(
          std::aligned_alloc(4096, (bytes + 4095) & ~std::size_t{4095})));
    }
    pd_ = *dev.alloc_pd();
    cq_ = *dev.create_cq(1024);
    mr_ = *dev.reg_mr(pd_, buf(), bytes, kAccessLocalWrite);
    QpInitAttr qa;
    qa.pd = pd_;
    qa.send_cq = qa.recv_cq = cq_;
    rc_ = *dev.create_qp(qa);
    qa.type = QpType::kUd;
    ud_ = *dev.create_qp(qa);
    auto m = node_->recv_oob(30'000'000'000);
    EXPECT_TRUE(m.ok() && m->size() == sizeof info_);
    if (!m) return;
    std::memcpy(&info_, m->data(), sizeof info_);
    const test::PeerInfo mine{rc_->qp_num(), ud_->qp_num(), 0, 0, 0, 0x999};
    node_->send_oob({reinterpret_cast<const std::uint8_t*>(&mine), sizeof mine});
    EXPECT_EQ(connect_rc(rc_, {node_->peer_lid(), info_.rc_qpn, info_.psn}, mine.psn, rc),
              Errc::kOk);
    EXPECT_EQ(connect_ud(ud_, test::kPeerQkey), Errc::kOk);
    AddressVector av;
    av.dlid = node_->peer_lid();
    ah_ = *dev.create_ah(pd_, av);
    ready_ = true;
  }
  ~Peer() {
    if (child_ > 0 && !reaped_) {
      if (ready_ && !killed_) {
        test::PeerMsg m{PeerCmd::kExit, 0, 0, 0};
        node_->send_oob({reinterpret_cast<const std::uint8_t*>(&m), sizeof m});
      }
      for (int i = 0; i < 500 && !reaped_; ++i) {
        int st = 0;
        if (waitpid(child_, &st, WNOHANG) == child_) {
          reaped_ = true;
          EXPECT_TRUE(killed_ || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
              << "io_peer status " << st;
        } else {
          usleep(10000);
        }
      }
      if (!reaped_) {
        ADD_FAILURE() << "io_peer did not exit";
        kill(child_, SIGKILL);
        waitpid(child_, nullptr, 0);
      }
    }
  }
  bool ready() const { return ready_; }
  DirectNode& node() { return *node_; }
  std::uint8_t* buf() { return pool_ ? pool_buf_ : buf_.get(); }
  QueuePair* rc() { return rc_; }

  test::PeerReply cmd(PeerCmd c, std::uint64_t off, std::uint32_t len, std::uint64_t seed) {
    test::PeerMsg m{c, len, off, seed};
    test::PeerReply r{0, 0, 0};
    if (!node_->send_oob({reinterpret_cast<const std::uint8_t*>(&m), sizeof m})) return r;
    auto a = node_->recv_oob(120'000'000'000);
    if (a && a->size() == sizeof r) std::memcpy(&r, a->data(), sizeof r);
    return r;
  }
  Errc post(WrOpcode op, std::uint32_t len, std::uint64_t wr_id, std::uint64_t remote_off = 0,
            std::uint64_t cmp = 0, std::uint64_t swap = 0, std::uint32_t imm = 0,
            std::uint64_t local_off = 0) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf() + local_off), len, mr_->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, len ? 1u : 0u};
    wr.remote_addr = info_.addr + remote_off;
    wr.rkey = info_.rkey;
    wr.compare_add = cmp;
    wr.swap = swap;
    wr.imm_data = imm;
    return rc_->post_send(wr);
  }
  Errc post_ud(std::uint32_t len, std::uint64_t wr_id) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf()), len, mr_->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.ah = ah_;
    wr.remote_qpn = info_.ud_qpn;
    wr.remote_qkey = test::kPeerQkey;
    return ud_->post_send(wr);
  }
  // Drives our Driver until n completions arrived (or timeout); returns them.
  std::vector<WorkCompletion> wait(std::size_t n, TimeNs timeout_ns = 60'000'000'000) {
    std::vector<WorkCompletion> out;
    node_->driver().run_until(
        [&] {
          WorkCompletion wc[16];
          std::size_t k;
          while ((k = cq_->poll(wc)) > 0) out.insert(out.end(), wc, wc + k);  // drain
          return out.size() >= n;
        },
        timeout_ns);
    return out;
  }
  void kill_child() {
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    killed_ = reaped_ = true;
  }

 private:
  struct FreeDeleter {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::size_t bytes_;
  std::string name_;
  pid_t child_ = -1;
  bool ready_ = false, killed_ = false, reaped_ = false;
  std::unique_ptr<DirectNode> node_;
  std::unique_ptr<std::uint8_t, FreeDeleter> buf_;
  std::unique_ptr<shm::ShmPool> pool_;  // with pools: buf() is pool_buf_, a block of pool_
  std::uint8_t* pool_buf_ = nullptr;
  ProtectionDomain* pd_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  MemoryRegion* mr_ = nullptr;
  QueuePair* rc_ = nullptr;
  QueuePair* ud_ = nullptr;
  AddressHandle* ah_ = nullptr;
  test::PeerInfo info_{};
};

#define EXPECT_ONE_OK(peer)                                                     \
  do {                                                                          \
    auto wcs_ = (peer).wait(1);                                                 \
    ASSERT_EQ(wcs_.size(), 1u);                                                 \
    ASSERT_EQ(wcs_[0].status, WcStatus::kSuccess) << to_string(wcs_[0].status); \
  } while (0)

// WRITE, WRITE with immediate, READ and SEND of one size, every byte checked on the other side.
void check_rc_verbs(Peer& p, std::uint32_t size, std::uint64_t seed) {
  SCOPED_TRACE("size " + std::to_string(size) + " seed " + std::to_string(seed));
  // WRITE: our pattern lands in the peer's region.
  test::fill_pattern(p.buf(), size, seed);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, size, 1), Errc::kOk);
  EXPECT_ONE_OK(p);
  auto r = p.cmd(PeerCmd::kCheck, 0, size, seed);
  EXPECT_EQ(r.ok, 1u) << "WRITE: first bad byte " << r.value;
  // WRITE with immediate: consumes a receive; the immediate and length arrive.
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvRc, 0, 0, 5).ok, 1u);
  test::fill_pattern(p.buf(), size, seed + 1);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWriteWithImm, size, 2, 0, 0, 0, 0xABCD), Errc::kOk);
  EXPECT_ONE_OK(p);
  r = p.cmd(PeerCmd::kWaitRecvRc, 0, 0, 0);
  EXPECT_EQ(r.ok, 1u);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size);
  r = p.cmd(PeerCmd::kCheck, 0, size, seed + 1);
  EXPECT_EQ(r.ok, 1u) << "WRITE_WITH_IMM: first bad byte " << r.value;
  // READ: the peer's pattern comes back into our buffer.
  ASSERT_EQ(p.cmd(PeerCmd::kFill, 0, size, seed + 2).ok, 1u);
  std::memset(p.buf(), 0, size);
  ASSERT_EQ(p.post(WrOpcode::kRdmaRead, size, 3), Errc::kOk);
  EXPECT_ONE_OK(p);
  EXPECT_EQ(test::check_pattern(p.buf(), size, seed + 2), size) << "READ";
  // SEND into a posted receive.
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvRc, 0, size, 6).ok, 1u);
  test::fill_pattern(p.buf(), size, seed + 3);
  ASSERT_EQ(p.post(WrOpcode::kSend, size, 4), Errc::kOk);
  EXPECT_ONE_OK(p);
  r = p.cmd(PeerCmd::kWaitRecvRc, 0, 0, 0);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size);
  r = p.cmd(PeerCmd::kCheck, 0, size, seed + 3);
  EXPECT_EQ(r.ok, 1u) << "SEND: first bad byte " << r.value;
}

void check_atomics(Peer& p) {
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

void check_ud(Peer& p, std::uint32_t size, std::uint64_t seed) {
  SCOPED_TRACE("UD size " + std::to_string(size));
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvUd, 4096, size + kUdGrhBytes, 9).ok, 1u);
  test::fill_pattern(p.buf(), size, seed);
  ASSERT_EQ(p.post_ud(size, 7), Errc::kOk);
  EXPECT_ONE_OK(p);
  auto r = p.cmd(PeerCmd::kWaitRecvUd, 0, 0, 0);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  EXPECT_EQ(r.value, size + kUdGrhBytes);
  r = p.cmd(PeerCmd::kCheck, 4096 + kUdGrhBytes, size, seed);
  EXPECT_EQ(r.ok, 1u) << "UD: first bad byte " << r.value;
}

class ShmPaths : public ::testing::TestWithParam<bool> {};

TEST_P(ShmPaths, EveryVerbByteExactFromOneByteToThreeMiB) {
  const bool zc = GetParam();
  Peer p(4 << 20, zc);
  ASSERT_TRUE(p.ready());
  EXPECT_EQ(p.node().zero_copy_tx(), zc);
  EXPECT_EQ(p.node().zero_copy_rx(), zc);
  std::uint64_t seed = 100;
  for (std::uint32_t size :
       {1u, 8u, 1000u, 1023u, 1024u, 1025u, 4096u, 4097u, 65539u, (1u << 20) + 5, 3u << 20}) {
    check_rc_verbs(p, size, seed += 10);
    if (HasFatalFailure()) return;
  }
  check_atomics(p);
  for (std::uint32_t size : {1u, 1000u, 1024u, 4096u}) check_ud(p, size, seed += 10);
  const auto& c = p.node().medium().counters();
  if (zc) {
    EXPECT_GT(c.tx_by_ref, 0u) << "large payloads travel by reference";
    EXPECT_GT(c.cma_calls, 0u) << "READ responses are pulled across";
    EXPECT_EQ(c.cma_errors, 0u);
  } else {
    EXPECT_EQ(c.tx_by_ref, 0u);
    EXPECT_EQ(c.rx_by_ref, 0u);
    EXPECT_EQ(c.cma_calls, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Io, ShmPaths, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "ZeroCopy" : "Copy"; });

// Buffers from shared-memory pools, with cross-memory attach switched off: payloads of 1 KiB and
// more still travel by reference (the peer maps the pool) and each lands with one memcpy by the
// receiver — no process_vm_readv at all.
TEST(Shm, EveryVerbByteExactBetweenSharedPoolBuffers) {
  Peer p(4 << 20, false, {}, true);
  ASSERT_TRUE(p.ready());
  EXPECT_FALSE(p.node().zero_copy_tx());
  EXPECT_FALSE(p.node().zero_copy_rx());
  std::uint64_t seed = 700;
  for (std::uint32_t size : {1u, 8u, 1023u, 1024u, 4097u, 65539u, (1u << 20) + 5, 3u << 20}) {
    check_rc_verbs(p, size, seed += 10);
    if (HasFatalFailure()) return;
  }
  check_atomics(p);
  for (std::uint32_t size : {1u, 1024u, 4096u}) check_ud(p, size, seed += 10);
  const auto& c = p.node().medium().counters();
  EXPECT_GT(c.tx_by_ref, 0u) << "WRITE and SEND payloads by reference into the shared pool";
  EXPECT_GT(c.rx_by_ref, 0u) << "READ responses by reference from the peer's pool";
  EXPECT_GT(c.pool_bytes, 0u) << "copied out of our mapping of the peer's pool";
  EXPECT_EQ(c.cma_calls, 0u) << "no cross-memory attach";
  EXPECT_EQ(c.cma_errors, 0u);
}

TEST(ShmPool, AllocatesPageBlocksAndCoalescesWhatIsFreed) {
  auto pool = shm::ShmPool::create(10 * shm::kPoolAlignBytes);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->bytes(), 10 * shm::kPoolAlignBytes);
  auto* a = static_cast<std::uint8_t*>(pool->alloc(1));
  auto* b = static_cast<std::uint8_t*>(pool->alloc(shm::kPoolAlignBytes + 1));
  auto* c = static_cast<std::uint8_t*>(pool->alloc(3 * shm::kPoolAlignBytes));
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a, pool->base());
  EXPECT_EQ(b, a + shm::kPoolAlignBytes);
  EXPECT_EQ(c, b + 2 * shm::kPoolAlignBytes);
  EXPECT_EQ(pool->free_bytes(), 4 * shm::kPoolAlignBytes);
  EXPECT_EQ(pool->alloc(5 * shm::kPoolAlignBytes), nullptr) << "larger than any free block";
  EXPECT_TRUE(pool->contains(c, 3 * shm::kPoolAlignBytes));
  EXPECT_FALSE(pool->contains(c, 8 * shm::kPoolAlignBytes));
  pool->free(b);
  pool->free(a);  // merges with b's block
  EXPECT_EQ(pool->alloc(3 * shm::kPoolAlignBytes), a) << "a and b coalesced";
  pool->free(c);
  EXPECT_EQ(pool->free_bytes(), 7 * shm::kPoolAlignBytes);
  // The same memory through a second mapping of the memfd (what the peer does).
  std::memset(a, 0x5A, 100);
  auto again = shm::ShmPool::map(dup(pool->fd()), pool->bytes());
  ASSERT_TRUE(again);
  EXPECT_NE(again->base(), pool->base());
  EXPECT_EQ(again->base()[99], 0x5A);
  EXPECT_EQ(shm::ShmPool::create(0), nullptr);
}

TEST(Shm, SixtyFourMiBMessagesOnBothPaths) {
  constexpr std::uint32_t kSize = 64u << 20;
  for (bool zc : {true, false}) {
    SCOPED_TRACE(zc ? "zero copy" : "copy");
    Peer p(kSize, zc);
    ASSERT_TRUE(p.ready());
    check_rc_verbs(p, kSize, zc ? 1 : 2);
  }
}

// Zero copy must never let a receiver read a buffer the sender has been given back. An RC WR
// completes only after the responder pulled its payload and acknowledged it; a UD send completes
// as soon as it leaves (IBA 10.8.3.1), so its payload must be copied onto the ring: here the peer
// is held (its driver cannot take packets) while our buffer is overwritten after completion.
// Copy delegation (shm_medium.hpp CopyArea): the receiver hands chunks of its copies to the
// sender, and the chunks in flight may land in any order — so two WRITEs over the same bytes,
// posted back to back (one receive burst), must still leave the second one's bytes, and two READs
// into the same local bytes the second READ's. Messages of 1 MiB make chunks of 64 KiB and more.
TEST(Shm, LaterBytesOverTheSameDestinationWinWhileThePeerCopies) {
  constexpr std::uint32_t kMsg = 1 << 20;
  setenv("WEFT_SHM_DELEGATE", "1", 1);  // both sides (the peer inherits it)
  Peer p(4 * kMsg, true);
  unsetenv("WEFT_SHM_DELEGATE");
  ASSERT_TRUE(p.ready());
  for (std::uint64_t round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::uint64_t a = 100 + 4 * round, b = a + 1, c = a + 2, d = a + 3;
    test::fill_pattern(p.buf(), kMsg, a);
    test::fill_pattern(p.buf() + kMsg, kMsg, b);
    ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, kMsg, 1, 0, 0, 0, 0, 0), Errc::kOk);
    ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, kMsg, 2, 0, 0, 0, 0, kMsg), Errc::kOk);
    auto wcs = p.wait(2);
    ASSERT_EQ(wcs.size(), 2u);
    for (const auto& wc : wcs) ASSERT_EQ(wc.status, WcStatus::kSuccess);
    auto r = p.cmd(PeerCmd::kCheck, 0, kMsg, b);
    EXPECT_EQ(r.ok, 1u) << "WRITE over WRITE: first bad byte " << r.value;
    ASSERT_EQ(p.cmd(PeerCmd::kFill, 0, kMsg, c).ok, 1u);
    ASSERT_EQ(p.cmd(PeerCmd::kFill, kMsg, kMsg, d).ok, 1u);
    std::memset(p.buf(), 0, kMsg);
    ASSERT_EQ(p.post(WrOpcode::kRdmaRead, kMsg, 3, 0), Errc::kOk);
    ASSERT_EQ(p.post(WrOpcode::kRdmaRead, kMsg, 4, kMsg), Errc::kOk);
    wcs = p.wait(2);
    ASSERT_EQ(wcs.size(), 2u);
    for (const auto& wc : wcs) ASSERT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_EQ(test::check_pattern(p.buf(), kMsg, d), kMsg) << "READ over READ";
  }
}

TEST(Shm, ABufferIsReusableOnceItsWrCompletesOnTheZeroCopyPath) {
  Peer p(1 << 20, true);
  ASSERT_TRUE(p.ready());
  ASSERT_TRUE(p.node().zero_copy_tx());
  const std::uint32_t size = 4096;  // by reference if it were allowed (>= kZeroCopyBytesMin)
  // UD: the send completes while the peer is paused; what the peer gets is what we sent.
  ASSERT_EQ(p.cmd(PeerCmd::kPostRecvUd, 8192, size + kUdGrhBytes, 9).ok, 1u);
  const std::uint64_t by_ref_before = p.node().medium().counters().tx_by_ref;
  ASSERT_EQ(p.cmd(PeerCmd::kPause, 0, 0, 0).ok, 1u);
  test::fill_pattern(p.buf(), size, 501);
  ASSERT_EQ(p.post_ud(size, 7), Errc::kOk);
  EXPECT_ONE_OK(p);
  test::fill_pattern(p.buf(), size, 502);  // the application reuses its buffer
  ASSERT_EQ(p.cmd(PeerCmd::kResume, 0, 0, 0).ok, 1u);
  auto r = p.cmd(PeerCmd::kWaitRecvUd, 0, 0, 0);
  EXPECT_EQ(r.status, static_cast<std::uint32_t>(WcStatus::kSuccess));
  r = p.cmd(PeerCmd::kCheck, 8192 + kUdGrhBytes, size, 501);
  EXPECT_EQ(r.ok, 1u) << "UD payload read after its send completed: first bad byte " << r.value;
  EXPECT_EQ(p.node().medium().counters().tx_by_ref, by_ref_before) << "UD is copied";
  // RC: the WRITE travels by reference and cannot complete while the peer is paused.
  ASSERT_EQ(p.cmd(PeerCmd::kPause, 0, 0, 0).ok, 1u);
  test::fill_pattern(p.buf(), size, 503);
  ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, size, 1), Errc::kOk);
  EXPECT_EQ(p.wait(1, 30'000'000).size(), 0u) << "completed before the responder pulled it";
  ASSERT_EQ(p.cmd(PeerCmd::kResume, 0, 0, 0).ok, 1u);
  EXPECT_ONE_OK(p);
  EXPECT_GT(p.node().medium().counters().tx_by_ref, by_ref_before);
  test::fill_pattern(p.buf(), size, 504);
  r = p.cmd(PeerCmd::kCheck, 0, size, 503);
  EXPECT_EQ(r.ok, 1u) << "WRITE: first bad byte " << r.value;
}

TEST(Shm, SigkillOfThePeerEndsInRetryExceededAndFlushWithinABound) {
  RcOptions rc;
  rc.timeout = 12;  // 16.8 ms per try, 8 tries: the bound is ~134 ms
  Peer p(1 << 20, true, rc);
  ASSERT_TRUE(p.ready());
  test::fill_pattern(p.buf(), 4096, 1);
  // No WRITE before the kill: under heavy load (load 14-16 on 2 vCPUs) a live peer can miss this
  // QP's short bound too, which ended a WRITE meant to show the peer alive in RETRY_EXC_ERR.
  ASSERT_EQ(p.cmd(PeerCmd::kCheck, 0, 0, 0).ok, 1u) << "the peer answers";
  p.kill_child();
  const TimeNs t0 = monotonic_ns();
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, 4096, 10 + i), Errc::kOk);
  auto wcs = p.wait(4, 10'000'000'000);
  const TimeNs took = monotonic_ns() - t0;
  ASSERT_EQ(wcs.size(), 4u);
  EXPECT_EQ(wcs[0].wr_id, 10u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr) << i;
  EXPECT_EQ(p.rc()->state(), QpState::kErr);
  EXPECT_LT(took, 3'000'000'000u) << "bounded: timeout x (retry_cnt + 1) plus slack";
  EXPECT_TRUE(p.node().medium().peer_dead()) << "the pidfd reported the death";
  AsyncEvent e;
  bool fatal = false;
  while (p.node().device().poll_async_event(e)) fatal |= e.type == AsyncEventType::kQpFatal;
  EXPECT_TRUE(fatal);
}

TEST(Shm, ConnectToANameNobodyListensOnTimesOut) {
  DirectOptions o;
  o.timeout_ns = 50'000'000;
  auto r = DirectNode::connect("io-test-nobody-" + std::to_string(getpid()), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), IoError::kTimeout);
}

// A DirectNode's Device takes its ACK policy from DirectOptions: delayed ACKs, and coalescing up
// to ack_coalesce_max (16 by default, a ping-pong's one signaled WRITE in 16: the ACKs for the
// unsignaled ones were a second record, and line, on every fourth reply's path).
TEST(Shm, DirectOptionsSetTheDevicesAckPolicy) {
  const std::string name = "io-test-acks-" + std::to_string(getpid());
  auto l = DirectListener::bind(name);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(DirectOptions{}.ack_coalesce_max, 16u);
  DirectOptions a;
  a.ack_coalesce_max = 7;
  a.ack_delay_ns = 30'000;
  Result<std::unique_ptr<DirectNode>, IoError> accepted = IoError::kTimeout;
  std::thread t([&] { accepted = (*l)->accept(a); });
  auto connected = DirectNode::connect(name, DirectOptions{});
  t.join();
  ASSERT_TRUE(accepted.ok());
  ASSERT_TRUE(connected.ok());
  EXPECT_EQ((*accepted)->device().config().ack_coalesce_max, 7u);
  EXPECT_EQ((*accepted)->device().config().ack_delay_ns, 30'000u);
  EXPECT_EQ((*connected)->device().config().ack_coalesce_max, 16u);
  EXPECT_EQ((*connected)->device().config().ack_delay_ns, 20'000u);
}

TEST(Shm, ANameIsTakenOnce) {
  const std::string name = "io-test-once-" + std::to_string(getpid());
  auto a = DirectListener::bind(name);
  ASSERT_TRUE(a.ok());
  auto b = DirectListener::bind(name);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error(), IoError::kAddressInUse);
}

// A Device that sends nothing and keeps the wire images it receives.
class Sink final : public fabricd::StubDevice {
 public:
  Sink() : StubDevice(DeviceConfig{}) {}
  using StubDevice::on_packet;
  void on_packet(std::span<const std::uint8_t> wire, TimeNs) override {
    got.emplace_back(wire.begin(), wire.end());
  }
  std::vector<std::vector<std::uint8_t>> got;
};

// Both ends of a link in this process (a 64 KiB ring each way), each end owning its fds.
struct LocalLink {
  static constexpr std::size_t kRing = 1 << 16;
  LocalLink() {
    const int memfd = memfd_create("weft-test", MFD_CLOEXEC);
    if (memfd < 0 || !shm::ShmMedium::format(memfd, kRing)) return;
    const int bell_ab = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int bell_ba = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    a = std::make_unique<shm::ShmMedium>(shm::ShmLinkConfig{.memfd = memfd,
                                                            .ring_bytes = kRing,
                                                            .side_a = true,
                                                            .rx_doorbell = bell_ba,
                                                            .tx_doorbell = bell_ab,
                                                            .peer_pid = getpid()});
    b = std::make_unique<shm::ShmMedium>(shm::ShmLinkConfig{.memfd = dup(memfd),
                                                            .ring_bytes = kRing,
                                                            .side_a = false,
                                                            .rx_doorbell = dup(bell_ab),
                                                            .tx_doorbell = dup(bell_ba),
                                                            .peer_pid = getpid()});
  }
  bool ok() const { return a && b && a->ok() && b->ok(); }
  std::unique_ptr<shm::ShmMedium> a, b;
};

// The fabric daemon writes its client's packets with tx_packet and leaves the publish to its
// driver's next pass, tx_burst over a Device with nothing to send: that pass must publish them
// (a burst that published only what its own Device gave left every such packet unseen).
TEST(ShmMedium, RecordsWrittenWithTxPacketArePublishedByAnIdleTxBurst) {
  constexpr std::size_t kRing = 1 << 16;
  const int memfd = memfd_create("weft-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_TRUE(shm::ShmMedium::format(memfd, kRing));
  const int bell_ab = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int bell_ba = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Both sides in this process; each owns its fds (the medium closes them).
  shm::ShmLinkConfig ca{.memfd = memfd,
                        .ring_bytes = kRing,
                        .side_a = true,
                        .rx_doorbell = bell_ba,
                        .tx_doorbell = bell_ab,
                        .peer_pid = getpid()};
  shm::ShmLinkConfig cb{.memfd = dup(memfd),
                        .ring_bytes = kRing,
                        .side_a = false,
                        .rx_doorbell = dup(bell_ab),
                        .tx_doorbell = dup(bell_ba),
                        .peer_pid = getpid()};
  shm::ShmMedium a(ca), b(cb);
  ASSERT_TRUE(a.ok() && b.ok());
  Sink idle, sink;
  // An RC SEND ONLY (IBA Table 35 opcode 0x04), LRH (LNH 2: BTH next) + BTH, 16 payload bytes.
  std::uint8_t payload[16];
  for (std::uint8_t i = 0; i < 16; ++i) payload[i] = static_cast<std::uint8_t>(0xA0 + i);
  TxPacket pkt{};
  pkt.headers[1] = 2;
  pkt.headers[8] = 0x04;
  pkt.header_bytes = 20;
  pkt.payload = payload;
  pkt.payload_bytes = sizeof payload;
  for (int i = 0; i < 3; ++i) {
    pkt.headers[19] = static_cast<std::uint8_t>(i);  // BTH PSN, low byte
    ASSERT_TRUE(a.tx_packet(idle, pkt));
  }
  EXPECT_EQ(b.rx_burst(sink, 0, 16), 0u);  // written, not yet published
  EXPECT_EQ(a.tx_burst(idle, 0, 16), 0u);  // the Device had nothing; the records go out
  // Expect: the three packets, in order, byte for byte (headers, payload, zero pad and CRCs).
  EXPECT_EQ(b.rx_burst(sink, 0, 16), 3u);
  ASSERT_EQ(sink.got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::uint8_t>& w = sink.got[static_cast<std::size_t>(i)];
    ASSERT_EQ(w.size(), pkt.wire_bytes());
    EXPECT_EQ(w[8], 0x04);
    EXPECT_EQ(w[19], i);
    EXPECT_EQ(std::memcmp(w.data() + 20, payload, sizeof payload), 0);
  }
}

// A wire record whose body fits in its first line is written with fixed-size moves
// (shm_medium.cpp kLineBodyBytes: the headers as a whole line's worth, the payload and the zeros
// in word moves). Packets of every header size the lean paths make (LRH BTH 20, + ImmDt or AETH
// 24, + RETH 36, + RETH ImmDt 40), every payload length that may take that path and beyond it,
// every pad, headers followed by junk in the TxPacket, the payload right before an inaccessible
// page. Expect: each arrives as the general layout byte for byte (its headers, its payload, pad +
// ICRC + VCRC zero), nothing past the packet's bytes is read (no fault), and no record appears
// that was not sent (nothing is written past the record's line).
TEST(ShmMedium, AOneLineWireRecordIsTheGeneralLayoutByteForByte) {
  LocalLink link;
  ASSERT_TRUE(link.ok());
  shm::ShmMedium &a = *link.a, &b = *link.b;
  const long page = sysconf(_SC_PAGESIZE);
  auto* area = static_cast<std::uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  ASSERT_EQ(mprotect(area + page, page, PROT_NONE), 0);
  std::uint8_t* const page_end = area + page;
  Sink idle, sink;
  std::size_t sent = 0;
  for (const std::uint16_t hb : {20, 24, 36, 40}) {
    for (std::uint32_t len = 0; len <= 48; ++len) {
      for (std::uint8_t pad = 0; pad < 4; ++pad) {
        TxPacket pkt{};
        for (std::size_t i = 0; i < pkt.headers.size(); ++i) pkt.headers[i] = 0xEE;  // junk
        for (std::uint16_t i = 0; i < hb; ++i)
          pkt.headers[i] = static_cast<std::uint8_t>(0x10 + i + len);
        pkt.headers[1] = 2;     // LRH.LNH: BTH next
        pkt.headers[8] = 0x04;  // RC SEND ONLY
        pkt.header_bytes = hb;
        std::uint8_t* payload = page_end - len;  // its last byte is the page's last
        for (std::uint32_t i = 0; i < len; ++i)
          payload[i] = static_cast<std::uint8_t>(0xA0 + i * 7 + pad);
        pkt.payload = len ? payload : nullptr;
        pkt.payload_bytes = len;
        pkt.pad_bytes = pad;
        ASSERT_TRUE(a.tx_packet(idle, pkt));
        a.tx_publish();
        ++sent;
        ASSERT_EQ(b.rx_burst(sink, 0, 16), 1u) << "hb " << hb << " len " << len;
        std::vector<std::uint8_t> want(pkt.headers.begin(), pkt.headers.begin() + hb);
        want.insert(want.end(), payload, payload + len);
        want.resize(want.size() + pad + 6, 0);
        ASSERT_EQ(sink.got.back(), want) << "hb " << hb << " len " << len << " pad " << int{pad};
      }
    }
  }
  EXPECT_EQ(sink.got.size(), sent);
  EXPECT_EQ(b.rx_burst(sink, 0, 16), 0u);
  munmap(area, 2 * page);
}

// A receiver stops at the end of a short batch (ring.hpp kFlagBatchEnd: the next record's line is
// the sender's until it publishes there) and takes the next batch on its next pass; nothing is
// lost or reordered by stopping. After a full batch (kPacketsPerBatch: a stream) it reads on.
TEST(ShmMedium, AReceiverStopsAtTheEndOfABatchAndTakesTheNextOnItsNextPass) {
  LocalLink link;
  ASSERT_TRUE(link.ok());
  shm::ShmMedium &a = *link.a, &b = *link.b;
  Sink idle, sink;
  std::uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  TxPacket pkt{};
  pkt.headers[1] = 2;     // LRH.LNH: BTH next
  pkt.headers[8] = 0x04;  // RC SEND ONLY
  pkt.header_bytes = 20;
  pkt.payload = payload;
  pkt.payload_bytes = sizeof payload;
  std::uint8_t psn = 0;
  // Three batches of 2, 1 and 3 packets, all published before the receiver looks.
  for (const int n : {2, 1, 3}) {
    for (int i = 0; i < n; ++i) {
      pkt.headers[19] = psn++;  // BTH PSN, low byte
      ASSERT_TRUE(a.tx_packet(idle, pkt));
    }
    a.tx_publish();
  }
  // A full batch, then one of 2: a pass reads through the full one into the next.
  for (std::size_t i = 0; i < shm::kPacketsPerBatch + 2; ++i) {
    pkt.headers[19] = psn++;
    ASSERT_TRUE(a.tx_packet(idle, pkt));
    if (i + 1 == shm::kPacketsPerBatch || i + 1 == shm::kPacketsPerBatch + 2) a.tx_publish();
  }
  // Expect: one short batch per pass, the full one with its successor, then nothing; every
  // packet in order.
  EXPECT_EQ(b.rx_burst(sink, 0, 64), 2u);
  EXPECT_EQ(b.rx_burst(sink, 0, 64), 1u);
  EXPECT_EQ(b.rx_burst(sink, 0, 64), 3u);
  EXPECT_EQ(b.rx_burst(sink, 0, 64), shm::kPacketsPerBatch + 2);
  EXPECT_EQ(b.rx_burst(sink, 0, 64), 0u);
  ASSERT_EQ(sink.got.size(), 6u + shm::kPacketsPerBatch + 2);
  for (std::size_t i = 0; i < sink.got.size(); ++i) {
    EXPECT_EQ(sink.got[i][19], i);
    EXPECT_EQ(std::memcmp(sink.got[i].data() + 20, payload, sizeof payload), 0);
  }
  EXPECT_EQ(b.counters().rx_wire, sink.got.size());
}

// Both sides of one link in this process (each owns its fds; the media close them).
struct MediumPair {
  explicit MediumPair(std::size_t ring, std::size_t by_ref_max, bool runs = false) {
    const int memfd = memfd_create("weft-test", MFD_CLOEXEC);
    const int bell_ab = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int bell_ba = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    EXPECT_TRUE(memfd >= 0 && bell_ab >= 0 && bell_ba >= 0);
    EXPECT_TRUE(shm::ShmMedium::format(memfd, ring));
    a_bell = dup(bell_ba);  // what b rings to wake a
    a = std::make_unique<shm::ShmMedium>(shm::ShmLinkConfig{.memfd = memfd,
                                                            .ring_bytes = ring,
                                                            .side_a = true,
                                                            .rx_doorbell = bell_ba,
                                                            .tx_doorbell = bell_ab,
                                                            .peer_pid = getpid(),
                                                            .run_records = runs,
                                                            .by_ref_bytes_max = by_ref_max});
    b = std::make_unique<shm::ShmMedium>(shm::ShmLinkConfig{.memfd = dup(memfd),
                                                            .ring_bytes = ring,
                                                            .side_a = false,
                                                            .rx_doorbell = dup(bell_ab),
                                                            .tx_doorbell = dup(bell_ba),
                                                            .peer_pid = getpid()});
  }
  ~MediumPair() { close(a_bell); }
  // Doorbell rings pending for a (read and reset).
  std::uint64_t rings_for_a() const {
    std::uint64_t v = 0;
    return read(a_bell, &v, sizeof v) == sizeof v ? v : 0;
  }
  std::unique_ptr<shm::ShmMedium> a, b;
  int a_bell = -1;
};

// An RC sender of 4 KiB RDMA WRITE MIDDLE packets (IBA Table 35 opcode 0x07) whose payloads lie
// in a pool the receiver maps (here: the same process), so they travel by reference.
class PoolSender final : public fabricd::StubDevice {
 public:
  static constexpr std::size_t kPayload = 4096;
  explicit PoolSender(std::size_t packets)
      : StubDevice(DeviceConfig{}), pool(packets * kPayload), left_(packets) {
    for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::uint8_t>(i * 13 + 5);
  }
  bool poll_transmit(TimeNs, TxPacket& out) override {
    if (left_ == 0) return false;
    out.headers[1] = 2;     // LRH.LNH: BTH next
    out.headers[8] = 0x07;  // RC RDMA WRITE MIDDLE
    out.header_bytes = 20;
    out.payload = pool.data() + sent * kPayload;
    out.payload_bytes = kPayload;
    --left_;
    ++sent;
    return true;
  }
  std::vector<std::uint8_t> pool;
  std::size_t sent = 0;

 private:
  std::size_t left_;
};

// The by-reference bound (ShmLinkConfig::by_ref_bytes_max): a sender never has more payload in
// unconsumed by-reference records than the bound, gets the space back only once the receiver has
// published its consumer index past those records (its bytes are not counted free before), the
// index is published within a burst every kRecordsPerPublish records (the lag is bounded) and by
// the receiver's next empty pass otherwise, and a sender that announced its wait is rung once.
TEST(ShmMedium, ByReferenceSpaceComesBackOnlyAsTheReceiverPublishesItsIndex) {
  constexpr std::size_t kBound = 40;  // packets of 4 KiB the bound admits
  MediumPair p(1 << 20, kBound * PoolSender::kPayload);
  ASSERT_TRUE(p.a->ok() && p.b->ok());
  PoolSender src(200);
  p.a->add_tx_pool(src.pool.data(), src.pool.size());
  Sink sink;
  // Expect: exactly the bound goes out, then the sender is held by it (not by the ring).
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), kBound);
  EXPECT_TRUE(p.a->tx_blocked());
  EXPECT_EQ(p.a->counters().tx_full_by_ref, 1u);
  EXPECT_EQ(p.a->counters().tx_by_ref, kBound);
  // The sender announces that it waits (as before it sleeps): nothing was freed yet.
  EXPECT_TRUE(p.a->prepare_sleep());
  // The receiver takes 5 records: too few to publish its index within the burst; the sender
  // still may not count their space free.
  EXPECT_EQ(p.b->rx_burst(sink, 0, 5), 5u);
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), 0u);
  EXPECT_EQ(p.rings_for_a(), 0u);
  // A burst of 32 more publishes the index at the 32nd record of the burst (kRecordsPerPublish):
  // the waiting sender is rung once and may send what those 32 records referred to.
  EXPECT_EQ(p.b->rx_burst(sink, 0, shm::kRecordsPerPublish), shm::kRecordsPerPublish);
  EXPECT_EQ(p.rings_for_a(), 1u);
  p.a->finish_sleep();
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), 5 + shm::kRecordsPerPublish);
  // The rest of the first 40 (3 records) are published by the receiver's next empty pass.
  EXPECT_EQ(p.b->rx_burst(sink, 0, 3), 3u);
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), 0u);
  EXPECT_GT(p.b->rx_burst(sink, 0, 512), 0u);  // the sender's second 37
  EXPECT_EQ(p.b->rx_burst(sink, 0, 512), 0u);  // empty: publishes
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), kBound);
  // Expect: every payload arrived byte for byte, in order.
  while (p.b->rx_burst(sink, 0, 512) != 0) {
  }
  ASSERT_EQ(sink.got.size(), src.sent);
  for (std::size_t i = 0; i < sink.got.size(); ++i) {
    ASSERT_EQ(sink.got[i].size(), 20 + PoolSender::kPayload + 6);
    EXPECT_EQ(std::memcmp(sink.got[i].data() + 20, src.pool.data() + i * PoolSender::kPayload,
                          PoolSender::kPayload),
              0)
        << "packet " << i;
  }
  EXPECT_EQ(p.a->counters().tx_by_ref, src.sent);
  EXPECT_EQ(p.b->counters().rx_by_ref, src.sent);
}

// ShmMedium::tx_in_flight (the Driver's cue to keep polling for the ACKs of a deep queue): true
// from the first by-reference record until a look at the consumer index, made before a sleep
// (never per idle pass: the index's line moves with every release), finds them all consumed.
TEST(ShmMedium, ByReferenceRecordsAreInFlightUntilTheConsumerIndexPassesThem) {
  MediumPair p(1 << 20, 64 * PoolSender::kPayload);
  ASSERT_TRUE(p.a->ok() && p.b->ok());
  PoolSender src(8);
  p.a->add_tx_pool(src.pool.data(), src.pool.size());
  Sink sink;
  EXPECT_FALSE(p.a->tx_in_flight());
  EXPECT_EQ(p.a->tx_burst(src, 0, 512), 8u);
  EXPECT_TRUE(p.a->tx_in_flight());
  // Nothing consumed: a sleep's look keeps them in flight.
  EXPECT_TRUE(p.a->prepare_sleep());
  p.a->finish_sleep();
  EXPECT_TRUE(p.a->tx_in_flight());
  EXPECT_EQ(p.b->rx_burst(sink, 0, 512), 8u);
  EXPECT_EQ(p.b->rx_burst(sink, 0, 512), 0u);  // the empty pass publishes the index
  EXPECT_TRUE(p.a->tx_in_flight());            // not looked at yet
  EXPECT_TRUE(p.a->prepare_sleep());
  p.a->finish_sleep();
  EXPECT_FALSE(p.a->tx_in_flight());
  ASSERT_EQ(sink.got.size(), 8u);
  for (std::size_t i = 0; i < sink.got.size(); ++i)
    EXPECT_EQ(std::memcmp(sink.got[i].data() + 20, src.pool.data() + i * PoolSender::kPayload,
                          PoolSender::kPayload),
              0)
        << "packet " << i;
}

// An RC sender of one message's RDMA WRITE MIDDLE packets (IBA Table 35 opcode 0x07) to QP 0x12,
// PSNs from `psn0` on (modulo 2^24), payloads of `len` bytes back to back in a pool the receiver
// maps (here: the same process) from offset `off`, AckReq on every `ack_every`-th packet; with
// `wire_every`, every such packet instead carries a short payload (below kZeroCopyBytesMin: copied
// onto the ring, a record of another size, so records end at varying ring positions).
class MiddleSender final : public fabricd::StubDevice {
 public:
  struct Shape {
    std::size_t packets, len, off;
    std::uint32_t psn0;
    std::size_t ack_every, wire_every;
  };
  static constexpr std::size_t kShort = 64;
  explicit MiddleSender(Shape s)
      : StubDevice(DeviceConfig{}), shape(s), pool(s.off + s.packets * s.len) {
    for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::uint8_t>(i * 29 + 3);
  }
  bool short_one(std::size_t i) const {
    return shape.wire_every && (i + 1) % shape.wire_every == 0;
  }
  bool ack_req(std::size_t i) const { return shape.ack_every && (i + 1) % shape.ack_every == 0; }
  std::uint32_t psn(std::size_t i) const {
    return static_cast<std::uint32_t>((shape.psn0 + i) & 0xFFFFFF);
  }
  // The headers packet i carries (LRH with LNH 2, BTH).
  std::array<std::uint8_t, 20> headers(std::size_t i) const {
    std::array<std::uint8_t, 20> h{};
    h[1] = 2;     // LRH.LNH: BTH next
    h[8] = 0x07;  // RC RDMA WRITE MIDDLE
    h[15] = 0x12;
    h[16] = ack_req(i) ? 0x80 : 0;
    h[17] = static_cast<std::uint8_t>(psn(i) >> 16);
    h[18] = static_cast<std::uint8_t>(psn(i) >> 8);
    h[19] = static_cast<std::uint8_t>(psn(i));
    return h;
  }
  bool poll_transmit(TimeNs, TxPacket& out) override {
    if (sent == shape.packets) return false;
    const auto h = headers(sent);
    std::memcpy(out.headers.data(), h.data(), h.size());
    out.header_bytes = h.size();
    out.payload = pool.data() + shape.off + sent * shape.len;
    out.payload_bytes = static_cast<std::uint32_t>(short_one(sent) ? kShort : shape.len);
    ++sent;
    return true;
  }
  Shape shape;
  std::vector<std::uint8_t> pool;
  std::size_t sent = 0;
};

// Expect: the receiver got exactly the packets `s` sent, in order, byte for byte: each one's
// headers (PSN, AckReq) and payload.
void expect_packets_of(const MiddleSender& s, const Sink& sink) {
  ASSERT_EQ(sink.got.size(), s.shape.packets);
  for (std::size_t i = 0; i < sink.got.size(); ++i) {
    const std::vector<std::uint8_t>& w = sink.got[i];
    const std::size_t len = s.short_one(i) ? MiddleSender::kShort : s.shape.len;
    ASSERT_EQ(w.size(), 20 + len + 6) << "packet " << i;
    const auto h = s.headers(i);
    ASSERT_EQ(std::memcmp(w.data(), h.data(), h.size()), 0) << "headers of packet " << i;
    ASSERT_EQ(std::memcmp(w.data() + 20, s.pool.data() + s.shape.off + i * s.shape.len, len), 0)
        << "payload of packet " << i;
  }
}

// Segment format 7: a run of one message's MIDDLE packets by reference travels as one record
// (ByRefRun) and reaches the receiver's Device as the same packets, byte for byte, PSN by PSN
// (across the 2^24 wrap) with AckReq where it was, for payloads of several sizes at several
// offsets. A packet that asks for an ACK ends a run; a run is never longer than a batch.
TEST(ShmMedium, ARunOfMiddlePacketsIsOneRecordAndArrivesAsItsPackets) {
  for (const MiddleSender::Shape shape : {MiddleSender::Shape{200, 4096, 0, 0, 32, 0},
                                          MiddleSender::Shape{150, 1024, 3, 0xFFFFF0, 7, 0},
                                          MiddleSender::Shape{97, 2048, 4095, 0xFFFFFE, 0, 0},
                                          MiddleSender::Shape{64, 1028, 1, 5, 5, 0}}) {
    SCOPED_TRACE(::testing::Message() << "len " << shape.len << " off " << shape.off);
    MediumPair p(1 << 20, 64 << 20, /*runs=*/true);
    ASSERT_TRUE(p.a->ok() && p.b->ok());
    MiddleSender src(shape);
    p.a->add_tx_pool(src.pool.data(), src.pool.size());
    Sink sink;
    ASSERT_EQ(p.a->tx_burst(src, 0, 512), shape.packets);  // batches of kPacketsPerBatch
    while (sink.got.size() < shape.packets) ASSERT_GT(p.b->rx_burst(sink, 0, 512), 0u);
    expect_packets_of(src, sink);
    // Expect: one record per run. A run ends at a batch's end (kPacketsPerBatch) and at a packet
    // with AckReq; a lone packet between such ends is a record of its own. Every packet went by
    // reference.
    std::size_t records = 0, runs = 0, len = 0;
    for (std::size_t i = 0; i <= shape.packets; ++i) {
      if (i == shape.packets || i % shm::kPacketsPerBatch == 0 || src.ack_req(i - 1)) {
        records += len != 0;
        runs += len > 1;
        len = 0;
      }
      ++len;
    }
    const shm::ShmCounters& tx = p.a->counters();
    const shm::ShmCounters& rx = p.b->counters();
    EXPECT_EQ(tx.tx_by_ref, shape.packets);
    EXPECT_EQ(rx.rx_by_ref, shape.packets);
    EXPECT_EQ(tx.tx_runs, runs);
    EXPECT_EQ(rx.rx_runs, runs);
    EXPECT_EQ(rx.rx_records, records);
    EXPECT_LT(records, shape.packets / 4);
  }
}

// Runs over a small ring, mixed with records of other sizes (short payloads copied onto the ring)
// so records keep ending at other positions and the ring wraps, with kSkip fillers, many times;
// a receiver whose burst bound ends inside a run takes the whole run on its next call. Without
// run records (the sender's choice, ShmLinkConfig::run_records) the same packets arrive alike.
TEST(ShmMedium, RunsAcrossTheRingsWrapArriveWholeAndInOrder) {
  for (const bool runs : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "runs " << runs);
    // 4096 lines: wrapped 3 times below. (A smaller ring holds the sender to batches of a few
    // packets: tx_batch_room reserves a 4 KiB wire record's space for each.)
    constexpr std::size_t kRing = 1 << 18;
    MediumPair p(kRing, 64 << 20, runs);
    ASSERT_TRUE(p.a->ok() && p.b->ok());
    MiddleSender src({16000, 1024, 8, 0xFFF000, 9, 4});
    p.a->add_tx_pool(src.pool.data(), src.pool.size());
    Sink sink;
    std::size_t calls = 0;
    while (src.sent < src.shape.packets || sink.got.size() < src.shape.packets) {
      ASSERT_GT(p.a->tx_burst(src, 0, 512), 0u);
      // Drained in calls of at most 5 packets: a run of 3 after 3 packets waits for the next.
      for (;;) {
        const std::size_t before = sink.got.size();
        const std::size_t got = p.b->rx_burst(sink, 0, 5);
        ASSERT_LE(got, 5u);
        ASSERT_EQ(sink.got.size(), before + got);
        if (got == 0) break;
        ++calls;
      }
    }
    expect_packets_of(src, sink);
    const shm::ShmCounters& rx = p.b->counters();
    EXPECT_GT(rx.rx_records * shm::kRecordAlign, 2 * kRing) << "the ring wrapped";
    if (runs) {
      // Runs of up to 3 by reference between the short ones (every 4th).
      EXPECT_GT(rx.rx_runs, src.shape.packets / 8);
      EXPECT_EQ(rx.rx_wire, src.shape.packets / 4);
    } else {
      EXPECT_EQ(rx.rx_runs, 0u);
      EXPECT_EQ(rx.rx_records, src.shape.packets);
    }
    EXPECT_GE(calls, src.shape.packets / 5);
  }
}

// A peer of another segment format (here: a format-6 segment, whose receiver would drop run
// records unread) is refused when the segment is mapped: ok() is false, and nothing is mapped.
TEST(ShmMedium, ASegmentOfAnotherFormatIsRefused) {
  constexpr std::size_t kRing = 1 << 16;
  const int memfd = memfd_create("weft-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_TRUE(shm::ShmMedium::format(memfd, kRing));
  {
    shm::ShmMedium same(shm::ShmLinkConfig{.memfd = dup(memfd), .ring_bytes = kRing});
    EXPECT_TRUE(same.ok());
  }
  std::uint32_t version = shm::kSegmentVersion - 1;
  ASSERT_EQ(pwrite(memfd, &version, sizeof version, offsetof(shm::SegmentHeader, version)),
            static_cast<ssize_t>(sizeof version));
  shm::ShmMedium other(shm::ShmLinkConfig{.memfd = memfd, .ring_bytes = kRing});
  EXPECT_FALSE(other.ok());
}

// A Device in front of another that loses one packet as it arrives: the first with PSN `psn`, and
// notes whether packets of the same QP came right before and after it in the same burst (the
// middle of a run).
class LoseOne final : public ForwardingDevice {
 public:
  LoseOne(Device* target, std::uint32_t psn) : ForwardingDevice(target), psn_(psn) {}
  void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) override {
    for (std::size_t i = 0; i < pkts.size(); ++i) {
      const std::uint8_t* bth = pkts[i].headers.data() + 8;
      const std::uint32_t psn = std::uint32_t{bth[9]} << 16 | std::uint32_t{bth[10]} << 8 | bth[11];
      if (lost || psn != psn_) continue;
      lost = true;
      mid_burst = i > 0 && i + 1 < pkts.size();
      target()->on_packet_burst(pkts.first(i), now);
      target()->on_packet_burst(pkts.subspan(i + 1), now);
      return;
    }
    target()->on_packet_burst(pkts, now);
  }
  bool lost = false, mid_burst = false;

 private:
  std::uint32_t psn_;
};

// Loss in the middle of a run record: two real Devices over a link with run records and zero copy
// (the "peer" is this very process), one Driver. A 256 KiB WRITE of 4 KiB packets goes as runs; the
// responder loses the packet with PSN 20, the middle of the first run, as the medium expands it.
// Expect: go-back-N recovers it (a sequence NAK, the requester resends from PSN 20, again as
// runs), the WRITE completes successfully and the destination holds the bytes exactly.
TEST(ShmMedium, APacketLostInTheMiddleOfARunIsResentAndTheDataArrivesExact) {
  constexpr std::size_t kBytes = 256 << 10;
  MediumPair p(1 << 22, 64 << 20, /*runs=*/true);
  ASSERT_TRUE(p.a->ok() && p.b->ok());
  p.a->set_zero_copy_tx(true);
  SeededRng rng{11};
  struct End {
    std::unique_ptr<Device> dev;
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(kBytes);
    MemoryRegion* mr = nullptr;
  } e[2];
  for (int i = 0; i < 2; ++i) {
    DeviceConfig c;
    c.ports[0].lid = static_cast<std::uint16_t>(i + 1);
    c.crc = CrcMode::kModel;
    e[i].dev = Device::create(c, rng);
    ProtectionDomain* pd = *e[i].dev->alloc_pd();
    e[i].cq = *e[i].dev->create_cq(64);
    e[i].mr = *e[i].dev->reg_mr(pd, e[i].buf.data(), kBytes,
                                kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = qa.recv_cq = e[i].cq;
    e[i].qp = *e[i].dev->create_qp(qa);
  }
  for (std::size_t i = 0; i < kBytes; ++i) e[0].buf[i] = static_cast<std::uint8_t>(i * 31 + 7);
  for (int i = 0; i < 2; ++i) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.access_flags = kAccessRemoteWrite | kAccessRemoteRead;
    ASSERT_EQ(e[i].qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), Errc::kOk);
    a.qp_state = QpState::kRtr;
    a.av.dlid = static_cast<std::uint16_t>(2 - i);
    a.path_mtu = Mtu::k4096;
    a.dest_qpn = e[1 - i].qp->qp_num();
    a.rq_psn = 0;
    ASSERT_EQ(e[i].qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                     kQpMaxDestRdAtomic | kQpMinRnrTimer),
              Errc::kOk);
    a.qp_state = QpState::kRts;
    a.sq_psn = 0;
    a.timeout = 14;
    ASSERT_EQ(e[i].qp->modify(
                  a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic),
              Errc::kOk);
  }
  LoseOne lose(e[1].dev.get(), 20);
  Driver drv;
  drv.attach(*e[0].dev, *p.a);
  drv.attach(lose, *p.b);
  Sge sge{reinterpret_cast<std::uint64_t>(e[0].buf.data()), kBytes, e[0].mr->lkey()};
  SendWr wr;
  wr.wr_id = 5;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = reinterpret_cast<std::uint64_t>(e[1].buf.data());
  wr.rkey = e[1].mr->rkey();
  ASSERT_EQ(e[0].qp->post_send(wr), Errc::kOk);
  WorkCompletion wc{};
  ASSERT_TRUE(drv.run_until([&] { return e[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_TRUE(lose.lost);
  EXPECT_TRUE(lose.mid_burst) << "PSN 20 came between others of its run";
  EXPECT_EQ(std::memcmp(e[1].buf.data(), e[0].buf.data(), kBytes), 0);
  const DeviceCounters& req = e[0].dev->counters();
  EXPECT_EQ(req.naks_rx_seq, 1u);
  EXPECT_GE(req.retransmit_packets, kBytes / 4096 - 20);
  EXPECT_EQ(req.timeouts, 0u);
  EXPECT_GT(p.a->counters().tx_runs, 2u);
  EXPECT_EQ(p.b->counters().rx_runs, p.a->counters().tx_runs);
  EXPECT_GE(p.b->counters().cma_bytes, kBytes);
}

// CrossMemory::place extends a pending run packet by packet without looking the source up again,
// but never past the end of the window (a peer's pool mapped here) the run started in: bytes
// beyond it are the peer's private memory, read with process_vm_readv. Here the "peer" is this
// process: its "remote" range is `priv`, and a window maps the first page of it to `pool`, which
// holds other bytes, so the test sees which way every byte came.
TEST(CrossMemory, ARunGrowsWithinItsWindowAndNotPastIt) {
  constexpr std::size_t kPage = 4096;
  std::vector<std::uint8_t> priv(3 * kPage), pool(kPage), dst(3 * kPage, 0);
  for (std::size_t i = 0; i < priv.size(); ++i) priv[i] = static_cast<std::uint8_t>(i * 7 + 1);
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::uint8_t>(0xC0 ^ i);
  shm::CrossMemory cm(getpid());
  cm.add_window(reinterpret_cast<std::uint64_t>(priv.data()), pool.data(), kPage);
  // A message's packets: contiguous on both sides, half a page each.
  for (std::size_t off = 0; off < priv.size(); off += kPage / 2)
    cm.place(dst.data() + off, priv.data() + off, kPage / 2);
  ASSERT_TRUE(cm.flush());
  // Expect: the first page from the window's mapping (memcpy), the rest by one process_vm_readv.
  EXPECT_EQ(std::memcmp(dst.data(), pool.data(), kPage), 0);
  EXPECT_EQ(std::memcmp(dst.data() + kPage, priv.data() + kPage, 2 * kPage), 0);
  EXPECT_EQ(cm.memcpy_bytes(), kPage);
  EXPECT_EQ(cm.calls(), 1u);
  EXPECT_EQ(cm.bytes(), 2 * kPage);
}

// After every test of the binary: nothing of ours survives (no child, nothing in /dev/shm).
class NoLeftovers : public ::testing::Environment {
 public:
  void TearDown() override {
    EXPECT_EQ(children_of_self(), "") << "child processes still running";
    EXPECT_EQ(dev_shm_entries(), g_dev_shm_at_start) << "/dev/shm changed";
  }
};
[[maybe_unused]] ::testing::Environment* const g_no_leftovers =
    ::testing::AddGlobalTestEnvironment(new NoLeftovers);

}  // namespace
}  // namespace weft::io
