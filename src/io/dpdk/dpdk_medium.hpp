// io/dpdk/dpdk_medium.hpp — RoCEv2 over a DPDK Ethernet port: the Medium that puts a Device's
// packets on an ethdev (a NIC, or a virtual device: net_af_packet on a veth, net_memif between
// processes, net_ring in one process) as Ethernet/IPv4/UDP 4791/BTH.../ICRC frames, with the
// framing, routing and receive checks of the UDP medium (src/io/udp/roce_frame.hpp).
//
// EAL. DPDK's environment is set up once per process (rte_eal_init cannot run twice), by the
// first DpdkMedium or by eal_init(). Defaults that work in VMs without hugepages or a NIC:
//   --no-huge --single-file-segments -m 256 --no-pci --no-shconf --no-telemetry
//   --file-prefix weft-PID
//   --log-level=warning -l 0
// DpdkConfig::eal_args, else WEFT_DPDK_ARGS (split on blanks), replaces them whole. The calling
// thread's CPU affinity is restored after rte_eal_init (which pins it to lcore 0's CPU). Each
// medium probes its own vdev (rte_dev_probe) and owns the port it names.
//
// Transmit: mbufs from a pool sized from the descriptor rings. A packet is copied into one mbuf
// as a whole frame, or — zero copy, payloads of zero_copy_min_bytes and more that stay put until
// acknowledged (Device::payload_stable: registered memory) — goes out as a chain: the headers in
// an ordinary mbuf, the payload as an external buffer attached where it lies
// (rte_pktmbuf_attach_extbuf), pad and ICRC in a small third mbuf. The external buffer's free
// callback (run by whoever frees the mbuf: the PMD after sending, or the receiver of net_ring)
// drops the medium's count of buffers in flight; see "Zero copy and reuse" below. Frames the port
// did not take wait for the next pass (back-pressure, nothing is dropped).
// Checksums: IPv4 header and UDP checksums are offloaded when the port offers them
// (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM / UDP_CKSUM: ol_flags, l2_len, l3_len, and the pseudo-header
// sum in the UDP field, as rte_mbuf_core.h asks); otherwise the IPv4 header checksum is computed
// here (20 bytes) and the UDP checksum is 0, which IPv4 allows (RFC 768) and RoCE NICs send (the
// ICRC covers the datagram and masks both checksums). DpdkConfig::checksum_offload = false
// forces the software path. Which one a port uses is logged once, when it starts.
// Receive: bursts of frames; anything that is not IPv4/UDP to our address and port is counted
// (rx_other) and freed; the rest is checked (ICRC) and handed to the Device, then freed.
//
// Zero copy and reuse: a WR completes only when its ACK comes back, that is after the peer got the
// bytes, so the PMD has read them by then. PMDs that copy (net_memif in copy mode, net_af_packet)
// free the chain inside rte_eth_tx_burst; a NIC frees it when it reclaims its ring, so before a
// received burst is handed to the Device (where ACKs become completions) the medium reclaims
// finished transmits (rte_eth_tx_done_cleanup) while any external buffer is in flight. A physical
// port (not on the vdev bus) can only DMA from memory DPDK knows: register_memory() registers it
// with rte_extmem_register and maps it with rte_dev_dma_map (IOVA = VA: run the EAL with
// --iova-mode=va), and only payloads inside such regions go by reference there; call it when the
// memory region is registered with the Device (reg_mr) and unregister_memory() before dereg_mr,
// which refuses while buffers are in flight. Virtual devices read with the CPU: any stable
// payload goes by reference, no registration needed.
//
// Sleeping: the port is configured for receive interrupts (rte_eth_conf.intr_conf.rxq = 1) where
// DpdkConfig::rx_interrupt allows it (by default only net_tap, the one PMD here that has them:
// on a NIC, asking for an interrupt vector the kernel driver cannot give (uio without MSI-X)
// could fail the port's start, which we cannot test here). When the PMD gives the rx queue an
// interrupt descriptor (rte_eth_dev_rx_intr_ctl_q_get_fd: net_tap here, a NIC with an interrupt
// vector), rx_wait_fd() is that descriptor: masked while awake, unmasked
// (rte_eth_dev_rx_intr_enable) only in prepare_sleep, which then looks at the queue once more (a
// frame that landed before the unmask raised nothing), masked again in finish_sleep (l3fwd-power's
// pattern); a PMD without the mask (net_tap) has a descriptor readable exactly while frames wait.
// Otherwise — DPDK 22.11's net_memif, net_ring, net_af_packet and net_null have no receive
// interrupt through ethdev (ENOTSUP; README, "Sleeping") — rx_wait_fd() is a timerfd the medium
// arms before the Driver sleeps, backing off from 20 us to 1 ms while the port stays idle (a
// backed-off poll, not a spin).
//
// A net_memif port has a doorbell of its own instead (dpdk21): an abstract AF_UNIX datagram
// socket (unix(7)) bound to a name unique to the port, and rx_wait_fd() is an epoll set over it
// and the timerfd. Before sleeping, prepare_sleep sends the peer a SLEEPING link frame with the
// number of frames it has received from the peer so far (R, link frames excluded on both sides)
// and the socket's name, then looks at the ring once more. The peer, on SLEEPING(R), rings at
// once (one byte, sendto MSG_DONTWAIT) if the port has taken more than R of its frames (they are
// in the ring already), and otherwise owes a ring: the next burst the port takes pays it, so a
// stream pays one sendto per sleep of its receiver, not one per burst, and a ping-pong (which
// never sleeps) none. A peer rings at once the first time it sees a name, so the sleeper learns
// that its peer rings (bytes arrived on its socket): from then on its timer is only a safety
// bound (kSafetyNs: a peer that died rings no more); a peer that never rang (another program,
// an older Weft) keeps the 1 ms backoff. finish_sleep drains the socket. The name vanishes with
// the descriptor: nothing is left behind.
//
// Ending a session (the destructor). net_memif keeps the frames in flight in shared memory that
// the client maps; when either side leaves, memif_disconnect drops both rings, and whatever the
// other side had not read yet is lost: a datagram's last message (fi_pingpong's DGRAM server
// waited forever for the client's "fin"; its medium had received 40 of the client's 41 frames),
// or the last ACK of an RC exchange (the staying side retried into RETRY_EXC). So a memif port
// leaves gracefully: it sends the frames it still holds, then a BYE link frame (EtherType
// 0x88B5, IEEE 802's local experimental EtherType, never a RoCE frame) behind them, and waits,
// at most kLingerNs, for the peer's BYE-ACK. The rings are FIFO, so the peer answers only after
// it has taken every frame sent before the BYE, and its answer comes after every frame it sent
// us. A port answers a BYE from rx_burst (its Device alive) and while it itself is ending, and
// link frames never reach the Device or the capture. Other vdevs need none of this: af_packet's
// frames are in the kernel once rte_eth_tx_burst returns. The memif server, in addition, leaves
// after its client (see the destructor).
//
// Thread-safety: owned by one Driver; all calls from its thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/io/medium.hpp"
#include "src/io/udp/roce_frame.hpp"
#include "src/wire/pcap.hpp"

