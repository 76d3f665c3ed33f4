// coll/live/live_mesh.cpp — see live_mesh.hpp.
#include "src/coll/live/live_mesh.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>

#include "src/base/assert.hpp"
#include "src/coll/live/fabric_mesh.hpp"
#include "src/io/clock.hpp"

namespace weft::coll::live {

// ---- MeshTransport -------------------------------------------------------------------------

MeshTransport::MeshTransport(int rank, int size, int lanes, std::uint32_t slots,
                             std::uint32_t slot_bytes)
    : rank_(rank), size_(size), lanes_(lanes), slots_(slots), slot_bytes_(slot_bytes) {
  subs_.resize(static_cast<std::size_t>(size));
}

void MeshTransport::set_peer(int peer, std::unique_ptr<VerbsTransport> t) {
  WEFT_ASSERT(peer != rank_ && t->size() == 2 && t->rank() == local_index(peer) &&
              t->lanes() == lanes_ && t->slots() == slots_ && t->slot_bytes() == slot_bytes_);
  subs_[static_cast<std::size_t>(peer)] = std::move(t);
}

TransportErrc MeshTransport::register_memory(const void* addr, std::size_t bytes) {
  for (std::size_t p = 0; p < subs_.size(); ++p) {
    if (!subs_[p]) continue;
    const TransportErrc e = subs_[p]->register_memory(addr, bytes);
    if (e != TransportErrc::kOk) {
      for (std::size_t q = 0; q < p; ++q)
        if (subs_[q]) subs_[q]->unregister_memory(addr);
      return e;
    }
  }
  return TransportErrc::kOk;
}

void MeshTransport::unregister_memory(const void* addr) {
  for (auto& s : subs_)
    if (s) s->unregister_memory(addr);
}

TransportErrc MeshTransport::post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                                        std::uint32_t slot, std::uint64_t wr_id) {
  return subs_[static_cast<std::size_t>(peer)]->post_write(other(peer), lane, src, bytes, slot,
                                                           wr_id);
}

TransportErrc MeshTransport::post_grant(int peer, int lane, std::uint32_t credits) {
  return subs_[static_cast<std::size_t>(peer)]->post_grant(other(peer), lane, credits);
}

std::size_t MeshTransport::poll(std::span<TransportEvent> out) {
  std::size_t n = 0;
  const std::size_t peers = subs_.size();
  for (std::size_t k = 0; k < peers && n < out.size(); ++k) {
    const std::size_t p = (next_poll_ + k) % peers;
    if (!subs_[p]) continue;
    const std::size_t got = subs_[p]->poll(out.subspan(n));
    for (std::size_t i = n; i < n + got; ++i) out[i].peer = static_cast<int>(p);
    n += got;
  }
  next_poll_ = peers ? (next_poll_ + 1) % peers : 0;
  return n;
}

const std::uint8_t* MeshTransport::inbox(int peer, int lane, std::uint32_t slot) const {
  return subs_[static_cast<std::size_t>(peer)]->inbox(other(peer), lane, slot);
}

// ---- DirectMesh ----------------------------------------------------------------------------

namespace {

constexpr std::uint32_t kHelloMagic = 0x57434c48;  // "WCLH"
constexpr std::uint32_t kReadyMagic = 0x57434c52;  // "WCLR"
constexpr std::uint32_t kFirstPsn = 0x100;

struct Hello {  // the connector's first message
  std::uint32_t magic, rank, size, lanes, slots, slot_bytes;
};
struct LaneInfo {
  std::uint32_t qpn, psn;
  std::uint64_t inbox_addr;
  std::uint32_t rkey, reserved;
};

std::string node_name(const std::string& job, int rank) {
  return "coll/" + job + "/" + std::to_string(rank);
}

template <class T>
bool send_pod(io::DirectNode& n, const T& v) {
  return n.send_oob({reinterpret_cast<const std::uint8_t*>(&v), sizeof v});
}

std::string io_error(std::string_view what, int peer, io::IoError e) {
  return std::string(what) + " rank " + std::to_string(peer) + ": " + std::string(io::to_string(e));
}

// The direct medium: one DirectNode (Device, shared-memory link, out-of-band socket) per peer.
class DirectMesh final : public LiveMesh {
 public:
  explicit DirectMesh(const LiveOptions& o) : LiveMesh(o) {}
  ~DirectMesh() override;
  static Result<std::unique_ptr<LiveMesh>, std::string> create(const LiveOptions& o);

