// emu/sm/subnet_manager.cpp — the SubnetManager's sweeps: the discovered model, the request
// slab (window, timeouts, retries), one step function per phase, and the MAD codecs it uses.
// Thread-safety: none; one owner.
#include "emu/sm/subnet_manager.hpp"

#include <algorithm>
#include <bit>
#include <set>

#include <spdlog/spdlog.h>

#include "emu/sma/node_state.hpp"
#include "src/base/assert.hpp"
#include "src/base/log.hpp"

namespace weft::sm {
namespace {

constexpr std::uint32_t kNone = UINT32_MAX;
constexpr std::uint64_t kSlotBits = 24;  // TID = sequence << 24 | slot
constexpr std::uint64_t kSlotMask = (1ull << kSlotBits) - 1;
constexpr std::uint8_t kPhysLinkUp = 5;  // PortPhysicalState LinkUp (14.2.5.6)
constexpr std::uint8_t kVlArbWeight = 64;

enum class Purpose : std::uint8_t {
  kNodeInfo,  // probe: the node behind (node, port), or the SM's own node (node kNone)
  kNodeDesc,
  kSwitchInfo,
  kPortInfo,
  kSetPortInfo,
  kSetSwitchInfo,
  kSetLft,    // extra = block
  kSetSl2Vl,  // extra = in << 8 | out
  kSetVlArb,  // port = the switch port
  kLightSwitchInfo,
  kSetMft,       // mod = position << 28 | block
  kPortRecheck,  // PortInfo Get of a port read Down, after PortStateChange was cleared; and in
                 // light sweeps, of a linked port the last heavy sweep left short of Active
};

constexpr std::size_t kMftBlock = 32;     // MLIDs per MFT block (14.2.5.12)
constexpr std::size_t kMftPosPorts = 16;  // ports per PortMask position
constexpr std::size_t kMftPosMax = 4;     // positions the SM programs: ports 0..63

std::uint8_t top_bit(std::uint8_t v) {
  return v == 0 ? 0 : static_cast<std::uint8_t>(1u << (7 - std::countl_zero(v)));
}

}  // namespace

void PhaseStats::add(const PhaseStats& o) {
  mads_sent += o.mads_sent;
  mads_retried += o.mads_retried;
  mads_lost += o.mads_lost;
  responses += o.responses;
  error_status += o.error_status;
  virtual_ns += o.virtual_ns;
  wall_ns += o.wall_ns;
}

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::kIdle:
      return "idle";
    case Phase::kDiscovery:
      return "discovery";
    case Phase::kLidAssignment:
      return "lid-assignment";
    case Phase::kRouting:
      return "routing";
    case Phase::kLftProgramming:
      return "lft-programming";
    case Phase::kActivation:
      return "activation";
    case Phase::kSubnetUp:
      return "subnet-up";
    case Phase::kLightSweep:
      return "light-sweep";
    case Phase::kFailed:
      return "failed";
  }
  return "?";
}

// ---- the model ---------------------------------------------------------------------------
struct DPort {
  bool read = false;  // PortInfo read this sweep
  wire::PortInfo info{};
  std::uint32_t peer = kNone;
  std::uint8_t peer_port = 0;
  std::uint64_t guid = 0;
  std::vector<std::uint8_t> path;  // CA ports: the directed route to this port
};

struct DNode {
  bool is_switch = false;
  std::uint64_t guid = 0;
  std::uint64_t port0_guid = 0;
  std::string desc;
  std::uint8_t num_ports = 0;
  std::vector<std::uint8_t> path;  // switches: the directed route to the switch
  wire::SwitchInfo swinfo{};
  std::vector<DPort> ports;  // num_ports + 1
};

struct Request {
  std::uint64_t tid = 0;
  Purpose purpose = Purpose::kNodeInfo;
  bool set = false;
  bool in_flight = false;
  std::uint8_t port = 0;
  std::uint8_t attempts = 0;
  std::uint16_t attr = 0;
  std::uint16_t dlid = 0;  // LID-routed when non-zero
  std::uint32_t mod = 0;
  std::uint32_t node = kNone;
  std::uint32_t data = kNone;  // Sets other than LFT: index into Impl::datas
};

// Activation back-off of one linked port left short of Active, by (node GUID, port): kept across
// heavy sweeps (node indices are not), dropped once the port is Active or gone.
struct Backoff {
  std::uint32_t failures = 0;   // settled heavy sweeps in a row that left it short of Active
  std::uint32_t due_light = 0;  // the light sweep (by number) that reads it again
  wire::PortState state = wire::PortState::kDown;  // as the last failed attempt left it
  std::uint8_t phys = 0;
  std::uint64_t peer_guid = 0;  // the node at the other end (its traps reset this entry)
  std::string desc;             // NodeDescription of the port's node
  bool reported = false;        // stuck, reported; cleared only with the entry
};
using PortKey = std::pair<std::uint64_t, std::uint8_t>;  // node GUID, port

// What this SM wrote into one switch, by switch GUID, so a re-sweep sends only differences.
struct Programmed {
  std::uint16_t fdb_top = 0;
  std::vector<std::uint8_t> lft;      // as acknowledged; 0xFE = unknown
  std::vector<routing::Sl2Vl> sl2vl;  // (in * np + out); all 0 = the SMA default
  std::vector<bool> vlarb;            // per port: VLArb written
  // MFT entries written (MLID index -> PortMask per position), and blocks whose content is
  // unknown because a Set was lost (sent again whatever they should hold).
  std::map<std::uint16_t, std::array<std::uint16_t, kMftPosMax>> mft;
  std::set<std::uint32_t> mft_unknown;  // position << 16 | block
};

struct SubnetManager::Impl {
  SubnetManager& sm;
  explicit Impl(SubnetManager& s) : sm(s), assigner(s.cfg_.lmc) {}

  // Model of the sweep in progress, and of the last completed heavy sweep.
  std::vector<DNode> nodes;
  std::unordered_map<std::uint64_t, std::uint32_t> by_guid;
  std::uint32_t sm_node = kNone;
  std::size_t links = 0;
  routing::Fabric fabric;
  routing::LidMap lids;
  routing::Routes routes;
  routing::LidAssigner assigner;
  std::unordered_map<std::uint64_t, Programmed> programmed;
  std::map<std::uint16_t, std::vector<std::uint64_t>> groups;  // MLID -> member port GUIDs
  bool mcast_dirty = false;  // groups changed since the last MFT programming

  // Requests.
  std::vector<Request> reqs;
  std::vector<std::uint32_t> free_slots;
  std::vector<std::array<std::uint8_t, wire::kSmpDataBytes>> datas;
  std::deque<std::uint32_t> pending;
  std::deque<std::pair<TimeNs, std::uint64_t>> timers;  // send order = deadline order
  std::deque<OutMad> urgent;                            // no response expected (TrapRepress)
  std::vector<std::pair<std::uint32_t, std::uint32_t>> deferred_lft;  // (node, block): 2nd pass
  std::uint32_t inflight = 0;
  std::uint64_t seq = 1;

  // Sweep bookkeeping.
  SweepReport cur;
  bool sweep_lost = false;
  bool heavy_wanted = false;
  int incomplete_in_row = 0;
  TimeNs phase_start_ns = 0;
  std::uint64_t phase_start_wall = 0;
  TimeNs next_light_ns = kNoDeadline;
  TimeNs last_heavy_end_ns = 0;
  std::map<PortKey, Backoff> backoff;
  std::unordered_map<std::uint16_t, std::uint64_t> switch_by_lid;  // as of the last settle

