// tests/dpdk/dpdk_peer.cpp — the child process of dpdk_test: `dpdk_peer CTRL_FD BYTES VDEV IP
// PORT [copy]` opens a DpdkMedium on VDEV (its own EAL) with the given IPv4 address and UDP port
// (`copy`: zero-copy transmit off),
// exchanges addresses with the parent over CTRL_FD and serves it (tests/io/peer_serve.hpp).
// `dpdk_peer CTRL_FD COUNT VDEV IP PORT last-words` instead sends the parent COUNT UD messages
// (kLastWordsBytes each, pattern seed = index) to the UD QPN the parent sends as a PeerInfo, says
// so over CTRL_FD once the last has left the Device, and leaves at once (the parent reads late).
// Exits 0 on kExit (last words: once its medium has ended its session), leaving no EAL run-time
// directory behind. `dpdk_peer CTRL_FD eal` only initializes the EAL (defaults), writes the path
// of its run-time directory to CTRL_FD and waits to be killed.
#include <rte_eal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/io/direct_node.hpp"
#include "src/io/dpdk/dpdk_medium.hpp"
#include "tests/io/peer_serve.hpp"
#include "tests/io/udp_end.hpp"

using namespace weft;

namespace {

using End = test::MediumEnd<io::dpdk::DpdkMedium, io::dpdk::DpdkConfig>;
constexpr std::uint32_t kLastWordsBytes = 1000;

int last_words(End& node, std::size_t count) {
  Device& dev = node.device();
  std::vector<std::uint8_t> buf(count * kLastWordsBytes);
  for (std::size_t i = 0; i < count; ++i)
    test::fill_pattern(buf.data() + i * kLastWordsBytes, kLastWordsBytes, i);
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* cq = *dev.create_cq(1024);
  MemoryRegion* mr = *dev.reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = qa.recv_cq = cq;
  qa.type = QpType::kUd;
  QueuePair* ud = *dev.create_qp(qa);
  if (io::connect_ud(ud, test::kPeerQkey) != Errc::kOk) return 6;
  auto m = node.recv(30);
  if (!m || m->size() != sizeof(test::PeerInfo)) return 5;
  test::PeerInfo theirs;
  std::memcpy(&theirs, m->data(), sizeof theirs);
  AddressVector av;
  av.dlid = node.peer_lid();
  AddressHandle* ah = *dev.create_ah(pd, av);
  for (std::size_t i = 0; i < count; ++i) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf.data() + i * kLastWordsBytes), kLastWordsBytes,
            mr->lkey()};
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.ah = ah;
    wr.remote_qpn = theirs.ud_qpn;
    wr.remote_qkey = test::kPeerQkey;
    if (ud->post_send(wr) != Errc::kOk) return 9;
  }
  // A UD send completes when its packet has left the Device, onto the medium.
  std::size_t done = 0;
  node.driver().run_until(
      [&] {
        WorkCompletion wc[16];
        for (std::size_t k; (k = cq->poll(wc)) > 0;) done += k;
        return done >= count;
      },
      30'000'000'000);
  if (done < count) return 10;
  const std::uint8_t sent = 1;
  return node.send(&sent, 1) ? 0 : 8;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[2], "eal") == 0) {
    // `dpdk_peer CTRL_FD eal`: the EAL with the default arguments, its run-time directory's path
    // told over CTRL_FD, then wait for a signal (dpdk_test kills it).
    std::string err;
    if (!io::dpdk::eal_init({}, &err)) {
      std::fprintf(stderr, "dpdk_peer: %s\n", err.c_str());
      return 3;
    }
    const std::string dir = rte_eal_get_runtime_dir();
    if (write(std::atoi(argv[1]), dir.data(), dir.size()) != static_cast<ssize_t>(dir.size()))
      return 8;
    for (;;) pause();
  }
  const bool words = argc == 7 && std::strcmp(argv[6], "last-words") == 0;
  if (argc != 6 && !(argc == 7 && (std::strcmp(argv[6], "copy") == 0 || words))) {
    std::fprintf(stderr, "usage: dpdk_peer CTRL_FD BYTES VDEV IP PORT [copy | last-words]\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  io::dpdk::DpdkConfig cfg;
  cfg.vdev = argv[3];
  cfg.local_ip = static_cast<std::uint32_t>(std::strtoul(argv[4], nullptr, 10));
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[5]));
  cfg.zero_copy = argc == 6;
  int rc;
  {
    End node(std::atoi(argv[1]), 2, cfg);
    if (!node.ok() || !node.introduce(2)) {
      std::fprintf(stderr, "dpdk_peer: %s\n", node.medium().error().c_str());
      rc = 3;
    } else {
      rc = words ? last_words(node, bytes) : test::serve_peer(node, bytes);
    }
  }  // last words: the medium ends its session here, while the parent is not reading yet
  io::dpdk::eal_cleanup();
  return rc;
}
