// src/ofi/ofi_ep.cpp — the FI_EP_RDM endpoint: connections on demand, the message protocol
// (eager and rendezvous), tag matching with an unexpected queue, and RMA (see README.md).
//
// Every call takes the domain lock; completion handlers run inside Domain::progress() under it.
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "src/ofi/enosys.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

// ---- connection setup (control datagrams over the medium) -------------------------------------
// kConn*: the RC connection of one direction (RDM and MSG data). kCm*: FI_EP_MSG connection
// management (connect to a passive endpoint, accept, reject, shutdown).
enum class CtrlType : std::uint32_t {
  kConnReq = 1,
  kConnRep = 2,
  kConnRej = 3,
  kCmReq = 4,
  kCmRep = 5,
  kCmRej = 6,
  kCmShutdown = 7,
};
struct CtrlMsg {
  CtrlType type;
  std::uint32_t dst_ep;  // at offset 4: Domain::on_ctrl demultiplexes on it
  std::uint32_t src_ep;
  std::uint32_t qpn;
  std::uint32_t psn;
  // kConnRep, kConnRej: the requester's QP (its kConnReq's qpn) this answers. A request is
  // resent until answered, so answers may come twice, or late, for a connection already given
  // up and made again: only the answer naming the current QP counts.
  std::uint32_t req_qpn = 0;
};
static_assert(sizeof(CtrlMsg) <= kCtrlBytesMax);

// Connection requests are resent while unanswered (README, "Connection set-up: resends and
// deadline"): first after kConnResendFirstNs, the interval doubling to kConnResendMaxNs, at most
// kConnTriesMax sends in all; the operations waiting for the connection fail with FI_ETIMEDOUT
// FI_WEFT_CONN_TIMEOUT_MS after the first. A peer answers from its progress, which its keeper
// runs every 10 ms even while its application is away, so the first resend comes well after a
// live peer's answer; the resends are for a medium that lost the request or the answer (udp's
// control path gives up after ~10 s, dpdk's Unix datagrams after 200 ms of a full queue,
// FI_WEFT_CTRL_DROP_FIRST) and the deadline for a peer that never answers (stopped, gone
// without its medium noticing, a wrong address).
constexpr TimeNs kConnResendFirstNs = 50'000'000;
constexpr TimeNs kConnResendMaxNs = 1'000'000'000;
constexpr std::uint32_t kConnTriesMax = 16;

Mtu mtu_param() {
  const std::size_t b = g_params.mtu_bytes;
  if (b >= 4096) return Mtu::k4096;
  if (b >= 2048) return Mtu::k2048;
  if (b >= 1024) return Mtu::k1024;
  if (b >= 512) return Mtu::k512;
  return Mtu::k256;
}

Errc qp_to_init(QueuePair& qp) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.access_flags = kAccessRemoteWrite | kAccessRemoteRead;
  return qp.modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
}

// INIT -> RTR -> RTS towards (dlid, dest_qpn) (IBA 11.2.5.3 attribute sets).
Errc qp_to_rts(QueuePair& qp, std::uint16_t dlid, std::uint32_t dest_qpn, std::uint32_t rq_psn,
               std::uint32_t sq_psn) {
  QpAttr a;
  a.qp_state = QpState::kRtr;
  a.av.dlid = dlid;
  a.path_mtu = mtu_param();
  a.dest_qpn = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  Errc rc = qp.modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                             kQpMaxDestRdAtomic | kQpMinRnrTimer);
  if (rc != Errc::kOk) return rc;
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  a.timeout = static_cast<std::uint8_t>(g_params.ack_timeout);  // FI_WEFT_ACK_TIMEOUT
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // forever: a receiver out of bounce buffers only slows the sender
  a.max_rd_atomic = 16;
  return qp.modify(a,
                   kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic);
}

Result<QueuePair*, Errc> create_qp(Ep* ep) {
  QpInitAttr ia;
  ia.type = QpType::kRc;
  ia.pd = ep->dom->pd;
  ia.send_cq = ep->dom->dcq;
  ia.recv_cq = ep->dom->dcq;
  ia.srq = ep->srq;
  ia.caps.max_send_wr =
      static_cast<std::uint32_t>(std::min<std::size_t>(kWrMax, 2 * g_params.tx_depth + 64));
  ia.caps.max_send_sge = kIovMax;
  ia.caps.max_recv_sge = 1;
  ia.caps.max_inline_data = 0;
  auto r = ep->dom->dev->create_qp(ia);
  if (!r) return r.error();
  const Errc rc = qp_to_init(*r.value());
  if (rc != Errc::kOk) {
    ep->dom->dev->destroy_qp(r.value());
    return rc;
  }
  return r.value();
}

std::uint32_t random_psn(Domain* d) {
  return static_cast<std::uint32_t>(d->rng.next_u64()) & kPsnMask;
}

bool send_ctrl(Domain* d, const NodeAddr& dst, const CtrlMsg& m) {
  // FI_WEFT_CTRL_DROP_FIRST: the first requests and answers are lost on the way (a test fault).
  if (m.type == CtrlType::kConnReq || m.type == CtrlType::kConnRep) {
    std::uint64_t& sent = m.type == CtrlType::kConnReq ? d->ctrl_req_sent : d->ctrl_rep_sent;
    if (sent++ < g_params.ctrl_drop_first) {
      ++d->conn_stats.ctrl_dropped;
      return true;
    }
  }
  if (d->port->ctrl_send(dst, {reinterpret_cast<const std::uint8_t*>(&m), sizeof m})) return true;
  WEFT_WARN(FI_LOG_EP_CTRL, "control datagram to lid %u lost: no such node", dst.lid);
  return false;
}
bool send_ctrl(Ep* ep, const NodeAddr& dst, const CtrlMsg& m) {
  return send_ctrl(ep->dom, dst, m);
}

// ---- ops bookkeeping --------------------------------------------------------------------------
// Ops and receive requests come from per-endpoint free lists (no allocation per message once
// warm); the live Ops form an intrusive list so that close frees what is still in flight.
Op* new_op(Ep* ep, OpKind kind) {
  Op* op = ep->free_ops;
  if (op) {
    ep->free_ops = op->live_next;
    *op = Op{};
  } else {
    op = new Op;
  }
  op->ep = ep;
  op->kind = kind;
  op->live_next = ep->live_ops;
  if (ep->live_ops) ep->live_ops->live_prev = op;
  ep->live_ops = op;
  ++ep->ops_in_flight;
  return op;
}

void free_stage(Ep* ep, Op* op) {
  if (op->stage) ep->stage_free.push_back(op->stage);
  op->stage = nullptr;
}

void delete_op(Ep* ep, Op* op) {
  free_stage(ep, op);
  if (op->tmp_mr) ep->dom->dev->dereg_mr(op->tmp_mr);
  op->tmp_mr = nullptr;
  if (op->live_prev)
    op->live_prev->live_next = op->live_next;
  else
    ep->live_ops = op->live_next;
  if (op->live_next) op->live_next->live_prev = op->live_prev;
  --ep->ops_in_flight;
  if (op->linear.capacity()) std::vector<std::uint8_t>().swap(op->linear);
  op->live_prev = nullptr;
  op->live_next = ep->free_ops;
  ep->free_ops = op;
}

RecvReq* alloc_recv(Ep* ep) {
  RecvReq* r = ep->free_recvs;
  if (!r) return new RecvReq;
  ep->free_recvs = r->next_free;
  *r = RecvReq{};
  return r;
}

void free_recv(Ep* ep, RecvReq* r) {
  r->next_free = ep->free_recvs;
  ep->free_recvs = r;
}

std::uint8_t* alloc_stage(Ep* ep) {
  if (ep->stage_free.empty()) {
    ep->dom->progress();
    if (ep->stage_free.empty()) return nullptr;
  }
  std::uint8_t* s = ep->stage_free.back();
  ep->stage_free.pop_back();
  return s;
}

void post_now_or_backlog(Conn* c, Op* op) {
  if (c->ready && c->backlog.empty()) {
    const Errc rc = c->qp->post_send(op->wr);
    if (rc == Errc::kOk) {
      ++c->posted_wrs;
      return;
    }
    if (rc != Errc::kQueueFull)
      WEFT_WARN(FI_LOG_EP_DATA, "post_send: %.*s", static_cast<int>(to_string(rc).size()),
                to_string(rc).data());
  }
  c->backlog.push_back(op);
}

void drain_backlog(Conn* c) {
  while (c && c->ready && !c->backlog.empty()) {
    Op* op = c->backlog.front();
    if (c->qp->post_send(op->wr) != Errc::kOk) return;
    ++c->posted_wrs;
    c->backlog.pop_front();
  }
}

void tx_error(Ep* ep, Op* op, int err, WcStatus st);
void tx_error(Ep* ep, Op* op, int err, int prov_errno);
void fail_split(Ep* ep, const Ep::SplitRecv& s);

// The domain polls control datagrams tightly while any of its connection requests is unanswered.
void conn_answered(Ep* ep, Conn* c) {
  if (!c->awaiting) return;
  c->awaiting = false;
  --ep->dom->connecting;
}

// The connection cannot be made: the peer endpoint does not exist (rejected, or its node is
// gone: FI_EHOSTUNREACH) or never answered (FI_ETIMEDOUT, kProvErrConnTimeout). Every queued
// operation completes with that error and the connection is dropped; a later send tries again.
void fail_conn(Ep* ep, Conn* c, int err, int prov_errno) {
  conn_answered(ep, c);
  WEFT_WARN(FI_LOG_EP_CTRL, "%s endpoint %u at lid %u: %zu queued operations fail",
            err == FI_ETIMEDOUT ? "no answer from" : "no", c->peer.ep_id, c->peer.lid,
            c->backlog.size());
  for (Op* op : c->backlog) {
    if (op->kind == OpKind::kRts) ep->rndv_sends.erase(op->rndv_id);
    if (op->kind != OpKind::kFin) tx_error(ep, op, err, prov_errno);
    delete_op(ep, op);
  }
  c->backlog.clear();
  for (auto it = ep->split_recvs.begin(); it != ep->split_recvs.end();) {
    if (it->first.first != c) {
      ++it;
      continue;
    }
    const Ep::SplitRecv s = it->second;
    it = ep->split_recvs.erase(it);
    --ep->dom->split_pending;
    fail_split(ep, s);
  }
  ep->by_qpn.erase(c->qp->qp_num());
  ep->dom->dev->destroy_qp(c->qp);
  ep->out_conns.erase(c->peer);
}

// When a request sent at `now` is given up (FI_WEFT_CONN_TIMEOUT_MS; 0: never).
TimeNs conn_deadline(TimeNs now) {
  return g_params.conn_timeout_ms ? now + g_params.conn_timeout_ms * 1'000'000 : kNoDeadline;
}

// One more request awaits its answer (Domain::connecting), with a timer at `at` at the latest.
void await_answer(Domain* d, TimeNs at) {
  if (d->connecting++ == 0) d->conn_timer = kNoDeadline;
  d->conn_timer = std::min(d->conn_timer, at);
}

// The connection request of c (the first or a resend: always the same QP and PSN, so that the
// peer can tell a resend from a new connection).
bool send_conn_req(Ep* ep, Conn* c) {
  ++ep->dom->conn_stats.req_sent;
  return send_ctrl(ep, c->peer.node(),
                   CtrlMsg{CtrlType::kConnReq, c->peer.ep_id, ep->id, c->qp->qp_num(), c->sq_psn});
}

Conn* out_conn(Ep* ep, fi_addr_t dest) {
  const EpAddr* peer;
  if (ep->msg) {
    if (!ep->connected) return nullptr;
    peer = &ep->msg_peer;  // a MSG endpoint ignores dest_addr
  } else {
    if (!ep->av) return nullptr;
    peer = ep->av->get(dest);
  }
  if (!peer) return nullptr;
  auto it = ep->out_conns.find(*peer);
  if (it != ep->out_conns.end()) return it->second.get();
  auto qp = create_qp(ep);
  if (!qp) return nullptr;
  auto c = std::make_unique<Conn>();
  c->peer = *peer;
  c->qp = qp.value();
  c->outgoing = true;
  Conn* raw = c.get();
  ep->by_qpn[raw->qp->qp_num()] = raw;
  ep->out_conns.emplace(*peer, std::move(c));
  // Our requester starts at sq_psn; the peer's responder takes it as its rq_psn.
  raw->sq_psn = random_psn(ep->dom);
  if (!send_conn_req(ep, raw)) {
    fail_conn(ep, raw, FI_EHOSTUNREACH, static_cast<int>(WcStatus::kGeneralErr) + 1);
    return nullptr;
  }
  const TimeNs now = mono_ns();
  raw->awaiting = true;
  raw->tries = 1;
  raw->resend_at = now + kConnResendFirstNs;
  raw->deadline = conn_deadline(now);
  await_answer(ep->dom, std::min(raw->resend_at, raw->deadline));
  return raw;
}

// ---- completions to the application ------------------------------------------------------------
void tx_complete(Ep* ep, Op* op, std::uint64_t len) {
  if (op->completion && ep->tx_cq) {
    fi_cq_tagged_entry e{};
    e.op_context = op->context;
    e.flags = op->flags;
    e.len = 0;
    (void)len;
    ep->tx_cq->push(e, FI_ADDR_NOTAVAIL);
  }
  if (op->kind == OpKind::kRead)
    cntr_inc(ep->cntr_read);
  else if (op->kind == OpKind::kWrite)
    cntr_inc(ep->cntr_write);
  else
    cntr_inc(ep->cntr_send);
}

void tx_error(Ep* ep, Op* op, int err, WcStatus st) {
  tx_error(ep, op, err, static_cast<int>(st) + 1);
}

