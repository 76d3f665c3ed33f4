// io/shm/shm_medium.hpp — a point-to-point shared-memory link between two processes: the Medium
// over a segment (a memfd, never a /dev/shm name) holding one SPSC ring per direction.
//
// The records on the rings are IBA packets as the emulator carries them (LRH .. VCRC, CRCs in
// CrcMode::kModel). For zero copy, a packet whose payload is at least kZeroCopyBytesMin and stays
// put until acknowledged (Device::payload_stable) travels by reference: its headers plus the
// payload's address in the sender; the receiver pulls the bytes straight from the sender's buffer
// into the destination with process_vm_readv (cross-memory attach), coalescing the packets of a
// burst, so a large message costs about one system call. Everything else is copied through the
// ring (copy in, copy out). A run of a message's MIDDLE packets by reference may travel as one
// record (ByRefRun, segment format 7), which the receiver expands into the same packets.
//
// Payload bytes in flight by reference count against the ring's size as if they had been copied:
// a sender stops when the records the peer has not consumed yet refer to ring_bytes of payload,
// so zero copy never queues more data ahead of the receiver than the copy path (a deep queue
// would outlast the transport's retransmission timer). That bound is tx_burst's, which checks
// before it takes a packet from the Device; tx_packet's callers have taken theirs already. A
// sender held back asks the receiver to ring it when it frees space (ring.hpp, producer_waiting).
//
// Peer death: a pidfd of the peer is the event fd; when it fires the medium drops everything it
// would send or receive, so the survivor's requesters exhaust their retries and its QPs move to
// ERR with RETRY_EXC_ERR and flushed WRs (bounded by the QP's timeout x (retry_cnt + 1)).
//
// Thread-safety: owned by one Driver; all calls from its thread.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "src/io/medium.hpp"
#include "src/io/shm/ring.hpp"

namespace weft::io::shm {

inline constexpr std::uint32_t kSegmentMagic = 0x57465348;  // "WFSH"
// 2: records publish themselves; 3: records padded to a cache line (ring.hpp kRecordAlign);
// 4: copy delegation areas in the header (CopyArea); 5: the producers' heartbeats (RingShared);
// 6: the last record of each batch says so (ring.hpp kFlagBatchEnd); 7: run records (ByRefRun).
inline constexpr std::uint32_t kSegmentVersion = 7;
inline constexpr std::size_t kSegmentHeaderBytes = 4096;
inline constexpr std::size_t kZeroCopyBytesMin = 1024;  // smaller payloads are cheaper to copy
inline constexpr std::size_t kIovMax = 1024;            // IOV_MAX: iovecs per process_vm_readv
inline constexpr std::size_t kRingBytesDefault = std::size_t{4} << 20;
// Within a burst the sender publishes, and the receiver frees ring space, every this many
// records, so the other side can start on (or refill) the ring while a long burst goes on: with
// 512-packet bursts (2 MiB by reference) a peer waiting for the whole burst outlasts its spin
// and falls asleep, and waking it costs both sides a system call and the wake-up delay.
inline constexpr std::size_t kRecordsPerPublish = 32;
// Packets handed to or taken from the Device in one burst call (a slice of a Driver burst).
inline constexpr std::size_t kPacketsPerBatch = 32;
static_assert(kPacketsPerBatch <= kRecordsPerPublish, "publish at least once per batch");
// The receiver's heartbeat (RingShared::producer_beat_ns) during a long burst. A 512-packet burst
// by reference is 2 MiB: ~20 us of packet handling and ~50-130 us of copying here. With one beat
// per burst the heartbeat went stale for longer than the peer's Driver waits before it judges us
// stalled (DriverConfig::peer_stall_ns, 20 us), so a sender held back by a full queue fell asleep
// about once per burst and we paid a doorbell (an eventfd write, ~8 us here) to wake it: 250-600
// doorbells per 2000 MiB. So: memcpys from a shared pool are completed in pieces of
// kCopyPieceBytes (~6 us), each followed by a beat; otherwise a beat every kBeatPackets packets
// (~5 us of handling), and before the burst's process_vm_readv (kept as one call: in pieces the
// receiver spent 10-30 % more CPU time) a beat that looks ahead by the copy's time at
// kSlowCopyBytesPerNs.
inline constexpr std::size_t kCopyPieceBytes = 256 << 10;
inline constexpr std::size_t kBeatPackets = 128;
inline constexpr std::size_t kSlowCopyBytesPerNs = 8;  // 8 GB/s: slower than any copy seen here
// The heartbeat is stored at most once per kBeatIntervalNs (a look-ahead beat excepted). Its line
// is read by the peer's idle Driver every DriverConfig::peer_check_ns (2 us): a store after each
// such read costs the writer an ownership transfer, which x86's store order puts in front of the
// records stored after it, i.e. on a ping-pong's path, once per message when a beat followed
// every clock reading. A quarter of DriverConfig::peer_stall_ns (20 us), so a running process
// never looks stalled to its peer.
inline constexpr TimeNs kBeatIntervalNs = 4'000;

// The segment: this header, two RingShared blocks (A->B, B->A), then both rings' data.
struct SegmentHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t ring_bytes;
  // Stored 1 (relaxed, atomic_ref) by side B when it cannot pull the payload of a kByRefFrom
  // record from the process it names (process_vm_readv refused: Yama, another user): side A, the
  // fabric daemon, then copies those payloads through the ring. Zero from format().
  std::uint32_t forwarded_refused;
};

