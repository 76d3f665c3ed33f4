// io/perf.cpp — weft perf's client and server loops (see perf.hpp).
#include "src/io/perf.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace weft::io {
namespace {

constexpr std::uint32_t kParamsMagic = 0x57465046;  // "WFPF"
constexpr std::uint32_t kRecvDepth = 512;
constexpr std::uint32_t kCqDepth = 8192;
// WRITE latency ping-pong: like perftest's CQ moderation, only every this many WRITEs (and the
// last) ask for a completion; nobody waits for one (the peer's reply is the signal), and with
// delayed ACKs (DirectOptions::ack_delay_ns) an unsignaled WRITE is not acknowledged one by one.
constexpr std::uint32_t kLatSignalEvery = 16;
bool lat_signaled(std::uint32_t i, std::uint32_t iters) {
  return (i + 1) % kLatSignalEvery == 0 || i + 1 >= iters;
}
// The ping-pongs poll the send CQ on the passes that wait for the peer's reply, not on the one
// that has just seen it: there the poll (~50 instructions for an empty CQ) lay between the
// reply's arrival and our next WRITE's publish. The round that answers polls too every
// kLatSignalEvery rounds, so the CQ stays drained even if every reply is found at once.
bool lat_poll_due(std::uint32_t i) {
  return i % kLatSignalEvery == 0;
}
constexpr std::uint32_t kAtomicBytes = 8;

constexpr std::uint16_t kParamShmBuffers = 1;  // Params::flags
constexpr TimeNs kPoolTimeoutNs = 10'000'000'000;

struct Params {
  std::uint32_t magic;
  std::uint8_t verb, mode;
  std::uint16_t flags;
  std::uint32_t max_size;
  std::uint32_t tx_depth;
};
struct Info {
  std::uint32_t qpn, psn;
  std::uint64_t addr;      // the receive half of the buffer
  std::uint64_t src_addr;  // the send half (READ source)
  std::uint32_t rkey, reserved;
};
enum class StepKind : std::uint32_t { kSize = 1, kDone = 2, kEnd = 3, kReady = 4, kFailed = 5 };
struct Step {
  StepKind kind;
  std::uint32_t size, iters, reserved;
};

template <class T>
bool send_pod(PerfLink& n, const T& v) {
  return n.send_oob({reinterpret_cast<const std::uint8_t*>(&v), sizeof v});
}
template <class T>
bool recv_pod(PerfLink& n, T& v, TimeNs timeout_ns) {
  auto r = n.recv_oob(timeout_ns);
  if (!r || r->size() != sizeof v) return false;
  std::memcpy(&v, r->data(), sizeof v);
  return true;
}

struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};

// One side's verbs objects: a buffer of two halves (send source | receive target), ordinary
// private memory or a block of a shared-memory pool (PerfOptions::shm_buffers).
struct Endpoint {
  PerfLink& node;
  Device& dev;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* scq = nullptr;
  CompletionQueue* rcq = nullptr;
  QueuePair* qp = nullptr;
  MemoryRegion* mr = nullptr;
  std::unique_ptr<std::uint8_t, FreeDeleter> own;  // the private buffer
  std::unique_ptr<shm::ShmPool> pool;              // or the pool the buffer comes from
  std::uint8_t* buf = nullptr;
  std::size_t half = 0;
  Info peer{};
  std::string error;

  explicit Endpoint(PerfLink& n) : node(n), dev(n.device()) {}
  std::uint8_t* send_half() { return buf; }
  std::uint8_t* recv_half() { return buf + half; }

