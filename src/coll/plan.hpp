// coll/plan.hpp — a collective compiled for one rank: the list of operations it performs, in
// program order. Every algorithm is written as one global sequence of transfers (sender ->
// receiver, a byte range of each side's buffers) in a valid sequential order; each rank keeps
// the transfers it takes part in. Because both ends of every (peer, lane) connection filter the
// same global sequence, sends and receives on it match by position: no tags travel.
//
// The executor (Communicator) derives dependencies from the byte ranges (read-after-write,
// write-after-read, write-after-write on the same buffer), so chunked algorithms pipeline by
// themselves and the global order is only a guarantee of progress (the earliest unfinished
// transfer can always run). Thread-safety: values only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <weft/types.hpp>

#include "src/coll/types.hpp"

namespace weft::coll {

enum class Buf : std::uint8_t { kIn, kOut, kTmp };

struct Ref {
  Buf buf = Buf::kOut;
  std::size_t off = 0;  // bytes
};

struct PlanOp {
  enum class Kind : std::uint8_t { kSend, kRecv, kCopy, kAvg };
  Kind kind = Kind::kSend;
  int peer = -1;
  int lane = 0;
  Ref a{};  // send: source; recv: destination; copy: source; avg: target
  Ref b{};  // copy: destination
  std::size_t bytes = 0;
  bool reduce = false;  // recv: reduce into the destination instead of copying
};

struct Plan {
  std::vector<PlanOp> ops;
  std::size_t tmp_bytes = 0;
  Algo algo = Algo::kRing;      // the algorithm that was built (after auto selection)
  int channels = 1;             // the channels it used (auto may choose them)
  std::size_t chunk_bytes = 0;  // the pipelining unit it used (auto may enlarge it)
};

// What a collective call asks for (NCCL conventions for counts and in-place).
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  // AllReduce, Broadcast, Reduce: elements of the buffer. ReduceScatter: elements each rank
  // receives (send holds size x count). AllGather: elements each rank sends (recv holds size x
  // count). AllToAll: elements per peer (both hold size x count). SendRecv: elements each way.
  std::size_t count = 0;
  DataType dtype = DataType::kF32;
  RedOp op = RedOp::kSum;
  int root = 0;        // Broadcast, Reduce
  int send_peer = -1;  // SendRecv: -1 = no send
  int recv_peer = -1;  // SendRecv: -1 = no receive
  Algo algo = Algo::kAuto;
  int channels = 1;  // ring, ring2: parallel rings over parts of the buffer (auto may override)
  std::size_t chunk_bytes = 64 * 1024;  // pipelining unit (0 = no chunking)
  // The collective fails (kFailed, naming the peer it still waits for) if it has not finished
  // this long after its first progress() call. 0 = no limit.
  TimeNs timeout_ns = 0;
  // Timing-only simulations: the bytes are not looked at, so reductions, copies and the avg
  // division are counted (CommStats::reduce_bytes) but not executed. Results are garbage.
  bool skip_arithmetic = false;
};

struct Topology {
  int ranks_per_node = 1;  // consecutive ranks share a node; nodes = size / ranks_per_node
};

// What `auto` picks for a collective of `bytes` (see README: selection): the algorithm and, for
// the flat ring on several nodes of several ranks, the channel count (one ring per rank of a
// node, i.e. per NIC, as NCCL does: min(ranks_per_node, lanes)); otherwise `channels` (the
// caller's) is kept.
struct AutoChoice {
  Algo algo = Algo::kRing;
  int channels = 1;
};
AutoChoice select_auto(CollKind kind, std::size_t bytes, int size, const Topology& topo, int lanes,
                       int channels);
// select_auto's algorithm.
Algo select_algo(CollKind kind, std::size_t bytes, int size, const Topology& topo);
// Whether `algo` implements `kind` (kAuto always does).
bool supports(CollKind kind, Algo algo);

// Builds rank `rank`'s plan. lanes: connections per peer the transport offers.
Result<Plan, CollErrc> build_plan(const CollArgs& args, int rank, int size, int lanes,
                                  const Topology& topo);

}  // namespace weft::coll
