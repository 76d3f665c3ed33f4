// tests/ofi/dpdk_mr_test.cpp — memory registration reaches the DPDK medium (FI_WEFT_MEDIUM=dpdk,
// a net_memif pair between two forked processes, each with its own EAL): fi_mr_reg registers the
// buffer with the medium (DpdkMedium::register_memory) and fi_close of the MR unregisters it,
// read through the provider's extension ops (src/ofi/fi_weft_ext.h: the medium's region count
// and its zero-copy transmit counter). Rank 1 RDMA-WRITEs 16 KiB and sends 8 KiB from one
// registered buffer; rank 0 checks both byte for byte, and rank 1 that every packet of them went
// by reference. With WEFT_DPDK_REGIONS_MAX=2 (the medium's limit), a third registration fails
// with -FI_EIO and leaves the medium as it was; after a close there is room again.
// Exit 0 when both ranks exited 0; each is bounded by alarm(), and the parent kills the other
// when one fails. An attempt cut off by the alarm (the provider's known hang over dpdk, see
// kAttemptsMax) is tried again on a net_memif of its own.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "src/ofi/fi_weft_ext.h"
#include "tests/common/fd_io.hpp"

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr std::size_t kWriteBytes = 16384;  // four packets at the 4 KiB MTU
constexpr std::size_t kSendBytes = 8192;
constexpr std::size_t kBufBytes = kWriteBytes + kSendBytes;
// The medium's zero_copy_min_bytes (DpdkConfig): payloads from here on go by reference, so every
// packet of both transfers at any MTU the provider offers (256..4096) from 1 KiB.
constexpr std::size_t kZeroCopyMinBytes = 1024;
constexpr int kRegionsMax = 2;    // WEFT_DPDK_REGIONS_MAX for both ranks
constexpr unsigned kAlarmS = 20;  // per attempt; one takes ~2 s
// Over dpdk, about one run in four (main's provider alike, dpdk12) never sends a packet: the
// RDM connection is not set up and both ranks wait for ever. Until that is fixed, such an
// attempt (cut off by the alarm) is tried again, as fi_pingpong_test.sh does.
constexpr int kAttemptsMax = 3;
// fi_close of an MR answering -FI_EBUSY is tried again this often, a progress pass apart.
constexpr int kCloseTriesMax = 1000;

int g_rank = -1;

#define CHECK(x)                                                       \
  do {                                                                 \
    long r_ = static_cast<long>(x);                                    \
    if (r_ < 0) {                                                      \
      std::fprintf(stderr, "rank %d: %s = %ld (%s)\n", g_rank, #x, r_, \
                   fi_strerror(static_cast<int>(-r_)));                \
      std::_Exit(2);                                                   \
    }                                                                  \
  } while (0)
#define EXPECT(c, ...)                                        \
  do {                                                        \
    if (!(c)) {                                               \
      std::fprintf(stderr, "rank %d: ", g_rank);              \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fprintf(stderr, " (%s, line %d)\n", #c, __LINE__); \
      std::_Exit(4);                                          \
    }                                                         \
  } while (0)

using weft::test_util::full_read;
using weft::test_util::full_write;

std::uint8_t byte_at(std::size_t i) {
  return static_cast<std::uint8_t>(i * 13 + (i >> 8) + 5);
}

// What rank 0 tells rank 1: where to write.
struct Target {
  char addr[kAddrMax];
  std::uint64_t key, base;
};

struct Fi {
  fi_info* hints = nullptr;
  fi_info* info = nullptr;
  fid_fabric* fab = nullptr;
  fid_domain* dom = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fi_weft_domain_ops* ops = nullptr;

  void open() {
    hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->fabric_attr->prov_name = strdup("weft");
    hints->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
    CHECK(fi_fabric(info->fabric_attr, &fab, nullptr));
    CHECK(fi_domain(fab, info, &dom, nullptr));
    CHECK(fi_open_ops(&dom->fid, FI_WEFT_DOMAIN_OPS_1, 0, reinterpret_cast<void**>(&ops), nullptr));
    EXPECT(ops && ops->size >= sizeof(fi_weft_domain_ops), "no extension ops");
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    CHECK(fi_av_open(dom, &aa, &av, nullptr));
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_CONTEXT;
    ca.wait_obj = FI_WAIT_UNSPEC;
    CHECK(fi_cq_open(dom, &ca, &cq, nullptr));
    CHECK(fi_endpoint(dom, info, &ep, nullptr));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(ep));
  }
  fi_weft_medium_stats stats() const {
    fi_weft_medium_stats s{};
    CHECK(ops->medium_stats(dom, &s));
    return s;
  }
  void wait_one() const {
    fi_cq_entry e;
    for (;;) {
      const ssize_t r = fi_cq_sread(cq, &e, 1, nullptr, 100);
      if (r == -FI_EAGAIN) continue;
      if (r == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq, &err, 0);
        EXPECT(false, "completion error %d (%s)", err.err, fi_strerror(err.err));
      }
      CHECK(r);
      return;
    }
  }
  // fi_close of an MR, retried (with a progress pass) while the medium still holds a transmit.
  void close_mr(fid_mr* mr) const {
    for (int i = 0;; ++i) {
      const int r = fi_close(&mr->fid);
      if (r != -FI_EBUSY || i == kCloseTriesMax) {
        CHECK(r);
        return;
      }
      fi_cq_entry e;
      (void)fi_cq_read(cq, &e, 0);
      usleep(100);
    }
  }
  void close() {
    fi_close(&ep->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
  }
};

