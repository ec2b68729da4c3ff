#include <kiln/core/names.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

namespace kiln {

std::string to_snake_case(const std::string& class_name) {
  // Keras drops non-word characters, then applies (.)([A-Z][a-z]+) -> \1_\2 and
  // ([a-z])([A-Z]) -> \1_\2: a break before a capitalized word whatever precedes it
  // ("Layer2Norm" -> "layer2_norm"), and one between a lower-case letter and a capital.
  std::string word;
  for (char c : class_name)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') word += c;
  auto upper = [&](std::size_t i) { return i < word.size() && std::isupper(static_cast<unsigned char>(word[i])); };
  auto lower = [&](std::size_t i) { return i < word.size() && std::islower(static_cast<unsigned char>(word[i])); };
  std::string result;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (i > 0 && upper(i) && (lower(i + 1) || lower(i - 1))) result += '_';
    result += static_cast<char>(std::tolower(static_cast<unsigned char>(word[i])));
  }
  return result;
}

std::string to_lower_case(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string class_part(const std::string& key) {
  const std::size_t separator = key.rfind('>');
  return separator == std::string::npos ? key : key.substr(separator + 1);
}

std::string package_part(const std::string& key) {
  const std::size_t separator = key.rfind('>');
  return separator == std::string::npos ? std::string() : key.substr(0, separator);
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> nearest_names(const std::string& name, const std::vector<std::string>& candidates,
                                       std::size_t count) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const std::string& candidate : candidates) scored.emplace_back(edit_distance(name, candidate), candidate);
  std::sort(scored.begin(), scored.end());
  scored.erase(std::unique(scored.begin(), scored.end()), scored.end());
  std::vector<std::string> result;
  for (std::size_t i = 0; i < scored.size() && i < count; ++i) result.push_back(scored[i].second);
  return result;
}

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string text = "; did you mean";
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : " '") + names[i] + "'";
  return text + "?";
}

std::string readable_size(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f %s", bytes, units[unit]);
  return buffer;
}

}  // namespace kiln
