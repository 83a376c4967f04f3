// The half of Context (host/context.h) that creates groups: the
// planes a group goes to, its fabric groups requested from the manager and
// joined in every channel, the hosts' standby channels, and the fallbacks
// when a plane, a channel or the fabric cannot take it. Every member takes
// the same path: rank 0's answers are broadcast and each step's outcome is
// agreed (host/oob.h). context.cc holds the rest: joining the job,
// attaching in the planes, events, waits and finalizing.
#include "host/context.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/grants.h"
#include "host/oob.h"
#include "netfold/netfold.h"
#include "proto/control/plane_name.h"

namespace netfold::host {

namespace {

// The members' exchanges wait for other processes: outside the data path's
// lock, so that the progress thread keeps the link answered meanwhile.
class OutsideOob : public Oob {
 public:
  OutsideOob(Oob& inner, ProgressThread& progress) : inner_(inner), progress_(progress) {}
  absl::Status Allgather(const void* send, void* recv, size_t bytes) override {
    ProgressThread::Outside outside(progress_);
    return inner_.Allgather(send, recv, bytes);
  }
  absl::Status Bcast(void* buf, size_t bytes, int root) override {
    ProgressThread::Outside outside(progress_);
    return inner_.Bcast(buf, bytes, root);
  }
  absl::Status Barrier() override {
    ProgressThread::Outside outside(progress_);
    return inner_.Barrier();
  }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

