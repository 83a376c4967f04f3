// A rank's data path: the soft RoCEv2 engine on its UDP port (which the
// host algorithms' queue pairs share), the leaf link to its leaf switch
// (soft or verbs, host/link/leaf_link.h), and the group engines that
// results are routed to by group id.
//
//   auto path = *DataPath::Create(options, slot_bytes);
//   attach.endpoint = {path->link().address(), path->link().qpn(), psn};
//   NETFOLD_RETURN_IF_ERROR(path->link().Connect(peer));
//   GroupEngine engine(params, path->sender(), path->clock());
//   path->Route(group_id, &engine);
//   while (!engine.Done(op)) path->Progress(absl::Milliseconds(10));
//   path->Unroute(group_id);
//
// Progress receives, hands each result to the engine of its group, lets
// every engine post what its window allows, repair and time out, and fails
// every engine when the leaf link fails. Failures that come from elsewhere
// (the manager's events) are posted with PostFailure from any thread and
// applied at the next Progress.
//
// Thread-safety: one thread at a time drives a DataPath (Progress, Route,
// the link, the endpoint: the context's ProgressThread lock says which);
// PostFailure and Wake may be called from any thread.
#ifndef NETFOLD_HOST_DATA_PATH_H_
#define NETFOLD_HOST_DATA_PATH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/awake_clock.h"
#include "host/error_codes.h"
#include "host/group_engine.h"
#include "host/link/leaf_link.h"
#include "host/options.h"
#include "transport/ipv4_endpoint.h"
#include "transport/impaired_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::host {

class DataPath {
 public:
  // Opens the rank's UDP port on options.local_address (with
  // options.faults), its engine, and the leaf link of options.transport;
  // `slot_bytes` sizes the verbs link's messages.
  static absl::StatusOr<std::unique_ptr<DataPath>> Create(const ContextOptions& options,
                                                          uint32_t slot_bytes);
  ~DataPath();
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // The leaf link in data plane `plane` (docs/host.md, "Data planes"):
  // plane 0's from Create on, the others' once AddPlane made them.
  LeafLink& link(uint32_t plane = 0) { return *links_.at(plane).link; }
  // Whether the link of `plane` is attached and connected (MarkPlaneReady).
  bool has_plane(uint32_t plane) const {
    return plane < links_.size() && links_[plane].link != nullptr && links_[plane].ready;
  }
  // A leaf link for data plane `plane` (> 0), not connected, as plane 0's
  // at Create: a QP of its own on the same soft engine and port. Not
  // usable (has_plane) until MarkPlaneReady. An attach whose answer did
  // not come (AttachFailed) leaves it for the next call, with the PSN it
  // was attached with in `*psn` (0 for a new link: the caller picks), so
  // that the retry names the same endpoint. FailedPrecondition for the
  // verbs transport (one QP) and while another call is attaching it.
  absl::StatusOr<LeafLink*> AddPlane(uint32_t plane, uint32_t* psn);
  void MarkPlaneReady(uint32_t plane);
  // The manager's answer did not come: the link waits for a retry with
  // the same endpoint (`psn`).
  void AttachFailed(uint32_t plane, uint32_t psn);
  // Drops a link that never became ready (no engine can use it).
  void RemovePlane(uint32_t plane);
  // Connects the link of `plane` again after it failed or the manager
  // detached it (LeafLink::Reconnect): a later failure is told again.
  absl::Status ReconnectLink(uint32_t plane, const LeafPeer& peer);
  bool soft() const { return soft_link_; }
  // The soft engine, for the host algorithms' queue pairs.
  transport::RoceEndpoint& endpoint() { return *endpoint_; }
  // Sends an engine's requests up the RC QP of the leaf link in `plane`.
  RequestSender* sender(uint32_t plane = 0) { return links_.at(plane).sender.get(); }
  // What the path's timers and deadlines run on, and its engines' must:
  // the process's awake clock (base/awake_clock.h), so that a stop of the
  // whole machine does not expire every operation at once.
  static Clock& clock() { return ProcessAwakeClock(); }

  // Results for `group_id` go to `engine` (not owned) until Unroute; its
  // requests go up the link of `plane`, whose failure fails it.
  // `multicast`: the address its results come to, if any (the placed
  // receives of a socket ask only the engines whose results come there).
  void Route(uint32_t group_id, GroupEngine* engine, uint32_t plane = 0,
             std::optional<transport::Ipv4Endpoint> multicast = std::nullopt);
  void Unroute(uint32_t group_id);
  // The receive memory the routed engines' windows ask of the port, and
  // the send buffers they ask of plane `plane`'s link (Route).
  size_t reserved_result_bytes() const { return reserved_result_bytes_; }
  uint32_t reserved_requests(uint32_t plane) const {
    return plane < reserved_requests_.size() ? reserved_requests_[plane] : 0;
  }

