#pragma once
// What the stock examples share (stock_attention, and distributed_stock, its data-parallel run): the data,
// windowed, split in time order and scaled on the training part, and the MHAttention model.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace stock {

constexpr std::int64_t None = kiln::Shape::unknown;
constexpr std::int64_t window = 40;

struct Dataset {
  kiln::Array train_x, train_y, validation_x, validation_y, test_x, test_y;
};

inline kiln::Array absolute_columns(const kiln::Array& series, const std::vector<std::int64_t>& columns) {
  const std::int64_t rows = series.shape()[0], width = series.shape()[1];
  kiln::Array result({rows, static_cast<std::int64_t>(columns.size())}, series.dtype());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < columns.size(); ++c)
      result.set_flat(static_cast<std::size_t>(r) * columns.size() + c,
                      std::fabs(series.flat(static_cast<std::size_t>(r * width + columns[c]))));
  return result;
}

inline Dataset load(const std::string& path) {
  kiln::CsvOptions options;
  options.column_names = {"DAX", "SMI", "CAC", "FTSE"};
  const kiln::Array returns = kiln::log_returns(kiln::read_csv(path, options).values);
  // Tomorrow's absolute return of DAX (column 0) and FTSE (column 3), lined up with each 40-day window.
  const kiln::WindowedSeries windows = kiln::windows_with_targets(returns, absolute_columns(returns, {0, 3}), window);
  const std::int64_t samples = windows.inputs.shape()[0];
  const kiln::Array inputs = windows.inputs.reshape({samples, window * 4});
  const std::vector<kiln::Array> x = kiln::split_rows(inputs, {0.7, 0.15, 0.15});
  const std::vector<kiln::Array> y = kiln::split_rows(windows.targets, {0.7, 0.15, 0.15});
  // Fit both scalings on the training part only: the model must not see the future's statistics.
  kiln::Standardizer standardizer;
  standardizer.fit(x[0]);
  kiln::MinMaxScaler scaler(-1.0, 1.0);
  scaler.fit(y[0]);
  return {standardizer.transform(x[0]), scaler.transform(y[0]),       standardizer.transform(x[1]),
          scaler.transform(y[1]),       standardizer.transform(x[2]), scaler.transform(y[2])};
}

inline kiln::Model attention_model() {
  const kiln::Tensor input = kiln::Input({None, window * 4}, kiln::DType::float32, "returns");
  kiln::Tensor h = kiln::Reshape({window, 4})(input);
  h = kiln::MHAttention(/*key_size=*/16, /*heads=*/8)(h);
  h = kiln::Flatten()(h);
  h = kiln::Dense(40, "swish")(h);
  h = kiln::Dense(40, "swish")(h);
  return kiln::Model(input, kiln::Dense(2, "tanh")(h), "stock_attention");
}

}  // namespace stock
