// A group (host/group.h) without a context: two members in one process,
// each a FakeOwner (the data path's lock, a scripted leaf per fabric
// group) and a RoCE endpoint on loopback for the hosts' collectives. The
// fabric never answers; a test fails it by hand, so that every step of a
// failover comes where the test puts it.
#include "host/group.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/error_codes.h"
#include "host/tcp_oob.h"
#include "host/testing/group_engine_fixture.h"
#include "transport/udp_port.h"

namespace netfold::host {
namespace {

using proto::CollectiveType;
using proto::DataType;
using proto::ReduceOp;

constexpr int kMembers = 2;
constexpr size_t kCount = 64;  // int32 elements: a few chunks of 64 bytes
// The operations' deadline (engines, hosts, the owner's), and the longest a
// test waits for one of its own steps: a failing test ends in a failure
// well within the unit tests' time limit, not in that limit.
constexpr absl::Duration kTimeout = absl::Seconds(10);
constexpr absl::Duration kStep = absl::Seconds(5);

// What a group needs of its context, and a record of who called what.
// Unlike Context (host/context.cc): no progress thread (progress happens
// in the calls only); Progress polls the fabric engines but not the
// endpoint, which the host collectives move themselves (in Context the
// data path moves it for both); WhileWaiting has every group follow each
// time (Context does it every 5 ms, or always inside a followed
// failover); the tests fail a fabric by hand, not through the data path.
class FakeOwner : public GroupOwner {
 public:
  explicit FakeOwner(int rank)
      : rank_(rank),
        progress_(ProgressThreadOptions{.enabled = false}, [](absl::Duration) {}, [] {}) {}

  ProgressThread& progress() override { return progress_; }
  void Progress(absl::Duration timeout) override {
    // As the data path: the engines send what their windows allow. The
    // scripted leaves never answer: nothing to read, a short nap.
    Note(progress_calls_);
    for (Group* g : groups_) {
      if (Channels* fabric = g->fabric(); fabric != nullptr) {
        for (size_t c = 0; c < fabric->size(); ++c) fabric->engine(c).Poll();
      }
    }
    absl::SleepFor(std::min(timeout, absl::Milliseconds(1)));
  }
  absl::Status ReleaseAtManager(uint64_t, bool) override { return absl::OkStatus(); }
  void Forget(Group& group) override { std::erase(groups_, &group); }
  int world_rank() const override { return rank_; }
  absl::Duration op_timeout() const override {
    Note(op_timeout_calls_);
    if (on_op_timeout_) on_op_timeout_();
    return kTimeout;
  }
  // As Context::WhileWaiting: every group follows a failover its members began.
  void WhileWaiting() override {
    Note(while_waiting_calls_);
    if (on_while_waiting_) on_while_waiting_();
    const std::vector<Group*> groups = groups_;
    for (Group* g : groups) {
      if (std::find(groups_.begin(), groups_.end(), g) != groups_.end()) g->FollowFailover();
    }
  }

  void Adopt(Group* g) { groups_.push_back(g); }
  // Calls of the thread `watched` (set before it starts) are counted.
  void Watch(std::thread::id watched) { watched_ = watched; }
  // Hooks, called with the data path's lock held.
  std::function<void()> on_op_timeout_, on_while_waiting_;
  mutable std::atomic<int> progress_calls_{0}, op_timeout_calls_{0}, while_waiting_calls_{0};

 private:
  void Note(std::atomic<int>& calls) const {
    if (std::this_thread::get_id() == watched_) ++calls;
  }

  const int rank_;
  ProgressThread progress_;
  std::vector<Group*> groups_;
  std::thread::id watched_;
};

// One member: its owner, endpoint, out-of-band channel, scripted leaves
// and groups.
struct Member {
  int rank = 0;
  std::unique_ptr<FakeOwner> owner;
  std::unique_ptr<transport::RoceEndpoint> endpoint;
  std::unique_ptr<TcpOob> oob;
  std::vector<std::unique_ptr<testing::FakeLeaf>> leaves;
  std::vector<std::unique_ptr<Group>> groups;