  std::uint64_t wall() const { return sm.cfg_.wall_clock_ns ? sm.cfg_.wall_clock_ns() : 0; }
  PhaseStats& ps() { return cur.phase[static_cast<std::size_t>(sm.phase_)]; }

  // ---- requests ---------------------------------------------------------------------------
  std::uint32_t add(Purpose pu, bool set, std::uint16_t attr, std::uint32_t mod, std::uint32_t node,
                    std::uint8_t port, std::uint32_t data = kNone) {
    std::uint32_t slot;
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(reqs.size());
      WEFT_ASSERT(slot <= kSlotMask);
      reqs.emplace_back();
    }
    Request& r = reqs[slot];
    r = Request{};
    r.tid = (seq++ << kSlotBits) | slot;
    r.purpose = pu;
    r.set = set;
    r.attr = attr;
    r.mod = mod;
    r.node = node;
    r.port = port;
    r.data = data;
    pending.push_back(slot);
    return slot;
  }
  // The LID to address (node, port) by once the tables are live; 0 = use the directed route.
  std::uint16_t live_lid(std::uint32_t i, std::uint8_t p) const {
    if (!sm.cfg_.lid_routed_when_live || i == sm_node || i >= lids.base.size()) return 0;
    return lids.lid_of(i, nodes[i].is_switch ? 0 : p);
  }
  std::uint32_t add_data(const std::array<std::uint8_t, wire::kSmpDataBytes>& d) {
    datas.push_back(d);
    return static_cast<std::uint32_t>(datas.size() - 1);
  }
  void release(std::uint32_t slot) {
    reqs[slot].tid = 0;
    free_slots.push_back(slot);
  }

  // The directed route a request travels: a probe goes one hop past (node, port).
  void path_of(const Request& r, std::array<std::uint8_t, wire::kDrPathBytes>& ip,
               std::uint8_t& hops) const {
    hops = 0;
    if (r.node == kNone) return;
    const DNode& n = nodes[r.node];
    const std::vector<std::uint8_t>& base = n.is_switch ? n.path : n.ports[r.port].path;
    for (std::uint8_t p : base) ip[++hops] = p;
    if (r.purpose == Purpose::kNodeInfo) ip[++hops] = r.port;
  }

  // The SMP data of a Set: an LFT block from the routes, anything else from `datas`.
  void fill_data(const Request& r, std::array<std::uint8_t, wire::kSmpDataBytes>& out) const {
    if (r.purpose == Purpose::kSetLft) {
      const auto b = routes.lft_block(routes.switch_index[r.node], static_cast<int>(r.mod));
      wire::LinearForwardingTable t;
      std::copy(b.begin(), b.end(), t.port.begin());
      wire::encode(t, out);
    } else if (r.data != kNone) {
      out = datas[r.data];
    }
  }

  void encode(const Request& r, OutMad& out) {
    if (r.dlid != 0) {
      wire::SmpLid s;
      s.hdr.mgmt_class = static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted);
      s.hdr.method =
          static_cast<std::uint8_t>(r.set ? wire::MadMethod::kSet : wire::MadMethod::kGet);
      s.hdr.tid = r.tid;
      s.hdr.attr_id = r.attr;
      s.hdr.attr_mod = r.mod;
      s.m_key = sm.cfg_.m_key;
      fill_data(r, s.data);
      out.route = OutMad::Route::kLidRouted;
      out.local = false;
      out.port = sm.cfg_.port;
      out.dlid = r.dlid;
      out.slid = sm.sm_lid_;
      wire::encode_smp(s, out.mad);
      return;
    }
    wire::SmpDr s;
    s.hdr.mgmt_class = static_cast<std::uint8_t>(wire::MgmtClass::kSubnDirectedRoute);
    s.hdr.method = static_cast<std::uint8_t>(r.set ? wire::MadMethod::kSet : wire::MadMethod::kGet);
    s.hdr.tid = r.tid;
    s.hdr.attr_id = r.attr;
    s.hdr.attr_mod = r.mod;
    s.m_key = sm.cfg_.m_key;
    path_of(r, s.initial_path, s.hop_cnt);
    fill_data(r, s.data);
    const wire::DrDecision d = wire::dr_send(s);
    out.route = OutMad::Route::kDirected;
    out.local = d.verdict == wire::DrVerdict::kConsume;
    out.port = out.local ? sm.cfg_.port : d.out_port;
    out.dlid = 0;
    out.slid = sm.sm_lid_;
    wire::encode_smp(s, out.mad);
  }

  // ---- phases -----------------------------------------------------------------------------
  void enter(Phase p, TimeNs now) {
    PhaseStats& old = ps();
    old.virtual_ns += now - phase_start_ns;
    const std::uint64_t w = wall();
    old.wall_ns += w - phase_start_wall;
    phase_start_ns = now;
    phase_start_wall = w;
    sm.phase_ = p;
  }

  void start_heavy(TimeNs now) {
    cur = SweepReport{};
    cur.heavy = true;
    cur.number = sm.heavy_sweeps_ + sm.light_sweeps_ + 1;
    cur.start_ns = now;
    sweep_lost = false;
    heavy_wanted = false;
    nodes.clear();
    by_guid.clear();
    datas.clear();
    sm_node = kNone;
    links = 0;
    phase_start_ns = now;
    phase_start_wall = wall();
    sm.phase_ = Phase::kDiscovery;
    add(Purpose::kNodeInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kNodeInfo), 0, kNone,
        0);
  }

  void start_light(TimeNs now) {
    cur = SweepReport{};
    cur.heavy = false;
    cur.number = sm.heavy_sweeps_ + sm.light_sweeps_ + 1;
    cur.start_ns = now;
    sweep_lost = false;
    heavy_wanted = false;
    phase_start_ns = now;
    phase_start_wall = wall();
    sm.phase_ = Phase::kLightSweep;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].is_switch) {
        const std::uint32_t slot =
            add(Purpose::kLightSwitchInfo, false,
                static_cast<std::uint16_t>(wire::SmpAttr::kSwitchInfo), 0, i, 0);
        reqs[slot].dlid = live_lid(i, 0);
      }
    // The ports the last heavy sweep left short of Active (directed, by discovery's paths),
    // those whose back-off has run out.
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (std::uint8_t p = 1; p <= nodes[i].num_ports; ++p) {
        if (!short_of_active(i, p)) continue;
        if (!retry_due(i, p)) {
          ++cur.ports_backed_off;
          continue;
        }
        add(Purpose::kPortRecheck, false, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo), p,
            i, p);
      }
    if (sm.routes_valid_) program_mft(/*live=*/true);  // group changes since the last sweep
  }

  void finish_sweep(TimeNs now, Phase next) {
    enter(next, now);
    cur.end_ns = now;
    cur.complete = !sweep_lost;
    if (cur.heavy && next == Phase::kSubnetUp) cur.ports_left_inactive = ports_short_of_active();
    for (const PhaseStats& p : cur.phase) cur.total.add(p);
    sm.totals_.add(cur.total);
    if (cur.heavy) last_heavy_end_ns = now;
    if (cur.heavy) {
      ++sm.heavy_sweeps_;
      sm.last_heavy_ = std::move(cur);
    } else {
      ++sm.light_sweeps_;
      sm.last_light_ = std::move(cur);
    }
    cur = SweepReport{};
    next_light_ns = sm.cfg_.sweep_interval_ns ? now + sm.cfg_.sweep_interval_ns : kNoDeadline;
    if (sm.cfg_.forced_heavy_interval_ns > 0)
      next_light_ns = std::min(next_light_ns, last_heavy_end_ns + sm.cfg_.forced_heavy_interval_ns);
  }

  bool forced_heavy_due(TimeNs now) const {
    return sm.cfg_.forced_heavy_interval_ns > 0 &&
           now >= last_heavy_end_ns + sm.cfg_.forced_heavy_interval_ns;
  }

  // ---- activation back-off ------------------------------------------------------------------
  // Light sweeps between two reads of a port after `failures` failed attempts in a row:
  // 1, 2, 4, ... up to activation_retry_light_sweeps_max.
  std::uint32_t retry_light_sweeps(std::uint32_t failures) const {
    const std::uint32_t cap = sm.cfg_.activation_retry_light_sweeps_max;
    if (failures <= 1) return 1;
    if (failures - 1 >= 31) return cap;
    return std::min(cap, 1u << (failures - 1));
  }
  bool retry_due(std::uint32_t i, std::uint8_t p) const {
    const auto it = backoff.find({nodes[i].guid, p});
    return it == backoff.end() || sm.light_sweeps_ + 1 >= it->second.due_light;
  }
  // A real change at a switch (its trap 128, its PortStateChange): its ports and their peers
  // are tried again at the next sweep, and their failure counts start over.
  void reset_backoff_near(std::uint64_t switch_guid) {
    for (auto& [k, b] : backoff)
      if (k.first == switch_guid || b.peer_guid == switch_guid) {
        b.failures = 0;
        b.due_light = 0;
      }
  }

  // A heavy sweep settled (no other follows at once): one activation attempt for every linked
  // port still short of Active. Consecutive failures with the port in the same state back off;
  // a new state is a real change and starts the count again. Ports now Active or gone leave.
  void count_activation_attempts(TimeNs now) {
    std::map<PortKey, Backoff> next;
    std::size_t stuck = 0;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (std::uint8_t p = 1; p <= nodes[i].num_ports; ++p) {
        if (!short_of_active(i, p)) continue;
        const DPort& d = nodes[i].ports[p];
        const PortKey k{nodes[i].guid, p};
        const auto it = backoff.find(k);
        Backoff b = it == backoff.end() ? Backoff{} : it->second;
        if (b.state != d.info.port_state || b.phys != d.info.port_phys_state) b.failures = 0;
        b.state = d.info.port_state;
        b.phys = d.info.port_phys_state;
        b.peer_guid = nodes[d.peer].guid;
        b.desc = nodes[i].desc;
        ++b.failures;
        b.due_light = sm.light_sweeps_ + retry_light_sweeps(b.failures);
        if (b.failures >= kStuckAfterAttempts && !b.reported) {
          b.reported = true;
          report_stuck(stuck_port(k, b), now);
        }
        stuck += b.reported ? 1 : 0;
        next.emplace(k, b);
      }
    for (const auto& [k, b] : backoff)
      if (b.reported && !next.count(k))
        base::get_logger("weft.sm")->info(
            "port stuck short of Active recovered or gone: node {:#018x} port {}", k.first,
            k.second);
    backoff = std::move(next);
    cur.ports_stuck = stuck;
    switch_by_lid.clear();
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].is_switch && i < lids.base.size()) {
        const routing::Lid l = lids.lid_of(i, 0);
        if (l != routing::kNoLid) switch_by_lid[static_cast<std::uint16_t>(l)] = nodes[i].guid;
      }
  }

  StuckPort stuck_port(const PortKey& k, const Backoff& b) const {
    StuckPort s;
    s.node_guid = k.first;
    s.node_desc = b.desc;
    s.port = k.second;
    s.state = b.state;
    s.phys_state = b.phys;
    s.attempts = b.failures;
    s.retry_light_sweeps = retry_light_sweeps(b.failures);
    return s;
  }

  void report_stuck(const StuckPort& s, TimeNs now) {
    ++sm.stuck_reports_;
    base::get_logger("weft.sm")->warn(
        "port stuck short of Active: node {:#018x} '{}' port {} state {} phys {} after {} "
        "activation attempts; read again every {} light sweeps (doubling, at most {}) until "
        "its link changes",
        s.node_guid, s.node_desc, s.port, sma::to_string(s.state),
        sma::to_string(static_cast<sma::PhysState>(s.phys_state)), s.attempts, s.retry_light_sweeps,
        sm.cfg_.activation_retry_light_sweeps_max);
    if (sm.cfg_.on_port_stuck) sm.cfg_.on_port_stuck(s, now);
  }

  // Called whenever the window may have drained: moves through the phases.
  void advance(TimeNs now) {
    while (pending.empty() && inflight == 0) {
      switch (sm.phase_) {
        case Phase::kDiscovery:
          if (sweep_lost && incomplete_in_row < sm.cfg_.sweeps_incomplete_max) {
            // Never program a partial view: look again.
            ++incomplete_in_row;
            cur.error = "discovery lost SMPs; sweeping again";
            finish_sweep(now, Phase::kDiscovery);
            start_heavy(now);
            continue;
          }
          if (!assign(now)) return;
          continue;
        case Phase::kLidAssignment:
          compute_routes(now);
          if (sm.phase_ == Phase::kFailed) return;
          continue;
        case Phase::kLftProgramming:
          if (!deferred_lft.empty()) {
            for (const auto& [i, b] : deferred_lft) {
              const std::uint32_t slot =
                  add(Purpose::kSetLft, true,
                      static_cast<std::uint16_t>(wire::SmpAttr::kLinearForwardingTable), b, i, 0);
              reqs[slot].dlid = sweep_lost ? 0 : live_lid(i, 0);
            }
            deferred_lft.clear();
            continue;
          }
          activate(now);
          continue;
        case Phase::kActivation: {
          incomplete_in_row = sweep_lost ? incomplete_in_row + 1 : 0;
          const bool again =
              heavy_wanted || (sweep_lost && incomplete_in_row <= sm.cfg_.sweeps_incomplete_max);
          if (!again) count_activation_attempts(now);
          finish_sweep(now, Phase::kSubnetUp);
          if (sm.routes_valid_) sm.service_changes(now);
          if (again)
            start_heavy(now);
          else
            return;
          continue;
        }
        case Phase::kLightSweep: {
          const bool again = heavy_wanted || sweep_lost;
          finish_sweep(now, Phase::kSubnetUp);
          if (again)
            start_heavy(now);
          else
            return;
          continue;
        }
        default:
          return;
      }
    }
  }

  // ---- discovery --------------------------------------------------------------------------
  void add_node_queries(std::uint32_t i, std::uint8_t port) {
    const DNode& n = nodes[i];
    add(Purpose::kNodeDesc, false, static_cast<std::uint16_t>(wire::SmpAttr::kNodeDescription), 0,
        i, port);
    if (n.is_switch) {
      add(Purpose::kSwitchInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kSwitchInfo), 0, i,
          0);
      for (std::uint32_t p = 0; p <= n.num_ports; ++p)
        add(Purpose::kPortInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo), p, i,
            static_cast<std::uint8_t>(p));
    } else {
      add(Purpose::kPortInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo), port, i,
          port);
    }
  }

  // A linked port (its peer found by discovery) that is not Active in the model: read as Down
  // or Polling while its peer was up, or a Set for it refused or lost.
  bool short_of_active(std::uint32_t i, std::uint8_t p) const {
    const DPort& d = nodes[i].ports[p];
    return p != 0 && d.read && d.peer != kNone && d.info.port_state != wire::PortState::kActive;
  }
  std::size_t ports_short_of_active() const {
    std::size_t k = 0;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (std::uint8_t p = 1; p <= nodes[i].num_ports; ++p) k += short_of_active(i, p) ? 1 : 0;
    return k;
  }

  std::vector<std::uint8_t> probe_path(const Request& r) const {
    std::vector<std::uint8_t> p;
    if (r.node == kNone) return p;
    const DNode& n = nodes[r.node];
    p = n.is_switch ? n.path : n.ports[r.port].path;
    p.push_back(r.port);
    return p;
  }

  void on_node_info(const Request& r, const wire::NodeInfo& ni) {
    const std::uint8_t lp = ni.local_port_num;
    if (ni.num_ports == 0 ||
        (ni.node_type != wire::NodeType::kSwitch && (lp < 1 || lp > ni.num_ports)))
      return;
    auto it = by_guid.find(ni.node_guid);
    std::uint32_t i;
    const bool fresh = it == by_guid.end();
    if (fresh) {
      i = static_cast<std::uint32_t>(nodes.size());
      DNode n;
      n.is_switch = ni.node_type == wire::NodeType::kSwitch;
      n.guid = ni.node_guid;
      n.num_ports = ni.num_ports;
      n.port0_guid = n.is_switch ? ni.port_guid : 0;
      n.ports.resize(std::size_t{ni.num_ports} + 1);
      if (n.is_switch) n.path = probe_path(r);
      nodes.push_back(std::move(n));
      by_guid.emplace(ni.node_guid, i);
      if (r.node == kNone) sm_node = i;
    } else {
      i = it->second;
      if (nodes[i].num_ports != ni.num_ports ||
          nodes[i].is_switch != (ni.node_type == wire::NodeType::kSwitch))
        return;  // a GUID clash; keep the first
    }
    DNode& n = nodes[i];
    bool new_ca_port = false;
    if (!n.is_switch) {
      DPort& p = n.ports[lp];
      new_ca_port = p.guid == 0;
      if (new_ca_port) {
        p.guid = ni.port_guid;
        p.path = probe_path(r);
      }
    }
    if (r.node != kNone) {
      DPort& a = nodes[r.node].ports[r.port];
      const std::uint8_t bp = lp;
      DPort& b = n.ports[bp];
      if (a.peer == kNone && b.peer == kNone && !(r.node == i && r.port == bp)) {
        a.peer = i;
        a.peer_port = bp;
        b.peer = r.node;
        b.peer_port = r.port;
        ++links;
      }
    }
    if (fresh)
      add_node_queries(i, n.is_switch ? 0 : lp);
    else if (new_ca_port)
      add(Purpose::kPortInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo), lp, i,
          lp);
  }

  void on_port_info(const Request& r, const wire::PortInfo& pi) {
    DNode& n = nodes[r.node];
    DPort& p = n.ports[r.port];
    p.info = pi;
    p.read = true;
    if (r.port == 0 || pi.port_phys_state != kPhysLinkUp || p.peer != kNone) return;
    // CA ports other than the SM's own lead back where the SM came from.
    if (!n.is_switch && r.node != sm_node) return;
    const std::size_t hops = (n.is_switch ? n.path.size() : p.path.size()) + 1;
    if (hops > wire::kDrHopCountMax) return;
    add(Purpose::kNodeInfo, false, static_cast<std::uint16_t>(wire::SmpAttr::kNodeInfo), 0, r.node,
        r.port);
  }

  // ---- LID assignment and port configuration ---------------------------------------------
  bool assign(TimeNs now) {
    enter(Phase::kLidAssignment, now);
    fabric = routing::Fabric{};
    fabric.nodes.reserve(nodes.size());
    for (const DNode& n : nodes) {
      if (n.is_switch) {
        fabric.add_switch(n.guid, n.num_ports, n.desc);
        fabric.nodes.back().ports[0].guid = n.port0_guid ? n.port0_guid : n.guid;
      } else {
        fabric.add_hca(n.guid, n.num_ports, n.desc);
        for (int p = 1; p <= n.num_ports; ++p)
          if (n.ports[p].guid) fabric.nodes.back().ports[p].guid = n.ports[p].guid;
      }
    }
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (int p = 1; p <= nodes[i].num_ports; ++p) {
        const DPort& d = nodes[i].ports[p];
        if (d.peer == kNone || d.peer < i || (d.peer == i && d.peer_port < p)) continue;
        fabric.connect(i, p, d.peer, d.peer_port);
      }
    cur.links = links;
    for (const DNode& n : nodes) (n.is_switch ? cur.switches : cur.hcas)++;
    auto l = assigner.assign(fabric);
    if (!l) {
      fail(now, "LID assignment: " + l.error().message);
      return false;
    }
    lids = std::move(l).value();
    sm.sm_lid_ = sm_node == kNone ? 0 : lids.lid_of(sm_node, sm.cfg_.port);
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (std::uint8_t p = 0; p <= nodes[i].num_ports; ++p) configure_port(i, p);
    return true;
  }

  // A PortInfo Set for (node, port) if what was read differs from what the SM wants.
  void configure_port(std::uint32_t i, std::uint8_t p) {
    const DNode& n = nodes[i];
    const DPort& d = n.ports[p];
    if (!d.read) return;
    if (!n.is_switch && p == 0) return;
    if (p != 0 && d.info.port_phys_state != kPhysLinkUp) return;
    if (!n.is_switch && d.peer == kNone && i != sm_node) return;
    wire::PortInfo w = d.info;
    w.port_phys_state = 0;
    w.port_state = wire::PortState::kNoChange;
    bool differs = false;
    const bool addressed = !n.is_switch || p == 0;
    if (addressed) {
      const routing::Lid lid = lids.lid_of(i, n.is_switch ? 0 : p);
      if (lid == routing::kNoLid) return;
      const std::uint8_t lmc = n.is_switch ? 0 : static_cast<std::uint8_t>(lids.lmc);
      differs |= w.lid != lid || w.lmc != lmc || w.master_sm_lid != sm.sm_lid_ ||
                 w.master_sm_sl != sm.cfg_.sm_sl || w.m_key != sm.cfg_.m_key ||
                 w.subnet_timeout != sm.cfg_.subnet_timeout;
      w.lid = lid;
      w.lmc = lmc;
      w.master_sm_lid = sm.sm_lid_;
      w.master_sm_sl = sm.cfg_.sm_sl;
      w.m_key = sm.cfg_.m_key;
      w.subnet_timeout = sm.cfg_.subnet_timeout;
    }
    if (p != 0 && d.peer != kNone && nodes[d.peer].ports[d.peer_port].read) {
      const wire::PortInfo& o = nodes[d.peer].ports[d.peer_port].info;
      const std::uint8_t mtu = std::min(d.info.mtu_cap, o.mtu_cap);
      const std::uint8_t width = top_bit(d.info.link_width_supported & o.link_width_supported);
      const std::uint8_t speed = top_bit(d.info.link_speed_supported & o.link_speed_supported);
      const std::uint8_t vls = std::min(d.info.vl_cap, o.vl_cap);
      if (mtu != 0 && w.neighbor_mtu != mtu) {
        w.neighbor_mtu = mtu;
        differs = true;
      }
      if (width != 0 && w.link_width_enabled != width) {
        w.link_width_enabled = width;
        differs = true;
      }
      if (speed != 0 && w.link_speed_enabled != speed) {
        w.link_speed_enabled = speed;
        differs = true;
      }
      if (vls != 0 && w.operational_vls != vls) {
        w.operational_vls = vls;
        differs = true;
      }
    }
    if (d.info.port_state == wire::PortState::kInit) {
      w.port_state = wire::PortState::kArmed;
      differs = true;
    }
    if (!differs) return;
    std::array<std::uint8_t, wire::kSmpDataBytes> data{};
    wire::encode(w, data);
    add(Purpose::kSetPortInfo, true, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo), p, i, p,
        add_data(data));
    ++cur.ports_set;
  }

  // ---- routing and LFT programming --------------------------------------------------------
  void compute_routes(TimeNs now) {
    enter(Phase::kRouting, now);
    const std::uint64_t w0 = wall();
    auto r = routing::route(fabric, lids, sm.cfg_.routing);
    const std::uint64_t w1 = wall();
    sm.routing_wall_ns_ = w1 - w0;
    if (!r) {
      fail(now, std::string("routing: ") + r.error().message);
      return;
    }
    routes = std::move(r).value();
    routing::CheckOptions co;
    co.credit_loops =
        sm.cfg_.check_credit_loops && sm.cfg_.routing.engine != routing::Engine::kMinHop;
    cur.check = routing::check_routes(fabric, lids, routes, co);
    sm.check_wall_ns_ = wall() - w1;
    cur.routes_valid = cur.check.ok();
    sm.routes_valid_ = cur.routes_valid;
    enter(Phase::kLftProgramming, now);
    program(now);
  }

  // LFT programming in two passes. First, directed: the blocks that hold the SM's LID or a
  // switch LID, in every switch. Then the rest, LID-routed to each switch's LID: the first pass
  // has made every switch reachable from the SM and the SM from every switch. Directed only when
  // some switch LID is unroutable or lid_routed_when_live is off.
  void program(TimeNs) {
    const int blocks = routes.lft_blocks();
    const std::uint16_t top = static_cast<std::uint16_t>(routes.lid_top - 1);
    std::vector<bool> first_pass(static_cast<std::size_t>(blocks), false);
    const bool lid_routed = sm.cfg_.lid_routed_when_live && cur.check.switch_unreachable == 0;
    if (lid_routed) {
      first_pass[sm.sm_lid_ / routing::kLftBlockEntries] = true;
      for (std::uint32_t i : routes.switches) {
        const routing::Lid l = lids.lid_of(i, 0);
        if (l != routing::kNoLid && l / routing::kLftBlockEntries < blocks)
          first_pass[l / routing::kLftBlockEntries] = true;
      }
    }
    deferred_lft.clear();
    for (std::uint32_t s = 0; s < routes.switches.size(); ++s) {
      const std::uint32_t i = routes.switches[s];
      DNode& n = nodes[i];
      Programmed& pr = programmed[n.guid];
      // A switch that forgot its tables (reset, replaced) gets everything again.
      if (pr.fdb_top != n.swinfo.linear_fdb_top) pr = Programmed{};
      if (n.swinfo.linear_fdb_top != top || n.swinfo.port_state_change) {
        wire::SwitchInfo si = n.swinfo;
        si.linear_fdb_top = top;
        si.port_state_change = true;  // writing 1 clears it (14.2.5.4); see recheck_down_ports
        std::array<std::uint8_t, wire::kSmpDataBytes> data{};
        wire::encode(si, data);
        add(Purpose::kSetSwitchInfo, true, static_cast<std::uint16_t>(wire::SmpAttr::kSwitchInfo),
            0, i, 0, add_data(data));
      }
      if (pr.lft.size() < static_cast<std::size_t>(blocks) * routing::kLftBlockEntries)
        pr.lft.resize(static_cast<std::size_t>(blocks) * routing::kLftBlockEntries, 0xFE);
      for (int b = 0; b < blocks; ++b) {
        const auto blk = routes.lft_block(s, b);
        if (std::equal(blk.begin(), blk.end(), pr.lft.begin() + b * routing::kLftBlockEntries)) {
          ++cur.lft_blocks_unchanged;
          continue;
        }
        ++cur.lft_blocks_sent;
        if (lid_routed && !first_pass[static_cast<std::size_t>(b)]) {
          deferred_lft.emplace_back(i, static_cast<std::uint32_t>(b));
          continue;
        }
        add(Purpose::kSetLft, true,
            static_cast<std::uint16_t>(wire::SmpAttr::kLinearForwardingTable),
            static_cast<std::uint32_t>(b), i, 0);
      }
      if (routes.vls > 1 && !routes.sl2vl.empty()) program_vls(s, i, pr);
    }
    program_mft(/*live=*/false);
  }

  // ---- multicast ------------------------------------------------------------------------
  // One tree per group: the union of the LFT paths from each member's switch to a root switch
  // (the first member's), so every switch has one way toward the root and the union has no
  // cycle; each switch's PortMask holds its tree ports and its member HCA ports. A packet to
  // the MLID leaves every tree port but the one it came in on: each member gets one copy.
  using MftRows = std::map<std::uint16_t, std::array<std::uint16_t, kMftPosMax>>;
  std::unordered_map<std::uint32_t, MftRows> multicast_trees() const {
    std::unordered_map<std::uint32_t, MftRows> want;
    if (routes.lid_top == 0) return want;
    std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint8_t>> edge;
    for (const DNode& n : nodes) {
      if (n.is_switch) continue;
      for (std::uint8_t p = 1; p <= n.num_ports; ++p) {
        const DPort& d = n.ports[p];
        if (d.peer != kNone && nodes[d.peer].is_switch) edge[d.guid] = {d.peer, d.peer_port};
      }
    }
    auto mark = [&](std::uint32_t sw, std::uint16_t idx, std::uint8_t port) {
      if (port / kMftPosPorts >= kMftPosMax) return;
      want[sw][idx][port / kMftPosPorts] |= static_cast<std::uint16_t>(1u << (port % kMftPosPorts));
    };
    for (const auto& [mlid, members] : groups) {
      const auto idx = static_cast<std::uint16_t>(mlid - 0xC000);
      std::uint32_t root = kNone;
      routing::Lid root_lid = routing::kNoLid;
      for (const std::uint64_t g : members) {
        const auto it = edge.find(g);
        if (it == edge.end()) continue;  // not (or no longer) in the subnet
        auto [cur, in] = it->second;
        if (root == kNone) {
          root = cur;
          root_lid = lids.lid_of(root, 0);
        }
        mark(cur, idx, in);
        for (int hop = 0; hop < 64 && cur != root; ++hop) {
          const std::uint32_t si = routes.switch_index[cur];
          const std::uint8_t out = routes.out_port(si, root_lid);
          const DNode& n = nodes[cur];
          if (out == 0 || out > n.num_ports || n.ports[out].peer == kNone) break;
          mark(cur, idx, out);
          const std::uint32_t next = n.ports[out].peer;
          if (!nodes[next].is_switch) break;
          mark(next, idx, n.ports[out].peer_port);
          cur = next;
        }
      }
    }
    return want;
  }

  // MFT Sets for what differs from what this SM wrote (or is unknown), one per (block,
  // position); LID-routed when `live` (the LFTs route the switch LIDs), else directed.
  void program_mft(bool live) {
    mcast_dirty = false;
    const auto want = multicast_trees();
    static const std::array<std::uint16_t, kMftPosMax> kZero{};
    for (const std::uint32_t i : routes.switches) {
      if (i >= nodes.size()) continue;
      const DNode& n = nodes[i];
      Programmed& pr = programmed[n.guid];
      const auto wit = want.find(i);
      const MftRows empty;
      const MftRows& w = wit == want.end() ? empty : wit->second;
      std::set<std::uint32_t> blocks;
      for (const auto& [idx, m] : w) blocks.insert(idx / kMftBlock);
      for (const auto& [idx, m] : pr.mft) blocks.insert(idx / kMftBlock);
      for (const std::uint32_t u : pr.mft_unknown) blocks.insert(u & 0xFFFF);
      const std::size_t positions =
          std::min(kMftPosMax, std::size_t{n.num_ports} / kMftPosPorts + 1);
      for (const std::uint32_t b : blocks) {
        for (std::size_t pos = 0; pos < positions; ++pos) {
          const std::uint32_t key = static_cast<std::uint32_t>(pos) << 16 | b;
          bool differs = pr.mft_unknown.erase(key) > 0;
          wire::MulticastForwardingTable t;
          for (std::size_t k = 0; k < kMftBlock; ++k) {
            const auto idx = static_cast<std::uint16_t>(b * kMftBlock + k);
            const auto wi = w.find(idx);
            const auto pi = pr.mft.find(idx);
            t.port_mask[k] = (wi == w.end() ? kZero : wi->second)[pos];
            if (t.port_mask[k] != (pi == pr.mft.end() ? kZero : pi->second)[pos]) differs = true;
          }
          if (!differs) continue;
          std::array<std::uint8_t, wire::kSmpDataBytes> data{};
          wire::encode(t, data);
          const std::uint32_t slot =
              add(Purpose::kSetMft, true,
                  static_cast<std::uint16_t>(wire::SmpAttrExt::kMulticastForwardingTable),
                  static_cast<std::uint32_t>(pos) << 28 | b, i, 0, add_data(data));
          if (live) reqs[slot].dlid = live_lid(i, 0);
          ++cur.mft_blocks_sent;
          for (std::size_t k = 0; k < kMftBlock; ++k) {  // optimistic, as for SL2VL
            const auto idx = static_cast<std::uint16_t>(b * kMftBlock + k);
            auto& row = pr.mft[idx];
            row[pos] = t.port_mask[k];
            if (row == kZero) pr.mft.erase(idx);
          }
        }
      }
    }
  }

  void program_vls(std::uint32_t s, std::uint32_t i, Programmed& pr) {
    const DNode& n = nodes[i];
    const int np = n.num_ports + 1;
    if (pr.sl2vl.size() != static_cast<std::size_t>(np) * np)
      pr.sl2vl.assign(static_cast<std::size_t>(np) * np, {});
    if (pr.vlarb.size() != static_cast<std::size_t>(np)) pr.vlarb.assign(np, false);
    for (int out = 1; out < np; ++out) {
      if (n.ports[out].peer == kNone) continue;
      for (int in = 0; in < np; ++in) {
        const routing::Sl2Vl& t = routes.sl2vl[s][static_cast<std::size_t>(in) * np + out];
        routing::Sl2Vl& had = pr.sl2vl[static_cast<std::size_t>(in) * np + out];
        if (t == had) continue;
        wire::SlToVlTable v;
        std::copy(t.begin(), t.end(), v.vl.begin());
        std::array<std::uint8_t, wire::kSmpDataBytes> data{};
        wire::encode(v, data);
        add(Purpose::kSetSl2Vl, true,
            static_cast<std::uint16_t>(wire::SmpAttrExt::kSlToVlMappingTable),
            static_cast<std::uint32_t>(in << 8 | out), i, static_cast<std::uint8_t>(out),
            add_data(data));
        had = t;  // optimistic; a lost Set makes the sweep incomplete and the table is resent
      }
      if (!pr.vlarb[out]) {
        // Low-priority table, first block: every data VL the engine uses gets an equal weight.
        wire::VlArbBlock v;
        for (int vl = 0; vl < routes.vls && vl < 32; ++vl)
          v.entry[vl] = {static_cast<std::uint8_t>(vl), kVlArbWeight};
        std::array<std::uint8_t, wire::kSmpDataBytes> data{};
        wire::encode(v, data);
        add(Purpose::kSetVlArb, true,
            static_cast<std::uint16_t>(wire::SmpAttrExt::kVlArbitrationTable),
            (1u << 16) | static_cast<std::uint32_t>(out), i, static_cast<std::uint8_t>(out),
            add_data(data));
        pr.vlarb[out] = true;
      }
    }
  }

  // ---- activation -------------------------------------------------------------------------
  void activate(TimeNs now) {
    enter(Phase::kActivation, now);
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      for (std::uint8_t p = 0; p <= nodes[i].num_ports; ++p) {
        const DPort& d = nodes[i].ports[p];
        if (!d.read || d.info.port_state != wire::PortState::kArmed) continue;
        wire::PortInfo w = d.info;
        w.port_phys_state = 0;
        w.port_state = wire::PortState::kActive;
        std::array<std::uint8_t, wire::kSmpDataBytes> data{};
        wire::encode(w, data);
        const std::uint32_t slot =
            add(Purpose::kSetPortInfo, true, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo),
                p, i, p, add_data(data));
        reqs[slot].dlid = sweep_lost ? 0 : live_lid(i, p);  // a table may be missing: directed
        ++cur.ports_activated;
      }
    if (sm.cfg_.recheck_down_ports) recheck_down_ports();
  }

  // PortStateChange (14.2.5.4) records what a switch's link state machines did on their own,
  // and a port that trains before its switch knows the SM's LID sends no trap (13.4.9: traps go
  // to MasterSMLID). The SwitchInfo Set of LFT programming clears the flag after discovery read
  // the ports, so a port that trained in between (read Down) would be seen by nothing: the
  // cross-host failure of a crossing port left in Init behind a tunnel while its peer was
  // Active. So every switch port read Down is read again now that the flag is cleared; one found
  // trained makes another heavy sweep follow at once, which arms and activates it. A port that
  // trains after this read sets the flag again (and traps: its switch knows the SM now).
  void recheck_down_ports() {
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].is_switch) continue;
      for (std::uint8_t p = 1; p <= nodes[i].num_ports; ++p) {
        const DPort& d = nodes[i].ports[p];
        if (!d.read || d.info.port_phys_state == kPhysLinkUp) continue;
        const std::uint32_t slot =
            add(Purpose::kPortRecheck, false, static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo),
                p, i, p);
        reqs[slot].dlid = sweep_lost ? 0 : live_lid(i, 0);
        ++cur.ports_rechecked;
      }
    }
  }

  void fail(TimeNs now, std::string msg) {
    cur.error = msg;
    sm.last_error_ = std::move(msg);
    sm.routes_valid_ = false;
    pending.clear();
    finish_sweep(now, Phase::kFailed);
  }

  // ---- responses --------------------------------------------------------------------------
  void on_response(std::uint32_t slot, std::uint16_t status, wire::ConstSmpData data, TimeNs now) {
    Request r = reqs[slot];
    release(slot);
    --inflight;
    PhaseStats& st = ps();
    ++st.responses;
    if (status != 0) {
      ++st.error_status;
    } else {
      switch (r.purpose) {
        case Purpose::kNodeInfo:
          on_node_info(r, wire::decode_node_info(data));
          break;
        case Purpose::kNodeDesc:
          nodes[r.node].desc = std::string(wire::decode_node_description(data).view());
          break;
        case Purpose::kSwitchInfo:
          nodes[r.node].swinfo = wire::decode_switch_info(data);
          break;
        case Purpose::kPortInfo:
          on_port_info(r, wire::decode_port_info(data));
          break;
        case Purpose::kSetPortInfo:
          nodes[r.node].ports[r.port].info = wire::decode_port_info(data);
          break;
        case Purpose::kSetSwitchInfo: {
          DNode& n = nodes[r.node];
          n.swinfo = wire::decode_switch_info(data);
          programmed[n.guid].fdb_top = n.swinfo.linear_fdb_top;
          break;
        }
        case Purpose::kSetLft: {
          const wire::LinearForwardingTable t = wire::decode_lft(data);
          Programmed& pr = programmed[nodes[r.node].guid];
          const std::size_t base = std::size_t{r.mod} * routing::kLftBlockEntries;
          if (base + routing::kLftBlockEntries <= pr.lft.size())
            std::copy(t.port.begin(), t.port.end(),
                      pr.lft.begin() + static_cast<std::ptrdiff_t>(base));
          break;
        }
        case Purpose::kSetSl2Vl:
        case Purpose::kSetVlArb:
        case Purpose::kSetMft:
          break;
        case Purpose::kLightSwitchInfo:
          if (wire::decode_switch_info(data).port_state_change) {
            heavy_wanted = true;
            reset_backoff_near(nodes[r.node].guid);
          }
          break;
        case Purpose::kPortRecheck: {
          // Trained (Init or Armed) but not Active: the heavy sweep arms and activates it (IBA
          // 14.4: the SM takes every port with a physical link to Active). Still down: its
          // training will set PortStateChange and send a trap, the switch now knowing the SM.
          const wire::PortInfo pi = wire::decode_port_info(data);
          nodes[r.node].ports[r.port].info = pi;
          if (pi.port_phys_state == kPhysLinkUp && pi.port_state != wire::PortState::kActive) {
            heavy_wanted = true;
          } else if (sm.phase_ == Phase::kLightSweep) {
            // A backed-off port read still down: its next read waits out the same back-off.
            const auto it = backoff.find({nodes[r.node].guid, r.port});
            if (it != backoff.end())
              it->second.due_light = sm.light_sweeps_ + 1 + retry_light_sweeps(it->second.failures);
          }
          break;
        }
      }
    }
    if (status != 0 && r.set) sweep_lost = true;  // refused: look again next sweep
    advance(now);
  }

  void on_lost(std::uint32_t slot, TimeNs now) {
    const Request r = reqs[slot];
    release(slot);
    ++ps().mads_lost;
    sweep_lost = true;
    if (r.purpose == Purpose::kSetLft) {
      // Forget the block, so the next sweep sends it again.
      Programmed& pr = programmed[nodes[r.node].guid];
      const std::size_t base = std::size_t{r.mod} * routing::kLftBlockEntries;
      if (base + routing::kLftBlockEntries <= pr.lft.size())
        std::fill_n(pr.lft.begin() + static_cast<std::ptrdiff_t>(base), routing::kLftBlockEntries,
                    0xFE);
    } else if (r.purpose == Purpose::kSetSl2Vl || r.purpose == Purpose::kSetVlArb) {
      programmed[nodes[r.node].guid] = Programmed{};
    } else if (r.purpose == Purpose::kSetMft) {
      programmed[nodes[r.node].guid].mft_unknown.insert((r.mod >> 28) << 16 | (r.mod & 0x1FF));
    }
    advance(now);
  }
};

