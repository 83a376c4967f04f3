#include "manager/testing/fake_switch_agent.h"

#include <utility>

#include "auth/grpc_credential.h"

namespace netfold::manager {

FakeSwitchAgent::FakeSwitchAgent(std::string manager_address, FakeSwitch* sw, Options options)
    : address_(std::move(manager_address)), sw_(sw), options_(std::move(options)) {
  // Reconnect quickly after the manager restarts (gRPC's default backoff
  // grows to minutes); a real switchd should cap it near its heartbeat.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  stub_ = control::SwitchControl::NewStub(
      auth::CreateChannel(address_, {.credential = options_.credential}, args));
}

FakeSwitchAgent::~FakeSwitchAgent() { Stop(); }

void FakeSwitchAgent::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void FakeSwitchAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Time FakeSwitchAgent::last_heartbeat_sent() const {
  absl::MutexLock lock(&mu_);
  return last_heartbeat_sent_;
}

void FakeSwitchAgent::PauseHeartbeats(bool paused) {
  absl::MutexLock lock(&mu_);
  paused_ = paused;
}

void FakeSwitchAgent::HoldCommands(bool held) {
  absl::MutexLock lock(&mu_);
  held_ = held;
}

bool FakeSwitchAgent::WriteLocked(const control::SwitchMessage& msg) {
  return stream_ != nullptr && stream_->Write(msg);
}

bool FakeSwitchAgent::ReportQpError(uint32_t qpn, const std::string& reason) {
  control::SwitchMessage msg;
  msg.mutable_qp_error()->set_qpn(qpn);
  msg.mutable_qp_error()->set_reason(reason);
  absl::MutexLock lock(&write_mu_);
  return WriteLocked(msg);
}

bool FakeSwitchAgent::WaitRegistered(absl::Duration timeout, int count) {
  absl::MutexLock lock(&mu_);
  auto done = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return registrations_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

int FakeSwitchAgent::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

grpc::Status FakeSwitchAgent::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

void FakeSwitchAgent::Run() {
  while (true) {
    grpc::ClientContext ctx;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      ctx_ = &ctx;
    }
    std::unique_ptr<grpc::ClientReaderWriter<control::SwitchMessage, control::ManagerMessage>>
        stream = stub_->Connect(&ctx);
    control::SwitchMessage reg;
    *reg.mutable_register_() = sw_->Registration();
    control::ManagerMessage welcome;
    bool ok = stream->Write(reg) && stream->Read(&welcome) && welcome.has_welcome();
    std::thread heartbeats;
    absl::Mutex hb_mu;
    bool hb_stop = false;
    if (ok) {
      {
        absl::MutexLock lock(&write_mu_);
        stream_ = stream.get();
      }
      {
        absl::MutexLock lock(&mu_);
        ++registrations_;
      }
      const absl::Duration interval =
          absl::Milliseconds(std::max<uint32_t>(10, welcome.welcome().heartbeat_interval_ms()));
      heartbeats = std::thread([&, interval] {
        uint64_t seq = 0;
        while (true) {
          {
            absl::MutexLock lock(&hb_mu);
            auto stop = [&hb_stop]() { return hb_stop; };
            if (hb_mu.AwaitWithTimeout(absl::Condition(&stop), interval)) return;
          }
          bool paused;
          {
            absl::MutexLock lock(&mu_);
            paused = paused_;
            if (!paused) last_heartbeat_sent_ = absl::Now();
          }
          if (paused) continue;
          control::SwitchMessage hb;
          hb.mutable_heartbeat()->set_sequence(++seq);
          *hb.mutable_heartbeat()->mutable_usage() = sw_->Usage();
          absl::MutexLock lock(&write_mu_);
          WriteLocked(hb);
        }
      });
      control::ManagerMessage cmd;
      while (stream->Read(&cmd)) {
        {
          absl::MutexLock lock(&mu_);
          auto go = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !held_ || stopping_; };
          mu_.Await(absl::Condition(&go));
          if (stopping_) break;  // killed while held: the command is lost with it
        }
        control::CommandResult result = sw_->Apply(cmd);
        if (cmd.command_id() == 0) continue;
        control::SwitchMessage out;
        *out.mutable_result() = result;
        absl::MutexLock lock(&write_mu_);
        WriteLocked(out);
      }
      {
        absl::MutexLock lock(&hb_mu);
        hb_stop = true;
      }
      heartbeats.join();
      absl::MutexLock lock(&write_mu_);
      stream_ = nullptr;
    }
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    {
      absl::MutexLock lock(&mu_);
      ctx_ = nullptr;
      if (!status.ok()) last_error_ = status;
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), options_.reconnect_delay)) return;
    }
  }
}

}  // namespace netfold::manager
