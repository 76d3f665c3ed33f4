// coll/plan.cpp — the algorithms, each as a global sequence of transfers (see plan.hpp).
#include "src/coll/plan.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::coll {
namespace {

// A run of elements in one buffer.
struct Seg {
  Buf buf = Buf::kOut;
  std::size_t off = 0;  // elements
  std::size_t cnt = 0;  // elements
};

// Part i of k near-equal parts of n elements: [start, start + len).
Seg part(const Seg& s, std::size_t k, std::size_t i) {
  const std::size_t q = s.cnt / k, r = s.cnt % k;
  return Seg{s.buf, s.off + i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

class Builder {
 public:
  Builder(int rank, int size, int lanes, std::size_t es)
      : rank_(rank), size_(size), lanes_(lanes), es_(es) {}

  void xfer(int src, int dst, int lane, const Seg& s, const Seg& d, bool reduce) {
    WEFT_ASSERT(s.cnt == d.cnt && src != dst);
    if (s.cnt == 0) return;
    lane %= lanes_;
    if (src == rank_) {
      plan_.ops.push_back(PlanOp{PlanOp::Kind::kSend, dst, lane, ref(s), {}, s.cnt * es_, false});
    }
    if (dst == rank_) {
      plan_.ops.push_back(PlanOp{PlanOp::Kind::kRecv, src, lane, ref(d), {}, d.cnt * es_, reduce});
    }
  }
  void copy(const Seg& s, const Seg& d) {
    if (s.cnt == 0) return;
    plan_.ops.push_back(PlanOp{PlanOp::Kind::kCopy, -1, 0, ref(s), ref(d), s.cnt * es_, false});
  }
  void avg(const Seg& s) {
    if (s.cnt == 0) return;
    plan_.ops.push_back(PlanOp{PlanOp::Kind::kAvg, -1, 0, ref(s), {}, s.cnt * es_, false});
  }

  // Ring over `group` (size gs) with blocks[j] the block of member j. Reduce-scatter step k
  // (0 <= k < gs-1): member i sends block (i-k-1) to member i+1, which reduces it; afterwards
  // member j holds block j reduced. All-gather step k: member i sends block (i-k) on; copies.
  void ring_rs_step(const std::vector<int>& group, const std::vector<Seg>& blocks, int k,
                    int lane) {
    const int gs = static_cast<int>(group.size());
    for (int i = 0; i < gs; ++i) {
      const Seg& b = blocks[static_cast<std::size_t>(((i - k - 1) % gs + gs) % gs)];
      xfer(group[static_cast<std::size_t>(i)], group[static_cast<std::size_t>((i + 1) % gs)], lane,
           b, b, true);
    }
  }
  void ring_ag_step(const std::vector<int>& group, const std::vector<Seg>& blocks, int k,
                    int lane) {
    const int gs = static_cast<int>(group.size());
    for (int i = 0; i < gs; ++i) {
      const Seg& b = blocks[static_cast<std::size_t>(((i - k) % gs + gs) % gs)];
      xfer(group[static_cast<std::size_t>(i)], group[static_cast<std::size_t>((i + 1) % gs)], lane,
           b, b, false);
    }
  }

  Plan& plan() { return plan_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  Ref ref(const Seg& s) const { return Ref{s.buf, s.off * es_}; }
  int rank_, size_, lanes_;
  std::size_t es_;
  Plan plan_;
};

std::vector<int> iota_group(int n) {
  std::vector<int> g(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) g[static_cast<std::size_t>(i)] = i;
  return g;
}

std::vector<Seg> split(const Seg& s, std::size_t k) {
  std::vector<Seg> out;
  for (std::size_t i = 0; i < k; ++i) out.push_back(part(s, k, i));
  return out;
}

// All-reduce, flat ring: `channels` rings over parts of the buffer, each in rounds of
// n x chunk so that round q+1 follows round q around the ring.
void allreduce_ring(Builder& b, const Seg& all, int channels, std::size_t chunk_elems) {
  const int n = b.size();
  const auto group = iota_group(n);
  const std::size_t c = static_cast<std::size_t>(channels);
  const std::size_t rounds =
      std::max<std::size_t>(1, ceil_div(all.cnt, c * static_cast<std::size_t>(n) * chunk_elems));
  for (std::size_t q = 0; q < rounds; ++q) {
    for (int k = 0; k < 2 * (n - 1); ++k) {
      for (std::size_t ch = 0; ch < c; ++ch) {
        const auto blocks = split(part(part(all, c, ch), rounds, q), static_cast<std::size_t>(n));
        if (k < n - 1) {
          b.ring_rs_step(group, blocks, k, static_cast<int>(ch));
        } else {
          b.ring_ag_step(group, blocks, k - (n - 1), static_cast<int>(ch));
        }
      }
    }
  }
}

// Two-stage ring: reduce-scatter inside each node (g ranks), all-reduce of each part across
// nodes on the ring of its rail (the ranks with the same local index), all-gather inside the
// node. pieces = 1 is stage by stage; more pieces pipeline the stages.
void allreduce_ring2(Builder& b, const Seg& all, int channels, std::size_t pieces, int g) {
  const int n = b.size(), m = n / g;
  std::vector<std::vector<int>> nodes(static_cast<std::size_t>(m)),
      rails(static_cast<std::size_t>(g));
  for (int r = 0; r < n; ++r) {
    nodes[static_cast<std::size_t>(r / g)].push_back(r);
    rails[static_cast<std::size_t>(r % g)].push_back(r);
  }
  const std::size_t c = static_cast<std::size_t>(channels);
  for (std::size_t p = 0; p < pieces; ++p) {
    std::vector<std::vector<Seg>> parts(c);  // per channel: g parts of this piece
    for (std::size_t ch = 0; ch < c; ++ch) {
      parts[ch] = split(part(part(all, c, ch), pieces, p), static_cast<std::size_t>(g));
    }
    for (int k = 0; k < g - 1; ++k) {
      for (std::size_t ch = 0; ch < c; ++ch) {
        for (const auto& node : nodes) b.ring_rs_step(node, parts[ch], k, 2 * static_cast<int>(ch));
      }
    }
    for (int k = 0; k < 2 * (m - 1); ++k) {
      for (std::size_t ch = 0; ch < c; ++ch) {
        for (int l = 0; l < g; ++l) {
          const auto blocks =
              split(parts[ch][static_cast<std::size_t>(l)], static_cast<std::size_t>(m));
          const auto& rail = rails[static_cast<std::size_t>(l)];
          if (k < m - 1) {
            b.ring_rs_step(rail, blocks, k, 2 * static_cast<int>(ch));
          } else {
            b.ring_ag_step(rail, blocks, k - (m - 1), 2 * static_cast<int>(ch));
          }
        }
      }
    }
    for (int k = 0; k < g - 1; ++k) {
      for (std::size_t ch = 0; ch < c; ++ch) {
        for (const auto& node : nodes) {
          b.ring_ag_step(node, parts[ch], k, 2 * static_cast<int>(ch) + 1);
        }
      }
    }
  }
}

// Binary heap over virtual ranks 0..n-1: parent (v-1)/2.
int heap_parent(int v) {
  return (v - 1) / 2;
}

// Double binary tree: half the buffer reduces up and broadcasts down tree 0 (heap over ranks),
// the other half over tree 1 (the mirrored heap, rank n-1-v), whose interior ranks are tree 0's
// leaves. Chunked: chunk k of both halves goes up then down before chunk k+1 in the global
// order; the dependencies let chunks overlap.
void allreduce_tree(Builder& b, const Seg& all, std::size_t chunk_elems) {
  const int n = b.size();
  const Seg halves[2] = {part(all, 2, 0), part(all, 2, 1)};
  const std::size_t chunks =
      std::max<std::size_t>(1, ceil_div(std::max(halves[0].cnt, halves[1].cnt), chunk_elems));
  for (std::size_t k = 0; k < chunks; ++k) {
    for (int t = 0; t < 2; ++t) {
      const Seg s = part(halves[t], chunks, k);
      auto real = [&](int v) { return t == 0 ? v : n - 1 - v; };
      for (int v = n - 1; v >= 1; --v) b.xfer(real(v), real(heap_parent(v)), t, s, s, true);
      for (int v = 1; v < n; ++v) b.xfer(real(heap_parent(v)), real(v), t, s, s, false);
    }
  }
}

// Recursive halving (reduce-scatter) then doubling (all-gather), Rabenseifner. With n not a
// power of two, the first 2 x rem ranks fold pairwise first (even into odd) and get the result
// back at the end.
void allreduce_rhd(Builder& b, const Seg& all) {
  const int n = b.size();
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int i = 0; i < rem; ++i) b.xfer(2 * i, 2 * i + 1, 0, all, all, true);
  std::vector<std::vector<Seg>> kept(static_cast<std::size_t>(p2));  // per v: range per level
  std::vector<Seg> cur(static_cast<std::size_t>(p2), all);
  for (int d = p2 / 2; d >= 1; d /= 2) {
    std::vector<Seg> next(cur);
    for (int v = 0; v < p2; ++v) {
      const int w = v ^ d;
      const Seg& s = cur[static_cast<std::size_t>(v)];
      const Seg lower = part(s, 2, 0), upper = part(s, 2, 1);
      const bool low = (v & d) == 0;
      const Seg give = low ? upper : lower;
      b.xfer(real(v), real(w), 0, give, give, true);
      kept[static_cast<std::size_t>(v)].push_back(s);
      next[static_cast<std::size_t>(v)] = low ? lower : upper;
    }
    cur = next;
  }
  for (int d = 1, level = 0; d < p2; d *= 2, ++level) {
    (void)level;
    for (int v = 0; v < p2; ++v) {
      const Seg& mine = cur[static_cast<std::size_t>(v)];
      b.xfer(real(v), real(v ^ d), 0, mine, mine, false);
    }
    for (int v = 0; v < p2; ++v) {
      cur[static_cast<std::size_t>(v)] = kept[static_cast<std::size_t>(v)].back();
      kept[static_cast<std::size_t>(v)].pop_back();
    }
  }
  for (int i = 0; i < rem; ++i) b.xfer(2 * i + 1, 2 * i, 0, all, all, false);
}

// Ring over the whole group on equal blocks of `count` elements of buffer `buf` (reduce-scatter
// or all-gather), in channels x rounds sub-blocks.
void ring_blocks(Builder& b, Buf buf, std::size_t count, bool reduce_scatter, int channels,
                 std::size_t chunk_elems) {
  const int n = b.size();
  const auto group = iota_group(n);
  const std::size_t subs =
      static_cast<std::size_t>(channels) *
      std::max<std::size_t>(1, ceil_div(count, static_cast<std::size_t>(channels) * chunk_elems));
  for (std::size_t q = 0; q < subs; ++q) {
    std::vector<Seg> blocks;
    for (int j = 0; j < n; ++j) {
      blocks.push_back(part(Seg{buf, static_cast<std::size_t>(j) * count, count}, subs, q));
    }
    const int lane = static_cast<int>(q % static_cast<std::size_t>(channels));
    for (int k = 0; k < n - 1; ++k) {
      if (reduce_scatter) {
        b.ring_rs_step(group, blocks, k, lane);
      } else {
        b.ring_ag_step(group, blocks, k, lane);
      }
    }
  }
}

// Broadcast (reduce = false) or reduce to root (true) along a chain or a binary tree rooted
// at `root`, chunked.
void rooted(Builder& b, const Seg& all, int root, bool tree, bool reduce, std::size_t chunk_elems) {
  const int n = b.size();
  auto real = [&](int v) { return (v + root) % n; };
  auto up = [&](int v) { return tree ? heap_parent(v) : v - 1; };
  const std::size_t chunks = std::max<std::size_t>(1, ceil_div(all.cnt, chunk_elems));
  for (std::size_t k = 0; k < chunks; ++k) {
    const Seg s = part(all, chunks, k);
    if (reduce) {
      for (int v = n - 1; v >= 1; --v) b.xfer(real(v), real(up(v)), 0, s, s, true);
    } else {
      for (int v = 1; v < n; ++v) b.xfer(real(up(v)), real(v), 0, s, s, false);
    }
  }
}

}  // namespace

bool supports(CollKind kind, Algo algo) {
  if (algo == Algo::kAuto) return true;
  switch (kind) {
    case CollKind::kAllReduce:
      return algo == Algo::kRing || algo == Algo::kRing2 || algo == Algo::kRing2Pipe ||
             algo == Algo::kTree || algo == Algo::kRhd;
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
      return algo == Algo::kRing;
    case CollKind::kBroadcast:
    case CollKind::kReduce:
      return algo == Algo::kRing || algo == Algo::kTree;
    case CollKind::kAllToAll:
    case CollKind::kSendRecv:
      return algo == Algo::kDirect;
  }
  return false;
}

AutoChoice select_auto(CollKind kind, std::size_t bytes, int size, const Topology& topo, int lanes,
                       int channels) {
  const int g = topo.ranks_per_node;
  const bool hier = g > 1 && size % g == 0 && size / g > 1;
  const int c = std::max(1, channels);
  switch (kind) {
    case CollKind::kAllReduce:
      if (size <= 2) return {Algo::kRing, c};
      if (hier) {
        // Measured on emu/collsim's 8 x 8 rail cluster (emu/collsim/README.md): rhd leads to
        // 256 KiB, ring2 (stage by stage) to 8 MiB; from 16 MiB the flat ring with one channel
        // per NIC of the node (every rail busy, no pipeline fill) leads to 512 MiB, where
        // ring2-pipe (its pieces sized by build_plan when auto chose it) catches up and passes
        // it above (the intra-node stages then run at NVLink speed in the shadow of the rails).
        if (bytes <= 256 * 1024) return {Algo::kRhd, c};
        if (bytes <= 8 * 1024 * 1024) return {Algo::kRing2, c};
        if (bytes <= std::size_t{512} * 1024 * 1024) {
          const int per_nic = std::min(g, std::max(1, lanes));
          if (per_nic > 1) return {Algo::kRing, per_nic};
        }
        return {Algo::kRing2Pipe, c};
      }
      if (bytes <= 64 * 1024) return {Algo::kRhd, c};     // fewest steps: 2 log2 n latencies
      if (bytes <= 1024 * 1024) return {Algo::kTree, c};  // pipelined, log n depth
      return {Algo::kRing, c};                            // bandwidth-optimal
    case CollKind::kBroadcast:
    case CollKind::kReduce:
      return {bytes <= 256 * 1024 ? Algo::kTree : Algo::kRing, c};
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
      return {Algo::kRing, c};
    case CollKind::kAllToAll:
    case CollKind::kSendRecv:
      return {Algo::kDirect, c};
  }
  return {Algo::kRing, c};
}

Algo select_algo(CollKind kind, std::size_t bytes, int size, const Topology& topo) {
  return select_auto(kind, bytes, size, topo, 1, 1).algo;
}

Result<Plan, CollErrc> build_plan(const CollArgs& a, int rank, int size, int lanes,
                                  const Topology& topo) {
  if (size < 1 || rank < 0 || rank >= size || lanes < 1 || a.channels < 1) {
    return CollErrc::kInvalidArgument;
  }
  const std::size_t es = elem_bytes(a.dtype);
  const std::size_t n = static_cast<std::size_t>(size);
  const bool rooted_kind = a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce;
  if (rooted_kind && (a.root < 0 || a.root >= size)) return CollErrc::kInvalidArgument;
  Algo algo = a.algo;
  int channels = a.channels;
  if (a.algo == Algo::kAuto) {
    const AutoChoice pick = select_auto(a.kind, a.count * es, size, topo, lanes, a.channels);
    algo = pick.algo;
    channels = pick.channels;
  }
  if (!supports(a.kind, algo)) return CollErrc::kUnsupported;
  const int g = topo.ranks_per_node;
  if ((algo == Algo::kRing2 || algo == Algo::kRing2Pipe) && (g < 1 || size % g != 0)) {
    return CollErrc::kInvalidArgument;
  }
  std::size_t chunk_bytes = a.chunk_bytes;
  if (a.algo == Algo::kAuto && algo == Algo::kRing2Pipe && chunk_bytes != 0) {
    // Pieces of about 1/128 of the buffer per GPU (2-16 MiB chunks): fewer, larger pieces than
    // a small chunk gives keep the inter-node ring from being latency-bound.
    const std::size_t want = std::clamp<std::size_t>(a.count * es / 128, 2u << 20, 16u << 20);
    chunk_bytes = std::max(chunk_bytes, want);
  }
  const std::size_t chunk_elems =
      chunk_bytes == 0 ? SIZE_MAX / 4 : std::max<std::size_t>(1, chunk_bytes / es);
  Builder b(rank, size, lanes, es);
  const std::size_t N = a.count;
  const Seg in{Buf::kIn, 0, N}, out{Buf::kOut, 0, N}, tmp{Buf::kTmp, 0, N};
  const bool avg = a.op == RedOp::kAvg;
  switch (a.kind) {
    case CollKind::kAllReduce: {
      if (a.send != a.recv) b.copy(in, out);
      switch (algo) {
        case Algo::kRing:
          allreduce_ring(b, out, channels, chunk_elems);
          break;
        case Algo::kRing2:
          allreduce_ring2(b, out, channels, 1, g);
          break;
        case Algo::kRing2Pipe: {
          const std::size_t per =
              static_cast<std::size_t>(channels) * static_cast<std::size_t>(g) * chunk_elems;
          allreduce_ring2(b, out, channels, std::max<std::size_t>(2, ceil_div(N, per)), g);
          break;
        }
        case Algo::kTree:
          allreduce_tree(b, out, chunk_elems);
          break;
        case Algo::kRhd:
          allreduce_rhd(b, out);
          break;
        default:
          return CollErrc::kUnsupported;
      }
      if (avg) b.avg(out);
      break;
    }
    case CollKind::kReduceScatter: {
      b.plan().tmp_bytes = n * N * es;
      b.copy(Seg{Buf::kIn, 0, n * N}, Seg{Buf::kTmp, 0, n * N});
      ring_blocks(b, Buf::kTmp, N, true, channels, chunk_elems);
      b.copy(Seg{Buf::kTmp, static_cast<std::size_t>(rank) * N, N}, out);
      if (avg) b.avg(out);
      break;
    }
    case CollKind::kAllGather: {
      const Seg mine{Buf::kOut, static_cast<std::size_t>(rank) * N, N};
      const auto* in_p = static_cast<const std::uint8_t*>(a.send);
      const auto* mine_p = static_cast<const std::uint8_t*>(a.recv) + mine.off * es;
      if (in_p != mine_p) b.copy(in, mine);
      ring_blocks(b, Buf::kOut, N, false, channels, chunk_elems);
      break;
    }
    case CollKind::kBroadcast: {
      if (rank == a.root && a.send != a.recv) b.copy(in, out);
      rooted(b, out, a.root, algo == Algo::kTree, false, chunk_elems);
      break;
    }
    case CollKind::kReduce: {
      b.plan().tmp_bytes = N * es;
      b.copy(in, tmp);
      rooted(b, tmp, a.root, algo == Algo::kTree, true, chunk_elems);
      if (rank == a.root) {
        b.copy(tmp, out);
        if (avg) b.avg(out);
      }
      break;
    }
    case CollKind::kAllToAll: {
      if (N > 0 && a.send == a.recv) return CollErrc::kInvalidArgument;
      const auto r = static_cast<std::size_t>(rank);
      b.copy(Seg{Buf::kIn, r * N, N}, Seg{Buf::kOut, r * N, N});
      for (int k = 1; k < size; ++k) {
        for (int i = 0; i < size; ++i) {
          const int j = (i + k) % size;
          b.xfer(i, j, 0, Seg{Buf::kIn, static_cast<std::size_t>(j) * N, N},
                 Seg{Buf::kOut, static_cast<std::size_t>(i) * N, N}, false);
        }
      }
      break;
    }
    case CollKind::kSendRecv: {
      if (a.send_peer >= size || a.recv_peer >= size) return CollErrc::kInvalidArgument;
      if (a.send_peer == rank || a.recv_peer == rank) {
        if (a.send_peer != a.recv_peer) return CollErrc::kInvalidArgument;
        if (a.send != a.recv) b.copy(in, out);
        break;
      }
      // In place would make each receive wait for the rank's own send (write after read) while
      // that send waits for credits the peer returns only after its own receive: a cycle.
      if (N > 0 && a.send == a.recv && a.send_peer >= 0 && a.recv_peer >= 0) {
        return CollErrc::kInvalidArgument;
      }
      if (a.send_peer >= 0) b.xfer(rank, a.send_peer, 0, in, in, false);
      if (a.recv_peer >= 0) b.xfer(a.recv_peer, rank, 0, out, out, false);
      break;
    }
  }
  b.plan().algo = algo;
  b.plan().channels = channels;
  b.plan().chunk_bytes = chunk_bytes;
  return std::move(b.plan());
}

}  // namespace weft::coll
