// emu/harness/campaign.cpp — run_seed: draw a scenario from a seed, run it in virtual time, then
// check it (see campaign.hpp). The checkers below never look inside the engine: they see only
// what a verbs user sees (completions, memory, QP state) plus DeviceCounters for the summary.
#include "emu/harness/campaign.hpp"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_set>

#include <weft/device.hpp>

#include "emu/harness/describe.hpp"
#include "emu/harness/memory.hpp"
#include "emu/harness/sim.hpp"
#include "emu/harness/setup.hpp"
#include "src/wire/packet.hpp"
#include "src/wire/pcap.hpp"

namespace weft::harness {

// ---- Exercised -------------------------------------------------------------------------------
void Exercised::add(const Exercised& o) {
  seeds += o.seeds;
  wrs += o.wrs;
  packets += o.packets;
  retransmits += o.retransmits;
  timeouts += o.timeouts;
  naks_seq += o.naks_seq;
  naks_rnr += o.naks_rnr;
  naks_access += o.naks_access;
  dup_reads_replayed += o.dup_reads_replayed;
  dup_atomics_replayed += o.dup_atomics_replayed;
  credit_stalls += o.credit_stalls;
  retry_exc += o.retry_exc;
  rnr_retry_exc += o.rnr_retry_exc;
  rem_access_err += o.rem_access_err;
  flushed += o.flushed;
  qps_go_back_n += o.qps_go_back_n;
  qps_selective_repeat += o.qps_selective_repeat;
  ud_messages += o.ud_messages;
  link_dropped += o.link_dropped;
  link_corrupted += o.link_corrupted;
  link_duplicated += o.link_duplicated;
  link_reordered += o.link_reordered;
  rx_bad_crc += o.rx_bad_crc;
}

std::vector<std::pair<std::string_view, std::uint64_t>> Exercised::required() const {
  return {{"retransmitted packets", retransmits},
          {"PSN sequence NAKs", naks_seq},
          {"RNR NAKs", naks_rnr},
          {"remote access NAKs", naks_access},
          {"duplicate READs replayed", dup_reads_replayed},
          {"duplicate atomics replayed", dup_atomics_replayed},
          {"credit stalls", credit_stalls},
          {"RETRY_EXC errors", retry_exc},
          {"RNR_RETRY_EXC errors", rnr_retry_exc},
          {"flushed WRs", flushed},
          {"go-back-N QPs", qps_go_back_n},
          {"selective-repeat QPs", qps_selective_repeat}};
}

std::string Exercised::format() const {
  std::string s;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "  seeds %" PRIu64 ", send WRs %" PRIu64 ", packets %" PRIu64
                ", UD messages %" PRIu64 "\n",
                seeds, wrs, packets, ud_messages);
  s += buf;
  std::snprintf(buf, sizeof buf,
                "  link: dropped %" PRIu64 ", corrupted %" PRIu64 ", duplicated %" PRIu64
                ", reordered %" PRIu64 "; rx CRC drops %" PRIu64 ", timeouts %" PRIu64 "\n",
                link_dropped, link_corrupted, link_duplicated, link_reordered, rx_bad_crc,
                timeouts);
  s += buf;
  for (const auto& [name, v] : required()) {
    std::snprintf(buf, sizeof buf, "  %-28.*s %" PRIu64 "\n", static_cast<int>(name.size()),
                  name.data(), v);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  %-28s %" PRIu64 "\n", "REM_ACCESS_ERR errors", rem_access_err);
  s += buf;
  return s;
}

std::string replay_command(std::uint64_t seed) {
  return "weft check --seed " + std::to_string(seed) + " --verbose";
}

namespace {

constexpr std::uint32_t kAtomicWords = 8;
constexpr std::uint32_t kInlineMax = 256;
constexpr std::uint32_t kUdPayloadMax = 256;
constexpr TimeNs kPostWindowNs = 400'000;  // WRs are posted within the first 400 us

enum class RecvPolicy : std::uint8_t { kUpfront, kLate, kNever };

struct Op {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t flags = 0;
  bool bad = false;      // deliberate remote access error
  bool bad_oob = false;  // out of bounds (else bad rkey)
  std::uint32_t len = 0;
  std::vector<Chunk> local;  // gather source or scatter landing, in the requester's local region
  std::uint32_t remote_off = 0;
  std::uint32_t imm = 0;
  std::uint32_t word = 0;
  std::uint64_t compare_add = 0, swap = 0;
  int fence_read = -1;  // source is this earlier READ's landing
  TimeNs post_ns = 0;
  // runtime
  std::vector<std::uint8_t> data;  // bytes sent (SEND/WRITE) or to be read (READ)
  bool posted = false;
  Errc post_err = Errc::kOk;
  bool completed = false;
  bool inferred_success = false;
  WcStatus status = WcStatus::kSuccess;

  bool signaled() const { return (flags & kSignaled) != 0; }
  bool consuming() const {
    return opcode == WrOpcode::kSend || opcode == WrOpcode::kSendWithImm ||
           opcode == WrOpcode::kRdmaWriteWithImm;
  }
  bool atomic() const {
    return opcode == WrOpcode::kAtomicCmpAndSwp || opcode == WrOpcode::kAtomicFetchAndAdd;
  }
  bool succeeded() const { return completed ? status == WcStatus::kSuccess : inferred_success; }
};

struct RecvBuf {
  std::uint64_t wr_id = 0;
  std::vector<Chunk> chunks;
  std::uint32_t cap = 0;
  bool posted = false;
  int completions = 0;
  bool filled = false;  // completed successfully
};

struct Srq {
  SharedReceiveQueue* srq = nullptr;
  GuardedRegion region;
  std::vector<RecvBuf> bufs;
  int dev = 0;
};

struct Endpoint {
  int dev = 0;
  int peer = -1;
  bool ud = false;
  int srq = -1;
  QueuePair* qp = nullptr;
  CompletionQueue* scq = nullptr;
  CompletionQueue* rcq = nullptr;
  AddressHandle* ah = nullptr;
  GuardedRegion local, target, recv;
  RcParams params{};
  std::vector<Op> ops;
  std::vector<RecvBuf> recvs;
  RecvPolicy policy = RecvPolicy::kUpfront;
  std::vector<WorkCompletion> scomps, rcomps;
  std::array<std::uint64_t, kAtomicWords> planned_words{};  // as target: model at post time
};

std::uint64_t send_wr_id(int ep, std::size_t i) {
  return (1ULL << 62) | (static_cast<std::uint64_t>(ep) << 32) | i;
}
std::uint64_t recv_wr_id(int owner, std::size_t i) {
  return (2ULL << 62) | (static_cast<std::uint64_t>(owner) << 32) | i;
}

std::uint64_t apply_atomic(const Op& op, std::uint64_t v) {
  if (op.opcode == WrOpcode::kAtomicFetchAndAdd) return v + op.compare_add;
  return v == op.compare_add ? op.swap : v;
}

WcOpcode expected_wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return WcOpcode::kSend;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpAndSwp:
      return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAndAdd:
      return WcOpcode::kFetchAdd;
  }
  return WcOpcode::kSend;
}

const char* dname(const Endpoint& e) {
  return e.dev == 0 ? "hcaA" : "hcaB";
}

