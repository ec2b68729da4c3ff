#include <kiln/hub/layers/grouped_query_attention.hpp>

#include <algorithm>

#include <cmath>
#include <cstdint>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/attention_math.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/layers/hub/position_embedding.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::hub {

namespace {

// keras-hub's LlamaRotaryEmbedding: the base frequencies, not scaled by position; with Llama 3's four factors,
// frequencies whose wavelength exceeds pretraining_sequence_length / low_freq_factor are divided by
// frequency_adjustment_factor, those below pretraining_sequence_length / high_freq_factor kept, and those
// between blended.
class LlamaRotaryEmbeddingLayer final : public RotaryEmbeddingLayer {
 public:
  LlamaRotaryEmbeddingLayer(const GroupedQueryAttentionOptions& options)
      : RotaryEmbeddingLayer({{"name", "rotary_embedding"}, {"max_wavelength", options.rope_max_wavelength}}) {
    const Config* factors[] = {&options.rope_frequency_adjustment_factor, &options.rope_low_freq_factor,
                               &options.rope_high_freq_factor, &options.rope_pretraining_sequence_length};
    int given = 0;
    for (const Config* factor : factors) given += factor->is_null() ? 0 : 1;
    if (given != 0 && given != 4)
      throw ConfigError(options.class_name +
                        ": rope_frequency_adjustment_factor, rope_low_freq_factor, rope_high_freq_factor and "
                        "rope_pretraining_sequence_length are set together or not at all");
    if (given == 4) {
      adjusted_ = true;
      adjustment_ = options.rope_frequency_adjustment_factor.as_double();
      low_ = options.rope_low_freq_factor.as_double();
      high_ = options.rope_high_freq_factor.as_double();
      length_ = options.rope_pretraining_sequence_length.as_double();
      if (!(adjustment_ > 0) || !(low_ > 0) || !(high_ > low_) || !(length_ > 0))
        throw ConfigError(options.class_name +
                          ": Llama 3's rope factors need a positive adjustment, 0 < low_freq_factor < "
                          "high_freq_factor and a positive pretraining length");
    }
  }

 protected:
  double inverse_frequency(std::int64_t i, std::int64_t features) const override {
    const double base = base_inverse_frequency(i, features);
    if (!adjusted_) return base;
    const double pi = std::acos(-1.0);
    const double wavelength = 2 * pi / base;
    const double low_wavelength = length_ / low_, high_wavelength = length_ / high_;
    if (wavelength > low_wavelength) return base / adjustment_;
    if (wavelength < high_wavelength) return base;
    const double smooth = (length_ / wavelength - low_) / (high_ - low_);
    return (1 - smooth) * (base / adjustment_) + smooth * base;
  }

 private:
  bool adjusted_ = false;
  double adjustment_ = 1, low_ = 0, high_ = 0, length_ = 0;
};

// One of Phi3SuScaledRotaryEmbedding's two sets of frequencies: the base ones, each divided by its factor.
class FactoredRotaryEmbeddingLayer final : public RotaryEmbeddingLayer {
 public:
  FactoredRotaryEmbeddingLayer(const std::string& name, double max_wavelength, std::vector<double> factors)
      : RotaryEmbeddingLayer({{"name", name}, {"max_wavelength", max_wavelength}}), factors_(std::move(factors)) {}

 protected:
  double inverse_frequency(std::int64_t i, std::int64_t features) const override {
    return base_inverse_frequency(i, features) / factors_.at(static_cast<std::size_t>(i));
  }

