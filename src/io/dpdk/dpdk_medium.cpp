// io/dpdk/dpdk_medium.cpp — RoCEv2 frames over a DPDK ethdev (see dpdk_medium.hpp).
// rte_dev_dma_map/unmap (the DMA mapping of registered memory for a physical port) are still
// experimental in DPDK 22.11; this is how DPDK asks a user to opt in to them.
#define ALLOW_EXPERIMENTAL_API 1
#include "src/io/dpdk/dpdk_medium.hpp"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_ip.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_udp.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <net/if.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "src/base/log.hpp"
#include "src/io/clock.hpp"

namespace weft::io::dpdk {
namespace {

constexpr std::size_t kBurst = 32;
// Data room of a trailer mbuf: pad (up to 3) and ICRC (4), rounded up.
constexpr std::uint16_t kTrailerRoomBytes = 16;
// Private area of an aux mbuf: the external buffer's shared info (refcount, free callback), which
// must outlive the mbuf's attachment — it lives exactly as long as the mbuf does.
constexpr std::uint16_t kAuxPrivBytes =
    (sizeof(rte_mbuf_ext_shared_info) + RTE_MBUF_PRIV_ALIGN - 1) & ~(RTE_MBUF_PRIV_ALIGN - 1);
static_assert(kAuxPrivBytes >= sizeof(rte_mbuf_ext_shared_info));
static_assert(kTrailerRoomBytes >= 3 + 4);
constexpr TimeNs kBackoffMinNs = 20'000, kBackoffMaxNs = 1'000'000;
// A sleep's bound once the memif peer rings ("Sleeping", dpdk_medium.hpp): only for a peer that
// died or stopped polling; a live peer rings when it sends.
constexpr TimeNs kSafetyNs = 100'000'000;
// How long a net_memif server's destructor waits for its client to leave first (see ~DpdkMedium).
constexpr TimeNs kMemifLeaveWaitNs = 2'000'000'000;
// Link frames between two ends of a net_memif link ("Ending a session", dpdk_medium.hpp): IEEE
// 802's local experimental EtherType 1 (IEEE Std 802-2014, 9.2.2), "WEFT", a type, padded to
// Ethernet's 60-byte minimum frame (without FCS).
constexpr std::uint16_t kEtherTypeLink = 0x88B5;
constexpr std::uint8_t kLinkMagic[4] = {'W', 'E', 'F', 'T'};
constexpr std::uint8_t kLinkBye = 1, kLinkByeAck = 2;
// SLEEPING: R (8 bytes, little-endian), the name's length (1 byte), the name (abstract, without
// its leading NUL).
constexpr std::uint8_t kLinkSleeping = 3;
// HELLO: the name's length and the name, sent once when the link is first seen up (rx_burst): a
// peer that speaks the doorbell says so before either side sleeps, so a sleeper whose peer is
// not polling yet (the libfabric provider's native waits) still knows it will be rung.
constexpr std::uint8_t kLinkHello = 4;
constexpr std::size_t kLinkFrameBytes = 60;
constexpr std::size_t kLinkBodyAt = wire::kEthHeaderBytes + sizeof kLinkMagic + 1;
constexpr std::size_t kLinkBodyMax = kLinkFrameBytes - kLinkBodyAt;
constexpr std::size_t kWakeNameMax = kLinkBodyMax - 8 - 1;
// How long a leaving memif port waits for its peer's BYE-ACK. The peer answers from its passes
// (a Driver's; the libfabric provider's progress, whose keeper runs one every 10 ms when the
// application does not), so a second covers a peer starved of CPU by far; a peer that has gone
// (link down) ends the wait at once, and one that never passes costs this bound.
constexpr TimeNs kLingerNs = 1'000'000'000;
// The pause between two looks while ending (bounded waits, not a spin).
constexpr useconds_t kEndPollUs = 200;
// How long a memif client waits for its link before it reconnects (DpdkMedium::wait_link).
constexpr TimeNs kMemifClientRetryNs = 1'000'000'000;
// How long a memif client's start keeps trying to reach a server that does not listen yet, and
// the pause between two tries (DpdkMedium's constructor).
constexpr TimeNs kMemifClientStartNs = 5'000'000'000;
constexpr useconds_t kMemifClientStartPauseUs = 2000;

std::mutex g_eal_mu;
bool g_eal_tried = false, g_eal_ok = false;
std::string g_eal_error;
std::atomic<unsigned> g_pool_seq{0};

std::uint16_t get16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}
std::uint32_t get32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// The barrier's interrupt source: an eventfd among EAL's interrupt thread's sources. With `park`
// its callback never returns (eal_cleanup, below).
struct BarrierSource {
  int fd;
  bool park = false;
  std::atomic<bool> passed{false};
};

void note_barrier(void* arg) {
  auto* b = static_cast<BarrierSource*>(arg);
  std::uint64_t v;
  [[maybe_unused]] const ssize_t n = read(b->fd, &v, sizeof v);  // level-triggered: clear it
  const bool park = b->park;  // read before the release: a barrier's waiter may then free *b
  b->passed.store(true, std::memory_order_release);
  if (park)
    for (;;) pause();  // held here until the process exits; touches nothing of EAL's
}

// Registers b's eventfd with EAL's interrupt thread, signals it and waits (at most timeout_ns)
// for its callback. Returns the handle, registered (nullptr when registering failed).
rte_intr_handle* signal_interrupt_thread(BarrierSource& b, TimeNs timeout_ns) {
  rte_intr_handle* h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  if (!h) return nullptr;
  if (rte_intr_fd_set(h, b.fd) != 0 || rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) != 0 ||
      rte_intr_callback_register(h, &note_barrier, &b) != 0) {
    rte_intr_instance_free(h);
    return nullptr;
  }
  const std::uint64_t one = 1;
  if (write(b.fd, &one, sizeof one) == static_cast<ssize_t>(sizeof one)) {
    const TimeNs until = monotonic_ns() + timeout_ns;
    while (!b.passed.load(std::memory_order_acquire) && monotonic_ns() < until) usleep(kEndPollUs);
  }
  return h;
}

// Holds EAL's interrupt thread in a callback of ours for the rest of the process: true when it
// is held. DPDK 22.11's rte_eal_cleanup neither stops nor joins that thread, and the thread walks
// its sources again whenever one is unregistered (a pipe write wakes it) -- among them the memif
// socket's, whose handles live in EAL memory and whose removal is only ever marked pending
// (rte_intr_callback_unregister_pending) while the cleanup unmaps that memory under it. A
// barrier before the cleanup still left the walk racing the cleanup's own unregistering: SIGSEGV
// in rte_intr_fd_get on the interrupt thread at the exit of ofi_dpdk_mr_test (CI of session 22,
// ASan). Held, the thread walks nothing; it ends with the process. The source is leaked on
// purpose (kept reachable in g_parked for LeakSanitizer): its callback is running and cannot be
// unregistered, and it must outlive a late run when the thread did not come round in time.
BarrierSource* g_parked = nullptr;

bool park_interrupt_thread(TimeNs timeout_ns) {
  if (g_parked) return g_parked->passed.load(std::memory_order_acquire);
  auto* b = new BarrierSource{eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), true};
  if (b->fd < 0) {
    delete b;
    return false;
  }
  rte_intr_handle* h = signal_interrupt_thread(*b, timeout_ns);
  if (!h) {
    close(b->fd);
    delete b;
    return false;
  }
  g_parked = b;
  rte_intr_instance_free(h);  // registering copied it (rte_intr_instance_dup)
  return b->passed.load(std::memory_order_acquire);
}

}  // namespace

