#pragma once
// Where a token sits in its sequence, as keras-hub's layers say it: a learned PositionEmbedding, a token
// embedding plus a position embedding (TokenAndPositionEmbedding), the fixed SinePositionEncoding of
// "Attention is all you need", and RotaryEmbedding, which rotates queries and keys by their position.
// Registered under keras-hub's names ("keras_hub>PositionEmbedding", ...), so keras-hub's .keras files
// name them as kiln does.
//
//   kiln::Tensor ids = kiln::Input({kiln::Shape::unknown, 64});
//   kiln::Tensor h = kiln::TokenAndPositionEmbedding(/*vocabulary_size=*/65, /*sequence_length=*/64,
//                                                    /*embedding_dim=*/128)(ids);   // (None, 64, 128)
//
// PositionEmbedding and SinePositionEncoding return the positions' vectors in the input's shape; they do
// not add them to the input (x + SinePositionEncoding()(x), as in keras-hub). The call option
// "start_index" (an int, 0 by default) starts the positions there.
#include <cstdint>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::PositionEmbedding: one weight, "embeddings" (sequence_length, features), whose
/// row p is position p's vector.
class PositionEmbeddingLayer : public Layer {
 public:
  /// keras-hub's arguments: sequence_length (required, positive: the longest sequence), initializer =
  /// glorot_uniform.
  explicit PositionEmbeddingLayer(const Config& config);
  std::int64_t sequence_length() const { return sequence_length_; }  ///< the number of positions
  Config get_config() const override;
  /// What a call returns, for a layer that holds this one (TokenAndPositionEmbedding adds it to a masked
  /// tensor, whose mask the positions do not need). The layer must be built.
  Tensor positions(const Tensor& input, std::int64_t start_index) const;

 protected:
  /// Creates the embeddings for inputs (..., steps, features): the features must be known.
  void build(const Shape& input_shape) override;
  /// Rows [start_index, start_index + steps) of the embeddings, broadcast to the input's shape. ShapeError
  /// when the steps are unknown or run past sequence_length.
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"start_index"}; }

 private:
  std::int64_t sequence_length_ = 0;
  Initializer initializer_;
  WeightId embeddings_ = 0;
};

/// A learned vector for each position of a sequence: keras-hub's layers.PositionEmbedding.
class PositionEmbedding : public LayerHandle<PositionEmbeddingLayer> {
 public:
  /// Positions 0 .. sequence_length-1; further config keys in `options` (initializer, name, ...).
  explicit PositionEmbedding(std::int64_t sequence_length, const Config& options = {});
  /// From a whole config, with the keys of PositionEmbeddingLayer(const Config&).
  explicit PositionEmbedding(const Config& config) : LayerHandle(std::make_shared<PositionEmbeddingLayer>(config)) {}
};

/// The layer behind kiln::TokenAndPositionEmbedding: a ReversibleEmbedding "token_embedding" and a
/// PositionEmbedding "position_embedding", summed.
class TokenAndPositionEmbeddingLayer : public Layer {
 public:
  /// keras-hub's arguments: vocabulary_size, sequence_length and embedding_dim (required, positive),
  /// tie_weights = true, embeddings_initializer = uniform (both sublayers'), mask_zero = false (true: id 0 is
  /// padding, and the output carries the mask).
  explicit TokenAndPositionEmbeddingLayer(const Config& config);
  Config get_config() const override;
  std::int64_t vocabulary_size() const { return vocabulary_size_; }  ///< token ids 0 .. vocabulary_size-1
  std::int64_t sequence_length() const { return sequence_length_; }  ///< the positions
  std::int64_t embedding_dim() const { return embedding_dim_; }      ///< each vector's size
  /// The token embedding, whose reverse call maps the model's last vectors to vocabulary scores (a tied
  /// output head).
  const LayerPtr& token_embedding() const { return token_embedding_; }
  bool supports_masking() const override { return mask_zero_; }
  /// With mask_zero, the input's nonzero ids as a mask.
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 protected:
  void build(const Shape& input_shape) override;
  /// token_embedding(ids) + position_embedding(...): (batch, steps, embedding_dim) for ids (batch, steps).
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"start_index"}; }

 private:
  std::int64_t vocabulary_size_ = 0, sequence_length_ = 0, embedding_dim_ = 0;
  bool tie_weights_ = true, mask_zero_ = false;
  Config embeddings_initializer_;
  LayerPtr token_embedding_, position_embedding_;
};

