// Precompiled header of tools_unit_tests (tools/meson.build): headers most of the
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
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