// The target: one registered buffer for the WRITE, a receive into plain memory for the send.
int target(int sock) {
  Fi fi;
  fi.open();
  std::vector<std::uint8_t> dst(kWriteBytes, 0), rbuf(kSendBytes, 0);
  fid_mr* mr;
  CHECK(fi_mr_reg(fi.dom, dst.data(), dst.size(), FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr));
  EXPECT(fi.stats().regions == 1, "%llu regions after fi_mr_reg",
         (unsigned long long)fi.stats().regions);
  Target t{};
  std::size_t alen = sizeof t.addr;
  CHECK(fi_getname(&fi.ep->fid, t.addr, &alen));
  t.key = fi_mr_key(mr);
  t.base = reinterpret_cast<std::uintptr_t>(dst.data());
  CHECK(fi_recv(fi.ep, rbuf.data(), rbuf.size(), nullptr, FI_ADDR_UNSPEC, nullptr));
  if (!full_write(sock, &t, sizeof t)) return 3;
  char peer_addr[kAddrMax];
  fi_addr_t peer;
  if (!full_read(sock, peer_addr, sizeof peer_addr)) return 3;
  CHECK(fi_av_insert(fi.av, peer_addr, 1, &peer, 0, nullptr));
  // Traffic only once both know each other: over dpdk, a target that has not inserted the
  // initiator yet when its first packets come never completes the WRITE (src/ofi/README.md,
  // known issue).
  char go = 1;
  if (!full_write(sock, &go, 1)) return 3;
  fi.wait_one();  // the send, which RC delivers after the WRITE sent before it
  for (std::size_t i = 0; i < kWriteBytes; ++i)
    EXPECT(dst[i] == byte_at(i), "written byte %zu is %u", i, dst[i]);
  for (std::size_t i = 0; i < kSendBytes; ++i)
    EXPECT(rbuf[i] == byte_at(kWriteBytes + i), "received byte %zu is %u", i, rbuf[i]);
  // Both done before either closes (the peer may still need our ACKs).
  char done = 1;
  if (!full_write(sock, &done, 1) || !full_read(sock, &done, 1)) return 3;
  fi.close_mr(mr);
  EXPECT(fi.stats().regions == 0, "%llu regions after fi_close of the MR",
         (unsigned long long)fi.stats().regions);
  fi.close();
  return 0;
}

