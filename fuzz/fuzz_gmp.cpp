// fuzz/fuzz_gmp.cpp — libFuzzer target for the GMP decoders: RMPP header, SA MADs and the
// PathRecord / NodeRecord / PortInfoRecord layouts, CM messages and Weft's CM private-data
// header. Whatever decodes must re-encode and decode to the same value (reserved bits aside).
#include <array>

#include "src/base/assert.hpp"
#include "src/wire/cm.hpp"
#include "src/wire/gmp.hpp"
#include "src/wire/sa.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::wire;
  const std::span<const std::uint8_t> in(data, size);
  (void)decode_gmp_header(in);
  (void)decode_rmpp(in);
  (void)decode_weft_cm_header(in);
  std::array<std::uint8_t, kMadBytes> out{};
  if (auto s = decode_sa(in); s.ok()) {
    const SaMad& m = s.value();
    const auto d = std::span<const std::uint8_t, kSaDataBytes>(m.data);
    const PathRecord p = decode_path_record(d.first<kPathRecordBytes>());
    std::array<std::uint8_t, kPathRecordBytes> pb{};
    encode(p, pb);
    WEFT_ASSERT(decode_path_record(pb) == p);
    const NodeRecord n = decode_node_record(d.first<kNodeRecordBytes>());
    std::array<std::uint8_t, kNodeRecordBytes> nb{};
    encode(n, nb);
    WEFT_ASSERT(decode_node_record(nb).node_info.node_guid == n.node_info.node_guid);
    const PortInfoRecord r = decode_port_info_record(d.first<kPortInfoRecordBytes>());
    std::array<std::uint8_t, kPortInfoRecordBytes> rb{};
    encode(r, rb);
    WEFT_ASSERT(decode_port_info_record(rb).port_info.lid == r.port_info.lid);
    encode_sa(m, out);
    auto again = decode_sa(out);
    WEFT_ASSERT(again.ok() && again.value().comp_mask == m.comp_mask &&
                again.value().data == m.data);
  }
  if (auto c = decode_cm(in); c.ok()) {
    encode_cm(c.value().hdr.tid, c.value().msg, out);
    auto again = decode_cm(out);
    WEFT_ASSERT(again.ok() && again.value().msg == c.value().msg);
  }
  return 0;
}
