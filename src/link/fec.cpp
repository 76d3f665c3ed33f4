// link/fec.cpp — see fec.hpp. Decoding follows ISA-L's ec_simple_example: invert the rows of
// the encode matrix that belong to k surviving shards, and apply the rows of the inverse that
// belong to the lost data shards.
#include "src/link/fec.hpp"

#include <algorithm>
#include <cstring>

#include <isa-l/crc.h>
#include <isa-l/erasure_code.h>

#include "src/base/assert.hpp"
#include "src/wire/crc_isal.hpp"

namespace weft::link {
namespace {

// ISA-L's kernels may leave the upper vector halves dirty: every call here is followed by
// wire::detail::after_isal_kernel() (src/wire/crc_isal.hpp says why).
std::uint32_t shard_crc(const std::uint8_t* p, std::size_t n) {
  const std::uint32_t crc =
      crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), 0xFFFFFFFFu);
  wire::detail::after_isal_kernel();
  return crc;
}
void put_le32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace

FecCodec::FecCodec(FecConfig config)
    : config_(config), k_(config.data_shards), m_(config.parity_shards), n_(k_ + m_) {
  WEFT_ASSERT(k_ >= 1 && m_ >= 1 && n_ <= kFecShardsMax);
  encode_matrix_.resize(n_ * k_);
  gf_gen_cauchy1_matrix(encode_matrix_.data(), static_cast<int>(n_), static_cast<int>(k_));
  encode_tables_.resize(32 * k_ * m_);
  ec_init_tables(static_cast<int>(k_), static_cast<int>(m_), &encode_matrix_[k_ * k_],
                 encode_tables_.data());
}

const FecCodec::DecodePlan& FecCodec::plan_for(std::uint32_t lost_mask) {
  for (const auto& p : plans_)
    if (p.lost_mask == lost_mask) return p;
  if (plans_.size() >= kFecDecodeCacheEntriesMax) plans_.clear();
  // The rows of the encode matrix that made k survivors, inverted: row i of the inverse
  // rebuilds data shard i from those survivors.
  std::uint8_t b[kFecShardsMax * kFecShardsMax], inv[kFecShardsMax * kFecShardsMax];
  std::uint8_t rows[kFecShardsMax * kFecShardsMax];
  for (std::size_t i = 0, r = 0; r < k_; ++i) {
    if (lost_mask & (1u << i)) continue;
    std::memcpy(&b[r++ * k_], &encode_matrix_[i * k_], k_);
  }
  int rc = gf_invert_matrix(b, inv, static_cast<int>(k_));
  WEFT_ASSERT_MSG(rc == 0, "Cauchy submatrix must be invertible");
  DecodePlan plan;
  plan.lost_mask = lost_mask;
  for (std::size_t i = 0; i < k_; ++i)
    if (lost_mask & (1u << i)) std::memcpy(&rows[plan.data_lost++ * k_], &inv[i * k_], k_);
  plan.tables.resize(32 * k_ * std::max<std::size_t>(plan.data_lost, 1));
  if (plan.data_lost > 0)
    ec_init_tables(static_cast<int>(k_), plan.data_lost, rows, plan.tables.data());
  plans_.push_back(std::move(plan));
  return plans_.back();
}

std::size_t FecCodec::shard_bytes(std::size_t packet_bytes) const {
  std::size_t s = (packet_bytes + kFecLengthBytes + k_ - 1) / k_;
  return (s + kFecShardAlignBytes - 1) / kFecShardAlignBytes * kFecShardAlignBytes;
}

std::size_t FecCodec::codeword_bytes(std::size_t packet_bytes) const {
  return n_ * (shard_bytes(packet_bytes) + kFecShardCrcBytes);
}

void FecCodec::encode(std::span<const std::uint8_t> packet, std::span<std::uint8_t> cw) const {
  const std::size_t s = shard_bytes(packet.size());
  const std::size_t stride = s + kFecShardCrcBytes;
  WEFT_ASSERT(cw.size() == n_ * stride && packet.size() <= UINT32_MAX);
  std::uint8_t* shards[kFecShardsMax];
  std::size_t off = 0;
  for (std::size_t i = 0; i < n_; ++i) {
    shards[i] = cw.data() + i * stride;
    if (i >= k_) continue;
    std::size_t take = std::min(s, packet.size() - std::min(off, packet.size()));
    if (take) std::memcpy(shards[i], packet.data() + off, take);
    std::memset(shards[i] + take, 0, s - take);
    off += take;
  }
  put_le32(shards[k_ - 1] + s - kFecLengthBytes, static_cast<std::uint32_t>(packet.size()));
  ec_encode_data(static_cast<int>(s), static_cast<int>(k_), static_cast<int>(m_),
                 const_cast<unsigned char*>(encode_tables_.data()), shards, shards + k_);
  wire::detail::after_isal_kernel();
  for (std::size_t i = 0; i < n_; ++i) put_le32(shards[i] + s, shard_crc(shards[i], s));
}

std::vector<std::uint8_t> FecCodec::encode(std::span<const std::uint8_t> packet) const {
  std::vector<std::uint8_t> cw(codeword_bytes(packet.size()));
  encode(packet, cw);
  return cw;
}

