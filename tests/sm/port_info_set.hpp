// tests/sm/port_info_set.hpp — the SMP an SM sends to move one port: a LID-routed PortInfo Set
// carrying the port's current PortInfo with PortState / PortPhysicalState written
// (read-modify-write, IBA 14.2.5.6). Shared by the DirectFabric and packet-level fabric tests.
#pragma once

#include <array>
#include <cstdint>

#include "emu/sma/sma.hpp"
#include "src/wire/mad.hpp"

namespace weft::test_util {

inline std::array<std::uint8_t, wire::kMadBytes> port_info_set(const sma::PortState& ps,
                                                               std::uint8_t port,
                                                               wire::PortState state,
                                                               std::uint8_t phys,
                                                               std::uint64_t tid) {
  wire::PortInfo v;
  v.neighbor_mtu = ps.neighbor_mtu;
  v.hoq_life = ps.hoq_life;
  v.vl_stall_count = ps.vl_stall_count;
  v.port_state = state;
  v.port_phys_state = phys;
  wire::SmpLid s;
  s.hdr.mgmt_class = static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted);
  s.hdr.method = static_cast<std::uint8_t>(wire::MadMethod::kSet);
  s.hdr.tid = tid;
  s.hdr.attr_id = static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo);
  s.hdr.attr_mod = port;
  wire::encode(v, s.data);
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  wire::encode_smp(s, mad);
  return mad;
}

}  // namespace weft::test_util
