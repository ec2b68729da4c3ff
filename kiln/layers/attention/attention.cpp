#include <kiln/layers/attention/attention.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/attention_math.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// The one shape rule of both layers, at build and at every call: (batch, ..., length, depth) inputs of
// one rank whose leading axes agree, the query's depth equal to the key's, the key's length to the value's.
// Rank 2 is refused: (batch, depth) would let samples of a batch attend to each other.
void check_shapes(const Layer& layer, const Shape& query, const Shape& key, const Shape& value) {
  const std::vector<std::pair<std::string, Shape>> all = {{"query", query}, {"key", key}, {"value", value}};
  for (const auto& [label, shape] : all)
    if (shape.rank() < 3) throw ShapeError(layer.describe(), "takes (batch, ..., length, depth) inputs", all);
  if (query.rank() != key.rank() || key.rank() != value.rank())
    throw ShapeError(layer.describe(), "query, key and value must have the same rank", all);
  for (int axis = 0; axis < query.rank() - 2; ++axis)
    if (query[axis] != key[axis] || key[axis] != value[axis])
      throw ShapeError(layer.describe(), "query, key and value differ before their last two dimensions", all);
  if (query.dim(-1) == Shape::unknown || query.dim(-1) != key.dim(-1))
    throw ShapeError(layer.describe(), "query and key must have the same, known depth", all);
  if (key.dim(-2) != value.dim(-2)) throw ShapeError(layer.describe(), "key and value must have the same length", all);
}

}  // namespace

// ---- DotProductAttention -------------------------------------------------------------------------------

DotProductAttentionLayer::DotProductAttentionLayer(const Config& config) : Layer(config, "DotProductAttention") {
  ConfigReader args = config_reader(config);
  use_scale_ = args.boolean("use_scale", true);
  args.finish();
}

Config DotProductAttentionLayer::get_config() const { return base_config().with("use_scale", use_scale_); }

// [query, key, value], or [query, value] with the value as key: the key is the second input either way.
void DotProductAttentionLayer::build(const std::vector<Shape>& shapes) {
  check_shapes(*this, shapes[0], shapes[1], shapes.back());
  // The TF2 original scales by 1/sqrt(d_k) with d_k fixed at build: a constant, not a weight.
  scale_ = use_scale_ ? 1.0 / std::sqrt(static_cast<double>(shapes[0].dim(-1))) : 1.0;
}

std::vector<Tensor> DotProductAttentionLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& query = inputs[0];
  const Tensor& key = inputs[1];
  const Tensor& value = inputs.back();
  check_shapes(*this, query.shape(), key.shape(), value.shape());
  if (query.shape().dim(-1) != build_shapes()[0].dim(-1))
    shape_error("was built (and scaled) for another query depth",
                {{"built for", build_shapes()[0]}, {"query", query.shape()}});
  detail::AttentionOptions options;
  options.mask = args.find_tensor("mask");
  options.causal = args.flag("use_causal_mask", false);
  options.return_weights = args.flag("return_attention_scores", false);
  const detail::Attended attended = detail::attend(describe(), query, key, value, scale_, options);
  if (options.return_weights) return {attended.output, attended.weights};
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
  // Keras's order: [query, value] or [query, value, key].
  check_shapes(*this, shapes[0], shapes.size() == 3 ? shapes[2] : shapes[1], shapes[1]);
  if (use_scale_) scale_ = add_weight("scale", Shape{}, Initializer::get("ones"));
  if (score_mode_ == "concat")
    concat_score_weight_ = add_weight("concat_score_weight", Shape{}, Initializer::get("ones"));
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
  check_shapes(*this, query.shape(), key.shape(), value.shape());
  const Tensor score = scores(query, key);
  const Tensor mask =
      detail::combined_mask(describe(), args.find_tensor("value_mask"), args.flag("use_causal_mask", false), score);
  const std::uint64_t seed = detail::call_seed(seed_, name(), query);
  const detail::Attended attended = detail::attend(score, value, mask, dropout_, seed, args.training());
  Tensor output = attended.output;
  if (const Tensor* query_mask = args.find_tensor("query_mask")) {
    // (batch, T) against a query of (batch, ..., T, d): the length is the query's second to last axis.
    const Shape& mask_shape = query_mask->shape();
    const std::int64_t batch = query.shape()[0], length = query.shape()[query.rank() - 2];
    const auto differ = [](std::int64_t a, std::int64_t b) {
      return a != Shape::unknown && b != Shape::unknown && a != b;
    };
    if (query_mask->rank() != 2 || mask_shape[1] != length || differ(mask_shape[0], batch))
      shape_error("query_mask must be (batch, query_length)", {{"query_mask", mask_shape}, {"query", query.shape()}});
    Tensor mask_per_row = ops::expand_dims(*query_mask, -1);  // (batch, T, 1)
    for (int axis = 3; axis < query.rank(); ++axis) mask_per_row = ops::expand_dims(mask_per_row, 1);
    output = output * mask_per_row;
  }
  if (args.flag("return_attention_scores", false)) return {output, attended.weights};
  return {output};
}

Attention::Attention(bool use_scale, const std::string& score_mode, const Config& options)
    : LayerHandle(
          std::make_shared<AttentionLayer>(options.with("use_scale", use_scale).with("score_mode", score_mode))) {}

KILN_REGISTER_LAYER("kiln>DotProductAttention", DotProductAttentionLayer);
KILN_REGISTER_LAYER("kiln>Attention", AttentionLayer);

}  // namespace kiln
