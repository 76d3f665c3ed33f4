// src/ofi/capture_port.cpp — FI_WEFT_PCAP on the media that carry IBA packets (shm, loopback,
// fabric): a MediumPort in front of another that hands the inner port a capturing Device
// (src/io/capture.hpp), so every packet the domain's Device sends or receives lands in the pcap
// file as an IBA packet, LRH to VCRC (ERF InfiniBand records, as the emulator's captures). The
// Ethernet media capture their own RoCEv2 frames instead (udp_port.cpp, dpdk_port.cpp).
//
// A capture shows what the medium carries, so the two shortcuts around it are off while it runs:
// direct messages (tx_direct: provider messages that are not IBA packets) are declined, and
// direct reads (direct_read_pid: a rendezvous receiver copying the sender's buffer with
// process_vm_readv) are not offered, so messages and their payloads travel as RC packets.
// Direct messages a non-capturing peer sends still arrive (the inner port hands them to the
// provider before the capture sees them).
//
// Thread-safety: the inner port's (one user at a time).
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "src/io/capture.hpp"
#include "src/ofi/ofi.hpp"

namespace weft::ofi {
namespace {

class CapturePort final : public MediumPort {
 public:
  explicit CapturePort(std::unique_ptr<MediumPort> inner) : inner_(std::move(inner)) {}
  ~CapturePort() override {
    WEFT_INFO(FI_LOG_DOMAIN, "capture of lid %u: %llu packets", inner_->local().lid,
              (unsigned long long)cap_.packets());
  }
  bool open(const std::string& path) { return cap_.open(path); }

  NodeAddr local() const override { return inner_->local(); }
  bool tx(const TxPacket& pkt) override { return inner_->tx(pkt); }
  void tx_flush() override { inner_->tx_flush(); }
  // The inner port polls the capturing Device (its own burst path, or MediumPort's default).
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    cap_.set_target(&dev);
    return inner_->tx_burst(cap_, now, max_packets);
  }
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max_packets) override {
    cap_.set_target(&dev);
    const std::size_t n = inner_->rx_burst(cap_, now, max_packets);
    cap_.flush();
    return n;
  }
  bool ctrl_send(const NodeAddr& dst, std::span<const std::uint8_t> msg) override {
    return inner_->ctrl_send(dst, msg);
  }
  std::size_t ctrl_poll(const CtrlFn& fn, std::size_t max_msgs, TimeNs now, bool urgent) override {
    return inner_->ctrl_poll(fn, max_msgs, now, urgent);
  }
  int wait_fd() const override { return inner_->wait_fd(); }
  bool arm_sleep(std::vector<pollfd>& fds) override { return inner_->arm_sleep(fds); }
  void disarm_sleep(std::span<const pollfd> fds) override { inner_->disarm_sleep(fds); }
  TimeNs next_deadline() const override { return inner_->next_deadline(); }
  void bind_device(const Device& dev) override { inner_->bind_device(dev); }
  void add_peer(const NodeAddr& peer) override { inner_->add_peer(peer); }
  // See the file comment: no shortcut past the medium while capturing.
  int direct_read_pid(const NodeAddr&) const override { return 0; }
  bool tx_direct(const NodeAddr&, std::span<const std::uint8_t>,
                 std::span<const std::uint8_t>) override {
    return false;
  }
  void set_direct_handler(DirectFn fn, void* ctx) override { inner_->set_direct_handler(fn, ctx); }
  bool register_memory(void* addr, std::size_t bytes, std::string* error) override {
    return inner_->register_memory(addr, bytes, error);
  }
  bool unregister_memory(void* addr) override { return inner_->unregister_memory(addr); }
  Stats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<MediumPort> inner_;
  io::CaptureDevice cap_;
};

}  // namespace

std::unique_ptr<MediumPort> open_capture_port(std::unique_ptr<MediumPort> inner,
                                              const std::string& path) {
  auto port = std::make_unique<CapturePort>(std::move(inner));
  if (!port->open(path)) {
    WEFT_WARN(FI_LOG_DOMAIN, "FI_WEFT_PCAP: cannot write %s", path.c_str());
    return nullptr;
  }
  return port;
}

std::string next_capture_path() {
  static std::atomic<unsigned> opened{0};
  if (g_params.pcap.empty()) return "";
  const std::string& p = g_params.pcap;
  const unsigned n = opened.fetch_add(1);
  std::string tag = "." + std::to_string(getpid());
  if (n > 0) tag += "." + std::to_string(n);
  // Before the extension of the last path component ("cap.pcap" -> "cap.<pid>.pcap").
  const std::size_t slash = p.rfind('/');
  const std::size_t dot = p.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return p + tag;
  return p.substr(0, dot) + tag + p.substr(dot);
}

}  // namespace weft::ofi
