// src/ofi/ofi.hpp — the provider's objects: fabric, domain, AV, CQ, counter, EQ, MR, endpoint.
//
// Each object is a C++ struct whose first member is the libfabric fid struct, so a fid pointer
// converts back with a static cast (ofi_container). Objects are created by the ops tables in
// ofi_*.cpp and freed by their close op. No C++ exception leaves an ops call (guard()).
//
// Thread-safety: every call that touches a domain or its children takes the domain's recursive
// mutex, so the provider honours FI_THREAD_SAFE; progress is manual (FI_PROGRESS_MANUAL) and
// runs inside CQ/counter reads and posts.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <weft/device.hpp>

#include "src/ofi/medium.hpp"

namespace weft::ofi {

extern struct fi_provider g_prov;

// Provider parameters (FI_WEFT_*), read once in fi_prov_ini.
struct Params {
  std::size_t eager_bytes = 4096;   // payloads up to this travel in one SEND, larger by READ
  std::size_t inject_bytes = 1024;  // tx_attr->inject_size
  std::size_t rx_bounce = 256;      // receive bounce buffers per endpoint (shared RQ)
  std::size_t tx_depth = 256;       // send operations in flight per endpoint
  std::size_t mtu_bytes = 4096;     // path MTU of the RC QPs
  // RC local ACK timeout, IBA exponent (4.096 us << n). The media lose a packet only when a ring
  // or inbox is full, but a peer's "NIC" answers only when that process runs its progress: 16
  // (268 ms, about 2 s with the 7 retries) lets a descheduled or busy peer catch up.
  std::size_t ack_timeout = 16;
  std::size_t keeper_ms = 10;  // FI_WEFT_KEEPER_MS: manual progress's keeper period; 0: none
  // FI_WEFT_EAGER_CONNECT: fi_av_insert starts the RDM connection (the medium's link and the RC
  // handshake) to each new peer of the enabled endpoints bound to the AV, so the first message
  // does not wait for it.
  bool eager_connect = true;
  // FI_WEFT_DIRECT: small eager messages as direct messages where the medium offers them
  // (README, "Direct messages").
  bool direct = true;
  // FI_WEFT_DIRECT_SIZE: the largest payload a direct message carries, at most kDirectBytesMax.
  // Up to it a message is copied into the peer's ring and out of it (two memcpy), above it the
  // receiver reads the sender's buffer (process_vm_readv, rendezvous). On this machine (a
  // paravirtualised guest) process_vm_readv costs ~2.3 us at 4 KiB and 4.7 us at 64 KiB of CPU
  // against 0.9 us for a 64 KiB memcpy (bench/ofi/README.md, "Medium direct messages").
  std::size_t direct_bytes = 64 * 1024;
  // FI_WEFT_SPLIT_SIZE: a rendezvous of at least this many bytes whose two sides may read and
  // write each other's memory is copied by both at once, half each (README, "Split rendezvous");
  // 0: never. 256 KiB: at 64 KiB, on this loaded 2-vCPU machine, waiting for the sender to be
  // scheduled cost more than half the copy saved (bench/ofi/README.md).
  std::size_t split_bytes_min = 256 * 1024;
  // FI_WEFT_SPIN_US: a CQ read that has found nothing, in a loop of such reads, for this long
  // sleeps on the medium's doorbells (at most kCqNapNsMax, ofi_domain.cpp) instead of returning
  // at once; 0: never. A spinning process on a loaded machine waits for a scheduler slice at
  // every hop, a sleeping one is woken at once (bench/ofi/README.md, "Sleeping CQ reads").
  std::size_t spin_ns = 50'000;
  // FI_WEFT_MEDIUM: shm (default), loopback (in-process), udp, dpdk, fabric; the default is
  // fabric when WEFT_FABRIC names a running fabric daemon.
  enum class Medium : std::uint8_t { kShm, kLoopback, kUdp, kFabric, kDpdk };
  Medium medium = Medium::kShm;
  std::string fabric;                 // WEFT_FABRIC: the daemon's name (Medium::kFabric)
  std::uint32_t udp_ip = 0x7F000001;  // FI_WEFT_UDP_IP (host order)
  // FI_WEFT_DPDK_ARGS (else WEFT_DPDK_ARGS, read by src/io/dpdk): EAL arguments replacing the
  // defaults; FI_WEFT_DPDK_VDEV: the DPDK device (empty: a net_memif pair, dpdk_port.cpp).
  std::string dpdk_args, dpdk_vdev;
  // FI_WEFT_DPDK_MEMIF: the name that pairs two processes over the default net_memif (its socket
  // and the role claims); default "weft-ofi-memif-<fabric>". Concurrent jobs need their own.
  std::string dpdk_memif;
  // FI_WEFT_PCAP: capture what each domain's medium carries (next_capture_path names the files).
  std::string pcap;
  // FI_WEFT_LOOPBACK_DROP: packets per million the loopback medium drops (a fault of the medium,
  // for tests of the provider's loss handling); seeded by FI_WEFT_LOOPBACK_SEED.
  std::size_t loopback_drop_ppm = 0;
  std::size_t loopback_seed = 1;
  // FI_WEFT_UDP_CTRL_DROP: control datagrams per million the udp medium drops when sending (a
  // fault for the test of their retransmission), seeded by FI_WEFT_LOOPBACK_SEED.
  std::size_t udp_ctrl_drop_ppm = 0;
  // FI_WEFT_CONN_TIMEOUT_MS: how long an RDM connection request may stay unanswered (resent
  // meanwhile, kConnResend*) before the operations waiting for it complete in error
  // (FI_ETIMEDOUT); 0: no deadline. README, "Connection set-up: resends and deadline".
  std::size_t conn_timeout_ms = 10'000;
  static constexpr std::size_t kConnTimeoutMsMax = 86'400'000;  // a day: larger values ignored
  // FI_WEFT_CTRL_DROP_FIRST: each domain loses its first N connection requests and its first N
  // answers as if its medium had (a fault for the test of the provider's resends).
  std::size_t ctrl_drop_first = 0;
};
const char* to_string(Params::Medium m);
extern Params g_params;

inline constexpr std::uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND |
                                          FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                          FI_REMOTE_WRITE | FI_DIRECTED_RECV | FI_SOURCE |
                                          FI_MULTI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
// FI_EP_MSG: one peer per endpoint after connect/accept; no tags, no source addresses.
inline constexpr std::uint64_t kMsgCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV |
                                          FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                                          FI_LOCAL_COMM | FI_REMOTE_COMM;
inline constexpr std::uint64_t kDgramCaps =
    FI_MSG | FI_SEND | FI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
// Capabilities that put provider keys and virtual addresses on the wire (see mr_mode).
inline constexpr std::uint64_t kRmaCaps =
    FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr std::uint64_t kMaxMsgBytes = 1ull << 30;
inline constexpr std::size_t kCqDataBytes = 4;
inline constexpr std::size_t kIovMax = 4;
inline constexpr std::uint32_t kEpAddrMagic = 0x54464557;  // "WEFT"

// An endpoint's address: what fi_getname returns and fi_av_insert takes (24 bytes <= 64).
struct EpAddr {
  std::uint32_t magic = kEpAddrMagic;
  std::uint32_t ep_id = 0;
  std::uint64_t node_id = 0;
  std::uint16_t lid = 0;
  std::uint16_t reserved0 = 0;
  std::uint32_t qpn = 0;  // DGRAM: the endpoint's UD QP; RDM: 0 (QPs are per connection)
  NodeAddr node() const { return NodeAddr{node_id, lid}; }
  bool valid() const { return magic == kEpAddrMagic && lid != 0; }
  friend bool operator==(const EpAddr&, const EpAddr&) = default;
};
static_assert(sizeof(EpAddr) == 24);
struct EpAddrHash {
  std::size_t operator()(const EpAddr& a) const {
    return std::hash<std::uint64_t>()(a.node_id * 0x9E3779B97F4A7C15ull ^ a.ep_id ^
                                      (std::uint64_t{a.lid} << 40));
  }
};

template <class T, class F>
T* ofi_container(F* f) {
  return reinterpret_cast<T*>(f);
}

// Runs f, turning any C++ exception into `on_exception` (usually -FI_ENOMEM).
template <class R, class F>
R guard(R on_exception, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return on_exception;
  } catch (...) {
    return on_exception;
  }
}

