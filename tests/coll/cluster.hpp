// tests/coll/cluster.hpp — n ranks in the harness Sim: one Device per rank, a full mesh of
// LinkDirections, a VerbsTransport with RC QPs per (peer, lane) and a Communicator per rank.
// run() starts one collective on every rank at the current virtual time and drives the Sim
// until every rank reports done or failed. Thread-safety: single owner.
#pragma once

#include <memory>
#include <vector>

#include <weft/device.hpp>

#include "emu/harness/setup.hpp"
#include "emu/harness/sim.hpp"
#include "src/coll/communicator.hpp"
#include "src/coll/verbs_transport.hpp"

namespace weft::coll::test {

struct ClusterConfig {
  int ranks = 4;
  int lanes = 2;
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 4096;
  int ranks_per_node = 1;
  harness::LinkConfig link{};
  std::uint64_t seed = 1;
  Mtu mtu = Mtu::k4096;
  RecoveryMode recovery = RecoveryMode::kGoBackN;
  std::uint8_t timeout = 8;  // 4.096 us * 2^8 ~ 1 ms
};

struct RunResult {
  std::vector<CollState> states;
  TimeNs elapsed_ns = 0;
  bool finished = false;  // every rank reported done or failed before the Sim's limits
};

class Cluster {
 public:
  explicit Cluster(const ClusterConfig& cfg) : cfg_(cfg), sim_(sim_config()) {
    const int n = cfg.ranks;
    for (int r = 0; r < n; ++r) {
      rngs_.push_back(std::make_unique<SeededRng>(cfg.seed * 1000 + static_cast<std::uint64_t>(r)));
      DeviceConfig dc;
      dc.name = "gpu" + std::to_string(r);
      dc.node_guid = 0x1000 + static_cast<std::uint64_t>(r);
      dc.ports[0].lid = static_cast<std::uint16_t>(r + 1);
      dc.crc = CrcMode::kModel;
      devs_.push_back(Device::create(dc, *rngs_.back()));
      sim_.add_device(devs_.back().get());
      pds_.push_back(devs_.back()->alloc_pd().value());
      VerbsTransportConfig tc;
      tc.rank = r;
      tc.size = n;
      tc.lanes = cfg.lanes;
      tc.slots = cfg.slots;
      tc.slot_bytes = cfg.slot_bytes;
      auto t = VerbsTransport::create(*devs_.back(), pds_.back(), tc);
      transports_.push_back(std::move(t.value()));
    }
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        sim_.connect(a, b, cfg.link, cfg.link,
                     cfg.seed * 7919 + static_cast<std::uint64_t>(a * n + b));
      }
    }
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        for (int l = 0; l < cfg.lanes; ++l) (void)transports_[a]->create_qp(b, l);
      }
    }
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        for (int l = 0; l < cfg.lanes; ++l) {
          harness::RcParams p;
          p.mtu = cfg.mtu;
          p.recovery = cfg.recovery;
          p.timeout = cfg.timeout;
          p.dest_qpn = transports_[b]->qp(a, l)->qp_num();
          p.dlid = static_cast<std::uint16_t>(b + 1);
          ok_ &= harness::bring_up_rc(*transports_[a]->qp(b, l), p) == Errc::kOk;
          ok_ &= transports_[a]->connect(b, l, transports_[b]->inbox_addr(a, l),
                                         transports_[b]->inbox_rkey()) == Errc::kOk;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      comms_.push_back(
          std::make_unique<Communicator>(*transports_[r], Topology{cfg.ranks_per_node}));
    }
  }
  ~Cluster() {
    transports_.clear();  // QPs and MRs before their Devices
  }

  bool ok() const { return ok_; }
  harness::Sim& sim() { return sim_; }
  Communicator& comm(int r) { return *comms_[static_cast<std::size_t>(r)]; }

  // Starts args[r] on rank r; returns the start errors (all kOk to run).
  RunResult run(const std::vector<CollArgs>& args, std::vector<CollErrc>* start_errors = nullptr) {
    const int n = cfg_.ranks;
    RunResult res;
    res.states.assign(static_cast<std::size_t>(n), CollState::kRunning);
    std::vector<CollErrc> errs(static_cast<std::size_t>(n), CollErrc::kOk);
    bool any_error = false;
    for (int r = 0; r < n; ++r) {
      errs[r] = comms_[r]->start(args[static_cast<std::size_t>(r)]);
      if (errs[r] != CollErrc::kOk) {
        any_error = true;
        res.states[r] = CollState::kFailed;
      }
    }
    if (start_errors != nullptr) *start_errors = errs;
    if (any_error) return res;
    const TimeNs t0 = sim_.now();
    int left = n;
    auto drive = [&](TimeNs now) {
      bool work = false;
      for (int r = 0; r < n; ++r) {
        if (res.states[r] != CollState::kRunning) {
          comms_[r]->progress(now);  // keeps granting credits to slower peers
          work |= comms_[r]->did_work();
          continue;
        }
        const CollState s = comms_[r]->progress(now);
        work |= comms_[r]->did_work();
        if (s == CollState::kDone || s == CollState::kFailed) {
          res.states[r] = s;
          --left;
        }
      }
      // Work posted from here is transmitted only when the Sim next services the Devices.
      if (work) sim_.at(now, [](TimeNs) {});
    };
    sim_.set_after_event(drive);
    sim_.at(sim_.now(), [](TimeNs) {});
    // The collectives' timeout needs a progress() call at that time even if nothing arrives.
    if (args[0].timeout_ns != 0) sim_.at(sim_.now() + args[0].timeout_ns, [](TimeNs) {});
    res.finished = sim_.run_until([&] { return left == 0; });
    res.elapsed_ns = sim_.now() - t0;
    sim_.set_after_event(nullptr);
    return res;
  }

 private:
  harness::SimConfig sim_config() const {
    harness::SimConfig sc;
    sc.crc = CrcMode::kModel;
    sc.events_max = 50'000'000;
    return sc;
  }

  ClusterConfig cfg_;
  harness::Sim sim_;
  std::vector<std::unique_ptr<SeededRng>> rngs_;
  std::vector<std::unique_ptr<Device>> devs_;
  std::vector<ProtectionDomain*> pds_;
  std::vector<std::unique_ptr<VerbsTransport>> transports_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  bool ok_ = true;
};

}  // namespace weft::coll::test
