// link/vl_arbiter.hpp — SL-to-VL mapping and weighted VL arbitration of an output port
// (IBA 7.6.6 SLtoVLMappingTable, 7.6.9 VL arbitration, SMA attribute VLArbitrationTable, 14.2.5).
//
// The arbiter owns two tables, high and low priority, of up to 64 (VL, Weight) entries. Weight
// is in 64-byte units; an entry with weight 0 is skipped. The current entry keeps sending from
// its VL while its remaining weight is positive and the VL has a packet (with credit) ready; a
// packet longer than what is left is still sent and ends the entry (IBA 7.6.9). Then the next
// entry, cyclically. LimitOfHighPriority bounds how many bytes (in 4096-byte units; 255 means
// unbounded, 0 means one packet) the high table may send while a low-priority packet is waiting.
// VL15 goes before everything (IBA 7.6.9).
//
// Mode kDeficit (a Weft option, not the IBA's) carries a packet's overshoot into the entry's
// next turn, as deficit round robin does, so long-run byte shares match the weights exactly
// whatever the packet sizes. kIba is the default.
//
// Thread-safety: single-owner. No time: the caller asks for the next VL when the wire is free.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::link {

inline constexpr std::size_t kVlArbTableEntriesMax = 64;  // IBA 14.2.5, VLArbitrationTable
inline constexpr std::uint32_t kVlArbWeightBytes = 64;
inline constexpr std::uint32_t kHighPriorityLimitUnitBytes = 4096;
inline constexpr std::uint8_t kHighPriorityUnbounded = 255;
inline constexpr int kNoVl = -1;

// SLtoVLMappingTable (IBA 7.6.6): one per (input port, output port) pair on a switch, one per
// port on a CA. SL15 maps to VL15 only for management; data SLs map to data VLs.
struct SlToVlTable {
  std::array<std::uint8_t, 16> vl_of_sl{};  // all SLs on VL0 by default
  std::uint8_t map(std::uint8_t sl) const { return vl_of_sl[sl & 0xF]; }
};

struct VlArbEntry {
  std::uint8_t vl = 0;
  std::uint8_t weight = 0;  // 64-byte units; 0 = skip
};

enum class ArbitrationMode : std::uint8_t { kIba, kDeficit };

struct VlArbConfig {
  std::vector<VlArbEntry> high;  // at most kVlArbTableEntriesMax each
  std::vector<VlArbEntry> low;
  std::uint8_t limit_of_high_priority = 0;  // 4096-byte units; 255 unbounded; 0 one packet
  ArbitrationMode mode = ArbitrationMode::kIba;
};

class VlArbiter {
 public:
  explicit VlArbiter(VlArbConfig config);

  // head_bytes[vl] is the wire size of the packet at the head of `vl` if it is ready to go
  // (queued and, for data VLs, within link credit), else 0. Returns the VL to send from and
  // charges that packet to the arbitration state, or kNoVl when nothing is ready.
  int next(std::span<const std::uint32_t, 16> head_bytes);

 private:
  struct Table {
    std::vector<VlArbEntry> entries;
    std::size_t index = 0;
    std::int64_t remaining_bytes = 0;         // of the current entry
    bool entered = false;                     // remaining_bytes set for the current entry
    std::vector<std::int64_t> deficit_bytes;  // per entry, kDeficit only (<= 0)
  };
  bool ready(const Table& t, std::span<const std::uint32_t, 16> head) const;
  int pick(Table& t, std::span<const std::uint32_t, 16> head);
  void advance(Table& t);

  VlArbConfig config_;
  Table high_, low_;
  std::uint64_t high_bytes_since_low_ = 0;
};

}  // namespace weft::link