TimeNs mono_ns();

struct Domain;
struct Ep;

struct Eq;
struct Fabric {
  fid_fabric fab{};
  std::string name;
  std::mutex mu;
  std::vector<Eq*> eqs;  // so that a closing domain leaves every EQ's progress list
};

struct Eq {
  fid_eq eq{};
  Fabric* fabric = nullptr;
  std::mutex mu;
  struct Event {
    std::uint32_t event;
    std::vector<std::uint8_t> buf;
    bool error;
  };
  std::deque<Event> events;
  // Domains whose progress produces this EQ's connection events (a passive endpoint's, a MSG
  // endpoint's): every EQ read progresses them first.
  std::vector<Domain*> sources;
  void push(std::uint32_t event, const void* buf, std::size_t len, bool error);
  void add_source(Domain* d);
};

// A passive endpoint: its own hidden domain (a node on the medium) that receives connection
// requests; FI_CONNREQ events carry a ConnReq as info->handle.
struct Pep {
  fid_pep pep{};
  Fabric* fabric = nullptr;
  fi_info* info = nullptr;
  fid_domain* hidden = nullptr;
  Domain* dom = nullptr;
  Eq* eq = nullptr;
  std::uint32_t id = 0;
  EpAddr addr;
  bool listening = false;
};
struct ConnReq {
  struct fid fid {};
  EpAddr client;
  Pep* pep = nullptr;
};

