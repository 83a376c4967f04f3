// Precompiled header of netfold_manager (manager/meson.build): most of the
// manager's headers carry the generated protobuf and gRPC headers, parsed
// once for the library instead of once per file. The files still include
// what they use; a build with -Db_pch=false checks that they do.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "manager/aggregation_manager.h"
#include "manager/control_service.h"
