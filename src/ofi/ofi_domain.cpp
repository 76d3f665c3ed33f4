// src/ofi/ofi_domain.cpp — the domain (one weft::Device on one MediumPort), its manual progress,
// memory registration, address vectors, completion queues and counters.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "src/ofi/enosys.hpp"
#include "src/ofi/fi_weft_ext.h"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

constexpr std::size_t kRxBurstPackets = 256;
constexpr std::size_t kTxBurstPackets = 256;
constexpr std::size_t kCtrlBurstMsgs = 64;
constexpr int kProgressRoundsMax = 64;
constexpr std::uint32_t kDeviceCqDepth = 65536;
constexpr std::uint32_t kClockEveryPasses = 8;

}  // namespace

// ---- progress ---------------------------------------------------------------------------------

// The clock costs 25-100 ns here (kvm-clock through the vDSO): as much as the rest of an idle
// pass. An idle pass reads it only every kClockEveryPasses passes, so the engine sees a time up
// to a few microseconds stale (far below its timers' granularity, 4.096 us << timeout). A pass
// after one that did engine work (packets, completions, control datagrams: a busy pass may have
// lasted a while) reads it afresh, and so does the first pass after the provider slept
// (clock_due: a nap, the keeper's period). A pass that only took direct messages off the medium
// does not: in a small-message ping-pong that read was one per message. Such a pass usually
// lasts at most a 64 KiB copy; one that pulled a rendezvous (a process_vm_readv of the whole
// message) may have lasted longer, and the next few passes see that old a time: the engine's
// timers (milliseconds) then fire a few passes late, nothing else depends on it (the spin run
// and the naps use only fresh readings). `clock_fresh` tells the CQ read's spin run (cq_readfrom)
// whether `now` was read in this pass, so that it needs no clock reading of its own.
TimeNs Domain::pass_clock() {
  const bool fresh = worked || clock_due || ++idle_passes % kClockEveryPasses == 0 || now == 0;
  if (fresh) {
    now = mono_ns();
    clock_due = false;
  }
  clock_fresh = fresh;
  return now;
}

// One bounded pass of manual progress: packets in, control datagrams, timers, device completions
// to the endpoints (which may post more), packets out (the ACKs for what came in leave in one
// burst with what the handlers posted), round after round until nothing moves.
std::size_t Domain::progress(const Cq* want) {
  if (in_progress) return 0;  // a completion handler that posts must not recurse
  in_progress = true;
  passes.store(passes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::size_t total = 0;
  bool engine_work = false;  // anything but direct messages (see pass_clock)
  const bool fresh_before = worked;
  const TimeNs t0 = pass_clock();
  const bool fresh = fresh_before || t0 != now_seen;
  now_seen = t0;
  for (int round = 0; round < kProgressRoundsMax; ++round) {
    // A round after one that worked reads the clock again (a busy call may last a while).
    TimeNs t = t0;
    if (round > 0) {
      t = now = mono_ns();
      clock_fresh = true;
    }
    const std::uint64_t direct_before = direct_rx;
    const std::size_t rx = port->rx_burst(*dev, t, kRxBurstPackets);
    // Work that may leave more behind for the next round: everything but received packets.
    std::size_t engine = port->ctrl_poll(ctrl_fn, kCtrlBurstMsgs, t, connecting > 0);
    // The timer heap is looked at only when time moved or something happened (a Device's
    // deadline changes only when it works).
    if ((fresh || rx || round > 0) && dev->next_deadline() <= t) {
      dev->on_deadline(t);
      ++engine;
    }
    // Connection requests still unanswered: resends and deadlines (ofi_ep.cpp).
    if (connecting > 0 && conn_timer <= t) {
      conn_timer = kNoDeadline;
      for (auto& [id, ep] : eps) ep_conn_timers(ep, t, conn_timer);
      ++engine;
    }
    std::size_t n;
    while ((n = dcq->poll(wc_batch)) > 0) {
      for (std::size_t i = 0; i < n; ++i) dispatch(wc_batch[i]);
      engine += n;
      if (n < wc_batch.size()) break;
    }
    std::size_t sent;
    while ((sent = port->tx_burst(*dev, t, kTxBurstPackets)) > 0) {
      engine += sent;
      if (sent < kTxBurstPackets) break;
    }
    const std::size_t work = rx + engine;
    AsyncEvent ev;
    while (dev->poll_async_event(ev)) {
      WEFT_WARN(FI_LOG_DOMAIN, "device event %.*s on qp 0x%x",
                static_cast<int>(to_string(ev.type).size()), to_string(ev.type).data(), ev.qp_num);
    }
    total += work;
    if (engine != 0 || rx != direct_rx - direct_before) engine_work = true;
    // Rounds until nothing moves. (Stopping after one round unless a burst limit was hit saved
    // an idle round per call, but made 8 MiB transfers through the emulated fabric fail with
    // RETRY_EXC in about a third of the runs on this loaded machine; see the keeper.)
    if (work == 0) break;
    // Except that a round which only took direct messages off the medium (no completion, no
    // packet out, nothing for the engine) leaves nothing behind: when the caller's CQ has
    // something now, the next round would only look for new arrivals, which the caller's next
    // read does anyway (one idle round less per received message).
    if (want && engine == 0 && rx == direct_rx - direct_before && !want->entries.empty()) break;
  }
  if (split_pending)
    for (auto& [id, ep] : eps)
      if (!ep->split_recvs.empty()) ep_reap_dead_splits(ep);
  worked = engine_work;
  in_progress = false;
  return total;
}

// The progress thread runs the same bounded progress pass as a post or a CQ read does, so the
// peers' connection requests, READs and ACKs get answered while the application computes. It
// sleeps on stop_efd between passes: 50 us after a pass that moved something, doubling to 1 ms
// while idle (the media's doorbells are not armed, so it does not wait on them).
void Domain::start_auto_progress() {
  stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_efd < 0) throw std::bad_alloc();
  progress_thread = std::thread([this] {
    int nap_us = 50;
    for (;;) {
      std::size_t work;
      {
        std::lock_guard lk(mu);
        clock_due = true;  // it slept
        work = progress();
      }
      nap_us = work ? 50 : std::min(nap_us * 2, 1000);
      pollfd p{stop_efd, POLLIN, 0};
      timespec ts{0, nap_us * 1000L};
      if (ppoll(&p, 1, &ts, nullptr) > 0) return;
    }
  });
}

