#include <kiln/train/data.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>

namespace kiln {

// ======================================== CSV ==========================================================

namespace {

// One non-blank line of the file. Its fields are found when they are read, one at a time, so a line of
// millions of numbers is never held as millions of strings.
struct CsvLine {
  std::int64_t number = 0;  // 1-based, counting blank lines, as an editor shows it
  std::string text;
};

// Spaces and tabs around a field are padding, unless the delimiter is one of them.
bool is_padding(char c, char delimiter) { return (c == ' ' || c == '\t') && c != delimiter; }

std::string_view trim_padding(std::string_view text, char delimiter) {
  std::size_t end = text.size();
  while (end > 0 && is_padding(text[end - 1], delimiter)) --end;
  std::size_t begin = 0;
  while (begin < end && is_padding(text[begin], delimiter)) ++begin;
  return text.substr(begin, end - begin);
}

std::string location(const std::string& path, std::int64_t line_number) {
  return path + ":" + std::to_string(line_number);
}

// Reads a quoted field starting at line[position] == '"' into `field` (RFC 4180: "" stands for one quote,
// and the delimiter is text inside quotes). Leaves `position` just past the closing quote.
void read_quoted_field(std::string_view line, std::size_t& position, std::string& field, const std::string& where) {
  field.clear();
  ++position;
  while (position < line.size()) {
    const char c = line[position++];
    if (c != '"') {
      field += c;
    } else if (position < line.size() && line[position] == '"') {
      field += '"';
      ++position;
    } else {
      return;
    }
  }
  throw ValueError(where + ": a quoted field is not closed (fields that span lines are not supported)");
}

// Calls visit(field, index) for every field of `line`, in order, and returns how many there are. A field is
// a view into the line, or into `scratch` for a quoted one: valid only during its call.
template <class Visit>
std::size_t for_each_field(std::string_view line, char delimiter, const std::string& where, std::string& scratch,
                           Visit&& visit) {
  std::size_t position = 0, index = 0;
  for (;;) {
    while (position < line.size() && is_padding(line[position], delimiter)) ++position;
    std::string_view field;
    if (position < line.size() && line[position] == '"') {
      read_quoted_field(line, position, scratch, where);
      while (position < line.size() && is_padding(line[position], delimiter)) ++position;
      if (position < line.size() && line[position] != delimiter)
        throw ValueError(where + ": field " + std::to_string(index) + " has text after its closing quote");
      field = scratch;
    } else {
      const std::size_t end = std::min(line.find(delimiter, position), line.size());
      field = trim_padding(line.substr(position, end - position), delimiter);
      position = end;
    }
    visit(field, index++);
    if (position >= line.size()) return index;
    ++position;  // past the delimiter; a trailing delimiter leaves one more (empty) field
  }
}

std::vector<std::string> split_fields(const CsvLine& line, char delimiter, const std::string& path) {
  std::vector<std::string> fields;
  std::string scratch;
  for_each_field(line.text, delimiter, location(path, line.number), scratch,
                 [&](std::string_view field, std::size_t) { fields.emplace_back(field); });
  return fields;
}

// Yields the non-blank lines of a file. Blank lines are skipped (as pandas does), because a trailing empty
// line is what many writers leave and is not a row.
class CsvLineReader {
 public:
  explicit CsvLineReader(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code error;
    if (!fs::exists(path, error)) throw ValueError("read_csv: cannot open '" + path + "': no such file");
    if (fs::is_directory(path, error)) throw ValueError("read_csv: cannot open '" + path + "': it is a directory");
    stream_.open(path, std::ios::binary);
    if (!stream_) throw ValueError("read_csv: cannot open '" + path + "': " + std::strerror(errno));
  }

