#pragma once
// StringLookup and IntegerLookup: Keras's lookup preprocessing for labels and categories, strings (read_csv's
// text columns) or integer codes (3, 17, 42) to consecutive indices and back, the vocabulary learned by
// adapt() or given, saved with a model as one of its assets.
//
//   kiln::StringLookup species;                        // Keras's defaults: one OOV index (0), no mask
//   species.adapt(table.text[0]);                      // most frequent first
//   kiln::Array y = species(table.text[0]);            // 1, 2, 3, ... (0 for a string it has not seen)
//   species.attach(model, "species");  model.save("iris.kiln");
//   kiln::StringLookup again = kiln::StringLookup::of(kiln::load_model("iris.kiln"), "species");
//
// Indices as Keras assigns them: the mask token (when given) is 0, then num_oov_indices out-of-vocabulary
// indices, then the vocabulary in order. adapt() orders it by count, most frequent first, ties in reverse
// lexicographic order (NumPy's lexsort reversed, as Keras does).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

/// Keras's StringLookup: strings to consecutive indices and back (see the top of this header).
class StringLookup {
 public:
  /// Keras's arguments, with its defaults.
  struct Options {
    std::int64_t max_tokens = -1;  ///< at most this many indices in all (mask and OOV included); -1: no limit
    /// Indices for strings not in the vocabulary: 1 (they map to it) or 0 (they are a ValueError). Keras
    /// hashes into several; kiln refuses more than 1 (ConfigError).
    std::int64_t num_oov_indices = 1;
    std::optional<std::string> mask_token;  ///< when given, it is index 0 (padding)
    std::string oov_token = "[UNK]";        ///< what invert() gives for an OOV index
  };

  /// An empty lookup, for adapt(); ConfigError for a num_oov_indices other than 0 or 1, or a bad max_tokens.
  explicit StringLookup(Options options);
  /// An empty lookup with Keras's defaults.
  StringLookup() : StringLookup(Options()) {}
  /// A lookup of this vocabulary, in this order: ValueError for a repeated string, or one that is the mask
  /// or OOV token.
  StringLookup(std::vector<std::string> vocabulary, Options options);

  /// Learns the vocabulary of `data`: each distinct string (the mask and OOV tokens left out) by count,
  /// most frequent first, up to max_tokens. Replaces any vocabulary it had.
  void adapt(const std::vector<std::string>& data);
  /// Each string's index as a (n,) array of `dtype`. ValueError for an unknown string when there is no OOV
  /// index, and before adapt() or a vocabulary.
  Array operator()(const std::vector<std::string>& values, DType dtype = DType::float32) const;
  /// The string of each index (Keras's invert=True): the mask token, the OOV token, or the vocabulary's.
  /// ValueError for an index that is not a whole number in [0, vocabulary_size()).
  std::vector<std::string> invert(const Array& indices) const;

  /// Keras's get_vocabulary(): the mask token (when given), the OOV token, then the vocabulary, by index.
  std::vector<std::string> get_vocabulary() const;
  /// How many indices there are: a model's output classes for these labels.
  std::int64_t vocabulary_size() const;

  /// Keras's config keys: max_tokens (null for none), num_oov_indices, mask_token, oov_token, vocabulary,
  /// invert (false), output_mode ("int"), vocabulary_size.
  Config get_config() const;
  /// From such a config (Keras's own too); ConfigError for one kiln cannot follow (another output_mode,
  /// invert true, more than one OOV index).
  static StringLookup from_config(const Config& config);
  /// Makes this lookup the model's asset `name`, saved with it in kiln files.
  void attach(ModelBase& model, const std::string& name = "string_lookup") const;
  /// The lookup attached to `model` as `name`; ValueError when it has none.
  static StringLookup of(const ModelBase& model, const std::string& name = "string_lookup");

 private:
  std::int64_t first_index() const;  // where the vocabulary starts
  Options options_;
  std::vector<std::string> vocabulary_;
  std::map<std::string, std::int64_t> index_;
  bool has_vocabulary_ = false;
};

/// Keras's IntegerLookup: integer codes (given as whole numbers in an Array of any shape) to indices, as
/// StringLookup does for strings. adapt() orders by count, ties by the larger value first (Keras's reversed
/// lexsort).
class IntegerLookup {
 public:
  /// Keras's arguments, with its defaults.
  struct Options {
    std::int64_t max_tokens = -1;  ///< at most this many indices in all; -1: no limit
    std::int64_t num_oov_indices = 1;  ///< 1, or 0 (unknown values are a ValueError); more: ConfigError
    std::optional<std::int64_t> mask_token;  ///< when given, it is index 0
    std::int64_t oov_token = -1;             ///< what invert() gives for an OOV index
  };

  /// An empty lookup, for adapt(); ConfigError for a num_oov_indices other than 0 or 1, or a bad max_tokens.
  explicit IntegerLookup(Options options);
  /// An empty lookup with Keras's defaults.
  IntegerLookup() : IntegerLookup(Options()) {}
  /// A lookup of this vocabulary, in this order (special tokens first are dropped, as in Keras).
  IntegerLookup(std::vector<std::int64_t> vocabulary, Options options);

  /// Learns the vocabulary of `data` (whole numbers; ValueError otherwise), most frequent first.
  void adapt(const Array& data);
  /// Each value's index, in an array of `values`' shape and dtype.
  Array operator()(const Array& values) const;
  /// The value of each index, in an array of `indices`' shape and dtype.
  Array invert(const Array& indices) const;
  std::vector<std::int64_t> get_vocabulary() const;  ///< mask, OOV, then the vocabulary, by index
  /// How many indices there are: the mask, the OOV indices and the vocabulary.
  std::int64_t vocabulary_size() const;

  Config get_config() const;  ///< Keras's keys, as StringLookup's
  /// The lookup get_config() describes, vocabulary included; ConfigError for a bad config.
  static IntegerLookup from_config(const Config& config);
  /// Saves this lookup with `model`, under `name`, as StringLookup::attach does.
  void attach(ModelBase& model, const std::string& name = "integer_lookup") const;
  /// The lookup attached to `model` as `name`; ValueError when it has none.
  static IntegerLookup of(const ModelBase& model, const std::string& name = "integer_lookup");

 private:
  std::int64_t first_index() const;
  Options options_;
  std::vector<std::int64_t> vocabulary_;
  std::map<std::int64_t, std::int64_t> index_;
  bool has_vocabulary_ = false;
};

}  // namespace kiln
