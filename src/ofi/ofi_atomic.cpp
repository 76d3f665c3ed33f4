// FI_ATOMIC: which (operation, datatype) pairs the provider offers and how the target executes
// them. Every weft atomic is executed in software by the provider of the process that owns the
// target memory (the wire carries a request and a response, see ofi_ep.cpp), under one
// process-wide mutex: so each is atomic with respect to every other weft atomic on that memory,
// whatever its operation, type or initiator (the engine's own FETCH_ADD/CMP_SWAP are not used,
// so there is no second path that could interleave). RMA reads and writes are not atomic with
// respect to them, as fi_atomic(3) allows.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

std::mutex g_atomic_mu;

bool is_int(fi_datatype dt) {
  return dt >= FI_INT8 && dt <= FI_UINT64;
}
bool is_bitwise(fi_op op) {
  return op == FI_BOR || op == FI_BAND || op == FI_BXOR || op == FI_MSWAP;
}

// Integer sums and products wrap (computed in 64-bit unsigned: no signed overflow, no promotion
// of small types to int).
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  else
    return a + b;
}
template <class T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
  else
    return a * b;
}

template <class T>
void apply(fi_op op, T* dst, const T* src, const T* cmp, T* res, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T d, s{}, c{};
    std::memcpy(&d, dst + i, sizeof(T));  // target memory need not be aligned
    if (src) std::memcpy(&s, src + i, sizeof(T));
    if (cmp) std::memcpy(&c, cmp + i, sizeof(T));
    if (res) std::memcpy(res + i, &d, sizeof(T));
    T v = d;
    switch (op) {
      case FI_MIN:
        v = s < d ? s : d;
        break;
      case FI_MAX:
        v = s > d ? s : d;
        break;
      case FI_SUM:
        v = add(d, s);
        break;
      case FI_PROD:
        v = mul(d, s);
        break;
      case FI_LOR:
        v = static_cast<T>((d != 0) || (s != 0));
        break;
      case FI_LAND:
        v = static_cast<T>((d != 0) && (s != 0));
        break;
      case FI_LXOR:
        v = static_cast<T>((d != 0) != (s != 0));
        break;
      case FI_ATOMIC_READ:
        break;
      case FI_ATOMIC_WRITE:
        v = s;
        break;
      case FI_CSWAP:
        if (c == d) v = s;
        break;
      case FI_CSWAP_NE:
        if (c != d) v = s;
        break;
      case FI_CSWAP_LE:
        if (c <= d) v = s;
        break;
      case FI_CSWAP_LT:
        if (c < d) v = s;
        break;
      case FI_CSWAP_GE:
        if (c >= d) v = s;
        break;
      case FI_CSWAP_GT:
        if (c > d) v = s;
        break;
      default:
        if constexpr (std::is_integral_v<T>) {
          if (op == FI_BOR) v = static_cast<T>(d | s);
          if (op == FI_BAND) v = static_cast<T>(d & s);
          if (op == FI_BXOR) v = static_cast<T>(d ^ s);
          if (op == FI_MSWAP) v = static_cast<T>((s & c) | (d & ~c));
        }
        break;
    }
    if (op != FI_ATOMIC_READ) std::memcpy(dst + i, &v, sizeof(T));
  }
}

template <class T>
void apply_bytes(fi_op op, void* dst, const void* src, const void* cmp, void* res, std::size_t n) {
  apply<T>(op, static_cast<T*>(dst), static_cast<const T*>(src), static_cast<const T*>(cmp),
           static_cast<T*>(res), n);
}

}  // namespace

std::size_t atomic_type_size(fi_datatype dt) {
  switch (dt) {
    case FI_INT8:
    case FI_UINT8:
      return 1;
    case FI_INT16:
    case FI_UINT16:
      return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT:
      return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE:
      return 8;
    default:
      return 0;  // complex and long double types are not offered
  }
}

bool atomic_valid(AtomicKind kind, fi_op op, fi_datatype dt) {
  if (atomic_type_size(dt) == 0) return false;
  if (is_bitwise(op) && !is_int(dt)) return false;
  switch (kind) {
    case AtomicKind::kWrite:
      return (op >= FI_MIN && op <= FI_BXOR) || op == FI_ATOMIC_WRITE;
    case AtomicKind::kFetch:
      return (op >= FI_MIN && op <= FI_BXOR) || op == FI_ATOMIC_READ || op == FI_ATOMIC_WRITE;
    case AtomicKind::kCompare:
      return op >= FI_CSWAP && op <= FI_MSWAP;
  }
  return false;
}

std::size_t atomic_max_count(AtomicKind kind, fi_datatype dt) {
  const std::size_t sz = atomic_type_size(dt);
  if (!sz) return 0;
  // The request (operand, and compare values) and the response (old values) each travel in one
  // eager message.
  return g_params.eager_bytes / (sz * (kind == AtomicKind::kCompare ? 2 : 1));
}

void atomic_execute(fi_op op, fi_datatype dt, void* dst, const void* operand, const void* compare,
                    void* result, std::size_t count) {
  std::lock_guard lk(g_atomic_mu);
  switch (dt) {
    case FI_INT8:
      apply_bytes<std::int8_t>(op, dst, operand, compare, result, count);
      break;
    case FI_UINT8:
      apply_bytes<std::uint8_t>(op, dst, operand, compare, result, count);
      break;
    case FI_INT16:
      apply_bytes<std::int16_t>(op, dst, operand, compare, result, count);
      break;
    case FI_UINT16:
      apply_bytes<std::uint16_t>(op, dst, operand, compare, result, count);
      break;
    case FI_INT32:
      apply_bytes<std::int32_t>(op, dst, operand, compare, result, count);
      break;
    case FI_UINT32:
      apply_bytes<std::uint32_t>(op, dst, operand, compare, result, count);
      break;
    case FI_INT64:
      apply_bytes<std::int64_t>(op, dst, operand, compare, result, count);
      break;
    case FI_UINT64:
      apply_bytes<std::uint64_t>(op, dst, operand, compare, result, count);
      break;
    case FI_FLOAT:
      apply_bytes<float>(op, dst, operand, compare, result, count);
      break;
    case FI_DOUBLE:
      apply_bytes<double>(op, dst, operand, compare, result, count);
      break;
    default:
      break;
  }
}

}  // namespace weft::ofi
