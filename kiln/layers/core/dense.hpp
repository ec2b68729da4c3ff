#pragma once
// Dense: outputs = activation(inputs · kernel + bias), on the last axis of inputs of any rank.
// kernel has shape (input_dim, units) as in Keras (torch's Linear stores (out, in)).
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Dense: outputs = activation(inputs · kernel + bias) over the last axis, with weights
/// "kernel" (input_dim, units) and, with use_bias, "bias" (units,).
class DenseLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): units (required), activation = null (linear), use_bias = true,
  /// kernel_initializer = glorot_uniform, bias_initializer = zeros.
  /// LoRA must stay null. A QuantizedDTypePolicy of mode "int8" (a Keras file after model.quantize("int8"))
  /// makes the layer Keras's int8 Dense: an int8 kernel with a float kernel_scale per unit (neither trained), the
  /// inputs quantized per row unless quantization_config's activation_quantizer is null (ops::quantized_matmul).
  /// An Int4DTypePolicy "int4/<block>" (Keras's default int4) packs two int4 values a byte along the units, with a
  /// kernel_scale and an int8 kernel_zero per block of input rows and unit, and g_idx (each row's block): the kernel
  /// is made float (ops::dequantize_int4) and multiplied in float, as Keras does. Per-channel int4 ("int4/-1", a
  /// block_size of -1 or null) keeps one kernel_scale per unit and no zero point: the kernel unpacked and
  /// multiplied as int8's is (ops::quantized_matmul with int4_units; the inputs quantized only when the config
  /// names an activation quantizer).
  /// Throws ConfigError when units is not positive, the activation name is unknown, a key is unknown, or the
  /// quantization config is not Keras's Int8QuantizationConfig with its default quantizers.
  explicit DenseLayer(const Config& config);
  std::int64_t units() const { return units_; }  ///< the size of the output's last axis
  /// The activation's name; "linear" when none was given.
  const std::string& activation() const { return activation_; }
  bool use_bias() const { return use_bias_; }  ///< whether the layer adds a bias
  Config get_config() const override;
  /// Keras's order for a quantized layer (kernel, bias, kernel_scale), else the usual one.
  std::vector<std::string> keras_weight_paths() const override;

 protected:
  /// A DTypePolicyMap set the policy: the quantization config is read again for the mode.
  void quantization_resolved() override;
  /// Creates the kernel (input_dim, units), input_dim being the input's last dimension, and the bias.
  /// An input whose last dimension is unknown throws ShapeError.
  void build(const Shape& input_shape) override;
  /// activation(input · kernel + bias) for an input of any rank whose last dimension is the one the layer
  /// was built for (else ShapeError): the output is the input's shape with units as its last dimension.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void read_quantization_config(ConfigReader& args);

  std::int64_t units_ = 0;
  bool quantize_inputs_ = true;  // int8: Keras's activation quantizer (AbsMaxQuantizer) on the inputs
  Config quantization_config_;   // as Keras writes it; null for a float layer
  Config given_quantization_config_;  // the config's, read again when a DTypePolicyMap sets the mode
  std::string activation_;
  bool use_bias_ = true;
  Initializer kernel_initializer_, bias_initializer_;
  WeightRegularization kernel_regularization_, bias_regularization_;
  WeightId kernel_ = 0, bias_ = 0, kernel_scale_ = 0, kernel_zero_ = 0, g_idx_ = 0;
  std::int64_t int4_block_size_ = 0;  // int4: input rows a group of scales and zero points covers; -1 per-channel
};

/// A densely connected layer: Keras's layers.Dense.
///
///   kiln::Tensor h = kiln::Dense(16, "relu")(x);  // (None, 8) -> (None, 16)
class Dense : public LayerHandle<DenseLayer> {
 public:
  /// `units` outputs, an optional activation ("" is linear) and further config keys in `options`: use_bias,
  /// kernel_initializer, bias_initializer, name, trainable, dtype (see DenseLayer(const Config&)).
  explicit Dense(std::int64_t units, const std::string& activation = "", const Config& options = {});
  /// From a whole config, with the keys of DenseLayer(const Config&).
  explicit Dense(const Config& config) : LayerHandle(std::make_shared<DenseLayer>(config)) {}
};

}  // namespace kiln
