// src/ofi/medium.hpp — the one seam between the provider and whatever carries its packets.
//
// A MediumPort is one Device's attachment to a medium: IBA packets out (tx, then tx_flush per
// burst), IBA packets in (rx_burst hands them to the Device), and small control datagrams for
// connection setup between endpoints. The provider never sees sockets, rings or processes.
// Implementations: the in-process loopback (loopback_medium.cpp), shared memory between
// processes (shm_port.cpp), an emulated fabric (fabric_port.cpp), RoCEv2 over UDP
// (udp_port.cpp) and over DPDK (dpdk_port.cpp), and the capture in front of any of the IBA ones
// (capture_port.cpp); see README.md, "The medium seam".
//
// Thread-safety: a port is used by one thread at a time (the domain's progress, under the
// domain lock). Different ports may be used concurrently; the medium synchronises between them.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/device.hpp>

#include "src/io/medium.hpp"

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

// Memory registration (fi_mr_reg, fi_close of the MR) is io::MemoryRegistration's: register_memory
// false refuses the MR (*error says why); unregister_memory false means a transmit from it is
// still in flight (the close is retried). IoMediumPort passes both to its Medium.
class MediumPort : public io::MemoryRegistration {
 public:
  ~MediumPort() override = default;
  virtual NodeAddr local() const = 0;
  // One packet from Device::poll_transmit. pkt and its payload are valid only during the call:
  // the medium copies (TxPacket::write_to) or moves the payload now. Returns false when the
  // medium has no room; the packet is then lost and the RC engine's retransmission recovers it.
  virtual bool tx(const TxPacket& pkt) = 0;
  // Publishes every packet tx() accepted since the last flush (one doorbell per burst).
  virtual void tx_flush() = 0;
  // Moves what dev has to send onto the medium (at most max_packets); returns how many. The
  // default polls the Device and hands each packet to tx(), then flushes once. A medium with a
  // burst interface of its own (src/io's Medium::tx_burst) overrides it and keeps packets it has
  // no room for in the Device (back-pressure instead of a drop).
  virtual std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max_packets) {
    TxPacket pkt;
    std::size_t sent = 0;
    while (sent < max_packets && dev.poll_transmit(now, pkt)) {
      tx(pkt);
      ++sent;
    }
    if (sent) tx_flush();
    return sent;
  }
  // Hands up to max_packets received packets to dev.on_packet(..., now); returns how many.
  virtual std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) = 0;
  // Connection setup: datagrams of at most kCtrlBytesMax bytes, delivered in order per pair of
  // nodes and as reliably as the medium can (udp gives up after ~10 s of retransmissions, dpdk
  // after 200 ms of a full queue; the provider resends unanswered connection requests). False:
  // the destination node does not exist (or is gone).
  virtual bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) = 0;
  using CtrlFn = std::function<void(const NodeAddr& src, std::span<const std::uint8_t> msg)>;
  // `now` is the caller's clock reading (a medium rate-limits its system calls by it: this runs
  // in every progress pass); `urgent`: the caller awaits an answer (a connection request is
  // out), so look now.
  virtual std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now,
                                bool urgent) = 0;
  // A file descriptor that becomes readable when rx_burst or ctrl_poll has work (for blocking
  // waits), or -1 when the medium offers none. The reader drains it with read(2) of 8 bytes,
  // so it is an eventfd or an epoll set, never a socket that carries data (such a read would
  // take a datagram: the dpdk port's lost connection replies).
  virtual int wait_fd() const = 0;
  // The Device this port carries (called once, after the Device exists): a medium that sends
  // payloads by reference asks it whether a payload stays put (Device::payload_stable).
  virtual void bind_device(const Device& dev) { (void)dev; }
  // A node the provider is about to talk to (fi_av_insert, a connection request's source): a
  // medium that routes by something other than the LID (UDP: an IP address and port carried in
  // node_id) learns the route here.
  virtual void add_peer(const NodeAddr& peer) { (void)peer; }
  // True when `peer` is another process that answers our connection requests from its own
  // progress, and setting up the way there is worth doing before the first message (shm: the
  // link's segment is mapped and its rings touched on both sides). fi_av_insert then waits,
  // bounded, for the answers (ofi_domain.cpp, settle_connects).
  virtual bool settles_before_use(const NodeAddr& peer) const {
    (void)peer;
    return false;
  }
  // The pid of the process that holds `peer` when this process may read its memory directly
  // (process_vm_readv): a rendezvous receiver then copies the payload itself, once, instead of
  // READing it through the engine. 0: no such path (the payload must travel on the medium).
  virtual int direct_read_pid(const NodeAddr& peer) const {
    (void)peer;
    return 0;
  }

  // Direct messages: a provider message that does not go through the Device (README, "Direct
  // messages"). tx_direct puts `head` then `body` on the medium as one record towards dst, in
  // order after every packet tx() took before it, and publishes it at once. False: the medium
  // offers no such path or has no room now; the caller then sends through the Device. A medium
  // offers it only where it is reliable and ordered by itself (shm's rings), so what the RC
  // engine would add (PSNs, ACKs, retransmission) buys nothing there.
  virtual bool tx_direct(const NodeAddr& dst, std::span<const std::uint8_t> head,
                         std::span<const std::uint8_t> body) {
    (void)dst;
    (void)head;
    (void)body;
    return false;
  }
  // The last tx_direct failed only for lack of room (the peer is slow to read its ring): a
  // sender should back off (-FI_EAGAIN) rather than send through the Device, whose packet the
  // full ring would drop, leaving it to the RC retransmission timer.
  virtual bool direct_full() const { return false; }
  // Who gets the direct messages rx_burst finds, in ring order with the packets it hands to the
  // Device: fn(ctx, head and body as sent, contiguous), valid only during the call.
  using DirectFn = void (*)(void* ctx, std::span<const std::uint8_t> msg);
  virtual void set_direct_handler(DirectFn fn, void* ctx) {
    (void)fn;
    (void)ctx;
  }
  // Sleeping on the medium's own doorbells (a CQ read that has spun long enough, ofi_domain.cpp):
  // arm_sleep asks every peer to ring us when it next publishes (shm: the ring's
  // consumer_sleeping flag, src/io/shm/ring.hpp) and appends what to poll(2) on; false when
  // something arrived since the last rx_burst (do not sleep) or the medium cannot ring a sleeper
  // (it then appends nothing).
  // disarm_sleep withdraws the request, whatever arm_sleep answered, and gets the polled fds
  // back (revents: what woke the caller). Both under the domain lock; the poll itself may run
  // without it (a link that goes meanwhile leaves a stale fd, which at worst ends the poll early).
  virtual bool arm_sleep(std::vector<pollfd>& fds) {
    (void)fds;
    return false;
  }
  virtual void disarm_sleep(std::span<const pollfd> fds) { (void)fds; }
  // The earliest time the port's own timers need a ctrl_poll (udp: a control datagram's
  // retransmission), or kNoDeadline. A sleeper that has doorbells (no tick) wakes for it:
  // Domain::next_deadline includes it.
  virtual TimeNs next_deadline() const { return kNoDeadline; }

  // What the medium counted, for the provider's extension ops (fi_weft_ext.h); zeros where it
  // counts nothing of the kind.
  struct Stats {
    std::uint64_t tx_packets = 0, rx_packets = 0;
    std::uint64_t tx_zero_copy = 0;  // packets whose payload went by reference
    std::uint64_t regions = 0;       // memory regions registered with the medium now
  };
  virtual Stats stats() const { return {}; }
};

