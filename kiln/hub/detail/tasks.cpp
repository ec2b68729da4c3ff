#include <kiln/hub/detail/tasks.hpp>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>

namespace kiln::hub::detail {

std::string backbone_class_of(const Config& config, const std::string& task) {
  if (!config.is_map() || !config.contains("backbone") || !config.at("backbone").is_map())
    throw ConfigError(task + ": its config needs a serialized backbone");
  return config.at("backbone").get_string("class_name");
}

Config task_base(const Config& config, const std::string& class_name) {
  Config base = {{"name", to_snake_case(class_name)}};
  if (config.is_map())
    for (const char* key : {"name", "trainable", "dtype"})
      if (const Config* value = config.find(key); value != nullptr && !value->is_null()) base.set(key, *value);
  return base;
}

std::int64_t find_special_token(const Tokenizer& tokenizer, const std::vector<std::string>& candidates) {
  for (const std::string& token : candidates) {
    try {
      const std::int64_t id = tokenizer.token_to_id(token);
      if (tokenizer.id_to_token(id) == token) return id;
    } catch (const ValueError&) {
    }
  }
  return -1;
}

}  // namespace kiln::hub::detail