/// Token ids to vectors that also say where each token is: keras-hub's layers.TokenAndPositionEmbedding.
class TokenAndPositionEmbedding : public LayerHandle<TokenAndPositionEmbeddingLayer> {
 public:
  /// Ids 0 .. vocabulary_size-1 in sequences of up to `sequence_length`, as vectors of `embedding_dim`;
  /// further config keys in `options` (tie_weights, embeddings_initializer, mask_zero, name, ...).
  TokenAndPositionEmbedding(std::int64_t vocabulary_size, std::int64_t sequence_length, std::int64_t embedding_dim,
                            const Config& options = {});
  /// From a whole config, with the keys of TokenAndPositionEmbeddingLayer(const Config&).
  explicit TokenAndPositionEmbedding(const Config& config)
      : LayerHandle(std::make_shared<TokenAndPositionEmbeddingLayer>(config)) {}
};

/// The layer behind kiln::SinePositionEncoding: no weights.
class SinePositionEncodingLayer : public Layer {
 public:
  /// keras-hub's argument: max_wavelength = 10000 (positive).
  explicit SinePositionEncodingLayer(const Config& config);
  double max_wavelength() const { return max_wavelength_; }  ///< the longest wavelength
  Config get_config() const override;

 protected:
  /// For inputs (..., steps, features), with position p = start_index + step and feature j:
  /// sin(p·w^(-2⌊j/2⌋/features)) at even j, cos(...) at odd j, w = max_wavelength, in the input's shape.
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"start_index"}; }

 private:
  double max_wavelength_ = 10000.0;
};

/// The sinusoidal position encoding of "Attention is all you need": keras-hub's layers.SinePositionEncoding.
class SinePositionEncoding : public LayerHandle<SinePositionEncodingLayer> {
 public:
  /// Wavelengths up to `max_wavelength`; further config keys in `options` (name, ...).
  explicit SinePositionEncoding(double max_wavelength = 10000.0, const Config& options = {});
  /// From a whole config, with the keys of SinePositionEncodingLayer(const Config&).
  explicit SinePositionEncoding(const Config& config)
      : LayerHandle(std::make_shared<SinePositionEncodingLayer>(config)) {}
};

/// The layer behind kiln::RotaryEmbedding: no weights.
class RotaryEmbeddingLayer : public Layer {
 public:
  /// keras-hub's arguments: max_wavelength = 10000, scaling_factor = 1 (positive), rope_type = "linear"
  /// ("dynamic" too; "yarn" is not supported), beta_fast = 32, beta_slow = 1,
  /// original_max_position_embeddings = 4096, truncate = false (YaRN's; kept for the config),
  /// sequence_axis = 1, feature_axis = -1 (distinct, not the batch axis), denominator_dim = null (the
  /// features).
  explicit RotaryEmbeddingLayer(const Config& config);
  Config get_config() const override;

 protected:
  /// Rotates each pair (x_i, x_{i+D/2}) of the features by the angle p·θ_i, p = start_index + step,
  /// θ_i = max_wavelength^(-2i/denominator_dim) / scaling (keras-hub's rotate-half form). The features must
  /// be even and the steps known.
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"start_index"}; }
  /// θ_i for the pair i of `features` rotated features: max_wavelength^(-2i/denominator_dim) divided by the
  /// scaling ("linear": scaling_factor; "dynamic": scaling_factor^(D/(D-2))). keras-hub's model families that
  /// compute it otherwise (Llama 3's frequency adjustment) override it.
  virtual double inverse_frequency(std::int64_t i, std::int64_t features) const;
  /// max_wavelength^(-2i/denominator_dim), unscaled.
  double base_inverse_frequency(std::int64_t i, std::int64_t features) const;

 private:
  double max_wavelength_ = 10000.0, scaling_factor_ = 1.0, beta_fast_ = 32.0, beta_slow_ = 1.0;
  std::string rope_type_ = "linear";
  std::int64_t original_max_position_embeddings_ = 4096, sequence_axis_ = 1, feature_axis_ = -1;
  bool truncate_ = false;
  Config denominator_dim_;
};

/// Rotary position embedding (RoPE) for queries and keys: keras-hub's layers.RotaryEmbedding.
///
///   kiln::Tensor q_rotated = kiln::RotaryEmbedding()(q);   // q: (batch, steps, heads, depth)
class RotaryEmbedding : public LayerHandle<RotaryEmbeddingLayer> {
 public:
  /// Frequencies from `max_wavelength`; further config keys in `options` (scaling_factor, rope_type, axes).
  explicit RotaryEmbedding(double max_wavelength = 10000.0, const Config& options = {});
  /// From a whole config, with the keys of RotaryEmbeddingLayer(const Config&).
  explicit RotaryEmbedding(const Config& config) : LayerHandle(std::make_shared<RotaryEmbeddingLayer>(config)) {}
};

}  // namespace kiln
