#include <kiln/hub/layers/decoder_blocks.hpp>

#include <map>
#include <memory>

#include <kiln/core/error.hpp>
#include <kiln/hub/layers/grouped_query_attention.hpp>
#include <kiln/hub/layers/rms_norm.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::hub {

namespace {

// A child's weights at keras-hub's attribute path: `attributes` maps a child's name to its attribute.
std::vector<std::string> attribute_paths(const Layer& layer, const std::map<std::string, std::string>& attributes) {
  std::vector<std::string> paths;
  for (const LayerPtr& child : layer.layers())
    for (const std::string& path : child->keras_weight_paths()) paths.push_back(attributes.at(child->name()) + "/" + path);
  return paths;
}

std::vector<std::pair<std::string, std::string>> attribute_groups(const Layer& layer,
                                                                  const std::map<std::string, std::string>& attributes) {
  std::vector<std::pair<std::string, std::string>> groups;
  for (const LayerPtr& child : layer.layers()) {
    const std::string& attribute = attributes.at(child->name());
    groups.emplace_back(attribute, child->name());
    for (const auto& [path, name] : child->keras_sublayers()) groups.emplace_back(attribute + "/" + path, name);
  }
  return groups;
}

LayerPtr dense(const std::string& name, std::int64_t units, const Config& kernel_initializer) {
  Config config = {{"name", name}, {"units", units}, {"use_bias", false}};
  if (!kernel_initializer.is_null()) config.set("kernel_initializer", kernel_initializer);
  return create_layer("kiln>Dense", config);
}

LayerPtr dropout(const std::string& name, double rate) {
  return create_layer("kiln>Dropout", {{"name", name}, {"rate", rate}});
}

std::int64_t positive(ConfigReader& args, const char* key) {
  const std::int64_t value = args.integer(key);
  if (value <= 0) args.fail(std::string(key) + " must be positive, got " + std::to_string(value));
  return value;
}

std::int64_t positive(ConfigReader& args, const char* key, std::int64_t fallback) {
  const std::int64_t value = args.integer(key, fallback);
  if (value <= 0) args.fail(std::string(key) + " must be positive, got " + std::to_string(value));
  return value;
}

const std::map<std::string, std::string>& gated_attributes() {
  static const std::map<std::string, std::string> attributes = {
      {"self_attention", "_self_attention_layer"},
      {"self_attention_layernorm", "_self_attention_layernorm"},
      {"self_attention_dropout", "_self_attention_dropout"},
      {"feedforward_intermediate_dense", "_feedforward_intermediate_dense"},
      {"feedforward_gate_dense", "_feedforward_gate_dense"},
      {"feedforward_output_dense", "_feedforward_output_dense"},
      {"feedforward_layernorm", "_feedforward_layernorm"}};
  return attributes;
}

const std::map<std::string, std::string>& phi3_attributes() {
  static const std::map<std::string, std::string> attributes = {
      {"pre_attention_layernorm", "pre_attention_layernorm"},
      {"attention", "attention"},
      {"post_attention_layernorm", "post_attention_layernorm"},
      {"feedforward_intermediate_dense", "feedforward_intermediate_dense"},
      {"feedforward_gate_dense", "feedforward_gate_dense"},
      {"feedforward_output_dense", "feedforward_output_dense"},
      {"attention_dropout", "attention_dropout"},
      {"feedforward_dropout", "feedforward_dropout"}};
  return attributes;
}

std::vector<double> factors_of(const Config& list, const char* key) {
  std::vector<double> factors;
  if (list.is_null()) return factors;
  for (const Config& factor : list.as_list(key)) factors.push_back(factor.as_double(key));
  return factors;
}

const std::map<std::string, std::string>& gemma_attributes() {
  static const std::map<std::string, std::string> attributes = {
      {"pre_attention_norm", "pre_attention_norm"}, {"post_attention_norm", "post_attention_norm"},
      {"attention", "attention"},                   {"attention_dropout", "attention_dropout"},
      {"feedforward_dropout", "feedforward_dropout"}, {"pre_ffw_norm", "pre_ffw_norm"},
      {"post_ffw_norm", "post_ffw_norm"},           {"ffw_gating", "gating_ffw"},
      {"ffw_gating_2", "gating_ffw_2"},             {"ffw_linear", "ffw_linear"}};
  return attributes;
}

void check_sequence(const Layer& layer, const Shape& built, const Tensor& input) {
  if (input.rank() != 3 || input.shape()[2] != built[2])
    throw ShapeError(layer.describe() + ": was built for " + built.to_string() + ", got " + input.shape().to_string());
}

}  // namespace