  // The next non-blank line into `line` (its buffer is reused); false at the end of the file.
  bool next(CsvLine& line) {
    while (std::getline(stream_, line.text)) {
      line.number = ++line_number_;
      std::string& text = line.text;
      if (!text.empty() && text.back() == '\r') text.pop_back();                      // files written on Windows
      if (line_number_ == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // Excel's UTF-8 mark
      if (text.find_first_not_of(" \t") != std::string::npos) return true;
    }
    if (stream_.bad())
      throw ValueError("read_csv: reading '" + path_ + "' failed after line " + std::to_string(line_number_));
    return false;
  }

 private:
  std::string path_;
  std::ifstream stream_;
  std::int64_t line_number_ = 0;
};

enum class ParseResult { number, not_a_number, out_of_range };

ParseResult parse_number(std::string_view text, double& value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  // std::from_chars takes no leading '+', which other writers emit; it is locale-independent, unlike strtod.
  if (begin != end && *begin == '+' && end - begin > 1 && begin[1] != '-') ++begin;
  const auto [stop, error] = std::from_chars(begin, end, value);
  if (error == std::errc::result_out_of_range && stop == end) return ParseResult::out_of_range;
  if (error != std::errc() || stop != end || begin == end) return ParseResult::not_a_number;
  return ParseResult::number;
}

bool is_number(std::string_view text) {
  double ignored = 0;
  return parse_number(text, ignored) == ParseResult::number;
}

// Long fields are cut so that one bad cell cannot flood the message.
std::string quoted(std::string_view text) {
  constexpr std::size_t max_shown = 40;
  if (text.size() <= max_shown) return "\"" + std::string(text) + "\"";
  return "\"" + std::string(text.substr(0, max_shown)) + "...\"";
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) text += (i > 0 ? ", " : "") + names[i];
  return text;
}

// ---- header and column choice --------------------------------------------------------------------------

bool first_line_is_header(const CsvLine& first, std::size_t fields, const CsvOptions& options,
                          const std::string& path) {
  if (options.header != CsvHeader::detect) return options.header == CsvHeader::present;
  const std::size_t start = options.skip_index_column ? 1 : 0;
  std::size_t numbers = 0;
  std::string scratch;
  for_each_field(first.text, options.delimiter, location(path, first.number), scratch,
                 [&](std::string_view field, std::size_t index) { numbers += index >= start && is_number(field); });
  if (numbers == 0) return true;
  if (numbers + start >= fields) return false;
  throw ValueError(location(path, first.number) +
                   ": cannot tell whether this line is a header (some fields are "
                   "numbers, some are not); set CsvOptions::header to CsvHeader::present or CsvHeader::absent");
}

// The file's columns: the header's names, or "column_<i>" made when one is asked for, so a headerless line
// of a million values does not become a million strings.
class FileColumns {
 public:
  FileColumns(std::vector<std::string> header, std::size_t count) : header_(std::move(header)), count_(count) {}
  bool has_header() const { return !header_.empty(); }
  std::size_t count() const { return count_; }
  const std::vector<std::string>& header() const { return header_; }
  std::string name(std::size_t column) const {
    return has_header() ? header_[column] : "column_" + std::to_string(column);
  }
  // For messages: every name, or the first few of a wide file.
  std::string listed() const {
    constexpr std::size_t max_listed = 50;
    std::string text;
    for (std::size_t i = 0; i < std::min(count_, max_listed); ++i) text += (i > 0 ? ", " : "") + name(i);
    return count_ > max_listed ? text + ", ..." : text;
  }