 private:
  Oob& inner_;
  ProgressThread& progress_;
};

// Failures of the fabric the hosts can stand in for.
bool HostsCanStandIn(const absl::Status& s) {
  return absl::IsResourceExhausted(s) || absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsFailedPrecondition(s);
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> Context::ChoosePlanes(Oob& group_oob) {
  // Every member has the fabric's planes from the same manager: without
  // planes nobody asks (no round of the OOB).
  if (planes_ == 1) return std::vector<uint32_t>{0};
  std::string choice;
  if (group_oob.rank() == 0) {
    // The next planes in turn, skipping those lost; as many as the job's
    // channels.
    const uint32_t usable = usable_planes_;
    std::vector<uint32_t> chosen;
    for (uint32_t i = 0; i < usable && chosen.size() < channels_; ++i) {
      const uint32_t p = (next_plane_ + i) % usable;
      if (!PlaneLost(p)) chosen.push_back(p);
    }
    if (chosen.empty()) chosen.push_back(0);
    next_plane_ = (chosen.front() + 1) % std::max<uint32_t>(usable, 1);
    choice = absl::StrJoin(chosen, ",");
  }
  NETFOLD_RETURN_IF_ERROR(group_oob.BcastString(&choice, 0));
  std::vector<uint32_t> planes;
  for (absl::string_view field : absl::StrSplit(choice, ',')) {
    uint32_t plane = 0;
    if (!absl::SimpleAtoi(field, &plane) || plane >= planes_ ||
        std::find(planes.begin(), planes.end(), plane) != planes.end() ||
        planes.size() >= control::kMaxPlanes) {
      return absl::InternalError(absl::StrFormat("group rank 0 chose data planes '%s'", choice));
    }
    planes.push_back(plane);
  }
  if (planes == std::vector<uint32_t>{0}) return planes;
  absl::Status mine = absl::OkStatus();
  for (uint32_t plane : planes) {
    if (plane == 0 || !mine.ok()) continue;
    mine = EnsurePlane(plane);
    if (!mine.ok() && data_path_->soft()) {  // on verbs, expected: no warning
      NETFOLD_LOG(kWarning) << "rank " << options_.rank << ": cannot attach in data plane "
                            << plane << ": " << mine.message();
    }
  }
  absl::Status all = AgreeOnStatus(group_oob, mine);
  if (!all.ok()) {
    if (group_oob.rank() == 0) {
      NETFOLD_LOG(kWarning) << "data planes " << choice << " cannot take the group ("
                            << all.message() << "): trying plane 0 alone";
    }
    return std::vector<uint32_t>{0};
  }
  return planes;
}

absl::StatusOr<std::unique_ptr<Group>> Context::CreateGroup(Oob& members,
                                                           const std::vector<int>& world_ranks) {
  ProgressThread::Inside inside(*progress_);
  OutsideOob group_oob(members, *progress_);
  if (static_cast<int>(world_ranks.size()) != group_oob.size()) {
    return absl::InvalidArgumentError("the group's rank list and its OOB size differ");
  }
  for (int r : world_ranks) {
    if (r < 0 || r >= options_.world_size) {
      return absl::InvalidArgumentError(absl::StrFormat("world rank %d out of range", r));
    }
  }
  if (world_ranks[static_cast<size_t>(group_oob.rank())] != options_.rank) {
    return absl::InvalidArgumentError(
        "the group spec's world rank for this process is not this process's rank");
  }
  namespace alg = algorithms;
  const alg::AlgorithmPolicy policy = options_.algorithm;
  const bool hosts_only = policy == alg::AlgorithmPolicy::kRing ||
                          policy == alg::AlgorithmPolicy::kBidirRing ||
                          policy == alg::AlgorithmPolicy::kTree ||
                          policy == alg::AlgorithmPolicy::kTreeScatter;
  const bool may_fall_back = policy != alg::AlgorithmPolicy::kInNetwork;
  GroupSetup setup;
  setup.released_reduces = static_cast<int>(options_.released_reduces);
  setup.group_rank = group_oob.rank();
  setup.world_ranks = world_ranks;
  auto connect_hosts = [&](std::optional<alg::TreeSpec> fabric_tree) -> absl::Status {
    HostCollectivesOptions ho;
    ho.policy = policy;
    ho.pkey = pkey_;
    ho.op_timeout = options_.timeout;
    ho.fabric_tree = std::move(fabric_tree);
    NETFOLD_ASSIGN_OR_RETURN(setup.host,
                             HostCollectives::Connect(&data_path_->endpoint(), group_oob, ho));
    return absl::OkStatus();
  };
  auto adopt = [&]() {
    GroupOwner* owner = this;  // a private base: converted here, where it is accessible
    auto group = std::make_unique<Group>(owner, std::move(setup));
    if (Channels* fabric = group->fabric(); fabric != nullptr) {
      for (size_t c = 0; c < fabric->size(); ++c) {
        data_path_->Route(static_cast<uint32_t>(fabric->channel(c).group_id), &fabric->engine(c),
                          fabric->channel(c).plane, fabric->channel(c).multicast);
      }
    }
    groups_.push_back(group.get());
    return group;
  };
  auto host_group = [&](const std::string& why) -> absl::StatusOr<std::unique_ptr<Group>> {
    NETFOLD_RETURN_IF_ERROR(connect_hosts(std::nullopt));
    setup.description = absl::StrFormat("host group of %d ranks (NETFOLD_ALGORITHM=%s): %s",
                                        world_ranks.size(), alg::AlgorithmPolicyName(policy), why);
    if (!hosts_only && group_oob.rank() == 0) NETFOLD_LOG(kWarning) << setup.description;
    return adopt();
  };
  if (hosts_only) return host_group("the policy asks for host algorithms");
  if (keeps_groups_) {
    NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<Group> kept, TakeKeptGroup(group_oob, world_ranks));
    if (kept != nullptr) return kept;
  }
  // A member that lost its leaf link attaches again first (Reattach), and
  // the members agree: the manager would refuse a group with a member that
  // is not attached.
  if (absl::Status all = AgreeOnStatus(group_oob, ReattachLostPlanes()); !all.ok()) {
    if (may_fall_back) return host_group(std::string(all.message()));
    return all;
  }

  absl::StatusOr<std::vector<uint32_t>> planes = ChoosePlanes(group_oob);
  if (!planes.ok()) return planes.status();
  // Every member takes the same path below: RequestGroup broadcasts rank
  // 0's answer, and JoinFabricGroup agrees on its outcome. A group on
  // channels or on a plane above 0 that cannot be had goes on plane 0,
  // one channel, once.
  const std::vector<uint32_t> plane_zero = {0};
  auto to_plane_zero = [&](const absl::Status& why) {
    if (group_oob.rank() == 0) {
      NETFOLD_LOG(kWarning) << "data planes " << absl::StrJoin(*planes, ",")
                            << " cannot take the group (" << why.message()
                            << "): trying plane 0 alone";
    }
    *planes = plane_zero;
  };
  bool dropped_kept = false;
  for (;;) {
    absl::StatusOr<std::vector<control::GroupInfo>> infos =
        RequestGroups(group_oob, world_ranks, *planes);
    if (!infos.ok()) {
      // Kept groups hold switch slots and count among the job's groups:
      // when the fabric has no room, the members drop the kept groups of
      // their own ranks alone (all of whose members are here, dropping
      // them together: none stays joined to an address the manager gives
      // again) and ask once more, if any member dropped one.
      if (absl::IsResourceExhausted(infos.status()) && keeps_groups_ && !dropped_kept) {
        dropped_kept = true;
        const KeptDrop drop{.ranks = world_ranks, .any_of_them = true};
        RecordKeptDrop(drop);
        std::vector<std::unique_ptr<Group>> ours =
            TakeKeptIf([&](const Group& g) { return drop.Covers(g); });
        const uint8_t mine = ours.empty() ? 0 : 1;
        DropKept(std::move(ours));
        std::vector<uint8_t> dropped(static_cast<size_t>(group_oob.size()), 0);
        NETFOLD_RETURN_IF_ERROR(group_oob.Allgather(&mine, dropped.data(), 1));
        // (The exchange also orders the releases before rank 0 asks again.)
        if (std::any_of(dropped.begin(), dropped.end(), [](uint8_t d) { return d != 0; })) {
          continue;
        }
      }
      if (*planes != plane_zero) {
        to_plane_zero(infos.status());
        continue;
      }
      // The fabric cannot serve the group (no resources, a switch or the
      // manager gone): the hosts can, unless the policy forbids it.
      if (may_fall_back && HostsCanStandIn(infos.status())) {
        return host_group(std::string(infos.status().message()));
      }
      return infos.status();
    }
    if (infos->size() > 1 && !ChannelsAlike(*infos)) {
      // Channels fold their chunks in their own trees, in slots of their
      // own: trees of another shape would fold elements in another order
      // (the result would not be the bits one channel gives), and slots of
      // another size would cut the vector elsewhere. One channel, then.
      if (group_oob.rank() == 0) {
        NETFOLD_LOG(kWarning) << "the data planes' groups differ in tree shape or slots: the "
                                 "group runs on one channel (plane "
                              << (*planes)[0] << ")";
      }
      ReleaseGroups(group_oob, {infos->begin() + 1, infos->end()});
      infos->resize(1);
      planes->resize(1);
    }
    absl::Status joined = absl::OkStatus();
    for (size_t c = 0; c < infos->size() && joined.ok(); ++c) {
      joined = JoinFabricGroup(group_oob, (*infos)[c], (*planes)[c], static_cast<uint32_t>(c),
                               static_cast<uint32_t>(infos->size()), setup);
    }
    const bool join_failed = !joined.ok();  // agreed by every member
    // The hosts stand by to take over if the fabric fails mid-job.
    if (joined.ok() && may_fall_back) {
      joined = AgreeOnStatus(group_oob, connect_hosts(FabricTree(infos->front(), world_ranks)));
    }
    if (joined.ok()) {
      ++groups_requested_;
      break;
    }
    LeaveFabricGroups(setup);
    ReleaseGroups(group_oob, *infos);
    setup.host.reset();
    if (*planes == plane_zero) {
      // A member cannot join the fabric's group (every member agreed on
      // that, whatever its own reason): the hosts can serve it, as a group
      // the fabric refuses, unless the policy forbids it. Not when it was
      // the hosts' own channels that failed to connect.
      if (join_failed && may_fall_back) return host_group(std::string(joined.message()));
      return joined;
    }
    to_plane_zero(joined);
  }
  setup.group_id = setup.channels.front().group_id;
  return adopt();
}

absl::Status Context::DestroyGroup(std::unique_ptr<Group> group, Oob& group_oob) {
  std::optional<uint64_t> vote;  // to keep the group (KeptDrop)
  uint64_t drops_before = 0;
  {
    ProgressThread::Inside inside(*progress_);
    DropFailedKept();  // their places first
    if (keeps_groups_ && kept_.size() + keeping_ < options_.keep_groups) {
      ++keeping_;
      vote = KeptDropsCovering(*group);
      drops_before = kept_drops_made_;
    }
  }
  absl::StatusOr<bool> kept = group->DestroyOrKeep(group_oob, vote);
  ProgressThread::Inside inside(*progress_);
  if (vote) --keeping_;
  if (!kept.ok()) return kept.status();
  if (*kept) {
    std::vector<std::unique_ptr<Group>> ours;
    ours.push_back(std::move(group));
    if (KeptDropCoveredSince(*ours.front(), drops_before)) {
      DropKept(std::move(ours));  // as the members that kept it already did
    } else {
      kept_.push_back(std::move(ours.front()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Group>> Context::TakeKeptGroup(
    Oob& group_oob, const std::vector<int>& world_ranks) {
  DropFailedKept();
  // The offer leaves kept_ before the exchange (outside the lock), so that
  // another thread creating a group cannot take it meanwhile.
  std::unique_ptr<Group> offered;
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if ((*it)->world_ranks() == world_ranks && (*it)->Keepable()) {
      offered = std::move(*it);
      kept_.erase(it);
      break;
    }
  }
  const uint64_t mine = offered != nullptr ? offered->group_id() : 0;
  std::vector<uint64_t> offers(static_cast<size_t>(group_oob.size()), 0);
  absl::Status exchanged = group_oob.Allgather(&mine, offers.data(), sizeof(mine));
  if (!exchanged.ok()) {
    if (offered != nullptr) kept_.insert(kept_.begin(), std::move(offered));
    return exchanged;
  }
  if (mine != 0 && std::all_of(offers.begin(), offers.end(),
                               [mine](uint64_t offer) { return offer == mine; })) {
    ++groups_reused_;
    offered->Reopen();
    return offered;
  }
  if (std::any_of(offers.begin(), offers.end(), [](uint64_t offer) { return offer != 0; })) {
    // Some member offers another group or none (it never kept this one,
    // dropped it, or its fabric failed): these members' kept groups are
    // of no use together any more.
    const KeptDrop drop{.ranks = world_ranks};
    RecordKeptDrop(drop);
    std::vector<std::unique_ptr<Group>> dropped =
        TakeKeptIf([&](const Group& g) { return drop.Covers(g); });
    if (offered != nullptr) dropped.push_back(std::move(offered));
    DropKept(std::move(dropped));
  }
  return std::unique_ptr<Group>();
}

std::vector<std::unique_ptr<Group>> Context::TakeKeptIf(
    const std::function<bool(const Group&)>& taken) {
  std::vector<std::unique_ptr<Group>> out;
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (taken(**it)) {
      out.push_back(std::move(*it));
      it = kept_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void Context::DropFailedKept() {
  DropKept(TakeKeptIf([](const Group& g) { return !g.Keepable(); }));
}

bool Context::KeptDrop::Covers(const Group& group) const {
  if (!any_of_them) return group.world_ranks() == ranks;
  return std::all_of(group.world_ranks().begin(), group.world_ranks().end(), [&](int r) {
    return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
  });
}

void Context::RecordKeptDrop(const KeptDrop& drop) {
  KeptDropTally& tally = kept_drops_[drop];
  ++tally.count;
  tally.last = ++kept_drops_made_;
}

uint64_t Context::KeptDropsCovering(const Group& group) const {
  uint64_t n = 0;
  for (const auto& [drop, tally] : kept_drops_) n += drop.Covers(group) ? tally.count : 0;
  return n;
}

bool Context::KeptDropCoveredSince(const Group& group, uint64_t since) const {
  return std::any_of(kept_drops_.begin(), kept_drops_.end(), [&](const auto& entry) {
    return entry.second.last > since && entry.first.Covers(group);
  });
}

void Context::DropKept(std::vector<std::unique_ptr<Group>> dropped) {
  for (std::unique_ptr<Group>& group : dropped) {
    if (group->rank() == 0 && group->fabric() != nullptr) {
      std::vector<uint64_t> ids;
      for (size_t c = 0; c < group->fabric()->size(); ++c) {
        ids.push_back(group->fabric()->channel(c).group_id);
      }
      // A group whose fabric failed does not wait for a manager that may
      // be gone with it.
      const bool failed = !group->fabric()->failure().ok();
      ProgressThread::Outside outside(*progress_);  // the manager may take its time
      for (uint64_t id : ids) {
        // Gone already (revoked, or the job's end) is as good as released.
        if (absl::Status s = ReleaseAtManager(id, /*fabric_failed=*/failed);
            !s.ok() && !absl::IsNotFound(s)) {
          NETFOLD_LOG(kInfo) << "releasing kept group " << id << ": " << s;
        }
      }
    }
    {
      // What the caller kept with the group goes outside the lock: its
      // release may take time, or call the MPI library (the interposer
      // frees a communicator, whose attributes' callbacks run).
      ProgressThread::Outside outside(*progress_);
      group->ReleaseData();
    }
    group.reset();  // what is left fails; its routes, address and peer QPs go
  }
}

void Context::ReleaseGroups(Oob& group_oob, const std::vector<control::GroupInfo>& infos) {
  if (group_oob.rank() != 0) return;
  ProgressThread::Outside outside(*progress_);  // the manager may take its time
  for (const control::GroupInfo& info : infos) {
    if (absl::Status s = ReleaseAtManager(info.group_id(), /*fabric_failed=*/false); !s.ok()) {
      NETFOLD_LOG(kInfo) << "releasing group " << info.group_id() << ": " << s;
    }
  }
}

void Context::LeaveFabricGroups(GroupSetup& setup) {
  for (FabricChannel& c : setup.channels) {
    if (c.multicast) data_path_->link(c.plane).DetachMulticast(*c.multicast);
  }
  setup.channels.clear();
}

absl::StatusOr<std::vector<control::GroupInfo>> Context::RequestGroups(
    Oob& group_oob, const std::vector<int>& world_ranks, const std::vector<uint32_t>& planes) {
  std::vector<control::GroupInfo> infos;
  for (uint32_t plane : planes) {
    absl::StatusOr<control::GroupInfo> info = RequestGroup(group_oob, world_ranks, plane);
    if (!info.ok()) {
      // A plane the manager no longer has (a topology changed under a
      // restart) is not chosen again; the channels granted go back.
      if (plane != 0 && absl::IsInvalidArgument(info.status())) {
        lost_planes_.fetch_or(1u << plane);
      }
      ReleaseGroups(group_oob, infos);
      return info.status();
    }
    infos.push_back(*std::move(info));
  }
  return infos;
}

absl::StatusOr<control::GroupInfo> Context::RequestGroup(Oob& group_oob,
                                                         const std::vector<int>& world_ranks,
                                                         uint32_t plane) {
  std::string outcome;
  if (group_oob.rank() == 0) {
    control::CreateGroupRequest req;
    req.set_plane(plane);
    for (int r : world_ranks) req.add_ranks(static_cast<uint32_t>(r));
    req.set_num_slots(options_.num_slots);
    req.set_slot_bytes(options_.slot_bytes);
    req.set_delivery(options_.delivery == proto::DeliveryMode::kRcTree
                         ? control::DELIVERY_RC_DOWN
                         : control::DELIVERY_MULTICAST);
    // A tag makes the request idempotent, so a retry after a lost answer
    // cannot create a second group.
    req.set_tag(absl::StrFormat("rank%d-group%d", options_.rank, ++groups_created_));
    absl::StatusOr<control::CreateGroupResponse> resp;
    {
      ProgressThread::Outside outside(*progress_);  // the manager may take its time
      resp = manager_->CreateGroup(req);
    }
    outcome = EncodeOutcome(resp.status(), resp.ok() ? resp->group().SerializeAsString() : "");
  }
  NETFOLD_RETURN_IF_ERROR(group_oob.BcastString(&outcome, 0));
  NETFOLD_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(outcome));
  control::GroupInfo info;
  if (!info.ParseFromString(payload)) return absl::InternalError("malformed group description");
  return info;
}

absl::Status Context::JoinFabricGroup(Oob& group_oob, const control::GroupInfo& info,
                                      uint32_t plane, uint32_t channel, uint32_t channels,
                                      GroupSetup& setup) {
  FabricChannel joined;
  joined.group_id = info.group_id();
  absl::Status mine = absl::OkStatus();
  if (info.group_id() > 0xffffffffull || info.tree_id() > 0xffff) {
    mine = absl::InternalError("the manager returned a group or tree id wider than the data plane's");
  }
  GroupParams params;
  params.tree_id = static_cast<uint16_t>(info.tree_id());
  params.group_id = static_cast<uint32_t>(info.group_id());
  params.epoch = info.epoch();
  params.rank = static_cast<uint32_t>(options_.rank);
  params.num_slots = info.num_slots();
  params.slot_bytes = info.slot_bytes();
  params.delivery = info.delivery() == control::DELIVERY_RC_DOWN ? proto::DeliveryMode::kRcTree
                                                                 : proto::DeliveryMode::kMulticast;
  params.repair_after = options_.repair_after;
  params.bcast_run = options_.bcast_run;
  params.reduce_data = options_.reduce_data;
  params.op_timeout = options_.timeout;
  params.integrity_key = integrity_key_;
  params.channel = channel;
  params.channels = channels;
  for (int r : setup.world_ranks) params.members.push_back(static_cast<uint32_t>(r));
  // The others learn only that this rank failed: its reason is said here,
  // since the group may go on elsewhere (plane 0, the hosts) without an
  // error.
  auto agree = [&](const absl::Status& own) {
    if (!own.ok()) {
      NETFOLD_LOG(kWarning) << "rank " << options_.rank << ": cannot join group "
                            << info.group_id() << " in data plane " << plane << ": "
                            << own.message();
    }
    return AgreeOnStatus(group_oob, own);
  };
  if (info.plane() != plane || !data_path_->has_plane(info.plane())) {
    // The plane was agreed before the request (ChoosePlane): a manager
    // that placed it elsewhere is not one this library can follow.
    return agree(absl::InternalError(
        absl::StrFormat("the manager placed group %d in data plane %d, where this rank is not "
                        "attached",
                        info.group_id(), info.plane())));
  }
  joined.plane = info.plane();
  LeafLink& link = data_path_->link(joined.plane);
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast &&
      proto::kAggregationHeaderSize + params.slot_bytes > link.max_datagram_payload()) {
    mine = absl::FailedPreconditionError(absl::StrFormat(
        "a multicast result of %d + %d bytes does not fit this rank's path MTU of %d bytes: "
        "set NETFOLD_SLOT_BYTES to at most %d, or NETFOLD_DELIVERY=rc",
        proto::kAggregationHeaderSize, params.slot_bytes, link.max_datagram_payload(),
        link.max_datagram_payload() - proto::kAggregationHeaderSize));
  }
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast) {
    absl::StatusOr<transport::Ipv4Endpoint> mc =
        transport::ParseIpv4Endpoint(info.multicast_address());
    // Results are taken from the group root only (its data address and
    // port); from a manager that does not name it, the leaf.
    absl::StatusOr<transport::Ipv4Endpoint> root =
        info.root_data_address().empty() ? absl::StatusOr<transport::Ipv4Endpoint>(leaf_address_)
                                         : transport::ParseIpv4Endpoint(info.root_data_address());
    if (!mc.ok()) {
      mine = mc.status();
    } else if (!root.ok()) {
      mine = absl::InternalError(absl::StrFormat("the manager's root data address: %s",
                                                 root.status().message()));
    } else {
      mine = link.AttachMulticast(*mc, *root);
    }
    if (mine.ok()) joined.multicast = *mc;
  }
  joined.engine =
      std::make_unique<GroupEngine>(params, data_path_->sender(joined.plane), DataPath::clock());
  if (channel == 0) {
    setup.description = absl::StrFormat(
        "group %d: tree %d, root switch %s, %d switches, K=%d, P=%d, %s", info.group_id(),
        info.tree_id(), info.root_switch(), info.switches_size(), info.num_slots(),
        info.slot_bytes(), params.delivery == proto::DeliveryMode::kMulticast ? "multicast" : "rc");
  } else {
    absl::StrAppendFormat(&setup.description, "; channel %d: group %d, root switch %s",
                          channel, info.group_id(), info.root_switch());
  }
  // Everyone listens before anyone posts: otherwise a fast rank's first
  // multicast result could reach a member not yet attached.
  absl::Status all = agree(mine);
  if (!all.ok()) {
    if (joined.multicast) link.DetachMulticast(*joined.multicast);
    return all;
  }
  setup.channels.push_back(std::move(joined));
  return absl::OkStatus();
}

}  // namespace netfold::host
