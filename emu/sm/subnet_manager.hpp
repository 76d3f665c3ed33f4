// emu/sm/subnet_manager.hpp — Weft's subnet manager (IBA chapter 14), sans-IO.
//
// What it is: the master SM of one subnet, running on one HCA port. It speaks only MAD bytes
// (src/wire): the caller hands it every SMP that reaches the SM (responses and traps) with
// on_mad(), takes the SMPs it wants sent with poll_mad(), and calls on_deadline() when
// next_deadline() passes. No clock, thread, socket or global RNG: time is `now` (virtual ns in
// the emulator), and a wall clock, if the caller wants wall-time figures, is a hook in SmConfig.
//
// A heavy sweep, phase by phase (IBA 14.4):
//   discovery        directed-route Gets, breadth first from the SM's port: NodeInfo on every
//                    port that has a link up, then per new node NodeDescription, SwitchInfo
//                    (switches), PortInfo of every port (switch) or of the reached port (CA).
//   LID assignment   routing::LidAssigner, kept for the SM's life, so a port GUID keeps its LID
//                    across sweeps; then one PortInfo Set per port that differs from what was
//                    read: LID/LMC/SMLID (CA ports, switch port 0), NeighborMTU = the smaller
//                    MTUCap of the two ends, LinkWidth/SpeedEnabled = the fastest both ends
//                    support, OperationalVLs = the smaller VLCap, PortState Init -> Armed.
//   routing          routing::route() (minhop, updn, ftree, dor) then routing::check_routes():
//                    every HCA pair reachable, no loop, and no credit loop for the engines that
//                    promise deadlock freedom (updn, ftree, dor); the verdict is routes_valid().
//   LFT programming  SwitchInfo Set (LinearFDBTop, clears PortStateChange) and
//                    LinearForwardingTable Sets in 64-LID blocks, only the blocks that differ from
//                    what this SM programmed before; SLtoVL and VLArbitration tables when the
//                    engine uses VLs (dor datelines). Two passes: the blocks holding the SM's LID
//                    and the switch LIDs directed-route, then the rest LID-routed.
//   activation       PortInfo Set PortState Armed -> Active on every armed port; PortInfo Get
//                    of every switch port discovery read Down, now that PortStateChange is
//                    cleared: one that trained in between (before its switch knew the SM's
//                    LID, so no trap) makes another heavy sweep follow at once.
// Discovery, port configuration and the first LFT pass are directed-route (paths from discovery);
// what comes after (the other LFT blocks, activation, light sweeps) is LID-routed
// (lid_routed_when_live), through the entries the first pass wrote. A light sweep every
// sweep_interval_ns Gets SwitchInfo of every switch, and PortInfo (directed) of every linked
// port the last heavy sweep left short of Active (read Down while its peer was up, a Set
// refused or lost); a PortStateChange, such a port found trained (Init or Armed), a switch that
// does not answer, or a trap 128 (link state change, LID-routed to the SMLID; answered with
// TrapRepress) starts a heavy sweep, which re-sets only what changed (Init -> Armed -> Active
// for that port).
//
// A port that no sweep can activate (a peer that drops or refuses every Set) is backed off:
// after k settled heavy sweeps in a row left it short of Active, light sweeps read it only
// every min(2^(k-1), activation_retry_light_sweeps_max) sweeps, until a trap or PortStateChange
// from its switch or its peer's, or a new state read for it; after kStuckAfterAttempts it is
// reported once (log "weft.sm", on_port_stuck, ports_stuck()). OpenSM has no such back-off: its
// light sweep re-reads such a port and starts a heavy sweep every sweep_interval. Optionally
// (forced_heavy_interval_ns, OpenSM's force_heavy_sweep on a period) a heavy sweep runs at a
// fixed period whatever the light sweeps saw. README "Ports that never become Active".
//
// Reliability: at most window_max SMPs in flight; each is retried after timeout_ns up to
// retries_max times (VL15 has no flow control and drops under congestion, IBA 7.6.4). A sweep
// that lost an SMP for good is repeated (up to sweeps_incomplete_max in a row).
//
// Errors: MADs that do not parse or match nothing are counted and ignored (ignored_mads);
// routing and LID failures end the sweep with state kFailed and a message (last_error()); a
// failed SM sweeps again at the next interval or trap.
// Thread-safety: none; one owner calls every method.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <weft/types.hpp>

