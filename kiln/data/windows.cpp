#include <kiln/data/data.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/data/detail/rows.hpp>

namespace kiln {

using detail::check_has_rows;
using detail::check_positive;
using detail::copy_rows;
using detail::row_elements;
using detail::with_leading_dims;

// ======================================= windows =======================================================

std::int64_t num_windows(std::int64_t time_steps, std::int64_t window, std::int64_t stride) {
  check_positive(window, "window", "num_windows");
  check_positive(stride, "stride", "num_windows");
  if (time_steps < window) return 0;
  return (time_steps - window) / stride + 1;
}

namespace {

// The first `count` windows of `series`; the caller has checked that they fit.
Array first_windows(const Array& series, std::int64_t count, std::int64_t window, std::int64_t stride) {
  Array windows(with_leading_dims(series, {count, window}), series.dtype());
  for (std::int64_t k = 0; k < count; ++k) copy_rows(series, k * stride, window, windows, k * window);
  return windows;
}

std::int64_t count_with_targets(const Array& series, std::int64_t window, std::int64_t horizon, std::int64_t stride,
                                const std::string& who) {
  check_positive(horizon, "horizon", who);
  const std::int64_t time_steps = series.shape()[0];
  const std::int64_t count = num_windows(std::max<std::int64_t>(time_steps - horizon, 0), window, stride);
  if (count == 0)
    throw ValueError(who + ": a series of " + std::to_string(time_steps) + " steps has no window of " +
                     std::to_string(window) + " steps followed by a target " + std::to_string(horizon) +
                     " steps later");
  return count;
}

}  // namespace

Array sliding_windows(const Array& series, std::int64_t window, std::int64_t stride) {
  check_has_rows(series, "sliding_windows");
  const std::int64_t count = num_windows(series.shape()[0], window, stride);
  if (count == 0)
    throw ValueError("sliding_windows: a window of " + std::to_string(window) + " steps does not fit a series of " +
                     std::to_string(series.shape()[0]) + " steps");
  return first_windows(series, count, window, stride);
}

Array window_targets(const Array& series, std::int64_t window, std::int64_t horizon, std::int64_t stride) {
  check_has_rows(series, "window_targets");
  const std::int64_t count = count_with_targets(series, window, horizon, stride, "window_targets");
  Array targets(with_leading_dims(series, {count}), series.dtype());
  for (std::int64_t k = 0; k < count; ++k) copy_rows(series, k * stride + window - 1 + horizon, 1, targets, k);
  return targets;
}

WindowedSeries windows_with_targets(const Array& inputs, const Array& targets, std::int64_t window,
                                    std::int64_t horizon, std::int64_t stride) {
  check_has_rows(inputs, "windows_with_targets");
  check_has_rows(targets, "windows_with_targets");
  if (inputs.shape()[0] != targets.shape()[0])
    throw ShapeError("windows_with_targets", "inputs and targets need the same number of time steps",
                     {{"inputs", inputs.shape()}, {"targets", targets.shape()}});
  const std::int64_t count = count_with_targets(inputs, window, horizon, stride, "windows_with_targets");
  return WindowedSeries{first_windows(inputs, count, window, stride), window_targets(targets, window, horizon, stride)};
}

}  // namespace kiln
