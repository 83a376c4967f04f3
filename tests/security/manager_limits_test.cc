// Issue 23, items 6 and 4: what one local client can take from the others
// at the manager. Every local process reaches the manager from 127.0.0.1,
// so limits keyed on the peer IP alone put them all in one basket:
//   6. a flood of requests made a victim job's calls fail (one rate-limit
//      bucket for all of loopback, and libnetfold did not retry a refusal);
//   4. ~1000 idle streams took every gRPC handler thread, and the victims'
//      heartbeats failed with RESOURCE_EXHAUSTED.
// A real ManagerServer on a loopback port, fake switches behind real
// Connect streams, the victim speaking through libnetfold's ManagerClient.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/manager_client.h"
#include "manager/control_service.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/fake_switch_agent.h"
#include "manager/testing/grpc_test_util.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

class ManagerLimits : public testing::Test {
 protected:
  void Start(ServerOptions so) {
    absl::StatusOr<Topology> t = LoadExampleTopology("single_switch.yaml");
    ASSERT_TRUE(t.ok()) << t.status();
    topo_ = std::make_unique<Topology>(*std::move(t));
    fabric_ = std::make_unique<FakeFabric>(*topo_);
    hub_ = std::make_unique<SwitchHub>();
    ManagerOptions mo;
    mo.heartbeat_interval = absl::Milliseconds(100);
    mo.switch_timeout = absl::Seconds(2);
    mo.host_timeout = absl::ZeroDuration();
    am_ = std::make_unique<AggregationManager>(*topo_, mo, RealClock(), hub_.get(), nullptr);
    ASSERT_TRUE(am_->Recover(state::Snapshot()).ok());
    so.listen_address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<ManagerServer>> server =
        ManagerServer::Start(am_.get(), hub_.get(), so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = absl::StrFormat("127.0.0.1:%d", server_->port());
    for (FakeSwitch* s : fabric_->All()) {
      agents_.push_back(std::make_unique<FakeSwitchAgent>(address_, s));
      agents_.back()->Start();
    }
    ASSERT_TRUE(WaitUntil(
        [&] {
          const control::GetStatusResponse st = am_->GetStatus();
          for (const auto& s : st.switches()) {
            if (s.state() != control::SwitchStatus::UP) return false;
          }
          return true;
        },
        absl::Seconds(20)));
  }

  void TearDown() override {
    agents_.clear();
    if (server_ != nullptr) server_->Shutdown();
  }

  // A job of one rank on `host`, created straight on the manager (the
  // rate limiter does not see it).
  control::CreateJobResponse Job(const std::string& host) {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.add_ranks()->set_host(host);
    absl::StatusOr<control::CreateJobResponse> job = am_->CreateJob(req);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : control::CreateJobResponse();
  }

  static control::JobCredentials Creds(const control::CreateJobResponse& job) {
    control::JobCredentials c;
    c.set_job_id(job.job_id());
    c.set_job_key(job.job_key());
    return c;
  }

  static control::AttachRequest AttachRequest(uint32_t port) {
    control::AttachRequest req;
    req.set_rank(0);
    req.mutable_endpoint()->set_address(absl::StrFormat("127.0.0.1:%d", port));
    req.mutable_endpoint()->set_qpn(0x100);
    req.mutable_endpoint()->set_psn(1);
    return req;
  }

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<FakeFabric> fabric_;
  std::unique_ptr<SwitchHub> hub_;
  std::unique_ptr<AggregationManager> am_;
  std::unique_ptr<ManagerServer> server_;
  std::vector<std::unique_ptr<FakeSwitchAgent>> agents_;
  std::string address_;
};

// Sends requests as fast as it can from its own channel until stopped.
class Flood {
 public:
  // `job`: a job's DestroyGroup of a group that does not exist (an
  // authenticated job call); none: Admin.GetStatus (unauthenticated).
  Flood(const std::string& address, std::optional<control::JobCredentials> job) {
    thread_ = std::thread([this, address, job] {
      auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      auto host = control::HostControl::NewStub(channel);
      auto admin = control::Admin::NewStub(channel);
      while (!stop_.load()) {
        grpc::ClientContext c;
        c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
        grpc::Status s;
        if (job.has_value()) {
          control::DestroyGroupRequest req;
          *req.mutable_job() = *job;
          req.set_group_id(999);
          control::DestroyGroupResponse resp;
          s = host->DestroyGroup(&c, req, &resp);
        } else {
          control::GetStatusResponse resp;
          s = admin->GetStatus(&c, control::GetStatusRequest(), &resp);
        }
        if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) refused_.fetch_add(1);
      }
    });
  }
  ~Flood() {
    stop_.store(true);
    thread_.join();
  }
  int refused() const { return refused_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::thread thread_;
};

// Item 6: two clients flood the manager from loopback (one with its own
// job's calls, one with unauthenticated GetStatus), both past their limit;
// a third job attaches meanwhile. It has a bucket of its own.
TEST_F(ManagerLimits, OneClientsFloodDoesNotStarveAnotherJob) {
  ServerOptions so;
  so.requests_per_second = 20;
  so.burst = 20;
  Start(so);
  control::CreateJobResponse flooder = Job("h0");
  control::CreateJobResponse victim = Job("h1");
  Flood jobs(address_, Creds(flooder));
  Flood anonymous(address_, std::nullopt);
  ASSERT_TRUE(WaitUntil([&] { return jobs.refused() > 10 && anonymous.refused() > 10; },
                        absl::Seconds(20)))
      << "the floods were never refused";

  // One attempt, straight through gRPC: no retry can hide a refusal.
  auto stub = control::HostControl::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  control::AttachRequest req = AttachRequest(30001);
  *req.mutable_job() = Creds(victim);
  control::AttachResponse resp;
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status s = stub->Attach(&c, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_GT(server_->num_rate_limited(), 20u);
}

// Item 6: a job that went past its own limit (its many ranks at once) is
// refused; libnetfold backs off and retries within the call's deadline
// instead of failing the rank.
TEST_F(ManagerLimits, TheHostLibraryRetriesARateLimitedCall) {
  ServerOptions so;
  so.requests_per_second = 2;
  so.burst = 2;
  Start(so);
  control::CreateJobResponse job = Job("h0");
  auto stub = control::HostControl::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  int refused = 0;
  for (int i = 0; i < 5; ++i) {  // the job's bucket is empty afterwards
    control::DestroyGroupRequest req;
    *req.mutable_job() = Creds(job);
    req.set_group_id(999);
    control::DestroyGroupResponse resp;
    grpc::ClientContext c;
    c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (stub->DestroyGroup(&c, req, &resp).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    }
  }
  ASSERT_GE(refused, 2);

  host::ManagerClient client(address_, /*auth=*/{}, /*timeout=*/absl::Seconds(10));
  client.SetJob(job.job_id(), job.job_key());
  absl::StatusOr<control::AttachResponse> attached = client.Attach(AttachRequest(30001));
  EXPECT_TRUE(attached.ok()) << attached.status();
}

// Item 4, the rest: every rank of a job keeps a WatchEvents stream open for
// the job's life. On gRPC's callback API those hold no handler thread, so
// the watches of 120 ranks (the test switch has 128 QPs) are all served by
// a manager with 16 threads (8 for streams before),
// heartbeats go through meanwhile, and every watch ends with the job.
TEST_F(ManagerLimits, TheWatchesOfManyRanksHoldNoThreads) {
  ServerOptions so;
  so.max_threads = 16;
  Start(so);
  constexpr int kRanks = 120;
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  for (int r = 0; r < kRanks; ++r) {
    control::RankSpec* rank = req.add_ranks();
    rank->set_rank(static_cast<uint32_t>(r));
    rank->set_host(absl::StrFormat("h%d", r % 4));
  }
  absl::StatusOr<control::CreateJobResponse> job = am_->CreateJob(req);
  ASSERT_TRUE(job.ok()) << job.status();

  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = control::HostControl::NewStub(channel);
  grpc::CompletionQueue cq;
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<control::JobEvent>> reader;
    control::JobEvent event;
    grpc::Status status;
    std::vector<control::JobEvent::Kind> kinds;
    bool ended = false;
  };
  std::vector<std::unique_ptr<Watch>> watches;
  for (int r = 0; r < kRanks; ++r) {
    auto w = std::make_unique<Watch>();
    w->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    control::WatchEventsRequest wr;
    *wr.mutable_job() = Creds(*job);
    wr.set_rank(static_cast<uint32_t>(r));
    w->reader = stub->AsyncWatchEvents(&w->ctx, wr, &cq, w.get());
    watches.push_back(std::move(w));
  }
  // Tags: a Watch* for "started" or "read", the Watch* + 1 byte for "finished".
  auto drain = [&](auto done, absl::Duration within) {
    const absl::Time deadline = absl::Now() + within;
    void* tag = nullptr;
    bool ok = false;
    while (!done() && cq.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) ==
                          grpc::CompletionQueue::GOT_EVENT) {
      const uintptr_t t = reinterpret_cast<uintptr_t>(tag);
      Watch* w = reinterpret_cast<Watch*>(t & ~uintptr_t{1});
      if ((t & 1) != 0) {
        w->ended = true;
      } else if (ok) {
        if (w->event.kind() != control::JobEvent::KIND_UNSPECIFIED) w->kinds.push_back(w->event.kind());
        w->event.Clear();
        w->reader->Read(&w->event, w);
      } else {
        w->reader->Finish(&w->status, reinterpret_cast<void*>(t | 1));
      }
    }
  };
  auto started = [&] {
    for (const auto& w : watches) {
      if (w->kinds.empty() && !w->ended) return false;
    }
    return true;
  };
  drain(started, absl::Seconds(30));
  int live = 0;
  for (const auto& w : watches) {
    live += !w->kinds.empty() && w->kinds.front() == control::JobEvent::WATCH_STARTED && !w->ended;
  }
  EXPECT_EQ(live, kRanks) << "watches served at once by a manager with 16 threads";
  EXPECT_EQ(server_->open_watches(), kRanks);

