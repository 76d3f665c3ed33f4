// tests/fabricd/alltoall.cpp — a rank of `weft run`: attaches to WEFT_FABRIC, exchanges QP numbers
// with every other rank over abstract sockets "weft/fabric/<F>/rank/<r>", RDMA WRITEs a block to
// each peer, then SENDs it a note; checks every block it received byte for byte. Exit 0 = all
// correct. Two barriers on the side channel frame the traffic: nobody sends before every QP is
// at RTR, and nobody leaves before every rank's WRs completed. `--crash R`: rank R aborts after
// attaching (the launcher must name it). With WEFT_RANK_DIR the exchange goes through files there
// instead (ranks in other network namespaces, attached to the daemons of a fabric across hosts).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "src/io/fabric_attach.hpp"

using namespace weft;

namespace {

constexpr std::size_t kBlock = 64 * 1024;

// How long a rank waits for its peers at each step of the side channel.
constexpr std::chrono::seconds kOobWait{30};
// How long the Driver runs between two looks at the side channel while a barrier waits.
constexpr TimeNs kOobSliceNs = 1'000'000;

// What the ranks tell each other outside the fabric. Step kInfo carries the sender's QP and
// buffer for the receiver; the barrier steps carry only `step` and `from`.
enum Step : std::uint32_t {
  kInfo = 0,
  kReady = 1,  // every QP of the sender is at RTR with its receive posted
  kDone = 2,   // every WR of the sender completed and its blocks checked
  kSteps = 3,
};
struct Msg {
  std::uint32_t step, from, lid, qpn;
  std::uint32_t rkey, pad;
  std::uint64_t addr;
};

// The ranks' side channel: over abstract sockets "<base><rank>" (one SEQPACKET connection per
// message), or with WEFT_RANK_DIR through files in a directory every rank sees, for ranks that
// share no abstract socket namespace (attached to daemons in different network namespaces: a
// fabric across hosts; rank r writes "<step>.r.p" for p and reads "<step>.p.r"). Messages of
// a later step may arrive before this rank looks for them: each is kept by step and sender.
class Oob {
 public:
  Oob(int rank, int size) : rank_(rank), size_(size), got_(kSteps * size), have_(kSteps * size) {}
  ~Oob() {
    if (ls_ >= 0) close(ls_);
  }
  // 0 or the exit code of what failed.
  int open(const std::string& base, const char* dir) {
    base_ = base;
    if (dir) {
      dir_ = dir;
      return 0;
    }
    ls_ = io::fabric_proto::listen_abstract(base_ + std::to_string(rank_));
    return ls_ < 0 || fcntl(ls_, F_SETFL, O_NONBLOCK) != 0 ? 13 : 0;
  }
  bool send(int to, Msg m) {
    m.from = static_cast<std::uint32_t>(rank_);
    if (!dir_.empty()) {
      const std::string f = file(m.step, rank_, to);
      FILE* out = std::fopen((f + ".tmp").c_str(), "wb");
      return out && std::fwrite(&m, sizeof m, 1, out) == 1 && std::fclose(out) == 0 &&
             std::rename((f + ".tmp").c_str(), f.c_str()) == 0;
    }
    int s = -1;
    for (int t = 0; t < 2000 && s < 0; ++t) {  // the peer may not listen yet
      s = io::fabric_proto::connect_abstract(base_ + std::to_string(to));
      if (s < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (s < 0) return false;
    const bool ok = ::send(s, &m, sizeof m, MSG_NOSIGNAL) == sizeof m;
    close(s);
    return ok;
  }
  bool send_all(Step step) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !send(p, Msg{step, 0, 0, 0, 0, 0, 0})) return false;
    return true;
  }
  // True once every peer's message of `step` is here; `idle()` runs between looks.
  template <class Idle>
  bool wait_all(Step step, Idle idle) {
    const auto end = std::chrono::steady_clock::now() + kOobWait;
    while (!all(step)) {
      if (std::chrono::steady_clock::now() > end) return false;
      idle();
    }
    return true;
  }
  const Msg& from(Step step, int p) const { return got_[step * size_ + p]; }

