// coll/pattern.hpp — the inputs that make collective results checkable byte for byte: element i
// of rank r's send buffer is a small integer, so every reduction order gives exact results in
// every type (bf16 and f16 included), and any rank can rebuild any other rank's input.
// Shared by emu/collsim's verified runs and the live benchmark (src/coll/live).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/coll/types.hpp"

namespace weft::coll {

// Element i of rank r's send buffer for operation op (prod: ones and a few twos; min/max: 0..6;
// otherwise 0..3).
int pattern_value(RedOp op, int rank, std::size_t i);
// Stores v as element i of a buffer of type t.
void put_value(DataType t, std::uint8_t* p, std::size_t i, int v);
// Fills count elements of rank's send buffer, element `first` onwards (element index first + k).
void fill_pattern(DataType t, RedOp op, int rank, std::uint8_t* p, std::size_t count,
                  std::size_t first = 0);
// Elements (of es bytes) that differ between got and want.
std::uint64_t count_wrong(const std::uint8_t* got, const std::uint8_t* want, std::size_t count,
                          std::size_t es);

}  // namespace weft::coll