  // Group `id`: on a scripted leaf (`fabric`) or on the hosts from the
  // start, with the hosts as its fallback. Collective.
  absl::Status AddGroup(uint32_t id, bool fabric) {
    GroupSetup setup;
    setup.group_id = id;
    setup.group_rank = rank;
    setup.world_ranks = {0, 1};
    setup.description = "test group";
    if (fabric) {
      leaves.push_back(std::make_unique<testing::FakeLeaf>());
      GroupParams p;
      p.group_id = id;
      p.rank = static_cast<uint32_t>(rank);
      p.num_slots = 4;
      p.slot_bytes = 64;
      p.members = {0, 1};
      p.repair_after = absl::Seconds(5);
      p.op_timeout = kTimeout;
      FabricChannel c;
      c.group_id = id;
      c.engine = std::make_unique<GroupEngine>(p, leaves.back().get(), RealClock());
      setup.channels.push_back(std::move(c));
    }
    HostCollectivesOptions ho;
    ho.op_timeout = kTimeout;
    absl::StatusOr<std::unique_ptr<HostCollectives>> host =
        HostCollectives::Connect(endpoint.get(), *oob, ho);
    if (!host.ok()) return host.status();
    setup.host = *std::move(host);
    groups.push_back(std::make_unique<Group>(owner.get(), std::move(setup)));
    owner->Adopt(groups.back().get());
    return absl::OkStatus();
  }

  // The fabric under group `g` goes away (as a revoked group's does).
  void FailFabric(Group& g) {
    ProgressThread::Inside inside(owner->progress());
    g.fabric()->Fail(WithErrorCode(absl::UnavailableError("the leaf is gone (test)"),
                                   NETFOLD_ERR_UNAVAILABLE));
  }
};

class GroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpOobServer::Start(kMembers);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    for (int r = 0; r < kMembers; ++r) {
      members_[r].rank = r;
      members_[r].owner = std::make_unique<FakeOwner>(r);
      auto port = transport::UdpPort::Create({.local = {0x7f000001, 0}});
      ASSERT_TRUE(port.ok()) << port.status();
      members_[r].endpoint =
          std::make_unique<transport::RoceEndpoint>(*std::move(port), RealClock());
    }
    // Out-of-band channels, then groups 1 (fabric) and 2 (the hosts), together.
    std::vector<absl::Status> made(kMembers);
    ForEachMember([&](int r) {
      auto oob = TcpOob::Connect(server_->address(), r, kMembers, kTimeout);
      if (!oob.ok()) {
        made[r] = oob.status();
        return;
      }
      members_[r].oob = *std::move(oob);
      made[r] = members_[r].AddGroup(1, /*fabric=*/true);
      if (made[r].ok()) made[r] = members_[r].AddGroup(2, /*fabric=*/false);
    });
    for (int r = 0; r < kMembers; ++r) ASSERT_TRUE(made[r].ok()) << r << ": " << made[r];
  }

  void TearDown() override {
    // Groups go before their owners and endpoints (no Destroy: nothing
    // to release at a manager).
    for (Member& m : members_) m.groups.clear();
    // The out-of-band channels say goodbye together (the server answers
    // once every rank has).
    ForEachMember([&](int r) { members_[r].oob.reset(); });
  }

  // Runs `member(r)` for every member r, each in a thread of its own, and
  // waits for them all.
  static void ForEachMember(const std::function<void(int)>& member) {
    std::vector<std::thread> ts;
    for (int r = 0; r < kMembers; ++r) ts.emplace_back(member, r);
    for (auto& t : ts) t.join();
  }

  // Every element of rank r's input is r + 1.
  static std::vector<int32_t> Input(int r) { return std::vector<int32_t>(kCount, r + 1); }
  static constexpr int32_t kSum = 3;  // 1 + 2

  static CollectiveArgs Allreduce(const std::vector<int32_t>& in, std::vector<int32_t>& out) {
    return {.collective = CollectiveType::kAllreduce,
            .dtype = DataType::kInt32,
            .op = ReduceOp::kSum,
            .send = in.data(),
            .recv = out.data(),
            .count = in.size()};
  }

  // The group's next operation, an allreduce of Input(r) into `out` (on
  // the hosts after a failover; for a member that has not noticed the
  // failure yet, the call that finds it).
  static absl::Status NextAllreduce(Group& g, int r, std::vector<int32_t>& out) {
    const std::vector<int32_t> in = Input(r);
    absl::StatusOr<OpId> op = g.Start(Allreduce(in, out));
    return op.ok() ? g.Wait(*op) : op.status();
  }

  // After a failover of group 1: each member's operation (`waited`) and its
  // next one (`next`, into `again`) succeeded, the next one on the hosts.
  void ExpectEveryMemberOnTheHosts(const std::vector<absl::Status>& waited,
                                   const std::vector<absl::Status>& next,
                                   const std::vector<std::vector<int32_t>>& again) {
    for (int r = 0; r < kMembers; ++r) {
      EXPECT_TRUE(waited[r].ok()) << r << ": " << waited[r];
      EXPECT_TRUE(next[r].ok()) << r << ": " << next[r];
      EXPECT_EQ(again[r], std::vector<int32_t>(kCount, kSum)) << r;
      EXPECT_TRUE(members_[r].groups[0]->failed_over()) << r;
    }
  }

