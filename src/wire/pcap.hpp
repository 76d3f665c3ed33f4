// wire/pcap.hpp — nanosecond-resolution pcap files (magic 0xA1B23C4D), so emulator runs can be
// opened in Wireshark: LINKTYPE_INFINIBAND (247) frames start at the LRH and end with the VCRC;
// LINKTYPE_ETHERNET (1) carries RoCEv2. Wireshark 4.0 (Debian 12) does not map linktype 247 to
// its InfiniBand dissector, so kLinktypeErf (197) wraps each IB frame in an Endace ERF record of
// type INFINIBAND (21), which every Wireshark since 1.0 decodes. PcapReader exists for tests
// and tools (it returns ERF records as written, header included).
// Thread-safety: one owner per object. Files are written with stdio (the emulator's I/O layer
// owns when this is called; nothing here reads a clock: timestamps are arguments).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <weft/types.hpp>

namespace weft::wire {

inline constexpr std::uint32_t kLinktypeInfiniband = 247, kLinktypeEthernet = 1, kLinktypeErf = 197;
inline constexpr std::size_t kErfHeaderBytes = 16;
inline constexpr std::uint32_t kPcapMagicNs = 0xA1B23C4D;
inline constexpr std::uint32_t kPcapSnaplen = 65535;

class PcapWriter {
 public:
  PcapWriter() = default;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter();
  // Creates (truncates) path and writes the file header; false if the file cannot be opened.
  bool open(const std::string& path, std::uint32_t linktype = kLinktypeInfiniband);
  // Appends one record; frames longer than the snap length are truncated in the record. With
  // kLinktypeErf the frame is an IB packet (LRH..VCRC) and gets an ERF header in front.
  void write(TimeNs ts_ns, std::span<const std::uint8_t> frame);
  void close();
  bool is_open() const { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
  std::uint32_t linktype_ = kLinktypeInfiniband;
};

struct PcapRecord {
  TimeNs ts_ns = 0;
  std::uint32_t orig_len = 0;
  std::vector<std::uint8_t> data;
};

class PcapReader {
 public:
  PcapReader() = default;
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;
  ~PcapReader();
  // Accepts nanosecond and microsecond files in either byte order.
  bool open(const std::string& path);
  // The next record, or nullopt at the end of the file or on a short record.
  std::optional<PcapRecord> next();
  std::uint32_t linktype() const { return linktype_; }
  bool nanosecond() const { return nanosecond_; }
  void close();

 private:
  std::FILE* file_ = nullptr;
  bool swapped_ = false;
  bool nanosecond_ = true;
  std::uint32_t linktype_ = 0;
};

}  // namespace weft::wire
