// ManagerClient against a manager of the test's own (an in-process gRPC
// HostControl service on loopback whose answers each test sets): what it
// retries and for how long, what it returns at once, the credentials every
// call carries, and the control thread's heartbeats, link-failure reports
// and event stream. The daemon itself is tested in tests/manager; here the
// manager misbehaves on purpose.
#include "host/manager_client.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace netfold::host {
namespace {

using control::JobEvent;

// Each RPC answers with what the test set (OK by default) and counts its calls.
class FakeManager : public control::HostControl::Service {
 public:
  using Answer = std::function<grpc::Status(grpc::ServerContext*, int call)>;

  void Set(const std::string& rpc, Answer answer) {
    absl::MutexLock lock(&mu_);
    answers_[rpc] = std::move(answer);
  }
  // Heartbeats answer by what they carry.
  using HeartbeatAnswer = std::function<grpc::Status(const control::HostHeartbeatRequest&)>;
  void SetHeartbeat(HeartbeatAnswer answer) {
    absl::MutexLock lock(&mu_);
    heartbeat_answer_ = std::move(answer);
  }
  // When each heartbeat arrived.
  std::vector<absl::Time> heartbeat_times() {
    absl::MutexLock lock(&mu_);
    return heartbeat_times_;
  }
  int calls(const std::string& rpc) {
    absl::MutexLock lock(&mu_);
    return calls_[rpc];
  }
  std::vector<control::HostHeartbeatRequest> heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<control::WatchEventsRequest> watches() {
    absl::MutexLock lock(&mu_);
    return watches_;
  }
  control::JobCredentials last_credentials() {
    absl::MutexLock lock(&mu_);
    return credentials_;
  }
  // What the first WatchEvents call streams before it ends; later calls
  // stream nothing and stay open until cancelled.
  void SetFirstEvents(std::vector<JobEvent> events) {
    absl::MutexLock lock(&mu_);
    first_events_ = std::move(events);
  }

  grpc::Status CreateJob(grpc::ServerContext* c, const control::CreateJobRequest*,
                         control::CreateJobResponse* r) override {
    r->set_job_id(7);
    return Reply(c, "CreateJob");
  }
  grpc::Status DestroyJob(grpc::ServerContext* c, const control::DestroyJobRequest* q,
                          control::DestroyJobResponse*) override {
    Note(q->job());
    return Reply(c, "DestroyJob");
  }
  grpc::Status Attach(grpc::ServerContext* c, const control::AttachRequest* q,
                      control::AttachResponse*) override {
    Note(q->job());
    return Reply(c, "Attach");
  }
  grpc::Status CreateGroup(grpc::ServerContext* c, const control::CreateGroupRequest* q,
                           control::CreateGroupResponse*) override {
    Note(q->job());
    return Reply(c, "CreateGroup");
  }
  grpc::Status DestroyGroup(grpc::ServerContext* c, const control::DestroyGroupRequest* q,
                            control::DestroyGroupResponse*) override {
    Note(q->job());
    return Reply(c, "DestroyGroup");
  }
  grpc::Status Heartbeat(grpc::ServerContext* c, const control::HostHeartbeatRequest* q,
                         control::HostHeartbeatResponse*) override {
    HeartbeatAnswer answer;
    {
      absl::MutexLock lock(&mu_);
      heartbeats_.push_back(*q);
      heartbeat_times_.push_back(absl::Now());
      answer = heartbeat_answer_;
    }
    return answer ? answer(*q) : Reply(c, "Heartbeat");
  }
  grpc::Status WatchEvents(grpc::ServerContext* c, const control::WatchEventsRequest* q,
                           grpc::ServerWriter<JobEvent>* writer) override {
    std::vector<JobEvent> events;
    {
      absl::MutexLock lock(&mu_);
      watches_.push_back(*q);
      if (watches_.size() == 1) events = first_events_;
    }
    if (!events.empty()) {
      for (const JobEvent& e : events) writer->Write(e);
      return grpc::Status::OK;  // the stream ends: the client watches again
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!c->IsCancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status::CANCELLED;
  }

 private:
  grpc::Status Reply(grpc::ServerContext* c, const std::string& rpc) {
    Answer answer;
    int call = 0;
    {
      absl::MutexLock lock(&mu_);
      call = calls_[rpc]++;
      if (auto it = answers_.find(rpc); it != answers_.end()) answer = it->second;
    }
    return answer ? answer(c, call) : grpc::Status::OK;
  }
  void Note(const control::JobCredentials& job) {
    absl::MutexLock lock(&mu_);
    credentials_ = job;
  }

  absl::Mutex mu_;
  std::map<std::string, Answer> answers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  HeartbeatAnswer heartbeat_answer_ ABSL_GUARDED_BY(mu_);
  std::vector<control::HostHeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> heartbeat_times_ ABSL_GUARDED_BY(mu_);
  std::vector<control::WatchEventsRequest> watches_ ABSL_GUARDED_BY(mu_);
  std::vector<JobEvent> first_events_ ABSL_GUARDED_BY(mu_);
  control::JobCredentials credentials_ ABSL_GUARDED_BY(mu_);
};

// The first `n` calls answer UNAVAILABLE (the manager's own: a leaf switch
// not up yet), the rest OK.
FakeManager::Answer UnavailableFor(int n) {
  return [n](grpc::ServerContext*, int call) {
    return call < n ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "leaf switch not up yet")
                    : grpc::Status::OK;
  };
}

class ManagerClientTest : public ::testing::Test {
 protected:
  void SetUp() override { Start("127.0.0.1:0"); }
  void TearDown() override { Stop(); }

