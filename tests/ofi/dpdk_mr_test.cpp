// tests/ofi/dpdk_mr_test.cpp — memory registration reaches the DPDK medium (FI_WEFT_MEDIUM=dpdk,
// a net_memif pair between two forked processes, each with its own EAL): fi_mr_reg registers the
// buffer with the medium (DpdkMedium::register_memory) and fi_close of the MR unregisters it,
// read through the provider's extension ops (src/ofi/fi_weft_ext.h: the medium's region count
// and its zero-copy transmit counter). Rank 1 RDMA-WRITEs 16 KiB and sends 8 KiB from one
// registered buffer; rank 0 checks both byte for byte, and rank 1 that every packet of them went
// by reference. With WEFT_DPDK_REGIONS_MAX=2 (the medium's limit), a third registration fails
// with -FI_EIO and leaves the medium as it was; after a close there is room again.
// Exit 0 when both ranks exited 0; each is bounded by alarm(), and the parent kills the other
// when one fails. (An alarm here was once one run in four: fi_cq_sread's nap read the control
// socket and ate the connection reply; tests/ofi/dpdk_connect_test.cpp forces that race.)
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/ofi/fi_weft_ext.h"
#include "tests/common/fd_io.hpp"
#include "tests/common/ofi_endpoint.hpp"
#include "tests/common/rank_pair.hpp"

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr std::size_t kWriteBytes = 16384;  // four packets at the 4 KiB MTU
constexpr std::size_t kSendBytes = 8192;
constexpr std::size_t kBufBytes = kWriteBytes + kSendBytes;
// The medium's zero_copy_min_bytes (DpdkConfig): payloads from here on go by reference, so every
// packet of both transfers at any MTU the provider offers (256..4096) from 1 KiB.
constexpr std::size_t kZeroCopyMinBytes = 1024;
constexpr int kRegionsMax = 2;    // WEFT_DPDK_REGIONS_MAX for both ranks
constexpr unsigned kAlarmS = 20;  // a run takes ~2 s
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

// The RDM endpoint (tests/common/ofi_endpoint.hpp) and the provider's extension ops.
struct Fi : weft::test_util::OfiEndpoint {
  fi_weft_domain_ops* ops = nullptr;

  void open_all() {
    weft::test_util::OfiEndpointSpec spec;
    spec.caps = FI_MSG | FI_RMA;
    const int r = open(spec);
    EXPECT(r == 0, "%s = %d (%s)", failed, r, fi_strerror(-r));
    CHECK(fi_open_ops(&dom->fid, FI_WEFT_DOMAIN_OPS_1, 0, reinterpret_cast<void**>(&ops), nullptr));
    EXPECT(ops && ops->size >= sizeof(fi_weft_domain_ops), "no extension ops");
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
};

// The target: one registered buffer for the WRITE, a receive into plain memory for the send.
int target(int sock) {
  Fi fi;
  fi.open_all();
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
  fi.open_all();
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

}  // namespace

int main() {
  setenv("WEFT_DPDK_REGIONS_MAX", std::to_string(kRegionsMax).c_str(), 1);
  return weft::test_util::run_dpdk_rank_pair("weft-dpdk-mr-", kAlarmS, [](int rank, int sock) {
    g_rank = rank;
    return rank == 0 ? target(sock) : initiator(sock);
  });
}