// The keeper (FI_PROGRESS_MANUAL) sleeps on stop_efd for period_ms at a time and runs a pass only
// when no one else ran one during the period, taking `mu` with try_lock so that it never waits
// behind the application. Cost while the application progresses: one wake-up per period.
void Domain::start_keeper(std::uint32_t period_ms) {
  stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_efd < 0) throw std::bad_alloc();
  progress_thread = std::thread([this, period_ms] {
    std::uint64_t seen = passes.load(std::memory_order_relaxed);
    for (;;) {
      pollfd p{stop_efd, POLLIN, 0};
      const timespec ts{static_cast<time_t>(period_ms / 1000),
                        static_cast<long>(period_ms % 1000) * 1'000'000L};
      if (ppoll(&p, 1, &ts, nullptr) > 0) return;
      const std::uint64_t now_passes = passes.load(std::memory_order_relaxed);
      if (now_passes != seen) {  // the application is progressing: leave it alone
        seen = now_passes;
        continue;
      }
      if (!mu.try_lock()) continue;
      clock_due = true;  // it slept a period: the timers it is here for need the real time
      const std::size_t work = progress();
      if (work) ++keeper_passes;
      mu.unlock();
      seen = passes.load(std::memory_order_relaxed);
    }
  });
}

void Domain::stop_auto_progress() {
  if (!progress_thread.joinable()) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t w = write(stop_efd, &one, sizeof(one));
  progress_thread.join();
  close(stop_efd);
  stop_efd = -1;
}

TimeNs Domain::next_deadline() const {
  const TimeNs engine = std::min(dev->next_deadline(), port->next_deadline());
  return connecting > 0 ? std::min(engine, conn_timer) : engine;
}

void Domain::dispatch(const WorkCompletion& wc) {
  Op* op = reinterpret_cast<Op*>(wc.wr_id);
  if (!op) return;
  ep_on_completion(op->ep, op, wc);
}

void Domain::on_direct(std::span<const std::uint8_t> msg) {
  ++direct_rx;
  DirectHdr dh;
  if (msg.size() < sizeof dh) return;
  std::memcpy(&dh, msg.data(), sizeof dh);
  auto it = eps.find(dh.dst_ep);
  if (it == eps.end()) return;  // the endpoint closed: as a packet to a destroyed QP
  ep_on_direct(it->second, dh.dst_qpn, msg.subspan(sizeof dh));
}

void Domain::on_ctrl(const NodeAddr& src, std::span<const std::uint8_t> msg) {
  // Every control datagram starts with the destination endpoint id (see ofi_ep.cpp).
  if (msg.size() < 8) return;
  std::uint32_t dst_ep;
  std::memcpy(&dst_ep, msg.data() + 4, 4);
  if (pep && dst_ep == pep->id) {
    pep_on_ctrl(pep, src, msg);
    return;
  }
  auto it = eps.find(dst_ep);
  if (it == eps.end()) {
    WEFT_INFO(FI_LOG_EP_CTRL, "control datagram for unknown endpoint %u", dst_ep);
    ctrl_unknown_endpoint(this, src, msg);  // a connection request gets a reject
    return;
  }
  ep_on_ctrl(it->second, src, msg);
}

// ---- domain -------------------------------------------------------------------------------------
namespace {

int mr_reg_common(Domain* d, const void* buf, std::size_t len, std::uint64_t access,
                  std::uint64_t requested_key, std::uint64_t flags, fid_mr** out, void* ctx);

int domain_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Domain* d = ofi_container<Domain>(f);
    {
      std::lock_guard lk(d->mu);
      if (d->refs > 0) return -FI_EBUSY;
    }
    d->stop_auto_progress();
    if (d->keeper_passes)
      WEFT_INFO(FI_LOG_DOMAIN, "the keeper made %llu progress passes that moved something",
                (unsigned long long)d->keeper_passes);
    eq_forget_domain(d);
    delete d;
    return 0;
  });
}
// The provider's extension ops (fi_weft_ext.h).
int dom_medium_stats(fid_domain* dom, fi_weft_medium_stats* out) {
  if (!dom || !out) return -FI_EINVAL;
  return guard(-FI_ENOMEM, [&] {
    Domain* d = ofi_container<Domain>(&dom->fid);
    std::lock_guard lk(d->mu);
    const MediumPort::Stats s = d->port->stats();
    *out = {s.tx_packets, s.rx_packets, s.tx_zero_copy, s.regions};
    return 0;
  });
}
int dom_conn_stats(fid_domain* dom, fi_weft_conn_stats* out) {
  if (!dom || !out) return -FI_EINVAL;
  return guard(-FI_ENOMEM, [&] {
    Domain* d = ofi_container<Domain>(&dom->fid);
    std::lock_guard lk(d->mu);
    const Domain::ConnStats& s = d->conn_stats;
    *out = {s.req_sent,
            s.req_resent,
            s.req_received,
            s.req_duplicate,
            s.out_established,
            s.in_established,
            s.timed_out,
            s.rejected,
            s.stale_answers,
            s.ctrl_dropped,
            static_cast<std::uint64_t>(d->connecting)};
    return 0;
  });
}
fi_weft_domain_ops g_weft_domain_ops = {sizeof(fi_weft_domain_ops), dom_medium_stats,
                                        dom_conn_stats};
int domain_ops_open(fid* f, const char* name, std::uint64_t flags, void** ops, void* ctx) {
  (void)f;
  (void)ctx;
  if (!name || !ops) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  if (std::strcmp(name, FI_WEFT_DOMAIN_OPS_1) != 0) return -FI_ENOSYS;
  *ops = &g_weft_domain_ops;
  return 0;
}
fi_ops g_domain_fi_ops = {sizeof(fi_ops),  domain_close, no_bind,   no_control,
                          domain_ops_open, no_tostr,     no_ops_set};

int av_open(fid_domain* dom, fi_av_attr* attr, fid_av** av, void* ctx);
int cq_open(fid_domain* dom, fi_cq_attr* attr, fid_cq** cq, void* ctx);
int cntr_open(fid_domain* dom, fi_cntr_attr* attr, fid_cntr** cntr, void* ctx);

