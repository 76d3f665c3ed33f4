// tests/ofi/conn_setup_test.cpp — RDM connection set-up towards a peer that does not answer, in
// forked processes on the medium FI_WEFT_MEDIUM names (the meson tests: shm and udp).
//
// Three processes: this one, the initiator; S, a peer that opens its endpoint, hands over its
// address and stops itself (SIGSTOP: its keeper thread stops too, so nothing of S answers);
// L, a live peer.
//
// `silent`: S never continues. With FI_WEFT_CONN_TIMEOUT_MS=kTimeoutMs (1 s), the initiator's send
// to S completes in error, FI_ETIMEDOUT (fi_cq_readerr; fi_cq_strerror names the cause), no sooner
// than the deadline and well within kTimeoutMs + kSlackMs, while the initiator blocks in
// fi_cq_sread without a timeout (a hang would be the alarm's); its sends to L complete and
// arrive byte-exact before and after; a second send to S makes a new request and fails the same
// way. The extension ops count: two requests timed out, resent meanwhile, one connection (to L).
//
// `late`: S is continued after kLateMs (the default deadline, 10 s, is far). The initiator has
// resent its request meanwhile, so S finds the first request and its resends queued: it must
// make one QP and answer the resends with the same one (S's conn_stats, sent back to the
// initiator: in_established 1, every other request a duplicate); the initiator takes the first
// answer and ignores the others (stale_answers); the message arrives byte-exact.
//
// Exit 0 when every process did; each is bounded by alarm().
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
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

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr std::size_t kMsgBytes = 3000;  // eager, one SEND
// `silent`: FI_WEFT_CONN_TIMEOUT_MS. Also L's answer must come within it: at 400 ms, one run in
// the full suite at load 13-16 saw an extra timeout (the initiator descheduled between inserting
// L and sending to it, so L's answer was not read in time: a connection with nothing queued).
constexpr long kTimeoutMs = 1000;
// The error may come later than the deadline by a progress pass (a nap of <= 1 ms) and by this
// loaded machine's scheduling; a deadline that is not kept at all is the alarm's.
constexpr long kSlackMs = 3000;
constexpr useconds_t kLateMs = 400;  // `late`: S stays stopped this long (resends at 50, 150, 350)
constexpr int kWaitMs = 10'000;      // a completion that should come (the loaded machine)
constexpr unsigned kAlarmS = 60;

const char* g_who = "initiator";

[[noreturn]] void fail(const char* what, long rc = 0) {
  if (rc)
    std::fprintf(stderr, "%s: %s = %ld (%s)\n", g_who, what, rc,
                 fi_strerror(static_cast<int>(-rc)));
  else
    std::fprintf(stderr, "%s: %s\n", g_who, what);
  std::_Exit(2);
}
void check(long rc, const char* what) {
  if (rc < 0) fail(what, rc);
}
void expect(bool ok, const char* what) {
  if (!ok) fail(what);
}

using weft::test_util::full_read;
using weft::test_util::full_write;
using weft::test_util::OfiEndpoint;

long now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1'000'000;
}

std::vector<std::uint8_t> pattern(std::uint32_t seed) {
  std::vector<std::uint8_t> v(kMsgBytes);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(i * 7 + seed * 13);
  return v;
}

void open_rdm(OfiEndpoint& e) {
  weft::test_util::OfiEndpointSpec spec;
  spec.cq_format = FI_CQ_FORMAT_MSG;
  check(e.open(spec), e.failed);
}

void send_addr(OfiEndpoint& e, int sock) {
  char addr[kAddrMax]{};
  std::size_t alen = sizeof addr;
  check(fi_getname(&e.ep->fid, addr, &alen), "fi_getname");
  if (!full_write(sock, addr, sizeof addr)) fail("write address");
}

fi_weft_conn_stats conn_stats(OfiEndpoint& e) {
  fi_weft_domain_ops* ops = nullptr;
  check(fi_open_ops(&e.dom->fid, FI_WEFT_DOMAIN_OPS_1, 0, reinterpret_cast<void**>(&ops), nullptr),
        "fi_open_ops");
  expect(ops->size >= sizeof(fi_weft_domain_ops), "the domain ops have no conn_stats");
  fi_weft_conn_stats s{};
  check(ops->conn_stats(e.dom, &s), "conn_stats");
  return s;
}

// One completion within kWaitMs; an error completion fails the process.
fi_cq_msg_entry wait_one(fid_cq* cq) {
  const long end = now_ms() + kWaitMs;
  for (;;) {
    fi_cq_msg_entry e{};
    const ssize_t r = fi_cq_sread(cq, &e, 1, nullptr, 100);
    if (r == 1) return e;
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      fail("unexpected completion error", -err.err);
    }
    if (r != -FI_EAGAIN) check(r, "fi_cq_sread");
    if (now_ms() > end) fail("a completion never came");
  }
}

