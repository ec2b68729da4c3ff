#include <kiln/data/data.hpp>

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
#include <kiln/data/detail/csv_stream.hpp>

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
  CsvLineReader(const std::string& path, const CsvOptions& options)
      : path_(path), skip_rows_(options.skip_rows), comment_(options.comment) {
    namespace fs = std::filesystem;
    std::error_code error;
    if (!fs::exists(path, error)) throw FileNotFoundError("read_csv: " + path + ": no such file");
    if (fs::is_directory(path, error)) throw ValueError("read_csv: cannot open '" + path + "': it is a directory");
    stream_.open(path, std::ios::binary);
    if (!stream_) throw ValueError("read_csv: cannot open '" + path + "': " + std::strerror(errno));
  }

  // The next line that is not blank, skipped (the first skip_rows) or a comment, into `line` (its buffer is
  // reused); false at the end of the file. Line numbers count every line, so messages match an editor's.
  bool next(CsvLine& line) {
    while (std::getline(stream_, line.text)) {
      line.number = ++line_number_;
      std::string& text = line.text;
      if (line_number_ <= skip_rows_) continue;
      if (!text.empty() && text.back() == '\r') text.pop_back();                      // files written on Windows
      if (line_number_ == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // Excel's UTF-8 mark
      const std::size_t first = text.find_first_not_of(" \t");
      if (first == std::string::npos) continue;
      if (comment_ != '\0' && text[first] == comment_) continue;
      return true;
    }
    if (stream_.bad())
      throw ValueError("read_csv: reading '" + path_ + "' failed after line " + std::to_string(line_number_));
    return false;
  }

 private:
  std::string path_;
  std::int64_t skip_rows_;
  char comment_;
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
  // Text columns given by index hold text in data rows too: they tell nothing and are left out.
  auto is_text = [&](std::size_t index) {
    return std::any_of(options.text_indices.begin(), options.text_indices.end(), [&](std::int64_t given) {
      return given == static_cast<std::int64_t>(index) ||
             given + static_cast<std::int64_t>(fields) == static_cast<std::int64_t>(index);
    });
  };
  std::size_t numbers = 0, text = 0;
  std::string scratch;
  for_each_field(first.text, options.delimiter, location(path, first.number), scratch,
                 [&](std::string_view field, std::size_t index) {
                   if (index < start) return;
                   if (is_text(index))
                     ++text;
                   else
                     numbers += is_number(field);
                 });
  if (numbers == 0) return text == 0 || fields > start + text;  // text columns alone cannot tell
  if (numbers + start + text >= fields) return false;
  throw ValueError(location(path, first.number) +
                   ": cannot tell whether this line is a header (some fields are "
                   "numbers, some are not); set CsvOptions::header to CsvHeader::present or CsvHeader::absent, or, "
                   "when the file starts with a line that is neither a header nor data (scikit-learn's "
                   "'150,4,setosa,versicolor,virginica'), skip it with CsvOptions::skip_rows = 1");
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

// A negative index counts from the end, as in Python: -1 is the last column.
std::size_t column_by_index(std::int64_t wanted, const FileColumns& columns, const std::string& path) {
  const auto count = static_cast<std::int64_t>(columns.count());
  const std::int64_t index = wanted < 0 ? wanted + count : wanted;
  if (index < 0 || index >= count)
    throw ConfigError(path + ": column index " + std::to_string(wanted) + " is out of range; the file has " +
                      std::to_string(columns.count()) + " columns (" + columns.listed() + "), indices " +
                      std::to_string(-count) + " to " + std::to_string(count - 1));
  return static_cast<std::size_t>(index);
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

std::vector<std::size_t> label_columns(const FileColumns& columns, const CsvOptions& options, const std::string& path) {
  if (!options.label_names.empty() && !columns.has_header())
    throw ConfigError(path + ": labels are chosen by name, but the file has no header; use CsvOptions::label_indices");
  std::vector<std::size_t> labels;
  for (const std::string& name : options.label_names) labels.push_back(column_by_name(name, columns, path));
  for (std::int64_t index : options.label_indices) labels.push_back(column_by_index(index, columns, path));
  if (options.skip_index_column && std::find(labels.begin(), labels.end(), 0) != labels.end())
    throw ConfigError(path + ": column 0 ('" + columns.name(0) +
                      "') is a label, but skip_index_column says it is an index");
  return labels;
}

std::vector<std::size_t> text_columns(const FileColumns& columns, const CsvOptions& options, const std::string& path) {
  if (!options.text_names.empty() && !columns.has_header())
    throw ConfigError(path +
                      ": text columns are chosen by name, but the file has no header; use "
                      "CsvOptions::text_indices");
  std::vector<std::size_t> text;
  for (const std::string& name : options.text_names) text.push_back(column_by_name(name, columns, path));
  for (std::int64_t index : options.text_indices) text.push_back(column_by_index(index, columns, path));
  return text;
}

// The feature columns, then the label columns (CsvTable splits them after reading); never a text column.
ColumnChoice chosen_columns(const FileColumns& columns, const CsvOptions& options, const std::string& path) {
  if (!options.column_names.empty() && !columns.has_header())
    throw ConfigError(path +
                      ": columns are chosen by name, but the file has no header; use CsvOptions::column_indices");
  const std::vector<std::size_t> labels = label_columns(columns, options, path);
  const std::vector<std::size_t> text = text_columns(columns, options, path);
  auto is_text = [&](std::size_t column) { return std::find(text.begin(), text.end(), column) != text.end(); };
  for (std::size_t label : labels)
    if (is_text(label))
      throw ConfigError(path + ": column '" + columns.name(label) +
                        "' is both a label and a text column; read it as text and encode it with StringLookup");
  if (!labels.empty() || !text.empty()) {
    std::vector<std::size_t> chosen;
    if (options.column_names.empty() && options.column_indices.empty()) {
      for (std::size_t column = options.skip_index_column ? 1 : 0; column < columns.count(); ++column)
        if (std::find(labels.begin(), labels.end(), column) == labels.end() && !is_text(column))
          chosen.push_back(column);
    } else {
      chosen = chosen_columns(
                   columns,
                   [&] {
                     CsvOptions features = options;
                     features.label_names.clear();
                     features.label_indices.clear();
                     features.text_names.clear();
                     features.text_indices.clear();
                     return features;
                   }(),
                   path)
                   .list();
      for (std::size_t column : chosen)
        if (is_text(column))
          throw ConfigError(path + ": column '" + columns.name(column) + "' is chosen as numbers and as text");
    }
    if (chosen.empty() && text.empty()) throw ValueError(path + ": no feature columns are left besides the labels");
    chosen.insert(chosen.end(), labels.begin(), labels.end());
    return ColumnChoice(std::move(chosen));
  }
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
  if (!is_floating(options.dtype))
    throw DTypeError("read_csv('" + path + "'): CsvOptions::dtype must be float32 or float64, not " +
                     dtype_name(options.dtype));
  if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r')
    throw ConfigError("read_csv('" + path + "'): the delimiter cannot be a quote or a line break");
  if (!options.column_names.empty() && !options.column_indices.empty())
    throw ConfigError("read_csv('" + path + "'): choose columns by name or by index, not both");
  if (!options.label_names.empty() && !options.label_indices.empty())
    throw ConfigError("read_csv('" + path + "'): choose labels by name or by index, not both");
  if (!options.text_names.empty() && !options.text_indices.empty())
    throw ConfigError("read_csv('" + path + "'): choose text columns by name or by index, not both");
  if (options.skip_rows < 0)
    throw ConfigError("read_csv('" + path + "'): skip_rows must not be negative, got " +
                      std::to_string(options.skip_rows));
  if (options.comment != '\0' && (options.comment == options.delimiter || options.comment == '"' ||
                                  options.comment == '\n' || options.comment == '\r'))
    throw ConfigError("read_csv('" + path +
                      "'): the comment character cannot be the delimiter, a quote or a line break");
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
    const std::size_t base = values.grow(columns_.size());
    read_into(line, [&](std::size_t slot, double value) { values.set(base + slot, value); });
  }

  // The row's chosen values, each given to set(slot, value).
  template <class Set>
  void read_into(const CsvLine& line, Set set) {
    const std::string where = location(parser_.path, line.number);
    const std::size_t fields = parser_.columns.count();
    // Counted before any field is parsed, so a ragged row is reported as such, not by its first odd field.
    const std::size_t count =
        for_each_field(line.text, parser_.options.delimiter, where, scratch_, [](std::string_view, std::size_t) {});
    if (count != fields)
      throw ValueError(where + ": " + std::to_string(count) + " fields, but line " + std::to_string(first_line_) +
                       " has " + std::to_string(fields));
    std::size_t next = 0;  // into by_column_
    for_each_field(line.text, parser_.options.delimiter, where, scratch_,
                   [&](std::string_view field, std::size_t column) {
                     if (columns_.is_run()) {
                       if (column >= columns_.first() && column - columns_.first() < columns_.size())
                         set(column - columns_.first(), parser_.parse(field, line.number, column));
                       return;
                     }
                     for (; next < by_column_.size() && by_column_[next].first == column; ++next)
                       set(by_column_[next].second, parser_.parse(field, line.number, column));
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

// The first line of a file, read as a header or kept as the first row.
struct FileStart {
  CsvLine line;
  bool has_header = false;
  FileColumns columns{{}, 0};
};

FileStart read_start(CsvLineReader& reader, const std::string& path, const CsvOptions& options) {
  FileStart start;
  if (!reader.next(start.line)) throw ValueError(path + ": the file is empty");
  std::string scratch;
  const std::size_t fields = for_each_field(start.line.text, options.delimiter, location(path, start.line.number),
                                            scratch, [](std::string_view, std::size_t) {});
  start.has_header = first_line_is_header(start.line, fields, options, path);
  start.columns = FileColumns(
      start.has_header ? split_fields(start.line, options.delimiter, path) : std::vector<std::string>{}, fields);
  return start;
}

// The text columns' fields of each row (a second pass over the line: text columns are few).
class TextReader {
 public:
  TextReader(std::vector<std::size_t> columns, char delimiter, const std::string& path)
      : columns_(std::move(columns)), delimiter_(delimiter), path_(path), values_(columns_.size()) {}
  void read(const CsvLine& line) {
    for_each_field(line.text, delimiter_, location(path_, line.number), scratch_,
                   [&](std::string_view field, std::size_t column) {
                     for (std::size_t slot = 0; slot < columns_.size(); ++slot)
                       if (columns_[slot] == column) values_[slot].emplace_back(field);
                   });
  }
  std::vector<std::vector<std::string>>& values() { return values_; }

 private:
  std::vector<std::size_t> columns_;
  char delimiter_;
  const std::string& path_;
  std::vector<std::vector<std::string>> values_;
  std::string scratch_;
};

// read_csv without the column names when `names` is null; the text columns into `text` when it is not.
Array read_values(const std::string& path, const CsvOptions& options, std::vector<std::string>* names,
                  CsvTable* text = nullptr) {
  check_options(options, path);
  CsvLineReader reader(path, options);
  FileStart start = read_start(reader, path, options);
  CsvLine& line = start.line;
  const bool has_header = start.has_header;
  const FileColumns& columns = start.columns;
  const ValueParser parser{path, columns, options};
  RowReader rows(parser, chosen_columns(columns, options, path), line.number);

  const std::int64_t first_line = line.number;
  ValueSink values(options.dtype);
  std::optional<TextReader> texts;
  if (text != nullptr) {
    const std::vector<std::size_t> text_list = text_columns(columns, options, path);
    for (std::size_t column : text_list) text->text_names.push_back(columns.name(column));
    if (!text_list.empty()) texts.emplace(text_list, options.delimiter, path);
  }
  std::int64_t count = 0;
  auto read_row = [&] {
    rows.read(line, values);
    if (texts) texts->read(line);
  };
  if (!has_header) {
    read_row();
    ++count;
  }
  for (; reader.next(line); ++count) read_row();
  if (texts) text->text = std::move(texts->values());
  if (count == 0) throw ValueError(location(path, first_line) + ": a header but no data rows");
  if (names)
    for (std::size_t slot = 0; slot < rows.columns().size(); ++slot)
      names->push_back(columns.name(rows.columns().column(slot)));
  return values.to_array(count, static_cast<std::int64_t>(rows.columns().size()));
}

// Columns [first, first + count) of a (rows, columns) array.
Array column_range(const Array& values, std::int64_t first, std::int64_t count) {
  const std::int64_t rows = values.shape()[0], width = values.shape()[1];
  Array part(Shape{rows, count}, values.dtype());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < count; ++c)
      part.set_flat(static_cast<std::size_t>(r * count + c),
                    values.flat(static_cast<std::size_t>(r * width + first + c)));
  return part;
}

}  // namespace

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  CsvTable table;
  table.values = read_values(path, options, &table.column_names, &table);
  const auto labels = static_cast<std::int64_t>(options.label_names.size() + options.label_indices.size());
  if (labels == 0) return table;
  const std::int64_t features = table.values.shape()[1] - labels;
  table.labels = column_range(table.values, features, labels);
  table.values = column_range(table.values, 0, features);
  table.label_names.assign(table.column_names.begin() + features, table.column_names.end());
  table.column_names.resize(static_cast<std::size_t>(features));
  return table;
}

namespace detail {

struct CsvStream::State {
  std::string path;
  CsvOptions options;
  CsvLineReader reader;
  FileStart start;
  ValueParser parser;
  RowReader rows;
  bool pending_first = false;  // a headerless file's first line is its first row
  std::vector<std::string> names;
  State(const std::string& file, const CsvOptions& given)
      : path(file),
        options(given),
        reader(path, (check_options(given, file), given)),
        start(read_start(reader, path, options)),
        parser{path, start.columns, options},
        rows(parser, chosen_columns(start.columns, options, path), start.line.number),
        pending_first(!start.has_header) {
    for (std::size_t slot = 0; slot < rows.columns().size(); ++slot)
      names.push_back(start.columns.name(rows.columns().column(slot)));
  }
};

CsvStream::CsvStream(const std::string& path, const CsvOptions& options)
    : state_(std::make_unique<State>(path, options)) {}

CsvStream::~CsvStream() = default;

std::size_t CsvStream::width() const { return state_->rows.columns().size(); }

const std::vector<std::string>& CsvStream::names() const { return state_->names; }

bool CsvStream::next(double* values) {
  CsvLine& line = state_->start.line;
  if (state_->pending_first) {
    state_->pending_first = false;
  } else if (!state_->reader.next(line)) {
    return false;
  }
  state_->rows.read_into(line, [values](std::size_t slot, double value) { values[slot] = value; });
  return true;
}

Array read_csv_values(const std::string& path, const CsvOptions& options) {
  return read_values(path, options, nullptr);
}
}  // namespace detail

}  // namespace kiln