 private:
  std::vector<std::string> header_;
  std::size_t count_;
};

// The column names closest to `wanted` (ignoring case), every one tied for closest, if they are close
// enough to be a plausible typo.
std::vector<std::string> plausible_typos(const std::string& wanted, const std::vector<std::string>& names) {
  std::vector<std::size_t> distances;
  for (const std::string& name : names) distances.push_back(edit_distance(wanted, name));
  const std::size_t best = *std::min_element(distances.begin(), distances.end());
  std::vector<std::string> nearest;
  if (best > std::max<std::size_t>(2, wanted.size() / 3)) return nearest;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (distances[i] == best) nearest.push_back("'" + names[i] + "'");
  return nearest;
}

ConfigError unknown_column(const std::string& path, const std::string& wanted, const FileColumns& columns) {
  std::string message = path + ": no column named '" + wanted + "'";
  const std::vector<std::string> nearest = plausible_typos(wanted, columns.header());
  if (!nearest.empty()) message += "; did you mean " + joined(nearest) + "?";
  return ConfigError(message + " (columns: " + columns.listed() + ")");
}

std::size_t column_by_name(const std::string& wanted, const FileColumns& columns, const std::string& path) {
  const std::vector<std::string>& names = columns.header();
  const auto found = std::find(names.begin(), names.end(), wanted);
  if (found == names.end()) throw unknown_column(path, wanted, columns);
  if (std::find(found + 1, names.end(), wanted) != names.end())
    throw ConfigError(path + ": more than one column is named '" + wanted + "'; choose by index instead");
  return static_cast<std::size_t>(found - names.begin());
}

std::size_t column_by_index(std::int64_t wanted, const FileColumns& columns, const std::string& path) {
  if (wanted < 0 || wanted >= static_cast<std::int64_t>(columns.count()))
    throw ConfigError(path + ": column index " + std::to_string(wanted) + " is out of range; the file has " +
                      std::to_string(columns.count()) + " columns (" + columns.listed() + ")");
  return static_cast<std::size_t>(wanted);
}

// The columns read, in the order they were chosen. Every column (or every one but the index) is a run
// kept as its bounds, not as a list of a million indices.
class ColumnChoice {
 public:
  ColumnChoice(std::size_t first, std::size_t count) : first_(first), count_(count) {}
  explicit ColumnChoice(std::vector<std::size_t> list) : count_(list.size()), list_(std::move(list)) {}
  std::size_t size() const { return count_; }
  bool is_run() const { return list_.empty(); }
  std::size_t first() const { return first_; }
  std::size_t column(std::size_t slot) const { return is_run() ? first_ + slot : list_[slot]; }
  const std::vector<std::size_t>& list() const { return list_; }

 private:
  std::size_t first_ = 0, count_ = 0;
  std::vector<std::size_t> list_;
};

ColumnChoice chosen_columns(const FileColumns& columns, const CsvOptions& options, const std::string& path) {
  if (!options.column_names.empty() && !columns.has_header())
    throw ConfigError(path +
                      ": columns are chosen by name, but the file has no header; use CsvOptions::column_indices");
  if (options.column_names.empty() && options.column_indices.empty()) {
    const std::size_t first = options.skip_index_column ? 1 : 0;
    if (first >= columns.count()) throw ValueError(path + ": no columns left to read after skipping the index column");
    return ColumnChoice(first, columns.count() - first);
  }
  std::vector<std::size_t> chosen;
  for (const std::string& name : options.column_names) chosen.push_back(column_by_name(name, columns, path));
  for (std::int64_t index : options.column_indices) chosen.push_back(column_by_index(index, columns, path));
  if (options.skip_index_column && std::find(chosen.begin(), chosen.end(), 0) != chosen.end())
    throw ConfigError(path + ": column 0 ('" + columns.name(0) +
                      "') is chosen, but skip_index_column says it is an index");
  return ColumnChoice(std::move(chosen));
}

void check_options(const CsvOptions& options, const std::string& path) {
  if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r')
    throw ConfigError("read_csv('" + path + "'): the delimiter cannot be a quote or a line break");
  if (!options.column_names.empty() && !options.column_indices.empty())
    throw ConfigError("read_csv('" + path + "'): choose columns by name or by index, not both");
}

// ---- values --------------------------------------------------------------------------------------------

// Everything a bad-value message names: where the field is and which column it belongs to.
struct ValueParser {
  const std::string& path;
  const FileColumns& columns;
  const CsvOptions& options;