#include "emu/routing/checker.hpp"
#include "emu/routing/fabric.hpp"
#include "emu/routing/lid.hpp"
#include "emu/routing/routes.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/mad_attrs.hpp"

namespace weft::sm {

// Sweep phases; also the SM's state. kRouting sends no MADs (computation only).
enum class Phase : std::uint8_t {
  kIdle,  // not started
  kDiscovery,
  kLidAssignment,
  kRouting,
  kLftProgramming,
  kActivation,
  kSubnetUp,  // between sweeps
  kLightSweep,
  kFailed,  // routing or LID assignment refused the fabric; see last_error()
};
inline constexpr std::size_t kPhaseCount = 9;
std::string_view to_string(Phase p);

// A linked port the SM has failed to bring to Active in consecutive heavy sweeps (its peer
// never reaches Armed, its SMA refuses or never answers the Sets, a P_Key / MTU / VL mismatch
// the SM cannot fix, an M_Key the SM does not hold).
struct StuckPort {
  std::uint64_t node_guid = 0;
  std::string node_desc;
  std::uint8_t port = 0;
  wire::PortState state = wire::PortState::kDown;  // as last read or acknowledged
  std::uint8_t phys_state = 0;                     // PortPhysicalState, 5 = LinkUp
  std::uint32_t attempts = 0;                      // failed activation attempts in a row
  std::uint32_t retry_light_sweeps = 0;            // light sweeps between its reads now
};
// Failed attempts in a row before a port is reported stuck (log, on_port_stuck, ports_stuck).
inline constexpr std::uint32_t kStuckAfterAttempts = 3;

struct SmConfig {
  std::uint8_t port = 1;  // the SM's HCA port
  routing::RoutingOptions routing{};
  int lmc = 0;                                // HCA ports answer 2^lmc LIDs
  std::uint32_t window_max = 64;              // SMPs in flight
  TimeNs timeout_ns = 1'000'000;              // per attempt
  int retries_max = 8;                        // resends after the first attempt
  TimeNs sweep_interval_ns = 10'000'000'000;  // light sweeps; 0 = none
  int sweeps_incomplete_max = 4;              // heavy sweeps repeated after lost SMPs
  // Activation reads again every switch port discovery read Down (see the phase list above).
  // Off only for tests of what the light sweep repairs without it.
  bool recheck_down_ports = true;
  // A trap starts a heavy sweep this long after it arrives, so the traps of both ends of a
  // link (and of a flapping link) share one sweep.
  TimeNs trap_holdoff_ns = 100'000;
  // Activation back-off: a linked port that a heavy sweep left short of Active is read again by
  // the next light sweep (a port found trained starts a heavy sweep); after k failed attempts
  // in a row it is read only every min(2^(k-1), activation_retry_light_sweeps_max) light sweeps,
  // until something really changes (a trap from its switch or its peer's, PortStateChange on
  // them, or a new PortState / PortPhysicalState read for it). 1 = no back-off (every light
  // sweep reads it and starts a heavy sweep, as OpenSM does); see README "Ports that never
  // become Active".
  std::uint32_t activation_retry_light_sweeps_max = 32;
  // Forced heavy sweep (OpenSM's force_heavy_sweep, on a period): the first sweep due at least
  // this long after the last heavy sweep ended is heavy. It finds what no trap and no
  // PortStateChange tells, e.g. a port forced back to Init behind the SM's back (which the IBA
  // says cannot happen silently: 14.2.5.4). 0 = off (OpenSM's default); a value at or below
  // sweep_interval_ns makes every sweep heavy. Cost: a heavy sweep's discovery reads every port.
  TimeNs forced_heavy_interval_ns = 0;
  std::uint64_t m_key = 0;
  std::uint8_t sm_sl = 0;            // MasterSMSL
  std::uint8_t subnet_timeout = 18;  // PortInfo:SubnetTimeOut, 4.096 us * 2^18
  bool check_credit_loops = true;    // for updn/ftree/dor
  // Once the switches route the SM's and the switches' LIDs, the remaining LFT blocks,
  // activation Sets and light-sweep Gets go LID-routed (the switches forward them by LFT, only
  // the addressed SMA handles them); false: all directed.
  bool lid_routed_when_live = true;
  // Optional: the caller's wall clock (ns); 0 figures when absent. Only for reports.
  std::function<std::uint64_t()> wall_clock_ns;
  // Optional event hooks for the SA's event forwarding (InformInfo subscribers get a Report):
  // every trap the SM receives (after its TrapRepress is queued), and, after each heavy sweep
  // that ends with valid routes, each HCA port that came into service (trap 64) or went out of
  // it (trap 65) since the last such sweep, by port GUID and base LID.
  std::function<void(const wire::Notice& notice, TimeNs now)> on_trap;
  std::function<void(std::uint64_t port_guid, std::uint16_t lid, bool in_service, TimeNs now)>
      on_port_service;
  // Optional: called once when a port becomes stuck short of Active (kStuckAfterAttempts failed
  // activation attempts in a row), and again only after it was seen Active or gone. The SM also
  // logs it (logger "weft.sm", warn).
  std::function<void(const StuckPort& port, TimeNs now)> on_port_stuck;
};

// One SMP to send. kDirected: leave by `port` (the SM's port; the SMP is already past
// dr_send, HopPtr 1) or, when `local`, hand it to the SMA of the SM's own node as arrived on
// `port`. kLidRouted: send from `port` with LRH SLID `slid` to `dlid`.
struct OutMad {
  enum class Route : std::uint8_t { kDirected, kLidRouted };
  Route route = Route::kDirected;
  bool local = false;
  std::uint8_t port = 0;
  std::uint16_t dlid = 0;
  std::uint16_t slid = 0;
  std::array<std::uint8_t, wire::kMadBytes> mad{};
};

struct PhaseStats {
  std::uint64_t mads_sent = 0;  // every attempt, retries included
  std::uint64_t mads_retried = 0;
  std::uint64_t mads_lost = 0;  // given up after retries_max
  std::uint64_t responses = 0;
  std::uint64_t error_status = 0;  // responses with a non-zero MAD status
  TimeNs virtual_ns = 0;
  std::uint64_t wall_ns = 0;
  void add(const PhaseStats& o);
};

struct SweepReport {
  bool heavy = true;
  std::uint32_t number = 0;  // sweeps so far, this one included
  TimeNs start_ns = 0, end_ns = 0;
  std::array<PhaseStats, kPhaseCount> phase{};  // indexed by Phase
  PhaseStats total;
  std::size_t switches = 0, hcas = 0, links = 0;
  std::size_t lft_blocks_sent = 0, lft_blocks_unchanged = 0;
  std::size_t ports_set = 0, ports_activated = 0;
  std::size_t ports_rechecked = 0;  // switch ports read Down, read again in activation
  // Heavy sweeps: linked ports (peer found) not Active at the end (read Down, Set lost).
  std::size_t ports_left_inactive = 0;
  // Heavy sweeps that settled: ports reported stuck and still short of Active.
  std::size_t ports_stuck = 0;
  // Light sweeps: short-of-Active ports not read because their back-off had not expired.
  std::size_t ports_backed_off = 0;
  bool forced = false;              // heavy sweep started by forced_heavy_interval_ns
  std::size_t mft_blocks_sent = 0;  // MulticastForwardingTable Sets (block, position)
  bool complete = false;            // no SMP lost for good
  bool routes_valid = false;
  routing::CheckReport check;  // heavy sweeps
  std::string error;
  const PhaseStats& of(Phase p) const { return phase[static_cast<std::size_t>(p)]; }
};

class SubnetManager {
 public:
  explicit SubnetManager(SmConfig config);
  ~SubnetManager();
  SubnetManager(const SubnetManager&) = delete;
  SubnetManager& operator=(const SubnetManager&) = delete;

