// emu/harness/demo.cpp — the narrated two-HCA demo (see demo.hpp).
#include "emu/harness/demo.hpp"

#include <cinttypes>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <weft/device.hpp>

#include "emu/harness/describe.hpp"
#include "emu/harness/memory.hpp"
#include "emu/harness/setup.hpp"
#include "emu/harness/sim.hpp"
#include "src/wire/packet.hpp"

namespace weft::harness {

namespace {

Mtu mtu_from_bytes(std::uint32_t b) {
  if (b <= 256) return Mtu::k256;
  if (b <= 512) return Mtu::k512;
  if (b <= 1024) return Mtu::k1024;
  if (b <= 2048) return Mtu::k2048;
  return Mtu::k4096;
}

const char* kWrNames[] = {"", "SEND", "RDMA_WRITE", "RDMA_READ", "CMP_AND_SWP", "FETCH_AND_ADD"};

}  // namespace

int run_demo(const DemoOptions& o, std::FILE* out) {
  std::fprintf(out,
               "Weft demo: two emulated HCAs joined by a lossy virtual link (virtual time).\n"
               "  seed %" PRIu64 "  (replay exactly: weft demo --seed %" PRIu64
               ")\n"
               "  link: 100 Gb/s, 2 us latency, drop %.1f%%, reorder %.1f%%, corrupt %.1f%%, "
               "duplicate %.1f%%\n"
               "  RC QP pair, path MTU %u, %s recovery, ICRC/VCRC computed and checked\n\n",
               o.seed, o.seed, o.drop * 100, o.reorder * 100, o.corrupt * 100, o.duplicate * 100,
               mtu_bytes(mtu_from_bytes(o.mtu_bytes)),
               o.selective_repeat ? "selective-repeat" : "go-back-N");

  SimConfig sc;
  sc.crc = CrcMode::kCompute;
  sc.events_max = 1'000'000;
  sc.time_ns_max = 10'000'000'000ULL;
  Sim sim(sc);
  SeededRng rng_a(o.seed * 3 + 1), rng_b(o.seed * 3 + 2), data_rng(o.seed);
  std::unique_ptr<Device> dev[2];
  ProtectionDomain* pd[2];
  for (int d = 0; d < 2; ++d) {
    DeviceConfig dc;
    dc.name = d == 0 ? "hcaA" : "hcaB";
    dc.node_guid = 0x0002c90300000001ULL + static_cast<std::uint64_t>(d);
    dc.ports[0].lid = static_cast<std::uint16_t>(d + 1);
    dev[d] = Device::create(dc, d == 0 ? static_cast<Rng&>(rng_a) : static_cast<Rng&>(rng_b));
    sim.add_device(dev[d].get());
    pd[d] = dev[d]->alloc_pd().value();
  }
  LinkConfig lc;
  lc.latency_ns = 2'000;
  lc.rate_mbps = 100'000;
  lc.drop = o.drop;
  lc.reorder = o.reorder;
  lc.corrupt = o.corrupt;
  lc.duplicate = o.duplicate;
  sim.connect(0, 1, lc, lc, o.seed);

  // Memory. A: message and WRITE source, READ landing, atomic results. B: receive buffer, the
  // WRITE target, the READ source and one 8-byte atomic word.
  const std::uint32_t wlen = o.write_bytes, rlen = o.read_bytes;
  // A fixed-address arena: the VAs printed below are the same on every run of this seed.
  const std::size_t a_bytes = 256 + wlen + rlen + 16, b_bytes = 256 + wlen + rlen + 8;
  Arena arena(a_bytes + b_bytes + 256);
  std::span<std::uint8_t> a_mem{arena.alloc(a_bytes), a_bytes},
      b_mem{arena.alloc(b_bytes), b_bytes};
  std::uint8_t* a_msg = a_mem.data();
  std::uint8_t* a_wsrc = a_msg + 256;
  std::uint8_t* a_rdst = a_wsrc + wlen;
  std::uint8_t* a_atom = a_rdst + rlen;
  std::uint8_t* b_rbuf = b_mem.data();
  std::uint8_t* b_wdst = b_rbuf + 256;
  std::uint8_t* b_rsrc = b_wdst + wlen;
  std::uint8_t* b_word = b_rsrc + rlen;
  const char msg[] = "Hello from hcaA: a SEND over a lossy InfiniBand link";
  std::memcpy(a_msg, msg, sizeof msg);
  for (std::uint32_t i = 0; i < wlen; ++i)
    a_wsrc[i] = static_cast<std::uint8_t>(data_rng.next_u64());
  for (std::uint32_t i = 0; i < rlen; ++i)
    b_rsrc[i] = static_cast<std::uint8_t>(data_rng.next_u64());
  std::uint64_t word = 100;
  std::memcpy(b_word, &word, 8);
  constexpr std::uint32_t kAll =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  MemoryRegion* mr_a = dev[0]->reg_mr(pd[0], a_mem.data(), a_mem.size(), kAccessLocalWrite).value();
  MemoryRegion* mr_b = dev[1]->reg_mr(pd[1], b_mem.data(), b_mem.size(), kAll).value();

  CompletionQueue* cq[2];
  QueuePair* qp[2];
  for (int d = 0; d < 2; ++d) {
    cq[d] = dev[d]->create_cq(256).value();
    QpInitAttr ia;
    ia.pd = pd[d];
    ia.send_cq = cq[d];
    ia.recv_cq = cq[d];
    qp[d] = dev[d]->create_qp(ia).value();
  }
  for (int d = 0; d < 2; ++d) {
    RcParams p;
    p.mtu = mtu_from_bytes(o.mtu_bytes);
    p.recovery = o.selective_repeat ? RecoveryMode::kSelectiveRepeat : RecoveryMode::kGoBackN;
    p.timeout = 6;  // 262 us
    p.retry_cnt = 7;
    p.sq_psn = d == 0 ? 1000 : 5000;
    p.rq_psn = d == 0 ? 5000 : 1000;
    p.dest_qpn = qp[1 - d]->qp_num();
    p.dlid = static_cast<std::uint16_t>(2 - d);
    const Errc rc = bring_up_rc(*qp[d], p);
    if (rc != Errc::kOk) {
      std::fprintf(out, "QP bring-up failed: %s\n", std::string(to_string(rc)).c_str());
      return 1;
    }
  }
  std::fprintf(out, "hcaA qp 0x%x <-> hcaB qp 0x%x connected (RESET -> INIT -> RTR -> RTS)\n\n",
               qp[0]->qp_num(), qp[1]->qp_num());

  // Narration of the wire.
  std::set<std::uint64_t> seen;
  std::uint64_t retransmitted = 0;
  sim.set_trace([&](const TraceRecord& r) {
    if (r.kind == TraceKind::kDelivered) return;
    std::string what;
    switch (r.kind) {
      case TraceKind::kSent: {
        what = "        ";
        std::uint32_t q = 0, psn = 0;
        const int opc = packet_opcode(r.wire);
        if (opc >= 0 && packet_psn(r.wire, q, psn) &&
            (wire::opcode_info(static_cast<std::uint8_t>(opc)).mask & wire::kIsRequest)) {
          const std::uint64_t key = (static_cast<std::uint64_t>(r.src_device) << 56) |
                                    (static_cast<std::uint64_t>(q) << 24) | psn;
          if (!seen.insert(key).second) {
            what = "RETRANS ";
            ++retransmitted;
          }
        }
        break;
      }
      case TraceKind::kDropped:
        what = "  ^^ DROPPED by the link";
        break;
      case TraceKind::kBlackout:
        what = "  ^^ lost in a blackout";
        break;
      case TraceKind::kCorrupted:
        what = "  ^^ CORRUPTED (1 bit flipped; the receiver's CRC check will drop it)";
        break;
      case TraceKind::kDuplicated:
        what = "  ^^ DUPLICATED by the link";
        break;
      default:
        what = to_string(r.kind);
        break;
    }
    if (o.quiet) return;
    if (r.kind == TraceKind::kSent) {
      std::fprintf(out, "%12s %s %s %s\n", format_time(r.time_ns).c_str(),
                   r.src_device == 0 ? "A->B" : "B->A", what.c_str(),
                   describe_packet(r.wire).c_str());
    } else {
      std::fprintf(out, "%12s      %s\n", "", what.c_str());
    }
  });
  int done_send = 0, done_recv = 0, errors = 0;
  sim.set_after_event([&](TimeNs now) {
    WorkCompletion wc[16];
    for (int d = 0; d < 2; ++d) {
      std::size_t n;
      while ((n = cq[d]->poll(wc)) > 0) {
        for (std::size_t i = 0; i < n; ++i) {
          const bool recv =
              wc[i].opcode == WcOpcode::kRecv || wc[i].opcode == WcOpcode::kRecvRdmaWithImm;
          (recv ? done_recv : done_send)++;
          if (wc[i].status != WcStatus::kSuccess) ++errors;
          std::fprintf(out, "%12s %s COMPLETION %-13s %s\n", format_time(now).c_str(),
                       d == 0 ? "hcaA" : "hcaB",
                       recv ? "RECV" : kWrNames[wc[i].wr_id < 6 ? wc[i].wr_id : 0],
                       describe_completion(wc[i]).c_str());
        }
      }
    }
  });

  // Work: one receive on B, then five WRs on A.
  Sge rsge{reinterpret_cast<std::uintptr_t>(b_rbuf), 256, mr_b->lkey()};
  RecvWr rwr;
  rwr.wr_id = 100;
  rwr.sg_list = {&rsge, 1};
  qp[1]->post_recv(rwr);
  const std::uint64_t b_base = reinterpret_cast<std::uintptr_t>(b_mem.data());
  Sge s_send{reinterpret_cast<std::uintptr_t>(a_msg), sizeof msg, mr_a->lkey()};
  Sge s_write{reinterpret_cast<std::uintptr_t>(a_wsrc), wlen, mr_a->lkey()};
  Sge s_read{reinterpret_cast<std::uintptr_t>(a_rdst), rlen, mr_a->lkey()};
  Sge s_cas{reinterpret_cast<std::uintptr_t>(a_atom), 8, mr_a->lkey()};
  Sge s_faa{reinterpret_cast<std::uintptr_t>(a_atom + 8), 8, mr_a->lkey()};
  SendWr wrs[5];
  wrs[0].wr_id = 1;
  wrs[0].opcode = WrOpcode::kSend;
  wrs[0].sg_list = {&s_send, 1};
  wrs[1].wr_id = 2;
  wrs[1].opcode = WrOpcode::kRdmaWrite;
  wrs[1].sg_list = {&s_write, 1};
  wrs[1].remote_addr = b_base + 256;
  wrs[2].wr_id = 3;
  wrs[2].opcode = WrOpcode::kRdmaRead;
  wrs[2].sg_list = {&s_read, 1};
  wrs[2].remote_addr = b_base + 256 + wlen;
  wrs[3].wr_id = 4;
  wrs[3].opcode = WrOpcode::kAtomicCmpAndSwp;
  wrs[3].sg_list = {&s_cas, 1};
  wrs[3].remote_addr = b_base + 256 + wlen + rlen;
  wrs[3].compare_add = 100;
  wrs[3].swap = 200;
  wrs[4].wr_id = 5;
  wrs[4].opcode = WrOpcode::kAtomicFetchAndAdd;
  wrs[4].sg_list = {&s_faa, 1};
  wrs[4].remote_addr = wrs[3].remote_addr;
  wrs[4].compare_add = 5;
  std::fprintf(out, "Posted on hcaA (all signaled):\n");
  for (SendWr& w : wrs) {
    w.send_flags = kSignaled;
    w.rkey = mr_b->rkey();
    const Errc rc = qp[0]->post_send(w);
    std::fprintf(out, "  wr_id=%" PRIu64 " %-14s %6u bytes -> %s\n", w.wr_id, kWrNames[w.wr_id],
                 w.sg_list[0].length,
                 rc == Errc::kOk ? "queued" : std::string(to_string(rc)).c_str());
  }
  std::fprintf(out,
               "  (and one 256-byte receive on hcaB)\n\n"
               "On the wire (virtual time the HCA handed each packet to the link; RETRANS = a PSN\n"
               "sent again; a ^^ line says what the link did to the packet above it):\n");
  // The first poll_transmit happens when the Sim services the Devices: kick it with an action.
  sim.at(0, [](TimeNs) {});
  sim.run_until(
      [&] { return done_send == 5 && done_recv == 1 && sim.pending_non_deadline() == 0; });

  // Verify.
  std::fprintf(out, "\nVerification (byte-exact):\n");
  int bad = errors;
  auto verdict = [&](const char* what, bool ok) {
    std::fprintf(out, "  %-48s %s\n", what, ok ? "OK" : "MISMATCH");
    if (!ok) ++bad;
  };
  verdict("SEND: hcaB receive buffer holds the message", std::memcmp(b_rbuf, msg, sizeof msg) == 0);
  char line[96];
  std::snprintf(line, sizeof line, "RDMA WRITE: %u bytes landed in hcaB memory", wlen);
  verdict(line, std::memcmp(b_wdst, a_wsrc, wlen) == 0);
  std::snprintf(line, sizeof line, "RDMA READ: %u bytes of hcaB memory read into hcaA", rlen);
  verdict(line, std::memcmp(a_rdst, b_rsrc, rlen) == 0);
  std::uint64_t cas_orig, faa_orig, final_word;
  std::memcpy(&cas_orig, a_atom, 8);
  std::memcpy(&faa_orig, a_atom + 8, 8);
  std::memcpy(&final_word, b_word, 8);
  verdict("CMP_AND_SWP(100 -> 200) returned the original 100", cas_orig == 100);
  verdict("FETCH_AND_ADD(+5) returned 200", faa_orig == 200);
  verdict("the atomic word now holds 205 (each applied once)", final_word == 205);
  if (done_send != 5 || done_recv != 1) {
    std::fprintf(out, "  not every WR completed (%d of 5 sends, %d of 1 receives)\n", done_send,
                 done_recv);
    ++bad;
  }

  std::fprintf(out, "\nSummary after %s of virtual time (%" PRIu64 " events):\n",
               format_time(sim.now()).c_str(), sim.events());
  for (int d = 0; d < 2; ++d) {
    const DeviceCounters& c = dev[d]->counters();
    const LinkStats& ls = sim.link(d, 1 - d)->stats();
    std::fprintf(out,
                 "  %s: sent %" PRIu64 " packets (%" PRIu64 " retransmitted, %" PRIu64
                 " timeouts), rx CRC drops %" PRIu64 ", NAKs sent %" PRIu64
                 ", duplicate READ/atomic replays %" PRIu64 "\n",
                 d == 0 ? "hcaA" : "hcaB", c.tx_packets, c.retransmit_packets, c.timeouts,
                 c.rx_bad_icrc + c.rx_bad_vcrc,
                 c.naks_tx_seq + c.naks_tx_rnr + c.naks_tx_access + c.naks_tx_inv + c.naks_tx_op,
                 c.dup_reads_replayed + c.dup_atomics_replayed);
    std::fprintf(out,
                 "  link %s: %" PRIu64 " packets, dropped %" PRIu64 ", corrupted %" PRIu64
                 ", reordered %" PRIu64 ", duplicated %" PRIu64 "\n",
                 d == 0 ? "A->B" : "B->A", ls.packets, ls.dropped, ls.corrupted, ls.reordered,
                 ls.duplicated);
  }
  std::fprintf(
      out, "\n%s\n",
      bad == 0 ? "All operations completed and verified." : "FAILED: see the mismatches above.");
  return bad == 0 ? 0 : 1;
}

}  // namespace weft::harness
