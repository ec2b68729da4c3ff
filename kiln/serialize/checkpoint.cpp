#include <kiln/serialize/checkpoint.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <ostream>
#include <system_error>
#include <utility>

#include <kiln/core/detail/python_float.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln {
namespace {

using detail::FormatPiece;
using detail::FormatSpec;
using detail::python_float;

// Widths and precisions beyond these are surely mistakes (Python takes them, and pads a file name with
// megabytes of spaces).
constexpr int kMaxWidth = 1024;
constexpr int kMaxPrecision = 100;

std::string quoted_field(const std::string& name, const std::string& spec_text) {
  return "{" + name + (spec_text.empty() ? "" : ":" + spec_text) + "}";
}

// printf of one double with one conversion ("%.*f"), any length.
std::string printf_double(char conversion, int precision, double value) {
  const char format[] = {'%', '.', '*', conversion, '\0'};
  const int size = std::snprintf(nullptr, 0, format, precision, value);
  std::string text(static_cast<std::size_t>(size) + 1, '\0');
  std::snprintf(text.data(), text.size(), format, precision, value);
  text.resize(static_cast<std::size_t>(size));
  return text;
}

// Python's format(value, ".{precision}") for a non-negative float: 'g' with at least one digit after the
// point in fixed notation, and scientific notation from exponent precision - 1 on.
std::string python_general(double value, int precision) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : "inf";
  const int digits = std::max(precision, 1);
  const std::string scientific = printf_double('e', digits - 1, value);  // rounded: "1.23e+02"
  const int exponent = std::stoi(scientific.substr(scientific.find('e') + 1));
  if (exponent >= -4 && exponent < digits - 1) {
    std::string fixed = printf_double('f', digits - 1 - exponent, value);
    while (fixed.back() == '0') fixed.pop_back();
    if (fixed.back() == '.') fixed += '0';
    return fixed;
  }
  const std::size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  return mantissa + scientific.substr(e);
}

bool is_align(char c) { return c == '<' || c == '>' || c == '^' || c == '='; }

// Reads [[fill]align][sign][0][width][.precision][type]; `where` names the field in messages.
FormatSpec parse_spec(const std::string& text, const std::string& where) {
  const auto fail = [&where, &text](const std::string& what) -> ConfigError {
    return ConfigError(
        where + ": format spec '" + text + "' " + what +
        " (kiln reads [[fill]align][sign][0][width][.precision][type] with type one of d f F e E g G %)");
  };
  FormatSpec spec;
  std::size_t i = 0;
  const std::size_t n = text.size();
  bool explicit_fill = false;
  if (n >= 2 && is_align(text[1])) {
    spec.fill = text[0];
    spec.align = text[1];
    explicit_fill = true;
    i = 2;
  } else if (n >= 1 && is_align(text[0])) {
    spec.align = text[0];
    i = 1;
  }
  if (i < n && (text[i] == '+' || text[i] == '-' || text[i] == ' ')) spec.sign = text[i++];
  if (i < n && (text[i] == 'z' || text[i] == '#'))
    throw fail(std::string("uses '") + text[i] + "', which kiln does not support");
  bool zero = false;
  if (i < n && text[i] == '0') {
    zero = true;
    ++i;
  }
  const auto read_number = [&](const char* what) {
    long long number = 0;
    const std::size_t start = i;
    while (i < n && text[i] >= '0' && text[i] <= '9') {
      number = number * 10 + (text[i++] - '0');
      if (number > 1'000'000) throw fail(std::string("has a ") + what + " that is too large");
    }
    return i == start ? -1LL : number;
  };
  if (const long long width = read_number("width"); width >= 0) {
    if (width > kMaxWidth) throw fail("has a width over " + std::to_string(kMaxWidth));
    spec.width = static_cast<int>(width);
  }
  if (i < n && (text[i] == ',' || text[i] == '_')) throw fail("groups digits, which kiln does not support");
  if (i < n && text[i] == '.') {
    ++i;
    const long long precision = read_number("precision");
    if (precision < 0) throw fail("has a '.' without a precision after it");
    if (precision > kMaxPrecision) throw fail("has a precision over " + std::to_string(kMaxPrecision));
    spec.precision = static_cast<int>(precision);
  }
  if (i < n) {
    const char type = text[i++];
    if (std::string("dfFeEgG%").find(type) == std::string::npos)
      throw fail(std::string("has the unknown type '") + type + "'");
    spec.type = type;
  }
  if (i < n) throw fail("has '" + text.substr(i) + "' after its type");
  if (zero) {
    if (!explicit_fill) spec.fill = '0';
    if (!spec.align) spec.align = '=';
  }
  return spec;
}