// An eventfd of our own joins the interrupt thread's sources, is signalled, and its callback is
// waited for. The thread runs its callbacks one at a time (lib/eal/linux/eal_interrupts.c), so
// ours runs after any callback in flight has returned. The source is unregistered before
// returning (rte_intr_callback_unregister_sync waits out a run in progress), so nothing of it is
// left for the thread to touch after rte_eal_cleanup. (An EAL alarm would be simpler, but once
// used it stays among the thread's sources, allocated in EAL's memory, and the thread faulted on
// it after rte_eal_cleanup in 4 of 30 `weft perf` exits.)
bool interrupt_thread_barrier(TimeNs timeout_ns) {
  BarrierSource b{eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
  if (b.fd < 0) return false;
  if (rte_intr_handle* h = signal_interrupt_thread(b, timeout_ns)) {
    rte_intr_callback_unregister_sync(h, &note_barrier, &b);
    rte_intr_instance_free(h);
  }
  close(b.fd);
  return b.passed.load(std::memory_order_acquire);
}

std::uint32_t memif_buffer_bytes(const std::string& vdev) {
  constexpr std::uint32_t kMemifDefaultBufferBytes =
      2048;  // DPDK's ETH_MEMIF_DEFAULT_PKT_BUFFER_SIZE
  std::uint32_t bytes = kMemifDefaultBufferBytes;
  // The last bsize= wins, as in rte_kvargs_process.
  for (std::size_t k = vdev.find(",bsize="); k != std::string::npos;
       k = vdev.find(",bsize=", k + 1))
    bytes = static_cast<std::uint32_t>(std::strtoul(vdev.c_str() + k + 7, nullptr, 0));
  return bytes;
}

std::string memif_ring_args() {
  static_assert(kMemifBufferBytes >= roce::kFrameMax6 && kMemifBufferBytes % 64 == 0);
  return ",bsize=" + std::to_string(kMemifBufferBytes) + ",rsize=" + std::to_string(kMemifLog2Ring);
}

std::vector<std::string> default_eal_args() {
  // --single-file-segments: a net_memif client with `zero-copy=yes` shares its mempool memory
  // with the server and refuses to start without it ("Zero-copy doesn't support multi-file
  // segments"); with --no-huge it changes nothing else (anonymous memory either way).
  return {"--no-huge",
          "--single-file-segments",
          "-m",
          "256",
          "--no-pci",
          "--no-shconf",
          "--no-telemetry",
          "--file-prefix",
          "weft-" + std::to_string(getpid()),
          "--log-level=warning",
          "-l",
          "0"};
}

namespace {

// Empty run-time directories of Weft's default EAL arguments (--file-prefix weft-PID) whose
// process has gone: one killed while it was inside rte_eal_init, before remove_runtime_dir()
// below. Only empty ones, by rmdir (a directory that holds anything is not ours to judge).
void sweep_stale_runtime_dirs(const std::filesystem::path& base) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("weft-") || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    const long pid = std::strtol(name.c_str() + 5, nullptr, 10);
    // kill(2) with signal 0: ESRCH when no such process exists.
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) rmdir(e.path().c_str());
  }
}

}  // namespace

bool eal_init(const std::vector<std::string>& args_in, std::string* error) {
  std::lock_guard<std::mutex> g(g_eal_mu);
  if (g_eal_tried) {
    if (!g_eal_ok && error) *error = g_eal_error;
    return g_eal_ok;
  }
  g_eal_tried = true;
  std::vector<std::string> args = args_in;
  bool defaults = false;
  if (args.empty()) {
    if (const char* e = std::getenv("WEFT_DPDK_ARGS"); e && *e) {
      std::istringstream in(e);
      for (std::string w; in >> w;) args.push_back(w);
    } else {
      args = default_eal_args();
      defaults = true;
    }
  }
  args.insert(args.begin(), "weft");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  cpu_set_t cpus;
  const bool have_cpus = sched_getaffinity(0, sizeof cpus, &cpus) == 0;
  const int r = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (have_cpus) sched_setaffinity(0, sizeof cpus, &cpus);  // EAL pinned us to lcore 0's CPU
  if (r < 0) {
    std::string joined;
    for (std::size_t i = 1; i < args.size(); ++i) joined += (i > 1 ? " " : "") + args[i];
    g_eal_error = "dpdk: rte_eal_init(" + joined + ") failed: " + rte_strerror(rte_errno);
    if (error) *error = g_eal_error;
    return false;
  }
  g_eal_ok = true;
  // With the defaults, the run-time directory (/var/run/dpdk/weft-PID as root) is empty once
  // rte_eal_init has returned, and nothing opens it again: --no-shconf leaves out the config
  // file, the hugepage info and the fbarrays' files (anonymous memory instead), and the IPC
  // socket (multi-process is off); --no-telemetry the telemetry socket (strace of dpdk_test's
  // memif test: a mkdir, then nothing until eal_cleanup's removal). So it goes now: a process
  // that a signal ends never reaches eal_cleanup() and left it behind. User-supplied arguments
  // may want it (a primary process's config and socket): kept until eal_cleanup() then.
  if (defaults) {
    const std::filesystem::path dir = rte_eal_get_runtime_dir();
    if (!dir.empty()) {
      rmdir(dir.c_str());
      sweep_stale_runtime_dirs(dir.parent_path());
    }
  }
  return true;
}