 private:
  std::vector<double> factors_;
};

// keras-hub's Phi3SuScaledRotaryEmbedding: the short factors' rotation for a call over at most the pretraining
// length of tokens, the long factors' over more (chosen when the program runs if the length is not known before),
// scaled by sqrt(1 + ln(max / pretraining) / ln(pretraining)) past the pretraining length.
class Phi3SuScaledRotaryEmbeddingLayer final : public Layer {
 public:
  explicit Phi3SuScaledRotaryEmbeddingLayer(const GroupedQueryAttentionOptions& o)
      : Layer(Config{{"name", "phi3_su_scaled_rotary_embedding"}}, "Phi3SuScaledRotaryEmbedding"),
        pretraining_(o.su_pretraining_sequence_length) {
    if (o.su_pretraining_sequence_length <= 0 || o.su_max_sequence_length <= 0)
      throw ConfigError(o.class_name + ": max_sequence_length and pretraining_sequence_length must be positive");
    if (o.su_pretraining_sequence_length == 1 && o.su_max_sequence_length > 1)
      throw ConfigError(o.class_name + ": \"su\" scaling past a pretraining_sequence_length of 1 divides by ln(1)");
    short_ = track(std::make_shared<FactoredRotaryEmbeddingLayer>("short", o.rope_max_wavelength, o.su_short_factor));
    long_ = track(std::make_shared<FactoredRotaryEmbeddingLayer>("long", o.rope_max_wavelength, o.su_long_factor));
    const double ratio =
        static_cast<double>(o.su_max_sequence_length) / static_cast<double>(o.su_pretraining_sequence_length);
    if (ratio > 1.0)
      scale_ = std::sqrt(1.0 + std::log(ratio) / std::log(static_cast<double>(o.su_pretraining_sequence_length)));
  }

 protected:
  void build(const Shape&) override {}
  Tensor call(const Tensor& input, const CallArgs& args) override {
    std::int64_t tokens = input.rank() > 1 ? input.shape()[1] : Shape::unknown;
    // keras-hub's cached generate passes the prompt over its whole row (max_length tokens), then one token a step.
    if (const detail::DecodingStep* step = detail::decoding()) tokens = tokens > 1 ? step->length : 1;
    Tensor rotated;
    if (tokens != Shape::unknown) {
      rotated = (*(tokens > pretraining_ ? long_ : short_))(input, args);
    } else {
      const Tensor count = ops::max(ops::positions(input, 1)) + 1.0;
      const Tensor longer = ops::greater(count, ops::scalar_like(count, static_cast<double>(pretraining_)));
      rotated = ops::where(longer, (*long_)(input, args), (*short_)(input, args));
    }
    return scale_ == 1.0 ? rotated : rotated * scale_;
  }

 private:
  std::int64_t pretraining_;
  double scale_ = 1.0;
  LayerPtr short_, long_;
};

// keras-hub's FalconTransformerDecoder._get_slopes: for 2^m heads the geometric series from 2^(-8/2^m); for
// others the series of the power of 2 below, then every other slope of the power above.
std::vector<double> alibi_slopes(std::int64_t heads) {
  auto power_of_2 = [](std::int64_t n) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3)));
    std::vector<double> series;
    for (std::int64_t i = 0; i < n; ++i) series.push_back(start * std::pow(start, static_cast<double>(i)));
    return series;
  };
  const std::int64_t below = std::int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(heads))));
  std::vector<double> series = power_of_2(below);
  if (below == heads) return series;
  const std::vector<double> above = power_of_2(2 * below);
  for (std::size_t i = 0; static_cast<std::int64_t>(series.size()) < heads; i += 2) series.push_back(above[i]);
  return series;
}

Tensor heads_first(const Tensor& x) { return ops::transpose(x, {0, 2, 1, 3}); }

}  // namespace

