// emu/collsim/fabric_net.hpp — the inter-node half of a GPU cluster on the packet-level fabric:
// every GPU's NIC is an HCA of an emu/fabric Fabric (built from a topology spec, brought up by
// the subnet manager over SMPs, kept running so a link failure makes it re-route), and a
// collective's chunks between GPUs of different nodes are real RDMA WRITE WITH IMMEDIATE work
// requests on RC QPs, carried as packets through the switches under credit flow control, with
// the RC transport's ACKs and retransmissions. Credit grants are zero-length SEND WITH IMM.
//
// Addressing follows collsim's NIC model: lane l of GPU g leaves through the NIC of GPU
// (g + l) mod G of its node and enters through (g' + l) mod G on the peer's node, so one RC QP
// pair per (unordered rank pair, lane) serves both directions. Connections are made on first
// use, at no virtual-time cost (as a communicator's setup would before the timed run).
// Inboxes: one per (rank, peer, lane) side of slots x slot_bytes in registered memory with full
// payload; timing-only runs (kTimingOnly, no payload carried) share one inbox region per HCA.
//
// Completions are polled at the exact virtual time they appear (HcaNode completion hook) and
// handed to the sink as coll::TransportEvents of the rank that owns the QP; the Simulator is
// asked to stop then so the driver can run the ranks.
// Thread-safety: the Simulator's thread. Lifetime: owns the Simulator, Fabric and SM.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <weft/device.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/faults/injector.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/routing/routes.hpp"
#include "emu/sim/simulator.hpp"
#include "emu/simrun/sm_control.hpp"
#include "emu/topo/topology.hpp"
#include "src/coll/transport.hpp"

namespace weft::collsim {

struct FabricNetConfig {
  std::string topology = "rail:nodes=2,gpus=2,spines=1";  // emu/topo spec
  bool payload = true;  // kVerified (bytes carried and checked) or kTimingOnly
  int lanes = 1;
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 1 << 20;
  std::uint64_t seed = 1;
  Mtu mtu = Mtu::k4096;
  std::uint8_t qp_timeout = 8;  // 4.096 us x 2^8 ~ 1 ms per try
  std::uint8_t retry_cnt = 7;
  faults::Scenario scenario;          // applied when the collective starts (times relative to it)
  routing::RoutingOptions routing{};  // the SM's routing engine and its options
  int lmc = 0;                        // the SM's LMC (IBA 7.11.1)
};

struct FabricNetStats {
  std::uint64_t qps = 0;                 // RC QPs created
  std::uint64_t packets_delivered = 0;   // data packets the HCAs took
  std::uint64_t events = 0;              // Simulator events dispatched (bring-up excluded)
  std::uint64_t retransmit_hint = 0;     // PortXmitDiscards + fault drops, every port
  std::uint64_t completions_failed = 0;  // error completions seen
};

// Payload bytes per second HCA `hca`'s link moves in full packets of `mtu` (link rate x payload
// / FEC line bytes), and one NIC-to-NIC latency through one switch, under `fc`.
double fabric_goodput_Bps(const topo::Topology& t, topo::NodeId hca, const fabric::FabricConfig& fc,
                          Mtu mtu);
double fabric_latency_s(const fabric::FabricConfig& fc);
// The part of fabric_latency_s that is the route: one switch and its two cables (ns).
double fabric_one_switch_route_ns(const fabric::FabricConfig& fc);

class FabricNet {
 public:
  using Sink = std::function<void(int rank, const coll::TransportEvent& ev)>;

  // Builds the topology and the fabric and brings the subnet up. `nodes` x `gpus` must match
  // the topology's NVLink domains (or gpus == 1 and one rank per HCA). Errors: one sentence.
  static Result<std::unique_ptr<FabricNet>, std::string> create(const FabricNetConfig& cfg,
                                                                int nodes, int gpus);
  ~FabricNet();
  FabricNet(const FabricNet&) = delete;
  FabricNet& operator=(const FabricNet&) = delete;

  void set_sink(Sink s) { sink_ = std::move(s); }
  // Starts the fault scenario now (its times are relative to this call).
  void start_faults();