void eal_cleanup() {
  std::lock_guard<std::mutex> g(g_eal_mu);
  if (!g_eal_ok) return;
  const std::string dir = rte_eal_get_runtime_dir();
  // EAL's interrupt thread outlives rte_eal_cleanup (DPDK 22.11 does not join it) and walks its
  // sources, some of them in EAL memory the cleanup unmaps: it faulted there (ASan SEGV in
  // rte_intr_fd_get on the interrupt thread: `dpdk_stop` and `dpdk_mr` in CI of session 22, the
  // bench's bare loop 4 of 70 runs). A barrier before the cleanup narrowed it; holding the thread
  // for good closes it. A thread that did not come round in time is left as it was.
  if (!park_interrupt_thread(kIntrBarrierWaitNs))
    base::get_logger("weft.io")->warn(
        "dpdk: EAL's interrupt thread did not come round within {} ms before rte_eal_cleanup",
        kIntrBarrierWaitNs / 1'000'000);
  rte_eal_cleanup();
  g_eal_ok = false;
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

TxChecksum choose_tx_checksum(std::uint64_t capa, bool allow) {
  TxChecksum c;
  if (!allow) return c;
  c.ip = (capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
  c.udp = (capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
  return c;
}

std::uint64_t tx_checksum_offloads(TxChecksum c) {
  return (c.ip ? RTE_ETH_TX_OFFLOAD_IPV4_CKSUM : 0) | (c.udp ? RTE_ETH_TX_OFFLOAD_UDP_CKSUM : 0);
}

void prepare_tx_checksum(rte_mbuf* m, TxChecksum c) {
  if (!c.ip && !c.udp) return;
  auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, wire::kEthHeaderBytes);
  // rte_mbuf_core.h, RTE_MBUF_F_TX_IP_CKSUM / RTE_MBUF_F_TX_UDP_CKSUM: the offsets of the L3 and
  // L4 headers, RTE_MBUF_F_TX_IPV4, the IP checksum 0, the UDP checksum the pseudo-header's.
  m->l2_len = wire::kEthHeaderBytes;
  m->l3_len = wire::kIpv4HeaderBytes;
  m->ol_flags |= RTE_MBUF_F_TX_IPV4;
  if (c.ip) {
    m->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
    ip->hdr_checksum = 0;
  }
  if (c.udp) {
    m->ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM;
    auto* udp = reinterpret_cast<rte_udp_hdr*>(reinterpret_cast<std::uint8_t*>(ip) +
                                               wire::kIpv4HeaderBytes);
    udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
  }
}

// The MTU frames on this port may have. An ethdev starts at 1500 whatever it can carry, so: with
// an `iface=NAME` argument (net_af_packet, net_pcap) the kernel interface's MTU, which is what
// bounds the frames; otherwise the port is raised to the largest MTU it and our mbufs allow.
std::uint32_t DpdkMedium::port_mtu(const rte_eth_dev_info& info) {
  if (const auto k = cfg_.vdev.find("iface="); k != std::string::npos) {
    const std::string ifname = cfg_.vdev.substr(k + 6, cfg_.vdev.find(',', k) - (k + 6));
    const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq r{};
    std::strncpy(r.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    const bool ok = s >= 0 && ioctl(s, SIOCGIFMTU, &r) == 0;
    if (s >= 0) close(s);
    if (ok) return static_cast<std::uint32_t>(r.ifr_mtu);
  }
  const auto room = static_cast<std::uint32_t>(
      std::max<std::size_t>(cfg_.mbuf_bytes, roce::kFrameMax) - wire::kEthHeaderBytes);
  std::uint32_t want = std::min<std::uint32_t>(info.max_mtu, room);
  // net_memif: a frame must fit one of its buffers. A longer one goes as a chain of descriptors,
  // and DPDK 22.11's copy-mode transmit never clears MEMIF_DESC_FLAG_NEXT on the first
  // descriptor of a frame: a slot that once began a chain, reused for a frame of one buffer,
  // still says "next", and the receiver joins the frame after it to its tail, where that frame
  // is lost (with bsize=4096, 4 KiB RDMA WRITEs and then small UD sends: the sends vanished; with
  // 2048, 1 MiB WRITEs ended in RETRY_EXC_ERR). So the buffer bounds the MTU, and tx_burst drops
  // what is longer.
  if (memif_)
    want = std::min<std::uint32_t>(want, memif_buffer_bytes(cfg_.vdev) - wire::kEthHeaderBytes);
  std::uint16_t mtu = 0;
  if (rte_eth_dev_get_mtu(port_id_, &mtu) == 0 && mtu < want) {
    // A PMD with no MTU setting (net_memif) bounds frames only by its buffers: ours.
    if (rte_eth_dev_set_mtu(port_id_, static_cast<std::uint16_t>(want)) == -ENOTSUP) return want;
  }
  if (rte_eth_dev_get_mtu(port_id_, &mtu) != 0) return 0;
  return memif_ ? std::min<std::uint32_t>(mtu, want) : mtu;
}

DpdkMedium::DpdkMedium(const DpdkConfig& cfg) : cfg_(cfg) {
  auto log = base::get_logger("weft.io");
  if (!eal_init(cfg.eal_args, &error_)) return;
  dev_name_ = cfg.vdev.substr(0, cfg.vdev.find(','));
  // net_memif's role defaults to server (DPDK's memif guide); "slave" is 22.11's old name for
  // client.
  memif_ = dev_name_.starts_with("net_memif");
  memif_server_ = memif_ && cfg.vdev.find("role=client") == std::string::npos &&
                  cfg.vdev.find("role=slave") == std::string::npos;
  if (dev_name_.empty()) {
    error_ = "dpdk: no device given (DpdkConfig::vdev, e.g. net_af_packet0,iface=eth0)";
    return;
  }
  if (rte_eth_dev_get_port_by_name(dev_name_.c_str(), &port_id_) != 0) {
    if (const int r = rte_dev_probe(cfg.vdev.c_str()); r < 0) {
      error_ = "dpdk: cannot probe '" + cfg.vdev + "': " + rte_strerror(-r);
      return;
    }
    probed_ = true;
    if (rte_eth_dev_get_port_by_name(dev_name_.c_str(), &port_id_) != 0) {
      error_ = "dpdk: '" + dev_name_ + "' is not an Ethernet port";
      return;
    }
  }
  rte_eth_dev_info info{};
  if (const int r = rte_eth_dev_info_get(port_id_, &info); r != 0) {
    error_ = "dpdk: rte_eth_dev_info_get: " + std::string(rte_strerror(-r));
    return;
  }
  // A physical port DMAs from memory DPDK has mapped; a virtual device reads with the CPU.
  device_ = info.device;
  const rte_bus* bus = info.device ? rte_dev_bus(info.device) : nullptr;
  physical_ = !bus || std::strcmp(rte_bus_name(bus), "vdev") != 0;
  csum_ = choose_tx_checksum(info.tx_offload_capa, cfg.checksum_offload);
  // A chain needs the port to take multi-segment packets. WEFT_DPDK_ZERO_COPY=0|1 overrides the
  // config (benchmarks compare both through weft perf).
  bool zc = cfg.zero_copy;
  if (const char* e = std::getenv("WEFT_DPDK_ZERO_COPY"); e && *e) zc = *e != '0';
  zero_copy_ = zc && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  // net_memif's own zero copy (a client's `zero-copy=yes`: its mbufs are the rings' buffers)
  // describes each segment sent as an offset into the client's mempool memory (DPDK 22.11
  // memif_tx_one_zc: region 1, the offset from its start): a payload attached where it lies in a
  // memory region would be described by an offset outside that memory. So nothing goes by
  // reference from such a port: every frame is copied into one of our mbufs (without this, test
  // Dpdk.EveryVerbByteExactOverMemifWithAZeroCopyClient died or lost every frame).
  if (memif_ && cfg.vdev.find("zero-copy=yes") != std::string::npos && zero_copy_) {
    zero_copy_ = false;
    log->info("dpdk: {} is a zero-copy memif client: payloads are copied into its frames",
              dev_name_);
  }
  regions_max_ = cfg.regions_max;
  if (const char* e = std::getenv("WEFT_DPDK_REGIONS_MAX"); e && *e)
    regions_max_ = std::strtoul(e, nullptr, 10);
  rte_eth_conf conf{};
  conf.txmode.offloads =
      tx_checksum_offloads(csum_) | (zero_copy_ ? RTE_ETH_TX_OFFLOAD_MULTI_SEGS : 0);
  // Receive interrupts where the PMD has them (see "Sleeping" in dpdk_medium.hpp); a port that
  // refuses the request is configured without it and sleeps on the timer.
  DpdkConfig::RxInterrupt want_intr = cfg.rx_interrupt;
  if (const char* e = std::getenv("WEFT_DPDK_RX_INTR"); e && *e)
    want_intr = std::strcmp(e, "on") == 0    ? DpdkConfig::RxInterrupt::kOn
                : std::strcmp(e, "off") == 0 ? DpdkConfig::RxInterrupt::kOff
                                             : DpdkConfig::RxInterrupt::kAuto;
  conf.intr_conf.rxq =
      want_intr == DpdkConfig::RxInterrupt::kOn ||
      (want_intr == DpdkConfig::RxInterrupt::kAuto && dev_name_.starts_with("net_tap"));
  if (conf.intr_conf.rxq && rte_eth_dev_configure(port_id_, 1, 1, &conf) != 0)
    conf.intr_conf.rxq = 0;
  if (conf.intr_conf.rxq == 0) {
    if (const int r = rte_eth_dev_configure(port_id_, 1, 1, &conf); r != 0) {
      error_ = "dpdk: rte_eth_dev_configure(" + dev_name_ + "): " + rte_strerror(-r);
      return;
    }
  }
  std::uint16_t nrx = cfg.rx_desc, ntx = cfg.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &nrx, &ntx);
  // Every descriptor of both rings may hold an mbuf, plus a burst being built and the per-lcore
  // cache: a power of two minus one is what the mempool sizes best.
  std::uint32_t n = 1;
  while (n < 2u * (nrx + ntx) + 4 * kBurst) n <<= 1;
  const int socket = rte_eth_dev_socket_id(port_id_);
  const std::string pool_name =
      "weft" + std::to_string(getpid() % 100000) + "_" + std::to_string(g_pool_seq.fetch_add(1));
  pool_ = rte_pktmbuf_pool_create(
      pool_name.c_str(), n - 1, 64, 0,
      static_cast<std::uint16_t>(RTE_PKTMBUF_HEADROOM +
                                 std::max<std::size_t>(cfg.mbuf_bytes, roce::kFrameMax)),
      socket < 0 ? static_cast<int>(SOCKET_ID_ANY) : socket);
  if (!pool_) {
    error_ = "dpdk: cannot create a pool of " + std::to_string(n - 1) +
             " mbufs: " + rte_strerror(rte_errno) + " (raise -m in the EAL arguments)";
    return;
  }
  if (zero_copy_) {
    // Two per packet in flight (payload and trailer), on the same bound as the main pool.
    aux_pool_ = rte_pktmbuf_pool_create(
        (pool_name + "z").c_str(), 2 * n - 1, 64, kAuxPrivBytes,
        static_cast<std::uint16_t>(RTE_PKTMBUF_HEADROOM + kTrailerRoomBytes),
        socket < 0 ? static_cast<int>(SOCKET_ID_ANY) : socket);
    if (!aux_pool_) {
      error_ = "dpdk: cannot create a pool of " + std::to_string(2 * n - 1) +
               " zero-copy mbufs: " + rte_strerror(rte_errno) + " (raise -m in the EAL arguments)";
      return;
    }
  }
  if (const int r = rte_eth_rx_queue_setup(port_id_, 0, nrx, socket < 0 ? SOCKET_ID_ANY : socket,
                                           nullptr, pool_);
      r != 0) {
    error_ = "dpdk: rx queue: " + std::string(rte_strerror(-r));
    return;
  }
  if (const int r =
          rte_eth_tx_queue_setup(port_id_, 0, ntx, socket < 0 ? SOCKET_ID_ANY : socket, nullptr);
      r != 0) {
    error_ = "dpdk: tx queue: " + std::string(rte_strerror(-r));
    return;
  }
  int r = rte_eth_dev_start(port_id_);
  // A memif client's start connects to its server's socket, and fails while nothing listens
  // there yet ("Failed to connect socket", EPERM): two processes that start together (dpdk_test's
  // peers, weft perf's) race for it. So a client tries again, for at most kMemifClientStartNs.
  // memif logs each failed connect (ERR): one line said it, the tries after it say nothing.
  if (r != 0 && memif_ && !memif_server_) {
    const int log_type = rte_log_register("pmd.net.memif");
    const int log_level = log_type >= 0 ? rte_log_get_level(log_type) : -1;
    if (log_level >= 0) rte_log_set_level(log_type, RTE_LOG_CRIT);
    const TimeNs until = monotonic_ns() + kMemifClientStartNs;
    while (r != 0 && monotonic_ns() < until) {
      usleep(kMemifClientStartPauseUs);
      r = rte_eth_dev_start(port_id_);
    }
    if (log_level >= 0) rte_log_set_level(log_type, static_cast<std::uint32_t>(log_level));
  }
  if (r != 0) {
    error_ = "dpdk: cannot start " + dev_name_ + ": " + rte_strerror(-r);
    return;
  }
  started_ = true;
  rte_eth_promiscuous_enable(port_id_);  // best effort: peers may use any MAC
  rte_ether_addr a{};
  rte_eth_macaddr_get(port_id_, &a);
  std::memcpy(mac_.data(), a.addr_bytes, 6);
  if_mtu_ = port_mtu(info);
  frame_max_ = if_mtu_ ? if_mtu_ + wire::kEthHeaderBytes : 0;
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (conf.intr_conf.rxq) setup_rx_interrupt();
  if (memif_ && rx_intr_fd_ < 0) setup_doorbell();
  if (cfg.link_wait_ns > 0 && !wait_link(cfg.link_wait_ns))
    log->warn("dpdk: {} link still down after {} ms", dev_name_, cfg.link_wait_ns / 1'000'000);
  pending_.reserve(kBurst);
  scratch_.resize(roce::kFrameMax);
  if (!cfg.pcap_path.empty() && !pcap_.open(cfg.pcap_path, wire::kLinktypeEthernet))
    log->error("dpdk: cannot open pcap file {}", cfg.pcap_path);
  log->debug("dpdk: port {} ({}) started, {} rx / {} tx descriptors, {} mbufs", port_id_, dev_name_,
             nrx, ntx, n - 1);
  const char* how = csum_.ip && csum_.udp ? "IPv4 and UDP checksums offloaded"
                    : csum_.ip            ? "IPv4 checksum offloaded, UDP checksum 0"
                    : csum_.udp           ? "UDP checksum offloaded, IPv4 checksum in software"
                                          : "IPv4 checksum in software, UDP checksum 0";
  log->info("dpdk: {}: {}{}; zero-copy transmit {}", dev_name_, how,
            cfg.checksum_offload ? "" : " (offload disabled)",
            zero_copy_ ? "from " + std::to_string(cfg.zero_copy_min_bytes) + " B" +
                             (physical_ ? " (registered memory only)" : "")
            : zc ? std::string("off (the port takes no multi-segment packets)")
                 : std::string("off"));
}

DpdkMedium::~DpdkMedium() {
  // Frames the port has not taken yet: copies still go (an ACK, a last datagram), but a chain
  // by reference points into memory the application may have released with its Device.
  {
    std::size_t keep = pending_head_;
    for (std::size_t i = pending_head_; i < pending_.size(); ++i) {
      if (started_ && pending_[i]->nb_segs == 1)
        pending_[keep++] = pending_[i];
      else
        rte_pktmbuf_free(pending_[i]);
    }
    pending_.resize(keep);
  }
  if (spare_) rte_pktmbuf_free(spare_);
  spare_ = nullptr;
  if (started_ && memif_)
    end_session();
  else if (started_)
    flush_pending();  // one try: the port may still have room
  for (std::size_t i = pending_head_; i < pending_.size(); ++i) rte_pktmbuf_free(pending_[i]);
  pending_.clear();
  pending_head_ = 0;
  pending_data_ = 0;
  if (started_) {
    // DPDK 22.11's net_memif tears a connection down in memif_disconnect, both on EAL's interrupt
    // thread (the peer's disconnect message, or its socket closing) and from rte_eth_dev_stop on
    // this thread, and the two can run at once: a client leaving while its server stopped crashed
    // the server (SEGV under rte_eth_dev_stop, CI, ASan build). So the two sides leave in turn:
    // a server whose client is still connected waits, bounded, for the client to leave first
    // (link down), and then stops a connection that is already gone.
    // Meanwhile it answers the client's BYE (end_session), and once it has, it stops reading:
    // the client disconnects then, and a read running into memif_disconnect could meet the
    // rings as they go.
    if (memif_server_ && link_up()) {
      const TimeNs from = monotonic_ns(), until = from + kMemifLeaveWaitNs;
      while (link_up() && monotonic_ns() < until) {
        if (counters_.byes_answered == 0 || owe_bye_ack_) poll_ending();
        usleep(kEndPollUs);
      }
      base::get_logger("weft.io")->debug("dpdk: {} waited {} ms for its memif client to leave{}",
                                         dev_name_, (monotonic_ns() - from) / 1'000'000,
                                         link_up() ? " (it did not)" : "");
    }
    // The link reads down from the START of an interrupt-thread memif_disconnect (the client's
    // disconnect message, or its socket hanging up), which frees the shared-memory regions at its
    // END, outside any lock (DPDK 22.11 rte_eth_memif.c, memif_free_regions); rte_eth_dev_stop
    // below runs memif_disconnect again on this thread. A server that stopped as soon as it saw
    // the link go down freed the same regions as the interrupt thread: a double rte_free, SEGV on
    // the interrupt thread (CI, ASan build, PerfCli.OverTheDpdkMedium; README "Ending a
    // session"). So a memif port first waits for the interrupt thread to finish what it is
    // doing: a disconnect in flight then has returned (regions freed, count zero), and ours finds
    // nothing left to free. (Stopping the port ON the interrupt thread was tried, dpdk13: a perf
    // server then died at exit in 1-6 runs of 36-42.)
    if (memif_ && !interrupt_thread_barrier(kIntrBarrierWaitNs))
      base::get_logger("weft.io")->warn(
          "dpdk: {}: EAL's interrupt thread did not come round within {} ms; stopping anyway",
          dev_name_, kIntrBarrierWaitNs / 1'000'000);
    // Frames still queued for us (net_ring: possibly our own chains) go back to their pools
    // before the pools go (after the wait: a memif server's rings are gone by now).
    rte_pktmbuf_free_bulk(stash_, stash_n_);
    stash_n_ = 0;
    rte_mbuf* m[kBurst];
    for (std::uint16_t k; (k = rte_eth_rx_burst(port_id_, 0, m, kBurst)) > 0;)
      rte_pktmbuf_free_bulk(m, k);
    rte_eth_dev_stop(port_id_);
  }
  for (const Region& r : regions_) {
    if (!physical_) continue;
    void* p = reinterpret_cast<void*>(r.page_begin);
    rte_dev_dma_unmap(device_, p, r.page_begin, r.page_end - r.page_begin);
    rte_extmem_unregister(p, r.page_end - r.page_begin);
  }
  if (probed_) {
    rte_eth_dev_close(port_id_);
    rte_eal_hotplug_remove("vdev", dev_name_.c_str());
  }
  if (pool_) rte_mempool_free(pool_);
  if (aux_pool_) rte_mempool_free(aux_pool_);
  if (timer_fd_ >= 0) close(timer_fd_);
  if (sleep_fd_ >= 0) close(sleep_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);  // its abstract name goes with it
}

void DpdkMedium::end_session() {
  const TimeNs from = monotonic_ns(), until = from + kLingerNs;
  bool bye_sent = false;
  while (link_up() && !bye_acked_ && monotonic_ns() < until) {
    if (!bye_sent) bye_sent = send_link_frame(kLinkBye);  // behind every pending frame
    poll_ending();
    if (!bye_acked_) usleep(kEndPollUs);
  }
  base::get_logger("weft.io")->debug(
      "dpdk: {} ended its session in {} us: {}; {} BYE(s) answered, {} frames came after the end; "
      "doorbell: {} SLEEPING sent, {} rings sent, {} received",
      dev_name_, (monotonic_ns() - from) / 1000,
      bye_acked_   ? "the peer has read every frame (BYE answered)"
      : !link_up() ? "the link is down (the peer has gone)"
                   : "no answer to the BYE (the peer does not poll)",
      counters_.byes_answered, counters_.rx_after_end, counters_.sleeping_sent,
      counters_.rings_sent, counters_.rings_received);
}

void DpdkMedium::poll_ending() {
  flush_pending();
  if (owe_bye_ack_) owe_bye_ack_ = !send_link_frame(kLinkByeAck);
  drain_ending();
  if (owe_bye_ack_) owe_bye_ack_ = !send_link_frame(kLinkByeAck);
}

void DpdkMedium::drain_ending() {
  const auto handle = [this](rte_mbuf** m, std::uint16_t k) {
    for (std::uint16_t i = 0; i < k; ++i)
      if (!on_link_frame(rte_pktmbuf_mtod(m[i], const std::uint8_t*), m[i]->data_len))
        ++counters_.rx_after_end;  // for a Device that is gone
    rte_pktmbuf_free_bulk(m, k);
  };
  handle(stash_, stash_n_);
  stash_n_ = 0;
  rte_mbuf* m[kBurst];
  for (std::uint16_t k; (k = rte_eth_rx_burst(port_id_, 0, m, kBurst)) > 0;) handle(m, k);
}

bool DpdkMedium::send_link_frame(std::uint8_t type) {
  rte_mbuf* b = make_link_frame(type, nullptr, 0);
  if (!b) return false;
  pending_.push_back(b);
  flush_pending();
  return true;
}

rte_mbuf* DpdkMedium::make_link_frame(std::uint8_t type, const std::uint8_t* body,
                                      std::size_t len) {
  rte_mbuf* b = rte_pktmbuf_alloc(pool_);
  if (!b) return nullptr;
  auto* f = rte_pktmbuf_mtod(b, std::uint8_t*);
  std::memset(f, 0, kLinkFrameBytes);
  std::memset(f, 0xFF, 6);  // broadcast: a memif link has one peer, whatever its MAC
  std::memcpy(f + 6, mac_.data(), 6);
  f[12] = kEtherTypeLink >> 8;
  f[13] = kEtherTypeLink & 0xFF;
  std::memcpy(f + wire::kEthHeaderBytes, kLinkMagic, sizeof kLinkMagic);
  f[wire::kEthHeaderBytes + sizeof kLinkMagic] = type;
  if (len) std::memcpy(f + kLinkBodyAt, body, std::min(len, kLinkBodyMax));
  b->data_len = kLinkFrameBytes;
  b->pkt_len = kLinkFrameBytes;
  return b;
}

bool DpdkMedium::on_link_frame(const std::uint8_t* f, std::size_t len) {
  constexpr std::size_t kBody = wire::kEthHeaderBytes + sizeof kLinkMagic;
  if (len <= kBody || get16(f + 12) != kEtherTypeLink ||
      std::memcmp(f + wire::kEthHeaderBytes, kLinkMagic, sizeof kLinkMagic) != 0)
    return false;
  if (f[kBody] == kLinkBye) {
    owe_bye_ack_ = true;  // the caller sends it, behind what we sent so far
    ++counters_.byes_answered;
  } else if (f[kBody] == kLinkByeAck) {
    bye_acked_ = true;
  } else if (f[kBody] == kLinkHello && len >= kLinkFrameBytes && wake_fd_ >= 0) {
    const std::size_t n = std::min<std::size_t>(f[kLinkBodyAt], kWakeNameMax);
    peer_wake_.assign(reinterpret_cast<const char*>(f + kLinkBodyAt + 1), n);
    peer_rings_ = true;  // the same protocol: it answers our SLEEPING with a ring
  } else if (f[kBody] == kLinkSleeping && len >= kLinkFrameBytes && wake_fd_ >= 0) {
    std::uint64_t r = 0;
    for (int i = 7; i >= 0; --i) r = r << 8 | f[kLinkBodyAt + i];
    const std::size_t n = std::min<std::size_t>(f[kLinkBodyAt + 8], kWakeNameMax);
    const std::string_view name(reinterpret_cast<const char*>(f + kLinkBodyAt + 9), n);
    const bool new_name = name != peer_wake_;
    if (new_name) peer_wake_.assign(name);
    // More than R of our frames taken: they are in its ring, maybe after its last look. A new
    // name: ring once so that it learns we ring (it keeps the short backoff until then).
    if (tx_frames_ > r || new_name)
      ring();
    else
      ring_owed_ = true;
  }
  return true;
}

void DpdkMedium::setup_doorbell() {
  static std::atomic<std::uint32_t> serial{0};
  wake_name_ = "weft-dpdk-" + std::to_string(getpid()) + "-" + std::to_string(serial++);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, wake_name_.data(), wake_name_.size());  // abstract: unix(7)
  const auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + wake_name_.size());
  wake_fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sleep_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  bool ok = wake_name_.size() <= kWakeNameMax && wake_fd_ >= 0 && sleep_fd_ >= 0 &&
            bind(wake_fd_, reinterpret_cast<sockaddr*>(&a), alen) == 0;
  ok = ok && epoll_ctl(sleep_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) == 0 &&
       epoll_ctl(sleep_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) == 0;
  if (!ok) {  // the timer alone, as before
    base::get_logger("weft.io")->warn("dpdk: {}: no doorbell ({}): sleeps on the timer", dev_name_,
                                      std::strerror(errno));
    if (wake_fd_ >= 0) close(wake_fd_);
    if (sleep_fd_ >= 0) close(sleep_fd_);
    wake_fd_ = sleep_fd_ = -1;
  }
}

