// src/ofi/ofi_prov.cpp — the provider entry point (fi_prov_ini), its parameters, getinfo, the
// fabric object and the event queue.
//
// fi_prov_ini and cleanup run in every process that has this DSO on FI_PROVIDER_PATH, even when
// another provider is chosen: they only read parameters (no threads, no shared memory).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/ofi/enosys.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {

Params g_params;

TimeNs mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ull + static_cast<TimeNs>(ts.tv_nsec);
}

namespace {

// OFI_CORE_PROV_ONLY: utility providers (ofi_rxm, ofi_rxd) ask core providers with this flag.
// Weft offers RDM itself; a layered weft;ofi_rxm would only shadow it (Open MPI matches
// provider names by prefix), so such calls are refused.
constexpr std::uint64_t kCoreProvOnly = 1ull << 59;
constexpr std::uint32_t kProvVersion = FI_VERSION(0, 1);
constexpr const char* kFabricName = "weft";
constexpr const char* kDomainName = "weft";
constexpr std::uint64_t kTxOpFlags = FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                     FI_DELIVERY_COMPLETE | FI_INJECT | FI_MORE;
constexpr std::uint64_t kRxOpFlags = FI_COMPLETION | FI_MORE | FI_MULTI_RECV;
constexpr std::uint64_t kMsgOrder = FI_ORDER_SAS;
constexpr std::uint64_t kMrRmaBits = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;

bool subset(std::uint64_t want, std::uint64_t have) {
  return (want & ~have) == 0;
}

// API >= 1.5: mr_mode is a bit set. The RMA path uses the engine's rkeys and virtual addresses
// on the wire, so FI_RMA needs the application to accept FI_MR_PROV_KEY | FI_MR_VIRT_ADDR.
// Messages need no registration at all (eager data is staged, rendezvous buffers are
// registered internally). Returns false if RMA is not possible with these bits.
bool mr_mode_allows_rma(std::uint32_t version, int hint_mode) {
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
    return hint_mode == FI_MR_UNSPEC || hint_mode == FI_MR_BASIC;
  }
  if (hint_mode == FI_MR_BASIC) return true;
  if (hint_mode == FI_MR_SCALABLE) return false;
  return subset(kMrRmaBits, static_cast<std::uint64_t>(hint_mode));
}

int reply_mr_mode(std::uint32_t version, bool rma) {
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) return rma ? FI_MR_BASIC : FI_MR_SCALABLE;
  return rma ? static_cast<int>(kMrRmaBits) : 0;
}

std::size_t max_msg_bytes(fi_ep_type type) {
  return type == FI_EP_DGRAM ? g_params.mtu_bytes : kMaxMsgBytes;
}
std::size_t inject_bytes(fi_ep_type type) {
  return std::min(g_params.inject_bytes, max_msg_bytes(type));
}

#define WEFT_REJECT(...)                 \
  do {                                   \
    WEFT_INFO(FI_LOG_CORE, __VA_ARGS__); \
    return -FI_ENODATA;                  \
  } while (0)

