#include <kiln/serialize/quantize.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/layers/detail/quantization.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln {
namespace {

// Why a layer of this dtype policy is left float (a "bfloat16" layer's variables are bfloat16, whose scales Keras
// computes in bfloat16).
std::string unquantized_policy(const std::string& policy) {
  return "its dtype policy is " + policy + " (kiln quantizes float32, float64 and mixed_bfloat16 layers)";
}

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

// Keras's int4 by blocks of input rows, as its numpy path computes it in float32
// (quantizers._abs_max_quantize_grouped_with_zero_point_numpy, then pack_int4 along the units): the rows padded with
// zeros to whole blocks (the zeros count in the last block's min and max), per block and unit scale = (max - min +
// 1e-7) / 15, zero = clip(round(-min / scale) - 8, -8, 7), values clip(round(x / scale) + zero, -8, 7), rounding ties
// to even; then two values a byte, the even unit in the low nibble.
struct Int4Blocks {
  Array packed, scale, zero;  // packed two values a byte along the last axis; zero absent per-channel
};

// Keras's pack_int4 along the last axis: rows × units int8 values in [-8, 7] to rows × ceil(units / 2) bytes, the
// even unit in the low nibble.
Array pack_int4(const Array& values) {
  const std::int64_t rows = values.shape().dim(0), units = values.shape().dim(1), bytes = (units + 1) / 2;
  Array packed(Shape{rows, bytes}, DType::int8);
  const auto* from = values.data<std::int8_t>();
  auto* to = packed.data<std::int8_t>();
  for (std::int64_t p = 0; p < rows; ++p)
    for (std::int64_t b = 0; b < bytes; ++b) {
      const int low = from[p * units + 2 * b] & 0x0f;
      const int high = 2 * b + 1 < units ? from[p * units + 2 * b + 1] & 0x0f : 0;
      to[p * bytes + b] = static_cast<std::int8_t>(static_cast<std::uint8_t>(low | (high << 4)));
    }
  return packed;
}

// A 2-D array's transpose, any dtype.
Array transposed(const Array& a) {
  const std::int64_t rows = a.shape().dim(0), columns = a.shape().dim(1);
  const std::size_t size = dtype_size(a.dtype());
  Array out(Shape{columns, rows}, a.dtype());
  const auto* from = static_cast<const unsigned char*>(a.raw());
  auto* to = static_cast<unsigned char*>(out.raw());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < columns; ++c)
      std::memcpy(to + static_cast<std::size_t>(c * rows + r) * size, from + static_cast<std::size_t>(r * columns + c) * size, size);
  return out;
}

template <class T>
Int4Blocks int4_block_values(const Array& kernel, std::int64_t block) {
  const std::int64_t rows = kernel.shape().dim(0), units = kernel.shape().dim(1);
  const std::int64_t groups = rows == 0 ? 0 : (rows - 1) / block + 1;
  Int4Blocks out{Array(Shape{rows, units}, DType::int8), Array(Shape{groups, units}, kernel.dtype()),
                 Array(Shape{groups, units}, DType::int8)};  // (values unpacked: the caller packs them)
  const T* w = kernel.data<T>();
  T* scale = out.scale.data<T>();
  auto* zero = out.zero.data<std::int8_t>();
  auto* values = out.packed.data<std::int8_t>();
  const auto clip = [](T v) { return std::clamp(v, T(-8), T(7)); };
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t j = 0; j < units; ++j) {
      const std::int64_t first = g * block, end = std::min(rows, first + block);
      T low = end - first < block ? T(0) : w[first * units + j], high = low;  // the padding's zeros
      for (std::int64_t p = first; p < end; ++p) {
        low = std::min(low, w[p * units + j]);
        high = std::max(high, w[p * units + j]);
      }
      const T s = ((high - low) + T(1e-7)) / T(15);
      const T z = clip(std::nearbyint(-low / s) + T(-8));
      scale[g * units + j] = s;
      zero[g * units + j] = static_cast<std::int8_t>(z);
      for (std::int64_t p = first; p < end; ++p) {
        const T q = clip(std::nearbyint(w[p * units + j] / s) + z);
        values[p * units + j] = std::isnan(q) ? std::int8_t{0} : static_cast<std::int8_t>(q);
      }
    }
  return out;
}

