// RAII owners of verbs and rdma_cm objects: each is a std::unique_ptr whose
// deleter calls the matching destroy function, so a link that fails half-way
// through its set-up releases what it made, in reverse order of creation
// when declared in order of creation (as VerbsLeafLink's members are).
//
//   VerbsPd pd(ibv_alloc_pd(ctx.get()));
//   if (!pd) return StatusFromErrno(errno, "allocating a protection domain");
//
// Not thread-safe beyond what libibverbs guarantees for the objects.
#ifndef NETFOLD_HOST_LINK_VERBS_RESOURCES_H_
#define NETFOLD_HOST_LINK_VERBS_RESOURCES_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace netfold::host {

template <typename T, auto Destroy>
struct VerbsDeleter {
  void operator()(T* p) const {
    if (p != nullptr) (void)Destroy(p);
  }
};

template <typename T, auto Destroy>
using VerbsPtr = std::unique_ptr<T, VerbsDeleter<T, Destroy>>;

using VerbsDeviceList = VerbsPtr<ibv_device*, ibv_free_device_list>;
using VerbsContext = VerbsPtr<ibv_context, ibv_close_device>;
using VerbsPd = VerbsPtr<ibv_pd, ibv_dealloc_pd>;
using VerbsCompChannel = VerbsPtr<ibv_comp_channel, ibv_destroy_comp_channel>;
using VerbsCq = VerbsPtr<ibv_cq, ibv_destroy_cq>;
using VerbsQp = VerbsPtr<ibv_qp, ibv_destroy_qp>;
using VerbsMr = VerbsPtr<ibv_mr, ibv_dereg_mr>;
using CmEventChannel = VerbsPtr<rdma_event_channel, rdma_destroy_event_channel>;
using CmId = VerbsPtr<rdma_cm_id, rdma_destroy_id>;

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_RESOURCES_H_
