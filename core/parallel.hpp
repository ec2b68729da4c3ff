#pragma once
// Internal: the thread pool that runs kiln's own kernels. Kernels split their work with parallel_for;
// the pool's size follows kiln::set_num_threads.
#include <cstdint>

#include "core/threads.hpp"

namespace kiln::detail {

using RangeFunction = void (*)(const void* body, std::int64_t begin, std::int64_t end, int worker);
void parallel_for(std::int64_t count, int max_workers, RangeFunction function, const void* body);

// Splits [0, count) into at most max_workers contiguous ranges (no more than get_num_threads(), nor
// than count) and runs body(begin, end, worker) for each, worker 0 on the calling thread, the rest on
// the pool's threads; returns when all are done, rethrowing the first exception a range threw. A
// parallel_for inside a body runs serially. Nothing is allocated: kernels call it in every training step.
template <class Body>
void parallel_for(std::int64_t count, int max_workers, const Body& body) {
  parallel_for(
      count, max_workers,
      [](const void* b, std::int64_t begin, std::int64_t end, int worker) {
        (*static_cast<const Body*>(b))(begin, end, worker);
      },
      &body);
}

// The workers parallel_for would use for count items, at most max_workers: kernels size per-worker
// scratch with it.
int parallel_workers(std::int64_t count, int max_workers);

}  // namespace kiln::detail
