// netfold-switchd as real processes on loopback, with netfold-managerd and
// in static mode without it; one process per switch, or the three switches
// in one process (switchd_fixture.h says how the hosts and the checks work).
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/switch/switchd_fixture.h"

namespace netfold::testing {
namespace {

TEST_F(SwitchdTest, AllreduceThroughTheManagedFabricMatchesTheTreeOrderBitForBit) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());

  // Every rank: a group through root0, multicast delivery.
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  ASSERT_EQ(g.root_switch(), "root0");
  ASSERT_EQ(g.switches_size(), 3);
  // The root holds the group, with the leaves' ranks under each child.
  control::ListGroupsResponse root = ListGroups("root0");
  ASSERT_EQ(root.groups_size(), 1);
  ASSERT_EQ(root.groups(0).children_size(), 2);
  EXPECT_EQ(root.groups(0).children(1).ranks_size(), 2);
  EXPECT_EQ(root.groups(0).children(1).ranks(0), 2u);
  EXPECT_TRUE(root.groups(0).is_root());
  EXPECT_EQ(root.usage().slots(), g.num_slots());
  RunAllreduces(Members(all), g, kCases, 1);
  if (HasFailure()) return;

  // A group on one leaf (it never leaves leaf0) and one with RC delivery
  // down the tree, at the same time as the first.
  const std::vector<uint32_t> pair = {0, 1};
  control::GroupInfo local = CreateGroup(pair);
  EXPECT_EQ(local.root_switch(), "leaf0");
  const std::vector<uint32_t> cross = {1, 2};
  control::GroupInfo rc = CreateGroup(cross, control::DELIVERY_RC_DOWN);
  EXPECT_EQ(rc.root_switch(), "root0");
  RunAllreduces(Members(pair), local, {kCases[0], kCases[2]}, 2);
  RunAllreduces(Members(cross), rc, {kCases[1], kCases[3], kCases[7]}, 3);
  RunAllreduces(Members(all), g, {kCases[4]}, 4);
  if (HasFailure()) return;

  // The counters saw it: requests and completions at the root, QPs, peers.
  control::GetCountersResponse c = Counters("root0");
  EXPECT_EQ(c.name(), "root0");
  ASSERT_GE(c.groups_size(), 2);
  EXPECT_GT(c.groups(0).operations_completed(), 0u);
  uint64_t latency_samples = 0;
  for (uint64_t b : c.groups(0).latency_us_log2()) latency_samples += b;
  EXPECT_EQ(latency_samples, c.groups(0).operations_completed());
  EXPECT_EQ(c.qps_size(), 2);  // one per leaf link
  EXPECT_GE(c.peers_size(), 2);