struct Mr {
  fid_mr mr{};
  Domain* dom = nullptr;
  MemoryRegion* dmr = nullptr;  // null for a zero-length region
  bool on_medium = false;       // registered with the medium too (MediumPort::register_memory)
  std::uint64_t access = 0;
  std::uintptr_t base = 0;  // the registered range, for atomics executed at this target
  std::size_t len = 0;
};

struct Av {
  fid_av av{};
  Domain* dom = nullptr;
  fi_av_type type = FI_AV_MAP;
  struct Entry {
    EpAddr addr;
    bool used = false;
  };
  std::vector<Entry> entries;
  std::unordered_map<EpAddr, fi_addr_t, EpAddrHash> index;
  std::unordered_map<std::uint64_t, fi_addr_t> by_lid_qpn;  // DGRAM sources: (lid << 32) | qpn
  int refs = 0;
  static std::uint64_t lid_qpn(std::uint16_t lid, std::uint32_t qpn) {
    return (std::uint64_t{lid} << 32) | qpn;
  }
  const EpAddr* get(fi_addr_t a) const {
    if (a >= entries.size() || !entries[a].used) return nullptr;
    return &entries[a].addr;
  }
  fi_addr_t find(const EpAddr& a) const {
    auto it = index.find(a);
    return it == index.end() ? FI_ADDR_NOTAVAIL : it->second;
  }
};

struct WaitSet;

// The native wait object of a CQ opened with FI_WAIT_FD and of a wait set (ofi_wait.cpp,
// "Native waits"). FI_GETWAIT hands out epfd, an epoll set over efd (an arrival, a counter
// change, fi_cq_signal), tfd (a CLOCK_MONOTONIC timerfd: the engines' next deadline) and, once
// fi_trywait has armed them, the media's doorbells and control descriptors of the domains
// behind it. man fi_poll (fi_trywait): after fi_trywait returned FI_SUCCESS the application may
// block in poll/epoll on epfd, so epfd must become readable whenever progress is needed.
struct WaitFd {
  int efd = -1, epfd = -1, tfd = -1;
  bool open();  // false: out of descriptors (every fd closed again)
  void close();
  void signal() const;
  void drain() const;  // efd and tfd
};

// fi_trywait on one wait object (trywait_arm, ofi_wait.cpp): drains w, progresses each domain of
// `doms` (sorted, unique), and returns kTrywaitEvents when has_events() (called with no domain
// lock held) says the application has something to read, -FI_EAGAIN when a domain cannot sleep
// now (records on a ring, a timer due, a descriptor already readable); otherwise arms every
// domain's doorbells, adds their descriptors to w.epfd and sets w.tfd to the earliest engine
// deadline (now + tick_ns at the latest when a medium has no doorbells), and returns 0.
inline constexpr int kTrywaitEvents = 1;
int trywait_arm(WaitFd& w, std::span<Domain* const> doms, bool (*has_events)(void*), void* arg,
                TimeNs tick_ns);

struct Cntr {
  fid_cntr cntr{};
  Domain* dom = nullptr;
  std::uint64_t value = 0, errors = 0;
  WaitSet* ws = nullptr;  // FI_WAIT_SET: signalled on every change
  int refs = 0;
};

