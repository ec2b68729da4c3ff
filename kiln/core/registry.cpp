#include <kiln/core/registry.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>

namespace kiln::detail {

namespace {

constexpr const char* kKilnPackage = "kiln>";

bool is_kilns(const std::string& key) { return key.rfind(kKilnPackage, 0) == 0; }

bool has_capital(const std::string& name) {
  return std::any_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

}  // namespace

std::size_t RegistryIndex::add(const std::string& key, const std::vector<std::string>& aliases) {
  const std::size_t separator = key.find('>');
  // Refused, not thrown: this runs during static initialization, where a throw would abort the program.
  if (separator == std::string::npos || separator == 0 || separator + 1 == key.size() ||
      key.find('>', separator + 1) != std::string::npos) {
    problems_.push_back("'" + key + "' is not a key of the form \"Package>Name\" (\"acme>" + class_part(key) + "\")");
    return npos;
  }
  if (contains(key)) {
    problems_.push_back(key + " is registered twice (the first registration is kept)");
    return npos;
  }
  for (const std::string& alias : aliases)
    if (const auto taken = spellings_.find(alias); taken != spellings_.end()) {
      problems_.push_back(key + " is not registered: its alias '" + alias + "' already names " +
                          keys_[taken->second.front()]);
      return npos;
    }
  const std::size_t index = keys_.size();
  keys_.push_back(key);
  aliases_.push_back(aliases);
  const std::string name = class_part(key);
  // Each spelling once per entry: "Adam" is also its own lower case's neighbour, "mse" may repeat.
  std::vector<std::string> spellings = {key, name, to_snake_case(name), to_lower_case(name)};
  spellings.insert(spellings.end(), aliases.begin(), aliases.end());
  std::sort(spellings.begin(), spellings.end());
  spellings.erase(std::unique(spellings.begin(), spellings.end()), spellings.end());
  for (const std::string& spelling : spellings) spellings_[spelling].push_back(index);
  return index;
}

bool RegistryIndex::contains(const std::string& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

std::size_t RegistryIndex::find(const std::string& name) const {
  const auto found = spellings_.find(name);
  if (found == spellings_.end()) return npos;
  const std::vector<std::size_t>& entries = found->second;
  if (entries.size() == 1) return entries.front();
  for (std::size_t index : entries)
    if (keys_[index] == name) return index;
  for (std::size_t index : entries)
    if (is_kilns(keys_[index])) return index;
  std::string keys;
  for (std::size_t index : entries) keys += (keys.empty() ? "'" : ", '") + keys_[index] + "'";
  throw ConfigError("the " + kind_ + " name '" + name + "' is registered by " + keys + "; give the whole key");
}

void RegistryIndex::unknown(const std::string& name) const {
  // Suggestions in the form asked: keys for a key or a class name, lower-case spellings for a lower-case one.
  std::vector<std::string> candidates;
  const bool lower = !has_capital(name) && name.find('>') == std::string::npos;
  for (std::size_t index = 0; index < keys_.size(); ++index) {
    if (!lower) {
      candidates.push_back(keys_[index]);
      continue;
    }
    const std::string class_name = class_part(keys_[index]);
    candidates.push_back(to_snake_case(class_name));
    candidates.push_back(to_lower_case(class_name));
    for (const std::string& alias : aliases_[index])
      if (!has_capital(alias)) candidates.push_back(alias);
  }
  // A class name is compared with class names ("Dens" with "Dense", not with "kiln>Dense").
  std::vector<std::string> nearest;
  if (!lower && name.find('>') == std::string::npos) {
    std::vector<std::string> class_names;
    for (const std::string& key : keys_) class_names.push_back(class_part(key));
    for (const std::string& near : nearest_names(name, class_names))
      for (const std::string& key : keys_)
        if (class_part(key) == near && std::find(nearest.begin(), nearest.end(), key) == nearest.end())
          nearest.push_back(key);
    if (nearest.size() > 3) nearest.resize(3);
  } else {
    nearest = nearest_names(name, candidates);
  }
  throw ConfigError("unknown " + kind_ + " '" + name + "'" + did_you_mean(nearest));
}

std::vector<std::string> RegistryIndex::spellings() const {
  std::vector<std::string> names;
  for (const auto& entry : spellings_) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

void RegistryIndex::fail(const std::string& message) { throw ConfigError(message); }

void RegistryIndex::check() const {
  if (problems_.empty()) return;
  std::string text;
  for (const std::string& problem : problems_) text += (text.empty() ? "" : "; ") + problem;
  throw ConfigError(kind_ + " registry: " + text);
}

}  // namespace kiln::detail
