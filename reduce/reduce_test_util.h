// Helpers shared by the tests of reduce/ (test-only; not part of the
// library): readable failure messages.
//
//   EXPECT_EQ(got, want) << Describe(type, op) << " on " << target << ": "
//                        << FirstDifference(type, got, want);
//   // "fp32 sum on AVX2: element 3: got 0x7fc00000 want 0x7fc12345"
#ifndef NETFOLD_REDUCE_REDUCE_TEST_UTIL_H_
#define NETFOLD_REDUCE_REDUCE_TEST_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::reduce {

// "fp32 sum", naming a case in a failure message.
inline std::string Describe(proto::DataType type, proto::ReduceOp op) {
  return absl::StrFormat("%s %s", proto::DataTypeName(type), proto::ReduceOpName(op));
}

// First differing element, for readable failures.
// `got` and `want` hold elements of `type`.
inline std::string FirstDifference(proto::DataType type, const std::vector<uint8_t>& got,
                                   const std::vector<uint8_t>& want) {
  const size_t size = proto::DataTypeSize(type);
  for (size_t i = 0; i < std::min(got.size(), want.size()); i += size) {
    if (std::memcmp(got.data() + i, want.data() + i, size) != 0) {
      std::string g, w;
      for (size_t b = size; b-- > 0;) {
        g += absl::StrFormat("%02x", got[i + b]);
        w += absl::StrFormat("%02x", want[i + b]);
      }
      return absl::StrFormat("element %d: got 0x%s want 0x%s", i / size, g, w);
    }
  }
  return got.size() == want.size() ? "equal" : "sizes differ";
}

}  // namespace netfold::reduce

#endif  // NETFOLD_REDUCE_REDUCE_TEST_UTIL_H_