  double parse(std::string_view text, std::int64_t line_number, std::size_t column) const {
    double value = 0;
    const ParseResult result = parse_number(text, value);
    if (result == ParseResult::number && (std::isfinite(value) || options.allow_non_finite))
      return check_range(value, text, line_number, column);
    if (text.empty() && options.allow_non_finite) return std::numeric_limits<double>::quiet_NaN();
    if (result == ParseResult::out_of_range) fail(text, line_number, column, "is out of range for float64");
    if (result == ParseResult::number)
      fail(text, line_number, column, "is not a finite number (set CsvOptions::allow_non_finite to accept it)");
    if (text.empty())
      fail(text, line_number, column,
           "is not a number (the field is empty; set CsvOptions::allow_non_finite to read missing values as NaN)");
    fail(text, line_number, column, "is not a number");
    return value;
  }

  // float32 holds up to ~3.4e38; past that the cast would silently give inf.
  double check_range(double value, std::string_view text, std::int64_t line_number, std::size_t column) const {
    if (options.dtype == DType::float32 && std::isfinite(value) &&
        std::fabs(value) > static_cast<double>(std::numeric_limits<float>::max()))
      fail(text, line_number, column, "is out of range for float32 (read with CsvOptions::dtype = float64)");
    return value;
  }

  [[noreturn]] void fail(std::string_view text, std::int64_t line_number, std::size_t column,
                         const std::string& reason) const {
    const std::string name = columns.has_header()
                                 ? "column '" + columns.name(column) + "' (index " + std::to_string(column) + ")"
                                 : "column index " + std::to_string(column);
    throw ValueError(location(path, line_number) + ": " + name + ": " + quoted(text) + " " + reason);
  }
};

// Values in the dtype asked for, as they are read: float32 data is never held as double too.
class ValueSink {
 public:
  explicit ValueSink(DType dtype) : dtype_(dtype) {}
  std::size_t grow(std::size_t count) {
    const std::size_t start = size();
    if (dtype_ == DType::float32)
      floats_.resize(start + count);
    else
      doubles_.resize(start + count);
    return start;
  }
  void set(std::size_t index, double value) {
    if (dtype_ == DType::float32)
      floats_[index] = static_cast<float>(value);
    else
      doubles_[index] = value;
  }
  std::size_t size() const { return dtype_ == DType::float32 ? floats_.size() : doubles_.size(); }
  Array to_array(std::int64_t rows, std::int64_t columns) const {
    if (dtype_ == DType::float32) return Array::from_vector(floats_, Shape{rows, columns});
    return Array::from_vector(doubles_, Shape{rows, columns});
  }

 private:
  DType dtype_;
  std::vector<float> floats_;
  std::vector<double> doubles_;
};

// The chosen columns' values of each row, appended in the order they were chosen. Fields are parsed as
// they are found; a column chosen twice is read twice.
class RowReader {
 public:
  RowReader(const ValueParser& parser, ColumnChoice columns, std::int64_t first_line)
      : parser_(parser), columns_(std::move(columns)), first_line_(first_line) {
    for (std::size_t slot = 0; slot < columns_.list().size(); ++slot)
      by_column_.emplace_back(columns_.list()[slot], slot);
    std::sort(by_column_.begin(), by_column_.end());
  }

  void read(const CsvLine& line, ValueSink& values) {
    const std::string where = location(parser_.path, line.number);
    const std::size_t fields = parser_.columns.count();
    // Counted before any field is parsed, so a ragged row is reported as such, not by its first odd field.
    const std::size_t count =
        for_each_field(line.text, parser_.options.delimiter, where, scratch_, [](std::string_view, std::size_t) {});
    if (count != fields)
      throw ValueError(where + ": " + std::to_string(count) + " fields, but line " + std::to_string(first_line_) +
                       " has " + std::to_string(fields));
    const std::size_t base = values.grow(columns_.size());
    std::size_t next = 0;  // into by_column_
    for_each_field(line.text, parser_.options.delimiter, where, scratch_,
                   [&](std::string_view field, std::size_t column) {
                     if (columns_.is_run()) {
                       if (column >= columns_.first() && column - columns_.first() < columns_.size())
                         values.set(base + column - columns_.first(), parser_.parse(field, line.number, column));
                       return;
                     }
                     for (; next < by_column_.size() && by_column_[next].first == column; ++next)
                       values.set(base + by_column_[next].second, parser_.parse(field, line.number, column));
                   });
  }