void tx_error(Ep* ep, Op* op, int err, int prov_errno) {
  if (ep->tx_cq) {
    fi_cq_err_entry e{};
    e.op_context = op->context;
    e.flags = op->flags;
    e.err = err;
    e.prov_errno = prov_errno;
    ep->tx_cq->push_error(e);
  }
  Cntr* c = op->kind == OpKind::kRead     ? ep->cntr_read
            : op->kind == OpKind::kWrite  ? ep->cntr_write
            : op->kind == OpKind::kAtomic ? ((op->flags & FI_READ) ? ep->cntr_read : ep->cntr_write)
                                          : ep->cntr_send;
  cntr_err(c);
}

std::size_t iov_bytes(const iovec* iov, std::size_t n) {
  std::size_t s = 0;
  for (std::size_t i = 0; i < n; ++i) s += iov[i].iov_len;
  return s;
}

std::size_t scatter(const RecvReq& r, const std::uint8_t* src, std::size_t n) {
  std::size_t done = 0;
  for (std::size_t i = 0; i < r.iov_count && done < n; ++i) {
    const std::size_t k = std::min(n - done, r.iov[i].iov_len);
    std::memcpy(r.iov[i].iov_base, src + done, k);
    done += k;
  }
  return done;
}

void rx_complete(Ep* ep, RecvReq* r, const MsgHdr& h, std::uint64_t total, fi_addr_t src) {
  const std::size_t cap = iov_bytes(r->iov, r->iov_count);
  std::uint64_t flags = FI_RECV | (r->tagged ? FI_TAGGED : FI_MSG);
  if (h.flags & kHdrData) flags |= FI_REMOTE_CQ_DATA;
  RecvReq* parent = r->parent;  // a piece of a multi-receive buffer
  if (parent && --parent->outstanding == 0 && parent->released) flags |= FI_MULTI_RECV;
  void* buf = r->iov_count ? r->iov[0].iov_base : nullptr;
  if (total > cap) {
    if (ep->rx_cq) {
      fi_cq_err_entry e{};
      e.op_context = r->context;
      e.flags = flags;
      e.len = cap;
      e.buf = buf;
      e.data = h.data;
      e.tag = h.tag;
      e.olen = total - cap;
      e.err = FI_ETRUNC;
      ep->rx_cq->push_error(e);
    }
    cntr_err(ep->cntr_recv);
  } else {
    if (r->completion && ep->rx_cq) {
      fi_cq_tagged_entry e{};
      e.op_context = r->context;
      e.flags = flags;
      e.len = total;
      e.buf = buf;
      e.data = (h.flags & kHdrData) ? h.data : 0;
      e.tag = r->tagged ? h.tag : 0;
      ep->rx_cq->push(e, src);
    }
    cntr_inc(ep->cntr_recv);
  }
  free_recv(ep, r);
  if (flags & FI_MULTI_RECV) free_recv(ep, parent);
}

// The next piece of a multi-receive buffer for a message of `len` bytes (truncated to what
// remains); releases the buffer from `posted` when less than min_multi_recv is left after it.
RecvReq* take_piece(Ep* ep, RecvList& posted, RecvList::iterator it, std::uint64_t len) {
  RecvReq* m = *it;
  RecvReq* r = alloc_recv(ep);
  r->context = m->context;
  r->completion = m->completion;
  r->parent = m;
  const std::size_t left = m->iov[0].iov_len - m->offset;
  const std::size_t n = std::min<std::uint64_t>(len, left);
  r->iov[0] = {static_cast<std::uint8_t*>(m->iov[0].iov_base) + m->offset, n};
  r->iov_count = 1;
  m->offset += n;
  ++m->outstanding;
  if (m->iov[0].iov_len - m->offset < ep->min_multi_recv) {
    m->released = true;
    posted.erase(it);
  }
  return r;
}

// One message (header h, n payload bytes) on connection c as a direct message (README, "Direct
// messages"), if the medium offers them and c has nothing in flight in the engine
// (Conn::posted_wrs), so that it cannot overtake an earlier message of c. False: use the engine.
bool try_direct(Ep* ep, Conn* c, const MsgHdr& h, const std::uint8_t* payload, std::size_t n) {
  if (!g_params.direct || !c->ready || c->posted_wrs || !c->backlog.empty() || !c->remote_qpn ||
      n > g_params.direct_bytes)
    return false;
  struct {
    DirectHdr d;
    MsgHdr h;
  } head{{c->peer.ep_id, c->remote_qpn}, h};
  static_assert(sizeof head == sizeof(DirectHdr) + sizeof(MsgHdr));
  return ep->dom->port->tx_direct(
      c->peer.node(), {reinterpret_cast<const std::uint8_t*>(&head), sizeof head}, {payload, n});
}

// A provider-internal message (FIN, atomic response) on connection c: no completion.
void send_internal(Ep* ep, Conn* c, const MsgHdr& h, const void* payload, std::size_t n) {
  if (try_direct(ep, c, h, static_cast<const std::uint8_t*>(payload), n)) return;
  Op* op = new_op(ep, OpKind::kFin);
  op->conn = c;
  op->completion = false;
  const std::size_t bytes = sizeof h + n;
  op->stage =
      (bytes <= ep->stage_bytes && !ep->stage_free.empty()) ? ep->stage_free.back() : nullptr;
  if (!op->stage) {
    // The staging pool is sized for tx_depth plus internal messages; this is the rare overflow.
    op->linear.resize(bytes);
  } else {
    ep->stage_free.pop_back();
  }
  std::uint8_t* buf = op->stage ? op->stage : op->linear.data();
  std::memcpy(buf, &h, sizeof h);
  if (n) std::memcpy(buf + sizeof h, payload, n);
  if (!op->stage) {
    op->tmp_mr = ep->dom->dev->reg_mr(ep->dom->pd, buf, bytes, kAccessLocalWrite).value();
  }
  op->sge = {reinterpret_cast<std::uintptr_t>(buf), static_cast<std::uint32_t>(bytes),
             op->stage ? ep->stage_mr->lkey() : op->tmp_mr->lkey()};
  op->wr = SendWr{};
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = WrOpcode::kSend;
  op->wr.send_flags = kSignaled;
  op->wr.sg_list = {&op->sge, 1};
  post_now_or_backlog(c, op);
}

void send_fin(Ep* ep, Conn* c, std::uint64_t msg_id) {
  MsgHdr h{};
  h.op = MsgOp::kFin;
  h.msg_id = msg_id;
  send_internal(ep, c, h, nullptr, 0);
}

// Rendezvous on a medium that lets this process read the sender's (shm with cross-memory
// attach): one process_vm_readv from the sender's buffer into the receive's iovs, no READ
// through the engine (RTS and FIN are the only hops). False: no such path, or it failed (the
// READ path then runs, so a refused read costs nothing but the attempt).
bool read_directly(Ep* ep, Conn* c, RecvReq* r, std::uint64_t addr, std::size_t n) {
  const int pid = ep->dom->port->direct_read_pid(c->peer.node());
  if (pid <= 0) return false;
  iovec local[kIovMax];
  std::size_t cnt = 0, left = n;
  for (std::size_t i = 0; i < r->iov_count && left; ++i) {
    const std::size_t k = std::min(left, r->iov[i].iov_len);
    local[cnt++] = {r->iov[i].iov_base, k};
    left -= k;
  }
  std::size_t done = 0;
  while (done < n) {
    // Skip what the previous call moved (a short read stops at a page it could not fault in).
    iovec l[kIovMax];
    std::size_t lc = 0, skip = done;
    for (std::size_t i = 0; i < cnt; ++i) {
      if (skip >= local[i].iov_len) {
        skip -= local[i].iov_len;
        continue;
      }
      l[lc++] = {static_cast<std::uint8_t*>(local[i].iov_base) + skip, local[i].iov_len - skip};
      skip = 0;
    }
    iovec remote{reinterpret_cast<void*>(addr + done), n - done};
    const ssize_t got = process_vm_readv(pid, l, lc, &remote, 1, 0);
    if (got <= 0) {
      if (done == 0) {
        WEFT_INFO(FI_LOG_EP_DATA, "rendezvous: direct read from pid %d failed (%s): READ instead",
                  pid, std::strerror(errno));
        return false;
      }
      break;
    }
    done += static_cast<std::size_t>(got);
  }
  if (done == n) return true;
  // Partly copied: the READ path rewrites all of it.
  return false;
}

// [off, off + n) of a one-buffer receive, read straight from the sender's addr (read_directly).
bool read_part(Ep* ep, Conn* c, const RecvReq* r, std::size_t off, std::uint64_t addr,
               std::size_t n) {
  RecvReq part{};
  part.iov[0] = {static_cast<std::uint8_t*>(r->iov[0].iov_base) + off, n};
  part.iov_count = 1;
  return read_directly(ep, c, &part, addr, n);
}

// The split rendezvous (README, "Split rendezvous"): the sender writes the second half of the
// message into the receive buffer (asked by kCts) while we read the first; the receive
// completes on its kDone. False: not possible here (the whole message is read as before).
bool split_rendezvous(Ep* ep, Conn* c, RecvReq* r, const MsgHdr& h, fi_addr_t src, std::size_t n) {
  if (!g_params.split_bytes_min || n < g_params.split_bytes_min || r->iov_count != 1 ||
      ep->dom->port->direct_read_pid(c->peer.node()) <= 0)
    return false;
  const std::size_t split = (n / 2) & ~std::size_t{4095};  // ours: [0, split), page aligned
  if (split == 0) return false;
  MsgHdr cts{};
  cts.op = MsgOp::kCts;
  cts.msg_id = h.msg_id;
  cts.addr = reinterpret_cast<std::uintptr_t>(r->iov[0].iov_base) + split;
  cts.len = n - split;
  cts.data = split;
  // Only as a direct message: the sender must see it now, not after an engine round trip.
  if (!try_direct(ep, c, cts, nullptr, 0)) return false;
  const bool ok = read_part(ep, c, r, 0, h.addr, split);
  ep->split_recvs[{c, h.msg_id}] = Ep::SplitRecv{r, h, src, n, split, ok};
  ++ep->dom->split_pending;
  return true;
}

// A split receive that will not complete: its error completion (FI_EIO) and the request back.
void fail_split(Ep* ep, const Ep::SplitRecv& s) {
  if (ep->rx_cq) {
    fi_cq_err_entry e{};
    e.op_context = s.r->context;
    e.flags = FI_RECV | (s.r->tagged ? FI_TAGGED : FI_MSG);
    e.tag = s.h.tag;
    e.err = FI_EIO;
    ep->rx_cq->push_error(e);
  }
  cntr_err(ep->cntr_recv);
  free_recv(ep, s.r);
}

// The sender's side of a split rendezvous: write what kCts asks, answer kDone.
void on_cts(Ep* ep, Conn* c, const MsgHdr& h) {
  bool ok = false;
  auto it = ep->rndv_sends.find(h.msg_id);
  const int pid = ep->dom->port->direct_read_pid(c->peer.node());
  if (it != ep->rndv_sends.end() && pid > 0 && it->second->rndv_src &&
      h.data + h.len <= it->second->len) {
    const std::uint8_t* from = it->second->rndv_src + h.data;
    std::size_t done = 0;
    while (done < h.len) {
      iovec l{const_cast<std::uint8_t*>(from + done), h.len - done};
      iovec r{reinterpret_cast<void*>(h.addr + done), h.len - done};
      const ssize_t put = process_vm_writev(pid, &l, 1, &r, 1, 0);
      if (put <= 0) break;
      done += static_cast<std::size_t>(put);
    }
    ok = done == h.len;
    if (!ok)
      WEFT_INFO(FI_LOG_EP_DATA, "split rendezvous: write to pid %d failed (%s): the receiver reads",
                pid, std::strerror(errno));
  }
  MsgHdr d{};
  d.op = MsgOp::kDone;
  d.msg_id = h.msg_id;
  d.data = ok ? 0 : 1;
  send_internal(ep, c, d, nullptr, 0);
}

// The receiver's side: the sender's half is in place (or we read it now); complete and FIN.
void on_done(Ep* ep, Conn* c, const MsgHdr& h) {
  auto it = ep->split_recvs.find({c, h.msg_id});
  if (it == ep->split_recvs.end()) return;
  const Ep::SplitRecv s = it->second;
  ep->split_recvs.erase(it);
  --ep->dom->split_pending;
  bool ok = s.read_ok;
  if (ok && h.data != 0) ok = read_part(ep, c, s.r, s.split, s.h.addr + s.split, s.n - s.split);
  send_fin(ep, c, h.msg_id);
  if (ok) {
    rx_complete(ep, s.r, s.h, s.h.len, s.src);
    return;
  }
  fail_split(ep, s);
}

// Delivers a matched message (eager payload or RTS) into a posted receive.
void deliver(Ep* ep, RecvReq* r, Conn* c, const MsgHdr& h, const std::uint8_t* payload) {
  const fi_addr_t src = ep->resolve(c->peer);
  const std::size_t cap = iov_bytes(r->iov, r->iov_count);
  if (h.op == MsgOp::kEager) {
    scatter(*r, payload, std::min<std::size_t>(cap, h.len));
    rx_complete(ep, r, h, h.len, src);
    return;
  }
  // Rendezvous: READ min(len, cap) bytes from the sender's buffer, then FIN.
  const std::size_t n = std::min<std::size_t>(cap, h.len);
  if (split_rendezvous(ep, c, r, h, src, n)) return;
  if (n == 0 || read_directly(ep, c, r, h.addr, n)) {
    send_fin(ep, c, h.msg_id);
    rx_complete(ep, r, h, h.len, src);
    return;
  }
  Op* op = new_op(ep, OpKind::kRndvRead);
  op->conn = c;
  op->recv = r;
  op->rndv_id = h.msg_id;
  op->rndv_len = h.len;
  op->src = src;
  op->tag = h.tag;
  op->data = h.data;
  op->flags = h.flags;  // header flags, for rx_complete
  std::uint8_t* dst;
  if (r->iov_count == 1) {
    dst = static_cast<std::uint8_t*>(r->iov[0].iov_base);
  } else {
    op->linear.resize(n);
    dst = op->linear.data();
  }
  auto mr = ep->dom->dev->reg_mr(ep->dom->pd, dst, n, kAccessLocalWrite);
  if (!mr) {
    WEFT_WARN(FI_LOG_EP_DATA, "rendezvous: cannot register the receive buffer");
    delete_op(ep, op);
    send_fin(ep, c, h.msg_id);
    rx_complete(ep, r, h, h.len, src);
    return;
  }
  op->tmp_mr = mr.value();
  op->sge = {reinterpret_cast<std::uintptr_t>(dst), static_cast<std::uint32_t>(n),
             op->tmp_mr->lkey()};
  op->wr = SendWr{};
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = WrOpcode::kRdmaRead;
  op->wr.send_flags = kSignaled;
  op->wr.sg_list = {&op->sge, 1};
  op->wr.remote_addr = h.addr;
  op->wr.rkey = h.rkey;
  post_now_or_backlog(c, op);
}