// Checks every field of hints against what the RDM endpoint honours and fills `out`.
int check_and_fill(fi_ep_type type, std::uint32_t version, std::uint64_t flags,
                   const fi_info* hints, fi_info* out) {
  const bool dgram = type == FI_EP_DGRAM;
  const bool msg = type == FI_EP_MSG;
  const std::uint64_t kCaps = dgram ? kDgramCaps : msg ? kMsgCaps : kRdmCaps;
  std::uint64_t caps = kCaps;
  int hint_mr_mode = static_cast<int>(kMrRmaBits | FI_MR_LOCAL | FI_MR_ALLOCATED);
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) hint_mr_mode = FI_MR_UNSPEC;
  std::uint64_t tx_op_flags = 0, rx_op_flags = 0;
  fi_threading threading = FI_THREAD_SAFE;
  fi_av_type av_type = FI_AV_UNSPEC;
  fi_progress progress = FI_PROGRESS_MANUAL;         // unless asked: AUTO costs a thread per domain
  std::uint64_t tag_format = 0xAAAAAAAAAAAAAAAAull;  // FI_TAG_GENERIC: bit 63 set
  (void)flags;
  if (hints) {
    if (hints->caps && !subset(hints->caps, kCaps))
      WEFT_REJECT("caps 0x%llx not supported", (unsigned long long)(hints->caps & ~kCaps));
    if (hints->addr_format != FI_FORMAT_UNSPEC)
      WEFT_REJECT("addr_format %u: only FI_FORMAT_UNSPEC (weft addresses)", hints->addr_format);
    if (hints->dest_addr && (hints->dest_addrlen != sizeof(EpAddr) ||
                             !static_cast<const EpAddr*>(hints->dest_addr)->valid()))
      WEFT_REJECT("dest_addr is not a weft address");
    if (hints->src_addr && (hints->src_addrlen != sizeof(EpAddr) ||
                            !static_cast<const EpAddr*>(hints->src_addr)->valid()))
      WEFT_REJECT("src_addr is not a weft address");
    if (hints->handle && (!msg || hints->handle->fclass != FI_CLASS_CONNREQ))
      WEFT_REJECT("handle: not a weft connection request");
    if (const fi_ep_attr* e = hints->ep_attr) {
      if (e->type != FI_EP_UNSPEC && e->type != type) return -FI_ENODATA;
      if (e->protocol != FI_PROTO_UNSPEC) WEFT_REJECT("protocol %u", e->protocol);
      if (e->max_msg_size > max_msg_bytes(type)) WEFT_REJECT("max_msg_size");
      if (e->msg_prefix_size) WEFT_REJECT("msg_prefix_size");
      if (e->max_order_raw_size || e->max_order_war_size || e->max_order_waw_size)
        WEFT_REJECT("max_order_*_size");
      if (e->tx_ctx_cnt > 1 || e->rx_ctx_cnt > 1) WEFT_REJECT("scalable endpoints");
      if (e->auth_key_size || e->auth_key) WEFT_REJECT("auth_key");
      if (e->mem_tag_format) tag_format = e->mem_tag_format;
    }
    if (const fi_domain_attr* d = hints->domain_attr) {
      if (d->name && std::strcmp(d->name, kDomainName) != 0) WEFT_REJECT("domain %s", d->name);
      threading = d->threading == FI_THREAD_UNSPEC ? FI_THREAD_SAFE : d->threading;
      // Either asked AUTO: both are (one progress thread drives control and data alike).
      if (d->control_progress == FI_PROGRESS_AUTO || d->data_progress == FI_PROGRESS_AUTO)
        progress = FI_PROGRESS_AUTO;
      if (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP && d->av_type != FI_AV_TABLE)
        WEFT_REJECT("av_type %d", d->av_type);
      av_type = d->av_type;
      if (d->cq_data_size > kCqDataBytes) WEFT_REJECT("cq_data_size %zu", d->cq_data_size);
      if (d->mr_key_size > 4) WEFT_REJECT("mr_key_size %zu", d->mr_key_size);
      if (d->caps && !subset(d->caps, FI_LOCAL_COMM | FI_REMOTE_COMM)) WEFT_REJECT("domain caps");
      if (d->auth_key_size || d->auth_key) WEFT_REJECT("domain auth_key");
      if (d->max_ep_tx_ctx > 1 || d->max_ep_rx_ctx > 1 || d->max_ep_stx_ctx || d->max_ep_srx_ctx)
        WEFT_REJECT("shared or scalable contexts");
      if (d->mr_mode & (FI_MR_RAW | FI_MR_MMU_NOTIFY | FI_MR_HMEM | FI_MR_ENDPOINT) &&
          !FI_VERSION_LT(version, FI_VERSION(1, 5)) && d->mr_mode != FI_MR_BASIC &&
          d->mr_mode != FI_MR_SCALABLE) {
        // Extra bits the application merely accepts are fine; nothing to reject.
      }
      hint_mr_mode = d->mr_mode;
    }
    if (const fi_fabric_attr* f = hints->fabric_attr) {
      if (f->name && std::strcmp(f->name, kFabricName) != 0) WEFT_REJECT("fabric %s", f->name);
    }
    const std::uint64_t want = hints->caps ? hints->caps : kCaps;
    if (const fi_tx_attr* t = hints->tx_attr) {
      if (t->caps && !subset(t->caps, kCaps)) WEFT_REJECT("tx caps");
      if (!subset(t->msg_order, dgram ? 0 : kMsgOrder))
        WEFT_REJECT("tx msg_order 0x%llx", (unsigned long long)t->msg_order);
      if (t->comp_order & ~FI_ORDER_NONE) WEFT_REJECT("tx comp_order");
      if (t->inject_size > inject_bytes(type)) WEFT_REJECT("inject_size %zu", t->inject_size);
      if (t->size > g_params.tx_depth) WEFT_REJECT("tx size %zu", t->size);
      if (t->iov_limit > kIovMax || t->rma_iov_limit > 1) WEFT_REJECT("tx iov_limit");
      if (!subset(t->op_flags, kTxOpFlags)) WEFT_REJECT("tx op_flags");
      if (t->mode & ~hints->mode) { /* mode bits are the app's; we require none */
      }
      tx_op_flags = t->op_flags;
    }
    if (const fi_rx_attr* r = hints->rx_attr) {
      if (r->caps && !subset(r->caps, kCaps)) WEFT_REJECT("rx caps");
      if (!subset(r->msg_order, dgram ? 0 : kMsgOrder)) WEFT_REJECT("rx msg_order");
      if (r->comp_order & ~FI_ORDER_NONE) WEFT_REJECT("rx comp_order");
      if (r->size > g_params.rx_bounce) WEFT_REJECT("rx size %zu", r->size);
      if (r->iov_limit > kIovMax) WEFT_REJECT("rx iov_limit");
      if (r->total_buffered_recv) WEFT_REJECT("total_buffered_recv");
      if (!subset(r->op_flags, kRxOpFlags)) WEFT_REJECT("rx op_flags");
      rx_op_flags = r->op_flags;
    }
    const bool rma_ok = mr_mode_allows_rma(version, hint_mr_mode);
    if ((want & kRmaCaps) && hints->caps && (hints->caps & (FI_RMA | FI_ATOMIC)) && !rma_ok)
      WEFT_REJECT("FI_RMA/FI_ATOMIC need mr_mode FI_MR_PROV_KEY|FI_MR_VIRT_ADDR (got 0x%x)",
                  hint_mr_mode);
    caps = want;
    if (!rma_ok) caps &= ~kRmaCaps;
    // Secondary capabilities are offered even when not asked for.
    caps |= kCaps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
    if (!(caps & (FI_MSG | FI_TAGGED | FI_RMA))) caps |= kCaps & (FI_MSG | FI_TAGGED);
    if (dgram && (caps & (FI_TAGGED | FI_RMA))) WEFT_REJECT("dgram: FI_MSG only");
  } else if (dgram || !mr_mode_allows_rma(version, hint_mr_mode)) {
    caps &= ~kRmaCaps;
  }
  const bool rma = (caps & FI_RMA) != 0;

  out->caps = caps;
  out->mode = 0;
  out->addr_format = FI_FORMAT_UNSPEC;
  if (hints && hints->dest_addr) {
    out->dest_addr = std::malloc(sizeof(EpAddr));
    if (!out->dest_addr) return -FI_ENOMEM;
    std::memcpy(out->dest_addr, hints->dest_addr, sizeof(EpAddr));
    out->dest_addrlen = sizeof(EpAddr);
  }
  if (hints && hints->src_addr) {
    out->src_addr = std::malloc(sizeof(EpAddr));
    if (!out->src_addr) return -FI_ENOMEM;
    std::memcpy(out->src_addr, hints->src_addr, sizeof(EpAddr));
    out->src_addrlen = sizeof(EpAddr);
  }
  fi_tx_attr* t = out->tx_attr;
  t->caps = caps;
  t->mode = 0;
  t->op_flags = tx_op_flags;
  t->msg_order = dgram ? 0 : kMsgOrder;
  t->comp_order = FI_ORDER_NONE;
  t->inject_size = inject_bytes(type);
  t->size = g_params.tx_depth;
  t->iov_limit = kIovMax;
  t->rma_iov_limit = dgram ? 0 : 1;
  fi_rx_attr* r = out->rx_attr;
  r->caps = caps;
  r->mode = 0;
  r->op_flags = rx_op_flags;
  r->msg_order = dgram ? 0 : kMsgOrder;
  r->comp_order = FI_ORDER_NONE;
  r->total_buffered_recv = 0;
  r->size = g_params.rx_bounce;
  r->iov_limit = kIovMax;
  fi_ep_attr* e = out->ep_attr;
  e->type = type;
  e->protocol = FI_PROTO_UNSPEC;
  e->protocol_version = 1;
  e->max_msg_size = max_msg_bytes(type);
  e->msg_prefix_size = 0;
  e->max_order_raw_size = e->max_order_war_size = e->max_order_waw_size = 0;
  e->mem_tag_format = (dgram || msg) ? 0 : tag_format;
  e->tx_ctx_cnt = e->rx_ctx_cnt = 1;
  fi_domain_attr* d = out->domain_attr;
  d->name = strdup(kDomainName);
  d->threading = threading;
  d->control_progress = progress;
  d->data_progress = progress;
  d->resource_mgmt = FI_RM_ENABLED;
  d->av_type = av_type;
  d->mr_mode = reply_mr_mode(version, rma);
  d->mr_key_size = 4;
  d->cq_data_size = kCqDataBytes;
  d->cq_cnt = 256;
  d->ep_cnt = 256;
  d->tx_ctx_cnt = d->rx_ctx_cnt = 256;
  d->max_ep_tx_ctx = d->max_ep_rx_ctx = 1;
  d->max_ep_stx_ctx = d->max_ep_srx_ctx = 0;
  d->cntr_cnt = 256;
  d->mr_iov_limit = 1;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  d->mode = 0;
  d->max_err_data = 0;
  d->mr_cnt = 1u << 16;
  fi_fabric_attr* f = out->fabric_attr;
  f->name = strdup(kFabricName);
  f->prov_version = kProvVersion;
  f->api_version = version;
  if (!d->name || !f->name) return -FI_ENOMEM;
  return 0;
}