struct rte_mempool;
struct rte_mbuf;
struct rte_eth_dev_info;
struct rte_device;

namespace weft::io::dpdk {

// Initializes the EAL once for the process (later calls return the first call's result). An
// empty `args` means WEFT_DPDK_ARGS or the defaults above. On failure *error says why.
bool eal_init(const std::vector<std::string>& args, std::string* error);
// The default EAL arguments (without argv[0]).
std::vector<std::string> default_eal_args();
// Releases the EAL (rte_eal_cleanup) and removes its run-time directory; call once at exit, after
// every DpdkMedium is gone. It first holds EAL's interrupt thread in a callback for good (README,
// "The CI crash"): no interrupt callback runs afterwards in this process.
// (With the default arguments eal_init removed that directory already,
// right after rte_eal_init: nothing in it is used afterwards, and a process killed by a signal
// never gets here.)
void eal_cleanup();

// How long a memif port waits for EAL's interrupt thread to come round to it before stopping.
// The thread's callbacks are short (a control message, a disconnect); 2 s means it is stuck, and
// then the port stops anyway, as it did before the barrier.
inline constexpr TimeNs kIntrBarrierWaitNs = 2'000'000'000;
// Returns once EAL's interrupt thread has finished the callback it was running when called (at
// most timeout_ns); true when it did. Call it before rte_eth_dev_stop of a net_memif port: DPDK
// 22.11's memif_disconnect runs on that thread when the peer leaves and again inside
// rte_eth_dev_stop, and frees the shared-memory regions at its end outside any lock, so the two
// could free them both (README, "The CI crash of 2026-12-04"). DpdkMedium does; so must any
// other code that stops a memif port (bench/dpdk).
bool interrupt_thread_barrier(TimeNs timeout_ns = kIntrBarrierWaitNs);

// The net_memif ring Weft's own memif devices use (weft perf, the libfabric provider, and the
// bare loop bench/dpdk compares with): memif_ring_args() is appended to their vdev string.
// - Buffers of the largest frame Weft sends (kFrameMax6: a 4 KiB payload, IPv6), rounded up to a
//   cache line, so that no frame is chained over two buffers. memif's default is 2048 (a 4 KiB
//   MTU chains) and we used 8192 before: buffers 8 KiB apart fill only the cache sets of their
//   first 4 KiB, and the ring's working set doubles in L2 terms.
// - 2^7 = 128 descriptors per ring (memif's default is 2^10). Every frame's lines are written by
//   one core and read by the other; a ring whose buffers stay in L2 (128 x 4288 B = 536 KiB, next
//   to a 1 MiB memory region) moves them between the cores' caches, while 1024 of them (4.3 MiB)
//   go through L3 each time round. 128 x 4 KiB in flight is ~60 us at 70 Gb/s, far more than a
//   receiver's pause between polls. Measured with run-dpdk-bench (src/io/dpdk/README.md,
//   "The memif ring"): weft perf write --bw -s 1M rose from ~1.75 to ~2.4 Mpps, the bare loop from
//   ~2.45 to ~3.2; at 256 descriptors Weft fell back to ~1.8.
inline constexpr std::size_t kMemifBufferBytes = (roce::kFrameMax6 + 63) / 64 * 64;
inline constexpr unsigned kMemifLog2Ring = 7;
std::string memif_ring_args();  // ",bsize=4288,rsize=7"
// The buffer size a net_memif vdev string asks for (its bsize; DPDK's default 2048 without one).
std::uint32_t memif_buffer_bytes(const std::string& vdev);

struct DpdkConfig {
  std::string vdev;                   // e.g. "net_af_packet0,iface=veth0"; its name is the port
  std::vector<std::string> eal_args;  // empty: WEFT_DPDK_ARGS or default_eal_args()
  std::uint32_t local_ip = 0;         // IPv4, host order
  std::uint16_t port = wire::kRoceV2UdpPort;
  std::string pcap_path;  // every frame sent and received; empty: none
  std::uint16_t rx_desc = 512, tx_desc = 512;
  // Frame room of each mbuf (at least roce::kFrameMax). Some PMDs want more: net_af_packet wants
  // its framesz less 32 (8160 for framesz=8192, which a 4 KiB RoCE MTU needs).
  std::uint16_t mbuf_bytes = 8192;
  // How long the constructor waits for the link to come up (net_memif: until the other process
  // has connected); traffic sent before that would only be retransmitted.
  TimeNs link_wait_ns = 10'000'000'000;
  // Zero-copy transmit (see above): payloads of at least zero_copy_min_bytes go by reference.
  // Below it a copy is cheaper than the two extra mbufs of a chain. WEFT_DPDK_ZERO_COPY=0|1 in
  // the environment overrides zero_copy (for benchmarks through weft perf).
  bool zero_copy = true;
  std::uint32_t zero_copy_min_bytes = 1024;
  // false: compute checksums in software even when the port could offload them.
  bool checksum_offload = true;
  // Registered memory regions at most (register_memory). On a physical port each is an external
  // memory segment list of the EAL, which has RTE_MAX_MEMSEG_LISTS (128) in all, its own
  // included; on a virtual device a region is only a record. WEFT_DPDK_REGIONS_MAX in the
  // environment overrides it (tests reach the limit through the libfabric provider with it).
  std::uint32_t regions_max = 64;
  // Receive interrupts for sleeping ("Sleeping" above): kAuto asks for them on net_tap only,
  // kOn on any port (a NIC whose driver gives vectors: vfio-pci), kOff never. WEFT_DPDK_RX_INTR
  // = auto|on|off in the environment overrides it.
  enum class RxInterrupt : std::uint8_t { kAuto, kOn, kOff };
  RxInterrupt rx_interrupt = RxInterrupt::kAuto;
};

// Which checksums the port computes for us (the rest is done in software, see above).
struct TxChecksum {
  bool ip = false, udp = false;
};
// The offloads to use given a port's dev_info.tx_offload_capa (allow =
// DpdkConfig::checksum_offload).
TxChecksum choose_tx_checksum(std::uint64_t tx_offload_capa, bool allow);
// The RTE_ETH_TX_OFFLOAD_* bits to enable in rte_eth_conf.txmode.offloads for `c`.
std::uint64_t tx_checksum_offloads(TxChecksum c);
// Prepares the IPv4/UDP frame starting in mbuf m (Ethernet + IPv4 without options + UDP, all in
// the first segment, software IPv4 checksum already in place) for the offloads in `c`: sets
// ol_flags, l2_len and l3_len, zeroes the IPv4 checksum for the port to fill in, and puts the
// pseudo-header checksum (rte_ipv4_phdr_cksum) in the UDP field. Nothing when c offloads nothing.
void prepare_tx_checksum(rte_mbuf* m, TxChecksum c);

struct DpdkCounters {
  std::uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  std::uint64_t tx_no_route = 0;  // no peer for the DLID / DGID: dropped
  std::uint64_t tx_full = 0;      // the port or the pool had no room: kept for the next pass
  std::uint64_t rx_other = 0;     // not RoCEv2 to us (ARP, IPv6 ND, other ports): freed
  std::uint64_t rx_bad_icrc = 0, rx_malformed = 0;
  // Frames that arrived chained over several mbufs (a PMD whose buffers are smaller than the
  // frame: net_memif with a bsize below it): each cost one more copy to make it whole.
  std::uint64_t rx_chained = 0;
  // Frames longer than the port's MTU (plus its Ethernet header) carries: dropped, as a NIC
  // would (a path MTU set above roce_mtu()).
  std::uint64_t tx_oversize = 0;
  std::uint64_t tx_zero_copy = 0;  // packets whose payload went by reference (external buffer)
  // Ending a session ("Ending a session" above): BYEs answered for the peer, and frames that
  // arrived after this side began to leave (its Device gone: freed unread).
  std::uint64_t byes_answered = 0, rx_after_end = 0;
  // The memif doorbell ("Sleeping" above): SLEEPING link frames sent before a sleep, rings sent
  // to the sleeping peer, and wake-ups that found a ring on our socket.
  std::uint64_t sleeping_sent = 0, rings_sent = 0, rings_received = 0;
};

class DpdkMedium final : public Medium {
 public:
  explicit DpdkMedium(const DpdkConfig& cfg);
  ~DpdkMedium() override;
  DpdkMedium(const DpdkMedium&) = delete;
  DpdkMedium& operator=(const DpdkMedium&) = delete;
  bool ok() const { return started_; }
  const std::string& error() const { return error_; }
  const roce::Mac& mac() const { return mac_; }
  bool link_up() const;
  // Waits up to timeout_ns for the link; false if it is still down.
  // A memif client whose link is not up a second after it started reconnects (stop, start):
  // see the definition.
  bool wait_link(TimeNs timeout_ns);
  std::uint16_t port_id() const { return port_id_; }
  std::uint16_t local_port() const { return cfg_.port; }
  // The port's MTU (rte_eth_dev_get_mtu: the largest IP packet; 0 when the PMD does not say) and
  // the largest RoCE MTU (256..4096) whose frames fit it (4096 when unknown). net_af_packet
  // reports its interface's MTU (iface=); other ports are raised to the most they and the mbufs
  // allow (net_memif: its bsize less the Ethernet header).
  std::uint32_t if_mtu() const { return if_mtu_; }
  std::uint32_t roce_mtu() const { return if_mtu_ ? roce::roce_mtu_for(if_mtu_, false) : 4096; }

