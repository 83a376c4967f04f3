#include "proto/data_type.h"

#include <cctype>
#include <string>

#include "absl/strings/str_format.h"

namespace netfold::proto {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
};

constexpr TypeInfo kTypeInfo[] = {
    {DataType::kInt8, "int8", 1},        {DataType::kInt16, "int16", 2},
    {DataType::kInt32, "int32", 4},      {DataType::kInt64, "int64", 8},
    {DataType::kUint8, "uint8", 1},      {DataType::kUint16, "uint16", 2},
    {DataType::kUint32, "uint32", 4},    {DataType::kUint64, "uint64", 8},
    {DataType::kFp16, "fp16", 2},        {DataType::kBf16, "bf16", 2},
    {DataType::kFp32, "fp32", 4},        {DataType::kFp64, "fp64", 8},
    {DataType::kFloatInt, "float_int", 8}, {DataType::kDoubleInt, "double_int", 16},
    {DataType::kLongInt, "long_int", 16},  {DataType::k2Int, "2int", 8},
    {DataType::kShortInt, "short_int", 8},
};

const TypeInfo* Find(DataType type) {
  for (const TypeInfo& info : kTypeInfo) {
    if (info.type == type) return &info;
  }
  return nullptr;
}

struct Alias {
  std::string_view name;
  DataType type;
};
constexpr Alias kAliases[] = {
    {"char", DataType::kInt8},       {"short", DataType::kInt16},
    {"int", DataType::kInt32},       {"long", DataType::kInt64},
    {"byte", DataType::kUint8},      {"half", DataType::kFp16},
    {"float16", DataType::kFp16},    {"bfloat16", DataType::kBf16},
    {"float", DataType::kFp32},      {"float32", DataType::kFp32},
    {"double", DataType::kFp64},     {"float64", DataType::kFp64},
    {"int_int", DataType::k2Int},
};

}  // namespace

bool IsValidDataType(uint8_t code) {
  return code >= static_cast<uint8_t>(DataType::kInt8) &&
         code <= static_cast<uint8_t>(DataType::kShortInt);
}

size_t DataTypeSize(DataType type) {
  const TypeInfo* info = Find(type);
  return info ? info->size : 0;
}

std::string_view DataTypeName(DataType type) {
  const TypeInfo* info = Find(type);
  return info ? info->name : "invalid";
}

absl::StatusOr<DataType> ParseDataType(std::string_view name) {
  std::string lower;
  for (char c : name) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const TypeInfo& info : kTypeInfo) {
    if (info.name == lower) return info.type;
  }
  for (const Alias& alias : kAliases) {
    if (alias.name == lower) return alias.type;
  }
  std::string accepted;
  for (const TypeInfo& info : kTypeInfo) accepted += (accepted.empty() ? "" : ", ") + std::string(info.name);
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown data type '%s' (accepted: %s)", name, accepted));
}

bool IsIntegerType(DataType type) {
  return type >= DataType::kInt8 && type <= DataType::kUint64;
}

bool IsSignedIntegerType(DataType type) {
  return type >= DataType::kInt8 && type <= DataType::kInt64;
}

bool IsFloatingType(DataType type) {
  return type >= DataType::kFp16 && type <= DataType::kFp64;
}

bool IsPairType(DataType type) {
  return type >= DataType::kFloatInt && type <= DataType::kShortInt;
}

size_t PairIndexOffset(DataType type) {
  switch (type) {
    case DataType::kFloatInt: return 4;
    case DataType::kDoubleInt: return 8;
    case DataType::kLongInt: return 8;
    case DataType::k2Int: return 4;
    case DataType::kShortInt: return 4;
    default: return 0;
  }
}

size_t PairValueSize(DataType type) {
  switch (type) {
    case DataType::kFloatInt: return 4;
    case DataType::kDoubleInt: return 8;
    case DataType::kLongInt: return 8;
    case DataType::k2Int: return 4;
    case DataType::kShortInt: return 2;
    default: return 0;
  }
}

}  // namespace netfold::proto