class Campaign {
 public:
  Campaign(std::uint64_t seed, const CampaignOptions& options)
      : seed_(seed), options_(options), rng_(seed), data_rng_(seed ^ 0xda7a'da7a'da7a'da7aULL) {}

  SeedResult run();

 private:
  void fail(std::string msg) {
    if (result_.failures.size() < 40) result_.failures.push_back(std::move(msg));
  }
  template <class... A>
  void failf(const char* fmt, A... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    fail(buf);
  }
  void log(const std::string& s) {
    if (options_.log) options_.log(s);
  }

  void draw_scenario();
  void plan_stream(int x);
  void plan_ud_stream(int x);
  void plan_recvs(int y);
  bool build();
  void schedule();
  void post_op(int x, std::size_t i);
  void post_recv(int y, std::size_t i);
  void post_srq(int s, std::size_t i);
  void poll_all();
  bool all_done() const;
  void on_trace(const TraceRecord& r);

  void check();
  void check_sends(int x);
  void check_rc_recvs(int y);
  void check_ud_recvs(int y);
  void check_atomics(int y);
  void summarize();

  std::uint64_t seed_;
  CampaignOptions options_;
  SeededRng rng_;
  SeededRng data_rng_;
  SeedResult result_;

  // scenario
  CrcMode crc_ = CrcMode::kCompute;
  LinkConfig link_[2];
  std::vector<Endpoint> eps_;
  std::vector<Srq> srqs_;
  int srq_of_dev_[2] = {-1, -1};
  bool burst_ = false;
  int bad_ep_ = -1;

  // runtime
  std::vector<SeededRng> dev_rngs_;
  std::vector<std::unique_ptr<Device>> devs_;
  ProtectionDomain* pd_[2] = {nullptr, nullptr};
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Sim> sim_;
  wire::PcapWriter pcap_;
  std::set<std::uint64_t> seen_requests_;
};

// ---- scenario ----------------------------------------------------------------------------------
void Campaign::draw_scenario() {
  crc_ = rng_.chance(0.5) ? CrcMode::kCompute : CrcMode::kModel;
  // Link: a fault mix per direction. A fifth of the seeds run on a clean link.
  const bool clean = rng_.chance(0.2);
  for (auto& l : link_) {
    l.latency_ns = 500 + rng_.below(5000);
    static constexpr std::uint64_t kRates[] = {10'000, 25'000, 56'000, 100'000, 200'000};
    l.rate_mbps = kRates[rng_.below(5)];
    if (!clean) {
      l.drop = rng_.chance(0.15) ? 0.0 : rng_.unit() * 0.20;
      l.duplicate = rng_.unit() * 0.05;
      l.reorder = rng_.unit() * 0.10;
      l.corrupt = rng_.unit() * 0.04;
      l.delay = rng_.unit() * 0.04;
    }
  }
  burst_ = rng_.chance(0.10);

  const int pairs = 2 + static_cast<int>(rng_.below(3));
  const bool srq_b = rng_.chance(0.25);
  for (int p = 0; p < pairs; ++p) {
    Endpoint a, b;
    a.dev = 0;
    b.dev = 1;
    const int ia = static_cast<int>(eps_.size());
    a.peer = ia + 1;
    b.peer = ia;
    RcParams pa, pb;
    pa.mtu = static_cast<Mtu>(1 + rng_.below(5));
    pb.mtu = pa.mtu;
    pa.recovery = rng_.chance(0.5) ? RecoveryMode::kGoBackN : RecoveryMode::kSelectiveRepeat;
    // Both ends of a connection use the same recovery mode: a selective-repeat responder NAKs
    // every missing PSN (IRN), which a go-back-N requester would read as cumulative ACKs.
    pb.recovery = pa.recovery;
    for (RcParams* q : {&pa, &pb}) {
      q->timeout = static_cast<std::uint8_t>(4 + rng_.below(6));  // 65 us .. 2 ms
      q->retry_cnt = static_cast<std::uint8_t>(rng_.chance(0.8) ? 7 : 3 + rng_.below(5));
      q->rnr_retry = 7;
      q->min_rnr_timer = static_cast<std::uint8_t>(1 + rng_.below(10));
      q->max_rd_atomic = static_cast<std::uint8_t>(1 + rng_.below(16));
      q->sq_psn = rng_.chance(0.3) ? kPsnMask - static_cast<std::uint32_t>(rng_.below(40))
                                   : static_cast<std::uint32_t>(rng_.below(kPsnMask + 1));
    }
    pa.max_dest_rd_atomic = static_cast<std::uint8_t>(
        std::min<std::uint32_t>(kRdAtomicMax, pb.max_rd_atomic + rng_.below(3)));
    pb.max_dest_rd_atomic = static_cast<std::uint8_t>(
        std::min<std::uint32_t>(kRdAtomicMax, pa.max_rd_atomic + rng_.below(3)));
    a.params = pa;
    b.params = pb;
    // Receive policy of each side (as a responder).
    for (Endpoint* e : {&a, &b}) {
      e->policy = rng_.chance(0.3) ? RecvPolicy::kLate : RecvPolicy::kUpfront;
    }
    if (srq_b && p % 2 == 0) b.srq = 0;
    eps_.push_back(std::move(a));
    eps_.push_back(std::move(b));
  }
  // RNR exhaustion: one responder never posts receives; its requester gives up after a few RNRs.
  if (rng_.chance(0.12)) {
    const int y = static_cast<int>(rng_.below(eps_.size()));
    if (eps_[static_cast<std::size_t>(y)].srq < 0) {
      eps_[static_cast<std::size_t>(y)].policy = RecvPolicy::kNever;
      eps_[static_cast<std::size_t>(eps_[static_cast<std::size_t>(y)].peer)].params.rnr_retry =
          static_cast<std::uint8_t>(rng_.below(3));
    }
  }
  // The data streams: A->B always; B->A on about half the pairs.
  for (std::size_t x = 0; x < eps_.size(); ++x) {
    if (eps_[x].dev == 0 || rng_.chance(0.5)) plan_stream(static_cast<int>(x));
  }
  // A deliberate remote access error on one stream.
  if (rng_.chance(0.12)) {
    const int x = static_cast<int>(rng_.below(eps_.size()));
    auto& ops = eps_[static_cast<std::size_t>(x)].ops;
    if (!ops.empty()) {
      Op& op = ops[rng_.below(ops.size())];
      bad_ep_ = x;
      op.bad = true;
      if (op.consuming() || op.opcode == WrOpcode::kRdmaWrite) op.opcode = WrOpcode::kRdmaWrite;
      // A zero-length RDMA WRITE or READ touches no memory, so its R_Key is not checked
      // (IBA 9.7.4.1.3): a bad one must carry data.
      // It also gets its own source buffer, not an earlier READ's landing (which the host would
      // otherwise overwrite with this WR's data).
      if (op.len == 0 || op.local.empty() || op.fence_read >= 0) {
        op.len = 1 + static_cast<std::uint32_t>(rng_.below(64));
        op.local = {Chunk{eps_[static_cast<std::size_t>(x)].local.reserve(op.len), op.len}};
      }
      op.fence_read = -1;
      op.bad_oob = !op.atomic() && rng_.chance(0.5);
      op.flags &= ~static_cast<std::uint32_t>(kInline);
    }
  }
  // A UD pair sometimes.
  if (rng_.chance(0.3)) {
    Endpoint a, b;
    a.dev = 0;
    b.dev = 1;
    a.ud = b.ud = true;
    const int ia = static_cast<int>(eps_.size());
    a.peer = ia + 1;
    b.peer = ia;
    a.params.sq_psn = static_cast<std::uint32_t>(rng_.below(kPsnMask + 1));
    eps_.push_back(std::move(a));
    eps_.push_back(std::move(b));
    plan_ud_stream(ia);
  }
  for (std::size_t y = 0; y < eps_.size(); ++y) plan_recvs(static_cast<int>(y));

  // A loss burst longer than any retry budget, in one or both directions, while work is in flight.
  if (burst_) {
    TimeNs budget_ns = 0;
    for (const auto& e : eps_) {
      const TimeNs t = 4096ULL << e.params.timeout;
      budget_ns = std::max<TimeNs>(budget_ns, t * (e.params.retry_cnt + 2ULL) * 4);
    }
    const TimeNs start = 5'000 + rng_.below(kPostWindowNs / 2);
    const int dirs = static_cast<int>(rng_.below(3));  // 0: A->B, 1: B->A, 2: both
    if (dirs != 1) link_[0].blackouts.push_back({start, start + budget_ns});
    if (dirs != 0) link_[1].blackouts.push_back({start, start + budget_ns});
  }
}

void Campaign::plan_stream(int xi) {
  Endpoint& x = eps_[static_cast<std::size_t>(xi)];
  Endpoint& y = eps_[static_cast<std::size_t>(x.peer)];
  const std::uint32_t mtu = mtu_bytes(x.params.mtu);
  const std::size_t n = 6 + rng_.below(30);
  TimeNs t = rng_.below(20'000);
  int last_read = -1;
  for (std::size_t i = 0; i < n; ++i) {
    Op op;
    op.wr_id = send_wr_id(xi, i);
    const std::uint64_t r = rng_.below(100);
    op.opcode = r < 20   ? WrOpcode::kSend
                : r < 30 ? WrOpcode::kSendWithImm
                : r < 48 ? WrOpcode::kRdmaWrite
                : r < 58 ? WrOpcode::kRdmaWriteWithImm
                : r < 78 ? WrOpcode::kRdmaRead
                : r < 89 ? WrOpcode::kAtomicCmpAndSwp
                         : WrOpcode::kAtomicFetchAndAdd;
    if (op.atomic()) {
      op.len = 8;
    } else {
      const std::uint64_t s = rng_.below(10);
      const std::uint32_t big = std::min<std::uint32_t>(4 * mtu + 100, 16384);
      op.len = s < 5   ? 1 + static_cast<std::uint32_t>(rng_.below(128))
               : s < 8 ? 1 + static_cast<std::uint32_t>(rng_.below(2 * mtu))
                       : 1 + static_cast<std::uint32_t>(rng_.below(big));
      if (op.opcode == WrOpcode::kSend && rng_.chance(0.03)) op.len = 0;
    }
    if (rng_.chance(0.7) || i + 1 == n) op.flags |= kSignaled;
    if (rng_.chance(0.1)) op.flags |= kFence;
    op.imm = static_cast<std::uint32_t>(rng_.next_u64());
    const bool gather = op.opcode != WrOpcode::kRdmaRead && !op.atomic();
    if (gather && op.len > 0 && op.len <= kInlineMax && rng_.chance(0.3)) op.flags |= kInline;
    // Fence semantics check: send what an earlier READ brought in (IBA 10.8.3.3).
    if ((op.opcode == WrOpcode::kSend || op.opcode == WrOpcode::kRdmaWrite) && last_read >= 0 &&
        rng_.chance(0.15)) {
      const Op& rd = x.ops[static_cast<std::size_t>(last_read)];
      op.flags = (op.flags | kFence) & ~static_cast<std::uint32_t>(kInline);
      op.fence_read = last_read;
      op.len = rd.len;
      op.local = rd.local;
    } else if (op.atomic()) {
      op.local.push_back(Chunk{x.local.reserve(8, 8), 8});
    } else if (op.len > 0) {
      const std::uint32_t nsge =
          op.len >= 3 && rng_.chance(0.3) ? 2 + static_cast<std::uint32_t>(rng_.below(2)) : 1;
      std::uint32_t left = op.len;
      for (std::uint32_t k = 0; k < nsge; ++k) {
        const std::uint32_t piece =
            k + 1 == nsge ? left
                          : 1 + static_cast<std::uint32_t>(rng_.below(left - (nsge - k) + 1));
        op.local.push_back(Chunk{x.local.reserve(piece), piece});
        left -= piece;
      }
    }
    if (op.atomic()) {
      op.word = static_cast<std::uint32_t>(rng_.below(4));
      op.remote_off = op.word * 8;
      op.compare_add = rng_.next_u64() >> rng_.below(64);
      op.swap = rng_.next_u64();
    } else if (op.opcode != WrOpcode::kSend && op.opcode != WrOpcode::kSendWithImm) {
      op.remote_off = y.target.reserve(std::max<std::uint32_t>(op.len, 1));
    }
    if (op.opcode == WrOpcode::kRdmaRead) last_read = static_cast<int>(i);
    if (!rng_.chance(0.6)) t += rng_.below(kPostWindowNs / n);
    op.post_ns = t;
    x.ops.push_back(std::move(op));
  }
}

void Campaign::plan_ud_stream(int xi) {
  Endpoint& x = eps_[static_cast<std::size_t>(xi)];
  const std::size_t n = 4 + rng_.below(16);
  TimeNs t = rng_.below(20'000);
  for (std::size_t i = 0; i < n; ++i) {
    Op op;
    op.wr_id = send_wr_id(xi, i);
    op.opcode = rng_.chance(0.5) ? WrOpcode::kSend : WrOpcode::kSendWithImm;
    op.len = 8 + static_cast<std::uint32_t>(rng_.below(kUdPayloadMax - 8 + 1));
    if (rng_.chance(0.7) || i + 1 == n) op.flags |= kSignaled;
    if (op.len <= kInlineMax && rng_.chance(0.3)) op.flags |= kInline;
    op.imm = static_cast<std::uint32_t>(rng_.next_u64());
    op.local.push_back(Chunk{x.local.reserve(op.len), op.len});
    t += rng_.below(kPostWindowNs / n);
    op.post_ns = t;
    x.ops.push_back(std::move(op));
  }
}

void Campaign::plan_recvs(int yi) {
  Endpoint& y = eps_[static_cast<std::size_t>(yi)];
  const Endpoint& x = eps_[static_cast<std::size_t>(y.peer)];
  std::uint32_t consuming = 0, cap = 1;
  for (const Op& op : x.ops) {
    if (op.consuming()) {
      ++consuming;
      cap = std::max(cap, op.len);
    }
  }
  if (y.ud) cap = kUdGrhBytes + kUdPayloadMax;
  if (y.srq >= 0) {
    if (srqs_.empty()) srqs_.emplace_back();
    Srq& s = srqs_[static_cast<std::size_t>(y.srq)];
    s.dev = y.dev;
    srq_of_dev_[y.dev] = y.srq;
    for (std::uint32_t i = 0; i < consuming + 1; ++i) {
      RecvBuf b;
      b.wr_id = recv_wr_id(1000 + y.srq, s.bufs.size());
      b.cap = 16384 + 100;  // any QP of the SRQ may consume any buffer
      b.chunks.push_back(Chunk{s.region.reserve(b.cap), b.cap});
      s.bufs.push_back(std::move(b));
    }
    return;
  }
  if (y.policy == RecvPolicy::kNever) return;
  const std::uint32_t count = consuming + static_cast<std::uint32_t>(rng_.below(3));
  for (std::uint32_t i = 0; i < count; ++i) {
    RecvBuf b;
    b.wr_id = recv_wr_id(yi, i);
    b.cap = cap;
    if (cap >= 2 && !y.ud && rng_.chance(0.2)) {
      const std::uint32_t first = 1 + static_cast<std::uint32_t>(rng_.below(cap - 1));
      b.chunks.push_back(Chunk{y.recv.reserve(first), first});
      b.chunks.push_back(Chunk{y.recv.reserve(cap - first), cap - first});
    } else {
      b.chunks.push_back(Chunk{y.recv.reserve(cap), cap});
    }
    y.recvs.push_back(std::move(b));
  }
}

// ---- setup ------------------------------------------------------------------------------------
bool Campaign::build() {
  SimConfig sc;
  sc.crc = crc_;
  sc.events_max = 3'000'000;
  sc.time_ns_max = 20'000'000'000ULL;  // 20 s of virtual time
  sim_ = std::make_unique<Sim>(sc);
  for (int d = 0; d < 2; ++d) {
    dev_rngs_.emplace_back(seed_ * 7919 + static_cast<std::uint64_t>(d));
  }
  for (int d = 0; d < 2; ++d) {
    DeviceConfig dc;
    dc.name = d == 0 ? "hcaA" : "hcaB";
    dc.node_guid = 0x0002c90300000000ULL + static_cast<std::uint64_t>(d) + 1;
    dc.ports[0].lid = static_cast<std::uint16_t>(d + 1);
    dc.crc = crc_;
    dc.ack_coalesce_max = 1 + static_cast<std::uint32_t>(rng_.below(8));
    devs_.push_back(Device::create(dc, dev_rngs_[static_cast<std::size_t>(d)]));
    sim_->add_device(devs_.back().get());
    auto pd = devs_.back()->alloc_pd();
    if (!pd.ok()) {
      fail("alloc_pd failed");
      return false;
    }
    pd_[d] = pd.value();
  }
  sim_->connect(0, 1, link_[0], link_[1], seed_ ^ 0x11A7'11A7ULL);

  constexpr std::uint32_t kRemote =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  std::size_t footprint = 0;
  for (const auto& e : eps_)
    footprint += e.local.footprint() + e.target.footprint() + e.recv.footprint();
  for (const auto& s : srqs_) footprint += s.region.footprint();
  arena_ = std::make_unique<Arena>(footprint);
  auto reg = [&](int d, GuardedRegion& r, std::uint32_t access) -> MemoryRegion* {
    r.create(static_cast<std::uint8_t>(rng_.below(256)), *arena_);
    auto mr = devs_[static_cast<std::size_t>(d)]->reg_mr(pd_[d], r.base(), r.len(), access);
    if (!mr.ok()) {
      failf("reg_mr failed: %s", std::string(to_string(mr.error())).c_str());
      return nullptr;
    }
    r.mr = mr.value();
    return mr.value();
  };
  for (auto& s : srqs_) {
    Device& dev = *devs_[static_cast<std::size_t>(s.dev)];
    auto srq = dev.create_srq(pd_[s.dev], 1024, 4);
    if (!srq.ok()) {
      failf("create_srq failed: %s", std::string(to_string(srq.error())).c_str());
      return false;
    }
    s.srq = srq.value();
  }
  std::vector<MemoryRegion*> local_mr(eps_.size()), target_mr(eps_.size()), recv_mr(eps_.size());
  std::vector<MemoryRegion*> srq_mr(srqs_.size());
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    Endpoint& e = eps_[i];
    if (!(local_mr[i] = reg(e.dev, e.local, kAccessLocalWrite))) return false;
    if (!(target_mr[i] = reg(e.dev, e.target, kRemote))) return false;
    if (!(recv_mr[i] = reg(e.dev, e.recv, kAccessLocalWrite))) return false;
    // Atomic words start from random values (host writes before any traffic).
    for (std::uint32_t w = 0; w < kAtomicWords; ++w) {
      const std::uint64_t v = rng_.chance(0.2) ? 0 : rng_.next_u64();
      e.planned_words[w] = v;
      std::uint8_t b[8];
      std::memcpy(b, &v, 8);
      e.target.host_write(w * 8, b);
    }
  }
  for (std::size_t s = 0; s < srqs_.size(); ++s) {
    if (!(srq_mr[s] = reg(srqs_[s].dev, srqs_[s].region, kAccessLocalWrite))) return false;
  }
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    Endpoint& e = eps_[i];
    Device& dev = *devs_[static_cast<std::size_t>(e.dev)];
    auto scq = dev.create_cq(4096);
    auto rcq = dev.create_cq(4096);
    if (!scq.ok() || !rcq.ok()) {
      fail("create_cq failed");
      return false;
    }
    e.scq = scq.value();
    e.rcq = rcq.value();
    QpInitAttr ia;
    ia.type = e.ud ? QpType::kUd : QpType::kRc;
    ia.pd = pd_[e.dev];
    ia.send_cq = e.scq;
    ia.recv_cq = e.rcq;
    ia.srq = e.srq >= 0 ? srqs_[static_cast<std::size_t>(e.srq)].srq : nullptr;
    ia.caps.max_send_wr = 256;
    ia.caps.max_recv_wr = 256;
    ia.caps.max_send_sge = 4;
    ia.caps.max_recv_sge = 4;
    ia.caps.max_inline_data = kInlineMax;
    auto qp = dev.create_qp(ia);
    if (!qp.ok()) {
      failf("create_qp failed: %s", std::string(to_string(qp.error())).c_str());
      return false;
    }
    e.qp = qp.value();
  }
  // Connect: rq_psn of one side is the sq_psn of the other.
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    Endpoint& e = eps_[i];
    const Endpoint& p = eps_[static_cast<std::size_t>(e.peer)];
    e.params.rq_psn = p.params.sq_psn;
    e.params.dest_qpn = p.qp->qp_num();
    e.params.dlid = devs_[static_cast<std::size_t>(p.dev)]->lid(1);
    const Errc rc =
        e.ud ? bring_up_ud(*e.qp, kCampaignQkey, e.params.sq_psn) : bring_up_rc(*e.qp, e.params);
    if (rc != Errc::kOk) {
      failf("QP bring-up failed: %s", std::string(to_string(rc)).c_str());
      return false;
    }
    if (e.ud) {
      AddressVector av;
      av.dlid = e.params.dlid;
      auto ah = devs_[static_cast<std::size_t>(e.dev)]->create_ah(pd_[e.dev], av);
      if (!ah.ok()) {
        fail("create_ah failed");
        return false;
      }
      e.ah = ah.value();
    } else if (e.params.recovery == RecoveryMode::kGoBackN) {
      ++result_.exercised.qps_go_back_n;
    } else {
      ++result_.exercised.qps_selective_repeat;
    }
  }
  return true;
}

void Campaign::schedule() {
  for (std::size_t xi = 0; xi < eps_.size(); ++xi) {
    Endpoint& x = eps_[xi];
    for (std::size_t i = 0; i < x.ops.size(); ++i) {
      // Consecutive WRs with the same post time go in one action, in order.
      if (i > 0 && x.ops[i - 1].post_ns == x.ops[i].post_ns) continue;
      const TimeNs t = x.ops[i].post_ns;
      sim_->at(t, [this, xi, i, t](TimeNs) {
        Endpoint& e = eps_[xi];
        for (std::size_t k = i; k < e.ops.size() && e.ops[k].post_ns == t; ++k) {
          post_op(static_cast<int>(xi), k);
        }
      });
    }
    // Receives: upfront at t=0, or a few upfront and the rest late (RNR NAKs, credit stalls).
    const std::size_t nrecv = x.recvs.size();
    std::size_t upfront = nrecv;
    if (x.policy == RecvPolicy::kLate) upfront = std::min<std::size_t>(nrecv, rng_.below(3));
    for (std::size_t i = 0; i < upfront; ++i) post_recv(static_cast<int>(xi), i);
    TimeNs t = 20'000;
    for (std::size_t i = upfront; i < nrecv;) {
      t += 10'000 + rng_.below(300'000);
      const std::size_t batch = 1 + rng_.below(4);
      const std::size_t end = std::min(nrecv, i + batch);
      sim_->at(t, [this, xi, i, end](TimeNs) {
        for (std::size_t k = i; k < end; ++k) post_recv(static_cast<int>(xi), k);
      });
      i = end;
    }
  }
  for (std::size_t s = 0; s < srqs_.size(); ++s) {
    const std::size_t n = srqs_[s].bufs.size();
    const bool late = rng_.chance(0.3);
    const std::size_t upfront = late ? std::min<std::size_t>(n, rng_.below(3)) : n;
    for (std::size_t i = 0; i < upfront; ++i) post_srq(static_cast<int>(s), i);
    TimeNs t = 20'000;
    for (std::size_t i = upfront; i < n; ++i) {
      t += 10'000 + rng_.below(100'000);
      sim_->at(t, [this, s, i](TimeNs) { post_srq(static_cast<int>(s), i); });
    }
  }
}