  // Where packets for `lid` go: its IPv4 address, UDP port and MAC.
  void add_peer(std::uint16_t lid, std::uint32_t ip, std::uint16_t port, const roce::Mac& mac);

  // Zero copy from [addr, addr + bytes) (see "Zero copy and reuse"). On a physical port: registers
  // the pages with rte_extmem_register and maps them for the device's DMA; false (and *error)
  // when that fails (pages another region has registered included: on a physical port regions
  // must not share a page). On a virtual device it only records the region (the same memory may
  // be registered more than once). False as well beyond DpdkConfig::regions_max regions.
  bool register_memory(void* addr, std::size_t bytes, std::string* error) override;
  // Forgets the region registered at `addr` (else the first that holds it), unmapping and
  // unregistering it on a physical port. False while external buffers are still in flight
  // (after reclaiming what the port has finished): try again after the next passes; the memory
  // must not be released before it returns true. True when no region holds addr.
  bool unregister_memory(void* addr) override;
  // Regions registered now.
  std::size_t regions() const { return regions_.size(); }
  // External buffers handed to the port whose free callback has not run yet.
  std::uint64_t zero_copy_in_flight() const { return zc_in_flight_; }
  bool physical() const { return physical_; }
  TxChecksum tx_checksum() const { return csum_; }

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override;
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override;
  // Polls the port once (what it takes waits for the next rx_burst): the Driver watches this
  // between pauses while idle, so a frame is seen a pause and a poll after it lands instead of
  // half a pass later (a pass is the bursts, the Device's transmit poll and the application).
  bool rx_ready() const override;
  int rx_wait_fd() const override {
    return rx_intr_fd_ >= 0 ? rx_intr_fd_ : sleep_fd_ >= 0 ? sleep_fd_ : timer_fd_;
  }
  // True when the memif peer has rung this port's doorbell: its sleeps are bounded by kSafetyNs
  // only ("Sleeping" above).
  bool peer_rings() const { return peer_rings_; }
  // Frames the port has not taken yet (its ring full, or the link not up): prepare_sleep then
  // says "keep passing", which a waiter with nothing else to do would spin on.
  bool tx_pending() const { return pending_head_ != pending_.size(); }
  // True when the port sleeps on its receive interrupt rather than the backing-off timer.
  bool rx_interrupt() const { return rx_intr_fd_ >= 0; }
  bool prepare_sleep() override;
  void finish_sleep() override;