bool tag_match(const RecvReq& r, const MsgHdr& h) {
  return ((r.tag ^ h.tag) & ~r.ignore) == 0;
}

bool src_match(Ep* ep, fi_addr_t want, const EpAddr& from) {
  return want == FI_ADDR_UNSPEC || ep->resolve(from) == want;
}

// The FIN of a rendezvous send we made: the receiver has read the data (or dropped it).
void on_fin(Ep* ep, const MsgHdr& h) {
  auto it = ep->rndv_sends.find(h.msg_id);
  if (it == ep->rndv_sends.end()) return;
  Op* op = it->second;
  ep->rndv_sends.erase(it);
  tx_complete(ep, op, op->len);
  // The READ is done: the source buffer is the application's again.
  if (op->tmp_mr) ep->dom->dev->dereg_mr(op->tmp_mr);
  op->tmp_mr = nullptr;
  if (--op->pending == 0) delete_op(ep, op);  // else: its SEND completes later (lost ACK)
}

// ---- FI_ATOMIC on the wire ----
// The target executes the request on its own memory (ofi_atomic.cpp) and answers with the old
// values; the initiator completes the operation on that answer (delivery complete).
void on_atomic_req(Ep* ep, Conn* c, const MsgHdr& h, const std::uint8_t* payload, std::size_t n) {
  const auto op = static_cast<fi_op>(h.reserved & 0xFF);
  const auto dt = static_cast<fi_datatype>(h.reserved >> 8);
  const bool fetch = (h.flags & (kHdrFetch | kHdrCompare)) != 0;
  const bool cmp = (h.flags & kHdrCompare) != 0;
  const std::size_t sz = atomic_type_size(dt);
  const std::size_t bytes = sz * h.len;
  MsgHdr r{};
  r.op = MsgOp::kAtomicResp;
  r.msg_id = h.msg_id;
  std::vector<std::uint8_t> old;
  const AtomicKind kind = cmp     ? AtomicKind::kCompare
                          : fetch ? AtomicKind::kFetch
                                  : AtomicKind::kWrite;
  if (!sz || !atomic_valid(kind, op, dt) || n < bytes * (cmp ? 2 : 1)) {
    r.data = FI_EINVAL;
  } else {
    auto it = ep->dom->mr_by_key.find(h.rkey);
    const Mr* m = it == ep->dom->mr_by_key.end() ? nullptr : it->second;
    const std::uint64_t need =
        (op == FI_ATOMIC_READ ? 0 : FI_REMOTE_WRITE) | (fetch ? FI_REMOTE_READ : 0);
    if (!m || h.addr < m->base || h.addr + bytes > m->base + m->len || h.addr + bytes < h.addr ||
        (m->access & need) != need) {
      r.data = FI_EACCES;
    } else {
      if (fetch) old.resize(bytes);
      atomic_execute(op, dt, reinterpret_cast<void*>(h.addr), payload,
                     cmp ? payload + bytes : nullptr, fetch ? old.data() : nullptr, h.len);
      if (op != FI_ATOMIC_READ) cntr_inc(ep->cntr_rem_write);
      if (++ep->atomics_served == 1)
        WEFT_INFO(FI_LOG_EP_DATA, "endpoint %u: first atomic executed as target", ep->id);
    }
  }
  send_internal(ep, c, r, old.data(), old.size());
}

void on_atomic_resp(Ep* ep, const MsgHdr& h, const std::uint8_t* payload, std::size_t n) {
  auto it = ep->rndv_sends.find(h.msg_id);
  if (it == ep->rndv_sends.end() || it->second->kind != OpKind::kAtomic) return;
  Op* op = it->second;
  ep->rndv_sends.erase(it);
  Cntr* cntr = (op->flags & FI_READ) ? ep->cntr_read : ep->cntr_write;
  if (h.data != 0) {
    if (ep->tx_cq) {
      fi_cq_err_entry e{};
      e.op_context = op->context;
      e.flags = op->flags;
      e.err = static_cast<int>(h.data);
      ep->tx_cq->push_error(e);
    }
    cntr_err(cntr);
  } else {
    if (op->result) std::memcpy(op->result, payload, std::min<std::size_t>(n, op->len));
    if (op->completion && ep->tx_cq) {
      fi_cq_tagged_entry e{};
      e.op_context = op->context;
      e.flags = op->flags;
      ep->tx_cq->push(e, FI_ADDR_NOTAVAIL);
    }
    cntr_inc(cntr);
  }
  if (--op->pending == 0) delete_op(ep, op);
}

void on_message(Ep* ep, Conn* c, const std::uint8_t* bytes, std::size_t n) {
  if (n < sizeof(MsgHdr)) {
    WEFT_WARN(FI_LOG_EP_DATA, "short message (%zu bytes) dropped", n);
    return;
  }
  MsgHdr h;
  std::memcpy(&h, bytes, sizeof h);
  if (h.op == MsgOp::kFin) {
    on_fin(ep, h);
    return;
  }
  if (h.op == MsgOp::kCts) {
    on_cts(ep, c, h);
    return;
  }
  if (h.op == MsgOp::kDone) {
    on_done(ep, c, h);
    return;
  }
  if (h.op == MsgOp::kAtomicReq) {
    on_atomic_req(ep, c, h, bytes + sizeof h, n - sizeof h);
    return;
  }
  if (h.op == MsgOp::kAtomicResp) {
    on_atomic_resp(ep, h, bytes + sizeof h, n - sizeof h);
    return;
  }
  const bool tagged = (h.flags & kHdrTagged) != 0;
  auto& posted = tagged ? ep->posted_tag : ep->posted_msg;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    RecvReq* r = *it;
    if ((!tagged || tag_match(*r, h)) && src_match(ep, r->src, c->peer)) {
      if (r->multi) {
        deliver(ep, take_piece(ep, posted, it, h.len), c, h, bytes + sizeof h);
        return;
      }
      posted.erase(it);
      deliver(ep, r, c, h, bytes + sizeof h);
      return;
    }
  }
  auto* u = new Unexp;
  u->from = c->peer;
  u->conn = c;
  u->hdr = h;
  if (h.op == MsgOp::kEager)
    u->payload.assign(bytes + sizeof h,
                      bytes + sizeof h + std::min<std::size_t>(h.len, n - sizeof h));
  (tagged ? ep->unexp_tag : ep->unexp_msg).push_back(u);
}

void repost_bounce(Ep* ep, Op* b) {
  RecvWr wr;
  wr.wr_id = reinterpret_cast<std::uintptr_t>(b);
  wr.sg_list = {&b->sge, 1};
  const Errc rc = ep->dgram ? ep->ud_qp->post_recv(wr) : ep->srq->post_recv(wr);
  if (rc != Errc::kOk)
    WEFT_WARN(FI_LOG_EP_DATA, "bounce repost failed: %.*s", static_cast<int>(to_string(rc).size()),
              to_string(rc).data());
}

// FI_EP_DGRAM: a datagram landed in a bounce buffer (payload after the 40-byte GRH space).
void on_datagram(Ep* ep, Op* b, const WorkCompletion& wc) {
  if (ep->posted_msg.empty()) {
    ++ep->dgram_drops;  // unreliable service: no receive posted, the datagram is lost
    return;
  }
  RecvReq* r = ep->posted_msg.front();
  ep->posted_msg.pop_front();
  const std::size_t n = wc.byte_len - kUdGrhBytes;
  const std::size_t cap = iov_bytes(r->iov, r->iov_count);
  scatter(*r, b->stage + kUdGrhBytes, std::min(n, cap));
  MsgHdr h{};
  if (wc.wc_flags & kWcWithImm) {
    h.flags = kHdrData;
    h.data = wc.imm_data;
  }
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  if (ep->av) {
    auto it = ep->av->by_lid_qpn.find(Av::lid_qpn(wc.slid, wc.src_qp));
    if (it != ep->av->by_lid_qpn.end()) src = it->second;
  }
  rx_complete(ep, r, h, n, src);
}

}  // namespace

// A split receive waits for the sender's kDone, which no engine timer guards: when the sender's
// process is gone (the medium no longer names a pid to read), fail it instead of waiting forever.
void ep_reap_dead_splits(Ep* ep) {
  for (auto it = ep->split_recvs.begin(); it != ep->split_recvs.end();) {
    if (ep->dom->port->direct_read_pid(it->first.first->peer.node()) > 0) {
      ++it;
      continue;
    }
    const Ep::SplitRecv s = it->second;
    it = ep->split_recvs.erase(it);
    --ep->dom->split_pending;
    WEFT_WARN(FI_LOG_EP_DATA, "split rendezvous: the sender is gone; the receive fails (FI_EIO)");
    fail_split(ep, s);
  }
}

// ---- device completions ---------------------------------------------------------------------
void ep_on_completion(Ep* ep, Op* op, const WorkCompletion& wc) {
  const bool ok = wc.status == WcStatus::kSuccess;
  // Every op but a bounce buffer is one signalled WR on its connection's QP.
  if (op->kind != OpKind::kBounce && op->conn && op->conn->posted_wrs) --op->conn->posted_wrs;
  switch (op->kind) {
    case OpKind::kBounce: {
      if (!ok) {
        if (wc.status != WcStatus::kWrFlushErr)
          WEFT_WARN(FI_LOG_EP_DATA, "receive failed: %.*s",
                    static_cast<int>(to_string(wc.status).size()), to_string(wc.status).data());
        repost_bounce(ep, op);
        return;
      }
      if (ep->dgram) {
        on_datagram(ep, op, wc);
        repost_bounce(ep, op);
        return;
      }
      auto it = ep->by_qpn.find(wc.qp_num);
      if (it == ep->by_qpn.end()) {
        repost_bounce(ep, op);
        return;
      }
      Conn* c = it->second;
      if (wc.opcode == WcOpcode::kRecvRdmaWithImm) {
        if (ep->rx_cq) {
          fi_cq_tagged_entry e{};
          e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
          e.len = wc.byte_len;
          e.data = wc.imm_data;
          ep->rx_cq->push(e, ep->resolve(c->peer));
        }
        cntr_inc(ep->cntr_rem_write);
      } else {
        on_message(ep, c, op->stage, wc.byte_len);
      }
      repost_bounce(ep, op);
      return;
    }
    case OpKind::kSend:
      if (ok)
        tx_complete(ep, op, op->len);
      else
        tx_error(ep, op, FI_EIO, wc.status);
      {
        Conn* c = op->conn;
        delete_op(ep, op);
        drain_backlog(c);
      }
      return;
    case OpKind::kRts:
      // The RTS's own SEND and the receiver's FIN (on the other direction's QP) may come in
      // either order: a lost ACK makes the SEND complete after the FIN. The op lives until both.
      free_stage(ep, op);
      if (!ok) {
        if (ep->rndv_sends.erase(op->rndv_id)) tx_error(ep, op, FI_EIO, wc.status);
        delete_op(ep, op);
        return;
      }
      if (--op->pending == 0) delete_op(ep, op);  // else: the FIN completes it
      return;
    case OpKind::kFin:
      delete_op(ep, op);
      return;
    case OpKind::kAtomic:
      free_stage(ep, op);
      if (!ok && ep->rndv_sends.erase(op->rndv_id)) {
        tx_error(ep, op, wc.status == WcStatus::kRemAccessErr ? FI_EACCES : FI_EIO, wc.status);
        delete_op(ep, op);
        return;
      }
      if (--op->pending == 0) delete_op(ep, op);
      return;
    case OpKind::kWrite:
    case OpKind::kRead:
      if (ok)
        tx_complete(ep, op, op->len);
      else
        tx_error(ep, op, wc.status == WcStatus::kRemAccessErr ? FI_EACCES : FI_EIO, wc.status);
      delete_op(ep, op);
      return;
    case OpKind::kRndvRead: {
      RecvReq* r = op->recv;
      Conn* c = op->conn;
      MsgHdr h{};
      h.flags = static_cast<std::uint8_t>(op->flags);
      h.tag = op->tag;
      h.data = op->data;
      if (!op->linear.empty()) scatter(*r, op->linear.data(), op->linear.size());
      const std::uint64_t id = op->rndv_id, len = op->rndv_len;
      const fi_addr_t src = op->src;
      delete_op(ep, op);
      if (!ok) {
        if (ep->rx_cq) {
          fi_cq_err_entry e{};
          e.op_context = r->context;
          e.flags = FI_RECV | (r->tagged ? FI_TAGGED : FI_MSG);
          e.tag = h.tag;
          e.err = FI_EIO;
          e.prov_errno = static_cast<int>(wc.status) + 1;
          ep->rx_cq->push_error(e);
        }
        cntr_err(ep->cntr_recv);
        free_recv(ep, r);
      } else {
        rx_complete(ep, r, h, len, src);
      }
      send_fin(ep, c, id);
      return;
    }
  }
}

// A direct message (README, "Direct messages"): the same MsgHdr and payload an eager SEND
// carries, for the connection whose QP at this end is `qpn`.
void ep_on_direct(Ep* ep, std::uint32_t qpn, std::span<const std::uint8_t> msg) {
  if (!ep->enabled || ep->dgram) return;
  auto it = ep->by_qpn.find(qpn);
  if (it == ep->by_qpn.end()) return;
  on_message(ep, it->second, msg.data(), msg.size());
}

