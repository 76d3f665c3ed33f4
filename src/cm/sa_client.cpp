// cm/sa_client.cpp — SA queries and their answers (IBA 15.4, 13.6). See sa_client.hpp.
// Thread-safety: none; one owner.
#include "src/cm/sa_client.hpp"

#include <algorithm>

namespace weft::cm {

std::size_t SaResult::record_count(std::size_t record_bytes) const {
  const std::size_t stride = std::size_t{attr_offset} * 8;
  if (stride == 0 || stride < record_bytes) return 0;
  // The last record needs only its own bytes, not the whole stride.
  if (data.size() < record_bytes) return 0;
  return (data.size() - record_bytes) / stride + 1;
}

std::span<const std::uint8_t> SaResult::record(std::size_t i, std::size_t record_bytes) const {
  if (i >= record_count(record_bytes)) return {};
  return std::span<const std::uint8_t>(data).subspan(i * attr_offset * 8, record_bytes);
}

std::vector<wire::PathRecord> path_records(const SaResult& r) {
  std::vector<wire::PathRecord> v;
  if (r.attr != wire::SaAttr::kPathRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kPathRecordBytes); ++i) {
    v.push_back(wire::decode_path_record(
        r.record(i, wire::kPathRecordBytes).first<wire::kPathRecordBytes>()));
  }
  return v;
}

std::vector<wire::NodeRecord> node_records(const SaResult& r) {
  std::vector<wire::NodeRecord> v;
  if (r.attr != wire::SaAttr::kNodeRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kNodeRecordBytes); ++i) {
    v.push_back(wire::decode_node_record(
        r.record(i, wire::kNodeRecordBytes).first<wire::kNodeRecordBytes>()));
  }
  return v;
}

std::vector<wire::PortInfoRecord> port_info_records(const SaResult& r) {
  std::vector<wire::PortInfoRecord> v;
  if (r.attr != wire::SaAttr::kPortInfoRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kPortInfoRecordBytes); ++i) {
    v.push_back(wire::decode_port_info_record(
        r.record(i, wire::kPortInfoRecordBytes).first<wire::kPortInfoRecordBytes>()));
  }
  return v;
}

std::vector<wire::PKeyTableRecord> pkey_table_records(const SaResult& r) {
  std::vector<wire::PKeyTableRecord> v;
  if (r.attr != wire::SaAttr::kPKeyTableRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kPKeyTableRecordBytes); ++i) {
    v.push_back(wire::decode_pkey_table_record(
        r.record(i, wire::kPKeyTableRecordBytes).first<wire::kPKeyTableRecordBytes>()));
  }
  return v;
}

std::vector<wire::ServiceRecord> service_records(const SaResult& r) {
  std::vector<wire::ServiceRecord> v;
  if (r.attr != wire::SaAttr::kServiceRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kServiceRecordBytes); ++i) {
    v.push_back(wire::decode_service_record(
        r.record(i, wire::kServiceRecordBytes).first<wire::kServiceRecordBytes>()));
  }
  return v;
}

SaQuery service_query(const wire::ServiceRecord& tmpl, std::uint64_t comp_mask, bool table,
                      std::uint8_t method) {
  SaQuery q;
  q.attr = wire::SaAttr::kServiceRecord;
  q.table = table;
  q.comp_mask = comp_mask;
  q.method = method;
  q.record.resize(wire::kServiceRecordBytes);
  wire::encode(tmpl, std::span<std::uint8_t, wire::kServiceRecordBytes>(q.record));
  return q;
}

SaQuery inform_query(const InformInfo& v) {
  SaQuery q;
  q.attr = static_cast<wire::SaAttr>(kSaAttrInformInfo);
  q.table = false;
  q.method = static_cast<std::uint8_t>(wire::GmpMethod::kSet);
  q.record.resize(kInformInfoBytes);
  encode(v, std::span<std::uint8_t, kInformInfoBytes>(q.record));
  return q;
}

std::vector<wire::McMemberRecord> mcmember_records(const SaResult& r) {
  std::vector<wire::McMemberRecord> v;
  if (r.attr != wire::SaAttr::kMcMemberRecord) return v;
  for (std::size_t i = 0; i < r.record_count(wire::kMcMemberRecordBytes); ++i) {
    v.push_back(wire::decode_mcmember_record(
        r.record(i, wire::kMcMemberRecordBytes).first<wire::kMcMemberRecordBytes>()));
  }
  return v;
}

SaQuery mcmember_query(const wire::McMemberRecord& tmpl, std::uint64_t comp_mask, bool table,
                       std::uint8_t method) {
  SaQuery q;
  q.attr = wire::SaAttr::kMcMemberRecord;
  q.table = table;
  q.comp_mask = comp_mask;
  q.method = method;
  q.record.resize(wire::kMcMemberRecordBytes);
  wire::encode(tmpl, std::span<std::uint8_t, wire::kMcMemberRecordBytes>(q.record));
  return q;
}

