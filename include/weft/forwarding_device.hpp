// include/weft/forwarding_device.hpp — a Device that hands every call to another Device (the
// target), for wrappers that intercept a few calls and pass the rest on unchanged: the GSI
// agents in front of a Device (src/cm/gsi_device.hpp) and the provider's direct-message tap on
// the shared-memory medium (src/ofi/shm_port.cpp). A subclass overrides what it intercepts.
// Thread-safety: that of the target.
#pragma once

#include "weft/device.hpp"

namespace weft {

class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(Device* target = nullptr) : target_(target) {}
  void set_target(Device* target) { target_ = target; }
  Device* target() const { return target_; }

  const DeviceConfig& config() const override { return target_->config(); }
  std::uint64_t node_guid() const override { return target_->node_guid(); }
  std::uint16_t lid(std::uint8_t port_num = 1) const override { return target_->lid(port_num); }
  Errc set_port_lid(std::uint8_t port_num, std::uint16_t lid) override {
    return target_->set_port_lid(port_num, lid);
  }
  Errc set_port_state(std::uint8_t port_num, PortState state) override {
    return target_->set_port_state(port_num, state);
  }
  Result<ProtectionDomain*, Errc> alloc_pd() override { return target_->alloc_pd(); }
  Result<MemoryRegion*, Errc> reg_mr(ProtectionDomain* pd, void* addr, std::size_t length,
                                     std::uint32_t access) override {
    return target_->reg_mr(pd, addr, length, access);
  }
  Result<CompletionQueue*, Errc> create_cq(std::uint32_t depth) override {
    return target_->create_cq(depth);
  }
  Result<SharedReceiveQueue*, Errc> create_srq(ProtectionDomain* pd, std::uint32_t max_wr,
                                               std::uint32_t max_sge) override {
    return target_->create_srq(pd, max_wr, max_sge);
  }
  Result<QueuePair*, Errc> create_qp(const QpInitAttr& attr) override {
    return target_->create_qp(attr);
  }
  Result<AddressHandle*, Errc> create_ah(ProtectionDomain* pd, const AddressVector& av) override {
    return target_->create_ah(pd, av);
  }
  Errc destroy_qp(QueuePair* qp) override { return target_->destroy_qp(qp); }
  Errc destroy_cq(CompletionQueue* cq) override { return target_->destroy_cq(cq); }
  Errc destroy_srq(SharedReceiveQueue* srq) override { return target_->destroy_srq(srq); }
  Errc dereg_mr(MemoryRegion* mr) override { return target_->dereg_mr(mr); }
  Errc destroy_ah(AddressHandle* ah) override { return target_->destroy_ah(ah); }
  Errc dealloc_pd(ProtectionDomain* pd) override { return target_->dealloc_pd(pd); }
  void on_packet(std::span<const std::uint8_t> wire, TimeNs now) override {
    target_->on_packet(wire, now);
  }
  void on_packet(const TxPacket& pkt, TimeNs now) override { target_->on_packet(pkt, now); }
  bool poll_transmit(TimeNs now, TxPacket& out) override {
    return target_->poll_transmit(now, out);
  }
  std::size_t poll_transmit_burst(TimeNs now, std::span<TxPacket> out) override {
    return target_->poll_transmit_burst(now, out);
  }
  void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) override {
    target_->on_packet_burst(pkts, now);
  }
  TimeNs next_deadline() const override { return target_->next_deadline(); }
  void on_deadline(TimeNs now) override { target_->on_deadline(now); }
  bool poll_async_event(AsyncEvent& out) override { return target_->poll_async_event(out); }
  const DeviceCounters& counters() const override { return target_->counters(); }
  void set_remote_payload(RemotePayload* rp) override { target_->set_remote_payload(rp); }
  bool payload_stable(const TxPacket& pkt) const override { return target_->payload_stable(pkt); }

 protected:
  Device* target_;
};

}  // namespace weft
