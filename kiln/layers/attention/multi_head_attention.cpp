#include <kiln/layers/attention/multi_head_attention.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/attention_math.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

MultiHeadAttentionLayer::MultiHeadAttentionLayer(const Config& config) : Layer(config, "MultiHeadAttention") {
  ConfigReader args = config_reader(config);
  num_heads_ = args.integer("num_heads");
  key_dim_ = args.value("key_dim");
  value_dim_ = args.value("value_dim");
  dropout_ = args.number("dropout", 0.0);
  use_bias_ = args.boolean("use_bias", true);
  output_shape_ = args.value("output_shape");
  attention_axes_ = args.value("attention_axes");
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform");
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros");
  seed_ = args.value("seed");
  if (args.boolean("use_gate", false)) args.fail("use_gate is not supported");
  kernel_regularization_ = WeightRegularization::from_arguments(args, "kernel");
  bias_regularization_ = WeightRegularization::from_arguments(args, "bias");
  // Keras hands activity_regularizer to the query, key, value and output projections (its EinsumDense
  // sublayers): each projection's output is penalized, the layer's own output is not.
  projection_activity_ = activity_regularizer();
  set_activity_regularizer({});
  for (const char* key : {"sliding_window", "flash_attention"}) args.unsupported(key);
  args.finish();

  if (num_heads_ <= 0) args.fail("num_heads must be positive, got " + std::to_string(num_heads_));
  if (!key_dim_.is_null() && key_dim_.as_int("MultiHeadAttention argument 'key_dim'") <= 0)
    args.fail("key_dim must be positive, got " + key_dim_.to_string());
  // Keras stores value_dim resolved: null means key_dim.
  if (value_dim_.is_null()) value_dim_ = key_dim_;
  if (!value_dim_.is_null() && value_dim_.as_int("MultiHeadAttention argument 'value_dim'") <= 0)
    args.fail("value_dim must be positive, got " + value_dim_.to_string());
  if (dropout_ < 0.0 || dropout_ >= 1.0) args.fail("dropout must be in [0, 1), got " + std::to_string(dropout_));
  if (!seed_.is_null()) seed_.as_int("MultiHeadAttention argument 'seed'");
  if (!output_shape_.is_null()) {
    const std::vector<std::int64_t> dims = output_shape_.is_list()
                                               ? output_shape_.as_ints("output_shape")
                                               : std::vector<std::int64_t>{output_shape_.as_int("output_shape")};
    if (dims.size() != 1 || dims[0] <= 0)
      args.fail("output_shape must be one positive size, got " + output_shape_.to_string());
    output_dim_ = dims[0];
  }
  // Attention over the length axis of (batch, length, features) inputs is all kiln does: axis 1.
  if (!attention_axes_.is_null()) {
    const std::vector<std::int64_t> axes = attention_axes_.is_list()
                                               ? attention_axes_.as_ints("attention_axes")
                                               : std::vector<std::int64_t>{attention_axes_.as_int("attention_axes")};
    if (axes != std::vector<std::int64_t>{1} && axes != std::vector<std::int64_t>{-2})
      args.fail("attention_axes other than the length axis (1) are not supported, got " + attention_axes_.to_string());
  }
}

Config MultiHeadAttentionLayer::get_config() const {
  Config config = base_config();
  config.set("num_heads", num_heads_);
  config.set("key_dim", key_dim_);
  config.set("value_dim", value_dim_);
  config.set("dropout", dropout_);
  config.set("use_bias", use_bias_);
  config.set("use_gate", false);
  config.set("output_shape", output_shape_);
  config.set("attention_axes", attention_axes_);
  config.set("sliding_window", Config());
  config.set("kernel_initializer", kernel_initializer_.get_config());
  config.set("bias_initializer", bias_initializer_.get_config());
  config.set("kernel_regularizer", kernel_regularization_.regularizer.get_config());
  config.set("bias_regularizer", bias_regularization_.regularizer.get_config());
  config.set("activity_regularizer", projection_activity_.get_config());
  config.set("kernel_constraint", kernel_regularization_.constraint.get_config());
  config.set("bias_constraint", bias_regularization_.constraint.get_config());
  config.set("seed", seed_);
  return config;
}

