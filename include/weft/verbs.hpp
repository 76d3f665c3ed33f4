// weft/verbs.hpp — verbs-like value types of the public API: access flags, QP states and
// attributes, work requests, work completions and their statuses (IBA chapters 10 and 11).
//
// These are plain values. The objects that use them (Device, QueuePair, ...) are in
// <weft/device.hpp>. Thread-safety: values only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <weft/types.hpp>

namespace weft {

// ---- Error codes of verbs calls (expected failures are values, never exceptions) ----------
enum class Errc : std::uint8_t {
  kOk = 0,
  kInvalidArgument,    // a field out of range, a null buffer, a bad flag
  kInvalidState,       // the call is not allowed in the object's current state
  kInvalidTransition,  // modify_qp to a state not reachable from the current one
  kMissingAttribute,   // modify_qp without an attribute the transition requires (IBA 11.2.5.3)
  kExtraAttribute,     // modify_qp with an attribute the transition does not allow
  kBadLkey,            // an SGE names no registered region of this PD
  kSgeOutOfRange,      // an SGE runs outside its region
  kAccessDenied,       // the region lacks the access the request needs
  kTooManySge,         // more SGEs than the queue was created for
  kInlineTooLarge,     // inline data above max_inline_data
  kQueueFull,          // the work queue has max_*_wr outstanding already
  kBusy,               // the object is in use (destroying a CQ that a QP still uses, ...)
  kNoResources,        // a table is full (QPNs, MRs)
  kNotFound,           // no such object
  kWrongQpType,        // an operation not defined for the QP's service type (e.g. READ on UD)
};
std::string_view to_string(Errc e);

// ---- Memory access flags (IBA 10.6.3.1) ----------------------------------------------------
enum Access : std::uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
};

// ---- Queue pairs ------------------------------------------------------------------------------
enum class QpType : std::uint8_t { kRc, kUd };
std::string_view to_string(QpType t);

// IBA 10.3.1: the QP state machine.
enum class QpState : std::uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kErr };
std::string_view to_string(QpState s);

enum class RecoveryMode : std::uint8_t {
  kGoBackN,          // IBA default: the responder drops out-of-sequence packets, NAKs once
  kSelectiveRepeat,  // IRN-style: the responder places or buffers within a window; only gaps resend
};

// Path MTU as in IBA 9.4 / PortInfo (256..4096 bytes).
enum class Mtu : std::uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr std::uint32_t mtu_bytes(Mtu m) {
  return 128u << static_cast<unsigned>(m);
}

// Address vector (IBA 10.2.2.1): where a QP's packets go.
struct AddressVector {
  std::uint16_t dlid = 0;
  std::uint8_t sl = 0;
  std::uint8_t src_path_bits = 0;
  std::uint8_t port_num = 1;
  bool global = false;  // carry a GRH
  std::array<std::uint8_t, 16> dgid{};
  std::uint8_t sgid_index = 0;
  std::uint32_t flow_label = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
};

// Which QpAttr fields a modify_qp call supplies (IBA 11.2.5.2, ibv_qp_attr_mask).
enum QpAttrMask : std::uint32_t {
  kQpState = 1u << 0,
  kQpPkeyIndex = 1u << 1,
  kQpPort = 1u << 2,
  kQpQkey = 1u << 3,
  kQpAccessFlags = 1u << 4,
  kQpAv = 1u << 5,
  kQpPathMtu = 1u << 6,
  kQpDestQpn = 1u << 7,
  kQpRqPsn = 1u << 8,
  kQpMaxDestRdAtomic = 1u << 9,  // responder resources
  kQpMinRnrTimer = 1u << 10,
  kQpSqPsn = 1u << 11,
  kQpTimeout = 1u << 12,
  kQpRetryCnt = 1u << 13,
  kQpRnrRetry = 1u << 14,
  kQpMaxRdAtomic = 1u << 15,   // initiator depth
  kQpRecoveryMode = 1u << 16,  // Weft extension: go-back-N or selective repeat
  kQpCurState = 1u << 17,
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  std::uint16_t pkey_index = 0;
  std::uint8_t port_num = 1;
  std::uint32_t qkey = 0;
  std::uint32_t access_flags = 0;  // remote access the responder allows (Access bits)
  AddressVector av{};
  Mtu path_mtu = Mtu::k1024;
  std::uint32_t dest_qpn = 0;
  std::uint32_t rq_psn = 0;             // 24 bits
  std::uint32_t sq_psn = 0;             // 24 bits
  std::uint8_t max_dest_rd_atomic = 1;  // 0..16 (Weft limit kRdAtomicMax)
  std::uint8_t max_rd_atomic = 1;       // 0..16
  std::uint8_t min_rnr_timer = 0;       // 5-bit code, IBA Table 45
  std::uint8_t timeout = 14;   // 5 bits: 4.096 us * 2^timeout, 0 = infinite (IBA 9.7.6.1.3)
  std::uint8_t retry_cnt = 7;  // 3 bits
  std::uint8_t rnr_retry = 7;  // 3 bits, 7 = retry forever
  RecoveryMode recovery = RecoveryMode::kGoBackN;
};