int dom_av_open(fid_domain* dom, fi_av_attr* attr, fid_av** av, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return av_open(dom, attr, av, ctx); });
}
int dom_cq_open(fid_domain* dom, fi_cq_attr* attr, fid_cq** cq, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return cq_open(dom, attr, cq, ctx); });
}
int dom_endpoint(fid_domain* dom, fi_info* info, fid_ep** ep, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return ep_open(dom, info, ep, ctx); });
}
int dom_scalable_ep(fid_domain*, fi_info*, fid_ep**, void*) {
  return -FI_ENOSYS;
}
int dom_cntr_open(fid_domain* dom, fi_cntr_attr* attr, fid_cntr** c, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return cntr_open(dom, attr, c, ctx); });
}
int dom_poll_open(fid_domain* dom, fi_poll_attr* attr, fid_poll** out) {
  return guard(-FI_ENOMEM, [&] { return poll_open(dom, attr, out); });
}
int dom_stx(fid_domain*, fi_tx_attr*, fid_stx**, void*) {
  return -FI_ENOSYS;
}
int dom_srx(fid_domain*, fi_rx_attr*, fid_ep**, void*) {
  return -FI_ENOSYS;
}
int dom_query_atomic(fid_domain*, fi_datatype dt, fi_op op, fi_atomic_attr* attr,
                     std::uint64_t flags) {
  const AtomicKind kind = (flags & FI_COMPARE_ATOMIC) ? AtomicKind::kCompare
                          : (flags & FI_FETCH_ATOMIC) ? AtomicKind::kFetch
                                                      : AtomicKind::kWrite;
  if (flags & ~(FI_COMPARE_ATOMIC | FI_FETCH_ATOMIC | FI_TAGGED)) return -FI_EBADFLAGS;
  if (flags & FI_TAGGED) return -FI_EOPNOTSUPP;
  if (!atomic_valid(kind, op, dt)) return -FI_EOPNOTSUPP;
  if (attr) {
    attr->size = atomic_type_size(dt);
    attr->count = atomic_max_count(kind, dt);
  }
  return 0;
}
int dom_query_coll(fid_domain*, fi_collective_op, fi_collective_attr*, std::uint64_t) {
  return -FI_ENOSYS;
}
int dom_endpoint2(fid_domain* dom, fi_info* info, fid_ep** ep, std::uint64_t flags, void* ctx) {
  if (flags) return -FI_EINVAL;
  return dom_endpoint(dom, info, ep, ctx);
}
fi_ops_domain g_domain_ops = {sizeof(fi_ops_domain), dom_av_open,     dom_cq_open,
                              dom_endpoint,          dom_scalable_ep, dom_cntr_open,
                              dom_poll_open,         dom_stx,         dom_srx,
                              dom_query_atomic,      dom_query_coll,  dom_endpoint2};

int mr_reg(fid* f, const void* buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
           std::uint64_t requested_key, std::uint64_t flags, fid_mr** mr, void* ctx) {
  (void)offset;
  return guard(-FI_ENOMEM, [&] {
    return mr_reg_common(ofi_container<Domain>(f), buf, len, access, requested_key, flags, mr, ctx);
  });
}
int mr_regv(fid* f, const iovec* iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
            std::uint64_t requested_key, std::uint64_t flags, fid_mr** mr, void* ctx) {
  if (count != 1) return -FI_EINVAL;  // mr_iov_limit is 1
  return mr_reg(f, iov[0].iov_base, iov[0].iov_len, access, offset, requested_key, flags, mr, ctx);
}
int mr_regattr(fid* f, const fi_mr_attr* attr, std::uint64_t flags, fid_mr** mr) {
  if (!attr || attr->iov_count != 1) return -FI_EINVAL;
  if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
  return mr_reg(f, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, attr->access, attr->offset,
                attr->requested_key, flags, mr, attr->context);
}
fi_ops_mr g_mr_ops = {sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};

}  // namespace

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** out, void* context) {
  if (!info || !info->domain_attr) return -FI_EINVAL;
  if (info->domain_attr->name && std::strcmp(info->domain_attr->name, "weft") != 0)
    return -FI_EINVAL;
  auto d = std::make_unique<Domain>();
  d->fabric = ofi_container<Fabric>(fabric);
  const std::string capture = next_capture_path();
  switch (g_params.medium) {
    case Params::Medium::kLoopback:
      d->port = open_loopback_port(d->fabric->name);
      break;
    case Params::Medium::kShm:
      d->port = open_shm_port(d->fabric->name);
      break;
    case Params::Medium::kUdp:
      d->port = open_udp_port(d->fabric->name, g_params.udp_ip, capture);
      break;
    case Params::Medium::kDpdk:
      d->port = open_dpdk_port(d->fabric->name, capture);
      if (!d->port) return -FI_ENODEV;
      break;
    case Params::Medium::kFabric:
      if (g_params.fabric.empty()) {
        WEFT_WARN(FI_LOG_DOMAIN, "FI_WEFT_MEDIUM=fabric needs WEFT_FABRIC (the daemon's name)");
        return -FI_EINVAL;
      }
      d->port = open_fabric_port(d->fabric->name, g_params.fabric);
      if (!d->port) return -FI_ENODEV;
      break;
  }
  if (!d->port) return -FI_ENOMEM;
  // The Ethernet media capture their own frames (above); the others through a capturing port.
  if (!capture.empty() && g_params.medium != Params::Medium::kUdp &&
      g_params.medium != Params::Medium::kDpdk) {
    d->port = open_capture_port(std::move(d->port), capture);
    if (!d->port) return -FI_EIO;
  }
  DeviceConfig dc;
  dc.name = "weft-fi";
  dc.node_guid = 0x0002c90400000000ull | (d->port->local().node_id & 0xFFFFFFFFFFull);
  dc.ports[0].lid = d->port->local().lid;
  dc.crc = CrcMode::kModel;  // the loopback neither corrupts nor needs real CRCs
  d->rng.reseed(d->port->local().node_id * 7919 + 1);
  d->dev = Device::create(dc, d->rng);
  d->port->bind_device(*d->dev);
  d->ctrl_fn = [dp = d.get()](const NodeAddr& src, std::span<const std::uint8_t> msg) {
    dp->on_ctrl(src, msg);
  };
  if (g_params.direct)
    d->port->set_direct_handler(
        [](void* ctx, std::span<const std::uint8_t> msg) {
          static_cast<Domain*>(ctx)->on_direct(msg);
        },
        d.get());
  d->pd = d->dev->alloc_pd().value();
  auto cq = d->dev->create_cq(kDeviceCqDepth);
  if (!cq) return -FI_ENOMEM;
  d->dcq = cq.value();
  d->mr_mode = static_cast<std::uint64_t>(info->domain_attr->mr_mode);
  d->api_version = ofi_container<Fabric>(fabric)->fab.api_version;
  d->threading = info->domain_attr->threading;
  d->dom.fid.fclass = FI_CLASS_DOMAIN;
  d->dom.fid.context = context;
  d->dom.fid.ops = &g_domain_fi_ops;
  d->dom.ops = &g_domain_ops;
  d->dom.mr = &g_mr_ops;
  const bool auto_progress = info->domain_attr->data_progress == FI_PROGRESS_AUTO ||
                             info->domain_attr->control_progress == FI_PROGRESS_AUTO;
  WEFT_INFO(FI_LOG_DOMAIN, "domain on %s node %llu lid %u, %s progress", to_string(g_params.medium),
            (unsigned long long)d->port->local().node_id, d->port->local().lid,
            auto_progress ? "auto" : "manual");
  if (auto_progress)
    d->start_auto_progress();
  else if (g_params.keeper_ms > 0)
    // At most a quarter of the ACK timeout (4.096 us << n), so that a retransmission meets a
    // pass well within the 8 periods before RETRY_EXC.
    d->start_keeper(static_cast<std::uint32_t>(std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(g_params.keeper_ms,
                                   (4096ull << g_params.ack_timeout) / 4 / 1'000'000))));
  *out = &d.release()->dom;
  return 0;
}

