// tests/io/udp_peer.cpp — the child process of udp_test: `udp_peer CTRL_FD BYTES uring|mmsg IP
// PORT` (IP: an IPv4 address as a number, or an IPv6 address like ::1) opens a UdpMedium on IP with
// the given back end, exchanges ports with the parent over the control socket CTRL_FD, runs its
// Driver on a driver thread, exposes a BYTES-long region to RC and UD traffic and answers the same
// control messages as io_peer (peer_protocol.hpp), checking byte for byte what the parent's verbs
// did to its memory. Exits 0 on kExit.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/io/peer_serve.hpp"
#include "tests/io/udp_end.hpp"

using namespace weft;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: udp_peer CTRL_FD BYTES uring|mmsg IP PORT\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  io::udp::UdpConfig cfg;
  cfg.backend =
      std::strcmp(argv[3], "uring") == 0 ? io::udp::UdpBackend::kUring : io::udp::UdpBackend::kMmsg;
  if (std::strchr(argv[4], ':')) {  // an IPv6 address
    cfg.ipv6 = true;
    if (inet_pton(AF_INET6, argv[4], cfg.local_ip6.data()) != 1) return 2;
  } else {
    cfg.local_ip = static_cast<std::uint32_t>(std::strtoul(argv[4], nullptr, 10));
  }
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[5]));
  test::UdpEnd node(std::atoi(argv[1]), 2, cfg);
  if (!node.ok() || !node.introduce(2)) {
    std::fprintf(stderr, "udp_peer: %s\n", node.medium().error().c_str());
    return 3;
  }
  return test::serve_peer(node, bytes);
}
