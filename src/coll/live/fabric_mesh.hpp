// coll/live/fabric_mesh.hpp — live mode through a fabric daemon (LiveMedium::kFabric): each rank
// attaches ONE Device to its own HCA of the emulated fabric (io::FabricAttach; WEFT_HCA from
// `weft run` picks it), and one n-rank VerbsTransport on that Device holds an RC QP per (peer,
// lane). Every packet leaves through the rank's HCA port, crosses the fabric's emulated links and
// switches on the routes the subnet manager programmed, and enters the peer at its HCA: what the
// fabric does to packets (drops and delays injected on a link, a re-route) the collective feels,
// and the RC transport recovers.
//
// Setup: the out-of-band mesh (oob_mesh.hpp, names "weft/coll/<job>/fabric/<r>") carries, per
// (peer, lane), our QP number, first PSN, LID (the SM's, from the attach reply), inbox address and
// rkey; each rank brings its QPs to RTS toward the peer's LID (io::connect_rc: RC, MTU 4096,
// LiveOptions::rc_timeout), posts its receives, and says "ready" on the barrier before any data
// moves.
// The sockets stay open: they are the barrier of the bench and how a rank notices a dead peer.
// The daemon going away shows on the attach medium (its pidfd).
// Thread-safety: single owner thread (the Driver runs inline).
#pragma once

#include <memory>
#include <string>

#include "src/coll/live/live_mesh.hpp"

namespace weft::coll::live {

// LiveMesh::create for LiveMedium::kFabric (arguments already checked).
Result<std::unique_ptr<LiveMesh>, std::string> create_fabric_mesh(const LiveOptions& o);

}  // namespace weft::coll::live
