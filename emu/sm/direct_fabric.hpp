// emu/sm/direct_fabric.hpp — a management-only fabric for driving the SubnetManager: one
// emu/sma NodeState per node of a weft::topo::Topology, and SMPs that travel hop by hop through
// the real sma::handle_smp of every node they meet (directed-route hops, the answering SMA,
// LID-routed responses and traps through the switches' LFTs), in virtual time.
//
// What it models: a fixed delay per link traversal (hop_ns) and per SMA answer (sma_ns), and an
// optional loss of each traversal (VL15 drops), drawn from a seeded Rng. What it leaves out: the
// data path (credits, serialization, queueing): use emu/fabric for that. Port state rules are the
// SMA's; a link is usable for SMPs when both ends are physically up (LinkUp), whatever their
// logical state (IBA 7.2: Init and Armed ports pass SMPs).
//
// As emu/fabric does it (and an IBA SMA must): a switch's trap 128 is sent again, same TID,
// every sma::trap_repeat_ns() until the SM's TrapRepress clears it (13.4.9); a PortInfo Set that
// moves a link (PortState Down, PortPhysicalState Polling or Disabled: MadReply::
// state_changed_ports) takes it down at both ends once the answer has left (hop_ns after the
// SMA answered), and a Down / Polling link trains again to Init retrain_ns later unless an end
// is Disabled; a Polling Set on a Disabled port trains it.
//
// verify() checks what the SM programmed without asking the SM: it reads the NodeStates (LIDs,
// port states, LFTs) and follows the LFTs for every (HCA port, HCA LID) pair.
// Thread-safety: none; one owner runs the loop.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include <weft/types.hpp>

#include "emu/sm/subnet_manager.hpp"
#include "emu/sma/node_state.hpp"
#include "emu/sma/sma.hpp"
#include "emu/topo/topology.hpp"

namespace weft::sm {

struct DirectConfig {
  TimeNs hop_ns = 200;   // one link traversal: wire, serialization, switch
  TimeNs sma_ns = 1000;  // an SMA producing its answer
  double loss = 0.0;     // probability that one link traversal drops the SMP
  std::uint64_t seed = 1;
  TimeNs retrain_ns = 50'000;  // a link taken down by a PortInfo Set trains again (as emu/fabric)
};

struct DirectStats {
  std::uint64_t traversals = 0;  // SMPs put on a link
  std::uint64_t dropped_loss = 0;
  std::uint64_t dropped_down = 0;      // sent toward a port that is not up
  std::uint64_t dropped_no_route = 0;  // LID-routed with no LFT entry, or for nobody here
  std::uint64_t sma_calls = 0;         // handle_smp invocations
  std::uint64_t to_sm = 0;             // MADs handed to the SM
  std::uint64_t dropped_blackout = 0;  // arrived at a port under set_port_blackout
  std::uint64_t traps_sent = 0;        // trap 128 sends, first and repeats
  std::uint64_t links_moved = 0;       // link down/up caused by PortInfo Sets
};

struct VerifyReport {
  std::size_t ports_linked = 0;      // external ports with a cabled, physically up link
  std::size_t ports_not_active = 0;  // of those (and switch port 0), not Active
  std::size_t hca_lids = 0;
  std::size_t duplicate_lids = 0;
  std::size_t hca_pairs = 0;  // (source HCA port, destination HCA LID), self excluded
  std::size_t unreachable_pairs = 0;
  std::size_t loops = 0;              // (switch, LID) walks that came back to a switch
  std::size_t smlid_wrong = 0;        // ports whose MasterSMLID is not the SM's LID
  std::vector<std::string> problems;  // first few, one sentence each
  bool ok() const { return problems.empty(); }
};

// Checks the nodes' own LIDs, port states, SMLIDs and LFTs (not the SM's view): every HCA port
// reaches every HCA LID through Active, physically up ports without a loop. nodes[i] is
// topology node i. DirectFabric::verify() and the emulated fabric's check (fabric_sm.hpp).
VerifyReport verify_nodes(const topo::Topology& topo, std::span<const sma::NodeState* const> nodes,
                          std::uint16_t sm_lid);

class DirectFabric {
 public:
  explicit DirectFabric(const topo::Topology& topo, DirectConfig cfg = {});