bool ep_connect_eagerly(Ep* ep, fi_addr_t peer) {
  if (!ep->enabled || ep->dgram || ep->msg) return false;
  // A peer that is not there yet is tried again by the first send.
  const Conn* c = out_conn(ep, peer);
  return c && c->awaiting;
}

void ctrl_unknown_endpoint(Domain* d, const NodeAddr& src, std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(CtrlMsg)) return;
  CtrlMsg m;
  std::memcpy(&m, bytes.data(), sizeof m);
  if (m.type != CtrlType::kConnReq) return;
  send_ctrl(d, src, CtrlMsg{CtrlType::kConnRej, m.src_ep, m.dst_ep, 0, 0, m.qpn});
}

// fi_connect's request is answered or given up.
void cm_answered(Ep* ep) {
  if (!ep->cm_pending) return;
  ep->cm_pending = false;
  --ep->dom->connecting;
}

// fi_connect failed (rejected, or unanswered until its deadline): an error event.
void push_cm_error(Ep* ep, int err) {
  if (!ep->eq) return;
  fi_eq_err_entry e{};
  e.fid = &ep->ep.fid;
  e.err = err;
  ep->eq->push(FI_CONNREQ, &e, sizeof e, true);
}

void ep_conn_timers(Ep* ep, TimeNs now, TimeNs& next) {
  Domain* d = ep->dom;
  std::vector<Conn*> timed_out, gone;
  for (auto& [addr, cp] : ep->out_conns) {
    Conn* c = cp.get();
    if (!c->awaiting) continue;
    if (now >= c->deadline) {
      timed_out.push_back(c);
      continue;
    }
    if (now >= c->resend_at && c->tries < kConnTriesMax) {
      ++c->tries;
      ++d->conn_stats.req_resent;
      WEFT_INFO(FI_LOG_EP_CTRL, "connection request %u to endpoint %u at lid %u: no answer yet",
                c->tries, c->peer.ep_id, c->peer.lid);
      if (!send_conn_req(ep, c)) {  // the medium says the node is gone
        gone.push_back(c);
        continue;
      }
      c->resend_at = now + std::min(kConnResendMaxNs, kConnResendFirstNs << (c->tries - 1));
    }
    if (c->tries < kConnTriesMax) next = std::min(next, c->resend_at);
    next = std::min(next, c->deadline);
  }
  if (ep->cm_pending) {
    if (now >= ep->cm_deadline) {
      ++d->conn_stats.timed_out;
      WEFT_WARN(FI_LOG_EP_CTRL, "fi_connect of endpoint %u: no answer", ep->id);
      cm_answered(ep);
      push_cm_error(ep, FI_ETIMEDOUT);
    } else {
      next = std::min(next, ep->cm_deadline);
    }
  }
  for (Conn* c : gone)
    fail_conn(ep, c, FI_EHOSTUNREACH, static_cast<int>(WcStatus::kGeneralErr) + 1);
  for (Conn* c : timed_out) {
    ++d->conn_stats.timed_out;
    fail_conn(ep, c, FI_ETIMEDOUT, kProvErrConnTimeout);
  }
}

// ---- FI_EP_MSG connection management ----
void push_cm(Ep* ep, std::uint32_t event) {
  if (!ep->eq) return;
  fi_eq_cm_entry e{};
  e.fid = &ep->ep.fid;
  ep->eq->push(event, &e, sizeof e, false);
}

void on_cm(Ep* ep, CtrlType type, const EpAddr& peer) {
  if (!ep->msg) return;
  if (type == CtrlType::kCmRep) {
    if (ep->connected) return;
    if (!ep->cm_pending) {
      // An accept after we gave up (FI_ETIMEDOUT was reported): the server's endpoint thinks
      // it is connected; tell it we are not.
      send_ctrl(ep, peer.node(), CtrlMsg{CtrlType::kCmShutdown, peer.ep_id, ep->id, 0, 0});
      return;
    }
    cm_answered(ep);
    ep->msg_peer = peer;
    ep->connected = true;
    push_cm(ep, FI_CONNECTED);
  } else if (type == CtrlType::kCmRej) {
    if (!ep->cm_pending) return;
    cm_answered(ep);
    push_cm_error(ep, FI_ECONNREFUSED);
  } else if (ep->connected && peer == ep->msg_peer) {
    ep->connected = false;
    push_cm(ep, FI_SHUTDOWN);
  }
}

void ep_on_ctrl(Ep* ep, const NodeAddr& src, std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(CtrlMsg)) return;
  CtrlMsg m;
  std::memcpy(&m, bytes.data(), sizeof m);
  EpAddr peer;
  peer.ep_id = m.src_ep;
  peer.node_id = src.node_id;
  peer.lid = src.lid;
  if (m.type == CtrlType::kCmRep || m.type == CtrlType::kCmRej || m.type == CtrlType::kCmShutdown) {
    on_cm(ep, m.type, peer);
    return;
  }
  if (m.type == CtrlType::kConnReq) {
    // The peer opened a connection for its sends to us: its QP m.qpn starts at PSN m.psn.
    Domain* d = ep->dom;
    ++d->conn_stats.req_received;
    // A resend of a request we answered (our answer was lost, or is on its way): the same answer
    // again, no second QP (QP numbers are never reused by a Device, and the PSN is random).
    for (const auto& c : ep->in_conns) {
      if (c->peer == peer && c->remote_qpn == m.qpn && c->remote_psn == m.psn) {
        ++d->conn_stats.req_duplicate;
        send_ctrl(ep, src,
                  CtrlMsg{CtrlType::kConnRep, m.src_ep, ep->id, c->qp->qp_num(), c->sq_psn, m.qpn});
        return;
      }
    }
    auto qp = create_qp(ep);
    if (!qp) {
      WEFT_WARN(FI_LOG_EP_CTRL, "no QP for an incoming connection");
      return;
    }
    const std::uint32_t my_psn = random_psn(ep->dom);
    if (qp_to_rts(*qp.value(), src.lid, m.qpn, m.psn, my_psn) != Errc::kOk) {
      ep->dom->dev->destroy_qp(qp.value());
      return;
    }
    auto c = std::make_unique<Conn>();
    c->peer = peer;
    c->qp = qp.value();
    c->ready = true;
    c->remote_qpn = m.qpn;
    c->remote_psn = m.psn;
    c->sq_psn = my_psn;
    ep->by_qpn[c->qp->qp_num()] = c.get();
    CtrlMsg rep{CtrlType::kConnRep, m.src_ep, ep->id, c->qp->qp_num(), my_psn, m.qpn};
    ep->in_conns.push_back(std::move(c));
    ++d->conn_stats.in_established;
    send_ctrl(ep, src, rep);
    return;
  }
  if (m.type == CtrlType::kConnRej || m.type == CtrlType::kConnRep) {
    // Only an answer to the request of the connection we await counts: a second answer to a
    // resent request, or a late one to a request given up (its QP destroyed), is ignored.
    auto it = ep->out_conns.find(peer);
    Conn* c = it == ep->out_conns.end() ? nullptr : it->second.get();
    if (!c || !c->awaiting || c->qp->qp_num() != m.req_qpn) {
      ++ep->dom->conn_stats.stale_answers;
      return;
    }
    if (m.type == CtrlType::kConnRej) {
      ++ep->dom->conn_stats.rejected;
      fail_conn(ep, c, FI_EHOSTUNREACH, static_cast<int>(WcStatus::kGeneralErr) + 1);
      return;
    }
    conn_answered(ep, c);
    if (qp_to_rts(*c->qp, src.lid, m.qpn, m.psn, c->sq_psn) != Errc::kOk) {
      WEFT_WARN(FI_LOG_EP_CTRL, "connection to lid %u failed", src.lid);
      return;
    }
    c->ready = true;
    c->remote_qpn = m.qpn;
    ++ep->dom->conn_stats.out_established;
    drain_backlog(c);
  }
}

// ---- the endpoint object ------------------------------------------------------------------------
namespace {

Ep* as_ep(fid_ep* e) {
  return ofi_container<Ep>(e);
}
Ep* as_ep(fid* f) {
  return ofi_container<Ep>(f);
}

bool want_tx_completion(Ep* ep, std::uint64_t flags) {
  if (flags & FI_INJECT) return false;
  return !ep->tx_selective || (flags & FI_COMPLETION);
}

constexpr std::uint32_t kDgramQkey = 0x57454654;

AddressHandle* dgram_ah(Ep* ep, fi_addr_t dest, const EpAddr** peer) {
  if (!ep->av) return nullptr;
  *peer = ep->av->get(dest);
  if (!*peer || !(*peer)->qpn) return nullptr;
  auto it = ep->ahs.find(dest);
  if (it != ep->ahs.end()) return it->second;
  AddressVector av;
  av.dlid = (*peer)->lid;
  auto ah = ep->dom->dev->create_ah(ep->dom->pd, av);
  if (!ah) return nullptr;
  ep->ahs[dest] = ah.value();
  return ah.value();
}

// FI_EP_DGRAM send: one UD SEND (with immediate for CQ data) from a staging slot.
ssize_t send_dgram(Ep* ep, const iovec* iov, std::size_t count, std::size_t len, fi_addr_t dest,
                   std::uint64_t data, std::uint64_t flags, void* ctx) {
  if (len > g_params.mtu_bytes) return -FI_EMSGSIZE;
  const EpAddr* peer = nullptr;
  AddressHandle* ah = dgram_ah(ep, dest, &peer);
  if (!ah) return -FI_EINVAL;
  std::uint8_t* slot = alloc_stage(ep);
  if (!slot) return -FI_EAGAIN;
  Op* op = new_op(ep, OpKind::kSend);
  op->stage = slot;
  op->context = ctx;
  op->flags = FI_SEND | FI_MSG;
  op->completion = want_tx_completion(ep, flags);
  op->len = len;
  std::size_t off = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(slot + off, iov[i].iov_base, iov[i].iov_len);
    off += iov[i].iov_len;
  }
  op->sge = {reinterpret_cast<std::uintptr_t>(slot), static_cast<std::uint32_t>(len),
             ep->stage_mr->lkey()};
  op->wr = SendWr{};
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = (flags & FI_REMOTE_CQ_DATA) ? WrOpcode::kSendWithImm : WrOpcode::kSend;
  op->wr.imm_data = static_cast<std::uint32_t>(data);
  op->wr.send_flags = kSignaled;
  if (len) op->wr.sg_list = {&op->sge, 1};
  op->wr.ah = ah;
  op->wr.remote_qpn = peer->qpn;
  op->wr.remote_qkey = kDgramQkey;
  const Errc rc = ep->ud_qp->post_send(op->wr);
  if (rc != Errc::kOk) {
    delete_op(ep, op);
    return rc == Errc::kQueueFull ? -FI_EAGAIN : -FI_EINVAL;
  }
  ep->dom->progress();
  return 0;
}

// An eager message as one direct message (README, "Direct messages"), when the connection has
// nothing in flight through the engine (Conn::posted_wrs). The send is complete once the
// message is in the peer's ring: the buffer is free and the medium does not lose it
// (FI_TRANSMIT_COMPLETE; FI_DELIVERY_COMPLETE sends take the engine). False: send it through
// the engine instead.
bool send_direct(Ep* ep, Conn* c, const iovec* iov, std::size_t count, std::size_t len,
                 std::uint64_t tag, std::uint64_t data, std::uint64_t flags, void* ctx,
                 bool tagged) {
  MsgHdr h{};
  h.op = MsgOp::kEager;
  h.flags = static_cast<std::uint8_t>((tagged ? kHdrTagged : 0) |
                                      ((flags & FI_REMOTE_CQ_DATA) ? kHdrData : 0));
  h.tag = tag;
  h.data = data;
  h.len = len;
  const std::uint8_t* body = count ? static_cast<const std::uint8_t*>(iov[0].iov_base) : nullptr;
  if (count > 1) {
    ep->direct_linear.resize(len);
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(ep->direct_linear.data() + off, iov[i].iov_base, iov[i].iov_len);
      off += iov[i].iov_len;
    }
    body = ep->direct_linear.data();
  }
  if (!try_direct(ep, c, h, body, len)) return false;
  if (want_tx_completion(ep, flags) && ep->tx_cq) {
    fi_cq_tagged_entry e{};
    e.op_context = ctx;
    e.flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
    ep->tx_cq->push(e, FI_ADDR_NOTAVAIL);
  }
  cntr_inc(ep->cntr_send);
  return true;
}

