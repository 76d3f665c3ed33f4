// emu/collsim/fabric_net.cpp — see fabric_net.hpp.
#include "emu/collsim/fabric_net.hpp"

#include <algorithm>

#include "emu/fabric/workload.hpp"
#include "emu/topo/spec.hpp"
#include "src/base/assert.hpp"
#include "src/coll/verbs_wire.hpp"
#include "src/link/phy_channel.hpp"

namespace weft::collsim {

using coll::TransportErrc;
using coll::TransportEvent;

using coll::kGrantBit;
using coll::kGrantWrId;

Result<std::unique_ptr<FabricNet>, std::string> FabricNet::create(const FabricNetConfig& cfg,
                                                                  int nodes, int gpus) {
  auto t = topo::from_spec(cfg.topology);
  if (!t) return std::string("topology: ") + t.error().message;
  if (cfg.lanes < 1 || cfg.slots < 1 || cfg.slots >= kGrantBit || cfg.slot_bytes == 0)
    return std::string("bad lanes, slots or slot size");
  std::unique_ptr<FabricNet> f(new FabricNet());
  f->cfg_ = cfg;
  f->topo_ = std::move(*t);
  f->gpus_ = gpus;
  f->n_ = nodes * gpus;
  const auto& doms = f->topo_.nvlink_domains();
  if (doms.empty()) {
    for (topo::NodeId i = 0; i < f->topo_.node_count(); ++i)
      if (!f->topo_.node(i).is_switch()) f->hca_.push_back(i);
    if (gpus != 1 || static_cast<int>(f->hca_.size()) != f->n_)
      return std::string("the topology's HCAs do not match the cluster");
  } else {
    if (static_cast<int>(doms.size()) != nodes) return std::string("node count mismatch");
    for (const auto& d : doms) {
      if (static_cast<int>(d.hcas.size()) != gpus) return std::string("GPU count mismatch");
      f->hca_.insert(f->hca_.end(), d.hcas.begin(), d.hcas.end());
    }
  }
  sim::SimConfig sc;
  sc.seed = cfg.seed;
  sc.trace_hash = false;
  f->sim_ = std::make_unique<sim::Simulator>(sc);
  fabric::FabricConfig fc;
  fc.sm_managed = true;
  fc.mode = cfg.payload ? fabric::DataMode::kVerified : fabric::DataMode::kTimingOnly;
  f->fabric_ = std::make_unique<fabric::Fabric>(*f->sim_, f->topo_, fc);
  sm::SmOptions so;
  so.sm.routing = cfg.routing;
  so.sm.lmc = cfg.lmc;
  f->sm_ = std::make_unique<simrun::FabricSmControl>(*f->fabric_, f->log_, so);
  const simrun::SmReport rep = f->sm_->bring_up();
  if (!rep.routes_valid)
    return "the subnet manager did not bring the fabric up: " +
           (rep.error.empty() ? std::string("routes not valid") : rep.error);
  f->devs_.resize(f->hca_.size());
  for (std::size_t i = 0; i < f->hca_.size(); ++i) {
    Dev& d = f->devs_[i];
    d.node = f->hca_[i];
    d.device = &f->fabric_->device(d.node);
    auto pd = d.device->alloc_pd();
    if (!pd) return std::string("alloc_pd failed");
    d.pd = *pd;
    auto cq = d.device->create_cq(kCqDepthMax);
    if (!cq) return std::string("create_cq failed");
    d.cq = *cq;
    const int di = static_cast<int>(i);
    FabricNet* self = f.get();
    f->fabric_->hca(d.node).set_completion_hook([self, di] { self->on_completions(di); });
    if (!cfg.payload) {
      d.shared_inbox.assign(std::size_t{cfg.slots} * cfg.slot_bytes, 0);
      auto mr = d.device->reg_mr(d.pd, d.shared_inbox.data(), d.shared_inbox.size(),
                                 kAccessLocalWrite | kAccessRemoteWrite);
      if (!mr) return std::string("reg_mr failed");
      d.shared_mr = *mr;
    }
  }
  f->wc_.resize(64);
  f->events_base_ = f->sim_->events_dispatched();
  return f;
}

FabricNet::~FabricNet() {
  for (auto& d : devs_)
    if (d.node != topo::kNoNode && fabric_) fabric_->hca(d.node).set_completion_hook({});
  injector_.reset();
  sm_.reset();
}

void FabricNet::start_faults() {
  if (cfg_.scenario.events.empty() && cfg_.scenario.ports.empty()) return;
  injector_ = std::make_unique<faults::FaultInjector>(*fabric_, log_, sm_.get());
  injector_->apply(cfg_.scenario);
}

bool FabricNet::make_side(Side& s) {
  Dev& d = devs_[static_cast<std::size_t>(s.dev)];
  QpInitAttr ia;
  ia.type = QpType::kRc;
  ia.pd = d.pd;
  ia.send_cq = d.cq;
  ia.recv_cq = d.cq;
  ia.sq_sig_all = true;
  ia.caps.max_send_wr = 2 * cfg_.slots + 2;
  ia.caps.max_recv_wr = 2 * cfg_.slots;
  ia.caps.max_send_sge = 1;
  ia.caps.max_recv_sge = 1;
  auto qp = d.device->create_qp(ia);
  if (!qp) return false;
  s.qp = *qp;
  ++qps_;
  if (cfg_.payload) {
    s.inbox.assign(std::size_t{cfg_.slots} * cfg_.slot_bytes, 0);
    auto mr = d.device->reg_mr(d.pd, s.inbox.data(), s.inbox.size(),
                               kAccessLocalWrite | kAccessRemoteWrite);
    if (!mr) return false;
    s.inbox_mr = *mr;
    s.inbox_base = s.inbox.data();
  } else {
    s.inbox_mr = d.shared_mr;
    s.inbox_base = d.shared_inbox.data();
  }
  return true;
}

FabricNet::Side* FabricNet::side(int rank, int peer, int lane) {
  auto it = side_of_.find(key(rank, peer, lane));
  if (it != side_of_.end()) return sides_[it->second].get();
  // First use of this (pair, lane): both ends, connected, receives posted.
  auto a = std::make_unique<Side>();
  auto b = std::make_unique<Side>();
  *a = Side{.rank = rank, .peer = peer, .lane = lane, .dev = nic_dev(rank, lane)};
  *b = Side{.rank = peer, .peer = rank, .lane = lane, .dev = nic_dev(peer, lane)};
  if (!make_side(*a) || !make_side(*b)) return nullptr;
  fabric::RcEndpoint ea, eb;
  ea.node = devs_[static_cast<std::size_t>(a->dev)].node;
  ea.qp = a->qp;
  eb.node = devs_[static_cast<std::size_t>(b->dev)].node;
  eb.qp = b->qp;
  fabric::RcConnectParams p;
  p.mtu = cfg_.mtu;
  p.timeout = cfg_.qp_timeout;
  p.retry_cnt = cfg_.retry_cnt;
  if (fabric::connect_rc(*fabric_, ea, eb, p) != Errc::kOk) return nullptr;
  a->remote_addr = reinterpret_cast<std::uintptr_t>(b->inbox_base);
  a->remote_rkey = b->inbox_mr->rkey();
  b->remote_addr = reinterpret_cast<std::uintptr_t>(a->inbox_base);
  b->remote_rkey = a->inbox_mr->rkey();
  for (Side* s : {a.get(), b.get()}) {
    for (std::uint32_t i = 0; i < 2 * cfg_.slots; ++i) {
      RecvWr wr;
      if (s->qp->post_recv(wr) != Errc::kOk) return nullptr;
    }
  }
  const auto ia = static_cast<std::uint32_t>(sides_.size());
  devs_[static_cast<std::size_t>(a->dev)].qpn_side[a->qp->qp_num()] = ia;
  devs_[static_cast<std::size_t>(b->dev)].qpn_side[b->qp->qp_num()] = ia + 1;
  side_of_[key(rank, peer, lane)] = ia;
  side_of_[key(peer, rank, lane)] = ia + 1;
  sides_.push_back(std::move(a));
  sides_.push_back(std::move(b));
  return sides_[ia].get();
}

TransportErrc FabricNet::register_memory(int rank, const void* addr, std::size_t bytes) {
  if (bytes == 0) return TransportErrc::kOk;
  // A rank sends through every NIC of its node (lanes spread over them).
  const int first = rank / gpus_ * gpus_;
  for (int i = first; i < first + gpus_; ++i) {
    Dev& d = devs_[static_cast<std::size_t>(i)];
    Reg& r = d.regs[addr];
    if (r.mr != nullptr && r.mr->length() < bytes) {
      d.device->dereg_mr(r.mr);
      r.mr = nullptr;
    }
    if (r.mr == nullptr) {
      auto mr = d.device->reg_mr(d.pd, const_cast<void*>(addr), bytes, kAccessLocalWrite);
      if (!mr) return TransportErrc::kFailed;
      r.mr = *mr;
    }
    ++r.refs;
  }
  return TransportErrc::kOk;
}

void FabricNet::unregister_memory(int rank, const void* addr) {
  const int first = rank / gpus_ * gpus_;
  for (int i = first; i < first + gpus_; ++i) {
    Dev& d = devs_[static_cast<std::size_t>(i)];
    auto it = d.regs.find(addr);
    if (it == d.regs.end()) continue;
    if (--it->second.refs <= 0) {
      d.device->dereg_mr(it->second.mr);
      d.regs.erase(it);
    }
  }
}

std::uint32_t FabricNet::lkey_of(Dev& d, const void* src, std::uint32_t bytes) const {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (auto it = d.regs.upper_bound(src); it != d.regs.begin();) {
    --it;
    const auto* base = static_cast<const std::uint8_t*>(it->first);
    if (p + bytes <= base + it->second.mr->length()) return it->second.mr->lkey();
  }
  return 0;
}

TransportErrc FabricNet::write(int from, int to, int lane, const void* src, std::uint32_t bytes,
                               std::uint32_t slot, std::uint64_t wr_id) {
  WEFT_ASSERT(bytes <= cfg_.slot_bytes && slot < cfg_.slots && (wr_id & kGrantWrId) == 0);
  Side* s = side(from, to, lane);
  if (s == nullptr) return TransportErrc::kFailed;
  Dev& d = devs_[static_cast<std::size_t>(s->dev)];
  std::uint32_t lkey = 0;
  if (bytes > 0) {
    lkey = lkey_of(d, src, bytes);
    if (lkey == 0) return TransportErrc::kUnregistered;
  }
  const Sge sge{reinterpret_cast<std::uintptr_t>(src), bytes, lkey};
  const Errc e = s->qp->post_send(
      coll::data_wr(sge, slot, wr_id, s->remote_addr, s->remote_rkey, cfg_.slot_bytes));
  if (e == Errc::kQueueFull) return TransportErrc::kBusy;
  if (e != Errc::kOk) return TransportErrc::kFailed;
  fabric_->kick(d.node);
  return TransportErrc::kOk;
}

TransportErrc FabricNet::grant(int from, int to, int lane, std::uint32_t credits) {
  WEFT_ASSERT(credits > 0 && credits < kGrantBit);
  Side* s = side(from, to, lane);
  if (s == nullptr) return TransportErrc::kFailed;
  const Errc e = s->qp->post_send(coll::grant_wr(credits));
  if (e == Errc::kQueueFull) return TransportErrc::kBusy;
  if (e != Errc::kOk) return TransportErrc::kFailed;
  fabric_->kick(devs_[static_cast<std::size_t>(s->dev)].node);
  return TransportErrc::kOk;
}

const std::uint8_t* FabricNet::inbox(int rank, int peer, int lane, std::uint32_t slot) const {
  auto it = side_of_.find(key(rank, peer, lane));
  WEFT_ASSERT(it != side_of_.end());
  return sides_[it->second]->inbox_base + std::size_t{slot} * cfg_.slot_bytes;
}

void FabricNet::on_completions(int di) {
  Dev& d = devs_[static_cast<std::size_t>(di)];
  bool any = false;
  for (;;) {
    const std::size_t got = d.cq->poll(std::span(wc_.data(), wc_.size()));
    for (std::size_t i = 0; i < got; ++i) {
      const WorkCompletion& wc = wc_[i];
      auto it = d.qpn_side.find(wc.qp_num);
      WEFT_ASSERT(it != d.qpn_side.end());
      Side& s = *sides_[it->second];
      TransportEvent ev;
      ev.peer = s.peer;
      ev.lane = s.lane;
      const coll::Completion what = coll::decode_completion(wc, ev);
      if (what == coll::Completion::kNothing) continue;  // a grant's send completion
      if (ev.kind == TransportEvent::Kind::kError) ++failed_;
      if (what == coll::Completion::kEventConsumed) {
        RecvWr wr;  // keep 2 x slots receives posted
        const Errc e = s.qp->post_recv(wr);
        WEFT_ASSERT(e == Errc::kOk);
      }
      any = true;
      if (sink_) sink_(s.rank, ev);
    }
    if (got < wc_.size()) break;
  }
  if (any) sim_->request_stop();
}

double fabric_goodput_Bps(const topo::Topology& t, topo::NodeId hca, const fabric::FabricConfig& fc,
                          Mtu mtu) {
  // A full-MTU packet in the middle of a WRITE: LRH 8, BTH 12, ICRC 4, VCRC 2 around the payload.
  const double rate_Bps =
      static_cast<double>(t.link(t.node(hca).ports[1].link).rate_mbps()) * 1e6 / 8;
  const std::uint32_t m = mtu_bytes(mtu);
  link::PhyChannel phy(link::PhyConfig{.fec = fc.link.fec, .fec_config = fc.link.fec_config});
  return rate_Bps * m / static_cast<double>(phy.line_bytes(m + 26));
}

double fabric_one_switch_route_ns(const fabric::FabricConfig& fc) {
  return static_cast<double>(fc.sw.latency_ns) + 2 * 10.0;  // two 2 m cables and one switch
}

double fabric_latency_s(const fabric::FabricConfig& fc) {
  // Host DMA read and NIC pipeline, the route through one switch, NIC pipeline and DMA write.
  const double ns = 2.0 * static_cast<double>(fc.hca.host_latency_ns) +
                    static_cast<double>(fc.hca.tx_proc_ns + fc.hca.rx_proc_ns) +
                    fabric_one_switch_route_ns(fc);
  return ns * 1e-9;
}

FabricNetStats FabricNet::stats() {
  FabricNetStats s;
  s.qps = qps_;
  s.packets_delivered = fabric_->data_packets_delivered();
  s.events = sim_->events_dispatched() - events_base_;
  const fabric::PortCounters t = fabric_->totals();
  s.retransmit_hint = t.port_xmit_discards + t.fault_dropped;
  s.completions_failed = failed_;
  return s;
}

}  // namespace weft::collsim
