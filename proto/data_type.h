// Element data types carried in aggregation messages, with their wire codes,
// sizes and names.
//
//   absl::StatusOr<DataType> t = ParseDataType("bf16");
//   size_t bytes = DataTypeSize(*t) * count;
//
// The numeric values are the wire encoding (aggregation header byte 2) and
// never change. Pair types are the MPI value/index structs used by
// MINLOC/MAXLOC, laid out as C lays them out on x86-64 (so an MPI buffer can
// be sent as is): the element size is the C struct size, padding included.
// All functions are pure and thread-safe.
#ifndef NETFOLD_PROTO_DATA_TYPE_H_
#define NETFOLD_PROTO_DATA_TYPE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace netfold::proto {

enum class DataType : uint8_t {
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUint8 = 5,
  kUint16 = 6,
  kUint32 = 7,
  kUint64 = 8,
  kFp16 = 9,    // IEEE 754 binary16
  kBf16 = 10,   // bfloat16 (the top half of a binary32)
  kFp32 = 11,
  kFp64 = 12,
  kFloatInt = 13,   // MPI_FLOAT_INT:  struct { float v; int32_t i; }    8 bytes
  kDoubleInt = 14,  // MPI_DOUBLE_INT: struct { double v; int32_t i; }  16 bytes
  kLongInt = 15,    // MPI_LONG_INT:   struct { int64_t v; int32_t i; } 16 bytes
  k2Int = 16,       // MPI_2INT:       struct { int32_t v; int32_t i; }  8 bytes
  kShortInt = 17,   // MPI_SHORT_INT:  struct { int16_t v; int32_t i; }  8 bytes
};

inline constexpr std::array<DataType, 17> kAllDataTypes = {
    DataType::kInt8,     DataType::kInt16,     DataType::kInt32,   DataType::kInt64,
    DataType::kUint8,    DataType::kUint16,    DataType::kUint32,  DataType::kUint64,
    DataType::kFp16,     DataType::kBf16,      DataType::kFp32,    DataType::kFp64,
    DataType::kFloatInt, DataType::kDoubleInt, DataType::kLongInt, DataType::k2Int,
    DataType::kShortInt,
};

// True if `code` is the wire code of a DataType.
bool IsValidDataType(uint8_t code);

// Bytes per element (struct size for pair types); 0 for an invalid value.
size_t DataTypeSize(DataType type);

// Canonical lower-case name ("int8", "fp16", "float_int", ...); "invalid"
// for a value that is not a DataType.
std::string_view DataTypeName(DataType type);

// Accepts the canonical names and common aliases ("float" = fp32, "double" =
// fp64, "half" = fp16, "bfloat16" = bf16, "int" = int32, "2int", ...), any
// case. InvalidArgument lists the accepted names for anything else.
absl::StatusOr<DataType> ParseDataType(std::string_view name);

// Integer types (signed and unsigned), floating types, pair types.
bool IsIntegerType(DataType type);
bool IsSignedIntegerType(DataType type);
bool IsFloatingType(DataType type);
bool IsPairType(DataType type);

// For a pair type: the byte offset and size of the index member (an int32
// always) and the size of the value member. Zero for other types.
size_t PairIndexOffset(DataType type);
size_t PairValueSize(DataType type);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_DATA_TYPE_H_
