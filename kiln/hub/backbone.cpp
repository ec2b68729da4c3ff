#include <kiln/hub/backbone.hpp>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/quantization.hpp>
#include <kiln/core/names.hpp>

namespace kiln::hub {

namespace {

Config base_fields(const Config& config, const std::string& class_name) {
  Config base = {{"name", to_snake_case(class_name)}};
  if (!config.is_map()) return base;
  for (const char* key : {"name", "trainable", "dtype"})
    if (const Config* value = config.find(key); value != nullptr && !value->is_null()) base.set(key, *value);
  return base;
}

}  // namespace

BackboneModel::BackboneModel(const Config& config, const std::string& class_name, std::string module,
                             const std::vector<BackboneArgument>& arguments)
    : ModelBase(base_fields(config, class_name), class_name), module_(std::move(module)) {
  if (const Config* dtype = config.is_map() ? config.find("dtype") : nullptr;
      dtype != nullptr && detail::is_dtype_policy_map(*dtype))
    dtype_map_ = *dtype;
  ConfigReader args = config_reader(config);
  arguments_ = Config::map();
  for (const BackboneArgument& argument : arguments) {
    if (args.has(argument.key) || (config.is_map() && config.contains(argument.key) && argument.fallback)) {
      arguments_.set(argument.key, args.value(argument.key));
    } else if (argument.fallback) {
      arguments_.set(argument.key, *argument.fallback);
    } else {
      args.fail("needs the argument " + argument.key);
    }
  }
  args.finish();
}

Config BackboneModel::with_dtype(Config config) const {
  if (!dtype_map_.is_null() && (!config.is_map() || !config.contains("dtype"))) config.set("dtype", dtype_map_);
  return config;
}

LayerPtr BackboneModel::create_layer(const std::string& class_name, const Config& config) const {
  return kiln::create_layer(class_name, with_dtype(config));
}

Config BackboneModel::get_config() const {
  Config config = base_config();
  // keras-hub's Backbone.get_config: a DTypePolicyMap given as the dtype goes back as it came (the layers follow
  // it); else the quantized layers' policies as one map by path (its default the backbone's dtype, or null, the
  // global policy, for float32), else the backbone's own dtype.
  if (!dtype_map_.is_null()) {
    config.set("dtype", dtype_map_);
  } else {
    const std::vector<std::pair<std::string, Config>> policies = detail::quantized_policies_under(*this);
    if (!policies.empty()) {
      Config map = Config::map();
      for (const auto& [path, policy] : policies) map.set(path, policy);
      const Config fallback = has_dtype() && policy_name() != "float32" ? Config(policy_name()) : Config();
      config.set("dtype", detail::dtype_policy_map(fallback, map));
    }
  }
  for (const auto& [key, value] : arguments_.items()) config.set(key, value);
  return config;
}

std::int64_t BackboneModel::integer(const std::string& key) const {
  const std::int64_t value = arguments_.at(key).as_int(class_name() + " argument '" + key + "'");
  if (value <= 0) throw ConfigError(class_name() + ": " + key + " must be positive, got " + std::to_string(value));
  return value;
}

double BackboneModel::number(const std::string& key) const {
  return arguments_.at(key).as_double(class_name() + " argument '" + key + "'");
}

bool BackboneModel::flag(const std::string& key) const {
  return arguments_.at(key).as_bool(class_name() + " argument '" + key + "'");
}

Config BackboneModel::random_normal(double stddev) {
  return {{"class_name", "RandomNormal"}, {"config", {{"mean", 0.0}, {"stddev", stddev}, {"seed", Config()}}}};
}

Config BackboneModel::truncated_normal(double stddev) {
  return {{"class_name", "TruncatedNormal"}, {"config", {{"mean", 0.0}, {"stddev", stddev}, {"seed", Config()}}}};
}

Tensor token_input(const std::string& name) {
  return std::make_shared<InputLayer>(
             Config{{"batch_shape", Config::list({Config(), Config()})}, {"dtype", "int32"}, {"name", name}})
      ->make_input();
}

void BackboneModel::finish(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  record(inputs, outputs);
  build_for(input_shapes());
}

Backbone::Backbone(const std::string& class_name, const Config& arguments)
    : TrainableModel(backbone_from_config({{"class_name", class_name}, {"config", arguments}})) {}

Backbone Backbone::of(const Model& model) {
  auto backbone = std::dynamic_pointer_cast<BackboneModel>(model.ptr());
  if (!backbone) throw ValueError(model->describe() + " is not a keras-hub backbone");
  return Backbone(backbone);
}

std::shared_ptr<BackboneModel> backbone_from_config(const Config& serialized) {
  if (!serialized.is_map() || !serialized.contains("class_name"))
    throw ConfigError("a serialized backbone is a map with a class_name, got " + serialized.to_string().substr(0, 200));
  const Config* registered = serialized.find("registered_name");
  const std::string key = registered != nullptr && registered->type() == Config::Type::string
                              ? registered->as_string()
                              : "keras_hub>" + serialized.get_string("class_name");
  const LayerPtr layer = create_layer(key, serialized.contains("config") ? serialized.at("config") : Config::map());
  auto backbone = std::dynamic_pointer_cast<BackboneModel>(layer);
  if (!backbone) throw ConfigError(layer->describe() + " is not a keras-hub backbone");
  return backbone;
}

std::vector<std::string> backbone_classes() {
  return {"BertBackbone",  "DistilBertBackbone", "FalconBackbone", "GPT2Backbone",  "GemmaBackbone",  "Llama3Backbone",
          "LlamaBackbone", "MistralBackbone",    "Phi3Backbone",   "Qwen3Backbone", "QwenBackbone", "RobertaBackbone"};
}

}  // namespace kiln::hub