struct Cq {
  fid_cq cq{};
  Domain* dom = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  fi_wait_obj wait = FI_WAIT_NONE;
  WaitFd wfd;             // FI_WAIT_FD / UNSPEC: signalled when an entry arrives
  WaitSet* ws = nullptr;  // FI_WAIT_SET: the set's is signalled instead
  std::size_t depth = 0;
  struct Entry {
    fi_cq_tagged_entry e;
    fi_addr_t src;
  };
  std::deque<Entry> entries;
  std::deque<fi_cq_err_entry> errors;
  bool signalled = false;
  int refs = 0;
  // The current run of empty fi_cq_read calls (Params::spin_ns, ofi_domain.cpp cq_readfrom).
  struct EmptyRun {
    TimeNs first = 0;         // when it began, as of its first look at the time (0: not yet)
    TimeNs looked = 0;        // the time at its latest look
    std::uint64_t reads = 0;  // empty reads since that look
    bool napped = false;      // it napped: every further empty read looks, and naps again
  };
  EmptyRun run;
  void push(const fi_cq_tagged_entry& e, fi_addr_t src);
  void push_error(const fi_cq_err_entry& e);
  int notify_fd() const;  // the eventfd an arrival signals (-1: none)
};

// A wait set (fi_wait_open, ofi_wait.cpp): CQs and counters opened with FI_WAIT_SET signal its
// eventfd; fi_wait progresses their domains and returns once one of them has something (a CQ
// entry or error, a counter change since the last fi_wait). Members register at open and leave
// at close; the set refuses to close while it has members.
struct WaitSet {
  fid_wait wait{};
  Fabric* fabric = nullptr;
  std::mutex mu;  // guards the member lists (members' state is under their domain's lock)
  std::vector<Cq*> cqs;
  struct CntrSeen {
    Cntr* c;
    std::uint64_t value, errors;
  };
  std::vector<CntrSeen> cntrs;
  WaitFd wfd;
  void signal() const;
  void add(Cq* q);
  void add(Cntr* c);
  void remove(Cq* q);
  void remove(Cntr* c);
};

struct Domain {
  fid_domain dom{};
  Fabric* fabric = nullptr;
  std::recursive_mutex mu;
  std::unique_ptr<MediumPort> port;
  SeededRng rng{1};
  std::unique_ptr<Device> dev;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* dcq = nullptr;  // every QP of every endpoint completes here
  std::uint64_t mr_mode = 0;
  std::uint32_t api_version = 0;
  fi_threading threading = FI_THREAD_SAFE;
  std::uint32_t next_ep_id = 1;
  std::unordered_map<std::uint32_t, Ep*> eps;
  std::unordered_map<std::uint64_t, Mr*> mr_by_key;  // registrations with remote access
  Pep* pep = nullptr;  // a passive endpoint's hidden domain: connection requests go to it
  int refs = 0;
  bool in_progress = false;
  // Reused by progress(): WorkCompletion has member initialisers, and clearing 64 of them per
  // progress round showed up as the top user-space cost of a ping-pong.
  std::array<WorkCompletion, 64> wc_batch;

  // FI_PROGRESS_AUTO: a thread that runs progress() under `mu` every 50 us while there is work,
  // backing off to every 1 ms when idle (stop_efd wakes it for domain close).
  // FI_PROGRESS_MANUAL: the same thread as a keeper (start_keeper): every FI_WEFT_KEEPER_MS it
  // runs one pass if the application made none since its last look. Our ACKs and
  // retransmissions are software: without it a peer whose application blocks elsewhere (in
  // fi_pingpong's TCP sync, say) answers nothing, and its peer's send ends in RETRY_EXC.
  std::thread progress_thread;
  int stop_efd = -1;
  std::atomic<std::uint64_t> passes{0};  // progress() calls, for the keeper
  std::uint64_t keeper_passes = 0;       // the keeper's passes that found work (under mu)
  std::size_t split_pending = 0;         // split receives awaiting kDone, every endpoint
  void start_auto_progress();
  void start_keeper(std::uint32_t period_ms);
  void stop_auto_progress();

