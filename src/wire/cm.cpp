// wire/cm.cpp — CM message layouts (IBA 12.6.5-12.6.11). Offsets are relative to the start of
// the message data (MAD byte 24), as the IBA tables give them.
// Thread-safety: pure functions.
#include "src/wire/cm.hpp"

#include <algorithm>

#include "src/wire/bytes.hpp"

namespace weft::wire {
namespace {

using detail::get16;
using detail::get24;
using detail::get32;
using detail::get64;
using detail::get8;
using detail::put16;
using detail::put24;
using detail::put32;
using detail::put64;
using detail::put8;

using Data = std::span<std::uint8_t>;
using CData = std::span<const std::uint8_t>;

constexpr std::size_t kReqPrimary = 52, kReqAlternate = 96, kReqPrivate = 140;
constexpr std::size_t kPathBytes = 44;
static_assert(kReqAlternate == kReqPrimary + kPathBytes);
static_assert(kReqPrivate + kReqPrivateBytes == kCmDataBytes);
static_assert(36 + kRepPrivateBytes == kCmDataBytes);
static_assert(8 + kRtuPrivateBytes == kCmDataBytes);
static_assert(12 + kRejAriBytes + kRejPrivateBytes == kCmDataBytes);
static_assert(10 + kMraPrivateBytes == kCmDataBytes);
static_assert(12 + kDreqPrivateBytes == kCmDataBytes);
static_assert(8 + kDrepPrivateBytes == kCmDataBytes);

template <std::size_t N>
void put_bytes(Data d, std::size_t off, const std::array<std::uint8_t, N>& a) {
  std::copy(a.begin(), a.end(), d.begin() + static_cast<std::ptrdiff_t>(off));
}
template <std::size_t N>
void get_bytes(CData d, std::size_t off, std::array<std::uint8_t, N>& a) {
  std::copy_n(d.begin() + static_cast<std::ptrdiff_t>(off), N, a.begin());
}

void put_path(Data d, std::size_t o, const CmPath& p) {
  put16(d, o + 0, p.local_lid);
  put16(d, o + 2, p.remote_lid);
  put_bytes(d, o + 4, p.local_gid);
  put_bytes(d, o + 20, p.remote_gid);
  put32(d, o + 36, (p.flow_label & 0xFFFFF) << 12 | (p.packet_rate & 0x3F));
  put8(d, o + 40, p.traffic_class);
  put8(d, o + 41, p.hop_limit);
  put8(d, o + 42, static_cast<unsigned>((p.sl & 0xF) << 4 | (p.subnet_local ? 0x8 : 0)));
  put8(d, o + 43, static_cast<unsigned>((p.local_ack_timeout & 0x1F) << 3));
}

CmPath get_path(CData d, std::size_t o) {
  CmPath p;
  p.local_lid = get16(d, o + 0);
  p.remote_lid = get16(d, o + 2);
  get_bytes(d, o + 4, p.local_gid);
  get_bytes(d, o + 20, p.remote_gid);
  const std::uint32_t w = get32(d, o + 36);
  p.flow_label = w >> 12;
  p.packet_rate = w & 0x3F;
  p.traffic_class = get8(d, o + 40);
  p.hop_limit = get8(d, o + 41);
  p.sl = get8(d, o + 42) >> 4;
  p.subnet_local = (get8(d, o + 42) & 0x8) != 0;
  p.local_ack_timeout = get8(d, o + 43) >> 3;
  return p;
}

void put_msg(Data d, const CmReq& m) {
  put32(d, 0, m.local_comm_id);
  put64(d, 8, m.service_id);
  put64(d, 16, m.local_ca_guid);
  put32(d, 28, m.local_qkey);
  put32(d, 32, (m.local_qpn & 0xFFFFFF) << 8 | m.responder_resources);
  put32(d, 36, (m.local_eecn & 0xFFFFFF) << 8 | m.initiator_depth);
  put32(d, 40,
        (m.remote_eecn & 0xFFFFFF) << 8 | (m.remote_cm_response_timeout & 0x1Fu) << 3 |
            (static_cast<unsigned>(m.transport) & 0x3) << 1 | (m.end_to_end_flow_control ? 1 : 0));
  put32(d, 44,
        (m.starting_psn & 0xFFFFFF) << 8 | (m.local_cm_response_timeout & 0x1Fu) << 3 |
            (m.retry_count & 0x7u));
  put16(d, 48, m.pkey);
  put8(d, 50,
       static_cast<unsigned>((m.path_mtu & 0xF) << 4 | (m.rdc_exists ? 0x8 : 0) |
                             (m.rnr_retry_count & 0x7)));
  put8(d, 51,
       static_cast<unsigned>((m.max_cm_retries & 0xF) << 4 | (m.srq ? 0x8 : 0) |
                             (m.extended_transport & 0x7)));
  put_path(d, kReqPrimary, m.primary);
  put_path(d, kReqAlternate, m.alternate);
  put_bytes(d, kReqPrivate, m.private_data);
}

Result<CmMessage, GmpError> get_req(CData d) {
  CmReq m;
  m.local_comm_id = get32(d, 0);
  m.service_id = get64(d, 8);
  m.local_ca_guid = get64(d, 16);
  m.local_qkey = get32(d, 28);
  m.local_qpn = get24(d, 32);
  m.responder_resources = get8(d, 35);
  m.local_eecn = get24(d, 36);
  m.initiator_depth = get8(d, 39);
  m.remote_eecn = get24(d, 40);
  const std::uint8_t b43 = get8(d, 43);
  m.remote_cm_response_timeout = b43 >> 3;
  const unsigned tst = (b43 >> 1) & 0x3;
  if (tst == 3) return GmpError::kBadField;  // reserved transport service type
  m.transport = static_cast<CmTransport>(tst);
  m.end_to_end_flow_control = (b43 & 1) != 0;
  m.starting_psn = get24(d, 44);
  m.local_cm_response_timeout = get8(d, 47) >> 3;
  m.retry_count = get8(d, 47) & 0x7;
  m.pkey = get16(d, 48);
  m.path_mtu = get8(d, 50) >> 4;
  m.rdc_exists = (get8(d, 50) & 0x8) != 0;
  m.rnr_retry_count = get8(d, 50) & 0x7;
  m.max_cm_retries = get8(d, 51) >> 4;
  m.srq = (get8(d, 51) & 0x8) != 0;
  m.extended_transport = get8(d, 51) & 0x7;
  m.primary = get_path(d, kReqPrimary);
  m.alternate = get_path(d, kReqAlternate);
  get_bytes(d, kReqPrivate, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmMra& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put8(d, 8, static_cast<unsigned>(m.msg_mraed) << 6);
  put8(d, 9, static_cast<unsigned>((m.service_timeout & 0x1F) << 3));
  put_bytes(d, 10, m.private_data);
}

Result<CmMessage, GmpError> get_mra(CData d) {
  CmMra m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  const unsigned k = get8(d, 8) >> 6;
  if (k == 3) return GmpError::kBadField;
  m.msg_mraed = static_cast<CmMsgKind>(k);
  m.service_timeout = get8(d, 9) >> 3;
  get_bytes(d, 10, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmRej& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put8(d, 8, static_cast<unsigned>(m.msg_rejected) << 6);
  put8(d, 9, static_cast<unsigned>((m.ari_length & 0x7F) << 1));
  put16(d, 10, m.reason);
  put_bytes(d, 12, m.ari);
  put_bytes(d, 12 + kRejAriBytes, m.private_data);
}

Result<CmMessage, GmpError> get_rej(CData d) {
  CmRej m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  const unsigned k = get8(d, 8) >> 6;
  if (k == 3) return GmpError::kBadField;
  m.msg_rejected = static_cast<CmMsgKind>(k);
  m.ari_length = get8(d, 9) >> 1;
  if (m.ari_length > kRejAriBytes) return GmpError::kBadField;
  m.reason = get16(d, 10);
  get_bytes(d, 12, m.ari);
  get_bytes(d, 12 + kRejAriBytes, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmRep& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put32(d, 8, m.local_qkey);
  put32(d, 12, (m.local_qpn & 0xFFFFFF) << 8);
  put32(d, 16, (m.local_eecn & 0xFFFFFF) << 8);
  put32(d, 20, (m.starting_psn & 0xFFFFFF) << 8);
  put8(d, 24, m.responder_resources);
  put8(d, 25, m.initiator_depth);
  put8(d, 26,
       static_cast<unsigned>((m.target_ack_delay & 0x1F) << 3 | (m.failover_accepted & 0x3) << 1 |
                             (m.end_to_end_flow_control ? 1 : 0)));
  put8(d, 27, static_cast<unsigned>((m.rnr_retry_count & 0x7) << 5 | (m.srq ? 0x10 : 0)));
  put64(d, 28, m.local_ca_guid);
  put_bytes(d, 36, m.private_data);
}

Result<CmMessage, GmpError> get_rep(CData d) {
  CmRep m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  m.local_qkey = get32(d, 8);
  m.local_qpn = get24(d, 12);
  m.local_eecn = get24(d, 16);
  m.starting_psn = get24(d, 20);
  m.responder_resources = get8(d, 24);
  m.initiator_depth = get8(d, 25);
  m.target_ack_delay = get8(d, 26) >> 3;
  m.failover_accepted = (get8(d, 26) >> 1) & 0x3;
  m.end_to_end_flow_control = (get8(d, 26) & 1) != 0;
  m.rnr_retry_count = get8(d, 27) >> 5;
  m.srq = (get8(d, 27) & 0x10) != 0;
  m.local_ca_guid = get64(d, 28);
  get_bytes(d, 36, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmRtu& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put_bytes(d, 8, m.private_data);
}

Result<CmMessage, GmpError> get_rtu(CData d) {
  CmRtu m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  get_bytes(d, 8, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmDreq& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put32(d, 8, (m.remote_qpn & 0xFFFFFF) << 8);
  put_bytes(d, 12, m.private_data);
}

Result<CmMessage, GmpError> get_dreq(CData d) {
  CmDreq m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  m.remote_qpn = get24(d, 8);
  get_bytes(d, 12, m.private_data);
  return CmMessage{m};
}

void put_msg(Data d, const CmDrep& m) {
  put32(d, 0, m.local_comm_id);
  put32(d, 4, m.remote_comm_id);
  put_bytes(d, 8, m.private_data);
}

Result<CmMessage, GmpError> get_drep(CData d) {
  CmDrep m;
  m.local_comm_id = get32(d, 0);
  m.remote_comm_id = get32(d, 4);
  get_bytes(d, 8, m.private_data);
  return CmMessage{m};
}

constexpr std::uint8_t kWeftMagic0 = 'W', kWeftMagic1 = 'F';

}  // namespace

std::string_view to_string(CmAttr a) {
  switch (a) {
    case CmAttr::kClassPortInfo:
      return "ClassPortInfo";
    case CmAttr::kReq:
      return "REQ";
    case CmAttr::kMra:
      return "MRA";
    case CmAttr::kRej:
      return "REJ";
    case CmAttr::kRep:
      return "REP";
    case CmAttr::kRtu:
      return "RTU";
    case CmAttr::kDreq:
      return "DREQ";
    case CmAttr::kDrep:
      return "DREP";
    case CmAttr::kSidrReq:
      return "SIDR_REQ";
    case CmAttr::kSidrRep:
      return "SIDR_REP";
    case CmAttr::kLap:
      return "LAP";
    case CmAttr::kApr:
      return "APR";
  }
  return "?";
}

std::string_view to_string(RejReason r) {
  switch (r) {
    case RejReason::kNoQp:
      return "no QP available";
    case RejReason::kNoEec:
      return "no EEC available";
    case RejReason::kNoResources:
      return "no resources available";
    case RejReason::kTimeout:
      return "timeout";
    case RejReason::kUnsupportedRequest:
      return "unsupported request";
    case RejReason::kInvalidCommId:
      return "invalid communication ID";
    case RejReason::kInvalidCommInstance:
      return "invalid communication instance";
    case RejReason::kInvalidServiceId:
      return "invalid service ID";
    case RejReason::kInvalidTransportType:
      return "invalid transport service type";
    case RejReason::kStaleConnection:
      return "stale connection";
    case RejReason::kInvalidPathMtu:
      return "invalid path MTU";
    case RejReason::kConsumerReject:
      return "consumer reject";
    case RejReason::kDuplicateLocalCommId:
      return "duplicate local communication ID";
    case RejReason::kUnsupportedClassVersion:
      return "unsupported class version";
  }
  return "";
}

std::string_view to_string(WeftReject r) {
  switch (r) {
    case WeftReject::kNone:
      return "none";
    case WeftReject::kRecoveryModeMismatch:
      return "recovery mode mismatch (go-back-N vs selective repeat)";
  }
  return "?";
}

CmAttr attr_of(const CmMessage& m) {
  static constexpr CmAttr kAttrs[] = {CmAttr::kReq, CmAttr::kMra,  CmAttr::kRej, CmAttr::kRep,
                                      CmAttr::kRtu, CmAttr::kDreq, CmAttr::kDrep};
  static_assert(std::size(kAttrs) == std::variant_size_v<CmMessage>);
  return kAttrs[m.index()];
}

void encode_cm(std::uint64_t tid, const CmMessage& m, std::span<std::uint8_t, kMadBytes> out) {
  std::fill(out.begin(), out.end(), 0);
  MadHeader h;
  h.mgmt_class = kMgmtClassCm;
  h.class_version = kCmClassVersion;
  h.method = static_cast<std::uint8_t>(GmpMethod::kSend);
  h.tid = tid;
  h.attr_id = static_cast<std::uint16_t>(attr_of(m));
  encode_mad_header(h, out.subspan<0, kMadHeaderBytes>());
  const Data d = std::span<std::uint8_t>(out).subspan(kCmDataOffset);
  std::visit([&](const auto& msg) { put_msg(d, msg); }, m);
}

Result<CmMad, GmpError> decode_cm(std::span<const std::uint8_t> mad) {
  auto h = decode_gmp_header(mad, kMgmtClassCm);
  if (!h) return h.error();
  if (h.value().class_version != kCmClassVersion) return GmpError::kBadClassVersion;
  const CData d = mad.subspan(kCmDataOffset, kCmDataBytes);
  Result<CmMessage, GmpError> m = GmpError::kBadAttribute;
  switch (static_cast<CmAttr>(h.value().attr_id)) {
    case CmAttr::kReq:
      m = get_req(d);
      break;
    case CmAttr::kMra:
      m = get_mra(d);
      break;
    case CmAttr::kRej:
      m = get_rej(d);
      break;
    case CmAttr::kRep:
      m = get_rep(d);
      break;
    case CmAttr::kRtu:
      m = get_rtu(d);
      break;
    case CmAttr::kDreq:
      m = get_dreq(d);
      break;
    case CmAttr::kDrep:
      m = get_drep(d);
      break;
    default:
      break;
  }
  if (!m) return m.error();
  return CmMad{h.value(), std::move(m).value()};
}

namespace {
void sidr_header(std::uint64_t tid, CmAttr attr, std::span<std::uint8_t, kMadBytes> out) {
  std::fill(out.begin(), out.end(), 0);
  MadHeader h;
  h.mgmt_class = kMgmtClassCm;
  h.class_version = kCmClassVersion;
  h.method = static_cast<std::uint8_t>(GmpMethod::kSend);
  h.tid = tid;
  h.attr_id = static_cast<std::uint16_t>(attr);
  encode_mad_header(h, out.subspan<0, kMadHeaderBytes>());
}

Result<CData, GmpError> sidr_data(std::span<const std::uint8_t> mad, CmAttr attr) {
  auto h = decode_gmp_header(mad, kMgmtClassCm);
  if (!h) return h.error();
  if (h.value().class_version != kCmClassVersion) return GmpError::kBadClassVersion;
  if (h.value().attr_id != static_cast<std::uint16_t>(attr)) return GmpError::kBadAttribute;
  return mad.subspan(kCmDataOffset, kCmDataBytes);
}
}  // namespace

static_assert(16 + kSidrReqPrivateBytes == kCmDataBytes);
static_assert(24 + kSidrRepInfoBytes + kSidrRepPrivateBytes == kCmDataBytes);

void encode_sidr(std::uint64_t tid, const CmSidrReq& m, std::span<std::uint8_t, kMadBytes> out) {
  sidr_header(tid, CmAttr::kSidrReq, out);
  const Data d = std::span<std::uint8_t>(out).subspan(kCmDataOffset);
  put32(d, 0, m.request_id);
  put16(d, 4, m.pkey);
  put64(d, 8, m.service_id);
  put_bytes(d, 16, m.private_data);
}

void encode_sidr(std::uint64_t tid, const CmSidrRep& m, std::span<std::uint8_t, kMadBytes> out) {
  sidr_header(tid, CmAttr::kSidrRep, out);
  const Data d = std::span<std::uint8_t>(out).subspan(kCmDataOffset);
  put32(d, 0, m.request_id);
  put8(d, 4, static_cast<unsigned>(m.status));
  put8(d, 5, m.info_length);
  put24(d, 8, m.qpn);
  put64(d, 12, m.service_id);
  put32(d, 20, m.qkey);
  put_bytes(d, 24, m.info);
  put_bytes(d, 96, m.private_data);
}

Result<CmSidrReq, GmpError> decode_sidr_req(std::span<const std::uint8_t> mad) {
  auto d = sidr_data(mad, CmAttr::kSidrReq);
  if (!d) return d.error();
  const CData b = d.value();
  CmSidrReq m;
  m.request_id = get32(b, 0);
  m.pkey = get16(b, 4);
  m.service_id = get64(b, 8);
  get_bytes(b, 16, m.private_data);
  return m;
}

Result<CmSidrRep, GmpError> decode_sidr_rep(std::span<const std::uint8_t> mad) {
  auto d = sidr_data(mad, CmAttr::kSidrRep);
  if (!d) return d.error();
  const CData b = d.value();
  CmSidrRep m;
  m.request_id = get32(b, 0);
  if (b[4] > static_cast<std::uint8_t>(SidrStatus::kVersionNotSupported) ||
      b[5] > kSidrRepInfoBytes)
    return GmpError::kBadField;
  m.status = static_cast<SidrStatus>(b[4]);
  m.info_length = b[5];
  m.qpn = get24(b, 8);
  m.service_id = get64(b, 12);
  m.qkey = get32(b, 20);
  get_bytes(b, 24, m.info);
  get_bytes(b, 96, m.private_data);
  return m;
}

void encode(const WeftCmHeader& h, std::span<std::uint8_t> pd) {
  WEFT_ASSERT(pd.size() >= kWeftCmHeaderBytes);
  put8(pd, 0, kWeftMagic0);
  put8(pd, 1, kWeftMagic1);
  put8(pd, 2, kWeftCmVersion);
  put8(pd, 3, static_cast<unsigned>(h.recovery));
  put8(pd, 4, static_cast<unsigned>(h.reject));
  put24(pd, 5, 0);
}

std::optional<WeftCmHeader> decode_weft_cm_header(std::span<const std::uint8_t> pd) {
  if (pd.size() < kWeftCmHeaderBytes) return std::nullopt;
  if (pd[0] != kWeftMagic0 || pd[1] != kWeftMagic1 || pd[2] != kWeftCmVersion) {
    return std::nullopt;
  }
  if (pd[3] > 1 || pd[4] > 1) return std::nullopt;
  return WeftCmHeader{static_cast<WeftRecovery>(pd[3]), static_cast<WeftReject>(pd[4])};
}

}  // namespace weft::wire