// ---- runtime -----------------------------------------------------------------------------------
void Campaign::post_recv(int yi, std::size_t i) {
  Endpoint& y = eps_[static_cast<std::size_t>(yi)];
  RecvBuf& b = y.recvs[i];
  std::vector<Sge> sges;
  for (const Chunk& c : b.chunks) sges.push_back(Sge{y.recv.addr() + c.off, c.len, y.recv.lkey()});
  RecvWr wr;
  wr.wr_id = b.wr_id;
  wr.sg_list = sges;
  const Errc rc = y.qp->post_recv(wr);
  if (rc != Errc::kOk) {
    if (y.qp->state() != QpState::kErr) {
      failf("post_recv on qp 0x%x failed: %s", y.qp->qp_num(), std::string(to_string(rc)).c_str());
    }
    return;
  }
  b.posted = true;
}

void Campaign::post_srq(int si, std::size_t i) {
  Srq& s = srqs_[static_cast<std::size_t>(si)];
  RecvBuf& b = s.bufs[i];
  std::vector<Sge> sges;
  for (const Chunk& c : b.chunks) {
    sges.push_back(Sge{s.region.addr() + c.off, c.len, s.region.lkey()});
  }
  RecvWr wr;
  wr.wr_id = b.wr_id;
  wr.sg_list = sges;
  const Errc rc = s.srq->post_recv(wr);
  if (rc != Errc::kOk) {
    failf("srq post_recv failed: %s", std::string(to_string(rc)).c_str());
    return;
  }
  b.posted = true;
}

