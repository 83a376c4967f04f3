// Test helper: a fresh directory under $TMPDIR (or /tmp), removed with its
// contents when the object goes away.
//
//   TempDir dir;
//   Journal::Open(dir.path() + "/state", &snapshot);
#ifndef NETFOLD_MANAGER_TESTING_TEMP_DIR_H_
#define NETFOLD_MANAGER_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace netfold::manager {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base ? base : "/tmp") + "/netfold-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Empty if the directory could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_TEMP_DIR_H_
