// A rank's data path with data planes (docs/host.md, "Data planes"): a
// plane's link is usable only once attached, and a plane's failure fails
// that plane's engines alone.
#include "host/data_path.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "host/error_codes.h"
#include "host/group_engine.h"
#include "host/options.h"

namespace netfold::host {
namespace {

std::unique_ptr<DataPath> NewPath() {
  ContextOptions options;  // soft transport on 127.0.0.1
  absl::StatusOr<std::unique_ptr<DataPath>> path = DataPath::Create(options, 4032);
  EXPECT_TRUE(path.ok()) << path.status();
  return path.ok() ? *std::move(path) : nullptr;
}

TEST(DataPathPlanes, APlanesLinkIsUsableOnlyOnceReady) {
  std::unique_ptr<DataPath> path = NewPath();
  ASSERT_NE(path, nullptr);
  uint32_t psn = 7;
  EXPECT_TRUE(path->has_plane(0));
  EXPECT_FALSE(path->has_plane(1));
  EXPECT_EQ(path->AddPlane(0, &psn).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(path->AddPlane(16, &psn).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<LeafLink*> link = path->AddPlane(2, &psn);
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(psn, 0u);  // a new link: the caller picks its PSN
  EXPECT_NE((*link)->qpn(), path->link(0).qpn());  // a QP of its own
  EXPECT_EQ((*link)->address(), path->link(0).address());  // on the same port
  EXPECT_FALSE(path->has_plane(2));  // not attached yet
  // Another call attaching the same plane meanwhile is told so.
  EXPECT_EQ(path->AddPlane(2, &psn).status().code(), absl::StatusCode::kFailedPrecondition);
  // The manager's answer did not come: the next call gets the same link
  // and PSN, so that it names the same endpoint again (a retry).
  const uint32_t qpn = (*link)->qpn();
  path->AttachFailed(2, 1234);
  absl::StatusOr<LeafLink*> again = path->AddPlane(2, &psn);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->qpn(), qpn);
  EXPECT_EQ(psn, 1234u);
  path->MarkPlaneReady(2);
  EXPECT_TRUE(path->has_plane(2));
  path->RemovePlane(2);  // a ready plane stays: engines may use it
  EXPECT_TRUE(path->has_plane(2));
  // A link that could not be connected is dropped and made anew.
  ASSERT_TRUE(path->AddPlane(3, &psn).ok());
  path->RemovePlane(3);
  EXPECT_FALSE(path->has_plane(3));
  ASSERT_TRUE(path->AddPlane(3, &psn).ok());
  EXPECT_EQ(psn, 0u);
}

TEST(DataPathPlanes, APlanesFailureFailsThatPlanesEnginesAlone) {
  std::unique_ptr<DataPath> path = NewPath();
  ASSERT_NE(path, nullptr);
  uint32_t psn = 0;
  ASSERT_TRUE(path->AddPlane(1, &psn).ok());
  path->MarkPlaneReady(1);
  GroupParams params;
  params.group_id = 7;
  GroupEngine on0(params, path->sender(0), DataPath::clock());
  params.group_id = 8;
  GroupEngine on1(params, path->sender(1), DataPath::clock());
  path->Route(7, &on0, 0);
  path->Route(8, &on1, 1);
  path->PostPlaneFailure(1, absl::UnavailableError("plane 1 lost its leaf"));
  path->Progress(absl::ZeroDuration());
  EXPECT_TRUE(on0.failure().ok()) << on0.failure();
  EXPECT_EQ(on1.failure().code(), absl::StatusCode::kUnavailable);
  path->Unroute(7);
  path->Unroute(8);
}

// An engine whose link has failed cannot send: it fails as unavailable
// (the hosts may take over: Group), as the engines the data path fails
// itself, not with the QP's own error. A group created on a plane whose
// link failed before the manager heard of it starts so.
TEST(DataPathPlanes, AnEngineOnAFailedLinkFailsAsUnavailable) {
  std::unique_ptr<DataPath> path = NewPath();
  ASSERT_NE(path, nullptr);
  // A "leaf switch" that reads nothing: a bound socket on loopback.
  const int leaf = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(leaf, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(leaf, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(getsockname(leaf, reinterpret_cast<sockaddr*>(&a), &len), 0);
  LeafPeer peer;
  peer.remote = transport::Ipv4Endpoint{ntohl(a.sin_addr.s_addr), ntohs(a.sin_port)};
  peer.remote_qpn = 0x100;
  peer.rq_psn = 1;
  peer.sq_psn = 1;
  ASSERT_TRUE(path->link(0).Connect(peer).ok());

  GroupParams params;
  params.group_id = 7;
  params.num_slots = 4;
  params.slot_bytes = 1024;
  GroupEngine first(params, path->sender(0), DataPath::clock());
  path->Route(7, &first, 0);
  std::vector<int32_t> v(16, 1);
  ASSERT_TRUE(first.Start({.send = v.data(), .recv = v.data(), .count = v.size()}).ok());
  // The request is retried until the QP gives up (seconds).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (path->link(0).status().ok() && absl::Now() < deadline) {
    path->Progress(absl::Milliseconds(10));
  }
  ASSERT_FALSE(path->link(0).status().ok()) << "the link never failed";
  path->Progress(absl::ZeroDuration());  // the pass after the link failed
  EXPECT_EQ(first.failure().code(), absl::StatusCode::kUnavailable) << first.failure();

  params.group_id = 8;
  GroupEngine second(params, path->sender(0), DataPath::clock());
  path->Route(8, &second, 0);
  std::vector<int32_t> w(16, 1);
  (void)second.Start({.send = w.data(), .recv = w.data(), .count = w.size()});
  second.Poll();  // posts its request (not the data path's Progress, which fails it too)
  EXPECT_EQ(second.failure().code(), absl::StatusCode::kUnavailable) << second.failure();
  EXPECT_EQ(ToErrorCode(second.failure()), NETFOLD_ERR_UNAVAILABLE);
  path->Unroute(7);
  path->Unroute(8);
  close(leaf);
}

// What Route reserves for an engine's window counts while it is routed:
// a job that creates and destroys groups does not grow its reservations
// with every group it ever had.
TEST(DataPathRoutes, AnUnroutedEngineNoLongerCountsInTheReservations) {
  std::unique_ptr<DataPath> path = NewPath();
  ASSERT_NE(path, nullptr);
  GroupParams params;
  params.num_slots = 16;
  params.slot_bytes = 1024;
  GroupEngine live(params, path->sender(0), DataPath::clock());
  path->Route(1, &live);
  const size_t one = path->reserved_result_bytes();
  EXPECT_GT(one, 0u);
  EXPECT_EQ(path->reserved_requests(0), 16u);
  for (uint32_t id = 2; id < 200; ++id) {
    GroupEngine passing(params, path->sender(0), DataPath::clock());
    path->Route(id, &passing);
    EXPECT_EQ(path->reserved_result_bytes(), 2 * one);
    path->Unroute(id);
  }
  EXPECT_EQ(path->reserved_result_bytes(), one);
  EXPECT_EQ(path->reserved_requests(0), 16u);
  path->Route(1, &live);  // routed again: counted once
  EXPECT_EQ(path->reserved_requests(0), 16u);
  path->Unroute(1);
  path->Unroute(1);
  EXPECT_EQ(path->reserved_result_bytes(), 0u);
  EXPECT_EQ(path->reserved_requests(0), 0u);
}

}  // namespace
}  // namespace netfold::host
