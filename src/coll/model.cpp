// coll/model.cpp — the alpha-beta model (see model.hpp).
#include "src/coll/model.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace weft::coll {

double model_allreduce_s(Algo algo, double S, const ModelParams& p) {
  const double m = p.nodes, g = p.gpus_per_node, n = m * g;
  if (n <= 1) return 0;
  const double red = p.reduce_Bps > 0 ? (n - 1) / n * S / p.reduce_Bps : 0;
  if (algo == Algo::kRing2 || algo == Algo::kRing2Pipe) {
    const double intra = 2 * (g - 1) / g * S / p.nvl_Bps;
    const double inter = m > 1 ? 2 * (m - 1) / m * (S / g) / p.nic_Bps : 0;
    const double lat = 2 * (g - 1) * p.alpha_s + 2 * (m - 1) * p.alpha_s;
    if (algo == Algo::kRing2) return intra + inter + lat + red;
    const double P = std::max(1, p.pipeline_pieces);
    return std::max(intra, inter) + std::min(intra, inter) / P + lat + red;
  }
  const double B = m > 1 ? std::min(p.channels * p.nic_Bps, p.nvl_Bps) : p.nvl_Bps;
  return 2 * (n - 1) / n * S / B + 2 * (n - 1) * p.alpha_s + red;
}

namespace {

// One kind of hop of a ring: `count` hops of bandwidth B and latency lat (grants come back
// after glat); `share` items cross the same port per step (channels on one NVLink egress).
struct Hop {
  double count, B, lat, glat, share;
};

// One ring phase of k steps moving items of s bytes over `hops` (see model.hpp).
double ring_phase(double k, double s, const std::vector<Hop>& hops, bool reduce, double c,
                  const ModelParams& p) {
  if (k <= 0 || s <= 0) return 0;
  const double red = reduce && p.reduce_Bps > 0 ? s / p.reduce_Bps : 0;
  const double chunk = p.chunk_bytes > 0 ? p.chunk_bytes : s;
  const double frags = std::max(1.0, std::ceil(s / chunk)), cs = std::min(s, chunk);
  const double slots = std::max(1, p.slots);
  double bandwidth = c * red, chain = 0, count = 0, credit = 0;
  for (const Hop& h : hops) {
    if (h.count <= 0) continue;
    bandwidth = std::max(bandwidth, h.share * s / h.B);
    chain += h.count * (s / h.B + h.lat + red);
    count += h.count;
    credit = std::max(credit, frags * (cs / h.B + h.lat + h.glat) / slots);
  }
  return k * std::max({bandwidth, chain / count, credit});
}

}  // namespace

double model_allreduce_steps_s(Algo algo, double S, const ModelParams& p) {
  const double m = p.nodes, g = p.gpus_per_node, n = m * g;
  if (n <= 1 || S <= 0) return 0;
  const double a = p.alpha_s, anv = p.nvl_latency_s, chunk = std::max(1.0, p.chunk_bytes);
  const double c = std::max(1, p.channels);
  const Hop nvl{0, p.nvl_Bps, anv, anv, c};
  if (algo == Algo::kRing2 || algo == Algo::kRing2Pipe) {
    const double P = algo == Algo::kRing2 ? 1 : std::max(2, p.pipeline_pieces);
    const double Sp = S / (c * P);
    Hop intra = nvl;
    intra.count = g;
    // Inter-node: the rail's ring (same rail at both ends: no spine); each NIC carries one
    // (GPU, channel) stream per channel.
    const Hop inter{m, p.nic_Bps, a, a, c};
    const double A = g > 1 ? ring_phase(g - 1, Sp / g, {intra}, true, c, p) : 0;
    const double C = g > 1 ? ring_phase(g - 1, Sp / g, {intra}, false, c, p) : 0;
    const double B = m > 1 ? ring_phase(m - 1, Sp / g / m, {inter}, true, c, p) +
                                 ring_phase(m - 1, Sp / g / m, {inter}, false, c, p)
                           : 0;
    const double tail = m > 1 ? a : anv;
    if (P <= 1) return A + B + C + tail;
    const double nvl_busy = 2 * (g - 1) * c * (Sp / g) / p.nvl_Bps;
    return A + B + C + (P - 1) * std::max({A, B, C, nvl_busy}) + tail;
  }
  const double lat = m > 1 ? a + p.spine_latency_s : anv;
  if (algo == Algo::kTree) {
    // K chunks of each half; a chunk climbs d levels and comes down d (fill and drain: one
    // hop time each, a parent receiving two children's chunks); in between the busiest port
    // passes 4 chunks per chunk step: an interior GPU's 2 from its children and 1 from its
    // parent, plus its neighbour's leaf chunk in the other tree (lane 1 leaves through the
    // NIC of GPU g+1).
    const double K = std::max(1.0, std::ceil(S / 2 / chunk)), cs = S / 2 / K;
    const double B = m > 1 ? p.nic_Bps : p.nvl_Bps;
    const double d = std::floor(std::log2(n));
    const double red = p.reduce_Bps > 0 ? 2 * cs / p.reduce_Bps : 0;
    const double credit = (cs / B + lat + (m > 1 ? a : anv)) / std::max(1, p.slots);
    const double step = std::max({4 * cs / B, red, credit});
    return (K - 1) * step + 2 * d * (cs / B + lat) + lat;
  }
  // Flat ring: c rings, each over S/c in rounds of n x chunk; m NIC hops (between rails: the
  // channel's NIC at one end, the next GPU's lane NIC at the other) and n - m NVLink hops.
  const double R = std::max(1.0, std::ceil(S / (c * n * chunk))), s = S / (c * n * R);
  std::vector<Hop> hops;
  if (m > 1) hops.push_back({m, p.nic_Bps, a + p.spine_latency_s, a, std::ceil(c / g)});
  Hop h = nvl;
  h.count = n - (m > 1 ? m : 0);
  hops.push_back(h);
  return R * (ring_phase(n - 1, s, hops, true, c, p) + ring_phase(n - 1, s, hops, false, c, p)) +
         lat;
}

double allreduce_busbw(double S, double T, int ranks) {
  if (T <= 0 || ranks <= 1) return 0;
  return S / T * 2.0 * (ranks - 1) / ranks;
}

double busbw_factor(CollKind kind, int n) {
  const double nn = n;
  switch (kind) {
    case CollKind::kAllReduce:
      return 2 * (nn - 1) / nn;
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
    case CollKind::kAllToAll:
      return (nn - 1) / nn;
    default:
      return 1;
  }
}

}  // namespace weft::coll
