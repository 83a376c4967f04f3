// How the manager brings a group up on the switches. First the tree links
// its placement uses for the first time: each is a QP pair between a child
// switch and its parent in the tree, connected in the phases of
// kLinkPhases (group_installer.cc), one batch of commands per phase for all
// the links at once. Then the group's node state (InstallGroup) on every
// switch of its subtree, in one batch, confirmed by all of them.
//
//   GroupInstaller installer(commander, options.command_timeout);
//   std::vector<LinkAttempt> links = installer.ConnectLinks(tree_id, ends);
//   for (const LinkAttempt& a : links) {
//     if (!a.status.ok()) GroupInstaller::Undo(a, &cleanup);
//   }
//   NETFOLD_RETURN_IF_ERROR(installer.Install(group_id, installs));
//
// The installer talks to switches and to nothing else: it holds no state of
// the manager and takes no lock, so that the manager can build its inputs
// under its state lock (LinkEndsOf, InstallMessage read a FabricState), and
// call it after releasing the lock. Thread-safe.
#ifndef NETFOLD_MANAGER_GROUP_INSTALLER_H_
#define NETFOLD_MANAGER_GROUP_INSTALLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "manager/fabric_state.h"
#include "manager/switch_commander.h"
#include "manager/tree_planner.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// The two ends of a tree link to connect, by name and data address.
struct LinkEnds {
  int child = -1;
  int parent = -1;
  std::string child_name;
  std::string parent_name;
  std::string child_address;
  std::string parent_address;
};

// How far a link got: the QPs created at each end, and the first failure
// (a link that fails a phase skips the later ones).
struct LinkAttempt {
  LinkEnds ends;
  control::QpCreated parent_qp;
  control::QpCreated child_qp;
  bool parent_created = false;
  bool child_created = false;
  absl::Status status;
};

class GroupInstaller {
 public:
  // `commander` must outlive the installer; every batch waits at most
  // `timeout` for its answers.
  GroupInstaller(SwitchCommander* commander, absl::Duration timeout);

  // Connects every link of `tree_id` in `links`, phase by phase. Returns one
  // attempt per link, in order.
  std::vector<LinkAttempt> ConnectLinks(uint32_t tree_id, const std::vector<LinkEnds>& links) const;
  // The commands that destroy what a failed attempt created.
  static void Undo(const LinkAttempt& attempt, Outbox* out);

  // Sends the InstallGroup commands of a group and waits for every switch
  // to confirm. The first failure, as "group <id> was not confirmed: ...".
  absl::Status Install(uint64_t group_id, const std::vector<SwitchCommand>& installs) const;
  // The same for commands of several groups (a switch re-installing what
  // it lost): one status per command, in order.
  std::vector<absl::Status> InstallEach(const std::vector<SwitchCommand>& installs) const;

 private:
  SwitchCommander* commander_;
  const absl::Duration timeout_;
};

// The ends of the link from `child` to its parent in tree `tree_id`, with
// the addresses the switches registered.
LinkEnds LinkEndsOf(const FabricState& state, uint32_t tree_id, int child);

// The InstallGroup command for `node` of `group`: the job's keys, K x P, the
// children in reduction order (ranks with their leaf QPs, then child
// switches with their link QPs and the member ranks below them), the
// parent's link QP, and the group's members.
control::ManagerMessage InstallMessage(const FabricState& state, const Group& group,
                                       const SubtreeNode& node);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_GROUP_INSTALLER_H_
