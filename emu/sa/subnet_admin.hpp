// emu/sa/subnet_admin.hpp — the Subnet Administrator (IBA 15.4) that runs beside the SM on its
// port, sans-IO: SubnAdmGet and SubnAdmGetTable of PathRecord, NodeRecord and PortInfoRecord
// (and Get ClassPortInfo), answered from SaTables with the query's ComponentMask applied; a
// GetTableResp goes out as an RMPP transfer (cm::RmppSender), one per (requester LID, TID).
//
// PathRecord (15.2.5.16): source by SLID or SGID (default: the requester), destination by DLID
// or DGID (one is required, else ERR_REQ_INSUFFICIENT_COMPONENTS). The path is found by walking
// the switches' LFTs from the source port; MTU is the smallest NeighborMTU and Rate the slowest
// link (PortInfo width x speed) along it; SL 0, P_Key 0xFFFF, PacketLifeTime from the config;
// Reversible when the LFTs also lead back. MTU / Rate / PacketLifeTime selectors, SL and P_Key
// filter the answer. NodeRecord: one per CA port and one per switch. PortInfoRecord: one per
// port (switch ports 0..N under the switch's LID).
// A component-mask bit this SA does not evaluate is refused (ERR_REQ_INVALID) rather than
// ignored, so a query never gets more than it asked for.
// Errors are MAD statuses: unknown attribute 0x0C (method/attribute unsupported), Set/other
// methods 0x08, SA codes per Table 190 in bits 14:8 (SaStatus).
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <weft/types.hpp>

#include "emu/sa/sa_tables.hpp"
#include "src/cm/gsi.hpp"
#include "src/cm/inform.hpp"
#include "src/cm/rmpp.hpp"
#include "src/wire/sa.hpp"

namespace weft::sa {

struct SaConfig {
  std::uint8_t port = 1;
  std::uint8_t packet_life_time = 8;  // PathRecord PacketLifeTime: 4.096 us * 2^8 ~ 1 ms
  std::uint8_t resp_time_value = 12;  // ClassPortInfo RespTimeValue
  cm::RmppConfig rmpp{};
  std::uint32_t transfers_max = 256;     // RMPP answers in flight; more get ERR_NO_RESOURCES
  TimeNs report_timeout_ns = 2'000'000;  // a Report not answered by a ReportResp is resent
  int report_retries = 3;
  std::size_t subscriptions_max = 4096;  // more get ERR_NO_RESOURCES
  // The SA's SM_Key (15.2.1.2, the SA header): a request carrying another key is untrusted,
  // and PortInfoRecords reach it with M_Key 0 (as OpenSM does), so that only a trusted client
  // (the SM's tools) learns the ports' M_Keys. A query that selects on M_Key (component 3)
  // from an untrusted requester gets ERR_REQ_INVALID.
  std::uint64_t sm_key = 0;
};

struct SaStats {
  std::uint64_t requests = 0, answers = 0, errors = 0, ignored_mads = 0;
  std::uint64_t rmpp_done = 0, rmpp_failed = 0, rmpp_segments = 0;
  std::uint64_t reports_sent = 0, reports_resent = 0, reports_answered = 0, reports_expired = 0;
};

// Query evaluation on its own (what on_mad answers with), for tests and tools.
struct SaAnswer {
  wire::SaStatus status = wire::SaStatus::kOk;
  std::uint16_t mad_status = 0;  // non-SA status (unsupported attribute/method), else 0
  std::uint16_t attr_offset = 0;
  std::vector<std::uint8_t> records;  // packed, attr_offset * 8 apart
  std::size_t count = 0;
};
SaAnswer evaluate(const SaTables& t, const SaConfig& cfg, std::uint16_t attr_id,
                  std::uint64_t comp_mask, std::span<const std::uint8_t, wire::kSaDataBytes> tmpl,
                  std::uint16_t requester_lid);

class SubnetAdmin {
 public:
  explicit SubnetAdmin(SaConfig cfg = {}) : cfg_(cfg) {}
  void set_tables(SaTables t) { tables_ = std::move(t); }
  const SaTables& tables() const { return tables_; }