void DpdkMedium::send_hello() {
  if (wake_fd_ < 0) {  // no doorbell (not memif, or its socket failed): nothing to announce
    hello_sent_ = true;
    return;
  }
  if (!link_up()) return;  // nothing crosses a link that is down: the next pass looks again
  hello_sent_ = true;
  std::uint8_t body[kLinkBodyMax] = {};
  body[0] = static_cast<std::uint8_t>(wake_name_.size());
  std::memcpy(body + 1, wake_name_.data(), wake_name_.size());
  rte_mbuf* b = make_link_frame(kLinkHello, body, sizeof body);
  if (b && rte_eth_tx_burst(port_id_, 0, &b, 1) != 1) {
    rte_pktmbuf_free(b);
    hello_sent_ = false;
  }
}

bool DpdkMedium::send_sleeping() {
  std::uint8_t body[kLinkBodyMax] = {};
  for (int i = 0; i < 8; ++i) body[i] = static_cast<std::uint8_t>(rx_frames_ >> (8 * i));
  body[8] = static_cast<std::uint8_t>(wake_name_.size());
  std::memcpy(body + 9, wake_name_.data(), wake_name_.size());
  rte_mbuf* b = make_link_frame(kLinkSleeping, body, sizeof body);
  if (!b) return false;
  // Straight to the port, never into pending_ (nothing is pending here: prepare_sleep): a frame
  // left pending would keep the Driver from sleeping, and a SLEEPING pays no owed ring (two
  // sleeping ends would ring each other awake for ever).
  if (rte_eth_tx_burst(port_id_, 0, &b, 1) != 1) {
    rte_pktmbuf_free(b);
    return false;
  }
  ++counters_.sleeping_sent;
  return true;
}