// A peer that receives `count` messages (tags: their order) and checks them byte for byte, then
// sends its conn_stats and waits for the initiator's word to close. `stop`: it stops itself
// after handing over its address (S); the initiator continues it, or kills it.
int peer(int sock, int count, bool stop) {
  OfiEndpoint e;
  open_rdm(e);
  std::vector<std::vector<std::uint8_t>> bufs(count, std::vector<std::uint8_t>(kMsgBytes, 0));
  for (auto& b : bufs)
    check(fi_recv(e.ep, b.data(), b.size(), nullptr, FI_ADDR_UNSPEC, nullptr), "fi_recv");
  send_addr(e, sock);
  if (stop) raise(SIGSTOP);
  for (int i = 0; i < count; ++i) wait_one(e.cq);
  for (int i = 0; i < count; ++i)
    if (bufs[i] != pattern(static_cast<std::uint32_t>(i))) fail("a received message is wrong");
  const fi_weft_conn_stats s = conn_stats(e);
  char done;
  if (!full_write(sock, &s, sizeof s) || !full_read(sock, &done, 1)) fail("socket");
  check(e.close(), "close");
  return 0;
}

struct Child {
  pid_t pid = -1;
  int sock = -1;
};

Child fork_peer(int count, bool stop, const char* name) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fail("socketpair");
  const pid_t pid = fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    close(sv[0]);
    g_who = name;
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a stopped S must not outlive a failed initiator
    alarm(kAlarmS);
    std::_Exit(peer(sv[1], count, stop));
  }
  close(sv[1]);
  return {pid, sv[0]};
}

void wait_stopped(const Child& c) {
  int st = 0;
  if (waitpid(c.pid, &st, WUNTRACED) != c.pid || !WIFSTOPPED(st)) fail("S did not stop");
}

