// `kiln predict FILE INPUT.csv`: each CSV row is one sample, flattened; each output row is one sample's
// outputs, flattened, printed so that they read back as the same floats.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/data/data.hpp>
#include <kiln/data/lookup.hpp>
#include "commands.hpp"

namespace kiln::cli {
namespace {

// The model's only input shape, batch dimension first.
Shape single_input_shape(const ModelBase& model, const std::string& file) {
  if (model.num_inputs() != 1)
    throw ValueError(file + ": predict takes a model with one input; " + model.describe() + " has " +
                     std::to_string(model.num_inputs()) + " inputs");
  const Shape input = model.input_shapes().at(0);
  if (input.rank() < 1) throw ValueError(file + ": the model's input has no batch dimension: " + input.to_string());
  return input;
}

// The shape of one sample: the input shape without its batch dimension.
Shape sample_shape(const Shape& input) {
  Shape sample(std::vector<std::int64_t>(input.dims().begin() + 1, input.dims().end()));
  if (!sample.is_fully_defined())
    throw ValueError("predict: the model's input " + input.to_string() +
                     " has an unknown dimension besides the batch, so a CSV row cannot be shaped into a sample");
  return sample;
}

// The number of the file's line holding the first data row, counting as read_csv does: the skipped lines
// first, then blank lines do not count as rows, and a header is the first non-blank line.
std::int64_t first_data_line(const std::string& path, bool header, std::int64_t skip_rows) {
  std::ifstream in(path);
  std::string text;
  std::int64_t number = 0;
  int wanted = header ? 2 : 1;
  while (std::getline(in, text)) {
    ++number;
    if (number == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    if (number <= skip_rows) continue;
    if (text.find_first_not_of(" \t\r") != std::string::npos && --wanted == 0) return number;
  }
  return number;
}

// --columns: each entry an index (negative from the end) or, with a header, a name.
void choose_columns(const PredictOptions& options, CsvOptions& csv) {
  bool names = false, indices = false;
  for (const std::string& column : options.columns) {
    std::int64_t index = 0;
    const char* end = column.data() + column.size();
    const auto [stop, error] = std::from_chars(column.data(), end, index);
    if (error == std::errc() && stop == end) {
      csv.column_indices.push_back(index);
      indices = true;
    } else {
      if (!options.header)
        throw ValueError("--columns: '" + column + "' is not a column index, and names need --header");
      csv.column_names.push_back(column);
      names = true;
    }
  }
  if (names && indices) throw ValueError("--columns: give columns by index or by name, not both");
}

// The CSV's rows as a batch of samples of the model's input shape.
Array read_samples(const PredictOptions& options, const Shape& input, DType dtype) {
  CsvOptions csv;
  csv.header = options.header ? CsvHeader::present : CsvHeader::absent;
  csv.dtype = dtype;
  csv.skip_rows = options.skip_rows;
  choose_columns(options, csv);
  const Shape sample = sample_shape(input);
  const Array values = detail::read_csv_values(options.input_csv, csv);
  const std::int64_t expected = sample.num_elements();
  const std::int64_t given = values.shape()[1];
  if (given != expected)
    throw ValueError(options.input_csv + ":" +
                     std::to_string(first_data_line(options.input_csv, options.header, options.skip_rows)) +
                     ": a row of " + std::to_string(given) + " values, but the model's input " + input.to_string() +
                     " takes " + std::to_string(expected) + " values per sample");
  std::vector<std::int64_t> dims{values.shape()[0]};
  dims.insert(dims.end(), sample.dims().begin(), sample.dims().end());
  return values.reshape(Shape(dims));
}

std::int64_t row_width(const Array& output) {
  const std::int64_t rows = output.shape().rank() > 0 ? output.shape()[0] : 1;
  return rows > 0 ? static_cast<std::int64_t>(output.size()) / rows : 0;
}

// "output_0,output_1" for one output; "out0_0,out0_1,out1_0" for several.
std::string header_line(const std::vector<Array>& outputs) {
  std::string line;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::string prefix = outputs.size() == 1 ? "output_" : "out" + std::to_string(k) + "_";
    for (std::int64_t j = 0; j < row_width(outputs[k]); ++j)
      line += (line.empty() ? "" : ",") + prefix + std::to_string(j);
  }
  return line + '\n';
}

// Enough digits that the text reads back as the same float32 (9) or float64 (17); a NaN is "nan" whatever
// its sign bit (printf writes "-nan"), as NumPy and pandas write it.
void append_value(std::string& line, double value, DType dtype) {
  if (std::isnan(value)) {
    line += "nan";
    return;
  }
  char text[40];
  std::snprintf(text, sizeof text, dtype == DType::float32 ? "%.9g" : "%.17g", value);
  line += text;
}

// The names of a model's classes: the vocabulary of its one attached StringLookup (model assets that read as
// one) when that has an entry per output; empty otherwise.
std::vector<std::string> class_names(const Model& model, std::int64_t classes) {
  std::vector<std::string> found;
  int lookups = 0;
  for (const auto& [name, asset] : model->assets()) {
    try {
      const std::vector<std::string> vocabulary = StringLookup::from_config(asset).get_vocabulary();
      ++lookups;
      if (static_cast<std::int64_t>(vocabulary.size()) == classes) found = vocabulary;
    } catch (const Error&) {  // another kind of asset
    }
  }
  return lookups == 1 ? found : std::vector<std::string>{};
}

// A field of CSV: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// Each row's class: its largest output's name, or its index when there are no names.
std::vector<std::string> classes_of(const Array& output, const std::vector<std::string>& names) {
  const Array ids = argmax(output.reshape(Shape({output.shape()[0], row_width(output)})), -1);
  std::vector<std::string> classes;
  for (std::size_t row = 0; row < ids.size(); ++row) {
    const auto id = static_cast<std::size_t>(ids.flat(row));
    classes.push_back(names.empty() ? std::to_string(id) : csv_field(names.at(id)));
  }
  return classes;
}

void write_predictions(const std::vector<Array>& outputs, std::int64_t rows, const std::vector<std::string>& classes,
                       bool classes_only, std::ostream& out) {
  if (classes_only) {
    out << "class\n";
    for (const std::string& name : classes) out << name << '\n';
    return;
  }
  std::string header = header_line(outputs);
  if (!classes.empty()) header.insert(header.size() - 1, ",class");
  out << header;
  std::string line;
  for (std::int64_t row = 0; row < rows; ++row) {
    line.clear();
    for (const Array& output : outputs) {
      const std::int64_t width = row_width(output);
      for (std::int64_t j = 0; j < width; ++j) {
        if (!line.empty()) line += ',';
        append_value(line, output.flat(static_cast<std::size_t>(row * width + j)), output.dtype());
      }
    }
    if (!classes.empty()) line += "," + classes[static_cast<std::size_t>(row)];
    out << line << '\n';
  }
}

}  // namespace

void predict(const PredictOptions& options, std::ostream& out) {
  Model model = load_uncompiled(options.model_file);
  const Shape input = single_input_shape(*model, options.model_file);
  const Array samples = read_samples(options, input, model->input_dtypes().at(0));
  const std::vector<Array> outputs = model.predict(std::vector<Array>{samples}, options.batch_size);
  for (const Array& output : outputs)
    if (output.shape().rank() < 1 || output.shape()[0] != samples.shape()[0])
      throw ValueError("the model gave an output of shape " + output.shape().to_string() + " for " +
                       std::to_string(samples.shape()[0]) + " samples");
  // A classifier's class column: named by an attached StringLookup, or (with --classes) by index.
  std::vector<std::string> classes;
  if (outputs.size() == 1 && samples.shape()[0] > 0) {
    const std::vector<std::string> names = class_names(model, row_width(outputs[0]));
    if (!names.empty() || options.classes_only) classes = classes_of(outputs[0], names);
  } else if (options.classes_only) {
    throw ValueError("--classes takes a model with one output; " + model->describe() + " has " +
                     std::to_string(outputs.size()));
  }
  write_predictions(outputs, samples.shape()[0], classes, options.classes_only, out);
}

}  // namespace kiln::cli
