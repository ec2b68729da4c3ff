#pragma once
// Merging layers: combine two or more inputs into one (Keras's layers.Add and layers.Concatenate).
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The sum of its inputs, which broadcast together as in NumPy.
class AddLayer : public Layer {
 public:
  /// No arguments besides the base ones.
  explicit AddLayer(const Config& config);

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override {
    return {2, std::numeric_limits<std::size_t>::max()};
  }

 private:
  void check_shapes(const std::vector<Shape>& input_shapes) const;
};

/// Its inputs joined along `axis`; every other dimension must agree.
class ConcatenateLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): axis = -1.
  explicit ConcatenateLayer(const Config& config);
  std::int64_t axis() const { return axis_; }
  Config get_config() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override {
    return {2, std::numeric_limits<std::size_t>::max()};
  }

 private:
  void check_shapes(const std::vector<Shape>& input_shapes) const;

  std::int64_t axis_ = -1;
};

class Add : public LayerHandle<AddLayer> {
 public:
  explicit Add(const Config& config = {}) : LayerHandle(std::make_shared<AddLayer>(config)) {}
};

class Concatenate : public LayerHandle<ConcatenateLayer> {
 public:
  explicit Concatenate(std::int64_t axis = -1, const Config& options = {});
  explicit Concatenate(const Config& config) : LayerHandle(std::make_shared<ConcatenateLayer>(config)) {}
};

}  // namespace kiln