  coll::TransportErrc register_memory(int rank, const void* addr, std::size_t bytes);
  void unregister_memory(int rank, const void* addr);
  coll::TransportErrc write(int from, int to, int lane, const void* src, std::uint32_t bytes,
                            std::uint32_t slot, std::uint64_t wr_id);
  coll::TransportErrc grant(int from, int to, int lane, std::uint32_t credits);
  const std::uint8_t* inbox(int rank, int peer, int lane, std::uint32_t slot) const;

  sim::Simulator& sim() { return *sim_; }
  fabric::Fabric& fabric() { return *fabric_; }
  const topo::Topology& topology() const { return topo_; }
  // Payload bytes per second one NIC can move (link rate x payload / FEC line bytes at the
  // path MTU) and an estimate of one NIC-to-NIC latency through a rail switch: what the coarse
  // model needs to describe this fabric.
  double goodput_Bps() const {
    return fabric_goodput_Bps(topo_, hca_.front(), fabric_->config(), cfg_.mtu);
  }
  double latency_s() const { return fabric_latency_s(fabric_->config()); }
  const simrun::SmReport& sm_report() const { return sm_->report(); }
  const faults::FaultLog& fault_log() const { return log_; }
  FabricNetStats stats();
  // The HCA (topology node) of a rank's own NIC.
  topo::NodeId hca_of(int rank) const { return hca_[static_cast<std::size_t>(rank)]; }

 private:
  struct Side {  // one rank's end of a (rank, peer, lane) connection
    int rank = 0, peer = 0, lane = 0;
    int dev = 0;  // index into devs_
    QueuePair* qp = nullptr;
    std::vector<std::uint8_t> inbox;  // payload mode
    MemoryRegion* inbox_mr = nullptr;
    const std::uint8_t* inbox_base = nullptr;
    std::uint64_t remote_addr = 0;
    std::uint32_t remote_rkey = 0;
  };
  struct Reg {
    MemoryRegion* mr = nullptr;
    int refs = 0;
  };
  struct Dev {
    topo::NodeId node = topo::kNoNode;
    Device* device = nullptr;
    ProtectionDomain* pd = nullptr;
    CompletionQueue* cq = nullptr;
    std::unordered_map<std::uint32_t, std::uint32_t> qpn_side;
    std::map<const void*, Reg> regs;
    std::vector<std::uint8_t> shared_inbox;  // timing-only
    MemoryRegion* shared_mr = nullptr;
  };

  FabricNet() = default;
  std::uint64_t key(int rank, int peer, int lane) const {
    return (static_cast<std::uint64_t>(rank) * static_cast<std::uint64_t>(n_) +
            static_cast<std::uint64_t>(peer)) *
               static_cast<std::uint64_t>(cfg_.lanes) +
           static_cast<std::uint64_t>(lane);
  }
  int nic_dev(int rank, int lane) const {
    return rank / gpus_ * gpus_ + (rank % gpus_ + lane) % gpus_;
  }
  Side* side(int rank, int peer, int lane);
  bool make_side(Side& s);
  void on_completions(int dev);
  std::uint32_t lkey_of(Dev& d, const void* src, std::uint32_t bytes) const;

  FabricNetConfig cfg_;
  int n_ = 0, gpus_ = 1;
  topo::Topology topo_;
  std::unique_ptr<sim::Simulator> sim_;
  std::unique_ptr<fabric::Fabric> fabric_;
  faults::FaultLog log_;
  std::unique_ptr<simrun::FabricSmControl> sm_;
  std::unique_ptr<faults::FaultInjector> injector_;
  std::vector<topo::NodeId> hca_;  // by rank
  std::vector<Dev> devs_;          // by rank's own NIC (same index as hca_)
  std::vector<std::unique_ptr<Side>> sides_;
  std::unordered_map<std::uint64_t, std::uint32_t> side_of_;
  std::vector<WorkCompletion> wc_;
  Sink sink_;
  std::uint64_t events_base_ = 0, qps_ = 0, failed_ = 0;
};

}  // namespace weft::collsim
