#include <kiln/data/lookup.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include <kiln/core/error.hpp>

namespace kiln {

namespace {

// What both lookups allow of num_oov_indices and max_tokens.
void check_counts(std::int64_t num_oov_indices, std::int64_t max_tokens, const std::string& who) {
  if (num_oov_indices < 0 || num_oov_indices > 1)
    throw ConfigError(who + ": num_oov_indices must be 0 or 1 in kiln (Keras hashes unknown values into "
                            "several with a hash kiln does not have), got " + std::to_string(num_oov_indices));
  if (max_tokens == 0 || max_tokens == 1 || max_tokens < -1)
    throw ConfigError(who + ": max_tokens must be greater than 1 (or -1 for no limit), got " +
                      std::to_string(max_tokens));
}

void check_options(const StringLookup::Options& options) {
  check_counts(options.num_oov_indices, options.max_tokens, "StringLookup");
}

// Keras's adapt order: by count, most frequent first, ties by the larger token first (NumPy's
// lexsort((tokens, counts)) reversed), at most `limit` of them (-1: all).
template <class Token>
std::vector<Token> by_count(const std::map<Token, std::int64_t>& counts, std::int64_t limit) {
  std::vector<std::pair<Token, std::int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first > b.first;
  });
  if (limit >= 0 && static_cast<std::size_t>(limit) < sorted.size()) sorted.resize(static_cast<std::size_t>(limit));
  std::vector<Token> tokens;
  for (const auto& entry : sorted) tokens.push_back(entry.first);
  return tokens;
}

// As Keras's set_vocabulary: a vocabulary that starts with the special tokens (another lookup's
// get_vocabulary()) is taken without them.
template <class Token>
void drop_special_prefix(std::vector<Token>& vocabulary, const std::optional<Token>& mask, std::int64_t num_oov,
                         const Token& oov) {
  std::size_t special = 0;
  if (mask && special < vocabulary.size() && vocabulary[special] == *mask) ++special;
  for (std::int64_t i = 0; i < num_oov && special < vocabulary.size() && vocabulary[special] == oov; ++i) ++special;
  vocabulary.erase(vocabulary.begin(), vocabulary.begin() + static_cast<std::ptrdiff_t>(special));
}

// The special tokens of a lookup and the rules over them both lookups share: index 0 for the mask (when
// given), then the OOV index (when there is one), then the vocabulary in order.
template <class Token>
struct Specials {
  const std::optional<Token>& mask;
  std::int64_t num_oov;
  const Token& oov;

  std::int64_t first_index() const { return (mask ? 1 : 0) + num_oov; }
  bool is_special(const Token& token) const { return (mask && token == *mask) || (num_oov > 0 && token == oov); }
};

std::string shown(const std::string& token) { return "'" + token + "'"; }
std::string shown(std::int64_t token) { return std::to_string(token); }

// Each token's index; `vocabulary` loses a leading run of special tokens. ValueError for a special token
// or a repeated one.
template <class Token>
std::map<Token, std::int64_t> index_vocabulary(std::vector<Token>& vocabulary, const Specials<Token>& specials,
                                               const std::string& who) {
  drop_special_prefix(vocabulary, specials.mask, specials.num_oov, specials.oov);
  std::map<Token, std::int64_t> index;
  for (std::size_t i = 0; i < vocabulary.size(); ++i) {
    const Token& token = vocabulary[i];
    if (specials.is_special(token)) throw ValueError(who + ": the vocabulary holds the special token " + shown(token));
    if (!index.emplace(token, specials.first_index() + static_cast<std::int64_t>(i)).second)
      throw ValueError(who + ": " + shown(token) + " is in the vocabulary twice");
  }
  return index;
}

// The index of `token` (value `position` of a call). ValueError for an unknown token without an OOV index.
template <class Token>
std::int64_t index_of(const Token& token, const std::map<Token, std::int64_t>& index, const Specials<Token>& specials,
                      const std::string& who, std::size_t position) {
  if (specials.mask && token == *specials.mask) return 0;
  if (const auto found = index.find(token); found != index.end()) return found->second;
  if (specials.num_oov > 0) return specials.mask ? 1 : 0;
  throw ValueError(who + ": " + shown(token) + " (value " + std::to_string(position) +
                   ") is not in the vocabulary, and num_oov_indices is 0");
}