  // Fails the engine of `group_id` (every engine if nullopt) with `why` at
  // the next Progress. Any thread.
  void PostFailure(std::optional<uint32_t> group_id, absl::Status why);
  // Fails every engine of data plane `plane` (its link lost at the
  // manager) with `why` at the next Progress. Any thread.
  void PostPlaneFailure(uint32_t plane, absl::Status why);
  // Called once per plane whose leaf link fails, from Progress (under the
  // caller's lock: it must only queue, as ManagerClient::ReportLinkFailure
  // does). Set before the first Progress.
  void SetLinkFailureHandler(std::function<void(uint32_t plane, std::string why)> handler) {
    on_link_failure_ = std::move(handler);
  }

  // Moves traffic, waiting at most `timeout` (less when an engine has
  // timed work).
  void Progress(absl::Duration timeout);
  // Makes a Progress waiting in another thread return soon. Any thread.
  void Wake() { wake_link_->Wake(); }

  // Summed over the planes' links.
  LeafLinkStats link_stats() const;
  // Messages the link delivered that no engine took: a malformed
  // aggregation header, or a group this rank does not have (one destroyed,
  // or forged). Counted in the rank's packets_dropped.
  uint64_t messages_dropped() const { return messages_dropped_; }

 private:
  struct LeafSender : RequestSender {
    LeafLink* link = nullptr;
    absl::Status SendRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                             std::span<const uint8_t> tag) override {
      absl::Status s = link->PostRequest(header, elements, tag);
      // A link that failed says so, as the data path tells its engines
      // (Progress): the fabric is unavailable, the hosts may take over.
      if (!s.ok() && !absl::IsResourceExhausted(s)) {
        if (absl::Status down = link->status(); !down.ok()) {
          return WithErrorCode(absl::UnavailableError(down.message()), NETFOLD_ERR_UNAVAILABLE);
        }
      }
      return s;
    }
    void ReleaseElements(std::span<const uint8_t> memory) override {
      link->ReleaseRequests(memory);
    }
  };
  // The port's receive placer: the routed engines' guesses of where their
  // next multicast results go, and their word on whether a datagram read
  // into one is the result guessed (docs/host.md, "Results straight into
  // the caller's buffer").
  struct Placer : transport::ReceivePlacer {
    DataPath* path = nullptr;
    // Places are offered only while Progress reads and hands out in one
    // go (the link's Progress): a result read elsewhere (an RC timer's
    // read in Flush, the host algorithms driving the endpoint) waits in
    // the UD queue, and one in the caller's memory must not wait where an
    // operation may fail and hand its buffer back first.
    bool armed = false;
    size_t PredictPlaces(const transport::Ipv4Endpoint& group,
                         std::span<transport::ReceivePlace> out) override;
    bool ClaimPlace(const transport::ReceivePlace& place, std::span<const uint8_t> head) override;
  };
  struct Failure {
    std::optional<uint32_t> group_id;
    absl::Status why;
    std::optional<uint32_t> plane;  // every engine of this plane
  };
  // A data plane's leaf link and the sender over it.
  struct PlaneLink {
    std::unique_ptr<LeafLink> link;
    std::unique_ptr<LeafSender> sender;
    bool ready = false;      // attached and connected: engines may use it
    bool attaching = false;  // a call is attaching it now
    uint32_t psn = 0;        // the PSN of an attach whose answer did not come
    bool failure_told = false;  // on_link_failure_ was called for it
  };
  struct Routed {
    GroupEngine* engine = nullptr;
    uint32_t plane = 0;
    std::optional<transport::Ipv4Endpoint> multicast;
  };

  DataPath() = default;
  absl::StatusOr<std::unique_ptr<LeafLink>> CreateLeafLink(const ContextOptions& options,
                                                           uint32_t slot_bytes);
  void ApplyFailures();
  // Every engine posts what its window allows; with `timers`, also its
  // repairs and deadlines. Then the link sends.
  void PollEngines(bool timers);

  Placer placer_;  // outlives endpoint_, whose port calls it
  transport::ImpairedPort* port_ = nullptr;  // owned by endpoint_
  std::unique_ptr<transport::RoceEndpoint> endpoint_;
  std::function<void(uint32_t, std::string)> on_link_failure_;  // SetLinkFailureHandler
  // By data plane; [0] always there.
  std::vector<PlaneLink> links_;
  LeafLink* wake_link_ = nullptr;  // plane 0's, for Wake from any thread
  bool soft_link_ = true;  // the link's Progress moves the soft engine too
  absl::flat_hash_map<uint32_t, Routed> engines_;  // by data-plane group id
  uint64_t messages_dropped_ = 0;
  // Each link's send buffers reserved for the windows of the engines
  // routed to it (what the link sets up is never shrunk: it is ready for
  // the next group; an engine unrouted no longer counts), and what waits
  // beyond them for the switch's ACKs.
  static constexpr uint32_t kRequestsBeyondWindows = 32;
  std::vector<uint32_t> reserved_requests_;  // by plane
  // And the port's receive memory for their results: a result packet
  // carries up to P bytes and ~80 of headers (BTH, DETH, aggregation header,
  // tag, ICRC).
  static constexpr size_t kResultOverhead = 80;
  size_t reserved_result_bytes_ = 0;

  absl::Mutex failures_mu_;
  std::vector<Failure> failures_ ABSL_GUARDED_BY(failures_mu_);
  std::atomic<bool> has_failures_{false};
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_DATA_PATH_H_
