// The one logging header of netfold.
//
//   NETFOLD_LOG(kInfo) << "switch " << name << " listening on " << addr;
//   NETFOLD_LOG(kDebug) << ...;   // compiled in, filtered at run time
//
// Levels: kError < kWarning < kInfo < kDebug < kTrace. The threshold comes
// from NETFOLD_LOG_LEVEL (error|warning|info|debug|trace or 0..4; default
// warning) read once on first use, or from SetLogLevel(). A message whose
// level is above the threshold costs one relaxed atomic load; its stream
// arguments are not evaluated. Lines go to stderr, one write(2) per line, so
// lines from threads and processes do not interleave. Thread-safe.
#ifndef NETFOLD_BASE_LOG_H_
#define NETFOLD_BASE_LOG_H_

#include <optional>
#include <sstream>
#include <string_view>

namespace netfold {

enum class LogLevel : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Parses "error", "warning"/"warn", "info", "debug", "trace" (any case) or a
// digit 0..4. Returns nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view text);
std::string_view LogLevelName(LogLevel level);

// Current threshold; messages with level <= threshold are written.
LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
// Prefix for every line (e.g. "switchd s1"); default is empty. Not for hot
// paths: it takes a lock.
void SetLogTag(std::string_view tag);

namespace internal {

bool LogEnabled(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Lets the macro below be an expression of type void.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace netfold

#define NETFOLD_LOG(level)                                                     \
  !::netfold::internal::LogEnabled(::netfold::LogLevel::level)                 \
      ? (void)0                                                                \
      : ::netfold::internal::LogVoidify() &                                    \
            ::netfold::internal::LogMessage(::netfold::LogLevel::level,        \
                                            __FILE__, __LINE__)                \
                .stream()

#endif  // NETFOLD_BASE_LOG_H_
