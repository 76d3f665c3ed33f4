// tests/wire/wire_test_util.hpp — helpers shared by the wire tests: realistic headers for any
// opcode, a payload size legal for it, and running an external tool (tshark, python3).
#pragma once

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include <weft/types.hpp>

#include "src/wire/packet.hpp"

namespace weft::wire::test {

inline const std::vector<Opcode>& all_opcodes() {
  static const std::vector<Opcode> ops = [] {
    std::vector<Opcode> v;
    for (unsigned i = 0; i < 256; ++i)
      if (opcode_info(static_cast<std::uint8_t>(i)).valid) v.push_back(static_cast<Opcode>(i));
    return v;
  }();
  return ops;
}

// A payload size legal for the opcode: FIRST/MIDDLE carry a whole (small) PMTU of 256 bytes,
// LAST/ONLY an odd size so the pad is exercised, no-payload opcodes 0.
inline std::size_t payload_size_for(Opcode op, std::size_t salt = 0) {
  const auto m = opcode_info(op).mask;
  if (!(m & kHasPayload)) return 0;
  if ((m & (kIsFirst | kIsMiddle)) && !(m & kIsOnly)) return 256;
  return 13 + salt % 40;
}

// Headers as a real HCA would send them; every field differs from its default so a field that
// is dropped or misplaced changes the result.
inline Headers make_headers(Opcode op, bool grh, std::uint64_t seed = 1) {
  SeededRng rng(seed);
  Headers h;
  h.lrh.vl = 2;
  h.lrh.sl = 3;
  h.lrh.dlid = 0x0013;
  h.lrh.slid = 0x0007;
  h.has_grh = grh;
  if (grh) {
    h.grh.tclass = 0x48;
    h.grh.flow_label = 0x12345;
    h.grh.hop_limit = 63;
    const std::uint8_t prefix[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8; ++i) h.grh.sgid[i] = h.grh.dgid[i] = prefix[i];
    for (int i = 8; i < 16; ++i) {
      h.grh.sgid[i] = static_cast<std::uint8_t>(rng.next_u64());
      h.grh.dgid[i] = static_cast<std::uint8_t>(rng.next_u64());
    }
  }
  h.bth.opcode = op;
  const auto m = opcode_info(op).mask;
  h.bth.se = (m & kIsLast) && (m & kIsSend);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x000100 | static_cast<std::uint32_t>(rng.below(0xFF));
  h.bth.ack_req = (m & kIsLast) && (m & kIsRequest);
  h.bth.psn = static_cast<std::uint32_t>(rng.below(1u << 24));
  h.reth = {0x00007f3a12345000ULL + rng.below(4096), 0x1234abcd,
            static_cast<std::uint32_t>(payload_size_for(op) + 4096)};
  h.aeth = {aeth_syndrome(AethKind::kAck, 5), static_cast<std::uint32_t>(rng.below(1u << 24))};
  h.atomic_eth = {0x00007f3a12346000ULL, 0x0badf00d, 0x1111222233334444ULL, 0x5555666677778888ULL};
  h.atomic_ack_eth = {0x0123456789abcdefULL};
  h.deth = {0x11223344, 0x00ABCDEF};
  h.imm = 0xdeadbeef;
  h.ieth = {0x00c0ffee};
  return h;
}

inline std::vector<std::uint8_t> build(const Headers& h, std::size_t payload_bytes,
                                       std::uint8_t fill = 0x5A) {
  std::vector<std::uint8_t> payload(payload_bytes);
  for (std::size_t i = 0; i < payload_bytes; ++i) payload[i] = static_cast<std::uint8_t>(fill + i);
  std::vector<std::uint8_t> out(wire_bytes(h, payload_bytes));
  out.resize(encode_packet(h, payload, out));
  return out;
}

struct CommandResult {
  int status = -1;
  std::string out;
};
inline CommandResult run(const std::string& cmd) {
  CommandResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = ::pclose(p);
  return r;
}
inline bool have_tool(const std::string& name) {
  return run("command -v " + name + " >/dev/null 2>&1").status == 0;
}

inline std::string hex(std::span<const std::uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

}  // namespace weft::wire::test
