#include "host/torch/fabric_context.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "host/torch/fabric_group.h"

namespace netfold::pytorch {
namespace {

std::mutex g_mu;
std::weak_ptr<FabricContext> g_current;  // under g_mu
uint64_t g_generations = 0;              // under g_mu

// The threads destroying retired groups; Shutdown joins them, Retire joins
// those that are done. Never destroyed: a thread still running when the
// process exits without Shutdown must not abort it (std::thread's
// destructor would).
struct Retiring {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
};
struct RetiringThreads {
  std::mutex mu;
  std::vector<Retiring> threads;  // under mu
  bool shut_down = false;         // under mu: Shutdown ran, retire inline
};
RetiringThreads& Retirements() {
  static auto* retirements = new RetiringThreads;
  return *retirements;
}

}  // namespace

FabricContext::FabricContext(const c10::intrusive_ptr<c10d::Store>& store, uint64_t generation,
                             int rank, int size, std::chrono::milliseconds timeout)
    : generation_(generation),
      world_(store, "netfold/" + std::to_string(generation) + "/world", rank, size, timeout),
      pid_(getpid()) {
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = rank;
  spec.world_size = size;
  spec.oob = world_.callbacks();
  spec.job_name = "torch";
  const int rc = netfold_init(&spec, &ctx_);
  if (rc != NETFOLD_SUCCESS) {
    std::string message = DescribeFailure("init (joining the fabric)", rc);
    if (rc == NETFOLD_ERR_OOB) message += " (" + world_.last_error() + ")";
    TORCH_CHECK(false, message);
  }
}

std::shared_ptr<FabricContext> FabricContext::JoinWorld(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::shared_ptr<FabricContext> current = g_current.lock()) {
    TORCH_CHECK(current->world_rank() == rank && current->world_size() == size,
                "netfold: this process already belongs to a netfold world as rank ",
                current->world_rank(), " of ", current->world_size(),
                " (process groups of it are still alive); it cannot join another as rank ", rank,
                " of ", size);
    ++current->world_epoch_;
    return current;
  }
  std::shared_ptr<FabricContext> context(
      new FabricContext(store, g_generations + 1, rank, size, timeout));
  ++g_generations;
  g_current = context;
  return context;
}

std::shared_ptr<FabricContext> FabricContext::Current() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::shared_ptr<FabricContext> current = g_current.lock();
  TORCH_CHECK(current != nullptr,
              "netfold: a netfold subgroup needs the default process group to be netfold too "
              "(torch.distributed.init_process_group(\"netfold\", ...))");
  return current;
}

std::string FabricContext::GroupScope() const {
  return "netfold/" + std::to_string(generation_) + "." + std::to_string(world_epoch_.load()) +
         "/group";
}

void FabricContext::Register(const std::shared_ptr<FabricGroup>& group) {
  std::lock_guard<std::mutex> lock(groups_mu_);
  groups_.push_back({group.get(), group});
}

void FabricContext::Unregister(const FabricGroup* group) {
  std::lock_guard<std::mutex> lock(groups_mu_);
  groups_.erase(std::remove_if(groups_.begin(), groups_.end(),
                               [&](const RegisteredGroup& g) { return g.group == group; }),
                groups_.end());
}

void FabricContext::Retire(std::shared_ptr<FabricGroup> group) {
  RetiringThreads& r = Retirements();
  std::unique_lock<std::mutex> lock(r.mu);
  if (r.shut_down) {
    // At interpreter exit, after Shutdown destroyed every group: nothing
    // left to wait for.
    lock.unlock();
    group.reset();
    return;
  }
  for (auto it = r.threads.begin(); it != r.threads.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = r.threads.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([group = std::move(group), done]() mutable {
    group->Destroy();
    group.reset();  // the last group of a context finalizes it, here
    done->store(true);
  });
  r.threads.push_back({std::move(thread), std::move(done)});
}

void FabricContext::Shutdown() {
  std::shared_ptr<FabricContext> context;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    context = g_current.lock();
    g_current.reset();
  }
  if (context != nullptr && context->pid_ != getpid()) return;  // a fork() child's copy
  if (context != nullptr) {
    std::vector<std::shared_ptr<FabricGroup>> groups;
    {
      std::lock_guard<std::mutex> lock(context->groups_mu_);
      for (const RegisteredGroup& g : context->groups_) {
        if (std::shared_ptr<FabricGroup> alive = g.alive.lock()) groups.push_back(std::move(alive));
      }
    }
    // The process groups still hold these (as objects that refuse
    // collectives from now on): destroyed here, each on its own thread.
    std::vector<std::thread> destroying;
    for (std::shared_ptr<FabricGroup>& group : groups) {
      destroying.emplace_back([group] { group->Destroy(); });
    }
    for (std::thread& t : destroying) t.join();
  }
  RetiringThreads& r = Retirements();
  std::vector<Retiring> retiring;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    retiring.swap(r.threads);
    r.shut_down = true;
  }
  for (Retiring& t : retiring) t.thread.join();
  if (context != nullptr) context->Finalize();
}

netfold_stats_t FabricContext::Stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::shared_ptr<FabricContext> current = g_current.lock();
  TORCH_CHECK(current != nullptr, "netfold: no netfold process group in this process");
  netfold_stats_t stats{};
  const int rc = netfold_get_stats(current->ctx_, &stats);
  TORCH_CHECK(rc == NETFOLD_SUCCESS, DescribeFailure("get_stats", rc));
  return stats;
}

void FabricContext::Finalize() {
  if (ctx_ == nullptr || pid_ != getpid()) return;
  const int rc = netfold_finalize(ctx_);
  ctx_ = nullptr;
  if (rc != NETFOLD_SUCCESS) {
    std::string message = DescribeFailure("finalize", rc);
    if (rc == NETFOLD_ERR_OOB) message += " (" + world_.last_error() + ")";
    std::fprintf(stderr, "netfold_torch: %s\n", message.c_str());
  }
}

FabricContext::~FabricContext() { Finalize(); }

}  // namespace netfold::pytorch