  // Destroyed groups leave no slot on any switch.
  for (uint64_t id : {g.group_id(), local.group_id(), rc.group_id()}) {
    ASSERT_TRUE(DestroyGroup(id).ok());
  }
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, LossyLinksStillGiveExactResults) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);

  // Loss, duplication and reordering on every link of leaf0 and on root0's
  // links (both directions), set at run time.
  control::SetLinkFaultResponse resp;
  grpc::Status s = SetLinkFault("leaf0", "all", "drop=0.05,dup=0.02,reorder=0.05:200us,seed=11", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GE(resp.links_size(), 1);
  EXPECT_EQ(resp.links(resp.links_size() - 1).peer(), "default");
  EXPECT_NE(resp.links(0).send().find("drop=0.05"), std::string::npos) << resp.links(0).send();
  // 5 %, not more: the leaf0 - root0 link is impaired at both ends, four
  // stages per round trip, and RC gives up after eight lost transmissions
  // in a row (docs/faults.md: at 10 % that is 5e-4 per lost packet).
  s = SetLinkFault("root0", "all", "drop=0.05,seed=12", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // A bad impairment is refused with the parser's reason.
  s = SetLinkFault("root0", "all", "drop=1.5", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  RunAllreduces(Members(all), g, kCases, 7);
  RunAllreduces(Members(all), g, kCases, 17);
  if (HasFailure()) return;

  // The impairment stages dropped packets (a few hundred packets at 5 %:
  // none dropped is a 1e-7 event), and every one was repaired.
  uint64_t dropped = 0;
  for (const std::string& name : {std::string("leaf0"), std::string("root0")}) {
    const control::GetCountersResponse c = Counters(name);
    for (const control::PeerCounters& p : c.peers()) {
      for (const auto& d : p.send_stage().drops()) dropped += d.count();
      for (const auto& d : p.receive_stage().drops()) dropped += d.count();
    }
  }
  EXPECT_GT(dropped, 0u);
  // Faults off: a link of one peer can be set alone.
  ASSERT_TRUE(SetLinkFault("leaf0", "all", "none", &resp).ok());
  ASSERT_TRUE(SetLinkFault("root0", "all", "none", &resp).ok());
  ASSERT_TRUE(SetLinkFault("leaf1", absl::StrFormat("127.0.0.1:%d", data_port_["root0"]), "dup=0.5,seed=3",
                           &resp).ok());
  ASSERT_EQ(resp.links_size(), 1);
  RunAllreduces(Members(all), g, {kCases[0]}, 8);
  ASSERT_TRUE(DestroyGroup(g.group_id()).ok());
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, KilledSwitchdIsRevokedByTheManager) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  control::WatchEventsRequest watch;
  *watch.mutable_job() = creds_;
  watch.set_rank(0);
  EventWatcher watcher(channel_, watch);
  ASSERT_TRUE(watcher.WaitStarted(absl::Seconds(5)));
  RunAllreduces(Members(all), g, {kCases[0]}, 5);

  switchd_.at("leaf1")->Signal(SIGKILL);
  ASSERT_TRUE(switchd_.at("leaf1")->Wait(absl::Seconds(5)).has_value());
  std::optional<control::JobEvent> e = watcher.WaitFor(
      [&](const control::JobEvent& ev) {
        return ev.kind() == control::JobEvent::GROUP_REVOKED && ev.group_id() == g.group_id();
      },
      absl::Seconds(5));
  ASSERT_TRUE(e.has_value()) << "no GROUP_REVOKED after leaf1 died";
  EXPECT_EQ(SwitchState("leaf1"), control::SwitchStatus::DEAD);
  // The survivors were told to remove the group: nothing left on them.
  EXPECT_TRUE(WaitUntil(
      [&] { return ListGroups("root0").usage().slots() == 0 && ListGroups("leaf0").usage().slots() == 0; },
      absl::Seconds(5)));
  // The engines of the survivors hear of it (abort) or time out: nothing hangs.
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, SigtermRemovesEveryGroupAndExitsZero) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[2]}, 6);
  // An operation stuck in root0 (rank 3 never posts): slots are busy.
  Bytes in(64, 1), out(64);
  StartAnOperationRank3NeverJoins(g, in, &out);
  if (HasFailure()) return;

  // root0 holds the busy slots; leaf0 may or may not still hold the group
  // (the manager revokes it once root0 is gone): both exit 0 with no slot left.
  for (const std::string& name : {std::string("root0"), std::string("leaf0")}) {
    switchd_.at(name)->Signal(SIGTERM);
    std::optional<int> status = switchd_.at(name)->Wait(absl::Seconds(10));
    ASSERT_TRUE(status.has_value()) << name << " did not exit after SIGTERM";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << name << " status " << *status;
    const std::string log = switchd_.at(name)->Log();
    if (name == "root0") {
      EXPECT_NE(log.find("1 groups removed"), std::string::npos) << log;
    }
    EXPECT_NE(log.find("0 slots left"), std::string::npos) << log;
  }
  EXPECT_TRUE(WaitUntil([&] { return SwitchState("root0") == control::SwitchStatus::DEAD; },
                        absl::Seconds(5)));
}

