// tests/transport/pump.hpp — a tiny direct "medium" for transport tests: connects Devices with no
// link model (poll_transmit -> on_packet of the Device owning the DLID), lets a test drop,
// duplicate, hold (reorder), corrupt or inspect each packet, and advances a fake clock to the
// next deadline when nothing moves. Plus helpers that build a connected RC or UD pair.
// Thread-safety: single-threaded test code.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <weft/device.hpp>

#include "src/wire/packet.hpp"

namespace weft::test {

struct Packet {
  std::size_t from = 0;  // index of the sending Device
  wire::Headers h{};
  std::vector<std::uint8_t> bytes;  // the wire image (a hook may flip bits in it)
  std::uint32_t payload_bytes = 0;
};

enum class Action { kDeliver, kDrop, kDuplicate, kHold };

class Pump {
 public:
  explicit Pump(std::vector<Device*> devs) : devs_(std::move(devs)) {}

  // Per-packet hook; default delivers everything.
  std::function<Action(Packet&)> hook;
  // Deliver by reference (on_packet(TxPacket)) instead of as bytes.
  bool by_ref = false;
  // With by_ref: move packets in bursts of up to burst_packets (poll_transmit_burst, then each
  // destination's run of packets through on_packet_burst) instead of one call per packet.
  bool burst = false;
  std::size_t burst_packets = 8;
  TimeNs now = 0;
  std::vector<Packet> log;  // every packet put on the wire, in order

  // The wire image of `pkt`, sent by Device `from`: parsed (an engine packet must parse) and
  // logged.
  Packet record(std::size_t from, const TxPacket& pkt) {
    Packet p;
    p.from = from;
    p.bytes.resize(pkt.wire_bytes());
    pkt.write_to(p.bytes);
    p.payload_bytes = pkt.payload_bytes;
    auto parsed = wire::parse_packet(p.bytes);
    EXPECT_TRUE(parsed.ok()) << "the engine emitted a packet that does not parse";
    if (parsed) p.h = parsed->h;
    log.push_back(p);
    return p;
  }

  // Moves packets until every Device is idle. Returns packets moved.
  std::size_t step() {
    if (burst && by_ref) return step_bursts();
    std::size_t moved = 0;
    for (std::size_t i = 0; i < devs_.size(); ++i) {
      TxPacket pkt;
      while (devs_[i]->poll_transmit(now, pkt)) {
        ++moved;
        Packet p = record(i, pkt);
        const Action a = hook ? hook(p) : Action::kDeliver;
        if (a == Action::kDrop) continue;
        if (a == Action::kHold) {
          held_.push_back(p);
          continue;
        }
        deliver(p, by_ref ? &pkt : nullptr);
        if (a == Action::kDuplicate) deliver(p, by_ref ? &pkt : nullptr);
      }
    }
    return moved;
  }

  // step() in bursts: the same hook per packet and the same log; the packets a hook lets through
  // reach their Devices in order, each run to one Device in one on_packet_burst call.
  std::size_t step_bursts() {
    std::size_t moved = 0;
    std::vector<TxPacket> pkts(burst_packets);
    for (std::size_t i = 0; i < devs_.size(); ++i) {
      while (const std::size_t n = devs_[i]->poll_transmit_burst(now, pkts)) {
        moved += n;
        std::vector<TxPacket> run;
        Device* run_to = nullptr;
        const auto flush = [&] {
          if (run_to && !run.empty()) run_to->on_packet_burst(run, now);
          run.clear();
        };
        for (std::size_t k = 0; k < n; ++k) {
          const TxPacket& pkt = pkts[k];
          Packet p = record(i, pkt);
          const Action a = hook ? hook(p) : Action::kDeliver;
          if (a == Action::kDrop) continue;
          if (a == Action::kHold) {
            held_.push_back(p);
            continue;
          }
          Device* to = destination(p);
          if (to != run_to) {
            flush();
            run_to = to;
          }
          run.push_back(pkt);
          if (a == Action::kDuplicate) run.push_back(pkt);
        }
        flush();
      }
    }
    return moved;
  }

  // Delivers held packets (newest first when reverse).
  void release_held(bool reverse = false) {
    auto h = std::move(held_);
    held_.clear();
    if (reverse) std::reverse(h.begin(), h.end());
    for (auto& p : h) deliver(p, nullptr);
  }
  std::size_t held() const { return held_.size(); }

