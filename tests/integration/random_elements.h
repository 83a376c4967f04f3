// Random elements of any netfold data type for the aggregation tests:
// random bits for the integers, finite floats in small ranges, fp16/bf16
// converted from floats, and value/index pairs with few distinct values so
// that MINLOC/MAXLOC meet ties.
// Header-only; used by tests/integration and tests/switch.
#ifndef NETFOLD_TESTS_INTEGRATION_RANDOM_ELEMENTS_H_
#define NETFOLD_TESTS_INTEGRATION_RANDOM_ELEMENTS_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "proto/data_type.h"
#include "reduce/reduce.h"

namespace netfold::testing {

inline std::vector<uint8_t> RandomElements(proto::DataType type, size_t count,
                                           std::mt19937_64& rng) {
  const size_t size = proto::DataTypeSize(type);
  std::vector<uint8_t> b(count * size);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = b.data() + i * size;
    switch (type) {
      case proto::DataType::kFp32: {
        float v = std::uniform_real_distribution<float>(-100, 100)(rng);
        std::memcpy(e, &v, 4);
        break;
      }
      case proto::DataType::kFp64: {
        double v = std::uniform_real_distribution<double>(-100, 100)(rng);
        std::memcpy(e, &v, 8);
        break;
      }
      case proto::DataType::kFp16:
      case proto::DataType::kBf16: {
        const float f = std::uniform_real_distribution<float>(-4, 4)(rng);
        const uint16_t v =
            type == proto::DataType::kFp16 ? reduce::FloatToFp16(f) : reduce::FloatToBf16(f);
        std::memcpy(e, &v, 2);
        break;
      }
      case proto::DataType::kFloatInt: {
        const float v = static_cast<float>(rng() % 5);
        std::memcpy(e, &v, 4);
        break;
      }
      default:
        if (proto::IsPairType(type)) e[0] %= 4;  // ties for MINLOC/MAXLOC
        break;
    }
  }
  return b;
}

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_INTEGRATION_RANDOM_ELEMENTS_H_
