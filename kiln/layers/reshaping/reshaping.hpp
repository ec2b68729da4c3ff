#pragma once
// Reshape, Flatten, Permute and RepeatVector: change the shape of each sample, keeping the batch
// dimension (Keras's layers of those names).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Reshape. It has no weights.
class ReshapeLayer : public Layer {
 public:
  /// Arguments (Keras names): target_shape (required): each sample's new shape, without the batch
  /// dimension; one entry may be -1, inferred from the element count.
  /// Throws ConfigError when target_shape is missing, has an entry that is neither positive nor -1, has more
  /// than one -1, or when a key is unknown.
  explicit ReshapeLayer(const Config& config);
  /// As given, -1 included.
  const std::vector<std::int64_t>& target_shape() const { return target_shape_; }
  Config get_config() const override;

 protected:
  /// Checks that each sample's element count fits target_shape (else ShapeError). A -1 needs every
  /// dimension but the batch known; without one, an unknown size is checked when the graph runs.
  void build(const Shape& input_shape) override;
  /// `input` reshaped to (batch,) + target_shape, the -1 resolved.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::vector<std::int64_t> sample_dims(const Shape& input_shape) const;

  std::vector<std::int64_t> target_shape_;
};

/// The layer behind kiln::Flatten. It has no weights.
class FlattenLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): data_format = null ("channels_last"); with "channels_first"
  /// the channels axis moves last before flattening, so both formats flatten in the same order.
  /// Throws ConfigError on another data_format or an unknown key.
  explicit FlattenLayer(const Config& config);
  /// "channels_last" or "channels_first" (a null data_format reads "channels_last").
  const std::string& data_format() const { return data_format_; }
  Config get_config() const override;

 protected:
  /// Checks that every dimension but the batch is known (else ShapeError): the output's size depends on them.
  void build(const Shape& input_shape) override;
  /// `input` as (batch, product of the other dimensions).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::int64_t flattened_size(const Shape& input_shape) const;

  std::string data_format_;
};

/// Gives each sample a new shape with the same number of elements: Keras's layers.Reshape. The batch
/// dimension stays as it is.
///
///   kiln::Tensor y = kiln::Reshape({4, -1})(x);  // (None, 12) -> (None, 4, 3)
class Reshape : public LayerHandle<ReshapeLayer> {
 public:
  /// `target_shape` is each sample's shape, without the batch dimension; one entry may be -1, inferred.
  /// `options` holds further config keys: name, trainable, dtype.
  explicit Reshape(const std::vector<std::int64_t>& target_shape, const Config& options = {});
  /// Reshape({4, -1}): a braced list would otherwise be ambiguous with the Config form.
  explicit Reshape(std::initializer_list<std::int64_t> target_shape, const Config& options = {})
      : Reshape(std::vector<std::int64_t>(target_shape), options) {}
  /// From a whole config, with the keys of ReshapeLayer(const Config&).
  explicit Reshape(const Config& config) : LayerHandle(std::make_shared<ReshapeLayer>(config)) {}
};

/// Flattens each sample into one vector, keeping the batch dimension: Keras's layers.Flatten. (None, 4, 3)
/// becomes (None, 12).
class Flatten : public LayerHandle<FlattenLayer> {
 public:
  /// `data_format` is "channels_last" or "channels_first" (the channels axis, 1, moves last before flattening).
  /// `options` holds further config keys: name, trainable, dtype.
  explicit Flatten(const std::string& data_format = "channels_last", const Config& options = {});
  /// Flatten("channels_first"): a string literal would otherwise be ambiguous with the Config form.
  explicit Flatten(const char* data_format, const Config& options = {}) : Flatten(std::string(data_format), options) {}
  /// From a whole config, with the keys of FlattenLayer(const Config&).
  explicit Flatten(const Config& config) : LayerHandle(std::make_shared<FlattenLayer>(config)) {}
};

/// The layer behind kiln::Permute: the axes of each sample reordered.
class PermuteLayer : public Layer {
 public:
  /// Arguments (Keras's): dims (required), a permutation of 1..rank − 1 (the batch axis 0 stays first).
  /// ConfigError for anything else.
  explicit PermuteLayer(const Config& config);
  /// The order of the sample axes, counted from 1.
  const std::vector<std::int64_t>& dims() const { return dims_; }
  Config get_config() const override;

 protected:
  /// Checks the input's rank: dims().size() + 1 (ShapeError naming the layer otherwise).
  void build(const Shape& input_shape) override;
  /// The input transposed by (0, dims...).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_rank(const Shape& input_shape) const;

  std::vector<std::int64_t> dims_;
};

/// The layer behind kiln::RepeatVector: (batch, features) repeated n times to (batch, n, features).
class RepeatVectorLayer : public Layer {
 public:
  /// Arguments (Keras's): n (required, positive). ConfigError otherwise.
  explicit RepeatVectorLayer(const Config& config);
  std::int64_t n() const { return n_; }  ///< how many times the vector repeats
  Config get_config() const override;

 protected:
  /// Checks that the input has rank 2 (ShapeError naming the layer otherwise).
  void build(const Shape& input_shape) override;
  /// (batch, features) to (batch, n, features).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_rank(const Shape& input_shape) const;

  std::int64_t n_ = 1;
};

/// Reorders the axes of each sample, counted from 1: Keras's layers.Permute.
///
///   kiln::Tensor steps_last = kiln::Permute({2, 1})(x);  // (None, 10, 64) -> (None, 64, 10)
class Permute : public LayerHandle<PermuteLayer> {
 public:
  /// The new order of the sample axes (1-based), and further config keys in `options`.
  explicit Permute(const std::vector<std::int64_t>& dims, const Config& options = {});
  /// Permute({2, 1}).
  explicit Permute(std::initializer_list<std::int64_t> dims, const Config& options = {})
      : Permute(std::vector<std::int64_t>(dims), options) {}
  /// From a whole config, with the keys of PermuteLayer(const Config&).
  explicit Permute(const Config& config) : LayerHandle(std::make_shared<PermuteLayer>(config)) {}
};

/// Repeats a vector n times along a new axis 1: Keras's layers.RepeatVector, as encoder-decoder models
/// feed one encoding to every decoder step.
class RepeatVector : public LayerHandle<RepeatVectorLayer> {
 public:
  /// `n` repeats, and further config keys in `options`.
  explicit RepeatVector(std::int64_t n, const Config& options = {});
  /// From a whole config, with the keys of RepeatVectorLayer(const Config&).
  explicit RepeatVector(const Config& config) : LayerHandle(std::make_shared<RepeatVectorLayer>(config)) {}
};

}  // namespace kiln