GroupedQueryAttentionLayer::GroupedQueryAttentionLayer(GroupedQueryAttentionOptions options)
    : Layer(Config{{"name", options.name}}, options.class_name), options_(std::move(options)) {
  const auto& o = options_;
  if (o.num_query_heads <= 0 || o.num_key_value_heads <= 0 || o.num_query_heads % o.num_key_value_heads != 0)
    config_error("num_query_heads (" + std::to_string(o.num_query_heads) + ") must be a positive multiple of " +
                 "num_key_value_heads (" + std::to_string(o.num_key_value_heads) + ")");
  if (o.head_dim < 0) config_error("head_dim must be positive, got " + std::to_string(o.head_dim));
  if (o.sliding_window < 0) config_error("the sliding window must be positive, got " + std::to_string(o.sliding_window));
  if (o.qk_norm_epsilon < 0)
    config_error("the query and key norms' epsilon must be positive, got " + std::to_string(o.qk_norm_epsilon));
  if (o.logit_soft_cap < 0) config_error("the logit soft cap must be positive, got " + std::to_string(o.logit_soft_cap));
  if (!(o.dropout >= 0 && o.dropout < 1)) config_error("dropout must be in [0, 1), got " + std::to_string(o.dropout));
  if (o.falcon) {
    if (o.num_key_value_heads != o.num_query_heads)
      config_error("Falcon's attention has as many key and value heads as query heads");
  } else if (o.llama_rotary) {
    rotary_ = track(std::make_shared<LlamaRotaryEmbeddingLayer>(o));
  } else if (o.su_scaling) {
    rotary_ = track(std::make_shared<Phi3SuScaledRotaryEmbeddingLayer>(o));
  } else {
    rotary_ = track(std::make_shared<RotaryEmbeddingLayer>(Config{{"name", "rotary_embedding"},
                                                                  {"max_wavelength", o.rope_max_wavelength},
                                                                  {"scaling_factor", o.rope_scaling_factor}}));
  }
}

std::string GroupedQueryAttentionLayer::attribute(const std::string& name) const {
  return (options_.underscored ? "_" : "") + name;
}

std::vector<std::string> GroupedQueryAttentionLayer::keras_weight_paths() const {
  // Each projection's variables in Keras's order: kernel, bias, then a quantized kernel's kernel_scale (and an int4
  // one's by blocks kernel_zero and g_idx), numbered as Keras writes them.
  std::vector<std::string> paths;
  const auto projection_paths = [&](int projection, const std::string& part, bool bias) {
    int number = 0;
    const auto next = [&] { paths.push_back(attribute(part) + "/vars/" + std::to_string(number++)); };
    next();
    if (bias) next();
    if (int8(projection) || int4(projection)) next();
    if (int4(projection) && quantization_[projection].int4_block > 0) {
      next();
      next();
    }
  };
  int projection = 0;
  for (const std::string& part : {std::string("query_dense"), std::string("key_dense"), std::string("value_dense")}) {
    projection_paths(projection, part, options_.qkv_bias);
    if (options_.qk_norm_epsilon > 0 && part != "value_dense") paths.push_back(attribute(part) + "_layer_norm/vars/0");
    ++projection;
  }
  projection_paths(3, "output_dense", options_.falcon);
  return paths;
}

std::vector<std::string> GroupedQueryAttentionLayer::quantizable_projections() const {
  if (options_.heads_first_kernels) return {};
  if (options_.falcon) return {"query_dense", "key_dense", "value_dense", "output_dense"};
  return {"query", "key", "value", "attention_output"};
}

std::string GroupedQueryAttentionLayer::quantization_refusal(const Layer& part) const {
  if (&part != this || !options_.heads_first_kernels) return {};
  return options_.class_name + ": kiln does not quantize its projections yet (their kernels keep the heads first)";
}

void GroupedQueryAttentionLayer::quantization_resolved() {
  // (Gemma's are read by Keras's names to be refused by name)
  const std::vector<std::string> names = options_.heads_first_kernels
                                             ? std::vector<std::string>{"query", "key", "value", "attention_output"}
                                             : quantizable_projections();
  const std::vector<ProjectionQuantization> modes = projection_quantizations(names);
  for (std::size_t i = 0; i < 4; ++i)
    if (!modes[i].mode.empty() && options_.heads_first_kernels)
      throw ConfigError(describe() + " projection '" + names[i] + "': " + modes[i].mode + " for " +
                        options_.class_name + "'s kernels, which keep their heads first, is not one kiln runs yet");
  std::copy(modes.begin(), modes.end(), quantization_);
}

