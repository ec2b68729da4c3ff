#pragma once
// Pooling layers. GlobalAveragePooling1D: the mean over the steps of (batch, steps, features) inputs
// (Keras's layers.GlobalAveragePooling1D).
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

class GlobalAveragePooling1DLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): data_format = "channels_last" (inputs (batch, steps, features);
  /// "channels_first" means (batch, features, steps)), keepdims = false (true keeps the steps axis, size 1).
  explicit GlobalAveragePooling1DLayer(const Config& config);
  const std::string& data_format() const { return data_format_; }
  bool keepdims() const { return keepdims_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_rank(const Shape& input_shape) const;

  std::string data_format_;
  bool keepdims_ = false;
};

class GlobalAveragePooling1D : public LayerHandle<GlobalAveragePooling1DLayer> {
 public:
  explicit GlobalAveragePooling1D(const std::string& data_format = "channels_last", const Config& options = {});
  /// GlobalAveragePooling1D("channels_first"): a string literal would otherwise be ambiguous with the Config form.
  explicit GlobalAveragePooling1D(const char* data_format, const Config& options = {})
      : GlobalAveragePooling1D(std::string(data_format), options) {}
  explicit GlobalAveragePooling1D(const Config& config)
      : LayerHandle(std::make_shared<GlobalAveragePooling1DLayer>(config)) {}
};

}  // namespace kiln
