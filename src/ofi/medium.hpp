// src/ofi/medium.hpp — the one seam between the provider and whatever carries its packets.
//
// A MediumPort is one Device's attachment to a medium: IBA packets out (tx, then tx_flush per
// burst), IBA packets in (rx_burst hands them to the Device), and small control datagrams for
// connection setup between endpoints. The provider never sees sockets, rings or processes; the
// in-process loopback (loopback_medium.cpp) implements it now, and src/io's shared-memory
// DirectNode will implement it next (see README.md, "The medium seam").
//
// Thread-safety: a port is used by one thread at a time (the domain's progress, under the
// domain lock). Different ports may be used concurrently; the medium synchronises between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include <weft/device.hpp>

namespace weft::ofi {

// Where a node (one Device) lives on a medium. node_id names the node uniquely on the medium
// (the loopback: a counter; shm: the peer process's rendezvous identity); lid is its port LID,
// the DLID that packets for it carry.
struct NodeAddr {
  std::uint64_t node_id = 0;
  std::uint16_t lid = 0;
  friend bool operator==(const NodeAddr&, const NodeAddr&) = default;
};

inline constexpr std::size_t kCtrlBytesMax = 64;  // one connection-setup datagram

class MediumPort {
 public:
  virtual ~MediumPort() = default;
  virtual NodeAddr local() const = 0;
  // One packet from Device::poll_transmit. pkt and its payload are valid only during the call:
  // the medium copies (TxPacket::write_to) or moves the payload now. Returns false when the
  // medium has no room; the packet is then lost and the RC engine's retransmission recovers it.
  virtual bool tx(const TxPacket& pkt) = 0;
  // Publishes every packet tx() accepted since the last flush (one doorbell per burst).
  virtual void tx_flush() = 0;
  // Hands up to max_packets received packets to dev.on_packet(..., now); returns how many.
  virtual std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) = 0;
  // Connection setup: datagrams of at most kCtrlBytesMax bytes, delivered reliably and in order
  // per pair of nodes. False: the destination node does not exist (or is gone).
  virtual bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) = 0;
  using CtrlFn = std::function<void(const NodeAddr& src, std::span<const std::uint8_t> msg)>;
  virtual std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs) = 0;
  // A file descriptor that becomes readable when rx_burst or ctrl_poll has work (for blocking
  // waits), or -1 when the medium offers none. The reader drains it with read(2) of 8 bytes.
  virtual int wait_fd() const = 0;
  // The Device this port carries (called once, after the Device exists): a medium that sends
  // payloads by reference asks it whether a payload stays put (Device::payload_stable).
  virtual void bind_device(const Device& dev) { (void)dev; }
};

// The in-process loopback: every port opened in this process with the same fabric name can
// reach every other. Packets are materialised (write_to) into the destination's inbox.
std::unique_ptr<MediumPort> open_loopback_port(std::string_view fabric_name);

// The shared-memory medium between processes (shm_port.cpp): the port claims a LID by binding
// the abstract socket "weft/ofi/<fabric>/<lid>" (its rendezvous); a peer is reached through the
// socket named by its LID, one src/io ShmMedium link per pair of ports, set up lazily.
std::unique_ptr<MediumPort> open_shm_port(std::string_view fabric_name);

}  // namespace weft::ofi
