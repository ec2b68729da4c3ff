#include "layers/attention.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/graph.hpp"
#include "core/rng.hpp"
#include "layers/detail/attention_math.hpp"
#include "ops/ops.hpp"

namespace kiln {

namespace {

// The combined mask of a call: the given one (checked and shaped) times the causal one, or empty.
Tensor call_mask(const std::string& who, const Tensor* given, bool causal, const Tensor& scores) {
  Tensor mask;
  if (given != nullptr) mask = detail::broadcastable_mask(who, *given, scores);
  if (causal) {
    const std::int64_t queries = scores.shape().dim(-2), keys = scores.shape().dim(-1);
    if (queries == Shape::unknown || keys == Shape::unknown)
      throw ShapeError(who, "use_causal_mask needs known sequence lengths", {{"scores", scores.shape()}});
    const Tensor causal_part = detail::causal_mask(scores.graph(), queries, keys, scores.dtype());
    mask = mask.valid() ? mask * causal_part : causal_part;
  }
  return mask;
}

void check_same_batch(const Layer& layer, const std::vector<Shape>& shapes, const char* what) {
  for (const Shape& shape : shapes)
    if (shape.rank() < 2) throw ShapeError(layer.describe(), std::string("needs ") + what, {{"input", shape}});
}

}  // namespace

// ---- DotProductAttention -------------------------------------------------------------------------------

DotProductAttentionLayer::DotProductAttentionLayer(const Config& config) : Layer(config, "DotProductAttention") {
  ConfigReader args = config_reader(config);
  use_scale_ = args.boolean("use_scale", true);
  args.finish();
}

Config DotProductAttentionLayer::get_config() const { return base_config().with("use_scale", use_scale_); }

void DotProductAttentionLayer::build(const std::vector<Shape>& shapes) {
  check_same_batch(*this, shapes, "query, key and value of shape (batch, ..., length, depth)");
  // [query, key, value] or [query, value]: the key is the second input either way.
  const Shape& query = shapes[0];
  const Shape& key = shapes[1];
  const Shape& value = shapes.back();
  if (query.dim(-1) == Shape::unknown) shape_error("needs the query's depth (last dimension)", {{"query", query}});
  if (query.dim(-1) != key.dim(-1))
    shape_error("query and key must have the same depth", {{"query", query}, {"key", key}});
  if (key.dim(-2) != value.dim(-2))
    shape_error("key and value must have the same length (second to last dimension)", {{"key", key}, {"value", value}});
  if (query.rank() != key.rank() || key.rank() != value.rank())
    shape_error("query, key and value must have the same rank", {{"query", query}, {"key", key}, {"value", value}});
  // The TF2 original scales by 1/sqrt(d_k) with d_k fixed at build: a constant, not a weight.
  scale_ = use_scale_ ? 1.0 / std::sqrt(static_cast<double>(query.dim(-1))) : 1.0;
}

std::vector<Tensor> DotProductAttentionLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& query = inputs[0];
  const Tensor& key = inputs[1];
  const Tensor& value = inputs.back();
  std::vector<Shape> shapes;
  for (const Tensor& input : inputs) shapes.push_back(input.shape());
  if (shapes != build_shapes()) {
    // Same checks as build, for a layer built on other lengths or batch sizes.
    const std::int64_t depth = build_shapes()[0].dim(-1);
    if (query.shape().dim(-1) != depth)
      shape_error("was built for queries of depth " + std::to_string(depth), {{"built for", build_shapes()[0]}, {"query", query.shape()}});
    if (key.shape().dim(-1) != query.shape().dim(-1) || key.shape().dim(-2) != value.shape().dim(-2))
      shape_error("query/key depths or key/value lengths differ", {{"query", query.shape()}, {"key", key.shape()}, {"value", value.shape()}});
  }
  const Tensor scores = detail::attention_scores(query, key, scale_);
  const Tensor mask = call_mask(describe(), args.find_tensor("mask"), args.flag("use_causal_mask", false), scores);
  const detail::Attended attended = detail::attend(scores, value, mask);
  if (args.flag("return_attention_scores", false)) return {attended.output, attended.weights};
  return {attended.output};
}

DotProductAttention::DotProductAttention(bool use_scale, const Config& options)
    : LayerHandle(std::make_shared<DotProductAttentionLayer>(options.with("use_scale", use_scale))) {}

