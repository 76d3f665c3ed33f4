// emu/sma/pma.cpp — PMA attribute handlers over PortState::counters (IBA 16.1.3.5 PortCounters,
// 16.1.4.11 PortCountersExtended, 13.4.8.1 ClassPortInfo). Thread-safety: none.
#include "emu/sma/pma.hpp"

#include <algorithm>

#include "src/base/assert.hpp"
#include "src/wire/mad_attrs.hpp"

namespace weft::sma {
namespace {

using wire::MadMethod;
using wire::MadStatus;
using wire::PmaAttr;

constexpr std::uint16_t st(MadStatus s) {
  return static_cast<std::uint16_t>(s);
}
constexpr std::uint8_t method(MadMethod m) {
  return static_cast<std::uint8_t>(m);
}
constexpr std::uint8_t kPmaClassVersion = 1;
// PortCounters data byte 18 is CounterSelect2; its bit 0 selects PortXmitWait.
constexpr std::size_t kCounterSelect2Offset = 18;

// PortCounters CounterSelect bits (16.1.3.5).
enum : std::uint16_t {
  kSelSymbolError = 1u << 0,
  kSelLinkErrorRecovery = 1u << 1,
  kSelLinkDowned = 1u << 2,
  kSelRcvErrors = 1u << 3,
  kSelRcvRemotePhysicalErrors = 1u << 4,
  kSelRcvSwitchRelayErrors = 1u << 5,
  kSelXmitDiscards = 1u << 6,
  kSelXmitConstraintErrors = 1u << 7,
  kSelRcvConstraintErrors = 1u << 8,
  kSelLocalLinkIntegrity = 1u << 9,
  kSelExcessiveBufferOverrun = 1u << 10,
  kSelVl15Dropped = 1u << 11,
  kSelXmitData = 1u << 12,
  kSelRcvData = 1u << 13,
  kSelXmitPkts = 1u << 14,
  kSelRcvPkts = 1u << 15,
};
// PortCountersExtended CounterSelect bits (16.1.4.11).
enum : std::uint16_t {
  kSelExtXmitData = 1u << 0,
  kSelExtRcvData = 1u << 1,
  kSelExtXmitPkts = 1u << 2,
  kSelExtRcvPkts = 1u << 3,
  kSelExtUniXmit = 1u << 4,
  kSelExtUniRcv = 1u << 5,
  kSelExtMultiXmit = 1u << 6,
  kSelExtMultiRcv = 1u << 7,
};

void clear_counters(PortCounters& c, std::uint16_t sel, std::uint8_t sel2) {
  if (sel & kSelSymbolError) c.symbol_error_counter = 0;
  if (sel & kSelLinkErrorRecovery) c.link_error_recovery_counter = 0;
  if (sel & kSelLinkDowned) c.link_downed_counter = 0;
  if (sel & kSelRcvErrors) c.port_rcv_errors = 0;
  if (sel & kSelRcvRemotePhysicalErrors) c.port_rcv_remote_physical_errors = 0;
  if (sel & kSelRcvSwitchRelayErrors) c.port_rcv_switch_relay_errors = 0;
  if (sel & kSelXmitDiscards) c.port_xmit_discards = 0;
  if (sel & kSelXmitConstraintErrors) c.port_xmit_constraint_errors = 0;
  if (sel & kSelRcvConstraintErrors) c.port_rcv_constraint_errors = 0;
  if (sel & kSelLocalLinkIntegrity) c.local_link_integrity_errors = 0;
  if (sel & kSelExcessiveBufferOverrun) c.excessive_buffer_overrun_errors = 0;
  if (sel & kSelVl15Dropped) c.vl15_dropped = 0;
  if (sel & kSelXmitData) c.port_xmit_data = 0;
  if (sel & kSelRcvData) c.port_rcv_data = 0;
  if (sel & kSelXmitPkts) c.port_xmit_pkts = 0;
  if (sel & kSelRcvPkts) c.port_rcv_pkts = 0;
  if (sel2 & 1u) c.port_xmit_wait = 0;
}

void clear_counters_ext(PortCounters& c, std::uint16_t sel) {
  if (sel & kSelExtXmitData) c.port_xmit_data_ext = 0;
  if (sel & kSelExtRcvData) c.port_rcv_data_ext = 0;
  if (sel & kSelExtXmitPkts) c.port_xmit_pkts_ext = 0;
  if (sel & kSelExtRcvPkts) c.port_rcv_pkts_ext = 0;
  if (sel & kSelExtUniXmit) c.port_unicast_xmit_pkts = 0;
  if (sel & kSelExtUniRcv) c.port_unicast_rcv_pkts = 0;
  if (sel & kSelExtMultiXmit) c.port_multicast_xmit_pkts = 0;
  if (sel & kSelExtMultiRcv) c.port_multicast_rcv_pkts = 0;
}

// Adds one port's counters into a PortCounters record, saturating at each field's width.
void accumulate(wire::PortCounters& w, const PortCounters& c) {
  using S = PortCounters;
  S::sat_add(w.symbol_error_counter, c.symbol_error_counter);
  S::sat_add(w.link_error_recovery_counter, c.link_error_recovery_counter);
  S::sat_add(w.link_downed_counter, c.link_downed_counter);
  S::sat_add(w.port_rcv_errors, c.port_rcv_errors);
  S::sat_add(w.port_rcv_remote_physical_errors, c.port_rcv_remote_physical_errors);
  S::sat_add(w.port_rcv_switch_relay_errors, c.port_rcv_switch_relay_errors);
  S::sat_add(w.port_xmit_discards, c.port_xmit_discards);
  S::sat_add(w.port_xmit_constraint_errors, c.port_xmit_constraint_errors);
  S::sat_add(w.port_rcv_constraint_errors, c.port_rcv_constraint_errors);
  S::sat_add(w.local_link_integrity_errors, c.local_link_integrity_errors, 4);
  S::sat_add(w.excessive_buffer_overrun_errors, c.excessive_buffer_overrun_errors, 4);
  S::sat_add(w.vl15_dropped, c.vl15_dropped);
  S::sat_add(w.port_xmit_data, c.port_xmit_data);
  S::sat_add(w.port_rcv_data, c.port_rcv_data);
  S::sat_add(w.port_xmit_pkts, c.port_xmit_pkts);
  S::sat_add(w.port_rcv_pkts, c.port_rcv_pkts);
  S::sat_add(w.port_xmit_wait, c.port_xmit_wait);
}

void accumulate_ext(wire::PortCountersExtended& w, const PortCounters& c) {
  using S = PortCounters;
  S::sat_add(w.port_xmit_data, c.port_xmit_data_ext);
  S::sat_add(w.port_rcv_data, c.port_rcv_data_ext);
  S::sat_add(w.port_xmit_pkts, c.port_xmit_pkts_ext);
  S::sat_add(w.port_rcv_pkts, c.port_rcv_pkts_ext);
  S::sat_add(w.port_unicast_xmit_pkts, c.port_unicast_xmit_pkts);
  S::sat_add(w.port_unicast_rcv_pkts, c.port_unicast_rcv_pkts);
  S::sat_add(w.port_multicast_xmit_pkts, c.port_multicast_xmit_pkts);
  S::sat_add(w.port_multicast_rcv_pkts, c.port_multicast_rcv_pkts);
}

// The ports PortSelect names: [first, last], or false if it names none.
bool select_ports(const NodeState& n, std::uint8_t sel, std::uint8_t& first, std::uint8_t& last) {
  if (sel == kPmaAllPorts) {
    if (!n.is_switch() || n.num_ports == 0) return false;
    first = 1;
    last = n.num_ports;
    return true;
  }
  if (sel > n.num_ports || (!n.is_switch() && sel == 0)) return false;
  first = last = sel;
  return true;
}

std::uint16_t class_port_info(NodeState& n, bool set, wire::PmaData data) {
  if (set) return st(MadStatus::kUnsupportedMethodAttr);
  wire::ClassPortInfo v;
  v.capability_mask = kPmaCapExtendedWidth | kPmaCapXmitWait;
  if (n.is_switch()) v.capability_mask |= kPmaCapAllPortSelect;
  v.resp_time_value = kPmaRespTimeValue;
  wire::encode(v, data);
  return 0;
}

std::uint16_t port_counters(NodeState& n, bool set, wire::PmaData data) {
  const wire::PortCounters req = wire::decode_port_counters(data);
  const std::uint8_t sel2 = data[kCounterSelect2Offset];
  std::uint8_t first = 0, last = 0;
  if (!select_ports(n, req.port_select, first, last)) return st(MadStatus::kInvalidField);
  if (set)
    for (unsigned p = first; p <= last; ++p)
      clear_counters(n.ports[p].counters, req.counter_select, sel2);
  wire::PortCounters out;
  out.port_select = req.port_select;
  out.counter_select = req.counter_select;
  for (unsigned p = first; p <= last; ++p) accumulate(out, n.ports[p].counters);
  wire::encode(out, data);
  data[kCounterSelect2Offset] = sel2;
  return 0;
}

std::uint16_t port_counters_ext(NodeState& n, bool set, wire::PmaData data) {
  const wire::PortCountersExtended req = wire::decode_port_counters_ext(data);
  std::uint8_t first = 0, last = 0;
  if (!select_ports(n, req.port_select, first, last)) return st(MadStatus::kInvalidField);
  if (set)
    for (unsigned p = first; p <= last; ++p)
      clear_counters_ext(n.ports[p].counters, req.counter_select);
  wire::PortCountersExtended out;
  out.port_select = req.port_select;
  out.counter_select = req.counter_select;
  for (unsigned p = first; p <= last; ++p) accumulate_ext(out, n.ports[p].counters);
  wire::encode(out, data);
  return 0;
}

MadReply drop(NodeState& n, DropReason why) {
  ++n.stats.pma_dropped;
  MadReply r;
  r.reason = why;
  return r;
}

}  // namespace

MadReply handle_pma(NodeState& node, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                    const SmpContext& ctx) {
  WEFT_ASSERT(node.ports.size() == std::size_t{node.num_ports} + 1);
  WEFT_ASSERT(in_port <= node.num_ports);
  auto m = wire::decode_pma(mad);
  if (!m) {
    switch (m.error()) {
      case wire::MadError::kTruncated:
        return drop(node, DropReason::kTruncated);
      case wire::MadError::kBadBaseVersion:
        return drop(node, DropReason::kBadBaseVersion);
      default:
        return drop(node, DropReason::kBadClass);
    }
  }
  if (m->hdr.method & wire::kMethodResponseBit) return drop(node, DropReason::kNotRequest);
  const bool set = m->hdr.method == method(MadMethod::kSet);
  std::uint16_t status = 0;
  if (m->hdr.class_version != kPmaClassVersion) {
    status = st(MadStatus::kBadVersion);
  } else if (!set && m->hdr.method != method(MadMethod::kGet)) {
    status = st(MadStatus::kUnsupportedMethod);
  } else {
    switch (static_cast<PmaAttr>(m->hdr.attr_id)) {
      case PmaAttr::kClassPortInfo:
        status = class_port_info(node, set, m->data);
        break;
      case PmaAttr::kPortCounters:
        status = port_counters(node, set, m->data);
        break;
      case PmaAttr::kPortCountersExtended:
        status = port_counters_ext(node, set, m->data);
        break;
      default:
        status = st(MadStatus::kUnsupportedMethodAttr);
        break;
    }
  }
  m->hdr.method = method(MadMethod::kGetResp);
  m->hdr.status = status;
  MadReply r;
  wire::encode_pma(*m, r.mad);
  r.action = SmpAction::kRouteByLid;
  r.is_response = true;
  r.status = status;
  r.out_port = in_port;
  r.dlid = ctx.lrh_slid;
  ++node.stats.pma_handled;
  return r;
}

}  // namespace weft::sma
