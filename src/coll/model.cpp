// coll/model.cpp — the alpha-beta model (see model.hpp).
#include "src/coll/model.hpp"

#include <algorithm>

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
