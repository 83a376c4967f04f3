// Out-of-band collectives the library needs while joining the fabric and
// creating groups (never on the data path): allgather, bcast, barrier over
// the ranks of a world or a group.
//
//   CallbackOob oob(spec.oob, rank, size);           // the C API's callbacks
//   NETFOLD_RETURN_IF_ERROR(oob.Bcast(&job, sizeof(job), 0));
//
// Implementations: CallbackOob (caller-supplied C callbacks, e.g. MPI) and
// TcpOob (tcp_oob.h: a small TCP rendezvous for processes without MPI).
// Not thread-safe: one thread calls an Oob at a time.
#ifndef NETFOLD_HOST_OOB_H_
#define NETFOLD_HOST_OOB_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netfold/netfold.h"

namespace netfold::host {

class Oob {
 public:
  virtual ~Oob() = default;
  // recv receives size() * bytes, in rank order.
  virtual absl::Status Allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual absl::Status Bcast(void* buf, size_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Broadcasts a variable-length string from `root` (size first).
  absl::Status BcastString(std::string* s, int root);
};

class CallbackOob : public Oob {
 public:
  CallbackOob(const netfold_oob_t& callbacks, int rank, int size)
      : cb_(callbacks), rank_(rank), size_(size) {}
  absl::Status Allgather(const void* send, void* recv, size_t bytes) override;
  absl::Status Bcast(void* buf, size_t bytes, int root) override;
  absl::Status Barrier() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // InvalidArgument if a callback is missing.
  static absl::Status Check(const netfold_oob_t& callbacks);

 private:
  netfold_oob_t cb_;
  int rank_, size_;
};

// Outcomes every rank agrees on, for the steps where one rank talks to the
// manager (creating the job, a group) or each rank tries something on its
// own (joining a group) and all must go the same way:
//
//   std::string outcome;
//   if (oob.rank() == 0) outcome = EncodeOutcome(resp.status(), payload);
//   NETFOLD_RETURN_IF_ERROR(oob.BcastString(&outcome, 0));
//   NETFOLD_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(outcome));
//   NETFOLD_RETURN_IF_ERROR(AgreeOnStatus(oob, joined_here));

// An outcome (OK and a payload, or an error with its netfold code) as
// bytes for a broadcast, so that every rank returns the same error when the
// rank that talked to the manager failed.
std::string EncodeOutcome(const absl::Status& s, const std::string& payload);

// The payload of an encoded outcome, or its error (with its netfold code);
// InternalError if `in` is too short to be one.
absl::StatusOr<std::string> DecodeOutcome(const std::string& in);

// Collective: whether every rank succeeded. A rank that failed gets its own
// `mine` back; the others UNAVAILABLE naming the lowest rank that failed
// ("rank R of the group failed to join (see its log)"); every rank OK when
// all are. An OOB failure is returned as it is (the ranks may then
// disagree: their OOB is broken), but after a rank's own failure, which
// keeps its code and comes first in the message.
absl::Status AgreeOnStatus(Oob& oob, const absl::Status& mine);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_OOB_H_
