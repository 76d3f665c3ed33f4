// tests/fabricd/cm_peer.cpp — one side of an RC connection made by the Communication Manager over
// the fabric daemon (gsi_test runs two of them): attaches to HCA `--hca`, then
//   --listen SERVICE: accepts a REQ for SERVICE; --connect SERVICE DLID: PathRecord from the SA,
//   then REQ / REP / RTU.
// Each side tells the other its buffer (address, rkey) in the CM private data (REQ, REP). The
// active side RDMA WRITEs 1 MiB of its pattern into the passive side's buffer and SENDs a note;
// the passive side checks every byte, WRITEs its own pattern back and SENDs a note; the active
// side checks every byte and disconnects (DREQ / DREP). Exit 0 = every byte right; other
// codes name the step that failed (stderr says more).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/fabricd/fabric_gsi.hpp"

using namespace weft;

namespace {

constexpr std::size_t kBytes = 1 << 20;

std::uint8_t pattern(bool active, std::size_t i) {
  return static_cast<std::uint8_t>(i * 13 + (active ? 5 : 77) + (i >> 10));
}

struct Peer {
  std::uint64_t addr;
  std::uint32_t rkey;
  std::uint32_t bytes;
};

int fail(int code, const char* what) {
  std::fprintf(stderr, "cm_peer: %s\n", what);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string fabric;
  std::uint32_t hca = 0;
  bool active = false;
  std::uint64_t service = 0;
  std::uint16_t dlid = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fabric" && i + 1 < argc) {
      fabric = argv[++i];
    } else if (a == "--hca" && i + 1 < argc) {
      hca = static_cast<std::uint32_t>(std::strtoul(argv[++i], nullptr, 0));
    } else if (a == "--listen" && i + 1 < argc) {
      service = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--connect" && i + 2 < argc) {
      active = true;
      service = std::strtoull(argv[++i], nullptr, 0);
      dlid = static_cast<std::uint16_t>(std::strtoul(argv[++i], nullptr, 0));
    } else {
      return fail(2, "usage: cm_peer --fabric F --hca N (--listen S | --connect S DLID)");
    }
  }
  io::FabricAttachOptions o;
  o.hca = hca;
  auto g = fabricd::FabricGsi::connect(fabric, o);
  if (!g) return fail(3, "attach failed");
  fabricd::FabricGsi& gsi = **g;
  Device& dev = gsi.device();
  std::vector<std::uint8_t> buf(kBytes, 0), note(64, 0);
  for (std::size_t i = 0; i < kBytes; ++i) buf[i] = pattern(active, i);
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* cq = *dev.create_cq(256);
  MemoryRegion* mr = *dev.reg_mr(pd, buf.data(), kBytes,
                                 kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  MemoryRegion* nmr = *dev.reg_mr(pd, note.data(), note.size(), kAccessLocalWrite);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  QueuePair* qp = *dev.create_qp(qa);

  // What we tell the peer: where it may write our buffer.
  Peer me{reinterpret_cast<std::uint64_t>(buf.data()), mr->rkey(), kBytes};
  std::vector<std::uint8_t> pd_out(sizeof me);
  std::memcpy(pd_out.data(), &me, sizeof me);
  auto c =
      active ? gsi.connect_rc(*qp, dlid, service, pd_out) : gsi.accept_rc(service, *qp, pd_out);
  if (!c) {
    std::fprintf(stderr, "cm_peer: %s: %s\n", active ? "connect" : "accept",
                 std::string(fabricd::to_string(c.error())).c_str());
    return 4;
  }
  if (c->private_data.size() < sizeof(Peer)) return fail(5, "no buffer in private data");
  Peer peer;
  std::memcpy(&peer, c->private_data.data(), sizeof peer);
  if (peer.bytes != kBytes) return fail(5, "wrong buffer size in private data");
  if (c->remote_qpn == 0) return fail(5, "no remote QPN");
  if (active && (c->path.slid != gsi.lid() || c->path.dlid != dlid))
    return fail(5, "the SA's path does not join the two LIDs");

  // Completions in whatever order they come; waits for the one of `wr_id`.
  std::vector<WorkCompletion> done;
  auto wait_wr = [&](std::uint64_t wr_id) {
    auto seen = [&] {
      for (auto it = done.begin(); it != done.end(); ++it)
        if (it->wr_id == wr_id) {
          const bool ok = it->status == WcStatus::kSuccess;
          if (!ok)
            std::fprintf(stderr, "cm_peer: wr %llu completed with status %u\n",
                         static_cast<unsigned long long>(wr_id), static_cast<unsigned>(it->status));
          done.erase(it);
          return ok ? 1 : -1;
        }
      return 0;
    };
    int r = 0;
    gsi.driver().run_until(
        [&] {
          WorkCompletion wc{};
          while (cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1) done.push_back(wc);
          r = seen();
          return r != 0;
        },
        20'000'000'000);
    return r == 1;
  };
  auto post_recv = [&] {
    Sge s{reinterpret_cast<std::uint64_t>(note.data()), static_cast<std::uint32_t>(note.size()),
          nmr->lkey()};
    return qp->post_recv(RecvWr{7, {&s, 1}}) == Errc::kOk;
  };
  // WRITE our whole buffer into the peer's, then a SEND the peer waits for.
  auto write_and_note = [&] {
    Sge s{reinterpret_cast<std::uint64_t>(buf.data()), kBytes, mr->lkey()};
    SendWr w;
    w.wr_id = 1;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = {&s, 1};
    w.remote_addr = peer.addr;
    w.rkey = peer.rkey;
    if (qp->post_send(w) != Errc::kOk) return false;
    Sge n{reinterpret_cast<std::uint64_t>(note.data()), 8, nmr->lkey()};
    SendWr sw;
    sw.wr_id = 2;
    sw.opcode = WrOpcode::kSend;
    sw.send_flags = kSignaled;
    sw.sg_list = {&n, 1};
    if (qp->post_send(sw) != Errc::kOk) return false;
    return wait_wr(2);
  };
  auto check = [&](bool from_active) {
    for (std::size_t i = 0; i < kBytes; ++i)
      if (buf[i] != pattern(from_active, i)) {
        std::fprintf(stderr, "cm_peer: byte %zu is %u, want %u\n", i, buf[i],
                     pattern(from_active, i));
        return false;
      }
    return true;
  };
  auto wait_note = [&] { return wait_wr(7); };

  if (!post_recv()) return fail(6, "post_recv");
  if (active) {
    if (!write_and_note()) return fail(7, "WRITE + SEND to the passive side");
    if (!wait_note()) return fail(8, "no note from the passive side");
    if (!check(false)) return fail(9, "the passive side's data differs");
    if (auto e = gsi.disconnect(c->id)) return fail(10, "disconnect");
  } else {
    if (!wait_note()) return fail(8, "no note from the active side");
    if (!check(true)) return fail(9, "the active side's data differs");
    for (std::size_t i = 0; i < kBytes; ++i) buf[i] = pattern(false, i);
    if (!write_and_note()) return fail(7, "WRITE + SEND to the active side");
    if (auto e = gsi.wait_disconnected(c->id)) return fail(10, "no DREQ");
  }
  if (qp->state() != QpState::kErr) return fail(11, "the QP is not in ERR after DREQ / DREP");
  return 0;
}