// Python's rules on which specs take which values.
void check_spec_kind(const FormatSpec& spec, bool integer, const std::string& where) {
  if (integer) {
    if (spec.precision >= 0 && (spec.type == '\0' || spec.type == 'd'))
      throw ConfigError(where + ": an integer field takes no precision unless formatted as a number (f, e, g or %)");
  } else if (spec.type == 'd') {
    throw ConfigError(where + ": format code 'd' is for integers, and this field is a number; use f, e or g");
  }
}

std::string pad(const std::string& sign, const std::string& body, const FormatSpec& spec) {
  const std::size_t length = sign.size() + body.size();
  if (static_cast<std::size_t>(spec.width) <= length) return sign + body;
  const std::size_t missing = static_cast<std::size_t>(spec.width) - length;
  const std::string fill(missing, spec.fill);
  switch (spec.align) {
    case '<':
      return sign + body + fill;
    case '^':
      return std::string(missing / 2, spec.fill) + sign + body + std::string(missing - missing / 2, spec.fill);
    case '=':
      return sign + fill + body;
    default:
      return fill + sign + body;
  }
}

std::string format_value(const FieldValue& value, const FormatSpec& spec) {
  bool negative = false;
  std::string body;
  if (const auto* integer = std::get_if<std::int64_t>(&value); integer && (spec.type == '\0' || spec.type == 'd')) {
    negative = *integer < 0;
    const std::uint64_t magnitude =
        negative ? 0 - static_cast<std::uint64_t>(*integer) : static_cast<std::uint64_t>(*integer);
    body = std::to_string(magnitude);
  } else {
    const double number = integer ? static_cast<double>(*integer) : std::get<double>(value);
    negative = std::signbit(number) && !std::isnan(number);  // Python prints NaN without a sign
    const double magnitude = std::fabs(number);
    const int precision = spec.precision < 0 ? 6 : spec.precision;
    switch (spec.type) {
      case '\0':
        body = spec.precision < 0 ? python_float(magnitude) : python_general(magnitude, spec.precision);
        break;
      case '%':
        body = printf_double('f', precision, magnitude * 100.0) + "%";
        break;
      default:
        body = printf_double(spec.type, precision, magnitude);
        break;
    }
  }
  const std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  return pad(sign, body, spec);
}

std::string key_list(const FieldValues& values) {
  std::string keys;
  for (const auto& [key, value] : values) keys += (keys.empty() ? "" : ", ") + key;
  return keys.empty() ? "(none)" : keys;
}

}  // namespace

// ---- FormatPattern ------------------------------------------------------------------------------------------

FormatPattern::FormatPattern(std::string pattern) : pattern_(std::move(pattern)) {
  const std::string where = "format pattern '" + pattern_ + "'";
  std::string text;
  const std::size_t n = pattern_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const char c = pattern_[i];
    if (c == '}') {
      if (i + 1 < n && pattern_[i + 1] == '}') {
        text += '}';
        ++i;
        continue;
      }
      throw ConfigError(where + ": single '}' at offset " + std::to_string(i) + " (write '}}' for a brace)");
    }
    if (c != '{') {
      text += c;
      continue;
    }
    if (i + 1 < n && pattern_[i + 1] == '{') {
      text += '{';
      ++i;
      continue;
    }
    const std::size_t close = pattern_.find_first_of("{}", i + 1);
    if (close == std::string::npos)
      throw ConfigError(where + ": '{' at offset " + std::to_string(i) + " is never closed (write '{{' for a brace)");
    if (pattern_[close] == '{')
      throw ConfigError(where + ": field at offset " + std::to_string(i) +
                        " has a '{' inside; kiln does not nest fields");
    const std::string content = pattern_.substr(i + 1, close - i - 1);
    const std::size_t colon = content.find(':');
    const std::string name = content.substr(0, colon);
    const std::string spec_text = colon == std::string::npos ? "" : content.substr(colon + 1);
    const std::string field = "{" + content + "}";
    if (name.empty())
      throw ConfigError(where + ": the field " + field + " has no name; name a key, as in {epoch} or {val_loss:.4f}");
    if (name.find('!') != std::string::npos)
      throw ConfigError(where + ": the field " + field + " has a conversion ('!'), which kiln does not support");
    if (name.find_first_of(".[") != std::string::npos)
      throw ConfigError(where + ": the field " + field +
                        " reads an attribute or an index; kiln fields are plain names");
    FormatPiece piece;
    piece.text = std::move(text);
    piece.field = name;
    piece.spec_text = spec_text;
    piece.spec = parse_spec(spec_text, where + ": field " + field);
    pieces_.push_back(std::move(piece));
    text.clear();
    i = close;
  }
  FormatPiece tail;
  tail.text = std::move(text);
  pieces_.push_back(std::move(tail));
}

std::vector<std::string> FormatPattern::fields() const {
  std::vector<std::string> names;
  for (const FormatPiece& piece : pieces_)
    if (!piece.field.empty()) names.push_back(piece.field);
  return names;
}