// Every send variant funnels here.
ssize_t send_generic(Ep* ep, const iovec* iov, std::size_t count, fi_addr_t dest, std::uint64_t tag,
                     std::uint64_t data, std::uint64_t flags, void* ctx, bool tagged) {
  std::lock_guard lk(ep->dom->mu);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (count > kIovMax) return -FI_EINVAL;
  const std::size_t len = iov_bytes(iov, count);
  if (len > kMaxMsgBytes) return -FI_EMSGSIZE;
  if ((flags & FI_INJECT) && len > g_params.inject_bytes) return -FI_EMSGSIZE;
  if (ep->dgram) {
    if (tagged) return -FI_ENOSYS;
    return send_dgram(ep, iov, count, len, dest, data, flags, ctx);
  }
  Conn* c = out_conn(ep, dest);
  if (!c) return -FI_EINVAL;
  const bool eager = len <= g_params.eager_bytes;
  // Up to FI_WEFT_DIRECT_SIZE (above the engine's eager size) a message is one direct record when
  // the connection allows; else eager or rendezvous through the engine by eager_bytes.
  if (len <= g_params.direct_bytes && !(flags & FI_DELIVERY_COMPLETE)) {
    if (send_direct(ep, c, iov, count, len, tag, data, flags, ctx, tagged)) return 0;
    if (ep->dom->port->direct_full()) {
      // The peer's ring is full: let it catch up (the engine's packet would be dropped there).
      ep->dom->progress();
      return -FI_EAGAIN;
    }
  }
  std::uint8_t* slot = alloc_stage(ep);
  if (!slot) return -FI_EAGAIN;
  Op* op = new_op(ep, eager ? OpKind::kSend : OpKind::kRts);
  op->stage = slot;
  op->conn = c;
  op->context = ctx;
  op->flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
  op->completion = want_tx_completion(ep, flags);
  op->len = len;
  MsgHdr h{};
  h.op = eager ? MsgOp::kEager : MsgOp::kRts;
  h.flags = static_cast<std::uint8_t>((tagged ? kHdrTagged : 0) |
                                      ((flags & FI_REMOTE_CQ_DATA) ? kHdrData : 0));
  h.tag = tag;
  h.data = data;
  h.len = len;
  std::uint32_t bytes = sizeof h;
  if (eager) {
    std::size_t off = sizeof h;
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(slot + off, iov[i].iov_base, iov[i].iov_len);
      off += iov[i].iov_len;
    }
    bytes = static_cast<std::uint32_t>(off);
  } else {
    const std::uint8_t* src;
    if (count == 1) {
      src = static_cast<const std::uint8_t*>(iov[0].iov_base);
    } else {
      op->linear.resize(len);
      std::size_t off = 0;
      for (std::size_t i = 0; i < count; ++i) {
        std::memcpy(op->linear.data() + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
      }
      src = op->linear.data();
    }
    auto mr = ep->dom->dev->reg_mr(ep->dom->pd, const_cast<std::uint8_t*>(src), len,
                                   kAccessLocalWrite | kAccessRemoteRead);
    if (!mr) {
      delete_op(ep, op);
      return -FI_ENOMEM;
    }
    op->tmp_mr = mr.value();
    op->rndv_src = src;
    op->pending = 2;  // the RTS's SEND completion and the FIN (either first)
    op->rndv_id = ep->next_rndv_id++;
    ep->rndv_sends[op->rndv_id] = op;
    h.msg_id = op->rndv_id;
    h.addr = reinterpret_cast<std::uintptr_t>(src);
    h.rkey = op->tmp_mr->rkey();
    // The RTS as a direct message: no SEND to complete, only the FIN.
    if (try_direct(ep, c, h, nullptr, 0)) {
      free_stage(ep, op);
      op->pending = 1;
      return 0;
    }
  }
  std::memcpy(slot, &h, sizeof h);
  op->sge = {reinterpret_cast<std::uintptr_t>(slot), bytes, ep->stage_mr->lkey()};
  op->wr = SendWr{};
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = WrOpcode::kSend;
  op->wr.send_flags = kSignaled;
  op->wr.sg_list = {&op->sge, 1};
  post_now_or_backlog(c, op);
  ep->dom->progress();
  return 0;
}

RecvReq* make_recv(Ep* ep, const iovec* iov, std::size_t count, fi_addr_t src, std::uint64_t tag,
                   std::uint64_t ignore, void* ctx, bool tagged, bool completion) {
  RecvReq* r = alloc_recv(ep);
  r->context = ctx;
  r->iov_count = count;
  for (std::size_t i = 0; i < count; ++i) r->iov[i] = iov[i];
  r->src = src;
  r->tag = tag;
  r->ignore = ignore;
  r->tagged = tagged;
  r->completion = completion;
  return r;
}

Unexp* find_unexp(Ep* ep, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t ignore) {
  auto& q = tagged ? ep->unexp_tag : ep->unexp_msg;
  for (Unexp* u : q) {
    if (u->claimed) continue;
    if (tagged && ((u->hdr.tag ^ tag) & ~ignore) != 0) continue;
    if (!src_match(ep, src, u->from)) continue;
    return u;
  }
  return nullptr;
}

void remove_unexp(Ep* ep, Unexp* u) {
  auto& q = (u->hdr.flags & kHdrTagged) ? ep->unexp_tag : ep->unexp_msg;
  q.remove(u);
}

// Drops an unexpected message (FI_DISCARD); a rendezvous sender still needs its FIN.
void discard_unexp(Ep* ep, Unexp* u) {
  if (u->hdr.op == MsgOp::kRts) send_fin(ep, u->conn, u->hdr.msg_id);
  delete u;
}

void push_peek_entry(Ep* ep, void* ctx, const Unexp* u) {
  fi_cq_tagged_entry e{};
  e.op_context = ctx;
  e.flags = FI_RECV | FI_TAGGED | ((u->hdr.flags & kHdrData) ? FI_REMOTE_CQ_DATA : 0);
  e.len = u->hdr.len;
  e.data = (u->hdr.flags & kHdrData) ? u->hdr.data : 0;
  e.tag = u->hdr.tag;
  if (ep->rx_cq) ep->rx_cq->push(e, ep->resolve(u->from));
}

// Every receive variant funnels here.
ssize_t recv_generic(Ep* ep, const iovec* iov, std::size_t count, fi_addr_t src, std::uint64_t tag,
                     std::uint64_t ignore, std::uint64_t flags, void* ctx, bool tagged) {
  std::lock_guard lk(ep->dom->mu);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (count > kIovMax) return -FI_EINVAL;
  if (!(ep->info->caps & FI_DIRECTED_RECV)) src = FI_ADDR_UNSPEC;
  if (ep->dgram && tagged) return -FI_ENOSYS;
  const bool completion = !ep->rx_selective || (flags & FI_COMPLETION);
  // A plain receive needs no progress first: a message still in the ring matches it when it
  // is read, as it would have matched it from the unexpected queue. A peek must see arrivals.
  if (flags & (FI_PEEK | FI_CLAIM)) ep->dom->progress();
  if (tagged && (flags & FI_PEEK)) {
    Unexp* u = find_unexp(ep, true, src, tag, ignore);
    if (!u) {
      if (ep->rx_cq) {
        fi_cq_err_entry e{};
        e.op_context = ctx;
        e.flags = FI_RECV | FI_TAGGED;
        e.tag = tag;
        e.err = FI_ENOMSG;
        ep->rx_cq->push_error(e);
      }
      return 0;
    }
    push_peek_entry(ep, ctx, u);
    if (flags & FI_DISCARD) {
      remove_unexp(ep, u);
      discard_unexp(ep, u);
    } else if (flags & FI_CLAIM) {
      u->claimed = true;
      ep->claimed[ctx] = u;
    }
    return 0;
  }
  if (tagged && (flags & FI_CLAIM)) {
    auto it = ep->claimed.find(ctx);
    if (it == ep->claimed.end()) return -FI_EINVAL;
    Unexp* u = it->second;
    ep->claimed.erase(it);
    remove_unexp(ep, u);
    if (flags & FI_DISCARD) {
      if (ep->rx_cq) {
        fi_cq_tagged_entry e{};
        e.op_context = ctx;
        e.flags = FI_RECV | FI_TAGGED;
        e.tag = u->hdr.tag;
        ep->rx_cq->push(e, ep->resolve(u->from));
      }
      discard_unexp(ep, u);
      return 0;
    }
    RecvReq* r = make_recv(ep, iov, count, src, tag, ignore, ctx, true, completion);
    deliver(ep, r, u->conn, u->hdr, u->payload.data());
    delete u;
    ep->dom->progress();
    return 0;
  }
  if (Unexp* u = find_unexp(ep, tagged, src, tag, ignore)) {
    remove_unexp(ep, u);
    RecvReq* r = make_recv(ep, iov, count, src, tag, ignore, ctx, tagged, completion);
    deliver(ep, r, u->conn, u->hdr, u->payload.data());
    delete u;
    ep->dom->progress();
    return 0;
  }
  (tagged ? ep->posted_tag : ep->posted_msg)
      .push_back(make_recv(ep, iov, count, src, tag, ignore, ctx, tagged, completion));
  return 0;
}

// FI_MULTI_RECV (untagged, one buffer): first the unexpected messages that match, in arrival
// order, then the buffer waits in the posted queue until it is released.
ssize_t recv_multi(Ep* ep, const iovec* iov, std::size_t count, fi_addr_t src, std::uint64_t flags,
                   void* ctx) {
  std::lock_guard lk(ep->dom->mu);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (count != 1 || ep->dgram || !(ep->info->caps & FI_MULTI_RECV)) return -FI_EINVAL;
  if (iov[0].iov_len < ep->min_multi_recv) return -FI_EINVAL;
  if (!(ep->info->caps & FI_DIRECTED_RECV)) src = FI_ADDR_UNSPEC;
  const bool completion = !ep->rx_selective || (flags & FI_COMPLETION);
  ep->dom->progress();
  RecvReq* m = make_recv(ep, iov, 1, src, 0, 0, ctx, false, completion);
  m->multi = true;
  ep->posted_msg.push_back(m);
  const RecvList::iterator it(m);
  for (;;) {
    Unexp* u = find_unexp(ep, false, src, 0, 0);
    if (!u) break;
    remove_unexp(ep, u);
    RecvReq* piece = take_piece(ep, ep->posted_msg, it, u->hdr.len);
    // The piece that releases the buffer may complete at once and free it: decide before.
    const bool last = m->released;
    deliver(ep, piece, u->conn, u->hdr, u->payload.data());
    delete u;
    if (last) break;
  }
  ep->dom->progress();
  return 0;
}

// Every RMA variant funnels here.
ssize_t rma_generic(Ep* ep, bool write, const iovec* iov, std::size_t count, fi_addr_t peer,
                    std::uint64_t addr, std::uint64_t key, std::uint64_t data, std::uint64_t flags,
                    void* ctx) {
  std::lock_guard lk(ep->dom->mu);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (!(ep->info->caps & FI_RMA)) return -FI_ENOSYS;
  if (count > 1) return -FI_EINVAL;  // rma_iov_limit and iov_limit for RMA: 1
  const std::size_t len = iov_bytes(iov, count);
  if (len > kMaxMsgBytes) return -FI_EMSGSIZE;
  if ((flags & FI_INJECT) && (len > g_params.inject_bytes || !write)) return -FI_EINVAL;
  Conn* c = out_conn(ep, peer);
  if (!c) return -FI_EINVAL;
  Op* op = new_op(ep, write ? OpKind::kWrite : OpKind::kRead);
  op->conn = c;
  op->context = ctx;
  op->flags = FI_RMA | (write ? FI_WRITE : FI_READ);
  op->completion = want_tx_completion(ep, flags);
  op->len = len;
  op->wr = SendWr{};
  if (len) {
    if (flags & FI_INJECT) {
      op->stage = alloc_stage(ep);
      if (!op->stage) {
        delete_op(ep, op);
        return -FI_EAGAIN;
      }
      std::memcpy(op->stage, iov[0].iov_base, len);
      op->sge = {reinterpret_cast<std::uintptr_t>(op->stage), static_cast<std::uint32_t>(len),
                 ep->stage_mr->lkey()};
    } else {
      auto mr = ep->dom->dev->reg_mr(ep->dom->pd, iov[0].iov_base, len, kAccessLocalWrite);
      if (!mr) {
        delete_op(ep, op);
        return -FI_ENOMEM;
      }
      op->tmp_mr = mr.value();
      op->sge = {reinterpret_cast<std::uintptr_t>(iov[0].iov_base), static_cast<std::uint32_t>(len),
                 op->tmp_mr->lkey()};
    }
    op->wr.sg_list = {&op->sge, 1};
  }
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = !write                        ? WrOpcode::kRdmaRead
                  : (flags & FI_REMOTE_CQ_DATA) ? WrOpcode::kRdmaWriteWithImm
                                                : WrOpcode::kRdmaWrite;
  op->wr.imm_data = static_cast<std::uint32_t>(data);
  op->wr.send_flags = kSignaled;
  op->wr.remote_addr = addr;
  op->wr.rkey = static_cast<std::uint32_t>(key);
  post_now_or_backlog(c, op);
  ep->dom->progress();
  return 0;
}

// ---- fi_ops_msg ---------------------------------------------------------------------------
#define WEFT_EP_CALL(expr) guard<ssize_t>(-FI_ENOMEM, [&]() -> ssize_t { return expr; })

ssize_t msg_recv(fid_ep* e, void* buf, std::size_t len, void*, fi_addr_t src, void* ctx) {
  iovec v{buf, len};
  Ep* ep = as_ep(e);
  if (ep->rx_op_flags & FI_MULTI_RECV)
    return WEFT_EP_CALL(recv_multi(ep, &v, 1, src, ep->rx_op_flags, ctx));
  return WEFT_EP_CALL(recv_generic(ep, &v, 1, src, 0, 0, ep->rx_op_flags, ctx, false));
}
ssize_t msg_recvv(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t src,
                  void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(recv_generic(ep, iov, count, src, 0, 0, ep->rx_op_flags, ctx, false));
}
ssize_t msg_recvmsg(fid_ep* e, const fi_msg* m, std::uint64_t flags) {
  if (flags & FI_MULTI_RECV)
    return WEFT_EP_CALL(recv_multi(as_ep(e), m->msg_iov, m->iov_count, m->addr, flags, m->context));
  return WEFT_EP_CALL(
      recv_generic(as_ep(e), m->msg_iov, m->iov_count, m->addr, 0, 0, flags, m->context, false));
}
ssize_t msg_send(fid_ep* e, const void* buf, std::size_t len, void*, fi_addr_t dest, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(send_generic(ep, &v, 1, dest, 0, 0, ep->tx_op_flags, ctx, false));
}
ssize_t msg_sendv(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t dest,
                  void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(send_generic(ep, iov, count, dest, 0, 0, ep->tx_op_flags, ctx, false));
}
ssize_t msg_sendmsg(fid_ep* e, const fi_msg* m, std::uint64_t flags) {
  return WEFT_EP_CALL(send_generic(as_ep(e), m->msg_iov, m->iov_count, m->addr, 0, m->data, flags,
                                   m->context, false));
}
ssize_t msg_inject(fid_ep* e, const void* buf, std::size_t len, fi_addr_t dest) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(send_generic(as_ep(e), &v, 1, dest, 0, 0, FI_INJECT, nullptr, false));
}
ssize_t msg_senddata(fid_ep* e, const void* buf, std::size_t len, void*, std::uint64_t data,
                     fi_addr_t dest, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(
      send_generic(ep, &v, 1, dest, 0, data, ep->tx_op_flags | FI_REMOTE_CQ_DATA, ctx, false));
}
ssize_t msg_injectdata(fid_ep* e, const void* buf, std::size_t len, std::uint64_t data,
                       fi_addr_t dest) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(
      send_generic(as_ep(e), &v, 1, dest, 0, data, FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, false));
}
fi_ops_msg g_msg_ops = {sizeof(fi_ops_msg), msg_recv,    msg_recvv,  msg_recvmsg,  msg_send,
                        msg_sendv,          msg_sendmsg, msg_inject, msg_senddata, msg_injectdata};

