#include <kiln/data/data.hpp>

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
#include <kiln/data/detail/rows.hpp>

namespace kiln {

using detail::check_has_rows;
using detail::check_positive;
using detail::copy_rows;
using detail::row_elements;
using detail::with_leading_dims;

// ======================================== splits =======================================================

namespace {

// Fisher-Yates over Rng::below: the same order with every standard library.
void shuffle(std::vector<std::int64_t>& order, Rng& rng) {
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
}

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
  shuffle(order, rng);
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

// ---- train_test_split --------------------------------------------------------------------------------

namespace {

// The test rows: scikit-learn's sizes (ceil(test_size · rows) test rows, the rest train), drawn at random or,
// stratified, from each class in proportion (largest remainders first, so the counts sum exactly), then
// shuffled so that neither part is ordered by class.
std::vector<std::int64_t> test_rows(std::int64_t rows, double test_size, std::uint64_t seed, const Array& stratify) {
  const std::string who = "train_test_split";
  if (!(test_size > 0.0 && test_size < 1.0))
    throw ValueError(who + ": test_size must be in (0, 1), got " + std::to_string(test_size));
  const auto test_count = static_cast<std::int64_t>(std::ceil(test_size * static_cast<double>(rows)));
  if (test_count >= rows)
    throw ValueError(who + ": " + std::to_string(rows) + " rows leave no training rows at test_size " +
                     std::to_string(test_size));
  Rng rng(seed);
  std::vector<std::int64_t> chosen;
  if (stratify.empty()) {
    chosen.resize(static_cast<std::size_t>(rows));
    std::iota(chosen.begin(), chosen.end(), std::int64_t{0});
    shuffle(chosen, rng);
    chosen.resize(static_cast<std::size_t>(test_count));
  } else {
    // One label per row: (rows,), or (rows, 1) as read_csv returns a label column (fit takes both too).
    const Shape& shape = stratify.shape();
    const bool one_per_row = (shape.rank() == 1 || (shape.rank() == 2 && shape[1] == 1)) && shape[0] == rows;
    if (!one_per_row)
      throw ShapeError(who + ": stratify must hold one label per row, (" + std::to_string(rows) + ",) or (" +
                       std::to_string(rows) + ", 1), got " + shape.to_string());
    std::vector<std::pair<double, std::vector<std::int64_t>>> classes;  // label and its rows, by first sight
    for (std::int64_t row = 0; row < rows; ++row) {
      const double label = stratify.flat(static_cast<std::size_t>(row));
      if (std::isnan(label)) throw ValueError(who + ": stratify's label at row " + std::to_string(row) + " is NaN");
      auto found = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return c.first == label; });
      if (found == classes.end()) found = classes.insert(classes.end(), {label, {}});
      found->second.push_back(row);
    }
    std::sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // Each class's share of the test rows, floored; the rows still owed go to the largest remainders.
    std::vector<std::int64_t> counts;
    std::vector<std::pair<double, std::size_t>> remainders;
    std::int64_t given = 0;
    for (std::size_t c = 0; c < classes.size(); ++c) {
      const double exact =
          static_cast<double>(test_count) * static_cast<double>(classes[c].second.size()) / static_cast<double>(rows);
      counts.push_back(static_cast<std::int64_t>(std::floor(exact)));
      given += counts.back();
      remainders.emplace_back(exact - std::floor(exact), c);
    }
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t i = 0; given < test_count; ++i, ++given) ++counts[remainders[i % remainders.size()].second];
    for (std::size_t c = 0; c < classes.size(); ++c) {
      std::vector<std::int64_t>& members = classes[c].second;
      shuffle(members, rng);
      chosen.insert(chosen.end(), members.begin(), members.begin() + counts[c]);
    }
    shuffle(chosen, rng);
  }
  return chosen;
}

}  // namespace

std::vector<Array> train_test_split(const std::vector<Array>& arrays, double test_size, std::uint64_t seed,
                                    const Array& stratify) {
  if (arrays.empty()) throw ValueError("train_test_split: give at least one array");
  for (const Array& array : arrays) check_has_rows(array, "train_test_split");
  const std::int64_t rows = arrays[0].shape()[0];
  for (std::size_t i = 1; i < arrays.size(); ++i)
    if (arrays[i].shape()[0] != rows)
      throw ValueError("train_test_split: array " + std::to_string(i) + " has " + std::to_string(arrays[i].shape()[0]) +
                       " rows, array 0 has " + std::to_string(rows));
  const std::vector<std::int64_t> test = test_rows(rows, test_size, seed, stratify);
  std::vector<char> in_test(static_cast<std::size_t>(rows), 0);
  for (std::int64_t row : test) in_test[static_cast<std::size_t>(row)] = 1;
  // The training rows in the order of one more seeded shuffle, as scikit-learn's are.
  std::vector<std::int64_t> train;
  for (std::int64_t row : shuffled_row_order(rows, seed ^ 0x747261696e5f7465ull))
    if (!in_test[static_cast<std::size_t>(row)]) train.push_back(row);
  std::vector<Array> parts;
  for (const Array& array : arrays) {
    parts.push_back(take_rows(array, train));
    parts.push_back(take_rows(array, test));
  }
  return parts;
}

}  // namespace kiln