std::vector<std::string> MultiHeadAttentionLayer::keras_weight_paths() const {
  // Each EinsumDense numbers its variables in Keras's order (kernel, bias, then an int8 kernel's kernel_scale),
  // which is the order they were made in.
  std::vector<std::string> paths;
  std::string current;
  int number = 0;
  for (const Weight& weight : weights()) {
    const std::size_t slash = weight.path.find('/');
    const std::string projection = weight.path.substr(0, slash);
    if (projection != current) {
      current = projection;
      number = 0;
    }
    const std::string sublayer = projection == "attention_output" ? "output_dense" : projection + "_dense";
    paths.push_back(sublayer + "/vars/" + std::to_string(number++));
  }
  return paths;
}

void MultiHeadAttentionLayer::quantization_resolved() {
  const std::vector<ProjectionQuantization> modes = projection_quantizations(quantizable_projections());
  query_.quantization = modes[0];
  key_.quantization = modes[1];
  value_.quantization = modes[2];
  output_.quantization = modes[3];
}

std::string MultiHeadAttentionLayer::projection_mode(std::size_t index) const {
  const Projection* projections[] = {&query_, &key_, &value_, &output_};
  return index < 4 ? projections[index]->quantization.mode : std::string();
}

std::vector<std::pair<std::string, std::string>> MultiHeadAttentionLayer::keras_sublayers() const {
  return {{"_dropout_layer", "dropout"},        {"_softmax", "softmax"},  {"key_dense", "key"},
          {"output_dense", "attention_output"}, {"query_dense", "query"}, {"value_dense", "value"}};
}

void MultiHeadAttentionLayer::check_inputs(const Shape& query, const Shape& key, const Shape& value) const {
  if (query.rank() != 3 || key.rank() != 3 || value.rank() != 3)
    shape_error("takes (batch, length, features) inputs", {{"query", query}, {"key", key}, {"value", value}});
  if (key[1] != value[1] || key[0] != value[0])
    shape_error("key and value differ before the last dimension", {{"key", key}, {"value", value}});
  if (query[0] != key[0])
    shape_error("query and key/value have different batch sizes", {{"query", query}, {"value", value}});
  for (const auto& [label, shape] : {std::pair<const char*, Shape>{"query", query}, {"key", key}, {"value", value}})
    if (shape[2] == Shape::unknown)
      shape_error(std::string("needs the ") + label + "'s feature size", {{label, shape}});
}

MultiHeadAttentionLayer::Projection MultiHeadAttentionLayer::add_projection(const std::string& name,
                                                                            std::int64_t input_dim,
                                                                            std::int64_t depth,
                                                                            const ProjectionQuantization& quantization) {
  Projection projection;
  projection.quantization = quantization;
  const bool int8 = quantization.int8(), int4 = quantization.int4();
  if (int8) {  // Keras's EinsumDense._int8_build: the kernel in int8 (not trained), then the bias, then the scale
    projection.kernel = add_int8_weight(name + "/kernel", {input_dim, num_heads_, depth});
  } else if (int4) {  // _int4_build: (input_dim, heads · depth) packed along the columns
    projection.kernel = add_int8_weight(name + "/kernel", {input_dim, (num_heads_ * depth + 1) / 2});
  } else {
    // Keras 3.15's fans for these 3-D kernels: a Dense from input_dim to heads·depth.
    const Fans fans{static_cast<double>(input_dim), static_cast<double>(num_heads_ * depth)};
    projection.kernel = add_weight(name + "/kernel", {input_dim, num_heads_, depth}, kernel_initializer_, fans);
    regularize(projection.kernel, kernel_regularization_);
  }
  if (use_bias_) {
    projection.bias = add_weight(name + "/bias", {num_heads_, depth}, bias_initializer_);
    regularize(projection.bias, bias_regularization_);
  }
  if (int8) projection.kernel_scale = add_weight(name + "/kernel_scale", {1, 1, num_heads_, depth}, Initializer::get("ones"), false);
  if (int4) add_int4_scales(name + "/", input_dim, num_heads_ * depth, projection.quantization);
  return projection;
}

