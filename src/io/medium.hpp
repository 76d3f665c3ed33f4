// io/medium.hpp — what the real-time Driver needs from a medium: packets moved in bursts
// between a Device and a wire, plus the file descriptors the Driver sleeps on.
//
// Burst-shaped like DPDK's rx_burst/tx_burst (and eRPC's transports), so a shared-memory ring, a
// DPDK port or a UDP socket (recvmmsg/sendmmsg) fit the same interface: each call moves at most
// `max` packets and returns how many it moved; a full wire is back-pressure (tx_burst stops and
// the Device keeps the rest), never a drop. A medium may need the Driver to sleep on a file
// descriptor (rx_wait_fd) and may watch another (event_fd: peer death, link state).
//
// Thread-safety: a Medium is owned by one Driver and called only from the thread that runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <weft/device.hpp>

namespace weft::io {

// Memory the Device's users registered (Device::reg_mr) and may send from. A medium that sends
// payloads by reference learns the regions here: DPDK's zero copy on a physical port maps them
// for the device's DMA (dpdk_medium.hpp, "Zero copy and reuse"). Call register_memory after
// reg_mr (false, and *error says why, when the medium cannot take the region: the caller then
// fails the registration) and unregister_memory(addr), with the address it registered, before
// dereg_mr: false while the medium still holds a transmit from it (try again after a pass; the
// memory must stay until it returns true). The defaults: a medium that copies needs nothing.
// A Medium is one; so is the libfabric provider's MediumPort (src/ofi/medium.hpp: fi_mr_reg and
// the MR's fi_close), which passes the calls on to its Medium.
class MemoryRegistration {
 public:
  virtual ~MemoryRegistration() = default;
  virtual bool register_memory(void* addr, std::size_t bytes, std::string* error) {
    (void)addr;
    (void)bytes;
    (void)error;
    return true;
  }
  virtual bool unregister_memory(void* addr) {
    (void)addr;
    return true;
  }
};

class Medium : public MemoryRegistration {
 public:
  ~Medium() override = default;
  // Hands packets that arrived to `dev`; returns how many. Any payload copies the medium deferred
  // (RemotePayload) are complete when it returns.
  virtual std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) = 0;
  // Takes packets from dev.poll_transmit() and puts them on the wire; returns how many. Stops
  // before polling a packet it has no room for.
  virtual std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) = 0;

  // Sleeping. rx_wait_fd() becomes readable when a packet may have arrived (-1: the medium cannot
  // wake a sleeper and must be polled). prepare_sleep() announces that the Driver is about to
  // block and returns false when work arrived meanwhile; finish_sleep() follows every successful
  // prepare_sleep().
  virtual int rx_wait_fd() const { return -1; }
  virtual bool prepare_sleep() { return true; }
  virtual void finish_sleep() {}

  // A cheap hint, no part of the protocol: false when rx_burst would surely find nothing (the
  // shared-memory ring's header word at its head reads empty). The idle Driver watches it
  // between pauses instead of running whole passes, so a packet is noticed a pause after it
  // lands rather than half a pass later. A medium that cannot tell cheaply says true.
  virtual bool rx_ready() const { return true; }

  // True when the last tx_burst stopped for lack of room on the wire (back-pressure): the peer
  // is consuming, so the Driver keeps polling longer (DriverConfig::blocked_spin_ns) before it
  // blocks, rather than make the peer wake it with a system call.
  virtual bool tx_blocked() const { return false; }

  // True while payload this side sent may still be queued at the peer, not yet consumed (the
  // shared-memory medium's by-reference records: a deep queue). The ACKs for it come as the peer
  // works through it, each a receiver's burst apart (a 2 MiB burst of copies: ~60-80 us here), so
  // the Driver keeps polling for blocked_spin_ns, as when back-pressured, while the peer runs
  // (peer_state), rather than block after spin_ns and have the peer ring it for every ACK.
  virtual bool tx_in_flight() const { return false; }

  // What the medium can tell of the process at the other end, for the Driver's idle policy:
  // kRunning when it ran a pass at or after `seen_after` on a CPU other than `cpu` (this
  // process's; -1: unknown) — it is on a CPU, and what it sends next is a cache-line transfer
  // away, so the Driver keeps polling and does not yield; kStalled when it did not, or last ran
  // on `cpu` — it is asleep, preempted, or waiting for this very CPU, so polling only takes CPU
  // time from it or from others, and the Driver blocks (the peer rings the doorbell when it
  // sends); kUnknown when the medium cannot tell (the Driver polls, yielding now and then).
  enum class PeerState : std::uint8_t { kUnknown, kRunning, kStalled };
  virtual PeerState peer_state(TimeNs seen_after, int cpu) const {
    (void)seen_after;
    (void)cpu;
    return PeerState::kUnknown;
  }

  // Out-of-band events (peer death): a descriptor watched one-shot, and what to do when it fires.
  virtual int event_fd() const { return -1; }
  virtual void on_event(TimeNs now) { (void)now; }
};

}  // namespace weft::io
