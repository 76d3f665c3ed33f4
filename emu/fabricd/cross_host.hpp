// emu/fabricd/cross_host.hpp — one subnet over fabric daemons on several hosts (issue 7,
// section 5).
//
// Every daemon loads the same topology. Each runs its part: the switches named by its `part`
// patterns and the HCAs attached to them; the other nodes exist in its Fabric only as inert
// ghosts (never reached: no link leads to them). A link between a switch of this part and a
// switch of another ("crossing" link) is carried by a LinkTunnel: the local switch port's
// partner is a RemoteEnd, a Node standing for the far port, that puts what the port sends on the
// tunnel — data packets (kEvArrive), flow-control packets (kEvFc) and SMPs of the management
// path (kEvSmp), each as an LRH..VCRC image or an FC packet — and frames from the tunnel enter at
// the port as arrivals at the daemon's current virtual time (each daemon keeps its own).
//
// Which peer: one tunnel (one socket) serves every peer daemon. When a peer's part is known (a
// `#weft host` section of the topology file names every daemon's switches), a crossing link
// goes to the peer whose part holds its far switch; otherwise (`--peer` flags) the link's hellos
// go to every peer until one answers for the link, and the link belongs to that peer from then
// on (only the daemon running the far switch has the link as a crossing one; the others count
// the hello as rx_unknown). Frames of a link from another peer are dropped (rx_wrong_peer).
//
// Link training: a crossing port starts Down. Hellos (every hello_ns, and at once on a change)
// carry (boot id, epoch, up): a Down port goes up when it hears the peer at the same or a newer
// epoch (an Up one hearing a newer epoch goes down and up again: the peer reset its end); an Up
// port goes down, to a newer epoch, when the peer's boot id changes (the daemon restarted) or
// when nothing was heard for dead_ns. A port that hears an older epoch answers at once, so the
// peer catches up. Going up, the port sends its hello before anything else, so the FC init packets
// of IBA 7.9.4.1 (sent by the Fabric at link up) always reach a port that is up. A port going up or
// down is a real Fabric link change: the switch's SMA sends trap 128 to the SM.
//
// Lost frames: the tunnel is UDP. A lost data packet is the transport's (RC retransmits), a lost
// SMP the SM's (it retries), as on a lossy link. A lost flow-control packet would leave the
// partner short of credits until the next FC packet of that VL, and stall the VL for good if none
// followed, so each crossing link remembers the latest FC packet it sent per VL and sends it again
// after fc_refresh_ns while no newer one went, and again at doubling waits up to
// fc_refresh_max_ns (IBA 7.9.4: FC packets are sent periodically; they
// carry absolute counts, so a repeat is idempotent). Its FCTBS is brought up to the blocks of that
// VL the port sent through the tunnel since (data lost on the way included), so the partner's ABR
// resyncs as IBA 7.9.4.3 intends and a lost data packet's credit comes back.
//
// One SM: the daemon whose part holds the first HCA of the topology (sm::bring_up's default)
// starts its FabricSm once every crossing link is up (or after sm_wait_ns); its directed-route
// SMPs reach the other daemon's switches through the tunnel on VL15.
//
// Thread-safety: the daemon's driver thread owns it (the tunnel, the Fabric, the Simulator).
// Lifetime: the Fabric keeps the RemoteEnds (adopted components); they go inert when the
// CrossHost is destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/fabricd/link_tunnel.hpp"
#include "emu/topo/topology.hpp"
#include "src/io/medium.hpp"