  void Start(const std::string& address) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&manager_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::unique_ptr<ManagerClient> Client(absl::Duration timeout = absl::Seconds(20)) {
    return std::make_unique<ManagerClient>(address(), auth::ClientAuth{}, timeout);
  }

  FakeManager manager_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A port on loopback where nothing listens (bound, then closed).
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

TEST_F(ManagerClientTest, AJobsFirstCallGivesUpSoonWhenNoManagerListens) {
  const int port = ClosedPort();
  ASSERT_GT(port, 0);
  ManagerClient client(absl::StrCat("127.0.0.1:", port), auth::ClientAuth{}, absl::Seconds(30),
                       /*connect_timeout=*/absl::Seconds(1));
  const absl::Time start = absl::Now();
  absl::StatusOr<control::CreateJobResponse> job = client.CreateJob({});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsUnavailable(job.status())) << job.status();
  EXPECT_NE(job.status().message().find("no netfold manager answers at 127.0.0.1:"),
            std::string::npos)
      << job.status();
  EXPECT_LT(took, absl::Seconds(5)) << "the job's first call waited out its timeout";
}

TEST_F(ManagerClientTest, ARateLimitedCallIsRetriedNoSoonerThanTheManagerSaid) {
  manager_.Set("CreateGroup", [](grpc::ServerContext* c, int call) {
    if (call >= 2) return grpc::Status::OK;
    c->AddTrailingMetadata("netfold-retry-after-ms", "150");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rate limited");
  });
  std::unique_ptr<ManagerClient> client = Client();
  const absl::Time start = absl::Now();
  absl::StatusOr<control::CreateGroupResponse> group = client->CreateGroup({});
  EXPECT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(manager_.calls("CreateGroup"), 3);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
}

TEST_F(ManagerClientTest, AFullFabricIsNotRetried) {
  manager_.Set("CreateGroup", [](grpc::ServerContext*, int) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no switch has a free slot");
  });
  std::unique_ptr<ManagerClient> client = Client();
  absl::StatusOr<control::CreateGroupResponse> group = client->CreateGroup({});
  ASSERT_FALSE(group.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(group.status())) << group.status();
  EXPECT_NE(group.status().message().find("creating a group: no switch has a free slot"),
            std::string::npos)
      << group.status();
  EXPECT_EQ(manager_.calls("CreateGroup"), 1);
}

TEST_F(ManagerClientTest, TheManagersOwnUnavailableIsAskedAgainUntilItAnswers) {
  manager_.Set("Attach", UnavailableFor(3));
  std::unique_ptr<ManagerClient> client = Client();
  absl::StatusOr<control::AttachResponse> attached = client->Attach({});
  EXPECT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(manager_.calls("Attach"), 4);
}

