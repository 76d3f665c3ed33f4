// tests/coll/check.hpp — runs one collective on a Cluster with seeded inputs and checks every
// element of every rank's output against the reference (reference.hpp). Thread-safety: pure.
#pragma once

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/coll/cluster.hpp"
#include "tests/coll/reference.hpp"

namespace weft::coll::test {

struct Case {
  CollKind kind = CollKind::kAllReduce;
  Algo algo = Algo::kAuto;
  DataType dtype = DataType::kF32;
  RedOp op = RedOp::kSum;
  std::size_t count = 100;
  int root = 0;
  int channels = 1;
  std::size_t chunk_bytes = 4096;
  bool in_place = false;
  std::uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream s;
    s << to_string(kind) << " algo=" << to_string(algo) << " type=" << to_string(dtype)
      << " op=" << to_string(op) << " count=" << count << " root=" << root
      << " channels=" << channels << " chunk=" << chunk_bytes << " in_place=" << in_place
      << " seed=" << seed;
    return s.str();
  }
};

inline ::testing::AssertionResult run_case(Cluster& cl, int n, const Case& c,
                                           TimeNs* elapsed = nullptr) {
  const std::size_t es = elem_bytes(c.dtype), N = c.count, un = static_cast<std::size_t>(n);
  std::size_t in_elems = N, out_elems = N;
  switch (c.kind) {
    case CollKind::kReduceScatter:
      in_elems = un * N;
      break;
    case CollKind::kAllGather:
      out_elems = un * N;
      break;
    case CollKind::kAllToAll:
      in_elems = out_elems = un * N;
      break;
    default:
      break;
  }
  SeededRng rng(c.seed);
  const bool reducing = c.kind == CollKind::kAllReduce || c.kind == CollKind::kReduceScatter ||
                        c.kind == CollKind::kReduce;
  // Each rank owns one allocation big enough for both buffers (in place needs them nested).
  std::vector<std::vector<std::uint8_t>> in(un), out(un), mem(un);
  std::vector<CollArgs> args(un);
  for (std::size_t r = 0; r < un; ++r) {
    in[r].resize(in_elems * es + 1);
    for (std::size_t i = 0; i < in_elems; ++i) {
      put(c.dtype, in[r].data(), i,
          reducing ? input_value(c.dtype, c.op, rng) : static_cast<double>(rng.below(100)));
    }
    mem[r].assign((in_elems + out_elems) * es + 16, 0xEE);
    CollArgs& a = args[r];
    a.kind = c.kind;
    a.count = N;
    a.dtype = c.dtype;
    a.op = c.op;
    a.root = c.root;
    a.algo = c.algo;
    a.channels = c.channels;
    a.chunk_bytes = c.chunk_bytes;
    a.send_peer = n > 1 ? static_cast<int>((r + 1) % un) : 0;
    a.recv_peer = n > 1 ? static_cast<int>((r + un - 1) % un) : 0;
    std::uint8_t* base = mem[r].data();
    if (!c.in_place) {
      std::memcpy(base, in[r].data(), in_elems * es);
      a.send = base;
      a.recv = base + in_elems * es + 8;
    } else if (c.kind == CollKind::kReduceScatter) {
      std::memcpy(base, in[r].data(), in_elems * es);
      a.send = base;
      a.recv = base + r * N * es;
    } else if (c.kind == CollKind::kAllGather) {
      a.recv = base;
      a.send = base + r * N * es;
      std::memcpy(base + r * N * es, in[r].data(), N * es);
    } else {
      std::memcpy(base, in[r].data(), in_elems * es);
      a.send = a.recv = base;
    }
  }
  std::vector<CollErrc> errs;
  const RunResult res = cl.run(args, &errs);
  for (std::size_t r = 0; r < un; ++r) {
    if (errs[r] != CollErrc::kOk) {
      return ::testing::AssertionFailure()
             << c.describe() << ": rank " << r << " start: " << to_string(errs[r]);
    }
  }
  if (!res.finished) return ::testing::AssertionFailure() << c.describe() << ": did not finish";
  for (std::size_t r = 0; r < un; ++r) {
    if (res.states[r] != CollState::kDone) {
      return ::testing::AssertionFailure()
             << c.describe() << ": rank " << r << " " << to_string(res.states[r]);
    }
  }
  if (elapsed != nullptr) *elapsed = res.elapsed_ns;
  auto outp = [&](std::size_t r) { return static_cast<const std::uint8_t*>(args[r].recv); };
  std::vector<double> vals(un);
  auto fail = [&](std::size_t r, std::size_t i, double got, double want) {
    return ::testing::AssertionFailure() << c.describe() << ": rank " << r << " element " << i
                                         << " got " << got << " want " << want;
  };
  double got = 0;
  // True when element i of rank r's output is the reduction of element src_i of the inputs.
  auto bad = [&](std::size_t r, std::size_t i, std::size_t src_i) {
    for (std::size_t k = 0; k < un; ++k) vals[k] = get(c.dtype, in[k].data(), src_i);
    const double want = reference(c.dtype, c.op, vals);
    got = get(c.dtype, outp(r), i);
    return !(std::fabs(got - want) <= tolerance(c.dtype, c.op, vals));
  };
  for (std::size_t r = 0; r < un; ++r) {
    switch (c.kind) {
      case CollKind::kAllReduce:
        for (std::size_t i = 0; i < N; ++i) {
          if (bad(r, i, i)) return fail(r, i, got, reference(c.dtype, c.op, vals));
        }
        // Every rank holds the same bits: each element is reduced once, then copied.
        if (N > 0 && std::memcmp(outp(r), outp(0), N * es) != 0) {
          return ::testing::AssertionFailure()
                 << c.describe() << ": rank " << r << " differs bitwise from rank 0";
        }
        break;
      case CollKind::kReduceScatter:
        for (std::size_t i = 0; i < N; ++i) {
          if (bad(r, i, r * N + i)) return fail(r, i, got, reference(c.dtype, c.op, vals));
        }
        break;
      case CollKind::kReduce:
        if (static_cast<int>(r) != c.root) break;
        for (std::size_t i = 0; i < N; ++i) {
          if (bad(r, i, i)) return fail(r, i, got, reference(c.dtype, c.op, vals));
        }
        break;
      case CollKind::kAllGather:
        for (std::size_t j = 0; j < un; ++j) {
          if (std::memcmp(outp(r) + j * N * es, in[j].data(), N * es) != 0) {
            return ::testing::AssertionFailure()
                   << c.describe() << ": rank " << r << " block " << j << " wrong";
          }
        }
        break;
      case CollKind::kBroadcast:
        if (std::memcmp(outp(r), in[static_cast<std::size_t>(c.root)].data(), N * es) != 0) {
          return ::testing::AssertionFailure() << c.describe() << ": rank " << r << " wrong";
        }
        break;
      case CollKind::kAllToAll:
        for (std::size_t j = 0; j < un; ++j) {
          if (std::memcmp(outp(r) + j * N * es, in[j].data() + r * N * es, N * es) != 0) {
            return ::testing::AssertionFailure()
                   << c.describe() << ": rank " << r << " block from " << j << " wrong";
          }
        }
        break;
      case CollKind::kSendRecv:
        if (std::memcmp(outp(r), in[(r + un - 1) % un].data(), N * es) != 0) {
          return ::testing::AssertionFailure() << c.describe() << ": rank " << r << " wrong";
        }
        break;
    }
  }
  return ::testing::AssertionSuccess();
}

// Every (collective, algorithm) pair the library implements, auto included.
inline std::vector<std::pair<CollKind, Algo>> all_pairs() {
  std::vector<std::pair<CollKind, Algo>> out;
  const CollKind kinds[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                            CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll,
                            CollKind::kSendRecv};
  const Algo algos[] = {Algo::kAuto, Algo::kRing, Algo::kRing2, Algo::kRing2Pipe,
                        Algo::kTree, Algo::kRhd,  Algo::kDirect};
  for (CollKind k : kinds) {
    for (Algo a : algos) {
      if (supports(k, a)) out.emplace_back(k, a);
    }
  }
  return out;
}

}  // namespace weft::coll::test
