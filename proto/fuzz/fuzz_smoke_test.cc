// Runs one libFuzzer entry point (LLVMFuzzerTestOneInput, linked in from
// the target's source) in an ordinary gtest binary, so that every build,
// not only the clang fuzzing build, exercises the target and its property
// checks: on the seed corpus ($NETFOLD_FUZZ_SEEDS, set by meson), on a few
// thousand deterministic mutations of it, and on deterministic random bytes.
// A broken property aborts the binary, which fails the test.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace netfold::proto {
namespace {

std::vector<std::vector<uint8_t>> LoadSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  const char* dir = std::getenv("NETFOLD_FUZZ_SEEDS");
  if (dir == nullptr) {
    ADD_FAILURE() << "NETFOLD_FUZZ_SEEDS is not set";
    return seeds;
  }
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());  // deterministic order
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return seeds;
}

// Calls the target on an exactly-sized heap copy, so that a sanitizer
// build would flag a read one past the end.
void RunTarget(const std::vector<uint8_t>& input) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[input.size() + (input.empty() ? 1 : 0)]);
  std::copy(input.begin(), input.end(), copy.get());
  EXPECT_EQ(LLVMFuzzerTestOneInput(copy.get(), input.size()), 0);
}

TEST(FuzzSmoke, SeedCorpus) {
  const std::vector<std::vector<uint8_t>> seeds = LoadSeeds();
  ASSERT_GE(seeds.size(), 5u);
  for (const auto& seed : seeds) RunTarget(seed);
  RunTarget({});
}

TEST(FuzzSmoke, MutatedSeeds) {
  const std::vector<std::vector<uint8_t>> seeds = LoadSeeds();
  ASSERT_FALSE(seeds.empty());
  std::mt19937 rng(20240601);
  for (int iteration = 0; iteration < 4000; ++iteration) {
    std::vector<uint8_t> input = seeds[rng() % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = input.empty() ? 0 : rng() % input.size();
      switch (rng() % 6) {
        case 0:  // flip a bit
          if (!input.empty()) input[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:  // set a byte
          if (!input.empty()) input[at] = static_cast<uint8_t>(rng());
          break;
        case 2:  // insert a byte
          input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
          break;
        case 3:  // erase a byte
          if (!input.empty()) input.erase(input.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        case 4:  // truncate
          input.resize(at);
          break;
        case 5:  // set an interesting byte in the first 48 (headers)
          if (!input.empty()) {
            static constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x03, 0x04, 0x05, 0x11,
                                                       0x64, 0x65, 0x7F, 0x80, 0xFF};
            input[rng() % std::min<size_t>(input.size(), 48)] =
                kInteresting[rng() % sizeof(kInteresting)];
          }
          break;
      }
    }
    RunTarget(input);
  }
}

TEST(FuzzSmoke, RandomBytes) {
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::vector<uint8_t> input(rng() % 128);
    for (uint8_t& b : input) b = static_cast<uint8_t>(rng());
    RunTarget(input);
  }
}

}  // namespace
}  // namespace netfold::proto