TEST_F(ManagerClientTest, ReleasesAreTriedOnceUnlessTheFabricIsThere) {
  manager_.Set("DestroyGroup", UnavailableFor(2));
  std::unique_ptr<ManagerClient> client = Client();
  // Connected first: a release that is not patient has the connect
  // timeout (1 s) for its one attempt, which a loaded machine may spend on
  // connecting.
  ASSERT_TRUE(client->Attach({}).ok());
  absl::Status once = client->DestroyGroup(5, /*patient=*/false);
  EXPECT_TRUE(absl::IsUnavailable(once)) << once;
  EXPECT_EQ(manager_.calls("DestroyGroup"), 1);
  EXPECT_TRUE(client->DestroyGroup(5, /*patient=*/true).ok());
  EXPECT_EQ(manager_.calls("DestroyGroup"), 3);

  manager_.Set("DestroyJob", UnavailableFor(1));
  EXPECT_TRUE(absl::IsUnavailable(client->DestroyJob(/*patient=*/false)));
  EXPECT_TRUE(client->DestroyJob(/*patient=*/false).ok());
  EXPECT_EQ(manager_.calls("DestroyJob"), 2);
}

TEST_F(ManagerClientTest, OtherErrorsReturnAtOnceSayingWhatWasDone) {
  manager_.Set("Attach", [](grpc::ServerContext*, int) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong job key");
  });
  std::unique_ptr<ManagerClient> client = Client();
  control::AttachRequest request;
  request.set_rank(3);
  absl::StatusOr<control::AttachResponse> attached = client->Attach(request);
  ASSERT_FALSE(attached.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(attached.status())) << attached.status();
  EXPECT_EQ(attached.status().message(), "rank 3 attaching to its leaf switch: wrong job key");
  EXPECT_EQ(manager_.calls("Attach"), 1);
}

TEST_F(ManagerClientTest, EveryCallAfterSetJobCarriesTheJobsCredentials) {
  std::unique_ptr<ManagerClient> client = Client();
  client->SetJob(42, "0123456789abcdef");
  control::AttachRequest request;
  request.mutable_job()->set_job_id(1);  // the client's own replace the caller's
  ASSERT_TRUE(client->Attach(request).ok());
  EXPECT_EQ(manager_.last_credentials().job_id(), 42u);
  EXPECT_EQ(manager_.last_credentials().job_key(), "0123456789abcdef");
  ASSERT_TRUE(client->CreateGroup({}).ok());
  EXPECT_EQ(manager_.last_credentials().job_id(), 42u);
  ASSERT_TRUE(client->DestroyGroup(1, true).ok());
  EXPECT_EQ(manager_.last_credentials().job_id(), 42u);
}

// Waits (at most 10 s) until `done`.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST_F(ManagerClientTest, TheControlThreadSendsHeartbeatsAndHandsOnEventsWatchingAgain) {
  std::vector<JobEvent> stream(3);
  stream[0].set_kind(JobEvent::WATCH_STARTED);
  stream[0].set_manager_incarnation(9);
  stream[1].set_kind(JobEvent::GROUP_REVOKED);
  stream[1].set_sequence(4);
  stream[1].set_group_id(11);
  stream[1].set_manager_incarnation(9);
  stream[2].set_kind(JobEvent::RANK_DETACHED);
  stream[2].set_sequence(5);
  stream[2].set_manager_incarnation(9);
  manager_.SetFirstEvents(stream);

  absl::Mutex mu;  // before the client: its thread hands events on until it is gone
  std::vector<JobEvent> seen;
  std::unique_ptr<ManagerClient> client = Client();
  client->SetJob(42, "k");
  client->StartControl(/*rank=*/2, absl::Milliseconds(50), [&](const JobEvent& e) {
    absl::MutexLock lock(&mu);
    seen.push_back(e);
  });
  ASSERT_TRUE(Eventually([&] { return manager_.heartbeats().size() >= 3; }));
  ASSERT_TRUE(Eventually([&] { return manager_.watches().size() >= 2; }));
  client->StopControl();

  for (const control::HostHeartbeatRequest& h : manager_.heartbeats()) {
    EXPECT_EQ(h.rank(), 2u);
    EXPECT_EQ(h.job().job_id(), 42u);
    EXPECT_EQ(h.link_failures_size(), 0);
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(seen.size(), 2u) << "WATCH_STARTED is not handed on";
    EXPECT_EQ(seen[0].kind(), JobEvent::GROUP_REVOKED);
    EXPECT_EQ(seen[0].group_id(), 11u);
    EXPECT_EQ(seen[1].kind(), JobEvent::RANK_DETACHED);
  }
  const std::vector<control::WatchEventsRequest> watches = manager_.watches();
  EXPECT_EQ(watches[0].after_sequence(), 0u);
  EXPECT_EQ(watches[1].after_sequence(), 5u);
  EXPECT_EQ(watches[1].incarnation(), 9u);
  EXPECT_EQ(watches[1].rank(), 2u);
}