  std::string describe() const override {
    return zero_copy_ ? "direct shared memory (zero copy)" : "direct shared memory";
  }
  DeviceCounters counters() const override;
  bool barrier(TimeNs timeout_ns) override;

 private:
  std::optional<std::string> lost(bool cheap) const override;

  std::vector<std::unique_ptr<io::DirectNode>> nodes_;  // by peer
  std::unique_ptr<MeshTransport> mesh_;
  std::unique_ptr<io::Driver> own_driver_;
};

DirectMesh::~DirectMesh() {
  // QPs and MRs go before the Devices; the Devices leave the shared Driver before they go.
  if (mesh_) mesh_->clear();
  if (own_driver_)
    for (auto& n : nodes_)
      if (n) own_driver_->detach(n->device());
  own_driver_.reset();
  nodes_.clear();
}

Result<std::unique_ptr<LiveMesh>, std::string> DirectMesh::create(const LiveOptions& o) {
  auto m = std::make_unique<DirectMesh>(o);
  const auto un = static_cast<std::size_t>(o.size);
  m->nodes_.resize(un);
  m->mesh_ = std::make_unique<MeshTransport>(o.rank, o.size, o.lanes, o.slots, o.slot_bytes);
  m->transport_ = m->mesh_.get();
  io::DirectOptions dopts;
  dopts.zero_copy = o.zero_copy;
  dopts.timeout_ns = o.setup_timeout_ns;
  dopts.seed = static_cast<std::uint64_t>(o.rank) + 1;
  const Hello mine{kHelloMagic,
                   static_cast<std::uint32_t>(o.rank),
                   static_cast<std::uint32_t>(o.size),
                   static_cast<std::uint32_t>(o.lanes),
                   o.slots,
                   o.slot_bytes};

  // 1. The mesh: bind, connect downwards, accept upwards.
  std::unique_ptr<io::DirectListener> listener;
  if (o.rank + 1 < o.size) {
    auto l = io::DirectListener::bind(node_name(o.job, o.rank));
    if (!l)
      return "cannot bind weft/" + node_name(o.job, o.rank) + ": " +
             std::string(io::to_string(l.error())) + " (another job with the same name?)";
    listener = std::move(*l);
  }
  for (int p = 0; p < o.rank; ++p) {
    auto n = io::DirectNode::connect(node_name(o.job, p), dopts);
    if (!n) return io_error("cannot connect to", p, n.error());
    if (!send_pod(**n, mine)) return "lost rank " + std::to_string(p) + " during the handshake";
    m->nodes_[static_cast<std::size_t>(p)] = std::move(*n);
  }
  for (int k = o.rank + 1; k < o.size; ++k) {
    auto n = listener->accept(dopts);
    if (!n) return io_error("waiting for", k, n.error());
    auto msg = (*n)->recv_oob(o.setup_timeout_ns);
    if (!msg) return io_error("no hello from", k, msg.error());
    Hello h{};
    if (msg->size() != sizeof h) return std::string("bad hello from a peer");
    std::memcpy(&h, msg->data(), sizeof h);
    if (h.magic != kHelloMagic || h.size != mine.size || h.lanes != mine.lanes ||
        h.slots != mine.slots || h.slot_bytes != mine.slot_bytes ||
        static_cast<int>(h.rank) <= o.rank || h.rank >= mine.size || m->nodes_[h.rank] != nullptr)
      return "rank " + std::to_string(h.rank) +
             " disagrees on the job (size, lanes, slots, slot size) or its rank is taken";
    m->nodes_[h.rank] = std::move(*n);
  }
  listener.reset();
  for (auto& n : m->nodes_)
    if (n && (n->zero_copy_rx() || n->zero_copy_tx())) m->zero_copy_ = true;
  // Every peer may pull from us now, not only the last one we met (Yama ptrace_scope 1).
  if (m->zero_copy_) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  // 2. Per peer: a 2-rank transport on that link's Device; QPs cross on the out-of-band socket.
  for (int p = 0; p < o.size; ++p) {
    if (p == o.rank) continue;
    io::DirectNode& n = *m->nodes_[static_cast<std::size_t>(p)];
    auto pd = n.device().alloc_pd();
    if (!pd) return std::string("alloc_pd failed");
    VerbsTransportConfig vc{.rank = m->mesh_->local_index(p),
                            .size = 2,
                            .lanes = o.lanes,
                            .slots = o.slots,
                            .slot_bytes = o.slot_bytes};
    auto t = VerbsTransport::create(n.device(), *pd, vc);
    if (!t) return "cannot create the transport to rank " + std::to_string(p);
    const int other = 1 - vc.rank;
    std::vector<LaneInfo> info(static_cast<std::size_t>(o.lanes));
    for (int l = 0; l < o.lanes; ++l) {
      auto qp = (*t)->create_qp(other, l);
      if (!qp) return std::string("create_qp failed");
      info[static_cast<std::size_t>(l)] = {(*qp)->qp_num(), kFirstPsn, (*t)->inbox_addr(other, l),
                                           (*t)->inbox_rkey(), 0};
    }
    if (!n.send_oob(
            {reinterpret_cast<const std::uint8_t*>(info.data()), info.size() * sizeof(LaneInfo)}))
      return "lost rank " + std::to_string(p);
    m->mesh_->set_peer(p, std::move(*t));
  }
  io::RcOptions rc;
  rc.timeout = o.rc_timeout;
  for (int p = 0; p < o.size; ++p) {
    if (p == o.rank) continue;
    io::DirectNode& n = *m->nodes_[static_cast<std::size_t>(p)];
    auto msg = n.recv_oob(o.setup_timeout_ns);
    if (!msg) return io_error("no queue pairs from", p, msg.error());
    if (msg->size() != static_cast<std::size_t>(o.lanes) * sizeof(LaneInfo))
      return "bad queue pair message from rank " + std::to_string(p);
    VerbsTransport& t = *m->mesh_->peer_transport(p);
    const int other = 1 - m->mesh_->local_index(p);
    for (int l = 0; l < o.lanes; ++l) {
      LaneInfo li{};
      std::memcpy(&li, msg->data() + static_cast<std::size_t>(l) * sizeof li, sizeof li);
      if (io::connect_rc(t.qp(other, l), io::RcPeer{n.peer_lid(), li.qpn, li.psn}, kFirstPsn, rc) !=
              Errc::kOk ||
          t.connect(other, l, li.inbox_addr, li.rkey) != Errc::kOk)
        return "cannot connect the queue pairs to rank " + std::to_string(p);
    }
  }
  // 3. Ready (our receives are posted) both ways on every link; then one Driver for all links.
  if (!m->barrier(o.setup_timeout_ns)) return std::string("a peer left during the setup");
  m->own_driver_ = std::make_unique<io::Driver>(o.driver);
  m->driver_ = m->own_driver_.get();
  for (auto& n : m->nodes_) {
    if (!n) continue;
    n->driver().detach(n->device());
    m->driver_->attach(n->device(), n->medium());
  }
  return std::unique_ptr<LiveMesh>(std::move(m));
}

DeviceCounters DirectMesh::counters() const {
  DeviceCounters t{};
  for (const auto& n : nodes_) {
    if (!n) continue;
    const DeviceCounters& c = n->device().counters();
    t.tx_packets += c.tx_packets;
    t.rx_packets += c.rx_packets;
    t.retransmit_packets += c.retransmit_packets;
    t.timeouts += c.timeouts;
    t.rnr_waits += c.rnr_waits;
    t.rx_dropped_ooo += c.rx_dropped_ooo;
    t.naks_rx_seq += c.naks_rx_seq;
    t.dup_requests += c.dup_requests;
    t.acks_tx += c.acks_tx;
  }
  return t;
}

bool DirectMesh::barrier(TimeNs timeout_ns) {
  const std::uint32_t ready = kReadyMagic;
  for (auto& n : nodes_)
    if (n && !send_pod(*n, ready)) return false;
  for (auto& n : nodes_) {
    if (!n) continue;
    auto msg = n->recv_oob(timeout_ns);
    if (!msg || msg->size() != sizeof ready) return false;
  }
  return true;
}

std::optional<std::string> DirectMesh::lost(bool cheap) const {
  (void)cheap;  // a dead peer's medium saw its pidfd fire: one relaxed load per link
  for (std::size_t p = 0; p < nodes_.size(); ++p)
    if (nodes_[p] && nodes_[p]->medium().peer_dead())
      return "rank " + std::to_string(p) + " exited";
  return std::nullopt;
}

}  // namespace

