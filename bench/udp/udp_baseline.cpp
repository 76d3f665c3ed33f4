// bench/udp/udp_baseline.cpp — the raw-socket baseline of bench/udp/run-udp-bench: `udp_baseline
// BYTES DATAGRAM PAYLOAD [A,B]` sends BYTES of payload from one process to another over UDP on
// 127.0.0.1 with sendmmsg/recvmmsg batches of 64 (the UDP medium's batch), in datagrams of
// DATAGRAM bytes that each carry PAYLOAD bytes of it (4112 and 4096: a RoCEv2 WRITE MIDDLE packet
// at 4 KiB MTU, BTH + payload + ICRC), with 128 MiB socket buffers (the medium's); with A,B the
// receiver runs on CPU A and the sender on CPU B (`weft perf --cpus A,B`: its server receives
// the WRITEs). Prints the receiver's goodput (payload bytes, as weft perf counts) as one JSON
// line: {"bw_avg_gbps":..., "lost":...}. Datagrams the kernel drops are counted, not resent: the
// figure is an upper bound for a reliable transport on top.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kBatch = 64;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int udp_socket(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  const int v = 128 << 20;  // the UDP medium's default (UdpConfig::socket_buffer_bytes)
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("bind");
    std::exit(1);
  }
  return fd;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

std::uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t l = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  return ntohs(a.sin_port);
}

}  // namespace

int main(int argc, char** argv) {
  int rx_cpu = -1, tx_cpu = -1;
  if ((argc != 4 && argc != 5) ||
      (argc == 5 && std::sscanf(argv[4], "%d,%d", &rx_cpu, &tx_cpu) != 2)) {
    std::fprintf(stderr, "usage: udp_baseline BYTES DATAGRAM PAYLOAD [RX_CPU,TX_CPU]\n");
    return 2;
  }
  const std::uint64_t bytes = std::strtoull(argv[1], nullptr, 10);
  const std::size_t dgram = std::strtoull(argv[2], nullptr, 10);
  const std::size_t payload = std::strtoull(argv[3], nullptr, 10);
  if (payload == 0 || payload > dgram) return 2;
  const std::uint64_t count = (bytes + payload - 1) / payload;
  const int rx = udp_socket(0);
  const std::uint16_t rx_port = port_of(rx);
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  std::vector<std::vector<char>> bufs(kBatch, std::vector<char>(dgram));
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> mm(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    iov[i] = {bufs[i].data(), dgram};
    mm[i] = {};
    mm[i].msg_hdr.msg_iov = &iov[i];
    mm[i].msg_hdr.msg_iovlen = 1;
  }
  const pid_t child = fork();
  if (child == 0) {  // the sender
    pin_to(tx_cpu);
    close(rx);
    const int tx = udp_socket(0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(rx_port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (auto& m : mm) {
      m.msg_hdr.msg_name = &dst;
      m.msg_hdr.msg_namelen = sizeof dst;
    }
    char go;
    if (read(pipefd[0], &go, 1) != 1) _exit(1);
    for (std::uint64_t sent = 0; sent < count;) {
      const int k = static_cast<int>(std::min<std::uint64_t>(kBatch, count - sent));
      const int r = sendmmsg(tx, mm.data(), static_cast<unsigned>(k), 0);
      if (r > 0) sent += static_cast<std::uint64_t>(r);
    }
    _exit(0);
  }
  pin_to(rx_cpu);
  timeval tv{0, 200000};  // the end: nothing for 200 ms
  setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (write(pipefd[1], "g", 1) != 1) return 1;
  std::uint64_t got = 0;
  double t0 = 0, t1 = 0;
  while (got < count) {
    const int r = recvmmsg(rx, mm.data(), kBatch, MSG_WAITFORONE, nullptr);
    if (r <= 0) break;
    if (got == 0) t0 = now_s();
    got += static_cast<std::uint64_t>(r);
    t1 = now_s();
  }
  waitpid(child, nullptr, 0);
  const double s = t1 > t0 ? t1 - t0 : 1e-9;
  std::printf("{\"bw_avg_gbps\":%.4f,\"datagrams\":%llu,\"lost\":%llu}\n",
              static_cast<double>(got) * static_cast<double>(payload) * 8 / s / 1e9,
              static_cast<unsigned long long>(got), static_cast<unsigned long long>(count - got));
  return 0;
}