// ---- Llama, Mistral, Qwen, Qwen 3, Phi-3 ---------------------------------------------------------------------

GatedTransformerDecoderLayer::GatedTransformerDecoderLayer(const Config& config, const std::string& class_name,
                                                           Family family)
    : Layer(config, class_name), family_(family) {
  ConfigReader args = config_reader(config);
  intermediate_dim_ = positive(args, "intermediate_dim");
  num_query_heads_ = positive(args, "num_query_heads");
  num_key_value_heads_ = positive(args, "num_key_value_heads");
  rope_max_wavelength_ = args.number("rope_max_wavelength", 10000.0);
  if (family == Family::phi3) {
    hidden_dim_ = positive(args, "hidden_dim");
    max_sequence_length_ = positive(args, "max_sequence_length", 4096);
    pretraining_sequence_length_ = positive(args, "pretraining_sequence_length", 4096);
    rope_scaling_type_ = args.value("rope_scaling_type");
    rope_scaling_short_factor_ = args.value("rope_scaling_short_factor");
    rope_scaling_long_factor_ = args.value("rope_scaling_long_factor");
    if (!rope_scaling_type_.is_null() && rope_scaling_type_.as_string("rope_scaling_type") != "su")
      args.fail("rope_scaling_type must be null or \"su\", got " + rope_scaling_type_.to_string());
    if (!rope_scaling_type_.is_null()) {
      // Phi3Attention's head depth is hidden_dim / num_query_heads; "su" takes half as many factors of each kind.
      const std::int64_t pairs = hidden_dim_ / num_query_heads_ / 2;
      for (const char* key : {"rope_scaling_short_factor", "rope_scaling_long_factor"}) {
        const Config list = args.value(key);
        if (!list.is_list() || static_cast<std::int64_t>(list.as_list(key).size()) != pairs)
          args.fail(std::string("rope_scaling_type \"su\" needs ") + key +
                    " to list hidden_dim // num_query_heads // 2 = " + std::to_string(pairs) + " factors, got " +
                    list.to_string());
        for (const double factor : factors_of(list, key))
          if (!(factor > 0)) args.fail(std::string(key) + " must hold positive factors, got " + list.to_string());
      }
      if (pretraining_sequence_length_ == 1 && max_sequence_length_ > 1)
        args.fail("\"su\" scaling past a pretraining_sequence_length of 1 divides by ln(1)");
    }
  } else if (family == Family::llama) {
    rope_scaling_factor_ = args.number("rope_position_scaling_factor", 1.0);
    rope_frequency_adjustment_factor_ = args.value("rope_frequency_adjustment_factor");
    rope_low_freq_factor_ = args.value("rope_low_freq_factor");
    rope_high_freq_factor_ = args.value("rope_high_freq_factor");
    rope_pretraining_sequence_length_ = args.value("rope_pretraining_sequence_length");
  } else {
    rope_scaling_factor_ = args.number("rope_scaling_factor", 1.0);
  }
  if (family == Family::mistral) {
    sliding_window_ = args.has("sliding_window") ? args.value("sliding_window") : Config(std::int64_t{512});
    if (config.contains("sliding_window") && config.at("sliding_window").is_null()) sliding_window_ = Config();
    head_dim_ = args.value("head_dim");
    if (!sliding_window_.is_null() && sliding_window_.as_int("sliding_window") <= 0)
      args.fail("sliding_window must be positive or null, got " + sliding_window_.to_string());
    if (!head_dim_.is_null() && head_dim_.as_int("head_dim") <= 0)
      args.fail("head_dim must be positive or null, got " + head_dim_.to_string());
  }
  if (family == Family::qwen) {
    use_sliding_window_attention_ = args.boolean("use_sliding_window_attention", false);
    sliding_window_size_ = args.integer("sliding_window_size", 4096);
    if (sliding_window_size_ <= 0) args.fail("sliding_window_size must be positive");
  }
  if (family == Family::qwen3) {
    // keras-hub's Qwen3Attention takes hidden_dim // num_query_heads for a head_dim of None (or 0).
    if (!config.contains("head_dim"))
      args.fail("needs head_dim (keras-hub's Qwen3TransformerDecoder takes it; null for hidden_dim // num_query_heads)");
    head_dim_ = args.value("head_dim");
    if (!head_dim_.is_null() && head_dim_.as_int("head_dim") < 0)
      args.fail("head_dim must be positive, 0 or null, got " + head_dim_.to_string());
    const Config window = args.value("sliding_window_size");
    sliding_window_size_ = window.is_null() ? 0 : window.as_int("sliding_window_size");
    if (!window.is_null() && sliding_window_size_ <= 0) args.fail("sliding_window_size must be positive or null");
  }
  activation_ = args.text("activation", "silu");
  layer_norm_epsilon_ = args.number("layer_norm_epsilon", 1e-5);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform").get_config();
  dropout_ = args.number("dropout", 0.0);
  args.finish();
  if (num_query_heads_ % num_key_value_heads_ != 0)
    args.fail("num_query_heads (" + std::to_string(num_query_heads_) + ") must be a multiple of num_key_value_heads (" +
              std::to_string(num_key_value_heads_) + ")");
  if (!(dropout_ >= 0.0 && dropout_ < 1.0)) args.fail("dropout must be in [0, 1), got " + std::to_string(dropout_));
  if (!(layer_norm_epsilon_ > 0.0)) args.fail("layer_norm_epsilon must be positive");
  ops::check_activation(activation_, describe());
}

