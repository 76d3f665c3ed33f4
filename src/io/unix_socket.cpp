// io/unix_socket.cpp — see unix_socket.hpp.
#include "src/io/unix_socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace weft::io::sock {

bool wait_readable(int fd, TimeNs timeout_ns) {
  pollfd p{fd, POLLIN, 0};
  const int ms =
      timeout_ns == kNoDeadline ? -1 : static_cast<int>((timeout_ns + 999'999) / 1'000'000);
  int r;
  do r = poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

bool send_with_fds(int sock, const void* data, std::size_t len, const int* fds, std::size_t nfds) {
  if (nfds > static_cast<std::size_t>(kFdsMax)) return false;
  iovec iov{const_cast<void*>(data), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kFdsMax)]{};
  if (nfds) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  return sendmsg(sock, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

int recv_with_fds(int sock, void* data, std::size_t len, int* fds, TimeNs timeout_ns) {
  if (!wait_readable(sock, timeout_ns)) return -1;
  iovec iov{data, len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kFdsMax)]{};
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  const ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  int got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int k = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (got < kFdsMax)
        fds[got++] = fd;
      else
        close(fd);
    }
  }
  if (n != static_cast<ssize_t>(len)) {
    for (int i = 0; i < got; ++i) close(fds[i]);
    return -1;
  }
  return got;
}

}  // namespace weft::io::sock
