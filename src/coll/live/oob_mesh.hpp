// coll/live/oob_mesh.hpp — the out-of-band side of a live job whose data goes through a fabric
// daemon: one SOCK_SEQPACKET abstract Unix socket per pair of ranks, for the setup exchange (QP
// numbers, PSNs, LIDs, inbox addresses and rkeys), barriers, and noticing a rank whose process
// exited. The fabric itself gives no such signal to a rank that only waits to receive: it has
// nothing outstanding that could time out, while its socket to the dead rank hangs up.
//
// Rendezvous (as the direct mesh's): rank r listens on "weft/<prefix><r>", connects to every
// lower rank's name (retrying until the timeout: the peer may not listen yet) and accepts the
// higher ranks, so the mesh forms in rank order without a cycle. The connector's first message is
// a Hello: its rank, the job's size and the caller's shape word, which every rank must agree on.
// Thread-safety: single owner thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <weft/types.hpp>

namespace weft::coll::live {

class OobMesh {
 public:
  ~OobMesh();
  OobMesh(const OobMesh&) = delete;
  OobMesh& operator=(const OobMesh&) = delete;

  // Joins the mesh of `size` ranks named "weft/<prefix><rank>". `shape` summarises what must be
  // equal on every rank (a peer with another one is refused). The error is one sentence.
  static Result<std::unique_ptr<OobMesh>, std::string> create(const std::string& prefix, int rank,
                                                              int size, std::uint64_t shape,
                                                              TimeNs timeout_ns);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(socks_.size()); }
  // One message of `len` bytes to / from `peer` (the receiver must expect exactly that length).
  bool send(int peer, const void* data, std::size_t len);
  bool recv(int peer, void* data, std::size_t len, TimeNs timeout_ns);
  // Every rank tells every peer it arrived, then waits for theirs; false on a lost peer or the
  // timeout. While no peer's message is there, `idle(slice_ns)` (when set) runs for up to
  // slice_ns at a time: the caller's Driver, so its HCA keeps answering meanwhile.
  bool barrier(TimeNs timeout_ns, const std::function<void(TimeNs)>& idle = {});
  // A peer whose socket hung up (its process exited), or -1. One poll() over every socket.
  int hung_up_peer() const;

 private:
  OobMesh(int rank, int size);
  int rank_;
  std::vector<int> socks_;  // by peer, -1 for this rank
};

}  // namespace weft::coll::live
