// emu/topo/spec.hpp — topology spec strings: "kind:key=value,key=value".
//
//   fat-tree:k=8                         k-ary fat tree (3 levels; levels=2 for a 2-level one)
//   fat-tree:levels=2,radix=36           full 2-level tree of 36-port switches (648 HCAs);
//                                        leaves=, hosts=, spines=, oversub= override
//   fat-tree:levels=3,radix=36           full 3-level tree (11,664 HCAs); pods=, leaves=,
//                                        hosts=, aggs=, cores=, oversub= override
//   leaf-spine:leaves=4,spines=2,hosts=8 links= (per leaf-spine pair), radix=
//   rail:nodes=4,gpus=8,spines=2         links= (per rail-spine pair), radix=
//   torus:dims=4x4x4,hosts=1             mesh:dims=8x8 (same keys)
//   dragonfly:groups=9,routers=4,hosts=2,global=2
// Every kind also takes speed= (SDR..XDR) and width= (1x,2x,4x,8x,12x) for all its links.
// oversub=N (or N:1) sets hosts per leaf to radix*N/(N+1) (2:1 on 36 ports: 24 hosts, 12 up).
//
// Errors are values: an unknown kind or key, a missing required key, a malformed or
// out-of-range number, or a generator's refusal, as SpecError with one sentence naming the
// culprit. Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

#include "emu/topo/generators.hpp"

namespace weft::topo {

struct SpecError {
  std::string message;
};

Result<Topology, SpecError> from_spec(std::string_view spec);

}  // namespace weft::topo
