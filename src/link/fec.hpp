// link/fec.hpp — packet-level forward error correction: Reed-Solomon erasure coding through
// ISA-L, with a CRC32C per shard as the erasure locator.
//
// The scheme (Weft's, a model of the RS FEC that HDR and later links run below the packet;
// IBA vol 2 gives the PHY's RS(544,514), which corrects symbol errors without locators):
//   data stream  = packet bytes | zero pad | packet length (4 bytes, little endian)
//                  split into k data shards of S bytes (S a multiple of 16, the smallest that fits)
//   parity       = m shards from ISA-L ec_encode_data with a Cauchy matrix (gf_gen_cauchy1_matrix),
//                  so any k of the k+m shards rebuild the rest
//   codeword     = for each of the k+m shards: S bytes then CRC32C (ISA-L crc32_iscsi, seed ~0)
//                  of those bytes, 4 bytes little endian
// The decoder marks every shard whose CRC32C fails as erased. Up to m erased shards are rebuilt
// from the survivors (corrected_blocks counts them); with more, the codeword is uncorrectable and
// the data shards are passed on as received, so the packet's VCRC/ICRC checks fail downstream.
// Default k = 8, m = 2 (25 % parity; ISA-L's 8+2 figure in the anchors).
//
// FecCodec::judge is the timing-only twin: it decides correctable or not from the error bit
// positions alone, with exactly the codec's rule (a shard is lost if any of its S + 4 bytes is
// hit). It assumes CRC32C catches every corrupted shard (it misses one in 2^32).
//
// Thread-safety: a FecCodec is single-owner (decode uses scratch space it owns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::link {

inline constexpr std::size_t kFecShardsMax = 32;  // k + m
inline constexpr std::size_t kFecShardCrcBytes = 4;
inline constexpr std::size_t kFecLengthBytes = 4;
inline constexpr std::size_t kFecShardAlignBytes = 16;
// Decode tables are cached per pattern of lost shards (inverting the matrix and expanding the
// tables costs microseconds, the rebuild itself a few hundred ns). C(10,1) + C(10,2) = 55
// patterns for 8 + 2; more than this many and the cache starts over.
inline constexpr std::size_t kFecDecodeCacheEntriesMax = 256;

struct FecConfig {
  std::uint8_t data_shards = 8;    // k
  std::uint8_t parity_shards = 2;  // m: shards that can be rebuilt
};

struct FecDecodeResult {
  std::size_t packet_bytes = 0;        // bytes written to the output
  std::uint32_t corrected_blocks = 0;  // shards rebuilt (data or parity)
  bool uncorrectable = false;          // more than m shards lost: output is as received
};

struct FecVerdict {
  std::uint32_t corrupted_blocks = 0;  // shards hit by at least one error
  bool uncorrectable = false;
  // Some error hit the packet's bytes or the length field, so an uncorrectable codeword
  // delivers a damaged packet (errors only in parity, CRCs or pad leave the packet intact).
  bool packet_damaged = false;
};

struct FecStats {
  std::uint64_t codewords = 0;
  std::uint64_t corrected_blocks = 0;
  std::uint64_t uncorrectable_codewords = 0;
};

class FecCodec {
 public:
  explicit FecCodec(FecConfig config = {});
  const FecConfig& config() const { return config_; }

  std::size_t shard_bytes(std::size_t packet_bytes) const;     // S
  std::size_t codeword_bytes(std::size_t packet_bytes) const;  // (k + m) * (S + 4)

  // Writes the codeword of `packet` into `codeword` (exactly codeword_bytes(packet.size())).
  void encode(std::span<const std::uint8_t> packet, std::span<std::uint8_t> codeword) const;
  std::vector<std::uint8_t> encode(std::span<const std::uint8_t> packet) const;

  // Repairs what it can and writes the packet to `packet_out` (which must hold the packet: at
  // most k * S - 4 bytes). The length comes from the codeword; if the codeword is
  // uncorrectable and the length is damaged it is clamped to the space there is.
  FecDecodeResult decode(std::span<const std::uint8_t> codeword,
                         std::span<std::uint8_t> packet_out);
  // Convenience form returning the packet.
  FecDecodeResult decode(std::span<const std::uint8_t> codeword,
                         std::vector<std::uint8_t>& packet_out);

  // Timing-only: the codec's verdict for this packet size and these error bit positions in
  // the codeword, without bytes.
  FecVerdict judge(std::size_t packet_bytes, std::span<const std::uint64_t> error_bits) const;

  const FecStats& stats() const { return stats_; }

 private:
  FecConfig config_;
  std::size_t k_, m_, n_;
  std::vector<std::uint8_t> encode_matrix_;  // n x k, top k rows the identity
  std::vector<std::uint8_t> encode_tables_;  // 32 * k * m
  std::vector<std::uint8_t> scratch_;        // k * S, the rebuilt data stream
  struct DecodePlan {
    std::uint32_t lost_mask = 0;
    std::uint8_t data_lost = 0;        // rows in tables
    std::vector<std::uint8_t> tables;  // 32 * k * data_lost
  };
  const DecodePlan& plan_for(std::uint32_t lost_mask);
  std::size_t checked_length(std::size_t len, std::size_t stream_bytes, std::size_t out_bytes,
                             FecDecodeResult& r);
  std::vector<DecodePlan> plans_;  // small: linear search
  FecStats stats_;
};

}  // namespace weft::link
