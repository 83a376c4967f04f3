// Helpers shared by the tests of proto/ (test-only; not part of the library).
//
//   std::vector<uint8_t> bytes = FromHex("0400ffff 00000011");  // spaces ignored
//   EXPECT_EQ(ToHex(bytes), "0400ffff00000011");
//   EXPECT_TRUE(MessageContains(status, "bad_icrc"));
//   std::string dir = TestdataDir();  // $NETFOLD_PROTO_TESTDATA, set by meson
#ifndef NETFOLD_PROTO_PROTO_TEST_UTIL_H_
#define NETFOLD_PROTO_PROTO_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace netfold::proto::testing {

// Parses hex digits, skipping spaces; aborts the test binary on a stray
// character or an odd digit count (a typo in a test's golden bytes).
inline std::vector<uint8_t> FromHex(std::string_view hex) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : hex) {
    if (c == ' ' || c == '\n') continue;
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      std::abort();
    }
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  if (high >= 0) std::abort();
  return out;
}

inline std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
  return out;
}

// True if the message of `status` contains `text` (absl::string_view is
// not std::string_view in Debian's Abseil).
inline bool MessageContains(const absl::Status& status, std::string_view text) {
  return std::string(status.message().data(), status.message().size()).find(text) !=
         std::string::npos;
}

// proto/testdata of the source tree, from $NETFOLD_PROTO_TESTDATA (meson
// sets it for every proto test); empty if unset.
inline std::string TestdataDir() {
  const char* dir = std::getenv("NETFOLD_PROTO_TESTDATA");
  return dir == nullptr ? std::string() : std::string(dir);
}

}  // namespace netfold::proto::testing

#endif  // NETFOLD_PROTO_PROTO_TEST_UTIL_H_
