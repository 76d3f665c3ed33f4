// coll/verbs_transport.cpp — Transport over weft verbs (see verbs_transport.hpp).
#include "src/coll/verbs_transport.hpp"

#include <algorithm>

#include "src/base/assert.hpp"
#include "src/coll/verbs_wire.hpp"

namespace weft::coll {

Result<std::unique_ptr<VerbsTransport>, Errc> VerbsTransport::create(
    Device& device, ProtectionDomain* pd, const VerbsTransportConfig& config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size || config.lanes < 1 ||
      config.slots < 1 || config.slots >= kGrantBit || config.slot_bytes % 8 != 0 ||
      config.slot_bytes == 0) {
    return Errc::kInvalidArgument;
  }
  std::unique_ptr<VerbsTransport> t(new VerbsTransport(device, pd, config));
  // Room for every completion that can be outstanding: per QP, 2 x slots sends (data + grants)
  // and 2 x slots receives, so the CQ can never overrun.
  const std::uint64_t need = std::uint64_t{4} * config.slots *
                             static_cast<std::uint64_t>(config.size) *
                             static_cast<std::uint64_t>(config.lanes);
  if (need > kCqDepthMax) return Errc::kInvalidArgument;
  auto cq =
      device.create_cq(static_cast<std::uint32_t>(std::max<std::uint64_t>(config.cq_depth, need)));
  if (!cq) return cq.error();
  t->cq_ = cq.value();
  const std::size_t conns = static_cast<std::size_t>(config.size) * config.lanes;
  t->conns_.resize(conns);
  t->inboxes_.assign(conns * config.slots * config.slot_bytes, 0);
  auto mr = device.reg_mr(pd, t->inboxes_.data(), t->inboxes_.size(),
                          kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr) return mr.error();
  t->inbox_mr_ = mr.value();
  t->wc_.resize(64);
  return t;
}

VerbsTransport::~VerbsTransport() {
  for (auto& c : conns_) {
    if (c.qp != nullptr) dev_.destroy_qp(c.qp);
  }
  for (auto& [addr, mr] : regions_) dev_.dereg_mr(mr);
  if (inbox_mr_ != nullptr) dev_.dereg_mr(inbox_mr_);
  if (cq_ != nullptr) dev_.destroy_cq(cq_);
}

Result<QueuePair*, Errc> VerbsTransport::create_qp(int peer, int lane) {
  WEFT_ASSERT(peer >= 0 && peer < cfg_.size && peer != cfg_.rank && lane >= 0 && lane < cfg_.lanes);
  QpInitAttr ia;
  ia.pd = pd_;
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.sq_sig_all = true;
  ia.caps.max_send_wr = 2 * cfg_.slots + 2;
  ia.caps.max_recv_wr = 2 * cfg_.slots;
  ia.caps.max_send_sge = 1;
  ia.caps.max_recv_sge = 1;
  auto qp = dev_.create_qp(ia);
  if (!qp) return qp.error();
  conn(peer, lane).qp = qp.value();
  qpn_to_conn_[qp.value()->qp_num()] = peer * cfg_.lanes + lane;
  return qp.value();
}

std::uint64_t VerbsTransport::inbox_addr(int peer, int lane) const {
  return reinterpret_cast<std::uintptr_t>(inboxes_.data() + inbox_offset(peer, lane));
}

std::uint32_t VerbsTransport::inbox_rkey() const {
  return inbox_mr_->rkey();
}

Errc VerbsTransport::post_one_recv(QueuePair* qp) {
  RecvWr wr;  // no SGE: WRITE WITH IMM places by RETH, grants carry no payload
  wr.wr_id = 0;
  return qp->post_recv(wr);
}

Errc VerbsTransport::connect(int peer, int lane, std::uint64_t remote_inbox_addr,
                             std::uint32_t remote_rkey) {
  Conn& c = conn(peer, lane);
  if (c.qp == nullptr) return Errc::kInvalidState;
  c.remote_addr = remote_inbox_addr;
  c.remote_rkey = remote_rkey;
  for (std::uint32_t i = 0; i < 2 * cfg_.slots; ++i) {
    if (Errc e = post_one_recv(c.qp); e != Errc::kOk) return e;
  }
  return Errc::kOk;
}

