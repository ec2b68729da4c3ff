#include <kiln/train/lookup.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include <kiln/core/error.hpp>

namespace kiln {

namespace {

void check_options(const StringLookup::Options& options) {
  if (options.num_oov_indices < 0 || options.num_oov_indices > 1)
    throw ConfigError("StringLookup: num_oov_indices must be 0 or 1 in kiln (Keras hashes unknown strings into "
                      "several with a hash kiln does not have), got " + std::to_string(options.num_oov_indices));
  if (options.max_tokens == 0 || options.max_tokens == 1 || options.max_tokens < -1)
    throw ConfigError("StringLookup: max_tokens must be greater than 1 (or -1 for no limit), got " +
                      std::to_string(options.max_tokens));
}

}  // namespace

StringLookup::StringLookup(Options options) : options_(std::move(options)) { check_options(options_); }

StringLookup::StringLookup(std::vector<std::string> vocabulary, Options options) : StringLookup(std::move(options)) {
  // As Keras's set_vocabulary: a vocabulary that starts with the special tokens (another lookup's
  // get_vocabulary()) is taken without them.
  std::size_t special = 0;
  if (options_.mask_token && special < vocabulary.size() && vocabulary[special] == *options_.mask_token) ++special;
  for (std::int64_t i = 0; i < options_.num_oov_indices && special < vocabulary.size() &&
                           vocabulary[special] == options_.oov_token;
       ++i)
    ++special;
  vocabulary.erase(vocabulary.begin(), vocabulary.begin() + static_cast<std::ptrdiff_t>(special));
  for (std::size_t i = 0; i < vocabulary.size(); ++i) {
    const std::string& token = vocabulary[i];
    if ((options_.mask_token && token == *options_.mask_token) || (options_.num_oov_indices > 0 && token == options_.oov_token))
      throw ValueError("StringLookup: the vocabulary holds the special token '" + token + "'");
    if (!index_.emplace(token, first_index() + static_cast<std::int64_t>(i)).second)
      throw ValueError("StringLookup: '" + token + "' is in the vocabulary twice");
  }
  vocabulary_ = std::move(vocabulary);
  has_vocabulary_ = true;
}

std::int64_t StringLookup::first_index() const { return (options_.mask_token ? 1 : 0) + options_.num_oov_indices; }

void StringLookup::adapt(const std::vector<std::string>& data) {
  std::map<std::string, std::int64_t> counts;
  for (const std::string& value : data) {
    if ((options_.mask_token && value == *options_.mask_token) || value == options_.oov_token) continue;
    ++counts[value];
  }
  std::vector<std::pair<std::string, std::int64_t>> sorted(counts.begin(), counts.end());
  // Count descending, then the strings descending: NumPy's lexsort((tokens, counts)) reversed.
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first > b.first;
  });
  if (options_.max_tokens > 0)
    sorted.resize(static_cast<std::size_t>(
        std::clamp<std::int64_t>(options_.max_tokens - first_index(), 0, static_cast<std::int64_t>(sorted.size()))));
  std::vector<std::string> vocabulary;
  for (const auto& [token, count] : sorted) vocabulary.push_back(token);
  *this = StringLookup(std::move(vocabulary), options_);
}

Array StringLookup::operator()(const std::vector<std::string>& values, DType dtype) const {
  if (!has_vocabulary_) throw ValueError("StringLookup: no vocabulary yet; adapt() it or give one");
  Array indices(Shape{static_cast<std::int64_t>(values.size())}, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string& value = values[i];
    std::int64_t index = 0;
    if (options_.mask_token && value == *options_.mask_token) {
      index = 0;
    } else if (const auto found = index_.find(value); found != index_.end()) {
      index = found->second;
    } else if (options_.num_oov_indices > 0) {
      index = options_.mask_token ? 1 : 0;
    } else {
      throw ValueError("StringLookup: '" + value + "' (value " + std::to_string(i) +
                       ") is not in the vocabulary, and num_oov_indices is 0");
    }
    indices.set_flat(i, static_cast<double>(index));
  }
  return indices;
}

std::vector<std::string> StringLookup::get_vocabulary() const {
  std::vector<std::string> all;
  if (options_.mask_token) all.push_back(*options_.mask_token);
  for (std::int64_t i = 0; i < options_.num_oov_indices; ++i) all.push_back(options_.oov_token);
  all.insert(all.end(), vocabulary_.begin(), vocabulary_.end());
  return all;
}

std::int64_t StringLookup::vocabulary_size() const {
  return first_index() + static_cast<std::int64_t>(vocabulary_.size());
}

std::vector<std::string> StringLookup::invert(const Array& indices) const {
  const std::vector<std::string> all = get_vocabulary();
  std::vector<std::string> strings;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const double value = indices.flat(i);
    if (!(value >= 0 && value < static_cast<double>(all.size()) && std::floor(value) == value))
      throw ValueError("StringLookup.invert: index " + std::to_string(value) + " (value " + std::to_string(i) +
                       ") is not one of 0 to " + std::to_string(all.size() - 1));
    strings.push_back(all[static_cast<std::size_t>(value)]);
  }
  return strings;
}

Config StringLookup::get_config() const {
  Config vocabulary = Config::list();
  for (const std::string& token : vocabulary_) vocabulary.push_back(token);
  return {{"name", "string_lookup"},
          {"max_tokens", options_.max_tokens > 0 ? Config(options_.max_tokens) : Config()},
          {"num_oov_indices", options_.num_oov_indices},
          {"oov_token", options_.oov_token},
          {"mask_token", options_.mask_token ? Config(*options_.mask_token) : Config()},
          {"output_mode", "int"},
          {"invert", false},
          {"vocabulary", has_vocabulary_ ? vocabulary : Config()},
          {"vocabulary_size", vocabulary_size()}};
}

StringLookup StringLookup::from_config(const Config& config) {
  if (!config.is_map()) throw ConfigError("StringLookup config must be a map, got " + config.to_string());
  Options options;
  if (const Config* max_tokens = config.find("max_tokens"); max_tokens && !max_tokens->is_null())
    options.max_tokens = max_tokens->as_int("StringLookup max_tokens");
  options.num_oov_indices = config.get_int("num_oov_indices", 1);
  options.oov_token = config.get_string("oov_token", "[UNK]");
  if (const Config* mask = config.find("mask_token"); mask && !mask->is_null())
    options.mask_token = mask->as_string("StringLookup mask_token");
  if (config.get_string("output_mode", "int") != "int")
    throw ConfigError("StringLookup: kiln reads output_mode 'int' only, got '" + config.get_string("output_mode") + "'");
  if (config.get_bool("invert", false)) throw ConfigError("StringLookup: an inverting lookup is invert(), not a config");
  const Config* vocabulary = config.find("vocabulary");
  if (vocabulary == nullptr || vocabulary->is_null()) return StringLookup(options);
  std::vector<std::string> tokens;
  for (const Config& token : vocabulary->as_list("StringLookup vocabulary")) tokens.push_back(token.as_string("token"));
  return StringLookup(std::move(tokens), options);
}

void StringLookup::attach(const Model& model, const std::string& name) const {
  model.ptr()->set_asset(name, get_config());
}

StringLookup StringLookup::of(const Model& model, const std::string& name) {
  const Config* asset = model.ptr()->asset(name);
  if (asset == nullptr) throw ValueError(model.ptr()->describe() + " has no StringLookup asset '" + name + "'");
  return from_config(*asset);
}

}  // namespace kiln