  // An SA-class MAD for the SA: a request (Get/GetTable) or an RMPP ACK/STOP/ABORT.
  void on_mad(const cm::GsiMad& in, TimeNs now);
  bool poll_mad(TimeNs now, cm::GsiMad& out);
  TimeNs next_deadline() const;
  void on_deadline(TimeNs now);
  std::size_t transfers() const { return senders_.size(); }
  // Multicast groups (MCMemberRecord, 15.2.5.17): SubnAdmSet joins (creates the group, with an
  // MLID from 0xC000 up and, for an all-zero MGID, an MGID of the SA's; Q_Key and P_Key are
  // required to create), SubnAdmDelete leaves (JoinState bits; the last member ends the group),
  // Get/GetTable list one record per member (filters: MGID, MLID, PortGID, JoinState). Every
  // change of a group's members is handed to on_group_change (empty list: the group is gone);
  // ManagedSubnet passes it to the SM, which programs the switches' MFTs.
  std::function<void(std::uint16_t mlid, std::vector<std::uint64_t> port_guids)> on_group_change;
  std::size_t multicast_groups() const { return mc_.size(); }

  // Event forwarding (13.4.8.3, 15.2.5.12): a SubnAdmSet of an InformInfo with Subscribe 1
  // records (requester LID, InformInfo) -- the same record again changes nothing; with
  // Subscribe 0 it removes the matching subscription (none: ERR_REQ_INVALID). Both are answered
  // by a GetResp with the InformInfo. notify() sends a SubnAdmReport (attribute Notice, 80
  // bytes) to every subscriber whose InformInfo matches, resent every report_timeout_ns until
  // its ReportResp (same TID) or report_retries resends. ManagedSubnet feeds it the SM's traps
  // (128 from the switches) and traps 64 / 65 (a port in / out of service) the SM produces.
  void notify(const cm::SaNotice& n, TimeNs now);
  std::size_t subscriptions() const { return subs_.size(); }
  std::size_t reports_pending() const { return reports_.size(); }

  // ServiceRecords registered (SubnAdmSet) and not yet deleted or past their lease, at `now`.
  std::size_t services(TimeNs now);
  const SaStats& stats() const { return stats_; }

 private:
  void answer_error(const cm::GsiMad& in, const wire::SaMad& req, std::uint16_t status);
  static void hide_m_keys(SaAnswer& a);
  void reap();
  // ServiceRecord (15.2.5.14): Set registers (ServiceID and ServiceGID required, the GID a
  // port of the subnet; one record per ServiceID, GID and P_Key, replaced on a new Set), Delete
  // removes what the mask matches, Get/GetTable filter on ID, GID, P_Key, Key and Name. A lease
  // (seconds; 0xFFFFFFFF = none) ends the record.
  struct Service {
    wire::ServiceRecord rec;
    TimeNs expires = kNoDeadline;
  };
  void expire(TimeNs now);
  SaAnswer service_query(std::uint64_t mask, const wire::ServiceRecord& q, TimeNs now,
                         std::vector<std::size_t>* matched = nullptr);
  void service_update(const cm::GsiMad& in, const wire::SaMad& req, TimeNs now);
  std::vector<Service> services_;
  struct McGroup {
    wire::McMemberRecord rec;                          // the group's fields, PortGID 0
    std::map<std::uint64_t, std::uint8_t> join_state;  // member port GUID -> JoinState
  };
  SaAnswer mc_query(std::uint64_t mask, const wire::McMemberRecord& q) const;
  void mc_update(const cm::GsiMad& in, const wire::SaMad& req);
  void mc_changed(const McGroup& g);
  std::map<std::array<std::uint8_t, 16>, McGroup> mc_;  // by MGID
  void inform_update(const cm::GsiMad& in, const wire::SaMad& req);
  struct Subscription {
    std::uint16_t lid;
    cm::InformInfo info;  // Subscribe cleared, so equal subscriptions encode equal
    std::array<std::uint8_t, cm::kInformInfoBytes> key;
  };
  std::vector<Subscription> subs_;
  struct PendingReport {
    cm::GsiMad mad;
    int resends = 0;
    TimeNs deadline = kNoDeadline;
  };
  std::map<std::pair<std::uint16_t, std::uint64_t>, PendingReport> reports_;  // (LID, TID)
  std::uint64_t report_tid_ = 0x5245'0000'0000'0001ull;                       // 'RE'
  SaConfig cfg_;
  SaTables tables_;
  std::map<std::pair<std::uint16_t, std::uint64_t>, std::unique_ptr<cm::RmppSender>> senders_;
  std::deque<cm::GsiMad> out_;
  SaStats stats_;
};

}  // namespace weft::sa
