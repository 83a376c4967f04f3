#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace netfold {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};

absl::Mutex g_tag_mu;
std::string& Tag() {
  static std::string* tag = new std::string();
  return *tag;
}

int LevelFromEnvironment() {
  const char* env = std::getenv("NETFOLD_LOG_LEVEL");
  if (env != nullptr && *env != '\0') {
    if (auto level = ParseLogLevel(env)) return static_cast<int>(*level);
    // Say so once instead of silently ignoring a typo.
    std::string msg = std::string("netfold: ignoring NETFOLD_LOG_LEVEL='") + env +
                      "' (use error|warning|info|debug|trace)\n";
    (void)!write(STDERR_FILENO, msg.data(), msg.size());
  }
  return static_cast<int>(LogLevel::kWarning);
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "error" || lower == "0") return LogLevel::kError;
  if (lower == "warning" || lower == "warn" || lower == "1") return LogLevel::kWarning;
  if (lower == "info" || lower == "2") return LogLevel::kInfo;
  if (lower == "debug" || lower == "3") return LogLevel::kDebug;
  if (lower == "trace" || lower == "4") return LogLevel::kTrace;
  return std::nullopt;
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "E";
    case LogLevel::kWarning: return "W";
    case LogLevel::kInfo: return "I";
    case LogLevel::kDebug: return "D";
    case LogLevel::kTrace: return "T";
  }
  return "?";
}

LogLevel GetLogLevel() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    int from_env = LevelFromEnvironment();
    // Another thread may have called SetLogLevel meanwhile; it wins.
    g_level.compare_exchange_strong(level, from_env, std::memory_order_relaxed);
    level = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void SetLogTag(std::string_view tag) {
  absl::MutexLock lock(&g_tag_mu);
  Tag() = std::string(tag);
}

namespace internal {

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(GetLogLevel());
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  stream_ << LogLevelName(level_) << " "
          << absl::FormatTime("%H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << " ";
  {
    absl::MutexLock lock(&g_tag_mu);
    if (!Tag().empty()) stream_ << Tag() << " ";
  }
  stream_ << base << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace internal
}  // namespace netfold
