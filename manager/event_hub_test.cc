// Tests of the job event stream: numbering, delivery to the ranks named,
// replay after a sequence number, replacement of a rank's subscriber, the
// end of a job; and the same through the manager's WatchEvents.
#include "manager/event_hub.h"

#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/manager_test_fixture.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

JobEvent Revoked(uint64_t group_id) {
  JobEvent e;
  e.set_kind(JobEvent::GROUP_REVOKED);
  e.set_group_id(group_id);
  return e;
}

// Every queued event, WATCH_STARTED included.
std::vector<JobEvent> Take(EventStream& s) {
  std::vector<JobEvent> out;
  while (std::optional<JobEvent> e = s.Next(absl::ZeroDuration())) out.push_back(*e);
  return out;
}

TEST(EventHubTest, NumbersEachJobsEventsAndDeliversThemToTheRanksNamed) {
  EventHub hub(/*incarnation=*/77, /*events_per_job=*/16);
  std::shared_ptr<EventStream> a0 = hub.Subscribe(7, 0, 0);
  std::shared_ptr<EventStream> a1 = hub.Subscribe(7, 1, 0);
  std::shared_ptr<EventStream> b0 = hub.Subscribe(8, 0, 0);
  hub.Publish(7, Revoked(1), {1});
  hub.Publish(7, Revoked(2), {});
  hub.Publish(8, Revoked(3), {0});
  std::vector<JobEvent> got0 = Take(*a0);
  std::vector<JobEvent> got1 = Take(*a1);
  std::vector<JobEvent> other = Take(*b0);
  ASSERT_EQ(got0.size(), 2u);
  EXPECT_EQ(got0[0].kind(), JobEvent::WATCH_STARTED);
  EXPECT_EQ(got0[0].job_id(), 7u);
  EXPECT_EQ(got0[0].manager_incarnation(), 77u);
  EXPECT_EQ(got0[1].group_id(), 2u);
  EXPECT_EQ(got0[1].sequence(), 2u);
  ASSERT_EQ(got1.size(), 3u);
  EXPECT_EQ(got1[1].sequence(), 1u);
  EXPECT_EQ(got1[2].sequence(), 2u);
  ASSERT_EQ(other.size(), 2u);
  EXPECT_EQ(other[1].sequence(), 1u);  // per job
  EXPECT_EQ(other[1].job_id(), 8u);
  EXPECT_EQ(other[1].manager_incarnation(), 77u);
}

// What the callback API's watch relies on: the stream says when it has
// something, for each event and for its end, and not after the reader left.
TEST(EventHubTest, AStreamCallsItsReaderBackForEachEventAndItsEnd) {
  EventStream s(1, 0);
  int calls = 0;
  s.OnReady([&] { ++calls; });
  s.Push(JobEvent());
  s.Push(JobEvent());
  EXPECT_EQ(calls, 2);
  s.Close();
  EXPECT_EQ(calls, 3);
  s.Push(JobEvent());  // closed: dropped, nobody called
  EXPECT_EQ(calls, 3);
  s.OnReady(nullptr);
  s.Close();
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(s.Next(absl::ZeroDuration()).has_value());
}

TEST(EventHubTest, ReplaysOnlyKeptEventsAfterTheSequenceAskedFor) {
  EventHub hub(/*incarnation=*/1, /*events_per_job=*/2);
  for (uint64_t g = 1; g <= 3; ++g) hub.Publish(7, Revoked(g), {});
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, /*after_sequence=*/0)).size(), 1u);  // no replay
  std::vector<JobEvent> replay = Take(*hub.Subscribe(7, 0, /*after_sequence=*/1));
  ASSERT_EQ(replay.size(), 3u);  // WATCH_STARTED, then 2 and 3 (1 was not kept)
  EXPECT_EQ(replay[1].sequence(), 2u);
  EXPECT_EQ(replay[2].sequence(), 3u);
  hub.Publish(7, Revoked(4), {1});
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, /*after_sequence=*/3)).size(), 1u);  // 4 is for rank 1
}

