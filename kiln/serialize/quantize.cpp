#include <kiln/serialize/quantize.hpp>

#include <cstring>
#include <map>

#include <kiln/core/error.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln {
namespace {

// The source dtype's name in a layer config's "dtype" (a name, a DTypePolicy, a QuantizedDTypePolicy or null).
std::string source_dtype(const Config& dtype, bool& quantized) {
  quantized = false;
  if (dtype.is_null()) return "float32";
  if (dtype.type() == Config::Type::string) {
    quantized = dtype.as_string().find("_from_") != std::string::npos;
    return dtype.as_string();
  }
  const Config& policy = dtype.at("config");
  if (policy.contains("mode")) {
    quantized = true;
    return policy.get_string("source_name", "float32");
  }
  return policy.get_string("name", "float32");
}

bool is_model_entry(const Config& layer) {
  const std::string kind = layer.get_string("class_name", "");
  return (kind == "Functional" || kind == "Sequential" || kind == "Model") && layer.contains("config") &&
         layer.at("config").is_map() && layer.at("config").contains("layers");
}

// Rewrites the layers of a model config (and of the models inside it) in place; `prefix` names nested layers.
void quantize_layers(Config& model, const std::string& mode, const std::string& prefix, QuantizationReport& report,
                     std::map<std::string, bool>& kernels) {
  Config arguments = model.at("config");
  Config layers = Config::list();
  for (Config layer : arguments.at("layers").as_list()) {
    const std::string name = layer.at("config").get_string("name", "");
    if (is_model_entry(layer)) {
      quantize_layers(layer, mode, prefix + name + "/", report, kernels);
    } else if (layer.get_string("class_name", "") == "Dense" || layer.get_string("class_name", "") == "Embedding") {
      Config layer_arguments = layer.at("config");
      bool quantized = false;
      const std::string source = source_dtype(layer_arguments.find("dtype") ? layer_arguments.at("dtype") : Config(), quantized);
      if (quantized) {
        report.skipped.emplace_back(prefix + name, "already quantized");
      } else if (source != "float32" && source != "float64") {
        report.skipped.emplace_back(prefix + name, "its dtype policy is " + source);
      } else {
        layer_arguments.set("dtype", Config{{"module", "keras.dtype_policies"},
                                            {"class_name", "QuantizedDTypePolicy"},
                                            {"config", {{"mode", mode}, {"source_name", source}}},
                                            {"registered_name", Config()}});
        layer_arguments.set("quantization_config", Config());  // Keras's default for the mode
        layer.set("config", layer_arguments);
        report.quantized.push_back(prefix + name);
        kernels[prefix + name + (layer.get_string("class_name") == "Dense" ? "/kernel" : "/embeddings")] = true;
      }
    } else if (layer.get_string("class_name", "") != "InputLayer") {
      const std::string kind = layer.get_string("class_name", "");
      const Config& wrapped = layer.at("config");
      if (wrapped.is_map() && (wrapped.contains("layer") || wrapped.contains("forward_layer")))
        report.skipped.emplace_back(prefix + name, kind + ": a wrapper; kiln does not quantize the layers inside it yet");
      if (kind == "EinsumDense" || kind == "ReversibleEmbedding")
        report.skipped.emplace_back(prefix + name, kind + ": Keras quantizes it; kiln does not yet");
      else if (kind == "MultiHeadAttention")  // (Keras 3.16 cannot load such a model back: its config does not say)
        report.skipped.emplace_back(prefix + name, "MultiHeadAttention: Keras quantizes its EinsumDense projections "
                                                   "but its config does not record it; kiln leaves it float");
    }
    layers.push_back(layer);
  }
  arguments.set("layers", layers);
  model.set("config", arguments);
}

}  // namespace