  std::vector<sma::NodeState>& nodes() { return nodes_; }
  const std::vector<sma::NodeState>& nodes() const { return nodes_; }
  const topo::Topology& topology() const { return topo_; }
  TimeNs now() const { return now_; }
  const DirectStats& stats() const { return stats_; }

  // The SM runs on HCA `node`, port `port` (must match SmConfig::port). Starts it at now().
  void attach(SubnetManager& sm, topo::NodeId node, std::uint8_t port);
  // Runs SMP events and SM deadlines in time order until `stop()` holds after a step, nothing
  // is left to do, or virtual time would pass `until`. Returns stop()'s last value.
  bool run(TimeNs until, const std::function<bool()>& stop = {});
  // Until the SM is up (or failed) and no SMP is in flight; false on time-out or failure.
  bool run_until_up(TimeNs limit_ns);

  // A link fails or trains now: sma::link_down/link_up at both ends, and trap 128 from every
  // switch end whose port changed state (LID-routed to its MasterSMLID through the LFTs).
  void set_link(topo::LinkId link, bool up);
  // A fault for tests: every SMP arriving at (node, port) is lost while `on` (dropped_blackout).
  void set_port_blackout(topo::NodeId node, std::uint8_t port, bool on);
  // Sends `mad` LID-routed to `dlid` from the SM's port, as the SM would (its answer goes to the
  // SM, which counts it in ignored_mads when it did not ask). False when not attached.
  bool send_from_sm(std::span<const std::uint8_t> mad, std::uint16_t dlid);

  VerifyReport verify() const;
  std::size_t memory_bytes() const;

 private:
  // kArrive/kLocalSma/kDepart carry an SMP, kLink (node = link, port = up) moves a link: both
  // counted in in_flight_; kTrapRepeat (node, aux = TID) is a timer that holds nothing.
  enum class EvKind : std::uint8_t { kArrive, kLocalSma, kDepart, kLink, kTrapRepeat };
  struct Event {
    TimeNs t;
    std::uint64_t seq;
    std::uint32_t node;
    std::uint8_t port;
    EvKind kind;
    std::uint16_t slid;
    std::uint16_t dlid;
    std::uint32_t buf;
    std::uint64_t aux;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  using Mad = std::array<std::uint8_t, wire::kMadBytes>;

  std::uint32_t buf_alloc(const Mad& m);
  void buf_free(std::uint32_t b);
  void schedule(TimeNs t, std::uint32_t node, std::uint8_t port, EvKind k, std::uint16_t slid,
                std::uint16_t dlid, std::uint32_t buf, std::uint64_t aux = 0);
  void pump_sm();
  void send_trap(std::uint32_t node, const sma::TrapMad& trap, std::uint64_t tid);
  void link_event(topo::LinkId link, bool up);
  void after_port_sets(std::uint32_t node, std::span<const std::uint8_t> ports,
                       sma::PhysState phys_before, TimeNs answered);
  void transmit(std::uint32_t node, std::uint8_t port, std::uint32_t buf, std::uint16_t slid,
                std::uint16_t dlid);
  void route_lid(std::uint32_t node, std::uint8_t from_port, std::uint16_t dlid, std::uint32_t buf,
                 std::uint16_t slid);
  void process(const Event& ev);
  void answer(std::uint32_t node, std::uint8_t port, std::uint32_t buf, std::uint16_t slid);
  std::uint16_t lid_of(std::uint32_t node, std::uint8_t port) const;

  topo::Topology topo_;
  DirectConfig cfg_;
  std::vector<sma::NodeState> nodes_;
  SeededRng rng_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Mad> bufs_;
  std::vector<std::uint32_t> free_bufs_;
  std::vector<std::uint8_t> blackout_;  // per (node, port): node * 256 + port
  std::size_t in_flight_ = 0;           // SMP and link events queued
  std::uint64_t seq_ = 0;
  std::uint64_t trap_tid_ = 1;
  TimeNs now_ = 0;
  SubnetManager* sm_ = nullptr;
  std::uint32_t sm_node_ = 0;
  std::uint8_t sm_port_ = 0;
  DirectStats stats_;
};

}  // namespace weft::sm
