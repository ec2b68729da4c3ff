#include <kiln/layers/detail/quantization.hpp>

#include <cstdint>
#include <string>
#include <set>
#include <vector>

#include <kiln/core/graph.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::detail {

namespace {
Config default_activation_quantizer() {
  return {{"module", "keras.quantizers"},
          {"class_name", "AbsMaxQuantizer"},
          {"config", {{"value_range", Config::list({Config(-127), Config(127)})}, {"epsilon", 1e-07}, {"output_dtype", "int8"}}},
          {"registered_name", Config()}};
}
}  // namespace

Config default_int8_quantization_config() {
  return {{"module", "keras.quantizers"},
          {"class_name", "Int8QuantizationConfig"},
          {"config", {{"weight_quantizer", Config()}, {"activation_quantizer", default_activation_quantizer()}}},
          {"registered_name", Config()}};
}

bool is_default_abs_max(const Config& quantizer) {
  if (!quantizer.is_map() || quantizer.get_string("class_name", "") != "AbsMaxQuantizer") return false;
  const Config* arguments = quantizer.find("config");
  if (arguments == nullptr || !arguments->is_map()) return true;
  if (const Config* range = arguments->find("value_range"); range != nullptr && !range->is_null())
    if (range->as_ints("value_range") != std::vector<std::int64_t>{-127, 127}) return false;
  if (const Config* epsilon = arguments->find("epsilon"); epsilon != nullptr && !epsilon->is_null())
    if (epsilon->as_double("epsilon") != 1e-07) return false;
  if (arguments->get_string("output_dtype", "int8") != "int8") return false;
  if (const Config* axis = arguments->find("axis"); axis != nullptr && !axis->is_null()) {
    const std::vector<std::int64_t> axes =
        axis->is_list() ? axis->as_ints("axis") : std::vector<std::int64_t>{axis->as_int("axis")};
    if (axes != std::vector<std::int64_t>{-1}) return false;
  }
  return true;
}

Config int8_activation_quantizer(ConfigReader& args, const Config& given, bool quantized, const std::string& policy) {
  if (given.is_null()) return quantized ? default_activation_quantizer() : Config();
  if (!quantized) args.fail("quantization_config is for a quantized layer; this one's dtype policy is " + policy);
  if (!given.is_map() || given.get_string("class_name", "") != "Int8QuantizationConfig")
    args.fail("quantization_config must be Keras's Int8QuantizationConfig for mode 'int8', got " + given.to_string());
  const Config* arguments = given.find("config");
  return arguments && arguments->is_map() && arguments->contains("activation_quantizer")
             ? arguments->at("activation_quantizer")
             : default_activation_quantizer();
}

Int4Setting read_int4_config(ConfigReader& args, const Config& given, const std::string& mode, bool check_activation) {
  Int4Setting out;
  if (!given.is_null() && (!given.is_map() || given.get_string("class_name", "") != "Int4QuantizationConfig"))
    args.fail("quantization_config must be Keras's Int4QuantizationConfig for mode '" + mode + "', got " +
              given.to_string());
  const Config* arguments = given.is_null() ? nullptr : given.find("config");
  const Config* block = arguments && arguments->is_map() ? arguments->find("block_size") : nullptr;
  if (block != nullptr) {
    out.block_size = block->is_null() ? -1 : block->as_int("block_size");
  } else if (!given.is_null()) {
    out.block_size = -1;  // a config without block_size: Keras's from_config makes it None, per channel
  } else if (const auto slash = mode.find('/'); slash != std::string::npos) {
    // "int4/128"; "int4/None" and "int4/-1" are per-channel, as Keras's Int4DTypePolicy reads them
    const std::string size = mode.substr(slash + 1);
    const bool digits = !size.empty() && size.size() <= 9 && size.find_first_not_of("0123456789") == std::string::npos;
    if (size == "None" || size == "-1")
      out.block_size = -1;
    else if (digits)
      out.block_size = std::stoll(size);
    else
      args.fail("the int4 policy's mode must be 'int4/<block size>', got '" + mode + "'");
  }
  if (out.block_size == 0 || out.block_size < -1)
    args.fail("int4's block_size must be positive, or -1 (per-channel), got " + std::to_string(out.block_size));
  const Config* activation = arguments && arguments->is_map() ? arguments->find("activation_quantizer") : nullptr;
  if (activation != nullptr && !activation->is_null() && check_activation) {
    if (out.block_size > 0)
      args.fail("Keras's int4 by blocks takes no activation quantizer, got " + activation->to_string());
    if (!is_default_abs_max(*activation))
      args.fail("kiln quantizes int4 layers' inputs as Keras's AbsMaxQuantizer() does (value_range [-127, 127], "
                "epsilon 1e-07, the last axis); got activation_quantizer " + activation->to_string());
    out.quantize_inputs = true;
  }
  out.written = given.is_null() ? Config{{"module", "keras.quantizers"},
                                         {"class_name", "Int4QuantizationConfig"},
                                         {"config", {{"weight_quantizer", Config()},
                                                     {"activation_quantizer", Config()},
                                                     {"block_size", out.block_size}}},
                                         {"registered_name", Config()}}
                                : given;
  return out;
}