  // Clock of the progress passes (see pass_clock), and whether the last pass moved anything.
  TimeNs now = 0, now_seen = 0;
  std::uint32_t idle_passes = 0;
  bool worked = true;        // the last pass did engine work: the next one reads the clock
  bool clock_due = true;     // the provider slept: the next pass reads the clock
  bool clock_fresh = false;  // the last pass read the clock into `now`
  int connecting = 0;  // outgoing connection requests awaiting an answer: poll control tightly
  // The earliest resend or deadline of those requests (meaningful while connecting > 0).
  TimeNs conn_timer = kNoDeadline;
  // Connection requests and answers sent (FI_WEFT_CTRL_DROP_FIRST loses the first ones).
  std::uint64_t ctrl_req_sent = 0, ctrl_rep_sent = 0;
  // Connection set-up counters (fi_weft_ext.h, conn_stats).
  struct ConnStats {
    std::uint64_t req_sent = 0, req_resent = 0, req_received = 0, req_duplicate = 0;
    std::uint64_t out_established = 0, in_established = 0;
    std::uint64_t timed_out = 0, rejected = 0, stale_answers = 0, ctrl_dropped = 0;
  };
  ConnStats conn_stats;
  // The engine's next timer or, while a connection request is out, its resend or deadline:
  // what a sleeping wait must wake for.
  TimeNs next_deadline() const;
  TimeNs pass_clock();

  // The work done (packets, control messages, completions). `want`: the CQ the caller reads,
  // which lets a pass end one round early (see the loop).
  std::size_t progress(const Cq* want = nullptr);
  MediumPort::CtrlFn ctrl_fn;   // on_ctrl, made once (not per round)
  std::uint64_t direct_rx = 0;  // direct messages received (progress: rounds that took only these)
  void on_direct(std::span<const std::uint8_t> msg);  // a direct message from the medium
  void dispatch(const WorkCompletion& wc);
  void on_ctrl(const NodeAddr& src, std::span<const std::uint8_t> msg);
};

// ---- FI_ATOMIC (ofi_atomic.cpp) ------------------------------------------------------------
enum class AtomicKind : std::uint8_t { kWrite, kFetch, kCompare };
std::size_t atomic_type_size(fi_datatype dt);  // 0: not offered
bool atomic_valid(AtomicKind kind, fi_op op, fi_datatype dt);
std::size_t atomic_max_count(AtomicKind kind, fi_datatype dt);
// Executes at the target, under the process-wide atomic mutex; result (if not null) gets the old
// values.
void atomic_execute(fi_op op, fi_datatype dt, void* dst, const void* operand, const void* compare,
                    void* result, std::size_t count);

// ---- endpoint internals (ofi_ep.cpp) ---------------------------------------------------------

// Wire header at the start of every provider SEND (little-endian host layout; both ends are
// this provider).
// kAtomicReq: reserved = fi_op | fi_datatype << 8, len = count, addr/rkey = the target, msg_id =
// the request id; payload = operand values, then compare values. kAtomicResp: msg_id, data = 0
// or a positive FI_E* code, payload = the old values (fetch and compare forms).
// kCts, kDone: the split rendezvous (README, "Split rendezvous"): kCts (receiver -> sender):
// msg_id, addr = where the sender writes, len = how much, data = the offset in the message;
// kDone (sender -> receiver): msg_id, data = 0 written, 1 not (the receiver reads it instead).
enum class MsgOp : std::uint8_t {
  kEager = 1,
  kRts = 2,
  kFin = 3,
  kAtomicReq = 4,
  kAtomicResp = 5,
  kCts = 6,
  kDone = 7,
};
struct MsgHdr {
  MsgOp op;
  std::uint8_t flags;  // kHdr*
  std::uint16_t reserved = 0;
  std::uint32_t reserved2 = 0;
  std::uint64_t tag = 0;
  std::uint64_t data = 0;
  std::uint64_t len = 0;     // payload (eager) or message (RTS) bytes
  std::uint64_t msg_id = 0;  // RTS, FIN: the sender's rendezvous id
  std::uint64_t addr = 0;    // RTS: the sender's buffer
  std::uint32_t rkey = 0;    // RTS
  std::uint32_t reserved3 = 0;
};
inline constexpr std::uint8_t kHdrTagged = 1, kHdrData = 2, kHdrFetch = 4, kHdrCompare = 8;
static_assert(sizeof(MsgHdr) == 56);

struct Conn;