std::vector<Shape> MultiHeadAttentionLayer::build_shapes_for(const std::vector<Tensor>& inputs,
                                                             const CallArgs& args) const {
  std::vector<Shape> shapes = Layer::build_shapes_for(inputs, args);
  if (const Tensor* key = args.find_tensor("key"); key != nullptr && inputs.size() == 2) shapes.push_back(key->shape());
  return shapes;
}

// Keras's order: [query, value] or [query, value, key]; the key defaults to the value.
void MultiHeadAttentionLayer::build(const std::vector<Shape>& shapes) {
  const Shape& query = shapes[0];
  const Shape& value = shapes[1];
  const Shape& key = shapes.size() == 3 ? shapes[2] : shapes[1];
  check_inputs(query, key, value);
  const std::int64_t d_model = query[2];
  if (key_dim_.is_null()) {
    if (d_model % num_heads_ != 0)
      shape_error("d_model (the query's last dimension) must be divisible by num_heads = " + std::to_string(num_heads_),
                  {{"query", query}});
    key_depth_ = d_model / num_heads_;
  } else {
    key_depth_ = key_dim_.as_int();
  }
  value_depth_ = value_dim_.is_null() ? key_depth_ : value_dim_.as_int();
  const std::int64_t output_dim = output_dim_ > 0 ? output_dim_ : d_model;

  key_features_ = key[2];
  query_ = add_projection("query", d_model, key_depth_, query_.quantization);
  key_ = add_projection("key", key[2], key_depth_, key_.quantization);
  value_ = add_projection("value", value[2], value_depth_, value_.quantization);
  if (output_.quantization.int8()) {
    output_.kernel = add_int8_weight("attention_output/kernel", {num_heads_, value_depth_, output_dim});
  } else if (output_.quantization.int4()) {  // (heads · depth, output features) packed along the columns
    output_.kernel = add_int8_weight("attention_output/kernel", {num_heads_ * value_depth_, (output_dim + 1) / 2});
  } else {
    const Fans fans{static_cast<double>(num_heads_ * value_depth_), static_cast<double>(output_dim)};
    output_.kernel =
        add_weight("attention_output/kernel", {num_heads_, value_depth_, output_dim}, kernel_initializer_, fans);
    regularize(output_.kernel, kernel_regularization_);
  }
  if (use_bias_) {
    output_.bias = add_weight("attention_output/bias", {output_dim}, bias_initializer_);
    regularize(output_.bias, bias_regularization_);
  }
  if (output_.quantization.int8())
    output_.kernel_scale = add_weight("attention_output/kernel_scale", {1, 1, output_dim}, Initializer::get("ones"), false);
  if (output_.quantization.int4())
    add_int4_scales("attention_output/", num_heads_ * value_depth_, output_dim, output_.quantization);
}

Tensor MultiHeadAttentionLayer::project(const Tensor& x, const Projection& projection, std::int64_t depth) const {
  const std::int64_t width = num_heads_ * depth;
  // (Keras's EinsumDense "abc,cde->abde": in int8 the inputs quantized per row, over c)
  // (in int4 the float kernel the packed one stands for, then Keras's float einsum)
  Tensor y = projection.quantization.int8()
                 ? ops::quantized_matmul(x, variable(projection.kernel, x), variable(projection.kernel_scale, x), true, 1)
             : projection.quantization.int4()
                 ? int4_projection(x, projection.kernel, projection.quantization, width)
                 : ops::matmul(x, ops::reshape(variable(projection.kernel, x), {x.shape()[2], width}));
  if (use_bias_) y = y + ops::reshape(variable(projection.bias, x), {width});
  if (projection_activity_) add_activity_loss(projection_activity_, y);
  // (batch, length, heads, depth): one attention per head, read in place by the fused attention.
  return ops::reshape(y, {ops::keep_dim, ops::keep_dim, num_heads_, depth});
}

