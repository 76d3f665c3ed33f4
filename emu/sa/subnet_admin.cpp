// emu/sa/subnet_admin.cpp — SA query evaluation (IBA 15.2.5, 15.4) and the MAD side of the SA.
// See subnet_admin.hpp.
// Thread-safety: none; one owner.
#include "emu/sa/subnet_admin.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/wire/gmp.hpp"

namespace weft::sa {
namespace {

namespace pc = wire::path_comp;
namespace nc = wire::node_comp;
namespace ic = wire::portinfo_comp;

constexpr int kHopsMax = 64;  // IBA: a directed route has at most 63 hops; LFT walks likewise

double link_gbps(const wire::PortInfo& p) {
  double lanes = 0;
  switch (p.link_width_active) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      lanes = 4;
      break;
  }
  double lane = 0;
  switch (p.link_speed_active) {
    case 1:
      lane = 2.5;
      break;
    case 2:
      lane = 5;
      break;
    case 4:
      lane = 10;
      break;
    default:
      lane = 2.5;
      break;
  }
  return lanes * lane;
}

struct Walk {
  bool ok = false;
  std::uint8_t mtu = 5;
  double gbps = std::numeric_limits<double>::infinity();
  int hops = 0;
};

// Follows the LFTs from `src` toward `dlid`, which belongs to `dst`.
Walk walk(const SaTables& t, SaPortEnd src, std::uint16_t dlid, SaPortEnd dst) {
  Walk w;
  SaPortEnd cur = src;
  const auto same = [&](SaPortEnd a) {
    return a.node == dst.node && (t.nodes[a.node].is_switch() || a.port == dst.port);
  };
  if (same(cur)) {
    const SaNode& n = t.nodes[cur.node];
    const auto& pi = n.ports[static_cast<std::size_t>(cur.port)];
    w.mtu = n.is_switch() ? pi.mtu_cap : pi.neighbor_mtu;
    w.gbps = link_gbps(pi);
    w.ok = true;
    return w;
  }
  for (int step = 0; step < kHopsMax; ++step) {
    const SaNode& n = t.nodes[cur.node];
    int out = 0;
    if (!n.is_switch()) {
      if (step != 0) return w;  // a CA in the middle: not a path
      out = cur.port;
    } else {
      if (dlid >= n.lft.size()) return w;
      out = n.lft[dlid];
      if (out == 0 || out > n.info.num_ports) return w;
    }
    const wire::PortInfo& pi = n.ports[static_cast<std::size_t>(out)];
    if (pi.port_state != wire::PortState::kActive) return w;
    const SaPortEnd peer = n.peers[static_cast<std::size_t>(out)];
    if (peer.node == topo::kNoNode) return w;
    w.mtu = std::min(w.mtu, pi.neighbor_mtu);
    w.gbps = std::min(w.gbps, link_gbps(pi));
    w.hops++;
    if (same(peer)) {
      w.ok = true;
      return w;
    }
    cur = peer;
  }
  return w;
}

bool selected(bool has_value, bool has_selector, wire::Selector sel, double have, double want) {
  if (!has_value) return true;
  switch (has_selector ? sel : wire::Selector::kExactly) {
    case wire::Selector::kGreater:
      return have > want;
    case wire::Selector::kLess:
      return have < want;
    case wire::Selector::kExactly:
      return have == want;
    case wire::Selector::kLargest:
      return true;
  }
  return false;
}

std::array<std::uint8_t, 16> gid_of(const SaTables& t, SaPortEnd e) {
  std::array<std::uint8_t, 16> g{};
  const SaNode& n = t.nodes[e.node];
  const std::size_t p = n.is_switch() ? 0 : static_cast<std::size_t>(e.port);
  const std::uint64_t prefix = n.ports[p].gid_prefix, guid = n.port_guids[p];
  for (int i = 0; i < 8; ++i) {
    g[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(prefix >> (56 - 8 * i));
    g[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
  }
  return g;
}

std::optional<SaPortEnd> by_gid(const SaTables& t, const std::array<std::uint8_t, 16>& gid) {
  std::uint64_t guid = 0;
  for (int i = 8; i < 16; ++i) guid = guid << 8 | gid[static_cast<std::size_t>(i)];
  auto it = t.by_port_guid.find(guid);
  if (it == t.by_port_guid.end()) return std::nullopt;
  return it->second;
}

template <std::size_t N, class Rec>
void append(SaAnswer& a, const Rec& r) {
  const std::size_t stride = std::size_t{a.attr_offset} * 8;
  const std::size_t off = a.count * stride;
  a.records.resize(off + stride);
  wire::encode(r, std::span<std::uint8_t, N>(a.records.data() + off, N));
  a.count++;
}

void trim(SaAnswer& a, std::size_t record_bytes) {
  // The last record needs no padding after it.
  if (a.count > 0) a.records.resize((a.count - 1) * a.attr_offset * 8u + record_bytes);
}

SaAnswer paths(const SaTables& t, const SaConfig& cfg, std::uint64_t m, const wire::PathRecord& q,
               std::uint16_t requester_lid) {
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kPathRecordBytes);
  constexpr std::uint64_t kAllowed =
      pc::kServiceId | pc::kDgid | pc::kSgid | pc::kDlid | pc::kSlid | pc::kRawTraffic |
      pc::kFlowLabel | pc::kHopLimit | pc::kTclass | pc::kReversible | pc::kNumbPath | pc::kPkey |
      pc::kSl | pc::kMtuSelector | pc::kMtu | pc::kRateSelector | pc::kRate |
      pc::kPacketLifeTimeSelector | pc::kPacketLifeTime | pc::kPreference;
  if ((m & ~kAllowed) != 0 || ((m & pc::kRawTraffic) && q.raw_traffic)) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  if (!(m & (pc::kDlid | pc::kDgid))) {
    a.status = wire::SaStatus::kInsufficientComponents;
    return a;
  }
  std::optional<SaPortEnd> src, dst;
  std::uint16_t slid = 0, dlid = 0;
  if (m & pc::kSlid) {
    src = t.find_lid(q.slid);
    slid = q.slid;
  } else if (m & pc::kSgid) {
    src = by_gid(t, q.sgid);
    if (src) slid = t.lid_of(*src);
  } else {
    src = t.find_lid(requester_lid);
    slid = requester_lid;
  }
  if (m & pc::kDlid) {
    dst = t.find_lid(q.dlid);
    dlid = q.dlid;
  } else {
    dst = by_gid(t, q.dgid);
    if (dst) dlid = t.lid_of(*dst);
  }
  if ((m & pc::kSgid) && !src) a.status = wire::SaStatus::kInvalidGid;
  if ((m & pc::kDgid) && !(m & pc::kDlid) && !dst) a.status = wire::SaStatus::kInvalidGid;
  if (a.status != wire::SaStatus::kOk) return a;
  if (!src || !dst || slid == 0 || dlid == 0) {
    a.status = wire::SaStatus::kNoRecords;
    return a;
  }
  const Walk fwd = walk(t, *src, dlid, *dst);
  if (!fwd.ok) {
    a.status = wire::SaStatus::kNoRecords;
    return a;
  }
  const bool reversible = walk(t, *dst, slid, *src).ok;
  wire::PathRecord r;
  r.service_id = (m & pc::kServiceId) ? q.service_id : 0;
  r.dgid = gid_of(t, *dst);
  r.sgid = gid_of(t, *src);
  r.dlid = dlid;
  r.slid = slid;
  r.flow_label = (m & pc::kFlowLabel) ? q.flow_label : 0;
  r.hop_limit = (m & pc::kHopLimit) ? q.hop_limit : 0;
  r.tclass = (m & pc::kTclass) ? q.tclass : 0;
  r.reversible = reversible;
  r.pkey = 0xFFFF;
  r.sl = 0;
  r.mtu_selector = wire::Selector::kExactly;
  r.mtu = fwd.mtu;
  r.rate_selector = wire::Selector::kExactly;
  r.rate = wire::rate_code_of_gbps(fwd.gbps);
  r.packet_life_time_selector = wire::Selector::kExactly;
  r.packet_life_time = cfg.packet_life_time;
  const bool ok = (!(m & pc::kReversible) || !q.reversible || reversible) &&
                  (!(m & pc::kPkey) || (q.pkey & 0x7FFF) == 0x7FFF) &&
                  (!(m & pc::kSl) || q.sl == r.sl) &&
                  selected(m & pc::kMtu, m & pc::kMtuSelector, q.mtu_selector, r.mtu, q.mtu) &&
                  selected(m & pc::kRate, m & pc::kRateSelector, q.rate_selector, fwd.gbps,
                           wire::gbps_of_rate_code(q.rate)) &&
                  selected(m & pc::kPacketLifeTime, m & pc::kPacketLifeTimeSelector,
                           q.packet_life_time_selector, r.packet_life_time, q.packet_life_time);
  if (!ok) {
    a.status = wire::SaStatus::kNoRecords;
    return a;
  }
  append<wire::kPathRecordBytes>(a, r);
  trim(a, wire::kPathRecordBytes);
  return a;
}

SaAnswer nodes(const SaTables& t, std::uint64_t m, const wire::NodeRecord& q) {
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kNodeRecordBytes);
  constexpr std::uint64_t kAllowed = nc::kLid | nc::kNodeType | nc::kNumPorts |
                                     nc::kSystemImageGuid | nc::kNodeGuid | nc::kPortGuid |
                                     nc::kDeviceId | nc::kLocalPortNum | nc::kVendorId |
                                     nc::kNodeDescription | nc::kBaseVersion | nc::kClassVersion;
  if ((m & ~kAllowed) != 0) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  const wire::NodeInfo& qi = q.node_info;
  for (std::size_t id = 0; id < t.nodes.size(); ++id) {
    const SaNode& n = t.nodes[id];
    const int first = n.is_switch() ? 0 : 1;
    const int last = n.is_switch() ? 0 : n.info.num_ports;
    for (int p = first; p <= last; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      wire::NodeRecord r;
      r.lid = n.ports[pi].lid;
      if (r.lid == 0) continue;  // not configured: the SA knows no record for it
      r.node_info = n.info;
      r.node_info.port_guid = n.port_guids[pi];
      r.node_info.local_port_num = static_cast<std::uint8_t>(p);
      r.description = n.description;
      const wire::NodeInfo& ri = r.node_info;
      const bool match =
          (!(m & nc::kLid) || q.lid == r.lid) &&
          (!(m & nc::kBaseVersion) || qi.base_version == ri.base_version) &&
          (!(m & nc::kClassVersion) || qi.class_version == ri.class_version) &&
          (!(m & nc::kNodeType) || qi.node_type == ri.node_type) &&
          (!(m & nc::kNumPorts) || qi.num_ports == ri.num_ports) &&
          (!(m & nc::kSystemImageGuid) || qi.system_image_guid == ri.system_image_guid) &&
          (!(m & nc::kNodeGuid) || qi.node_guid == ri.node_guid) &&
          (!(m & nc::kPortGuid) || qi.port_guid == ri.port_guid) &&
          (!(m & nc::kDeviceId) || qi.device_id == ri.device_id) &&
          (!(m & nc::kLocalPortNum) || qi.local_port_num == ri.local_port_num) &&
          (!(m & nc::kVendorId) || qi.vendor_id == ri.vendor_id) &&
          (!(m & nc::kNodeDescription) || q.description.text == r.description.text);
      if (match) append<wire::kNodeRecordBytes>(a, r);
    }
  }
  trim(a, wire::kNodeRecordBytes);
  return a;
}

SaAnswer port_infos(const SaTables& t, std::uint64_t m, const wire::PortInfoRecord& q) {
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kPortInfoRecordBytes);
  constexpr std::uint64_t kAllowed =
      ic::kEndportLid | ic::kPortNum | ic::kOptions | ic::kLid | ic::kCapabilityMask;
  if ((m & ~kAllowed) != 0) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  for (std::size_t id = 0; id < t.nodes.size(); ++id) {
    const SaNode& n = t.nodes[id];
    const int first = n.is_switch() ? 0 : 1;
    for (int p = first; p <= n.info.num_ports; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      wire::PortInfoRecord r;
      r.endport_lid = n.ports[n.is_switch() ? 0 : pi].lid;
      if (r.endport_lid == 0) continue;
      r.port_num = static_cast<std::uint8_t>(p);
      r.port_info = n.ports[pi];
      const bool match =
          (!(m & ic::kEndportLid) || q.endport_lid == r.endport_lid) &&
          (!(m & ic::kPortNum) || q.port_num == r.port_num) &&
          (!(m & ic::kLid) || q.port_info.lid == r.port_info.lid) &&
          // CapabilityMask matches records with at least the requested bits (as OpenSM does).
          (!(m & ic::kCapabilityMask) ||
           (r.port_info.capability_mask & q.port_info.capability_mask) ==
               q.port_info.capability_mask);
      if (match) append<wire::kPortInfoRecordBytes>(a, r);
    }
  }
  trim(a, wire::kPortInfoRecordBytes);
  return a;
}

