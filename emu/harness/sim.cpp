// emu/harness/sim.cpp — the virtual-time event loop (see sim.hpp).
#include "emu/harness/sim.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/assert.hpp"

namespace weft::harness {

const char* to_string(TraceKind k) {
  switch (k) {
    case TraceKind::kSent:
      return "sent";
    case TraceKind::kDropped:
      return "DROPPED";
    case TraceKind::kBlackout:
      return "BLACKOUT";
    case TraceKind::kCorrupted:
      return "CORRUPTED";
    case TraceKind::kDuplicated:
      return "DUPLICATED";
    case TraceKind::kDelivered:
      return "delivered";
    case TraceKind::kUnroutable:
      return "UNROUTABLE";
  }
  return "?";
}

int Sim::add_device(Device* device) {
  const int idx = static_cast<int>(devices_.size());
  devices_.push_back(Slot{device, kNoDeadline});
  const auto nports = device->config().ports.size();
  for (std::size_t p = 1; p <= nports; ++p) {
    routes_.push_back(Route{device->lid(static_cast<std::uint8_t>(p)), idx});
  }
  return idx;
}

void Sim::connect(int a, int b, const LinkConfig& ab, const LinkConfig& ba, std::uint64_t seed) {
  // Two independent streams derived from the seed (splitmix constants keep them apart).
  links_.push_back(LinkEntry{a, b, std::make_unique<LinkDirection>(ab, seed * 2 + 1)});
  links_.push_back(LinkEntry{b, a, std::make_unique<LinkDirection>(ba, seed * 2 + 2)});
}

LinkDirection* Sim::link(int from, int to) {
  for (auto& l : links_) {
    if (l.from == from && l.to == to) return l.dir.get();
  }
  return nullptr;
}

void Sim::push(TimeNs t, EvKind kind, int device, std::uint32_t slot) {
  queue_.push(Event{std::max(t, now_), seq_++, kind, device, slot});
}

void Sim::at(TimeNs t, std::function<void(TimeNs)> fn) {
  user_.push_back(std::move(fn));
  ++pending_user_;
  push(t, EvKind::kUser, -1, static_cast<std::uint32_t>(user_.size() - 1));
}

std::uint32_t Sim::alloc_packet() {
  if (!free_packets_.empty()) {
    const std::uint32_t s = free_packets_.back();
    free_packets_.pop_back();
    return s;
  }
  packets_.emplace_back();
  return static_cast<std::uint32_t>(packets_.size() - 1);
}

void Sim::trace(TraceKind kind, int src, int dst, std::span<const std::uint8_t> wire) {
  hash_.add_u64(static_cast<std::uint64_t>(kind));
  hash_.add_u64(now_);
  hash_.add_u64(static_cast<std::uint64_t>(src + 1) << 32 | static_cast<std::uint32_t>(dst + 1));
  hash_.add(wire);
  if (trace_) trace_(TraceRecord{kind, now_, src, dst, wire});
}

std::span<const std::uint8_t> Sim::image_for_trace(const InFlight& p) {
  if (config_.crc == CrcMode::kCompute) return p.wire;
  // kModel: hash headers + payload (cheap); materialize only for a trace hook.
  if (!trace_ || !materialize_) {
    scratch_.assign(p.ref.headers.begin(), p.ref.headers.begin() + p.ref.header_bytes);
    scratch_.insert(scratch_.end(), p.payload.begin(), p.payload.end());
    return scratch_;
  }
  scratch_.resize(p.ref.wire_bytes());
  p.ref.write_to(scratch_);
  return scratch_;
}

void Sim::transmit(int src, const TxPacket& pkt) {
  const std::uint32_t slot = alloc_packet();
  InFlight& p = packets_[slot];
  p.src = src;
  if (config_.crc == CrcMode::kCompute) {
    p.wire.resize(pkt.wire_bytes());
    pkt.write_to(p.wire);
  } else {
    p.ref = pkt;
    p.payload.assign(pkt.payload, pkt.payload + pkt.payload_bytes);
    p.ref.payload = p.payload.data();
  }
  int dst = -1;
  for (const Route& r : routes_) {
    if (r.lid == pkt.dlid) {
      dst = r.device;
      break;
    }
  }
  trace(TraceKind::kSent, src, dst, image_for_trace(p));
  LinkDirection* dir = dst >= 0 ? link(src, dst) : nullptr;
  if (dir == nullptr) {
    ++unroutable_;
    trace(TraceKind::kUnroutable, src, dst, image_for_trace(p));
    free_packets_.push_back(slot);
    return;
  }
  const LinkVerdict v = dir->send(now_, pkt.wire_bytes());
  if (v.dropped) {
    trace(v.blackout ? TraceKind::kBlackout : TraceKind::kDropped, src, dst, image_for_trace(p));
    free_packets_.push_back(slot);
    return;
  }
  if (v.corrupted) {
    if (config_.crc == CrcMode::kCompute) {
      p.wire[v.corrupt_bit / 8] ^= static_cast<std::uint8_t>(1u << (v.corrupt_bit % 8));
    } else {
      p.ref.corrupt = true;
    }
    trace(TraceKind::kCorrupted, src, dst, image_for_trace(p));
  }
  push(v.arrive_ns, EvKind::kDeliver, dst, slot);
  ++pending_packets_;
  if (v.duplicated) {
    trace(TraceKind::kDuplicated, src, dst, image_for_trace(p));
    const std::uint32_t copy = alloc_packet();
    packets_[copy] = packets_[slot];  // note: `p` may dangle after alloc_packet
    if (config_.crc == CrcMode::kModel) packets_[copy].ref.payload = packets_[copy].payload.data();
    push(v.duplicate_arrive_ns, EvKind::kDeliver, dst, copy);
    ++pending_packets_;
  }
}

void Sim::service(int device) {
  Slot& s = devices_[static_cast<std::size_t>(device)];
  TxPacket pkt;
  // Bounded drain: a Device that never stops transmitting is a bug, caught by events_max too.
  for (std::uint32_t i = 0; i < 1'000'000 && s.dev->poll_transmit(now_, pkt); ++i) {
    transmit(device, pkt);
    pkt = TxPacket{};
  }
  const TimeNs d = s.dev->next_deadline();
  if (d != kNoDeadline && d != s.armed_deadline) {
    s.armed_deadline = d;
    push(d, EvKind::kDeadline, device, 0);
  } else if (d == kNoDeadline) {
    s.armed_deadline = kNoDeadline;
  }
}

bool Sim::step() {
  if (queue_.empty()) return false;
  if (events_ >= config_.events_max || queue_.top().time > config_.time_ns_max) {
    limit_reached_ = true;
    return false;
  }
  const Event ev = queue_.top();
  queue_.pop();
  ++events_;
  now_ = ev.time;
  switch (ev.kind) {
    case EvKind::kDeliver: {
      --pending_packets_;
      InFlight& p = packets_[ev.slot];
      Device* dev = devices_[static_cast<std::size_t>(ev.device)].dev;
      trace(TraceKind::kDelivered, p.src, ev.device, image_for_trace(p));
      if (config_.crc == CrcMode::kCompute) {
        dev->on_packet(std::span<const std::uint8_t>(p.wire), now_);
      } else {
        dev->on_packet(p.ref, now_);
      }
      free_packets_.push_back(ev.slot);
      service(ev.device);
      break;
    }
    case EvKind::kDeadline: {
      Slot& s = devices_[static_cast<std::size_t>(ev.device)];
      // A deadline re-armed since this event was queued makes it stale; only the armed one fires.
      if (s.armed_deadline != kNoDeadline && s.armed_deadline <= now_ &&
          s.dev->next_deadline() <= now_) {
        s.armed_deadline = kNoDeadline;
        s.dev->on_deadline(now_);
        service(ev.device);
      } else if (s.dev->next_deadline() != s.armed_deadline) {
        service(ev.device);
      }
      break;
    }
    case EvKind::kUser: {
      --pending_user_;
      auto fn = std::move(user_[ev.slot]);
      fn(now_);
      for (int i = 0; i < device_count(); ++i) service(i);
      break;
    }
  }
  if (after_event_) after_event_(now_);
  return true;
}

bool Sim::run_until(const std::function<bool()>& done) {
  while (true) {
    if (done()) return true;
    if (!step()) return done();
  }
}

}  // namespace weft::harness
