// bench/ofi/pingpong_bench.cpp — tagged ping-pong between two endpoints of one process, through
// the public libfabric API, for the weft provider (in-process loopback medium) and the shm
// provider as the baseline measured in the same run. Runs interleave (weft, shm, weft, ...),
// PAIRS pairs; each line reports both medians and the median of the per-pair ratios.
// Usage: FI_PROVIDER_PATH=build/src/ofi ofi_pingpong_bench [iterations] [pairs] [size]
// (FI_WEFT_MEDIUM=shm: the two domains talk over the shared-memory medium, as two processes
// would; WEFT_BENCH_CLOCK=cpu: thread CPU time, see g_clock.)
// WEFT_BENCH_EMPTY=1: instead, the cost of an empty fi_cq_read (ns per call, median of PAIRS
// runs of `iterations` x 64 reads): what a process waiting for its peer's message pays per look.
// WEFT_BENCH_TRACE=K with a size: per-message times of a fresh pair (see main).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// WEFT_BENCH_CLOCK=cpu: the thread's CPU time instead of the wall clock, so a loaded machine's
// descheduling does not count (what one round trip costs in provider and engine work).
clockid_t g_clock = CLOCK_MONOTONIC;

double now_s() {
  timespec ts;
  clock_gettime(g_clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(x)                                                                 \
  do {                                                                           \
    const long rc_ = (x);                                                        \
    if (rc_ < 0) {                                                               \
      std::fprintf(stderr, "%s:%d %s = %ld (%s)\n", __FILE__, __LINE__, #x, rc_, \
                   fi_strerror(static_cast<int>(-rc_)));                         \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

struct Side {
  fid_domain* dom;
  fid_av* av;
  fid_cq* cq;
  fid_ep* ep;
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  std::vector<char> buf;
  fi_addr_t peer;
};

struct Pair {
  fi_info* info = nullptr;
  fid_fabric* fab = nullptr;
  Side s[2];
};

bool open_pair(const char* prov, std::size_t bytes_max, Pair& p) {
  fi_info* h = fi_allocinfo();
  h->fabric_attr->prov_name = strdup(prov);
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &p.info);
  fi_freeinfo(h);
  if (rc) return false;
  CHECK(fi_fabric(p.info->fabric_attr, &p.fab, nullptr));
  std::vector<char> names[2];
  for (Side& s : p.s) {
    // shm: both endpoints in one domain; weft: a domain (a Device) each.
    if (&s == &p.s[1] && std::strcmp(prov, "shm") == 0)
      s.dom = p.s[0].dom;
    else
      CHECK(fi_domain(p.fab, p.info, &s.dom, nullptr));
    fi_av_attr aa{};
    aa.type = FI_AV_MAP;
    CHECK(fi_av_open(s.dom, &aa, &s.av, nullptr));
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_TAGGED;
    CHECK(fi_cq_open(s.dom, &ca, &s.cq, nullptr));
    CHECK(fi_endpoint(s.dom, p.info, &s.ep, nullptr));
    CHECK(fi_ep_bind(s.ep, &s.av->fid, 0));
    CHECK(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(s.ep));
    s.buf.assign(bytes_max, 1);
    if (p.info->domain_attr->mr_mode & FI_MR_LOCAL) {
      CHECK(
          fi_mr_reg(s.dom, s.buf.data(), s.buf.size(), FI_SEND | FI_RECV, 0, 0, 0, &s.mr, nullptr));
      s.desc = fi_mr_desc(s.mr);
    }
  }
  for (int i = 0; i < 2; ++i) {
    names[i].resize(256);
    std::size_t len = names[i].size();
    CHECK(fi_getname(&p.s[i].ep->fid, names[i].data(), &len));
    names[i].resize(len);
  }
  for (int i = 0; i < 2; ++i)
    CHECK(fi_av_insert(p.s[i].av, names[1 - i].data(), 1, &p.s[i].peer, 0, nullptr));
  return true;
}

void close_pair(Pair& p) {
  for (Side& s : p.s) {
    fi_close(&s.ep->fid);
    if (s.mr) fi_close(&s.mr->fid);
    fi_close(&s.cq->fid);
    fi_close(&s.av->fid);
  }
  fi_close(&p.s[1].dom->fid);
  if (p.s[0].dom != p.s[1].dom) fi_close(&p.s[0].dom->fid);
  fi_close(&p.fab->fid);
  fi_freeinfo(p.info);
}

// One-way latency in microseconds (half the round trip), averaged over iters. With `trace`,
// no warm-up: trace[i] gets iteration i's one-way time (the first messages of a fresh pair).
double pingpong_us(Pair& p, std::size_t bytes, int iters, std::vector<double>* trace = nullptr) {
  Side& a = p.s[0];
  Side& b = p.s[1];
  fi_context ctx[4];
  const int warmup = trace ? 0 : std::max(10, iters / 10);
  double t0 = 0, ti = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = now_s();
    if (trace) {
      const double t = now_s();
      if (i > 0) trace->push_back((t - ti) / 2 * 1e6);
      ti = t;
    }
    CHECK(fi_trecv(b.ep, b.buf.data(), bytes, b.desc, b.peer, 1, 0, &ctx[0]));
    CHECK(fi_trecv(a.ep, a.buf.data(), bytes, a.desc, a.peer, 2, 0, &ctx[1]));
    ssize_t rc;
    while ((rc = fi_tsend(a.ep, a.buf.data(), bytes, a.desc, a.peer, 1, &ctx[2])) == -FI_EAGAIN)
      fi_cq_read(a.cq, nullptr, 0);
    CHECK(rc);
    // b answers once its receive completes; done when a has its send and the answer, and b
    // its send.
    bool a_sent = false, a_recv = false, b_recv = false, b_sent = false;
    while (!(a_sent && a_recv && b_sent)) {
      fi_cq_tagged_entry e;
      if (fi_cq_read(a.cq, &e, 1) == 1) (e.flags & FI_RECV ? a_recv : a_sent) = true;
      if (fi_cq_read(b.cq, &e, 1) == 1) {
        if (e.flags & FI_RECV) {
          b_recv = true;
          while ((rc = fi_tsend(b.ep, b.buf.data(), bytes, b.desc, b.peer, 2, &ctx[3])) ==
                 -FI_EAGAIN)
            fi_cq_read(b.cq, nullptr, 0);
          CHECK(rc);
        } else {
          b_sent = true;
        }
      }
    }
    (void)b_recv;
  }
  if (trace) trace->push_back((now_s() - ti) / 2 * 1e6);
  return (now_s() - t0) / iters / 2 * 1e6;
}

// Nanoseconds per empty fi_cq_read: bursts of kBurst reads of a's CQ, each burst ended by one
// read of b's CQ (a loop over two CQs: the provider starts a new spin run for a's next burst,
// so no burst lasts the FI_WEFT_SPIN_US it would take to nap). Every read counts.
double empty_read_ns(Pair& p, int bursts) {
  constexpr int kBurst = 64;
  fi_cq_tagged_entry e;
  const double t0 = now_s();
  for (int i = 0; i < bursts; ++i) {
    for (int j = 0; j < kBurst; ++j)
      if (fi_cq_read(p.s[0].cq, &e, 1) != -FI_EAGAIN) std::exit(1);
    if (fi_cq_read(p.s[1].cq, &e, 1) != -FI_EAGAIN) std::exit(1);
  }
  return (now_s() - t0) / (double(bursts) * (kBurst + 1)) * 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int pairs = argc > 2 ? std::atoi(argv[2]) : 5;
  const char* clk = std::getenv("WEFT_BENCH_CLOCK");
  if (clk && std::strcmp(clk, "cpu") == 0) g_clock = CLOCK_THREAD_CPUTIME_ID;
  std::vector<std::size_t> sizes = {8, 64, 64 * 1024, 1 << 20};
  if (argc > 3) sizes = {static_cast<std::size_t>(std::atol(argv[3]))};  // one size (profiling)
  Pair weft, shm;
  if (!open_pair("weft", 1 << 20, weft)) {
    std::fprintf(stderr, "weft provider not found (FI_PROVIDER_PATH?)\n");
    return 1;
  }
  if (const char* tr = std::getenv("WEFT_BENCH_TRACE")) {
    // WEFT_BENCH_TRACE=K: a fresh pair's first `iterations` messages of one size (argv[3]), no
    // warm-up; prints the first K one-way times, then the mean of each following decade.
    const std::size_t bytes = sizes[0];
    std::vector<double> t;
    pingpong_us(weft, bytes, iters, &t);
    const std::size_t k = std::min<std::size_t>(std::strtoul(tr, nullptr, 10), t.size());
    std::printf("%zu B, first %zu one-way times (us):", bytes, k);
    for (std::size_t i = 0; i < k; ++i) std::printf(" %.1f", t[i]);
    std::printf("\nmean (us) of messages");
    for (std::size_t lo = k, hi = std::max<std::size_t>(k * 2, 10); lo < t.size();
         lo = hi, hi *= 10) {
      hi = std::min(hi, t.size());
      double sum = 0;
      for (std::size_t i = lo; i < hi; ++i) sum += t[i];
      std::printf(" [%zu,%zu) %.2f", lo, hi, sum / double(hi - lo));
    }
    std::printf("\n");
    close_pair(weft);
    return 0;
  }
  if (std::getenv("WEFT_BENCH_EMPTY")) {
    std::vector<double> v;
    for (int i = 0; i < pairs; ++i) v.push_back(empty_read_ns(weft, iters));
    std::printf("empty fi_cq_read: %.1f ns (median of %d runs, %s)\n", median(v), pairs,
                g_clock == CLOCK_MONOTONIC ? "wall clock" : "thread CPU time");
    close_pair(weft);
    return 0;
  }
  // The shm baseline is opt-in: in one process its sends to a second endpoint return
  // -FI_EAGAIN forever here (1.17), so it only runs with WEFT_BENCH_SHM=1.
  const bool have_shm = std::getenv("WEFT_BENCH_SHM") && open_pair("shm", 1 << 20, shm);
  std::printf("in-process tagged ping-pong, one-way latency (us, %s), %d iterations, %d pairs%s\n",
              g_clock == CLOCK_MONOTONIC ? "wall clock" : "thread CPU time", iters, pairs,
              have_shm ? "" : " (shm provider unavailable: weft only)");
  std::printf("%10s %12s %12s %14s\n", "bytes", "weft", "shm", "weft/shm");
  for (std::size_t bytes : sizes) {
    const int n = bytes >= (1 << 20) ? std::max(20, iters / 100)
                  : bytes > 4096     ? std::max(100, iters / 10)
                                     : iters;
    std::vector<double> w, s, r;
    for (int i = 0; i < pairs; ++i) {
      w.push_back(pingpong_us(weft, bytes, n));
      if (have_shm) {
        s.push_back(pingpong_us(shm, bytes, n));
        r.push_back(w.back() / s.back());
      }
    }
    if (have_shm)
      std::printf("%10zu %12.2f %12.2f %14.2f\n", bytes, median(w), median(s), median(r));
    else
      std::printf("%10zu %12.2f %12s %14s\n", bytes, median(w), "-", "-");
  }
  close_pair(weft);
  if (have_shm) close_pair(shm);
  return 0;
}
