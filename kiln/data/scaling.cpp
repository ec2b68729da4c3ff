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

// ======================================== scaling ======================================================

namespace {

// Features are the last axis; every other axis holds samples of them.
std::size_t num_features(const Array& array) { return static_cast<std::size_t>(array.shape().dim(-1)); }

// Rank 2 at least: a 1-D array would be ambiguous between n samples of one feature and one sample of n.
void check_has_features(const Array& data, const std::string& who) {
  if (data.empty() || data.shape().rank() < 2)
    throw ShapeError(who, "expects (samples, ..., features); reshape a 1-D series to (n, 1)", {{"data", data.shape()}});
}

void check_fit_input(const Array& train, const std::string& who) {
  check_has_features(train, who);
  if (train.size() == 0) throw ValueError(who + ": cannot fit on an empty array of shape " + train.shape().to_string());
  const std::size_t features = num_features(train);
  for (std::size_t i = 0; i < train.size(); ++i)
    if (!std::isfinite(train.flat(i)))
      throw ValueError(who + ": sample " + std::to_string(i / features) + ", feature " + std::to_string(i % features) +
                       " is " + std::to_string(train.flat(i)) + "; statistics need finite values");
}

void check_transform_input(const Array& data, std::size_t fitted_features, const std::string& who) {
  if (fitted_features == 0) throw ValueError(who + ": call fit (or restore a fitted state) first");
  check_has_features(data, who);
  if (num_features(data) != fitted_features)
    throw ShapeError(who, "was fitted on " + std::to_string(fitted_features) + " features (the last axis)",
                     {{"data", data.shape()}});
}

// A new array of data's shape and dtype whose element with feature f is `map(value, f)`.
template <class Map>
Array map_features(const Array& data, Map map) {
  Array result(data.shape(), data.dtype());
  const std::size_t features = num_features(data);
  for (std::size_t i = 0; i < data.size(); ++i) result.set_flat(i, map(data.flat(i), i % features));
  return result;
}

std::vector<double> feature_means(const Array& data) {
  const std::size_t features = num_features(data);
  std::vector<double> sums(features, 0.0);
  for (std::size_t i = 0; i < data.size(); ++i) sums[i % features] += data.flat(i);
  const double samples = static_cast<double>(data.size() / features);
  for (double& sum : sums) sum /= samples;
  return sums;
}

// Two passes (mean first) rather than E[x²] - E[x]², which cancels catastrophically for prices near 5000.
std::vector<double> feature_standard_deviations(const Array& data, const std::vector<double>& mean) {
  const std::size_t features = mean.size();
  std::vector<double> squares(features, 0.0);
  for (std::size_t i = 0; i < data.size(); ++i) {
    const double centered = data.flat(i) - mean[i % features];
    squares[i % features] += centered * centered;
  }
  const double samples = static_cast<double>(data.size() / features);
  for (double& square : squares) square = std::sqrt(square / samples);
  return squares;
}

}  // namespace

Standardizer::Standardizer(std::vector<double> mean, std::vector<double> standard_deviation)
    : mean_(std::move(mean)), standard_deviation_(std::move(standard_deviation)) {
  if (mean_.size() != standard_deviation_.size())
    throw ValueError("Standardizer: " + std::to_string(mean_.size()) + " means but " +
                     std::to_string(standard_deviation_.size()) + " standard deviations");
  for (double deviation : standard_deviation_)
    if (!(deviation > 0) || !std::isfinite(deviation))
      throw ValueError("Standardizer: standard deviations must be positive and finite, got " +
                       std::to_string(deviation));
}

Standardizer& Standardizer::fit(const Array& train) {
  check_fit_input(train, "Standardizer::fit");
  mean_ = feature_means(train);
  standard_deviation_ = feature_standard_deviations(train, mean_);
  for (double& deviation : standard_deviation_)
    if (deviation == 0) deviation = 1;  // a constant feature: centred to 0 rather than divided into NaN
  return *this;
}

Array Standardizer::transform(const Array& data) const {
  check_transform_input(data, mean_.size(), "Standardizer::transform");
  return map_features(data, [this](double x, std::size_t f) { return (x - mean_[f]) / standard_deviation_[f]; });
}

