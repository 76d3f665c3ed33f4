// coll/transport.hpp — the seam between a collective's state machine and the network: the few
// calls a rank needs (write a chunk with an immediate into a peer's inbox slot, send a credit
// grant, poll completions), so the same collective code runs over weft::Device in the emulator
// and over live media (src/io) later. Implementations never block; post_* either queue the work
// or return kBusy (retry on a later progress call).
//
// Addressing: a (peer, lane) pair names one reliable, in-order connection. Each receiving rank
// owns, per (peer, lane), an inbox of slots() slots of slot_bytes() bytes in registered memory;
// data written into slot s by the peer is read with inbox(peer, lane, s).
// Thread-safety: single owner (the rank's progress loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "src/coll/types.hpp"

namespace weft::coll {

struct TransportEvent {
  enum class Kind : std::uint8_t {
    kWriteDone,  // a post_write completed locally (the source may be reused)
    kData,       // the peer wrote a chunk into our inbox slot `slot` (`bytes` long)
    kGrant,      // the peer returned `credits` inbox slots
    kError,      // a work request failed; the connection is dead
  };
  Kind kind = Kind::kWriteDone;
  int peer = 0;
  int lane = 0;
  std::uint64_t wr_id = 0;    // kWriteDone
  std::uint32_t slot = 0;     // kData
  std::uint32_t bytes = 0;    // kData
  std::uint32_t credits = 0;  // kGrant
};

enum class TransportErrc : std::uint8_t { kOk, kBusy, kUnregistered, kFailed };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int lanes() const = 0;
  virtual std::uint32_t slots() const = 0;       // inbox slots per (peer, lane)
  virtual std::uint32_t slot_bytes() const = 0;  // a multiple of 8

  // Makes [addr, addr + bytes) a legal source of post_write until unregister_memory(addr).
  virtual TransportErrc register_memory(const void* addr, std::size_t bytes) = 0;
  virtual void unregister_memory(const void* addr) = 0;

  // RDMA WRITE with immediate of [src, src + bytes) into the peer's inbox slot `slot` for our
  // (rank, lane); bytes <= slot_bytes(). Completes as kWriteDone(wr_id) here, kData there.
  virtual TransportErrc post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                                   std::uint32_t slot, std::uint64_t wr_id) = 0;
  // Returns `credits` inbox slots to the peer (a small SEND with immediate). kGrant there.
  virtual TransportErrc post_grant(int peer, int lane, std::uint32_t credits) = 0;
  // Moves up to out.size() events into out; returns how many. Never blocks.
  virtual std::size_t poll(std::span<TransportEvent> out) = 0;
  // Our inbox slot for data from (peer, lane).
  virtual const std::uint8_t* inbox(int peer, int lane, std::uint32_t slot) const = 0;
};

}  // namespace weft::coll
