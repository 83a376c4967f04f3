// Tests of the text `netfold status` prints from Admin.GetStatus, and
// `netfold status --switch` from SwitchAdmin.GetCounters.
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

TEST(StatusText, SaysBrieflyThatStateIsNotJournaled) {
  control::GetStatusResponse st;
  st.mutable_state()->set_journaled(false);
  std::string text = FormatStatus(st);
  EXPECT_NE(text.find("state: not journaled"), std::string::npos) << text;
  EXPECT_EQ(text.find("WARNING"), std::string::npos) << text;
  // A manager older than the state field: nothing is said.
  st.clear_state();
  text = FormatStatus(st);
  EXPECT_EQ(text.find("state:"), std::string::npos) << text;
}

TEST(StatusText, ACleanJournalIsOneLine) {
  control::GetStatusResponse st;
  st.mutable_state()->set_journaled(true);
  st.mutable_state()->set_state_dir("/var/lib/netfold/manager");
  st.mutable_state()->set_records_replayed(1);
  std::string text = FormatStatus(st);
  EXPECT_NE(text.find("state: /var/lib/netfold/manager journaled, 1 record replayed\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("WARNING"), std::string::npos) << text;
}

TEST(StatusText, WarnsOfDamageFoundAtStartAndOfRefusedAppends) {
  control::GetStatusResponse st;
  control::StateStatus* s = st.mutable_state();
  s->set_journaled(true);
  s->set_state_dir("/var/lib/netfold/manager");
  s->set_records_replayed(12);
  s->set_damaged_records_skipped(1);
  s->set_torn_bytes_dropped(6);
  s->add_saved_copies("/var/lib/netfold/manager/journal.log.damaged-20240101T000000Z");
  s->set_failed_appends(2);
  s->set_appends_refused(true);
  s->set_refused_reason("truncate journal.log back to 255 bytes: Input/output error");
  std::string text = FormatStatus(st);
  EXPECT_NE(text.find("state: /var/lib/netfold/manager journaled, 12 records replayed, 1 "
                      "damaged record skipped, torn tail of 6 B dropped (copy kept: "
                      "/var/lib/netfold/manager/journal.log.damaged-20240101T000000Z), 2 "
                      "appends failed since start\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("WARNING: 1 damaged record skipped at start"), std::string::npos) << text;
  EXPECT_NE(text.find("WARNING: a torn last record (6 B) dropped at start"), std::string::npos)
      << text;
  EXPECT_NE(text.find("WARNING: the journal refuses appends"), std::string::npos) << text;
  EXPECT_NE(text.find("Input/output error"), std::string::npos) << text;
}

TEST(StatusText, SwitchCountersNameNonZeroCountsOnly) {
  control::GetCountersResponse r;
  r.set_name("leaf0");
  r.set_data_address("127.0.0.1:4791");
  r.set_backend("udp");
  r.set_uptime_ms(2500);
  r.mutable_port()->set_rx_packets(7);
  control::NamedCount* c = r.add_drops();
  c->set_name("unknown_group");
  c->set_count(3);
  c = r.add_drops();
  c->set_name("not_a_member");
  c->set_count(0);
  control::QpCounters* q = r.add_qps();
  q->set_qpn(0x12);
  q->set_state("ERR");
  q->set_error("retries exhausted");
  const std::string text = FormatSwitchCounters(r, "127.0.0.1:9000");
  EXPECT_NE(text.find("switch leaf0: data 127.0.0.1:4791 (udp), admin 127.0.0.1:9000, up 2.5 s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rx 7 packets"), std::string::npos) << text;
  EXPECT_EQ(text.find("found nothing"), std::string::npos) << text;  // no empty read
  EXPECT_NE(text.find("drops: none"), std::string::npos) << text;  // the port's
  EXPECT_NE(text.find("data-plane drops: unknown_group=3\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("not_a_member"), std::string::npos) << text;
  EXPECT_NE(text.find("qp 0x000012 ERR"), std::string::npos) << text;
  EXPECT_NE(text.find(", error: retries exhausted"), std::string::npos) << text;
  EXPECT_EQ(text.find("NAKs"), std::string::npos) << text;  // none sent or received
  // A QP that NAKed and dropped packets ahead of its PSN says so.
  control::QpCounters* ahead = r.add_qps();
  ahead->set_qpn(0x13);
  ahead->set_state("RTS");
  ahead->set_naks_sent(2);
  c = ahead->add_drops();
  c->set_name("out_of_sequence");
  c->set_count(16);
  c = ahead->add_drops();
  c->set_name("duplicate");
  c->set_count(0);
  EXPECT_NE(FormatSwitchCounters(r, "127.0.0.1:9000")
                .find("timeouts 0, NAKs sent 2 received 0; drops: out_of_sequence=16\n"),
            std::string::npos)
      << FormatSwitchCounters(r, "127.0.0.1:9000");
  EXPECT_EQ(text.find("backend:"), std::string::npos) << text;
  EXPECT_EQ(text.find("in memory"), std::string::npos) << text;  // none handed over
  r.mutable_port()->set_rx_empty_reads(5);
  EXPECT_NE(FormatSwitchCounters(r, "127.0.0.1:9000").find(" bytes; 5 reads found nothing; drops:"),
            std::string::npos)
      << FormatSwitchCounters(r, "127.0.0.1:9000");
  r.mutable_port()->set_rx_empty_reads(0);
  EXPECT_EQ(text.find("in batches"), std::string::npos) << text;  // none batched
  r.mutable_port()->set_rx_batched(6);
  r.mutable_port()->set_rx_batch_copied(2);
  r.mutable_port()->set_tx_packets(11);
  r.mutable_port()->set_tx_batched(10);
  EXPECT_NE(FormatSwitchCounters(r, "127.0.0.1:9000")
                .find("rx 7 packets (6 in batches, 2 copied out of their batch) 0 bytes, "
                      "tx 11 packets (10 in batches) 0 bytes"),
            std::string::npos)
      << FormatSwitchCounters(r, "127.0.0.1:9000");
  r.set_messages_sent(9);
  r.set_in_process_messages(4);
  r.set_late_for_destroyed_qp(2);
  EXPECT_NE(FormatSwitchCounters(r, "127.0.0.1:9000")
                .find("(and 2 late ACKs to QPs within 10 s of their destruction)"),
            std::string::npos)
      << FormatSwitchCounters(r, "127.0.0.1:9000");
  EXPECT_NE(FormatSwitchCounters(r, "127.0.0.1:9000")
                .find("9 sent (4 in memory to switches of this process)"),
            std::string::npos);
}

TEST(StatusText, SwitchCountersGiveEveryQpsTotalsWhenDetailed) {
  control::GetCountersResponse r;
  r.set_name("root");
  EXPECT_EQ(FormatSwitchCounters(r, "a").find("every QP"), std::string::npos);
  control::QpCounters* all = r.mutable_all_qps();
  all->set_packets_sent(500);
  all->set_packets_retransmitted(12);
  all->set_naks_received(3);
  control::NamedCount* c = all->add_drops();
  c->set_name("duplicate");
  c->set_count(7);
  const std::string text = FormatSwitchCounters(r, "a");
  EXPECT_NE(text.find("  every QP since start (destroyed ones too): sent 500 (12 retransmitted), "
                      "received 0, timeouts 0, NAKs sent 0 received 3; drops: duplicate=7\n"),
            std::string::npos)
      << text;
  // Spurious timeouts, when there are any, follow the timeouts.
  all->set_timeouts(5);
  all->set_spurious_timeouts(4);
  EXPECT_NE(FormatSwitchCounters(r, "a").find("received 0, timeouts 5 (4 spurious), NAKs sent 0"),
            std::string::npos)
      << FormatSwitchCounters(r, "a");
}

// A busy udp switch: full-size packets, most of them in batches, its
// messages to the other switch of its process in memory.
control::GetCountersResponse BusyUdpSwitch(const std::string& name) {
  control::GetCountersResponse r;
  r.set_name(name);
  r.set_backend("udp");
  r.set_messages_received(3000);
  r.set_messages_sent(1600);
  r.set_messages_to_switches(1500);
  r.set_in_process_messages(1500);
  control::SwitchPortCounters* p = r.mutable_port();
  p->set_rx_packets(3000);
  p->set_rx_bytes(3000 * 4096);
  p->set_rx_batched(2400);
  p->set_tx_packets(1500);
  p->set_tx_bytes(1500 * 4096);
  p->set_tx_batched(1500);
  return r;
}

TEST(StatusText, SwitchTrafficIsOneLineWithTheBatchedSharesAndEveryDrop) {
  control::GetCountersResponse r = BusyUdpSwitch("leaf0");
  EXPECT_EQ(FormatSwitchTraffic(r),
            "leaf0: messages 3000 in, 1600 out (1500 to switches, 1500 of them in memory); port "
            "rx 3000 packets (80 % in batches), tx 1500 (100 % in batches); drops: none");
  control::NamedCount* c = r.mutable_port()->add_drops();
  c->set_name("rx_no_buffer");
  c->set_count(2);
  c = r.add_drops();
  c->set_name("endpoint.unknown_qp");
  c->set_count(0);
  c = r.add_drops();
  c->set_name("switch.unknown_group");
  c->set_count(5);
  EXPECT_TRUE(FormatSwitchTraffic(r).ends_with("drops: rx_no_buffer=2 switch.unknown_group=5"))
      << FormatSwitchTraffic(r);
  // A detailed answer leaves the QPs' drops out of `drops`: they come from
  // every QP's totals.
  c = r.mutable_all_qps()->add_drops();
  c->set_name("wrong_source");
  c->set_count(4);
  EXPECT_TRUE(FormatSwitchTraffic(r).ends_with("switch.unknown_group=5"));  // not detailed
  r.set_detailed(true);
  EXPECT_TRUE(FormatSwitchTraffic(r).ends_with(
      "drops: rx_no_buffer=2 switch.unknown_group=5 qp.wrong_source=4"))
      << FormatSwitchTraffic(r);
  control::GetCountersResponse idle;
  idle.set_name("root");
  EXPECT_TRUE(FormatSwitchTraffic(idle).find("rx 0 packets (- in batches)") != std::string::npos)
      << FormatSwitchTraffic(idle);
}

TEST(StatusText, SwitchTrafficWarnsOfLinksAndBatchesThatDidNotEngage) {
  std::vector<control::GetCountersResponse> fabric = {BusyUdpSwitch("leaf0"),
                                                      BusyUdpSwitch("root")};
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, true, true).empty());
  // Their messages to each other through the kernel: only a warning when
  // they share a process.
  for (control::GetCountersResponse& r : fabric) r.set_in_process_messages(0);
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, false, true).empty());
  std::vector<std::string> w = SwitchTrafficWarnings(fabric, true, true);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("none of their 3000 messages to each other went in memory"),
            std::string::npos)
      << w[0];
  // One switch alone has no other to hand messages to; nor switches whose
  // messages all went to hosts (every operation on one leaf).
  EXPECT_TRUE(SwitchTrafficWarnings({fabric[0]}, true, true).empty());
  for (control::GetCountersResponse& r : fabric) r.set_messages_to_switches(0);
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, true, true).empty());
  // Full-size packets, none batched, on either side.
  fabric = {BusyUdpSwitch("leaf0")};
  fabric[0].mutable_port()->set_tx_batched(0);
  fabric[0].mutable_port()->set_rx_batched(0);
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, true, false).empty()) << "a window of one slot";
  w = SwitchTrafficWarnings(fabric, true, true);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("leaf0 sent 1500 full-size packets one system call each"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[1].find("leaf0 read 3000 full-size packets one at a time"), std::string::npos)
      << w[1];
  // Small packets (8-byte operations) are not batched, and a DPDK port
  // batches its own way.
  fabric[0].mutable_port()->set_tx_bytes(1500 * 100);
  fabric[0].mutable_port()->set_rx_bytes(3000 * 100);
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, true, true).empty());
  fabric = {BusyUdpSwitch("leaf0")};
  fabric[0].mutable_port()->set_tx_batched(0);
  fabric[0].set_backend("dpdk");
  EXPECT_TRUE(SwitchTrafficWarnings(fabric, true, true).empty());
}

