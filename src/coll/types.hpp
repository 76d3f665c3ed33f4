// coll/types.hpp — the vocabulary of the collectives library: element types, reduction
// operations, collectives, algorithms, and the closed error enum of collective calls.
// Thread-safety: values only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weft::coll {

enum class DataType : std::uint8_t { kF32, kF16, kBf16, kF64, kI32, kI64, kU8 };
enum class RedOp : std::uint8_t { kSum, kProd, kMin, kMax, kAvg };

inline constexpr DataType kAllTypes[] = {DataType::kF32, DataType::kF16, DataType::kBf16,
                                         DataType::kF64, DataType::kI32, DataType::kI64,
                                         DataType::kU8};
inline constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax,
                                    RedOp::kAvg};

constexpr std::size_t elem_bytes(DataType t) {
  switch (t) {
    case DataType::kF32:
      return 4;
    case DataType::kF16:
      return 2;
    case DataType::kBf16:
      return 2;
    case DataType::kF64:
      return 8;
    case DataType::kI32:
      return 4;
    case DataType::kI64:
      return 8;
    case DataType::kU8:
      return 1;
  }
  return 1;
}
constexpr bool is_float(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBf16 || t == DataType::kF64;
}

enum class CollKind : std::uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
};

enum class Algo : std::uint8_t {
  kAuto,
  kRing,       // flat ring, `channels` rings over disjoint parts of the buffer
  kRing2,      // two-stage hierarchical ring, stage by stage
  kRing2Pipe,  // two-stage hierarchical ring, pipelined (stages overlap)
  kTree,       // double binary tree (all-reduce); binary tree (broadcast, reduce)
  kRhd,        // recursive halving-doubling (Rabenseifner; non-powers of two fold first)
  kDirect,     // pairwise exchange (all-to-all, send/recv)
};

enum class CollErrc : std::uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad root/peer, null buffer with count > 0, size overflow
  kUnsupported,      // this algorithm does not implement this collective
  kTransport,        // a transport completion failed (the peer is named in the status)
  kRegistration,     // registering a buffer with the transport failed
  kTimeout,          // the collective did not finish within CollArgs::timeout_ns
};

std::string_view to_string(DataType t);
std::string_view to_string(RedOp op);
std::string_view to_string(CollKind k);
std::string_view to_string(Algo a);
std::string_view to_string(CollErrc e);

}  // namespace weft::coll
