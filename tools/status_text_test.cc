// Tests of the text `netfold status` prints from Admin.GetStatus.
#include "tools/status_text.h"

#include <string>

#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

TEST(StatusText, ShowsSwitchesTreesJobsGroups) {
  control::GetStatusResponse st;
  st.set_topology_name("two-level");
  control::SwitchStatus* s = st.add_switches();
  s->set_name("leaf0");
  s->set_state(control::SwitchStatus::UP);
  s->set_last_heartbeat_ms_ago(12);
  s->mutable_capacity()->set_num_slots(256);
  s->mutable_used()->set_slots(64);
  control::TreeStatus* t = st.add_trees();
  t->set_root("root0");
  t->add_edges()->set_connected(true);
  control::JobStatus* j = st.add_jobs();
  j->set_job_id(3);
  j->set_name("allreduce");
  control::GroupStatus* g = st.add_groups();
  g->set_group_id(9);
  g->add_ranks(0);
  g->add_ranks(1);
  g->add_switches("leaf0");
  std::string text = FormatStatus(st);
  EXPECT_NE(text.find("topology two-level"), std::string::npos) << text;
  EXPECT_NE(text.find("64/256 (192 free)"), std::string::npos) << text;
  EXPECT_NE(text.find("12ms ago"), std::string::npos);
  EXPECT_NE(text.find("1/1 connected"), std::string::npos);
  EXPECT_NE(text.find("allreduce"), std::string::npos);
  EXPECT_NE(text.find("0,1"), std::string::npos);
}

TEST(StatusText, ShowsADeadSwitchAsDead) {
  control::GetStatusResponse st;
  control::SwitchStatus* s = st.add_switches();
  s->set_name("leaf3");
  s->set_state(control::SwitchStatus::DEAD);
  s->set_last_heartbeat_ms_ago(-1);
  std::string text = FormatStatus(st);
  EXPECT_NE(text.find("leaf3"), std::string::npos) << text;
  EXPECT_NE(text.find("dead"), std::string::npos) << text;
  EXPECT_NE(text.find("never"), std::string::npos) << text;
  EXPECT_EQ(SwitchStateName(control::SwitchStatus::DEAD), "dead");
}

}  // namespace
}  // namespace netfold::tools