void Campaign::post_op(int xi, std::size_t i) {
  Endpoint& x = eps_[static_cast<std::size_t>(xi)];
  Endpoint& y = eps_[static_cast<std::size_t>(x.peer)];
  Op& op = x.ops[i];
  // Source data: fresh random bytes written by the host now, or (fenced) an earlier READ's data.
  auto random_bytes = [&](std::uint32_t n) {
    std::vector<std::uint8_t> v(n);
    for (std::uint32_t k = 0; k < n; k += 8) {
      const std::uint64_t r = data_rng_.next_u64();
      std::memcpy(v.data() + k, &r, std::min<std::uint32_t>(8, n - k));
    }
    return v;
  };
  const bool gather = op.opcode != WrOpcode::kRdmaRead && !op.atomic();
  if (op.fence_read >= 0) {
    op.data = x.ops[static_cast<std::size_t>(op.fence_read)].data;
  } else if (gather) {
    op.data = random_bytes(op.len);
    // UD: a tag naming the WR. Inverted so the payload never starts like an EtherType-
    // encapsulated frame (which Wireshark would try to dissect further).
    const std::uint64_t tag = ~op.wr_id;
    if (x.ud && op.len >= 8) std::memcpy(op.data.data(), &tag, 8);
    std::uint32_t at = 0;
    for (const Chunk& c : op.local) {
      x.local.host_write(c.off, std::span<const std::uint8_t>(op.data).subspan(at, c.len));
      at += c.len;
    }
  } else if (op.opcode == WrOpcode::kRdmaRead && !op.bad) {
    op.data = random_bytes(op.len);
    y.target.host_write(op.remote_off, op.data);
  }
  std::vector<Sge> sges;
  for (const Chunk& c : op.local)
    sges.push_back(Sge{x.local.addr() + c.off, c.len, x.local.lkey()});
  SendWr wr;
  wr.wr_id = op.wr_id;
  wr.opcode = op.opcode;
  wr.send_flags = op.flags;
  wr.sg_list = sges;
  wr.imm_data = op.imm;
  if (x.ud) {
    wr.ah = x.ah;
    wr.remote_qpn = y.qp->qp_num();
    wr.remote_qkey = kCampaignQkey;
  } else {
    wr.remote_addr = y.target.addr() + op.remote_off;
    wr.rkey = y.target.rkey();
    if (op.atomic()) {
      std::uint64_t& model = y.planned_words[op.word];
      if (op.opcode == WrOpcode::kAtomicCmpAndSwp && data_rng_.chance(0.5)) op.compare_add = model;
      wr.compare_add = op.compare_add;
      wr.swap = op.swap;
      if (!op.bad) model = apply_atomic(op, model);
    }
    if (op.bad) {
      if (op.bad_oob) {
        wr.remote_addr =
            y.target.addr() + y.target.len() - std::max<std::uint32_t>(op.len / 2, 1) + 1;
        if (op.len == 1) wr.remote_addr = y.target.addr() + y.target.len();
      } else {
        wr.rkey = y.target.rkey() ^ 0x00A5A500u;
        if (wr.rkey == y.target.rkey() || wr.rkey == y.local.rkey() || wr.rkey == y.recv.rkey()) {
          wr.rkey ^= 0x1;
        }
      }
    }
  }
  const Errc rc = x.qp->post_send(wr);
  if (rc != Errc::kOk) {
    op.post_err = rc;
    // Posting to a QP in ERR may be refused; anything else is a harness or engine bug.
    if (x.qp->state() != QpState::kErr) {
      failf("post_send %s on qp 0x%x failed: %s", std::string(to_string(op.opcode)).c_str(),
            x.qp->qp_num(), std::string(to_string(rc)).c_str());
    }
    return;
  }
  op.posted = true;
  ++result_.exercised.wrs;
  if (options_.log) {
    char buf[200];
    std::snprintf(
        buf, sizeof buf, "%s %s qp 0x%x post wr %zu (wr_id=%" PRIu64 ") %s len=%u%s%s%s%s",
        format_time(sim_->now()).c_str(), dname(x), x.qp->qp_num(), i, op.wr_id,
        std::string(to_string(op.opcode)).c_str(), op.len, op.signaled() ? " signaled" : "",
        (op.flags & kFence) ? " fence" : "", (op.flags & kInline) ? " inline" : "",
        op.bad ? (op.bad_oob ? " BAD(out of bounds)" : " BAD(rkey)") : "");
    log(buf);
  }
  // Inline data is copied at post time: scribbling the source now must not change what is sent.
  if (op.flags & kInline) {
    for (const Chunk& c : op.local) x.local.host_write(c.off, random_bytes(c.len));
  }
}