// ---- SubnetManager ---------------------------------------------------------------------------
SubnetManager::SubnetManager(SmConfig config) : cfg_(std::move(config)) {
  WEFT_ASSERT(cfg_.window_max >= 1);
  WEFT_ASSERT(cfg_.retries_max >= 0 && cfg_.retries_max < 250);
  WEFT_ASSERT(cfg_.timeout_ns > 0);
  WEFT_ASSERT(cfg_.activation_retry_light_sweeps_max >= 1);
  impl_ = std::make_unique<Impl>(*this);
}

SubnetManager::~SubnetManager() = default;

void SubnetManager::start(TimeNs now) {
  WEFT_ASSERT(phase_ == Phase::kIdle);
  impl_->start_heavy(now);
}

void SubnetManager::on_mad(std::span<const std::uint8_t> mad, TimeNs now) {
  Impl& m = *impl_;
  auto h = wire::decode_mad_header(mad);
  if (!h) {
    ++ignored_mads_;
    return;
  }
  const auto method = h->method;
  if (h->mgmt_class == static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted) &&
      method == static_cast<std::uint8_t>(wire::MadMethod::kTrap)) {
    auto s = wire::decode_smp_lid(mad);
    if (!s) {
      ++ignored_mads_;
      return;
    }
    ++traps_;
    const wire::Notice n = wire::decode_notice(s->data);
    if (n.issuer_lid != 0 && sm_lid_ != 0) {  // TrapRepress (IBA 13.4.9): same TID, same Notice
      wire::SmpLid rep = *s;
      rep.hdr.method = static_cast<std::uint8_t>(wire::MadMethod::kTrapRepress);
      rep.m_key = cfg_.m_key;
      OutMad out;
      out.route = OutMad::Route::kLidRouted;
      out.port = cfg_.port;
      out.dlid = n.issuer_lid;
      out.slid = sm_lid_;
      wire::encode_smp(rep, out.mad);
      m.urgent.push_back(out);
      ++totals_.mads_sent;
    }
    if (cfg_.on_trap) cfg_.on_trap(n, now);
    if (n.is_generic && n.trap_number == wire::kTrapLinkStateChange) {
      const auto sw = m.switch_by_lid.find(n.issuer_lid);
      if (sw != m.switch_by_lid.end()) m.reset_backoff_near(sw->second);
    }
    if (n.trap_number == wire::kTrapLinkStateChange || !n.is_generic) {
      if (phase_ == Phase::kSubnetUp || phase_ == Phase::kFailed) {
        m.heavy_wanted = true;
        m.next_light_ns = std::min(m.next_light_ns, now + cfg_.trap_holdoff_ns);
      } else if (phase_ != Phase::kIdle) {
        m.heavy_wanted = true;
      }
    }
    return;
  }
  if (h->mgmt_class == static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted) &&
      method == static_cast<std::uint8_t>(wire::MadMethod::kGetResp)) {
    auto s = wire::decode_smp_lid(mad);
    const std::uint64_t slot = s ? (s->hdr.tid & kSlotMask) : ~0ull;
    if (!s || slot >= m.reqs.size() || m.reqs[slot].tid != s->hdr.tid || !m.reqs[slot].in_flight) {
      ++ignored_mads_;
      return;
    }
    m.reqs[slot].in_flight = false;
    m.on_response(static_cast<std::uint32_t>(slot), s->hdr.status, s->data, now);
    return;
  }
  if (h->mgmt_class != static_cast<std::uint8_t>(wire::MgmtClass::kSubnDirectedRoute) ||
      method != static_cast<std::uint8_t>(wire::MadMethod::kGetResp)) {
    ++ignored_mads_;
    return;
  }
  auto s = wire::decode_smp_dr(mad);
  if (!s || !s->direction) {
    ++ignored_mads_;
    return;
  }
  const std::uint64_t slot = s->hdr.tid & kSlotMask;
  if (slot >= m.reqs.size() || m.reqs[slot].tid != s->hdr.tid || !m.reqs[slot].in_flight) {
    ++ignored_mads_;  // late answer to a retried or finished request
    return;
  }
  m.reqs[slot].in_flight = false;
  m.on_response(static_cast<std::uint32_t>(slot), s->status, s->data, now);
}