TransportErrc VerbsTransport::register_memory(const void* addr, std::size_t bytes) {
  if (bytes == 0 || regions_.count(addr) != 0) return TransportErrc::kOk;
  auto mr = dev_.reg_mr(pd_, const_cast<void*>(addr), bytes, kAccessLocalWrite);
  if (!mr) return TransportErrc::kFailed;
  regions_[addr] = mr.value();
  return TransportErrc::kOk;
}

void VerbsTransport::unregister_memory(const void* addr) {
  auto it = regions_.find(addr);
  if (it == regions_.end()) return;
  dev_.dereg_mr(it->second);
  regions_.erase(it);
}

TransportErrc VerbsTransport::post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                                         std::uint32_t slot, std::uint64_t wr_id) {
  WEFT_ASSERT(bytes <= cfg_.slot_bytes && slot < cfg_.slots && (wr_id & kGrantWrId) == 0);
  Conn& c = conn(peer, lane);
  std::uint32_t lkey = 0;
  if (bytes > 0) {
    // Regions may overlap (in-place buffers): take any that starts at or before src and
    // covers the whole chunk.
    const auto* p = static_cast<const std::uint8_t*>(src);
    bool found = false;
    for (auto it = regions_.upper_bound(src); it != regions_.begin() && !found;) {
      --it;
      const auto* base = static_cast<const std::uint8_t*>(it->first);
      if (p + bytes <= base + it->second->length()) {
        lkey = it->second->lkey();
        found = true;
      }
    }
    if (!found) return TransportErrc::kUnregistered;
  }
  const Sge sge{reinterpret_cast<std::uintptr_t>(src), bytes, lkey};
  const Errc e =
      c.qp->post_send(data_wr(sge, slot, wr_id, c.remote_addr, c.remote_rkey, cfg_.slot_bytes));
  if (e == Errc::kQueueFull) return TransportErrc::kBusy;
  return e == Errc::kOk ? TransportErrc::kOk : TransportErrc::kFailed;
}

TransportErrc VerbsTransport::post_grant(int peer, int lane, std::uint32_t credits) {
  WEFT_ASSERT(credits > 0 && credits < kGrantBit);
  Conn& c = conn(peer, lane);
  const Errc e = c.qp->post_send(grant_wr(credits));
  if (e == Errc::kQueueFull) return TransportErrc::kBusy;
  return e == Errc::kOk ? TransportErrc::kOk : TransportErrc::kFailed;
}

std::size_t VerbsTransport::poll(std::span<TransportEvent> out) {
  std::size_t n = 0;
  while (n < out.size()) {
    const std::size_t want = std::min(wc_.size(), out.size() - n);
    const std::size_t got = cq_->poll(std::span(wc_.data(), want));
    if (got == 0) break;
    for (std::size_t i = 0; i < got; ++i) {
      const WorkCompletion& wc = wc_[i];
      auto it = qpn_to_conn_.find(wc.qp_num);
      WEFT_ASSERT(it != qpn_to_conn_.end());
      TransportEvent ev;
      ev.peer = it->second / cfg_.lanes;
      ev.lane = it->second % cfg_.lanes;
      const Completion what = decode_completion(wc, ev);
      if (what == Completion::kNothing) continue;
      if (what == Completion::kEventConsumed) {
        // Repost first: the receive ring stays at 2 x slots.
        const Errc e = post_one_recv(conn(ev.peer, ev.lane).qp);
        WEFT_ASSERT(e == Errc::kOk);
      }
      out[n++] = ev;
    }
  }
  return n;
}

const std::uint8_t* VerbsTransport::inbox(int peer, int lane, std::uint32_t slot) const {
  return inboxes_.data() + inbox_offset(peer, lane) + std::size_t{slot} * cfg_.slot_bytes;
}

}  // namespace weft::coll
