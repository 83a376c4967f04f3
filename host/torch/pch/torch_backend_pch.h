// Precompiled header of netfold_torch_backend (host/torch/meson.build):
// libtorch's c10d headers are most of each unit's compile time (about 40 s
// of a unit's 45 s at -O2 -g); parsed once for the library instead of once
// per file. The files still include what they use; a build with
// -Db_pch=false checks that they do.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