  const ColumnChoice& columns() const { return columns_; }

 private:
  const ValueParser& parser_;
  ColumnChoice columns_;
  std::vector<std::pair<std::size_t, std::size_t>> by_column_;  // (file column, slot) of a list, sorted
  std::int64_t first_line_;
  std::string scratch_;
};

// read_csv without the column names when `names` is null.
Array read_values(const std::string& path, const CsvOptions& options, std::vector<std::string>* names) {
  check_options(options, path);
  CsvLineReader reader(path);
  CsvLine line;
  if (!reader.next(line)) throw ValueError(path + ": the file is empty");
  std::string scratch;
  const std::size_t fields = for_each_field(line.text, options.delimiter, location(path, line.number), scratch,
                                            [](std::string_view, std::size_t) {});
  const bool has_header = first_line_is_header(line, fields, options, path);
  const FileColumns columns(has_header ? split_fields(line, options.delimiter, path) : std::vector<std::string>{},
                            fields);
  const ValueParser parser{path, columns, options};
  RowReader rows(parser, chosen_columns(columns, options, path), line.number);

  const std::int64_t first_line = line.number;
  ValueSink values(options.dtype);
  std::int64_t count = 0;
  if (!has_header) {
    rows.read(line, values);
    ++count;
  }
  for (; reader.next(line); ++count) rows.read(line, values);
  if (count == 0) throw ValueError(location(path, first_line) + ": a header but no data rows");
  if (names)
    for (std::size_t slot = 0; slot < rows.columns().size(); ++slot)
      names->push_back(columns.name(rows.columns().column(slot)));
  return values.to_array(count, static_cast<std::int64_t>(rows.columns().size()));
}

}  // namespace

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  CsvTable table;
  table.values = read_values(path, options, &table.column_names);
  return table;
}

namespace detail {
Array read_csv_values(const std::string& path, const CsvOptions& options) {
  return read_values(path, options, nullptr);
}
}  // namespace detail

// ==================================== shared helpers ===================================================

namespace {

void check_has_rows(const Array& array, const std::string& who) {
  if (array.empty() || array.shape().rank() == 0)
    throw ShapeError(who, "needs an array with a leading sample (or time) axis", {{"array", array.shape()}});
}

// Elements per row of axis 0, i.e. the product of the trailing dimensions.
std::size_t row_elements(const Array& array) {
  std::size_t elements = 1;
  for (int axis = 1; axis < array.shape().rank(); ++axis) elements *= static_cast<std::size_t>(array.shape()[axis]);
  return elements;
}

// `array`'s shape with axis 0 replaced by `leading` dimensions.
Shape with_leading_dims(const Array& array, std::vector<std::int64_t> leading) {
  const std::vector<std::int64_t>& dims = array.shape().dims();
  leading.insert(leading.end(), dims.begin() + 1, dims.end());
  return Shape(std::move(leading));
}

// Copies `count` rows starting at `source_row` into `destination` starting at `destination_row`.
// Both arrays share a dtype, so rows are moved as bytes.
void copy_rows(const Array& source, std::int64_t source_row, std::int64_t count, Array& destination,
               std::int64_t destination_row) {
  const std::size_t row_bytes = row_elements(source) * dtype_size(source.dtype());
  const auto* from = static_cast<const unsigned char*>(source.raw()) + static_cast<std::size_t>(source_row) * row_bytes;
  auto* to = static_cast<unsigned char*>(destination.raw()) + static_cast<std::size_t>(destination_row) * row_bytes;
  std::memcpy(to, from, static_cast<std::size_t>(count) * row_bytes);
}

void check_positive(std::int64_t value, const char* what, const std::string& who) {
  if (value < 1) throw ValueError(who + ": " + what + " must be at least 1, got " + std::to_string(value));
}

}  // namespace

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