Tensor int4_groups_product(const Tensor& x, const Tensor& packed, const Tensor& scale, const Tensor& zero,
                           const Tensor& g_idx, std::int64_t columns) {
  // Under a bfloat16 policy the float kernel multiplies as any product there does (ops::matmul rounds both operands
  // to bfloat16, as Keras's compute dtype casts them).
  if (x.graph().bfloat16_products()) return ops::matmul(x, ops::dequantize_int4(packed, scale, zero, g_idx, columns));
  // (the op takes the zero points in x's dtype, as an untied reverse map keeps them: the int8 ones as floats)
  return ops::quantized_matmul_int4_groups(x, packed, scale, int8_as_floats(zero, x), g_idx, columns, false, 0, false,
                                           false);
}

Array block_indices(const Shape& shape, DType dtype, std::int64_t block) {
  Array indices(shape, dtype);
  for (std::size_t i = 0; i < indices.size(); ++i)
    indices.set_flat(i, static_cast<double>(static_cast<std::int64_t>(i) / block));
  return indices;
}

Tensor int8_as_floats(const Tensor& q, const Tensor& like) {
  Array ones(Shape{q.shape()[q.rank() - 1]}, like.dtype());
  for (std::size_t i = 0; i < ones.size(); ++i) ones.set_flat(i, 1.0);
  return ops::dequantize(q, ops::constant(like.graph(), ones, "ones"));
}

Config quantized_dtype_policy(const std::string& mode, const std::string& source_name) {
  return {{"module", "keras.dtype_policies"},
          {"class_name", mode.rfind("int4", 0) == 0 ? "Int4DTypePolicy" : "QuantizedDTypePolicy"},
          {"config", {{"mode", mode}, {"source_name", source_name}}},
          {"registered_name", Config()}};
}

Config dtype_policy_map(const Config& default_policy, const Config& entries) {
  return {{"module", "keras.dtype_policies"},
          {"class_name", "DTypePolicyMap"},
          {"config", {{"default_policy", default_policy}, {"policy_map", entries}}},
          {"registered_name", Config()}};
}

bool is_dtype_policy_map(const Config& dtype) {
  return dtype.is_map() && dtype.get_string("class_name", "") == "DTypePolicyMap";
}

std::vector<std::pair<std::string, Config>> quantized_policies_under(const Layer& root) {
  std::vector<std::pair<std::string, Config>> out;
  std::set<std::string> paths;
  std::set<const Layer*> visited;
  std::vector<const Layer*> pending = {&root};
  while (!pending.empty()) {
    const Layer* layer = pending.back();
    pending.pop_back();
    if (!visited.insert(layer).second) continue;
    for (auto& entry : layer->quantized_policies())
      if (paths.insert(entry.first).second) out.push_back(std::move(entry));
    // (children in their order: the stack takes them last first)
    for (auto child = layer->layers().rbegin(); child != layer->layers().rend(); ++child) pending.push_back(child->get());
  }
  return out;
}

}  // namespace kiln::detail
