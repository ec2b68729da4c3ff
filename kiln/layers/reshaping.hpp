#pragma once
// Reshape and Flatten: change the shape of each sample, keeping the batch dimension (Keras's
// layers.Reshape and layers.Flatten).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

class ReshapeLayer : public Layer {
 public:
  /// Arguments (Keras names): target_shape (required): each sample's new shape, without the batch
  /// dimension; one entry may be -1, inferred from the element count.
  explicit ReshapeLayer(const Config& config);
  const std::vector<std::int64_t>& target_shape() const { return target_shape_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::vector<std::int64_t> sample_dims(const Shape& input_shape) const;

  std::vector<std::int64_t> target_shape_;
};

class FlattenLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): data_format = null ("channels_last"); with "channels_first"
  /// the channels axis moves last before flattening, so both formats flatten in the same order.
  explicit FlattenLayer(const Config& config);
  const std::string& data_format() const { return data_format_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::int64_t flattened_size(const Shape& input_shape) const;

  std::string data_format_;
};

class Reshape : public LayerHandle<ReshapeLayer> {
 public:
  explicit Reshape(const std::vector<std::int64_t>& target_shape, const Config& options = {});
  /// Reshape({4, -1}): a braced list would otherwise be ambiguous with the Config form.
  explicit Reshape(std::initializer_list<std::int64_t> target_shape, const Config& options = {})
      : Reshape(std::vector<std::int64_t>(target_shape), options) {}
  explicit Reshape(const Config& config) : LayerHandle(std::make_shared<ReshapeLayer>(config)) {}
};

class Flatten : public LayerHandle<FlattenLayer> {
 public:
  explicit Flatten(const std::string& data_format = "channels_last", const Config& options = {});
  /// Flatten("channels_first"): a string literal would otherwise be ambiguous with the Config form.
  explicit Flatten(const char* data_format, const Config& options = {}) : Flatten(std::string(data_format), options) {}
  explicit Flatten(const Config& config) : LayerHandle(std::make_shared<FlattenLayer>(config)) {}
};

}  // namespace kiln
