#include "host/torch/torch_types.h"

namespace netfold::pytorch {

std::optional<netfold_dtype_t> NetfoldDtype(at::ScalarType t) {
  switch (t) {
    case at::kByte: return NETFOLD_DTYPE_UINT8;
    case at::kChar: return NETFOLD_DTYPE_INT8;
    case at::kShort: return NETFOLD_DTYPE_INT16;
    case at::kInt: return NETFOLD_DTYPE_INT32;
    case at::kLong: return NETFOLD_DTYPE_INT64;
    case at::kHalf: return NETFOLD_DTYPE_FP16;
    case at::kBFloat16: return NETFOLD_DTYPE_BF16;
    case at::kFloat: return NETFOLD_DTYPE_FP32;
    case at::kDouble: return NETFOLD_DTYPE_FP64;
    default: return std::nullopt;
  }
}

std::string ReduceOpName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "op " + std::to_string(static_cast<int>(op.op_));
  }
}

namespace {

std::optional<netfold_op_t> NetfoldOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return NETFOLD_OP_SUM;
    case c10d::ReduceOp::PRODUCT: return NETFOLD_OP_PROD;
    case c10d::ReduceOp::MIN: return NETFOLD_OP_MIN;
    case c10d::ReduceOp::MAX: return NETFOLD_OP_MAX;
    case c10d::ReduceOp::BAND: return NETFOLD_OP_BAND;
    case c10d::ReduceOp::BOR: return NETFOLD_OP_BOR;
    case c10d::ReduceOp::BXOR: return NETFOLD_OP_BXOR;
    default: return std::nullopt;
  }
}

// bool as uint8 holding 0 or 1: the op on uint8 whose result is torch's.
std::optional<netfold_op_t> BoolOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::MAX: return NETFOLD_OP_LOR;
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN: return NETFOLD_OP_LAND;
    case c10d::ReduceOp::BAND: return NETFOLD_OP_BAND;
    case c10d::ReduceOp::BOR: return NETFOLD_OP_BOR;
    case c10d::ReduceOp::BXOR: return NETFOLD_OP_BXOR;
    default: return std::nullopt;
  }
}

}  // namespace

Reduction ReductionFor(at::ScalarType t, const c10d::ReduceOp& op) {
  const std::string what = ReduceOpName(op) + " on " + std::string(c10::toString(t));
  if (t == at::kBool) {
    std::optional<netfold_op_t> o = BoolOp(op);
    TORCH_CHECK(o.has_value(), "netfold: ReduceOp.", what,
                " is not supported (bool tensors take SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR)");
    return {NETFOLD_DTYPE_UINT8, *o};
  }
  std::optional<netfold_dtype_t> d = NetfoldDtype(t);
  TORCH_CHECK(d.has_value(), "netfold: ReduceOp.", what,
              " is not supported: netfold reduces uint8, int8, int16, int32, int64, float16, "
              "bfloat16, float32, float64 and bool tensors");
  if (op.op_ == c10d::ReduceOp::AVG) {
    TORCH_CHECK(at::isFloatingType(t), "netfold: ReduceOp.", what,
                " is not supported: AVG is defined on floating-point tensors only (an integer "
                "mean would have to round); use SUM and divide");
    return {*d, NETFOLD_OP_SUM, /*average=*/true};
  }
  std::optional<netfold_op_t> o = NetfoldOp(op);
  TORCH_CHECK(o.has_value(), "netfold: ReduceOp.", what, " is not supported");
  TORCH_CHECK(netfold_op_supported(*d, *o) == 1, "netfold: ReduceOp.", what,
              " is not supported: bitwise ops need integer or bool tensors");
  return {*d, *o};
}

MovedType MovedTypeFor(at::ScalarType t) {
  if (std::optional<netfold_dtype_t> d = NetfoldDtype(t)) return {*d, 1};
  return {NETFOLD_DTYPE_UINT8, c10::elementSize(t)};
}

}  // namespace netfold::pytorch