enum class OpKind : std::uint8_t { kSend, kRts, kFin, kWrite, kRead, kRndvRead, kBounce, kAtomic };

// One provider operation that owns device work requests. wr_id points at it.
struct Op {
  OpKind kind = OpKind::kSend;
  Ep* ep = nullptr;
  Conn* conn = nullptr;
  void* context = nullptr;
  std::uint64_t flags = 0;  // FI_* flags of the completion (FI_SEND|FI_TAGGED, ...)
  std::uint64_t op_flags = 0;
  bool completion = true;         // write a CQ entry on success
  std::uint8_t* stage = nullptr;  // staging slot (eager header + payload)
  std::uint32_t stage_bytes = 0;
  MemoryRegion* tmp_mr = nullptr;    // a registration this op made and must drop
  std::vector<std::uint8_t> linear;  // rendezvous source of an iov send
  SendWr wr;                         // for the backlog
  Sge sge{};
  std::uint64_t len = 0;
  std::uint64_t data = 0;
  std::uint64_t tag = 0;
  // RndvRead: the receive it completes
  struct RecvReq* recv = nullptr;
  std::uint64_t rndv_id = 0;
  std::uint64_t rndv_len = 0;
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  // Atomic: where the old values go (fetch and compare forms).
  void* result = nullptr;
  // RTS: the message's bytes (the application's buffer or `linear`), for a split rendezvous.
  const std::uint8_t* rndv_src = nullptr;
  // Atomic and RTS: the op is freed once both its SEND completed and the answer (the atomic
  // response, the FIN) came; either may be first.
  std::uint8_t pending = 0;
  // The endpoint's list of live Ops (or, once freed, its free list: live_next).
  Op* live_prev = nullptr;
  Op* live_next = nullptr;
};

struct RecvReq {
  void* context = nullptr;
  iovec iov[kIovMax]{};
  std::size_t iov_count = 0;
  fi_addr_t src = FI_ADDR_UNSPEC;
  std::uint64_t tag = 0, ignore = 0;
  std::uint64_t flags = 0;
  bool tagged = false;
  bool completion = true;
  // FI_MULTI_RECV: the posted buffer (iov[0]) hands out consecutive pieces, one per message; each
  // piece is a child RecvReq pointing at its parent. The parent leaves the posted queue once
  // less than the endpoint's min_multi_recv remains (released); the completion of the last
  // outstanding piece then carries FI_MULTI_RECV and the parent is freed.
  bool multi = false;
  bool released = false;
  std::size_t offset = 0;
  std::size_t outstanding = 0;
  RecvReq* parent = nullptr;
  RecvReq* next_free = nullptr;    // the endpoint's free list
  RecvReq* posted_prev = nullptr;  // RecvList
  RecvReq* posted_next = nullptr;
};

// The posted receives of one queue in post order: an intrusive list through
// RecvReq::posted_prev/next, so posting and matching allocate nothing (a std::list node per
// receive was a malloc and a free per message). An iterator has read its successor already, so
// the element it points at may be erased or freed before ++.
class RecvList {
 public:
  class iterator {
   public:
    explicit iterator(RecvReq* r = nullptr) : cur_(r), next_(r ? r->posted_next : nullptr) {}
    RecvReq* operator*() const { return cur_; }
    iterator& operator++() {
      cur_ = next_;
      next_ = cur_ ? cur_->posted_next : nullptr;
      return *this;
    }
    bool operator==(const iterator& o) const { return cur_ == o.cur_; }

   private:
    RecvReq* cur_;
    RecvReq* next_;
  };
  iterator begin() const { return iterator(head_); }
  iterator end() const { return iterator(); }
  bool empty() const { return head_ == nullptr; }
  RecvReq* front() const { return head_; }
  void push_back(RecvReq* r) {
    r->posted_prev = tail_;
    r->posted_next = nullptr;
    (tail_ ? tail_->posted_next : head_) = r;
    tail_ = r;
  }
  void erase(RecvReq* r) {
    (r->posted_prev ? r->posted_prev->posted_next : head_) = r->posted_next;
    (r->posted_next ? r->posted_next->posted_prev : tail_) = r->posted_prev;
    r->posted_prev = r->posted_next = nullptr;
  }
  void erase(iterator it) { erase(*it); }
  void pop_front() { erase(head_); }

