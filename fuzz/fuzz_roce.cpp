// fuzz/fuzz_roce.cpp — libFuzzer target for wire::parse_roce_v2 (Ethernet/IP/UDP/BTH frames).
#include "src/wire/roce.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::wire;
  const std::span<const std::uint8_t> in(data, size);
  (void)parse_roce_v2(in, false);
  (void)parse_roce_v2(in, true);
  return 0;
}