inline std::size_t segment_bytes(std::size_t ring_bytes) {
  return kSegmentHeaderBytes + 2 * ring_bytes;
}

// Body of a kByRef record: this, then the packet's headers.
struct ByRef {
  std::uint64_t src;  // payload address in the sender
  std::uint32_t payload_bytes;
  std::uint8_t pad_bytes;
  std::uint8_t header_bytes;
  std::uint16_t reserved;
};
static_assert(sizeof(ByRef) == 16);

// Body of a kByRefFrom record: this, then the packet's headers. The payload is at ref.src in
// process `pid`, not in the ring's peer: the fabric daemon forwards a sender's by-reference record
// to the receiver (emu/fabricd README, "Per-packet path and copies"), which pulls the payload
// straight from the sender. The sender keeps it put until the responder's ACK, which leaves after
// the pull (as in direct mode).
struct ByRefFrom {
  ByRef ref;
  std::uint32_t pid;
  std::uint32_t reserved;
};
static_assert(sizeof(ByRefFrom) == 24);

// Body of a kByRefRun record (segment format 7): this, then the headers of the run's first packet.
// A run is `packets` (>= 2) consecutive packets of one message that the sender's Device gave in
// one batch: RC SEND or RDMA WRITE MIDDLE (IBA Table 35), by reference, all with the same headers
// but the BTH's PSN (consecutive, modulo 2^24, IBA 9.7.1) and AckReq bit, the same payload length
// and no pad, the payloads back to back in the sender's memory from ref.src. Only the last packet
// may ask for an ACK (kRunLastAckReq: the requester's AckReq every 32 packets ends a run); the
// headers stored have AckReq clear. The receiver expands it into the same packets (rx_burst),
// so its Device and anything wrapping it (a pcap capture, a test's loss) see every packet as it
// was sent; what it saves is one ring record, i.e. one cache-line transfer between the cores and
// one pass of the record loop, per 4 KiB packet (bench/io/README.md, session 23).
struct ByRefRun {
  ByRef ref;  // payload_bytes: each packet's
  std::uint16_t packets;
  std::uint16_t flags;
  std::uint32_t reserved;
};
static_assert(sizeof(ByRefRun) == 24);
inline constexpr std::uint16_t kRunLastAckReq = 1;  // ByRefRun::flags: the last packet asks

// Record flags.
inline constexpr std::uint16_t kFlagTouchesMemory = 1;  // carries payload or is an atomic request
static_assert(kFlagTouchesMemory < kFlagBatchEnd, "the ring's own flag (ring.hpp)");

