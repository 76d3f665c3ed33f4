// emu/harness/describe.cpp — packet and completion descriptions (see describe.hpp).
#include "emu/harness/describe.hpp"

#include <cinttypes>
#include <cstdio>

#include "src/wire/packet.hpp"

namespace weft::harness {

namespace {
wire::ParseOptions no_crc() {
  wire::ParseOptions o;
  o.check_icrc = false;
  o.check_vcrc = false;
  return o;
}
const char* aeth_name(std::uint8_t syndrome) {
  switch (wire::aeth_kind(syndrome)) {
    case wire::AethKind::kAck:
      return "ACK";
    case wire::AethKind::kRnrNak:
      return "RNR-NAK";
    case wire::AethKind::kNak:
      switch (static_cast<wire::NakCode>(wire::aeth_value(syndrome))) {
        case wire::NakCode::kPsnSequenceError:
          return "NAK(PSN sequence error)";
        case wire::NakCode::kInvalidRequest:
          return "NAK(invalid request)";
        case wire::NakCode::kRemoteAccessError:
          return "NAK(remote access error)";
        case wire::NakCode::kRemoteOperationalError:
          return "NAK(remote operational error)";
        case wire::NakCode::kInvalidRdRequest:
          return "NAK(invalid RD request)";
      }
      return "NAK(?)";
    case wire::AethKind::kReserved:
      return "AETH(reserved)";
  }
  return "?";
}
}  // namespace

std::string format_time(std::uint64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRIu64 ".%03" PRIu64 "us", ns / 1000, ns % 1000);
  return buf;
}

int packet_opcode(std::span<const std::uint8_t> w) {
  auto p = wire::parse_packet(w, no_crc());
  if (!p.ok()) return -1;
  return static_cast<int>(p->h.bth.opcode);
}

bool packet_psn(std::span<const std::uint8_t> w, std::uint32_t& dest_qp, std::uint32_t& psn) {
  auto p = wire::parse_packet(w, no_crc());
  if (!p.ok()) return false;
  dest_qp = p->h.bth.dest_qp;
  psn = p->h.bth.psn;
  return true;
}

std::string describe_packet(std::span<const std::uint8_t> w) {
  auto p = wire::parse_packet(w, no_crc());
  if (!p.ok()) return std::string("<malformed: ") + std::string(wire::to_string(p.error())) + ">";
  const wire::Headers& h = p->h;
  const auto& info = wire::opcode_info(h.bth.opcode);
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "%-24.*s lid %u->%u qp=0x%06x psn=%u",
                        static_cast<int>(info.name.size()), info.name.data(), h.lrh.slid,
                        h.lrh.dlid, h.bth.dest_qp, h.bth.psn);
  auto add = [&](const char* fmt, auto... args) {
    if (n > 0 && static_cast<std::size_t>(n) < sizeof buf) {
      n += std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), fmt, args...);
    }
  };
  if (info.mask & wire::kHasReth)
    add(" va=0x%" PRIx64 " rkey=0x%x dmalen=%u", h.reth.va, h.reth.rkey, h.reth.dma_len);
  if (info.mask & wire::kHasAeth) add(" %s msn=%u", aeth_name(h.aeth.syndrome), h.aeth.msn);
  if (info.mask & wire::kHasAtomicEth)
    add(" va=0x%" PRIx64 " swap/add=%" PRIu64 " cmp=%" PRIu64, h.atomic_eth.va,
        h.atomic_eth.swap_add, h.atomic_eth.compare);
  if (info.mask & wire::kHasAtomicAckEth) add(" orig=%" PRIu64, h.atomic_ack_eth.orig);
  if (info.mask & wire::kHasDeth) add(" src_qp=0x%x", h.deth.src_qp);
  if (info.mask & wire::kHasImm) add(" imm=0x%x", h.imm);
  if (!p->payload.empty()) add(" len=%zu", p->payload.size());
  if (h.bth.ack_req) add(" ack_req");
  return buf;
}

std::string describe_completion(const WorkCompletion& wc) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "wr_id=%" PRIu64 " %-18.*s %-14.*s qp=0x%x len=%u%s", wc.wr_id,
                static_cast<int>(to_string(wc.opcode).size()), to_string(wc.opcode).data(),
                static_cast<int>(to_string(wc.status).size()), to_string(wc.status).data(),
                wc.qp_num, wc.byte_len, (wc.wc_flags & kWcWithImm) ? " +imm" : "");
  return buf;
}

}  // namespace weft::harness
