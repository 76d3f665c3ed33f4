// emu/routing/checker.hpp — checks routes independently of the engine that made them.
//
// What it is: the invariant checker run after every routing computation (tests, benchmarks,
// and the SM before it programs switches). It reads only the Fabric, the LIDs, the LFTs and
// the SL/VL tables, and follows the tables hop by hop as a packet would:
//   * every source (each cabled HCA port and each switch) reaches every assigned LID, and the
//     last hop lands on the port that owns the LID (port 0 of the right switch for a switch LID);
//   * no forwarding loop, and no path longer than hops_max;
//   * optionally, no credit loop: the channel dependency graph (Dally & Seitz) — a node per
//     (directed switch-to-switch link, VL), an edge when some route leaves one for the other —
//     is acyclic. Only HCA-to-HCA routes count: traffic to and from switch port 0 is
//     management (SMPs ride VL15, which has no flow-control credits, IBA 7.6.4), and
//     engines may route it outside their deadlock-free scheme. With one VL and no SL2VL the graph
//     is built per destination (routes are destination-based, so every switch's entry is used by
//     someone); with SL2VL tables every (source, destination) path is walked with its path SL.
//     Acyclicity is decided by Kahn's algorithm and a cycle, if any, is extracted with an iterative
//     DFS (no recursion).
//
// Hop convention: hops are links traversed from the source HCA port to the destination HCA
// port, so two HCAs on one switch are 2 hops apart; in a k-ary 3-level fat tree, same pod is 4
// and another pod 6.
// Cost: O(LIDs x switches) for reachability; O(LIDs x switches) for the dependency graph.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emu/routing/routes.hpp"

namespace weft::routing {

struct CheckOptions {
  int hops_max = 0;          // 0: number of switches + 1
  bool credit_loops = true;  // build and check the channel dependency graph
  std::size_t examples_max = 8;
};

struct UnreachablePair {
  NodeIdx src = kNoNode;  // HCA (or switch) node
  int src_port = 0;
  NodeIdx dst = kNoNode;
  int dst_port = 0;
  Lid dlid = 0;
};

struct CheckReport {
  // One sentence per kind of failure, with counts; empty = all good.
  std::vector<std::string> problems;
  std::size_t hca_pairs = 0;           // (source HCA port, destination HCA LID) pairs checked
  std::size_t unreachable_pairs = 0;   // of those, not delivered (drop, loop, wrong port)
  std::size_t switch_unreachable = 0;  // (switch, LID) pairs not delivered
  std::size_t loops = 0;               // (switch, LID) walks that revisited a switch
  std::size_t too_long = 0;            // paths longer than hops_max
  std::vector<UnreachablePair> unreachable_examples;
  std::vector<NodeIdx> unreachable_hcas;  // HCAs owning a LID some HCA cannot reach
  int hops_max = 0;                       // over HCA pairs (convention above)
  double hops_avg = 0;
  // Channel dependency graph.
  bool cdg_checked = false;
  bool credit_loop = false;
  std::size_t cdg_channels = 0, cdg_edges = 0;
  std::vector<std::string> credit_cycle;  // channels of one cycle, "a:p -> b:q VL v"
  bool ok() const { return problems.empty(); }
};

CheckReport check_routes(const Fabric& fabric, const LidMap& lids, const Routes& routes,
                         const CheckOptions& opt = {});

}  // namespace weft::routing
