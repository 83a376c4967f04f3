// Precompiled header of transport_unit_tests (transport/meson.build): the headers most of
// the unit tests here include, parsed once for the whole executable instead
// of once per test file. Test files still include what they use; a build
// with -Db_pch=false checks that they do.
#include "base/testing/unit_test_pch.h"
#include "base/clock.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"
#include "transport/testing/port_test_util.h"