int weft_getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
                 const fi_info* hints, fi_info** info) {
  return guard(-FI_ENOMEM, [&] { return rdm_getinfo(version, node, service, flags, hints, info); });
}

int weft_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  return guard(-FI_ENOMEM, [&] { return fabric_open(attr, fabric, context); });
}

void weft_cleanup() {
  dpdk_cleanup();
}

}  // namespace

int rdm_getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
                const fi_info* hints, fi_info** info) {
  *info = nullptr;
  if (flags & kCoreProvOnly) {
    WEFT_INFO(FI_LOG_CORE, "refusing a utility provider's core-only query (no weft;ofi_rxm)");
    return -FI_ENODATA;
  }
  if (g_params.medium == Params::Medium::kDpdk && !dpdk_built()) {
    WEFT_WARN(FI_LOG_CORE, "FI_WEFT_MEDIUM=dpdk: %s", kNoDpdk);
    return -FI_ENODATA;
  }
  if (node || service) {
    // Weft addresses are not host names: node and service carry nothing we can resolve. A
    // client names its peer through hints->dest_addr (a weft address from fi_getname).
    WEFT_INFO(FI_LOG_CORE, "ignoring node/service %s/%s", node ? node : "-",
              service ? service : "-");
  }
  // RDM first, then MSG, then DGRAM (UD); each checks the hints on its own.
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (fi_ep_type type : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
    fi_info* out = fi_allocinfo();
    if (!out) {
      fi_freeinfo(head);
      return -FI_ENOMEM;
    }
    const int rc = check_and_fill(type, version, flags, hints, out);
    if (rc == -FI_ENOMEM) {
      fi_freeinfo(out);
      fi_freeinfo(head);
      return rc;
    }
    if (rc != 0) {
      fi_freeinfo(out);
      continue;
    }
    *tail = out;
    tail = &out->next;
  }
  if (!head) return -FI_ENODATA;
  *info = head;
  return 0;
}