void DpdkMedium::ring() {
  ring_owed_ = false;
  if (peer_wake_.empty()) return;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, peer_wake_.data(), peer_wake_.size());
  const auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + peer_wake_.size());
  const std::uint8_t one = 1;
  // EAGAIN: its socket is full of rings, which wake it already; ECONNREFUSED: it has gone.
  if (sendto(wake_fd_, &one, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&a), alen) == 1)
    ++counters_.rings_sent;
}

bool DpdkMedium::link_up() const {
  rte_eth_link l{};
  return started_ && rte_eth_link_get_nowait(port_id_, &l) == 0 && l.link_status == RTE_ETH_LINK_UP;
}

bool DpdkMedium::wait_link(TimeNs timeout_ns) {
  const TimeNs until = monotonic_ns() + timeout_ns;
  TimeNs retry_at = monotonic_ns() + kMemifClientRetryNs;
  while (!link_up()) {
    const TimeNs now = monotonic_ns();
    if (now >= until) return false;
    // DPDK 22.11's memif server refuses a client whose INIT comes before the server's port has
    // started ("Device disabled": memif_msg_receive_init), and the client never tries again: both
    // links stayed down for good when two processes started at once (dpdk_test, ~1 run in 3 on
    // a quiet machine). A refused client has no connection left (its disconnect ran on EAL's
    // interrupt thread), so it reconnects by a stop and a start; a handshake takes milliseconds,
    // so one not done after kMemifClientRetryNs is not in progress. The barrier first: the
    // interrupt thread's disconnect may still be freeing the regions (see ~DpdkMedium).
    if (memif_ && !memif_server_ && now >= retry_at) {
      interrupt_thread_barrier(kIntrBarrierWaitNs);
      rte_eth_dev_stop(port_id_);
      if (rte_eth_dev_start(port_id_) != 0) return false;
      base::get_logger("weft.io")->debug("dpdk: {} reconnecting its memif client", dev_name_);
      retry_at = monotonic_ns() + kMemifClientRetryNs;
    }
    usleep(1000);
  }
  return true;
}

