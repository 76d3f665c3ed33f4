// wire/pcap.cpp — the classic pcap format (tcpdump.org "pcap file format") with nanosecond
// timestamps. Headers are written field by field in little-endian order so the file is the
// same on every host.
#include "src/wire/pcap.hpp"

#include <algorithm>

namespace weft::wire {
namespace {

void le16(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
void le32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t rd32(const std::uint8_t* p, bool swapped) {
  const std::uint32_t le = std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) |
                           (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
  if (!swapped) return le;
  return ((le & 0xFF) << 24) | ((le & 0xFF00) << 8) | ((le >> 8) & 0xFF00) | (le >> 24);
}
constexpr std::uint32_t kPcapMagicUs = 0xA1B2C3D4;
constexpr std::uint32_t kRecordMax = 1u << 24;  // refuse absurd records in damaged files

}  // namespace

PcapWriter::~PcapWriter() {
  close();
}

bool PcapWriter::open(const std::string& path, std::uint32_t linktype) {
  close();
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) return false;
  linktype_ = linktype;
  std::uint8_t h[24];
  le32(h, kPcapMagicNs);
  le16(h + 4, 2);  // version 2.4
  le16(h + 6, 4);
  le32(h + 8, 0);   // thiszone
  le32(h + 12, 0);  // sigfigs
  le32(h + 16, kPcapSnaplen);
  le32(h + 20, linktype);
  if (std::fwrite(h, 1, sizeof h, file_) != sizeof h) {
    close();
    return false;
  }
  return true;
}

void PcapWriter::write(TimeNs ts_ns, std::span<const std::uint8_t> frame) {
  if (!file_) return;
  const bool erf = linktype_ == kLinktypeErf;
  const std::size_t extra = erf ? kErfHeaderBytes : 0;
  const auto cap =
      static_cast<std::uint32_t>(std::min<std::size_t>(frame.size(), kPcapSnaplen - extra));
  std::uint8_t h[16];
  le32(h, static_cast<std::uint32_t>(ts_ns / 1'000'000'000));
  le32(h + 4, static_cast<std::uint32_t>(ts_ns % 1'000'000'000));
  le32(h + 8, static_cast<std::uint32_t>(cap + extra));
  le32(h + 12, static_cast<std::uint32_t>(frame.size() + extra));
  std::fwrite(h, 1, sizeof h, file_);
  if (erf) {
    // ERF record header (Endace ERF types guide): 64-bit little-endian timestamp, seconds in
    // the high word and a binary fraction in the low; type; flags (0x04: variable length, no
    // padding to 8 bytes); record length and wire length big-endian.
    std::uint8_t e[kErfHeaderBytes]{};
    const std::uint64_t frac = ((ts_ns % 1'000'000'000) << 32) / 1'000'000'000;
    const std::uint64_t ts = ((ts_ns / 1'000'000'000) << 32) | frac;
    for (int i = 0; i < 8; ++i) e[i] = static_cast<std::uint8_t>(ts >> (8 * i));
    e[8] = 21;  // ERF_TYPE_INFINIBAND
    e[9] = 0x04;
    const std::uint32_t rlen = static_cast<std::uint32_t>(kErfHeaderBytes + cap);
    e[10] = static_cast<std::uint8_t>(rlen >> 8);
    e[11] = static_cast<std::uint8_t>(rlen);
    e[14] = static_cast<std::uint8_t>(frame.size() >> 8);
    e[15] = static_cast<std::uint8_t>(frame.size());
    std::fwrite(e, 1, sizeof e, file_);
  }
  if (cap) std::fwrite(frame.data(), 1, cap, file_);
}

void PcapWriter::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

PcapReader::~PcapReader() {
  close();
}

bool PcapReader::open(const std::string& path) {
  close();
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) return false;
  std::uint8_t h[24];
  if (std::fread(h, 1, sizeof h, file_) != sizeof h) {
    close();
    return false;
  }
  const std::uint32_t magic = rd32(h, false);
  if (magic == kPcapMagicNs || magic == kPcapMagicUs) {
    swapped_ = false;
  } else if (rd32(h, true) == kPcapMagicNs || rd32(h, true) == kPcapMagicUs) {
    swapped_ = true;
  } else {
    close();
    return false;
  }
  nanosecond_ = rd32(h, swapped_) == kPcapMagicNs;
  linktype_ = rd32(h + 20, swapped_);
  return true;
}

std::optional<PcapRecord> PcapReader::next() {
  if (!file_) return std::nullopt;
  std::uint8_t h[16];
  if (std::fread(h, 1, sizeof h, file_) != sizeof h) return std::nullopt;
  PcapRecord r;
  const std::uint64_t sec = rd32(h, swapped_), frac = rd32(h + 4, swapped_);
  r.ts_ns = sec * 1'000'000'000 + (nanosecond_ ? frac : frac * 1000);
  const std::uint32_t cap = rd32(h + 8, swapped_);
  r.orig_len = rd32(h + 12, swapped_);
  if (cap > kRecordMax) return std::nullopt;
  r.data.resize(cap);
  if (cap && std::fread(r.data.data(), 1, cap, file_) != cap) return std::nullopt;
  return r;
}

void PcapReader::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace weft::wire
