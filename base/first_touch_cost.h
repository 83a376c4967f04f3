// What the kernel's first access to a page the application has written
// costs, against its next ones. Nothing on bare metal or with nested paging
// in hardware; on a hypervisor that shadows the guest's page tables it is a
// fault per page (6-7.5 us on the PVM guest of docs/performance.md), paid
// when a send reads a fresh buffer or a receive writes one: a long
// operation's first call on fresh buffers (docs/performance.md, "A fresh
// buffer's first operation"). `netfold bench` prints it beside the wake-up
// cost (tools/bench_results.h).
//
//   absl::StatusOr<FirstTouchCost> c = MeasureFirstTouchCost(256);
//   printf("%.1f us more\n", c->read_first_us - c->read_again_us);
#ifndef NETFOLD_BASE_FIRST_TOUCH_COST_H_
#define NETFOLD_BASE_FIRST_TOUCH_COST_H_

#include "absl/status/statusor.h"

namespace netfold {

// Wall time per page, each page written by this process beforehand.
struct FirstTouchCost {
  double read_first_us = 0;   // the kernel reads it (a pipe write from it), first time
  double read_again_us = 0;   // the same pages again
  double write_first_us = 0;  // the kernel writes it (a pipe read into it), first time
  double write_again_us = 0;  // the same pages again
};

// Writes `pages` fresh 4 KiB pages (no huge pages), then has the kernel
// read each of them twice through a pipe of this process's own, then the
// same for writes into `pages` other fresh pages. Nothing leaves the
// process; the pipe never blocks (non-blocking, one page in it at a time).
// InvalidArgument for pages < 1; ResourceExhausted without memory or a pipe.
// Thread-safe: each call has its own pipe and pages.
absl::StatusOr<FirstTouchCost> MeasureFirstTouchCost(int pages);

}  // namespace netfold

#endif  // NETFOLD_BASE_FIRST_TOUCH_COST_H_