  std::unique_ptr<TcpOobServer> server_;
  Member members_[kMembers];
};

// The fabric fails under an allreduce: Wait runs the failover, which
// completes it on the hosts (the resync, host/resync.h), and the group's
// next operation runs there.
TEST_F(GroupTest, AnAllreduceTheFabricDropsEndsOnTheHosts) {
  std::vector<absl::Status> waited(kMembers);
  std::vector<std::vector<int32_t>> out(kMembers, std::vector<int32_t>(kCount, -1));
  std::vector<std::vector<int32_t>> again = out;
  ForEachMember([&](int r) {
    Member& m = members_[r];
    Group& g = *m.groups[0];
    const std::vector<int32_t> in = Input(r);
    absl::StatusOr<OpId> op = g.Start(Allreduce(in, out[r]));
    if (!op.ok()) {
      waited[r] = op.status();
      return;
    }
    EXPECT_FALSE(m.leaves[0]->sent.empty()) << "the fabric got the first chunks";
    m.FailFabric(g);
    waited[r] = g.Wait(*op);
    // The group stays on the hosts.
    if (waited[r].ok()) waited[r] = NextAllreduce(g, r, again[r]);
  });
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(waited[r].ok()) << r << ": " << waited[r];
    EXPECT_EQ(out[r], std::vector<int32_t>(kCount, kSum)) << r;
    EXPECT_EQ(again[r], std::vector<int32_t>(kCount, kSum)) << r;
    EXPECT_TRUE(members_[r].groups[0]->failed_over()) << r;
    EXPECT_FALSE(members_[r].groups[0]->on_fabric()) << r;
    EXPECT_GT(members_[r].groups[0]->host_ops(), 0u) << r;
  }
}

// A bcast whose root got its results from the fabric while the other
// member got none: the root is ahead by one operation. The failover's
// resync hands the other member the root's result (the root keeps it for
// everyone, Record), and both go on on the hosts.
TEST_F(GroupTest, ABcastOneMemberMissedIsHandedOverByItsRoot) {
  std::vector<absl::Status> waited(kMembers, absl::UnknownError("not run")),
      next(kMembers, absl::UnknownError("not run"));
  std::vector<std::vector<int32_t>> buf(kMembers, std::vector<int32_t>(kCount, -1));
  std::vector<std::vector<int32_t>> again(kMembers, std::vector<int32_t>(kCount, -1));
  for (int32_t i = 0; i < static_cast<int32_t>(kCount); ++i) buf[0][i] = 100 + i;
  absl::Notification root_done;
  ForEachMember([&](int r) {
    Member& m = members_[r];
    Group& g = *m.groups[0];
    absl::StatusOr<OpId> op = g.Start({.collective = CollectiveType::kBcast,
                                       .dtype = DataType::kInt32,
                                       .root = 0,
                                       .send = buf[r].data(),
                                       .recv = buf[r].data(),
                                       .count = kCount});
    if (!op.ok()) {
      waited[r] = op.status();
      return;
    }
    if (r == 0) {
      // The root's results come, as the switches would send them: its
      // own data, chunk by chunk, for every request it posted.
      {
        ProgressThread::Inside inside(m.owner->progress());
        testing::FakeLeaf& leaf = *m.leaves[0];
        for (size_t i = 0; i < leaf.sent.size(); ++i) {
          proto::AggregationHeader h = leaf.Header(i);
          h.type = proto::AggregationMessageType::kResult;
          h.status = proto::AggregationStatus::kOk;
          h.has_data = true;
          const size_t n = h.count * sizeof(int32_t);
          const uint8_t* data = leaf.sent[i].data() + proto::kAggregationHeaderSize;
          g.fabric()->engine(0).OnMessage(h, {data, n}, {});
        }
      }
      waited[r] = g.Wait(*op);
      root_done.Notify();
    } else {
      EXPECT_TRUE(root_done.WaitForNotificationWithTimeout(kStep)) << "the root did not finish";
    }
    m.FailFabric(g);
    if (r == 1) waited[r] = g.Wait(*op);
    next[r] = NextAllreduce(g, r, again[r]);
  });
  ExpectEveryMemberOnTheHosts(waited, next, again);
  for (int r = 0; r < kMembers; ++r) EXPECT_EQ(buf[r], buf[0]) << r;
  EXPECT_EQ(buf[0][0], 100);
  EXPECT_EQ(buf[0][kCount - 1], static_cast<int32_t>(100 + kCount - 1));
}