  const DpdkCounters& counters() const { return counters_; }

 private:
  bool flush_pending();
  // Takes the rx queue's interrupt descriptor when the PMD has one (see "Sleeping").
  void setup_rx_interrupt();
  // Link frames (see "Ending a session"): queues one behind the pending frames and flushes;
  // false when the pool has no mbuf for it now.
  bool send_link_frame(std::uint8_t type);
  // A received frame that is a link frame: handled (BYE answered, BYE-ACK noted); true if so.
  bool on_link_frame(const std::uint8_t* f, std::size_t len);
  // A link frame of `type` in a new mbuf (body after the type byte: up to kLinkBodyMax bytes),
  // or null when the pool has none.
  rte_mbuf* make_link_frame(std::uint8_t type, const std::uint8_t* body, std::size_t len);
  // The doorbell ("Sleeping"): binds wake_fd_ and builds sleep_fd_ (memif ports).
  void setup_doorbell();
  // Tells the peer we sleep (SLEEPING); false when the port did not take the frame.
  bool send_sleeping();
  void send_hello();  // once, when the link is up (kLinkHello)
  // One byte to the sleeping peer's socket; a full socket already wakes it.
  void ring();
  // Counts the data frames among `taken` just taken by the port and pays an owed ring.
  void note_taken(std::size_t data_frames, std::size_t taken) {
    tx_frames_ += data_frames;
    if (ring_owed_ && taken != 0) ring();
  }
  // Frames of a burst handed to dev (or counted and freed); all of them freed.
  void receive(Device& dev, rte_mbuf* const* m, std::uint16_t k, TimeNs now);
  // Reads frames while the Device is gone (link frames handled, the rest freed unread).
  void drain_ending();
  // While ending: reads and frees what arrives, answering BYEs and sending what is pending.
  void poll_ending();
  // The graceful end of a net_memif session (the destructor, before the port stops).
  void end_session();
  std::uint32_t port_mtu(const rte_eth_dev_info& info);
  // The frame of pkt in mbuf b (headers), by reference when it may go so: true and b heads a
  // three-segment chain; false (nothing changed) when it must be copied.
  bool attach_zero_copy(rte_mbuf* b, const TxPacket& pkt, const roce::FrameAddr& a);
  bool zero_copy_allowed(const std::uint8_t* p, std::size_t bytes) const;
  static void extbuf_freed(void* addr, void* opaque);

