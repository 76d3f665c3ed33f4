// emu/fabric/workload.hpp — RC endpoints over an emulated fabric and a driver for streams of
// RDMA WRITEs, shared by the fabric tests and benchmarks (a library, not a main: STYLE 11).
//
// The driver runs outside the Simulator: it advances virtual time in slices, polls the CQs,
// reposts work and kicks the HCAs (the way an application thread would).
// Thread-safety: the Simulator's thread. Lifetime: endpoints point into their Device.
#pragma once

#include <cstdint>
#include <vector>

#include <weft/device.hpp>

#include "emu/fabric/fabric.hpp"

namespace weft::fabric {

struct RcEndpoint {
  topo::NodeId node = topo::kNoNode;
  Device* dev = nullptr;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* qp = nullptr;
  std::vector<std::uint8_t> mem;
  MemoryRegion* mr = nullptr;
};

struct RcConnectParams {
  Mtu mtu = Mtu::k1024;
  std::uint8_t sl = 0;
  std::uint8_t timeout = 8;  // 4.096 us * 2^8 ~ 1 ms
  std::uint8_t retry_cnt = 7;
  RecoveryMode recovery = RecoveryMode::kGoBackN;
  std::uint32_t wr_max = 512;
  std::uint32_t cq_depth = 4096;
};

// A PD, a CQ, an RC QP and `mem_bytes` of registered memory (all access) on HCA `node`.
RcEndpoint make_endpoint(Fabric& f, topo::NodeId node, std::size_t mem_bytes,
                         const RcConnectParams& p = {});
// Brings both QPs RESET -> RTS towards each other (port 1's LIDs). Returns the first error.
Errc connect_rc(Fabric& f, RcEndpoint& a, RcEndpoint& b, const RcConnectParams& p = {});

// One direction of RDMA WRITEs kept `outstanding_max` deep.
struct WriteStream {
  RcEndpoint* src = nullptr;
  RcEndpoint* dst = nullptr;
  std::uint32_t msg_bytes = 65536;
  std::uint32_t outstanding_max = 8;
  std::uint64_t messages_max = UINT64_MAX;
  std::uint64_t posted = 0, completed = 0, errors = 0;
  std::uint64_t bytes_completed = 0;
};

// Reposts what completed and kicks the sources. Returns completions seen.
std::uint64_t service_streams(Fabric& f, std::vector<WriteStream>& streams);
// Runs the streams until virtual time `until_ns`, servicing every `slice_ns`.
void run_streams(Fabric& f, std::vector<WriteStream>& streams, TimeNs until_ns,
                 TimeNs slice_ns = 1000);

}  // namespace weft::fabric
