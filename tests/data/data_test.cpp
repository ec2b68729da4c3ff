#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/data/data.hpp>

namespace fs = std::filesystem;
using kiln::Array;
using kiln::CsvHeader;
using kiln::CsvOptions;
using kiln::Shape;

namespace {

// The repository's data/ folder, found from this file's path so the tests run from any directory.
std::string shipped_data(const std::string& file_name) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / file_name).string();
}

// A fresh directory per test case; the random suffix keeps parallel CTest runs (and build trees) apart.
class TempDirectory {
 public:
  explicit TempDirectory(const std::string& name)
      : path_(fs::temp_directory_path() / ("kiln_data_test_" + name + "_" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  std::string write(const std::string& file_name, const std::string& text) const {
    const std::string path = (path_ / file_name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string path(const std::string& file_name) const { return (path_ / file_name).string(); }

 private:
  fs::path path_;
};

template <class ExpectedError>
std::string csv_error(const std::string& path, const CsvOptions& options = {}) {
  try {
    kiln::read_csv(path, options);
  } catch (const ExpectedError& error) {
    return error.what();
  }
  FAIL("read_csv('" << path << "') did not throw the expected error");
  return {};
}

template <class ExpectedError, class Function>
std::string error_of(Function&& function) {
  try {
    function();
  } catch (const ExpectedError& error) {
    return error.what();
  }
  FAIL("no error was thrown");
  return {};
}

// Row-major values 0, 1, 2, ... in a (rows, columns) float64 array.
Array counting(std::int64_t rows, std::int64_t columns) {
  std::vector<double> values(static_cast<std::size_t>(rows * columns));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  return Array::from_vector(values, Shape{rows, columns});
}

double at(const Array& array, std::int64_t row, std::int64_t column) {
  return array.flat(static_cast<std::size_t>(row * array.shape().dim(-1) + column));
}

}  // namespace

// ---- reading the shipped data sets --------------------------------------------------------------------

TEST_CASE("read_csv: the EU stock file has 1860 days of day, DAX, SMI, CAC and FTSE", "[train][data][csv]") {
  const kiln::CsvTable table = kiln::read_csv(shipped_data("eu_stock_markets.csv"));
  CHECK(table.column_names == std::vector<std::string>{"day", "DAX", "SMI", "CAC", "FTSE"});
  REQUIRE(table.values.shape() == Shape{1860, 5});
  CHECK(table.values.dtype() == kiln::DType::float32);
  CHECK(at(table.values, 0, 0) == 1);
  CHECK(at(table.values, 0, 1) == static_cast<float>(1628.75));
  CHECK(at(table.values, 1, 4) == static_cast<float>(2460.2));
  CHECK(at(table.values, 1859, 0) == 1860);
  CHECK(at(table.values, 1859, 4) == 5455);
}

TEST_CASE("read_csv: skip_index_column and columns chosen by name or index", "[train][data][csv]") {
  const std::string path = shipped_data("eu_stock_markets.csv");
  CsvOptions options;
  options.skip_index_column = true;
  options.dtype = kiln::DType::float64;
  const kiln::CsvTable prices = kiln::read_csv(path, options);
  CHECK(prices.column_names == std::vector<std::string>{"DAX", "SMI", "CAC", "FTSE"});
  REQUIRE(prices.values.shape() == Shape{1860, 4});
  CHECK(at(prices.values, 0, 0) == 1628.75);
  CHECK(at(prices.values, 1858, 0) == 5355.03);

  options = {};
  options.column_names = {"FTSE", "DAX"};
  const kiln::CsvTable by_name = kiln::read_csv(path, options);
  CHECK(by_name.column_names == std::vector<std::string>{"FTSE", "DAX"});
  REQUIRE(by_name.values.shape() == Shape{1860, 2});
  CHECK(at(by_name.values, 0, 0) == static_cast<float>(2443.6));
  CHECK(at(by_name.values, 0, 1) == static_cast<float>(1628.75));

  options = {};
  options.column_indices = {4, 1};
  CHECK(kiln::read_csv(path, options).values.bitwise_equal(by_name.values));
}

TEST_CASE("read_csv: digits has 1797 headerless rows of 64 pixels and a label", "[train][data][csv]") {
  const kiln::CsvTable table = kiln::read_csv(shipped_data("digits.csv"));
  REQUIRE(table.values.shape() == Shape{1797, 65});
  CHECK(table.column_names.front() == "column_0");
  CHECK(table.column_names.back() == "column_64");
  const std::vector<double> first_row_start{0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15};
  for (std::size_t i = 0; i < first_row_start.size(); ++i) CHECK(table.values.flat(i) == first_row_start[i]);
  CHECK(at(table.values, 0, 64) == 0);
  CHECK(at(table.values, 1, 64) == 1);
  CHECK(at(table.values, 2, 64) == 2);
  CHECK(at(table.values, 1796, 2) == 10);
  CHECK(at(table.values, 1796, 64) == 8);
  bool pixels_in_range = true, labels_in_range = true;
  for (std::int64_t row = 0; row < 1797; ++row) {
    for (std::int64_t column = 0; column < 64; ++column)
      pixels_in_range = pixels_in_range && at(table.values, row, column) >= 0 && at(table.values, row, column) <= 16;
    labels_in_range = labels_in_range && at(table.values, row, 64) >= 0 && at(table.values, row, 64) <= 9;
  }
  CHECK(pixels_in_range);
  CHECK(labels_in_range);

  CsvOptions options;
  options.header = CsvHeader::present;  // forcing a header reads the first image's pixels as names
  const kiln::CsvTable misread = kiln::read_csv(shipped_data("digits.csv"), options);
  CHECK(misread.values.shape() == Shape{1796, 65});
  CHECK(misread.column_names[3] == "13");
}

// ---- small files: headers, quotes, line endings ---------------------------------------------------------

TEST_CASE("read_csv: header present, absent and detected", "[train][data][csv]") {
  const TempDirectory directory("header");
  const std::string numbers = directory.write("numbers.csv", "1,2\n3,4\n");
  const std::string named = directory.write("named.csv", "x,y\n1,2\n3,4\n");

  CHECK(kiln::read_csv(numbers).values.shape() == Shape{2, 2});
  CHECK(kiln::read_csv(named).column_names == std::vector<std::string>{"x", "y"});
  CHECK(kiln::read_csv(named).values.to_vector<double>() == std::vector<double>{1, 2, 3, 4});

  CsvOptions options;
  options.header = CsvHeader::present;
  const kiln::CsvTable first_as_names = kiln::read_csv(numbers, options);
  CHECK(first_as_names.column_names == std::vector<std::string>{"1", "2"});
  CHECK(first_as_names.values.to_vector<double>() == std::vector<double>{3, 4});

  options.header = CsvHeader::absent;
  CHECK(kiln::read_csv(numbers, options).values.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("read_csv: quotes, padding, delimiters, blank lines, CRLF and a UTF-8 mark", "[train][data][csv]") {
  const TempDirectory directory("quotes");
  const std::string path = directory.write(
      "quoted.csv", "\xEF\xBB\xBF\"a,b\" ; \"say \"\"hi\"\"\";c\r\n\r\n \"1.5\" ; +2 ;-3e2\r\n4;5;6\r\n\r\n");
  CsvOptions options;
  options.delimiter = ';';
  options.dtype = kiln::DType::float64;
  const kiln::CsvTable table = kiln::read_csv(path, options);
  CHECK(table.column_names == std::vector<std::string>{"a,b", "say \"hi\"", "c"});
  CHECK(table.values.to_vector<double>() == std::vector<double>{1.5, 2, -300, 4, 5, 6});
}

TEST_CASE("read_csv: nan, inf and empty fields are read only when allowed", "[train][data][csv]") {
  const TempDirectory directory("finite");
  const std::string path = directory.write("gaps.csv", "a,b,c\n1,nan,-inf\n2,,3\n");
  CHECK(csv_error<kiln::ValueError>(path) == path +
                                                 ":2: column 'b' (index 1): \"nan\" is not a finite number (set "
                                                 "CsvOptions::allow_non_finite to accept it)");
  CsvOptions options;
  options.column_indices = {0, 1};
  options.allow_non_finite = true;
  const Array values = kiln::read_csv(path, options).values;
  CHECK(std::isnan(values.flat(1)));
  CHECK(std::isnan(values.flat(3)));  // the empty field
  options.column_indices = {2};
  CHECK(kiln::read_csv(path, options).values.flat(0) == -INFINITY);
}

// ---- read_csv errors name the file, line and column ----------------------------------------------------

TEST_CASE("read_csv errors: a bad number names the file, line, column and text", "[train][data][csv][errors]") {
  const TempDirectory directory("bad_number");
  const std::string path = directory.write("prices.csv", "day,DAX,SMI,CAC,FTSE\n1,2,3,4,5\n\n2,3,4,5,\"12,x\"\n");
  CHECK(csv_error<kiln::ValueError>(path) == path + ":4: column 'FTSE' (index 4): \"12,x\" is not a number");

  const std::string headerless = directory.write("headerless.csv", "1,2,3\n4,5,six\n");
  CHECK(csv_error<kiln::ValueError>(headerless) == headerless + ":2: column index 2: \"six\" is not a number");

  const std::string empty_field = directory.write("empty_field.csv", "a,b\n1,\n");
  CHECK(csv_error<kiln::ValueError>(empty_field) ==
        empty_field +
            ":2: column 'b' (index 1): \"\" is not a number (the field is empty; set "
            "CsvOptions::allow_non_finite to read missing values as NaN)");

  const std::string huge = directory.write("huge.csv", "a\n1e39\n");
  CHECK(csv_error<kiln::ValueError>(huge) == huge +
                                                 ":2: column 'a' (index 0): \"1e39\" is out of range for float32 (read "
                                                 "with CsvOptions::dtype = float64)");
  CsvOptions wide;
  wide.dtype = kiln::DType::float64;
  CHECK(kiln::read_csv(huge, wide).values.flat(0) == 1e39);
  const std::string beyond_double = directory.write("beyond.csv", "a\n1e999\n");
  CHECK(csv_error<kiln::ValueError>(beyond_double, wide) ==
        beyond_double + ":2: column 'a' (index 0): \"1e999\" is out of range for float64");
}

TEST_CASE("read_csv errors: ragged rows, unclosed quotes and text after a quote", "[train][data][csv][errors]") {
  const TempDirectory directory("ragged");
  const std::string ragged = directory.write("ragged.csv", "a,b,c\n1,2,3\n4,5\n");
  CHECK(csv_error<kiln::ValueError>(ragged) == ragged + ":3: 2 fields, but line 1 has 3");
  const std::string long_row = directory.write("long.csv", "1,2\r\n3,4,5\r\n");
  CHECK(csv_error<kiln::ValueError>(long_row) == long_row + ":2: 3 fields, but line 1 has 2");
  const std::string unclosed = directory.write("unclosed.csv", "a,b\n1,\"2\n");
  CHECK(csv_error<kiln::ValueError>(unclosed) ==
        unclosed + ":2: a quoted field is not closed (fields that span lines are not supported)");
  const std::string trailing = directory.write("trailing.csv", "a,b\n1,\"2\"x\n");
  CHECK(csv_error<kiln::ValueError>(trailing) == trailing + ":2: field 1 has text after its closing quote");
}

TEST_CASE("read_csv errors: missing, empty and header-only files", "[train][data][csv][errors]") {
  const TempDirectory directory("empty");
  const std::string missing = directory.path("missing.csv");
  CHECK(csv_error<kiln::FileNotFoundError>(missing) == "read_csv: " + missing + ": no such file");
  const std::string empty = directory.write("empty.csv", "");
  CHECK(csv_error<kiln::ValueError>(empty) == empty + ": the file is empty");
  const std::string blank = directory.write("blank.csv", "\n  \n\r\n");
  CHECK(csv_error<kiln::ValueError>(blank) == blank + ": the file is empty");
  const std::string header_only = directory.write("header_only.csv", "\na,b\n");
  CHECK(csv_error<kiln::ValueError>(header_only) == header_only + ":2: a header but no data rows");
  CHECK(csv_error<kiln::ValueError>(directory.path("")).find("it is a directory") != std::string::npos);
}

TEST_CASE("read_csv errors: unknown names suggest the nearest, bad indices list the columns",
          "[train][data][csv][errors]") {
  const TempDirectory directory("columns");
  const std::string path = directory.write("prices.csv", "day,DAX,SMI,CAC,FTSE\n1,2,3,4,5\n");
  CsvOptions options;
  options.column_names = {"DAX", "FTES"};
  CHECK(csv_error<kiln::ConfigError>(path, options) ==
        path + ": no column named 'FTES'; did you mean 'FTSE'? (columns: day, DAX, SMI, CAC, FTSE)");
  options.column_names = {"cac"};
  CHECK(csv_error<kiln::ConfigError>(path, options).find("did you mean 'CAC'?") != std::string::npos);
  options.column_names = {"volume"};
  CHECK(csv_error<kiln::ConfigError>(path, options) ==
        path + ": no column named 'volume' (columns: day, DAX, SMI, CAC, FTSE)");

  options = {};
  options.column_indices = {5};
  CHECK(csv_error<kiln::ConfigError>(path, options) ==
        path + ": column index 5 is out of range; the file has 5 columns (day, DAX, SMI, CAC, FTSE), indices -5 to 4");
  options.column_indices = {-6};
  CHECK(csv_error<kiln::ConfigError>(path, options).find("column index -6 is out of range") != std::string::npos);
  options.column_indices = {0};
  options.skip_index_column = true;
  CHECK(csv_error<kiln::ConfigError>(path, options) ==
        path + ": column 0 ('day') is chosen, but skip_index_column says it is an index");
  options = {};
  options.column_names = {"DAX"};
  options.column_indices = {1};
  CHECK(csv_error<kiln::ConfigError>(path, options).find("by name or by index, not both") != std::string::npos);

  const std::string headerless = directory.write("headerless.csv", "1,2\n");
  options = {};
  options.column_names = {"a"};
  CHECK(csv_error<kiln::ConfigError>(headerless, options) ==
        headerless + ": columns are chosen by name, but the file has no header; use CsvOptions::column_indices");
}

TEST_CASE("read_csv errors: a first line that is half numbers is not guessed", "[train][data][csv][errors]") {
  const TempDirectory directory("detect");
  const std::string dated = directory.write("dated.csv", "1991-01-02,1628.75\n1991-01-03,1613.63\n");
  CHECK(csv_error<kiln::ValueError>(dated) ==
        dated +
            ":1: cannot tell whether this line is a header (some fields are numbers, some are not); set "
            "CsvOptions::header to CsvHeader::present or CsvHeader::absent, or, when the file starts with a line "
            "that is neither a header nor data (scikit-learn's '150,4,setosa,versicolor,virginica'), skip it with "
            "CsvOptions::skip_rows = 1");
  CsvOptions options;
  options.skip_index_column = true;  // the date column is ignored, so detection sees only numbers
  const kiln::CsvTable table = kiln::read_csv(dated, options);
  CHECK(table.values.shape() == Shape{2, 1});
  CHECK(table.values.flat(1) == static_cast<float>(1613.63));
}

// ---- windows ----------------------------------------------------------------------------------------

TEST_CASE("sliding_windows: shapes and values with stride 1 and 2", "[train][data][windows]") {
  const Array series = counting(6, 2);
  const Array windows = kiln::sliding_windows(series, 3);
  REQUIRE(windows.shape() == Shape{4, 3, 2});
  CHECK(windows.dtype() == kiln::DType::float64);
  // Window k starts at row k: its first element is 2k, and it holds 6 consecutive values.
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t j = 0; j < 6; ++j) CHECK(windows.flat(k * 6 + j) == static_cast<double>(2 * k + j));

  const Array strided = kiln::sliding_windows(series, 3, 2);
  REQUIRE(strided.shape() == Shape{2, 3, 2});
  CHECK(strided.flat(6) == 4);  // the second window starts at row 2
  CHECK(kiln::sliding_windows(series, 6).shape() == Shape{1, 6, 2});
  CHECK(kiln::num_windows(6, 3, 2) == 2);
  CHECK(kiln::num_windows(2, 3) == 0);

  const Array single_feature = Array::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4});
  CHECK(kiln::sliding_windows(single_feature, 2).to_vector<float>() == std::vector<float>{1, 2, 2, 3, 3, 4});

  CHECK(error_of<kiln::ValueError>([&] { kiln::sliding_windows(series, 7); }) ==
        "sliding_windows: a window of 7 steps does not fit a series of 6 steps");
  CHECK(error_of<kiln::ValueError>([&] { kiln::sliding_windows(series, 0); }) ==
        "num_windows: window must be at least 1, got 0");
}

TEST_CASE("window_targets: the row horizon steps after each window", "[train][data][windows]") {
  const Array series = counting(6, 2);
  const Array next = kiln::window_targets(series, 3);
  REQUIRE(next.shape() == Shape{3, 2});  // windows starting at rows 0, 1, 2 have a next row
  CHECK(next.to_vector<double>() == std::vector<double>{6, 7, 8, 9, 10, 11});
  const Array two_ahead = kiln::window_targets(series, 3, 2);
  CHECK(two_ahead.to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  const Array strided = kiln::window_targets(series, 2, 1, 3);
  CHECK(strided.to_vector<double>() == std::vector<double>{4, 5, 10, 11});
  CHECK(error_of<kiln::ValueError>([&] { kiln::window_targets(series, 6); }) ==
        "window_targets: a series of 6 steps has no window of 6 steps followed by a target 1 steps later");
}

TEST_CASE("windows_with_targets: inputs and targets from two series stay aligned", "[train][data][windows]") {
  const Array inputs = counting(7, 2);
  const Array targets = Array::from_vector(std::vector<double>{10, 11, 12, 13, 14, 15, 16}, Shape{7, 1});
  const kiln::WindowedSeries pairs = kiln::windows_with_targets(inputs, targets, 3);
  REQUIRE(pairs.inputs.shape() == Shape{4, 3, 2});
  REQUIRE(pairs.targets.shape() == Shape{4, 1});
  for (std::size_t k = 0; k < 4; ++k) {
    const double last_input_step = pairs.inputs.flat(k * 6 + 4) / 2;  // row index of the window's last row
    CHECK(pairs.targets.flat(k) == 10 + last_input_step + 1);
  }
  CHECK(pairs.inputs.bitwise_equal(kiln::sliding_windows(counting(6, 2), 3)));

  const Array short_targets = counting(6, 1);
  CHECK(error_of<kiln::ShapeError>([&] { kiln::windows_with_targets(inputs, short_targets, 3); }) ==
        "windows_with_targets: inputs and targets need the same number of time steps (inputs=(7, 2), targets=(6, 1))");
}

// ---- splits ----------------------------------------------------------------------------------------------

TEST_CASE("split_rows: parts share the source storage and cover every row in order", "[train][data][split]") {
  const Array source = counting(10, 3);
  const std::vector<Array> split = kiln::split_rows(source, {0.6, 0.2, 0.2});
  REQUIRE(split.size() == 3);
  CHECK(split[0].shape() == Shape{6, 3});
  CHECK(split[1].shape() == Shape{2, 3});
  CHECK(split[2].shape() == Shape{2, 3});
  const auto* base = static_cast<const double*>(source.raw());
  CHECK(split[0].raw() == base);
  CHECK(split[1].raw() == base + 18);
  CHECK(split[2].raw() == base + 24);

  std::vector<double> joined;
  for (const Array& part : split)
    for (double value : part.to_vector<double>()) joined.push_back(value);
  CHECK(joined == source.to_vector<double>());

  Array validation = split[1];
  validation.set_flat(0, -1);  // a view: the write lands in the source
  CHECK(source.flat(18) == -1);
}

TEST_CASE("split_rows: the split keeps a temporary source alive", "[train][data][split]") {
  const std::vector<Array> split = kiln::split_rows(counting(5, 2), {0.8, 0.2});
  CHECK(split[0].to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(split[1].to_vector<double>() == std::vector<double>{8, 9});
}

TEST_CASE("split_rows: rounding never drops or repeats a row", "[train][data][split]") {
  for (std::int64_t rows : {7, 20, 1859, 1860}) {
    const std::vector<Array> split = kiln::split_rows(counting(rows, 1), {0.7, 0.15, 0.15});
    std::int64_t total = 0;
    for (const Array& part : split) total += part.shape()[0];
    CHECK(total == rows);
  }
  const std::vector<Array> split = kiln::split_rows(counting(1860, 1), {0.7, 0.15, 0.15});
  CHECK(split[0].shape()[0] == 1302);
  CHECK(split[1].shape()[0] == 279);
}

TEST_CASE("split_rows errors: fractions that do not sum to 1 and parts that would be empty",
          "[train][data][split][errors]") {
  const Array source = counting(10, 1);
  CHECK(error_of<kiln::ValueError>([&] {
          kiln::split_rows(source, {0.5, 0.4});
        }) == "split_rows: fractions must sum to 1, got {0.5, 0.4} (sum 0.900000)");
  CHECK(error_of<kiln::ValueError>([&] {
          kiln::split_rows(source, {1.2, -0.2});
        }) == "split_rows: fractions must be positive, got {1.2, -0.2}");
  CHECK(error_of<kiln::ValueError>([&] {
          kiln::split_rows(source, {0.98, 0.01, 0.01});
        }) == "split_rows: part 1 (fraction 0.010000) of 10 rows would be empty");
}

TEST_CASE("shuffled_split_rows: seeded, a permutation of the rows, and inputs stay paired with targets",
          "[train][data][split]") {
  const Array inputs = counting(50, 2);
  Array targets(Shape{50, 1}, kiln::DType::float64);
  for (std::size_t row = 0; row < 50; ++row) targets.set_flat(row, inputs.flat(row * 2));

  const std::vector<Array> x = kiln::shuffled_split_rows(inputs, {0.8, 0.2}, 42);
  const std::vector<Array> y = kiln::shuffled_split_rows(targets, {0.8, 0.2}, 42);
  REQUIRE(x.size() == 2);
  CHECK(x[0].shape() == Shape{40, 2});
  CHECK(x[1].shape() == Shape{10, 2});
  std::vector<double> first_values;
  for (std::size_t part = 0; part < 2; ++part)
    for (std::size_t row = 0; row < static_cast<std::size_t>(x[part].shape()[0]); ++row) {
      CHECK(y[part].flat(row) == x[part].flat(row * 2));
      first_values.push_back(x[part].flat(row * 2));
    }
  CHECK(first_values != inputs.to_vector<double>());  // shuffled...
  std::sort(first_values.begin(), first_values.end());
  std::vector<double> expected;
  for (std::size_t row = 0; row < 50; ++row) expected.push_back(inputs.flat(row * 2));
  CHECK(first_values == expected);  // ...but every row exactly once

  CHECK(kiln::shuffled_split_rows(inputs, {0.8, 0.2}, 42)[0].bitwise_equal(x[0]));
  CHECK_FALSE(kiln::shuffled_split_rows(inputs, {0.8, 0.2}, 43)[0].bitwise_equal(x[0]));
  CHECK(kiln::shuffled_row_order(5, 7) == kiln::shuffled_row_order(5, 7));
  CHECK(error_of<kiln::ValueError>([&] { kiln::take_rows(inputs, {50}); }) ==
        "take_rows: row 50 is out of range for 50 rows");
}

// ---- scaling ---------------------------------------------------------------------------------------------

TEST_CASE("Standardizer: statistics come from the training part only", "[train][data][scaling]") {
  // Training rows hold 1..4 and 10, 20, 30, 40; the test rows are far away and must not move the statistics.
  const Array data =
      Array::from_vector(std::vector<double>{1, 10, 2, 20, 3, 30, 4, 40, 100, 1000, 200, 2000}, Shape{6, 2});
  const std::vector<Array> split = kiln::split_rows(data, {4.0 / 6, 2.0 / 6});
  kiln::Standardizer standardizer;
  standardizer.fit(split[0]);
  CHECK(standardizer.mean() == std::vector<double>{2.5, 25});
  CHECK(standardizer.standard_deviation()[0] == Approx(std::sqrt(1.25)).epsilon(1e-15));
  CHECK(standardizer.standard_deviation()[1] == Approx(std::sqrt(125.0)).epsilon(1e-15));

  const Array train = standardizer.transform(split[0]);
  CHECK(train.flat(0) == Approx(-1.5 / std::sqrt(1.25)).epsilon(1e-15));
  CHECK(train.flat(7) == Approx(15 / std::sqrt(125.0)).epsilon(1e-15));
  const Array test = standardizer.transform(split[1]);
  CHECK(test.flat(0) == Approx(97.5 / std::sqrt(1.25)).epsilon(1e-15));

  const Array restored = standardizer.inverse_transform(test);
  for (std::size_t i = 0; i < restored.size(); ++i) CHECK(restored.flat(i) == Approx(split[1].flat(i)).epsilon(1e-15));

  const kiln::Standardizer reloaded(standardizer.mean(), standardizer.standard_deviation());
  CHECK(reloaded.transform(split[1]).bitwise_equal(test));
}

TEST_CASE("Standardizer: constant features, windows, float32 and misuse", "[train][data][scaling]") {
  const Array constant = Array::from_vector(std::vector<float>{5, 1, 5, 3}, Shape{2, 2});
  kiln::Standardizer standardizer;
  standardizer.fit(constant);
  CHECK(standardizer.standard_deviation() == std::vector<double>{1, 1});
  const Array scaled = standardizer.transform(constant);
  CHECK(scaled.dtype() == kiln::DType::float32);
  CHECK(scaled.to_vector<float>() == std::vector<float>{0, -1, 0, 1});

  const Array windows = kiln::sliding_windows(counting(5, 2), 2);  // statistics over samples and steps
  CHECK(kiln::Standardizer().fit(windows).mean() == std::vector<double>{4, 5});

  CHECK(error_of<kiln::ValueError>([&] { kiln::Standardizer().transform(constant); }) ==
        "Standardizer::transform: call fit (or restore a fitted state) first");
  CHECK(error_of<kiln::ShapeError>([&] { standardizer.transform(counting(2, 3)); }) ==
        "Standardizer::transform: was fitted on 2 features (the last axis) (data=(2, 3))");
  CHECK(error_of<kiln::ShapeError>([&] { kiln::Standardizer().fit(counting(4, 1).reshape(Shape{4})); }) ==
        "Standardizer::fit: expects (samples, ..., features); reshape a 1-D series to (n, 1) (data=(4,))");
  const Array with_nan = Array::from_vector(std::vector<double>{1, NAN}, Shape{1, 2});
  CHECK(error_of<kiln::ValueError>([&] { kiln::Standardizer().fit(with_nan); }).find("sample 0, feature 1 is nan") !=
        std::string::npos);
  CHECK_THROWS_AS(kiln::Standardizer({1.0}, {0.0}), kiln::ValueError);
}

TEST_CASE("MinMaxScaler: the training range maps onto -1 to 1", "[train][data][scaling]") {
  const Array data = Array::from_vector(std::vector<double>{0, 7, 10, 7, 5, 7, 20, 7}, Shape{4, 2});
  const std::vector<Array> split = kiln::split_rows(data, {0.75, 0.25});
  kiln::MinMaxScaler scaler;
  scaler.fit(split[0]);
  CHECK(scaler.data_min() == std::vector<double>{0, 7});
  CHECK(scaler.data_max() == std::vector<double>{10, 7});
  const Array scaled = scaler.transform(data);
  // 20 lies beyond the training range, so it maps beyond 1; the constant feature maps to low.
  CHECK(scaled.to_vector<double>() == std::vector<double>{-1, -1, 1, -1, 0, -1, 3, -1});
  CHECK(scaler.inverse_transform(scaled).to_vector<double>() == data.to_vector<double>());

  const kiln::MinMaxScaler unit(scaler.data_min(), scaler.data_max(), 0, 1);
  CHECK(unit.transform(split[0]).to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0.5, 0});
  CHECK_THROWS_AS(kiln::MinMaxScaler(1, 1), kiln::ValueError);
}

// ---- returns --------------------------------------------------------------------------------------------

TEST_CASE("log_returns: log of consecutive price ratios, checked on the EU stock file", "[train][data][returns]") {
  const Array prices = Array::from_vector(std::vector<double>{100, 10, 110, 5, 121, 20}, Shape{3, 2});
  const Array returns = kiln::log_returns(prices);
  REQUIRE(returns.shape() == Shape{2, 2});
  CHECK(returns.flat(0) == Approx(std::log(1.1)).epsilon(1e-15));
  CHECK(returns.flat(1) == Approx(std::log(0.5)).epsilon(1e-15));
  CHECK(returns.flat(2) == Approx(std::log(1.1)).epsilon(1e-15));
  CHECK(returns.flat(3) == Approx(std::log(4.0)).epsilon(1e-15));

  CsvOptions options;
  options.skip_index_column = true;
  options.dtype = kiln::DType::float64;
  const Array stock_returns = kiln::log_returns(kiln::read_csv(shipped_data("eu_stock_markets.csv"), options).values);
  REQUIRE(stock_returns.shape() == Shape{1859, 4});
  CHECK(stock_returns.flat(0) == Approx(std::log(1613.63 / 1628.75)).epsilon(1e-15));
  CHECK(at(stock_returns, 1858, 3) == Approx(std::log(5455 / 5399.5)).epsilon(1e-15));

  const Array bad = Array::from_vector(std::vector<double>{1, 2, 3, 0}, Shape{2, 2});
  CHECK(error_of<kiln::ValueError>([&] { kiln::log_returns(bad); }) ==
        "log_returns: the price at row 1, column 1 is 0.000000; prices must be positive and finite");
  CHECK_THROWS_AS(kiln::log_returns(counting(1, 2)), kiln::ValueError);
}

TEST_CASE("pad_sequences pads and truncates as Keras's, and padding_mask marks the tokens",
          "[train][data][sequences]") {
  const std::vector<std::vector<std::int64_t>> sequences = {{1, 2, 3}, {4}, {5, 6, 7, 8, 9}, {}};
  auto rows = [](const kiln::Array& a) {
    std::vector<double> values;
    for (std::size_t i = 0; i < a.size(); ++i) values.push_back(a.flat(i));
    return values;
  };
  // Keras: pre-padding to the longest, 5.
  const kiln::Array pre = kiln::pad_sequences(sequences);
  REQUIRE(pre.shape() == kiln::Shape{4, 5});
  CHECK(rows(pre) == std::vector<double>{0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0});
  kiln::PadOptions options;
  options.maxlen = 3;
  options.padding = "post";
  options.truncating = "post";
  options.value = -1;
  CHECK(rows(kiln::pad_sequences(sequences, options)) == std::vector<double>{1, 2, 3, 4, -1, -1, 5, 6, 7, -1, -1, -1});
  options.truncating = "pre";
  CHECK(rows(kiln::pad_sequences(sequences, options)) == std::vector<double>{1, 2, 3, 4, -1, -1, 7, 8, 9, -1, -1, -1});
  CHECK(rows(kiln::padding_mask(pre)) ==
        std::vector<double>{0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0});
  // Rounded up to a multiple of 4: the longest, 5, becomes 8, so batches come in few lengths.
  kiln::PadOptions rounded;
  rounded.padding = "post";
  rounded.pad_to_multiple_of = 4;
  const kiln::Array eight = kiln::pad_sequences(sequences, rounded);
  REQUIRE(eight.shape() == kiln::Shape{4, 8});
  CHECK(rows(eight) == std::vector<double>{1, 2, 3, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
                                           5, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  rounded.pad_to_multiple_of = 0;
  CHECK_THROWS_WITH(kiln::pad_sequences(sequences, rounded), Catch::Contains("pad_to_multiple_of"));
  options.padding = "middle";
  CHECK_THROWS_WITH(kiln::pad_sequences(sequences, options), Catch::Contains("padding must be"));
}

TEST_CASE("read_csv: skip_rows drops a preamble and comment lines are skipped anywhere", "[train][data][csv]") {
  const TempDirectory dir("skip_rows");
  const std::string path = dir.write("noted.csv",
                                     "Exported by a logger, 2026-12-02\n"
                                     "\n"
                                     "temperature,humidity\n"
                                     "# calibrated sensors\n"
                                     "21.5,40\n"
                                     "  # a pause\n"
                                     "22.0,41\n");
  CsvOptions options;
  options.skip_rows = 2;
  options.comment = '#';
  const kiln::CsvTable table = kiln::read_csv(path, options);
  CHECK(table.column_names == std::vector<std::string>{"temperature", "humidity"});
  REQUIRE(table.values.shape() == Shape{2, 2});
  CHECK(at(table.values, 1, 0) == 22.0f);
  // Without them the preamble is read as the header and the comment as a row: an error naming its line.
  options.skip_rows = 1;
  options.comment = '\0';
  CHECK_THAT(csv_error<kiln::ValueError>(path, options), Catch::Contains("noted.csv:4"));
  options.skip_rows = -1;
  CHECK_THROWS_AS(kiln::read_csv(path, options), kiln::ConfigError);
  options.skip_rows = 0;
  options.comment = ',';
  CHECK_THROWS_WITH(kiln::read_csv(path, options), Catch::Contains("comment character"));
}

TEST_CASE("to_categorical makes one-hot rows as Keras's, dropping a last axis of 1", "[train][data][labels]") {
  const kiln::Array ids = kiln::Array::from_vector(std::vector<double>{2, 0, 1, 2}, {4, 1});
  const kiln::Array one_hot = kiln::to_categorical(ids);
  REQUIRE(one_hot.shape() == Shape{4, 3});
  CHECK(one_hot.to_vector<float>() == std::vector<float>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(kiln::to_categorical(ids, 5, kiln::DType::float64).shape() == Shape{4, 5});
  const kiln::Array grid = kiln::Array::from_vector(std::vector<double>{1, 0, 0, 1}, {2, 2});
  CHECK(kiln::to_categorical(grid).shape() == Shape{2, 2, 2});
  CHECK_THROWS_WITH(kiln::to_categorical(ids, 2), Catch::Contains("not below num_classes = 2"));
  CHECK_THROWS_WITH(kiln::to_categorical(kiln::Array::from_vector(std::vector<double>{0.5}, {1})),
                    Catch::Contains("not a class id"));
  CHECK_THROWS_AS(kiln::to_categorical(kiln::Array::from_vector(std::vector<double>{-1}, {1})), kiln::ValueError);
  CHECK_THROWS_AS(kiln::to_categorical(kiln::Array::from_vector(std::vector<double>{INFINITY}, {1})), kiln::ValueError);
  CHECK_THROWS_AS(kiln::to_categorical(kiln::Array::from_vector(std::vector<double>{1e30}, {1})), kiln::ValueError);
}

TEST_CASE("train_test_split: seeded, disjoint and covering, stratified keeps each class's share",
          "[train][data][splits]") {
  // 100 rows, classes 0, 1, 2 in 70 / 25 / 5; x holds the row number so the rows can be traced.
  std::vector<double> rows, labels;
  for (int i = 0; i < 100; ++i) {
    rows.push_back(i);
    labels.push_back(i < 70 ? 0 : i < 95 ? 1 : 2);
  }
  const kiln::Array x = kiln::Array::from_vector(rows, {100, 1});
  const kiln::Array y = kiln::Array::from_vector(labels, {100});
  const std::vector<kiln::Array> parts = kiln::train_test_split({x, y}, 0.2, 7, y);
  REQUIRE(parts.size() == 4);
  CHECK(parts[0].shape() == Shape{80, 1});
  CHECK(parts[1].shape() == Shape{20, 1});
  std::vector<int> seen(100, 0);
  for (int part : {0, 1})
    for (std::size_t i = 0; i < parts[part].size(); ++i) ++seen[static_cast<std::size_t>(parts[part].flat(i))];
  CHECK(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  // Rows and labels stay paired, and the test part holds 14 / 5 / 1 of the classes.
  std::vector<int> per_class(3, 0);
  for (std::size_t i = 0; i < 20; ++i) {
    const double row = parts[1].flat(i);
    CHECK(parts[3].flat(i) == labels[static_cast<std::size_t>(row)]);
    ++per_class[static_cast<std::size_t>(parts[3].flat(i))];
  }
  CHECK(per_class == std::vector<int>{14, 5, 1});
  // The same seed splits the same way; another seed differently.
  CHECK(kiln::train_test_split({x}, 0.2, 7, y)[1].bitwise_equal(parts[1]));
  CHECK_FALSE(kiln::train_test_split({x}, 0.2, 8, y)[1].bitwise_equal(parts[1]));
  // Unstratified: ceil(0.25 · 10) = 3 test rows.
  const std::vector<kiln::Array> plain = kiln::train_test_split({kiln::Array({10, 2})}, 0.25, 1);
  CHECK(plain[1].shape() == Shape{3, 2});
  CHECK(plain[0].shape() == Shape{7, 2});

  CHECK_THROWS_WITH(kiln::train_test_split({x}, 1.0), Catch::Contains("test_size"));
  CHECK_THROWS_WITH(kiln::train_test_split({x, kiln::Array({99})}, 0.2), Catch::Contains("rows"));
  CHECK_THROWS_AS(kiln::train_test_split({x}, 0.2, 0, kiln::Array({50})), kiln::ShapeError);
  // read_csv's labels are (rows, 1): stratify takes them as they are, as fit takes them.
  const std::vector<kiln::Array> column = kiln::train_test_split({x, y}, 0.2, 7, y.reshape({100, 1}));
  CHECK(column[1].bitwise_equal(parts[1]));
  CHECK_THROWS_AS(kiln::train_test_split({x}, 0.2, 0, kiln::Array({100, 2})), kiln::ShapeError);
}

TEST_CASE("negative column indices count from the end, for values, labels and text", "[train][data][csv]") {
  const TempDirectory directory("negative");
  // scikit-learn's iris.csv starts with a line that is neither a header nor data.
  const std::string iris = directory.write("iris.csv",
                                           "3,4,setosa,versicolor,virginica\n"
                                           "5.1,3.5,1.4,0.2,0\n"
                                           "7.0,3.2,4.7,1.4,1\n"
                                           "6.3,3.3,6.0,2.5,2\n");
  CHECK(csv_error<kiln::ValueError>(iris).find("skip_rows = 1") != std::string::npos);
  CsvOptions options;
  options.skip_rows = 1;
  options.label_indices = {-1};
  const kiln::CsvTable table = kiln::read_csv(iris, options);
  CHECK(table.values.shape() == Shape{3, 4});
  CHECK(table.labels.shape() == Shape{3, 1});
  CHECK(table.labels.to_vector<float>() == std::vector<float>{0, 1, 2});
  options = {};
  options.skip_rows = 1;
  options.column_indices = {-5, -2};
  CHECK(kiln::read_csv(iris, options).values.to_vector<float>() ==
        std::vector<float>{5.1f, 0.2f, 7.0f, 1.4f, 6.3f, 2.5f});
  const std::string named = directory.write("named.csv", "x,kind\n1,a\n2,b\n");
  options = {};
  options.text_indices = {-1};
  const kiln::CsvTable text = kiln::read_csv(named, options);
  CHECK(text.text.at(0) == std::vector<std::string>{"a", "b"});
  CHECK(text.values.to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("argmax and confusion_matrix: a classifier's predicted classes and its mistakes", "[train][data][labels]") {
  const kiln::Array scores = kiln::Array::from_vector(std::vector<float>{0.1f, 0.7f, 0.2f,  // 1
                                                                         0.5f, 0.5f, 0.0f,  // 0: the first wins ties
                                                                         0.0f, 0.1f, 0.9f,  // 2
                                                                         0.3f, NAN, 0.9f},  // 1: NaN is the largest
                                                      {4, 3});
  const kiln::Array classes = kiln::argmax(scores);
  CHECK(classes.shape() == Shape{4});
  CHECK(classes.to_vector<float>() == std::vector<float>{1, 0, 2, 1});
  CHECK(kiln::argmax(scores, 0).to_vector<float>() == std::vector<float>{1, 3, 2});
  const kiln::Array cube = kiln::Array::from_vector(std::vector<double>{1, 5, 3, 2, 0, 9, 4, 4}, {2, 2, 2});
  CHECK(kiln::argmax(cube, 1).shape() == Shape{2, 2});
  CHECK(kiln::argmax(cube, 1).to_vector<double>() == std::vector<double>{1, 0, 1, 0});
  CHECK(kiln::argmax(cube, 1).dtype() == kiln::DType::float64);
  CHECK_THROWS_AS(kiln::argmax(scores, 2), kiln::ShapeError);
  CHECK_THROWS_AS(kiln::argmax(kiln::Array({3, 0})), kiln::ShapeError);

  // Rows: the true class; columns: the predicted one. Labels as (n,), (n, 1) or one-hot rows all work.
  const kiln::Array truth = kiln::Array::from_vector(std::vector<float>{1, 0, 2, 2}, {4});
  const kiln::Array counts = kiln::confusion_matrix(truth, scores);
  CHECK(counts.shape() == Shape{3, 3});
  CHECK(counts.dtype() == kiln::DType::float64);
  CHECK(counts.to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 1, 1});
  CHECK(kiln::confusion_matrix(truth.reshape({4, 1}), classes).bitwise_equal(counts));
  CHECK(kiln::confusion_matrix(kiln::to_categorical(truth), classes).bitwise_equal(counts));
  CHECK(kiln::confusion_matrix(truth, classes, 5).shape() == Shape{5, 5});
  CHECK_THROWS_WITH(kiln::confusion_matrix(truth, classes, 2), Catch::Contains("class 2 is not below num_classes = 2"));
  CHECK_THROWS_WITH(kiln::confusion_matrix(truth, kiln::Array({3})), Catch::Contains("4 labels but 3 predictions"));
  CHECK_THROWS_WITH(kiln::confusion_matrix(kiln::Array::from_vector(std::vector<float>{1.5f}, {1}), kiln::Array({1})),
                    Catch::Contains("is 1.5") && Catch::Contains("not a class id"));
}