std::vector<std::pair<std::string, std::string>> GroupedQueryAttentionLayer::keras_sublayers() const {
  if (options_.falcon)  // FalconAttention's, in the order keras-hub makes them
    return {{"query_dense", "query_dense"},
            {"key_dense", "key_dense"},
            {"value_dense", "value_dense"},
            {"attention_dropout", "attention_dropout"},
            {"output_dense", "output_dense"},
            {"softmax", "softmax"}};
  if (options_.qk_norm_epsilon > 0)  // Qwen3Attention's, in the order keras-hub makes them
    return {{"_query_dense", "query"},
            {"_query_dense_layer_norm", "query_dense_layernorm"},
            {"_key_dense", "key"},
            {"_key_dense_layer_norm", "key_dense_layernorm"},
            {"_value_dense", "value"},
            {"_softmax", "attention_softmax"},
            {"_dropout_layer", "dropout"},
            {"_output_dense", "attention_output"},
            {"rotary_embedding_layer", "rotary_embedding"}};
  if (options_.underscored)  // LlamaAttention's attributes, in the order keras-hub makes them
    return {{"_query_dense", "query"},         {"_key_dense", "key"},           {"_value_dense", "value"},
            {"_softmax", "attention_softmax"}, {"_dropout_layer", "dropout"},   {"_output_dense", "attention_output"},
            {"rotary_embedding_layer", "rotary_embedding"}};
  const bool phi3 = options_.class_name == "Phi3Attention";
  return {{"query_dense", "query"},
          {"key_dense", "key"},
          {"value_dense", "value"},
          {"dropout_layer", "dropout"},
          {"output_dense", "attention_output"},
          {"softmax", phi3 ? "attention_softmax" : "softmax"},
          {options_.rotary_attribute, rotary_->name()}};
}

void GroupedQueryAttentionLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes (batch, steps, features) with known features", {{"input", input_shape}});
  const auto& o = options_;
  hidden_ = input_shape[2];
  head_dim_ = o.head_dim > 0 ? o.head_dim : hidden_ / o.num_query_heads;
  if (head_dim_ < 1 || (head_dim_ % 2 != 0 && !o.falcon))
    shape_error("needs an even head depth for its rotary embedding, got " + std::to_string(head_dim_),
                {{"input", input_shape}});
  for (const std::vector<double>* factors : {&o.su_short_factor, &o.su_long_factor})
    if (o.su_scaling && static_cast<std::int64_t>(factors->size()) != head_dim_ / 2)
      shape_error("needs rope_scaling_short_factor and rope_scaling_long_factor of head_dim / 2 = " +
                      std::to_string(head_dim_ / 2) + " factors each, got " + std::to_string(o.su_short_factor.size()) +
                      " and " + std::to_string(o.su_long_factor.size()),
                  {{"input", input_shape}});
  const Initializer kernel =
      o.kernel_initializer.is_null() ? Initializer::get("glorot_uniform") : Initializer::from_config(o.kernel_initializer);
  const Initializer bias =
      o.bias_initializer.is_null() ? Initializer::get("zeros") : Initializer::from_config(o.bias_initializer);
  auto kernel_shape = [&](std::int64_t heads) {
    return o.heads_first_kernels ? Shape{heads, hidden_, head_dim_} : Shape{hidden_, heads, head_dim_};
  };
  // keras-hub's order: query, key, value (each kernel, then bias), then the output projection.
  const Initializer ones = Initializer::get("ones");
  // An int8 projection (Keras's EinsumDense._int8_build): the kernel in int8, then the bias, then kernel_scale; an
  // int4 one (_int4_build): the kernel flattened to (rows, columns) and packed, the bias, then its scales.
  // An int4 kernel's (rows, columns) as Keras flattens it: the input features by the projection's heads · depth, the
  // output's heads · depth (both reduced) by the hidden features.
  const auto int4_extent = [&](int projection) {
    const std::int64_t heads = projection == 0 || projection == 3 ? o.num_query_heads : o.num_key_value_heads;
    return projection == 3 ? std::pair<std::int64_t, std::int64_t>{heads * head_dim_, hidden_}
                           : std::pair<std::int64_t, std::int64_t>{hidden_, heads * head_dim_};
  };
  const auto kernel_of = [&](int projection, const std::string& name, const Shape& shape) {
    if (int4(projection)) {
      const auto [rows, columns] = int4_extent(projection);
      return add_int8_weight(name, Shape{rows, (columns + 1) / 2});
    }
    return int8(projection) ? add_int8_weight(name, shape) : add_weight(name, shape, kernel);
  };
  const auto scale_of = [&](int projection, const std::string& name, const Shape& shape) {
    if (int8(projection)) scale_[projection] = add_weight(name, shape, ones, false);
    if (int4(projection)) {
      const auto [rows, columns] = int4_extent(projection);
      add_int4_scales(name.substr(0, name.size() - std::string("kernel_scale").size()), rows, columns,
                      quantization_[projection]);
    }
  };
  query_kernel_ = kernel_of(0, "query/kernel", kernel_shape(o.num_query_heads));
  if (o.qkv_bias) query_bias_ = add_weight("query/bias", Shape{o.num_query_heads, head_dim_}, bias);
  scale_of(0, "query/kernel_scale", Shape{1, 1, o.num_query_heads, head_dim_});
  if (o.qk_norm_epsilon > 0) query_norm_ = add_weight("query_dense_layernorm/scale", Shape{head_dim_}, ones);
  key_kernel_ = kernel_of(1, "key/kernel", kernel_shape(o.num_key_value_heads));
  if (o.qkv_bias) key_bias_ = add_weight("key/bias", Shape{o.num_key_value_heads, head_dim_}, bias);
  scale_of(1, "key/kernel_scale", Shape{1, 1, o.num_key_value_heads, head_dim_});
  if (o.qk_norm_epsilon > 0) key_norm_ = add_weight("key_dense_layernorm/scale", Shape{head_dim_}, ones);
  value_kernel_ = kernel_of(2, "value/kernel", kernel_shape(o.num_key_value_heads));
  if (o.qkv_bias) value_bias_ = add_weight("value/bias", Shape{o.num_key_value_heads, head_dim_}, bias);
  scale_of(2, "value/kernel_scale", Shape{1, 1, o.num_key_value_heads, head_dim_});
  if (o.falcon) {  // a Dense over the merged heads: the same values, stored (heads · depth, hidden)
    output_kernel_ = kernel_of(3, "output_dense/kernel", Shape{o.num_query_heads * head_dim_, hidden_});
    output_bias_ = add_weight("output_dense/bias", Shape{hidden_}, bias);
    scale_of(3, "output_dense/kernel_scale", Shape{hidden_});
  } else {
    output_kernel_ = kernel_of(3, "attention_output/kernel", Shape{o.num_query_heads, head_dim_, hidden_});
    scale_of(3, "attention_output/kernel_scale", Shape{1, 1, hidden_});
  }
}

