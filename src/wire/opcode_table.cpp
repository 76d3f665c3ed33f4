// wire/opcode_table.cpp — one metadata row per BTH opcode (IBA 9.2.1, Table 35), in the style of
// rxe's rxe_opcode[]: which extension headers follow the BTH (in the order of IBA 9.3: DETH,
// RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), whether payload may follow, and where the
// packet sits in its message. "Only" packets carry kIsFirst | kIsLast | kIsOnly, so code that
// asks "does this packet start a message?" needs one bit test.
// Thread-safety: the table is constant.
#include <array>

#include "src/wire/packet.hpp"

namespace weft::wire {
namespace {

constexpr std::uint8_t ext_bytes_of(std::uint16_t mask) {
  std::size_t n = 0;
  if (mask & kHasDeth) n += kDethBytes;
  if (mask & kHasReth) n += kRethBytes;
  if (mask & kHasAtomicEth) n += kAtomicEthBytes;
  if (mask & kHasAeth) n += kAethBytes;
  if (mask & kHasAtomicAckEth) n += kAtomicAckEthBytes;
  if (mask & kHasImm) n += kImmBytes;
  if (mask & kHasIeth) n += kIethBytes;
  return static_cast<std::uint8_t>(n);
}

constexpr OpcodeInfo row(Opcode op, std::string_view name, std::uint16_t mask) {
  return OpcodeInfo{op, name, mask, ext_bytes_of(mask), true};
}

constexpr std::uint16_t kSendReq = kIsRequest | kIsSend | kHasPayload;
constexpr std::uint16_t kWriteReq = kIsRequest | kIsWrite | kHasPayload;
constexpr std::uint16_t kReadResp = kIsResponse | kHasPayload;
constexpr std::uint16_t kOnly = kIsFirst | kIsLast | kIsOnly;

constexpr OpcodeInfo kDefined[] = {
    row(Opcode::kRcSendFirst, "RC SEND_FIRST", kSendReq | kIsFirst),
    row(Opcode::kRcSendMiddle, "RC SEND_MIDDLE", kSendReq | kIsMiddle),
    row(Opcode::kRcSendLast, "RC SEND_LAST", kSendReq | kIsLast),
    row(Opcode::kRcSendLastImm, "RC SEND_LAST_WITH_IMMEDIATE", kSendReq | kIsLast | kHasImm),
    row(Opcode::kRcSendOnly, "RC SEND_ONLY", kSendReq | kOnly),
    row(Opcode::kRcSendOnlyImm, "RC SEND_ONLY_WITH_IMMEDIATE", kSendReq | kOnly | kHasImm),
    row(Opcode::kRcWriteFirst, "RC RDMA_WRITE_FIRST", kWriteReq | kIsFirst | kHasReth),
    row(Opcode::kRcWriteMiddle, "RC RDMA_WRITE_MIDDLE", kWriteReq | kIsMiddle),
    row(Opcode::kRcWriteLast, "RC RDMA_WRITE_LAST", kWriteReq | kIsLast),
    row(Opcode::kRcWriteLastImm, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE",
        kWriteReq | kIsLast | kHasImm),
    row(Opcode::kRcWriteOnly, "RC RDMA_WRITE_ONLY", kWriteReq | kOnly | kHasReth),
    row(Opcode::kRcWriteOnlyImm, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        kWriteReq | kOnly | kHasReth | kHasImm),
    // A read request carries no payload (IBA 9.4.3): the data comes back in responses.
    row(Opcode::kRcReadRequest, "RC RDMA_READ_REQUEST", kIsRequest | kOnly | kHasReth),
    row(Opcode::kRcReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST",
        kReadResp | kIsFirst | kHasAeth),
    row(Opcode::kRcReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", kReadResp | kIsMiddle),
    row(Opcode::kRcReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", kReadResp | kIsLast | kHasAeth),
    row(Opcode::kRcReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", kReadResp | kOnly | kHasAeth),
    row(Opcode::kRcAcknowledge, "RC ACKNOWLEDGE", kIsResponse | kOnly | kHasAeth),
    row(Opcode::kRcAtomicAcknowledge, "RC ATOMIC_ACKNOWLEDGE",
        kIsResponse | kOnly | kHasAeth | kHasAtomicAckEth),
    row(Opcode::kRcCompareSwap, "RC CMP_SWAP", kIsRequest | kOnly | kHasAtomicEth),
    row(Opcode::kRcFetchAdd, "RC FETCH_ADD", kIsRequest | kOnly | kHasAtomicEth),
    row(Opcode::kRcSendLastInv, "RC SEND_LAST_WITH_INVALIDATE", kSendReq | kIsLast | kHasIeth),
    row(Opcode::kRcSendOnlyInv, "RC SEND_ONLY_WITH_INVALIDATE", kSendReq | kOnly | kHasIeth),
    row(Opcode::kUdSendOnly, "UD SEND_ONLY", kSendReq | kOnly | kHasDeth),
    row(Opcode::kUdSendOnlyImm, "UD SEND_ONLY_WITH_IMMEDIATE",
        kSendReq | kOnly | kHasDeth | kHasImm),
};

// Largest extension-header set is WRITE_ONLY_IMM / AtomicETH; the BTH+ext budget is what
// the transport sizes its header buffers by.
static_assert(ext_bytes_of(kHasReth | kHasImm) == 20);
static_assert(ext_bytes_of(kHasAtomicEth) == 28);
static_assert(ext_bytes_of(kHasAeth | kHasAtomicAckEth) == 12);

constexpr std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> t{};
  for (unsigned i = 0; i < 256; ++i)
    t[i] = OpcodeInfo{static_cast<Opcode>(i), "RESERVED", 0, 0, false};
  for (const OpcodeInfo& r : kDefined) t[static_cast<std::uint8_t>(r.opcode)] = r;
  return t;
}

constexpr std::array<OpcodeInfo, 256> kTable = build_table();
static_assert(kTable[0x13].ext_bytes == kAtomicEthBytes);
static_assert(kTable[0x65].ext_bytes == kDethBytes + kImmBytes);
static_assert(!kTable[0x15].valid, "0x15 is reserved (IBA Table 35)");

}  // namespace

// Constant-initialized from kTable at compile time (no dynamic initialization order to mind).
constinit const std::array<OpcodeInfo, 256> detail::kOpcodeTable = kTable;

std::string_view to_string(Opcode op) {
  return opcode_info(op).name;
}

}  // namespace weft::wire
