// coll/live/fabric_mesh.cpp — see fabric_mesh.hpp.
#include "src/coll/live/fabric_mesh.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/coll/live/oob_mesh.hpp"
#include "src/coll/verbs_transport.hpp"
#include "src/io/clock.hpp"
#include "src/io/direct_node.hpp"
#include "src/io/fabric_attach.hpp"

namespace weft::coll::live {
namespace {

constexpr std::uint32_t kFirstPsn = 0x100;

// What a rank tells a peer per lane: enough to reach its QP through the fabric and to write into
// the inbox it keeps for us.
struct LaneInfo {
  std::uint32_t qpn, psn;
  std::uint64_t inbox_addr;
  std::uint32_t rkey;
  std::uint16_t lid, reserved;
};
static_assert(sizeof(LaneInfo) == 24, "LaneInfo crosses the socket as bytes");

// RESET -> INIT with the recovery mode, which only INIT and RTR take (io::connect_rc's
// INIT -> INIT then keeps it).
Errc set_recovery(QueuePair* qp, RecoveryMode mode) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.recovery = mode;
  return qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpRecoveryMode);
}

class FabricMesh final : public LiveMesh {
 public:
  explicit FabricMesh(const LiveOptions& o) : LiveMesh(o) {}
  ~FabricMesh() override {
    // QPs, MRs and the CQ go before the Device (FabricAttach owns it, and the Driver).
    transport_ = nullptr;
    verbs_.reset();
    attach_.reset();
  }

  static Result<std::unique_ptr<LiveMesh>, std::string> create(const LiveOptions& o);

  std::string describe() const override {
    return "fabric " + name_ + " (HCA " + std::to_string(attach_->hca()) + ", LID " +
           std::to_string(attach_->lid()) + (zero_copy_ ? ", zero copy toward the daemon)" : ")");
  }
  DeviceCounters counters() const override { return attach_->device().counters(); }
  // The HCA keeps answering while we wait, as a hardware RC NIC does whatever its application
  // does: a peer still in its last collective (its final ACK from us lost on the fabric) resends,
  // and without an answer its retries end in RETRY_EXC_ERR while we wait here for it. With 1 %
  // dropped on a link that failed ~1 in 20 4-rank bench runs (8 timeouts in a row on one QP).
  bool barrier(TimeNs timeout_ns) override {
    return oob_->barrier(timeout_ns, [this](TimeNs slice_ns) {
      driver_->run_until([] { return false; }, slice_ns);
    });
  }

 private:
  std::optional<std::string> lost(bool cheap) const override {
    if (attach_->medium().peer_dead()) return "the fabric daemon of " + name_ + " exited";
    if (cheap) return std::nullopt;
    const int p = oob_->hung_up_peer();
    if (p >= 0) return "rank " + std::to_string(p) + " exited";
    return std::nullopt;
  }

  std::string name_;
  std::unique_ptr<io::FabricAttach> attach_;
  std::unique_ptr<OobMesh> oob_;
  std::unique_ptr<VerbsTransport> verbs_;
};

}  // namespace

Result<std::unique_ptr<LiveMesh>, std::string> create_fabric_mesh(const LiveOptions& o) {
  return FabricMesh::create(o);
}

Result<std::unique_ptr<LiveMesh>, std::string> FabricMesh::create(const LiveOptions& o) {
  auto m = std::make_unique<FabricMesh>(o);
  m->name_ = o.fabric;
  if (m->name_.empty())
    if (const char* env = std::getenv("WEFT_FABRIC")) m->name_ = env;
  if (m->name_.empty()) return std::string("no fabric to attach to: give --fabric or WEFT_FABRIC");

  // 1. Our HCA: its Device, the medium to the daemon and the LID the subnet manager gave.
  io::FabricAttachOptions ao;
  ao.hca = o.hca;
  ao.timeout_ns = o.setup_timeout_ns;
  ao.driver = o.driver;
  ao.seed = static_cast<std::uint64_t>(o.rank) + 1;
  ao.zero_copy = o.zero_copy;
  auto at = io::FabricAttach::connect(m->name_, ao);
  if (!at)
    return "cannot attach to fabric " + m->name_ + ": " + std::string(io::to_string(at.error())) +
           (at.error() == io::IoError::kProtocol ? " (no free HCA, or that HCA is taken?)" : "");
  m->attach_ = std::move(at).value();
  m->driver_ = &m->attach_->driver();
  m->zero_copy_ = m->attach_->zero_copy_tx();

  // 2. The out-of-band mesh; every rank must agree on the transport's shape.
  const std::uint64_t shape = std::uint64_t{o.slot_bytes} << 32 | std::uint64_t{o.slots} << 16 |
                              static_cast<std::uint64_t>(o.lanes);
  auto oob =
      OobMesh::create("coll/" + o.job + "/fabric/", o.rank, o.size, shape, o.setup_timeout_ns);
  if (!oob) return oob.error();
  m->oob_ = std::move(oob).value();

  // 3. One transport on our Device, a QP per (peer, lane); the exchange; RTS toward each LID.
  Device& dev = m->attach_->device();
  auto pd = dev.alloc_pd();
  if (!pd) return std::string("alloc_pd failed");
  const VerbsTransportConfig vc{.rank = o.rank,
                                .size = o.size,
                                .lanes = o.lanes,
                                .slots = o.slots,
                                .slot_bytes = o.slot_bytes};
  auto t = VerbsTransport::create(dev, *pd, vc);
  if (!t) return std::string("cannot create the transport (too many ranks x lanes x slots?)");
  m->verbs_ = std::move(t).value();
  m->transport_ = m->verbs_.get();
  VerbsTransport& vt = *m->verbs_;
  const auto lanes = static_cast<std::size_t>(o.lanes);
  std::vector<LaneInfo> info(lanes);
  for (int p = 0; p < o.size; ++p) {
    if (p == o.rank) continue;
    for (int l = 0; l < o.lanes; ++l) {
      auto qp = vt.create_qp(p, l);
      if (!qp) return std::string("create_qp failed");
      info[static_cast<std::size_t>(l)] = {(*qp)->qp_num(), kFirstPsn,         vt.inbox_addr(p, l),
                                           vt.inbox_rkey(), m->attach_->lid(), 0};
    }
    if (!m->oob_->send(p, info.data(), info.size() * sizeof(LaneInfo)))
      return "lost rank " + std::to_string(p) + " during the exchange";
  }
  io::RcOptions rc;
  rc.timeout = o.rc_timeout;
  for (int p = 0; p < o.size; ++p) {
    if (p == o.rank) continue;
    if (!m->oob_->recv(p, info.data(), info.size() * sizeof(LaneInfo), o.setup_timeout_ns))
      return "no queue pairs from rank " + std::to_string(p);
    for (int l = 0; l < o.lanes; ++l) {
      const LaneInfo& li = info[static_cast<std::size_t>(l)];
      if (set_recovery(vt.qp(p, l), o.recovery) != Errc::kOk ||
          io::connect_rc(vt.qp(p, l), io::RcPeer{li.lid, li.qpn, li.psn}, kFirstPsn, rc) !=
              Errc::kOk ||
          vt.connect(p, l, li.inbox_addr, li.rkey) != Errc::kOk)
        return "cannot connect the queue pairs to rank " + std::to_string(p) + " (LID " +
               std::to_string(li.lid) + ")";
    }
  }
  // 4. Ready: every rank's receives are posted before anyone writes.
  if (!m->oob_->barrier(o.setup_timeout_ns)) return std::string("a peer left during the setup");
  return std::unique_ptr<LiveMesh>(std::move(m));
}

}  // namespace weft::coll::live