Tensor MultiHeadAttentionLayer::project_output(const Tensor& attended, const Tensor& query) const {
  const std::int64_t width = num_heads_ * value_depth_;
  const Tensor merged = ops::reshape(attended, {ops::keep_dim, ops::keep_dim, width});
  const Tensor kernel = variable(output_.kernel, query);
  const std::int64_t output_dim = output_dim_ > 0 ? output_dim_ : build_shapes().at(0)[2];
  // (Keras's "abcd,cde->abe": in int8 the inputs quantized over c and d together, one scale a (batch, step); in
  // int4 the float kernel)
  Tensor output = output_.quantization.int8()
                      ? ops::quantized_matmul(merged, kernel, variable(output_.kernel_scale, query), true, 2)
                  : output_.quantization.int4()
                      ? int4_projection(merged, output_.kernel, output_.quantization, output_dim)
                      : ops::matmul(merged, ops::reshape(kernel, {width, kernel.shape()[2]}));
  if (use_bias_) output = output + variable(output_.bias, query);
  return output;
}

std::vector<Tensor> MultiHeadAttentionLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& query = inputs[0];
  const Tensor& value = inputs[1];
  // Keras also takes the key by keyword.
  const Tensor* key_argument = args.find_tensor("key");
  if (key_argument != nullptr && inputs.size() == 3) config_error("got the key both as an input and as 'key'");
  const Tensor& key = inputs.size() == 3 ? inputs[2] : (key_argument != nullptr ? *key_argument : inputs[1]);
  check_inputs(query.shape(), key.shape(), value.shape());
  const std::vector<Shape>& built = build_shapes();
  if (query.shape()[2] != built[0][2] || key.shape()[2] != key_features_ || value.shape()[2] != built[1][2])
    shape_error("was built for other feature sizes",
                {{"built query", built[0]}, {"query", query.shape()}, {"key", key.shape()}, {"value", value.shape()}});

  // Keras scales the queries, not the scores: T·d multiplications instead of T·S.
  const Tensor q = project(query, query_, key_depth_) * (1.0 / std::sqrt(static_cast<double>(key_depth_)));
  const Tensor k = project(key, key_, key_depth_);
  const Tensor v = project(value, value_, value_depth_);
  // Keras's _compute_attention_mask: the query's mask on the rows, the value's and the key's on the columns,
  // and the attention_mask given, all together.
  const Tensor* query_mask = args.find_tensor("query_mask");
  const Tensor* value_mask = args.find_tensor("value_mask");
  Tensor key_mask_holder = key_argument != nullptr ? key.graph().mask_of(key) : Tensor();
  const Tensor* key_mask = args.find_tensor("key_mask");
  if (key_mask == nullptr && key_mask_holder.valid()) key_mask = &key_mask_holder;
  const std::int64_t queries = query.shape()[1], keys = key.shape()[1];
  Tensor mask;
  auto combine = [&](const Tensor& part) { mask = mask.valid() ? mask * part : part; };
  // Sizes still unknown (the batch, a sequence length) are checked when a plan is made.
  auto differ = [](std::int64_t a, std::int64_t b) { return a != b && a != Shape::unknown && b != Shape::unknown; };
  auto check_padding = [&](const Tensor* given, const char* what, std::int64_t length, const char* axis) {
    const Shape& shape = given->shape();
    if (given->rank() != 2 || differ(shape[1], length) || differ(shape[0], query.shape()[0]))
      shape_error(std::string(what) + " must be (batch, " + axis + "_length)",
                  {{what, shape}, {"query", query.shape()}, {"key", key.shape()}});
  };
  if (query_mask != nullptr) {
    check_padding(query_mask, "query_mask", queries, "query");
    // (batch, queries, 1) times ones over the keys: (batch, queries, keys), whatever masks the keys get.
    combine(ops::expand_dims(*query_mask, -1) * ops::ones_like(ops::positions(key, 1)));
  }
  for (const auto& [given, what] : {std::pair<const Tensor*, const char*>{value_mask, "value_mask"}, {key_mask, "key_mask"}})
    if (given != nullptr) {
      check_padding(given, what, keys, "key");
      combine(ops::expand_dims(*given, 1));  // (batch, 1, keys): broadcast over the queries
    }
  const Tensor* attention_mask = args.find_tensor("attention_mask");
  if (attention_mask != nullptr && mask.valid()) {
    if (attention_mask->rank() != 3 && attention_mask->rank() != 2)
      shape_error("attention_mask must be (batch, query_length, key_length) or (batch, key_length)",
                  {{"attention_mask", attention_mask->shape()}, {"query", query.shape()}, {"key", key.shape()}});
    combine(attention_mask->rank() == 2 ? ops::expand_dims(*attention_mask, 1) : *attention_mask);
  } else if (attention_mask != nullptr) {
    mask = *attention_mask;
  }
  detail::AttentionOptions options;
  options.mask = mask.valid() ? &mask : nullptr;
  options.causal = args.flag("use_causal_mask", false);
  options.return_weights = args.flag("return_attention_scores", false);
  options.dropout_rate = dropout_;
  options.training = args.training();
  options.seed = [&] { return detail::call_seed(seed_, name(), query); };
  options.heads_last = true;
  const detail::Attended attended = detail::attend(describe(), q, k, v, 1.0, options);

  const Tensor output = project_output(attended.output, query);
  if (projection_activity_) add_activity_loss(projection_activity_, output);
  if (options.return_weights) return {output, attended.weights};
  return {output};
}

