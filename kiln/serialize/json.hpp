#pragma once
// JSON text <-> Config, the format of model and layer configs on disk.
//
//   const std::string text = kiln::to_json(model.get_config());       // pretty, 2 spaces
//   const kiln::Config config = kiln::parse_json(text, "model.json");  // SerializationError names "model.json"
#include <cstddef>
#include <string>

#include <kiln/layers/config.hpp>

namespace kiln {

/// Deepest nesting of lists and maps either function accepts (the root counts as 1).
inline constexpr int max_json_depth = 128;
/// Longest JSON text parse_json reads and to_json writes.
inline constexpr std::size_t max_json_bytes = 64u << 20;

/// JSON text of a config map, written with cereal's JSON archive. indent 0 = compact one line; otherwise pretty
/// with that many spaces (at most 16). Integers stay integers (64-bit); numbers are written so that they read back
/// bit-identical (1.0 stays 1.0, not 1). ValueError, naming the key path ("config.layers[2].config.rate"), on a
/// non-finite number, a string or key that is not valid UTF-8, a key containing a NUL byte, or nesting deeper than
/// max_json_depth; ValueError also when the root is not a map or the text would exceed max_json_bytes. Whatever
/// to_json returns, parse_json reads back.
std::string to_json(const Config& config, int indent = 2);

/// Parses JSON text (RFC 8259, UTF-8). Any root type is allowed (usually a map). SerializationError naming
/// `source` and the byte offset on malformed text, invalid UTF-8, NaN/Infinity, a number outside the range of a
/// double (1e400, 1e-400), an integer outside int64 (written without '.' or exponent), nesting deeper than
/// max_json_depth, a duplicate key in one object, a key containing a NUL byte ("\u0000"), trailing text, or text
/// longer than max_json_bytes.
/// Never aborts: every failure is a SerializationError.
Config parse_json(const std::string& text, const std::string& source = "JSON text");

}  // namespace kiln