// Keras's int4 of a kernel (K, N) (a Dense's, or an EinsumDense's flattened to rows × columns), an Embedding table
// (V, D) or an untied ReversibleEmbedding's reverse map (D, V), as its quantize() computes it. By blocks of `block`
// rows of a kernel or reverse map (asymmetric, with zero points), or of columns of a table (quantized transposed,
// as Keras does); or per channel (block -1: abs_max_quantize with value_range (-8, 7) along the kernel's and the
// reverse map's rows, or along each table row). Then packed along the last axis, a reverse map along its rows; a
// reverse map's zero points are float, as Keras keeps them.
enum class Int4Kind { kernel, table, reverse };

Int4Blocks int4_weights(const Array& weights, std::int64_t block, Int4Kind kind) {
  const bool table = kind == Int4Kind::table;
  if (block < 0) {
    ops::QuantizedArray q = ops::abs_max_quantize(weights, table ? -1 : 0, 7);
    const std::int64_t scales = q.scale.shape().num_elements();
    const Array packed = kind == Int4Kind::reverse ? transposed(pack_int4(transposed(q.values))) : pack_int4(q.values);
    return {packed, q.scale.reshape(Shape{scales}), Array()};
  }
  const Array source = table ? transposed(weights) : weights;
  Int4Blocks b = source.dtype() == DType::float32 ? int4_block_values<float>(source, block)
                                                  : int4_block_values<double>(source, block);
  if (kind == Int4Kind::kernel) return {pack_int4(b.packed), b.scale, b.zero};
  if (table) return {pack_int4(transposed(b.packed)), transposed(b.scale), transposed(b.zero)};
  return {transposed(pack_int4(transposed(b.packed))), b.scale, b.zero.astype(b.scale.dtype())};
}

bool is_model_entry(const Config& layer) {
  const std::string kind = layer.get_string("class_name", "");
  return (kind == "Functional" || kind == "Sequential" || kind == "Model") && layer.contains("config") &&
         layer.at("config").is_map() && layer.at("config").contains("layers");
}

