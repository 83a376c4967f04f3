// Precompiled header of tools_unit_tests (tools/meson.build): the headers most of
// the unit tests here include, parsed once for the whole executable instead
// of once per test file. Test files still include what they use; a build
// with -Db_pch=false checks that they do.
#include <filesystem>
#include <fstream>

#include "base/testing/unit_test_pch.h"
