#include "host/algorithms/testing/loopback_ranks.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace netfold::host::algorithms {

LoopbackRanks::LoopbackRanks(const LoopbackOptions& options) : options_(options) {
  auto faults = transport::ParseImpairment(options.faults);
  if (!faults.ok()) {
    status_ = faults.status();
    return;
  }
  ranks_.resize(options.num_ranks);
  uint64_t seed = options.seed * 1000;
  for (uint32_t r = 0; r < options.num_ranks; ++r) {
    auto mem = net_.CreatePort({.local = {0x0a000300u + r, 4791},
                                .pool = {.num_buffers = 4096},
                                .rx_queue_limit = 4096});
    if (!mem.ok()) {
      status_ = mem.status();
      return;
    }
    transport::ImpairmentConfig send = *faults, receive = *faults;
    send.seed = ++seed;
    receive.seed = ++seed;
    auto port = std::make_unique<transport::ImpairedPort>(std::move(*mem), send, receive, clock_);
    ranks_[r].port = port.get();
    ranks_[r].endpoint = std::make_unique<transport::RoceEndpoint>(std::move(port), clock_);
    auto channels =
        RcPeerChannels::Create(ranks_[r].endpoint.get(), r, options.num_ranks, options.channels);
    if (!channels.ok()) {
      status_ = channels.status();
      return;
    }
    ranks_[r].channels = std::move(*channels);
  }
  // The out-of-band allgather, done by hand: every rank's record, in rank order.
  std::vector<uint8_t> all;
  for (Rank& rank : ranks_) {
    std::vector<uint8_t> mine = rank.channels->LocalRecord();
    all.insert(all.end(), mine.begin(), mine.end());
  }
  for (uint32_t r = 0; r < options.num_ranks; ++r) {
    status_ = ranks_[r].channels->Connect(all);
    if (!status_.ok()) return;
    auto engine = AllreduceEngine::Create(ranks_[r].channels.get(), options.engine);
    if (!engine.ok()) {
      status_ = engine.status();
      return;
    }
    ranks_[r].engine = std::move(*engine);
  }
}

LoopbackRanks::~LoopbackRanks() {
  for (uint32_t r = 0; r < ranks_.size(); ++r) Kill(r);
}

void LoopbackRanks::Kill(uint32_t r) {
  ranks_[r].engine.reset();
  ranks_[r].channels.reset();
  ranks_[r].endpoint.reset();
  ranks_[r].port = nullptr;
}

std::vector<OpId> LoopbackRanks::StartOnEveryRank(const std::vector<AllreduceArgs>& args) {
  std::vector<OpId> ids(ranks_.size(), 0);
  start_errors_.assign(ranks_.size(), absl::OkStatus());
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    if (!alive(r)) continue;
    auto id = ranks_[r].engine->Start(args[r]);
    if (id.ok()) {
      ids[r] = *id;
    } else {
      start_errors_[r] = id.status();
    }
  }
  return ids;
}

uint64_t LoopbackRanks::Activity() const {
  uint64_t n = 0;
  for (const Rank& rank : ranks_) {
    if (rank.endpoint == nullptr) continue;
    n += rank.endpoint->counters().rx_packets.load() + rank.endpoint->counters().tx_packets.load();
    const EngineStats& s = rank.engine->stats();
    n += s.messages_received + s.messages_sent + s.ops_completed + s.ops_failed;
  }
  return n;
}

void LoopbackRanks::Step() {
  const uint64_t before = Activity();
  for (Rank& rank : ranks_) {
    if (rank.engine == nullptr) continue;
    rank.channels->Progress(absl::ZeroDuration());
    rank.engine->Poll();
    rank.channels->Flush();
  }
  absl::Duration advance = options_.step;
  if (Activity() == before) {
    // Nothing moved: go straight to the next timer (bounded, so that
    // packets held back by the impairment stage come out near their time).
    const int64_t now = clock_.NowNanos();
    int64_t next = now + absl::ToInt64Nanoseconds(options_.max_idle_jump);
    for (const Rank& rank : ranks_) {
      if (rank.engine == nullptr) continue;
      if (auto t = rank.channels->NextTimerNs()) next = std::min(next, *t);
      if (auto t = rank.engine->NextTimerNs()) next = std::min(next, *t);
    }
    advance = std::max(advance, absl::Nanoseconds(next - now));
  }
  clock_.Advance(advance);
}

bool LoopbackRanks::RunUntilDone(const std::vector<OpId>& ops, int max_rounds) {
  for (int round = 0; round < max_rounds; ++round) {
    bool done = true;
    for (uint32_t r = 0; r < ranks_.size() && done; ++r) {
      if (alive(r) && ops[r] != 0) done = ranks_[r].engine->Done(ops[r]);
    }
    if (done) return true;
    Step();
  }
  return false;
}

}  // namespace netfold::host::algorithms
