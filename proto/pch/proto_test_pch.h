// Precompiled header of proto_unit_tests (proto/meson.build): the headers most of
// the unit tests here include, parsed once for the whole executable instead
// of once per test file. Test files still include what they use; a build
// with -Db_pch=false checks that they do.
#include "base/testing/unit_test_pch.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"
#include "proto/proto_test_util.h"