void DpdkMedium::add_peer(std::uint16_t lid, std::uint32_t ip, std::uint16_t port,
                          const roce::Mac& mac) {
  peers_.add({lid, ip, port, mac});
  roce::FrameAddr a;
  a.src_mac = mac_;
  a.dst_mac = mac;
  a.src_ip = cfg_.local_ip;
  a.src_port = cfg_.port;
  a.dst_ip = ip;
  a.dst_port = port;
  const auto it =
      std::find_if(heads_.begin(), heads_.end(), [lid](const auto& e) { return e.first == lid; });
  if (it != heads_.end())
    it->second = roce::frame_head4(a);
  else
    heads_.emplace_back(lid, roce::frame_head4(a));
}

bool DpdkMedium::register_memory(void* addr, std::size_t bytes, std::string* error) {
  Region r;
  r.begin = reinterpret_cast<std::uintptr_t>(addr);
  r.end = r.begin + bytes;
  if (regions_.size() >= regions_max_) {
    if (error)
      *error = "dpdk: " + std::to_string(regions_max_) +
               " memory regions registered already (DpdkConfig::regions_max)";
    return false;
  }
  if (physical_) {
    // rte_extmem_register takes whole pages; the DMA map uses IOVA = VA (no page table walk).
    if (rte_eal_iova_mode() != RTE_IOVA_VA) {
      if (error) *error = "dpdk: zero copy on a physical port needs --iova-mode=va";
      return false;
    }
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    r.page_begin = r.begin & ~(page - 1);
    r.page_end = (r.end + page - 1) & ~(page - 1);
    void* p = reinterpret_cast<void*>(r.page_begin);
    const std::size_t len = r.page_end - r.page_begin;
    if (rte_extmem_register(p, len, nullptr, 0, page) != 0) {
      if (error) *error = "dpdk: rte_extmem_register: " + std::string(rte_strerror(rte_errno));
      return false;
    }
    if (rte_dev_dma_map(device_, p, r.page_begin, len) != 0) {
      if (error) *error = "dpdk: rte_dev_dma_map: " + std::string(rte_strerror(rte_errno));
      rte_extmem_unregister(p, len);
      return false;
    }
  }
  regions_.push_back(r);
  return true;
}

bool DpdkMedium::unregister_memory(void* addr) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  // The region registered at addr: overlapping ones (a virtual device allows them) may hold it.
  auto it =
      std::find_if(regions_.begin(), regions_.end(), [a](const Region& r) { return r.begin == a; });
  if (it == regions_.end())
    it = std::find_if(regions_.begin(), regions_.end(),
                      [a](const Region& r) { return a >= r.begin && a < r.end; });
  if (it == regions_.end()) return true;
  if (zc_in_flight_ > 0) rte_eth_tx_done_cleanup(port_id_, 0, 0);
  if (zc_in_flight_ > 0) return false;
  if (physical_) {
    void* p = reinterpret_cast<void*>(it->page_begin);
    rte_dev_dma_unmap(device_, p, it->page_begin, it->page_end - it->page_begin);
    rte_extmem_unregister(p, it->page_end - it->page_begin);
  }
  regions_.erase(it);
  return true;
}

bool DpdkMedium::zero_copy_allowed(const std::uint8_t* p, std::size_t bytes) const {
  if (!physical_) return true;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const Region& r : regions_)
    if (a >= r.begin && a + bytes <= r.end) return true;
  return false;
}

void DpdkMedium::extbuf_freed(void* /*addr*/, void* opaque) {
  --static_cast<DpdkMedium*>(opaque)->zc_in_flight_;
}