// The initiator: WRITE and send from one registered buffer, and the medium's region limit.
int initiator(int sock) {
  Fi fi;
  fi.open();
  std::vector<std::uint8_t> src(kBufBytes);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = byte_at(i);
  fid_mr* mr;
  CHECK(fi_mr_reg(fi.dom, src.data(), src.size(), FI_WRITE | FI_SEND, 0, 0, 0, &mr, nullptr));
  EXPECT(fi.stats().regions == 1, "%llu regions", (unsigned long long)fi.stats().regions);

  // The medium's limit: the region past it is refused with an error, and nothing changes.
  std::vector<std::uint8_t> other(4096), third(4096);
  fid_mr* mr2;
  fid_mr* mr3 = nullptr;
  CHECK(fi_mr_reg(fi.dom, other.data(), other.size(), FI_SEND, 0, 0, 0, &mr2, nullptr));
  EXPECT(fi.stats().regions == kRegionsMax, "%llu regions", (unsigned long long)fi.stats().regions);
  const int refused =
      fi_mr_reg(fi.dom, third.data(), third.size(), FI_SEND, 0, 0, 0, &mr3, nullptr);
  EXPECT(refused == -FI_EIO, "fi_mr_reg past the medium's limit returned %d", refused);
  EXPECT(fi.stats().regions == kRegionsMax, "%llu regions after a refused fi_mr_reg",
         (unsigned long long)fi.stats().regions);
  fi.close_mr(mr2);
  EXPECT(fi.stats().regions == 1, "%llu regions", (unsigned long long)fi.stats().regions);
  CHECK(fi_mr_reg(fi.dom, third.data(), third.size(), FI_SEND, 0, 0, 0, &mr3, nullptr));
  EXPECT(fi.stats().regions == 2, "%llu regions", (unsigned long long)fi.stats().regions);
  fi.close_mr(mr3);

  Target t{};
  if (!full_read(sock, &t, sizeof t)) return 3;
  fi_addr_t peer;
  CHECK(fi_av_insert(fi.av, t.addr, 1, &peer, 0, nullptr));
  char addr[kAddrMax]{};
  std::size_t alen = sizeof addr;
  CHECK(fi_getname(&fi.ep->fid, addr, &alen));
  if (!full_write(sock, addr, sizeof addr)) return 3;
  char go;
  if (!full_read(sock, &go, 1)) return 3;
  const fi_weft_medium_stats before = fi.stats();
  void* desc = fi_mr_desc(mr);
  ssize_t r;
  while ((r = fi_write(fi.ep, src.data(), kWriteBytes, desc, peer, t.base, t.key, nullptr)) ==
         -FI_EAGAIN) {
    fi_cq_entry e;
    (void)fi_cq_read(fi.cq, &e, 0);
  }
  CHECK(r);
  fi.wait_one();
  while ((r = fi_send(fi.ep, src.data() + kWriteBytes, kSendBytes, desc, peer, nullptr)) ==
         -FI_EAGAIN) {
    fi_cq_entry e;
    (void)fi_cq_read(fi.cq, &e, 0);
  }
  CHECK(r);
  fi.wait_one();
  const fi_weft_medium_stats after = fi.stats();
  const std::uint64_t zc = after.tx_zero_copy - before.tx_zero_copy;
  const std::uint64_t tx = after.tx_packets - before.tx_packets;
  std::printf("rank 1: %llu packets sent, %llu of them by reference\n", (unsigned long long)tx,
              (unsigned long long)zc);
  std::fflush(stdout);  // the child ends in _Exit
  // Every packet of a 4 KiB MTU carries a full payload: at least 6 by reference.
  EXPECT(zc >= (kWriteBytes + kSendBytes) / 4096, "%llu zero-copy transmits",
         (unsigned long long)zc);
  static_assert(kSendBytes % 4096 == 0 && kWriteBytes % 4096 == 0 && 4096 >= kZeroCopyMinBytes);

  char done;
  if (!full_read(sock, &done, 1) || !full_write(sock, &done, 1)) return 3;
  fi.close_mr(mr);
  EXPECT(fi.stats().regions == 0, "%llu regions after fi_close of the MR",
         (unsigned long long)fi.stats().regions);
  fi.close();
  return 0;
}

// One attempt: both ranks over the net_memif named `memif`. 0: both passed; 1: a rank failed;
// 2: cut off by the alarm (the known hang: no packet ever sent).
int attempt(const std::string& memif) {
  setenv("FI_WEFT_DPDK_MEMIF", memif.c_str(), 1);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
  std::fflush(nullptr);  // nothing buffered twice
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) return 1;
    if (pids[rank] == 0) {
      g_rank = rank;
      alarm(kAlarmS);
      close(sv[1 - rank]);
      // exit, not _Exit: the provider's fi_fini releases the EAL and its run-time directory.
      std::exit(rank == 0 ? target(sv[0]) : initiator(sv[1]));
    }
  }
  close(sv[0]);
  close(sv[1]);
  int failed = 0;
  bool alarmed = false;
  bool alive[2] = {true, true};
  for (int left = 2; left > 0; --left) {
    int st = 0;
    const pid_t p = wait(&st);
    if (p < 0) return 1;
    const int rank = p == pids[0] ? 0 : 1;
    alive[rank] = false;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    std::fprintf(stderr, "rank %d failed (status %d)\n", rank, st);
    ++failed;
    if (WIFSIGNALED(st)) {
      // The first to fail was cut off by its alarm (the other is then killed here).
      if (failed == 1 && WTERMSIG(st) == SIGALRM) alarmed = true;
      // Its EAL's run-time directory (default_eal_args: --file-prefix weft-PID), which a killed
      // process leaves behind.
      std::error_code ec;
      std::filesystem::remove_all("/var/run/dpdk/weft-" + std::to_string(p), ec);
    }
    if (alive[1 - rank]) kill(pids[1 - rank], SIGKILL);
  }
  return failed == 0 ? 0 : alarmed ? 2 : 1;
}

}  // namespace

int main() {
  setenv("WEFT_DPDK_REGIONS_MAX", std::to_string(kRegionsMax).c_str(), 1);
  for (int i = 1; i <= kAttemptsMax; ++i) {
    // Each attempt pairs over a net_memif of its own.
    const int r = attempt("weft-dpdk-mr-" + std::to_string(getpid()) + "-" + std::to_string(i));
    if (r != 2) return r;
    std::fprintf(stderr, "attempt %d: the ranks hung (alarm); trying again\n", i);
  }
  return 1;
}