  // Runs until idle with no deadline, or max_steps rounds; time jumps to deadlines.
  void run(std::size_t max_steps = 100000, TimeNs until = kNoDeadline) {
    for (std::size_t s = 0; s < max_steps; ++s) {
      if (step() > 0) continue;
      TimeNs t = kNoDeadline;
      for (Device* d : devs_) t = std::min(t, d->next_deadline());
      if (t == kNoDeadline || t > until) return;
      if (t > now) now = t;
      for (Device* d : devs_) d->on_deadline(now);
    }
  }

 private:
  Device* destination(const Packet& p) const {
    const std::uint16_t dlid = static_cast<std::uint16_t>((p.bytes[2] << 8) | p.bytes[3]);
    for (Device* d : devs_)
      if (d->lid(1) == dlid) return d;
    return nullptr;
  }
  void deliver(const Packet& p, const TxPacket* ref) {
    Device* d = destination(p);
    if (d == nullptr) return;
    if (ref)
      d->on_packet(*ref, now);
    else
      d->on_packet(p.bytes, now);
  }
  std::vector<Device*> devs_;
  std::vector<Packet> held_;
};

// One side of a connection: a Device with a PD, CQs, a QP and a data region with guard bytes.
struct Side {
  std::unique_ptr<Device> dev;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* scq = nullptr;
  CompletionQueue* rcq = nullptr;
  QueuePair* qp = nullptr;
  std::vector<std::uint8_t> buf;  // kGuardBytes | region | kGuardBytes
  MemoryRegion* mr = nullptr;
  static constexpr std::size_t kGuardBytes = 64;
  static constexpr std::uint8_t kGuard = 0xA5;

