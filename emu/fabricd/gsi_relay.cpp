// emu/fabricd/gsi_relay.cpp — QP1 relay and SA of the fabric daemon (see gsi_relay.hpp).
#include "emu/fabricd/gsi_relay.hpp"

#include <algorithm>

#include "emu/sa/sa_tables.hpp"
#include "src/cm/inform.hpp"
#include "src/wire/gmp.hpp"

namespace weft::fabricd {
namespace {
enum : sim::EventKind { kEvDeadline = 1, kEvLoopback = 2 };
constexpr TimeNs kLoopbackNs = 1000;  // a MAD to the HCA's own LID (as ManagedSubnet)
}  // namespace

GsiRelay::GsiRelay(fabric::Fabric& fabric, std::vector<topo::NodeId> hcas, sa::SaConfig sa,
                   ToClient to_client)
    : fabric_(fabric), hcas_(std::move(hcas)), to_client_(std::move(to_client)), sa_(sa) {
  comp_ = fabric_.sim().add_component(*this, "gsi-relay");
  for (std::size_t h = 0; h < hcas_.size(); ++h)
    fabric_.hca(hcas_[h]).set_gsi_agent(
        [this, h](std::uint8_t port, std::uint16_t slid, std::span<const std::uint8_t> mad) {
          on_gsi(h, port, slid, mad);
        });
}

GsiRelay::~GsiRelay() {
  for (topo::NodeId n : hcas_) fabric_.hca(n).set_gsi_agent({});
  fabric_.sim().cancel(timer_);
}

void GsiRelay::set_sa_node(topo::NodeId n) {
  sa_node_ = n;
  sa_hca_ = SIZE_MAX;
  for (std::size_t h = 0; h < hcas_.size(); ++h)
    if (hcas_[h] == n) sa_hca_ = h;
  tables_built_ns_ = kNoDeadline;
}

void GsiRelay::on_gsi(std::size_t hca, std::uint8_t port, std::uint16_t slid,
                      std::span<const std::uint8_t> mad) {
  stats_.from_fabric++;
  cm::GsiMad in;
  in.lid = slid;
  in.port = port;
  std::copy_n(mad.begin(), std::min(mad.size(), in.mad.size()), in.mad.begin());
  dispatch(hca, in);
}

void GsiRelay::dispatch(std::size_t hca, const cm::GsiMad& in) {
  const std::uint8_t cls = in.mad[1], method = in.mad[3];
  // Requests and ReportResps go to the SA; responses and Reports to the port's client.
  const bool to_sa = cls == wire::kMgmtClassSa &&
                     (method == cm::kSaMethodReportResp ||
                      (!(method & wire::kMethodResponseBit) && method != cm::kSaMethodReport));
  if (to_sa && hca == sa_hca_) {
    const TimeNs now = fabric_.sim().now();
    if (tables_built_ns_ == kNoDeadline || now >= tables_built_ns_ + tables_max_age_ns) {
      sa_.set_tables(sa::build_tables(
          fabric_.topology(),
          [&](topo::NodeId n) -> const sma::NodeState& { return fabric_.node(n).state(); }));
      tables_built_ns_ = now;
    }
    stats_.to_sa++;
    sa_.on_mad(in, now);
    pump_sa();
    return;
  }
  if (to_client_(hca, in))
    stats_.to_clients++;
  else
    stats_.unattached_dropped++;
}

void GsiRelay::from_client(std::size_t hca, const cm::GsiMad& out) {
  stats_.from_clients++;
  send(hca, out);
}

void GsiRelay::send(std::size_t hca, const cm::GsiMad& out) {
  const topo::NodeId n = hcas_[hca];
  if (out.lid == fabric_.lid(n, 1)) {  // to ourselves: no wire
    stats_.loopback++;
    loopback_.emplace_back(hca, out);
    fabric_.sim().post_in(kLoopbackNs, comp_, kEvLoopback);
    return;
  }
  if (fabric_.send_mad(n, out.lid, out.mad, /*smp=*/false))
    stats_.to_fabric++;
  else
    stats_.send_failed++;
}

void GsiRelay::pump_sa() {
  if (sa_hca_ == SIZE_MAX) return;
  const TimeNs now = fabric_.sim().now();
  cm::GsiMad out;
  while (sa_.poll_mad(now, out)) send(sa_hca_, out);
  arm();
}

void GsiRelay::arm() {
  sim::Simulator& sim = fabric_.sim();
  TimeNs t = sa_.next_deadline();
  if (t == kNoDeadline) {
    sim.cancel(timer_);
    armed_ns_ = kNoDeadline;
    return;
  }
  t = std::max(t, sim.now());
  if (t == armed_ns_ && sim.pending(timer_)) return;
  armed_ns_ = t;
  if (!sim.reschedule(timer_, t)) timer_ = sim.schedule_at(t, comp_, kEvDeadline);
}

void GsiRelay::on_event(sim::Simulator& sim, const sim::Event& ev) {
  if (ev.kind == kEvLoopback) {
    if (loopback_.empty()) return;
    auto [hca, m] = loopback_.front();
    loopback_.pop_front();
    m.lid = fabric_.lid(hcas_[hca], 1);  // it came from our own port
    dispatch(hca, m);
    return;
  }
  if (ev.kind == kEvDeadline) {
    armed_ns_ = kNoDeadline;
    sa_.on_deadline(sim.now());
    pump_sa();
  }
}

}  // namespace weft::fabricd