bool DpdkMedium::attach_zero_copy(rte_mbuf* b, const TxPacket& pkt, const roce::FrameAddr& a) {
  rte_mbuf* zt[2];
  if (rte_pktmbuf_alloc_bulk(aux_pool_, zt, 2) != 0) return false;  // copy it instead
  rte_mbuf* z = zt[0];
  rte_mbuf* t = zt[1];
  std::size_t head = 0, tail = 0;
  roce::build_frame_gather(pkt, a, rte_pktmbuf_mtod(b, std::uint8_t*),
                           rte_pktmbuf_mtod(t, std::uint8_t*), head, tail);
  head += a.head();  // build_frame_gather counts the datagram's headers only
  // The shared info lives in z's private area, so it outlasts the attachment; the callback runs
  // when the last reference to the payload goes (rte_pktmbuf_free of z, by the PMD or the
  // receiver).
  auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(z));
  shinfo->free_cb = &DpdkMedium::extbuf_freed;
  shinfo->fcb_opaque = this;
  rte_mbuf_ext_refcnt_set(shinfo, 1);
  auto* payload = const_cast<std::uint8_t*>(pkt.payload);
  const auto len = static_cast<std::uint16_t>(pkt.payload_bytes);
  // IOVA: virtual devices never use it; physical ports only see registered regions, mapped with
  // IOVA = VA (register_memory).
  rte_pktmbuf_attach_extbuf(
      z, payload, physical_ ? reinterpret_cast<rte_iova_t>(payload) : RTE_BAD_IOVA, len, shinfo);
  ++zc_in_flight_;
  z->data_len = len;
  b->data_len = static_cast<std::uint16_t>(head);
  t->data_len = static_cast<std::uint16_t>(tail);
  b->next = z;
  z->next = t;
  b->nb_segs = 3;
  b->pkt_len = static_cast<std::uint32_t>(head + len + tail);
  return true;
}

bool DpdkMedium::flush_pending() {
  if (pending_head_ == pending_.size()) return true;
  const auto k = static_cast<std::uint16_t>(pending_.size() - pending_head_);
  const std::uint16_t took = rte_eth_tx_burst(port_id_, 0, pending_.data() + pending_head_, k);
  pending_head_ += took;
  const std::size_t data = std::min<std::size_t>(took, pending_data_);
  pending_data_ -= data;
  note_taken(data, took);
  if (pending_head_ < pending_.size()) {
    ++counters_.tx_full;
    return false;
  }
  pending_.clear();
  pending_head_ = 0;
  pending_data_ = 0;
  return true;
}

std::size_t DpdkMedium::tx_burst(Device& dev, TimeNs now, std::size_t max) {
  if (!started_ || !flush_pending()) return 0;
  std::size_t n = 0;
  rte_mbuf* m[kBurst];
  while (n < max) {
    const std::size_t want = std::min(max - n, kBurst);
    // One mbuf per packet polled (from the pool's per-lcore cache): a bulk allocation of a whole
    // burst cost a latency-bound pass (one packet) 31 needless allocations and frees. It is
    // taken before the Device gives the packet (which it cannot take back), and one the Device
    // had no packet for waits in spare_ for the next pass: an idle pass then costs no mempool
    // operation (an allocation and a free per pass were the medium's top cost in a ping-pong).
    std::size_t built = 0, polled = 0;
    TxPacket pkt;
    while (polled < want) {
      rte_mbuf* b = spare_ ? spare_ : rte_pktmbuf_alloc(pool_);
      spare_ = nullptr;
      if (!b) {
        ++counters_.tx_full;  // the pool is empty until the port frees what it sent
        break;
      }
      if (!dev.poll_transmit(now, pkt)) {
        spare_ = b;  // untouched: as rte_pktmbuf_alloc left it
        break;
      }
      ++polled;
      const roce::Peer* p = peers_.route(pkt);
      if (!p) {
        ++counters_.tx_no_route;
        spare_ = b;
        continue;
      }
      const auto addr = [&] {
        roce::FrameAddr a;
        a.src_mac = mac_;
        a.dst_mac = p->mac;
        a.src_ip = cfg_.local_ip;
        a.src_port = cfg_.port;
        a.dst_ip = p->ip;
        a.dst_port = p->port;
        return a;
      };
      m[built++] = b;
      auto* f = rte_pktmbuf_mtod(b, std::uint8_t*);
      std::size_t bytes;
      const bool by_reference =
          zero_copy_ && pkt.payload_bytes >= cfg_.zero_copy_min_bytes && dev.payload_stable(pkt) &&
          zero_copy_allowed(pkt.payload, pkt.payload_bytes) && attach_zero_copy(b, pkt, addr());
      if (by_reference) {
        bytes = b->pkt_len;
      } else {
        const roce::FrameHead4* h = nullptr;
        for (const auto& [lid, head] : heads_)
          if (lid == p->lid) h = &head;
        bytes = h ? roce::build_frame(pkt, *h, f) : roce::build_frame(pkt, addr(), f);
        b->data_len = static_cast<std::uint16_t>(bytes);
        b->pkt_len = static_cast<std::uint32_t>(bytes);
      }
      if (frame_max_ != 0 && bytes > frame_max_) {  // as a NIC drops what its MTU does not carry
        if (counters_.tx_oversize++ == 0)
          base::get_logger("weft.io")->warn(
              "dpdk: {}: a {}-byte frame is over the port's MTU {} (a path MTU above the "
              "port's RoCE MTU {}{}): dropped, as every such frame will be (tx_oversize)",
              dev_name_, bytes, if_mtu_, roce_mtu(),
              memif_ ? "; net_memif's bsize bounds its MTU" : "");
        --built;
        rte_pktmbuf_free(b);  // and the payload's reference with it (extbuf_freed)
        continue;
      }
      if (by_reference) ++counters_.tx_zero_copy;
      if (pcap_.is_open()) {
        const void* whole = rte_pktmbuf_read(b, 0, b->pkt_len, scratch_.data());
        pcap_.write(now, {static_cast<const std::uint8_t*>(whole), bytes});
      }
      prepare_tx_checksum(b, csum_);
      ++counters_.tx_packets;
      counters_.tx_bytes += bytes - roce::kFrameHead;
      // The first packet of a pass leaves at once: the next poll (an mbuf for it, the Device's
      // look at its queues) would otherwise delay it, and in a ping-pong it is the only one. The
      // rest go as a burst; one more call per pass costs a stream nothing it would notice.
      if (n == 0 && polled == 1 && built == 1 && rte_eth_tx_burst(port_id_, 0, m, 1) == 1) {
        built = 0;
        note_taken(1, 1);
      }
    }
    n += polled;
    // Nothing built (an idle pass): no call into the PMD. net_memif's transmit reads the ring's
    // indices even for no packet, lines the peer writes as it reads: each such look moved them
    // back to this CPU, and the peer's next write had to take them back.
    if (built != 0) {
      const std::uint16_t sent =
          rte_eth_tx_burst(port_id_, 0, m, static_cast<std::uint16_t>(built));
      note_taken(sent, sent);
      if (sent < built) {
        pending_.assign(m + sent, m + built);
        pending_head_ = 0;
        pending_data_ = built - sent;
        ++counters_.tx_full;
        break;
      }
    }
    if (polled < want) break;  // the Device has nothing more
  }
  return n;
}

bool DpdkMedium::rx_ready() const {
  if (stash_n_ != 0 || !started_) return true;
  stash_n_ = rte_eth_rx_burst(port_id_, 0, stash_, kStashMax);
  return stash_n_ != 0;
}