TEST(StatusText, SwitchCountersComeOneJsonObjectPerLine) {
  // As testbed_query prints them: proto field names, 64-bit counts as strings.
  const std::string lines =
      "{\"name\": \"leaf0\", \"backend\": \"udp\", \"messages_received\": \"3000\", "
      "\"port\": {\"rx_packets\": \"3000\", \"rx_batched\": \"2400\"}}\n"
      "\n"
      "{\"name\": \"root\", \"messagesToSwitches\": \"7\"}\n";
  absl::StatusOr<std::vector<control::GetCountersResponse>> parsed =
      ParseSwitchCountersLines(lines);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].name(), "leaf0");
  EXPECT_EQ((*parsed)[0].messages_received(), 3000u);
  EXPECT_EQ((*parsed)[0].port().rx_batched(), 2400u);
  EXPECT_EQ((*parsed)[1].messages_to_switches(), 7u);
  EXPECT_TRUE(ParseSwitchCountersLines("").ok());

  absl::StatusOr<std::vector<control::GetCountersResponse>> bad =
      ParseSwitchCountersLines("{\"name\": \"a\"}\nswitch root: unreachable\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status();
  EXPECT_FALSE(ParseSwitchCountersLines("{\"no_such_field\": 1}").ok());
}

}  // namespace
}  // namespace netfold::tools