  bool setup(std::uint32_t max_size, std::uint32_t tx_depth, bool shm_buffers) {
    half = (std::max<std::size_t>(max_size, 64) + 4095) & ~std::size_t{4095};
    if (shm_buffers) {
      pool = shm::ShmPool::create(2 * half);
      if (!pool) return fail("shared-memory pool: memfd_create/mmap failed");
      buf = static_cast<std::uint8_t*>(pool->alloc(2 * half));
    } else {
      own.reset(static_cast<std::uint8_t*>(std::aligned_alloc(4096, 2 * half)));
      buf = own.get();
    }
    if (!buf) return fail("out of memory");
    std::memset(buf, 0, 2 * half);
    pd = *dev.alloc_pd();
    scq = *dev.create_cq(kCqDepth);
    rcq = *dev.create_cq(kCqDepth);
    auto m = dev.reg_mr(
        pd, buf, 2 * half,
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
    if (!m) return fail("reg_mr failed");
    mr = *m;
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = scq;
    qa.recv_cq = rcq;
    qa.caps.max_send_wr = std::max<std::uint32_t>(tx_depth, 16);
    qa.caps.max_recv_wr = kRecvDepth;
    qa.caps.max_send_sge = 1;
    qa.caps.max_recv_sge = 1;
    auto q = dev.create_qp(qa);
    if (!q) return fail("create_qp failed");
    qp = *q;
    return true;
  }
  Info info() const {
    return Info{qp->qp_num(),
                0x1000,
                reinterpret_cast<std::uint64_t>(buf + half),
                reinterpret_cast<std::uint64_t>(buf),
                mr->rkey(),
                0};
  }
  // Connects the QP; for SEND runs, posts the receives both sides keep replenished.
  bool connect(PerfVerb verb) {
    if (connect_rc(qp, RcPeer{node.peer_lid(), peer.qpn, peer.psn}, 0x1000) != Errc::kOk)
      return fail("connect_rc failed");
    if (verb == PerfVerb::kSend)
      for (std::uint32_t k = 0; k < kRecvDepth / 2; ++k)
        if (!post_recv(0)) return false;
    return true;
  }
  bool fail(const char* what) {
    if (error.empty()) error = what;
    return false;
  }
  bool post(WrOpcode op, std::uint32_t len, std::uint64_t wr_id, bool signaled = true) {
    Sge sge{reinterpret_cast<std::uint64_t>(
                op == WrOpcode::kRdmaRead || op == WrOpcode::kAtomicFetchAndAdd ? recv_half()
                                                                                : send_half()),
            op == WrOpcode::kAtomicFetchAndAdd ? kAtomicBytes : len, mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = signaled ? kSignaled : 0u;
    wr.sg_list = {&sge, sge.length ? 1u : 0u};
    wr.remote_addr = op == WrOpcode::kRdmaRead ? peer.src_addr : peer.addr;
    wr.rkey = peer.rkey;
    wr.compare_add = 1;
    return qp->post_send(wr) == Errc::kOk || fail("post_send failed");
  }
  bool post_recv(std::uint32_t len) {
    (void)len;  // every receive takes the whole receive half, so any size of the run fits
    Sge sge{reinterpret_cast<std::uint64_t>(recv_half()), static_cast<std::uint32_t>(half),
            mr->lkey()};
    RecvWr wr{0, {&sge, 1}};
    return qp->post_recv(wr) == Errc::kOk || fail("post_recv failed");
  }
  // Drains a CQ; returns completions seen, or -1 on an error completion.
  std::array<WorkCompletion, 64> wc;  // not on the stack: polled in a spin loop
  int poll(CompletionQueue* cq) {
    int total = 0;
    for (;;) {
      const std::size_t n = cq->poll(wc);
      for (std::size_t i = 0; i < n; ++i)
        if (wc[i].status != WcStatus::kSuccess) {
          error = std::string("completion error: ") + std::string(to_string(wc[i].status));
          return -1;
        }
      total += static_cast<int>(n);
      if (n < wc.size()) return total;
    }
  }
};

WrOpcode opcode_of(PerfVerb v) {
  switch (v) {
    case PerfVerb::kWrite:
      return WrOpcode::kRdmaWrite;
    case PerfVerb::kRead:
      return WrOpcode::kRdmaRead;
    case PerfVerb::kSend:
      return WrOpcode::kSend;
    case PerfVerb::kAtomic:
      return WrOpcode::kAtomicFetchAndAdd;
  }
  return WrOpcode::kSend;
}

std::uint8_t tag_of(std::uint32_t i) {
  return static_cast<std::uint8_t>(i % 255 + 1);
}
bool seen(const std::uint8_t* p, std::uint8_t tag) {
  return *static_cast<const volatile std::uint8_t*>(p) == tag;
}

bool wait_cq(Endpoint& ep, CompletionQueue* cq, int want, TimeNs timeout_ns) {
  int got = 0;
  bool bad = false;
  const bool ok = ep.node.driver().run_until(
      [&] {
        const int n = ep.poll(cq);
        if (n < 0)
          bad = true;
        else
          got += n;
        return bad || got >= want;
      },
      timeout_ns);
  return ok && !bad ? true : ep.fail(bad ? "error completion" : "timeout");
}

void fill_latency(PerfResult& r, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  const std::size_t n = us.size();
  double sum = 0, sq = 0;
  for (double v : us) sum += v;
  r.lat_avg_us = sum / static_cast<double>(n);
  for (double v : us) sq += (v - r.lat_avg_us) * (v - r.lat_avg_us);
  r.lat_stdev_us = std::sqrt(sq / static_cast<double>(n));
  r.lat_min_us = us.front();
  r.lat_max_us = us.back();
  r.lat_typical_us = us[n / 2];
  r.lat_p99_us = us[std::min(n - 1, n * 99 / 100)];
  r.lat_p999_us = us[std::min(n - 1, n * 999 / 1000)];
}

// The client's WRITE latency ping-pong, in one Driver run: the reply's tag is seen inside a pass,
// which posts the next WRITE at once (it leaves with the ACK for the reply, in the same pass).
// Each round is stamped with the clock the Driver reads at the start of the pass after the one
// that sent the WRITE (Driver::last_now: read afresh after every working pass), so each sample
// is one whole round trip (stamp to stamp, at the same point of every round) and no clock read
// of its own, nor a run_until's exit and entry (another clock read), lies between sending a
// WRITE and polling for its reply: with them (~0.1 us each here) a side was sometimes not
// polling yet when the reply landed. The last round is stamped when its reply is seen.
bool write_pingpong(Endpoint& ep, std::uint32_t size, std::uint32_t iters, TimeNs timeout_ns,
                    std::vector<double>& us) {
  if (iters == 0) return true;
  Driver& drv = ep.node.driver();
  const WrOpcode op = opcode_of(PerfVerb::kWrite);
  const std::uint8_t* p = ep.recv_half() + size - 1;
  ep.send_half()[size - 1] = tag_of(0);
  if (!ep.post(op, size, 0, lat_signaled(0, iters))) return false;
  std::uint32_t i = 0;  // the round whose reply is awaited
  bool stamp_due = true, first = true, bad = false;
  TimeNs t0 = 0;
  const auto stamp = [&](TimeNs t) {
    if (!first) us.push_back(static_cast<double>(t - t0) / 2000.0);
    first = false;
    t0 = t;
  };
  const bool ok = drv.run_until(
      [&] {
        if (stamp_due) {
          stamp(first ? monotonic_ns() : drv.last_now());
          stamp_due = false;
        }
        if (!seen(p, tag_of(i))) return bad = ep.poll(ep.scq) < 0;
        if (i + 1 == iters) {
          stamp(monotonic_ns());
          bad = ep.poll(ep.scq) < 0;
          return true;
        }
        ++i;
        ep.send_half()[size - 1] = tag_of(i);
        bad = !ep.post(op, size, i, lat_signaled(i, iters)) ||
              (lat_poll_due(i) && ep.poll(ep.scq) < 0);
        stamp_due = true;
        return bad;
      },
      timeout_ns);
  return ok && !bad ? true : ep.fail(bad ? ep.error.c_str() : "timeout");
}

// Client side of one size.
bool client_size(Endpoint& ep, const PerfOptions& o, std::uint32_t size, std::uint32_t iters,
                 PerfResult& r) {
  Driver& drv = ep.node.driver();
  const WrOpcode op = opcode_of(o.verb);
  if (o.mode == PerfMode::kLat) {
    std::vector<double> us;
    us.reserve(iters);
    const bool pingpong = o.verb == PerfVerb::kWrite || o.verb == PerfVerb::kSend;
    if (o.verb == PerfVerb::kWrite && !write_pingpong(ep, size, iters, o.timeout_ns, us))
      return false;
    for (std::uint32_t i = 0; o.verb != PerfVerb::kWrite && i < iters; ++i) {
      const TimeNs t0 = monotonic_ns();
      if (o.verb == PerfVerb::kSend) {
        if (!ep.post(op, size, i) || !wait_cq(ep, ep.rcq, 1, o.timeout_ns) || !ep.post_recv(size))
          return false;
        ep.poll(ep.scq);
      } else {
        if (!ep.post(op, size, i) || !wait_cq(ep, ep.scq, 1, o.timeout_ns)) return false;
      }
      const TimeNs t1 = monotonic_ns();
      us.push_back(static_cast<double>(t1 - t0) / (pingpong ? 2000.0 : 1000.0));
    }
    // Drain the last send completions so nothing is outstanding between sizes.
    drv.run_until([&] { return ep.poll(ep.scq) == 0 && ep.scq->size() == 0; }, 1'000'000);
    fill_latency(r, us);
    return true;
  }
  // Bandwidth: keep tx_depth WRs in flight; take a timestamp at every 1/16 of the run for peak.
  const std::uint32_t depth = std::min<std::uint32_t>(o.tx_depth, iters);
  std::uint32_t posted = 0, done = 0;
  const std::uint32_t chunk = std::max<std::uint32_t>(iters / 16, 1);
  std::uint32_t next_mark = chunk;
  TimeNs mark_t = 0, best_chunk_ns = kNoDeadline;
  bool bad = false;
  const TimeNs t0 = monotonic_ns();
  mark_t = t0;
  const bool ok = drv.run_until(
      [&] {
        while (posted < iters && posted - done < depth) {
          if (!ep.post(op, size, posted)) {
            bad = true;
            return true;
          }
          ++posted;
        }
        const int n = ep.poll(ep.scq);
        if (n < 0) {
          bad = true;
          return true;
        }
        done += static_cast<std::uint32_t>(n);
        if (done >= next_mark) {
          const TimeNs t = monotonic_ns();
          const std::uint32_t k = (done - (next_mark - chunk));
          best_chunk_ns = std::min(best_chunk_ns, (t - mark_t) * chunk / std::max(k, 1u));
          mark_t = t;
          next_mark = done + chunk;
        }
        return done >= iters;
      },
      o.timeout_ns);
  if (!ok || bad) return ep.fail(bad ? "error completion" : "timeout");
  const double secs = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  const double bytes = static_cast<double>(size) * iters;
  r.bw_avg_gbps = bytes * 8 / secs * 1e-9;
  r.msg_rate_mpps = iters / secs * 1e-6;
  r.bw_peak_gbps = best_chunk_ns == kNoDeadline
                       ? r.bw_avg_gbps
                       : std::max(r.bw_avg_gbps, static_cast<double>(size) * chunk * 8 /
                                                     static_cast<double>(best_chunk_ns));
  return true;
}

// Server side of one size: a ping-pong partner for WRITE/SEND latency, else passive (reposting
// receives for SEND) until the client says it is done.
bool server_size(Endpoint& ep, PerfVerb verb, PerfMode mode, std::uint32_t size,
                 std::uint32_t iters) {
  constexpr TimeNs kTimeout = 60'000'000'000;
  const WrOpcode op = opcode_of(verb);
  if (mode == PerfMode::kLat && verb == PerfVerb::kWrite) {
    // One Driver run for the whole ping-pong (as the client's write_pingpong): no run_until exit
    // and entry, with its clock read, between answering and polling for the next WRITE.
    const std::uint8_t* p = ep.recv_half() + size - 1;
    std::uint32_t i = 0;
    bool bad = false;
    const bool ok = iters == 0 || ep.node.driver().run_until(
                                      [&] {
                                        if (!seen(p, tag_of(i))) return bad = ep.poll(ep.scq) < 0;
                                        ep.send_half()[size - 1] = tag_of(i);
                                        bad = !ep.post(op, size, i, lat_signaled(i, iters)) ||
                                              (lat_poll_due(i) && ep.poll(ep.scq) < 0);
                                        return bad || ++i == iters;
                                      },
                                      kTimeout);
    if (!ok || bad) return ep.fail(bad ? ep.error.c_str() : "timeout");
  } else if (mode == PerfMode::kLat && verb == PerfVerb::kSend) {
    for (std::uint32_t i = 0; i < iters; ++i) {
      if (!wait_cq(ep, ep.rcq, 1, kTimeout) || !ep.post_recv(size) || !ep.post(op, size, i))
        return false;
      ep.poll(ep.scq);
    }
  }
  // Passive part (and the tail of the ping-pong): progress until the client's kDone.
  for (;;) {
    std::uint32_t passes = 0;
    bool bad = false;
    ep.node.driver().run_until(
        [&] {
          if (ep.poll(ep.scq) < 0) bad = true;
          const int n = ep.poll(ep.rcq);
          if (n < 0) bad = true;
          for (int k = 0; k < n && !bad; ++k) bad = !ep.post_recv(size);
          return bad || ++passes % 256 == 0;
        },
        2'000'000);
    if (bad) return false;
    Step s{};
    auto m = ep.node.recv_oob(0);
    if (!m) {
      if (m.error() == IoError::kTimeout) continue;
      return ep.fail("control socket closed");
    }
    if (m->size() != sizeof s) return ep.fail("bad control message");
    std::memcpy(&s, m->data(), sizeof s);
    if (s.kind == StepKind::kDone) return true;
    return ep.fail("unexpected control message");
  }
}

}  // namespace

std::string_view to_string(PerfVerb v) {
  switch (v) {
    case PerfVerb::kWrite:
      return "write";
    case PerfVerb::kRead:
      return "read";
    case PerfVerb::kSend:
      return "send";
    case PerfVerb::kAtomic:
      return "atomic";
  }
  return "?";
}

namespace {

// A DirectNode seen as a PerfLink.
class DirectLink final : public PerfLink {
 public:
  explicit DirectLink(DirectNode& n) : n_(n) {}
  Device& device() override { return n_.device(); }
  Driver& driver() override { return n_.driver(); }
  std::uint16_t peer_lid() const override { return n_.peer_lid(); }
  bool send_oob(std::span<const std::uint8_t> msg) override { return n_.send_oob(msg); }
  Result<std::vector<std::uint8_t>, IoError> recv_oob(TimeNs timeout_ns) override {
    return n_.recv_oob(timeout_ns);
  }
  bool share_pool(const shm::ShmPool& pool) override {
    return n_.share_pool(pool, kPoolTimeoutNs).ok();
  }
  bool accept_pool() override { return n_.accept_pool(kPoolTimeoutNs).ok(); }

