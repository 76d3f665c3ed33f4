// fuzz/fuzz_mad.cpp — libFuzzer target for the MAD decoders (common header, LID-routed and
// directed-route SMPs, PMA) and the directed-route hop rules on whatever decodes.
#include "src/base/assert.hpp"
#include "src/wire/mad.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::wire;
  const std::span<const std::uint8_t> in(data, size);
  (void)decode_mad_header(in);
  if (auto s = decode_smp_lid(in); s.ok()) {
    (void)decode_node_info(s->data);
    (void)decode_port_info(s->data);
    (void)decode_switch_info(s->data);
  }
  if (auto s = decode_smp_dr(in); s.ok()) {
    const std::uint8_t in_port = size > 0 ? data[0] : 1;
    SmpDr a = *s;
    const DrDecision d = dr_receive(a, in_port, (in_port & 1) != 0, 36);
    WEFT_ASSERT(d.verdict != DrVerdict::kForward || (d.out_port >= 1 && d.out_port <= 36));
    WEFT_ASSERT(a.hop_ptr <= a.hop_cnt + 1);
    SmpDr b = *s;
    (void)dr_send(b);
  }
  if (auto p = decode_pma(in); p.ok()) {
    (void)decode_port_counters(p->data);
    (void)decode_port_counters_ext(p->data);
  }
  return 0;
}