// ---- memory registration ----------------------------------------------------------------------
namespace {

int mr_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Mr* m = ofi_container<Mr>(f);
    {
      std::lock_guard lk(m->dom->mu);
      // The medium first (it may still hold a transmit from the memory: the close is retried),
      // then the Device, as dpdk_medium.hpp asks.
      if (m->on_medium && !m->dom->port->unregister_memory(reinterpret_cast<void*>(m->base)))
        return -FI_EBUSY;
      m->on_medium = false;
      if (m->dmr && m->dom->dev->dereg_mr(m->dmr) != Errc::kOk) return -FI_EBUSY;
      auto it = m->dom->mr_by_key.find(m->mr.key);
      if (it != m->dom->mr_by_key.end() && it->second == m) m->dom->mr_by_key.erase(it);
      --m->dom->refs;
    }
    delete m;
    return 0;
  });
}
fi_ops g_mr_fi_ops = {sizeof(fi_ops), mr_close, no_bind,   no_control,
                      no_ops_open,    no_tostr, no_ops_set};

std::uint32_t to_device_access(std::uint64_t access) {
  std::uint32_t a = kAccessLocalWrite;  // a source buffer is harmless to mark writable
  if (access & FI_REMOTE_READ) a |= kAccessRemoteRead;
  if (access & FI_REMOTE_WRITE) a |= kAccessRemoteWrite;
  return a;
}

int mr_reg_common(Domain* d, const void* buf, std::size_t len, std::uint64_t access,
                  std::uint64_t requested_key, std::uint64_t flags, fid_mr** out, void* ctx) {
  if (flags) return -FI_EBADFLAGS;
  if (!buf && len) return -FI_EINVAL;
  std::lock_guard lk(d->mu);
  auto m = std::make_unique<Mr>();
  m->dom = d;
  m->access = access;
  if (len) {
    auto r = d->dev->reg_mr(d->pd, const_cast<void*>(buf), len, to_device_access(access));
    if (!r) return -FI_ENOMEM;
    m->dmr = r.value();
    // The medium learns it too (DPDK on a physical port maps it for DMA, so its sends from it go
    // by reference). A medium that cannot take it fails the registration.
    std::string why;
    if (!d->port->register_memory(const_cast<void*>(buf), len, &why)) {
      WEFT_WARN(FI_LOG_MR, "fi_mr_reg of %zu bytes: %s", len, why.c_str());
      d->dev->dereg_mr(m->dmr);
      return -FI_EIO;
    }
    m->on_medium = true;
  }
  // FI_MR_PROV_KEY (or FI_MR_BASIC): the key is the engine's rkey, carried in RETH. Otherwise
  // the application's key is kept; RMA was not offered for such a domain (see getinfo).
  const bool prov_key = (d->mr_mode & FI_MR_PROV_KEY) || d->mr_mode == FI_MR_BASIC;
  m->mr.key = prov_key ? (m->dmr ? m->dmr->rkey() : 0) : requested_key;
  m->mr.mem_desc = m.get();
  m->base = reinterpret_cast<std::uintptr_t>(buf);
  m->len = len;
  if (m->dmr && (access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) d->mr_by_key[m->mr.key] = m.get();
  m->mr.fid.fclass = FI_CLASS_MR;
  m->mr.fid.context = ctx;
  m->mr.fid.ops = &g_mr_fi_ops;
  ++d->refs;
  *out = &m.release()->mr;
  return 0;
}

}  // namespace

// ---- address vectors ----------------------------------------------------------------------------
namespace {

int av_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Av* a = ofi_container<Av>(f);
    {
      std::lock_guard lk(a->dom->mu);
      if (a->refs > 0) return -FI_EBUSY;
      --a->dom->refs;
    }
    delete a;
    return 0;
  });
}
fi_ops g_av_fi_ops = {sizeof(fi_ops), av_close, no_bind,   no_control,
                      no_ops_open,    no_tostr, no_ops_set};

// Eager connections (FI_WEFT_EAGER_CONNECT) to peers the medium says settle before use (shm, in
// another process): fi_av_insert progresses the domain until their answers came, at most
// kConnectSettleNsMax, sleeping on the port's control descriptor between passes. A shm link's
// set-up (the peer's Hello accepted, its segment mapped and the 4 MiB rings touched page by page,
// ShmMedium::prefault_rings; the RC connection's request and answer) then happens here instead
// of in the application's first messages, where it cost fi_pingpong ~11 ms spread over the
// first ~100 round trips of 64 KiB. A peer that inserts us at the same time (fi_pingpong, MPI
// ranks after their address exchange) answers from its own fi_av_insert; one that does not,
// from its keeper (FI_WEFT_KEEPER_MS) or not before the bound. fi_av_insert is synchronous
// (man fi_av: no FI_EVENT here), so the wait is the caller's.
constexpr TimeNs kConnectSettleNsMax = 100'000'000;
constexpr TimeNs kConnectSettlePollNs = 1'000'000;  // between passes while nothing arrives
// Passes after the last answer: the peer's own link to us (its Hello, sent before its answer to
// ours) is accepted in one and mapped in the next (shm_port.cpp accept_all, then read_link).
constexpr int kConnectSettleTailPasses = 2;