Tensor GroupedQueryAttentionLayer::project(const Tensor& x, int projection, WeightId kernel, WeightId bias,
                                           std::int64_t heads) const {
  Tensor y;
  if (int8(projection)) {  // Keras's "bqm,muh->bquh" in int8: the inputs quantized per row
    y = ops::quantized_matmul(x, variable(kernel, x), variable(scale_[projection], x), true, 1);
  } else if (int4(projection)) {  // in int4: the float kernel the packed one stands for, then the float einsum
    y = int4_projection(x, kernel, quantization_[projection], heads * head_dim_);
  } else {
    Tensor weights = variable(kernel, x);
    if (options_.heads_first_kernels) weights = ops::transpose(weights, {1, 0, 2});
    y = ops::matmul(x, ops::reshape(weights, {hidden_, heads * head_dim_}));
  }
  if (options_.qkv_bias) y = y + ops::reshape(variable(bias, x), {heads * head_dim_});
  return ops::reshape(y, {ops::keep_dim, ops::keep_dim, heads, head_dim_});
}

Tensor GroupedQueryAttentionLayer::normalized(const Tensor& x, WeightId scale) const {
  if (!(options_.qk_norm_epsilon > 0)) return x;
  return ops::rms_norm(x, variable(scale, x), options_.qk_norm_epsilon);
}

