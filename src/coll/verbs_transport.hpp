// coll/verbs_transport.hpp — Transport over weft verbs: one RC QueuePair per (peer, lane), one
// CompletionQueue, inboxes in one MemoryRegion the transport owns.
//
// Wire use (src/coll/README.md has the protocol): data is RDMA WRITE WITH IMMEDIATE into the
// peer's inbox slot, imm = slot index (bit 31 clear); a credit grant is a zero-length SEND WITH
// IMMEDIATE, imm = 0x80000000 | credits. Both consume one receive WQE at the target; the
// transport keeps 2 x slots receives posted per QP and reposts each as it completes, so neither
// can meet an RNR NAK (data <= slots by credit, grants <= slots since each returns >= 1 slot).
//
// Setup is the caller's: create the transport, create_qp() for every (peer, lane), bring the
// QPs to RTS (addressing belongs to the fabric), exchange inbox_addr()/inbox_rkey() out of band
// and call connect(). Lifetime: the Device, PD and CQ must outlive the transport.
// Thread-safety: as the Device (one owner thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <weft/device.hpp>

#include "src/coll/transport.hpp"

namespace weft::coll {

struct VerbsTransportConfig {
  int rank = 0;
  int size = 1;
  int lanes = 1;
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 64 * 1024;
  std::uint32_t cq_depth = 4096;  // at least 4 x slots x size x lanes is used (no overrun)
};

class VerbsTransport final : public Transport {
 public:
  // Allocates the inboxes, their MR and the CQ on `device` within `pd`.
  static Result<std::unique_ptr<VerbsTransport>, Errc> create(Device& device, ProtectionDomain* pd,
                                                              const VerbsTransportConfig& config);
  ~VerbsTransport() override;

  // Creates the RC QP for (peer, lane) in RESET; the caller brings it up.
  Result<QueuePair*, Errc> create_qp(int peer, int lane);
  QueuePair* qp(int peer, int lane) const { return conn(peer, lane).qp; }
  // Where the peer must write (the inbox we keep for it) and with which rkey.
  std::uint64_t inbox_addr(int peer, int lane) const;
  std::uint32_t inbox_rkey() const;
  // Records the peer's inbox for us and posts the receives. The QP must be at least RTR.
  Errc connect(int peer, int lane, std::uint64_t remote_inbox_addr, std::uint32_t remote_rkey);

  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  int lanes() const override { return cfg_.lanes; }
  std::uint32_t slots() const override { return cfg_.slots; }
  std::uint32_t slot_bytes() const override { return cfg_.slot_bytes; }
  TransportErrc register_memory(const void* addr, std::size_t bytes) override;
  void unregister_memory(const void* addr) override;
  TransportErrc post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                           std::uint32_t slot, std::uint64_t wr_id) override;
  TransportErrc post_grant(int peer, int lane, std::uint32_t credits) override;
  std::size_t poll(std::span<TransportEvent> out) override;
  const std::uint8_t* inbox(int peer, int lane, std::uint32_t slot) const override;

 private:
  struct Conn {
    QueuePair* qp = nullptr;
    std::uint64_t remote_addr = 0;
    std::uint32_t remote_rkey = 0;
    std::uint32_t sends_outstanding = 0;
  };
  VerbsTransport(Device& device, ProtectionDomain* pd, const VerbsTransportConfig& config)
      : dev_(device), pd_(pd), cfg_(config) {}
  Conn& conn(int peer, int lane) {
    return conns_[static_cast<std::size_t>(peer * cfg_.lanes + lane)];
  }
  const Conn& conn(int peer, int lane) const {
    return conns_[static_cast<std::size_t>(peer * cfg_.lanes + lane)];
  }
  std::size_t inbox_offset(int peer, int lane) const {
    return static_cast<std::size_t>(peer * cfg_.lanes + lane) * cfg_.slots * cfg_.slot_bytes;
  }
  Errc post_one_recv(QueuePair* qp);

  Device& dev_;
  ProtectionDomain* pd_;
  VerbsTransportConfig cfg_;
  CompletionQueue* cq_ = nullptr;
  std::vector<std::uint8_t> inboxes_;
  MemoryRegion* inbox_mr_ = nullptr;
  std::vector<Conn> conns_;
  std::map<std::uint32_t, int> qpn_to_conn_;
  std::map<const void*, MemoryRegion*> regions_;  // by start address
  std::vector<WorkCompletion> wc_;
};

}  // namespace weft::coll
