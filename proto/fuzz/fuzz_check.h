// FUZZ_CHECK(cond): the property checks of netfold's libFuzzer targets.
//
//   FUZZ_CHECK(parsed == rebuilt);
//
// A broken property is a bug found by the fuzzer: print where and abort, so
// that libFuzzer saves the input (and the unit-test driver fails). Unlike
// assert(), it is active in every build type.
#ifndef NETFOLD_PROTO_FUZZ_FUZZ_CHECK_H_
#define NETFOLD_PROTO_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__,   \
                   #cond);                                                         \
      std::abort();                                                                \
    }                                                                              \
  } while (false)

#endif  // NETFOLD_PROTO_FUZZ_FUZZ_CHECK_H_
