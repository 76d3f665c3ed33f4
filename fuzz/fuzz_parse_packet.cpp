// fuzz/fuzz_parse_packet.cpp — libFuzzer target for wire::parse_packet. Any input must return a
// value or a WireError without reading outside the span (ASan checks), and an accepted packet
// must re-encode to the same header bytes.
#include <cstring>
#include <vector>

#include "src/base/assert.hpp"
#include "src/wire/packet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::wire;
  const std::span<const std::uint8_t> in(data, size);
  for (bool check : {false, true}) {
    auto p = parse_packet(in, {.check_icrc = check, .check_vcrc = check});
    if (!p.ok()) continue;
    std::vector<std::uint8_t> out(header_bytes(p->h));
    WEFT_ASSERT(out.size() == p->header_bytes);
    encode_headers(p->h, out);
    // Reserved bits are not kept, so compare the bytes the decoder understood: re-parse.
    auto q = parse_headers(out, p->payload.size(), p->h.bth.pad_cnt);
    WEFT_ASSERT(q.ok());
    WEFT_ASSERT(q->h.bth.psn == p->h.bth.psn && q->h.bth.dest_qp == p->h.bth.dest_qp);
  }
  return 0;
}