// ---- fabric ---------------------------------------------------------------------------------
namespace {

int fabric_close(fid* f) {
  delete ofi_container<Fabric>(f);
  return 0;
}

fi_ops g_fabric_fi_ops = {sizeof(fi_ops), fabric_close, no_bind,   no_control,
                          no_ops_open,    no_tostr,     no_ops_set};

int fabric_domain(fid_fabric* f, fi_info* info, fid_domain** d, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return domain_open(f, info, d, ctx); });
}
int fabric_pep(fid_fabric* f, fi_info* info, fid_pep** pep, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return pep_open(f, info, pep, ctx); });
}
int fabric_eq(fid_fabric* f, fi_eq_attr* a, fid_eq** eq, void* ctx) {
  return guard(-FI_ENOMEM, [&] { return eq_open(f, a, eq, ctx); });
}
int fabric_wait(fid_fabric* f, fi_wait_attr* a, fid_wait** w) {
  return guard(-FI_ENOMEM, [&] { return wait_open(f, a, w); });
}
int fabric_trywait(fid_fabric*, fid** fids, int count) {
  return guard(-FI_ENOMEM, [&] { return trywait(fids, count); });
}
int fabric_domain2(fid_fabric* f, fi_info* info, fid_domain** d, std::uint64_t flags, void* ctx) {
  if (flags) return -FI_EINVAL;
  return fabric_domain(f, info, d, ctx);
}
fi_ops_fabric g_fabric_ops = {sizeof(fi_ops_fabric), fabric_domain,  fabric_pep,    fabric_eq,
                              fabric_wait,           fabric_trywait, fabric_domain2};

}  // namespace

