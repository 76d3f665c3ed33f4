// fuzz/fuzz_gmp.cpp — libFuzzer target for the GMP decoders: RMPP header, SA MADs and the
// PathRecord / NodeRecord / PortInfoRecord / P_KeyTableRecord / ServiceRecord / MCMemberRecord
// layouts, CM messages, SIDR_REQ / SIDR_REP and Weft's CM private-data header. Whatever decodes
// must re-encode and decode to the same value (reserved bits aside).
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
    const PKeyTableRecord k = decode_pkey_table_record(d.first<kPKeyTableRecordBytes>());
    std::array<std::uint8_t, kPKeyTableRecordBytes> kb{};
    encode(k, kb);
    WEFT_ASSERT(decode_pkey_table_record(kb) == k);
    const ServiceRecord sr = decode_service_record(d.first<kServiceRecordBytes>());
    std::array<std::uint8_t, kServiceRecordBytes> sb{};
    encode(sr, sb);
    WEFT_ASSERT(decode_service_record(sb) == sr);
    const McMemberRecord mc = decode_mcmember_record(d.first<kMcMemberRecordBytes>());
    std::array<std::uint8_t, kMcMemberRecordBytes> mb{};
    encode(mc, mb);
    WEFT_ASSERT(decode_mcmember_record(mb) == mc);
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
  if (auto q = decode_sidr_req(in); q.ok()) {
    encode_sidr(1, q.value(), out);
    WEFT_ASSERT(decode_sidr_req(out).value() == q.value());
  }
  if (auto r = decode_sidr_rep(in); r.ok()) {
    encode_sidr(1, r.value(), out);
    WEFT_ASSERT(decode_sidr_rep(out).value() == r.value());
  }
  return 0;
}
