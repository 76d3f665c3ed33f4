// tests/dpdk/dpdk_peer.cpp — the child process of dpdk_test: `dpdk_peer CTRL_FD BYTES VDEV IP
// PORT [copy]` opens a DpdkMedium on VDEV (its own EAL) with the given IPv4 address and UDP port
// (`copy`: zero-copy transmit off),
// exchanges addresses with the parent over CTRL_FD and serves it (tests/io/peer_serve.hpp).
// Exits 0 on kExit, leaving no EAL run-time directory behind.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/io/dpdk/dpdk_medium.hpp"
#include "tests/io/peer_serve.hpp"
#include "tests/io/udp_end.hpp"

using namespace weft;

int main(int argc, char** argv) {
  if (argc != 6 && !(argc == 7 && std::strcmp(argv[6], "copy") == 0)) {
    std::fprintf(stderr, "usage: dpdk_peer CTRL_FD BYTES VDEV IP PORT [copy]\n");
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
    test::MediumEnd<io::dpdk::DpdkMedium, io::dpdk::DpdkConfig> node(std::atoi(argv[1]), 2, cfg);
    if (!node.ok() || !node.introduce(2)) {
      std::fprintf(stderr, "dpdk_peer: %s\n", node.medium().error().c_str());
      rc = 3;
    } else {
      rc = test::serve_peer(node, bytes);
    }
  }
  io::dpdk::eal_cleanup();
  return rc;
}