int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (attr && attr->name && std::strcmp(attr->name, kFabricName) != 0) return -FI_EINVAL;
  auto* f = new Fabric;
  f->name = kFabricName;
  f->fab.fid.fclass = FI_CLASS_FABRIC;
  f->fab.fid.context = context;
  f->fab.fid.ops = &g_fabric_fi_ops;
  f->fab.ops = &g_fabric_ops;
  f->fab.api_version = attr ? attr->api_version : FI_VERSION(1, 5);
  *fabric = &f->fab;
  return 0;
}

// ---- event queue: only what RDM needs (fi_eq_write/read; no CM events yet) --------------------
namespace {

int eq_close(fid* f) {
  Eq* q = ofi_container<Eq>(f);
  {
    std::lock_guard lk(q->fabric->mu);
    std::erase(q->fabric->eqs, q);
  }
  delete q;
  return 0;
}

// Connection events come from the progress of the domains bound to this EQ.
void eq_progress(Eq* q) {
  // Copied, then progressed without the fabric lock (binds take a domain lock, then it). A
  // domain must not be closed while another thread reads an EQ it is bound to.
  std::vector<Domain*> sources;
  {
    std::lock_guard lk(q->fabric->mu);
    sources = q->sources;
  }
  for (Domain* d : sources) {
    std::lock_guard dl(d->mu);
    d->progress();
  }
}
fi_ops g_eq_fi_ops = {sizeof(fi_ops), eq_close, no_bind,   no_control,
                      no_ops_open,    no_tostr, no_ops_set};

ssize_t eq_read_impl(Eq* q, std::uint32_t* event, void* buf, std::size_t len, std::uint64_t flags,
                     bool want_error) {
  std::lock_guard lk(q->mu);
  if (q->events.empty()) return -FI_EAGAIN;
  Eq::Event& ev = q->events.front();
  if (ev.error != want_error) return want_error ? -FI_EAGAIN : -FI_EAVAIL;
  if (len < ev.buf.size()) return -FI_ETOOSMALL;
  if (event) *event = ev.event;
  std::memcpy(buf, ev.buf.data(), ev.buf.size());
  const ssize_t n = static_cast<ssize_t>(ev.buf.size());
  if (!(flags & FI_PEEK)) q->events.pop_front();
  return n;
}
ssize_t eq_read(fid_eq* eq, std::uint32_t* event, void* buf, std::size_t len, std::uint64_t flags) {
  return guard<ssize_t>(-FI_ENOMEM, [&] {
    eq_progress(ofi_container<Eq>(eq));
    return eq_read_impl(ofi_container<Eq>(eq), event, buf, len, flags, false);
  });
}
ssize_t eq_readerr(fid_eq* eq, fi_eq_err_entry* buf, std::uint64_t flags) {
  return guard<ssize_t>(-FI_ENOMEM, [&] {
    return eq_read_impl(ofi_container<Eq>(eq), nullptr, buf, sizeof *buf, flags, true);
  });
}
ssize_t eq_write(fid_eq* eq, std::uint32_t event, const void* buf, std::size_t len,
                 std::uint64_t flags) {
  return guard<ssize_t>(-FI_ENOMEM, [&]() -> ssize_t {
    Eq* q = ofi_container<Eq>(eq);
    std::lock_guard lk(q->mu);
    const auto* p = static_cast<const std::uint8_t*>(buf);
    q->events.push_back({event, std::vector<std::uint8_t>(p, p + len), false});
    (void)flags;
    return static_cast<ssize_t>(len);
  });
}
ssize_t eq_sread(fid_eq* eq, std::uint32_t* event, void* buf, std::size_t len, int timeout,
                 std::uint64_t flags) {
  const TimeNs end = timeout < 0 ? kNoDeadline : mono_ns() + TimeNs(timeout) * 1'000'000;
  for (;;) {
    const ssize_t n = eq_read(eq, event, buf, len, flags);
    if (n != -FI_EAGAIN) return n;
    if (mono_ns() >= end) return -FI_EAGAIN;
    ::poll(nullptr, 0, 1);  // connection events come from progress (eq_read): back off 1 ms
  }
}
const char* eq_strerror(fid_eq*, int prov_errno, const void*, char* buf, std::size_t len) {
  const char* s = fi_strerror(prov_errno);
  if (buf && len) {
    std::strncpy(buf, s, len - 1);
    buf[len - 1] = '\0';
    return buf;
  }
  return s;
}
fi_ops_eq g_eq_ops = {sizeof(fi_ops_eq), eq_read, eq_readerr, eq_write, eq_sread, eq_strerror};

}  // namespace