SaQuery pkey_table_query(const wire::PKeyTableRecord& tmpl, std::uint64_t comp_mask, bool table) {
  SaQuery q;
  q.attr = wire::SaAttr::kPKeyTableRecord;
  q.table = table;
  q.comp_mask = comp_mask;
  q.record.resize(wire::kPKeyTableRecordBytes);
  wire::encode(tmpl, std::span<std::uint8_t, wire::kPKeyTableRecordBytes>(q.record));
  return q;
}

SaQuery path_query(std::uint16_t slid, std::uint16_t dlid, bool table) {
  wire::PathRecord pr;
  pr.slid = slid;
  pr.dlid = dlid;
  pr.reversible = true;
  pr.numb_path = 1;
  SaQuery q;
  q.attr = wire::SaAttr::kPathRecord;
  q.table = table;
  q.comp_mask = wire::path_comp::kSlid | wire::path_comp::kDlid | wire::path_comp::kReversible |
                wire::path_comp::kNumbPath;
  q.record.resize(wire::kPathRecordBytes);
  wire::encode(pr, std::span<std::uint8_t, wire::kPathRecordBytes>(q.record));
  return q;
}

SaQuery node_query(const wire::NodeRecord& tmpl, std::uint64_t comp_mask, bool table) {
  SaQuery q;
  q.attr = wire::SaAttr::kNodeRecord;
  q.table = table;
  q.comp_mask = comp_mask;
  q.record.resize(wire::kNodeRecordBytes);
  wire::encode(tmpl, std::span<std::uint8_t, wire::kNodeRecordBytes>(q.record));
  return q;
}

SaQuery port_info_query(const wire::PortInfoRecord& tmpl, std::uint64_t comp_mask, bool table) {
  SaQuery q;
  q.attr = wire::SaAttr::kPortInfoRecord;
  q.table = table;
  q.comp_mask = comp_mask;
  q.record.resize(wire::kPortInfoRecordBytes);
  wire::encode(tmpl, std::span<std::uint8_t, wire::kPortInfoRecordBytes>(q.record));
  return q;
}

Result<std::uint64_t, Errc> SaClient::query(const SaQuery& q, TimeNs now) {
  if (cfg_.sm_lid == 0) return Errc::kInvalidState;
  if (q.record.size() > wire::kSaDataBytes) return Errc::kInvalidArgument;
  if (pending_.size() >= cfg_.queries_max) return Errc::kQueueFull;
  const std::uint64_t tid = std::uint64_t{cfg_.tid_high} << 32 | next_tid_++;
  Pending p;
  p.query = q;
  wire::SaMad m;
  m.hdr.class_version = wire::kSaClassVersion;
  m.hdr.method = q.method != 0 ? q.method
                               : static_cast<std::uint8_t>(q.table ? wire::GmpMethod::kGetTable
                                                                   : wire::GmpMethod::kGet);
  m.hdr.tid = tid;
  m.hdr.attr_id = static_cast<std::uint16_t>(q.attr);
  m.sm_key = cfg_.sm_key;
  m.comp_mask = q.comp_mask;
  std::copy(q.record.begin(), q.record.end(), m.data.begin());
  wire::encode_sa(m, p.mad);
  p.deadline = now + cfg_.timeout_ns;
  out_.push_back(GsiMad{cfg_.sm_lid, cfg_.port, p.mad});
  pending_.emplace(tid, std::move(p));
  stats_.queries++;
  return tid;
}

void SaClient::finish(std::uint64_t tid, SaResult r) {
  r.id = tid;
  results_.push_back(std::move(r));
  pending_.erase(tid);
}

