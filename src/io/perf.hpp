// io/perf.hpp — weft perf's runner: perftest's write/read/send/atomic bandwidth and latency tests
// over a DirectNode. tools/weft/cmd_perf.cpp only parses arguments and prints.
//
// The client drives: it sends the parameters out of band, both sides register one buffer of the
// largest size (ordinary private memory), exchange QP numbers and keys, and then run each size.
// Latency of WRITE and SEND is half the round trip of a ping-pong (as perftest's *_lat); READ and
// atomics report the whole round trip. Bandwidth keeps up to tx_depth WRs in flight.
// With WEFT_PERF_COUNTERS=1 in the environment each side of a direct run prints its Driver's and
// medium's counters and its /proc/self/schedstat (time on the CPU, time runnable but waiting)
// on stderr when it ends: under load these say whether a figure is the code's or the scheduler's.
// Thread-safety: inline Driver mode; one thread per side.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "src/io/direct_node.hpp"
#include "src/io/fabric_attach.hpp"

namespace weft::io {

enum class PerfVerb : std::uint8_t { kWrite, kRead, kSend, kAtomic };
enum class PerfMode : std::uint8_t { kBw, kLat };
std::string_view to_string(PerfVerb v);

struct PerfOptions {
  PerfVerb verb = PerfVerb::kWrite;
  PerfMode mode = PerfMode::kBw;
  std::vector<std::uint32_t> sizes{65536};
  std::uint32_t iters = 0;  // 0: 1000 (lat) / 5000 (bw), capped at kPerfBytesPerSizeMax per size
  std::uint32_t tx_depth = 128;
  // Both sides' buffers come from Weft's shared-memory allocator (shm/shm_pool.hpp), each pool
  // mapped by the peer too: a payload moves with one memcpy by the receiver. Direct mode only.
  bool shm_buffers = false;
  TimeNs timeout_ns = 60'000'000'000;  // per size
};
inline constexpr std::uint64_t kPerfBytesPerSizeMax = std::uint64_t{1} << 30;
inline constexpr std::uint32_t kPerfSizeMax = 8u << 20;
// -a: 2 B .. 8 MiB in powers of two.
std::vector<std::uint32_t> perf_all_sizes();

struct PerfResult {
  std::uint32_t bytes = 0;
  std::uint32_t iterations = 0;
  // bandwidth
  double bw_peak_gbps = 0, bw_avg_gbps = 0, msg_rate_mpps = 0;
  // latency, microseconds
  double lat_min_us = 0, lat_max_us = 0, lat_typical_us = 0, lat_avg_us = 0, lat_stdev_us = 0,
         lat_p99_us = 0, lat_p999_us = 0;
  bool ok = true;
  std::string error;
};

// What the runner needs from a side: a Device with its Driver (inline mode), the peer's LID and
// an out-of-band message channel to the peer (QP numbers, keys, test control).
class PerfLink {
 public:
  virtual ~PerfLink() = default;
  virtual Device& device() = 0;
  virtual Driver& driver() = 0;
  virtual std::uint16_t peer_lid() const = 0;
  virtual bool send_oob(std::span<const std::uint8_t> msg) = 0;
  virtual Result<std::vector<std::uint8_t>, IoError> recv_oob(TimeNs timeout_ns) = 0;
  // Shared-memory buffers (PerfOptions::shm_buffers; DirectNode::share_pool / accept_pool).
  // False where the link has no memory to share with the peer (through a fabric).
  virtual bool share_pool(const shm::ShmPool& pool) {
    (void)pool;
    return false;
  }
  virtual bool accept_pool() { return false; }
};

// weft perf through a fabric daemon: each side attaches to a HCA of the fabric (FabricAttach)
// and the two meet on the abstract socket "weft/perf/<name>" (SOCK_SEQPACKET) for the
// out-of-band messages; the first message each way is the side's LID.
class FabricPerfLink final : public PerfLink {
 public:
  ~FabricPerfLink() override;
  // The server's socket, bound before the client may look for it (-1: errno says why).
  static int listen(const std::string& name);
  // Attaches to `fabric` and waits on `listen_fd` (owned by the caller) for one client.
  static Result<std::unique_ptr<FabricPerfLink>, IoError> accept(int listen_fd,
                                                                 const std::string& fabric,
                                                                 const FabricAttachOptions& o);
  // Attaches to `fabric` and connects to the server named `name` (retrying until o.timeout_ns).
  static Result<std::unique_ptr<FabricPerfLink>, IoError> connect(const std::string& name,
                                                                  const std::string& fabric,
                                                                  const FabricAttachOptions& o);
  Device& device() override { return attach_->device(); }
  Driver& driver() override { return attach_->driver(); }
  std::uint16_t peer_lid() const override { return peer_lid_; }
  bool send_oob(std::span<const std::uint8_t> msg) override;
  Result<std::vector<std::uint8_t>, IoError> recv_oob(TimeNs timeout_ns) override;
  FabricAttach& attach() { return *attach_; }

 private:
  FabricPerfLink() = default;
  bool exchange_lids(TimeNs timeout_ns);
  std::unique_ptr<FabricAttach> attach_;
  int sock_ = -1;
  std::uint16_t peer_lid_ = 0;
  bool server_ = false;  // accept()ed: names the side in WEFT_PERF_COUNTERS' lines
};

// Runs the client side; results in size order. A failure fills the last result's error.
std::vector<PerfResult> perf_client(PerfLink& link, const PerfOptions& opts);
std::vector<PerfResult> perf_client(DirectNode& node, const PerfOptions& opts);
// Serves one client until it finishes. Returns false on a protocol or transport failure.
bool perf_server(PerfLink& link, std::string* error = nullptr);
bool perf_server(DirectNode& node, std::string* error = nullptr);

// `via`: what the header names as the path ("direct, shared memory" by default).
void perf_print_table(std::FILE* out, const PerfOptions& opts, const std::vector<PerfResult>& r,
                      bool zero_copy, const std::string& via = "direct, shared memory");
void perf_print_json(std::FILE* out, const PerfOptions& opts, const std::vector<PerfResult>& r,
                     bool zero_copy);

}  // namespace weft::io
