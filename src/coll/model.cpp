// coll/model.cpp — the alpha-beta model (see model.hpp).
#include "src/coll/model.hpp"

#include <algorithm>
#include <array>
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
// With `repeat`, the time until the same phase of the next piece can start on the same
// connections (ring2-pipe): one step less of the chain, as the next piece's first send
// follows this piece's last send, not its arrival.
double ring_phase(double k, double s, const std::vector<Hop>& hops, bool reduce, double c,
                  const ModelParams& p, bool repeat = false) {
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
  const double thr = std::max(bandwidth, credit), step = std::max(thr, chain / count);
  return repeat ? (k - 1) * step + thr : k * step;
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
    auto stages = [&](bool thr) {
      const double A = g > 1 ? ring_phase(g - 1, Sp / g, {intra}, true, c, p, thr) : 0;
      const double C = g > 1 ? ring_phase(g - 1, Sp / g, {intra}, false, c, p, thr) : 0;
      const double B = m > 1 ? ring_phase(m - 1, Sp / g / m, {inter}, true, c, p) +
                                   ring_phase(m - 1, Sp / g / m, {inter}, false, c, p, thr)
                             : 0;
      return std::array<double, 3>{A, B, C};
    };
    const auto [A, B, C] = stages(false);
    const double tail = m > 1 ? a : anv;
    if (P <= 1) return A + B + C + tail;
    // Each further piece costs its slowest stage's repeat time (or the NVLink port both intra
    // stages share).
    const auto [At, Bt, Ct] = stages(true);
    const double nvl_busy = 2 * (g - 1) * c * (Sp / g) / p.nvl_Bps;
    return A + B + C + (P - 1) * std::max({At, Bt, Ct, nvl_busy}) + tail;
  }
  const double lat = m > 1 ? a + p.spine_latency_s : anv;
  if (algo == Algo::kTree) {
    // K chunks of each half go up and down the two heap trees (tree 1 on lane 1, mirrored).
    // Per chunk step the busiest port (NVLink or NIC, egress or ingress; lane l of GPU x
    // leaves through the NIC of GPU x+l, as collsim maps lanes) passes its count of chunks;
    // the first chunk's fill and the last one's drain are the deepest path up and down.
    const double K = std::max(1.0, std::ceil(S / 2 / chunk)), cs = S / 2 / K;
    const int N = static_cast<int>(n), G = static_cast<int>(g);
    std::vector<double> nvl_out(N), nvl_in(N), nic_out(N), nic_in(N), path(N, 0.0);
    double fill = 0, credit = 0;
    for (int t = 0; t < 2; ++t) {
      auto real = [&](int v) { return t == 0 ? v : N - 1 - v; };
      for (int v = 1; v < N; ++v) {
        const int x = real(v), y = real((v - 1) / 2);
        const bool local = x / G == y / G;
        // The parent's chunks from (and to) its children over the same port follow each
        // other through it: the hop waits for all of them.
        double same = 0;
        for (int w = 2 * ((v - 1) / 2) + 1; w <= 2 * ((v - 1) / 2) + 2 && w < N; ++w)
          same += (real(w) / G == y / G) == local ? 1 : 0;
        double hop;
        if (local) {
          nvl_out[x] += 1, nvl_in[y] += 1, nvl_out[y] += 1, nvl_in[x] += 1;  // up and down
          hop = same * cs / p.nvl_Bps + anv;
          credit = std::max(credit, (cs / p.nvl_Bps + 2 * anv) / std::max(1, p.slots));
        } else {
          const int ex = x / G * G + (x % G + t) % G, ey = y / G * G + (y % G + t) % G;
          nic_out[ex] += 1, nic_in[ey] += 1, nic_out[ey] += 1, nic_in[ex] += 1;
          const double l = a + ((x + t) % G != (y + t) % G ? p.spine_latency_s : 0);
          hop = same * cs / p.nic_Bps + l;
          credit = std::max(credit, (cs / p.nic_Bps + l + a) / std::max(1, p.slots));
        }
        path[v] = path[(v - 1) / 2] + hop;  // heap order: the parent's path is known
        fill = std::max(fill, 2 * path[v]);
      }
    }
    double busy = 0;
    for (int i = 0; i < N; ++i) {
      busy = std::max({busy, std::max(nvl_out[i], nvl_in[i]) * cs / p.nvl_Bps,
                       std::max(nic_out[i], nic_in[i]) * cs / p.nic_Bps});
    }
    const double red = p.reduce_Bps > 0 ? 2 * cs / p.reduce_Bps : 0;  // two children's chunks
    return (K - 1) * std::max({busy, red, credit}) + fill + lat;
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
