// emu/fabricd/fabric_daemon.hpp — the fabric daemon behind `weft fabric up`: the emulated fabric
// (emu/fabric) with its subnet manager (emu/sm) running in real time, one attach point per HCA
// over src/io's shared-memory medium (the client is io::FabricAttach).
//
// Each HCA's Device inside the Fabric is replaced by a relay: what the fabric delivers to the HCA
// goes into a queue that the attached process's ShmMedium drains, and what that process sends
// enters the fabric at the HCA's port. The relay's two faces are Devices, so one io::Driver moves
// every attached process's packets, and a clock Device (on a control medium) runs the Simulator:
// its deadline is the next simulator event mapped to the wall clock. Virtual time follows the
// wall clock (vt = wall + delta). By default packets in flight are run to completion as fast as
// possible (delta grows when the simulator runs ahead); with `pace` the simulator never runs
// ahead of the wall clock, so link rates and latencies are felt in real time.
//
// Threads: run() is the driver thread (it owns the Fabric, the Simulator and every medium); an
// accept thread owns the sockets ("weft/fabric/<name>" for attaches, "weft/fabric/<name>/ctl"
// for control) and hands requests to the driver thread through a queue and an eventfd. Nothing
// spins when idle: the driver blocks in epoll (doorbells, the simulator's next event, the queue).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/topo/topology.hpp"

namespace weft::fabricd {

struct DaemonOptions {
  std::string name;  // the fabric's name: sockets "weft/fabric/<name>[/ctl]"
  bool pace = false;
  std::size_t ring_bytes = std::size_t{2} << 20;
  sm::SmOptions sm{};
  fabric::FabricConfig fabric{};  // sm_managed and kVerified are forced
};

class FabricDaemon {
 public:
  // Builds the fabric, brings the subnet up and binds the sockets. The error is one sentence.
  static Result<std::unique_ptr<FabricDaemon>, std::string> create(const topo::Topology& topo,
                                                                   const DaemonOptions& options);
  ~FabricDaemon();
  FabricDaemon(const FabricDaemon&) = delete;
  FabricDaemon& operator=(const FabricDaemon&) = delete;

  // Runs until stop() or a `down` control request. Call from one thread.
  void run();
  // Thread-safe: makes run() return soon.
  void stop();

  std::size_t hca_count() const;
  const sm::BringUpReport& bring_up_report() const;

  class Impl;

 private:
  explicit FabricDaemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sends one control request ("status", "inject <node>/<port> drop <p>|down|up", "down") to the
// daemon of fabric `name`. True with its answer in `answer` ("error: ..." when the request
// failed there); false when nobody answered within timeout_ns (`answer` says why).
bool control(const std::string& name, const std::string& request, std::string& answer,
             TimeNs timeout_ns = 5'000'000'000);

}  // namespace weft::fabricd