// What the ports over a src/io Medium (udp_port.cpp, dpdk_port.cpp) share: that medium polls the
// Device itself, so packets leave through tx_burst and tx() is not used.
class IoMediumPort : public MediumPort {
 public:
  NodeAddr local() const override { return self_; }
  bool tx(const TxPacket&) override { return false; }
  void tx_flush() override {}
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return io_->tx_burst(dev, now, max_packets);
  }
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    return io_->rx_burst(dev, now, max_packets);
  }
  bool register_memory(void* addr, std::size_t bytes, std::string* error) override {
    return io_->register_memory(addr, bytes, error);
  }
  bool unregister_memory(void* addr) override { return io_->unregister_memory(addr); }

 protected:
  io::Medium* io_ = nullptr;  // the port's medium, set when the port creates or takes it
  NodeAddr self_;
};

// The in-process loopback: every port opened in this process with the same fabric name can
// reach every other. Packets are materialised (write_to) into the destination's inbox.
std::unique_ptr<MediumPort> open_loopback_port(std::string_view fabric_name);

// The shared-memory medium between processes (shm_port.cpp): the port claims a LID by binding
// the abstract socket "weft/ofi/<fabric>/<lid>" (its rendezvous); a peer is reached through the
// socket named by its LID, one src/io ShmMedium link per pair of ports, set up lazily.
std::unique_ptr<MediumPort> open_shm_port(std::string_view fabric_name);

