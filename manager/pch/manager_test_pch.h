// Precompiled header of manager_unit_tests (manager/meson.build): the
// headers nearly every manager test includes, parsed once for the whole
// binary instead of once per test file. Test files still include what they
// use; a build with -Db_pch=false checks that they do.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manager/testing/manager_test_fixture.h"