// Keras's get_vocabulary(): the special tokens, then the vocabulary.
template <class Token>
std::vector<Token> with_specials(const std::vector<Token>& vocabulary, const Specials<Token>& specials) {
  std::vector<Token> all;
  if (specials.mask) all.push_back(*specials.mask);
  for (std::int64_t i = 0; i < specials.num_oov; ++i) all.push_back(specials.oov);
  all.insert(all.end(), vocabulary.begin(), vocabulary.end());
  return all;
}

// An index given to invert(), checked: a whole number below `size`.
std::size_t checked_index(double index, std::size_t size, const std::string& who, std::size_t position) {
  if (!(index >= 0 && index < static_cast<double>(size) && std::floor(index) == index))
    throw ValueError(who + ".invert: index " + std::to_string(index) + " (value " + std::to_string(position) +
                     ") is not one of 0 to " + std::to_string(size - 1));
  return static_cast<std::size_t>(index);
}

// A whole number held in a float array, or ValueError.
std::int64_t whole(double value, const std::string& who, std::size_t at) {
  if (!(std::floor(value) == value && std::abs(value) < 9.0e15))
    throw ValueError(who + ": value " + std::to_string(at) + " (" + std::to_string(value) + ") is not a whole number");
  return static_cast<std::int64_t>(value);
}

}  // namespace

StringLookup::StringLookup(Options options) : options_(std::move(options)) { check_options(options_); }

StringLookup::StringLookup(std::vector<std::string> vocabulary, Options options) : StringLookup(std::move(options)) {
  index_ = index_vocabulary(vocabulary, Specials<std::string>{options_.mask_token, options_.num_oov_indices,
                                                              options_.oov_token},
                            "StringLookup");
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
  *this = StringLookup(by_count(counts, options_.max_tokens > 0 ? options_.max_tokens - first_index() : -1), options_);
}

Array StringLookup::operator()(const std::vector<std::string>& values, DType dtype) const {
  if (!has_vocabulary_) throw ValueError("StringLookup: no vocabulary yet; adapt() it or give one");
  if (!is_floating(dtype))  // (indices as int8 would saturate at 127)
    throw DTypeError(std::string("StringLookup: indices are float32 or float64, not ") + dtype_name(dtype));
  const Specials<std::string> specials{options_.mask_token, options_.num_oov_indices, options_.oov_token};
  Array indices(Shape{static_cast<std::int64_t>(values.size())}, dtype);
  for (std::size_t i = 0; i < values.size(); ++i)
    indices.set_flat(i, static_cast<double>(index_of(values[i], index_, specials, "StringLookup", i)));
  return indices;
}

std::vector<std::string> StringLookup::get_vocabulary() const {
  return with_specials(vocabulary_, Specials<std::string>{options_.mask_token, options_.num_oov_indices, options_.oov_token});
}

std::int64_t StringLookup::vocabulary_size() const {
  return first_index() + static_cast<std::int64_t>(vocabulary_.size());
}

std::vector<std::string> StringLookup::invert(const Array& indices) const {
  const std::vector<std::string> all = get_vocabulary();
  std::vector<std::string> strings;
  for (std::size_t i = 0; i < indices.size(); ++i)
    strings.push_back(all[checked_index(indices.flat(i), all.size(), "StringLookup", i)]);
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

void StringLookup::attach(ModelBase& model, const std::string& name) const {
  model.set_asset(name, get_config());
}

StringLookup StringLookup::of(const ModelBase& model, const std::string& name) {
  const Config* asset = model.asset(name);
  if (asset == nullptr) throw ValueError(model.describe() + " has no StringLookup asset '" + name + "'");
  return from_config(*asset);
}

// ---- IntegerLookup ----------------------------------------------------------------------------------------

IntegerLookup::IntegerLookup(Options options) : options_(options) {
  check_counts(options_.num_oov_indices, options_.max_tokens, "IntegerLookup");
}

IntegerLookup::IntegerLookup(std::vector<std::int64_t> vocabulary, Options options) : IntegerLookup(options) {
  index_ = index_vocabulary(vocabulary, Specials<std::int64_t>{options_.mask_token, options_.num_oov_indices,
                                                               options_.oov_token},
                            "IntegerLookup");
  vocabulary_ = std::move(vocabulary);
  has_vocabulary_ = true;
}

std::int64_t IntegerLookup::first_index() const { return (options_.mask_token ? 1 : 0) + options_.num_oov_indices; }

void IntegerLookup::adapt(const Array& data) {
  std::map<std::int64_t, std::int64_t> counts;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::int64_t value = whole(data.flat(i), "IntegerLookup.adapt", i);
    if ((options_.mask_token && value == *options_.mask_token) || value == options_.oov_token) continue;
    ++counts[value];
  }
  *this = IntegerLookup(by_count(counts, options_.max_tokens > 0 ? options_.max_tokens - first_index() : -1), options_);
}