Tensor GroupedQueryAttentionLayer::repeat_heads(const Tensor& x) const {
  const std::int64_t groups = options_.num_query_heads / options_.num_key_value_heads;
  if (groups == 1) return x;
  const Tensor expanded = ops::expand_dims(x, 3);  // (B, S, kv, 1, D)
  return ops::reshape(ops::concat(std::vector<Tensor>(static_cast<std::size_t>(groups), expanded), 3),
                      {ops::keep_dim, ops::keep_dim, options_.num_query_heads, head_dim_});
}

Tensor GroupedQueryAttentionLayer::alibi(const Tensor& positions) const {
  const std::vector<double> values = alibi_slopes(options_.num_query_heads);
  Array slope(Shape{1, options_.num_query_heads, 1, 1}, positions.dtype());
  for (std::size_t h = 0; h < values.size(); ++h) slope.set_flat(h, values[h]);
  // (B, 1, 1, S) · (1, heads, 1, 1)
  return ops::expand_dims(ops::expand_dims(positions, 1), 1) * ops::constant(positions.graph(), slope, "alibi_slopes");
}

Tensor GroupedQueryAttentionLayer::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                          bool causal, const CallArgs& args, const Tensor& like,
                                          const Tensor& bias) const {
  const auto& o = options_;
  const double scale = o.query_scale > 0 ? o.query_scale : 1.0 / std::sqrt(static_cast<double>(head_dim_));
  const bool training = args.training() && o.dropout > 0;
  Tensor attended;
  if (o.logit_soft_cap > 0 || (training && o.dropout_on_weights) || bias.valid()) {
    // The composition, heads first: scores (plus the scaled bias), capped, masked softmax, dropout on the weights.
    Tensor scores = detail::attention_scores(heads_first(q), heads_first(k), scale);
    if (bias.valid()) scores = scores + bias * scale;
    if (o.logit_soft_cap > 0) scores = ops::tanh(scores * (1.0 / o.logit_soft_cap)) * o.logit_soft_cap;
    const Tensor combined = detail::combined_mask(describe(), mask.valid() ? &mask : nullptr, causal, scores);
    const std::uint64_t seed = training ? detail::call_seed(Config(), name(), like) : 0;
    attended = heads_first(
        detail::attend(scores, heads_first(v), combined, o.dropout_on_weights ? o.dropout : 0.0, seed, training).output);
  } else {
    detail::AttentionOptions options;
    options.mask = mask.valid() ? &mask : nullptr;
    options.causal = causal;
    options.heads_last = true;
    attended = detail::attend(describe(), q, k, v, scale, options).output;
  }
  if (training && !o.dropout_on_weights)
    attended = ops::dropout(attended, o.dropout, detail::call_seed(Config(), name(), like), true);
  const Tensor merged = ops::reshape(attended, {ops::keep_dim, ops::keep_dim, o.num_query_heads * head_dim_});
  // (Keras's "bquh,uhm->bqm" in int8: the inputs quantized over heads and depth together; Falcon's Dense the same)
  // (in int4 the float kernel; Falcon's output Dense per channel: the unpacked kernel's product, divided by the
  // scale, as Dense._int4_call)
  const ProjectionQuantization& out = quantization_[3];
  const Tensor output =
      int8(3)  ? ops::quantized_matmul(merged, variable(output_kernel_, like), variable(scale_[3], like), true,
                                       o.falcon ? 1 : 2)
      : int4(3) && o.falcon && out.int4_block < 0
               ? ops::quantized_matmul(merged, variable(output_kernel_, like), variable(out.scale, like), false, 1,
                                       false, hidden_)
      : int4(3) ? int4_projection(merged, output_kernel_, out, hidden_)
               : ops::matmul(merged, ops::reshape(variable(output_kernel_, like), {o.num_query_heads * head_dim_, hidden_}));
  return o.falcon ? output + variable(output_bias_, like) : output;
}

