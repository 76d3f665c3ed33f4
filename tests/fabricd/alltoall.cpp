// tests/fabricd/alltoall.cpp — a rank of `weft run`: attaches to WEFT_FABRIC, exchanges QP numbers
// with every other rank over abstract sockets "weft/fabric/<F>/rank/<r>", RDMA WRITEs a block to
// each peer, then SENDs it a note; checks every block it received byte for byte. Exit 0 = all
// correct. `--crash R`: rank R aborts after attaching (the launcher must name it). With
// WEFT_RANK_DIR the exchange goes through files there instead (ranks in other network
// namespaces, attached to the daemons of a fabric across hosts).
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

struct Info {
  std::uint32_t from, lid, qpn;
  std::uint32_t rkey;
  std::uint64_t addr;
};

// WEFT_RANK_DIR: the exchange through files in a directory every rank sees, for ranks that share
// no abstract socket namespace (attached to daemons in different network namespaces: a fabric
// across hosts). Rank r writes "r.p" (its Info for p) and reads "p.r".
bool exchange_dir(const std::string& dir, int rank, const std::vector<Info>& mine,
                  std::vector<Info>& theirs) {
  const int size = static_cast<int>(mine.size());
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::string f = dir + "/" + std::to_string(rank) + "." + std::to_string(p);
    FILE* out = std::fopen((f + ".tmp").c_str(), "wb");
    if (!out || std::fwrite(&mine[p], sizeof mine[p], 1, out) != 1 || std::fclose(out) != 0 ||
        std::rename((f + ".tmp").c_str(), f.c_str()) != 0)
      return false;
  }
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::string f = dir + "/" + std::to_string(p) + "." + std::to_string(rank);
    bool got = false;
    for (int t = 0; t < 2000 && !got; ++t) {
      if (FILE* in = std::fopen(f.c_str(), "rb")) {
        got = std::fread(&theirs[p], sizeof theirs[p], 1, in) == 1;
        std::fclose(in);
      }
      if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!got || theirs[p].from != static_cast<std::uint32_t>(p)) return false;
  }
  return true;
}

// Listens on our name "<base><rank>", sends our Info to every peer, collects theirs. 0 or the
// exit code of what failed.
int exchange_sockets(const std::string& base, int rank, const std::vector<Info>& mine,
                     std::vector<Info>& theirs) {
  const int size = static_cast<int>(mine.size());
  const int ls = io::fabric_proto::listen_abstract(base + std::to_string(rank));
  if (ls < 0) return 13;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    int s = -1;
    for (int t = 0; t < 2000 && s < 0; ++t) {
      s = io::fabric_proto::connect_abstract(base + std::to_string(p));
      if (s < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (s < 0) return 14;
    if (send(s, &mine[p], sizeof mine[p], MSG_NOSIGNAL) != sizeof mine[p]) return 15;
    close(s);
  }
  for (int k = 0; k < size - 1; ++k) {
    const int s = accept(ls, nullptr, nullptr);
    Info in{};
    if (s < 0 || recv(s, &in, sizeof in, MSG_WAITALL) != sizeof in ||
        in.from >= static_cast<std::uint32_t>(size))
      return 16;
    theirs[in.from] = in;
    close(s);
  }
  close(ls);
  return 0;
}

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
  std::vector<Info> mine(size), theirs(size);
  for (int p = 0; p < size; ++p)
    if (p != rank)
      mine[p] = {static_cast<std::uint32_t>(rank), a.lid(), qps[p]->qp_num(), rmr->rkey(),
                 reinterpret_cast<std::uint64_t>(recv_buf.data() + kBlock * p)};
  if (const char* dir = std::getenv("WEFT_RANK_DIR")) {
    if (!exchange_dir(dir, rank, mine, theirs)) return 13;
  } else if (const int rc = exchange_sockets(std::string("weft/fabric/") + fab + "/rank/", rank,
                                             mine, theirs)) {
    return rc;
  }
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    if (io::connect_rc(qps[p], {static_cast<std::uint16_t>(theirs[p].lid), theirs[p].qpn, 0}, 0) !=
        Errc::kOk)
      return 17;
    Sge s{reinterpret_cast<std::uint64_t>(&notes[64 * p]), 64, nmr->lkey()};
    if (qps[p]->post_recv(RecvWr{static_cast<std::uint64_t>(1000 + p), {&s, 1}}) != Errc::kOk)
      return 12;
  }
  // A peer not yet at RTR drops the first packets; RC retries them.
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    Sge s{reinterpret_cast<std::uint64_t>(send_buf.data() + kBlock * p), kBlock, smr->lkey()};
    SendWr w;
    w.wr_id = p;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = {&s, 1};
    w.remote_addr = theirs[p].addr;
    w.rkey = theirs[p].rkey;
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
  // Stay attached until every peer has its acknowledgements (a short linger).
  a.driver().run_until([] { return false; }, 200'000'000);
  return 0;
}
