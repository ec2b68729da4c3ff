#pragma once
// Embedding: maps each index to a learned vector, a row of `embeddings` (Keras's layers.Embedding).
// Indices come as a float tensor of whole numbers (kiln tensors are float32 or float64) of any shape;
// the output has shape indices.shape + (output_dim,).
#include <cstdint>

#include <kiln/layers/layer.hpp>

namespace kiln {

class EmbeddingLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): input_dim (required; the vocabulary size), output_dim (required),
  /// embeddings_initializer = uniform (RandomUniform(-0.05, 0.05)), mask_zero = false (only false).
  /// Regularizers, constraints and LoRA are not supported.
  explicit EmbeddingLayer(const Config& config);
  std::int64_t input_dim() const { return input_dim_; }
  std::int64_t output_dim() const { return output_dim_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::int64_t input_dim_ = 0;
  std::int64_t output_dim_ = 0;
  Initializer embeddings_initializer_;
  WeightId embeddings_ = 0;
};

class Embedding : public LayerHandle<EmbeddingLayer> {
 public:
  explicit Embedding(std::int64_t input_dim, std::int64_t output_dim, const Config& options = {});
  explicit Embedding(const Config& config) : LayerHandle(std::make_shared<EmbeddingLayer>(config)) {}
};

}  // namespace kiln