 private:
  std::string file(std::uint32_t step, int from, int to) const {
    return dir_ + "/" + std::to_string(step) + "." + std::to_string(from) + "." +
           std::to_string(to);
  }
  void keep(const Msg& m) {
    if (m.step >= kSteps || m.from >= static_cast<std::uint32_t>(size_)) return;
    got_[m.step * size_ + m.from] = m;
    have_[m.step * size_ + m.from] = true;
  }
  bool all(Step step) {
    if (dir_.empty()) {
      for (int s; (s = accept(ls_, nullptr, nullptr)) >= 0; close(s)) {
        Msg m{};
        if (recv(s, &m, sizeof m, MSG_WAITALL) == sizeof m) keep(m);
      }
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || have_[step * size_ + p]) continue;
      if (dir_.empty()) return false;
      FILE* in = std::fopen(file(step, p, rank_).c_str(), "rb");
      if (!in) return false;
      Msg m{};
      const bool ok = std::fread(&m, sizeof m, 1, in) == 1;
      std::fclose(in);
      if (!ok || m.step != step || m.from != static_cast<std::uint32_t>(p)) return false;
      keep(m);
    }
    return true;
  }

  int rank_, size_;
  std::string base_, dir_;
  int ls_ = -1;
  std::vector<Msg> got_;  // by step, then sender
  std::vector<bool> have_;
};