namespace weft::fabricd {

// A VL's latest flow-control packet on a crossing link is sent again when no newer one went
// for this long (nanoseconds of wall time), while the link is up: the periodic FC update of
// IBA 7.9.4. Each repeat without a newer packet doubles the wait, up to kFcRefreshMaxNs, so an
// idle link is not woken every millisecond (a VL starved by a lost FC packet gets it back after
// 1 ms with the loss rate's probability, after 1 + 2 ms with its square, ...).
inline constexpr TimeNs kFcRefreshNs = 1'000'000;
inline constexpr TimeNs kFcRefreshMaxNs = 64'000'000;

struct PeerConfig {
  std::string name;  // for messages only
  TunnelEndpoint addr;
  // Its switches, when known (a hosts section): its crossing links are bound to it from the
  // start, and parts that overlap or leave a switch to nobody are refused. Empty: learned from
  // its hellos.
  std::vector<std::string> part;
};

struct CrossHostConfig {
  TunnelEndpoint bind;             // this daemon's tunnel address
  std::vector<PeerConfig> peers;   // the other daemons (at least one)
  std::vector<std::string> part;   // switches this daemon runs: descriptions, `*` globs or indices
  TimeNs hello_ns = 20'000'000;    // between hellos on each crossing link
  TimeNs dead_ns = 1'000'000'000;  // an Up link hearing nothing this long goes down
  TimeNs sm_wait_ns = 3'000'000'000;    // the SM starts at the latest after this
  TimeNs fc_refresh_ns = kFcRefreshNs;  // see kFcRefreshNs
  TimeNs fc_refresh_max_ns = kFcRefreshMaxNs;
  double rx_drop = 0.0;  // loss injection: drop this share of tunnel frames read
  std::uint64_t rx_drop_seed = 1;
};

// Which nodes run here: the switches `patterns` match, and every HCA whose first linked port
// leads to one. Also the crossing links (switch to switch, one end here). One sentence of error
// when a pattern matches nothing, or a link joins an HCA here to a switch there.
struct Split {
  std::vector<bool> local;             // per node
  std::vector<topo::LinkId> crossing;  // by link id
};
Result<Split, std::string> split_topology(const topo::Topology& topo,
                                          const std::vector<std::string>& patterns);

// The hosts section of a topology (net) file: lines, inside comments as the file's other Weft
// extensions (emu/topo/netfile.hpp) so ibnetdiscover and ibsim ignore them,
//   #weft host NAME HOST[:PORT] SWITCH...
// one per daemon: its name, its tunnel address (an address or a host name; port
// kLinkTunnelPort by default) and its switches (descriptions, globs or indices, each optionally
// in double quotes). An empty result when the text has none. One sentence of error (with the
// 1-based line) for a malformed line or a name given twice.
struct HostEntry {
  std::string name;
  TunnelEndpoint addr;
  std::vector<std::string> part;
};
Result<std::vector<HostEntry>, std::string> read_hosts_section(std::string_view text);
// The configuration of the daemon `me` of `hosts`: its address as the bind address, its part,
// the others as peers with their parts. Error when `me` is not among them or it is alone.
Result<CrossHostConfig, std::string> cross_host_from_hosts(const std::vector<HostEntry>& hosts,
                                                           const std::string& me);

class CrossHost {
 public:
  // Wires the crossing links of `fabric` (built from the whole topology) to a tunnel and takes
  // their local ports down until the peer answers. `vnow` gives the virtual time at which
  // frames from the tunnel arrive (the daemon's wall-mapped now, >= the Simulator's now);
  // `wake` asks the daemon to run the Simulator soon.
  static Result<std::unique_ptr<CrossHost>, std::string> create(fabric::Fabric& fabric,
                                                                const CrossHostConfig& config,
                                                                std::function<TimeNs()> vnow,
                                                                std::function<void()> wake);
  ~CrossHost();
  CrossHost(const CrossHost&) = delete;
  CrossHost& operator=(const CrossHost&) = delete;

  bool local(topo::NodeId n) const { return split_.local[n]; }
  // Every crossing link trained and up in the Fabric.
  bool all_up() const;
  // The Driver moves the tunnel through these (rx: frames in; deadline: hellos and timeouts;
  // tx: queued frames out).
  Device& device();
  io::Medium& medium();
  // Status lines: "tunnel ..." counters, one "tunnel peer NAME ADDRESS links N" per peer and
  // one "cross link L NODE/PORT up|down epoch E ... peer NAME" per crossing link.
  std::string status() const;

  class Impl;

 private:
  explicit CrossHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Split split_;
};

}  // namespace weft::fabricd