void settle_connects(Domain& d, std::unique_lock<std::recursive_mutex>& lk) {
  const TimeNs start = mono_ns();
  const TimeNs end = start + kConnectSettleNsMax;
  for (;;) {
    d.progress();
    if (d.connecting == 0) break;
    const TimeNs now = mono_ns();
    if (now >= end) {
      WEFT_INFO(FI_LOG_AV, "fi_av_insert: connections settled: %d pending after %llu us",
                d.connecting, static_cast<unsigned long long>((now - start) / 1000));
      return;
    }
    pollfd p{d.port->wait_fd(), POLLIN, 0};
    const TimeNs nap = std::min(kConnectSettlePollNs, end - now);
    const timespec ts{0, static_cast<long>(nap)};
    lk.unlock();
    ::ppoll(&p, 1, &ts, nullptr);
    lk.lock();
  }
  for (int i = 0; i < kConnectSettleTailPasses; ++i) d.progress();
  WEFT_INFO(FI_LOG_AV, "fi_av_insert: connections settled: 0 pending after %llu us",
            static_cast<unsigned long long>((mono_ns() - start) / 1000));
}

int av_insert(fid_av* av, const void* addr, std::size_t count, fi_addr_t* fi_addr,
              std::uint64_t flags, void* ctx) {
  (void)ctx;
  return guard(-FI_ENOMEM, [&] {
    Av* a = ofi_container<Av>(av);
    // FI_MORE is only a hint (inserts are synchronous); no FI_SYNC_ERR, no EQ events.
    if (flags & ~FI_MORE) return -FI_EBADFLAGS;
    std::unique_lock lk(a->dom->mu);
    int inserted = 0;
    bool settle = false;
    const auto* in = static_cast<const std::uint8_t*>(addr);
    for (std::size_t i = 0; i < count; ++i) {
      EpAddr e;
      std::memcpy(&e, in + i * sizeof(EpAddr), sizeof e);
      if (!e.valid()) {
        if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
        continue;
      }
      const fi_addr_t idx = a->entries.size();
      a->entries.push_back({e, true});
      a->index.emplace(e, idx);  // the first insertion of an address wins reverse lookups
      if (e.qpn) a->by_lid_qpn.emplace(Av::lid_qpn(e.lid, e.qpn), idx);
      if (fi_addr) fi_addr[i] = idx;
      a->dom->port->add_peer(e.node());
      ++inserted;
      if (g_params.eager_connect && e.node_id != a->dom->port->local().node_id)
        for (auto& [id, ep] : a->dom->eps)
          if (ep->av == a && ep_connect_eagerly(ep, idx))
            settle = settle || a->dom->port->settles_before_use(e.node());
    }
    if (settle) settle_connects(*a->dom, lk);
    return inserted;
  });
}
int av_insertsvc(fid_av*, const char*, const char*, fi_addr_t*, std::uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_insertsym(fid_av*, const char*, std::size_t, const char*, std::size_t, fi_addr_t*,
                 std::uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_remove(fid_av* av, fi_addr_t* fi_addr, std::size_t count, std::uint64_t flags) {
  return guard(-FI_ENOMEM, [&] {
    Av* a = ofi_container<Av>(av);
    if (flags) return -FI_EBADFLAGS;
    std::lock_guard lk(a->dom->mu);
    for (std::size_t i = 0; i < count; ++i) {
      if (fi_addr[i] >= a->entries.size() || !a->entries[fi_addr[i]].used) return -FI_EINVAL;
    }
    for (std::size_t i = 0; i < count; ++i) {
      Av::Entry& e = a->entries[fi_addr[i]];
      e.used = false;
      auto it = a->index.find(e.addr);
      if (it != a->index.end() && it->second == fi_addr[i]) a->index.erase(it);
      auto jt = a->by_lid_qpn.find(Av::lid_qpn(e.addr.lid, e.addr.qpn));
      if (jt != a->by_lid_qpn.end() && jt->second == fi_addr[i]) a->by_lid_qpn.erase(jt);
    }
    return 0;
  });
}
int av_lookup(fid_av* av, fi_addr_t fi_addr, void* addr, std::size_t* addrlen) {
  return guard(-FI_ENOMEM, [&] {
    Av* a = ofi_container<Av>(av);
    std::lock_guard lk(a->dom->mu);
    const EpAddr* e = a->get(fi_addr);
    if (!e) return -FI_ENOENT;
    std::memcpy(addr, e, std::min(*addrlen, sizeof(EpAddr)));
    const bool small = *addrlen < sizeof(EpAddr);
    *addrlen = sizeof(EpAddr);
    return small ? -FI_ETOOSMALL : 0;
  });
}
const char* av_straddr(fid_av*, const void* addr, char* buf, std::size_t* len) {
  EpAddr e;
  std::memcpy(&e, addr, sizeof e);
  char tmp[96];
  const int n = std::snprintf(tmp, sizeof tmp, "weft://%llu:%u/%u", (unsigned long long)e.node_id,
                              e.lid, e.ep_id);
  if (buf && *len) {
    std::snprintf(buf, *len, "%s", tmp);
  }
  *len = static_cast<std::size_t>(n) + 1;
  return buf;
}
int av_set(fid_av*, fi_av_set_attr*, fid_av_set**, void*) {
  return -FI_ENOSYS;
}
fi_ops_av g_av_ops = {sizeof(fi_ops_av), av_insert, av_insertsvc, av_insertsym,
                      av_remove,         av_lookup, av_straddr,   av_set};

int av_open(fid_domain* dom, fi_av_attr* attr, fid_av** out, void* ctx) {
  Domain* d = ofi_container<Domain>(dom);
  auto a = std::make_unique<Av>();
  a->dom = d;
  if (attr) {
    if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
      return -FI_EINVAL;
    if (attr->rx_ctx_bits || attr->name || (attr->flags & ~FI_SYMMETRIC)) return -FI_ENOSYS;
    a->type = attr->type == FI_AV_UNSPEC ? FI_AV_MAP : attr->type;
    a->entries.reserve(attr->count);
  }
  a->av.fid.fclass = FI_CLASS_AV;
  a->av.fid.context = ctx;
  a->av.fid.ops = &g_av_fi_ops;
  a->av.ops = &g_av_ops;
  std::lock_guard lk(d->mu);
  ++d->refs;
  *out = &a.release()->av;
  return 0;
}

}  // namespace

// ---- completion queues ----------------------------------------------------------------------
int Cq::notify_fd() const {
  return ws ? ws->wfd.efd : wfd.efd;
}
namespace {
void notify(int fd) {
  if (fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(fd, &one, sizeof one);
}
}  // namespace
void Cq::push(const fi_cq_tagged_entry& e, fi_addr_t src) {
  entries.push_back({e, src});
  notify(notify_fd());
}
void Cq::push_error(const fi_cq_err_entry& e) {
  errors.push_back(e);
  notify(notify_fd());
}

namespace {

int cq_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Cq* q = ofi_container<Cq>(f);
    {
      std::lock_guard lk(q->dom->mu);
      if (q->refs > 0) return -FI_EBUSY;
      --q->dom->refs;
    }
    if (q->ws) q->ws->remove(q);
    q->wfd.close();
    delete q;
    return 0;
  });
}
int cq_control(fid* f, int command, void* arg) {
  Cq* q = ofi_container<Cq>(f);
  if (!arg) return -FI_EINVAL;
  // The epoll set, not the eventfd: an application that blocks on it after fi_trywait must be
  // woken by the peer's publish and the engine's timers too (ofi_wait.cpp, "Native waits").
  if (command == FI_GETWAIT && q->wfd.epfd >= 0 && q->wait == FI_WAIT_FD) {
    *static_cast<int*>(arg) = q->wfd.epfd;
    return 0;
  }
  if (command == FI_GETWAITOBJ) {
    *static_cast<fi_wait_obj*>(arg) = q->wait;
    return 0;
  }
  return -FI_ENOSYS;
}
fi_ops g_cq_fi_ops = {sizeof(fi_ops), cq_close, no_bind,   cq_control,
                      no_ops_open,    no_tostr, no_ops_set};