  struct Region {
    std::uintptr_t begin = 0, end = 0;            // what the caller registered
    std::uintptr_t page_begin = 0, page_end = 0;  // what DPDK mapped (physical ports)
  };

  DpdkConfig cfg_;
  std::string error_, dev_name_;
  bool probed_ = false, started_ = false;
  std::uint16_t port_id_ = 0;
  std::uint32_t if_mtu_ = 0;
  std::size_t frame_max_ = 0;  // if_mtu_ and the Ethernet header: longer frames are dropped
  roce::Mac mac_{};
  rte_mempool* pool_ = nullptr;
  // Payload segments (no data room; the external buffer's shared info in the private area) and
  // trailers (pad + ICRC: a few bytes of data room), for zero-copy chains.
  rte_mempool* aux_pool_ = nullptr;
  rte_device* device_ = nullptr;  // the port's device (DMA mapping)
  bool zero_copy_ = false, physical_ = false;
  bool memif_server_ = false;  // a net_memif port in the server role: leaves after its client
  bool memif_ = false;         // net_memif in either role: ends its session with a BYE
  bool owe_bye_ack_ = false;   // a BYE came and its BYE-ACK found no mbuf yet
  bool bye_acked_ = false;     // the peer answered our BYE
  TxChecksum csum_{};
  std::vector<Region> regions_;
  std::size_t regions_max_ = 0;  // cfg_.regions_max or WEFT_DPDK_REGIONS_MAX
  std::uint64_t zc_in_flight_ = 0;
  roce::PeerTable peers_;
  // Each peer's frame head, made when it is added (a copied packet's frame starts from it).
  std::vector<std::pair<std::uint16_t, roce::FrameHead4>> heads_;  // by LID
  std::vector<rte_mbuf*> pending_;  // built frames the port has not taken yet
  std::size_t pending_head_ = 0;
  // Frames from pending_head_ on that are data (the rest, behind them, are link frames).
  std::size_t pending_data_ = 0;
  rte_mbuf* spare_ = nullptr;          // taken for a packet the Device did not have (tx_burst)
  std::vector<std::uint8_t> scratch_;  // a received frame that came in several mbufs
  // Frames rx_ready() took from the port, handed to the Device by the next rx_burst (or freed
  // while ending, as any frame that comes then).
  static constexpr std::size_t kStashMax = 32;
  mutable rte_mbuf* stash_[kStashMax] = {};
  mutable std::uint16_t stash_n_ = 0;
  int timer_fd_ = -1;
  int rx_intr_fd_ = -1;            // the rx queue's interrupt descriptor (the PMD's), or -1
  bool rx_intr_maskable_ = false;  // rte_eth_dev_rx_intr_enable/disable work on it
  bool rx_intr_eventfd_ = false;   // an eventfd: read it after a wake-up
  TimeNs backoff_ns_ = 0;
  // The memif doorbell ("Sleeping" above).
  int wake_fd_ = -1;             // our abstract AF_UNIX datagram socket, or -1
  int sleep_fd_ = -1;            // epoll over timer_fd_ and wake_fd_: rx_wait_fd()
  std::string wake_name_;        // its abstract name (without the leading NUL)
  std::uint64_t rx_frames_ = 0;  // data frames received from the peer
  std::uint64_t tx_frames_ = 0;  // data frames the port took for the peer
  std::string peer_wake_;        // the sleeping peer's socket name, or empty
  bool ring_owed_ = false;       // the peer sleeps and our next frame must ring
  bool peer_rings_ = false;      // a ring or a HELLO from the peer has reached us
  // What our last SLEEPING said (R), and whether a ring has come since (it is one-shot).
  std::uint64_t told_rx_ = ~std::uint64_t{0};
  bool rung_since_told_ = false;
  bool hello_sent_ = false;  // our HELLO (the doorbell's name) has left, or no doorbell
  bool rx_since_sleep_ = false;
  wire::PcapWriter pcap_;
  DpdkCounters counters_{};
};

}  // namespace weft::io::dpdk
