#pragma once
// Dropout: while training, zeroes each input element with probability `rate` and scales the rest by
// 1 / (1 - rate); at inference it is the identity (Keras's layers.Dropout).
#include <cstdint>
#include <optional>

#include <kiln/layers/layer.hpp>

namespace kiln {

class DropoutLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): rate (required, in [0, 1)), noise_shape = null (only null is
  /// supported), seed = null (then the mask stream is keyed by the layer's name).
  explicit DropoutLayer(const Config& config);
  double rate() const { return rate_; }
  const std::optional<std::int64_t>& seed() const { return seed_; }
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double rate_ = 0.0;
  std::optional<std::int64_t> seed_;
};

class Dropout : public LayerHandle<DropoutLayer> {
 public:
  explicit Dropout(double rate, const Config& options = {});
  explicit Dropout(const Config& config) : LayerHandle(std::make_shared<DropoutLayer>(config)) {}
};

}  // namespace kiln