TEST_F(SwitchdTest, QpErrorOnATreeLinkIsReportedAndRevokesItsGroups) {
  StartManager();
  // Short RC timeouts: a dead link fails its QPs within ~30 ms.
  StartManagedSwitches({"--ack_timeout_ms", "1", "--retry_count", "3"});
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[2]}, 10);
  control::WatchEventsRequest watch;
  *watch.mutable_job() = creds_;
  watch.set_rank(3);
  EventWatcher watcher(channel_, watch);
  ASSERT_TRUE(watcher.WaitStarted(absl::Seconds(5)));

  // leaf1's link to root0 goes down (both directions); the next operation's
  // partial result from leaf1 is never acknowledged.
  control::SetLinkFaultResponse resp;
  ASSERT_TRUE(
      SetLinkFault("leaf1", absl::StrFormat("127.0.0.1:%d", data_port_["root0"]), "down=1", &resp)
          .ok());
  Bytes in(256, 1), out(256);
  std::map<uint32_t, host::OpId> ids;
  for (TestHost* h : Members(all)) {
    absl::StatusOr<host::OpId> id = h->engine(g.group_id())
                                        .Start({.dtype = DataType::kInt32, .send = in.data(),
                                                .recv = out.data(), .count = 64});
    ASSERT_TRUE(id.ok()) << id.status();
    ids[h->rank()] = *id;
  }
  std::optional<control::JobEvent> revoked;
  ASSERT_TRUE(RunHosts(
      Members(all),
      [&] {
        revoked = watcher.WaitFor(
            [&](const control::JobEvent& e) {
              return e.kind() == control::JobEvent::GROUP_REVOKED && e.group_id() == g.group_id();
            },
            absl::ZeroDuration());
        return revoked.has_value();
      },
      absl::Seconds(10)))
      << "no GROUP_REVOKED after leaf1's link QP failed";
  // leaf1 reported the failure; the manager dropped the link (both QPs) and
  // removed the group from every switch; the stuck operation ends with an
  // error on every rank, nothing hangs.
  EXPECT_NE(switchd_.at("leaf1")->Log().find("reported QP"), std::string::npos)
      << switchd_.at("leaf1")->Log();
  // root0 keeps only its link to leaf0.
  EXPECT_TRUE(WaitUntil([&] { return Counters("root0").qps_size() == 1; }, absl::Seconds(5)));
  ASSERT_TRUE(RunHosts(
      Members(all),
      [&] {
        for (TestHost* h : Members(all)) {
          if (!h->engine(g.group_id()).Done(ids[h->rank()])) return false;
        }
        return true;
      },
      absl::Seconds(25)));
  for (TestHost* h : Members(all)) {
    EXPECT_FALSE(h->engine(g.group_id()).Finish(ids[h->rank()]).ok()) << "rank " << h->rank();
  }
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, SwitchesReRegisterAfterAManagerRestartAndKeepServing) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[0]}, 11);

  // The manager dies; the data plane does not need it.
  manager_->Signal(SIGKILL);
  ASSERT_TRUE(manager_->Wait(absl::Seconds(5)).has_value());
  RunAllreduces(Members(all), g, {kCases[2]}, 12);
  // Long enough for the switches' reconnect attempts to back off to their
  // cap (the manager writes off a switch that does not re-register within
  // switch_timeout + 1 s of its restart, docs/manager.md).
  absl::SleepFor(absl::Milliseconds(1500));
  // It comes back on the same port with its journal: every switch
  // reconnects (with backoff), reports the group and its QPs, and is
  // reconciled without losing anything.
  StartManager(manager_port_);
  ASSERT_TRUE(WaitAllUp()) << "switches did not re-register";
  for (const std::string& name : kSwitches) {
    // The journal brings the switches back as UP at once; a switch's own
    // re-registration (it reports its group) follows within its backoff.
    EXPECT_TRUE(WaitUntil(
        [&] { return switchd_.at(name)->Log().find("(1 groups") != std::string::npos; },
        absl::Seconds(10)))
        << name << ":\n" << switchd_.at(name)->Log();
    EXPECT_EQ(ListGroups(name).groups_size(), 1) << name;
  }
  RunAllreduces(Members(all), g, {kCases[1], kCases[7]}, 13);
  ASSERT_TRUE(DestroyGroup(g.group_id()).ok());
  ExpectNoSlotsAnywhere();
}

// ---------------------------------------------------------------------------
// Static mode: no manager; QPs and the group from the YAML file.