std::uint8_t pattern(int from, int to, std::size_t i) {
  return static_cast<std::uint8_t>(i * 7 + from * 31 + to * 101 + (i >> 9));
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::atoi(std::getenv("WEFT_RANK") ? std::getenv("WEFT_RANK") : "-1");
  const int size = std::atoi(std::getenv("WEFT_SIZE") ? std::getenv("WEFT_SIZE") : "0");
  const char* fab = std::getenv("WEFT_FABRIC");
  if (rank < 0 || size < 1 || !fab) return 10;
  int crash = -1;
  if (argc == 3 && std::strcmp(argv[1], "--crash") == 0) crash = std::atoi(argv[2]);
  auto at = io::FabricAttach::connect("");
  if (!at.ok()) return 11;
  io::FabricAttach& a = **at;
  if (rank == crash) std::abort();
  Device& dev = a.device();
  const std::size_t bytes = kBlock * static_cast<std::size_t>(size);
  std::vector<std::uint8_t> send_buf(bytes), recv_buf(bytes, 0), notes(64 * size, 0);
  for (int to = 0; to < size; ++to)
    for (std::size_t i = 0; i < kBlock; ++i) send_buf[to * kBlock + i] = pattern(rank, to, i);
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* cq = *dev.create_cq(4096);
  MemoryRegion* smr = *dev.reg_mr(pd, send_buf.data(), bytes, kAccessLocalWrite);
  MemoryRegion* rmr =
      *dev.reg_mr(pd, recv_buf.data(), bytes, kAccessLocalWrite | kAccessRemoteWrite);
  MemoryRegion* nmr = *dev.reg_mr(pd, notes.data(), notes.size(), kAccessLocalWrite);
  std::vector<QueuePair*> qps(size, nullptr);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qps[p] = *dev.create_qp(qa);
  }
  Oob oob(rank, size);
  if (const int rc =
          oob.open(std::string("weft/fabric/") + fab + "/rank/", std::getenv("WEFT_RANK_DIR")))
    return rc;
  for (int p = 0; p < size; ++p)
    if (p != rank &&
        !oob.send(p, Msg{kInfo, 0, a.lid(), qps[p]->qp_num(), rmr->rkey(), 0,
                         reinterpret_cast<std::uint64_t>(recv_buf.data() + kBlock * p)}))
      return 15;
  if (!oob.wait_all(kInfo, [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }))
    return 14;
  // The local ACK timeout (IBA 9.7.6.1.3) must outlast the fabric's queueing, and an emulated
  // fabric's queues drain only as fast as its daemons get a CPU: with 6 ranks on 3 daemons
  // (9 processes on the loaded 2-vCPU machine) a rank's packets waited more than the default
  // 67 ms x 8 tries behind a switch input buffer whose credits come back through a tunnel (its
  // HCA's to_fabric queue still held ~300 packets when it hit RETRY_EXC, with nothing dropped
  // anywhere), and each early retry re-queued a whole block. 1.07 s per try instead.
  io::RcOptions rc;
  rc.timeout = 18;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const Msg& t = oob.from(kInfo, p);
    if (io::connect_rc(qps[p], {static_cast<std::uint16_t>(t.lid), t.qpn, 0}, 0, rc) != Errc::kOk)
      return 17;
    Sge s{reinterpret_cast<std::uint64_t>(&notes[64 * p]), 64, nmr->lkey()};
    if (qps[p]->post_recv(RecvWr{static_cast<std::uint64_t>(1000 + p), {&s, 1}}) != Errc::kOk)
      return 12;
  }
  // Nobody sends before every QP is at RTR: a packet to a QP still in INIT is dropped, and a
  // rank slower than the sender's whole retry budget (7 retries of 67 ms) would make it
  // RETRY_EXC (as 6 ranks on 3 daemons on the loaded 2-vCPU machine did).
  auto drive = [&] { a.driver().run_until([] { return false; }, kOobSliceNs); };
  if (!oob.send_all(kReady) || !oob.wait_all(kReady, drive)) return 23;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    Sge s{reinterpret_cast<std::uint64_t>(send_buf.data() + kBlock * p), kBlock, smr->lkey()};
    SendWr w;
    w.wr_id = p;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = {&s, 1};
    w.remote_addr = oob.from(kInfo, p).addr;
    w.rkey = oob.from(kInfo, p).rkey;
    if (qps[p]->post_send(w) != Errc::kOk) return 18;
    SendWr n;
    n.wr_id = 100 + p;
    n.opcode = WrOpcode::kSend;
    n.send_flags = kSignaled;
    Sge ns{reinterpret_cast<std::uint64_t>(send_buf.data()), 4, smr->lkey()};
    n.sg_list = {&ns, 1};
    if (qps[p]->post_send(n) != Errc::kOk) return 19;
  }
  int sends = 0, recvs = 0;
  const bool ok = a.driver().run_until(
      [&] {
        WorkCompletion wc[16];
        const std::size_t k = cq->poll(std::span<WorkCompletion>(wc, 16));
        for (std::size_t i = 0; i < k; ++i) {
          if (wc[i].status != WcStatus::kSuccess) {
            std::fprintf(stderr, "rank %d: wr %llu failed: %s\n", rank,
                         static_cast<unsigned long long>(wc[i].wr_id),
                         std::string(to_string(wc[i].status)).c_str());
            std::exit(20);
          }
          (wc[i].wr_id >= 1000 ? recvs : sends)++;
        }
        return sends == size - 1 && recvs == size - 1;
      },
      30'000'000'000);
  if (!ok) return 21;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    for (std::size_t i = 0; i < kBlock; ++i)
      if (recv_buf[p * kBlock + i] != pattern(p, rank, i)) {
        std::fprintf(stderr, "rank %d: byte %zu from rank %d wrong\n", rank, i, p);
        return 22;
      }
  }
  // Stay attached, answering, until every peer's WRs completed too: our ACK of a peer's last
  // packet may be lost or late, and its retry must find our QP (a fixed linger was not enough
  // under load). Once every rank is done nothing is outstanding anywhere.
  if (!oob.send_all(kDone) || !oob.wait_all(kDone, drive)) return 24;
  return 0;
}