MultiHeadAttentionLayer::CachedStep MultiHeadAttentionLayer::cached_self_attention(const Tensor& query,
                                                                                  const Tensor& key_cache,
                                                                                  const Tensor& value_cache,
                                                                                  const Tensor& start,
                                                                                  const Tensor& visible) const {
  if (!built()) throw LayerStateError(describe() + ": build it before decoding with a cache");
  if (query.rank() != 3 || query.shape()[1] == Shape::unknown || query.shape()[2] != key_features_)
    shape_error("decodes steps (batch, tokens, features) of known tokens", {{"query", query.shape()}});
  const Tensor q = project(query, query_, key_depth_) * (1.0 / std::sqrt(static_cast<double>(key_depth_)));
  // The new keys and values go into slots [start, start + tokens) of the caches (batch, slots, heads, depth);
  // `visible` (batch, slots), or (batch, tokens, slots) for several tokens, says which slots each token sees.
  CachedStep step;
  step.key_cache = ops::write_steps(key_cache, project(query, key_, key_depth_), start);
  step.value_cache = ops::write_steps(value_cache, project(query, value_, value_depth_), start);
  detail::AttentionOptions options;
  options.mask = &visible;
  options.heads_last = true;
  const detail::Attended attended = detail::attend(describe(), q, step.key_cache, step.value_cache, 1.0, options);
  step.output = project_output(attended.output, query);
  return step;
}

Outputs MultiHeadAttention::operator()(const std::vector<Tensor>& query_key_value, const CallArgs& args) const {
  if (query_key_value.size() == 3)
    return (*layer_)(std::vector<Tensor>{query_key_value[0], query_key_value[2], query_key_value[1]}, args);
  return (*layer_)(query_key_value, args);
}

MultiHeadAttention::MultiHeadAttention(std::int64_t h)
    : LayerHandle(std::make_shared<MultiHeadAttentionLayer>(Config{{"num_heads", h}, {"use_bias", false}})) {}

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim, const Config& options)
    : LayerHandle(
          std::make_shared<MultiHeadAttentionLayer>(options.with("num_heads", num_heads).with("key_dim", key_dim))) {}

KILN_REGISTER_LAYER("kiln>MultiHeadAttention", MultiHeadAttentionLayer);

}  // namespace kiln