Config GatedTransformerDecoderLayer::get_config() const {
  Config config = base_config();
  if (family_ == Family::phi3) {  // keras-hub's Phi3Decoder's keys, in its order
    config.set("hidden_dim", hidden_dim_);
    config.set("intermediate_dim", intermediate_dim_);
    config.set("num_query_heads", num_query_heads_);
    config.set("num_key_value_heads", num_key_value_heads_);
    config.set("activation", activation_);
    config.set("layer_norm_epsilon", layer_norm_epsilon_);
    config.set("kernel_initializer", kernel_initializer_);
    config.set("dropout", dropout_);
    config.set("max_sequence_length", max_sequence_length_);
    config.set("pretraining_sequence_length", pretraining_sequence_length_);
    config.set("rope_max_wavelength", rope_max_wavelength_);
    config.set("rope_scaling_type", rope_scaling_type_);
    config.set("rope_scaling_short_factor", rope_scaling_short_factor_);
    config.set("rope_scaling_long_factor", rope_scaling_long_factor_);
    return config;
  }
  config.set("intermediate_dim", intermediate_dim_);
  config.set("num_query_heads", num_query_heads_);
  config.set("num_key_value_heads", num_key_value_heads_);
  config.set("rope_max_wavelength", rope_max_wavelength_);
  if (family_ == Family::llama) {
    config.set("rope_position_scaling_factor", rope_scaling_factor_);
    config.set("rope_frequency_adjustment_factor", rope_frequency_adjustment_factor_);
    config.set("rope_low_freq_factor", rope_low_freq_factor_);
    config.set("rope_high_freq_factor", rope_high_freq_factor_);
    config.set("rope_pretraining_sequence_length", rope_pretraining_sequence_length_);
  } else {
    config.set("rope_scaling_factor", rope_scaling_factor_);
  }
  if (family_ == Family::mistral) {
    config.set("sliding_window", sliding_window_);
    config.set("head_dim", head_dim_);
  }
  if (family_ == Family::qwen) {
    config.set("use_sliding_window_attention", use_sliding_window_attention_);
    config.set("sliding_window_size", sliding_window_size_);
  }
  config.set("activation", activation_);
  config.set("layer_norm_epsilon", layer_norm_epsilon_);
  config.set("kernel_initializer", kernel_initializer_);
  config.set("dropout", dropout_);
  if (family_ == Family::qwen3) {
    config.set("head_dim", head_dim_);
    config.set("sliding_window_size", sliding_window_size_ > 0 ? Config(sliding_window_size_) : Config());
  }
  return config;
}

