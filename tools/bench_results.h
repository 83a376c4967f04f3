// What `netfold bench` reads back from bench/mpi/collective_bench and how it
// writes figures: shared by the loopback runs (tools/bench.cc) and the
// shaped-link runs on the namespace testbed (tools/bench_testbed.cc).
#ifndef NETFOLD_TOOLS_BENCH_RESULTS_H_
#define NETFOLD_TOOLS_BENCH_RESULTS_H_

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

// Runs bench/plot_bench.py (found beside `self`) on `csv_path` into
// `out_dir` when /usr/bin/python3 has matplotlib; says where the plots are.
void Plot(const std::string& self, const std::string& csv_path, const std::string& out_dir);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_BENCH_RESULTS_H_
