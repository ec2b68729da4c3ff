#pragma once
// Pooling layers. GlobalAveragePooling1D: the mean over the steps of (batch, steps, features) inputs
// (Keras's layers.GlobalAveragePooling1D).
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::GlobalAveragePooling1D. It has no weights.
class GlobalAveragePooling1DLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): data_format = "channels_last" (inputs (batch, steps, features);
  /// "channels_first" means (batch, features, steps)), keepdims = false (true keeps the steps axis, size 1).
  /// Throws ConfigError on another data_format or an unknown key.
  explicit GlobalAveragePooling1DLayer(const Config& config);
  /// "channels_last" or "channels_first": which axis of the input holds the steps.
  const std::string& data_format() const { return data_format_; }
  bool keepdims() const { return keepdims_; }  ///< whether the output keeps the steps axis, of size 1
  Config get_config() const override;

 protected:
  /// Checks that the input has rank 3 (else ShapeError); there is nothing to create.
  void build(const Shape& input_shape) override;
  /// The mean over the steps axis of a rank-3 input: (batch, features), or with keepdims (batch, 1, features)
  /// for channels_last and (batch, features, 1) for channels_first.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_rank(const Shape& input_shape) const;

  std::string data_format_;
  bool keepdims_ = false;
};

/// Averages a sequence over its steps, one vector per sample: Keras's layers.GlobalAveragePooling1D. A
/// common way to turn the (batch, steps, features) output of an encoder into (batch, features) for a
/// classifier head.
class GlobalAveragePooling1D : public LayerHandle<GlobalAveragePooling1DLayer> {
 public:
  /// `data_format` says where the steps are: "channels_last", (batch, steps, features), or "channels_first",
  /// (batch, features, steps). `options` holds further config keys: keepdims, name, trainable, dtype.
  explicit GlobalAveragePooling1D(const std::string& data_format = "channels_last", const Config& options = {});
  /// GlobalAveragePooling1D("channels_first"): a string literal would otherwise be ambiguous with the Config form.
  explicit GlobalAveragePooling1D(const char* data_format, const Config& options = {})
      : GlobalAveragePooling1D(std::string(data_format), options) {}
  /// From a whole config, with the keys of GlobalAveragePooling1DLayer(const Config&).
  explicit GlobalAveragePooling1D(const Config& config)
      : LayerHandle(std::make_shared<GlobalAveragePooling1DLayer>(config)) {}
};

}  // namespace kiln
