// emu/fabricd/fabric_gsi.cpp — QP1 helpers for attached processes (see fabric_gsi.hpp).
#include "emu/fabricd/fabric_gsi.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "src/base/log.hpp"
#include "src/io/clock.hpp"

namespace weft::fabricd {

std::string_view to_string(GsiError e) {
  switch (e) {
    case GsiError::kTimeout:
      return "timeout";
    case GsiError::kSaError:
      return "SA error";
    case GsiError::kRejected:
      return "rejected";
    case GsiError::kCmTimeout:
      return "CM timeout";
    case GsiError::kInvalid:
      return "invalid";
    case GsiError::kDisconnected:
      return "disconnected";
  }
  return "?";
}

Result<std::unique_ptr<FabricGsi>, io::IoError> FabricGsi::connect(std::string name,
                                                                   io::FabricAttachOptions o,
                                                                   GsiOptions g) {
  auto f = std::unique_ptr<FabricGsi>(new FabricGsi());
  FabricGsi* self = f.get();
  o.wrap_device = [self, g](std::unique_ptr<Device> dev, const io::AttachReply& r) {
    cm::CmConfig c;
    c.port = 1;
    c.lid = r.lid;
    c.ca_guid = r.node_guid;
    c.cm_response_timeout = g.cm_response_timeout;
    c.max_cm_retries = g.max_cm_retries;
    // Communication IDs and PSNs differ between processes (and between attaches of one HCA).
    const auto pid = static_cast<std::uint32_t>(getpid());
    c.comm_id_base = (pid << 12 ^ (r.hca + 1) << 8) | 1;
    c.psn_seed = pid * 2654435761u ^ static_cast<std::uint32_t>(io::monotonic_ns());
    cm::SaClientConfig s;
    s.port = 1;
    s.sm_lid = r.sm_lid;
    s.timeout_ns = g.sa_timeout_ns;
    s.retries_max = g.sa_retries_max;
    s.tid_high = 0x53410000u ^ pid << 4 ^ r.hca;
    auto gd = std::make_unique<cm::GsiDevice>(std::move(dev), c, s);
    self->gsi_ = gd.get();
    return std::unique_ptr<Device>(std::move(gd));
  };
  auto a = io::FabricAttach::connect(std::move(name), o);
  if (!a) return a.error();
  f->attach_ = std::move(a).value();
  return f;
}

template <class Pred>
bool FabricGsi::wait(Pred pred, TimeNs timeout_ns) {
  io::Driver& d = driver();
  if (!d.running()) {
    d.kick();
    return d.run_until(
        [&] {
          drain();
          return pred();
        },
        timeout_ns);
  }
  const TimeNs end = io::monotonic_ns() + timeout_ns;
  for (;;) {
    {
      auto lk = d.lock();
      drain();
      if (pred()) return true;
    }
    d.kick();
    if (io::monotonic_ns() >= end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void FabricGsi::drain() {
  cm::CmEvent e;
  while (cm().poll_event(e)) events_.push_back(std::move(e));
  cm::SaResult r;
  while (sa_client().poll_result(r)) results_.push_back(std::move(r));
}

bool FabricGsi::take_event(cm::ConnId id, cm::CmEvent& out) {
  const auto it = std::find_if(events_.begin(), events_.end(),
                               [&](const cm::CmEvent& e) { return e.conn == id; });
  if (it == events_.end()) return false;
  out = std::move(*it);
  events_.erase(it);
  return true;
}

Result<wire::PathRecord, GsiError> FabricGsi::path_record(std::uint16_t dlid, TimeNs timeout_ns) {
  std::uint64_t id = 0;
  {
    auto lk = driver().running() ? driver().lock() : std::unique_lock<std::mutex>();
    auto q = sa_client().query(cm::path_query(lid(), dlid, /*table=*/false), io::monotonic_ns());
    if (!q) return GsiError::kInvalid;
    id = q.value();
  }
  cm::SaResult res;
  bool got = false;
  const bool ok = wait(
      [&] {
        const auto it = std::find_if(results_.begin(), results_.end(),
                                     [&](const cm::SaResult& r) { return r.id == id; });
        if (it == results_.end()) return false;
        res = std::move(*it);
        results_.erase(it);
        got = true;
        return true;
      },
      timeout_ns);
  if (!ok || !got) return GsiError::kTimeout;
  if (res.timed_out) return GsiError::kTimeout;
  if (!res.ok() || res.status != wire::SaStatus::kOk) return GsiError::kSaError;
  const std::vector<wire::PathRecord> recs = cm::path_records(res);
  if (recs.empty()) return GsiError::kSaError;
  return recs.front();
}

Result<CmConnection, GsiError> FabricGsi::connect_rc(QueuePair& qp, std::uint16_t dlid,
                                                     std::uint64_t service_id,
                                                     std::span<const std::uint8_t> private_data,
                                                     TimeNs timeout_ns) {
  const TimeNs end = io::monotonic_ns() + timeout_ns;
  auto path = path_record(dlid, timeout_ns);
  if (!path) return path.error();
  CmConnection c;
  c.path = path.value();
  {
    auto lk = driver().running() ? driver().lock() : std::unique_lock<std::mutex>();
    cm::ConnectParams p;
    p.service_id = service_id;
    p.qp = &qp;
    p.path = c.path;
    p.private_data.assign(private_data.begin(), private_data.end());
    auto r = cm().connect(p, io::monotonic_ns());
    if (!r) {
      base::get_logger("weft.fabricd")->warn("CM connect: {}", weft::to_string(r.error()));
      return GsiError::kInvalid;
    }
    c.id = r.value();
  }
  auto e = await_established(c.id, end);
  if (!e) return e.error();
  c.remote_lid = e->remote_lid;
  c.remote_qpn = e->remote_qpn;
  c.private_data = std::move(e->private_data);
  return c;
}

Result<CmConnection, GsiError> FabricGsi::accept_rc(std::uint64_t service_id, QueuePair& qp,
                                                    std::span<const std::uint8_t> private_data,
                                                    TimeNs timeout_ns) {
  const TimeNs end = io::monotonic_ns() + timeout_ns;
  if (std::find(listening_.begin(), listening_.end(), service_id) == listening_.end()) {
    auto lk = driver().running() ? driver().lock() : std::unique_lock<std::mutex>();
    if (cm().listen(service_id, RecoveryMode::kGoBackN) != Errc::kOk) return GsiError::kInvalid;
    listening_.push_back(service_id);
  }
  cm::CmEvent req;
  if (!wait(
          [&] {
            const auto it = std::find_if(events_.begin(), events_.end(), [&](const auto& e) {
              return e.type == cm::CmEventType::kReqReceived && e.service_id == service_id;
            });
            if (it == events_.end()) return false;
            req = std::move(*it);
            events_.erase(it);
            return true;
          },
          timeout_ns))
    return GsiError::kTimeout;
  CmConnection c;
  c.id = req.conn;
  c.remote_lid = req.remote_lid;
  c.remote_qpn = req.remote_qpn;
  c.private_data = std::move(req.private_data);
  {
    auto lk = driver().running() ? driver().lock() : std::unique_lock<std::mutex>();
    cm::AcceptParams p;
    p.qp = &qp;
    p.private_data.assign(private_data.begin(), private_data.end());
    const Errc r = cm().accept(c.id, p, io::monotonic_ns());
    if (r != Errc::kOk) {
      base::get_logger("weft.fabricd")->warn("CM accept: {}", weft::to_string(r));
      return GsiError::kInvalid;
    }
  }
  auto e = await_established(c.id, end);
  if (!e) return e.error();
  return c;
}

Result<cm::CmEvent, GsiError> FabricGsi::await_established(cm::ConnId id, TimeNs end) {
  cm::CmEvent e;
  const TimeNs now = io::monotonic_ns();
  if (!wait([&] { return take_event(id, e); }, end > now ? end - now : 0))
    return GsiError::kTimeout;
  switch (e.type) {
    case cm::CmEventType::kEstablished:
      return e;
    case cm::CmEventType::kRejected:
      last_rej_reason_ = e.rej_reason;
      return GsiError::kRejected;
    case cm::CmEventType::kTimeout:
      return GsiError::kCmTimeout;
    default:
      return GsiError::kDisconnected;
  }
}

std::optional<GsiError> FabricGsi::disconnect(cm::ConnId id, TimeNs timeout_ns) {
  {
    auto lk = driver().running() ? driver().lock() : std::unique_lock<std::mutex>();
    if (cm().disconnect(id, io::monotonic_ns()) != Errc::kOk) return GsiError::kInvalid;
  }
  return wait_disconnected(id, timeout_ns);
}

std::optional<GsiError> FabricGsi::wait_disconnected(cm::ConnId id, TimeNs timeout_ns) {
  cm::CmEvent e;
  if (!wait([&] { return take_event(id, e); }, timeout_ns)) return GsiError::kTimeout;
  if (e.type == cm::CmEventType::kDisconnected) return std::nullopt;
  return e.type == cm::CmEventType::kTimeout ? GsiError::kCmTimeout : GsiError::kInvalid;
}

}  // namespace weft::fabricd