void Eq::push(std::uint32_t event, const void* buf, std::size_t len, bool error) {
  std::lock_guard lk(mu);
  const auto* p = static_cast<const std::uint8_t*>(buf);
  events.push_back({event, std::vector<std::uint8_t>(p, p + len), error});
}

void Eq::add_source(Domain* d) {
  std::lock_guard lk(fabric->mu);
  if (std::find(sources.begin(), sources.end(), d) == sources.end()) sources.push_back(d);
}

void eq_forget_domain(Domain* d) {
  std::lock_guard lk(d->fabric->mu);
  for (Eq* q : d->fabric->eqs) std::erase(q->sources, d);
}

int eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context) {
  if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
      attr->wait_obj != FI_WAIT_FD)
    return -FI_ENOSYS;
  auto* q = new Eq;
  q->fabric = ofi_container<Fabric>(fabric);
  {
    std::lock_guard lk(q->fabric->mu);
    q->fabric->eqs.push_back(q);
  }
  q->eq.fid.fclass = FI_CLASS_EQ;
  q->eq.fid.context = context;
  q->eq.fid.ops = &g_eq_fi_ops;
  q->eq.ops = &g_eq_ops;
  *eq = &q->eq;
  return 0;
}

struct fi_provider g_prov = {
    .version = kProvVersion,
    .fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
    .context = {},
    .name = "weft",
    .getinfo = weft_getinfo,
    .fabric = weft_fabric,
    .cleanup = weft_cleanup,
};

const char* to_string(Params::Medium m) {
  switch (m) {
    case Params::Medium::kShm:
      return "shm";
    case Params::Medium::kLoopback:
      return "loopback";
    case Params::Medium::kUdp:
      return "udp";
    case Params::Medium::kFabric:
      return "fabric";
    case Params::Medium::kDpdk:
      return "dpdk";
  }
  return "?";
}