bool SubnetManager::poll_mad(TimeNs now, OutMad& out) {
  Impl& m = *impl_;
  if (!m.urgent.empty()) {
    out = m.urgent.front();
    m.urgent.pop_front();
    return true;
  }
  if (m.pending.empty() || m.inflight >= cfg_.window_max) return false;
  const std::uint32_t slot = m.pending.front();
  m.pending.pop_front();
  Request& r = m.reqs[slot];
  if (r.attempts > 0) ++m.ps().mads_retried;
  ++r.attempts;
  r.in_flight = true;
  ++m.inflight;
  ++m.ps().mads_sent;
  m.timers.emplace_back(now + cfg_.timeout_ns, r.tid);
  m.encode(r, out);
  return true;
}

TimeNs SubnetManager::next_deadline() const {
  const Impl& m = *impl_;
  TimeNs t = m.timers.empty() ? kNoDeadline : m.timers.front().first;
  if (phase_ == Phase::kSubnetUp || phase_ == Phase::kFailed) t = std::min(t, m.next_light_ns);
  return t;
}

void SubnetManager::on_deadline(TimeNs now) {
  Impl& m = *impl_;
  while (!m.timers.empty() && m.timers.front().first <= now) {
    const std::uint64_t tid = m.timers.front().second;
    m.timers.pop_front();
    const std::uint64_t slot = tid & kSlotMask;
    Request& r = m.reqs[slot];
    if (r.tid != tid || !r.in_flight) continue;
    r.in_flight = false;
    --m.inflight;
    if (r.attempts <= cfg_.retries_max) {
      m.pending.push_front(static_cast<std::uint32_t>(slot));
      continue;
    }
    m.on_lost(static_cast<std::uint32_t>(slot), now);
  }
  if ((phase_ == Phase::kSubnetUp || phase_ == Phase::kFailed) && now >= m.next_light_ns) {
    // A failed SM looks again at the sweep interval: the fabric may have become routable.
    if (m.heavy_wanted || phase_ == Phase::kFailed) {
      m.start_heavy(now);
    } else if (m.forced_heavy_due(now)) {
      ++forced_heavy_sweeps_;
      m.start_heavy(now);
      m.cur.forced = true;
    } else {
      m.start_light(now);
    }
  }
  m.advance(now);
}

