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
#include <optional>
#include <string>
#include <thread>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/fabricd/cross_host.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/sa/subnet_admin.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/topo/topology.hpp"

namespace weft::fabricd {

struct DaemonOptions {
  std::string name;  // the fabric's name: sockets "weft/fabric/<name>[/ctl]"
  bool pace = false;
  std::size_t ring_bytes = std::size_t{2} << 20;
  sm::SmOptions sm{};
  fabric::FabricConfig fabric{};  // sm_managed and kVerified are forced
  // Applied live (`--faults FILE`): port faults from the start; each event at its time after
  // the start on the wall clock (flaps expanded into link-down/link-up steps), whatever the
  // simulator's virtual time does meanwhile. The SM keeps running: trap 128 makes it re-route.
  faults::Scenario faults{};
  // Bounds of each HCA's relay queues, in packets. Toward the fabric the queue back-pressures
  // the attached process (its packets wait in its shared-memory ring, then in its Device). Toward
  // the process, from half the bound (at most 64 packets) the HCA's receive gate closes: further
  // packets wait in the fabric with their link credits held (fabric_daemon.cpp, "Receive gate"),
  // so nothing is dropped; a packet reaching a full queue anyway (a MAD turned around inside the
  // daemon) is dropped and counted (`to_client_dropped`).
  std::size_t to_fabric_packets_max = 1024;
  // How long packets may wait at a closed receive gate without the process taking any (wall
  // time): then they are dropped (`hold_discarded`), and so is everything for that process until
  // it reads again, so that a process that stopped for good does not block the switch inputs its
  // senders share with others for ever. As a switch's HOQLife (IBA 18.2.5.4, PortInfo:HOQLife,
  // 4.096 us x 2^17 = 537 ms): beyond that the RC flows into it fail anyway (ACK timeout 14 x 8
  // tries, io::RcOptions), so holding longer would only keep the others waiting.
  TimeNs rx_hold_life_ns = TimeNs{4096} << 17;
  // Pull the payloads of attached processes that allow it straight from their buffers
  // (cross-memory attach; see io/fabric_attach.hpp). false: always copy through the rings.
  bool zero_copy = true;
  // With zero_copy: a packet whose payload stays in its sender crosses the fabric without it and
  // the receiver pulls it straight from the sender (a kByRefFrom record), when the fabric reads
  // no payload bytes (no bit errors, no capture, one host) and the receiver takes such records.
  // false: the daemon pulls every payload (three copies). See fabric_daemon.cpp ForwardRef.
  bool forward_by_ref = true;
  // Payload bytes of kByRefFrom records toward one process that it has not consumed yet (the
  // ShmMedium's by-reference bound; 0: ring_bytes). Beyond it packets wait in the HCA's queue
  // and then stall their senders, as the copied ones do when the ring is full.
  std::size_t forwarded_bytes_max = 0;
  // A process waiting for room on its ring toward the daemon, last seen on the daemon's CPU, is
  // woken once per this many of its records taken (or when its ring is empty) rather than every
  // 32 (io::shm::ShmLinkConfig::wake_producer_records; 0: every 32). WEFT_FABRIC_WAKE_RECORDS=N
  // in the daemon's environment overrides it (measurements).
  std::size_t wake_sender_records = 256;
  std::size_t to_client_packets_max = 4096;
  // The SA on the SM's HCA (gsi_relay.hpp). PathRecord PacketLifeTime 13 (33.5 ms): the CM
  // derives the RC ACK timeout from it (+1: 67 ms), and a real-time relay on a loaded host can
  // be descheduled for milliseconds.
  sa::SaConfig sa = [] {
    sa::SaConfig c;
    c.packet_life_time = 13;
    return c;
  }();
  // A fabric across two hosts (cross_host.hpp): this daemon runs the part the config names and
  // carries the links to the other part over a LinkTunnel. The SM runs on the daemon holding
  // the SM's HCA (sm.sm_node, default the topology's first HCA); the other runs none.
  std::optional<CrossHostConfig> cross_host;
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