std::vector<std::string> GatedTransformerDecoderLayer::keras_weight_paths() const {
  return attribute_paths(*this, family_ == Family::phi3 ? phi3_attributes() : gated_attributes());
}

std::vector<std::pair<std::string, std::string>> GatedTransformerDecoderLayer::keras_sublayers() const {
  return attribute_groups(*this, family_ == Family::phi3 ? phi3_attributes() : gated_attributes());
}

void GatedTransformerDecoderLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes (batch, steps, hidden) with a known hidden size", {{"input", input_shape}});
  const std::int64_t hidden = input_shape[2];
  GroupedQueryAttentionOptions options;
  options.num_query_heads = num_query_heads_;
  options.num_key_value_heads = num_key_value_heads_;
  options.rope_max_wavelength = rope_max_wavelength_;
  options.rope_scaling_factor = rope_scaling_factor_;
  options.dropout = dropout_;
  options.kernel_initializer = kernel_initializer_;
  auto norm = [&](const std::string& name) -> LayerPtr {
    const Config norm_config = {{"name", name}, {"epsilon", layer_norm_epsilon_}};
    if (family_ == Family::llama) return std::make_shared<LlamaLayerNormLayer>(norm_config);
    if (family_ == Family::mistral) return std::make_shared<MistralLayerNormalizationLayer>(norm_config);
    if (family_ == Family::qwen3) return std::make_shared<Qwen3LayerNormLayer>(norm_config);
    if (family_ == Family::phi3) return std::make_shared<Phi3LayerNormLayer>(norm_config);
    return std::make_shared<QwenLayerNormLayer>(norm_config);
  };
  switch (family_) {
    case Family::llama:
      options.class_name = "LlamaAttention";
      options.llama_rotary = true;
      options.rope_frequency_adjustment_factor = rope_frequency_adjustment_factor_;
      options.rope_low_freq_factor = rope_low_freq_factor_;
      options.rope_high_freq_factor = rope_high_freq_factor_;
      options.rope_pretraining_sequence_length = rope_pretraining_sequence_length_;
      break;
    case Family::mistral:
      options.class_name = "CachedMistralAttention";
      options.head_dim = head_dim_.is_null() ? 0 : head_dim_.as_int();
      options.sliding_window = sliding_window_.is_null() ? 0 : sliding_window_.as_int();
      break;
    case Family::qwen:
      options.class_name = "QwenAttention";
      options.qkv_bias = true;
      options.sliding_window = use_sliding_window_attention_ ? sliding_window_size_ : 0;
      break;
    case Family::qwen3:
      options.class_name = "Qwen3Attention";
      options.head_dim = head_dim_.is_null() ? 0 : head_dim_.as_int();
      options.sliding_window = sliding_window_size_;
      // The block does not pass its epsilon on: Qwen3Attention's norms keep their default, 1e-5.
      options.qk_norm_epsilon = 1e-5;
      break;
    case Family::phi3:
      options.class_name = "Phi3Attention";
      options.name = "attention";
      options.underscored = false;
      options.rotary_attribute = "rotary_embedding_layer";
      options.su_scaling = !rope_scaling_type_.is_null();
      if (options.su_scaling) {
        options.su_short_factor = factors_of(rope_scaling_short_factor_, "rope_scaling_short_factor");
        options.su_long_factor = factors_of(rope_scaling_long_factor_, "rope_scaling_long_factor");
      }
      options.su_max_sequence_length = max_sequence_length_;
      options.su_pretraining_sequence_length = pretraining_sequence_length_;
      break;
  }
  // keras-hub's order of creation, which is the weights' order.
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, hidden};
  if (family_ == Family::phi3) {
    if (hidden != hidden_dim_)
      shape_error("was made with hidden_dim " + std::to_string(hidden_dim_), {{"input", input_shape}});
    attention_norm_ = track(norm("pre_attention_layernorm"));
    attention_ = track(std::make_shared<GroupedQueryAttentionLayer>(options));
    feedforward_norm_ = track(norm("post_attention_layernorm"));
  } else {
    attention_ = track(std::make_shared<GroupedQueryAttentionLayer>(options));
    attention_norm_ = track(norm("self_attention_layernorm"));
  }
  attention_dropout_ = track(dropout(family_ == Family::phi3 ? "attention_dropout" : "self_attention_dropout", dropout_));
  intermediate_ = track(dense("feedforward_intermediate_dense", intermediate_dim_, kernel_initializer_));
  gate_ = track(dense("feedforward_gate_dense", intermediate_dim_, kernel_initializer_));
  output_ = track(dense("feedforward_output_dense", hidden, kernel_initializer_));
  if (family_ == Family::phi3)
    feedforward_dropout_ = track(dropout("feedforward_dropout", dropout_));
  else
    feedforward_norm_ = track(norm("feedforward_layernorm"));
  attention_->build_for(sequence);
  attention_norm_->build_for(sequence);
  intermediate_->build_for(sequence);
  gate_->build_for(sequence);
  output_->build_for(Shape{any, any, intermediate_dim_});
  feedforward_norm_->build_for(sequence);
}