bool SubnetManager::settled() const {
  return phase_ == Phase::kSubnetUp && !impl_->heavy_wanted && !impl_->mcast_dirty &&
         impl_->inflight == 0 && impl_->urgent.empty();
}

void SubnetManager::service_changes(TimeNs now) {
  if (!cfg_.on_port_service) return;
  const Impl& m = *impl_;
  std::map<std::uint64_t, std::uint16_t> now_in;
  for (std::size_t i = 0; i < m.fabric.nodes.size(); ++i) {
    const routing::FabricNode& n = m.fabric.nodes[i];
    if (n.is_switch || i >= m.lids.base.size()) continue;
    for (int p = 1; p <= n.num_ports(); ++p) {
      const routing::Lid lid = m.lids.base[i][static_cast<std::size_t>(p)];
      if (n.ports[static_cast<std::size_t>(p)].guid != 0 && lid != routing::kNoLid)
        now_in.emplace(n.ports[static_cast<std::size_t>(p)].guid, lid);
    }
  }
  for (const auto& [guid, lid] : in_service_)
    if (!now_in.count(guid)) cfg_.on_port_service(guid, lid, false, now);
  for (const auto& [guid, lid] : now_in)
    if (!in_service_.count(guid)) cfg_.on_port_service(guid, lid, true, now);
  in_service_ = std::move(now_in);
}

