#pragma once
// Internal: the thread pool that runs kiln's own kernels. Kernels split their work with parallel_for;
// the pool's size follows kiln::set_num_threads.
#include <cstdint>

#include <kiln/core/threads.hpp>

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

// A max_workers for element loops: one worker per 32k elements of a memory-bound loop (about 10 µs of
// work each, well above the cost of waking the pool), or per 32k / cost elements of a loop that does
// `cost` times more work an element; at least 1.
inline int workers_for_elements(std::int64_t elements, std::int64_t cost = 1) {
  constexpr std::int64_t grain = std::int64_t{1} << 15;
  const std::int64_t workers = elements * cost / grain;
  return workers < 1 ? 1 : workers > (1 << 16) ? (1 << 16) : static_cast<int>(workers);
}

}  // namespace kiln::detail