// Copy delegation. The receiver of by-reference packets does every payload copy itself, serially
// with its engine's work on the packets, while the sender mostly waits. So the receiver hands
// chunks of the copies it has validated (its engine has checked R_Key, range and access before it
// calls place()) to the sender: it posts a chunk's (dst, src) pairs in a slot of the CopyArea it
// owns, goes on with the next packets, and at flush takes back every chunk the sender has not
// claimed yet and waits for the ones it has. The sender writes a claimed chunk into the
// receiver's memory (process_vm_writev, or memcpy into its mapping of the receiver's pool).
// Slot protocol (each slot's state word): the receiver stores kPosted (release) after filling a
// kFree slot; the sender CASes kPosted -> kClaimed (acquire), copies, stores kDone or kFailed
// (release); the receiver CASes kPosted -> kStolen to copy a chunk itself, and stores kFree once
// a chunk is done by either side. Chunks in flight never overlap in their destinations (the
// receiver waits for them before placing bytes over any of them), so they may land in any order.
// `refused` (stored by the sender, relaxed): it cannot write the receiver's memory (ptrace
// denied); the receiver posts nothing more.
inline constexpr std::size_t kCopySlots = 4;
inline constexpr std::size_t kCopyIovMax = 8;               // (dst, src) pairs per slot
inline constexpr std::size_t kDelegateBytesMin = 64 << 10;  // smaller chunks: not worth a post
enum CopyState : std::uint32_t {
  kCopyFree,
  kCopyPosted,
  kCopyClaimed,
  kCopyDone,
  kCopyFailed,
  kCopyStolen
};
struct CopyIov {
  std::uint64_t dst;  // in the receiver
  std::uint64_t src;  // in the sender
  std::uint64_t len;
};
struct alignas(64) CopySlot {
  std::uint32_t count;
  std::uint32_t reserved;
  CopyIov iov[kCopyIovMax];
};
struct alignas(64) CopyArea {
  std::atomic<std::uint32_t> state[kCopySlots];
  std::atomic<std::uint32_t> refused;
  CopySlot slot[kCopySlots];
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
// In the segment header: the RingShared pair (A->B, B->A) at kRingSharedOffset, the CopyAreas
// (one per receiving side: A's at kCopyAreaOffset, B's after it).
inline constexpr std::size_t kRingSharedOffset = 1024;
inline constexpr std::size_t kCopyAreaOffset = 1536;
static_assert(kRingSharedOffset + 2 * sizeof(RingShared) <= kCopyAreaOffset);
static_assert(kCopyAreaOffset + 2 * sizeof(CopyArea) <= kSegmentHeaderBytes);

// The RemotePayload of the receiving side: gathers (dst, remote src) pairs, merging contiguous
// ones, and moves them with process_vm_readv at flush(). A source inside a window (a pool of
// the peer's that this process maps too, shm_pool.hpp) is copied with memcpy from the local
// mapping instead, also at flush(); the two kinds are never pending together, so the copies
// land in the order they were placed.
class CrossMemory final : public RemotePayload {
 public:
  explicit CrossMemory(pid_t pid) : pid_(pid) {
    local_.reserve(kIovMax);
    remote_.reserve(kIovMax);
  }
  void place(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) override;
  void complete() override { flush(); }
  // Completes every copy placed so far, its own and those handed to the peer. Returns false when
  // the kernel refused or fell short (errno kept in last_errno()).
  bool flush();
  bool pending() const { return !local_.empty() || !inflight_.empty(); }
  std::size_t pending_bytes() const { return pending_bytes_; }  // placed, not yet copied
  bool pending_local() const { return pending_local_; }         // pending are memcpys from a window
  // Hand chunks of at least kDelegateBytesMin to the peer through `area` (see CopyArea).
  void set_delegation(CopyArea* area) { area_ = area; }
  // The sender's part: copies the chunks the peer posted in `area` into the peer's memory.
  // Returns the bytes copied.
  std::uint64_t serve(CopyArea* area);
  std::uint64_t delegated_bytes() const { return delegated_bytes_; }  // copied by the peer
  std::uint64_t served_bytes() const { return served_bytes_; }        // copied for the peer
  // The peer's [remote_base, remote_base + bytes) is mapped here at `local`.
  void add_window(std::uint64_t remote_base, const std::uint8_t* local, std::size_t bytes);
  std::uint64_t memcpy_bytes() const { return memcpy_bytes_; }
  int last_errno() const { return errno_; }
  std::uint64_t calls() const { return calls_; }
  std::uint64_t failures() const { return failures_; }  // flushes refused or short
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Window {
    std::uint64_t remote_base;
    const std::uint8_t* local;
    std::size_t bytes;
  };
  const Window* in_window(const std::uint8_t* src, std::size_t len) const;
  const std::uint8_t* local_of(const std::uint8_t* src, std::size_t len) const;  // or nullptr
  bool flush_pending();              // the pending chunk, by this process
  void hand_off();                   // the pending chunk to a free slot, or flush_pending()
  bool take_back(std::size_t slot);  // a slot's chunk, by this process (pending must be empty)
  bool wait_inflight();              // every posted chunk done, slots free again
  bool overlaps_inflight(const std::uint8_t* dst, std::size_t len) const;
  bool peer_gone() const;
  pid_t pid_;
  std::vector<Window> windows_;
  std::vector<iovec> local_, remote_;
  std::vector<std::uint64_t> orig_;  // each pending src as the peer knows it (remote_ may be local)
  // The last pending iovec's source as the peer knows it: where it ends, and how far it may grow
  // (the end of its window; place()'s fast path).
  std::uint64_t run_src_end_ = 0, run_src_max_ = 0;
  CopyArea* area_ = nullptr;
  std::vector<std::size_t> inflight_;                         // slots posted, oldest first
  std::uint64_t inflight_lo_ = UINT64_MAX, inflight_hi_ = 0;  // their destinations' hull
  std::uint64_t delegated_bytes_ = 0, served_bytes_ = 0;
  bool serve_refused_ = false;
  bool pending_local_ = false;  // what is pending are memcpys from a window, not a readv
  std::size_t pending_bytes_ = 0;
  std::uint64_t memcpy_bytes_ = 0;
  int errno_ = 0;
  std::uint64_t calls_ = 0, bytes_ = 0, failures_ = 0;
};

struct ShmCounters {
  std::uint64_t tx_wire = 0, tx_by_ref = 0, rx_wire = 0, rx_by_ref = 0;
  std::uint64_t tx_full = 0;  // tx_burst stopped for lack of ring space
  // ... of which the by-reference bound (by_ref_bytes_max) stopped it, not the ring's bytes.
  std::uint64_t tx_full_by_ref = 0;
  // The by-reference bound's look at the consumer index (by_ref_room, when at the bound): how
  // often, how many found it moved, and the payload bytes those freed (bytes / moved: how far
  // the published index jumps at a time).
  std::uint64_t by_ref_looks = 0, by_ref_moved = 0, by_ref_freed_bytes = 0;
  // Receiving side: rx_burst calls that found records, the records, and the consumer-index
  // publications (RingConsumer::release) that stored a new head.
  std::uint64_t rx_bursts = 0, rx_records = 0, rx_releases = 0;
  // Releases that did not look for a waiting producer (wake_producer_records).
  std::uint64_t rx_releases_quiet = 0;
  std::uint64_t doorbells = 0;     // eventfd writes to wake the peer
  std::uint64_t dropped_dead = 0;  // packets dropped after the peer died
  std::uint64_t cma_calls = 0, cma_bytes = 0, cma_errors = 0;
  std::uint64_t pool_bytes = 0;       // payload copied out of a shared pool (memcpy, no syscall)
  std::uint64_t delegated_bytes = 0;  // payload the peer copied into us (CopyArea)
  std::uint64_t served_bytes = 0;     // payload we copied into the peer for it
  // Ring pages touched by prefault_rings().
  std::uint64_t prefaulted_pages = 0;
  // kByRefFrom records (payloads in a third process): written (tx_forwarded), received, and
  // dropped unread (their process gone, or not readable by this one: forwarded_refused), and
  // the pulls from those processes (process_vm_readv calls, bytes, refused or short).
  std::uint64_t tx_forwarded = 0, rx_forwarded = 0, forwarded_dropped = 0;
  std::uint64_t fwd_cma_calls = 0, fwd_cma_bytes = 0, fwd_cma_errors = 0;
  // kByRefRun records written and received (their packets count in tx_by_ref / rx_by_ref).
  std::uint64_t tx_runs = 0, rx_runs = 0;
};

struct ShmLinkConfig {
  int memfd = -1;  // the segment (owned by the medium from here on)
  std::size_t ring_bytes = kRingBytesDefault;
  bool side_a = true;    // A produces on ring 0 and consumes ring 1; B the other way round
  int rx_doorbell = -1;  // eventfd the peer rings when it fills our rx ring (owned)
  int tx_doorbell = -1;  // eventfd we ring (owned)
  pid_t peer_pid = 0;
  bool zero_copy_tx = false;     // the peer can read our memory and wants zero copy
  bool delegate_copies = false;  // hand receive copies to the peer (CopyArea; direct mode)
  // Send runs of MIDDLE packets by reference as one kByRefRun record each (direct mode). Every
  // format-7 receiver takes them; off, every packet is a record of its own.
  bool run_records = false;
  // Payload bytes this side may have in flight by reference (records the peer has not consumed
  // yet; see the file comment). 0: ring_bytes. Direct mode raises it (DirectOptions).
  std::size_t by_ref_bytes_max = 0;
  // A producer waiting for space (producer_waiting) that last ran on this CPU is rung once per
  // this many records consumed, or when its ring is empty, instead of at every release: waking
  // it makes it preempt this process, which shares its CPU. The fabric daemon sets it (it serves
  // every attached process from one thread: a sender woken every 32 records, ~128 KiB, cost it
  // ~12 % of its time in context switches, bench/io/README.md session 21). 0: every release.
  std::size_t wake_producer_records = 0;
};

class ShmMedium final : public Medium {
 public:
  // Maps the segment; takes ownership of every fd in cfg. ok() is false if mapping failed.
  explicit ShmMedium(const ShmLinkConfig& cfg);
  ~ShmMedium() override;
  ShmMedium(const ShmMedium&) = delete;
  ShmMedium& operator=(const ShmMedium&) = delete;
  bool ok() const { return base_ != nullptr; }
  // Touches every page of the rx ring (a read: this side never writes it) and, with `tx`, of the
  // tx ring (a value-keeping atomic write) from this process once. Call before the first
  // transmit. Under a shadow-paging hypervisor (PVM here) MAP_POPULATE fills the guest's page
  // tables only; the first user access to each page still exits to the hypervisor (~7-35 us per
  // 4 KiB page written, minor-fault counters unchanged), so without this the first pass of
  // records through the 4 MiB ring (the first ~64 messages of 64 KiB) paid ~100 us per message.
  void prefault_rings(bool tx);

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override;
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override;
  int rx_wait_fd() const override { return cfg_.rx_doorbell; }
  bool rx_ready() const override { return rx_.ready() || peer_dead(); }
  // Also announces a wait for ring space when the last transmit found the ring full
  // (ring.hpp, producer_waiting): only a sleeping sender makes the receiver ring it.
  bool prepare_sleep() override;
  void finish_sleep() override;
  int event_fd() const override { return pidfd_; }
  void on_event(TimeNs now) override;
  bool tx_blocked() const override { return tx_blocked_; }
  // By-reference records not known to be consumed (by_ref_; trimmed when the by-reference bound
  // is reached and before a sleep): their ACKs are still to come.
  bool tx_in_flight() const override { return !by_ref_.empty(); }
  // From the peer's heartbeat (ring.hpp RingShared::producer_beat_ns), which this medium's own
  // rx_burst / tx_burst calls keep for the peer.
  PeerState peer_state(TimeNs seen_after, int cpu) const override;