// ---- fi_ops_tagged --------------------------------------------------------------------------
ssize_t tag_recv(fid_ep* e, void* buf, std::size_t len, void*, fi_addr_t src, std::uint64_t tag,
                 std::uint64_t ignore, void* ctx) {
  iovec v{buf, len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(recv_generic(ep, &v, 1, src, tag, ignore, ep->rx_op_flags, ctx, true));
}
ssize_t tag_recvv(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t src,
                  std::uint64_t tag, std::uint64_t ignore, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(recv_generic(ep, iov, count, src, tag, ignore, ep->rx_op_flags, ctx, true));
}
ssize_t tag_recvmsg(fid_ep* e, const fi_msg_tagged* m, std::uint64_t flags) {
  return WEFT_EP_CALL(recv_generic(as_ep(e), m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore,
                                   flags, m->context, true));
}
ssize_t tag_send(fid_ep* e, const void* buf, std::size_t len, void*, fi_addr_t dest,
                 std::uint64_t tag, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(send_generic(ep, &v, 1, dest, tag, 0, ep->tx_op_flags, ctx, true));
}
ssize_t tag_sendv(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t dest,
                  std::uint64_t tag, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(send_generic(ep, iov, count, dest, tag, 0, ep->tx_op_flags, ctx, true));
}
ssize_t tag_sendmsg(fid_ep* e, const fi_msg_tagged* m, std::uint64_t flags) {
  return WEFT_EP_CALL(send_generic(as_ep(e), m->msg_iov, m->iov_count, m->addr, m->tag, m->data,
                                   flags, m->context, true));
}
ssize_t tag_inject(fid_ep* e, const void* buf, std::size_t len, fi_addr_t dest, std::uint64_t tag) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(send_generic(as_ep(e), &v, 1, dest, tag, 0, FI_INJECT, nullptr, true));
}
ssize_t tag_senddata(fid_ep* e, const void* buf, std::size_t len, void*, std::uint64_t data,
                     fi_addr_t dest, std::uint64_t tag, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(
      send_generic(ep, &v, 1, dest, tag, data, ep->tx_op_flags | FI_REMOTE_CQ_DATA, ctx, true));
}
ssize_t tag_injectdata(fid_ep* e, const void* buf, std::size_t len, std::uint64_t data,
                       fi_addr_t dest, std::uint64_t tag) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(
      send_generic(as_ep(e), &v, 1, dest, tag, data, FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, true));
}
fi_ops_tagged g_tagged_ops = {
    sizeof(fi_ops_tagged), tag_recv,   tag_recvv,    tag_recvmsg,   tag_send, tag_sendv,
    tag_sendmsg,           tag_inject, tag_senddata, tag_injectdata};

// ---- fi_ops_rma ---------------------------------------------------------------------------------
ssize_t rma_read(fid_ep* e, void* buf, std::size_t len, void*, fi_addr_t src, std::uint64_t addr,
                 std::uint64_t key, void* ctx) {
  iovec v{buf, len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(rma_generic(ep, false, &v, 1, src, addr, key, 0, ep->tx_op_flags, ctx));
}
ssize_t rma_readv(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t src,
                  std::uint64_t addr, std::uint64_t key, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(rma_generic(ep, false, iov, count, src, addr, key, 0, ep->tx_op_flags, ctx));
}
ssize_t rma_readmsg(fid_ep* e, const fi_msg_rma* m, std::uint64_t flags) {
  if (m->rma_iov_count != 1) return -FI_EINVAL;
  return WEFT_EP_CALL(rma_generic(as_ep(e), false, m->msg_iov, m->iov_count, m->addr,
                                  m->rma_iov[0].addr, m->rma_iov[0].key, 0, flags, m->context));
}
ssize_t rma_write(fid_ep* e, const void* buf, std::size_t len, void*, fi_addr_t dest,
                  std::uint64_t addr, std::uint64_t key, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(rma_generic(ep, true, &v, 1, dest, addr, key, 0, ep->tx_op_flags, ctx));
}
ssize_t rma_writev(fid_ep* e, const iovec* iov, void**, std::size_t count, fi_addr_t dest,
                   std::uint64_t addr, std::uint64_t key, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(rma_generic(ep, true, iov, count, dest, addr, key, 0, ep->tx_op_flags, ctx));
}
ssize_t rma_writemsg(fid_ep* e, const fi_msg_rma* m, std::uint64_t flags) {
  if (m->rma_iov_count != 1) return -FI_EINVAL;
  return WEFT_EP_CALL(rma_generic(as_ep(e), true, m->msg_iov, m->iov_count, m->addr,
                                  m->rma_iov[0].addr, m->rma_iov[0].key, m->data, flags,
                                  m->context));
}
ssize_t rma_inject(fid_ep* e, const void* buf, std::size_t len, fi_addr_t dest, std::uint64_t addr,
                   std::uint64_t key) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(rma_generic(as_ep(e), true, &v, 1, dest, addr, key, 0, FI_INJECT, nullptr));
}
ssize_t rma_writedata(fid_ep* e, const void* buf, std::size_t len, void*, std::uint64_t data,
                      fi_addr_t dest, std::uint64_t addr, std::uint64_t key, void* ctx) {
  iovec v{const_cast<void*>(buf), len};
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(rma_generic(ep, true, &v, 1, dest, addr, key, data,
                                  ep->tx_op_flags | FI_REMOTE_CQ_DATA, ctx));
}
ssize_t rma_injectdata(fid_ep* e, const void* buf, std::size_t len, std::uint64_t data,
                       fi_addr_t dest, std::uint64_t addr, std::uint64_t key) {
  iovec v{const_cast<void*>(buf), len};
  return WEFT_EP_CALL(rma_generic(as_ep(e), true, &v, 1, dest, addr, key, data,
                                  FI_INJECT | FI_REMOTE_CQ_DATA, nullptr));
}
fi_ops_rma g_rma_ops = {sizeof(fi_ops_rma), rma_read,      rma_readv,    rma_readmsg,
                        rma_write,          rma_writev,    rma_writemsg, rma_inject,
                        rma_writedata,      rma_injectdata};

// ---- fi_ops_atomic ---------------------------------------------------------------------------
// Every atomic variant funnels here: one request message (operands inline, at most one eager
// message), executed at the target, completed on its response. One ioc per call.
ssize_t atomic_generic(Ep* ep, AtomicKind kind, fi_op aop, fi_datatype dt, const void* buf,
                       std::size_t count, const void* compare, void* result, fi_addr_t dest,
                       std::uint64_t addr, std::uint64_t key, std::uint64_t flags, void* ctx) {
  std::lock_guard lk(ep->dom->mu);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (!(ep->info->caps & FI_ATOMIC)) return -FI_ENOSYS;
  if (!atomic_valid(kind, aop, dt)) return -FI_EOPNOTSUPP;
  if (count == 0 || count > atomic_max_count(kind, dt)) return -FI_EINVAL;
  if ((kind != AtomicKind::kWrite && !result) || (kind == AtomicKind::kCompare && !compare) ||
      (aop != FI_ATOMIC_READ && !buf))
    return -FI_EINVAL;
  const std::size_t bytes = atomic_type_size(dt) * count;
  if ((flags & FI_INJECT) && (kind != AtomicKind::kWrite || bytes > g_params.inject_bytes))
    return -FI_EINVAL;
  Conn* c = out_conn(ep, dest);
  if (!c) return -FI_EINVAL;
  std::uint8_t* slot = alloc_stage(ep);
  if (!slot) return -FI_EAGAIN;
  Op* op = new_op(ep, OpKind::kAtomic);
  op->stage = slot;
  op->conn = c;
  op->context = ctx;
  op->flags = FI_ATOMIC | (kind == AtomicKind::kWrite ? FI_WRITE : FI_READ);
  op->completion = want_tx_completion(ep, flags);
  op->len = bytes;
  op->result = kind == AtomicKind::kWrite ? nullptr : result;
  op->pending = 2;  // SEND completion and response
  if (++ep->atomics_issued == 1)
    WEFT_INFO(FI_LOG_EP_DATA, "endpoint %u: first atomic (op %d, datatype %d)", ep->id, aop, dt);
  op->rndv_id = ep->next_rndv_id++;
  ep->rndv_sends[op->rndv_id] = op;
  MsgHdr h{};
  h.op = MsgOp::kAtomicReq;
  h.flags = kind == AtomicKind::kCompare ? kHdrCompare : kind == AtomicKind::kFetch ? kHdrFetch : 0;
  h.reserved = static_cast<std::uint16_t>(aop | (dt << 8));
  h.len = count;
  h.msg_id = op->rndv_id;
  h.addr = addr;
  h.rkey = static_cast<std::uint32_t>(key);
  std::memcpy(slot, &h, sizeof h);
  std::uint8_t* p = slot + sizeof h;
  if (buf)
    std::memcpy(p, buf, bytes);
  else
    std::memset(p, 0, bytes);
  std::uint32_t len = static_cast<std::uint32_t>(sizeof h + bytes);
  if (kind == AtomicKind::kCompare) {
    std::memcpy(p + bytes, compare, bytes);
    len += static_cast<std::uint32_t>(bytes);
  }
  op->sge = {reinterpret_cast<std::uintptr_t>(slot), len, ep->stage_mr->lkey()};
  op->wr = SendWr{};
  op->wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
  op->wr.opcode = WrOpcode::kSend;
  op->wr.send_flags = kSignaled;
  op->wr.sg_list = {&op->sge, 1};
  post_now_or_backlog(c, op);
  ep->dom->progress();
  return 0;
}

ssize_t at_write(fid_ep* e, const void* buf, std::size_t count, void*, fi_addr_t dest,
                 std::uint64_t addr, std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kWrite, op, dt, buf, count, nullptr, nullptr,
                                     dest, addr, key, ep->tx_op_flags, ctx));
}
ssize_t at_writev(fid_ep* e, const fi_ioc* iov, void**, std::size_t n, fi_addr_t dest,
                  std::uint64_t addr, std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (n != 1) return -FI_EINVAL;
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kWrite, op, dt, iov[0].addr, iov[0].count,
                                     nullptr, nullptr, dest, addr, key, ep->tx_op_flags, ctx));
}
ssize_t at_writemsg(fid_ep* e, const fi_msg_atomic* m, std::uint64_t flags) {
  if (m->iov_count != 1 || m->rma_iov_count != 1 || m->msg_iov[0].count != m->rma_iov[0].count)
    return -FI_EINVAL;
  return WEFT_EP_CALL(atomic_generic(
      as_ep(e), AtomicKind::kWrite, m->op, m->datatype, m->msg_iov[0].addr, m->msg_iov[0].count,
      nullptr, nullptr, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, flags, m->context));
}
ssize_t at_inject(fid_ep* e, const void* buf, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                  std::uint64_t key, fi_datatype dt, fi_op op) {
  return WEFT_EP_CALL(atomic_generic(as_ep(e), AtomicKind::kWrite, op, dt, buf, count, nullptr,
                                     nullptr, dest, addr, key, FI_INJECT, nullptr));
}
ssize_t at_readwrite(fid_ep* e, const void* buf, std::size_t count, void*, void* result, void*,
                     fi_addr_t dest, std::uint64_t addr, std::uint64_t key, fi_datatype dt,
                     fi_op op, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kFetch, op, dt, buf, count, nullptr, result,
                                     dest, addr, key, ep->tx_op_flags, ctx));
}
ssize_t at_readwritev(fid_ep* e, const fi_ioc* iov, void**, std::size_t n, fi_ioc* resultv, void**,
                      std::size_t rn, fi_addr_t dest, std::uint64_t addr, std::uint64_t key,
                      fi_datatype dt, fi_op op, void* ctx) {
  if (n != 1 || rn != 1 || resultv[0].count != iov[0].count) return -FI_EINVAL;
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kFetch, op, dt, iov[0].addr, iov[0].count,
                                     nullptr, resultv[0].addr, dest, addr, key, ep->tx_op_flags,
                                     ctx));
}
ssize_t at_readwritemsg(fid_ep* e, const fi_msg_atomic* m, fi_ioc* resultv, void**, std::size_t rn,
                        std::uint64_t flags) {
  if (m->iov_count != 1 || m->rma_iov_count != 1 || rn != 1 ||
      resultv[0].count != m->msg_iov[0].count)
    return -FI_EINVAL;
  return WEFT_EP_CALL(atomic_generic(
      as_ep(e), AtomicKind::kFetch, m->op, m->datatype, m->msg_iov[0].addr, m->msg_iov[0].count,
      nullptr, resultv[0].addr, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, flags, m->context));
}
ssize_t at_compwrite(fid_ep* e, const void* buf, std::size_t count, void*, const void* compare,
                     void*, void* result, void*, fi_addr_t dest, std::uint64_t addr,
                     std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kCompare, op, dt, buf, count, compare, result,
                                     dest, addr, key, ep->tx_op_flags, ctx));
}
ssize_t at_compwritev(fid_ep* e, const fi_ioc* iov, void**, std::size_t n, const fi_ioc* comparev,
                      void**, std::size_t cn, fi_ioc* resultv, void**, std::size_t rn,
                      fi_addr_t dest, std::uint64_t addr, std::uint64_t key, fi_datatype dt,
                      fi_op op, void* ctx) {
  if (n != 1 || cn != 1 || rn != 1 || comparev[0].count != iov[0].count ||
      resultv[0].count != iov[0].count)
    return -FI_EINVAL;
  Ep* ep = as_ep(e);
  return WEFT_EP_CALL(atomic_generic(ep, AtomicKind::kCompare, op, dt, iov[0].addr, iov[0].count,
                                     comparev[0].addr, resultv[0].addr, dest, addr, key,
                                     ep->tx_op_flags, ctx));
}
ssize_t at_compwritemsg(fid_ep* e, const fi_msg_atomic* m, const fi_ioc* comparev, void**,
                        std::size_t cn, fi_ioc* resultv, void**, std::size_t rn,
                        std::uint64_t flags) {
  if (m->iov_count != 1 || m->rma_iov_count != 1 || cn != 1 || rn != 1 ||
      comparev[0].count != m->msg_iov[0].count || resultv[0].count != m->msg_iov[0].count)
    return -FI_EINVAL;
  return WEFT_EP_CALL(atomic_generic(as_ep(e), AtomicKind::kCompare, m->op, m->datatype,
                                     m->msg_iov[0].addr, m->msg_iov[0].count, comparev[0].addr,
                                     resultv[0].addr, m->addr, m->rma_iov[0].addr,
                                     m->rma_iov[0].key, flags, m->context));
}
int at_valid(AtomicKind kind, fi_datatype dt, fi_op op, std::size_t* count) {
  if (!atomic_valid(kind, op, dt)) return -FI_EOPNOTSUPP;
  if (count) *count = atomic_max_count(kind, dt);
  return 0;
}
int at_writevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) {
  return at_valid(AtomicKind::kWrite, dt, op, count);
}
int at_readwritevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) {
  return at_valid(AtomicKind::kFetch, dt, op, count);
}
int at_compwritevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) {
  return at_valid(AtomicKind::kCompare, dt, op, count);
}
fi_ops_atomic g_atomic_ops = {
    sizeof(fi_ops_atomic), at_write,      at_writev,         at_writemsg,      at_inject,
    at_readwrite,          at_readwritev, at_readwritemsg,   at_compwrite,     at_compwritev,
    at_compwritemsg,       at_writevalid, at_readwritevalid, at_compwritevalid};

