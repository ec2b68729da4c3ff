#pragma once
// Merging layers: combine two or more inputs into one (Keras's Add, Subtract, Multiply, Average, Maximum,
// Minimum, Concatenate and Dot).
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// What Add, Subtract, Multiply, Average, Maximum and Minimum share (Keras's Merge base): two or more
/// inputs that broadcast together as in NumPy, combined elementwise into one output.
class MergeLayer : public Layer {
 public:
  /// How the inputs combine.
  enum class Kind { add, subtract, multiply, average, maximum, minimum };
  /// No arguments besides the base ones; any other key throws ConfigError.
  MergeLayer(const Config& config, const std::string& class_name, Kind kind);
  Kind kind() const { return kind_; }  ///< how the inputs combine
  /// Keras's: a step is kept where any input keeps it (the inputs' masks or-ed); no mask unless every input
  /// has one.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// The elementwise combination of the inputs. Throws ShapeError when their shapes do not broadcast to
  /// one, ConfigError for too few inputs (Subtract: exactly two).
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override {
    if (kind_ == Kind::subtract) return {2, 2};
    return {2, std::numeric_limits<std::size_t>::max()};
  }

 private:
  void check_shapes(const std::vector<Shape>& input_shapes) const;
  Kind kind_;
};

/// The sum of its inputs (Keras's Add).
class AddLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit AddLayer(const Config& config) : MergeLayer(config, "Add", Kind::add) {}
};
/// The first input minus the second (Keras's Subtract): exactly two inputs.
class SubtractLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit SubtractLayer(const Config& config) : MergeLayer(config, "Subtract", Kind::subtract) {}
};
/// The elementwise product of its inputs (Keras's Multiply).
class MultiplyLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit MultiplyLayer(const Config& config) : MergeLayer(config, "Multiply", Kind::multiply) {}
};
/// The elementwise mean of its inputs (Keras's Average).
class AverageLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit AverageLayer(const Config& config) : MergeLayer(config, "Average", Kind::average) {}
};
/// The elementwise maximum of its inputs (Keras's Maximum); ties send the gradient to the earlier input.
class MaximumLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit MaximumLayer(const Config& config) : MergeLayer(config, "Maximum", Kind::maximum) {}
};
/// The elementwise minimum of its inputs (Keras's Minimum); ties send the gradient to the earlier input.
class MinimumLayer : public MergeLayer {
 public:
  /// No arguments besides the base ones.
  explicit MinimumLayer(const Config& config) : MergeLayer(config, "Minimum", Kind::minimum) {}
};

/// Its inputs joined along `axis`; every other dimension must agree.
class ConcatenateLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): axis = -1.
  /// Throws ConfigError on an unknown key.
  explicit ConcatenateLayer(const Config& config);
  std::int64_t axis() const { return axis_; }  ///< as given: negative counts from the end
  Config get_config() const override;
  /// Keras's: joined along the steps, the masks join too (an input without one counts as all kept); joined
  /// along another axis, a step is kept where any input keeps it, and every one is where an input has no mask.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

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

/// The batchwise dot product of two inputs along one axis of each (Keras's Dot and its batch_dot).
class DotLayer : public Layer {
 public:
  /// Arguments (Keras's): axes (required: an int for both inputs, or a list of two ints; negative counts
  /// from the end; never the batch axis 0), normalize = false (L2-normalize both inputs along their axes
  /// first, so the product is the cosine similarity). ConfigError for another form or an unknown key.
  explicit DotLayer(const Config& config);
  /// The contracted axis of each input, as given.
  const std::vector<std::int64_t>& axes() const { return axes_; }
  Config get_config() const override;
  /// Keras's: the product has no mask (the steps are summed over or recombined).
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>&, const Tensor&) const override { return {}; }

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// For each sample, the sum over the contracted axes of x·y: the output holds x's other axes, then y's
  /// (batch first, once), and (batch, 1) when nothing else is left. ShapeError naming the layer when an
  /// input has rank below 2, an axis does not exist or is the batch axis, or the two axes differ in size.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 2}; }

 private:
  // The two contracted axes, counted from the start, checked against the input shapes.
  std::pair<int, int> checked_axes(const std::vector<Shape>& input_shapes) const;

  std::vector<std::int64_t> axes_;
  bool axes_is_list_ = false;  ///< written back as given: 1 or [1, 2]
  bool normalize_ = false;
};

/// Adds two or more tensors: Keras's layers.Add, as residual connections use it. Call it on a list:
///
///   kiln::Tensor y = kiln::Add()({x, h});
class Add : public LayerHandle<AddLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Add(const Config& config = {}) : LayerHandle(std::make_shared<AddLayer>(config)) {}
};

/// Subtracts the second tensor from the first: Keras's layers.Subtract, called on a list of two.
class Subtract : public LayerHandle<SubtractLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Subtract(const Config& config = {}) : LayerHandle(std::make_shared<SubtractLayer>(config)) {}
};
/// Multiplies two or more tensors elementwise (a gate): Keras's layers.Multiply.
class Multiply : public LayerHandle<MultiplyLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Multiply(const Config& config = {}) : LayerHandle(std::make_shared<MultiplyLayer>(config)) {}
};
/// Averages two or more tensors elementwise (an ensemble): Keras's layers.Average.
class Average : public LayerHandle<AverageLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Average(const Config& config = {}) : LayerHandle(std::make_shared<AverageLayer>(config)) {}
};
/// The elementwise maximum of two or more tensors: Keras's layers.Maximum.
class Maximum : public LayerHandle<MaximumLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Maximum(const Config& config = {}) : LayerHandle(std::make_shared<MaximumLayer>(config)) {}
};
/// The elementwise minimum of two or more tensors: Keras's layers.Minimum.
class Minimum : public LayerHandle<MinimumLayer> {
 public:
  /// `config` holds only the base keys: name, trainable, dtype.
  explicit Minimum(const Config& config = {}) : LayerHandle(std::make_shared<MinimumLayer>(config)) {}
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

/// The dot product of two tensors per sample: Keras's layers.Dot, e.g. similarity scores between
/// embeddings, or (with normalize) cosine similarities.
///
///   kiln::Tensor scores = kiln::Dot(2, 2)({queries, keys});  // (None, 5, 8) · (None, 7, 8) -> (None, 5, 7)
///   kiln::Tensor cosine = kiln::Dot(1, {{"normalize", true}})({a, b});  // (None, 8) · (None, 8) -> (None, 1)
class Dot : public LayerHandle<DotLayer> {
 public:
  /// Contracts `axes` of both inputs; further config keys (normalize, name, ...) in `options`.
  explicit Dot(std::int64_t axes, const Config& options = {});
  /// Contracts `x_axis` of the first input with `y_axis` of the second (Keras's axes=(x_axis, y_axis)).
  Dot(std::int64_t x_axis, std::int64_t y_axis, const Config& options = {});
  /// From a whole config, with the keys of DotLayer(const Config&).
  explicit Dot(const Config& config) : LayerHandle(std::make_shared<DotLayer>(config)) {}
};

}  // namespace kiln