Tensor GatedTransformerDecoderLayer::call(const Tensor& input, const CallArgs& args) {
  check_sequence(*this, build_shapes().at(0), input);
  const CallArgs inner = CallArgs().training(args.training());
  CallArgs attention_args = inner;
  if (const Tensor* padding = args.find_tensor("decoder_padding_mask")) attention_args.tensor("padding_mask", *padding);
  const Tensor attended = (*attention_dropout_)((*attention_)((*attention_norm_)(input, inner), attention_args), inner);
  const Tensor x = attended + input;
  const Tensor h = (*feedforward_norm_)(x, inner);
  const Tensor gated = ops::activation((*gate_)(h, inner), activation_) * (*intermediate_)(h, inner);
  const Tensor fed = (*output_)(gated, inner);
  return (feedforward_dropout_ ? (*feedforward_dropout_)(fed, inner) : fed) + x;
}

// ---- Gemma --------------------------------------------------------------------------------------------------

std::string GemmaDecoderBlockLayer::quantization_refusal(const Layer& part) const {
  if (&part == this || part.class_name() != "Dense") return {};
  return "Gemma's EinsumDense feed-forward: kiln does not quantize it yet";
}

GemmaDecoderBlockLayer::GemmaDecoderBlockLayer(const Config& config) : Layer(config, "GemmaDecoderBlock") {
  ConfigReader args = config_reader(config);
  hidden_dim_ = positive(args, "hidden_dim");
  intermediate_dim_ = positive(args, "intermediate_dim");
  head_dim_ = positive(args, "head_dim");
  num_query_heads_ = positive(args, "num_query_heads");
  num_key_value_heads_ = positive(args, "num_key_value_heads");
  query_head_dim_normalize_ = args.boolean("query_head_dim_normalize", true);
  use_post_ffw_norm_ = args.boolean("use_post_ffw_norm", false);
  use_post_attention_norm_ = args.boolean("use_post_attention_norm", false);
  logit_soft_cap_ = args.value("logit_soft_cap");
  use_sliding_window_attention_ = args.boolean("use_sliding_window_attention", false);
  sliding_window_size_ = args.integer("sliding_window_size", 4096);
  layer_norm_epsilon_ = args.number("layer_norm_epsilon", 1e-6);
  dropout_ = args.number("dropout", 0.0);
  args.finish();
  if (num_query_heads_ % num_key_value_heads_ != 0)
    args.fail("num_query_heads must be a multiple of num_key_value_heads");
  if (intermediate_dim_ < 2) args.fail("intermediate_dim must be at least 2 (the gated width is half of it)");
  if (!logit_soft_cap_.is_null() && !(logit_soft_cap_.as_double("logit_soft_cap") > 0))
    args.fail("logit_soft_cap must be positive or null");
  if (sliding_window_size_ <= 0) args.fail("sliding_window_size must be positive");
  if (!(dropout_ >= 0.0 && dropout_ < 1.0)) args.fail("dropout must be in [0, 1)");
  if (!(layer_norm_epsilon_ > 0.0)) args.fail("layer_norm_epsilon must be positive");
}

