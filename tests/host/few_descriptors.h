// A process at its RLIMIT_NOFILE, for fabric_rank's "squeezed" scenario
// (tests/host/fabric_rank.cc): what a rank of a job with many open files
// meets when the library opens one more socket.
//
//   {
//     FewDescriptors few(1);  // one descriptor left to open
//     ... netfold_group_create(...) ...
//   }                         // the limit and the descriptors are back
//
// Thread-safety: the process's limit and descriptor table are shared;
// meant for a test's main thread while no other thread opens files.
#ifndef NETFOLD_TESTS_HOST_FEW_DESCRIPTORS_H_
#define NETFOLD_TESTS_HOST_FEW_DESCRIPTORS_H_

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace netfold::fabric_rank {

// A process at its RLIMIT_NOFILE: the soft limit lowered to just above
// the descriptors open now, and every free one below it taken but
// `spare`. Undone when it goes out of scope.
class FewDescriptors {
 public:
  explicit FewDescriptors(int spare) {
    if (getrlimit(RLIMIT_NOFILE, &saved_) != 0) return;
    int highest = 0;
    if (DIR* d = opendir("/proc/self/fd"); d != nullptr) {
      while (const dirent* e = readdir(d)) highest = std::max(highest, std::atoi(e->d_name));
      closedir(d);
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min<rlim_t>(saved_.rlim_max, static_cast<rlim_t>(highest) + 64);
    if (setrlimit(RLIMIT_NOFILE, &lowered) != 0) return;
    lowered_ = true;
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) taken_.push_back(fd);
    for (int i = 0; i < spare && !taken_.empty(); ++i) {
      close(taken_.back());
      taken_.pop_back();
    }
  }
  FewDescriptors(const FewDescriptors&) = delete;
  FewDescriptors& operator=(const FewDescriptors&) = delete;
  ~FewDescriptors() {
    for (int fd : taken_) close(fd);
    if (lowered_) setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  rlimit saved_{};
  bool lowered_ = false;
  std::vector<int> taken_;
};

}  // namespace netfold::fabric_rank

#endif  // NETFOLD_TESTS_HOST_FEW_DESCRIPTORS_H_
