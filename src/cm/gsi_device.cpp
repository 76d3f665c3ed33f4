// cm/gsi_device.cpp — QP1 beside a Device's transport (see gsi_device.hpp).
#include "src/cm/gsi_device.hpp"

#include <algorithm>
#include <cstring>

#include "src/wire/gmp.hpp"
#include "src/wire/packet.hpp"

namespace weft::cm {

void gsi_packet(std::uint16_t slid, std::uint16_t dlid, std::span<const std::uint8_t> mad,
                TxPacket& out) {
  wire::Headers hd;
  hd.lrh.vl = 0;
  hd.lrh.sl = 0;
  hd.lrh.dlid = dlid;
  hd.lrh.slid = slid;
  hd.bth.opcode = wire::Opcode::kUdSendOnly;
  hd.bth.dest_qp = 1;
  hd.deth.qkey = kGsiQkey;
  hd.deth.src_qp = 1;
  wire::fill_lengths(hd, mad.size());
  out = TxPacket{};
  out.header_bytes = static_cast<std::uint16_t>(wire::encode_headers(hd, out.headers));
  out.payload = mad.data();
  out.payload_bytes = static_cast<std::uint32_t>(mad.size());
  out.pad_bytes = hd.bth.pad_cnt;
  out.crcs_valid = false;
  out.port_num = 1;
  out.dlid = dlid;
  out.sl = 0;
}

std::uint32_t dest_qp_of(std::span<const std::uint8_t> h) {
  if (h.size() < 8) return UINT32_MAX;
  const std::uint8_t lnh = h[1] & 0x3;  // IBA 7.7.5: 2 = BTH follows, 3 = GRH
  const std::size_t bth = lnh == 2 ? 8 : lnh == 3 ? 48 : 0;
  if (bth == 0 || h.size() < bth + 8) return UINT32_MAX;
  return std::uint32_t{h[bth + 5]} << 16 | std::uint32_t{h[bth + 6]} << 8 | h[bth + 7];
}

bool gsi_mad_of(std::span<const std::uint8_t> wire, std::uint8_t port, GsiMad& out) {
  if (dest_qp_of(wire) != 1) return false;
  auto r = wire::parse_packet(wire, wire::ParseOptions{false, false});
  if (!r.ok()) return false;
  const wire::ParsedPacket& p = r.value();
  if (p.h.bth.opcode != wire::Opcode::kUdSendOnly || p.h.deth.qkey != kGsiQkey ||
      p.payload.size() < wire::kMadBytes)
    return false;
  out.lid = p.h.lrh.slid;
  out.port = port;
  std::memcpy(out.mad.data(), p.payload.data(), wire::kMadBytes);
  return true;
}

GsiDevice::GsiDevice(std::unique_ptr<Device> inner, CmConfig cm, SaClientConfig sa)
    : ForwardingDevice(inner.get()),
      inner_(std::move(inner)),
      cm_([&] {
        if (cm.lid == 0) cm.lid = inner_->lid(cm.port);
        if (cm.ca_guid == 0) cm.ca_guid = inner_->node_guid();
        return cm;
      }()),
      sa_(sa) {}

Errc GsiDevice::set_port_lid(std::uint8_t port_num, std::uint16_t lid) {
  if (port_num == cm_.config().port) cm_.set_lid(lid);
  return inner_->set_port_lid(port_num, lid);
}

void GsiDevice::on_mad(const GsiMad& in, TimeNs now) {
  const std::uint8_t cls = in.mad[1];
  if (cls == wire::kMgmtClassSa) {
    stats_.mads_in++;
    sa_.on_mad(in, now);
  } else if (cls == wire::kMgmtClassCm) {
    stats_.mads_in++;
    cm_.on_mad(in, now);
  } else {
    stats_.mads_ignored++;
  }
  collect(now);  // answers leave on the next poll_transmit; next_deadline() says 0 meanwhile
}

void GsiDevice::on_packet(std::span<const std::uint8_t> wire, TimeNs now) {
  if (dest_qp_of(wire) != 1) {
    inner_->on_packet(wire, now);
    return;
  }
  GsiMad in;
  if (gsi_mad_of(wire, 1, in))
    on_mad(in, now);
  else
    stats_.mads_ignored++;
}

void GsiDevice::on_packet(const TxPacket& pkt, TimeNs now) {
  if (dest_qp_of({pkt.headers.data(), pkt.header_bytes}) != 1) {
    inner_->on_packet(pkt, now);
    return;
  }
  // A MAD is 256 bytes: media never send it by reference, so the payload is local.
  std::vector<std::uint8_t> b(pkt.wire_bytes());
  pkt.write_to(b);
  on_packet(std::span<const std::uint8_t>(b), now);
}

void GsiDevice::on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) {
  std::size_t from = 0;
  for (std::size_t i = 0; i < pkts.size(); ++i) {
    if (dest_qp_of({pkts[i].headers.data(), pkts[i].header_bytes}) != 1) continue;
    if (i > from) inner_->on_packet_burst(pkts.subspan(from, i - from), now);
    on_packet(pkts[i], now);
    from = i + 1;
  }
  if (from < pkts.size()) inner_->on_packet_burst(pkts.subspan(from), now);
}

void GsiDevice::collect(TimeNs now) {
  GsiMad m;
  while (cm_.poll_mad(now, m)) queued_.push_back(m);
  while (sa_.poll_mad(now, m)) queued_.push_back(m);
}

bool GsiDevice::next_mad(TxPacket& out) {
  if (queued_.empty()) return false;
  if (sent_used_ == sent_.size()) sent_.emplace_back();
  std::vector<std::uint8_t>& b = sent_[sent_used_++];
  const GsiMad& m = queued_.front();
  b.assign(m.mad.begin(), m.mad.end());
  gsi_packet(lid(1), m.lid, b, out);
  queued_.pop_front();
  stats_.mads_out++;
  return true;
}

bool GsiDevice::poll_transmit(TimeNs now, TxPacket& out) {
  sent_used_ = 0;  // what we handed out before is no longer referred to
  collect(now);
  if (next_mad(out)) return true;
  return inner_->poll_transmit(now, out);
}

std::size_t GsiDevice::poll_transmit_burst(TimeNs now, std::span<TxPacket> out) {
  sent_used_ = 0;
  collect(now);
  std::size_t n = 0;
  while (n < out.size() && next_mad(out[n])) ++n;
  if (n < out.size()) n += inner_->poll_transmit_burst(now, out.subspan(n));
  return n;
}

TimeNs GsiDevice::next_deadline() const {
  if (!queued_.empty()) return 0;
  return std::min({inner_->next_deadline(), cm_.next_deadline(), sa_.next_deadline()});
}

void GsiDevice::on_deadline(TimeNs now) {
  if (inner_->next_deadline() <= now) inner_->on_deadline(now);
  if (cm_.next_deadline() <= now) cm_.on_deadline(now);
  if (sa_.next_deadline() <= now) sa_.on_deadline(now);
  collect(now);
}

bool GsiDevice::payload_stable(const TxPacket& pkt) const {
  if (dest_qp_of({pkt.headers.data(), pkt.header_bytes}) == 1) return false;
  return inner_->payload_stable(pkt);
}

}  // namespace weft::cm