  std::uint8_t* data() { return buf.data() + kGuardBytes; }
  std::size_t size() const { return buf.size() - 2 * kGuardBytes; }
  std::uint64_t va(std::size_t off = 0) { return reinterpret_cast<std::uintptr_t>(data() + off); }
  bool guards_intact() const {
    for (std::size_t i = 0; i < kGuardBytes; ++i)
      if (buf[i] != kGuard || buf[buf.size() - 1 - i] != kGuard) return false;
    return true;
  }
  std::vector<WorkCompletion> poll(CompletionQueue* cq) {
    std::vector<WorkCompletion> out(64);
    out.resize(cq->poll(out));
    return out;
  }
  std::vector<WorkCompletion> send_wcs() { return poll(scq); }
  std::vector<WorkCompletion> recv_wcs() { return poll(rcq); }
  std::vector<AsyncEvent> events() {
    std::vector<AsyncEvent> out;
    AsyncEvent e;
    while (dev->poll_async_event(e)) out.push_back(e);
    return out;
  }
  Errc post_send(WrOpcode op, std::size_t off, std::uint32_t len, std::uint64_t wr_id,
                 std::uint64_t remote_addr = 0, std::uint32_t rkey = 0,
                 std::uint32_t flags = kSignaled, std::uint32_t imm = 0) {
    Sge sge{va(off), len, mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.sg_list = {&sge, len ? 1u : 0u};
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr.imm_data = imm;
    return qp->post_send(wr);
  }
  Errc post_recv(std::size_t off, std::uint32_t len, std::uint64_t wr_id) {
    Sge sge{va(off), len, mr->lkey()};
    RecvWr wr{wr_id, {&sge, 1}};
    return qp->post_recv(wr);
  }
};

struct PairOptions {
  std::size_t region_bytes = 1 << 20;
  Mtu mtu = Mtu::k1024;
  CrcMode crc = CrcMode::kCompute;
  std::uint32_t access =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  std::uint32_t cq_depth = 1024;
  QpCaps caps{};
  bool sq_sig_all = false;
  RecoveryMode recovery = RecoveryMode::kGoBackN;
  std::uint8_t timeout = 14;
  std::uint8_t retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 1;
  std::uint8_t max_rd_atomic = 4, max_dest_rd_atomic = 4;
  std::uint32_t psn_a = 0x100, psn_b = 0x200;
  std::uint32_t ack_coalesce_max = 4;
  TimeNs ack_delay_ns = 0;  // DeviceConfig::ack_delay_ns (delayed ACKs), both sides
  bool use_srq = false;
  QpType type = QpType::kRc;
  bool grh = false;  // RC: the primary path carries a GRH (av.global)
};

inline Side make_side(std::uint16_t lid, std::uint64_t guid, const PairOptions& o, Rng& rng) {
  Side s;
  DeviceConfig cfg;
  cfg.node_guid = guid;
  cfg.ports[0].lid = lid;
  cfg.crc = o.crc;
  cfg.ack_coalesce_max = o.ack_coalesce_max;
  cfg.ack_delay_ns = o.ack_delay_ns;
  s.dev = Device::create(cfg, rng);
  s.pd = *s.dev->alloc_pd();
  s.scq = *s.dev->create_cq(o.cq_depth);
  s.rcq = *s.dev->create_cq(o.cq_depth);
  s.buf.assign(o.region_bytes + 2 * Side::kGuardBytes, Side::kGuard);
  std::memset(s.data(), 0, o.region_bytes);
  s.mr = *s.dev->reg_mr(s.pd, s.data(), o.region_bytes, o.access);
  QpInitAttr qa;
  qa.type = o.type;
  qa.pd = s.pd;
  qa.send_cq = s.scq;
  qa.recv_cq = s.rcq;
  qa.caps = o.caps;
  qa.sq_sig_all = o.sq_sig_all;
  if (o.use_srq) qa.srq = *s.dev->create_srq(s.pd, 256, 4);
  s.qp = *s.dev->create_qp(qa);
  return s;
}

// Moves an RC QP to RTS towards (dlid, dest_qpn).
inline void connect_rc(QueuePair* qp, std::uint16_t dlid, std::uint32_t dest_qpn,
                       std::uint32_t sq_psn, std::uint32_t rq_psn, const PairOptions& o) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  a.recovery = o.recovery;
  ASSERT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpRecoveryMode),
            Errc::kOk);
  a.qp_state = QpState::kRtr;
  a.av.dlid = dlid;
  a.av.global = o.grh;
  a.av.dgid[15] = static_cast<std::uint8_t>(dlid);
  a.av.flow_label = 0x12345;
  a.path_mtu = o.mtu;
  a.dest_qpn = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = o.max_dest_rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  ASSERT_EQ(qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                              kQpMaxDestRdAtomic | kQpMinRnrTimer),
            Errc::kOk);
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.max_rd_atomic = o.max_rd_atomic;
  ASSERT_EQ(
      qp->modify(a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic),
      Errc::kOk);
}

inline void connect_ud(QueuePair* qp, std::uint32_t qkey) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = qkey;
  ASSERT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey), Errc::kOk);
  a.qp_state = QpState::kRtr;
  ASSERT_EQ(qp->modify(a, kQpState), Errc::kOk);
  a.qp_state = QpState::kRts;
  a.sq_psn = 0;
  ASSERT_EQ(qp->modify(a, kQpState | kQpSqPsn), Errc::kOk);
}

// Two Devices (LIDs 1 and 2) with one connected QP each.
struct Pair {
  SeededRng rng{1};
  PairOptions opt;
  Side a, b;
  std::unique_ptr<Pump> pump;
  explicit Pair(const PairOptions& o = {}) : opt(o) {
    a = make_side(1, 0xA, o, rng);
    b = make_side(2, 0xB, o, rng);
    if (o.type == QpType::kRc) {
      connect_rc(a.qp, 2, b.qp->qp_num(), o.psn_a, o.psn_b, o);
      connect_rc(b.qp, 1, a.qp->qp_num(), o.psn_b, o.psn_a, o);
    } else {
      connect_ud(a.qp, 0x1234);
      connect_ud(b.qp, 0x1234);
    }
    pump = std::make_unique<Pump>(std::vector<Device*>{a.dev.get(), b.dev.get()});
  }
  void run() { pump->run(); }
  // Packets of the log sent by side 0 (a) or 1 (b).
  std::vector<Packet> sent_by(std::size_t side) const {
    std::vector<Packet> out;
    for (const auto& p : pump->log)
      if (p.from == side) out.push_back(p);
    return out;
  }
};

}  // namespace weft::test