std::size_t SubnetManager::ports_stuck() const {
  std::size_t k = 0;
  for (const auto& [key, b] : impl_->backoff) k += b.reported ? 1 : 0;
  return k;
}

std::vector<StuckPort> SubnetManager::stuck_ports() const {
  const Impl& m = *impl_;
  std::vector<StuckPort> v;
  for (const auto& [key, b] : m.backoff)
    if (b.reported) v.push_back(m.stuck_port(key, b));
  return v;
}

const routing::Fabric& SubnetManager::fabric() const {
  return impl_->fabric;
}
const routing::LidMap& SubnetManager::lids() const {
  return impl_->lids;
}
const routing::Routes& SubnetManager::routes() const {
  return impl_->routes;
}

std::size_t SubnetManager::memory_bytes() const {
  const Impl& m = *impl_;
  std::size_t b = sizeof(*this) + sizeof(Impl);
  for (const DNode& n : m.nodes) {
    b += sizeof(DNode) + n.path.capacity() + n.desc.capacity();
    for (const DPort& p : n.ports) b += sizeof(DPort) + p.path.capacity();
  }
  b += m.by_guid.size() * (sizeof(std::uint64_t) + sizeof(std::uint32_t) + 16);
  for (const auto& fn : m.fabric.nodes)
    b += sizeof(fn) + fn.ports.capacity() * sizeof(routing::FabricPort) + fn.name.capacity();
  for (const auto& v : m.lids.base) b += sizeof(v) + v.capacity() * sizeof(routing::Lid);
  b += m.lids.owner.capacity() * sizeof(routing::LidOwner);
  b += m.routes.memory_bytes();
  b += m.assigner.cache().size() * 48;
  for (const auto& [g, p] : m.programmed) {
    (void)g;
    b += sizeof(Programmed) + 32 + p.lft.capacity() + p.sl2vl.capacity() * sizeof(routing::Sl2Vl);
  }
  b += m.reqs.capacity() * sizeof(Request) + m.datas.capacity() * wire::kSmpDataBytes;
  for (const auto& [k, bo] : m.backoff) b += sizeof(k) + sizeof(Backoff) + 32 + bo.desc.capacity();
  return b;
}

