// emu/harness/describe.hpp — one-line, human-readable descriptions of packets and completions for
// verbose logs and the demo ("RC SEND_FIRST qp=0x12 psn=7 len=256 ack_req").
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <weft/verbs.hpp>

namespace weft::harness {

// Parses without CRC checks (a corrupted packet is still described). Unparseable: "<malformed>".
std::string describe_packet(std::span<const std::uint8_t> wire);
// The BTH opcode byte, or -1 if the packet does not parse.
int packet_opcode(std::span<const std::uint8_t> wire);
// "psn" of a parseable packet and its BTH.DestQP; false if it does not parse.
bool packet_psn(std::span<const std::uint8_t> wire, std::uint32_t& dest_qp, std::uint32_t& psn);
std::string describe_completion(const WorkCompletion& wc);
// "12.345us" style virtual time.
std::string format_time(std::uint64_t ns);

}  // namespace weft::harness
