#include <kiln/layers/operation.hpp>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/detail/operations.hpp>

namespace kiln {

namespace {

using detail::operation_classes;

Config replace_markers(const Config& value, const std::function<Config(std::size_t)>& tensor) {
  if (detail::is_tensor_marker(value)) return tensor(static_cast<std::size_t>(value.get_int("__tensor__")));
  if (value.is_list()) {
    Config list = Config::list();
    for (const Config& item : value.as_list()) list.push_back(replace_markers(item, tensor));
    return list;
  }
  if (value.is_map()) {
    Config map = Config::map();
    for (const auto& [key, item] : value.items()) map.set(key, replace_markers(item, tensor));
    return map;
  }
  return value;
}

const detail::OperationClass& operation_class(const std::string& keras_class) {
  const auto found = operation_classes().find(keras_class);
  if (found == operation_classes().end()) {
    std::string known;
    for (const auto& [name, entry] : operation_classes()) known += (known.empty() ? "" : ", ") + name;
    throw ConfigError("kiln has no Keras operation '" + keras_class + "' (it has " + known + ")");
  }
  return found->second;
}

Tensor record(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attributes) {
  const std::optional<detail::OperationRecording> recording = detail::operation_recording(op, attributes, inputs.size());
  if (!recording) return Tensor();
  auto layer = std::make_shared<OperationLayer>(recording->keras_class, recording->config);
  layer->set_arguments({{"args", recording->args}, {"kwargs", recording->kwargs}});
  return (*layer)(inputs);
}

bool register_operations() {
  for (const auto& [name, entry] : operation_classes()) {
    const std::string keras_class = name;
    layer_registry().add(std::string(kOperationPackage) + ">" + keras_class,
                         LayerClass{std::type_index(typeid(OperationLayer)), [keras_class](const Config& config) {
                                      return std::make_shared<OperationLayer>(keras_class, config);
                                    }});
  }
  return detail::set_op_recorder(record);
}

}  // namespace

OperationLayer::OperationLayer(const std::string& keras_class, const Config& config) : Layer(config, keras_class) {
  const detail::OperationClass& entry = operation_class(keras_class);
  ConfigReader args = config_reader(config);
  config_ = Config::map();
  for (const auto& [key, fallback] : entry.keys) {
    const Config& given = args.value(key);  // null when absent
    if (!config.contains(key) && !fallback) config_error("needs its '" + key + "'");
    config_.set(key, config.contains(key) ? given : *fallback);
  }
  args.finish();
}

void OperationLayer::set_arguments(const Config& arguments) {
  if (!arguments.is_map() || !arguments.contains("args"))
    config_error("an operation's arguments are {\"args\": [...], \"kwargs\": {...}}, got " + arguments.to_string());
  if (!arguments_.is_null() && arguments_ != arguments)
    config_error("is called again with other arguments (" + arguments.to_string() + " after " + arguments_.to_string() +
                 "); an operation is one call");
  arguments_ = arguments;
}

Config OperationLayer::arguments_with(const std::function<Config(std::size_t)>& tensor) const {
  return replace_markers(arguments_, tensor);
}

const std::string& OperationLayer::keras_module() const { return operation_class(class_name()).module; }

Config OperationLayer::get_config() const {
  Config config = {{"name", name()}};
  for (const auto& [key, value] : config_.items()) config.set(key, value);
  return config;
}

std::string OperationLayer::registered_name() const { return std::string(kOperationPackage) + ">" + class_name(); }

std::vector<Tensor> OperationLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  if (arguments_.is_null()) config_error("was called without its arguments (set_arguments)");
  const Config& given = arguments_.at("args");
  const std::vector<Config> args = given.is_list() ? given.as_list() : std::vector<Config>{given};
  const Config kwargs = arguments_.contains("kwargs") ? arguments_.at("kwargs") : Config::map();
  const detail::OperationCall call{*this, inputs, config_, args, kwargs};
  return {operation_class(class_name()).call(call)};
}

bool is_operation(const Layer& layer) { return dynamic_cast<const OperationLayer*>(&layer) != nullptr; }

bool has_keras_operation(const std::string& keras_class) { return operation_classes().count(keras_class) != 0; }

KILN_AT_STARTUP(register_operations());

}  // namespace kiln