std::size_t entry_bytes(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
      return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
      return sizeof(fi_cq_data_entry);
    default:
      return sizeof(fi_cq_tagged_entry);
  }
}

void write_entry(fi_cq_format f, const fi_cq_tagged_entry& e, std::uint8_t* out) {
  // Each smaller format is a prefix of fi_cq_tagged_entry.
  std::memcpy(out, &e, entry_bytes(f));
}

ssize_t cq_readfrom_locked(Cq* q, void* buf, std::size_t count, fi_addr_t* src) {
  q->dom->progress(q);
  if (!q->errors.empty()) return -FI_EAVAIL;
  if (q->entries.empty()) return -FI_EAGAIN;
  const std::size_t n = std::min(count, q->entries.size());
  auto* out = static_cast<std::uint8_t*>(buf);
  const std::size_t sz = entry_bytes(q->format);
  for (std::size_t i = 0; i < n; ++i) {
    write_entry(q->format, q->entries.front().e, out + i * sz);
    if (src) src[i] = q->entries.front().src;
    q->entries.pop_front();
  }
  return static_cast<ssize_t>(n);
}

// Sleeping CQ reads (Params::spin_ns). An application waiting for a completion calls
// fi_cq_read in a loop; on a machine with more runnable processes than CPUs a process that
// spins gets the CPU only when its slice comes (milliseconds), one that sleeps in the kernel is
// woken at once when its peer rings it (the scheduler favours a waking task). So once the
// empty reads have gone on for spin_ns, each further one sleeps on the medium's doorbells, at
// most kCqNapNsMax (the caller gets -FI_EAGAIN then, and timers and other threads get the
// domain back), never past the engine's next deadline. Pauses of more than kSpinGapNs between
// empty reads mean the application did something else: the run starts again, so a program that
// computes and tests now and then is never put to sleep. So does a read of another CQ by the
// same thread in between: a loop over several CQs (or domains: one thread driving both ends, as
// the provider tests do) may be waiting for work that only another domain's progress moves,
// which a nap on this domain's doorbells would hold up.
//
// The run reads no clock of its own: it looks at the time only when the read's progress pass
// read the clock anyway (Domain::clock_fresh: every kClockEveryPasses idle passes), and judges
// the pauses by their average since its last look (more than kSpinGapNs per empty read: a
// pause). Reading the clock on every empty read was ~20 % of an 8 B round trip's CPU time. Once
// the run has napped, each further empty read reads the clock: it is about to sleep again.
constexpr TimeNs kSpinGapNs = 5'000;
constexpr TimeNs kCqNapNsMax = 1'000'000;
thread_local const Cq* t_empty_cq = nullptr;  // this thread's last CQ read, if it found nothing