void SubnetManager::set_multicast_group(std::uint16_t mlid, std::vector<std::uint64_t> port_guids,
                                        TimeNs now) {
  WEFT_ASSERT(mlid >= 0xC000 && mlid != 0xFFFF);
  std::sort(port_guids.begin(), port_guids.end());
  port_guids.erase(std::unique(port_guids.begin(), port_guids.end()), port_guids.end());
  if (port_guids.empty()) {
    remove_multicast_group(mlid, now);
    return;
  }
  auto& g = impl_->groups[mlid];
  if (g == port_guids) return;
  g = std::move(port_guids);
  multicast_changed(now);
}

void SubnetManager::remove_multicast_group(std::uint16_t mlid, TimeNs now) {
  if (impl_->groups.erase(mlid) > 0) multicast_changed(now);
}

const std::map<std::uint16_t, std::vector<std::uint64_t>>& SubnetManager::multicast_groups() const {
  return impl_->groups;
}

// Up: a light sweep now carries the MFT Sets; in a sweep: one more heavy sweep after it.
void SubnetManager::multicast_changed(TimeNs now) {
  Impl& m = *impl_;
  m.mcast_dirty = true;
  if (phase_ == Phase::kSubnetUp) {
    m.next_light_ns = std::min(m.next_light_ns, now);
  } else if (phase_ != Phase::kIdle) {
    m.heavy_wanted = true;
    if (phase_ == Phase::kFailed) m.next_light_ns = std::min(m.next_light_ns, now);
  }
}

}  // namespace weft::sm