// Rewrites the layers of a model config (and of the models inside it) in place; `prefix` names nested layers.
void quantize_layers(Config& model, const std::string& mode, const std::string& prefix, QuantizationReport& report,
                     std::set<std::string>& kernels) {
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
      } else if (source != "float32" && source != "float64" && source != "mixed_bfloat16") {
        report.skipped.emplace_back(prefix + name, unquantized_policy(source));
      } else {
        layer_arguments.set("dtype", detail::quantized_dtype_policy(mode, source));
        layer_arguments.set("quantization_config", Config());  // Keras's default for the mode
        layer.set("config", layer_arguments);
        report.quantized.push_back(prefix + name);
        kernels.insert(prefix + name + (layer.get_string("class_name") == "Dense" ? "/kernel" : "/embeddings"));
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

// ---- models made from arguments (keras-hub's backbones and tasks) ----------------------------------------------
// Their configs hold arguments, not layers: Keras records the quantized layers as one DTypePolicyMap by layer path
// in the backbone's dtype, which every layer reads at its own path. The layers Keras quantizes are found in the
// live model, by path.

struct Unit {
  std::string path, what;  // what: "Dense", "Embedding", or "EinsumDense" (a MultiHeadAttention's projection)
  std::string source;      // the layer's policy, the quantized policy's source ("float32", "mixed_bfloat16")
};

void collect_units(const Layer& layer, std::vector<Unit>& units, std::vector<std::pair<std::string, std::string>>& skipped,
                   std::set<std::string>& seen, const Layer* parent = nullptr) {
  if (!seen.insert(layer.path() + "\n" + layer.class_name()).second) return;
  const std::string& kind = layer.class_name();
  // (what the layer, or its parent for it, says kiln leaves float where Keras would quantize)
  std::string refusal = layer.quantization_refusal(layer);
  if (refusal.empty() && parent != nullptr) refusal = parent->quantization_refusal(layer);
  if (!refusal.empty()) {
    skipped.emplace_back(layer.path(), refusal);
  } else if (kind == "Dense" || kind == "Embedding" || kind == "ReversibleEmbedding") {
    if (!layer.quantization_mode().empty())
      skipped.emplace_back(layer.path(), "already quantized");
    else if (layer.bfloat16_variables())
      skipped.emplace_back(layer.path(), unquantized_policy("bfloat16"));
    else
      units.push_back({layer.path(), kind == "Dense" ? "Dense" : "Embedding", layer.policy_name()});
  } else if (const std::vector<std::string> projections = layer.quantizable_projections(); !projections.empty()) {
    // (MultiHeadAttention's and keras-hub's attention layers' EinsumDense projections)
    for (std::size_t i = 0; i < projections.size(); ++i) {
      const std::string path = layer.path() + "/" + projections[i];
      if (layer.projection_quantized(i))
        skipped.emplace_back(path, "already quantized");
      else if (layer.bfloat16_variables())
        skipped.emplace_back(path, unquantized_policy("bfloat16"));
      else
        units.push_back({path, "EinsumDense", layer.policy_name()});
    }
  }
  for (const LayerPtr& child : layer.layers()) collect_units(*child, units, skipped, seen, &layer);
}

// Puts `policies` in the dtype of every config in `serialized` made from arguments (a "config" with a "dtype" and
// no "layers"): the backbone's, inside a task's. Returns how many took it.
int place_policy_map(Config& serialized, const Config& policies) {
  if (!serialized.is_map() || !serialized.contains("config") || !serialized.at("config").is_map()) return 0;
  Config arguments = serialized.at("config");
  int placed = 0;
  if (arguments.contains("dtype") && !arguments.contains("layers")) {
    // (Keras's map has a null default, the global policy; a backbone in another float keeps its own)
    const Config& dtype = arguments.at("dtype");
    Config map = policies;
    if (detail::is_dtype_policy_map(dtype)) {
      // Already a map (a partly quantized backbone): its entries and default stay, the new ones join them.
      map = dtype;
      Config arguments_of_map = map.at("config");
      Config entries = arguments_of_map.contains("policy_map") && arguments_of_map.at("policy_map").is_map()
                           ? arguments_of_map.at("policy_map")
                           : Config::map();
      for (const auto& [path, policy] : policies.at("config").at("policy_map").items())
        if (!entries.contains(path)) entries.set(path, policy);
      arguments_of_map.set("policy_map", entries);
      map.set("config", arguments_of_map);
    } else {
      bool quantized = false;
      const std::string source = source_dtype(dtype, quantized);
      if (source != "float32" && !quantized) map = detail::dtype_policy_map(source, policies.at("config").at("policy_map"));
    }
    arguments.set("dtype", map);
    placed = 1;
  } else {
    for (const std::string& key : arguments.keys()) {
      Config value = arguments.at(key);
      if (const int count = place_policy_map(value, policies); count > 0) {
        arguments.set(key, value);
        placed += count;
      }
    }
  }
  if (placed > 0) serialized.set("config", arguments);
  return placed;
}

}  // namespace

