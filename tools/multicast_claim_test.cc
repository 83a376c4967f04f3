#include "tools/multicast_claim.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

// Other tests may hold claims while this one runs: every check asks for a
// prefix this test holds, or has just let go of.

TEST(MulticastClaim, ASecondClaimGetsAnotherPrefix) {
  absl::StatusOr<MulticastClaim> a = MulticastClaim::Take(77);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<MulticastClaim> b = MulticastClaim::Take(a->octet());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->octet(), b->octet());
  EXPECT_GE(b->octet(), MulticastClaim::kFirstOctet);
  EXPECT_LE(b->octet(), MulticastClaim::kLastOctet);
  EXPECT_EQ(a->prefix(), "239." + std::to_string(a->octet()));
}

TEST(MulticastClaim, APrefixLetGoIsFreeAgain) {
  absl::StatusOr<MulticastClaim> a = MulticastClaim::Take(123);
  ASSERT_TRUE(a.ok()) << a.status();
  const int octet = a->octet();
  { MulticastClaim moved = std::move(*a); }  // the only descriptor closes here
  absl::StatusOr<MulticastClaim> b = MulticastClaim::Take(octet);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->octet(), octet);
}

TEST(MulticastClaim, TakeExactlyTakesThatPrefixOrSaysWhoHasIt) {
  absl::StatusOr<MulticastClaim> a = MulticastClaim::Take(201);
  ASSERT_TRUE(a.ok()) << a.status();
  const int octet = a->octet();
  absl::StatusOr<MulticastClaim> b = MulticastClaim::TakeExactly(octet);
  EXPECT_TRUE(absl::IsAlreadyExists(b.status())) << b.status();
  { MulticastClaim moved = std::move(*a); }
  b = MulticastClaim::TakeExactly(octet);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->octet(), octet);
  EXPECT_TRUE(absl::IsInvalidArgument(MulticastClaim::TakeExactly(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MulticastClaim::TakeExactly(251).status()));
}

TEST(MulticastClaim, AStartOutsideTheRangeIsFoldedIntoIt) {
  for (int start : {0, -5, 251, 100000}) {
    absl::StatusOr<MulticastClaim> c = MulticastClaim::Take(start);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_GE(c->octet(), MulticastClaim::kFirstOctet) << start;
    EXPECT_LE(c->octet(), MulticastClaim::kLastOctet) << start;
  }
}

// What LocalFabric relies on: a child given the descriptor holds the claim
// after the parent let go of it, until the child ends.
TEST(MulticastClaim, AChildThatInheritedTheClaimHoldsItAfterTheParentLetGo) {
  absl::StatusOr<MulticastClaim> a = MulticastClaim::Take(200);
  ASSERT_TRUE(a.ok()) << a.status();
  const int octet = a->octet();
  EXPECT_NE(fcntl(a->fd(), F_GETFD) & FD_CLOEXEC, 0) << "the claim must not leak into exec'd programs";
  int stop[2];
  ASSERT_EQ(pipe(stop), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(stop[1]);
    char c;
    (void)!read(stop[0], &c, 1);  // until the parent closes its end (or dies)
    _exit(0);
  }
  close(stop[0]);
  *a = MulticastClaim::Take(octet + 1).value();  // lets go of `octet` here
  absl::StatusOr<MulticastClaim> b = MulticastClaim::Take(octet);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->octet(), octet) << "the child's claim was lost when the parent let go";
  close(stop[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  absl::StatusOr<MulticastClaim> c = MulticastClaim::Take(octet);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->octet(), octet);
}

}  // namespace
}  // namespace netfold::tools
