#include <kiln/train/data.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/train/detail/rows.hpp>

namespace kiln {

using detail::check_has_rows;
using detail::check_positive;
using detail::copy_rows;
using detail::row_elements;
using detail::with_leading_dims;

// ======================================== splits =======================================================

namespace {

std::string fractions_text(const std::vector<double>& fractions) {
  std::ostringstream text;
  for (std::size_t i = 0; i < fractions.size(); ++i) text << (i > 0 ? ", " : "{") << fractions[i];
  return text.str() + "}";
}

void check_fractions(const std::vector<double>& fractions, const std::string& who) {
  if (fractions.empty()) throw ValueError(who + ": give at least one fraction");
  double sum = 0;
  for (double fraction : fractions) {
    if (!(fraction > 0) || !std::isfinite(fraction))
      throw ValueError(who + ": fractions must be positive, got " + fractions_text(fractions));
    sum += fraction;
  }
  if (std::fabs(sum - 1.0) > 1e-6)
    throw ValueError(who + ": fractions must sum to 1, got " + fractions_text(fractions) + " (sum " +
                     std::to_string(sum) + ")");
}

// Row boundaries of the parts: part i is rows [boundaries[i], boundaries[i + 1]). Rounding the cumulative
// fraction (not each part's) keeps the sizes summing to the row count, so no row is dropped or repeated.
std::vector<std::int64_t> split_boundaries(std::int64_t rows, const std::vector<double>& fractions,
                                           const std::string& who) {
  check_fractions(fractions, who);
  std::vector<std::int64_t> boundaries{0};
  double cumulative = 0;
  for (std::size_t i = 0; i + 1 < fractions.size(); ++i) {
    cumulative += fractions[i];
    boundaries.push_back(std::llround(cumulative * static_cast<double>(rows)));
  }
  boundaries.push_back(rows);
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i)
    if (boundaries[i + 1] <= boundaries[i])
      throw ValueError(who + ": part " + std::to_string(i) + " (fraction " + std::to_string(fractions[i]) + ") of " +
                       std::to_string(rows) + " rows would be empty");
  return boundaries;
}

}  // namespace

std::vector<Array> split_rows(const Array& source, const std::vector<double>& fractions) {
  check_has_rows(source, "split_rows");
  const std::vector<std::int64_t> boundaries = split_boundaries(source.shape()[0], fractions, "split_rows");
  std::vector<Array> parts;
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i)
    parts.push_back(source.rows(boundaries[i], boundaries[i + 1] - boundaries[i]));
  return parts;
}

std::vector<std::int64_t> shuffled_row_order(std::int64_t num_rows, std::uint64_t seed) {
  if (num_rows < 0)
    throw ValueError("shuffled_row_order: num_rows must not be negative, got " + std::to_string(num_rows));
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_rows));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  Rng rng(seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

Array take_rows(const Array& source, const std::vector<std::int64_t>& rows) {
  check_has_rows(source, "take_rows");
  const std::int64_t available = source.shape()[0];
  Array taken(with_leading_dims(source, {static_cast<std::int64_t>(rows.size())}), source.dtype());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= available)
      throw ValueError("take_rows: row " + std::to_string(rows[i]) + " is out of range for " +
                       std::to_string(available) + " rows");
    copy_rows(source, rows[i], 1, taken, static_cast<std::int64_t>(i));
  }
  return taken;
}

std::vector<Array> shuffled_split_rows(const Array& source, const std::vector<double>& fractions, std::uint64_t seed) {
  check_has_rows(source, "shuffled_split_rows");
  const std::vector<std::int64_t> boundaries = split_boundaries(source.shape()[0], fractions, "shuffled_split_rows");
  const std::vector<std::int64_t> order = shuffled_row_order(source.shape()[0], seed);
  std::vector<Array> parts;
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i)
    parts.push_back(
        take_rows(source, std::vector<std::int64_t>(order.begin() + boundaries[i], order.begin() + boundaries[i + 1])));
  return parts;
}

}  // namespace kiln