// P_KeyTableRecord (15.2.5.11): one per (end port, block of 32); a switch's ports 0..N all
// under its port-0 LID (as OpenSM answers). LID, BlockNum and PortNum filter.
SaAnswer pkey_tables(const SaTables& t, std::uint64_t m, const wire::PKeyTableRecord& q) {
  namespace kc = wire::pkey_comp;
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kPKeyTableRecordBytes);
  if ((m & ~(kc::kLid | kc::kBlockNum | kc::kPortNum)) != 0) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  for (std::size_t id = 0; id < t.nodes.size(); ++id) {
    const SaNode& n = t.nodes[id];
    for (int p = n.is_switch() ? 0 : 1; p <= n.info.num_ports; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      const std::uint16_t lid = n.ports[n.is_switch() ? 0 : pi].lid;
      if (lid == 0 || pi >= n.pkeys.size()) continue;
      if ((m & kc::kLid) && q.lid != lid) continue;
      if ((m & kc::kPortNum) && q.port_num != p) continue;
      const std::vector<std::uint16_t>& keys = n.pkeys[pi];
      for (std::size_t b = 0; b * 32 < keys.size(); ++b) {
        if ((m & kc::kBlockNum) && q.block_num != b) continue;
        wire::PKeyTableRecord r;
        r.lid = lid;
        r.block_num = static_cast<std::uint16_t>(b);
        r.port_num = static_cast<std::uint8_t>(p);
        for (std::size_t k = 0; k < 32 && b * 32 + k < keys.size(); ++k)
          r.pkeys[k] = keys[b * 32 + k];
        append<wire::kPKeyTableRecordBytes>(a, r);
      }
    }
  }
  trim(a, wire::kPKeyTableRecordBytes);
  return a;
}

}  // namespace

