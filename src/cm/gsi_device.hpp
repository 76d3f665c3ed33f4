// cm/gsi_device.hpp — QP1 (the General Services Interface, IBA 13.5) for a Device whose
// transport has none (the transport's first QPN is 2): a decorator that owns the port's
// CommManager and SaClient and carries their MADs as real UD SEND packets to and from QP1 with
// the GSI Q_Key, beside the wrapped Device's own packets. Packets for QP1 never reach the wrapped
// Device; its packets and the MADs leave through poll_transmit / poll_transmit_burst (MADs
// first). The CM moves the QPs it connects from inside on_packet / on_deadline, i.e. on
// whichever thread drives the Device (io::Driver's threading model: hold the driver's lock to
// call cm() / sa_client() from another thread, then kick it).
//
// What carries the packets is the medium's business: with the fabric daemon (emu/fabricd) the
// process's HCA relays them to and from the emulated fabric, where they travel as GMPs to the
// far HCA's QP1 (the SA at the SM's LID answers SA queries).
// Sans-IO: every entry point takes the caller's `now`.
// Thread-safety: none; the owner of the wrapped Device drives it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include <weft/device.hpp>
#include <weft/forwarding_device.hpp>

#include "src/cm/comm_manager.hpp"
#include "src/cm/gsi.hpp"
#include "src/cm/sa_client.hpp"

namespace weft::cm {

inline constexpr std::uint32_t kGsiQkey = 0x80010000;  // IBA 10.2.4.3

// The headers of a UD SEND carrying one MAD from QP1 at `slid` to QP1 at `dlid` (SL 0, VL 0,
// P_Key 0xFFFF), payload and lengths filled: `out.payload` points at `mad` (kept by the caller).
void gsi_packet(std::uint16_t slid, std::uint16_t dlid, std::span<const std::uint8_t> mad,
                TxPacket& out);
// The destination QP of a wire image or header block (LRH [GRH] BTH ...), or UINT32_MAX when it
// is too short or not an IBA packet. Cheap: no full parse.
std::uint32_t dest_qp_of(std::span<const std::uint8_t> headers);
// A whole UD packet to QP1 as a GsiMad (lid = LRH SLID, port = `port`). False when it is not
// a UD SEND to QP1 with the GSI Q_Key carrying a whole MAD.
bool gsi_mad_of(std::span<const std::uint8_t> wire, std::uint8_t port, GsiMad& out);

struct GsiDeviceStats {
  std::uint64_t mads_in = 0, mads_out = 0, mads_ignored = 0;  // ignored: not SA / CM, or bad
};

class GsiDevice final : public ForwardingDevice {
 public:
  // cm.lid / cm.ca_guid default to the wrapped Device's port-1 LID and node GUID when 0.
  GsiDevice(std::unique_ptr<Device> inner, CmConfig cm, SaClientConfig sa);

  Device& inner() { return *inner_; }
  CommManager& cm() { return cm_; }
  SaClient& sa_client() { return sa_; }
  const GsiDeviceStats& gsi_stats() const { return stats_; }

  Errc set_port_lid(std::uint8_t port_num, std::uint16_t lid) override;
  void on_packet(std::span<const std::uint8_t> wire, TimeNs now) override;
  void on_packet(const TxPacket& pkt, TimeNs now) override;
  void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) override;
  bool poll_transmit(TimeNs now, TxPacket& out) override;
  std::size_t poll_transmit_burst(TimeNs now, std::span<TxPacket> out) override;
  TimeNs next_deadline() const override;
  void on_deadline(TimeNs now) override;
  bool payload_stable(const TxPacket& pkt) const override;

 private:
  void on_mad(const GsiMad& in, TimeNs now);
  // Moves what the agents queued into out_ (the packets' MAD bytes live there).
  void collect(TimeNs now);
  bool next_mad(TxPacket& out);

  std::unique_ptr<Device> inner_;
  CommManager cm_;
  SaClient sa_;
  std::deque<GsiMad> queued_;                    // waiting to be polled out
  std::vector<std::vector<std::uint8_t>> sent_;  // MADs handed out since the last poll call
  std::size_t sent_used_ = 0;
  GsiDeviceStats stats_;
};

}  // namespace weft::cm