// A reduce's non-root returns once its input has left (MPI allows it) and
// reuses its buffer; the fabric then fails before the root has its result.
// The hosts reduce again from the copy the group kept, so the root's
// result is the inputs as they were, not what the buffer holds now.
TEST_F(GroupTest, AReleasedReduceRunsAgainFromItsCopyAfterTheBufferWasReused) {
  std::vector<absl::Status> waited(kMembers), next(kMembers);
  std::vector<int32_t> root_out(kCount, -1);
  std::vector<std::vector<int32_t>> again(kMembers, std::vector<int32_t>(kCount, -1));
  absl::Notification released;
  ForEachMember([&](int r) {
    Member& m = members_[r];
    Group& g = *m.groups[0];
    std::vector<int32_t> in = Input(r);
    std::vector<int32_t> scratch(kCount, -1);
    absl::StatusOr<OpId> op = g.Start({.collective = CollectiveType::kReduce,
                                       .dtype = DataType::kInt32,
                                       .op = ReduceOp::kSum,
                                       .root = 0,
                                       .send = in.data(),
                                       .recv = r == 0 ? root_out.data() : scratch.data(),
                                       .count = kCount});
    if (!op.ok()) {
      waited[r] = op.status();
      return;
    }
    if (r == 1) {
      // Every chunk fits the window: posted, so Wait lets it go, with
      // the fabric still there and no result yet.
      waited[r] = g.Wait(*op);
      EXPECT_TRUE(g.on_fabric());
      EXPECT_FALSE(g.failed_over());
      std::fill(in.begin(), in.end(), -1000);
      released.Notify();
    } else {
      EXPECT_TRUE(released.WaitForNotificationWithTimeout(kStep)) << "member 1 was not released";
    }
    m.FailFabric(g);
    if (r == 0) waited[r] = g.Wait(*op);
    next[r] = NextAllreduce(g, r, again[r]);
  });
  ExpectEveryMemberOnTheHosts(waited, next, again);
  EXPECT_EQ(root_out, std::vector<int32_t>(kCount, kSum));
}