// One nap on the doorbells `fds` (filled by the port's arm_sleep, which returned `armed`): at
// most kCqNapNsMax, never past `end` nor the engine's next deadline; the domain's lock `lk` is
// let go while asleep and held again (and the doorbells disarmed) on return.
void nap_on_doorbells(Domain& d, std::unique_lock<std::recursive_mutex>& lk,
                      std::vector<pollfd>& fds, bool armed, TimeNs now, TimeNs end) {
  const TimeNs deadline = d.next_deadline();
  const TimeNs nap = std::min({kCqNapNsMax, end - now, deadline > now ? deadline - now : 0});
  if (armed && nap > 0) {
    const timespec ts{static_cast<time_t>(nap / 1'000'000'000),
                      static_cast<long>(nap % 1'000'000'000)};
    lk.unlock();
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
    lk.lock();
    d.clock_due = true;  // the next pass fires what came due meanwhile (the nap ends at a deadline)
  }
  d.port->disarm_sleep(fds);
}

// A read found something (or an error): the run of empty reads is over.
void end_empty_run(Cq* q) {
  q->run = Cq::EmptyRun{};
  t_empty_cq = nullptr;
}

ssize_t cq_readfrom(fid_cq* cq, void* buf, std::size_t count, fi_addr_t* src) {
  return guard<ssize_t>(-FI_ENOMEM, [&] {
    Cq* q = ofi_container<Cq>(cq);
    std::unique_lock lk(q->dom->mu);
    const ssize_t n = cq_readfrom_locked(q, buf, count, src);
    if (n != -FI_EAGAIN) {
      end_empty_run(q);
      return n;
    }
    if (g_params.spin_ns == 0) return n;
    Domain* d = q->dom;
    Cq::EmptyRun& run = q->run;
    if (t_empty_cq != q) run = Cq::EmptyRun{};  // a new run (its start: at its first look)
    t_empty_cq = q;
    ++run.reads;
    TimeNs t;
    if (d->clock_fresh)
      t = d->now;
    else if (run.napped)
      t = mono_ns();
    else
      return n;  // the common case: no look at the time
    if (run.first == 0 || t - run.looked > run.reads * kSpinGapNs) {
      // The run's first look, or a pause since the last one: the run starts (again) here.
      run = Cq::EmptyRun{t, t, 0, false};
      return n;
    }
    run.looked = t;
    run.reads = 0;
    if (t - run.first < TimeNs(g_params.spin_ns)) return n;
    if (d->next_deadline() <= t) return n;
    // Thread-local: another thread may sleep on the same domain while this one does.
    thread_local std::vector<pollfd> fds;
    fds.clear();
    const bool armed = d->port->arm_sleep(fds);
    nap_on_doorbells(*d, lk, fds, armed, t, kNoDeadline);
    const ssize_t m = cq_readfrom_locked(q, buf, count, src);
    if (m != -FI_EAGAIN) {
      // What woke us arrived: the run is over, as for any read that finds something. (It went
      // on before: the next wait, microseconds later, napped at its first empty read, and a
      // ping-pong whose peer answers within the nap's wake-up paid a doorbell per message.)
      end_empty_run(q);
      return m;
    }
    // The pass after the nap read the clock (clock_due); the next empty read within
    // kSpinGapNs of it naps again.
    run.looked = d->clock_fresh ? d->now : mono_ns();
    run.napped = true;
    return m;
  });
}
ssize_t cq_read(fid_cq* cq, void* buf, std::size_t count) {
  return cq_readfrom(cq, buf, count, nullptr);
}
ssize_t cq_readerr(fid_cq* cq, fi_cq_err_entry* buf, std::uint64_t flags) {
  return guard<ssize_t>(-FI_ENOMEM, [&]() -> ssize_t {
    Cq* q = ofi_container<Cq>(cq);
    std::lock_guard lk(q->dom->mu);
    if (q->errors.empty()) return -FI_EAGAIN;
    // API >= 1.5: the caller's err_data buffer is kept if it gives one; we carry no err_data.
    void* user_err_data = buf->err_data;
    const std::size_t user_err_size = buf->err_data_size;
    *buf = q->errors.front();
    // No provider error data: err_data_size 0 (the caller's buffer, if any, is left alone).
    (void)user_err_size;
    buf->err_data = FI_VERSION_GE(q->dom->api_version, FI_VERSION(1, 5)) ? user_err_data : nullptr;
    buf->err_data_size = 0;
    if (!(flags & FI_PEEK)) q->errors.pop_front();
    return 1;
  });
}
ssize_t cq_sreadfrom(fid_cq* cq, void* buf, std::size_t count, fi_addr_t* src, const void* cond,
                     int timeout) {
  (void)cond;
  Cq* q = ofi_container<Cq>(cq);
  if (q->wait == FI_WAIT_NONE) return -FI_ENOSYS;
  const TimeNs start = mono_ns();
  const TimeNs end = timeout < 0 ? kNoDeadline : start + TimeNs(timeout) * 1'000'000;
  int sleep_us = 1;
  for (;;) {
    const ssize_t n = cq_readfrom(cq, buf, count, src);
    if (n != -FI_EAGAIN) return n;
    {
      std::lock_guard lk(q->dom->mu);
      if (q->signalled) {
        q->signalled = false;
        return -FI_ECANCELED;
      }
    }
    const TimeNs now = mono_ns();
    if (now >= end) return -FI_EAGAIN;
    // A medium with doorbells (shm): sleep until a peer publishes on one of our rings, a control
    // datagram or another thread's completion comes, or the engine's next deadline (at most
    // kCqNapNsMax: the peer's direct messages need no timer, the engine's packets do).
    {
      thread_local std::vector<pollfd> sfds;
      sfds.clear();
      const int nfd = q->notify_fd();
      if (nfd >= 0) sfds.push_back({nfd, POLLIN, 0});
      const std::size_t own = sfds.size();
      Domain* d = q->dom;
      std::unique_lock lk(d->mu);
      const bool armed = d->port->arm_sleep(sfds);
      if (sfds.size() > own) {  // the medium can ring us
        nap_on_doorbells(*d, lk, sfds, armed, now, end);
        lk.unlock();
        if (nfd >= 0) {
          std::uint64_t drain;
          [[maybe_unused]] auto r = ::read(nfd, &drain, sizeof drain);
        }
        continue;
      }
    }
    // Manual progress: the peer's packets arrive on the medium's fd, but ACK and retransmit
    // timers need us back soon; wait on both fds with a short, growing timeout.
    pollfd fds[2] = {{q->notify_fd(), POLLIN, 0}, {q->dom->port->wait_fd(), POLLIN, 0}};
    const int nfds = fds[1].fd >= 0 ? 2 : 1;
    int wait_ms = sleep_us >= 1000 ? sleep_us / 1000 : 0;
    if (end != kNoDeadline)
      wait_ms = std::min<int>(wait_ms, static_cast<int>((end - now) / 1'000'000));
    if (wait_ms == 0) {
      timespec ts{0, sleep_us * 1000L};
      nanosleep(&ts, nullptr);
    } else {
      ::poll(fds, nfds, wait_ms);
    }
    {
      std::lock_guard lk(q->dom->mu);
      q->dom->clock_due = true;  // it slept (pass_clock)
    }
    sleep_us = std::min(sleep_us * 2, 1000);
    for (int i = 0; i < nfds; ++i) {
      std::uint64_t drain;
      [[maybe_unused]] auto r = ::read(fds[i].fd, &drain, sizeof drain);
    }
  }
}
ssize_t cq_sread(fid_cq* cq, void* buf, std::size_t count, const void* cond, int timeout) {
  return cq_sreadfrom(cq, buf, count, nullptr, cond, timeout);
}
int cq_signal(fid_cq* cq) {
  Cq* q = ofi_container<Cq>(cq);
  std::lock_guard lk(q->dom->mu);
  q->signalled = true;
  notify(q->notify_fd());
  return 0;
}
const char* cq_strerror(fid_cq*, int prov_errno, const void*, char* buf, std::size_t len) {
  // prov_errno carries the engine's WcStatus + 1 (0: none), or kProvErrConnTimeout.
  const char* s = prov_errno == kProvErrConnTimeout
                      ? "connection request unanswered until FI_WEFT_CONN_TIMEOUT_MS"
                  : prov_errno > 0 ? to_string(static_cast<WcStatus>(prov_errno - 1)).data()
                                   : "no provider error";
  if (buf && len) {
    std::snprintf(buf, len, "weft: %s", s);
    return buf;
  }
  return s;
}
fi_ops_cq g_cq_ops = {sizeof(fi_ops_cq), cq_read,      cq_readfrom, cq_readerr,
                      cq_sread,          cq_sreadfrom, cq_signal,   cq_strerror};

int cq_open(fid_domain* dom, fi_cq_attr* attr, fid_cq** out, void* ctx) {
  Domain* d = ofi_container<Domain>(dom);
  auto q = std::make_unique<Cq>();
  q->dom = d;
  q->depth = 1024;
  if (attr) {
    if (attr->flags & ~FI_AFFINITY) return -FI_EBADFLAGS;
    switch (attr->format) {
      case FI_CQ_FORMAT_UNSPEC:
        q->format = FI_CQ_FORMAT_CONTEXT;
        break;
      case FI_CQ_FORMAT_CONTEXT:
      case FI_CQ_FORMAT_MSG:
      case FI_CQ_FORMAT_DATA:
      case FI_CQ_FORMAT_TAGGED:
        q->format = attr->format;
        break;
      default:
        return -FI_ENOSYS;
    }
    switch (attr->wait_obj) {
      case FI_WAIT_NONE:
        q->wait = FI_WAIT_NONE;
        break;
      case FI_WAIT_UNSPEC:
      case FI_WAIT_FD:
        q->wait = FI_WAIT_FD;
        break;
      case FI_WAIT_SET:
        if (!attr->wait_set) return -FI_EINVAL;
        q->wait = FI_WAIT_SET;
        q->ws = ofi_container<WaitSet>(attr->wait_set);
        break;
      default:
        return -FI_ENOSYS;  // no mutex/cond or yield objects
    }
    if (attr->wait_cond != FI_CQ_COND_NONE) return -FI_ENOSYS;
    if (attr->size) q->depth = attr->size;
  }
  if (q->wait == FI_WAIT_FD && !q->wfd.open()) return -FI_ENOMEM;
  if (q->ws) q->ws->add(q.get());
  q->cq.fid.fclass = FI_CLASS_CQ;
  q->cq.fid.context = ctx;
  q->cq.fid.ops = &g_cq_fi_ops;
  q->cq.ops = &g_cq_ops;
  std::lock_guard lk(d->mu);
  ++d->refs;
  *out = &q.release()->cq;
  return 0;
}

// ---- counters -----------------------------------------------------------------------------------
int cntr_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Cntr* c = ofi_container<Cntr>(f);
    {
      std::lock_guard lk(c->dom->mu);
      if (c->refs > 0) return -FI_EBUSY;
      --c->dom->refs;
    }
    if (c->ws) c->ws->remove(c);
    delete c;
    return 0;
  });
}
fi_ops g_cntr_fi_ops = {sizeof(fi_ops), cntr_close, no_bind,   no_control,
                        no_ops_open,    no_tostr,   no_ops_set};