  // Packet-at-a-time transmit for callers that poll the Device themselves and route each packet
  // to one of several links (the libfabric provider's shm port): tx_packet writes one record
  // (false: no room, or the peer is dead: the packet is dropped), tx_publish publishes the records
  // and rings the peer if it sleeps; tx_burst publishes them too (the fabric daemon writes with
  // tx_packet and leaves the publish to its driver's pass over this medium).
  // zero_copy_tx may be turned on once the peer's probe answered.
  bool tx_packet(const Device& dev, const TxPacket& pkt);
  void tx_publish();
  void set_zero_copy_tx(bool on) { cfg_.zero_copy_tx = on; }
  // A kByRefFrom record for `pkt`, whose payload (pkt.payload, pkt.payload_bytes) is in process
  // `pid` (the fabric daemon forwarding a sender's by-reference record). Its payload counts
  // against the by-reference bound like this side's own: false when the ring or the bound has no
  // room (nothing written), or the peer is dead.
  bool tx_forwarded(const TxPacket& pkt, pid_t pid);
  // The peer said it cannot pull kByRefFrom payloads (SegmentHeader::forwarded_refused).
  bool forwarded_refused() const;
  // Shared pools (shm_pool.hpp). add_tx_pool: the peer maps [base, base + bytes) of ours, so
  // payloads in it travel by reference even without cross-memory attach. add_rx_pool: the
  // peer's [remote_base, +bytes) is mapped here at `local`; its payloads are memcpy'd from there.
  void add_tx_pool(const std::uint8_t* base, std::size_t bytes);
  void add_rx_pool(std::uint64_t remote_base, const std::uint8_t* local, std::size_t bytes);

