#include "host/tcp_oob.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/error_codes.h"
#include "host/oob.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::host {
namespace {

TEST(TcpOob, AllgatherBcastBarrierAcrossThreads) {
  constexpr int kRanks = 5;
  auto server = TcpOobServer::Start(kRanks);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> ranks;
  std::vector<int> failures(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto oob = TcpOob::Connect((*server)->address(), r, kRanks, absl::Seconds(10));
      if (!oob.ok()) {
        failures[r] = 1;
        return;
      }
      // Allgather of each rank's id, three times to check ordering.
      for (int round = 0; round < 3; ++round) {
        int32_t mine = r * 10 + round;
        std::vector<int32_t> all(kRanks);
        if (!(*oob)->Allgather(&mine, all.data(), 4).ok()) failures[r] = 2;
        for (int i = 0; i < kRanks; ++i) {
          if (all[i] != i * 10 + round) failures[r] = 3;
        }
      }
      std::string s = r == 2 ? std::string(100000, 'x') : "";
      if (!(*oob)->BcastString(&s, 2).ok() || s != std::string(100000, 'x')) failures[r] = 4;
      if (!(*oob)->Barrier().ok()) failures[r] = 5;
      // The C callbacks work the same way.
      netfold_oob_t cb = (*oob)->callbacks();
      int64_t v = r == 0 ? 42 : 0;
      if (cb.bcast(cb.ctx, &v, sizeof(v), 0) != 0 || v != 42) failures[r] = 6;
      if (cb.barrier(cb.ctx) != 0) failures[r] = 7;
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
  EXPECT_TRUE((*server)->Wait(absl::Seconds(10)).ok());
}

// host/oob.h's agreed outcomes, over a real OOB: a failed rank keeps its
// own reason, the others learn which rank failed; rank 0's answer reaches
// every rank with its netfold code.
TEST(OobOutcome, EveryRankAgreesAndTheFailedRankKeepsItsReason) {
  constexpr int kRanks = 3;
  auto server = TcpOobServer::Start(kRanks);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<absl::Status> agreed(kRanks), all_ok(kRanks);
  std::vector<absl::StatusOr<std::string>> answers(kRanks, std::string());
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto oob = TcpOob::Connect((*server)->address(), r, kRanks, absl::Seconds(10));
      if (!oob.ok()) {
        agreed[r] = all_ok[r] = oob.status();
        return;
      }
      const absl::Status mine =
          r == 1 ? absl::FailedPreconditionError("out of sockets") : absl::OkStatus();
      agreed[r] = AgreeOnStatus(**oob, mine);
      all_ok[r] = AgreeOnStatus(**oob, absl::OkStatus());
      std::string outcome;
      if (r == 0) {
        outcome = EncodeOutcome(
            WithErrorCode(absl::ResourceExhaustedError("no room"), NETFOLD_ERR_NO_RESOURCES), "");
      }
      if (absl::Status s = (*oob)->BcastString(&outcome, 0); !s.ok()) {
        answers[r] = s;
        return;
      }
      answers[r] = DecodeOutcome(outcome);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(agreed[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(agreed[1].message(), "out of sockets");
  for (int r : {0, 2}) {
    EXPECT_EQ(agreed[r].code(), absl::StatusCode::kUnavailable) << r;
    EXPECT_NE(agreed[r].message().find("rank 1 of the group failed"), std::string::npos) << r;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(all_ok[r].ok()) << r << ": " << all_ok[r];
    EXPECT_EQ(answers[r].status().code(), absl::StatusCode::kResourceExhausted) << r;
    EXPECT_EQ(answers[r].status().message(), "no room") << r;
    EXPECT_EQ(ToErrorCode(answers[r].status()), NETFOLD_ERR_NO_RESOURCES) << r;
  }
  EXPECT_TRUE((*server)->Wait(absl::Seconds(10)).ok());

  absl::StatusOr<std::string> payload = DecodeOutcome(EncodeOutcome(absl::OkStatus(), "job"));
  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(*payload, "job");
  EXPECT_EQ(DecodeOutcome("short").status().code(), absl::StatusCode::kInternal);
}

// A rank that failed and then cannot tell the others (its OOB broke, here
// because rank 0 asks for another collective) keeps its own reason first.
TEST(OobOutcome, ARankThatFailedKeepsItsReasonWhenTheOobBreaks) {
  auto server = TcpOobServer::Start(2);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status agreed, other;
  std::thread a([&] {
    auto oob = TcpOob::Connect((*server)->address(), 0, 2, absl::Seconds(10));
    other = oob.ok() ? (*oob)->Barrier() : oob.status();
  });
  std::thread b([&] {
    auto oob = TcpOob::Connect((*server)->address(), 1, 2, absl::Seconds(10));
    agreed = oob.ok() ? AgreeOnStatus(**oob, WithErrorCode(absl::ResourceExhaustedError(
                                                               "out of sockets"),
                                                           NETFOLD_ERR_NO_RESOURCES))
                      : oob.status();
  });
  a.join();
  b.join();
  EXPECT_FALSE(other.ok());
  EXPECT_EQ(agreed.code(), absl::StatusCode::kResourceExhausted) << agreed;
  EXPECT_EQ(ToErrorCode(agreed), NETFOLD_ERR_NO_RESOURCES) << agreed;
  EXPECT_EQ(agreed.message().find("out of sockets (and telling the other ranks failed: "), 0u)
      << agreed;
}

TEST(TcpOob, DisagreementFailsEveryRankInsteadOfHanging) {
  auto server = TcpOobServer::Start(2);
  ASSERT_TRUE(server.ok());
  absl::Status s0, s1;
  std::thread a([&] {
    auto oob = TcpOob::Connect((*server)->address(), 0, 2);
    int32_t x = 1, all[2];
    s0 = (*oob)->Allgather(&x, all, 4);
  });
  std::thread b([&] {
    auto oob = TcpOob::Connect((*server)->address(), 1, 2);
    s1 = (*oob)->Barrier();
  });
  a.join();
  b.join();
  EXPECT_FALSE(s0.ok());
  EXPECT_FALSE(s1.ok());
  EXPECT_NE((*server)->Wait(absl::Seconds(5)).message().find("disagree"), std::string_view::npos);
}

TEST(TcpOob, MissingRankTimesOut) {
  auto server = TcpOobServer::Start(2, "127.0.0.1:0", absl::Milliseconds(300));
  ASSERT_TRUE(server.ok());
  auto oob = TcpOob::Connect((*server)->address(), 0, 2);
  ASSERT_TRUE(oob.ok());
  absl::Time start = absl::Now();
  EXPECT_FALSE((*oob)->Barrier().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(TcpOob, BadArgumentsAreRefused) {
  EXPECT_FALSE(TcpOobServer::Start(0).ok());
  EXPECT_FALSE(TcpOob::Connect("127.0.0.1:1", 3, 2).ok());
  EXPECT_FALSE(TcpOob::Connect("not an address", 0, 1).ok());
  EXPECT_FALSE(TcpOob::Connect("127.0.0.1:1", 0, 1, absl::Milliseconds(100)).ok());
}

// A server whose accept queue is full drops every SYN, so a connect to it
// neither succeeds nor fails until the kernel gives up (about two minutes
// with the default tcp_syn_retries): the rank's connect must still end at
// its own deadline.
TEST(TcpOob, ConnectEndsAtItsDeadlineWhenTheServerDropsSyns) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  std::vector<int> fillers;
  absl::Cleanup close_all = [&] {
    for (int fd : fillers) close(fd);
    close(listener);
  };
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(listener, 0), 0);  // never accepted from
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  // Fill the accept queue: the kernel completes the first connection and,
  // the queue then full, drops the SYNs of the others.
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    fillers.push_back(fd);
    (void)connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  pollfd first{fillers[0], POLLOUT, 0};
  ASSERT_EQ(poll(&first, 1, 5000), 1) << "the first connection did not complete";
  const std::string address = absl::StrFormat("127.0.0.1:%d", ntohs(sa.sin_port));
  const absl::Time start = absl::Now();
  auto oob = TcpOob::Connect(address, 0, 1, absl::Seconds(1));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(oob.ok());
  // Timed out waiting for an answer (not refused and retried until then).
  EXPECT_EQ(oob.status().code(), absl::StatusCode::kDeadlineExceeded) << oob.status();
  EXPECT_NE(oob.status().message().find("no answer"), std::string_view::npos) << oob.status();
  EXPECT_LT(took, absl::Seconds(5)) << "connect ignored its deadline";
  EXPECT_GE(took, absl::Milliseconds(900));
}

// A server whose ranks connected and then say nothing (a rank stopped in a
// debugger) still goes away at once when destroyed, not after its timeout.
TEST(TcpOob, ServerStopsAtOnceWhileItsRanksAreSilent) {
  auto server = TcpOobServer::Start(2, "127.0.0.1:0", absl::Seconds(60));
  ASSERT_TRUE(server.ok());
  auto a = TcpOob::Connect((*server)->address(), 0, 2, absl::Seconds(10));
  auto b = TcpOob::Connect((*server)->address(), 1, 2, absl::Seconds(10));
  ASSERT_TRUE(a.ok() && b.ok());
  absl::SleepFor(absl::Milliseconds(200));  // both accepted: it waits for their requests
  const absl::Time start = absl::Now();
  server->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the server waited for its silent ranks";
}

// Connections that never say hello do not keep the server accepting past
// its deadline.
TEST(TcpOob, StrayConnectionsDoNotExtendTheAcceptDeadline) {
  auto server = TcpOobServer::Start(2, "127.0.0.1:0", absl::Milliseconds(500));
  ASSERT_TRUE(server.ok());
  transport::Ipv4Endpoint ep = *transport::ParseIpv4Endpoint((*server)->address(), 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ip);
  sa.sin_port = htons(ep.port);
  std::vector<int> strays;
  absl::Cleanup close_all = [&] {
    for (int fd : strays) close(fd);
  };
  for (int i = 0; i < 3; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    strays.push_back(fd);  // silent: no hello
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  }
  const absl::Status s = (*server)->Wait(absl::Seconds(5));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not every rank connected"), std::string_view::npos) << s;
}

}  // namespace
}  // namespace netfold::host
