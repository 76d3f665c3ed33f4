// tests/sma/sma_test_util.hpp — builders for SMP/PMA request bytes and the two reference nodes
// the sma tests use (an 8-port switch and a 2-port CA). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "emu/sma/node_state.hpp"
#include "emu/sma/pma.hpp"
#include "emu/sma/sma.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/mad_attrs.hpp"

namespace weft::sma::test {

using Mad = std::array<std::uint8_t, wire::kMadBytes>;
using Data = std::array<std::uint8_t, wire::kSmpDataBytes>;

inline constexpr std::uint64_t kSwitchGuid = 0x0002C90300001000ull;
inline constexpr std::uint64_t kCaGuid = 0x0002C90300002000ull;
inline constexpr std::uint8_t kGet = 0x01, kSet = 0x02, kGetResp = 0x81;

inline NodeState test_switch() {
  return make_switch(
      {.node_guid = kSwitchGuid, .description = "weft-sw0", .num_ports = 8, .device_id = 0xB924});
}
inline NodeState test_ca() {
  return make_ca({.node_guid = kCaGuid,
                  .system_image_guid = 0x0002C90300002FFFull,
                  .description = "weft-hca0 mlx5_0",
                  .num_ports = 2,
                  .device_id = 0x1017});
}

inline Mad lid_smp(std::uint8_t method, std::uint16_t attr, std::uint32_t mod,
                   const Data& data = {}, std::uint64_t m_key = 0) {
  wire::SmpLid s;
  s.hdr.method = method;
  s.hdr.tid = 0x1234;
  s.hdr.attr_id = attr;
  s.hdr.attr_mod = mod;
  s.m_key = m_key;
  s.data = data;
  Mad m{};
  wire::encode_smp(s, m);
  return m;
}

// A directed-route request one hop from the SM (HopCnt 1) as it arrives at the target, i.e.
// after the SM's dr_send moved HopPtr to 1.
inline Mad dr_smp_1hop(std::uint8_t method, std::uint16_t attr, std::uint32_t mod,
                       const Data& data = {}, std::uint64_t m_key = 0) {
  wire::SmpDr s;
  s.hdr.method = method;
  s.hdr.tid = 0x5678;
  s.hdr.attr_id = attr;
  s.hdr.attr_mod = mod;
  s.hop_cnt = 1;
  s.initial_path[1] = 1;
  s.m_key = m_key;
  s.data = data;
  EXPECT_EQ(wire::dr_send(s).verdict, wire::DrVerdict::kForward);
  Mad m{};
  wire::encode_smp(s, m);
  return m;
}

inline std::uint16_t attr(wire::SmpAttr a) {
  return static_cast<std::uint16_t>(a);
}
inline std::uint16_t attr(wire::SmpAttrExt a) {
  return static_cast<std::uint16_t>(a);
}
inline std::uint16_t status(wire::MadStatus s) {
  return static_cast<std::uint16_t>(s);
}

// The 64 data bytes of an SMP (LID-routed or directed).
inline Data smp_data(const Mad& m) {
  Data d{};
  std::copy_n(m.begin() + 64, 64, d.begin());
  return d;
}
inline std::uint16_t be16(const Mad& m, std::size_t off) {
  return static_cast<std::uint16_t>((m[off] << 8) | m[off + 1]);
}

// Issues a one-hop directed-route request and checks the SMA answered back out in_port.
inline MadReply dr_request(NodeState& n, std::uint8_t in_port, std::uint8_t method, std::uint16_t a,
                           std::uint32_t mod, const Data& data = {}) {
  MadReply r = handle_smp(n, in_port, dr_smp_1hop(method, a, mod, data));
  EXPECT_EQ(r.action, SmpAction::kSendOut) << to_string(r.reason);
  EXPECT_EQ(r.out_port, in_port);
  EXPECT_TRUE(r.is_response);
  EXPECT_EQ(r.mad[3], kGetResp);
  EXPECT_EQ(be16(r.mad, 4) & 0x7FFF, r.status);
  EXPECT_TRUE(r.mad[4] & 0x80) << "D bit";
  return r;
}

}  // namespace weft::sma::test