std::uint64_t cntr_read(fid_cntr* f) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  guard(0, [&] {
    c->dom->progress();
    return 0;
  });
  return c->value;
}
std::uint64_t cntr_readerr(fid_cntr* f) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  return c->errors;
}
int cntr_add(fid_cntr* f, std::uint64_t v) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  c->value += v;
  if (c->ws) c->ws->signal();
  return 0;
}
int cntr_set(fid_cntr* f, std::uint64_t v) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  c->value = v;
  if (c->ws) c->ws->signal();
  return 0;
}
int cntr_adderr(fid_cntr* f, std::uint64_t v) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  c->errors += v;
  if (c->ws) c->ws->signal();
  return 0;
}
int cntr_seterr(fid_cntr* f, std::uint64_t v) {
  Cntr* c = ofi_container<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  c->errors = v;
  if (c->ws) c->ws->signal();
  return 0;
}
// Between looks, sleeps on the domain's doorbells as fi_cq_sread does (a peer's publish wakes it;
// at most until the engine's next deadline); a medium without doorbells gets the growing nap.
int cntr_wait(fid_cntr* f, std::uint64_t threshold, int timeout) {
  Cntr* c = ofi_container<Cntr>(f);
  const TimeNs end = timeout < 0 ? kNoDeadline : mono_ns() + TimeNs(timeout) * 1'000'000;
  const std::uint64_t errors0 = cntr_readerr(f);
  int sleep_us = 1;
  thread_local std::vector<pollfd> fds;
  for (;;) {
    if (cntr_read(f) >= threshold) return 0;
    if (cntr_readerr(f) != errors0) return -FI_EAVAIL;
    const TimeNs now = mono_ns();
    if (now >= end) return -FI_ETIMEDOUT;
    Domain* d = c->dom;
    std::unique_lock lk(d->mu);
    fds.clear();
    const bool armed = d->port->arm_sleep(fds);
    if (!fds.empty()) {
      nap_on_doorbells(*d, lk, fds, armed, now, end);
      continue;
    }
    lk.unlock();
    timespec ts{0, sleep_us * 1000L};
    nanosleep(&ts, nullptr);
    sleep_us = std::min(sleep_us * 2, 1000);
    lk.lock();
    d->clock_due = true;  // it slept (pass_clock)
  }
}
fi_ops_cntr g_cntr_ops = {sizeof(fi_ops_cntr), cntr_read,   cntr_readerr, cntr_add, cntr_set,
                          cntr_wait,           cntr_adderr, cntr_seterr};

int cntr_open(fid_domain* dom, fi_cntr_attr* attr, fid_cntr** out, void* ctx) {
  Domain* d = ofi_container<Domain>(dom);
  if (attr) {
    if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
        attr->wait_obj != FI_WAIT_SET)
      return -FI_ENOSYS;
    if (attr->wait_obj == FI_WAIT_SET && !attr->wait_set) return -FI_EINVAL;
    if (attr->flags) return -FI_EBADFLAGS;
  }
  auto c = std::make_unique<Cntr>();
  c->dom = d;
  if (attr && attr->wait_obj == FI_WAIT_SET) {
    c->ws = ofi_container<WaitSet>(attr->wait_set);
    c->ws->add(c.get());
  }
  c->cntr.fid.fclass = FI_CLASS_CNTR;
  c->cntr.fid.context = ctx;
  c->cntr.fid.ops = &g_cntr_fi_ops;
  c->cntr.ops = &g_cntr_ops;
  std::lock_guard lk(d->mu);
  ++d->refs;
  *out = &c.release()->cntr;
  return 0;
}

}  // namespace

void cntr_inc(Cntr* c) {
  if (!c) return;
  ++c->value;
  if (c->ws) c->ws->signal();
}
void cntr_err(Cntr* c) {
  if (!c) return;
  ++c->errors;
  if (c->ws) c->ws->signal();
}

}  // namespace weft::ofi
