// The flow-control packet (IBA 7.9.4.1): layout, LPCRC, errors.
#include "src/link/fc_packet.hpp"

#include <gtest/gtest.h>

#include <array>

#include "src/wire/packet.hpp"

namespace weft::link {
namespace {

TEST(FcPacket, LayoutAndLpcrc) {
  FcPacket p{FcOp::kNormal, 0xABC, 3, 0x123};
  std::array<std::uint8_t, kFcPacketBytes> b{};
  encode_fc_packet(p, b);
  // Expect: Op|FCTBS[11:8], FCTBS[7:0], VL|FCCL[11:8], FCCL[7:0], then the VCRC-style CRC.
  EXPECT_EQ(b[0], 0x0A);
  EXPECT_EQ(b[1], 0xBC);
  EXPECT_EQ(b[2], 0x31);
  EXPECT_EQ(b[3], 0x23);
  std::uint16_t crc = wire::vcrc(std::span<const std::uint8_t>(b.data(), 4));
  EXPECT_EQ(wire::get_vcrc(std::span<const std::uint8_t, 2>(b.data() + 4, 2)), crc);
  auto d = decode_fc_packet(b);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, p);

  FcPacket init{FcOp::kInit, 0, 14, 0xFFF};
  encode_fc_packet(init, b);
  EXPECT_EQ(b[0], 0x10);
  EXPECT_EQ(b[2], 0xEF);
  EXPECT_EQ(*decode_fc_packet(b), init);
}

TEST(FcPacket, Errors) {
  std::array<std::uint8_t, kFcPacketBytes> b{};
  encode_fc_packet({FcOp::kNormal, 1, 0, 2}, b);
  EXPECT_EQ(decode_fc_packet(std::span<const std::uint8_t>(b.data(), 5)).error(),
            FcError::kTruncated);
  for (std::size_t bit = 0; bit < kFcPacketBytes * 8; ++bit) {  // every single-bit error is caught
    auto c = b;
    c[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    EXPECT_EQ(decode_fc_packet(c).error(), FcError::kBadLpcrc) << "bit " << bit;
  }
  auto bad_op = b;
  bad_op[0] = 0x20;
  wire::put_vcrc(std::span<std::uint8_t, 2>(bad_op.data() + 4, 2),
                 wire::vcrc(std::span<const std::uint8_t>(bad_op.data(), 4)));
  EXPECT_EQ(decode_fc_packet(bad_op).error(), FcError::kBadOp);
  encode_fc_packet({FcOp::kNormal, 1, 15, 2}, b);
  EXPECT_EQ(decode_fc_packet(b).error(), FcError::kBadVl);
}

}  // namespace
}  // namespace weft::link