  // Calls are served while every watch is open.
  for (int i = 0; i < 10; ++i) {
    control::HostHeartbeatRequest hb;
    *hb.mutable_job() = Creds(*job);
    hb.set_rank(static_cast<uint32_t>(i));
    control::HostHeartbeatResponse hb_resp;
    grpc::ClientContext c;
    c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Status s = stub->Heartbeat(&c, hb, &hb_resp);
    ASSERT_TRUE(s.ok()) << "heartbeat " << i << ": " << s.error_code() << ": " << s.error_message();
  }

  // The job goes: every watch hears JOB_DESTROYED last and ends OK.
  control::DestroyJobRequest dr;
  *dr.mutable_job() = Creds(*job);
  ASSERT_TRUE(am_->DestroyJob(dr).ok());
  drain([&] {
    for (const auto& w : watches) {
      if (!w->ended) return false;
    }
    return true;
  }, absl::Seconds(30));
  for (int r = 0; r < kRanks; ++r) {
    const Watch& w = *watches[static_cast<size_t>(r)];
    ASSERT_TRUE(w.ended) << "rank " << r;
    EXPECT_TRUE(w.status.ok()) << "rank " << r << ": " << w.status.error_message();
    ASSERT_FALSE(w.kinds.empty()) << "rank " << r;
    EXPECT_EQ(w.kinds.back(), control::JobEvent::JOB_DESTROYED) << "rank " << r;
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->open_watches() == 0; }, absl::Seconds(10)))
      << server_->open_watches() << " watches still counted";
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

