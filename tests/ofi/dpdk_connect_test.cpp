// tests/ofi/dpdk_connect_test.cpp — an RDM connection over the DPDK medium (FI_WEFT_MEDIUM=dpdk,
// a net_memif pair between two forked processes) whose answer comes while the initiator sleeps
// in fi_cq_sread.
//
// The race it forces: the connection request and its answer (ConnRep) are control datagrams on
// the port's abstract Unix socket. fi_cq_sread naps on the port's wait_fd() and drains it with a
// read(2) of 8 bytes afterwards (src/ofi/medium.hpp); while the dpdk port's wait_fd() was the
// control socket itself, that read took the ConnRep, and the initiator waited for it for ever
// (about one set-up in four to fifty over dpdk, whenever the answer came during a nap; dpdk_mr
// retried such runs). Here the answer always comes during the initiator's fi_cq_sread: the
// target, without a keeper thread (FI_WEFT_KEEPER_MS=0), does not progress until the initiator
// says it is about to wait, then sleeps kAnswerDelayUs more and only then reads its CQ (which
// answers the request and takes the message).
//
// Rank 1 sends kMsgBytes; rank 0 checks them byte for byte. Exit 0 when both ranks exited 0;
// each is bounded by alarm(), a lost answer fails rank 1 after kSendWaitMs with a message.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/fd_io.hpp"
#include "tests/common/ofi_endpoint.hpp"
#include "tests/common/rank_pair.hpp"

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr std::size_t kMsgBytes = 1000;  // eager: one SEND once the connection is up
// The initiator is in fi_cq_sread (naps of up to 1 ms, each followed by the drain) well before.
constexpr useconds_t kAnswerDelayUs = 200'000;
constexpr int kSendWaitMs = 5000;  // the answer and the ACK take a few ms here
constexpr unsigned kAlarmS = 30;   // a run takes ~2 s (two EALs, the memif link)

int g_rank = -1;

[[noreturn]] void fail(const char* what, long rc = 0) {
  if (rc)
    std::fprintf(stderr, "rank %d: %s = %ld (%s)\n", g_rank, what, rc,
                 fi_strerror(static_cast<int>(-rc)));
  else
    std::fprintf(stderr, "rank %d: %s\n", g_rank, what);
  std::_Exit(2);
}
void check(long rc, const char* what) {
  if (rc < 0) fail(what, rc);
}

using weft::test_util::full_read;
using weft::test_util::full_write;
using weft::test_util::OfiEndpoint;

std::uint8_t byte_at(std::size_t i) {
  return static_cast<std::uint8_t>(i * 7 + 3);
}

void open_rdm(OfiEndpoint& e) {
  weft::test_util::OfiEndpointSpec spec;
  spec.cq_format = FI_CQ_FORMAT_MSG;
  const int r = e.open(spec);
  check(r, e.failed);  // after open: it names the call that failed
}

// One completion within ms milliseconds (fi_cq_sread: naps between progress passes).
bool wait_one(fid_cq* cq, int ms) {
  timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    fi_cq_msg_entry e;
    const ssize_t r = fi_cq_sread(cq, &e, 1, nullptr, 100);
    if (r == 1) return true;
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      fail("completion error", -err.err);
    }
    if (r != -FI_EAGAIN) check(r, "fi_cq_sread");
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1'000'000 > ms) return false;
  }
}

// The target: answers the connection request only from the fi_cq_sread after the delay.
int target(int sock) {
  setenv("FI_WEFT_KEEPER_MS", "0", 1);  // no progress but the test's own calls
  OfiEndpoint e;
  open_rdm(e);
  char addr[kAddrMax]{};
  std::size_t alen = sizeof addr;
  check(fi_getname(&e.ep->fid, addr, &alen), "fi_getname");
  if (!full_write(sock, addr, sizeof addr)) return 3;
  std::vector<std::uint8_t> rbuf(kMsgBytes, 0);
  check(fi_recv(e.ep, rbuf.data(), rbuf.size(), nullptr, FI_ADDR_UNSPEC, nullptr), "fi_recv");
  char waiting;
  if (!full_read(sock, &waiting, 1)) return 3;
  usleep(kAnswerDelayUs);
  if (!wait_one(e.cq, kSendWaitMs)) fail("the message never came");
  for (std::size_t i = 0; i < kMsgBytes; ++i)
    if (rbuf[i] != byte_at(i)) fail("a received byte is wrong");
  // Both done before either closes (the peer may still need our ACK).
  char done = 1;
  if (!full_write(sock, &done, 1) || !full_read(sock, &done, 1)) return 3;
  e.close();
  return 0;
}

// The initiator: its request goes out with fi_av_insert (eager connect; dpdk does not wait for
// the answer there), the send waits in the connection's backlog, then fi_cq_sread.
int initiator(int sock) {
  OfiEndpoint e;
  open_rdm(e);
  char addr[kAddrMax];
  if (!full_read(sock, addr, sizeof addr)) return 3;
  fi_addr_t peer;
  check(fi_av_insert(e.av, addr, 1, &peer, 0, nullptr), "fi_av_insert");
  std::vector<std::uint8_t> src(kMsgBytes);
  for (std::size_t i = 0; i < kMsgBytes; ++i) src[i] = byte_at(i);
  check(fi_send(e.ep, src.data(), src.size(), nullptr, peer, nullptr), "fi_send");
  const char waiting = 1;
  if (!full_write(sock, &waiting, 1)) return 3;
  if (!wait_one(e.cq, kSendWaitMs + static_cast<int>(kAnswerDelayUs / 1000)))
    fail("the send never completed: the connection's answer was lost");
  char done;
  if (!full_read(sock, &done, 1) || !full_write(sock, &done, 1)) return 3;
  e.close();
  return 0;
}

}  // namespace

int main() {
  return weft::test_util::run_dpdk_rank_pair("weft-dpdk-connect-", kAlarmS, [](int rank, int sock) {
    g_rank = rank;
    return rank == 0 ? target(sock) : initiator(sock);
  });
}
