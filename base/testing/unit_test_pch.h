// What every folder's unit-test precompiled header starts with
// (<folder>/pch/<folder>_test_pch.h, docs/architecture.md): the standard
// headers, Abseil and gtest/gmock that nearly every test file includes.
// A folder's header adds its own most included headers after this one.
#ifndef NETFOLD_BASE_TESTING_UNIT_TEST_PCH_H_
#define NETFOLD_BASE_TESTING_UNIT_TEST_PCH_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#endif  // NETFOLD_BASE_TESTING_UNIT_TEST_PCH_H_