// ---- Attention (Keras) ------------------------------------------------------------------------------------

AttentionLayer::AttentionLayer(const Config& config) : Layer(config, "Attention") {
  ConfigReader args = config_reader(config);
  use_scale_ = args.boolean("use_scale", false);
  score_mode_ = args.text("score_mode", "dot");
  dropout_ = args.number("dropout", 0.0);
  seed_ = args.value("seed");
  args.finish();
  if (score_mode_ != "dot" && score_mode_ != "concat")
    args.fail("score_mode must be 'dot' or 'concat', got '" + score_mode_ + "'");
  if (dropout_ < 0.0 || dropout_ >= 1.0) args.fail("dropout must be in [0, 1), got " + std::to_string(dropout_));
  if (!seed_.is_null()) seed_.as_int("Attention argument 'seed'");
}

Config AttentionLayer::get_config() const {
  Config config = base_config();
  config.set("use_scale", use_scale_);
  config.set("score_mode", score_mode_);
  config.set("dropout", dropout_);
  config.set("seed", seed_);
  return config;
}

void AttentionLayer::build(const std::vector<Shape>& shapes) {
  check_same_batch(*this, shapes, "query, value (and key) of shape (batch, length, depth)");
  const Shape& query = shapes[0];
  const Shape& value = shapes[1];
  const Shape& key = shapes.size() == 3 ? shapes[2] : shapes[1];
  if (query.dim(-1) != key.dim(-1))
    shape_error("query and key must have the same depth", {{"query", query}, {"key", key}});
  if (key.dim(-2) != value.dim(-2))
    shape_error("key and value must have the same length", {{"key", key}, {"value", value}});
  if (use_scale_) scale_ = add_weight("scale", Shape{}, Initializer::get("ones"));
  if (score_mode_ == "concat") concat_score_weight_ = add_weight("concat_score_weight", Shape{}, Initializer::get("ones"));
}

Tensor AttentionLayer::scores(const Tensor& query, const Tensor& key) const {
  if (score_mode_ == "dot") {
    const Tensor dot = ops::matmul(query, key, false, true);
    return use_scale_ ? dot * variable(scale_, query) : dot;
  }
  // (batch, T, 1, d) + (batch, 1, S, d): every query against every key.
  Tensor sum = ops::expand_dims(query, -2) + ops::expand_dims(key, -3);
  if (use_scale_) sum = sum * variable(scale_, query);
  return ops::sum(ops::tanh(sum), {-1}) * variable(concat_score_weight_, query);
}

std::vector<Tensor> AttentionLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& query = inputs[0];
  const Tensor& value = inputs[1];
  const Tensor& key = inputs.size() == 3 ? inputs[2] : inputs[1];
  if (key.shape().dim(-1) != query.shape().dim(-1) || key.shape().dim(-2) != value.shape().dim(-2))
    shape_error("query/key depths or key/value lengths differ", {{"query", query.shape()}, {"value", value.shape()}, {"key", key.shape()}});
  const Tensor score = scores(query, key);
  const Tensor mask = call_mask(describe(), args.find_tensor("value_mask"), args.flag("use_causal_mask", false), score);
  const std::uint64_t seed = seed_.is_null() ? stable_hash(name()) : static_cast<std::uint64_t>(seed_.as_int());
  const detail::Attended attended = detail::attend(score, value, mask, dropout_, seed, args.training());
  Tensor output = attended.output;
  if (const Tensor* query_mask = args.find_tensor("query_mask")) {
    if (query_mask->rank() != 2 || (query_mask->shape()[1] != query.shape()[1]))
      shape_error("query_mask must be (batch, query_length)", {{"query_mask", query_mask->shape()}, {"query", query.shape()}});
    output = output * ops::expand_dims(*query_mask, -1);
  }
  if (args.flag("return_attention_scores", false)) return {output, attended.weights};
  return {output};
}

Attention::Attention(bool use_scale, const std::string& score_mode, const Config& options)
    : LayerHandle(std::make_shared<AttentionLayer>(options.with("use_scale", use_scale).with("score_mode", score_mode))) {}

KILN_REGISTER_LAYER("kiln>DotProductAttention", DotProductAttentionLayer);
KILN_REGISTER_LAYER("kiln>Attention", AttentionLayer);

}  // namespace kiln