SaAnswer evaluate(const SaTables& t, const SaConfig& cfg, std::uint16_t attr_id,
                  std::uint64_t comp_mask, std::span<const std::uint8_t, wire::kSaDataBytes> tmpl,
                  std::uint16_t requester_lid) {
  switch (static_cast<wire::SaAttr>(attr_id)) {
    case wire::SaAttr::kPathRecord:
      return paths(t, cfg, comp_mask,
                   wire::decode_path_record(tmpl.first<wire::kPathRecordBytes>()), requester_lid);
    case wire::SaAttr::kNodeRecord:
      return nodes(t, comp_mask, wire::decode_node_record(tmpl.first<wire::kNodeRecordBytes>()));
    case wire::SaAttr::kPortInfoRecord:
      return port_infos(t, comp_mask,
                        wire::decode_port_info_record(tmpl.first<wire::kPortInfoRecordBytes>()));
    case wire::SaAttr::kPKeyTableRecord:
      return pkey_tables(t, comp_mask,
                         wire::decode_pkey_table_record(tmpl.first<wire::kPKeyTableRecordBytes>()));
    default: {
      SaAnswer a;
      a.mad_status = static_cast<std::uint16_t>(wire::MadStatus::kUnsupportedMethodAttr);
      return a;
    }
  }
}