void FormatPattern::check_kind(const std::string& name, bool integer) const {
  for (const FormatPiece& piece : pieces_)
    if (piece.field == name)
      check_spec_kind(piece.spec, integer,
                      "format pattern '" + pattern_ + "': field " + quoted_field(piece.field, piece.spec_text));
}

std::string FormatPattern::format(const FieldValues& values) const {
  std::string out;
  for (const FormatPiece& piece : pieces_) {
    out += piece.text;
    if (piece.field.empty()) continue;
    const std::string where = "format pattern '" + pattern_ + "': field " + quoted_field(piece.field, piece.spec_text);
    const auto found = values.find(piece.field);
    if (found == values.end()) throw ConfigError(where + " names no known key; the keys are: " + key_list(values));
    check_spec_kind(piece.spec, std::holds_alternative<std::int64_t>(found->second), where);
    out += format_value(found->second, piece.spec);
  }
  return out;
}

std::string format_fields(const std::string& pattern, const FieldValues& values) {
  return FormatPattern(pattern).format(values);
}

std::string format_field(const FieldValue& value, const std::string& spec_text) {
  const std::string where = "format spec '" + spec_text + "'";
  const FormatSpec spec = parse_spec(spec_text, "format(value, '" + spec_text + "')");
  check_spec_kind(spec, std::holds_alternative<std::int64_t>(value), where);
  return format_value(value, spec);
}

// ---- ModelCheckpoint ----------------------------------------------------------------------------------------

namespace {

FormatPattern checked_pattern(const ModelCheckpoint::Options& options) {
  if (options.filepath.empty()) throw ConfigError("ModelCheckpoint: filepath is empty");
  try {
    FormatPattern pattern(options.filepath);
    const bool per_epoch = std::holds_alternative<std::string>(options.save_freq);
    for (const std::string& field : pattern.fields()) {
      if (field == "batch" && per_epoch)
        throw ConfigError("format pattern '" + options.filepath +
                          "': the field {batch} is filled only when save_freq is a number of batches, not \"epoch\"");
      pattern.check_kind(field, field == "epoch" || field == "batch");
    }
    return pattern;
  } catch (const ConfigError& error) {
    throw ConfigError(std::string("ModelCheckpoint: ") + error.what());
  }
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string filepath, bool save_best_only)
    : ModelCheckpoint([&] {
        Options options;
        options.filepath = std::move(filepath);
        options.save_best_only = save_best_only;
        return options;
      }()) {}

ModelCheckpoint::ModelCheckpoint(Options options)
    : options_(std::move(options)), path_format_(checked_pattern(options_)) {
  if (const auto* freq = std::get_if<std::string>(&options_.save_freq)) {
    if (*freq != "epoch")
      throw ConfigError("ModelCheckpoint: unrecognized save_freq '" + *freq +
                        "'; expected \"epoch\" or a positive number of batches");
  } else if (std::get<std::int64_t>(options_.save_freq) <= 0) {
    throw ConfigError("ModelCheckpoint: save_freq must be \"epoch\" or a positive number of batches, got " +
                      std::to_string(std::get<std::int64_t>(options_.save_freq)));
  }
  try {
    mode_ = resolve_monitor_mode("ModelCheckpoint", options_.monitor, options_.mode);
  } catch (const ConfigError&) {
    // Without save_best_only the monitor is never read: only a wrong mode is an error then.
    if (options_.save_best_only || options_.mode != "auto") throw;
    mode_ = MonitorMode::min;
  }
  best_ = options_.initial_value_threshold ? *options_.initial_value_threshold
                                           : (mode_ == MonitorMode::min ? std::numeric_limits<double>::infinity()
                                                                        : -std::numeric_limits<double>::infinity());
}

void ModelCheckpoint::on_train_begin(TrainingState& state) {
  if (!state.model) throw ValueError("ModelCheckpoint needs TrainingState::model");
}

void ModelCheckpoint::on_epoch_begin(TrainingState&, int epoch) { current_epoch_ = epoch; }

void ModelCheckpoint::on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) {
  if (saves_per_epoch()) return;
  if (++batches_since_save_ < std::get<std::int64_t>(options_.save_freq)) return;
  batches_since_save_ = 0;
  save_point(state, current_epoch_, batch, logs);
}

void ModelCheckpoint::on_epoch_end(TrainingState& state, int epoch, Logs& logs) {
  if (saves_per_epoch()) save_point(state, epoch, -1, logs);
}

std::string ModelCheckpoint::file_path(int epoch, std::int64_t batch, const Logs& logs) const {
  FieldValues values;
  for (const auto& [key, value] : logs) values[key] = value;
  values["epoch"] = static_cast<std::int64_t>(epoch) + 1;
  if (batch >= 0) values["batch"] = batch + 1;
  try {
    return path_format_.format(values);
  } catch (const ConfigError& error) {
    throw ConfigError(std::string("ModelCheckpoint: ") + error.what());
  }
}

