// cm/sa_client.hpp — the client side of Subnet Administration (IBA 15.4): SubnAdmGet and
// SubnAdmGetTable queries to the SA at the SM's LID, with retries, and RMPP reassembly of
// multi-segment GetTableResp answers (RmppReceiver, ACKs sent back). Sans-IO: on_mad/poll_mad,
// next_deadline/on_deadline with the caller's `now`; results come out of poll_result().
//
// Errors: query() returns kInvalidState without an SM LID and kQueueFull above queries_max
// in flight. A query that gets no answer after retries_max resends ends with timed_out; an SA
// error status (e.g. kNoRecords) is reported in SaResult::status.
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include <weft/types.hpp>
#include <weft/verbs.hpp>

#include "src/cm/gsi.hpp"
#include "src/cm/inform.hpp"
#include "src/cm/rmpp.hpp"
#include "src/wire/sa.hpp"

namespace weft::cm {

struct SaClientConfig {
  std::uint8_t port = 1;
  std::uint16_t sm_lid = 0;  // where the SA is (PortInfo:MasterSMLID)
  std::uint64_t sm_key = 0;
  TimeNs timeout_ns = 2'000'000;  // per attempt, until the first answer segment
  int retries_max = 4;
  std::uint32_t queries_max = 64;
  std::uint32_t tid_high = 0x5341;  // upper 32 bits of TIDs ("SA"): tells clients apart
  RmppConfig rmpp{};
};

struct SaQuery {
  wire::SaAttr attr = wire::SaAttr::kPathRecord;
  bool table = true;  // GetTable (RMPP answer, any number of records) or Get (one record)
  std::uint64_t comp_mask = 0;
  std::vector<std::uint8_t> record;  // the template record, encoded (<= 200 bytes)
  // 0: Get or GetTable by `table`; else this method (SubnAdmSet 0x02, SubnAdmDelete 0x15),
  // answered by one GetResp / DeleteResp record.
  std::uint8_t method = 0;
};

struct SaResult {
  std::uint64_t id = 0;  // the query's TID
  wire::SaAttr attr = wire::SaAttr::kPathRecord;
  bool timed_out = false;
  bool rmpp_failed = false;
  wire::SaStatus status = wire::SaStatus::kOk;
  std::uint16_t mad_status = 0;
  std::uint16_t attr_offset = 0;  // record stride in 8-byte words
  std::vector<std::uint8_t> data;
  bool ok() const { return !timed_out && !rmpp_failed && mad_status == 0; }
  std::size_t record_count(std::size_t record_bytes) const;
  // Record i (record_bytes long) or an empty span.
  std::span<const std::uint8_t> record(std::size_t i, std::size_t record_bytes) const;
};

// Decoded records of a result (empty when it holds none of that kind).
std::vector<wire::PathRecord> path_records(const SaResult& r);
std::vector<wire::NodeRecord> node_records(const SaResult& r);
std::vector<wire::PortInfoRecord> port_info_records(const SaResult& r);
std::vector<wire::PKeyTableRecord> pkey_table_records(const SaResult& r);
std::vector<wire::ServiceRecord> service_records(const SaResult& r);
std::vector<wire::McMemberRecord> mcmember_records(const SaResult& r);
// Get/GetTable (method 0), or SubnAdmSet (join) / SubnAdmDelete (leave) of an MCMemberRecord.
SaQuery mcmember_query(const wire::McMemberRecord& tmpl, std::uint64_t comp_mask, bool table = true,
                       std::uint8_t method = 0);

// Queries built from records.
SaQuery path_query(std::uint16_t slid, std::uint16_t dlid, bool table = true);
SaQuery node_query(const wire::NodeRecord& tmpl, std::uint64_t comp_mask, bool table = true);
SaQuery port_info_query(const wire::PortInfoRecord& tmpl, std::uint64_t comp_mask,
                        bool table = true);
// Get/GetTable (method 0), or SubnAdmSet (register) / SubnAdmDelete of a ServiceRecord.
SaQuery service_query(const wire::ServiceRecord& tmpl, std::uint64_t comp_mask, bool table = true,
                      std::uint8_t method = 0);
SaQuery pkey_table_query(const wire::PKeyTableRecord& tmpl, std::uint64_t comp_mask,
                         bool table = true);

// SubnAdmSet of an InformInfo (13.4.8.3): subscribe (v.subscribe) to the notices it names, or
// unsubscribe. The SA answers one GetResp record (the InformInfo) or an error status.
SaQuery inform_query(const InformInfo& v);

struct SaClientStats {
  std::uint64_t queries = 0, resends = 0, timeouts = 0, answers = 0, ignored_mads = 0;
  std::uint64_t reports = 0, reports_repeated = 0;  // SubnAdmReport received (new / resent)
};

class SaClient {
 public:
  explicit SaClient(SaClientConfig cfg) : cfg_(cfg) {}
  void set_sm_lid(std::uint16_t lid) { cfg_.sm_lid = lid; }
  Result<std::uint64_t, Errc> query(const SaQuery& q, TimeNs now);
  // An SA-class MAD that reached this port's QP1. Others are counted as ignored.
  void on_mad(const GsiMad& in, TimeNs now);
  bool poll_mad(TimeNs now, GsiMad& out);
  TimeNs next_deadline() const;
  void on_deadline(TimeNs now);
  bool poll_result(SaResult& out);
  // Notices the SA forwarded (SubnAdmReport, 15.2.5.12): each is answered with a
  // SubnAdmReportResp at once; one the SA sent again (same TID: our answer was lost) is
  // answered again and not delivered twice.
  bool poll_report(SaNotice& out);
  std::size_t in_flight() const { return pending_.size(); }
  const SaClientStats& stats() const { return stats_; }

 private:
  struct Pending {
    SaQuery query;
    std::array<std::uint8_t, wire::kMadBytes> mad{};
    int retries = 0;
    TimeNs deadline = kNoDeadline;
    std::optional<RmppReceiver> rmpp;
  };
  void finish(std::uint64_t tid, SaResult r);
  SaClientConfig cfg_;
  std::uint32_t next_tid_ = 1;
  std::map<std::uint64_t, Pending> pending_;
  std::deque<GsiMad> out_;
  std::deque<SaResult> results_;
  std::deque<SaNotice> reports_;
  static constexpr std::size_t kReportsRemembered = 64;
  std::deque<std::pair<std::uint16_t, std::uint64_t>> report_tids_;  // (SA LID, TID)
  // Finished RMPP transfers (TID, last segment), to re-ACK a segment resent after a lost ACK.
  static constexpr std::size_t kDoneRemembered = 64;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> done_;
  SaClientStats stats_;
};

}  // namespace weft::cm