void SubnetAdmin::hide_m_keys(SaAnswer& a) {
  const std::size_t stride = std::size_t{a.attr_offset} * 8;
  for (std::size_t i = 0; stride != 0 && i < a.count; ++i) {
    if (i * stride + wire::kPortInfoRecordBytes > a.records.size()) break;
    auto rec =
        std::span<std::uint8_t>(a.records).subspan(i * stride).first<wire::kPortInfoRecordBytes>();
    wire::PortInfoRecord r = wire::decode_port_info_record(rec);
    r.port_info.m_key = 0;
    wire::encode(r, rec);
  }
}

void SubnetAdmin::answer_error(const cm::GsiMad& in, const wire::SaMad& req, std::uint16_t status) {
  wire::SaMad r;
  r.hdr = req.hdr;
  r.hdr.method = static_cast<std::uint8_t>(req.hdr.method | wire::kMethodResponseBit);
  r.hdr.status = status;
  r.sm_key = 0;
  r.comp_mask = req.comp_mask;
  r.data = req.data;
  cm::GsiMad g{in.lid, cfg_.port, {}};
  wire::encode_sa(r, g.mad);
  out_.push_back(g);
  stats_.errors++;
}

void SubnetAdmin::on_mad(const cm::GsiMad& in, TimeNs now) {
  auto d = wire::decode_sa(in.mad);
  if (!d) {
    // A request with a class version this SA does not speak gets "bad version" (13.4.7).
    auto h = wire::decode_gmp_header(in.mad, wire::kMgmtClassSa);
    if (h && !(h.value().method & wire::kMethodResponseBit) &&
        h.value().class_version != wire::kSaClassVersion) {
      wire::SaMad req;
      req.hdr = h.value();
      answer_error(in, req, static_cast<std::uint16_t>(wire::MadStatus::kBadVersion));
      return;
    }
    stats_.ignored_mads++;
    return;
  }
  const wire::SaMad& req = d.value();
  if (req.hdr.method == cm::kSaMethodReportResp) {  // a subscriber answered a Report
    if (reports_.erase({in.lid, req.hdr.tid}))
      stats_.reports_answered++;
    else
      stats_.ignored_mads++;
    return;
  }
  if (req.hdr.method & wire::kMethodResponseBit) {
    stats_.ignored_mads++;
    return;
  }
  // RMPP control for one of our transfers (the ACK flips R back: method GetTable).
  if (req.rmpp.active() && req.rmpp.type != wire::RmppType::kData) {
    auto it = senders_.find({in.lid, req.hdr.tid});
    if (it == senders_.end()) {
      stats_.ignored_mads++;
      return;
    }
    it->second->on_rmpp(req.rmpp, now);
    reap();
    return;
  }
  stats_.requests++;
  const auto method = static_cast<wire::GmpMethod>(req.hdr.method);
  if (method == wire::GmpMethod::kGet &&
      req.hdr.attr_id == static_cast<std::uint16_t>(wire::SaAttr::kClassPortInfo)) {
    wire::SaMad r;
    r.hdr = req.hdr;
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetResp);
    r.data[0] = wire::kMadBaseVersion;  // ClassPortInfo (13.4.8.1)
    r.data[1] = wire::kSaClassVersion;
    r.data[7] = cfg_.resp_time_value & 0x1F;
    cm::GsiMad g{in.lid, cfg_.port, {}};
    wire::encode_sa(r, g.mad);
    out_.push_back(g);
    stats_.answers++;
    return;
  }
  const bool mc = req.hdr.attr_id == static_cast<std::uint16_t>(wire::SaAttr::kMcMemberRecord);
  if (mc && (method == wire::GmpMethod::kSet || method == wire::GmpMethod::kDelete)) {
    mc_update(in, req);
    return;
  }
  if (req.hdr.attr_id == cm::kSaAttrInformInfo && method == wire::GmpMethod::kSet) {
    inform_update(in, req);
    return;
  }
  const bool svc = req.hdr.attr_id == static_cast<std::uint16_t>(wire::SaAttr::kServiceRecord);
  if (svc && (method == wire::GmpMethod::kSet || method == wire::GmpMethod::kDelete)) {
    service_update(in, req, now);
    return;
  }
  if (method != wire::GmpMethod::kGet && method != wire::GmpMethod::kGetTable) {
    answer_error(in, req, static_cast<std::uint16_t>(wire::MadStatus::kUnsupportedMethod));
    return;
  }
  if (method == wire::GmpMethod::kGetTable && senders_.count({in.lid, req.hdr.tid})) {
    return;  // a resent request while we answer it: the RMPP sender resends on its own
  }
  SaAnswer a =
      mc ? mc_query(
               req.comp_mask,
               wire::decode_mcmember_record(
                   std::span<const std::uint8_t>(req.data).first<wire::kMcMemberRecordBytes>()))
      : svc ? service_query(
                  req.comp_mask,
                  wire::decode_service_record(
                      std::span<const std::uint8_t>(req.data).first<wire::kServiceRecordBytes>()),
                  now)
            : evaluate(tables_, cfg_, req.hdr.attr_id, req.comp_mask, req.data, in.lid);
  const bool pir = req.hdr.attr_id == static_cast<std::uint16_t>(wire::SaAttr::kPortInfoRecord);
  if (pir && req.sm_key != cfg_.sm_key) {  // untrusted: no M_Keys (15.2.1.2)
    if (req.comp_mask & (std::uint64_t{1} << 3)) {
      answer_error(in, req, wire::mad_status(wire::SaStatus::kReqInvalid));
      return;
    }
    hide_m_keys(a);
  }
  if (a.mad_status != 0) {
    answer_error(in, req, a.mad_status);
    return;
  }
  if (method == wire::GmpMethod::kGet) {
    if (a.status == wire::SaStatus::kOk && a.count == 0) {
      answer_error(in, req, wire::mad_status(wire::SaStatus::kNoRecords));
      return;
    }
    const bool many =
        a.count > 1 && req.hdr.attr_id != static_cast<std::uint16_t>(wire::SaAttr::kPathRecord);
    if (a.status != wire::SaStatus::kOk || many) {
      answer_error(in, req, wire::mad_status(many ? wire::SaStatus::kTooManyRecords : a.status));
      return;
    }
    wire::SaMad r;
    r.hdr = req.hdr;
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetResp);
    r.attr_offset = a.attr_offset;
    r.comp_mask = req.comp_mask;
    const std::size_t n = std::min<std::size_t>(a.attr_offset * 8u, a.records.size());
    std::copy_n(a.records.begin(), std::min(n, r.data.size()), r.data.begin());
    cm::GsiMad g{in.lid, cfg_.port, {}};
    wire::encode_sa(r, g.mad);
    out_.push_back(g);
    stats_.answers++;
    return;
  }
  if (a.status != wire::SaStatus::kOk && a.status != wire::SaStatus::kNoRecords) {
    answer_error(in, req, wire::mad_status(a.status));
    return;
  }
  if (senders_.size() >= cfg_.transfers_max) {
    answer_error(in, req, wire::mad_status(wire::SaStatus::kNoResources));
    return;
  }
  // GetTableResp: RMPP even for zero or one record (an empty table is a valid answer).
  wire::SaMad tmpl;
  tmpl.hdr = req.hdr;
  tmpl.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetTableResp);
  tmpl.attr_offset = a.attr_offset;
  tmpl.comp_mask = req.comp_mask;
  std::array<std::uint8_t, wire::kMadBytes> t{};
  wire::encode_sa(tmpl, t);
  senders_[{in.lid, req.hdr.tid}] = std::make_unique<cm::RmppSender>(t, a.records, cfg_.rmpp, now);
  stats_.answers++;
}

