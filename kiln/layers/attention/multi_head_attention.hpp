#pragma once
// MultiHeadAttention: one implementation with two faces.
//
// (a) The 'Attention is all you need' TF2 form, MultiHeadAttention(h = 8), called on [query, key, value]:
//     d_model comes from the query's last dimension at build; per head, bias-free projections of
//     Q, K and V to d_model / h, scaled dot-product attention, concat, and a bias-free output
//     projection back to d_model. (Its config has key_dim null: "d_model / num_heads".)
// (b) Keras's form, MultiHeadAttention(num_heads, key_dim, {value_dim, dropout, use_bias, output_shape,
//     kernel_initializer, bias_initializer, seed}), called as mha(query, value) or mha(query, value, key)
//     with CallArgs: tensor "attention_mask" (batch, T, S), options "use_causal_mask",
//     "return_attention_scores" (list call only: outputs [output, scores (batch, heads, T, S)]).
//
// Inputs are (batch, length, features). The layer itself takes Keras's order, [query, value] or
// [query, value, key], as models record and configs save it; the handle's list call is the TF2 form,
// [query, key, value], and reorders.
// Weights follow Keras's EinsumDense layout and names: query/kernel (Eq, heads, key_dim), query/bias
// (heads, key_dim), key/..., value/..., attention_output/kernel (heads, value_dim, Eout),
// attention_output/bias (Eout,). Masks hold 1 (may attend) and 0; a query with nothing to attend
// gets zeros.
#include <cstdint>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::MultiHeadAttention, on (batch, length, features) inputs in Keras's order:
/// [query, value] or [query, value, key]. Its weights, in Keras's EinsumDense layout: query/kernel
/// (Eq, heads, key_dim), key/kernel (Ek, heads, key_dim), value/kernel (Ev, heads, value_dim) and
/// attention_output/kernel (heads, value_dim, Eout); with use_bias also query/bias (heads, key_dim),
/// key/bias, value/bias and attention_output/bias (Eout,).
class MultiHeadAttentionLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): num_heads (required), key_dim = null (d_model / num_heads at
  /// build: the TF2 form), value_dim = null (key_dim), dropout = 0 (in [0, 1), on the attention weights while
  /// training), use_bias = true, output_shape = null (the query's last dimension; else one positive size),
  /// attention_axes = null (only the length axis, 1 or -2), kernel_initializer = glorot_uniform,
  /// bias_initializer = zeros, seed = null. use_gate, regularizers, constraints, sliding_window and
  /// flash_attention are not supported. Throws ConfigError on a value out of range or an unknown key.
  explicit MultiHeadAttentionLayer(const Config& config);
  std::int64_t num_heads() const { return num_heads_; }  ///< the number of attention heads
  /// The depth of each head's queries and keys: key_dim, or d_model / num_heads when the config leaves it
  /// null (the TF2 form). 0 until built.
  std::int64_t key_dim() const { return key_depth_; }
  /// The depth of each head's values: value_dim, else key_dim(). 0 until built.
  std::int64_t value_dim() const { return value_depth_; }
  Config get_config() const override;
  /// Keras keeps the projections in EinsumDense sublayers: "query_dense/vars/0" (kernel), ".../vars/1" (bias),
  /// then key_dense, value_dense and output_dense; a quantized projection's kernel_scale next ("vars/2"), and an
  /// int4 one's by blocks kernel_zero and g_idx after it.
  std::vector<std::string> keras_weight_paths() const override;
  /// Keras's EinsumDense projections, which a DTypePolicyMap may make int8 ("<path>/query", ...).
  std::vector<std::string> quantizable_projections() const override {
    return {"query", "key", "value", "attention_output"};
  }
  std::string projection_mode(std::size_t index) const override;
  /// Keras's attributes: _dropout_layer, _softmax and the four EinsumDense projections, with their names.
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// The output keeps the query's steps: the query's mask passes on, as in Keras.
  bool supports_masking() const override { return true; }

  /// One step of cached self-attention (keras-hub's CachedMultiHeadAttention with an update index), for
  /// decoding a token at a time: `query` (batch, 1, features) is projected; its key and value go into the
  /// slot `start` (a one-element tensor) of `key_cache` and `value_cache` (batch, slots, heads, depth); the
  /// query attends the slots where `visible` (batch, slots) is 1. The layer must be built.
  struct CachedStep {
    Tensor output;       ///< (batch, 1, output features)
    Tensor key_cache;    ///< the key cache after the step
    Tensor value_cache;  ///< the value cache after the step
  };
  /// One decoding step (see CachedStep).
  CachedStep cached_self_attention(const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                                   const Tensor& start, const Tensor& visible) const;

 protected:
  /// Keras quantizes the four EinsumDense projections, not the layer: a DTypePolicyMap (a keras-hub backbone's)
  /// gives "<path>/query", "<path>/key", "<path>/value" and "<path>/attention_output" their policies. An int8
  /// projection keeps Keras's EinsumDense int8 weights: the kernel in int8, the bias, and kernel_scale, one scale
  /// per unit in Keras's shape ((1, 1, heads, depth); (1, 1, output features) for the output), and quantizes its
  /// inputs per row (per (batch, step) over heads · depth for the output) as EinsumDense._int8_call does. An int4
  /// projection ("int4/<block>", "int4/-1") keeps Keras's EinsumDense int4 weights, the kernel flattened to
  /// (input features, heads · depth) (for the output (heads · depth, output features)) and packed two values a
  /// byte along its columns, the bias, kernel_scale (columns,) per channel or (blocks, columns) with kernel_zero
  /// and g_idx by blocks of rows; it multiplies the float kernel they stand for, as EinsumDense._int4_call does.
  void quantization_resolved() override;
  /// Checks the shapes, resolves key_dim and value_dim and creates the weights. In the TF2 form the query's
  /// last dimension must divide by num_heads (else ShapeError).
  /// [query, value] and, when the key comes by keyword ("key"), its shape third: the key's projection is
  /// sized by the key's features, as in Keras.
  std::vector<Shape> build_shapes_for(const std::vector<Tensor>& inputs, const CallArgs& args) const override;
  void build(const std::vector<Shape>& input_shapes) override;
  /// Projects the query, key and value per head, attends (the queries scaled by 1/√key_dim), and projects
  /// the merged heads: [output (batch, T, Eout)], or [output, scores (batch, heads, T, S)] with
  /// return_attention_scores. From `args`: "key" (the key as a tensor, with two inputs only),
  /// "attention_mask" (batch, T, S) or (batch, S), 0 where a key may not be attended; "query_mask" (batch, T),
  /// "value_mask" and "key_mask" (batch, S), the inputs' masks when not given, 0 at padding (a padded
  /// query's row attends nothing and is 0, as in Keras); "use_causal_mask".
  /// Feature sizes other than at build, or unknown lengths, throw ShapeError.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"key",           "query_mask",          "value_mask", "key_mask", "attention_mask", "use_causal_mask",
            "return_attention_scores"};
  }
  /// The query's, value's and key's masks fill query_mask, value_mask and key_mask, as in Keras.
  std::vector<std::string> input_mask_arguments() const override { return {"query_mask", "value_mask", "key_mask"}; }
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 3}; }

 private:
  struct Projection {
    WeightId kernel = 0, bias = 0, kernel_scale = 0;
    ProjectionQuantization quantization;  ///< Keras's EinsumDense int8 (kernel_scale) or int4 (its scales)
  };
  Projection add_projection(const std::string& name, std::int64_t input_dim, std::int64_t depth,
                            const ProjectionQuantization& quantization);
  Tensor project(const Tensor& x, const Projection& projection, std::int64_t depth) const;
  /// The heads of `attended` (batch, length, heads, value_dim) merged and projected to the output features.
  Tensor project_output(const Tensor& attended, const Tensor& query) const;
  void check_inputs(const Shape& query, const Shape& key, const Shape& value) const;

  std::int64_t num_heads_ = 0;
  Config key_dim_, value_dim_, output_shape_, attention_axes_, seed_;
  double dropout_ = 0.0;
  bool use_bias_ = true;
  Initializer kernel_initializer_, bias_initializer_;
  WeightRegularization kernel_regularization_, bias_regularization_;
  Regularizer projection_activity_;  ///< Keras gives activity_regularizer to the four projections, not the output
  std::int64_t key_depth_ = 0, value_depth_ = 0, output_dim_ = 0, key_features_ = 0;
  Projection query_, key_, value_, output_;
};