void SaClient::on_mad(const GsiMad& in, TimeNs now) {
  (void)now;
  auto m = wire::decode_sa(in.mad);
  if (m && m.value().hdr.method == kSaMethodReport && m.value().hdr.attr_id == kSaAttrNotice) {
    // ReportResp: the Report echoed with the response method (15.2.5.12).
    GsiMad resp{in.lid, cfg_.port, in.mad};
    resp.mad[3] = kSaMethodReportResp;
    out_.push_back(resp);
    const std::pair<std::uint16_t, std::uint64_t> key{in.lid, m.value().hdr.tid};
    if (std::find(report_tids_.begin(), report_tids_.end(), key) != report_tids_.end()) {
      stats_.reports_repeated++;
      return;
    }
    report_tids_.push_back(key);
    if (report_tids_.size() > kReportsRemembered) report_tids_.pop_front();
    stats_.reports++;
    reports_.push_back(
        decode_sa_notice(std::span<const std::uint8_t>(m.value().data).first<kSaNoticeBytes>()));
    return;
  }
  if (!m || !(m.value().hdr.method & wire::kMethodResponseBit)) {
    stats_.ignored_mads++;
    return;
  }
  const wire::SaMad& sa = m.value();
  auto it = pending_.find(sa.hdr.tid);
  if (it == pending_.end()) {
    // A segment of a finished transfer whose last ACK was lost: ACK the whole transfer again.
    auto d = std::find_if(done_.begin(), done_.end(),
                          [&](const auto& e) { return e.first == sa.hdr.tid; });
    if (d != done_.end() && sa.rmpp.active() && sa.rmpp.type == wire::RmppType::kData) {
      GsiMad ack{in.lid, cfg_.port, {}};
      std::copy_n(in.mad.begin(), kRmppSegmentHeaderBytes, ack.mad.begin());
      ack.mad[3] ^= wire::kMethodResponseBit;
      wire::RmppHeader h;
      h.version = wire::kRmppVersion;
      h.type = wire::RmppType::kAck;
      h.flags = wire::kRmppActive;
      h.data1 = h.data2 = d->second;
      wire::encode_rmpp(h, ack.mad);
      out_.push_back(ack);
      return;
    }
    stats_.ignored_mads++;
    return;
  }
  Pending& p = it->second;
  SaResult r;
  r.attr = p.query.attr;
  r.mad_status = sa.hdr.status;
  r.status = wire::sa_status_of(sa.hdr.status);
  if (!sa.rmpp.active()) {  // a GetResp, or an error answer without RMPP
    stats_.answers++;
    r.attr_offset = sa.attr_offset;
    if (sa.hdr.status == 0) {  // one record: the first AttributeOffset * 8 bytes
      if (r.attr_offset == 0) r.attr_offset = static_cast<std::uint16_t>(sa.data.size() / 8);
      const std::size_t n = std::min<std::size_t>(r.attr_offset * 8u, sa.data.size());
      r.data.assign(sa.data.begin(), sa.data.begin() + static_cast<std::ptrdiff_t>(n));
    }
    finish(sa.hdr.tid, std::move(r));
    return;
  }
  if (sa.rmpp.type != wire::RmppType::kData) {  // STOP/ABORT from the SA
    r.rmpp_failed = true;
    finish(sa.hdr.tid, std::move(r));
    return;
  }
  if (!p.rmpp) p.rmpp.emplace(cfg_.rmpp);
  p.deadline = kNoDeadline;  // the SA is answering; RMPP's own timers run at the sender
  if (p.rmpp->on_segment(in.mad, sa.rmpp)) {
    GsiMad ack{in.lid, cfg_.port, {}};
    p.rmpp->ack(in.mad, ack.mad);
    out_.push_back(ack);
  }
  if (p.rmpp->outcome() == RmppOutcome::kFailed) {
    r.rmpp_failed = true;
    finish(sa.hdr.tid, std::move(r));
  } else if (p.rmpp->outcome() == RmppOutcome::kDone) {
    stats_.answers++;
    auto first = wire::decode_sa(p.rmpp->first());
    r.attr_offset = first ? first.value().attr_offset : 0;
    r.data = p.rmpp->data();
    done_.emplace_back(sa.hdr.tid, sa.rmpp.data1);
    if (done_.size() > kDoneRemembered) done_.pop_front();
    finish(sa.hdr.tid, std::move(r));
  }
}

bool SaClient::poll_mad(TimeNs /*now*/, GsiMad& out) {
  if (out_.empty()) return false;
  out = out_.front();
  out_.pop_front();
  return true;
}

TimeNs SaClient::next_deadline() const {
  TimeNs t = kNoDeadline;
  for (const auto& [tid, p] : pending_) t = std::min(t, p.deadline);
  return t;
}

void SaClient::on_deadline(TimeNs now) {
  std::vector<std::uint64_t> expired;
  for (auto& [tid, p] : pending_) {
    if (p.deadline > now) continue;
    if (++p.retries > cfg_.retries_max) {
      expired.push_back(tid);
      continue;
    }
    stats_.resends++;
    p.deadline = now + cfg_.timeout_ns;
    out_.push_back(GsiMad{cfg_.sm_lid, cfg_.port, p.mad});
  }
  for (std::uint64_t tid : expired) {
    stats_.timeouts++;
    SaResult r;
    r.attr = pending_.at(tid).query.attr;
    r.timed_out = true;
    finish(tid, std::move(r));
  }
}

bool SaClient::poll_report(SaNotice& out) {
  if (reports_.empty()) return false;
  out = reports_.front();
  reports_.pop_front();
  return true;
}

bool SaClient::poll_result(SaResult& out) {
  if (results_.empty()) return false;
  out = std::move(results_.front());
  results_.pop_front();
  return true;
}

}  // namespace weft::cm
