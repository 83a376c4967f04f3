// netfold.hpp - a thin C++ layer over netfold.h: handles that clean up
// after themselves and the element type deduced from the buffers. It adds
// no behaviour: every call returns the C API's code (no exceptions).
//
//   netfold::Context ctx;
//   int rc = ctx.Init(spec);                    // spec: a netfold_init_spec_t
//   netfold::Group world;
//   if (rc == NETFOLD_SUCCESS) rc = world.Create(ctx, group_spec);
//   std::vector<float> x(n), y(n);
//   if (rc == NETFOLD_SUCCESS) {
//     rc = world.Allreduce(std::span<const float>(x), std::span<float>(y), NETFOLD_OP_SUM);
//   }
//
// Destroying a Group or Context runs the collective destroy/finalize: do it
// on every rank, in the same order.
#ifndef NETFOLD_NETFOLD_HPP_
#define NETFOLD_NETFOLD_HPP_

#include <cstdint>
#include <span>
#include <type_traits>

#include "netfold/netfold.h"

namespace netfold {

// The netfold_dtype_t of a C++ element type (no fp16/bf16/pair types: pass
// the dtype explicitly for those with the raw functions).
template <typename T>
constexpr netfold_dtype_t DtypeOf() {
  if constexpr (std::is_same_v<T, int8_t>) return NETFOLD_DTYPE_INT8;
  else if constexpr (std::is_same_v<T, int16_t>) return NETFOLD_DTYPE_INT16;
  else if constexpr (std::is_same_v<T, int32_t>) return NETFOLD_DTYPE_INT32;
  else if constexpr (std::is_same_v<T, int64_t>) return NETFOLD_DTYPE_INT64;
  else if constexpr (std::is_same_v<T, uint8_t>) return NETFOLD_DTYPE_UINT8;
  else if constexpr (std::is_same_v<T, uint16_t>) return NETFOLD_DTYPE_UINT16;
  else if constexpr (std::is_same_v<T, uint32_t>) return NETFOLD_DTYPE_UINT32;
  else if constexpr (std::is_same_v<T, uint64_t>) return NETFOLD_DTYPE_UINT64;
  else if constexpr (std::is_same_v<T, float>) return NETFOLD_DTYPE_FP32;
  else if constexpr (std::is_same_v<T, double>) return NETFOLD_DTYPE_FP64;
  else static_assert(sizeof(T) == 0, "no netfold data type for this C++ type");
}

class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { Finalize(); }
  int Init(const netfold_init_spec_t& spec) { return netfold_init(&spec, &ctx_); }
  int Finalize() {
    int rc = ctx_ ? netfold_finalize(ctx_) : NETFOLD_SUCCESS;
    ctx_ = nullptr;
    return rc;
  }
  netfold_context_t get() const { return ctx_; }

 private:
  netfold_context_t ctx_ = nullptr;
};

class Group {
 public:
  Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() { Destroy(); }
  int Create(const Context& ctx, const netfold_group_spec_t& spec) {
    size_ = spec.size;
    return netfold_group_create(ctx.get(), &spec, &group_);
  }
  int Destroy() {
    int rc = group_ ? netfold_group_destroy(group_) : NETFOLD_SUCCESS;
    group_ = nullptr;
    return rc;
  }
  netfold_group_t get() const { return group_; }

  template <typename T>
  int Allreduce(std::span<const T> in, std::span<T> out, netfold_op_t op) {
    if (in.size() != out.size()) return NETFOLD_ERR_INVALID_ARGUMENT;
    return netfold_allreduce(group_, in.data(), out.data(), out.size(), DtypeOf<T>(), op);
  }
  template <typename T>
  int AllreduceInPlace(std::span<T> data, netfold_op_t op) {
    return netfold_allreduce(group_, NETFOLD_IN_PLACE, data.data(), data.size(), DtypeOf<T>(), op);
  }
  template <typename T>
  int Bcast(std::span<T> data, int root) {
    return netfold_bcast(group_, data.data(), data.size(), DtypeOf<T>(), root);
  }
  int Barrier() { return netfold_barrier(group_); }
  // `out` holds one block of in.size() elements per rank, in rank order.
  template <typename T>
  int Allgather(std::span<const T> in, std::span<T> out) {
    if (out.size() != in.size() * static_cast<size_t>(size_)) return NETFOLD_ERR_INVALID_ARGUMENT;
    return netfold_allgather(group_, in.data(), out.data(), in.size(), DtypeOf<T>());
  }
  // `in` holds one block of out.size() elements per rank; this rank gets
  // the reduction of its own.
  template <typename T>
  int ReduceScatter(std::span<const T> in, std::span<T> out, netfold_op_t op) {
    if (in.size() != out.size() * static_cast<size_t>(size_)) return NETFOLD_ERR_INVALID_ARGUMENT;
    return netfold_reduce_scatter_block(group_, in.data(), out.data(), out.size(), DtypeOf<T>(),
                                        op);
  }

 private:
  netfold_group_t group_ = nullptr;
  int size_ = 0;
};

}  // namespace netfold

#endif  // NETFOLD_NETFOLD_HPP_
