#pragma once
// What the quantized layers (Dense, Embedding in int8) share about Keras's quantization configs
// (keras/src/quantizers/quantization_config.py).
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln::detail {

// Keras's Int8QuantizationConfig as a quantized layer without one writes it: no weight quantizer, the default
// AbsMaxQuantizer() as the activation quantizer.
Config default_int8_quantization_config();
// Whether `quantizer` is Keras's AbsMaxQuantizer with the int8 defaults kiln's kernels compute (value_range
// [-127, 127], epsilon 1e-7, int8 output; an axis of -1 or none).
bool is_default_abs_max(const Config& quantizer);
// The activation quantizer a layer's Int8QuantizationConfig names (null when it names none), checked with
// `args` (ConfigError unless the config is an Int8QuantizationConfig of a quantized layer, or null).
Config int8_activation_quantizer(ConfigReader& args, const Config& given, bool quantized, const std::string& policy);

// Keras's Int4QuantizationConfig (keras/src/quantizers/quantization_config.py) of a layer whose policy mode is
// `mode` ("int4", "int4/<block>", "int4/-1"): the block size from the config, else from the mode (-1: per-channel,
// as a plain "int4" is Keras's older per-channel int4); the config as Keras writes it back; and whether the layer
// quantizes its inputs (a per-channel layer's activation quantizer, which must be Keras's default AbsMaxQuantizer;
// Keras refuses one by blocks). ConfigError (through `args`) on another class, a bad mode or quantizer.
struct Int4Setting {
  std::int64_t block_size = -1;  // > 0: by blocks of that many rows (Keras's default 128); -1: per-channel
  Config written;
  bool quantize_inputs = false;
};
// `check_activation` false: the activation quantizer is not read (an Embedding's ids are never quantized).
Int4Setting read_int4_config(ConfigReader& args, const Config& given, const std::string& mode,
                             bool check_activation = true);

// Keras's g_idx: each of `shape`'s entries' block, floor(i / block) (its idx_initializer).
Array block_indices(const Shape& shape, DType dtype, std::int64_t block);
// An int8 tensor's values as floats of `like`'s dtype (ops::dequantize by ones).
Tensor int8_as_floats(const Tensor& q, const Tensor& like);

// x (..., rows) times Keras's int4 kernel by groups of rows (Dense and EinsumDense's _int4_call): `packed` (rows,
// ceil(columns / 2)), scale (groups, columns), int8 zero (groups, columns), g_idx (rows,). The float kernel
// (value - zero) · scale multiplies as Keras's does; a token's few rows read the packed kernel directly
// (ops::quantized_matmul_int4_groups).
Tensor int4_groups_product(const Tensor& x, const Tensor& packed, const Tensor& scale, const Tensor& zero,
                           const Tensor& g_idx, std::int64_t columns);

// Keras's dtype policy of a quantized layer as it serializes it: QuantizedDTypePolicy {"mode": "int8", "source_name":
// ...}, or Int4DTypePolicy for "int4/<block>".
Config quantized_dtype_policy(const std::string& mode, const std::string& source_name);
// Keras's DTypePolicyMap (keras-hub's quantized backbones' dtype): `entries` a map of layer paths to policies.
Config dtype_policy_map(const Config& default_policy, const Config& entries);
bool is_dtype_policy_map(const Config& dtype);

}  // namespace kiln::detail

namespace kiln {
class Layer;
namespace detail {
// Every quantized part's policy under `root`, its own included, by path (Layer::quantized_policies()), first found
// first: what a DTypePolicyMap of the tree holds.
std::vector<std::pair<std::string, Config>> quantized_policies_under(const Layer& root);
}  // namespace detail
}  // namespace kiln

namespace kiln::detail {

}  // namespace kiln::detail
