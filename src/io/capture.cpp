// io/capture.cpp — see capture.hpp. Packets are written with both CRCs: TxPacket::write_to
// computes them, and wire images a kModel medium carried without them get them here.
#include "src/io/capture.hpp"

#include <algorithm>

#include "src/wire/packet.hpp"

namespace weft::io {
namespace {

// A medium whose Devices model CRCs (CrcMode::kModel: the shm rings between processes) carries
// wire images with both CRC fields zero; the capture shows what a wire would carry, so they are
// computed here. Real CRCs (the fabric's, a corrupted packet's) are left as they came: both
// fields zero at once is a 1-in-2^48 coincidence otherwise.
void fill_model_crcs(std::vector<std::uint8_t>& f) {
  constexpr std::size_t kCrcBytes = wire::kIcrcBytes + wire::kVcrcBytes;
  if (f.size() <= kCrcBytes ||
      !std::all_of(f.end() - kCrcBytes, f.end(), [](std::uint8_t b) { return b == 0; }))
    return;
  auto p = wire::parse_packet(f, {.check_icrc = false, .check_vcrc = false});
  if (!p.ok()) return;  // written as it came: the reader sees what the medium carried
  const wire::PacketCrcs c =
      wire::packet_crcs(std::span(f).first(p->header_bytes), p->payload, p->h.bth.pad_cnt);
  const std::size_t at = f.size() - kCrcBytes;
  wire::put_icrc(std::span(f).subspan(at).first<wire::kIcrcBytes>(), c.icrc);
  wire::put_vcrc(std::span(f).subspan(at + wire::kIcrcBytes).first<wire::kVcrcBytes>(), c.vcrc);
}

}  // namespace

bool CaptureDevice::open(const std::string& path) {
  return pcap_.open(path, wire::kLinktypeErf);
}

void CaptureDevice::write_now(const TxPacket& pkt, TimeNs now) {
  frame_.resize(pkt.wire_bytes());
  pkt.write_to(frame_);
  pcap_.write(now, frame_);
  ++packets_;
}

// A received packet waits for flush(): its payload may be a deferred copy from the peer.
void CaptureDevice::hold(const TxPacket& pkt, TimeNs now) {
  if (held_n_ == held_.size()) held_.emplace_back();
  Held& h = held_[held_n_++];
  h.ts = now;
  h.whole = false;
  h.pkt = pkt;
  if (remote_ && pkt.payload_bytes > 0) {
    h.bytes.resize(pkt.payload_bytes);
    remote_->place(h.bytes.data(), pkt.payload, pkt.payload_bytes);
    h.pkt.payload = h.bytes.data();
  } else {
    // A local payload may not outlive the call (a ring slot): the wire image now.
    h.bytes.resize(pkt.wire_bytes());
    pkt.write_to(h.bytes);
    h.whole = true;
  }
}

void CaptureDevice::flush() {
  for (std::size_t i = 0; i < held_n_; ++i) {
    Held& h = held_[i];
    if (h.whole) {
      fill_model_crcs(h.bytes);
      pcap_.write(h.ts, h.bytes);
      ++packets_;
    } else {
      write_now(h.pkt, h.ts);
    }
  }
  held_n_ = 0;
}

void CaptureDevice::on_packet(std::span<const std::uint8_t> wire, TimeNs now) {
  if (held_n_ == held_.size()) held_.emplace_back();
  Held& h = held_[held_n_++];
  h.ts = now;
  h.whole = true;
  h.bytes.assign(wire.begin(), wire.end());
  target_->on_packet(wire, now);
}

void CaptureDevice::on_packet(const TxPacket& pkt, TimeNs now) {
  hold(pkt, now);
  target_->on_packet(pkt, now);
}

void CaptureDevice::on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) {
  for (const TxPacket& p : pkts) hold(p, now);
  target_->on_packet_burst(pkts, now);
}

bool CaptureDevice::poll_transmit(TimeNs now, TxPacket& out) {
  if (!target_->poll_transmit(now, out)) return false;
  write_now(out, now);
  return true;
}

std::size_t CaptureDevice::poll_transmit_burst(TimeNs now, std::span<TxPacket> out) {
  const std::size_t n = target_->poll_transmit_burst(now, out);
  for (std::size_t i = 0; i < n; ++i) write_now(out[i], now);
  return n;
}

void CaptureDevice::set_remote_payload(RemotePayload* rp) {
  remote_ = rp;
  target_->set_remote_payload(rp);
}

CaptureMedium::CaptureMedium(Medium& inner, const std::string& path) : inner_(&inner) {
  cap_.open(path);
}

CaptureMedium::CaptureMedium(std::unique_ptr<Medium> inner, const std::string& path)
    : owned_(std::move(inner)), inner_(owned_.get()) {
  cap_.open(path);
}

std::size_t CaptureMedium::rx_burst(Device& dev, TimeNs now, std::size_t max) {
  cap_.set_target(&dev);
  const std::size_t n = inner_->rx_burst(cap_, now, max);
  cap_.flush();
  return n;
}

std::size_t CaptureMedium::tx_burst(Device& dev, TimeNs now, std::size_t max) {
  cap_.set_target(&dev);
  return inner_->tx_burst(cap_, now, max);
}

}  // namespace weft::io
