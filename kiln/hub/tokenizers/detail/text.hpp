#pragma once
// UTF-8 and the small file formats of keras-hub's tokenizer assets, checked byte by byte: every error names the
// file (or "text") and the byte offset.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::hub::detail {

/// The UTF-8 bytes of one code point (at most U+10FFFF, no surrogates: not checked here).
std::string utf8_of(char32_t point);
/// The length of the UTF-8 sequence a lead byte starts (1 for a stray continuation byte).
std::size_t utf8_length(unsigned char lead);
/// The offset of the first byte of `text` that is not valid UTF-8 (overlong forms, surrogates and code points
/// past U+10FFFF included), or npos.
std::size_t invalid_utf8(std::string_view text);
/// The first code point of valid UTF-8 `text` (0 when empty).
char32_t first_code_point(std::string_view text);
/// Calls `visit(point, its bytes)` for each code point of valid UTF-8 `text`.
void for_each_code_point(std::string_view text, const std::function<void(char32_t, std::string_view)>& visit);
/// A JSON object of strings to integers ({"token": 17, ...}), in file order. ValueError "<where>: ... at byte N"
/// for anything else (invalid UTF-8, a bad escape, a lone surrogate, a value that is not an integer, trailing text).
std::vector<std::pair<std::string, std::int64_t>> parse_vocabulary_json(std::string_view text, const std::string& where);
/// `text` as a JSON string literal (quotes, backslashes and control characters escaped; UTF-8 kept).
std::string json_string(std::string_view text);
/// Writes `text` to `path` atomically (a temporary beside it, renamed over it). SerializationError naming the path.
void write_text_file(const std::string& path, std::string_view text);
/// A whole text file, at most 512 MiB. SerializationError naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace kiln::hub::detail
