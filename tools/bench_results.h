// What `netfold bench` reads back from bench/mpi/collective_bench and how it
// writes figures: shared by the loopback runs (tools/bench.cc) and the
// shaped-link runs on the namespace testbed (tools/bench_testbed.cc).
#ifndef NETFOLD_TOOLS_BENCH_RESULTS_H_
#define NETFOLD_TOOLS_BENCH_RESULTS_H_

#include <optional>
#include <string>
#include <vector>

namespace netfold::tools {

// One line of collective_bench's output.
struct Point {
  long size = 0;
  int iterations = 0;
  double avg = 0, p50 = 0, p99 = 0;  // microseconds
  double link_bytes = -1;            // per operation, this rank, both directions
};

// The points in collective_bench's CSV lines; other lines (mpirun's own
// messages) are skipped.
std::vector<Point> ParsePoints(const std::string& output);
// The point of `size`, or nullptr.
const Point* PointOf(const std::vector<Point>& points, long size);

// `netfold bench --rounds N` measures every variant N times, in alternating
// order; these combine a variant's rounds, each a collective_bench run.
using Rounds = std::vector<std::vector<Point>>;
// The point of `size` over the rounds that measured it: the median of each
// of avg, p50, p99 and link bytes, the iterations summed; nullopt if none did.
std::optional<Point> MedianPoint(const Rounds& rounds, long size);
// a.avg / b.avg at `size` in each round both measured, in round order.
std::vector<double> RoundRatios(const Rounds& a, const Rounds& b, long size);
// The median of `values` (the mean of the middle two for an even count);
// NaN if empty.
double Median(std::vector<double> values);

// The file `relative` to the directory of `self` (this program) that
// exists first, canonical; "" if none does.
std::string FindBeside(const std::string& self, const std::vector<std::string>& relative);

// Creates `out_dir` and returns the absolute path of `log_name` in it
// (removed if it exists); prints why and returns "" if it cannot.
std::string PrepareOutputDir(const std::string& out_dir, const std::string& log_name);
// "4,4096,65536": the sizes as collective_bench takes them.
std::string SizeList(const std::vector<long>& sizes);

// 4 B, 64 KiB, 16 MiB.
std::string HumanSize(long bytes);
// 12.3 us, 4.56 ms, 1.23 s; "-" for a negative value.
std::string Us(double us);

// "machine: 2 cores; a wake-up costs 5.1 us of CPU on one, 12.4 us across
// two; the kernel's first read of a page the application wrote 8.3 us, the
// next 3.0 us": what a fabric of sleeping processes pays per burst here
// (base/wakeup_cost.h), and what a first call on fresh buffers pays per
// page (base/first_touch_cost.h), measured now (~0.1 s), for the header of
// a run.
std::string MachineLine();

// Runs bench/plot_bench.py (found beside `self`) on `csv_path` into
// `out_dir` when /usr/bin/python3 has matplotlib; says where the plots are.
void Plot(const std::string& self, const std::string& csv_path, const std::string& out_dir);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_BENCH_RESULTS_H_
