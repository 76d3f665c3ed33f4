// fuzz/fuzz_parse_headers.cpp — libFuzzer target for wire::parse_headers (the by-reference path)
// and wire::parse_transport_headers. The first two input bytes choose payload and pad sizes.
#include "src/wire/packet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::wire;
  if (size < 2) return 0;
  const std::size_t payload = std::size_t{data[0]} * 16;
  const auto pad = static_cast<std::uint8_t>(data[1] & 3);
  const std::span<const std::uint8_t> in(data + 2, size - 2);
  (void)parse_headers(in, payload, pad);
  Headers h;
  (void)parse_transport_headers(in, h);
  return 0;
}
