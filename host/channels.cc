#include "host/channels.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "proto/data_type.h"

namespace netfold::host {

Channels::Channels(std::vector<FabricChannel> channels) : channels_(std::move(channels)) {
  for (const FabricChannel& c : channels_) window_slots_ += c.engine->params().num_slots;
  if (channels_.size() > 1) {
    for (FabricChannel& c : channels_) c.engine->SetGate(this);
  }
}

bool Channels::MayPost(OpId op, size_t vector_chunk) const {
  // A failed channel's operations are over, its chunks no longer missing:
  // the others stop too (FailTogether follows) rather than run ahead of
  // what it wrote.
  if (!failure().ok()) return false;
  for (const FabricChannel& c : channels_) {
    const std::optional<size_t> first = c.engine->FirstMissing(op);
    if (first.has_value() && *first + window_slots_ <= vector_chunk) return false;
  }
  return true;
}

absl::StatusOr<OpId> Channels::Start(const CollectiveArgs& args) {
  Op op;
  op.inner.reserve(channels_.size());
  CollectiveArgs a = args;
  if (channels_.size() > 1 && a.collective == proto::CollectiveType::kReduce &&
      !a.blocks.empty() && a.send == a.recv && a.count > 0 && a.recv != nullptr) {
    // An in-place reduce-scatter: its block of the result lands over the
    // input's first elements once the chunks holding them were sent, on
    // one channel; another channel may land its results before sending
    // those. The channels read a copy.
    const auto* in = static_cast<const uint8_t*>(a.recv);
    op.input.assign(in, in + a.count * proto::DataTypeSize(a.dtype));
    a.send = op.input.data();
  }
  std::vector<OpId>& inner = op.inner;
  // A channel that cannot take the operation after others took it: the
  // group fails, and theirs must not run on without it.
  auto abandon = [&](const absl::Status& why) {
    Fail(why);
    for (size_t i = 0; i < inner.size(); ++i) (void)channels_[i].engine->Finish(inner[i]);
  };
  for (FabricChannel& c : channels_) {
    absl::StatusOr<OpId> id = c.engine->Start(a);
    if (!id.ok()) {
      // Arguments fail alike on every channel, so only the first can
      // refuse them; a later one refuses because it failed.
      if (!inner.empty()) abandon(c.engine->failure().ok() ? id.status() : c.engine->failure());
      return id.status();
    }
    inner.push_back(*id);
    if (*id != inner.front()) {
      // The channels start every operation together, so their ids agree
      // (the gate names an operation by it); if not, this is a bug.
      const absl::Status bug = absl::InternalError("the channels' operation ids differ");
      abandon(bug);
      return bug;
    }
  }
  const OpId id = inner.front();
  ++ops_started_;
  Count(ops_[id] = std::move(op));  // done at once: an empty operation after a failure
  return id;
}

void Channels::FailTogether() {
  const absl::Status& why = failure();
  if (why.ok()) return;
  for (FabricChannel& c : channels_) {
    if (c.engine->failure().ok()) c.engine->Fail(why);
  }
}

bool Channels::Done(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return true;
  FailTogether();
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (!channels_[i].engine->Done(it->second.inner[i])) return false;
  }
  Count(it->second);
  return true;
}

void Channels::Count(Op& op) {
  if (op.counted || channels_.size() == 1) return;  // one channel: the engine counts
  bool failed = false;
  for (size_t i = 0; i < channels_.size(); ++i) {
    const std::optional<absl::Status> s = channels_[i].engine->Peek(op.inner[i]);
    if (!s.has_value()) return;  // not done on this channel yet
    failed = failed || !s->ok();
  }
  op.counted = true;
  ++(failed ? ops_failed_ : ops_completed_);
}

bool Channels::Posted(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return true;
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (!channels_[i].engine->Posted(it->second.inner[i])) return false;
  }
  return true;
}

absl::Status Channels::Finish(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  if (!Done(id)) {
    return absl::FailedPreconditionError(absl::StrFormat("operation %d is still running", id));
  }
  absl::Status out;
  for (size_t i = 0; i < channels_.size(); ++i) {
    absl::Status s = channels_[i].engine->Finish(it->second.inner[i]);
    if (out.ok()) out = std::move(s);
  }
  ops_.erase(it);
  return out;
}

std::optional<WrittenChunks> Channels::Written(OpId id) const {
  auto it = ops_.find(id);
  if (it == ops_.end()) return std::nullopt;
  if (channels_.size() == 1) return channels_[0].engine->Written(it->second.inner[0]);
  std::vector<WrittenChunks> parts;
  for (size_t i = 0; i < channels_.size(); ++i) {
    std::optional<WrittenChunks> w = channels_[i].engine->Written(it->second.inner[i]);
    if (!w.has_value()) return std::nullopt;
    parts.push_back(*std::move(w));
  }
  return MergeWritten(parts);
}

void Channels::Fail(const absl::Status& why) {
  for (FabricChannel& c : channels_) c.engine->Fail(why);
  for (auto& [id, op] : ops_) Count(op);
}

const absl::Status& Channels::failure() const {
  for (const FabricChannel& c : channels_) {
    if (!c.engine->failure().ok()) return c.engine->failure();
  }
  return channels_[0].engine->failure();
}

GroupEngineStats Channels::stats() const {
  GroupEngineStats out;
  for (const FabricChannel& c : channels_) out += c.engine->stats();
  if (channels_.size() > 1) {
    out.ops_started = ops_started_;
    out.ops_completed = ops_completed_;
    out.ops_failed = ops_failed_;
  }
  return out;
}

WrittenChunks MergeWritten(const std::vector<WrittenChunks>& parts) {
  if (parts.empty()) return {};
  size_t end = 0;
  for (const WrittenChunks& w : parts) end = std::max(end, w.End());
  std::vector<bool> all(end, false);
  for (const WrittenChunks& w : parts) {
    for (size_t i = 0; i < end; ++i) {
      if (w.Has(i)) all[i] = true;
    }
  }
  return WrittenChunks::Of(all, parts[0].chunk_bytes);
}

}  // namespace netfold::host