Config GemmaDecoderBlockLayer::get_config() const {
  Config config = base_config();
  config.set("hidden_dim", hidden_dim_);
  config.set("intermediate_dim", intermediate_dim_);
  config.set("head_dim", head_dim_);
  config.set("num_query_heads", num_query_heads_);
  config.set("num_key_value_heads", num_key_value_heads_);
  config.set("layer_norm_epsilon", layer_norm_epsilon_);
  config.set("dropout", dropout_);
  config.set("use_post_ffw_norm", use_post_ffw_norm_);
  config.set("use_post_attention_norm", use_post_attention_norm_);
  config.set("logit_soft_cap", logit_soft_cap_);
  config.set("use_sliding_window_attention", use_sliding_window_attention_);
  config.set("sliding_window_size", sliding_window_size_);
  config.set("query_head_dim_normalize", query_head_dim_normalize_);
  return config;
}

std::vector<std::string> GemmaDecoderBlockLayer::keras_weight_paths() const {
  return attribute_paths(*this, gemma_attributes());
}

std::vector<std::pair<std::string, std::string>> GemmaDecoderBlockLayer::keras_sublayers() const {
  return attribute_groups(*this, gemma_attributes());
}

void GemmaDecoderBlockLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes (batch, steps, hidden) with a known hidden size", {{"input", input_shape}});
  const std::int64_t hidden = input_shape[2];
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, hidden};
  auto norm = [&](const std::string& name) {
    return track(std::make_shared<GemmaRMSNormalizationLayer>(Config{{"name", name}, {"epsilon", layer_norm_epsilon_}}));
  };
  GroupedQueryAttentionOptions options;
  options.class_name = "CachedGemmaAttention";
  options.name = "attention";
  options.underscored = false;
  options.num_query_heads = num_query_heads_;
  options.num_key_value_heads = num_key_value_heads_;
  options.head_dim = head_dim_;
  options.heads_first_kernels = true;
  options.sliding_window = use_sliding_window_attention_ ? sliding_window_size_ : 0;
  options.logit_soft_cap = logit_soft_cap_.is_null() ? 0.0 : logit_soft_cap_.as_double();
  options.dropout = dropout_;
  options.dropout_on_weights = true;
  // keras-hub's order of creation (the weights' order): the norms, the attention, the dropouts, the gates.
  pre_attention_norm_ = norm("pre_attention_norm");
  if (use_post_attention_norm_) post_attention_norm_ = norm("post_attention_norm");
  attention_ = track(std::make_shared<GroupedQueryAttentionLayer>(options));
  if (dropout_ > 0) {
    attention_dropout_ = track(dropout("attention_dropout", dropout_));
    feedforward_dropout_ = track(dropout("feedforward_dropout", dropout_));
  }
  pre_ffw_norm_ = norm("pre_ffw_norm");
  if (use_post_ffw_norm_) post_ffw_norm_ = norm("post_ffw_norm");
  gating_ = track(dense("ffw_gating", intermediate_dim_ / 2, Config()));
  gating_2_ = track(dense("ffw_gating_2", intermediate_dim_ / 2, Config()));
  linear_ = track(dense("ffw_linear", hidden_dim_, Config()));
  for (const LayerPtr& layer : {pre_attention_norm_, post_attention_norm_, attention_, pre_ffw_norm_, post_ffw_norm_,
                                gating_, gating_2_})
    if (layer) layer->build_for(sequence);
  linear_->build_for(Shape{any, any, intermediate_dim_ / 2});
}

