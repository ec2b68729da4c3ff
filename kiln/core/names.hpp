#pragma once
// Names as Keras spells them, and the "did you mean" of every unknown-name message.
#include <cstddef>
#include <string>
#include <vector>

namespace kiln {

/// The snake_case base name Keras derives from a class name: "MultiHeadAttention" -> "multi_head_attention",
/// "GlorotUniform" -> "glorot_uniform", "Layer2Norm" -> "layer2_norm".
std::string to_snake_case(const std::string& class_name);
/// `text` in lower case (ASCII letters only): "RMSprop" -> "rmsprop".
std::string to_lower_case(std::string text);
/// "acme>Gated" -> "Gated"; a name without a package is returned whole.
std::string class_part(const std::string& key);
/// "acme>Gated" -> "acme"; "" for a name without a package.
std::string package_part(const std::string& key);

/// Levenshtein distance, ignoring case.
std::size_t edit_distance(const std::string& a, const std::string& b);
/// The candidates closest to `name`, best first (ties in alphabetical order).
std::vector<std::string> nearest_names(const std::string& name, const std::vector<std::string>& candidates,
                                       std::size_t count = 3);
/// A byte count as Keras's readable_memory_size writes it: "19.53 KB", "1.00 GB" (units of 1024).
std::string readable_size(double bytes);

/// "; did you mean 'a', 'b'?" for these names, or "" when there are none: the tail of every unknown-name
/// message.
std::string did_you_mean(const std::vector<std::string>& names);

}  // namespace kiln