TEST_F(SwitchdTest, StaticModeServesAGroupWithoutAManager) {
  constexpr uint32_t kPkey = 0x8005;
  // A group address and Q_Key of this run only: another run of this test on
  // the same machine must not feed our hosts its results.
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()) * 1000003u +
                      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  const uint32_t kQkey = static_cast<uint32_t>(rng() & 0x7fffffff);
  const std::string group_address =
      absl::StrFormat("239.78.%d.%d:4791", rng() % 256, 1 + rng() % 254);
  for (uint32_t r = 0; r < 3; ++r) {
    absl::StatusOr<std::unique_ptr<TestHost>> h = TestHost::Create(r);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE((*h)->Init(kPkey, kQkey, /*qpn=*/0x200 + r).ok());
    hosts_.push_back(*std::move(h));
  }
  const std::string config = dir_.path() + "/static.yaml";
  {
    std::ofstream out(config);
    out << "name: static0\ndata_address: 127.0.0.1:0\nadmin_address: 127.0.0.1:0\n"
        << "static:\n  jobs: [{id: 3, quota: {groups: 2, slots: 16, qps: 4}}]\n  qps:\n";
    for (uint32_t r = 0; r < 3; ++r) {
      out << absl::StrFormat(
          "    - {qpn: 0x%x, psn: %d, job: 3, pkey: 0x%x, peer: \"rank %d\", remote: {address: %s, "
          "qpn: 0x%x, psn: %d}}\n",
          0x1000 + r, 500 + r, kPkey, r, hosts_[r]->address().ToString(), hosts_[r]->qpn(),
          hosts_[r]->psn());
    }
    out << absl::StrFormat(
        "  groups:\n    - {tree: 0, group: 7, epoch: 1, job: 3, pkey: 0x8005, qkey: 0x%x, "
        "num_slots: 4, slot_bytes: 512, multicast: %s, children: [{qpn: 0x1000, ranks: [0]}, "
        "{qpn: 0x1001, ranks: [1]}, {qpn: 0x1002, ranks: [2]}]}\n",
        kQkey, group_address);
  }
  StartSwitchd("static0", {"--config", config});
  ASSERT_FALSE(HasFailure());
  control::GroupInfo g;
  g.set_group_id(7);
  g.set_tree_id(0);
  g.set_epoch(1);
  g.set_num_slots(4);
  g.set_slot_bytes(512);
  g.set_delivery(control::DELIVERY_MULTICAST);
  g.set_multicast_address(group_address);
  for (uint32_t r = 0; r < 3; ++r) {
    control::Endpoint sw;
    sw.set_address(absl::StrFormat("127.0.0.1:%d", data_port_["static0"]));
    sw.set_qpn(0x1000 + r);
    sw.set_psn(500 + r);
    ASSERT_TRUE(hosts_[r]->Connect(sw).ok());
    ASSERT_TRUE(hosts_[r]->JoinGroup(g).ok());
    control::GroupMember* m = g.add_members();
    m->set_rank(r);
    m->set_leaf_switch("leaf0");
    m->set_child_index(r);
  }
  control::ListGroupsResponse groups = ListGroups("static0");
  ASSERT_EQ(groups.groups_size(), 1);
  EXPECT_EQ(groups.groups(0).group_id(), 7u);
  EXPECT_EQ(groups.groups(0).children(2).peer(), "rank 2");
  RunAllreduces(Members({0, 1, 2}), g, {kCases[0], kCases[2], kCases[5], kCases[8]}, 9);
  if (HasFailure()) return;

  switchd_.at("static0")->Signal(SIGTERM);
  std::optional<int> status = switchd_.at("static0")->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_NE(switchd_.at("static0")->Log().find("1 groups removed, 3 QPs destroyed, 0 slots left"),
            std::string::npos)
      << switchd_.at("static0")->Log();
}

