#pragma once
// Dense: outputs = activation(inputs · kernel + bias), on the last axis of inputs of any rank.
// kernel has shape (input_dim, units) as in Keras (torch's Linear stores (out, in)).
#include <cstdint>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

class DenseLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): units (required), activation = null (linear), use_bias = true,
  /// kernel_initializer = glorot_uniform, bias_initializer = zeros.
  explicit DenseLayer(const Config& config);
  std::int64_t units() const { return units_; }
  const std::string& activation() const { return activation_; }
  bool use_bias() const { return use_bias_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::int64_t units_ = 0;
  std::string activation_;
  bool use_bias_ = true;
  Initializer kernel_initializer_, bias_initializer_;
  WeightId kernel_ = 0, bias_ = 0;
};

class Dense : public LayerHandle<DenseLayer> {
 public:
  explicit Dense(std::int64_t units, const std::string& activation = "", const Config& options = {});
  explicit Dense(const Config& config) : LayerHandle(std::make_shared<DenseLayer>(config)) {}
};

}  // namespace kiln