 private:
  DirectNode& n_;
};

}  // namespace

// WEFT_PERF_COUNTERS=1: the Driver's and the medium's counters on stderr when a side ends.
void dump_counters(const char* side, const Driver& driver, const shm::ShmMedium& medium) {
  if (!std::getenv("WEFT_PERF_COUNTERS")) return;
  const auto& d = driver.counters();
  const auto& m = medium.counters();
  std::fprintf(stderr,
               "%s: passes %llu sleeps %llu wake kick/timer/rx %llu/%llu/%llu yields %llu "
               "stalled %llu | tx wire/ref %llu/%llu rx wire/ref %llu/%llu tx_full %llu doorbells "
               "%llu cma calls %llu bytes %llu pool %llu copied by peer %llu for peer %llu\n",
               side, (unsigned long long)d.passes, (unsigned long long)d.sleeps,
               (unsigned long long)d.wakeups_kick, (unsigned long long)d.wakeups_timer,
               (unsigned long long)d.wakeups_rx, (unsigned long long)d.yields,
               (unsigned long long)d.stalled_peers, (unsigned long long)m.tx_wire,
               (unsigned long long)m.tx_by_ref, (unsigned long long)m.rx_wire,
               (unsigned long long)m.rx_by_ref, (unsigned long long)m.tx_full,
               (unsigned long long)m.doorbells, (unsigned long long)m.cma_calls,
               (unsigned long long)m.cma_bytes, (unsigned long long)m.pool_bytes,
               (unsigned long long)m.delegated_bytes, (unsigned long long)m.served_bytes);
  std::fprintf(stderr,
               "%s: wall busy %.1f idle %.1f idle-tx-blocked %.1f asleep %.1f ms | tx_full by-ref "
               "%llu, by-ref looks %llu moved %llu freed %llu B | rx bursts %llu records %llu "
               "releases %llu\n",
               side, d.busy_ns * 1e-6, d.idle_ns * 1e-6, d.idle_blocked_ns * 1e-6,
               d.sleep_ns * 1e-6, (unsigned long long)m.tx_full_by_ref,
               (unsigned long long)m.by_ref_looks, (unsigned long long)m.by_ref_moved,
               (unsigned long long)m.by_ref_freed_bytes, (unsigned long long)m.rx_bursts,
               (unsigned long long)m.rx_records, (unsigned long long)m.rx_releases);
  // On the CPU, waiting for it (runnable), time slices: /proc/self/schedstat.
  if (std::FILE* f = std::fopen("/proc/self/schedstat", "r")) {
    unsigned long long run = 0, wait = 0, slices = 0;
    if (std::fscanf(f, "%llu %llu %llu", &run, &wait, &slices) == 3)
      std::fprintf(stderr, "%s: schedstat run %.1f ms, runnable-waiting %.1f ms, %llu slices\n",
                   side, run * 1e-6, wait * 1e-6, slices);
    std::fclose(f);
  }
}

std::vector<PerfResult> perf_client(DirectNode& node, const PerfOptions& opts) {
  DirectLink l(node);
  auto r = perf_client(static_cast<PerfLink&>(l), opts);
  dump_counters("client", node.driver(), node.medium());
  return r;
}

bool perf_server(DirectNode& node, std::string* error) {
  DirectLink l(node);
  const bool ok = perf_server(static_cast<PerfLink&>(l), error);
  dump_counters("server", node.driver(), node.medium());
  return ok;
}

FabricPerfLink::~FabricPerfLink() {
  if (attach_) dump_counters(server_ ? "server" : "client", attach_->driver(), attach_->medium());
  attach_.reset();
  if (sock_ >= 0) close(sock_);
}

int FabricPerfLink::listen(const std::string& name) {
  return fabric_proto::listen_abstract("weft/perf/" + name);
}

bool FabricPerfLink::exchange_lids(TimeNs timeout_ns) {
  const std::uint16_t lid = attach_->lid();
  if (!send_oob({reinterpret_cast<const std::uint8_t*>(&lid), sizeof lid})) return false;
  auto m = recv_oob(timeout_ns);
  if (!m || m->size() != sizeof peer_lid_) return false;
  std::memcpy(&peer_lid_, m->data(), sizeof peer_lid_);
  return peer_lid_ != 0;
}

Result<std::unique_ptr<FabricPerfLink>, IoError> FabricPerfLink::accept(
    int listen_fd, const std::string& fabric, const FabricAttachOptions& o) {
  auto l = std::unique_ptr<FabricPerfLink>(new FabricPerfLink());
  l->server_ = true;
  auto a = FabricAttach::connect(fabric, o);
  if (!a) return a.error();
  l->attach_ = std::move(*a);
  if (!sock::wait_readable(listen_fd, o.timeout_ns)) return IoError::kTimeout;
  l->sock_ = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (l->sock_ < 0) return IoError::kSystem;
  if (!l->exchange_lids(o.timeout_ns)) return IoError::kProtocol;
  return l;
}

Result<std::unique_ptr<FabricPerfLink>, IoError> FabricPerfLink::connect(
    const std::string& name, const std::string& fabric, const FabricAttachOptions& o) {
  auto l = std::unique_ptr<FabricPerfLink>(new FabricPerfLink());
  auto a = FabricAttach::connect(fabric, o);
  if (!a) return a.error();
  l->attach_ = std::move(*a);
  const TimeNs end = monotonic_ns() + o.timeout_ns;
  for (;;) {
    l->sock_ = fabric_proto::connect_abstract("weft/perf/" + name);
    if (l->sock_ >= 0) break;
    if (errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN) return IoError::kSystem;
    if (monotonic_ns() >= end) return IoError::kTimeout;
    usleep(5000);
  }
  if (!l->exchange_lids(o.timeout_ns)) return IoError::kProtocol;
  return l;
}

bool FabricPerfLink::send_oob(std::span<const std::uint8_t> msg) {
  if (msg.size() > DirectNode::kOobBytesMax) return false;
  return send(sock_, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
}

Result<std::vector<std::uint8_t>, IoError> FabricPerfLink::recv_oob(TimeNs timeout_ns) {
  if (!sock::wait_readable(sock_, timeout_ns)) return IoError::kTimeout;
  std::vector<std::uint8_t> buf(DirectNode::kOobBytesMax);
  const ssize_t n = recv(sock_, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n == 0) return IoError::kClosed;
  if (n < 0) return errno == EAGAIN ? IoError::kTimeout : IoError::kSystem;
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

std::vector<std::uint32_t> perf_all_sizes() {
  std::vector<std::uint32_t> v;
  for (std::uint32_t s = 2; s <= kPerfSizeMax; s *= 2) v.push_back(s);
  return v;
}

std::vector<PerfResult> perf_client(PerfLink& node, const PerfOptions& opts) {
  std::vector<PerfResult> out;
  PerfOptions o = opts;
  if (o.verb == PerfVerb::kAtomic) o.sizes = {kAtomicBytes};
  const std::uint32_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  Endpoint ep(node);
  auto failed = [&](const std::string& why) {
    PerfResult r;
    r.ok = false;
    r.error = why;
    out.push_back(r);
    return out;
  };
  const Params p{kParamsMagic,
                 static_cast<std::uint8_t>(o.verb),
                 static_cast<std::uint8_t>(o.mode),
                 o.shm_buffers ? kParamShmBuffers : std::uint16_t{0},
                 max_size,
                 o.tx_depth};
  if (!ep.setup(max_size, o.tx_depth, o.shm_buffers)) return failed(ep.error);
  if (!send_pod(node, p)) return failed("control socket closed");
  // Shared buffers: ours to the server, then the server's to us (each waits for the mapping).
  if (o.shm_buffers && (!node.share_pool(*ep.pool) || !node.accept_pool()))
    return failed("sharing the buffer pools failed (shared-memory buffers need direct mode)");
  if (!recv_pod(node, ep.peer, o.timeout_ns)) return failed("no answer from the server");
  if (!send_pod(node, ep.info()) || !ep.connect(o.verb)) return failed(ep.error);
  for (std::uint32_t size : o.sizes) {
    if (size == 0 || size > kPerfSizeMax) return failed("size out of range");
    std::uint32_t iters = o.iters;
    if (iters == 0) {
      iters = o.mode == PerfMode::kLat ? 1000 : 5000;
      iters = static_cast<std::uint32_t>(
          std::max<std::uint64_t>(8, std::min<std::uint64_t>(iters, kPerfBytesPerSizeMax / size)));
    }
    Step s{StepKind::kSize, size, iters, 0};
    Step ready{};
    if (!send_pod(node, s) || !recv_pod(node, ready, o.timeout_ns) ||
        ready.kind != StepKind::kReady)
      return failed("server not ready");
    PerfResult r;
    r.bytes = size;
    r.iterations = iters;
    if (!client_size(ep, o, size, iters, r)) return failed(ep.error);
    Step done{StepKind::kDone, size, iters, 0};
    Step ack{};
    if (!send_pod(node, done) || !recv_pod(node, ack, o.timeout_ns) || ack.kind != StepKind::kDone)
      return failed("server failed");
    out.push_back(r);
  }
  const Step end{StepKind::kEnd, 0, 0, 0};
  send_pod(node, end);
  return out;
}

bool perf_server(PerfLink& node, std::string* error) {
  Endpoint ep(node);
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  Params p{};
  if (!recv_pod(node, p, 60'000'000'000) || p.magic != kParamsMagic || p.verb > 3 || p.mode > 1 ||
      p.max_size == 0 || p.max_size > kPerfSizeMax)
    return fail("bad parameters from the client");
  const auto verb = static_cast<PerfVerb>(p.verb);
  const auto mode = static_cast<PerfMode>(p.mode);
  const bool shm_buffers = (p.flags & kParamShmBuffers) != 0;
  if (!ep.setup(p.max_size, p.tx_depth, shm_buffers)) return fail(ep.error);
  if (shm_buffers && (!node.accept_pool() || !node.share_pool(*ep.pool)))
    return fail("sharing the buffer pools failed");
  if (!send_pod(node, ep.info()) || !recv_pod(node, ep.peer, 60'000'000'000) || !ep.connect(verb))
    return fail("handshake with the client failed");
  for (;;) {
    Step s{};
    if (!recv_pod(node, s, 600'000'000'000)) return fail("client went away");
    if (s.kind == StepKind::kEnd) return true;
    if (s.kind != StepKind::kSize || s.size == 0 || s.size > p.max_size)
      return fail("bad step from the client");
    const Step ready{StepKind::kReady, s.size, s.iters, 0};
    if (!send_pod(node, ready)) return fail("client went away");
    const bool ok = server_size(ep, verb, mode, s.size, s.iters);
    const Step ack{ok ? StepKind::kDone : StepKind::kFailed, s.size, s.iters, 0};
    send_pod(node, ack);
    if (!ok) return fail(ep.error);
  }
}

void perf_print_table(std::FILE* out, const PerfOptions& opts, const std::vector<PerfResult>& r,
                      bool zero_copy, const std::string& via) {
  const char* line =
      "---------------------------------------------------------------------------------------\n";
  std::fprintf(out, "%s", line);
  std::fprintf(out, "                    RDMA_%s %s (weft, %s%s)\n",
               std::string(to_string(opts.verb)).c_str(),
               opts.mode == PerfMode::kBw ? "BW" : "Latency", via.c_str(),
               opts.shm_buffers ? ", shared-memory buffers"
               : zero_copy      ? ", zero copy"
                                : ", copy");
  std::fprintf(out, "%s", line);
  if (opts.mode == PerfMode::kBw)
    std::fprintf(out, " %-10s %-13s %-17s %-20s %-19s %s\n", "#bytes", "#iterations",
                 "BW peak[Gb/sec]", "BW average[Gb/sec]", "BW average[MB/sec]", "MsgRate[Mpps]");
  else
    std::fprintf(out, " %-10s %-13s %-12s %-12s %-14s %-12s %-13s %-12s %s\n", "#bytes",
                 "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]",
                 "t_stdev[usec]", "99%[usec]", "99.9%[usec]");
  for (const auto& x : r) {
    if (!x.ok) {
      std::fprintf(out, " error: %s\n", x.error.c_str());
      continue;
    }
    if (opts.mode == PerfMode::kBw)
      std::fprintf(out, " %-10u %-13u %-17.2f %-20.2f %-19.2f %.6f\n", x.bytes, x.iterations,
                   x.bw_peak_gbps, x.bw_avg_gbps, x.bw_avg_gbps * 1e3 / 8, x.msg_rate_mpps);
    else
      std::fprintf(out, " %-10u %-13u %-12.2f %-12.2f %-14.2f %-12.2f %-13.2f %-12.2f %.2f\n",
                   x.bytes, x.iterations, x.lat_min_us, x.lat_max_us, x.lat_typical_us,
                   x.lat_avg_us, x.lat_stdev_us, x.lat_p99_us, x.lat_p999_us);
  }
  std::fprintf(out, "%s", line);
}

void perf_print_json(std::FILE* out, const PerfOptions& opts, const std::vector<PerfResult>& r,
                     bool zero_copy) {
  const std::string verb(to_string(opts.verb));
  for (const auto& x : r) {
    if (!x.ok) {
      std::fprintf(out, "{\"verb\":\"%s\",\"error\":\"%s\"}\n", verb.c_str(), x.error.c_str());
      continue;
    }
    if (opts.mode == PerfMode::kBw)
      std::fprintf(
          out,
          "{\"verb\":\"%s\",\"test\":\"bw\",\"zero_copy\":%s,\"shm_buffers\":%s,\"bytes\":%u,"
          "\"iterations\":%u,"
          "\"bw_peak_gbps\":%.4f,\"bw_avg_gbps\":%.4f,\"bw_avg_mbps\":%.2f,"
          "\"msg_rate_mpps\":%.6f}\n",
          verb.c_str(), zero_copy ? "true" : "false", opts.shm_buffers ? "true" : "false", x.bytes,
          x.iterations, x.bw_peak_gbps, x.bw_avg_gbps, x.bw_avg_gbps * 1e3 / 8, x.msg_rate_mpps);
    else
      std::fprintf(
          out,
          "{\"verb\":\"%s\",\"test\":\"lat\",\"zero_copy\":%s,\"shm_buffers\":%s,\"bytes\":%u,"
          "\"iterations\":%u,"
          "\"lat_min_us\":%.4f,\"lat_max_us\":%.4f,\"lat_typical_us\":%.4f,"
          "\"lat_avg_us\":%.4f,\"lat_stdev_us\":%.4f,\"lat_p99_us\":%.4f,"
          "\"lat_p999_us\":%.4f}\n",
          verb.c_str(), zero_copy ? "true" : "false", opts.shm_buffers ? "true" : "false", x.bytes,
          x.iterations, x.lat_min_us, x.lat_max_us, x.lat_typical_us, x.lat_avg_us, x.lat_stdev_us,
          x.lat_p99_us, x.lat_p999_us);
  }
}

}  // namespace weft::io
