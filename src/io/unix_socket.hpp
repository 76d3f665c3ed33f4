// io/unix_socket.hpp — the Unix-socket helpers every rendezvous in src/io shares (DirectNode,
// FabricAttach, the fabric daemon): one SOCK_SEQPACKET message with file descriptors attached
// (SCM_RIGHTS), and a bounded wait for readability. Thread-safety: free functions on the caller's
// sockets.
#pragma once

#include <cstddef>

#include <weft/types.hpp>

namespace weft::io::sock {

inline constexpr int kFdsMax = 3;  // the most any handshake passes: a memfd and two doorbells

// Sends `len` bytes with `nfds` (<= kFdsMax) descriptors; true when the whole message went.
bool send_with_fds(int sock, const void* data, std::size_t len, const int* fds, std::size_t nfds);
// Receives one message of exactly `len` bytes and up to kFdsMax descriptors into fds[]; extra
// descriptors are closed, and all of them are when the message has the wrong length. Returns the
// descriptor count, or -1 (time-out, error, wrong length).
int recv_with_fds(int sock, void* data, std::size_t len, int* fds, TimeNs timeout_ns);
// poll() for POLLIN, retrying on EINTR; kNoDeadline waits forever.
bool wait_readable(int fd, TimeNs timeout_ns);

}  // namespace weft::io::sock