Tensor GroupedQueryAttentionLayer::call(const Tensor& input, const CallArgs& args) {
  if (input.rank() != 3 || input.shape()[2] != hidden_)
    shape_error("was built for other features", {{"built for", build_shapes().at(0)}, {"input", input.shape()}});
  const auto& o = options_;
  const CallArgs inner = CallArgs().training(args.training());
  auto rotated = [&](const Tensor& x) { return rotary_ ? (*rotary_)(x, inner) : x; };
  const Tensor q = rotated(normalized(project(input, 0, query_kernel_, query_bias_, o.num_query_heads), query_norm_));
  const Tensor k = rotated(normalized(project(input, 1, key_kernel_, key_bias_, o.num_key_value_heads), key_norm_));
  const Tensor v = project(input, 2, value_kernel_, value_bias_, o.num_key_value_heads);

  if (const detail::DecodingStep* step = detail::decoding()) {
    // A step's tokens (one, or a prompt's at once): their keys and values into slots [start, start + tokens) of
    // the caches, then the slots `visible` gives each token attended.
    if (input.shape()[1] == Shape::unknown || input.shape()[0] == Shape::unknown)
      shape_error("decodes steps of a known batch and known tokens", {{"input", input.shape()}});
    const Shape cache_shape{input.shape()[0], step->length, o.num_key_value_heads, head_dim_};
    // Named by this layer's place in memory: every block's attention is called "self_attention".
    const std::string cache = describe() + "@" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    const Tensor keys = step->cache(cache + "/key", cache_shape), values = step->cache(cache + "/value", cache_shape);
    const Tensor next_keys = ops::write_steps(keys, k, step->start);
    const Tensor next_values = ops::write_steps(values, v, step->start);
    step->update(keys, next_keys);
    step->update(values, next_values);
    // (B, tokens, slots): a (B, slots) mask is one token's.
    Tensor visible = step->visible.rank() == 2 ? ops::expand_dims(step->visible, 1) : step->visible;
    if (o.sliding_window > 0) {
      const Tensor slots = ops::expand_dims(ops::expand_dims(ops::positions(next_keys, 1), 0), 0);  // (1, 1, slots)
      const Tensor positions = ops::expand_dims(step->positions, 2);                                 // (B, tokens, 1)
      visible = visible * ops::less(positions - slots, ops::scalar_like(slots, static_cast<double>(o.sliding_window)));
    }
    // Falcon: keras-hub's prompt pass puts ALiBi on every slot by its index; its one-token steps add none.
    const Tensor bias =
        o.falcon && input.shape()[1] > 1 ? alibi(ops::expand_dims(ops::positions(next_keys, 1), 0)) : Tensor();
    return attend(q, repeat_heads(next_keys), repeat_heads(next_values), visible, false, args, input, bias);
  }

  // The keys each query may see besides the causal rule: the padding mask's, within the sliding window.
  Tensor given;
  if (const Tensor* padding = args.find_tensor("padding_mask")) {
    if (padding->rank() != 2) shape_error("takes a padding mask (batch, steps)", {{"padding mask", padding->shape()}});
    given = *padding;
  }
  if (o.sliding_window > 0) {
    const Tensor rows = ops::expand_dims(ops::positions(input, 1), 1), columns = ops::expand_dims(ops::positions(input, 1), 0);
    const Tensor band = ops::less(rows - columns, ops::scalar_like(rows, static_cast<double>(o.sliding_window)));
    const Tensor keys = given.valid() ? given : ops::ones_like(ops::sum(input, {2}));
    given = ops::expand_dims(keys, 1) * band;  // (B, T, S)
  }
  Tensor bias;
  if (o.falcon) {
    // Each key's place among its row's unpadded keys (0 at padding): (cumsum(mask) - 1) · mask, the sum taken by a
    // product with the (S, S) triangle j <= i.
    const Tensor positions = ops::positions(input, 1);
    const Tensor keys = given.valid() && given.rank() == 2 ? ops::greater(given, ops::scalar_like(given, 0.0))
                                                           : ops::ones_like(ops::sum(input, {2}));
    const Tensor triangle = ops::less_equal(ops::expand_dims(positions, 1), ops::expand_dims(positions, 0));
    const Tensor counted = ops::matmul(keys, triangle);  // (B, S): unpadded keys up to each
    bias = alibi((counted - 1.0) * keys);
  }
  return attend(q, repeat_heads(k), repeat_heads(v), given, true, args, input, bias);
}

}  // namespace kiln::hub