/// Multi-head attention with projections, Keras's layers.MultiHeadAttention, that also speaks the
/// 'Attention is all you need' TF2 code's MultiHeadAttention(h), called on [query, key, value].
///
///   kiln::MultiHeadAttention mha(/*num_heads=*/4, /*key_dim=*/16);
///   kiln::Tensor y = mha(query, value);                       // Keras's form; key = value
///   kiln::Tensor z = kiln::MultiHeadAttention(8)({q, k, v});  // the TF2 form
class MultiHeadAttention : public LayerHandle<MultiHeadAttentionLayer> {
 public:
  /// The TF2 form: key_dim = d_model / h, no biases.
  explicit MultiHeadAttention(std::int64_t h = 8);
  /// Keras's form.
  /// `num_heads` heads of depth `key_dim`. `options` holds further config keys: value_dim, dropout, use_bias,
  /// output_shape, kernel_initializer, bias_initializer, seed, name, trainable, dtype.
  MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim, const Config& options = {});
  /// From a whole config, with the keys of MultiHeadAttentionLayer(const Config&).
  explicit MultiHeadAttention(const Config& config) : LayerHandle(std::make_shared<MultiHeadAttentionLayer>(config)) {}

  /// The TF2 form: [query, key, value] (or [query, value]).
  Outputs operator()(const std::vector<Tensor>& query_key_value, const CallArgs& args = {}) const;
  /// Keras's call order: (query, value, key = value).
  Outputs operator()(const Tensor& query, const Tensor& value, const CallArgs& args = {}) const {
    return (*layer_)(std::vector<Tensor>{query, value}, args);
  }
  /// Keras's call order with a key of its own: (query, value, key).
  Outputs operator()(const Tensor& query, const Tensor& value, const Tensor& key, const CallArgs& args = {}) const {
    return (*layer_)(std::vector<Tensor>{query, value, key}, args);
  }
};

}  // namespace kiln