struct QpCaps {
  std::uint32_t max_send_wr = 128;
  std::uint32_t max_recv_wr = 128;
  std::uint32_t max_send_sge = 4;
  std::uint32_t max_recv_sge = 4;
  std::uint32_t max_inline_data = 256;
};

class CompletionQueue;
class SharedReceiveQueue;
class ProtectionDomain;

struct QpInitAttr {
  QpType type = QpType::kRc;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // when set, receives come from the SRQ
  QpCaps caps{};
  bool sq_sig_all = false;  // every send WR completes, whatever its kSignaled flag
};

// ---- Work requests (IBA 11.4.1.1) --------------------------------------------------------
enum class WrOpcode : std::uint8_t {
  kSend,
  kSendWithImm,
  kRdmaWrite,
  kRdmaWriteWithImm,
  kRdmaRead,
  kAtomicCmpAndSwp,
  kAtomicFetchAndAdd,
};
std::string_view to_string(WrOpcode op);

enum SendFlags : std::uint32_t {
  kSignaled = 1u << 0,
  kFence = 1u << 1,   // wait for prior READs/atomics to complete before starting (IBA 10.8.3.3)
  kInline = 1u << 2,  // copy the SGE bytes at post time; lkeys are not checked
  kSolicited = 1u << 3,
};

struct Sge {
  std::uint64_t addr = 0;  // a virtual address inside the region (the caller's pointer)
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

class AddressHandle;

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;
  std::span<const Sge> sg_list{};
  std::uint32_t imm_data = 0;  // host order; sent big-endian in ImmDt
  // RDMA and atomics
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;  // compare (CMP_AND_SWP) or add (FETCH_AND_ADD)
  std::uint64_t swap = 0;
  // UD
  const AddressHandle* ah = nullptr;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list{};
};

// ---- Work completions (IBA 11.4.2.1) -----------------------------------------------------
enum class WcStatus : std::uint8_t {
  kSuccess,
  kLocLenErr,
  kLocQpOpErr,
  kLocProtErr,
  kWrFlushErr,
  kBadRespErr,
  kLocAccessErr,
  kRemInvReqErr,
  kRemAccessErr,
  kRemOpErr,
  kRetryExcErr,
  kRnrRetryExcErr,
  kGeneralErr,
};
std::string_view to_string(WcStatus s);

enum class WcOpcode : std::uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaRead,
  kCompSwap,
  kFetchAdd,
  kRecv,
  kRecvRdmaWithImm,
};
std::string_view to_string(WcOpcode op);

enum WcFlags : std::uint32_t {
  kWcWithImm = 1u << 0,
  kWcGrh = 1u << 1,  // UD: a GRH was present (the first 40 bytes of the buffer hold it)
};

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t vendor_err = 0;
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;  // host order
  std::uint32_t qp_num = 0;
  std::uint32_t src_qp = 0;  // UD
  std::uint32_t wc_flags = 0;
  std::uint16_t pkey_index = 0;
  std::uint16_t slid = 0;  // UD
  std::uint8_t sl = 0;
  std::uint8_t dlid_path_bits = 0;
};

// Weft's own limits (named, with units last).
inline constexpr std::uint32_t kRdAtomicMax = 16;
inline constexpr std::uint32_t kSgeMax = 32;
inline constexpr std::uint32_t kInlineBytesMax = 1024;
inline constexpr std::uint32_t kWrMax = 16384;
inline constexpr std::uint32_t kCqDepthMax = 65536;
inline constexpr std::uint32_t kMessageBytesMax = 1u << 31;  // IBA: 2^31 bytes
inline constexpr std::uint32_t kUdGrhBytes = 40;
inline constexpr std::uint32_t kPsnMask = 0xFFFFFF;

}  // namespace weft