// Item 4: one client holds many idle streams (Connect streams that never
// register); the manager keeps threads for calls, so other jobs'
// heartbeats and GetStatus are served meanwhile, and the streams past the
// per-peer limit are refused at once with a clear reason.
TEST_F(ManagerLimits, ManyIdleStreamsLeaveHeartbeatsAlone) {
  ServerOptions so;
  so.max_threads = 48;
  so.register_timeout = absl::Seconds(60);  // idle streams stay for the test
  Start(so);
  control::CreateJobResponse job = Job("h0");

  constexpr int kStreams = 200;
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto switches = control::SwitchControl::NewStub(channel);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncReaderWriter<control::SwitchMessage,
                                                            control::ManagerMessage>>>
      streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    streams.push_back(switches->AsyncConnect(contexts.back().get(), &cq, contexts.back().get()));
  }
  // Every stream started (the manager took or refused each).
  for (int i = 0; i < kStreams; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_EQ(cq.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + absl::Seconds(30))),
              grpc::CompletionQueue::GOT_EVENT);
  }
  // Let the manager take or refuse them all: a refused stream ends (not
  // asserted here: without stream limits none ends, and the heartbeats
  // below fail).
  std::vector<grpc::Status> finished(kStreams);
  for (int i = 0; i < kStreams; ++i) streams[i]->Finish(&finished[i], &finished[i]);
  const int expect_refused = kStreams - so.max_unregistered_streams_per_peer;
  int ended = 0;
  void* tag = nullptr;
  bool ok = false;
  while (ended < expect_refused &&
         cq.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + absl::Seconds(20))) ==
             grpc::CompletionQueue::GOT_EVENT) {
    ++ended;
  }

  // Heartbeats and status, from another client, while the streams are held.
  auto other = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto host = control::HostControl::NewStub(other);
  auto admin = control::Admin::NewStub(other);
  for (int i = 0; i < 20; ++i) {
    control::HostHeartbeatRequest hb;
    *hb.mutable_job() = Creds(job);
    hb.set_rank(0);
    control::HostHeartbeatResponse hb_resp;
    grpc::ClientContext c1;
    c1.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Status s = host->Heartbeat(&c1, hb, &hb_resp);
    ASSERT_TRUE(s.ok()) << "heartbeat " << i << ": " << s.error_code() << ": "
                        << s.error_message();
    control::GetStatusResponse st;
    grpc::ClientContext c2;
    c2.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    s = admin->GetStatus(&c2, control::GetStatusRequest(), &st);
    ASSERT_TRUE(s.ok()) << "GetStatus " << i << ": " << s.error_code() << ": "
                        << s.error_message();
  }

  // The refused streams ended with a reason; the others are still open.
  int refused = 0;
  std::string reason;
  for (const grpc::Status& st : finished) {
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      if (reason.empty() || st.error_message().find("stream limit") != std::string::npos) {
        reason = st.error_message();
      }
    }
  }
  EXPECT_GE(refused, expect_refused);
  EXPECT_NE(reason.find("stream limit"), std::string::npos) << reason;
  // The client leaves: cancel and drain the rest.
  for (auto& c : contexts) c->TryCancel();
  while (ended < kStreams &&
         cq.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + absl::Seconds(30))) ==
             grpc::CompletionQueue::GOT_EVENT) {
    ++ended;
  }
  EXPECT_EQ(ended, kStreams);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace netfold::manager