void Campaign::poll_all() {
  WorkCompletion wcs[32];
  for (auto& e : eps_) {
    for (auto* cq : {e.scq, e.rcq}) {
      auto& out = cq == e.scq ? e.scomps : e.rcomps;
      std::size_t n;
      while ((n = cq->poll(wcs)) > 0) {
        for (std::size_t k = 0; k < n; ++k) {
          out.push_back(wcs[k]);
          if (options_.log) {
            log(format_time(sim_->now()) + " " + dname(e) + " completion wr " +
                std::to_string(wcs[k].wr_id & 0xFFFFFFFFu) + (cq == e.scq ? " " : " (recv) ") +
                describe_completion(wcs[k]));
          }
        }
      }
    }
  }
}

bool Campaign::all_done() const {
  if (sim_->pending_non_deadline() != 0) return false;
  for (const auto& e : eps_) {
    // The last posted WR is signaled or the QP is in error (then everything is flushed).
    for (std::size_t i = e.ops.size(); i-- > 0;) {
      if (!e.ops[i].posted) continue;
      bool seen = false;
      const std::uint64_t id = e.ops[i].wr_id;
      for (auto it = e.scomps.rbegin(); it != e.scomps.rend(); ++it) {
        if (it->wr_id == id) {
          seen = true;
          break;
        }
      }
      if (!seen) return false;
      break;
    }
  }
  return true;
}