 private:
  RecvReq* head_ = nullptr;
  RecvReq* tail_ = nullptr;
};

// A message that arrived before its receive was posted.
struct Unexp {
  EpAddr from;
  Conn* conn = nullptr;
  MsgHdr hdr{};
  std::vector<std::uint8_t> payload;  // eager only
  bool claimed = false;
};

struct Conn {
  EpAddr peer;
  QueuePair* qp = nullptr;
  bool outgoing = false;
  bool ready = false;
  bool awaiting = false;         // outgoing: the request is out, no answer yet (Domain::connecting)
  std::uint32_t sq_psn = 0;      // our requester's first PSN (outgoing: sent in the REQ; incoming:
                                 // in the REP, sent again to a duplicate REQ)
  std::uint32_t remote_qpn = 0;  // the peer's QP (outgoing: its ConnRep; incoming: its REQ)
  std::uint32_t remote_psn = 0;  // incoming: the peer's first PSN (its REQ), to know a duplicate
  // outgoing, while awaiting: requests sent so far, when to send it again, when to give up.
  std::uint32_t tries = 0;
  TimeNs resend_at = 0, deadline = 0;
  // Work requests posted on qp whose completion has not been dispatched yet. A direct send
  // (README, "Direct messages") may go only while this is 0 and the backlog is empty: then
  // every earlier message of this connection has been acknowledged, so the peer has matched
  // it, and the direct one cannot overtake it (FI_ORDER_SAS, tag matching order).
  std::uint32_t posted_wrs = 0;
  std::deque<Op*> backlog;
};

// Before the MsgHdr of a direct message: which endpoint, and which of its connections (the QP
// number of the receiver's end), the message belongs to.
struct DirectHdr {
  std::uint32_t dst_ep;
  std::uint32_t dst_qpn;
};
static_assert(sizeof(DirectHdr) == 8);
// Direct sends carry messages of at most FI_WEFT_DIRECT_SIZE payload bytes, which may be at most
// this: one copy into the peer's ring, one out of it. A record takes ring space until the
// receiver reads it, and the shm medium's 4 MiB ring holds records of at most a quarter of it.
inline constexpr std::size_t kDirectBytesMax = 256 * 1024;

struct Ep {
  fid_ep ep{};
  Domain* dom = nullptr;
  fi_info* info = nullptr;
  std::uint32_t id = 0;
  EpAddr addr;
  Av* av = nullptr;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  bool tx_selective = false, rx_selective = false;
  Cntr* cntr_send = nullptr;
  Cntr* cntr_recv = nullptr;
  Cntr* cntr_read = nullptr;
  Cntr* cntr_write = nullptr;
  Cntr* cntr_rem_write = nullptr;
  std::uint64_t tx_op_flags = 0, rx_op_flags = 0;
  bool enabled = false;
  SharedReceiveQueue* srq = nullptr;
  std::vector<std::uint8_t> bounce_mem;
  MemoryRegion* bounce_mr = nullptr;
  std::vector<Op> bounce_ops;
  std::size_t bounce_bytes = 0;
  std::vector<std::uint8_t> direct_linear;  // an iov direct send's payload, made contiguous
  std::vector<std::uint8_t> stage_mem;
  MemoryRegion* stage_mr = nullptr;
  std::vector<std::uint8_t*> stage_free;
  std::size_t stage_bytes = 0;
  std::unordered_map<EpAddr, std::unique_ptr<Conn>, EpAddrHash> out_conns;
  std::vector<std::unique_ptr<Conn>> in_conns;
  std::unordered_map<std::uint32_t, Conn*> by_qpn;
  RecvList posted_msg, posted_tag;
  std::size_t min_multi_recv = 64;  // FI_OPT_MIN_MULTI_RECV
  std::list<Unexp*> unexp_msg, unexp_tag;
  std::uint64_t next_rndv_id = 1;
  std::unordered_map<std::uint64_t, Op*> rndv_sends;
  // Split rendezvous receives waiting for the sender's kDone, by (connection, sender's msg_id).
  struct SplitRecv {
    RecvReq* r;
    MsgHdr h;
    fi_addr_t src;
    std::size_t n, split;  // bytes delivered; the receiver's part is [0, split)
    bool read_ok;
  };
  std::map<std::pair<const Conn*, std::uint64_t>, SplitRecv> split_recvs;
  std::size_t ops_in_flight = 0;
  Op* live_ops = nullptr;  // every live Op (intrusive list), freed at close
  Op* free_ops = nullptr;  // recycled Ops
  RecvReq* free_recvs = nullptr;
  std::unordered_map<void*, Unexp*> claimed;
  // FI_EP_DGRAM: one UD QP; address handles made on first use per fi_addr.
  bool dgram = false;
  // FI_EP_MSG: the one peer (set by accept on the server, by the FI_CONNECTED answer on the
  // client), the EQ for connection events, and the server's connection request until accept.
  bool msg = false;
  bool connected = false;
  // Client: fi_connect's request is out, no answer yet (counted in Domain::connecting); it
  // fails with an FI_ETIMEDOUT error event at cm_deadline (FI_WEFT_CONN_TIMEOUT_MS).
  bool cm_pending = false;
  TimeNs cm_deadline = kNoDeadline;
  EpAddr msg_peer;
  Eq* eq = nullptr;
  ConnReq* conn_req = nullptr;
  QueuePair* ud_qp = nullptr;
  std::unordered_map<fi_addr_t, AddressHandle*> ahs;
  std::uint64_t atomics_issued = 0, atomics_served = 0;  // logged at close (FI_LOG_LEVEL=info)
  std::uint64_t dgram_drops =
      0;  // datagrams that found no posted receive  // FI_PEEK|FI_CLAIM: context -> message

