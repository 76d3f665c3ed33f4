// coll/model.hpp — the alpha-beta model of all-reduce time (issue 6), for comparison with
// measured runs. All bandwidths in bytes per second, times in seconds.
//
//   flat ring, c channels:  T = 2(n-1)/n * S / min(c*B_nic, B_nvl) + 2(n-1) alpha
//                           (one node, m = 1: the ring never leaves NVLink: B = B_nvl)
//   two-stage, by stage:    T = 2(g-1)/g * S / B_nvl + 2(m-1)/m * (S/g) / B_nic
//                               + 2(g-1) alpha + 2(m-1) alpha
//   two-stage, pipelined:   T = max(T_intra, T_inter) + min(T_intra, T_inter) / P
//                               + latency terms as above; P = pipeline pieces (the fill is one
//                               piece of the faster stage)
//   busbw = (S / T) * 2(n-1)/n
// Added terms: none for the reduction arithmetic by default; reduce_Bps > 0 adds
// (n-1)/n * S / reduce_Bps to every algorithm (each rank reduces (n-1)/n of the buffer).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include "src/coll/types.hpp"

namespace weft::coll {

struct ModelParams {
  int nodes = 1;            // m
  int gpus_per_node = 1;    // g
  double nvl_Bps = 450e9;   // per-GPU NVLink bandwidth, each way
  double nic_Bps = 50e9;    // per-NIC bandwidth
  double alpha_s = 5e-6;    // per-step latency
  int channels = 1;         // flat ring: c
  int pipeline_pieces = 1;  // two-stage pipelined: P
  double reduce_Bps = 0;    // 0 = reduction time not modelled
};

// Modelled all-reduce time of S bytes with `algo` (kRing, kRing2, kRing2Pipe; others: ring).
double model_allreduce_s(Algo algo, double bytes, const ModelParams& p);
// nccl-tests' bus bandwidth of an all-reduce of S bytes in T seconds on n ranks.
double allreduce_busbw(double bytes, double seconds, int ranks);
// nccl-tests' bus bandwidth factor (busbw = algbw x factor) of `kind` on n ranks: 2(n-1)/n for
// all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all, 1 otherwise.
double busbw_factor(CollKind kind, int n);

}  // namespace weft::coll
