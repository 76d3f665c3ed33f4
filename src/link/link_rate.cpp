// link/link_rate.cpp — see link_rate.hpp.
#include "src/link/link_rate.hpp"

#include "src/base/assert.hpp"

namespace weft::link {

std::string_view to_string(LaneSpeed s) {
  switch (s) {
    case LaneSpeed::kSdr:
      return "SDR";
    case LaneSpeed::kDdr:
      return "DDR";
    case LaneSpeed::kQdr:
      return "QDR";
    case LaneSpeed::kFdr10:
      return "FDR10";
    case LaneSpeed::kFdr:
      return "FDR";
    case LaneSpeed::kEdr:
      return "EDR";
    case LaneSpeed::kHdr:
      return "HDR";
    case LaneSpeed::kNdr:
      return "NDR";
    case LaneSpeed::kXdr:
      return "XDR";
  }
  return "?";
}

std::string_view to_string(LinkWidth w) {
  switch (w) {
    case LinkWidth::k1x:
      return "1x";
    case LinkWidth::k4x:
      return "4x";
    case LinkWidth::k8x:
      return "8x";
    case LinkWidth::k12x:
      return "12x";
  }
  return "?";
}

BitRate lane_data_rate(LaneSpeed s) {
  switch (s) {
    case LaneSpeed::kSdr:
      return {2, 1};  // 2.5 GBd * 8/10
    case LaneSpeed::kDdr:
      return {4, 1};  // 5 GBd * 8/10
    case LaneSpeed::kQdr:
      return {8, 1};  // 10 GBd * 8/10
    case LaneSpeed::kFdr10:
      return {10, 1};  // 10.3125 GBd * 64/66
    case LaneSpeed::kFdr:
      return {150, 11};  // 14.0625 GBd * 64/66
    case LaneSpeed::kEdr:
      return {25, 1};  // 25.78125 GBd * 64/66
    case LaneSpeed::kHdr:
      return {50, 1};  // 53.125 Gb/s PAM4 less 256b/257b and RS FEC
    case LaneSpeed::kNdr:
      return {100, 1};
    case LaneSpeed::kXdr:
      return {200, 1};
  }
  WEFT_ASSERT(false);
  return {1, 1};
}

BitRate LinkRate::data_rate() const {
  BitRate lane = lane_data_rate(speed);
  return {lane.bits_num * static_cast<std::uint64_t>(width), lane.bits_den};
}

std::uint64_t LinkRate::symbol_time_ps() const {
  BitRate lane = lane_data_rate(speed);
  // 8 bits / (num/den bits per ns) = 8 * den / num ns = 8000 * den / num ps.
  return (8000 * lane.bits_den + lane.bits_num - 1) / lane.bits_num;
}

std::uint64_t serialization_ns(const LinkRate& rate, std::uint64_t bytes) {
  BitRate r = rate.data_rate();
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(bytes) * 8 * r.bits_den /
                                    r.bits_num);
}

SerialClock::SerialClock(LinkRate rate) : rate_(rate), r_(rate.data_rate()) {
  WEFT_ASSERT(r_.bits_num > 0 && r_.bits_den > 0);
}

std::uint64_t SerialClock::next_ns(std::uint64_t bytes) {
  unsigned __int128 scaled = static_cast<unsigned __int128>(bytes) * 8 * r_.bits_den + rem_;
  std::uint64_t ns = static_cast<std::uint64_t>(scaled / r_.bits_num);
  rem_ = static_cast<std::uint64_t>(scaled % r_.bits_num);
  return ns;
}

}  // namespace weft::link