  // Starts the first heavy sweep at `now`.
  void start(TimeNs now);
  // A MAD that reached the SM: a directed-route response back at the SM's port, a LID-routed
  // response, or a trap. Anything else is counted in ignored_mads().
  void on_mad(std::span<const std::uint8_t> mad, TimeNs now);
  // The next SMP to send now, if the window allows; false when there is none.
  bool poll_mad(TimeNs now, OutMad& out);
  TimeNs next_deadline() const;
  void on_deadline(TimeNs now);

  Phase phase() const { return phase_; }
  bool subnet_up() const { return phase_ == Phase::kSubnetUp; }
  // Up, with no sweep requested (by a trap in its hold-off) and nothing in flight.
  bool settled() const;
  bool routes_valid() const { return routes_valid_; }
  const std::string& last_error() const { return last_error_; }
  std::uint16_t sm_lid() const { return sm_lid_; }
  std::uint32_t heavy_sweeps() const { return heavy_sweeps_; }
  std::uint32_t light_sweeps() const { return light_sweeps_; }
  std::uint64_t ignored_mads() const { return ignored_mads_; }
  std::uint64_t traps_received() const { return traps_; }
  // Ports reported stuck and not seen Active (or gone) since (see StuckPort); how many reports
  // were made so far.
  std::size_t ports_stuck() const;
  std::vector<StuckPort> stuck_ports() const;
  std::uint64_t stuck_reports() const { return stuck_reports_; }
  std::uint32_t forced_heavy_sweeps() const { return forced_heavy_sweeps_; }

