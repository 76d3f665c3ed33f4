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
  // The step model (model_allreduce_steps_s) only:
  double nvl_latency_s = 0.5e-6;  // one NVLink hop (alpha_s is the NIC-to-NIC latency)
  double spine_latency_s = 0;     // added to a NIC hop between NICs of different rails
  double chunk_bytes = 1 << 20;   // the algorithms' chunk and the inbox slot size
  int slots = 4;                  // credits per connection
  double tree_nic_share = 1.5;    // double binary tree: NIC ingress bytes per byte of S/2
};

// Modelled all-reduce time of S bytes with `algo` (kRing, kRing2, kRing2Pipe; others: ring).
double model_allreduce_s(Algo algo, double bytes, const ModelParams& p);
// The step model of the same all-reduce as the plans in plan.cpp run it (kRing, kRing2,
// kRing2Pipe, kTree; others: ring), for the latency-bound sizes where the alpha-beta sum above
// is off by up to 2x. Every ring phase of k steps moving items of s bytes costs
//   k x max(bandwidth, chain, credit) per step, where
//   bandwidth = the busiest port's serialisation per step (a NIC: s/B_nic; a GPU's NVLink
//               egress: c x s/B_nvl, shared by the c channels; the GPU's reduction: c x s/R);
//   chain     = the mean over the ring's hops of one item's hop time (s/B + latency, + s/R on
//               reduce steps): an item can be forwarded only once it has arrived, so a ring
//               of hops advances one item per hop-time on average (the latency bound);
//   credit    = the slowest hop's credit loop per item: (chunk/B + latency + grant latency)
//               / slots x chunks per item (a slot comes back one grant latency after use).
// The steps of one phase do not overlap with the next phase's (each depends on the one
// before); a message of several chunks is forwarded whole (store and forward per item);
// the run ends one latency after the last write (its completion). ring2-pipe: P pieces run
// the three stages (intra reduce-scatter, inter-node ring, intra all-gather) as a pipeline:
//   T = A + B + C + (P-1) x max(A, B, C, nvl(A) + nvl(C)),
// A, B, C the stage times of one piece, nvl() their NVLink busy time (A and C share the port).
// tree: K chunks of both halves up and down depth-d heap trees: T = K x max(bandwidth, credit)
// + 2d hop times (fill and drain), bandwidth = the NIC's ingress (tree_nic_share x chunk) and
// the reduction of two children's chunks. Derivation and validation: emu/collsim/README.md.
double model_allreduce_steps_s(Algo algo, double bytes, const ModelParams& p);
// nccl-tests' bus bandwidth of an all-reduce of S bytes in T seconds on n ranks.
double allreduce_busbw(double bytes, double seconds, int ranks);
// nccl-tests' bus bandwidth factor (busbw = algbw x factor) of `kind` on n ranks: 2(n-1)/n for
// all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all, 1 otherwise.
double busbw_factor(CollKind kind, int n);

}  // namespace weft::coll
