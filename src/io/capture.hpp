// io/capture.hpp — `--pcap` for media that carry IBA packets (the shared-memory rings, the
// provider's loopback and fabric ports): a Device wrapper that writes every packet the Device
// sends or receives to a pcap file, and a Medium wrapper that puts it between any Medium and
// its Device. The Ethernet media (UDP, DPDK) capture their own frames instead (their
// `pcap_path`: Ethernet/IPv4/UDP/RoCEv2 as sent and received, ICRC included).
//
// The records are whole IBA packets, LRH to VCRC, with both CRCs computed (TxPacket::write_to),
// in the link type the emulator's captures use (wire::kLinktypeErf: Wireshark 4.0 decodes ERF's
// InfiniBand records, not linktype 247; src/wire/pcap.hpp). Timestamps are the Driver's clock.
//
// Payloads by reference (the shm medium's zero copy: a received packet's payload pointer is an
// address in the sending process, read through Device::set_remote_payload's RemotePayload) are
// copied for the capture through that same RemotePayload, which may defer its copies until the
// medium's burst ends: received packets are therefore written by flush(), which the wrapper calls
// once the medium's rx_burst has returned (the medium has completed its copies by then).
//
// Thread-safety: that of the wrapped Device and Medium (one owner thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <weft/forwarding_device.hpp>

#include "src/io/medium.hpp"
#include "src/wire/pcap.hpp"

namespace weft::io {

class CaptureDevice final : public ForwardingDevice {
 public:
  // Creates (truncates) path; false when it cannot be written.
  bool open(const std::string& path);
  bool is_open() const { return pcap_.is_open(); }
  // Writes the received packets held since the last flush (call after the medium's rx_burst).
  void flush();
  std::uint64_t packets() const { return packets_; }

  void on_packet(std::span<const std::uint8_t> wire, TimeNs now) override;
  void on_packet(const TxPacket& pkt, TimeNs now) override;
  void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) override;
  bool poll_transmit(TimeNs now, TxPacket& out) override;
  std::size_t poll_transmit_burst(TimeNs now, std::span<TxPacket> out) override;
  void set_remote_payload(RemotePayload* rp) override;

 private:
  struct Held {
    TimeNs ts = 0;
    TxPacket pkt;                     // payload points into bytes when it was placed
    std::vector<std::uint8_t> bytes;  // the wire image, or the placed payload
    bool whole = false;               // bytes is the wire image
  };
  void hold(const TxPacket& pkt, TimeNs now);
  void write_now(const TxPacket& pkt, TimeNs now);

  wire::PcapWriter pcap_;
  RemotePayload* remote_ = nullptr;
  std::vector<Held> held_;  // received this burst, in order (capacity kept)
  std::size_t held_n_ = 0;
  std::vector<std::uint8_t> frame_;
  std::uint64_t packets_ = 0;
};

// A Medium that captures what `inner` carries (see above). Owning or not: the non-owning form
// wraps a medium that lives elsewhere and outlives the wrapper (DirectNode's shm medium).
class CaptureMedium final : public Medium {
 public:
  CaptureMedium(Medium& inner, const std::string& path);
  CaptureMedium(std::unique_ptr<Medium> inner, const std::string& path);
  bool ok() const { return cap_.is_open(); }

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override;
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override;
  int rx_wait_fd() const override { return inner_->rx_wait_fd(); }
  bool prepare_sleep() override { return inner_->prepare_sleep(); }
  void finish_sleep() override { inner_->finish_sleep(); }
  bool tx_blocked() const override { return inner_->tx_blocked(); }
  PeerState peer_state(TimeNs seen_after, int cpu) const override {
    return inner_->peer_state(seen_after, cpu);
  }
  int event_fd() const override { return inner_->event_fd(); }
  void on_event(TimeNs now) override { inner_->on_event(now); }

 private:
  std::unique_ptr<Medium> owned_;
  Medium* inner_;
  CaptureDevice cap_;
};

}  // namespace weft::io