// Through an emulated fabric (fabric_port.cpp, WEFT_FABRIC=F): the port attaches to a free HCA
// of the running fabric daemon F (src/io's attach protocol) and takes the LID its subnet manager
// gave that HCA; packets cross the emulated switches and links (and their faults). Control
// datagrams travel on the abstract Unix datagram socket "weft/ofi-fabric/<F>/<lid>". Null (and
// a warning) when the daemon cannot be reached or has no free HCA.
std::unique_ptr<MediumPort> open_fabric_port(std::string_view fabric_name,
                                             std::string_view daemon_name);

// RoCEv2 over UDP (udp_port.cpp, FI_WEFT_MEDIUM=udp): src/io's UdpMedium on an ephemeral port of
// FI_WEFT_UDP_IP (default 127.0.0.1). The LID is claimed like the shm port's; node_id carries
// the IPv4 address and UDP port (ip << 32 | port << 16 | lid), so an address is a route.
// Control datagrams: the abstract socket "weft/ofi-udp/<fabric>/<lid>" (one host).
// pcap_path: UdpMedium's capture of this port's datagrams (empty: none).
std::unique_ptr<MediumPort> open_udp_port(std::string_view fabric_name, std::uint32_t ip,
                                          const std::string& pcap_path = {});

// RoCEv2 frames over DPDK (dpdk_port.cpp, FI_WEFT_MEDIUM=dpdk): src/io's DpdkMedium on
// FI_WEFT_DPDK_VDEV, by default one end of a net_memif pair between two processes. Null (and a
// warning) when the port cannot start, or when this build has no DPDK (dpdk_built() false).
std::unique_ptr<MediumPort> open_dpdk_port(std::string_view fabric_name,
                                           const std::string& pcap_path);
bool dpdk_built();
inline constexpr const char* kNoDpdk =
    "this weft was built without DPDK (libdpdk not found at configure time, or -Ddpdk=disabled)";
// Releases the EAL if a DPDK port started it (the provider's cleanup, after every domain).
void dpdk_cleanup();

// FI_WEFT_PCAP on the media that carry IBA packets (capture_port.cpp): `inner` with every
// packet its Device sends and receives written to `path` (src/io/capture.hpp). Null when the
// file cannot be created.
std::unique_ptr<MediumPort> open_capture_port(std::unique_ptr<MediumPort> inner,
                                              const std::string& path);
// The capture file of the next port this process opens: FI_WEFT_PCAP with ".<pid>" before its
// extension (and ".<n>" after it for the n-th further port), so processes and domains never
// share one. Empty when FI_WEFT_PCAP is not set.
std::string next_capture_path();

}  // namespace weft::ofi