Tensor GemmaDecoderBlockLayer::call(const Tensor& input, const CallArgs& args) {
  check_sequence(*this, build_shapes().at(0), input);
  const CallArgs inner = CallArgs().training(args.training());
  CallArgs attention_args = inner;
  if (const Tensor* padding = args.find_tensor("padding_mask")) attention_args.tensor("padding_mask", *padding);
  Tensor attended = (*attention_)((*pre_attention_norm_)(input, inner), attention_args);
  if (post_attention_norm_) attended = (*post_attention_norm_)(attended, inner);
  if (attention_dropout_) attended = (*attention_dropout_)(attended, inner);
  const Tensor x = input + attended;
  const Tensor h = (*pre_ffw_norm_)(x, inner);
  Tensor y = (*linear_)(ops::gelu((*gating_)(h, inner), /*approximate=*/true) * (*gating_2_)(h, inner), inner);
  if (post_ffw_norm_) y = (*post_ffw_norm_)(y, inner);
  return y + x;  // keras-hub makes feedforward_dropout but never calls it
}

// ---- Falcon -------------------------------------------------------------------------------------------------

namespace {

const std::map<std::string, std::string>& falcon_attributes() {
  static const std::map<std::string, std::string> attributes = {
      {"input_layernorm", "input_layernorm"},
      {"attention", "attention_layer"},
      {"attention_dropout", "attention_dropout"},
      {"post_attention_layernorm", "post_attention_layernorm"},
      {"dense_h_to_4h", "dense_h_to_4h"},
      {"dense_4h_to_h", "dense_4h_to_h"},
      {"feedforward_dropout", "feedforward_dropout"}};
  return attributes;
}

double rate(ConfigReader& args, const char* key) {
  const double value = args.number(key, 0.0);
  if (!(value >= 0.0 && value < 1.0)) args.fail(std::string(key) + " must be in [0, 1), got " + std::to_string(value));
  return value;
}

}  // namespace

FalconTransformerDecoderLayer::FalconTransformerDecoderLayer(const Config& config)
    : Layer(config, "FalconTransformerDecoder") {
  ConfigReader args = config_reader(config);
  num_attention_heads_ = positive(args, "num_attention_heads");
  intermediate_dim_ = positive(args, "intermediate_dim");
  layer_norm_epsilon_ = args.number("layer_norm_epsilon", 1e-5);
  attention_dropout_rate_ = rate(args, "attention_dropout_rate");
  feedforward_dropout_rate_ = rate(args, "feedforward_dropout_rate");
  args.finish();
  if (!(layer_norm_epsilon_ > 0.0)) args.fail("layer_norm_epsilon must be positive");
}

Config FalconTransformerDecoderLayer::get_config() const {
  Config config = base_config();
  config.set("num_attention_heads", num_attention_heads_);
  config.set("intermediate_dim", intermediate_dim_);
  config.set("layer_norm_epsilon", layer_norm_epsilon_);
  config.set("attention_dropout_rate", attention_dropout_rate_);
  config.set("feedforward_dropout_rate", feedforward_dropout_rate_);
  return config;
}

std::vector<std::string> FalconTransformerDecoderLayer::keras_weight_paths() const {
  return attribute_paths(*this, falcon_attributes());
}

