// emu/faults/scenario.hpp — a fault scenario: what goes wrong on which port and when.
//
// Two sources, one value: a TOML file (toml++) and command-line flags. Names are checked
// against the Topology when parsed, so a scenario that names a node, port or link that does
// not exist is refused with the file's line (or the flag's number) and the problem.
//
//   seed = 7                                  # optional: the run's seed unless --seed is given
//   [[fault]]                                 # per-port receive-side faults
//   link = "p00leaf00/p1"                     # both directions of the link at that port
//   # port = "hca00003/p1"                    # or one port's receive direction only
//   drop = 0.01        ber = 1e-6             # probability per packet; bit error rate
//   duplicate = 0.02   reorder = 0.05         # probability per packet
//   reorder_max = "3us"  delay = "1us"  jitter = "200ns"
//   [[event]]                                 # scheduled, in virtual time
//   at = "100us"  action = "link-down"  link = "p00leaf00/p1"    # link-up likewise
//   at = "50us"   action = "flap"  link = "..."  period = "10us"  count = 3
//   at = "80us"   action = "switch-down"  switch = "p00agg00"     # switch-up likewise
//   at = "90us"   action = "sm-down"                              # sm-up likewise
// Flags: --fault "link=X/pN,drop=0.01,..." and --event "at=100us,action=link-down,link=X/pN"
// take the same keys. Times: a number with ns, us, ms or s (a bare number is ns).
// Node names are NodeDescriptions (as the topo generators write them) or GUIDs (0x...).
//
// Errors are values (FaultError, one sentence beginning with "file:line:" or "--fault #N:").
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/topo/topology.hpp"

namespace weft::faults {

struct FaultError {
  std::string message;
};

struct PortFaultSpec {
  topo::PortRef port;
  bool both_ends = true;  // link= (both directions) or port= (this receive direction only)
  fabric::PortFaults faults;
  std::string where;  // "file:line" or "--fault #N", for the log
};

enum class Action : std::uint8_t {
  kLinkDown,
  kLinkUp,
  kFlap,
  kSwitchDown,
  kSwitchUp,
  kSmDown,
  kSmUp
};
const char* to_string(Action a);

struct EventSpec {
  TimeNs at_ns = 0;
  Action action = Action::kLinkDown;
  topo::LinkId link = topo::kNoLink;  // link actions
  topo::NodeId node = topo::kNoNode;  // switch actions
  TimeNs period_ns = 0;               // flap: down for period/2, up for period/2
  std::uint32_t count = 1;            // flap: cycles
  std::string where;
};

struct Scenario {
  std::optional<std::uint64_t> seed;
  std::vector<PortFaultSpec> ports;
  std::vector<EventSpec> events;
  void append(const Scenario& other);
};

// "300us" -> 300000. nullopt on a malformed time.
std::optional<TimeNs> parse_time(std::string_view s);
// "p00leaf00/p1" (or "0x.../p1") -> the port; errors name the problem.
Result<topo::PortRef, FaultError> parse_port(const topo::Topology& t, std::string_view s);

Result<Scenario, FaultError> parse_scenario(const topo::Topology& t, std::string_view toml_text,
                                            std::string_view file_name);
Result<Scenario, FaultError> load_scenario(const topo::Topology& t, const std::string& path);
// One --fault or --event flag; `index` (1-based) names it in errors.
Result<PortFaultSpec, FaultError> parse_fault_flag(const topo::Topology& t, std::string_view flag,
                                                   int index);
Result<EventSpec, FaultError> parse_event_flag(const topo::Topology& t, std::string_view flag,
                                               int index);

}  // namespace weft::faults