SaAnswer SubnetAdmin::mc_query(std::uint64_t m, const wire::McMemberRecord& q) const {
  namespace mc = wire::mcmember_comp;
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kMcMemberRecordBytes);
  if ((m & ~(mc::kMgid | mc::kMlid | mc::kPortGid | mc::kJoinState)) != 0) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  for (const auto& [mgid, g] : mc_) {
    if ((m & mc::kMgid) && q.mgid != mgid) continue;
    if ((m & mc::kMlid) && q.mlid != g.rec.mlid) continue;
    for (const auto& [guid, js] : g.join_state) {
      wire::McMemberRecord r = g.rec;
      r.port_gid = r.mgid;  // overwritten below: prefix and GUID of the member port
      const auto e = tables_.by_port_guid.find(guid);
      if (e == tables_.by_port_guid.end()) continue;
      r.port_gid = gid_of(tables_, e->second);
      r.join_state = js;
      if ((m & mc::kPortGid) && q.port_gid != r.port_gid) continue;
      if ((m & mc::kJoinState) && (js & q.join_state) != q.join_state) continue;
      append<wire::kMcMemberRecordBytes>(a, r);
    }
  }
  trim(a, wire::kMcMemberRecordBytes);
  return a;
}

void SubnetAdmin::mc_changed(const McGroup& g) {
  if (!on_group_change) return;
  std::vector<std::uint64_t> guids;
  for (const auto& [guid, js] : g.join_state) guids.push_back(guid);
  on_group_change(g.rec.mlid, std::move(guids));
}