namespace {
void define_params() {
  fi_param_define(&g_prov, "eager_size", FI_PARAM_SIZE_T,
                  "Largest message payload sent eagerly in one SEND; larger messages use a "
                  "rendezvous (RTS, RDMA READ, FIN) (default: %zu)",
                  g_params.eager_bytes);
  fi_param_define(&g_prov, "inject_size", FI_PARAM_SIZE_T,
                  "tx_attr->inject_size, at most eager_size (default: %zu)", g_params.inject_bytes);
  fi_param_define(&g_prov, "rx_size", FI_PARAM_SIZE_T,
                  "Receive bounce buffers per endpoint (default: %zu)", g_params.rx_bounce);
  fi_param_define(&g_prov, "tx_size", FI_PARAM_SIZE_T,
                  "Send operations in flight per endpoint (default: %zu)", g_params.tx_depth);
  fi_param_define(&g_prov, "mtu", FI_PARAM_SIZE_T,
                  "Path MTU of the RC queue pairs: 256..4096 (default: %zu)", g_params.mtu_bytes);
  fi_param_define(&g_prov, "ack_timeout", FI_PARAM_SIZE_T,
                  "RC local ACK timeout exponent (4.096 us << n), 1..24; a peer that does not "
                  "answer for 8 such periods is declared unreachable (default: %zu)",
                  g_params.ack_timeout);
  fi_param_define(&g_prov, "keeper_ms", FI_PARAM_SIZE_T,
                  "With manual progress, a keeper thread runs a progress pass when the "
                  "application made none for this many ms, so that ACKs and retransmissions "
                  "go on while it blocks elsewhere; 0 turns it off (default: %zu)",
                  g_params.keeper_ms);
  fi_param_define(&g_prov, "medium", FI_PARAM_STRING,
                  "Medium carrying the packets: shm (between processes; the default), fabric "
                  "(through the emulated fabric daemon named by WEFT_FABRIC; the default when "
                  "WEFT_FABRIC is set), udp (RoCEv2 over UDP sockets), dpdk (RoCEv2 frames over "
                  "a DPDK port) or loopback (in-process); default WEFT_MEDIUM if set");
  fi_param_define(&g_prov, "udp_ip", FI_PARAM_STRING,
                  "IPv4 address the udp medium binds (default: 127.0.0.1)");
  fi_param_define(&g_prov, "dpdk_args", FI_PARAM_STRING,
                  "dpdk medium: EAL arguments replacing the defaults (default: WEFT_DPDK_ARGS, "
                  "else --no-huge -m 256 --no-pci --no-shconf --no-telemetry ...)");
  fi_param_define(&g_prov, "dpdk_vdev", FI_PARAM_STRING,
                  "dpdk medium: the device, as rte_dev_probe takes it (e.g. "
                  "net_af_packet0,iface=veth0,framesz=8192); default: a net_memif pair between "
                  "two processes");
  fi_param_define(&g_prov, "dpdk_memif", FI_PARAM_STRING,
                  "dpdk medium without dpdk_vdev: the name that pairs two processes over "
                  "net_memif (its abstract socket); concurrent pairs need their own (default: "
                  "weft-ofi-memif-FABRIC)");
  fi_param_define(&g_prov, "pcap", FI_PARAM_STRING,
                  "Capture what each domain's medium carries into this pcap file, with .PID "
                  "(and .N for a process's N-th further domain) before its extension: RoCEv2 "
                  "frames on udp and dpdk, IBA packets (ERF) on the others");
  fi_param_define(&g_prov, "eager_connect", FI_PARAM_BOOL,
                  "Open the RDM connection to a peer when fi_av_insert names it, not on the "
                  "first send (default: %d)",
                  g_params.eager_connect ? 1 : 0);
  fi_param_define(&g_prov, "direct", FI_PARAM_BOOL,
                  "Send messages of at most direct_size as direct messages on media that are "
                  "reliable and ordered by themselves (shm), past the RC engine, while the "
                  "connection has nothing else in flight (default: %d)",
                  g_params.direct ? 1 : 0);
  fi_param_define(&g_prov, "direct_size", FI_PARAM_SIZE_T,
                  "Largest payload of a direct message (copied into the peer's ring and out), "
                  "at most %zu; larger messages use the rendezvous (default: %zu)",
                  kDirectBytesMax, g_params.direct_bytes);
  fi_param_define(&g_prov, "split_size", FI_PARAM_SIZE_T,
                  "Rendezvous of at least this many bytes between processes that may read and "
                  "write each other's memory: the receiver reads the first half while the sender "
                  "writes the second; 0: never (default: %zu)",
                  g_params.split_bytes_min);
  fi_param_define(&g_prov, "spin_us", FI_PARAM_SIZE_T,
                  "A CQ read loop that has found nothing for this many microseconds sleeps on "
                  "the medium's doorbells (shm, fabric; udp: its sockets), up to 1 ms per read, "
                  "instead of spinning on; "
                  "0: never (default: %zu)",
                  g_params.spin_ns / 1000);
  fi_param_define(&g_prov, "loopback_drop", FI_PARAM_SIZE_T,
                  "Packets per million the loopback medium drops, for tests (default: 0)");
  fi_param_define(&g_prov, "loopback_seed", FI_PARAM_SIZE_T,
                  "Seed of the loopback medium's drops (default: 1)");
  fi_param_define(&g_prov, "udp_ctrl_drop", FI_PARAM_SIZE_T,
                  "Control datagrams per million the udp medium drops, for tests (default: 0)");
  fi_param_define(&g_prov, "conn_timeout_ms", FI_PARAM_SIZE_T,
                  "Milliseconds an RDM connection request may stay unanswered (it is resent "
                  "meanwhile) before the operations waiting for it complete with FI_ETIMEDOUT; "
                  "0: no deadline (default: %zu)",
                  g_params.conn_timeout_ms);
  fi_param_define(&g_prov, "ctrl_drop_first", FI_PARAM_SIZE_T,
                  "Each domain loses its first N RDM connection requests and its first N "
                  "answers, for tests (default: 0)");
  std::size_t v;
  int b;
  if (fi_param_get_size_t(&g_prov, "conn_timeout_ms", &v) == FI_SUCCESS &&
      v <= Params::kConnTimeoutMsMax)
    g_params.conn_timeout_ms = v;
  if (fi_param_get_size_t(&g_prov, "ctrl_drop_first", &v) == FI_SUCCESS)
    g_params.ctrl_drop_first = v;
  if (fi_param_get_bool(&g_prov, "eager_connect", &b) == FI_SUCCESS)
    g_params.eager_connect = b != 0;
  if (fi_param_get_bool(&g_prov, "direct", &b) == FI_SUCCESS) g_params.direct = b != 0;
  if (fi_param_get_size_t(&g_prov, "direct_size", &v) == FI_SUCCESS)
    g_params.direct_bytes = std::min(v, kDirectBytesMax);
  if (fi_param_get_size_t(&g_prov, "split_size", &v) == FI_SUCCESS) g_params.split_bytes_min = v;
  if (fi_param_get_size_t(&g_prov, "spin_us", &v) == FI_SUCCESS && v <= 1'000'000)
    g_params.spin_ns = v * 1000;
  if (fi_param_get_size_t(&g_prov, "loopback_drop", &v) == FI_SUCCESS && v <= 1'000'000)
    g_params.loopback_drop_ppm = v;
  if (fi_param_get_size_t(&g_prov, "loopback_seed", &v) == FI_SUCCESS) g_params.loopback_seed = v;
  if (fi_param_get_size_t(&g_prov, "udp_ctrl_drop", &v) == FI_SUCCESS && v <= 1'000'000)
    g_params.udp_ctrl_drop_ppm = v;
  if (fi_param_get_size_t(&g_prov, "eager_size", &v) == FI_SUCCESS && v >= 64 && v <= (1u << 20))
    g_params.eager_bytes = v;
  if (fi_param_get_size_t(&g_prov, "inject_size", &v) == FI_SUCCESS) g_params.inject_bytes = v;
  if (g_params.inject_bytes > g_params.eager_bytes) g_params.inject_bytes = g_params.eager_bytes;
  if (fi_param_get_size_t(&g_prov, "rx_size", &v) == FI_SUCCESS && v >= 8 && v <= 16384)
    g_params.rx_bounce = v;
  if (fi_param_get_size_t(&g_prov, "tx_size", &v) == FI_SUCCESS && v >= 8 && v <= 16384)
    g_params.tx_depth = v;
  if (fi_param_get_size_t(&g_prov, "mtu", &v) == FI_SUCCESS && v >= 256 && v <= 4096)
    g_params.mtu_bytes = v;
  if (fi_param_get_size_t(&g_prov, "ack_timeout", &v) == FI_SUCCESS && v >= 1 && v <= 24)
    g_params.ack_timeout = v;
  if (fi_param_get_size_t(&g_prov, "keeper_ms", &v) == FI_SUCCESS && v <= 10'000)
    g_params.keeper_ms = v;
  // Only parameters are read here (fi_prov_ini runs in every libfabric process): the daemon is
  // looked up when a domain opens.
  const char* fabric = std::getenv("WEFT_FABRIC");
  if (fabric && *fabric) {
    g_params.fabric = fabric;
    g_params.medium = Params::Medium::kFabric;
  }
  // FI_WEFT_MEDIUM, else WEFT_MEDIUM (the variable weft perf reads too; weft run sets both).
  char* medium = nullptr;
  if (fi_param_get_str(&g_prov, "medium", &medium) != FI_SUCCESS || !medium) {
    const char* w = std::getenv("WEFT_MEDIUM");
    medium = w && *w ? const_cast<char*>(w) : nullptr;
  }
  if (medium) {
    using M = Params::Medium;
    if (std::strcmp(medium, "loopback") == 0)
      g_params.medium = M::kLoopback;
    else if (std::strcmp(medium, "udp") == 0)
      g_params.medium = M::kUdp;
    else if (std::strcmp(medium, "dpdk") == 0)
      g_params.medium = M::kDpdk;
    else if (std::strcmp(medium, "fabric") == 0)
      g_params.medium = M::kFabric;
    else if (std::strcmp(medium, "shm") == 0)
      g_params.medium = M::kShm;
    else
      WEFT_WARN(FI_LOG_CORE, "FI_WEFT_MEDIUM=%s is not a medium; using %s", medium,
                to_string(g_params.medium));
  }
  char* s = nullptr;
  if (fi_param_get_str(&g_prov, "dpdk_args", &s) == FI_SUCCESS && s) g_params.dpdk_args = s;
  s = nullptr;
  if (fi_param_get_str(&g_prov, "dpdk_vdev", &s) == FI_SUCCESS && s) g_params.dpdk_vdev = s;
  s = nullptr;
  if (fi_param_get_str(&g_prov, "dpdk_memif", &s) == FI_SUCCESS && s) g_params.dpdk_memif = s;
  s = nullptr;
  if (fi_param_get_str(&g_prov, "pcap", &s) == FI_SUCCESS && s) g_params.pcap = s;
  char* ip = nullptr;
  in_addr a{};
  if (fi_param_get_str(&g_prov, "udp_ip", &ip) == FI_SUCCESS && ip) {
    if (inet_pton(AF_INET, ip, &a) == 1)
      g_params.udp_ip = ntohl(a.s_addr);
    else
      WEFT_WARN(FI_LOG_CORE, "FI_WEFT_UDP_IP=%s is not an IPv4 address", ip);
  }
}
}  // namespace

}  // namespace weft::ofi

extern "C" {
FI_EXT_INI {
  weft::ofi::define_params();
  return &weft::ofi::g_prov;
}
}
