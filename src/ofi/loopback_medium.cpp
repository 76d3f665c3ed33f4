// src/ofi/loopback_medium.cpp — the in-process loopback medium (see medium.hpp).
//
// A process-wide registry maps LIDs to nodes. Each node has an inbox of materialised packets and
// of control datagrams, guarded by its own mutex, and an eventfd that tx_flush/ctrl_send signal.
// Inboxes are bounded (kInboxPacketsMax): beyond it a packet is dropped, as a full link would.
#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

inline constexpr std::size_t kInboxPacketsMax = 1u << 16;
inline constexpr std::uint16_t kLidFirst = 1, kLidLast = 0xBFFF;  // unicast LIDs (IBA 4.1.3)

// A materialised packet. Not value-initialised: write_to fills every byte.
struct Buf {
  std::unique_ptr<std::uint8_t[]> bytes;
  std::size_t size = 0;
};

struct Node {
  std::mutex mu;
  std::deque<Buf> packets;
  std::deque<std::pair<NodeAddr, std::vector<std::uint8_t>>> ctrl;
  int efd = -1;
  std::uint64_t dropped = 0;
  void signal() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(efd, &one, sizeof one);
  }
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<std::string, std::uint16_t>, std::shared_ptr<Node>> nodes;
  std::uint16_t next_lid = kLidFirst;
  std::uint64_t next_node_id = 1;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: ports may close during exit
  return *r;
}

class LoopbackPort final : public MediumPort {
 public:
  LoopbackPort(std::string fabric, NodeAddr self, std::shared_ptr<Node> node)
      : fabric_(std::move(fabric)),
        self_(self),
        node_(std::move(node)),
        rng_((g_params.loopback_seed + 1) * 0x9E3779B97F4A7C15ull ^ self.lid) {}
  ~LoopbackPort() override {
    if (faults_dropped_)
      WEFT_INFO(FI_LOG_DOMAIN, "loopback lid %u: %llu packets dropped by FI_WEFT_LOOPBACK_DROP",
                self_.lid, (unsigned long long)faults_dropped_);
    Registry& r = registry();
    {
      std::lock_guard lk(r.mu);
      r.nodes.erase({fabric_, self_.lid});
    }
    ::close(node_->efd);
  }

  NodeAddr local() const override { return self_; }

  // xorshift64, seeded per port from FI_WEFT_LOOPBACK_SEED and the LID: a run replays exactly
  // as long as the order of sends does.
  std::uint64_t draw_ppm() {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_ % 1'000'000;
  }

  bool tx(const TxPacket& pkt) override {
    std::shared_ptr<Node> dst = lookup(pkt.dlid);
    if (!dst) return false;
    Buf b{std::unique_ptr<std::uint8_t[]>(new std::uint8_t[pkt.wire_bytes()]), pkt.wire_bytes()};
    pkt.write_to({b.bytes.get(), b.size});
    pending_.emplace_back(std::move(dst), std::move(b));
    return true;
  }

  void tx_flush() override {
    for (auto& [dst, bytes] : pending_) {
      if (g_params.loopback_drop_ppm && draw_ppm() < g_params.loopback_drop_ppm) {
        ++faults_dropped_;  // the medium's fault (FI_WEFT_LOOPBACK_DROP): RC retransmits
        continue;
      }
      std::lock_guard lk(dst->mu);
      if (dst->packets.size() >= kInboxPacketsMax) {
        ++dst->dropped;
        continue;
      }
      dst->packets.push_back(std::move(bytes));
      if (dst->packets.size() == 1) dst->signal();
    }
    pending_.clear();
  }

  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    batch_.clear();
    {
      std::lock_guard lk(node_->mu);
      while (!node_->packets.empty() && batch_.size() < max_packets) {
        batch_.push_back(std::move(node_->packets.front()));
        node_->packets.pop_front();
      }
    }
    for (auto& b : batch_) dev.on_packet(std::span<const std::uint8_t>(b.bytes.get(), b.size), now);
    return batch_.size();
  }

  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    if (msg.size() > kCtrlBytesMax) return false;
    std::shared_ptr<Node> n = lookup(dst.lid);
    if (!n) return false;
    std::lock_guard lk(n->mu);
    n->ctrl.emplace_back(self_, std::vector<std::uint8_t>(msg.begin(), msg.end()));
    n->signal();
    return true;
  }

  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs, bool) override {
    std::deque<std::pair<NodeAddr, std::vector<std::uint8_t>>> got;
    {
      std::lock_guard lk(node_->mu);
      while (!node_->ctrl.empty() && got.size() < max_msgs) {
        got.push_back(std::move(node_->ctrl.front()));
        node_->ctrl.pop_front();
      }
    }
    for (auto& [src, bytes] : got) fn(src, bytes);
    return got.size();
  }

  int wait_fd() const override { return node_->efd; }

  // The inbox's eventfd is a doorbell that needs no arming: a push onto an empty inbox and every
  // control datagram ring it. Drained here under the inbox lock, so a push after the look rings
  // it again.
  bool arm_sleep(std::vector<pollfd>& fds) override {
    fds.push_back({node_->efd, POLLIN, 0});
    std::lock_guard lk(node_->mu);
    std::uint64_t v;
    [[maybe_unused]] auto r = ::read(node_->efd, &v, sizeof v);
    return node_->packets.empty() && node_->ctrl.empty();
  }

 private:
  std::shared_ptr<Node> lookup(std::uint16_t lid) {
    if (cache_lid_ == lid && cache_) return cache_;
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    auto it = r.nodes.find({fabric_, lid});
    if (it == r.nodes.end()) return nullptr;
    cache_lid_ = lid;
    cache_ = it->second;
    return cache_;
  }

  std::string fabric_;
  NodeAddr self_;
  std::shared_ptr<Node> node_;
  std::vector<std::pair<std::shared_ptr<Node>, Buf>> pending_;
  std::vector<Buf> batch_;
  std::uint64_t rng_;
  std::uint64_t faults_dropped_ = 0;
  std::uint16_t cache_lid_ = 0;
  std::shared_ptr<Node> cache_;
};

}  // namespace

std::unique_ptr<MediumPort> open_loopback_port(std::string_view fabric_name) {
  Registry& r = registry();
  auto node = std::make_shared<Node>();
  node->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (node->efd < 0) return nullptr;
  std::lock_guard lk(r.mu);
  const std::string fabric(fabric_name);
  for (std::uint32_t tries = 0; tries <= kLidLast; ++tries) {
    const std::uint16_t lid = r.next_lid;
    r.next_lid = lid == kLidLast ? kLidFirst : static_cast<std::uint16_t>(lid + 1);
    if (r.nodes.count({fabric, lid})) continue;
    r.nodes[{fabric, lid}] = node;
    NodeAddr self{r.next_node_id++, lid};
    return std::make_unique<LoopbackPort>(fabric, self, node);
  }
  ::close(node->efd);
  return nullptr;
}

}  // namespace weft::ofi
