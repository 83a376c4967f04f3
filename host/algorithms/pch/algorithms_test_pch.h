// Precompiled header of algorithms_unit_tests (host/algorithms/meson.build): headers most of the
// unit tests here include, parsed once for the whole binary instead of once
// per test file. Test files still include what they use; a build with
// -Db_pch=false checks that they do.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/selection.h"
#include "host/algorithms/testing/allreduce_test_util.h"