TEST_F(SwitchdTest, RefusedRegistrationIsLoggedAndRetried) {
  StartManager();
  // leaf0 offers 1024-byte slots; the topology declares 4048. At debug
  // level every retry is in the log; the error is said once (then once a
  // minute), not at every retry.
  StartSwitchd("leaf0", {"--name", "leaf0", "--data_address", "127.0.0.1:0", "--manager",
                         manager_address_, "--slot_bytes", "1024", "--log_level", "debug"});
  ASSERT_FALSE(HasFailure());
  auto refusals = [&] {
    const std::string log = switchd_.at("leaf0")->Log();
    size_t n = 0;
    for (size_t at = log.find("offers slot_bytes=1024"); at != std::string::npos;
         at = log.find("offers slot_bytes=1024", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(WaitUntil([&] { return refusals() >= 3; }, absl::Seconds(10)))
      << switchd_.at("leaf0")->Log();
  const std::string log = switchd_.at("leaf0")->Log();
  size_t errors = 0;
  for (size_t at = log.find("the manager refused the registration"); at != std::string::npos;
       at = log.find("the manager refused the registration", at + 1)) {
    ++errors;
  }
  EXPECT_EQ(errors, 1u) << log;
  EXPECT_NE(SwitchState("leaf0"), control::SwitchStatus::UP);
  EXPECT_TRUE(switchd_.at("leaf0")->running());
}

TEST_F(SwitchdTest, BadConfigExitsTwoWithTheReason) {
  const std::string config = dir_.path() + "/bad.yaml";
  {
    std::ofstream out(config);
    out << "name: x\ncapacity: {slot_bytes: 4096}\n";
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({NETFOLD_SWITCHD, "--config", config}, dir_.path() + "/bad.log");
  ASSERT_TRUE(p.ok());
  std::optional<int> status = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status;
  EXPECT_NE((*p)->Log().find("at most 4048"), std::string::npos) << (*p)->Log();
}

// One netfold-switchd runs the whole tree (netfold up's default): every
// switch registers with its own ports, results are exact (over lossy links
// between two switches of the process too: their RC timers run on the shared
// thread), and SIGTERM stops all three cleanly.
TEST_F(SwitchdTest, ThreeSwitchesInOneProcessServeTheTreeAndStopTogether) {
  StartManager();
  StartManagedSwitches({}, /*one_process=*/true);
  StartJob();
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(switchd_.size(), 1u);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  ASSERT_EQ(g.switches_size(), 3);
  RunAllreduces(Members(all), g, kCases, 21);
  const std::vector<uint32_t> cross = {1, 2};
  control::GroupInfo rc = CreateGroup(cross, control::DELIVERY_RC_DOWN);
  RunAllreduces(Members(cross), rc, {kCases[1], kCases[3]}, 22);
  if (HasFailure()) return;

  control::SetLinkFaultResponse resp;
  const std::string root = absl::StrFormat("127.0.0.1:%d", data_port_["root0"]);
  ASSERT_TRUE(SetLinkFault("leaf0", root, "drop=0.1,seed=5", &resp).ok());
  RunAllreduces(Members(all), g, kCases, 23);
  uint64_t dropped = 0;
  const control::GetCountersResponse leaf0 = Counters("leaf0");
  for (const control::PeerCounters& p : leaf0.peers()) {
    for (const auto& d : p.send_stage().drops()) dropped += d.count();
    for (const auto& d : p.receive_stage().drops()) dropped += d.count();
  }
  EXPECT_GT(dropped, 0u);
  ASSERT_TRUE(DestroyGroup(rc.group_id()).ok());
  // The manager does not wait for the switches' removals: root0 holds `g`
  // alone before it is stopped.
  ASSERT_TRUE(WaitUntil([&] { return ListGroups("root0").groups_size() == 1; },
                        absl::Seconds(10)));

  // An operation stuck in root0 (rank 3 never posts), then SIGTERM.
  Bytes in(64, 1), out(64);
  StartAnOperationRank3NeverJoins(g, in, &out);
  if (HasFailure()) return;
  Subprocess& process = *switchd_.at("switches");
  process.Signal(SIGTERM);
  std::optional<int> status = process.Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << "the switches did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  const std::string log = process.Log();
  for (const std::string& name : kSwitches) {
    EXPECT_NE(log.find("netfold-switchd " + name + " stopped:"), std::string::npos) << log;
  }
  EXPECT_NE(log.find("root0 stopped: 1 groups removed"), std::string::npos) << log;
  size_t clean = 0;
  for (size_t at = log.find("0 slots left"); at != std::string::npos;
       at = log.find("0 slots left", at + 1)) {
    ++clean;
  }
  EXPECT_EQ(clean, kSwitches.size()) << log;
}

// What several switches cannot share is refused before anything starts.
TEST_F(SwitchdTest, SeveralSwitchesInOneProcessRefuseWhatTheyCannotShare) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--name", "a,b", "--data_address", "127.0.0.1:4791"}, "needs port 0"},
      {{"--name", "a,b", "--data_address", "127.0.0.1:0", "--data_port_file",
        dir_.path() + "/x.port"},
       "needs a {name}"},
      {{"--name", "a,b,a", "--data_address", "127.0.0.1:0"}, "'a' is named twice"},
      {{"--name", "a,b", "--data_address", "127.0.0.1:0", "--poll_us", "50"}, "without poll_us"},
      {{"--name", "a", "--planes", "3", "--data_address", "127.0.0.1:65534"},
       "port 65534 + 3 planes goes past 65535"},
      {{"--name", "a", "--planes", "2", "--data_address", "127.0.0.1:0", "--data_port_file",
        dir_.path() + "/x.port"},
       "several data planes (--planes N): the port file"},
      {{"--name", "a", "--planes", "17"}, "--planes 17 is larger than 16"},
  };
  int n = 0;
  for (const auto& [args, reason] : cases) {
    std::vector<std::string> argv = {NETFOLD_SWITCHD, "--insecure", "--admin_address", "none"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Start(argv, absl::StrFormat("%s/refused%d.log", dir_.path(), n++));
    ASSERT_TRUE(p.ok());
    std::optional<int> status = (*p)->Wait(absl::Seconds(10));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << reason << ": " << *status;
    EXPECT_NE((*p)->Log().find(reason), std::string::npos) << (*p)->Log();
  }
}

// A switch with two data planes (--planes 2) is two switches to the
// manager, s0 and s0@1, each with ports and a thread of its own: both
// register and come UP, each plane heard at its own data address, and
// SIGTERM stops both cleanly.
TEST_F(SwitchdTest, DataPlanesRegisterAsSwitchesOfTheirOwn) {
  const std::string topology = dir_.path() + "/planes.yaml";
  {
    std::ofstream out(topology);
    out << "name: planes\nplanes: 2\n"
        << "defaults: {capacity: {trees: 64, groups: 64, slots: 256, slot_bytes: 4048, qps: 128}}\n"
        << "switches:\n  - {name: s0, tier: 0}\n"
        << "hosts:\n  - {name: h0, switch: s0}\n  - {name: h1, switch: s0}\n";
  }
  StartManager(0, topology);
  StartSwitchdProcess("s0", {"s0", "s0@1"},
                      {"--name", "s0", "--planes", "2", "--data_address", "127.0.0.1:0",
                       "--manager", manager_address_});
  if (HasFailure()) return;
  ASSERT_NE(data_port_.at("s0"), data_port_.at("s0@1"));
  const bool up = WaitUntil(
      [&] {
        const control::GetStatusResponse st = Status();
        int n = 0;
        for (const auto& sw : st.switches()) {
          if (sw.state() != control::SwitchStatus::UP) continue;
          const std::string want = absl::StrFormat("127.0.0.1:%d", data_port_.at(sw.name()));
          if (sw.data_address() == want) ++n;
        }
        return st.switches_size() == 2 && n == 2;
      },
      absl::Seconds(20), absl::Milliseconds(50));
  ASSERT_TRUE(up) << Status().DebugString();
  // Each plane answers for itself on its admin port.
  EXPECT_EQ(Counters("s0").data_address(), absl::StrFormat("127.0.0.1:%d", data_port_.at("s0")));
  EXPECT_EQ(Counters("s0@1").data_address(),
            absl::StrFormat("127.0.0.1:%d", data_port_.at("s0@1")));

  Subprocess& process = *switchd_.at("s0");
  process.Signal(SIGTERM);
  std::optional<int> status = process.Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << "the planes did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  for (const char* name : {"netfold-switchd s0 stopped:", "netfold-switchd s0@1 stopped:"}) {
    EXPECT_NE(process.Log().find(name), std::string::npos) << process.Log();
  }
}

}  // namespace
}  // namespace netfold::testing
