// emu/harness/sim.hpp — a small virtual-time simulator that drives Devices sans-IO, in the style
// of ngtcp2's examples/sim: one event queue ordered by (time, sequence number), so equal-time
// events run in the order they were scheduled and every run replays exactly.
//
// After every input to a Device (a packet, a deadline, a user action) the Sim drains its
// poll_transmit() and re-arms its deadline from next_deadline(). A transmitted packet is routed
// by DLID to the Device port with that LID, over the LinkDirection joining the two Devices
// (each direction has its own rate, latency and seeded fault stream). In CrcMode::kCompute the
// link materializes each packet (TxPacket::write_to) and a corruption flips a real bit, so the
// receiver's ICRC/VCRC checks reject it; in CrcMode::kModel the packet travels by reference (its
// header block and a copy of its payload) and a corruption sets TxPacket::corrupt.
//
// A limit on everything: events_max and time_ns_max end a run by themselves.
// Ownership: the Sim does not own the Devices. Thread-safety: single owner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include <weft/device.hpp>

#include "emu/harness/link.hpp"

namespace weft::harness {

// FNV-1a, 64 bit: the trace hash of a run.
class TraceHash {
 public:
  void add(std::span<const std::uint8_t> bytes) {
    for (std::uint8_t b : bytes) {
      h_ ^= b;
      h_ *= 0x100000001b3ULL;
    }
  }
  void add_u64(std::uint64_t v) {
    std::uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
    add(b);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

enum class TraceKind : std::uint8_t {
  kSent,        // a Device transmitted it (the clean image, before any fault)
  kDropped,     // the link lost it
  kBlackout,    // the link lost it inside a blackout window
  kCorrupted,   // the link flipped a bit (it is still delivered)
  kDuplicated,  // the link will deliver it twice
  kDelivered,   // handed to the receiving Device
  kUnroutable,  // no Device port has its DLID
};
const char* to_string(TraceKind k);

struct TraceRecord {
  TraceKind kind = TraceKind::kSent;
  TimeNs time_ns = 0;
  int src_device = -1;
  int dst_device = -1;
  // The wire image (LRH..VCRC). In kModel it is materialized only when a trace hook is set.
  std::span<const std::uint8_t> wire{};
};

struct SimConfig {
  CrcMode crc = CrcMode::kCompute;
  std::uint64_t events_max = 2'000'000;
  TimeNs time_ns_max = 60'000'000'000ULL;  // 60 s of virtual time
};

class Sim {
 public:
  explicit Sim(const SimConfig& config) : config_(config) {}

  // Returns the device index. Its ports' LIDs are read now (routing table).
  int add_device(Device* device);
  // Joins devices a and b: a->b uses ab, b->a uses ba; each with its own fault stream.
  void connect(int a, int b, const LinkConfig& ab, const LinkConfig& ba, std::uint64_t seed);
  LinkDirection* link(int from, int to);

  // Runs fn at virtual time t (>= now). Devices are serviced after it.
  void at(TimeNs t, std::function<void(TimeNs)> fn);

  // Called with every packet event; also feeds pcap writers and verbose logs.
  // materialize_wire: in kModel, build the full wire image for the hook (pcap, logs); otherwise
  // the hook sees the header block followed by the payload.
  void set_trace(std::function<void(const TraceRecord&)> hook, bool materialize_wire = true) {
    trace_ = std::move(hook);
    materialize_ = materialize_wire;
  }
  // Called after every event, once the Devices have been serviced (e.g. to poll CQs).
  void set_after_event(std::function<void(TimeNs)> hook) { after_event_ = std::move(hook); }

  // Processes one event. Returns false when the queue is empty or a limit is reached.
  bool step();
  // Runs until done() (checked after every event) or the queue empties or a limit is reached.
  // Returns true if done() became true.
  bool run_until(const std::function<bool()>& done);

  TimeNs now() const { return now_; }
  std::uint64_t events() const { return events_; }
  bool limit_reached() const { return limit_reached_; }
  std::uint64_t trace_hash() const { return hash_.value(); }
  // Packets (and user actions) still scheduled, not counting device deadlines.
  std::size_t pending_non_deadline() const { return pending_packets_ + pending_user_; }
  std::uint64_t unroutable() const { return unroutable_; }
  Device* device(int i) const { return devices_[static_cast<std::size_t>(i)].dev; }
  int device_count() const { return static_cast<int>(devices_.size()); }

 private:
  enum class EvKind : std::uint8_t { kDeliver, kDeadline, kUser };
  struct Event {
    TimeNs time;
    std::uint64_t seq;
    EvKind kind;
    int device;
    std::uint32_t slot;  // packet slot or user action slot
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  struct InFlight {
    std::vector<std::uint8_t> wire;     // kCompute: the whole image
    TxPacket ref{};                     // kModel: headers + payload pointer (into `payload`)
    std::vector<std::uint8_t> payload;  // kModel: the payload copy
    int src = -1;
  };
  struct Slot {
    Device* dev = nullptr;
    TimeNs armed_deadline = kNoDeadline;
  };
  struct Route {
    std::uint16_t lid;
    int device;
  };
  struct LinkEntry {
    int from, to;
    std::unique_ptr<LinkDirection> dir;
  };

  void push(TimeNs t, EvKind kind, int device, std::uint32_t slot);
  void service(int device);
  void transmit(int src, const TxPacket& pkt);
  std::uint32_t alloc_packet();
  void trace(TraceKind kind, int src, int dst, std::span<const std::uint8_t> wire);
  std::span<const std::uint8_t> image_for_trace(const InFlight& p);

  SimConfig config_;
  std::vector<Slot> devices_;
  std::vector<Route> routes_;
  std::vector<LinkEntry> links_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::vector<InFlight> packets_;
  std::vector<std::uint32_t> free_packets_;
  std::vector<std::function<void(TimeNs)>> user_;
  std::function<void(const TraceRecord&)> trace_;
  std::function<void(TimeNs)> after_event_;
  std::vector<std::uint8_t> scratch_;
  TraceHash hash_;
  TimeNs now_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t events_ = 0;
  std::size_t pending_packets_ = 0, pending_user_ = 0;
  std::uint64_t unroutable_ = 0;
  bool limit_reached_ = false;
  bool materialize_ = false;
};

}  // namespace weft::harness