// MPI_THREAD_MULTIPLE: thread B of member 0, waiting in group 2, follows
// group 1's failover (WhileWaiting) while thread A of member 0 has an
// allreduce of group 1 to wait for. A comes in during that failover (B
// lets it in from the failover's exchanges, LetOthersIn): its Test says
// "not yet", and its Wait waits outside the lock, touching neither the
// group nor the data path, until B is done; then its allreduce ends on the
// hosts with the right result.
// Member 1 is held back until A waits, so that B's failover cannot end
// first: every step comes in the order this comment gives.
TEST_F(GroupTest, AThreadWaitsOutsideWhileAnotherRunsItsGroupsFailover) {
  Member& m0 = members_[0];
  Member& m1 = members_[1];
  Group& g1_0 = *m0.groups[0];
  absl::Notification a_may_wait, b_in_failover, a_awaits, member1_may_go;
  int a_calls_during_failover = 0;
  std::thread::id a_id;

  // B's exchanges in group 1's failover call WhileWaiting with the lock.
  m0.owner->on_while_waiting_ = [&] {
    if (std::this_thread::get_id() != a_id && g1_0.failed_over() && !g1_0.on_fabric() &&
        !b_in_failover.HasBeenNotified()) {
      b_in_failover.Notify();
    }
  };
  // A asks for a deadline: in its wait for B's failover (AwaitOthersFailover)
  // if the group is right (B's failover cannot end before member 1 goes),
  // else in Wait's own loop; either way A is past Test and in Wait.
  m0.owner->on_op_timeout_ = [&] {
    if (std::this_thread::get_id() == a_id && b_in_failover.HasBeenNotified() &&
        !a_awaits.HasBeenNotified()) {
      a_awaits.Notify();
    }
  };

  std::vector<int32_t> out_a0(kCount, -1), out_b0(kCount, -1);
  std::vector<int32_t> out_a1(kCount, -1), out_b1(kCount, -1);
  const absl::Status not_run = absl::UnknownError("not run");
  absl::Status a0 = not_run, b0 = not_run, a1 = not_run, b1 = not_run;
  const std::vector<int32_t> in0 = Input(0), in1 = Input(1);

  // Member 0, thread A: starts on the fabric, waits once B is in the failover.
  absl::StatusOr<OpId> op_a0 = g1_0.Start(Allreduce(in0, out_a0));
  ASSERT_TRUE(op_a0.ok()) << op_a0.status();
  m0.FailFabric(g1_0);  // nobody inside notices it yet
  std::optional<bool> a_tested;
  std::thread thread_a0([&] {
    if (!a_may_wait.WaitForNotificationWithTimeout(2 * kStep)) return;
    a_tested = g1_0.Test(*op_a0);  // netfold_request_test: "not yet"
    a0 = g1_0.Wait(*op_a0);
  });
  a_id = thread_a0.get_id();
  m0.owner->Watch(a_id);
  // Member 0, thread B: an allreduce on the hosts (group 2), which waits
  // for member 1; meanwhile its waits follow group 1's failover.
  std::thread thread_b0([&] {
    Group& g2 = *m0.groups[1];
    absl::StatusOr<OpId> op = g2.Start(Allreduce(in0, out_b0));
    b0 = op.ok() ? g2.Wait(*op) : op.status();
  });
  // Member 1: group 1's allreduce on the fabric, which fails there too,
  // and group 2's, once A waits.
  std::thread thread_a1([&] {
    Group& g1 = *m1.groups[0];
    absl::StatusOr<OpId> op = g1.Start(Allreduce(in1, out_a1));
    m1.FailFabric(g1);
    member1_may_go.WaitForNotificationWithTimeout(4 * kStep);
    a1 = op.ok() ? g1.Wait(*op) : op.status();
  });
  std::thread thread_b1([&] {
    member1_may_go.WaitForNotificationWithTimeout(4 * kStep);
    Group& g2 = *m1.groups[1];
    absl::StatusOr<OpId> op = g2.Start(Allreduce(in1, out_b1));
    b1 = op.ok() ? g2.Wait(*op) : op.status();
  });

  const bool b_followed = b_in_failover.WaitForNotificationWithTimeout(kStep);
  EXPECT_TRUE(b_followed) << "B never followed group 1's failover";
  a_may_wait.Notify();
  const bool a_waited = a_awaits.WaitForNotificationWithTimeout(kStep);
  EXPECT_TRUE(a_waited) << "A did not wait for B's failover";
  // B's failover cannot end before member 1 goes, and A came in after it
  // began: A must not have moved anything, nor now, waiting. A thread that
  // did would have called the owner's WhileWaiting (Test's and Wait's
  // loops do after each move; Group::Progress itself returns at once while
  // another thread fails the group over, so its calls are counted too
  // only for a change that lost that guard as well).
  absl::SleepFor(absl::Milliseconds(100));
  a_calls_during_failover =
      m0.owner->progress_calls_.load() + m0.owner->while_waiting_calls_.load();
  member1_may_go.Notify();
  for (std::thread* t : {&thread_a0, &thread_b0, &thread_a1, &thread_b1}) t->join();
  // The hooks see this test's locals: gone before the groups are.
  m0.owner->on_while_waiting_ = nullptr;
  m0.owner->on_op_timeout_ = nullptr;

  EXPECT_EQ(a_calls_during_failover, 0)
      << "A moved the data path while B ran its group's failover";
  EXPECT_EQ(a_tested, std::optional<bool>(false)) << "Test during another's failover: not yet";
  for (const auto& [name, s] : {std::pair{"A0", a0}, {"B0", b0}, {"A1", a1}, {"B1", b1}}) {
    EXPECT_TRUE(s.ok()) << name << ": " << s;
  }
  for (const auto& [name, out] :
       {std::pair{"A0", &out_a0}, {"B0", &out_b0}, {"A1", &out_a1}, {"B1", &out_b1}}) {
    EXPECT_EQ(*out, std::vector<int32_t>(kCount, kSum)) << name;
  }
  EXPECT_TRUE(g1_0.failed_over());
  EXPECT_TRUE(m1.groups[0]->failed_over());
}

// What the caller keeps with a group (the C API's netfold_group_keep_data)
// is released when the group goes, once, unless taken back first.
TEST_F(GroupTest, DataKeptWithAGroupIsReleasedWithItUnlessTakenBack) {
  int taken = 0, released = 0;
  auto count = [](void* data) { ++*static_cast<int*>(data); };
  Group& fabric = *members_[0].groups[0];
  EXPECT_EQ(fabric.TakeData(), nullptr);
  fabric.KeepData(&taken, count);
  EXPECT_EQ(fabric.TakeData(), &taken);
  EXPECT_EQ(fabric.TakeData(), nullptr);
  fabric.KeepData(&released, count);
  members_[1].groups[1]->KeepData(&released, count);  // on the hosts alike
  members_[0].groups[0].reset();
  members_[1].groups[1].reset();
  EXPECT_EQ(taken, 0);
  EXPECT_EQ(released, 2);
}

}  // namespace
}  // namespace netfold::host