// The packet length from the trailer. A length that cannot be (larger than the data stream) in
// a codeword whose CRCs pass means the codeword was not made by encode(): report it as
// uncorrectable. A packet larger than the caller's buffer is the caller's bug.
std::size_t FecCodec::checked_length(std::size_t len, std::size_t stream_bytes,
                                     std::size_t out_bytes, FecDecodeResult& r) {
  const std::size_t cap = stream_bytes - kFecLengthBytes;
  if (len > cap && !r.uncorrectable) {
    r.uncorrectable = true;
    r.corrected_blocks = 0;
    ++stats_.uncorrectable_codewords;
  }
  if (r.uncorrectable) return std::min({len, cap, out_bytes});
  WEFT_ASSERT_MSG(len <= out_bytes, "packet_out is smaller than the packet");
  return len;
}

FecDecodeResult FecCodec::decode(std::span<const std::uint8_t> cw, std::span<std::uint8_t> out) {
  WEFT_ASSERT(cw.size() % n_ == 0 && cw.size() / n_ > kFecShardCrcBytes);
  const std::size_t stride = cw.size() / n_;
  const std::size_t s = stride - kFecShardCrcBytes;
  WEFT_ASSERT(s >= kFecLengthBytes);
  FecDecodeResult r;
  ++stats_.codewords;

  std::uint32_t lost_mask = 0;
  std::size_t nlost = 0, data_lost = 0;
  for (std::size_t i = 0; i < n_; ++i) {
    const std::uint8_t* p = cw.data() + i * stride;
    if (shard_crc(p, s) != get_le32(p + s)) {
      lost_mask |= 1u << i;
      ++nlost;
      if (i < k_) ++data_lost;
    }
  }

  if (data_lost == 0) {  // fast path: the data shards are good, copy them straight out
    if (nlost > 0) {
      r.corrected_blocks = static_cast<std::uint32_t>(nlost);
      stats_.corrected_blocks += nlost;
    }
    std::size_t len = checked_length(get_le32(cw.data() + (k_ - 1) * stride + s - kFecLengthBytes),
                                     k_ * s, out.size(), r);
    for (std::size_t i = 0, off = 0; off < len; ++i, off += s)
      std::memcpy(out.data() + off, cw.data() + i * stride, std::min(s, len - off));
    r.packet_bytes = len;
    return r;
  }

  scratch_.resize(k_ * s);
  std::uint8_t* data = scratch_.data();
  for (std::size_t i = 0; i < k_; ++i) std::memcpy(data + i * s, cw.data() + i * stride, s);

  if (nlost > m_) {
    r.uncorrectable = true;
    ++stats_.uncorrectable_codewords;
  } else {
    const DecodePlan& plan = plan_for(lost_mask);
    std::uint8_t* src[kFecShardsMax];
    std::uint8_t* dst[kFecShardsMax];
    for (std::size_t i = 0, r_i = 0; r_i < k_; ++i)
      if (!(lost_mask & (1u << i))) src[r_i++] = const_cast<std::uint8_t*>(cw.data() + i * stride);
    for (std::size_t i = 0, d = 0; i < k_; ++i)
      if (lost_mask & (1u << i)) dst[d++] = data + i * s;
    ec_encode_data(static_cast<int>(s), static_cast<int>(k_), plan.data_lost,
                   const_cast<std::uint8_t*>(plan.tables.data()), src, dst);
    wire::detail::after_isal_kernel();
    r.corrected_blocks = static_cast<std::uint32_t>(nlost);
    stats_.corrected_blocks += nlost;
  }

  std::size_t len =
      checked_length(get_le32(data + k_ * s - kFecLengthBytes), k_ * s, out.size(), r);
  std::memcpy(out.data(), data, len);
  r.packet_bytes = len;
  return r;
}

FecDecodeResult FecCodec::decode(std::span<const std::uint8_t> cw, std::vector<std::uint8_t>& out) {
  const std::size_t s = cw.size() / n_ - kFecShardCrcBytes;
  out.resize(k_ * s - kFecLengthBytes);
  FecDecodeResult r = decode(cw, std::span<std::uint8_t>(out));
  out.resize(r.packet_bytes);
  return r;
}

FecVerdict FecCodec::judge(std::size_t packet_bytes,
                           std::span<const std::uint64_t> error_bits) const {
  const std::size_t s = shard_bytes(packet_bytes);
  const std::size_t stride = s + kFecShardCrcBytes;
  bool hit[kFecShardsMax] = {};
  FecVerdict v;
  for (std::uint64_t b : error_bits) {
    std::size_t shard = static_cast<std::size_t>(b / 8 / stride);
    WEFT_ASSERT(shard < n_);
    std::size_t in_shard = static_cast<std::size_t>(b / 8 % stride);
    if (shard < k_ && in_shard < s) {
      std::size_t stream = shard * s + in_shard;  // offset in the data stream
      if (stream < packet_bytes || stream >= k_ * s - kFecLengthBytes) v.packet_damaged = true;
    }
    if (!hit[shard]) {
      hit[shard] = true;
      ++v.corrupted_blocks;
    }
  }
  v.uncorrectable = v.corrupted_blocks > m_;
  return v;
}

}  // namespace weft::link