  bool peer_dead() const { return peer_dead_.load(std::memory_order_relaxed); }
  bool zero_copy_tx() const { return cfg_.zero_copy_tx; }
  // The cross-memory figures are copied from cma_ here, not after every burst: in rx_burst the
  // copy sat between a ping-pong's packet and the reply it causes.
  const ShmCounters& counters() const {
    counters_.cma_calls = cma_.calls();
    counters_.cma_bytes = cma_.bytes();
    counters_.pool_bytes = cma_.memcpy_bytes();
    counters_.delegated_bytes = cma_.delegated_bytes();
    return counters_;
  }

  // Formats a fresh segment in a memfd of segment_bytes(ring_bytes) (the creating side).
  static bool format(int memfd, std::size_t ring_bytes);

 private:
  void ring_peer();
  void release();      // frees the popped records for the producer (RingConsumer::release)
  bool by_ref_room();  // payload referred to by unconsumed records < by_ref_max_
  void trim_by_ref();  // forgets the by-reference records the consumer index has passed
  bool tx_room();      // a maximal packet fits (ring and by-reference bound)
  void note_by_ref(std::uint32_t payload_bytes);
  std::size_t tx_batch_room();  // packets of any size the ring and the by-reference bound take
  // Writes pkt's record (room checked by the caller); true when it went by reference.
  bool write_record(const Device& dev, const TxPacket& pkt);
  // How many of pkts, from the first, make one kByRefRun record (see ByRefRun); 1: none.
  std::size_t run_length(const Device& dev, std::span<const TxPacket> pkts) const;
  void write_run(std::span<const TxPacket> run);  // their record (room checked by the caller)
  bool in_tx_pool(const TxPacket& pkt) const;
  // The pull state of one process named by kByRefFrom records (created at its first record):
  // its pidfd (a dead process's records are dropped, as a dead peer's are) and its copies.
  struct Source {
    pid_t pid = 0;
    int pidfd = -1;
    bool ok = false;            // a first pull succeeded (a probe of one byte)
    bool dead = false;          // its pidfd fired, or the probe found no such process
    std::uint64_t checked = 0;  // the rx_burst in which its pidfd was last looked at
    std::unique_ptr<CrossMemory> cma;
  };
  // The CrossMemory for a kByRefFrom record's payload, or nullptr when it cannot be pulled (the
  // record is then dropped).
  CrossMemory* source_for(pid_t pid, const ByRef& ref);
  bool rx_copies_pending() const;
  bool flush_rx_copies();     // every pending copy, this peer's and the sources'
  void beat(TimeNs now);      // this process's heartbeat, at most once per kBeatIntervalNs
  void beat_until(TimeNs t);  // stores t now (a look-ahead beat may lie in the future)
  ShmLinkConfig cfg_;
  std::vector<std::pair<const std::uint8_t*, std::size_t>> tx_pools_;  // (base, bytes)
  std::deque<std::pair<std::uint64_t, std::uint32_t>> by_ref_;         // (tail after record, bytes)
  std::uint64_t by_ref_bytes_ = 0;
  std::uint64_t by_ref_max_ = 0;  // cfg_.by_ref_bytes_max, or ring_bytes
  void* base_ = nullptr;
  std::size_t map_bytes_ = 0;
  int pidfd_ = -1;
  RingProducer tx_;
  RingConsumer rx_;
  CrossMemory cma_;
  std::vector<Source> sources_;  // kByRefFrom senders, few (the processes sending to us)
  std::uint64_t rx_bursts_seen_ = 0;
  std::uint64_t fwd_retired_[3] = {0, 0, 0};  // calls, bytes, failures of replaced sources
  bool fwd_error_logged_ = false;
  std::uint64_t records_since_wake_ = 0;  // consumed since the last look at producer_waiting
  CopyArea* serve_area_ = nullptr;        // where the peer posts the copies it hands to us
  std::atomic<bool> peer_dead_{false};
  bool tx_blocked_ = false;  // the last transmit stopped on a full ring
  TimeNs beat_ns_ = 0;       // the last heartbeat stored
  // Packets moved through the Device's burst calls (poll_transmit_burst, on_packet_burst): a
  // run of one message's packets then costs the engines one set of per-QP checks, and a run of
  // by-reference packets becomes one coalesced place() (device_impl.cpp receive_run). Kept across
  // calls: zeroing them for every idle pass would cost more than the pass.
  std::array<TxPacket, kPacketsPerBatch> tx_batch_{};
  std::array<TxPacket, kPacketsPerBatch> rx_batch_{};
  mutable ShmCounters counters_{};  // the cma_ figures are refreshed by counters()
};

}  // namespace weft::io::shm
