// emu/fabricd/stub_device.hpp — a Device that owns no transport (no QPs, no memory): the base
// of the fabric daemon's relay faces, its clock and the cross-host tunnel's driver hook. Every
// verb is refused; packets in are dropped unless a subclass takes them.
// Thread-safety: as Device (one thread).
#pragma once

#include <utility>
#include <vector>

#include <weft/device.hpp>

namespace weft::fabricd {

// A Device that owns no transport: the base of both relay faces and of the clock.
class StubDevice : public Device {
 public:
  explicit StubDevice(DeviceConfig cfg) : cfg_(std::move(cfg)) {}
  const DeviceConfig& config() const override { return cfg_; }
  std::uint64_t node_guid() const override { return cfg_.node_guid; }
  std::uint16_t lid(std::uint8_t) const override { return lid_; }
  Errc set_port_lid(std::uint8_t, std::uint16_t lid) override {
    lid_ = lid;
    return Errc::kOk;
  }
  Errc set_port_state(std::uint8_t, PortState) override { return Errc::kOk; }
  Result<ProtectionDomain*, Errc> alloc_pd() override { return Errc::kInvalidState; }
  Result<MemoryRegion*, Errc> reg_mr(ProtectionDomain*, void*, std::size_t,
                                     std::uint32_t) override {
    return Errc::kInvalidState;
  }
  Result<CompletionQueue*, Errc> create_cq(std::uint32_t) override { return Errc::kInvalidState; }
  Result<SharedReceiveQueue*, Errc> create_srq(ProtectionDomain*, std::uint32_t,
                                               std::uint32_t) override {
    return Errc::kInvalidState;
  }
  Result<QueuePair*, Errc> create_qp(const QpInitAttr&) override { return Errc::kInvalidState; }
  Result<AddressHandle*, Errc> create_ah(ProtectionDomain*, const AddressVector&) override {
    return Errc::kInvalidState;
  }
  Errc destroy_qp(QueuePair*) override { return Errc::kNotFound; }
  Errc destroy_cq(CompletionQueue*) override { return Errc::kNotFound; }
  Errc destroy_srq(SharedReceiveQueue*) override { return Errc::kNotFound; }
  Errc dereg_mr(MemoryRegion*) override { return Errc::kNotFound; }
  Errc destroy_ah(AddressHandle*) override { return Errc::kNotFound; }
  Errc dealloc_pd(ProtectionDomain*) override { return Errc::kNotFound; }
  void on_packet(const TxPacket& pkt, TimeNs now) override {
    std::vector<std::uint8_t> b(pkt.wire_bytes());
    pkt.write_to(b);
    on_packet(std::span<const std::uint8_t>(b), now);
  }
  void on_packet(std::span<const std::uint8_t>, TimeNs) override {}
  bool poll_transmit(TimeNs, TxPacket&) override { return false; }
  TimeNs next_deadline() const override { return kNoDeadline; }
  void on_deadline(TimeNs) override {}
  bool poll_async_event(AsyncEvent&) override { return false; }
  const DeviceCounters& counters() const override { return counters_; }
  void set_remote_payload(RemotePayload*) override {}
  bool payload_stable(const TxPacket&) const override { return true; }

 protected:
  DeviceConfig cfg_;
  DeviceCounters counters_{};
  std::uint16_t lid_ = 0;
};

}  // namespace weft::fabricd
