#include <kiln/layers/detail/configured.hpp>

#include <kiln/core/error.hpp>

namespace kiln::detail {

std::string configured_class(const Config& config, const std::string& kind) {
  if (config.type() == Config::Type::string) return config.as_string();
  if (!config.is_map()) throw ConfigError(kind + " is a name or {class_name, config}, got " + config.to_string());
  if (const Config* registered = config.find("registered_name"); registered != nullptr && !registered->is_null())
    return registered->as_string("key 'registered_name'");
  return config.get_string("class_name");
}

Config configured_arguments(const Config& defaults, const Config& config, const std::string& who) {
  Config arguments = defaults;
  const Config* given = config.is_map() ? config.find("config") : nullptr;
  if (given == nullptr || given->is_null()) return arguments;
  ConfigReader reader(*given, who);
  for (const Config::Entry& entry : defaults.items()) {
    const Config& value = reader.value(entry.first);
    if (value.is_null()) continue;
    const std::string what = who + " argument '" + entry.first + "'";
    switch (entry.second.type()) {
      case Config::Type::string:
        value.as_string(what);
        break;
      case Config::Type::boolean:
        value.as_bool(what);
        break;
      case Config::Type::integer:
        // An axis argument (a constraint's) may also be a list of axes.
        if (value.is_list())
          value.as_ints(what);
        else
          value.as_double(what);
        break;
      case Config::Type::number:
        value.as_double(what);
        break;
      default:
        break;
    }
    arguments.set(entry.first, value);
  }
  reader.finish();
  return arguments;
}

Config configured_object(const std::string& key, const std::string& class_name, const Config& arguments) {
  Config config = {{"class_name", class_name}, {"config", arguments}};
  if (key.rfind("kiln>", 0) != 0) config.set("registered_name", key);
  return config;
}

}  // namespace kiln::detail