Array Standardizer::inverse_transform(const Array& data) const {
  check_transform_input(data, mean_.size(), "Standardizer::inverse_transform");
  return map_features(data, [this](double x, std::size_t f) { return x * standard_deviation_[f] + mean_[f]; });
}

namespace {

void check_feature_range(double low, double high) {
  if (!(low < high) || !std::isfinite(low) || !std::isfinite(high))
    throw ValueError("MinMaxScaler: the range needs finite low < high, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + "]");
}

// The training range of feature f, or 1 for a constant feature so that it maps to `low`.
double data_range(const std::vector<double>& data_min, const std::vector<double>& data_max, std::size_t f) {
  const double range = data_max[f] - data_min[f];
  return range > 0 ? range : 1.0;
}

}  // namespace

MinMaxScaler::MinMaxScaler(double low, double high) : low_(low), high_(high) { check_feature_range(low, high); }

MinMaxScaler::MinMaxScaler(std::vector<double> data_min, std::vector<double> data_max, double low, double high)
    : low_(low), high_(high), data_min_(std::move(data_min)), data_max_(std::move(data_max)) {
  check_feature_range(low, high);
  if (data_min_.size() != data_max_.size())
    throw ValueError("MinMaxScaler: " + std::to_string(data_min_.size()) + " minimums but " +
                     std::to_string(data_max_.size()) + " maximums");
  for (std::size_t f = 0; f < data_min_.size(); ++f)
    if (!(data_min_[f] <= data_max_[f]))
      throw ValueError("MinMaxScaler: feature " + std::to_string(f) + " has data_max below data_min");
}

MinMaxScaler& MinMaxScaler::fit(const Array& train) {
  check_fit_input(train, "MinMaxScaler::fit");
  const std::size_t features = num_features(train);
  data_min_.assign(features, std::numeric_limits<double>::infinity());
  data_max_.assign(features, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < train.size(); ++i) {
    data_min_[i % features] = std::min(data_min_[i % features], train.flat(i));
    data_max_[i % features] = std::max(data_max_[i % features], train.flat(i));
  }
  return *this;
}

Array MinMaxScaler::transform(const Array& data) const {
  check_transform_input(data, data_min_.size(), "MinMaxScaler::transform");
  return map_features(data, [this](double x, std::size_t f) {
    return low_ + (x - data_min_[f]) * (high_ - low_) / data_range(data_min_, data_max_, f);
  });
}

Array MinMaxScaler::inverse_transform(const Array& data) const {
  check_transform_input(data, data_min_.size(), "MinMaxScaler::inverse_transform");
  return map_features(data, [this](double y, std::size_t f) {
    return data_min_[f] + (y - low_) * data_range(data_min_, data_max_, f) / (high_ - low_);
  });
}

// ======================================== returns ======================================================

namespace {

void check_prices(const Array& prices) {
  const std::size_t columns = row_elements(prices);
  for (std::size_t i = 0; i < prices.size(); ++i) {
    const double price = prices.flat(i);
    if (!(price > 0) || !std::isfinite(price))
      throw ValueError("log_returns: the price at row " + std::to_string(i / columns) + ", column " +
                       std::to_string(i % columns) + " is " + std::to_string(price) +
                       "; prices must be positive and finite");
  }
}

}  // namespace

Array log_returns(const Array& prices) {
  check_has_rows(prices, "log_returns");
  const std::int64_t time_steps = prices.shape()[0];
  if (time_steps < 2) throw ValueError("log_returns: needs at least 2 time steps, got " + std::to_string(time_steps));
  check_prices(prices);
  const std::size_t columns = row_elements(prices);
  Array returns(with_leading_dims(prices, {time_steps - 1}), prices.dtype());
  // log(p1 / p0) rather than log(p1) - log(p0): one rounding instead of a difference of two large logs.
  for (std::size_t i = 0; i < returns.size(); ++i)
    returns.set_flat(i, std::log(prices.flat(i + columns) / prices.flat(i)));
  return returns;
}

}  // namespace kiln