namespace {

// Why the model must not be saved: a non-finite loss or monitored value, or a weight that is no longer
// finite (a NaN batch has already been applied). Empty when it may be saved.
std::string broken_state(const ModelBase& model, const Logs& logs, const std::string& monitor) {
  for (const std::string& key : {std::string("loss"), monitor}) {
    const auto found = logs.find(key);
    if (found != logs.end() && !std::isfinite(found->second)) return key + " is " + python_float(found->second);
  }
  for (const Weight& weight : model.weights()) {
    const Array& value = weight.value;
    for (std::size_t i = 0; i < value.size(); ++i)
      if (!std::isfinite(value.flat(i))) return "weight '" + weight.path + "' is not finite";
  }
  return "";
}

}  // namespace

void ModelCheckpoint::save_point(TrainingState& state, int epoch, std::int64_t batch, const Logs& logs) {
  // The name first: a field the logs lack fails at the first save point, whether it saves or not.
  const std::string path = file_path(epoch, batch, logs);
  if (!state.model) throw ValueError("ModelCheckpoint needs TrainingState::model");
  // A run that went non-finite (TerminateOnNaN stops it after this epoch) must not replace the last good
  // checkpoint, nor become the best one.
  if (const std::string broken = broken_state(*state.model, logs, options_.monitor); !broken.empty()) {
    warnings() << "\nEpoch " << epoch + 1 << ": ModelCheckpoint is not saving the model to " << path << ": " << broken
               << "; the previous file, if any, is kept\n";
    return;
  }
  if (!options_.save_best_only) {
    if (options_.verbose > 0) messages() << "\nEpoch " << epoch + 1 << ": saving model to " << path << '\n';
    write(state, path);
    return;
  }
  const auto found = logs.find(options_.monitor);
  if (found == logs.end()) {
    if (!warned_missing_monitor_) {
      std::string keys;
      for (const auto& [key, value] : logs) keys += (keys.empty() ? "" : ",") + key;
      warnings() << "Warning: Can save best model only with " << options_.monitor
                 << " available, skipping. Available metrics are: " << keys << '\n';
      warned_missing_monitor_ = true;
    }
    return;
  }
  const double current = found->second;
  const bool improved = mode_ == MonitorMode::min ? current < best_ : current > best_;
  if (!improved) {
    if (options_.verbose > 0)
      messages() << "\nEpoch " << epoch + 1 << ": " << options_.monitor << " did not improve from "
                 << format_field(best_, ".5f") << '\n';
    return;
  }
  if (options_.verbose > 0)
    messages() << "\nEpoch " << epoch + 1 << ": " << options_.monitor << " improved from " << format_field(best_, ".5f")
               << " to " << format_field(current, ".5f") << ", saving model to " << path << '\n';
  write(state, path);
  best_ = current;  // after the save: a failed one leaves the best to beat as it was
}

void ModelCheckpoint::write(TrainingState& state, const std::string& path) {
  if (!state.chief) return;  // rank 0 of a distributed fit saves; every rank keeps the same best
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) {
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error)
      throw SerializationError("ModelCheckpoint: cannot create the folder '" + folder.string() + "' for " + path +
                               ": " + error.message());
  }
  if (options_.save_weights_only)
    save_weights(*state.model, path);
  else
    save_model(*state.model, path);
  saved_.push_back(path);
}

// ---- by name ----------------------------------------------------------------------------------------------

namespace {

CallbackPtr checkpoint_from_config(const Config& config) {
  ConfigReader args(config, "ModelCheckpoint");
  ModelCheckpoint::Options options;
  options.filepath = args.text("filepath", "");
  options.monitor = args.text("monitor", options.monitor);
  options.verbose = static_cast<int>(args.integer("verbose", options.verbose));
  options.save_best_only = args.boolean("save_best_only", options.save_best_only);
  options.save_weights_only = args.boolean("save_weights_only", options.save_weights_only);
  options.mode = args.text("mode", options.mode);
  if (const Config& freq = args.value("save_freq"); freq.type() == Config::Type::string)
    options.save_freq = freq.as_string();
  else if (!freq.is_null())
    options.save_freq = freq.as_int("ModelCheckpoint argument 'save_freq'");
  if (args.has("initial_value_threshold"))
    options.initial_value_threshold = args.number("initial_value_threshold", 0.0);
  args.finish();
  return std::make_shared<ModelCheckpoint>(options);
}

}  // namespace

KILN_REGISTER_CALLBACK("kiln>ModelCheckpoint", checkpoint_from_config);

}  // namespace kiln