void Campaign::on_trace(const TraceRecord& r) {
  if (r.kind == TraceKind::kSent && r.wire.size() > wire::kLrhBytes) {
    const std::size_t bth = wire::kLrhBytes + ((r.wire[1] & 3) == 3 ? wire::kGrhBytes : 0);
    if (r.wire.size() > bth + wire::kBthBytes) {
      const std::uint8_t opc = r.wire[bth];
      result_.opcodes_sent[opc] = true;
      const auto& info = wire::opcode_info(opc);
      if (info.valid && (info.mask & wire::kHasAeth) && r.wire.size() > bth + 12) {
        const std::uint8_t syn = r.wire[bth + 12];
        const auto kind = wire::aeth_kind(syn);
        if (kind == wire::AethKind::kAck) result_.aeth_kinds[0] = true;
        if (kind == wire::AethKind::kRnrNak) result_.aeth_kinds[1] = true;
        if (kind == wire::AethKind::kNak) {
          const auto code = static_cast<wire::NakCode>(wire::aeth_value(syn));
          if (code == wire::NakCode::kPsnSequenceError) result_.aeth_kinds[2] = true;
          if (code == wire::NakCode::kInvalidRequest) result_.aeth_kinds[3] = true;
          if (code == wire::NakCode::kRemoteAccessError) result_.aeth_kinds[4] = true;
        }
      }
    }
    if (pcap_.is_open()) pcap_.write(r.time_ns, r.wire);
  }
  if (!options_.log || r.kind == TraceKind::kDelivered) return;
  std::string line = format_time(r.time_ns) + (r.src_device == 0 ? " A->B " : " B->A ");
  std::string what = to_string(r.kind);
  if (r.kind == TraceKind::kSent) {
    std::uint32_t qp = 0, psn = 0;
    const int opc = packet_opcode(r.wire);
    if (opc >= 0 && packet_psn(r.wire, qp, psn) &&
        (wire::opcode_info(static_cast<std::uint8_t>(opc)).mask & wire::kIsRequest)) {
      const std::uint64_t key = (static_cast<std::uint64_t>(r.src_device) << 56) |
                                (static_cast<std::uint64_t>(qp) << 24) | psn;
      if (!seen_requests_.insert(key).second) what = "RETRANSMIT";
    }
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%-10s ", what.c_str());
  log(line + buf + describe_packet(r.wire));
}

// ---- checkers ----------------------------------------------------------------------------------
void Campaign::check_sends(int xi) {
  Endpoint& x = eps_[static_cast<std::size_t>(xi)];
  const Endpoint& y = eps_[static_cast<std::size_t>(x.peer)];
  const std::uint32_t qpn = x.qp->qp_num();
  const bool hostile = link_[0].lossy() || link_[1].lossy() || y.qp->state() == QpState::kErr;
  bool peer_bad = false;
  for (const Op& op : y.ops) peer_bad = peer_bad || op.bad;
  long last = -1;
  bool error_seen = false;
  for (const WorkCompletion& wc : x.scomps) {
    const std::uint64_t id = wc.wr_id;
    const std::size_t idx = id & 0xFFFFFFFFu;
    if ((id >> 62) != 1 || ((id >> 32) & 0x3FFFFFFF) != static_cast<std::uint64_t>(xi) ||
        idx >= x.ops.size() || !x.ops[idx].posted) {
      failf("%s qp 0x%x: send completion with unknown wr_id %" PRIu64, dname(x), qpn, id);
      continue;
    }
    Op& op = x.ops[idx];
    if (static_cast<long>(idx) <= last) {
      failf("%s qp 0x%x: wr %zu completed %s (twice, or out of order after wr %ld)", dname(x), qpn,
            idx, op.completed ? "again" : "out of order", last);
      continue;
    }
    for (long j = last + 1; j < static_cast<long>(idx); ++j) {
      Op& skipped = x.ops[static_cast<std::size_t>(j)];
      if (!skipped.posted) continue;
      if (skipped.signaled() || error_seen) {
        failf("%s qp 0x%x: wr %ld (%s) has no completion but later wr %zu completed with %s",
              dname(x), qpn, j, std::string(to_string(skipped.opcode)).c_str(), idx,
              std::string(to_string(wc.status)).c_str());
      } else {
        skipped.inferred_success = true;
      }
    }
    last = static_cast<long>(idx);
    op.completed = true;
    op.status = wc.status;
    if (wc.qp_num != qpn) failf("%s qp 0x%x: completion names qp 0x%x", dname(x), qpn, wc.qp_num);
    if (wc.status == WcStatus::kSuccess) {
      if (error_seen)
        failf("%s qp 0x%x: wr %zu succeeded after an earlier error", dname(x), qpn, idx);
      if (!op.signaled())
        failf("%s qp 0x%x: unsignaled wr %zu produced a success completion", dname(x), qpn, idx);
      if (op.bad)
        failf("%s qp 0x%x: wr %zu with a bad %s succeeded (expected REM_ACCESS_ERR)", dname(x), qpn,
              idx, op.bad_oob ? "remote range" : "rkey");
      if (wc.opcode != expected_wc_opcode(op.opcode)) {
        failf("%s qp 0x%x: wr %zu (%s) completed with opcode %s", dname(x), qpn, idx,
              std::string(to_string(op.opcode)).c_str(), std::string(to_string(wc.opcode)).c_str());
      }
      if (op.opcode == WrOpcode::kRdmaRead && wc.byte_len != op.len) {
        failf("%s qp 0x%x: READ wr %zu byte_len %u, expected %u", dname(x), qpn, idx, wc.byte_len,
              op.len);
      }
      continue;
    }
    if (wc.status == WcStatus::kRetryExcErr) ++result_.exercised.retry_exc;
    if (wc.status == WcStatus::kRnrRetryExcErr) ++result_.exercised.rnr_retry_exc;
    if (wc.status == WcStatus::kRemAccessErr) ++result_.exercised.rem_access_err;
    if (wc.status == WcStatus::kWrFlushErr) ++result_.exercised.flushed;
    if (error_seen) {
      if (wc.status != WcStatus::kWrFlushErr) {
        failf("%s qp 0x%x: wr %zu completed %s after the QP's first error (expected WR_FLUSH_ERR)",
              dname(x), qpn, idx, std::string(to_string(wc.status)).c_str());
      }
      continue;
    }
    error_seen = true;
    bool allowed = false;
    switch (wc.status) {
      case WcStatus::kRemAccessErr:
        allowed = op.bad;
        break;
      case WcStatus::kRetryExcErr:
        allowed = hostile || peer_bad;
        break;
      case WcStatus::kRnrRetryExcErr:
        allowed = op.consuming() && x.params.rnr_retry < 7;
        break;
      case WcStatus::kWrFlushErr:
        allowed = peer_bad;
        break;
      default:
        break;
    }
    if (x.ud) allowed = false;
    if (!allowed) {
      failf(
          "%s qp 0x%x: wr %zu (%s%s) failed with %s, which nothing in this run explains "
          "(link %s, rnr_retry %u)",
          dname(x), qpn, idx, std::string(to_string(op.opcode)).c_str(), op.bad ? ", bad" : "",
          std::string(to_string(wc.status)).c_str(), hostile ? "lossy" : "clean",
          x.params.rnr_retry);
    }
  }
  for (std::size_t j = static_cast<std::size_t>(last + 1); j < x.ops.size(); ++j) {
    const Op& op = x.ops[j];
    if (!op.posted) continue;
    if (op.signaled() || error_seen || x.qp->state() == QpState::kErr) {
      failf("%s qp 0x%x: wr %zu (%s) never completed (hang; QP state %s, t=%s)", dname(x), qpn, j,
            std::string(to_string(op.opcode)).c_str(),
            std::string(to_string(x.qp->state())).c_str(), format_time(sim_->now()).c_str());
    }
  }
  if (error_seen && x.qp->state() != QpState::kErr) {
    failf("%s qp 0x%x: an error completion but the QP is in state %s, not ERR", dname(x), qpn,
          std::string(to_string(x.qp->state())).c_str());
  }
  // Memory effects of this requester's WRs.
  Endpoint& ym = eps_[static_cast<std::size_t>(x.peer)];
  for (const Op& op : x.ops) {
    if (!op.posted || op.bad) continue;
    const bool ok = op.succeeded();
    if (op.opcode == WrOpcode::kRdmaWrite || op.opcode == WrOpcode::kRdmaWriteWithImm) {
      if (ok)
        ym.target.expect(op.remote_off, op.data);
      else
        ym.target.maybe(op.remote_off, op.data);
    } else if (op.opcode == WrOpcode::kRdmaRead) {
      std::uint32_t at = 0;
      for (const Chunk& c : op.local) {
        auto part = std::span<const std::uint8_t>(op.data).subspan(at, c.len);
        if (ok)
          x.local.expect(c.off, part);
        else
          x.local.maybe(c.off, part);
        at += c.len;
      }
    }
  }
}

void Campaign::check_atomics(int yi) {
  Endpoint& y = eps_[static_cast<std::size_t>(yi)];
  Endpoint& x = eps_[static_cast<std::size_t>(y.peer)];
  for (std::uint32_t w = 0; w < kAtomicWords; ++w) {
    std::uint64_t v = y.target.expected_u64(w * 8);
    std::vector<std::uint64_t> possible;
    bool uncertain = false;
    for (const Op& op : x.ops) {
      if (!op.atomic() || op.word != w || !op.posted || op.bad) continue;
      const Chunk res = op.local[0];
      if (!uncertain && op.succeeded()) {
        std::uint64_t got;
        std::memcpy(&got, x.local.base() + res.off, 8);
        if (got != v) {
          failf("%s qp 0x%x: %s wr %" PRIu64 " returned %" PRIu64 ", the word held %" PRIu64
                " (atomic not applied exactly once, or out of order)",
                dname(x), x.qp->qp_num(), std::string(to_string(op.opcode)).c_str(),
                op.wr_id & 0xFFFFFFFF, got, v);
        }
        x.local.any(res.off, 8);  // checked here
        v = apply_atomic(op, v);
        continue;
      }
      if (!uncertain) {
        uncertain = true;
        possible.push_back(v);
      }
      x.local.any(res.off, 8);
      v = apply_atomic(op, v);
      possible.push_back(v);
    }
    std::uint64_t got;
    std::memcpy(&got, y.target.base() + w * 8, 8);
    const bool ok =
        uncertain ? std::find(possible.begin(), possible.end(), got) != possible.end() : got == v;
    if (!ok) {
      failf("%s qp 0x%x: atomic word %u holds %" PRIu64 ", expected %" PRIu64 "%s", dname(y),
            y.qp->qp_num(), w, got, uncertain ? possible.front() : v,
            uncertain ? " (or a later prefix)" : "");
    }
    y.target.any(w * 8, 8);
  }
}

void Campaign::check_rc_recvs(int yi) {
  Endpoint& y = eps_[static_cast<std::size_t>(yi)];
  const Endpoint& x = eps_[static_cast<std::size_t>(y.peer)];
  const std::uint32_t qpn = y.qp->qp_num();
  std::vector<const Op*> consuming;
  for (const Op& op : x.ops) {
    if (op.consuming() && op.posted) consuming.push_back(&op);
  }
  std::size_t successes = 0, seen = 0;
  bool flush_seen = false;
  for (const WorkCompletion& wc : y.rcomps) {
    RecvBuf* buf = nullptr;
    GuardedRegion* region = nullptr;
    if (y.srq >= 0) {
      Srq& s = srqs_[static_cast<std::size_t>(y.srq)];
      const std::size_t idx = wc.wr_id & 0xFFFFFFFFu;
      if (((wc.wr_id >> 32) & 0x3FFFFFFF) == static_cast<std::uint64_t>(1000 + y.srq) &&
          idx < s.bufs.size()) {
        buf = &s.bufs[idx];
        region = &s.region;
      }
    } else if (seen < y.recvs.size() && y.recvs[seen].posted && y.recvs[seen].wr_id == wc.wr_id) {
      buf = &y.recvs[seen];
      region = &y.recv;
    }
    ++seen;
    if (buf == nullptr) {
      failf("%s qp 0x%x: receive completion %zu has wr_id %" PRIu64 ", not the next posted receive",
            dname(y), qpn, seen - 1, wc.wr_id);
      continue;
    }
    if (++buf->completions > 1) {
      failf("%s qp 0x%x: receive wr_id %" PRIu64 " completed twice", dname(y), qpn, wc.wr_id);
    }
    if (wc.status == WcStatus::kWrFlushErr) {
      flush_seen = true;
      ++result_.exercised.flushed;
      continue;
    }
    if (wc.status != WcStatus::kSuccess) {
      failf("%s qp 0x%x: receive completed with %s", dname(y), qpn,
            std::string(to_string(wc.status)).c_str());
      continue;
    }
    if (flush_seen) failf("%s qp 0x%x: a receive succeeded after a flushed one", dname(y), qpn);
    if (successes >= consuming.size()) {
      failf("%s qp 0x%x: receive completion %zu matches no SEND/WRITE_WITH_IMM of the peer",
            dname(y), qpn, successes);
      continue;
    }
    const Op& op = *consuming[successes++];
    const bool imm = op.opcode != WrOpcode::kSend;
    const WcOpcode want =
        op.opcode == WrOpcode::kRdmaWriteWithImm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
    if (wc.opcode != want || ((wc.wc_flags & kWcWithImm) != 0) != imm ||
        (imm && wc.imm_data != op.imm) ||
        (op.opcode != WrOpcode::kRdmaWriteWithImm && wc.byte_len != op.len)) {
      failf(
          "%s qp 0x%x: receive %zu is %s len=%u imm=%s0x%x, but the peer's message %zu is %s "
          "len=%u imm=0x%x (receives out of send order, or wrong)",
          dname(y), qpn, successes - 1, std::string(to_string(wc.opcode)).c_str(), wc.byte_len,
          (wc.wc_flags & kWcWithImm) ? "" : "none/", wc.imm_data, successes - 1,
          std::string(to_string(op.opcode)).c_str(), op.len, op.imm);
      continue;
    }
    buf->filled = true;
    if (op.opcode != WrOpcode::kRdmaWriteWithImm) {
      std::uint32_t at = 0;
      for (const Chunk& c : buf->chunks) {
        if (at >= op.len) break;
        const std::uint32_t n = std::min(c.len, op.len - at);
        region->expect(c.off, std::span<const std::uint8_t>(op.data).subspan(at, n));
        at += n;
      }
    }
  }
  // Every message the requester saw acknowledged must have been received.
  for (std::size_t k = successes; k < consuming.size(); ++k) {
    if (consuming[k]->succeeded()) {
      failf("%s qp 0x%x: the peer's message %zu (wr %" PRIu64
            ") completed successfully but was "
            "never received",
            dname(y), qpn, k, consuming[k]->wr_id & 0xFFFFFFFF);
      break;
    }
  }
  // Receive buffers that no message completed into: untouched unless a failed message may have
  // partly landed in them.
  bool pair_failed = false;
  for (const Op* op : consuming) pair_failed = pair_failed || !op->succeeded();
  auto unconsumed = [&](GuardedRegion& r, RecvBuf& b) {
    // A flushed buffer may hold part of a message whose QP failed mid-way.
    if (!b.filled && pair_failed) {
      for (const Chunk& c : b.chunks) r.any(c.off, c.len);
    }
  };
  if (y.srq < 0) {
    for (auto& b : y.recvs) {
      unconsumed(y.recv, b);
      if (b.posted && b.completions == 0 && y.qp->state() == QpState::kErr) {
        failf("qp 0x%x is in ERR but receive wr_id %" PRIu64 " was never flushed", qpn, b.wr_id);
        break;
      }
    }
  } else {
    Srq& s = srqs_[static_cast<std::size_t>(y.srq)];
    for (auto& b : s.bufs) unconsumed(s.region, b);
  }
}

void Campaign::check_ud_recvs(int yi) {
  Endpoint& y = eps_[static_cast<std::size_t>(yi)];
  const Endpoint& x = eps_[static_cast<std::size_t>(y.peer)];
  const std::uint32_t qpn = y.qp->qp_num();
  for (const WorkCompletion& wc : y.rcomps) {
    const std::size_t idx = wc.wr_id & 0xFFFFFFFFu;
    if (((wc.wr_id >> 32) & 0x3FFFFFFF) != static_cast<std::uint64_t>(yi) ||
        idx >= y.recvs.size()) {
      failf("UD qp 0x%x: receive completion with unknown wr_id %" PRIu64, qpn, wc.wr_id);
      continue;
    }
    RecvBuf& b = y.recvs[idx];
    if (++b.completions > 1) failf("UD qp 0x%x: receive %zu completed twice", qpn, idx);
    if (wc.status != WcStatus::kSuccess) {
      failf("UD qp 0x%x: receive completed with %s", qpn,
            std::string(to_string(wc.status)).c_str());
      continue;
    }
    ++result_.exercised.ud_messages;
    const std::uint8_t* p = y.recv.base() + b.chunks[0].off + kUdGrhBytes;
    std::uint64_t tag = 0;
    std::memcpy(&tag, p, 8);
    tag = ~tag;
    const std::size_t m = tag & 0xFFFFFFFFu;
    if ((tag >> 32) != ((1ULL << 30) | static_cast<std::uint64_t>(y.peer)) || m >= x.ops.size()) {
      failf("UD qp 0x%x: received a datagram with unknown tag 0x%" PRIx64, qpn, tag);
      continue;
    }
    const Op& op = x.ops[m];
    const std::uint32_t len = wc.byte_len >= kUdGrhBytes ? wc.byte_len - kUdGrhBytes : 0;
    const bool imm = op.opcode == WrOpcode::kSendWithImm;
    if (len != op.len || std::memcmp(p, op.data.data(), op.len) != 0 ||
        ((wc.wc_flags & kWcWithImm) != 0) != imm || (imm && wc.imm_data != op.imm) ||
        wc.src_qp != x.qp->qp_num()) {
      failf("UD qp 0x%x: datagram %zu differs from what was sent (byte_len %u, sent %u+40)", qpn, m,
            wc.byte_len, op.len);
    }
  }
  for (auto& b : y.recvs) {
    for (const Chunk& c : b.chunks) y.recv.any(c.off, c.len);
  }
}

void Campaign::check() {
  for (std::size_t i = 0; i < eps_.size(); ++i) check_sends(static_cast<int>(i));
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    if (eps_[i].ud) {
      check_ud_recvs(static_cast<int>(i));
    } else {
      check_rc_recvs(static_cast<int>(i));
      check_atomics(static_cast<int>(i));
    }
  }
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    Endpoint& e = eps_[i];
    char name[64];
    std::snprintf(name, sizeof name, "%s qp 0x%x %s region", dname(e), e.qp->qp_num(), "local");
    e.local.check(name, result_.failures);
    std::snprintf(name, sizeof name, "%s qp 0x%x %s region", dname(e), e.qp->qp_num(), "target");
    e.target.check(name, result_.failures);
    std::snprintf(name, sizeof name, "%s qp 0x%x %s region", dname(e), e.qp->qp_num(), "receive");
    e.recv.check(name, result_.failures);
  }
  for (auto& s : srqs_) s.region.check("SRQ region", result_.failures);
  if (sim_->limit_reached()) {
    failf("the run hit its limit (events %" PRIu64 ", t=%s) before all work completed",
          sim_->events(), format_time(sim_->now()).c_str());
  }
  for (auto& d : devs_) {
    if (d->counters().cq_overruns != 0) fail("a CQ overran");
  }
}

