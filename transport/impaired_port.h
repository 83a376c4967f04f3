// A Port decorator that puts a LinkImpairment stage on the send path and one
// on the receive path of another port.
//
//   auto port = std::make_unique<ImpairedPort>(std::move(udp), ImpairmentConfig{},
//                                              *ParseImpairment("drop=0.1,seed=3"),
//                                              RealClock());
//   port->SetReceiveImpairment(*ParseImpairment("down=1"));   // at run time
//
// Packets the inner port would not take are kept and retried on the next
// call (bounded by `kMaxPendingTx`; beyond that they are dropped and
// counted, as a full transmit queue does). RecvBurst waits no longer than
// the next held packet's due time, so delayed packets come out on time.
// Thread-safety: as for every Port; Set*Impairment may be called from any
// thread.
#ifndef NETFOLD_TRANSPORT_IMPAIRED_PORT_H_
#define NETFOLD_TRANSPORT_IMPAIRED_PORT_H_

#include <deque>
#include <atomic>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "transport/link_impairment.h"
#include "transport/port.h"

namespace netfold::transport {

class ImpairedPort : public Port {
 public:
  static constexpr size_t kMaxPendingTx = 4096;

  ImpairedPort(std::unique_ptr<Port> inner, const ImpairmentConfig& send,
               const ImpairmentConfig& receive, const Clock& clock);
  ~ImpairedPort() override;

  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override {
    return inner_->JoinMulticast(group);
  }
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override {
    return inner_->LeaveMulticast(group);
  }
  Ipv4Endpoint local() const override { return inner_->local(); }
  PacketPool& pool() override { return inner_->pool(); }
  const PortCounters& counters() const override { return inner_->counters(); }
  void Wake() override {
    woken_.store(true, std::memory_order_relaxed);
    inner_->Wake();
  }

  void SetSendImpairment(const ImpairmentConfig& c) { send_.SetConfig(c); }
  void SetReceiveImpairment(const ImpairmentConfig& c) { receive_.SetConfig(c); }
  const LinkImpairment& send_stage() const { return send_; }
  const LinkImpairment& receive_stage() const { return receive_; }
  Port& inner() { return *inner_; }
  uint64_t num_tx_overflow() const { return tx_overflow_; }

  // Sends held packets that are due. Called by RecvBurst and SendBurst; call
  // it from an idle loop if neither runs.
  void Flush();

 private:
  void TransmitPending();

  std::atomic<bool> woken_{false};  // Wake(): stop waiting
  std::unique_ptr<Port> inner_;
  const Clock& clock_;
  LinkImpairment send_;
  LinkImpairment receive_;
  std::vector<PacketBuffer*> scratch_;
  std::deque<PacketBuffer*> pending_tx_;  // passed the send stage, not yet taken
  std::deque<PacketBuffer*> ready_rx_;    // passed the receive stage, not yet returned
  uint64_t tx_overflow_ = 0;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_IMPAIRED_PORT_H_