void SubnetAdmin::mc_update(const cm::GsiMad& in, const wire::SaMad& req) {
  namespace mc = wire::mcmember_comp;
  wire::McMemberRecord q = wire::decode_mcmember_record(
      std::span<const std::uint8_t>(req.data).first<wire::kMcMemberRecordBytes>());
  const std::uint64_t m = req.comp_mask;
  const bool join = req.hdr.method == static_cast<std::uint8_t>(wire::GmpMethod::kSet);
  const auto fail = [&](wire::SaStatus s) { answer_error(in, req, wire::mad_status(s)); };
  if ((m & (mc::kPortGid | mc::kJoinState)) != (mc::kPortGid | mc::kJoinState) ||
      (!join && !(m & mc::kMgid)))
    return fail(wire::SaStatus::kInsufficientComponents);
  if ((q.join_state & 0x7) == 0 || (q.join_state & ~0x7) != 0)
    return fail(wire::SaStatus::kReqInvalid);
  const auto port = by_gid(tables_, q.port_gid);
  if (!port) return fail(wire::SaStatus::kInvalidGid);
  const std::uint64_t guid = tables_.nodes[port->node].port_guids[static_cast<std::size_t>(
      tables_.nodes[port->node].is_switch() ? 0 : port->port)];
  static const std::array<std::uint8_t, 16> kZeroGid{};
  auto it = (m & mc::kMgid) && q.mgid != kZeroGid ? mc_.find(q.mgid) : mc_.end();
  wire::SaMad r;
  r.hdr = req.hdr;
  r.attr_offset = wire::attr_offset_for(wire::kMcMemberRecordBytes);
  r.comp_mask = m;
  if (join) {
    if (it == mc_.end()) {  // create: Q_Key and P_Key are the group's, required
      if ((m & (mc::kQkey | mc::kPkey)) != (mc::kQkey | mc::kPkey))
        return fail(wire::SaStatus::kInsufficientComponents);
      std::uint16_t mlid = 0xC000;
      for (const auto& [g, grp] : mc_) {
        (void)g;
        if (grp.rec.mlid >= mlid) mlid = static_cast<std::uint16_t>(grp.rec.mlid + 1);
      }
      if (mlid == 0xFFFF) return fail(wire::SaStatus::kNoResources);
      McGroup g;
      g.rec = q;
      g.rec.mlid = mlid;
      if (!(m & mc::kMgid) || q.mgid == kZeroGid) {  // the SA's MGID: FF12:A01B::<MLID>
        g.rec.mgid = {0xFF, 0x12, 0xA0, 0x1B};
        g.rec.mgid[14] = static_cast<std::uint8_t>(mlid >> 8);
        g.rec.mgid[15] = static_cast<std::uint8_t>(mlid);
      }
      g.rec.port_gid = {};
      g.rec.join_state = 0;
      g.rec.mtu_selector = wire::Selector::kExactly;
      g.rec.rate_selector = wire::Selector::kExactly;
      g.rec.packet_life_time_selector = wire::Selector::kExactly;
      // MTU and rate every member port can take: the smallest of the HCA ports of the subnet.
      std::uint8_t mtu = 5;
      double gbps = std::numeric_limits<double>::infinity();
      for (const SaNode& n : tables_.nodes) {
        if (n.is_switch()) continue;
        for (std::size_t p = 1; p < n.ports.size(); ++p) {
          if (n.ports[p].lid == 0) continue;
          mtu = std::min(mtu, n.ports[p].neighbor_mtu);
          gbps = std::min(gbps, link_gbps(n.ports[p]));
        }
      }
      g.rec.mtu = mtu;
      g.rec.rate = std::isinf(gbps) ? 0 : wire::rate_code_of_gbps(gbps);
      g.rec.packet_life_time = cfg_.packet_life_time;
      it = mc_.emplace(g.rec.mgid, g).first;
    }
    McGroup& g = it->second;
    g.join_state[guid] |= q.join_state;
    wire::McMemberRecord out = g.rec;
    out.port_gid = q.port_gid;
    out.join_state = g.join_state[guid];
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetResp);
    wire::encode(out, std::span<std::uint8_t>(r.data).first<wire::kMcMemberRecordBytes>());
    mc_changed(g);
  } else {
    if (it == mc_.end()) return fail(wire::SaStatus::kNoRecords);
    McGroup& g = it->second;
    const auto mem = g.join_state.find(guid);
    if (mem == g.join_state.end()) return fail(wire::SaStatus::kNoRecords);
    wire::McMemberRecord out = g.rec;
    out.port_gid = q.port_gid;
    mem->second &= static_cast<std::uint8_t>(~q.join_state);
    out.join_state = mem->second;
    if (mem->second == 0) g.join_state.erase(mem);
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kDeleteResp);
    wire::encode(out, std::span<std::uint8_t>(r.data).first<wire::kMcMemberRecordBytes>());
    mc_changed(g);
    if (g.join_state.empty()) mc_.erase(it);
  }
  cm::GsiMad gm{in.lid, cfg_.port, {}};
  wire::encode_sa(r, gm.mad);
  out_.push_back(gm);
  stats_.answers++;
}

