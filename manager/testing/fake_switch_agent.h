// A FakeSwitch behind a real gRPC Connect stream: what netfold-switchd's
// control side does, minus the data plane. Used by tests of the gRPC
// services and of the netfold-managerd daemon.
//
//   FakeSwitch sw("leaf0", "127.0.0.1:5000", capacity);
//   FakeSwitchAgent agent("127.0.0.1:47910", &sw);
//   agent.Start();                                  // connects, registers, heartbeats
//   ASSERT_TRUE(agent.WaitRegistered(absl::Seconds(5)));
//   agent.Kill();                                   // the switch process dies
//
// The agent reconnects (and registers again, reporting its state) whenever
// the stream breaks, until Stop or Kill. Thread-safe.
#ifndef NETFOLD_MANAGER_TESTING_FAKE_SWITCH_AGENT_H_
#define NETFOLD_MANAGER_TESTING_FAKE_SWITCH_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "manager/testing/fake_switch.h"
#include "proto/control/netfold_control.grpc.pb.h"

namespace netfold::manager {

class FakeSwitchAgent {
 public:
  struct Options {
    std::string credential;  // the fabric credential, sent on Connect ("" = none)
    absl::Duration reconnect_delay = absl::Milliseconds(100);
  };
  FakeSwitchAgent(std::string manager_address, FakeSwitch* sw, Options options);
  FakeSwitchAgent(std::string manager_address, FakeSwitch* sw)
      : FakeSwitchAgent(std::move(manager_address), sw, Options()) {}
  ~FakeSwitchAgent();

  void Start();
  // Ends the stream and stops for good. Kill is the same, named for tests
  // that simulate a crash; both are idempotent.
  void Stop();
  void Kill() { Stop(); }
  // While paused no heartbeats are sent (a hung switch); commands still run.
  void PauseHeartbeats(bool paused);
  // While held, commands wait unapplied and unanswered (a switch slow to
  // take them); heartbeats go on. Released, they run in order.
  void HoldCommands(bool held);
  // When the last heartbeat was handed to the stream (taken just before the
  // write: the manager received it no earlier); InfinitePast if none.
  absl::Time last_heartbeat_sent() const;
  // Sends a QP error report on the current stream. False if not connected.
  bool ReportQpError(uint32_t qpn, const std::string& reason);

  // Waits until at least `count` registrations were welcomed.
  bool WaitRegistered(absl::Duration timeout, int count = 1);
  int registrations() const;
  // The last refusal of a registration (for tests of refused switches).
  grpc::Status last_error() const;

 private:
  void Run();
  bool WriteLocked(const control::SwitchMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const std::string address_;
  FakeSwitch* const sw_;
  const Options options_;
  std::unique_ptr<control::SwitchControl::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_heartbeat_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  grpc::Status last_error_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;

  absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  grpc::ClientReaderWriter<control::SwitchMessage, control::ManagerMessage>* stream_
      ABSL_GUARDED_BY(write_mu_) = nullptr;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_FAKE_SWITCH_AGENT_H_