std::shared_ptr<ModelBase> quantize_model_base(const ModelBase& model, const std::string& mode,
                                               QuantizationReport* report) {
  // "int4" is Keras's default int4, by blocks of 128 input rows; "int4/<block>" another block size.
  std::int64_t int4_block = 0;
  std::string policy_mode = mode;
  if (mode == "int4") {
    int4_block = 128;
    policy_mode = "int4/128";
  } else if (mode == "int4/-1" || mode == "int4/None") {  // Keras's per-channel int4 (block_size -1 or None)
    int4_block = -1;
    policy_mode = "int4/-1";
  } else if (mode.rfind("int4/", 0) == 0) {
    const std::string size = mode.substr(5);
    if (size.empty() || size.size() > 9 || size.find_first_not_of("0123456789") != std::string::npos || std::stoll(size) == 0)
      throw ValueError("quantize: mode '" + mode + "' must be 'int4/<block size>', a positive block size, or "
                       "'int4/-1' (per-channel)");
    int4_block = std::stoll(size);
  } else if (mode != "int8") {
    const bool keras_mode = mode == "float8" || mode == "gptq" || mode == "awq" || mode == "ternary";
    throw ValueError("quantize: " + std::string(keras_mode ? "Keras's mode '" + mode + "' is not one kiln runs yet"
                                                           : "unknown mode '" + mode + "'") +
                     " (kiln quantizes 'int8' and 'int4')");
  }
  QuantizationReport local;
  QuantizationReport& out = report ? *report : local;
  out = QuantizationReport();
  Config config = model_config(model);
  std::set<std::string> kernels;  // weight paths of the kernels to quantize
  const bool has_layers =
      config.contains("config") && config.at("config").is_map() && config.at("config").contains("layers");
  std::vector<Unit> units;  // (from arguments)
  if (has_layers) {
    quantize_layers(config, policy_mode, "", out, kernels);
  } else {
    std::set<std::string> seen;
    collect_units(model, units, out.skipped, seen);
    Config map = Config::map();
    for (const Unit& unit : units) map.set(unit.path, detail::quantized_dtype_policy(policy_mode, unit.source));
    const Config policies = detail::dtype_policy_map(Config(), map);
    if (map.size() > 0 && place_policy_map(config, policies) == 0)
      throw ValueError("quantize: " + model.describe() + " has no layers in its config, nor a dtype to record "
                       "quantized layers in");
  }
  if (has_layers && out.quantized.empty())
    throw ValueError("quantize: " + model.describe() + " has no layer kiln quantizes to " + mode +
                     " (kiln quantizes float Dense and Embedding layers)");
  std::shared_ptr<ModelBase> quantized = model_base_from_config(config);

  // Every weight of the new model from the old one by path; a quantized kernel (and its scale) from the float kernel.
  std::map<std::string, Array> old_weights;
  for (const Weight& weight : model.weights()) old_weights.emplace(weight.path, weight.value);
  std::map<std::string, std::int64_t> new_sizes;  // (a kernel's units: its kernel_scale's size)
  std::map<std::string, Shape> new_shapes;        // (an int4 kernel's rows: its packed shape's first)
  for (const Weight& weight : quantized->weights()) {
    new_sizes.emplace(weight.path, weight.value.shape().num_elements());
    new_shapes.emplace(weight.path, weight.value.shape());
    // A weight int8 now and float before is one to quantize (by argument-made models' policy maps).
    const auto old = old_weights.find(weight.path);
    if (!has_layers && weight.value.dtype() == DType::int8 && old != old_weights.end() && is_floating(old->second.dtype()))
      kernels.insert(weight.path);
  }
  if (!has_layers) {
    // What the rebuilt model runs quantized, by path.
    std::set<std::string> done_paths;
    for (const auto& entry : detail::quantized_policies_under(*quantized)) done_paths.insert(entry.first);
    for (const Unit& unit : units) {
      const bool done = done_paths.count(unit.path) != 0;
      if (done)
        out.quantized.push_back(unit.path);
      else if (std::none_of(out.skipped.begin(), out.skipped.end(), [&](const auto& entry) { return entry.first == unit.path; }))
        out.skipped.emplace_back(unit.path, unit.what + ": outside the backbone whose dtype records the policies");
    }
    if (out.quantized.empty())
      throw ValueError("quantize: " + model.describe() + " has no layer kiln quantizes to " + mode +
                       " (kiln quantizes float Dense, Embedding and ReversibleEmbedding layers and MultiHeadAttention's "
                       "projections)");
  }
  // (int8 weight, its scale, the axis Keras reduces): Dense's kernel per unit, Embedding's rows per row.
  struct Quantized {
    const char* values;
    const char* scale;
    int axis;
  };
  const Quantized kinds[] = {{"/kernel", "/kernel_scale", 0},
                             {"/embeddings", "/embeddings_scale", -1},
                             {"/reverse_embeddings", "/reverse_embeddings_scale", 0}};
  const auto ends_with = [](const std::string& text, const std::string& suffix) {
    return text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::map<std::string, ops::QuantizedArray> quantized_weights;  // by the float weight's path
  const auto quantized_of = [&](const std::string& float_path, int axis) -> const ops::QuantizedArray& {
    auto found = quantized_weights.find(float_path);
    if (found == quantized_weights.end()) {
      Array values = old_weights.at(float_path);
      // An EinsumDense kernel reduces every axis before its units (a MultiHeadAttention's output (heads, depth,
      // features): heads and depth together): as (rows, units), the units counted by its kernel_scale.
      const std::string scale_path = float_path + "_scale";
      if (axis == 0 && values.shape().rank() > 2 && new_sizes.count(scale_path) != 0) {
        const std::int64_t units = new_sizes.at(scale_path);
        values = values.reshape(Shape{values.shape().num_elements() / units, units});
      }
      found = quantized_weights.emplace(float_path, ops::abs_max_quantize(values, axis)).first;
    }
    return found->second;
  };
  std::map<std::string, Int4Blocks> int4_kernels;  // by the float kernel's (or table's) path
  const auto int4_of = [&](const std::string& float_path, Int4Kind kind) -> const Int4Blocks& {
    auto found = int4_kernels.find(float_path);
    if (found == int4_kernels.end()) {
      Array weights = old_weights.at(float_path);
      if (kind == Int4Kind::kernel && weights.shape().rank() > 2) {
        // An EinsumDense kernel as Keras flattens it: its reduced axes make the rows, the packed kernel's first.
        const std::int64_t rows = new_shapes.at(float_path).dim(0);
        weights = weights.reshape(Shape{rows, weights.shape().num_elements() / rows});
      }
      found = int4_kernels.emplace(float_path, int4_weights(weights, int4_block, kind)).first;
    }
    return found->second;
  };
  for (Weight weight : quantized->weights()) {  // (a Weight shares its layer's storage)
    const std::string& path = weight.path;
    if (int4_block != 0) {  // int4: the packed kernel or table, its scales and zero points; g_idx as built
      const Array* source = nullptr;
      for (const auto& [base, kind] : {std::pair<std::string, Int4Kind>{"/kernel", Int4Kind::kernel},
                                       {"/embeddings", Int4Kind::table},
                                       {"/reverse_embeddings", Int4Kind::reverse}}) {
        const auto strip = [&, &base = base](const std::string& suffix) {
          return ends_with(path, suffix) ? path.substr(0, path.size() - suffix.size()) + base : std::string();
        };
        const std::string from_values = strip(base), from_scale = strip(base + "_scale"), from_zero = strip(base + "_zero");
        if (!from_values.empty() && kernels.count(from_values) != 0) source = &int4_of(from_values, kind).packed;
        if (!from_scale.empty() && kernels.count(from_scale) != 0) source = &int4_of(from_scale, kind).scale;
        if (!from_zero.empty() && kernels.count(from_zero) != 0) source = &int4_of(from_zero, kind).zero;
      }
      if (source != nullptr) {
        if (source->nbytes() != weight.value.nbytes())
          throw Error("quantize: the int4 weight '" + path + "' is " + weight.value.shape().to_string() +
                      ", its quantized values " + source->shape().to_string());
        std::memcpy(weight.value.raw(), source->raw(), weight.value.nbytes());
        continue;
      }
      if (ends_with(path, "/g_idx")) {
        const std::string owner = path.substr(0, path.size() - 6);
        if (kernels.count(owner + "/kernel") != 0 || kernels.count(owner + "/embeddings") != 0) continue;
      }
    }
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