// ---- fi_ops_ep ------------------------------------------------------------------------------
ssize_t ep_cancel(fid* f, void* ctx) {
  return WEFT_EP_CALL([&]() -> ssize_t {
    Ep* ep = as_ep(f);
    std::lock_guard lk(ep->dom->mu);
    for (auto* q : {&ep->posted_tag, &ep->posted_msg}) {
      for (auto it = q->begin(); it != q->end(); ++it) {
        RecvReq* r = *it;
        if (r->context != ctx) continue;
        q->erase(it);
        if (ep->rx_cq) {
          fi_cq_err_entry e{};
          e.op_context = ctx;
          e.flags = FI_RECV | (r->tagged ? FI_TAGGED : FI_MSG) | (r->multi ? FI_MULTI_RECV : 0);
          e.tag = r->tag;
          e.err = FI_ECANCELED;
          ep->rx_cq->push_error(e);
        }
        if (r->multi && r->outstanding > 0) {
          r->released = true;  // the pieces still in flight free it (their last one says so)
          r->context = nullptr;
        } else {
          free_recv(ep, r);
        }
        return 0;
      }
    }
    return -FI_ENOENT;  // sends and matched receives are past the point of cancelling
  }());
}
int ep_getopt(fid* f, int level, int optname, void* optval, std::size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
  if (!optval || !optlen || *optlen < sizeof(std::size_t)) return -FI_ETOOSMALL;
  Ep* ep = as_ep(f);
  std::lock_guard lk(ep->dom->mu);
  std::memcpy(optval, &ep->min_multi_recv, sizeof(std::size_t));
  *optlen = sizeof(std::size_t);
  return 0;
}
int ep_setopt(fid* f, int level, int optname, const void* optval, std::size_t optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
  if (!optval || optlen != sizeof(std::size_t)) return -FI_EINVAL;
  Ep* ep = as_ep(f);
  std::lock_guard lk(ep->dom->mu);
  std::memcpy(&ep->min_multi_recv, optval, sizeof(std::size_t));
  if (ep->min_multi_recv == 0) ep->min_multi_recv = 1;
  return 0;
}
int ep_tx_ctx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) {
  return -FI_ENOSYS;
}
int ep_rx_ctx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) {
  return -FI_ENOSYS;
}
ssize_t ep_rx_size_left(fid_ep*) {
  return -FI_ENOSYS;
}
ssize_t ep_tx_size_left(fid_ep* e) {
  Ep* ep = as_ep(e);
  std::lock_guard lk(ep->dom->mu);
  return static_cast<ssize_t>(ep->stage_free.size());
}
fi_ops_ep g_ep_ops = {sizeof(fi_ops_ep), ep_cancel, ep_getopt,       ep_setopt,
                      ep_tx_ctx,         ep_rx_ctx, ep_rx_size_left, ep_tx_size_left};

// ---- fi_ops_cm (RDM: names only) ------------------------------------------------------------
int cm_setname(fid*, void*, std::size_t) {
  return -FI_ENOSYS;
}
int cm_getname(fid* f, void* addr, std::size_t* addrlen) {
  Ep* ep = as_ep(f);
  const bool small = *addrlen < sizeof(EpAddr);
  if (addr) std::memcpy(addr, &ep->addr, std::min(*addrlen, sizeof(EpAddr)));
  *addrlen = sizeof(EpAddr);
  return small ? -FI_ETOOSMALL : 0;
}
int cm_getpeer(fid_ep* e, void* addr, std::size_t* addrlen) {
  Ep* ep = as_ep(e);
  std::lock_guard lk(ep->dom->mu);
  if (!ep->msg || !ep->connected) return -FI_ENOTCONN;
  const bool small = *addrlen < sizeof(EpAddr);
  if (addr) std::memcpy(addr, &ep->msg_peer, std::min(*addrlen, sizeof(EpAddr)));
  *addrlen = sizeof(EpAddr);
  return small ? -FI_ETOOSMALL : 0;
}
// Client: asks the passive endpoint at addr (or the info's dest_addr) for a connection; the
// answer is an FI_CONNECTED event (or an FI_ECONNREFUSED error event) on the bound EQ.
int cm_connect(fid_ep* e, const void* addr, const void* param, std::size_t paramlen) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(e);
    std::lock_guard lk(ep->dom->mu);
    if (!ep->msg) return -FI_ENOSYS;
    if (param && paramlen) return -FI_EINVAL;  // no private data
    if (!ep->enabled || !ep->eq || ep->connected) return -FI_EOPBADSTATE;
    if (!addr) addr = ep->info->dest_addr;
    if (!addr) return -FI_EINVAL;
    EpAddr pep;
    std::memcpy(&pep, addr, sizeof pep);
    if (!pep.valid()) return -FI_EINVAL;
    if (ep->cm_pending) return -FI_EOPBADSTATE;  // one request at a time
    if (!send_ctrl(ep, pep.node(), CtrlMsg{CtrlType::kCmReq, pep.ep_id, ep->id, 0, 0}))
      return -FI_ECONNREFUSED;
    ep->cm_pending = true;
    ep->cm_deadline = conn_deadline(mono_ns());
    await_answer(ep->dom, ep->cm_deadline);
    ep->dom->progress();
    return 0;
  });
}
int cm_listen(fid_pep* p) {
  Pep* pep = ofi_container<Pep>(p);
  if (!pep->eq) return -FI_ENOEQ;
  pep->listening = true;
  return 0;
}
// Server: the endpoint made from the FI_CONNREQ info accepts; both sides then see FI_CONNECTED.
int cm_accept(fid_ep* e, const void* param, std::size_t paramlen) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(e);
    std::lock_guard lk(ep->dom->mu);
    if (!ep->msg || !ep->conn_req) return -FI_EOPBADSTATE;
    if (param && paramlen) return -FI_EINVAL;
    if (!ep->enabled || !ep->eq) return -FI_EOPBADSTATE;
    ep->msg_peer = ep->conn_req->client;
    delete ep->conn_req;
    ep->conn_req = nullptr;
    if (!send_ctrl(ep, ep->msg_peer.node(),
                   CtrlMsg{CtrlType::kCmRep, ep->msg_peer.ep_id, ep->id, 0, 0}))
      return -FI_ECONNABORTED;
    ep->connected = true;
    push_cm(ep, FI_CONNECTED);
    ep->dom->progress();
    return 0;
  });
}
int cm_reject(fid_pep* p, fid_t handle, const void*, std::size_t) {
  return guard(-FI_ENOMEM, [&] {
    Pep* pep = ofi_container<Pep>(p);
    if (!handle || handle->fclass != FI_CLASS_CONNREQ) return -FI_EINVAL;
    ConnReq* cr = ofi_container<ConnReq>(handle);
    std::lock_guard lk(pep->dom->mu);
    send_ctrl(pep->dom, cr->client.node(),
              CtrlMsg{CtrlType::kCmRej, cr->client.ep_id, pep->id, 0, 0});
    delete cr;
    pep->dom->progress();
    return 0;
  });
}
int cm_shutdown(fid_ep* e, std::uint64_t) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(e);
    std::lock_guard lk(ep->dom->mu);
    if (!ep->msg) return -FI_ENOSYS;
    if (!ep->connected) return 0;
    ep->connected = false;
    send_ctrl(ep, ep->msg_peer.node(),
              CtrlMsg{CtrlType::kCmShutdown, ep->msg_peer.ep_id, ep->id, 0, 0});
    ep->dom->progress();
    return 0;
  });
}
int cm_join(fid_ep*, const void*, std::uint64_t, fid_mc**, void*) {
  return -FI_ENOSYS;
}
fi_ops_cm g_cm_ops = {sizeof(fi_ops_cm), cm_setname, cm_getname, cm_getpeer,  cm_connect,
                      cm_listen,         cm_accept,  cm_reject,  cm_shutdown, cm_join};

// ---- fi_ops: close, bind, control -------------------------------------------------------------
void release(Cq*& q) {
  if (q) --q->refs;
  q = nullptr;
}
void release(Cntr*& c) {
  if (c) --c->refs;
  c = nullptr;
}

int ep_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(f);
    Domain* d = ep->dom;
    std::lock_guard lk(d->mu);
    d->progress();
    if (ep->msg && ep->connected)
      send_ctrl(ep, ep->msg_peer.node(),
                CtrlMsg{CtrlType::kCmShutdown, ep->msg_peer.ep_id, ep->id, 0, 0});
    delete ep->conn_req;  // a connection request never accepted
    ep->conn_req = nullptr;
    if (ep->atomics_issued || ep->atomics_served)
      WEFT_INFO(FI_LOG_EP_DATA, "endpoint %u: %llu atomics issued, %llu executed as target", ep->id,
                (unsigned long long)ep->atomics_issued, (unsigned long long)ep->atomics_served);
    cm_answered(ep);
    for (auto& [addr, c] : ep->out_conns) {
      conn_answered(ep, c.get());
      d->dev->destroy_qp(c->qp);
    }
    for (auto& c : ep->in_conns) d->dev->destroy_qp(c->qp);
    if (ep->ud_qp) d->dev->destroy_qp(ep->ud_qp);
    for (auto& [fa, ah] : ep->ahs) d->dev->destroy_ah(ah);
    // Completions of this endpoint's QPs still queued in the device CQ refer to its Ops: drop
    // them, and hand everyone else's on.
    {
      WorkCompletion wcs[64];
      std::vector<WorkCompletion> keep;
      std::size_t n;
      while ((n = d->dcq->poll(wcs)) > 0) {
        for (std::size_t i = 0; i < n; ++i)
          if (!ep->by_qpn.count(wcs[i].qp_num)) keep.push_back(wcs[i]);
      }
      d->eps.erase(ep->id);
      for (const auto& wc : keep) d->dispatch(wc);
    }
    d->eps.erase(ep->id);
    if (ep->srq) d->dev->destroy_srq(ep->srq);
    while (Op* op = ep->live_ops) {
      ep->live_ops = op->live_next;
      if (op->tmp_mr) d->dev->dereg_mr(op->tmp_mr);
      delete op;
    }
    while (Op* op = ep->free_ops) {
      ep->free_ops = op->live_next;
      delete op;
    }
    if (ep->bounce_mr) d->dev->dereg_mr(ep->bounce_mr);
    if (ep->stage_mr) d->dev->dereg_mr(ep->stage_mr);
    for (auto* r : ep->posted_msg) delete r;
    for (auto* r : ep->posted_tag) delete r;
    for (auto& [key, sr] : ep->split_recvs) free_recv(ep, sr.r);  // matched, never completed
    d->split_pending -= ep->split_recvs.size();
    ep->split_recvs.clear();
    while (RecvReq* r = ep->free_recvs) {
      ep->free_recvs = r->next_free;
      delete r;
    }
    for (auto* u : ep->unexp_msg) delete u;
    for (auto* u : ep->unexp_tag) delete u;
    if (ep->av) --ep->av->refs;
    release(ep->tx_cq);
    release(ep->rx_cq);
    release(ep->cntr_send);
    release(ep->cntr_recv);
    release(ep->cntr_read);
    release(ep->cntr_write);
    release(ep->cntr_rem_write);
    fi_freeinfo(ep->info);
    --d->refs;
    delete ep;
    return 0;
  });
}

