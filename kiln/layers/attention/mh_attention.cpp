#include <kiln/layers/attention/mh_attention.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/attention_math.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

MHAttentionLayer::MHAttentionLayer(const Config& config) : Layer(config, "MHAttention") {
  ConfigReader args = config_reader(config);
  key_size_ = args.integer("key_size");
  heads_ = args.integer("heads");
  const Config dimension = args.value("dimension");
  window_ = args.value("window");
  args.finish();
  if (key_size_ <= 0) args.fail("key_size must be positive, got " + std::to_string(key_size_));
  if (heads_ <= 0) args.fail("heads must be positive, got " + std::to_string(heads_));
  // kiln files before config version 2 kept the sequence length here; their build_config still says it.
  if (!dimension.is_null() && dimension.as_int("MHAttention argument 'dimension'") != heads_ * key_size_ &&
      detail::config_version() >= 2)
    args.fail("dimension is heads * key_size = " + std::to_string(heads_ * key_size_) + ", got " +
              dimension.to_string());
  if (!window_.is_null()) {
    if (window_.as_int("MHAttention argument 'window'") <= 0)
      args.fail("window must be positive, got " + window_.to_string());
    // The weights depend only on the window: build now, so loading weights never meets an unbuilt block.
    build_for(Shape{Shape::unknown, Shape::unknown, window_.as_int()});
  }
}

Config MHAttentionLayer::get_config() const {
  Config config = base_config();
  config.set("key_size", key_size_);
  config.set("heads", heads_);
  config.set("dimension", heads_ * key_size_);
  config.set("window", window_);
  return config;
}

Config MHAttentionLayer::build_config() const {
  if (!built()) return Config();
  return {{"input_shape", Config::from_shape(Shape{Shape::unknown, Shape::unknown, window_.as_int()})}};
}

void MHAttentionLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes (batch, sequence, window) inputs with a known window", {{"input", input_shape}});
  const std::int64_t window = input_shape[2];
  window_ = window;

  auto dense = [&](const char* name, std::int64_t units, const char* activation) {
    return track(create_layer("kiln>Dense", {{"name", name}, {"units", units}, {"activation", activation}}));
  };
  auto norm = [&](const char* name) {
    return track(create_layer("kiln>LayerNormalization", {{"name", name}, {"epsilon", 1e-6}}));
  };
  query_ = dense("query", heads_ * key_size_, "linear");
  key_ = dense("key", heads_ * key_size_, "linear");
  value_ = dense("value", heads_ * key_size_, "linear");
  w0_ = dense("w0", window, "linear");
  attention_norm_ = norm("attention_norm");
  feed_forward_hidden_ = dense("feed_forward_hidden", 4 * window, "swish");
  feed_forward_output_ = dense("feed_forward_output", window, "linear");
  output_norm_ = norm("output_norm");

  // Every sublayer is built here from shapes alone (never lazily in call), so a block made from its
  // config has all its weights before the first call; any sequence length and batch size follow.
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, window};
  const Shape projected{any, any, heads_ * key_size_};
  const Shape hidden{any, any, 4 * window};
  for (const LayerPtr& layer : {query_, key_, value_}) layer->build_for(sequence);
  w0_->build_for(projected);
  attention_norm_->build_for(sequence);
  feed_forward_hidden_->build_for(sequence);
  feed_forward_output_->build_for(hidden);
  output_norm_->build_for(sequence);
}

// (batch, length, heads, key_size), the layout the fused attention reads in place (heads_last).
Tensor MHAttentionLayer::split_heads(const Tensor& x) const {
  return ops::reshape(x, {ops::keep_dim, ops::keep_dim, heads_, key_size_});
}

Tensor MHAttentionLayer::merge_heads(const Tensor& x) const {
  return ops::reshape(x, {ops::keep_dim, ops::keep_dim, heads_ * key_size_});
}

Tensor MHAttentionLayer::call(const Tensor& x, const CallArgs&) {
  const Shape& shape = x.shape();
  if (shape.rank() != 3 || shape[2] != window_.as_int())
    shape_error("was built for a window of " + window_.to_string(),
                {{"built for", build_shapes().at(0)}, {"input", shape}});

  const Tensor q = split_heads((*query_)(x)), k = split_heads((*key_)(x)), v = split_heads((*value_)(x));
  const double scale = 1.0 / std::sqrt(static_cast<double>(key_size_));
  detail::AttentionOptions options;
  options.heads_last = true;
  const Tensor context = merge_heads(detail::attend(describe(), q, k, v, scale, options).output);
  const Tensor attended = (*attention_norm_)(x + (*w0_)(context));
  const Tensor feed_forward = (*feed_forward_output_)((*feed_forward_hidden_)(attended));
  return (*output_norm_)(attended + feed_forward);
}

MHAttention::MHAttention(std::int64_t key_size, std::int64_t heads, const Config& options)
    : LayerHandle(std::make_shared<MHAttentionLayer>(options.with("key_size", key_size).with("heads", heads))) {}

KILN_REGISTER_LAYER("Custom>MHAttention", MHAttentionLayer);

}  // namespace kiln