std::vector<std::pair<std::string, std::string>> FalconTransformerDecoderLayer::keras_sublayers() const {
  return attribute_groups(*this, falcon_attributes());
}

void FalconTransformerDecoderLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes (batch, steps, hidden) with a known hidden size", {{"input", input_shape}});
  const std::int64_t hidden = input_shape[2];
  if (hidden % num_attention_heads_ != 0)
    shape_error("needs a hidden size divisible by num_attention_heads (" + std::to_string(num_attention_heads_) + ")",
                {{"input", input_shape}});
  GroupedQueryAttentionOptions options;
  options.class_name = "FalconAttention";
  options.name = "attention";
  options.underscored = false;
  options.falcon = true;
  options.num_query_heads = options.num_key_value_heads = num_attention_heads_;
  options.qkv_bias = true;
  options.dropout = attention_dropout_rate_;
  options.dropout_on_weights = true;
  auto norm = [&](const std::string& name) {
    return create_layer("kiln>LayerNormalization", {{"name", name}, {"epsilon", layer_norm_epsilon_}});
  };
  // keras-hub's order of creation, which is the weights' order.
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, hidden};
  input_norm_ = track(norm("input_layernorm"));
  attention_ = track(std::make_shared<GroupedQueryAttentionLayer>(options));
  attention_dropout_ = track(dropout("attention_dropout", attention_dropout_rate_));
  post_attention_norm_ = track(norm("post_attention_layernorm"));
  dense_h_to_4h_ = track(create_layer("kiln>Dense", {{"name", "dense_h_to_4h"},
                                                     {"units", intermediate_dim_},
                                                     {"activation", "gelu"},
                                                     {"use_bias", true}}));
  dense_4h_to_h_ = track(create_layer("kiln>Dense", {{"name", "dense_4h_to_h"}, {"units", hidden}, {"use_bias", true}}));
  feedforward_dropout_ = track(dropout("feedforward_dropout", feedforward_dropout_rate_));
  input_norm_->build_for(sequence);
  attention_->build_for(sequence);
  post_attention_norm_->build_for(sequence);
  dense_h_to_4h_->build_for(sequence);
  dense_4h_to_h_->build_for(Shape{any, any, intermediate_dim_});
}

Tensor FalconTransformerDecoderLayer::call(const Tensor& input, const CallArgs& args) {
  check_sequence(*this, build_shapes().at(0), input);
  const CallArgs inner = CallArgs().training(args.training());
  CallArgs attention_args = inner;
  if (const Tensor* padding = args.find_tensor("decoder_padding_mask")) attention_args.tensor("padding_mask", *padding);
  const Tensor attended = (*attention_dropout_)((*attention_)((*input_norm_)(input, inner), attention_args), inner);
  const Tensor x = attended + input;
  const Tensor h = (*dense_4h_to_h_)((*dense_h_to_4h_)((*post_attention_norm_)(x, inner), inner), inner);
  return (*feedforward_dropout_)(h, inner) + x;
}

KILN_REGISTER_LAYER("keras_hub>LlamaTransformerDecoder", LlamaTransformerDecoderLayer);
KILN_REGISTER_LAYER("keras_hub>MistralTransformerDecoder", MistralTransformerDecoderLayer);
KILN_REGISTER_LAYER("keras_hub>QwenTransformerDecoder", QwenTransformerDecoderLayer);
KILN_REGISTER_LAYER("keras_hub>Qwen3TransformerDecoder", Qwen3TransformerDecoderLayer);
KILN_REGISTER_LAYER("keras_hub>Phi3Decoder", Phi3DecoderLayer);
KILN_REGISTER_LAYER("keras_hub>GemmaDecoderBlock", GemmaDecoderBlockLayer);
KILN_REGISTER_LAYER("keras_hub>FalconTransformerDecoder", FalconTransformerDecoderLayer);

}  // namespace kiln::hub