void SubnetAdmin::expire(TimeNs now) {
  std::erase_if(services_, [&](const Service& s) { return s.expires <= now; });
}

std::size_t SubnetAdmin::services(TimeNs now) {
  expire(now);
  return services_.size();
}

SaAnswer SubnetAdmin::service_query(std::uint64_t m, const wire::ServiceRecord& q, TimeNs now,
                                    std::vector<std::size_t>* matched) {
  namespace sc = wire::service_comp;
  expire(now);
  SaAnswer a;
  a.attr_offset = wire::attr_offset_for(wire::kServiceRecordBytes);
  if ((m & ~(sc::kId | sc::kGid | sc::kPkey | sc::kKey | sc::kName)) != 0) {
    a.status = wire::SaStatus::kReqInvalid;
    return a;
  }
  for (std::size_t i = 0; i < services_.size(); ++i) {
    const wire::ServiceRecord& r = services_[i].rec;
    if ((m & sc::kId) && q.service_id != r.service_id) continue;
    if ((m & sc::kGid) && q.gid != r.gid) continue;
    if ((m & sc::kPkey) && q.pkey != r.pkey) continue;
    if ((m & sc::kKey) && q.key != r.key) continue;
    if ((m & sc::kName) && q.name != r.name) continue;
    if (matched) matched->push_back(i);
    append<wire::kServiceRecordBytes>(a, r);
  }
  trim(a, wire::kServiceRecordBytes);
  return a;
}

void SubnetAdmin::service_update(const cm::GsiMad& in, const wire::SaMad& req, TimeNs now) {
  namespace sc = wire::service_comp;
  const wire::ServiceRecord q = wire::decode_service_record(
      std::span<const std::uint8_t>(req.data).first<wire::kServiceRecordBytes>());
  wire::SaMad r;
  r.hdr = req.hdr;
  r.attr_offset = wire::attr_offset_for(wire::kServiceRecordBytes);
  r.comp_mask = req.comp_mask;
  if (req.hdr.method == static_cast<std::uint8_t>(wire::GmpMethod::kSet)) {
    if ((req.comp_mask & (sc::kId | sc::kGid)) != (sc::kId | sc::kGid)) {
      answer_error(in, req, wire::mad_status(wire::SaStatus::kInsufficientComponents));
      return;
    }
    if (!by_gid(tables_, q.gid)) {
      answer_error(in, req, wire::mad_status(wire::SaStatus::kInvalidGid));
      return;
    }
    expire(now);
    std::erase_if(services_, [&](const Service& s) {
      return s.rec.service_id == q.service_id && s.rec.gid == q.gid && s.rec.pkey == q.pkey;
    });
    const TimeNs expires = q.lease == wire::kServiceLeaseInfinite
                               ? kNoDeadline
                               : now + TimeNs{q.lease} * 1'000'000'000;
    services_.push_back(Service{q, expires});
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetResp);
    wire::encode(q, std::span<std::uint8_t>(r.data).first<wire::kServiceRecordBytes>());
  } else {  // Delete
    std::vector<std::size_t> matched;
    const SaAnswer a = service_query(req.comp_mask, q, now, &matched);
    if (a.status != wire::SaStatus::kOk || matched.empty()) {
      answer_error(in, req,
                   wire::mad_status(a.status != wire::SaStatus::kOk ? a.status
                                                                    : wire::SaStatus::kNoRecords));
      return;
    }
    const wire::ServiceRecord first = services_[matched.front()].rec;
    for (auto it = matched.rbegin(); it != matched.rend(); ++it)
      services_.erase(services_.begin() + static_cast<std::ptrdiff_t>(*it));
    r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kDeleteResp);
    wire::encode(first, std::span<std::uint8_t>(r.data).first<wire::kServiceRecordBytes>());
  }
  cm::GsiMad g{in.lid, cfg_.port, {}};
  wire::encode_sa(r, g.mad);
  out_.push_back(g);
  stats_.answers++;
}

