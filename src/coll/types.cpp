// coll/types.cpp — names of the coll vocabulary (logs, test names, CLI tables).
#include "src/coll/types.hpp"

namespace weft::coll {

std::string_view to_string(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "float";
    case DataType::kF16:
      return "half";
    case DataType::kBf16:
      return "bfloat16";
    case DataType::kF64:
      return "double";
    case DataType::kI32:
      return "int32";
    case DataType::kI64:
      return "int64";
    case DataType::kU8:
      return "uint8";
  }
  return "?";
}

std::string_view to_string(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return "sum";
    case RedOp::kProd:
      return "prod";
    case RedOp::kMin:
      return "min";
    case RedOp::kMax:
      return "max";
    case RedOp::kAvg:
      return "avg";
  }
  return "?";
}

std::string_view to_string(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kReduceScatter:
      return "reducescatter";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kReduce:
      return "reduce";
    case CollKind::kAllToAll:
      return "alltoall";
    case CollKind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::string_view to_string(Algo a) {
  switch (a) {
    case Algo::kAuto:
      return "auto";
    case Algo::kRing:
      return "ring";
    case Algo::kRing2:
      return "ring2";
    case Algo::kRing2Pipe:
      return "ring2-pipe";
    case Algo::kTree:
      return "tree";
    case Algo::kRhd:
      return "rhd";
    case Algo::kDirect:
      return "direct";
  }
  return "?";
}

std::string_view to_string(CollErrc e) {
  switch (e) {
    case CollErrc::kOk:
      return "ok";
    case CollErrc::kInvalidArgument:
      return "invalid argument";
    case CollErrc::kUnsupported:
      return "algorithm does not implement this collective";
    case CollErrc::kTransport:
      return "transport failure";
    case CollErrc::kRegistration:
      return "memory registration failed";
    case CollErrc::kTimeout:
      return "timed out";
  }
  return "?";
}

}  // namespace weft::coll