// A restarted manager numbers from 1 again: a subscriber that saw events of
// the previous incarnation must not have this one's skipped.
TEST(EventHubTest, ANumberFromBeforeARestartReplaysEverythingKept) {
  EventHub hub(/*incarnation=*/2, /*events_per_job=*/16);
  for (uint64_t g = 1; g <= 3; ++g) hub.Publish(7, Revoked(g), {});
  // Saw up to 5 of incarnation 1: every kept event of incarnation 2.
  std::vector<JobEvent> got = Take(*hub.Subscribe(7, 0, /*after_sequence=*/5, /*incarnation=*/1));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1].sequence(), 1u);
  // Saw 2 of incarnation 1 (a smaller number than this hub's): the same.
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, 2, 1)).size(), 4u);
  // Saw nothing of incarnation 1 but was watching it: the same.
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, 0, 1)).size(), 4u);
  // An old client that does not say its incarnation, past this numbering.
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, 9)).size(), 4u);
  // This incarnation's numbers keep their meaning.
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, 2, 2)).size(), 2u);
  EXPECT_EQ(Take(*hub.Subscribe(7, 0, 0, 2)).size(), 1u);
}

TEST(EventHubTest, ANewSubscriberReplacesTheOldAndTheEndOfAJobClosesItsStreams) {
  EventHub hub(/*incarnation=*/1, /*events_per_job=*/16);
  std::shared_ptr<EventStream> first = hub.Subscribe(7, 0, 0);
  std::shared_ptr<EventStream> second = hub.Subscribe(7, 0, 0);
  std::shared_ptr<EventStream> other = hub.Subscribe(8, 0, 0);
  Take(*first);
  EXPECT_TRUE(first->Finished());
  EXPECT_FALSE(second->Finished());
  hub.EndJob(7);
  EXPECT_EQ(Take(*second).size(), 1u);  // WATCH_STARTED
  EXPECT_TRUE(second->Finished());
  // EndJob forgot the job's events: numbering starts again.
  std::shared_ptr<EventStream> fresh = hub.Subscribe(7, 0, 0);
  hub.Publish(7, Revoked(1), {});
  std::vector<JobEvent> again = Take(*fresh);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].sequence(), 1u);
  EXPECT_FALSE(other->Finished());
  EXPECT_FALSE(hub.closed());
  hub.CloseAll();
  EXPECT_TRUE(hub.closed());
  Take(*other);
  EXPECT_TRUE(other->Finished());
  hub.Publish(8, Revoked(2), {});  // closed streams take nothing
  EXPECT_TRUE(other->Finished());
}

TEST_F(ManagerTest, WatchReplaysMissedEventsAndEndsWithTheJob) {
  Start("single_switch.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});
  AttachAll(job, 2);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 1});
  ASSERT_TRUE(g.ok());
  std::shared_ptr<EventStream> first = Watch(job, 0);
  // Rank 0 re-attaches from a new endpoint: its group is revoked
  // (sequence 1 and 2).
  ASSERT_TRUE(Attach(job, 0, 0, /*attempt=*/1).ok());
  std::vector<JobEvent> ev = Drain(*first);
  ASSERT_EQ(ev.size(), 2u);
  // A new stream for the same rank replaces the old one and can replay.
  control::WatchEventsRequest req;
  *req.mutable_job() = Creds(job);
  req.set_rank(0);
  req.set_after_sequence(ev[0].sequence());
  absl::StatusOr<std::shared_ptr<EventStream>> second = am_->WatchEvents(req);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(first->Finished());
  std::vector<JobEvent> replay = Drain(**second);
  ASSERT_EQ(replay.size(), 2u);  // WATCH_STARTED + the second event
  EXPECT_EQ(replay[1].sequence(), ev[1].sequence());
  ASSERT_TRUE(DestroyJob(job).ok());
  std::vector<JobEvent> last = Drain(**second);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].kind(), JobEvent::JOB_DESTROYED);
  EXPECT_TRUE((*second)->Finished());
}

}  // namespace
}  // namespace netfold::manager