void SubnetAdmin::reap() {
  for (auto it = senders_.begin(); it != senders_.end();) {
    const cm::RmppOutcome o = it->second->outcome();
    if (o == cm::RmppOutcome::kInProgress) {
      ++it;
      continue;
    }
    // A failed sender may still owe its ABORT: keep it until poll_mad took it.
    std::array<std::uint8_t, wire::kMadBytes> abort{};
    if (o == cm::RmppOutcome::kFailed && it->second->poll(0, abort)) {
      out_.push_back(cm::GsiMad{it->first.first, cfg_.port, abort});
    }
    (o == cm::RmppOutcome::kDone ? stats_.rmpp_done : stats_.rmpp_failed)++;
    it = senders_.erase(it);
  }
}

void SubnetAdmin::inform_update(const cm::GsiMad& in, const wire::SaMad& req) {
  cm::InformInfo v =
      cm::decode_inform_info(std::span<const std::uint8_t>(req.data).first<cm::kInformInfoBytes>());
  const bool subscribe = v.subscribe;
  v.subscribe = false;
  Subscription sub{in.lid, v, {}};
  cm::encode(v, sub.key);
  auto same = [&](const Subscription& s) { return s.lid == sub.lid && s.key == sub.key; };
  auto it = std::find_if(subs_.begin(), subs_.end(), same);
  if (subscribe) {
    if (it == subs_.end()) {
      if (subs_.size() >= cfg_.subscriptions_max) {
        answer_error(in, req, wire::mad_status(wire::SaStatus::kNoResources));
        return;
      }
      subs_.push_back(sub);
    }
  } else {
    if (it == subs_.end()) {
      answer_error(in, req, wire::mad_status(wire::SaStatus::kReqInvalid));
      return;
    }
    subs_.erase(it);
  }
  wire::SaMad r;
  r.hdr = req.hdr;
  r.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGetResp);
  r.attr_offset = (cm::kInformInfoBytes + 7) / 8;
  r.comp_mask = req.comp_mask;
  std::copy_n(req.data.begin(), cm::kInformInfoBytes, r.data.begin());
  cm::GsiMad g{in.lid, cfg_.port, {}};
  wire::encode_sa(r, g.mad);
  out_.push_back(g);
  stats_.answers++;
}

void SubnetAdmin::notify(const cm::SaNotice& n, TimeNs now) {
  for (const Subscription& s : subs_) {
    if (!cm::inform_matches(s.info, n)) continue;
    wire::SaMad r;
    r.hdr.mgmt_class = wire::kMgmtClassSa;
    r.hdr.class_version = wire::kSaClassVersion;
    r.hdr.method = cm::kSaMethodReport;
    r.hdr.tid = report_tid_++;
    r.hdr.attr_id = cm::kSaAttrNotice;
    r.attr_offset = cm::kSaNoticeBytes / 8;
    cm::encode(n, std::span<std::uint8_t>(r.data).first<cm::kSaNoticeBytes>());
    PendingReport p;
    p.mad = cm::GsiMad{s.lid, cfg_.port, {}};
    wire::encode_sa(r, p.mad.mad);
    p.deadline = now + cfg_.report_timeout_ns;
    out_.push_back(p.mad);
    stats_.reports_sent++;
    reports_.emplace(std::make_pair(s.lid, r.hdr.tid), p);
  }
}

bool SubnetAdmin::poll_mad(TimeNs now, cm::GsiMad& out) {
  if (out_.empty()) {
    for (auto& [key, s] : senders_) {
      cm::GsiMad g{key.first, cfg_.port, {}};
      if (s->poll(now, g.mad)) {
        stats_.rmpp_segments++;
        out_.push_back(g);
        break;
      }
    }
  }
  if (out_.empty()) return false;
  out = out_.front();
  out_.pop_front();
  return true;
}

TimeNs SubnetAdmin::next_deadline() const {
  TimeNs t = kNoDeadline;
  for (const auto& [key, s] : senders_) t = std::min(t, s->next_deadline());
  for (const auto& [key, r] : reports_) t = std::min(t, r.deadline);
  return t;
}

void SubnetAdmin::on_deadline(TimeNs now) {
  for (auto& [key, s] : senders_) {
    if (s->next_deadline() <= now) s->on_deadline(now);
  }
  reap();
  for (auto it = reports_.begin(); it != reports_.end();) {
    PendingReport& r = it->second;
    if (r.deadline > now) {
      ++it;
    } else if (r.resends >= cfg_.report_retries) {
      stats_.reports_expired++;
      it = reports_.erase(it);
    } else {
      ++r.resends;
      r.deadline = now + cfg_.report_timeout_ns;
      out_.push_back(r.mad);
      stats_.reports_resent++;
      ++it;
    }
  }
}

}  // namespace weft::sa
