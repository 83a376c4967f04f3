#include "host/algorithms/testing/allreduce_reference.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_format.h"
#include "reduce/reduce.h"

namespace netfold::host::algorithms {

using proto::DataType;
using proto::ReduceOp;

namespace {

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Mixed magnitudes make the order of a floating sum visible; products stay
// near 1 so that they do not all overflow.
double RandomReal(std::mt19937_64& g, ReduceOp op, int max_exp) {
  std::uniform_real_distribution<double> frac(1.0, 2.0);
  const int span = op == ReduceOp::kProd ? 2 : max_exp;
  std::uniform_int_distribution<int> e(-span, span);
  const double sign = (g() & 1) ? -1.0 : 1.0;
  return sign * std::ldexp(frac(g), e(g));
}

// docs/algorithms.md: part i of [0, len) in `parts` parts starts here.
size_t Start(size_t len, size_t parts, size_t i) {
  return i * (len / parts) + std::min(i, len % parts);
}

void FoldInto(DataType t, ReduceOp op, uint8_t* out, const std::vector<const void*>& in,
              size_t count) {
  absl::Status s = reduce::FoldScalarReference(t, op, out, in, count);
  if (!s.ok()) std::abort();
}

// Segment i of [base, base+len) over p ranks is folded in rank order
// i+dir, i+2dir, ..., i (mod p).
void RingOrder(DataType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
               size_t base, size_t len, int dir, std::vector<uint8_t>* out) {
  const size_t p = inputs.size();
  const size_t e = proto::DataTypeSize(t);
  for (size_t i = 0; i < p; ++i) {
    const size_t lo = base + Start(len, p, i);
    const size_t n = Start(len, p, i + 1) - Start(len, p, i);
    if (n == 0) continue;
    std::vector<const void*> in;
    for (size_t k = 1; k <= p; ++k) {
      const size_t r = dir > 0 ? (i + k) % p : (i + 2 * p - k) % p;
      in.push_back(inputs[r].data() + lo * e);
    }
    FoldInto(t, op, out->data() + lo * e, in, n);
  }
}

std::vector<uint8_t> NodeValue(const TreeSpec& tree, int node, DataType t, ReduceOp op,
                               const std::vector<std::vector<uint8_t>>& inputs, size_t count) {
  if (node < 0) return inputs[-1 - node];
  std::vector<std::vector<uint8_t>> values;
  for (int c : tree.children[node]) values.push_back(NodeValue(tree, c, t, op, inputs, count));
  std::vector<const void*> in;
  for (const auto& v : values) in.push_back(v.data());
  std::vector<uint8_t> out(count * proto::DataTypeSize(t));
  if (count > 0) FoldInto(t, op, out.data(), in, count);
  return out;
}

}  // namespace

std::vector<std::vector<uint8_t>> MakeInputs(DataType t, ReduceOp op, size_t count,
                                             uint32_t num_ranks, uint64_t seed) {
  const size_t e = proto::DataTypeSize(t);
  std::vector<std::vector<uint8_t>> inputs(num_ranks, std::vector<uint8_t>(count * e, 0));
  for (uint32_t r = 0; r < num_ranks; ++r) {
    std::mt19937_64 g(seed * 7919 + r * 104729 + static_cast<uint64_t>(t) * 31 +
                      static_cast<uint64_t>(op));
    for (size_t i = 0; i < count; ++i) {
      uint8_t* p = inputs[r].data() + i * e;
      switch (t) {
        case DataType::kFp16:
          Store(p, reduce::FloatToFp16(static_cast<float>(RandomReal(g, op, 6))));
          break;
        case DataType::kBf16:
          Store(p, reduce::FloatToBf16(static_cast<float>(RandomReal(g, op, 20))));
          break;
        case DataType::kFp32:
          Store(p, static_cast<float>(RandomReal(g, op, 24)));
          break;
        case DataType::kFp64:
          Store(p, RandomReal(g, op, 60));
          break;
        case DataType::kFloatInt:
          Store(p, static_cast<float>(g() % 5) * 0.5f);
          Store(p + 4, static_cast<int32_t>(g() % 1000));
          break;
        case DataType::kDoubleInt:
          Store(p, static_cast<double>(g() % 5) * 0.25);
          Store(p + 8, static_cast<int32_t>(g() % 1000));
          break;
        case DataType::kLongInt:
          Store(p, static_cast<int64_t>(g() % 5) - 2);
          Store(p + 8, static_cast<int32_t>(g() % 1000));
          break;
        case DataType::k2Int:
          Store(p, static_cast<int32_t>(g() % 5) - 2);
          Store(p + 4, static_cast<int32_t>(g() % 1000));
          break;
        case DataType::kShortInt:
          Store(p, static_cast<int16_t>(g() % 5 - 2));
          Store(p + 4, static_cast<int32_t>(g() % 1000));
          break;
        default: {  // integers: random bits, a quarter of them zero
          const uint64_t v = g() % 4 == 0 ? 0 : g();
          std::memcpy(p, &v, e);
          break;
        }
      }
    }
  }
  return inputs;
}

std::vector<uint8_t> ReferenceTreeOrder(const TreeSpec& tree, DataType t, ReduceOp op,
                                        const std::vector<std::vector<uint8_t>>& inputs,
                                        size_t count) {
  return NodeValue(tree, 0, t, op, inputs, count);
}

std::vector<uint8_t> ReferenceAllreduce(Algorithm algorithm, const TreeSpec* tree,
                                        uint32_t tree_degree, DataType t, ReduceOp op,
                                        const std::vector<std::vector<uint8_t>>& inputs,
                                        size_t count) {
  const size_t p = inputs.size();
  std::vector<uint8_t> out(count * proto::DataTypeSize(t));
  if (count == 0) return out;
  if (p == 1) return inputs[0];
  switch (algorithm) {
    case Algorithm::kRing:
      RingOrder(t, op, inputs, 0, count, +1, &out);
      return out;
    case Algorithm::kBidirRing:
      if (p <= 2) {
        RingOrder(t, op, inputs, 0, count, +1, &out);
      } else {
        const size_t first = count - count / 2;
        RingOrder(t, op, inputs, 0, first, +1, &out);
        RingOrder(t, op, inputs, first, count / 2, -1, &out);
      }
      return out;
    case Algorithm::kTree:
    case Algorithm::kTreeScatter:
    case Algorithm::kInNetwork: {
      const TreeSpec kary = TreeSpec::KAry(static_cast<uint32_t>(p), tree_degree);
      return ReferenceTreeOrder(tree != nullptr ? *tree : kary, t, op, inputs, count);
    }
  }
  return out;
}

std::string CompareBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                         size_t element_size) {
  if (got.size() != want.size()) {
    return absl::StrFormat("size %d, expected %d", got.size(), want.size());
  }
  size_t first = SIZE_MAX, differ = 0;
  for (size_t i = 0; i < got.size(); i += element_size) {
    if (std::memcmp(got.data() + i, want.data() + i, element_size) != 0) {
      if (first == SIZE_MAX) first = i / element_size;
      ++differ;
    }
  }
  if (differ == 0) return "";
  std::string g, w;
  for (size_t b = 0; b < element_size; ++b) {
    absl::StrAppendFormat(&g, "%02x", got[first * element_size + b]);
    absl::StrAppendFormat(&w, "%02x", want[first * element_size + b]);
  }
  return absl::StrFormat("%d elements differ; first: element %d is %s, expected %s", differ,
                         first, g, w);
}

}  // namespace netfold::host::algorithms
