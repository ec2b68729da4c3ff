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

// Sums over [0, count) split among workers, each adding its range into its own part of `parts` (part_size elements,
// zeroed by the worker; at most `slots` parts, so the workers are capped there and at max_workers): body(begin, end,
// part). `out` (part_size elements) is then the parts' sum in worker order, so a thread count always gives the same
// bits, and one worker the serial sum. No items or no slots: out is zeroed.
template <class T, class Body>
void parallel_sum_parts(std::int64_t count, int max_workers, std::int64_t slots, std::int64_t part_size, T* parts,
                        T* out, const Body& body) {
  for (std::int64_t i = 0; i < part_size; ++i) out[i] = T(0);
  const int capped = static_cast<int>(slots < 1 ? 1 : slots < max_workers ? slots : max_workers);
  const int workers = count > 0 && slots > 0 ? parallel_workers(count, capped) : 0;
  if (workers == 0) return;
  parallel_for(count, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    T* part = parts + worker * part_size;
    for (std::int64_t i = 0; i < part_size; ++i) part[i] = T(0);
    body(begin, end, part);
  });
  for (int worker = 0; worker < workers; ++worker) {
    const T* part = parts + worker * part_size;
    for (std::int64_t i = 0; i < part_size; ++i) out[i] += part[i];
  }
}

// A max_workers for element loops: one worker per 32k elements of a memory-bound loop (about 10 µs of
// work each, well above the cost of waking the pool), or per 32k / cost elements of a loop that does
// `cost` times more work an element; at least 1.
inline int workers_for_elements(std::int64_t elements, std::int64_t cost = 1) {
  constexpr std::int64_t grain = std::int64_t{1} << 15;
  const std::int64_t workers = elements * cost / grain;
  return workers < 1 ? 1 : workers > (1 << 16) ? (1 << 16) : static_cast<int>(workers);
}

}  // namespace kiln::detail