  // The last completed sweep of each kind, and the sum of every sweep.
  const SweepReport& last_heavy() const { return last_heavy_; }
  const SweepReport& last_light() const { return last_light_; }
  const PhaseStats& totals() const { return totals_; }
  // Wall ns of the last route() call alone and of the last check_routes() (0 without the hook).
  std::uint64_t routing_wall_ns() const { return routing_wall_ns_; }
  std::uint64_t check_wall_ns() const { return check_wall_ns_; }

  // Multicast groups (IBA 14.2.5.12; the SA's MCMemberRecord joins make them): an MLID
  // (0xC000..0xFFFE) and its members' HCA port GUIDs. The SM builds one tree per group over the
  // switches (the LFT paths from each member's switch to the first member's) and Sets the
  // MulticastForwardingTable blocks (32 MLIDs x 16 ports) that differ from what it wrote: at
  // once in a light sweep when the subnet is up, else at the end of the current sweep; every
  // heavy sweep re-derives the trees from what it discovered. An empty list removes the group
  // (its entries are cleared). Ports 0..63 are programmed (positions 0-3).
  void set_multicast_group(std::uint16_t mlid, std::vector<std::uint64_t> port_guids, TimeNs now);
  void remove_multicast_group(std::uint16_t mlid, TimeNs now);
  const std::map<std::uint16_t, std::vector<std::uint64_t>>& multicast_groups() const;

  // What the SM believes (after a heavy sweep): the discovered fabric, its LIDs and routes.
  const routing::Fabric& fabric() const;
  const routing::LidMap& lids() const;
  const routing::Routes& routes() const;
  // Bytes the SM holds: fabric model, LIDs, routes, programmed-table copies, request slab.
  std::size_t memory_bytes() const;

 private:
  void multicast_changed(TimeNs now);
  void service_changes(TimeNs now);                    // on_port_service after a heavy sweep
  std::map<std::uint64_t, std::uint16_t> in_service_;  // HCA port GUID -> base LID
  struct Impl;  // subnet_manager.cpp: the model, the request slab, the phase steps
  std::unique_ptr<Impl> impl_;
  SmConfig cfg_;
  Phase phase_ = Phase::kIdle;
  bool routes_valid_ = false;
  std::string last_error_;
  std::uint16_t sm_lid_ = 0;
  std::uint32_t heavy_sweeps_ = 0, light_sweeps_ = 0;
  std::uint64_t ignored_mads_ = 0, traps_ = 0, stuck_reports_ = 0;
  std::uint32_t forced_heavy_sweeps_ = 0;
  SweepReport last_heavy_, last_light_;
  PhaseStats totals_;
  std::uint64_t routing_wall_ns_ = 0, check_wall_ns_ = 0;
};

}  // namespace weft::sm