  fi_addr_t resolve(const EpAddr& a) const { return av ? av->find(a) : FI_ADDR_NOTAVAIL; }
};

// ---- entry points between files -----------------------------------------------------------
int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);
int eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);
int wait_open(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** waitset);
// fi_trywait (ofi_wait.cpp): FI_SUCCESS when the application may block on the native wait
// objects of every fid (CQs with FI_WAIT_FD, wait sets, CQs and counters of a wait set).
int trywait(fid** fids, int count);
// fi_poll_open (ofi_wait.cpp): a poll set over CQs and counters.
int poll_open(fid_domain* domain, fi_poll_attr* attr, fid_poll** pollset);
int ep_open(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
int pep_open(fid_fabric* fabric, fi_info* info, fid_pep** pep, void* context);
void pep_on_ctrl(Pep* pep, const NodeAddr& src, std::span<const std::uint8_t> msg);
void eq_forget_domain(Domain* d);  // a closing domain leaves every EQ's progress list
int rdm_getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
                const fi_info* hints, fi_info** info);

void ep_on_completion(Ep* ep, Op* op, const WorkCompletion& wc);
void ep_reap_dead_splits(Ep* ep);  // split receives whose sender is gone fail (FI_EIO)
void ep_on_direct(Ep* ep, std::uint32_t qpn, std::span<const std::uint8_t> msg);
// FI_WEFT_EAGER_CONNECT, from fi_av_insert; true: a request is out, not yet answered.
bool ep_connect_eagerly(Ep* ep, fi_addr_t peer);
void ep_on_ctrl(Ep* ep, const NodeAddr& src, std::span<const std::uint8_t> msg);
// Resends the endpoint's unanswered connection requests that are due and fails those past their
// deadline (FI_ETIMEDOUT); lowers `next` to its earliest remaining resend or deadline.
void ep_conn_timers(Ep* ep, TimeNs now, TimeNs& next);
// prov_errno of an operation whose connection request went unanswered until its deadline
// (above the engine's WcStatus + 1 values; fi_cq_strerror names it).
inline constexpr int kProvErrConnTimeout = 0x100;
void ctrl_unknown_endpoint(Domain* d, const NodeAddr& src, std::span<const std::uint8_t> msg);
void cntr_inc(Cntr* c);
void cntr_err(Cntr* c);

// Logging through libfabric's FI_LOG (FI_LOG_LEVEL, FI_LOG_PROV=weft).
// libfabric prints the format as given: the macros end each message with a newline.
#define WEFT_WARN(subsys, fmt, ...) \
  FI_WARN(&::weft::ofi::g_prov, subsys, fmt "\n" __VA_OPT__(, ) __VA_ARGS__)
#define WEFT_INFO(subsys, fmt, ...) \
  FI_INFO(&::weft::ofi::g_prov, subsys, fmt "\n" __VA_OPT__(, ) __VA_ARGS__)

}  // namespace weft::ofi