void Campaign::summarize() {
  Exercised& x = result_.exercised;
  x.seeds = 1;
  for (auto& d : devs_) {
    const DeviceCounters& c = d->counters();
    x.packets += c.tx_packets;
    x.retransmits += c.retransmit_packets;
    x.timeouts += c.timeouts;
    x.naks_seq += c.naks_tx_seq;
    x.naks_rnr += c.naks_tx_rnr;
    x.naks_access += c.naks_tx_access;
    x.dup_reads_replayed += c.dup_reads_replayed;
    x.dup_atomics_replayed += c.dup_atomics_replayed;
    x.credit_stalls += c.credit_stalls;
    x.rx_bad_crc += c.rx_bad_icrc + c.rx_bad_vcrc;
  }
  for (int d = 0; d < 2; ++d) {
    const LinkStats& s = sim_->link(d, 1 - d)->stats();
    x.link_dropped += s.dropped;
    x.link_corrupted += s.corrupted;
    x.link_duplicated += s.duplicated;
    x.link_reordered += s.reordered;
  }
}

SeedResult Campaign::run() {
  result_.seed = seed_;
  draw_scenario();
  {
    char buf[256];
    int rc_pairs = 0, ud = 0;
    for (const auto& e : eps_) (e.ud ? ud : rc_pairs) += e.dev == 0;
    std::snprintf(buf, sizeof buf,
                  "seed=%" PRIu64
                  " crc=%s rc_pairs=%d ud=%d srq=%d drop=%.3f/%.3f corrupt=%.3f/%.3f "
                  "burst=%d bad_wr=%d",
                  seed_, crc_ == CrcMode::kCompute ? "compute" : "model", rc_pairs, ud / 1,
                  srqs_.empty() ? 0 : 1, link_[0].drop, link_[1].drop, link_[0].corrupt,
                  link_[1].corrupt, burst_ ? 1 : 0, bad_ep_ >= 0 ? 1 : 0);
    result_.config = buf;
    log(buf);
  }
  if (!build()) {
    result_.passed = false;
    return result_;
  }
  if (!options_.pcap_path.empty() && !pcap_.open(options_.pcap_path, wire::kLinktypeErf)) {
    fail("cannot open pcap file " + options_.pcap_path);
  }
  sim_->set_trace([this](const TraceRecord& r) { on_trace(r); },
                  pcap_.is_open() || static_cast<bool>(options_.log));
  sim_->set_after_event([this](TimeNs) { poll_all(); });
  schedule();
  sim_->run_until([this] { return all_done(); });
  poll_all();
  if (pcap_.is_open()) pcap_.close();
  result_.trace_hash = sim_->trace_hash();
  result_.events = sim_->events();
  result_.end_ns = sim_->now();
  check();
  summarize();
  result_.passed = result_.failures.empty();
  return result_;
}

}  // namespace

SeedResult run_seed(std::uint64_t seed, const CampaignOptions& options) {
  Campaign c(seed, options);
  return c.run();
}

}  // namespace weft::harness