TEST_F(ManagerClientTest, ALinkFailureIsToldAtOnceAndAgainUntilAHeartbeatCarryingItIsAnswered) {
  // The first heartbeat that carries a report is refused: the next carries it again.
  auto carrying = std::make_shared<std::atomic<int>>(0);  // the handler may outlive the test
  manager_.SetHeartbeat([carrying](const control::HostHeartbeatRequest& beat) {
    if (beat.link_failures_size() > 0 && carrying->fetch_add(1) == 0) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "not now");
    }
    return grpc::Status::OK;
  });
  std::unique_ptr<ManagerClient> client = Client();
  const absl::Duration interval = absl::Seconds(2);
  client->StartControl(/*rank=*/1, interval, [](const JobEvent&) {});
  // Reported just after a heartbeat: the next one is due a whole interval later.
  ASSERT_TRUE(Eventually([&] { return !manager_.heartbeats().empty(); }));
  const size_t before = manager_.heartbeats().size();
  ASSERT_TRUE(Eventually([&] { return manager_.heartbeats().size() > before; }));
  const absl::Time reported = absl::Now();
  client->ReportLinkFailure(/*plane=*/0, /*psn=*/77, std::string(300, 'x'));
  client->ReportLinkFailure(/*plane=*/0, /*psn=*/77, "the same failure again");  // once
  ASSERT_TRUE(Eventually([&] { return carrying->load() >= 1; }));
  ASSERT_TRUE(Eventually([&] { return carrying->load() >= 2; }));
  // And no more once one was answered.
  const size_t answered = manager_.heartbeats().size();
  ASSERT_TRUE(Eventually([&] { return manager_.heartbeats().size() >= answered + 1; }));
  client->StopControl();

  const std::vector<control::HostHeartbeatRequest> beats = manager_.heartbeats();
  const std::vector<absl::Time> times = manager_.heartbeat_times();
  int with_report = 0;
  for (size_t i = before; i < beats.size(); ++i) {
    if (beats[i].link_failures_size() == 0) continue;
    if (with_report++ == 0) {
      EXPECT_LT(times[i] - reported, interval / 2) << "the report waited for the next interval";
    }
    ASSERT_EQ(beats[i].link_failures_size(), 1);
    EXPECT_EQ(beats[i].link_failures(0).psn(), 77u);
    EXPECT_EQ(beats[i].link_failures(0).reason(), std::string(200, 'x'));
  }
  EXPECT_EQ(with_report, 2);
}

TEST_F(ManagerClientTest, AManagerThatStoppedAnsweringIsWaitedForOnlyItsPatience) {
  std::unique_ptr<ManagerClient> client = Client(/*timeout=*/absl::Seconds(60));
  ASSERT_TRUE(client->Attach({}).ok());  // connected: the manager answers
  Stop();
  const absl::Time start = absl::Now();
  absl::StatusOr<control::CreateGroupResponse> group = client->CreateGroup({});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(group.ok());
  EXPECT_TRUE(absl::IsUnavailable(group.status())) << group.status();
  EXPECT_NE(group.status().message().find("(no manager answers at " + address() + ")"),
            std::string::npos)
      << group.status();
  EXPECT_GE(took, ManagerClient::kUnreachablePatience - absl::Milliseconds(500));
  EXPECT_LT(took, ManagerClient::kUnreachablePatience + absl::Seconds(10))
      << "waited for the call's timeout, not the patience";
  // Patience is counted from when the manager stopped: the next call gives up at once.
  const absl::Time again = absl::Now();
  EXPECT_FALSE(client->Attach({}).ok());
  EXPECT_LT(absl::Now() - again, absl::Seconds(3));
}

TEST_F(ManagerClientTest, AManagerThatComesBackIsWaitedFor) {
  std::unique_ptr<ManagerClient> client = Client(/*timeout=*/absl::Seconds(30));
  ASSERT_TRUE(client->Attach({}).ok());
  const std::string at = address();
  Stop();
  std::thread restart([&] {
    absl::SleepFor(absl::Milliseconds(200));
    Start(at);  // a restart on the same address
  });
  absl::StatusOr<control::CreateGroupResponse> group = client->CreateGroup({});
  restart.join();
  EXPECT_TRUE(group.ok()) << group.status();
  EXPECT_GE(manager_.calls("CreateGroup"), 1);
}

}  // namespace
}  // namespace netfold::host