void DpdkMedium::receive(Device& dev, rte_mbuf* const* m, std::uint16_t k, TimeNs now) {
  // An ACK in this burst may complete a WR whose payload a NIC still holds as an external
  // buffer (it frees sent mbufs lazily): reclaim what it has sent before the Device sees it.
  if (zc_in_flight_ > 0) rte_eth_tx_done_cleanup(port_id_, 0, 0);
  rx_frames_ += k;
  for (std::uint16_t i = 0; i < k; ++i) {
    rte_mbuf* b = m[i];
    // The next frame's headers load while this one is checked and delivered.
    if (i + 1 < k) rte_prefetch0(rte_pktmbuf_mtod(m[i + 1], const void*));
    auto* f = rte_pktmbuf_mtod(b, std::uint8_t*);
    std::size_t len = b->data_len;
    if (b->nb_segs != 1) {  // a PMD with small buffers chained it: one copy makes it whole
      ++counters_.rx_chained;
      len = std::min<std::size_t>(b->pkt_len, scratch_.size());
      f = static_cast<std::uint8_t*>(const_cast<void*>(
          rte_pktmbuf_read(b, 0, static_cast<std::uint32_t>(len), scratch_.data())));
    }
    const std::uint8_t* ip = f + wire::kEthHeaderBytes;
    const std::uint8_t* udp = ip + wire::kIpv4HeaderBytes;
    if (len < roce::kFrameHead || get16(f + 12) != wire::kEtherTypeIpv4 || ip[0] != 0x45 ||
        ip[9] != 17 || get32(ip + 16) != cfg_.local_ip || get16(udp + 2) != cfg_.port) {
      if (!(memif_ && on_link_frame(f, len)))
        ++counters_.rx_other;
      else
        --rx_frames_;  // link frames do not count (the peer's tx_frames_ does not have them)
      continue;
    }
    // Ethernet pads short frames to 60 bytes: the IP length is the truth.
    len = std::min(len, wire::kEthHeaderBytes + get16(ip + 2));
    if (pcap_.is_open()) pcap_.write(now, {f, len});
    const std::uint16_t slid = peers_.lid_of(get32(ip + 12), get16(udp));
    roce::count_rx(counters_, roce::deliver_frame(dev, f, len, slid, now), len - roce::kFrameHead);
  }
  // Once per burst: the Device copied what it keeps before on_packet returned.
  rte_pktmbuf_free_bulk(const_cast<rte_mbuf**>(m), k);
}

std::size_t DpdkMedium::rx_burst(Device& dev, TimeNs now, std::size_t max) {
  if (!started_) return 0;
  if (!hello_sent_) [[unlikely]]
    send_hello();
  std::size_t n = 0;
  if (stash_n_ != 0) {  // what rx_ready() took while the Driver watched
    const std::uint16_t k = stash_n_;
    stash_n_ = 0;
    receive(dev, stash_, k, now);
    n = k;
    if (k < kStashMax) max = n;  // the port had no more then; the next pass looks again
  }
  rte_mbuf* m[kBurst];
  while (n < max) {
    const auto want = static_cast<std::uint16_t>(std::min(max - n, kBurst));
    const std::uint16_t k = rte_eth_rx_burst(port_id_, 0, m, want);
    if (k) receive(dev, m, k, now);
    n += k;
    if (k < want) break;
  }
  // A BYE in this burst: every frame the peer sent before it has been handed to the Device.
  if (owe_bye_ack_) owe_bye_ack_ = !send_link_frame(kLinkByeAck);
  if (n) rx_since_sleep_ = true;
  return n;
}

void DpdkMedium::setup_rx_interrupt() {
  // The queue's interrupt descriptor, if the PMD gives one. DPDK 22.11: net_tap does (the tap
  // queue's own descriptor, readable while frames wait); net_memif, net_ring, net_null and
  // net_af_packet do not (rte_eth_dev_rx_intr_ctl_q_get_fd: ENOTSUP), and neither does any vdev
  // without an interrupt vector.
  // ethdev logs "Rx Intr handle unset" at ERR for each port without one: quiet for the question.
  const int log_level = rte_log_get_level(rte_eth_dev_logtype);
  if (log_level >= 0) rte_log_set_level(rte_eth_dev_logtype, RTE_LOG_CRIT);
  const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, 0);
  if (log_level >= 0) rte_log_set_level(rte_eth_dev_logtype, static_cast<std::uint32_t>(log_level));
  if (fd < 0) return;
  rx_intr_fd_ = fd;
  // Masked while awake (rte_eth_dev_rx_intr_disable), unmasked only to sleep: a NIC's interrupt
  // per burst would cost the receiver a wake-up and a read each. A PMD without the mask (net_tap:
  // ENOTSUP) has a level-triggered descriptor, readable exactly while frames wait, and nothing
  // to drain (a read would take a frame).
  rx_intr_maskable_ = rte_eth_dev_rx_intr_disable(port_id_, 0) == 0;
  char link[64] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  rx_intr_eventfd_ = readlink(self.c_str(), link, sizeof link - 1) > 0 &&
                     std::strcmp(link, "anon_inode:[eventfd]") == 0;
  base::get_logger("weft.io")->info("dpdk: {} sleeps on its receive interrupt (fd {}{})", dev_name_,
                                    fd, rx_intr_maskable_ ? ", unmasked to sleep" : "");
}

bool DpdkMedium::prepare_sleep() {
  if (pending_head_ != pending_.size()) return false;  // keep passing until the port takes them
  if (rx_intr_fd_ >= 0) {
    if (!rx_intr_maskable_) return true;  // readable while frames wait: nothing can slip by
    rte_eth_dev_rx_intr_enable(port_id_, 0);
    // A frame that landed after the last rx_burst and before the unmask raised no interrupt:
    // look once more (l3fwd-power's pattern), and stay awake for it.
    if (rx_ready()) {
      rte_eth_dev_rx_intr_disable(port_id_, 0);
      return false;
    }
    return true;
  }
  if (stash_n_ != 0) return false;  // frames rx_ready() took: the next rx_burst hands them over
  // The peer owes us a ring already when it heard this R from us and has not rung since: a
  // second SLEEPING would only take a slot of its ring (a waiter re-arming in a loop filled it).
  bool told = wake_fd_ >= 0 && told_rx_ == rx_frames_ && !rung_since_told_;
  if (!told && wake_fd_ >= 0 && send_sleeping()) {
    told = true;
    told_rx_ = rx_frames_;
    rung_since_told_ = false;
    // A frame the peer's port took before our SLEEPING reached it, and after our last look,
    // rings nothing: look once more (the receive interrupt's pattern above).
    if (rx_ready()) return false;
  }
  backoff_ns_ = rx_since_sleep_ || backoff_ns_ == 0 ? kBackoffMinNs
                                                    : std::min(backoff_ns_ * 2, kBackoffMaxNs);
  rx_since_sleep_ = false;
  const TimeNs bound = told && peer_rings_ ? kSafetyNs : backoff_ns_;
  itimerspec its{};
  its.it_value.tv_sec = static_cast<time_t>(bound / 1'000'000'000);
  its.it_value.tv_nsec = static_cast<long>(bound % 1'000'000'000);
  timerfd_settime(timer_fd_, 0, &its, nullptr);
  return true;
}

void DpdkMedium::finish_sleep() {
  if (rx_intr_fd_ >= 0) {
    if (rx_intr_maskable_) rte_eth_dev_rx_intr_disable(port_id_, 0);
    // An eventfd the PMD signals stays readable until read; the PMD's may block, so read only
    // what poll says is there.
    pollfd p{rx_intr_fd_, POLLIN, 0};
    std::uint64_t n;
    if (rx_intr_eventfd_ && poll(&p, 1, 0) == 1) {
      [[maybe_unused]] auto r = read(rx_intr_fd_, &n, sizeof n);
    }
    return;
  }
  std::uint64_t ticks;
  [[maybe_unused]] auto r = read(timer_fd_, &ticks, sizeof ticks);
  if (wake_fd_ >= 0) {
    std::uint8_t bytes[64];
    bool rung = false;
    for (ssize_t k; (k = recv(wake_fd_, bytes, sizeof bytes, MSG_DONTWAIT)) > 0;) rung = true;
    if (rung) {
      peer_rings_ = true;
      rung_since_told_ = true;
      ++counters_.rings_received;
    }
  }
  itimerspec off{};
  timerfd_settime(timer_fd_, 0, &off, nullptr);
}

}  // namespace weft::io::dpdk
