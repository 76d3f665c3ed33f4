// src/ofi/ctrl_socket.hpp — control datagrams (the provider's connection set-up) on a datagram
// socket, for media whose packet path cannot carry them (the fabric port, the UDP port).
//
// Each datagram is a CtrlFrame: magic, the sender's NodeAddr, the length, then at most
// kCtrlBytesMax bytes. The socket is an abstract Unix datagram socket (reliable and ordered on
// one host) or a UDP socket (ordered and practically lossless on loopback; see udp_port.cpp).
// Sends never block for long: a full receiver queue is retried for at most kSendRetryNs.
//
// Thread-safety: one user at a time (the owning port's).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "src/ofi/medium.hpp"

namespace weft::ofi {

class CtrlSocket {
 public:
  CtrlSocket() = default;
  ~CtrlSocket();
  CtrlSocket(const CtrlSocket&) = delete;
  CtrlSocket& operator=(const CtrlSocket&) = delete;

  // Binds the abstract Unix datagram socket `name`; false (errno kept) when it is taken.
  bool bind_abstract(const std::string& name);
  // Whether someone has bound the abstract datagram socket `name`, found by connect(2), which
  // leaves the name alone. (A probe that binds the name when it is free holds it for an instant,
  // long enough under load for the name's owner-to-be to find it taken.)
  static bool abstract_bound(const std::string& name);
  // Binds a UDP socket on ip (host order), an ephemeral port; false on failure.
  bool bind_udp(std::uint32_t ip);
  int fd() const { return fd_; }
  std::uint16_t udp_port() const { return udp_port_; }

  // Sends msg from `self` to node `dst` at the socket `to`; false when nobody is there.
  bool send(const NodeAddr& self, const NodeAddr& dst, const sockaddr* to, socklen_t to_len,
            std::span<const std::uint8_t> msg);
  bool send_abstract(const NodeAddr& self, const NodeAddr& dst, const std::string& name,
                     std::span<const std::uint8_t> msg);
  bool send_udp(const NodeAddr& self, const NodeAddr& dst, std::uint32_t ip, std::uint16_t port,
                std::span<const std::uint8_t> msg);
  // Hands up to max_msgs datagrams meant for `self` to fn(src, msg) (nonblocking); a datagram
  // naming another node id (a stale address whose LID was reused) is dropped. Returns how many.
  std::size_t poll(const NodeAddr& self, const MediumPort::CtrlFn& fn, std::size_t max_msgs);

  // Claims a free LID in [first, first + count) on this host by binding name_of(lid) (the udp
  // and dpdk ports: a bound abstract name is the claim). Starts at a place spread by pid and by
  // how many ports this process opened, so concurrent processes rarely collide. 0 when every
  // name is taken or a bind fails for another reason than EADDRINUSE.
  std::uint16_t claim_lid(std::uint16_t first, std::uint16_t count,
                          const std::function<std::string(std::uint16_t)>& name_of);

 private:
  int fd_ = -1;
  std::uint16_t udp_port_ = 0;
};

}  // namespace weft::ofi
