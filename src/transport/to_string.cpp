// transport/to_string.cpp — names of the public enums (<weft/verbs.hpp>, <weft/device.hpp>),
// spelled as the IBA and libibverbs spell them, for logs and test messages.
#include <weft/device.hpp>
#include <weft/verbs.hpp>

namespace weft {

std::string_view to_string(Errc e) {
  switch (e) {
    case Errc::kOk:
      return "OK";
    case Errc::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Errc::kInvalidState:
      return "INVALID_STATE";
    case Errc::kInvalidTransition:
      return "INVALID_TRANSITION";
    case Errc::kMissingAttribute:
      return "MISSING_ATTRIBUTE";
    case Errc::kExtraAttribute:
      return "EXTRA_ATTRIBUTE";
    case Errc::kBadLkey:
      return "BAD_LKEY";
    case Errc::kSgeOutOfRange:
      return "SGE_OUT_OF_RANGE";
    case Errc::kAccessDenied:
      return "ACCESS_DENIED";
    case Errc::kTooManySge:
      return "TOO_MANY_SGE";
    case Errc::kInlineTooLarge:
      return "INLINE_TOO_LARGE";
    case Errc::kQueueFull:
      return "QUEUE_FULL";
    case Errc::kBusy:
      return "BUSY";
    case Errc::kNoResources:
      return "NO_RESOURCES";
    case Errc::kNotFound:
      return "NOT_FOUND";
    case Errc::kWrongQpType:
      return "WRONG_QP_TYPE";
  }
  return "UNKNOWN";
}

std::string_view to_string(QpType t) {
  switch (t) {
    case QpType::kRc:
      return "RC";
    case QpType::kUd:
      return "UD";
  }
  return "UNKNOWN";
}

std::string_view to_string(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kErr:
      return "ERR";
  }
  return "UNKNOWN";
}

std::string_view to_string(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
      return "SEND";
    case WrOpcode::kSendWithImm:
      return "SEND_WITH_IMM";
    case WrOpcode::kRdmaWrite:
      return "RDMA_WRITE";
    case WrOpcode::kRdmaWriteWithImm:
      return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::kRdmaRead:
      return "RDMA_READ";
    case WrOpcode::kAtomicCmpAndSwp:
      return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::kAtomicFetchAndAdd:
      return "ATOMIC_FETCH_AND_ADD";
  }
  return "UNKNOWN";
}

std::string_view to_string(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "SUCCESS";
    case WcStatus::kLocLenErr:
      return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr:
      return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr:
      return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr:
      return "WR_FLUSH_ERR";
    case WcStatus::kBadRespErr:
      return "BAD_RESP_ERR";
    case WcStatus::kLocAccessErr:
      return "LOC_ACCESS_ERR";
    case WcStatus::kRemInvReqErr:
      return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr:
      return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr:
      return "REM_OP_ERR";
    case WcStatus::kRetryExcErr:
      return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr:
      return "RNR_RETRY_EXC_ERR";
    case WcStatus::kGeneralErr:
      return "GENERAL_ERR";
  }
  return "UNKNOWN";
}

std::string_view to_string(WcOpcode op) {
  switch (op) {
    case WcOpcode::kSend:
      return "SEND";
    case WcOpcode::kRdmaWrite:
      return "RDMA_WRITE";
    case WcOpcode::kRdmaRead:
      return "RDMA_READ";
    case WcOpcode::kCompSwap:
      return "COMP_SWAP";
    case WcOpcode::kFetchAdd:
      return "FETCH_ADD";
    case WcOpcode::kRecv:
      return "RECV";
    case WcOpcode::kRecvRdmaWithImm:
      return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN";
}

std::string_view to_string(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kQpFatal:
      return "QP_FATAL";
    case AsyncEventType::kSqDrained:
      return "SQ_DRAINED";
    case AsyncEventType::kCqError:
      return "CQ_ERROR";
    case AsyncEventType::kQpLastWqeReached:
      return "QP_LAST_WQE_REACHED";
    case AsyncEventType::kPortActive:
      return "PORT_ACTIVE";
    case AsyncEventType::kPortError:
      return "PORT_ERROR";
  }
  return "UNKNOWN";
}

}  // namespace weft
