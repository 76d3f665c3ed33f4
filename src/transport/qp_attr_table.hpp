// transport/qp_attr_table.hpp — the QP state transition table of IBA 11.2.5.3 (Table 92/93
// "QP attributes required and optional per transition", as ibv_modify_qp(3) documents it):
// which transitions exist per service type, and which attributes each requires and allows.
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>

#include <weft/verbs.hpp>

namespace weft::transport {

struct TransitionRule {
  bool valid = false;
  std::uint32_t required = 0;  // QpAttrMask bits, kQpState included when the state changes
  std::uint32_t optional = 0;
};

TransitionRule transition_rule(QpType type, QpState from, QpState to);

}  // namespace weft::transport