std::shared_ptr<ModelBase> quantize_model_base(const ModelBase& model, const std::string& mode,
                                               QuantizationReport* report) {
  if (mode != "int8") {
    const bool keras_mode = mode == "int4" || mode == "float8" || mode == "gptq" || mode == "awq" || mode == "ternary";
    throw ValueError("quantize: " + std::string(keras_mode ? "Keras's mode '" + mode + "' is not one kiln runs yet"
                                                           : "unknown mode '" + mode + "'") +
                     " (kiln quantizes 'int8')");
  }
  QuantizationReport local;
  QuantizationReport& out = report ? *report : local;
  out = QuantizationReport();
  Config config = model_config(model);
  std::map<std::string, bool> kernels;  // weight paths of the kernels to quantize
  if (!config.contains("config") || !config.at("config").is_map() || !config.at("config").contains("layers"))
    throw ValueError("quantize: " + model.describe() + " has no layers to quantize");
  quantize_layers(config, mode, "", out, kernels);
  if (out.quantized.empty())
    throw ValueError("quantize: " + model.describe() + " has no layer kiln quantizes to " + mode +
                     " (kiln quantizes float Dense and Embedding layers)");
  std::shared_ptr<ModelBase> quantized = model_base_from_config(config);

  // Every weight of the new model from the old one by path; a quantized kernel (and its scale) from the float kernel.
  std::map<std::string, Array> old_weights;
  for (const Weight& weight : model.weights()) old_weights.emplace(weight.path, weight.value);
  // (int8 weight, its scale, the axis Keras reduces): Dense's kernel per unit, Embedding's rows per row.
  struct Quantized {
    const char* values;
    const char* scale;
    int axis;
  };
  const Quantized kinds[] = {{"/kernel", "/kernel_scale", 0}, {"/embeddings", "/embeddings_scale", -1}};
  const auto ends_with = [](const std::string& text, const std::string& suffix) {
    return text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::map<std::string, ops::QuantizedArray> quantized_weights;  // by the float weight's path
  const auto quantized_of = [&](const std::string& float_path, int axis) -> const ops::QuantizedArray& {
    auto found = quantized_weights.find(float_path);
    if (found == quantized_weights.end())
      found = quantized_weights.emplace(float_path, ops::abs_max_quantize(old_weights.at(float_path), axis)).first;
    return found->second;
  };
  for (Weight weight : quantized->weights()) {  // (a Weight shares its layer's storage)
    const std::string& path = weight.path;
    bool done = false;
    for (const Quantized& kind : kinds) {
      if (ends_with(path, kind.scale)) {  // Keras squeezes the reduced axis away
        const std::string float_path = path.substr(0, path.size() - std::string(kind.scale).size()) + kind.values;
        if (kernels.count(float_path) == 0) continue;
        std::memcpy(weight.value.raw(), quantized_of(float_path, kind.axis).scale.raw(), weight.value.nbytes());
        done = true;
      } else if (ends_with(path, kind.values) && kernels.count(path) != 0 && weight.value.dtype() == DType::int8) {
        std::memcpy(weight.value.raw(), quantized_of(path, kind.axis).values.raw(), weight.value.nbytes());
        done = true;
      }
      if (done) break;
    }
    if (done) continue;
    const auto old = old_weights.find(path);
    if (old == old_weights.end())
      throw Error("quantize: the quantized model's weight '" + path + "' has no counterpart in " + model.describe());
    if (old->second.dtype() != weight.value.dtype() || old->second.shape() != weight.value.shape())
      throw Error("quantize: weight '" + path + "' changed from " + old->second.shape().to_string() + " " +
                  dtype_name(old->second.dtype()) + " to " + weight.value.shape().to_string() + " " +
                  dtype_name(weight.value.dtype()));
    std::memcpy(weight.value.raw(), old->second.raw(), weight.value.nbytes());
  }
  if (!out.skipped.empty()) {
    std::string listing;
    for (const auto& [name, why] : out.skipped) listing += (listing.empty() ? "" : "; ") + name + " (" + why + ")";
    warn("quantize(\"" + mode + "\"): " + std::to_string(out.quantized.size()) + " layer(s) quantized, " +
         std::to_string(out.skipped.size()) + " left as they were: " + listing);
  }
  return quantized;
}

}  // namespace kiln
