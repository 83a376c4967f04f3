#include "tools/bench_results.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/first_touch_cost.h"
#include "base/wakeup_cost.h"
#include "tools/run_command.h"

namespace netfold::tools {

namespace fs = std::filesystem;

std::vector<Point> ParsePoints(const std::string& output) {
  std::vector<Point> points;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    Point p;
    if (f.size() != 6 || !absl::SimpleAtoi(f[0], &p.size) || !absl::SimpleAtoi(f[1], &p.iterations) ||
        !absl::SimpleAtod(f[2], &p.avg) || !absl::SimpleAtod(f[3], &p.p50) ||
        !absl::SimpleAtod(f[4], &p.p99) || !absl::SimpleAtod(f[5], &p.link_bytes)) {
      continue;
    }
    points.push_back(p);
  }
  return points;
}

const Point* PointOf(const std::vector<Point>& points, long size) {
  for (const Point& p : points) {
    if (p.size == size) return &p;
  }
  return nullptr;
}

double Median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::optional<Point> MedianPoint(const Rounds& rounds, long size) {
  std::vector<double> avg, p50, p99, link;
  Point m;
  m.size = size;
  for (const std::vector<Point>& round : rounds) {
    const Point* p = PointOf(round, size);
    if (p == nullptr) continue;
    m.iterations += p->iterations;
    avg.push_back(p->avg);
    p50.push_back(p->p50);
    p99.push_back(p->p99);
    link.push_back(p->link_bytes);
  }
  if (avg.empty()) return std::nullopt;
  m.avg = Median(avg);
  m.p50 = Median(p50);
  m.p99 = Median(p99);
  m.link_bytes = Median(link);
  return m;
}

std::vector<double> RoundRatios(const Rounds& a, const Rounds& b, long size) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    const Point* x = PointOf(a[r], size);
    const Point* y = PointOf(b[r], size);
    if (x != nullptr && y != nullptr && y->avg > 0) ratios.push_back(x->avg / y->avg);
  }
  return ratios;
}

std::string FindBeside(const std::string& self, const std::vector<std::string>& relative) {
  const fs::path here = fs::path(self).parent_path();
  for (const std::string& r : relative) {
    const fs::path p = here / r;
    if (fs::exists(p)) return fs::weakly_canonical(p).string();
  }
  return "";
}

std::string PrepareOutputDir(const std::string& out_dir, const std::string& log_name) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "netfold bench: cannot create %s: %s\n", out_dir.c_str(),
                 ec.message().c_str());
    return "";
  }
  const std::string log = fs::absolute(out_dir + "/" + log_name, ec).string();
  std::remove(log.c_str());
  return log;
}

std::string SizeList(const std::vector<long>& sizes) {
  std::string list;
  for (long s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  return list;
}

std::string HumanSize(long b) {
  if (b >= (1l << 20) && b % (1l << 20) == 0) return absl::StrFormat("%d MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return absl::StrFormat("%d KiB", b >> 10);
  return absl::StrFormat("%d B", b);
}

std::string Us(double us) {
  if (us < 0) return "-";
  if (us < 1000) return absl::StrFormat("%.1f us", us);
  if (us < 1e6) return absl::StrFormat("%.2f ms", us / 1000);
  return absl::StrFormat("%.2f s", us / 1e6);
}

std::string MachineLine() {
  std::string line = absl::StrFormat("machine: %ld cores", sysconf(_SC_NPROCESSORS_ONLN));
  const absl::StatusOr<WakeupCost> c = MeasureWakeupCost(2000);
  if (!c.ok()) return line + " (wake-up cost not measured: " + c.status().ToString() + ")";
  absl::StrAppendFormat(&line, "; a wake-up costs %.1f us of CPU on one", c->same_cpu_us);
  if (c->other_cpu_us) absl::StrAppendFormat(&line, ", %.1f us across two", *c->other_cpu_us);
  const absl::StatusOr<FirstTouchCost> t = MeasureFirstTouchCost(256);
  if (!t.ok()) return line + " (first-touch cost not measured: " + t.status().ToString() + ")";
  absl::StrAppendFormat(&line,
                        "; the kernel's first read of a page the application wrote %.1f us, "
                        "the next %.1f us",
                        t->read_first_us, t->read_again_us);
  return line;
}

void Plot(const std::string& self, const std::string& csv_path, const std::string& out_dir) {
  const std::string plot =
      FindBeside(self, {"../../bench/plot_bench.py", "../share/netfold/plot_bench.py"});
  if (plot.empty()) return;
  CommandOptions check;
  check.timeout = absl::Seconds(30);
  absl::StatusOr<CommandResult> has_matplotlib =
      RunCommand({"/usr/bin/python3", "-c", "import matplotlib"}, check);
  if (!has_matplotlib.ok() || !has_matplotlib->Succeeded()) return;
  CommandOptions draw;
  draw.timeout = absl::Minutes(5);
  draw.stderr_path = out_dir + "/plot.log";
  absl::StatusOr<CommandResult> drawn = RunCommand({"/usr/bin/python3", plot, csv_path, out_dir}, draw);
  if (drawn.ok() && drawn->Succeeded()) {
    std::printf("plots: %s/*.png\n", out_dir.c_str());
  } else {
    std::printf("no plots (see %s/plot.log)\n", out_dir.c_str());
  }
}

}  // namespace netfold::tools