Array IntegerLookup::operator()(const Array& values) const {
  if (!has_vocabulary_) throw ValueError("IntegerLookup: no vocabulary yet; adapt() it or give one");
  const Specials<std::int64_t> specials{options_.mask_token, options_.num_oov_indices, options_.oov_token};
  Array indices(values.shape(), values.dtype());
  for (std::size_t i = 0; i < values.size(); ++i)
    indices.set_flat(i, static_cast<double>(
                            index_of(whole(values.flat(i), "IntegerLookup", i), index_, specials, "IntegerLookup", i)));
  return indices;
}

std::vector<std::int64_t> IntegerLookup::get_vocabulary() const {
  return with_specials(vocabulary_,
                       Specials<std::int64_t>{options_.mask_token, options_.num_oov_indices, options_.oov_token});
}

std::int64_t IntegerLookup::vocabulary_size() const {
  return first_index() + static_cast<std::int64_t>(vocabulary_.size());
}

Array IntegerLookup::invert(const Array& indices) const {
  const std::vector<std::int64_t> all = get_vocabulary();
  Array values(indices.shape(), indices.dtype());
  for (std::size_t i = 0; i < indices.size(); ++i)
    values.set_flat(i, static_cast<double>(all[checked_index(indices.flat(i), all.size(), "IntegerLookup", i)]));
  return values;
}

Config IntegerLookup::get_config() const {
  Config vocabulary = Config::list();
  for (std::int64_t token : vocabulary_) vocabulary.push_back(token);
  return {{"name", "integer_lookup"},
          {"max_tokens", options_.max_tokens > 0 ? Config(options_.max_tokens) : Config()},
          {"num_oov_indices", options_.num_oov_indices},
          {"oov_token", options_.oov_token},
          {"mask_token", options_.mask_token ? Config(*options_.mask_token) : Config()},
          {"output_mode", "int"},
          {"invert", false},
          {"vocabulary", has_vocabulary_ ? vocabulary : Config()},
          {"vocabulary_size", vocabulary_size()}};
}

IntegerLookup IntegerLookup::from_config(const Config& config) {
  if (!config.is_map()) throw ConfigError("IntegerLookup config must be a map, got " + config.to_string());
  Options options;
  if (const Config* max_tokens = config.find("max_tokens"); max_tokens && !max_tokens->is_null())
    options.max_tokens = max_tokens->as_int("IntegerLookup max_tokens");
  options.num_oov_indices = config.get_int("num_oov_indices", 1);
  options.oov_token = config.get_int("oov_token", -1);
  if (const Config* mask = config.find("mask_token"); mask && !mask->is_null())
    options.mask_token = mask->as_int("IntegerLookup mask_token");
  if (config.get_string("output_mode", "int") != "int")
    throw ConfigError("IntegerLookup: kiln reads output_mode 'int' only, got '" + config.get_string("output_mode") + "'");
  if (config.get_bool("invert", false)) throw ConfigError("IntegerLookup: an inverting lookup is invert(), not a config");
  const Config* vocabulary = config.find("vocabulary");
  if (vocabulary == nullptr || vocabulary->is_null()) return IntegerLookup(options);
  return IntegerLookup(vocabulary->as_ints("IntegerLookup vocabulary"), options);
}

void IntegerLookup::attach(ModelBase& model, const std::string& name) const {
  model.set_asset(name, get_config());
}

IntegerLookup IntegerLookup::of(const ModelBase& model, const std::string& name) {
  const Config* asset = model.asset(name);
  if (asset == nullptr) throw ValueError(model.describe() + " has no IntegerLookup asset '" + name + "'");
  return from_config(*asset);
}

}  // namespace kiln