int ep_bind(fid* f, fid* bf, std::uint64_t flags) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(f);
    std::lock_guard lk(ep->dom->mu);
    if (ep->enabled && bf->fclass != FI_CLASS_CNTR) return -FI_EOPBADSTATE;
    switch (bf->fclass) {
      case FI_CLASS_AV: {
        if (ep->av) return -FI_EINVAL;
        Av* a = ofi_container<Av>(bf);
        if (a->dom != ep->dom) return -FI_EINVAL;
        ep->av = a;
        ++a->refs;
        return 0;
      }
      case FI_CLASS_CQ: {
        Cq* q = ofi_container<Cq>(bf);
        if (q->dom != ep->dom) return -FI_EINVAL;
        if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) return -FI_EBADFLAGS;
        if (flags & FI_TRANSMIT) {
          if (ep->tx_cq) return -FI_EINVAL;
          ep->tx_cq = q;
          ++q->refs;
          ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        }
        if (flags & FI_RECV) {
          if (ep->rx_cq) return -FI_EINVAL;
          ep->rx_cq = q;
          ++q->refs;
          ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        }
        return 0;
      }
      case FI_CLASS_CNTR: {
        Cntr* c = ofi_container<Cntr>(bf);
        if (c->dom != ep->dom) return -FI_EINVAL;
        if (flags & ~(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_WRITE | FI_REMOTE_READ))
          return -FI_EBADFLAGS;
        auto set = [&](Cntr*& slot) {
          if (slot) --slot->refs;
          slot = c;
          ++c->refs;
        };
        if (flags & FI_SEND) set(ep->cntr_send);
        if (flags & FI_RECV) set(ep->cntr_recv);
        if (flags & FI_READ) set(ep->cntr_read);
        if (flags & FI_WRITE) set(ep->cntr_write);
        if (flags & FI_REMOTE_WRITE) set(ep->cntr_rem_write);
        return 0;  // FI_REMOTE_READ: accepted; reads are not visible at the target
      }
      case FI_CLASS_EQ: {
        if (!ep->msg) return 0;  // no EQ events for RDM/DGRAM (AV inserts are synchronous)
        Eq* q = ofi_container<Eq>(bf);
        ep->eq = q;
        q->add_source(ep->dom);
        return 0;
      }
      default:
        return -FI_EINVAL;
    }
  });
}

int ep_enable(Ep* ep) {
  std::lock_guard lk(ep->dom->mu);
  if (ep->enabled) return 0;
  if (!ep->av && !ep->msg) return -FI_ENOAV;
  if (!ep->tx_cq && !ep->cntr_send) return -FI_ENOCQ;
  if (!ep->rx_cq && !ep->cntr_recv) return -FI_ENOCQ;
  Device& dev = *ep->dom->dev;
  if (!ep->dgram) {
    auto srq = dev.create_srq(ep->dom->pd, static_cast<std::uint32_t>(g_params.rx_bounce), 1);
    if (!srq) return -FI_ENOMEM;
    ep->srq = srq.value();
  }
  ep->bounce_bytes =
      ep->dgram ? kUdGrhBytes + g_params.mtu_bytes : sizeof(MsgHdr) + g_params.eager_bytes;
  ep->bounce_mem.assign(ep->bounce_bytes * g_params.rx_bounce, 0);
  ep->bounce_mr =
      dev.reg_mr(ep->dom->pd, ep->bounce_mem.data(), ep->bounce_mem.size(), kAccessLocalWrite)
          .value();
  ep->bounce_ops.resize(g_params.rx_bounce);
  for (std::size_t i = 0; i < g_params.rx_bounce; ++i) {
    Op& b = ep->bounce_ops[i];
    b.kind = OpKind::kBounce;
    b.ep = ep;
    b.stage = ep->bounce_mem.data() + i * ep->bounce_bytes;
    b.sge = {reinterpret_cast<std::uintptr_t>(b.stage),
             static_cast<std::uint32_t>(ep->bounce_bytes), ep->bounce_mr->lkey()};
    repost_bounce(ep, &b);
  }
  // Staging: tx_depth operations plus as many internal FINs.
  const std::size_t slots = 2 * g_params.tx_depth;
  ep->stage_bytes = std::max(sizeof(MsgHdr) + g_params.eager_bytes, g_params.mtu_bytes);
  ep->stage_mem.assign(ep->stage_bytes * slots, 0);
  ep->stage_mr =
      dev.reg_mr(ep->dom->pd, ep->stage_mem.data(), ep->stage_mem.size(), kAccessLocalWrite)
          .value();
  for (std::size_t i = slots; i-- > 0;)
    ep->stage_free.push_back(ep->stage_mem.data() + i * ep->stage_bytes);
  ep->enabled = true;
  return 0;
}

int ep_control(fid* f, int command, void* arg) {
  return guard(-FI_ENOMEM, [&] {
    Ep* ep = as_ep(f);
    switch (command) {
      case FI_ENABLE:
        return ep_enable(ep);
      case FI_GETOPSFLAG: {
        auto* flags = static_cast<std::uint64_t*>(arg);
        if (*flags & FI_TRANSMIT)
          *flags = ep->tx_op_flags | FI_TRANSMIT;
        else if (*flags & FI_RECV)
          *flags = ep->rx_op_flags | FI_RECV;
        else
          return -FI_EINVAL;
        return 0;
      }
      case FI_SETOPSFLAG: {
        const std::uint64_t flags = *static_cast<std::uint64_t*>(arg);
        if (flags & FI_TRANSMIT)
          ep->tx_op_flags = flags & ~FI_TRANSMIT;
        else if (flags & FI_RECV)
          ep->rx_op_flags = flags & ~FI_RECV;
        else
          return -FI_EINVAL;
        return 0;
      }
      default:
        return -FI_ENOSYS;
    }
  });
}

fi_ops g_ep_fi_ops = {sizeof(fi_ops), ep_close, ep_bind,   ep_control,
                      no_ops_open,    no_tostr, no_ops_set};

}  // namespace

int ep_open(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  Domain* d = ofi_container<Domain>(domain);
  if (!info || !info->ep_attr) return -FI_EINVAL;
  const fi_ep_type type = info->ep_attr->type;
  if (type != FI_EP_RDM && type != FI_EP_DGRAM && type != FI_EP_MSG) return -FI_EINVAL;
  const std::uint64_t all_caps = type == FI_EP_DGRAM ? kDgramCaps
                                 : type == FI_EP_MSG ? kMsgCaps
                                                     : kRdmCaps;
  if (info->caps & ~all_caps) return -FI_EINVAL;
  auto ep = std::make_unique<Ep>();
  ep->dom = d;
  ep->info = fi_dupinfo(info);
  if (!ep->info) return -FI_ENOMEM;
  if (!ep->info->caps) ep->info->caps = all_caps;
  ep->dgram = type == FI_EP_DGRAM;
  ep->msg = type == FI_EP_MSG;
  if (ep->msg && info->handle) {
    // Server side: the endpoint answers this connection request when it accepts.
    if (info->handle->fclass != FI_CLASS_CONNREQ) return -FI_EINVAL;
    ep->conn_req = ofi_container<ConnReq>(info->handle);
  }
  if (info->tx_attr) ep->tx_op_flags = info->tx_attr->op_flags;
  if (info->rx_attr) ep->rx_op_flags = info->rx_attr->op_flags;
  std::lock_guard lk(d->mu);
  ep->id = d->next_ep_id++;
  ep->addr.ep_id = ep->id;
  ep->addr.node_id = d->port->local().node_id;
  ep->addr.lid = d->port->local().lid;
  if (ep->dgram) {
    // The UD QP exists from the start, so fi_getname works before fi_enable.
    QpInitAttr ia;
    ia.type = QpType::kUd;
    ia.pd = d->pd;
    ia.send_cq = d->dcq;
    ia.recv_cq = d->dcq;
    ia.caps.max_send_wr =
        static_cast<std::uint32_t>(std::min<std::size_t>(kWrMax, g_params.tx_depth));
    ia.caps.max_recv_wr =
        static_cast<std::uint32_t>(std::min<std::size_t>(kWrMax, g_params.rx_bounce));
    ia.caps.max_send_sge = 1;
    ia.caps.max_recv_sge = 1;
    auto qp = d->dev->create_qp(ia);
    if (!qp) return -FI_ENOMEM;
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qkey = kDgramQkey;
    Errc rc = qp.value()->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey);
    a.qp_state = QpState::kRtr;
    if (rc == Errc::kOk) rc = qp.value()->modify(a, kQpState);
    a.qp_state = QpState::kRts;
    a.sq_psn = random_psn(d);
    if (rc == Errc::kOk) rc = qp.value()->modify(a, kQpState | kQpSqPsn);
    if (rc != Errc::kOk) {
      d->dev->destroy_qp(qp.value());
      return -FI_EINVAL;
    }
    ep->ud_qp = qp.value();
    ep->addr.qpn = ep->ud_qp->qp_num();
    ep->by_qpn[ep->ud_qp->qp_num()] = nullptr;  // so that close drops its completions
  }
  ep->ep.fid.fclass = FI_CLASS_EP;
  ep->ep.fid.context = context;
  ep->ep.fid.ops = &g_ep_fi_ops;
  ep->ep.ops = &g_ep_ops;
  ep->ep.cm = &g_cm_ops;
  ep->ep.msg = &g_msg_ops;
  ep->ep.tagged = &g_tagged_ops;
  ep->ep.rma = &g_rma_ops;
  ep->ep.atomic = &g_atomic_ops;
  d->eps[ep->id] = ep.get();
  ++d->refs;
  *out = &ep.release()->ep;
  return 0;
}

// ---- passive endpoint (FI_EP_MSG listener) ---------------------------------------------------
namespace {

int pep_close(fid* f) {
  return guard(-FI_ENOMEM, [&] {
    Pep* pep = ofi_container<Pep>(f);
    {
      std::lock_guard lk(pep->dom->mu);
      pep->dom->pep = nullptr;
    }
    fi_close(&pep->hidden->fid);
    fi_freeinfo(pep->info);
    delete pep;
    return 0;
  });
}
int pep_bind(fid* f, fid* bf, std::uint64_t) {
  Pep* pep = ofi_container<Pep>(f);
  if (bf->fclass != FI_CLASS_EQ) return -FI_EINVAL;
  pep->eq = ofi_container<Eq>(bf);
  pep->eq->add_source(pep->dom);
  return 0;
}
fi_ops g_pep_fi_ops = {sizeof(fi_ops), pep_close, pep_bind,  no_control,
                       no_ops_open,    no_tostr,  no_ops_set};

ssize_t pep_cancel(fid*, void*) {
  return -FI_ENOENT;
}
int pep_getopt(fid*, int, int, void*, std::size_t*) {
  return -FI_ENOPROTOOPT;
}
int pep_setopt(fid*, int, int, const void*, std::size_t) {
  return -FI_ENOPROTOOPT;
}
fi_ops_ep g_pep_ep_ops = {sizeof(fi_ops_ep), pep_cancel, pep_getopt,      pep_setopt,
                          ep_tx_ctx,         ep_rx_ctx,  ep_rx_size_left, ep_rx_size_left};

int pep_getname(fid* f, void* addr, std::size_t* addrlen) {
  Pep* pep = ofi_container<Pep>(f);
  const bool small = *addrlen < sizeof(EpAddr);
  if (addr) std::memcpy(addr, &pep->addr, std::min(*addrlen, sizeof(EpAddr)));
  *addrlen = sizeof(EpAddr);
  return small ? -FI_ETOOSMALL : 0;
}
fi_ops_cm g_pep_cm_ops = {sizeof(fi_ops_cm),
                          cm_setname,
                          pep_getname,
                          enosys<int, fid_ep*, void*, std::size_t*>,
                          enosys<int, fid_ep*, const void*, const void*, std::size_t>,
                          cm_listen,
                          enosys<int, fid_ep*, const void*, std::size_t>,
                          cm_reject,
                          enosys<int, fid_ep*, std::uint64_t>,
                          cm_join};

}  // namespace

int pep_open(fid_fabric* fabric, fi_info* info, fid_pep** out, void* context) {
  if (!info || !info->ep_attr || info->ep_attr->type != FI_EP_MSG) return -FI_EINVAL;
  auto pep = std::make_unique<Pep>();
  pep->fabric = ofi_container<Fabric>(fabric);
  pep->info = fi_dupinfo(info);
  if (!pep->info) return -FI_ENOMEM;
  const int rc = domain_open(fabric, info, &pep->hidden, nullptr);
  if (rc != 0) {
    fi_freeinfo(pep->info);
    return rc;
  }
  pep->dom = ofi_container<Domain>(pep->hidden);
  {
    std::lock_guard lk(pep->dom->mu);
    pep->id = pep->dom->next_ep_id++;
    pep->dom->pep = pep.get();
  }
  pep->addr.ep_id = pep->id;
  pep->addr.node_id = pep->dom->port->local().node_id;
  pep->addr.lid = pep->dom->port->local().lid;
  pep->pep.fid.fclass = FI_CLASS_PEP;
  pep->pep.fid.context = context;
  pep->pep.fid.ops = &g_pep_fi_ops;
  pep->pep.ops = &g_pep_ep_ops;
  pep->pep.cm = &g_pep_cm_ops;
  *out = &pep.release()->pep;
  return 0;
}

// A client's connection request (under the hidden domain's lock, from its progress): an
// FI_CONNREQ event whose info names the client (dest_addr) and carries the request as handle.
void pep_on_ctrl(Pep* pep, const NodeAddr& src, std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(CtrlMsg)) return;
  CtrlMsg m;
  std::memcpy(&m, bytes.data(), sizeof m);
  if (m.type != CtrlType::kCmReq) return;
  EpAddr client;
  client.ep_id = m.src_ep;
  client.node_id = src.node_id;
  client.lid = src.lid;
  if (!pep->listening || !pep->eq) {
    send_ctrl(pep->dom, src, CtrlMsg{CtrlType::kCmRej, m.src_ep, pep->id, 0, 0});
    return;
  }
  fi_info* info = fi_dupinfo(pep->info);
  if (!info) return;
  auto* cr = new ConnReq;
  cr->fid.fclass = FI_CLASS_CONNREQ;
  cr->client = client;
  cr->pep = pep;
  info->handle = &cr->fid;
  std::free(info->dest_addr);
  info->dest_addr = std::malloc(sizeof(EpAddr));
  if (info->dest_addr) {
    std::memcpy(info->dest_addr, &client, sizeof client);
    info->dest_addrlen = sizeof client;
  } else {
    info->dest_addrlen = 0;
  }
  fi_eq_cm_entry e{};
  e.fid = &pep->pep.fid;
  e.info = info;
  pep->eq->push(FI_CONNREQ, &e, sizeof e, false);
}

}  // namespace weft::ofi