int reap(Child& c) {
  int st = 0;
  if (waitpid(c.pid, &st, 0) != c.pid) return 1;
  close(c.sock);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

fi_addr_t insert(OfiEndpoint& e, const Child& c) {
  char addr[kAddrMax];
  if (!full_read(c.sock, addr, sizeof addr)) fail("read address");
  fi_addr_t fa;
  expect(fi_av_insert(e.av, addr, 1, &fa, 0, nullptr) == 1, "fi_av_insert");
  return fa;
}

void send_msg(OfiEndpoint& e, fi_addr_t to, const std::vector<std::uint8_t>& m, void* ctx) {
  check(fi_send(e.ep, m.data(), m.size(), nullptr, to, ctx), "fi_send");
}

// The send to S: blocks in fi_cq_sread (no timeout) until its error; returns when it came.
long await_timeout_error(OfiEndpoint& e, void* ctx) {
  fi_cq_msg_entry ent{};
  const ssize_t r = fi_cq_sread(e.cq, &ent, 1, nullptr, -1);
  if (r != -FI_EAVAIL) fail("fi_cq_sread: expected the send's error", r < 0 ? r : 0);
  const long t = now_ms();
  fi_cq_err_entry err{};
  expect(fi_cq_readerr(e.cq, &err, 0) == 1, "fi_cq_readerr");
  if (err.err != FI_ETIMEDOUT) fail("error completion: expected FI_ETIMEDOUT", -err.err);
  expect(err.op_context == ctx, "the error names another operation");
  expect((err.flags & FI_SEND) != 0, "the error is not a send's");
  char text[128];
  const char* s = fi_cq_strerror(e.cq, err.prov_errno, err.err_data, text, sizeof text);
  expect(s && std::strstr(s, "unanswered"), "fi_cq_strerror does not name the cause");
  return t;
}

int run_silent() {
  Child s = fork_peer(0, true, "S");
  Child l = fork_peer(2, false, "L");
  OfiEndpoint e;
  open_rdm(e);
  wait_stopped(s);
  // L first, its send queued at once: a late answer from L would fail that send (and this test,
  // saying so) rather than a connection with nothing queued.
  const auto m0 = pattern(0), m1 = pattern(1), junk = pattern(9);
  int ctx_s, ctx_s2, ctx_l;
  const fi_addr_t to_l = insert(e, l);
  send_msg(e, to_l, m0, &ctx_l);
  const long t0 = now_ms();  // fi_av_insert sends the request (eager connect)
  const fi_addr_t to_s = insert(e, s);
  send_msg(e, to_s, junk, &ctx_s);
  // L's send completes first (its connection forms at once), then S's error at the deadline.
  expect(wait_one(e.cq).op_context == &ctx_l, "the send to L did not complete");
  const long t1 = await_timeout_error(e, &ctx_s);
  if (t1 - t0 < kTimeoutMs || t1 - t0 > kTimeoutMs + kSlackMs) {
    std::fprintf(stderr, "initiator: the error came after %ld ms (deadline %ld ms)\n", t1 - t0,
                 kTimeoutMs);
    return 2;
  }
  // The endpoint still works: L gets a second message; S a new request, which fails likewise.
  const long t2 = now_ms();
  send_msg(e, to_s, junk, &ctx_s2);
  send_msg(e, to_l, m1, &ctx_l);
  expect(wait_one(e.cq).op_context == &ctx_l, "the second send to L did not complete");
  const long t3 = await_timeout_error(e, &ctx_s2);
  expect(t3 - t2 >= kTimeoutMs, "the second request failed before its deadline");
  const fi_weft_conn_stats cs = conn_stats(e);
  std::printf(
      "silent: errors after %ld and %ld ms; requests sent %llu (resent %llu), timed out "
      "%llu, connections %llu, stale answers %llu\n",
      t1 - t0, t3 - t2, (unsigned long long)cs.req_sent, (unsigned long long)cs.req_resent,
      (unsigned long long)cs.timed_out, (unsigned long long)cs.out_established,
      (unsigned long long)cs.stale_answers);
  std::fflush(stdout);
  expect(cs.timed_out == 2, "conn_stats: timed_out != 2");
  expect(cs.out_established == 1, "conn_stats: out_established != 1 (L)");
  expect(cs.req_resent >= 4, "conn_stats: the requests to S were not resent");
  expect(cs.req_sent == 3 + cs.req_resent, "conn_stats: req_sent != 3 + req_resent");
  expect(cs.connecting == 0, "conn_stats: a request is still pending");
  fi_weft_conn_stats ls;
  char done = 1;
  if (!full_read(l.sock, &ls, sizeof ls) || !full_write(l.sock, &done, 1)) fail("socket to L");
  expect(ls.in_established == 1 && ls.req_duplicate == 0, "L: not exactly one connection");
  kill(s.pid, SIGKILL);
  const int rs = reap(s);
  const int rl = reap(l);
  check(e.close(), "close");
  if (rs != 128 + SIGKILL) std::fprintf(stderr, "S ended with %d\n", rs);
  return rl == 0 && rs == 128 + SIGKILL ? 0 : 2;
}

int run_late() {
  Child s = fork_peer(1, true, "S");
  OfiEndpoint e;
  open_rdm(e);
  wait_stopped(s);
  const fi_addr_t to_s = insert(e, s);
  const auto m0 = pattern(0);
  int ctx;
  send_msg(e, to_s, m0, &ctx);
  // Progress (the resends) while S is stopped, then let it go.
  const long end = now_ms() + kLateMs;
  while (now_ms() < end) {
    fi_cq_msg_entry ent;
    expect(fi_cq_read(e.cq, &ent, 1) == -FI_EAGAIN, "the send completed while S was stopped");
    usleep(1000);
  }
  kill(s.pid, SIGCONT);
  expect(wait_one(e.cq).op_context == &ctx, "the send to S did not complete");
  fi_weft_conn_stats ss;
  if (!full_read(s.sock, &ss, sizeof ss)) fail("socket to S");
  // S's answers to the resends reach us after its first: wait until we have seen them all.
  fi_weft_conn_stats cs = conn_stats(e);
  for (const long until = now_ms() + kWaitMs; cs.stale_answers < ss.req_duplicate;) {
    if (now_ms() > until) break;
    fi_cq_msg_entry ent;
    fi_cq_read(e.cq, &ent, 1);
    usleep(1000);
    cs = conn_stats(e);
  }
  char done = 1;
  if (!full_write(s.sock, &done, 1)) fail("socket to S");
  std::printf(
      "late: initiator sent %llu requests; S received %llu, %llu duplicates, %llu QP; "
      "initiator ignored %llu answers\n",
      (unsigned long long)cs.req_sent, (unsigned long long)ss.req_received,
      (unsigned long long)ss.req_duplicate, (unsigned long long)ss.in_established,
      (unsigned long long)cs.stale_answers);
  expect(ss.in_established == 1, "S: not exactly one connection (QP) for one initiator");
  expect(ss.req_duplicate >= 2, "S: fewer than two resent requests seen");
  expect(ss.req_received == 1 + ss.req_duplicate, "S: requests other than the first and resends");
  expect(cs.out_established == 1 && cs.timed_out == 0, "initiator: not one connection");
  expect(cs.stale_answers == ss.req_duplicate, "initiator: the duplicate answers were not ignored");
  expect(cs.req_sent == 1 + cs.req_resent, "initiator: req_sent != 1 + req_resent");
  const int rs = reap(s);
  check(e.close(), "close");
  return rs;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "silent" && mode != "late") {
    std::fprintf(stderr, "usage: %s silent|late\n", argv[0]);
    return 2;
  }
  if (mode == "silent") setenv("FI_WEFT_CONN_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str(), 1);
  alarm(kAlarmS);
  return mode == "silent" ? run_silent() : run_late();
}