// ---- LiveMesh ------------------------------------------------------------------------------

std::string_view to_string(LiveMedium m) {
  switch (m) {
    case LiveMedium::kDirect:
      return "direct";
    case LiveMedium::kFabric:
      return "fabric";
  }
  return "?";
}

Result<std::unique_ptr<LiveMesh>, std::string> LiveMesh::create(const LiveOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size || o.lanes < 1 || o.slots < 1 ||
      o.slot_bytes == 0 || o.slot_bytes % 8 != 0)
    return std::string("bad rank, size, lanes or slots");
  return o.medium == LiveMedium::kFabric ? create_fabric_mesh(o) : DirectMesh::create(o);
}

CollState LiveMesh::run(Communicator& comm, const CollArgs& a, TimeNs limit_ns,
                        std::string* error) {
  const CollErrc e = comm.start(a);
  if (e != CollErrc::kOk) {
    if (error) *error = "cannot start: " + std::string(to_string(e));
    return CollState::kFailed;
  }
  CollState st = CollState::kRunning;
  // A rank waiting only to receive from a dead peer has nothing outstanding that could time
  // out: ask the medium (cheaply on every pass, thoroughly between slices).
  std::optional<std::string> gone;
  const TimeNs end = io::monotonic_ns() + limit_ns;
  bool finished = false;
  for (TimeNs now = io::monotonic_ns(); !finished && !gone && now < end; now = io::monotonic_ns()) {
    finished = driver_->run_until(
        [&] {
          st = comm.progress(io::monotonic_ns());
          if (st != CollState::kRunning) return true;
          gone = lost(true);
          return gone.has_value();
        },
        std::min(end - now, kLivenessSliceNs));
    if (!finished && !gone) gone = lost(false);
  }
  if (gone && st == CollState::kRunning) {
    if (error) *error = *gone;
    return CollState::kFailed;
  }
  if (st == CollState::kRunning) {
    if (error) *error = "timed out after " + std::to_string(limit_ns / 1'000'000) + " ms";
    return CollState::kFailed;
  }
  if (st == CollState::kFailed && error) {
    *error = comm.failure() == CollErrc::kTimeout ? "timed out waiting for rank "
                                                  : "the connection to rank ";
    *error += std::to_string(comm.failed_peer());
    if (comm.failure() != CollErrc::kTimeout) *error += " failed";
  }
  return st;
}

}  // namespace weft::coll::live
