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
  /// No arguments besides the base ones; any other key throws ConfigError.
  explicit AddLayer(const Config& config);

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// The elementwise sum of two or more inputs. Throws ShapeError when their shapes do not broadcast to one,
  /// ConfigError when there are fewer than two.
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
  /// Throws ConfigError on an unknown key.
  explicit ConcatenateLayer(const Config& config);
  std::int64_t axis() const { return axis_; }  ///< as given: negative counts from the end
  Config get_config() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// Two or more inputs of one rank joined along axis, whose size must be known in each (so never the batch
  /// axis). Throws ShapeError when axis is out of range or the inputs differ elsewhere, ConfigError when
  /// there are fewer than two.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override {
    return {2, std::numeric_limits<std::size_t>::max()};
  }

 private:
  void check_shapes(const std::vector<Shape>& input_shapes) const;

  std::int64_t axis_ = -1;
};

/// Adds two or more tensors: Keras's layers.Add, as residual connections use it. Call it on a list:
///
///   kiln::Tensor y = kiln::Add()({x, h});
class Add : public LayerHandle<AddLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Add(const Config& config = {}) : LayerHandle(std::make_shared<AddLayer>(config)) {}
};

/// Joins two or more tensors along one axis, the last by default: Keras's layers.Concatenate. Call it on a
/// list: kiln::Concatenate()({a, b}) makes (None, 3) and (None, 5) into (None, 8).
class Concatenate : public LayerHandle<ConcatenateLayer> {
 public:
  /// Joins along `axis`; negative counts from the end. `options` holds further config keys: name,
  /// trainable, dtype.
  explicit Concatenate(std::int64_t axis = -1, const Config& options = {});
  /// From a whole config, with the keys of ConcatenateLayer(const Config&).
  explicit Concatenate(const Config& config) : LayerHandle(std::make_shared<ConcatenateLayer>(config)) {}
};

}  // namespace kiln
