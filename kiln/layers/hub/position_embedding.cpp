#include <kiln/layers/hub/position_embedding.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// The call option "start_index": where the positions start (keras-hub's start_index, for decoding a
// sequence a step at a time).
std::int64_t start_index(const CallArgs& args, const Layer& layer) {
  const std::int64_t start = args.options().is_map() ? args.options().get_int("start_index", 0) : 0;
  if (start < 0) throw ConfigError(layer.describe() + ": start_index must not be negative, got " + std::to_string(start));
  return start;
}

// (batch, ..., steps, features) with known features: keras-hub's position layers read the sequence axis at
// -2, which may be unknown until a plan is made (sequences of any length) but is not the batch's.
void check_sequence(const Layer& layer, const Shape& shape) {
  if (shape.rank() < 3 || shape.dim(-1) == Shape::unknown)
    throw ShapeError(layer.describe(), "takes inputs (batch, ..., steps, features) with known features",
                     {{"input", shape}});
}

// start, start + 1, ... for each step of x's `axis`, in x's dtype: the positions of a sequence whose length
// is known only when planned.
Tensor positions_from(const Tensor& x, int axis, std::int64_t start) {
  const Tensor positions = ops::positions(x, axis);
  return start != 0 ? ops::add_scalar(positions, static_cast<double>(start)) : positions;
}

// `values` (steps, features) in the input's shape: x's batch may be unknown until run time, so the
// positions broadcast onto zeros of x's shape (no gradient flows into x).
Tensor in_shape_of(const Tensor& x, const Tensor& values) { return ops::zeros_like(x) + values; }

}  // namespace

// ---- PositionEmbedding -------------------------------------------------------------------------------

PositionEmbeddingLayer::PositionEmbeddingLayer(const Config& config) : Layer(config, "PositionEmbedding") {
  ConfigReader args = config_reader(config);
  sequence_length_ = args.integer("sequence_length");
  initializer_ = Initializer::from_argument(args, "initializer", "glorot_uniform");
  args.finish();
  if (sequence_length_ <= 0) args.fail("sequence_length must be positive, got " + std::to_string(sequence_length_));
}

Config PositionEmbeddingLayer::get_config() const {
  Config config = base_config();
  config.set("sequence_length", sequence_length_);
  config.set("initializer", initializer_.get_config());
  return config;
}

void PositionEmbeddingLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 2 || input_shape.dim(-1) == Shape::unknown)
    shape_error("takes inputs (..., steps, features) with known features", {{"input", input_shape}});
  embeddings_ = add_weight("embeddings", {sequence_length_, input_shape.dim(-1)}, initializer_);
}

Tensor PositionEmbeddingLayer::call(const Tensor& input, const CallArgs& args) {
  return positions(input, start_index(args, *this));
}

Tensor PositionEmbeddingLayer::positions(const Tensor& input, std::int64_t start) const {
  check_sequence(*this, input.shape());
  const std::int64_t steps = input.shape().dim(-2);
  const Tensor embeddings = variable(embeddings_, input);
  // Decoding: the rows of the tokens' positions, (batch, tokens, features).
  if (const detail::DecodingStep* step = detail::decoding()) {
    if (steps != step->positions.shape()[1] || input.rank() != 3)
      shape_error("decodes the step's " + std::to_string(step->positions.shape()[1]) + " tokens", {{"input", input.shape()}});
    if (step->length > sequence_length_)
      shape_error("has " + std::to_string(sequence_length_) + " positions, fewer than the " +
                      std::to_string(step->length) + " decoded",
                  {{"input", input.shape()}});
    return ops::gather(embeddings, step->positions);
  }
  if (input.shape().dim(-1) != embeddings.shape()[1])
    shape_error("was built for other features", {{"embeddings", embeddings.shape()}, {"input", input.shape()}});
  // A length known only when planned: the rows at the positions, a run-time error past the last one.
  if (steps == Shape::unknown)
    return in_shape_of(input, ops::gather(embeddings, positions_from(input, -2, start)));
  if (start + steps > sequence_length_)
    shape_error("has " + std::to_string(sequence_length_) + " positions; start_index " + std::to_string(start) +
                    " and " + std::to_string(steps) + " steps run past them",
                {{"input", input.shape()}});
  return in_shape_of(input, ops::slice(embeddings, {start, 0}, {steps, -1}));
}

PositionEmbedding::PositionEmbedding(std::int64_t sequence_length, const Config& options)
    : LayerHandle(std::make_shared<PositionEmbeddingLayer>(options.with("sequence_length", sequence_length))) {}

// ---- TokenAndPositionEmbedding -----------------------------------------------------------------------

TokenAndPositionEmbeddingLayer::TokenAndPositionEmbeddingLayer(const Config& config)
    : Layer(config, "TokenAndPositionEmbedding") {
  ConfigReader args = config_reader(config);
  vocabulary_size_ = args.integer("vocabulary_size");
  sequence_length_ = args.integer("sequence_length");
  embedding_dim_ = args.integer("embedding_dim");
  tie_weights_ = args.boolean("tie_weights", true);
  embeddings_initializer_ = Initializer::from_argument(args, "embeddings_initializer", "uniform").get_config();
  mask_zero_ = args.boolean("mask_zero", false);
  args.finish();
  for (const auto& [key, value] : {std::pair<const char*, std::int64_t>{"vocabulary_size", vocabulary_size_},
                                   {"sequence_length", sequence_length_},
                                   {"embedding_dim", embedding_dim_}})
    if (value <= 0) args.fail(std::string(key) + " must be positive, got " + std::to_string(value));
  // keras-hub makes both sublayers in __init__, with one initializer config for both.
  token_embedding_ = track(create_layer("kiln>ReversibleEmbedding", {{"name", "token_embedding"},
                                                                      {"input_dim", vocabulary_size_},
                                                                      {"output_dim", embedding_dim_},
                                                                      {"tie_weights", tie_weights_},
                                                                      {"embeddings_initializer", embeddings_initializer_},
                                                                      {"mask_zero", mask_zero_}}));
  position_embedding_ = track(create_layer("keras_hub>PositionEmbedding", {{"name", "position_embedding"},
                                                                       {"sequence_length", sequence_length_},
                                                                       {"initializer", embeddings_initializer_}}));
}

Config TokenAndPositionEmbeddingLayer::get_config() const {
  Config config = base_config();
  config.set("vocabulary_size", vocabulary_size_);
  config.set("sequence_length", sequence_length_);
  config.set("embedding_dim", embedding_dim_);
  config.set("embeddings_initializer", embeddings_initializer_);
  config.set("tie_weights", tie_weights_);
  config.set("mask_zero", mask_zero_);
  return config;
}

void TokenAndPositionEmbeddingLayer::build(const Shape& input_shape) {
  token_embedding_->build_for(input_shape);
  std::vector<std::int64_t> embedded = input_shape.dims();
  embedded.push_back(embedding_dim_);
  position_embedding_->build_for(Shape(embedded));
}

Tensor TokenAndPositionEmbeddingLayer::call(const Tensor& input, const CallArgs& args) {
  const std::int64_t start = start_index(args, *this);
  const std::int64_t steps = input.rank() < 1 ? 0 : input.shape().dim(-1);
  if (input.rank() < 1 || (steps != Shape::unknown && start + steps > sequence_length_))
    shape_error("takes ids (batch, steps); its " + std::to_string(sequence_length_) + " positions and start_index " +
                    std::to_string(start) + " leave too few: steps run past them",
                {{"input", input.shape()}});
  const Tensor tokens = (*token_embedding_)(input, CallArgs().training(args.training()));
  return tokens + static_cast<const PositionEmbeddingLayer&>(*position_embedding_).positions(tokens, start);
}

std::vector<Tensor> TokenAndPositionEmbeddingLayer::compute_mask(const std::vector<Tensor>& inputs,
                                                                 const Tensor& mask) const {
  return token_embedding_->compute_mask(inputs, mask);
}

TokenAndPositionEmbedding::TokenAndPositionEmbedding(std::int64_t vocabulary_size, std::int64_t sequence_length,
                                                     std::int64_t embedding_dim, const Config& options)
    : LayerHandle(std::make_shared<TokenAndPositionEmbeddingLayer>(options.with("vocabulary_size", vocabulary_size)
                                                                       .with("sequence_length", sequence_length)
                                                                       .with("embedding_dim", embedding_dim))) {}

// ---- SinePositionEncoding ----------------------------------------------------------------------------

SinePositionEncodingLayer::SinePositionEncodingLayer(const Config& config) : Layer(config, "SinePositionEncoding") {
  ConfigReader args = config_reader(config);
  max_wavelength_ = args.number("max_wavelength", 10000.0);
  args.finish();
  if (!(max_wavelength_ > 0)) args.fail("max_wavelength must be positive, got " + std::to_string(max_wavelength_));
}

Config SinePositionEncodingLayer::get_config() const {
  Config config = base_config();
  config.set("max_wavelength", max_wavelength_);
  return config;
}

Tensor SinePositionEncodingLayer::call(const Tensor& input, const CallArgs& args) {
  check_sequence(*this, input.shape());
  const detail::DecodingStep* step = detail::decoding();
  if (step != nullptr && (input.shape().dim(-2) != step->positions.shape()[1] || input.rank() != 3))
    shape_error("decodes the step's " + std::to_string(step->positions.shape()[1]) + " tokens", {{"input", input.shape()}});
  // Decoding: the table of every position decoded, whose row the step's position picks.
  const std::int64_t start = step != nullptr ? 0 : start_index(args, *this);
  const std::int64_t steps = step != nullptr ? step->length : input.shape().dim(-2), features = input.shape().dim(-1);
  // keras-hub's timescales, with the pair (2i, 2i + 1) sharing one frequency: sin on the even feature, cos
  // on the odd one.
  auto timescale = [&](std::int64_t j) {
    return std::pow(1.0 / max_wavelength_, static_cast<double>(2 * (j / 2)) / static_cast<double>(features));
  };
  if (steps == Shape::unknown) {
    // Computed when the length is: sin(p·timescale + phase), the phase π/2 on odd features making it a cos.
    Array timescales(Shape{1, features}, input.dtype()), phases(Shape{1, features}, input.dtype());
    for (std::int64_t j = 0; j < features; ++j) {
      timescales.set_flat(static_cast<std::size_t>(j), timescale(j));
      phases.set_flat(static_cast<std::size_t>(j), j % 2 == 0 ? 0.0 : std::acos(0.0));
    }
    Graph& graph = input.graph();
    const Tensor angles =
        ops::expand_dims(positions_from(input, -2, start), 1) * ops::constant(graph, timescales, "sine_timescales");
    return in_shape_of(input, ops::sin(angles + ops::constant(graph, phases, "sine_phases")));
  }
  // Known steps: a constant of the graph, as the encoding depends on the shape only.
  Array encoding(Shape{steps, features}, input.dtype());
  for (std::int64_t j = 0; j < features; ++j) {
    for (std::int64_t p = 0; p < steps; ++p) {
      const double angle = static_cast<double>(start + p) * timescale(j);
      encoding.set_flat(static_cast<std::size_t>(p * features + j), j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  const Tensor table = ops::constant(input.graph(), encoding, "sine_position_encoding");
  if (step != nullptr) return ops::gather(table, step->positions);
  return in_shape_of(input, table);
}

SinePositionEncoding::SinePositionEncoding(double max_wavelength, const Config& options)
    : LayerHandle(std::make_shared<SinePositionEncodingLayer>(options.with("max_wavelength", max_wavelength))) {}

// ---- RotaryEmbedding ---------------------------------------------------------------------------------

RotaryEmbeddingLayer::RotaryEmbeddingLayer(const Config& config) : Layer(config, "RotaryEmbedding") {
  ConfigReader args = config_reader(config);
  max_wavelength_ = args.number("max_wavelength", 10000.0);
  scaling_factor_ = args.number("scaling_factor", 1.0);
  rope_type_ = args.text("rope_type", "linear");
  beta_fast_ = args.number("beta_fast", 32.0);
  beta_slow_ = args.number("beta_slow", 1.0);
  original_max_position_embeddings_ = args.integer("original_max_position_embeddings", 4096);
  truncate_ = args.boolean("truncate", false);
  sequence_axis_ = args.integer("sequence_axis", 1);
  feature_axis_ = args.integer("feature_axis", -1);
  denominator_dim_ = args.value("denominator_dim");
  args.finish();
  if (!(max_wavelength_ > 0)) args.fail("max_wavelength must be positive, got " + std::to_string(max_wavelength_));
  if (!(scaling_factor_ > 0)) args.fail("scaling_factor must be positive, got " + std::to_string(scaling_factor_));
  if (rope_type_ == "yarn") args.fail("rope_type 'yarn' is not supported; 'linear' and 'dynamic' are");
  if (!denominator_dim_.is_null() && denominator_dim_.as_int("denominator_dim") <= 0)
    args.fail("denominator_dim must be positive or null, got " + denominator_dim_.to_string());
}

Config RotaryEmbeddingLayer::get_config() const {
  Config config = base_config();
  config.set("max_wavelength", max_wavelength_);
  config.set("scaling_factor", scaling_factor_);
  config.set("rope_type", rope_type_);
  config.set("beta_fast", beta_fast_);
  config.set("beta_slow", beta_slow_);
  config.set("original_max_position_embeddings", original_max_position_embeddings_);
  config.set("truncate", truncate_);
  config.set("sequence_axis", sequence_axis_);
  config.set("feature_axis", feature_axis_);
  config.set("denominator_dim", denominator_dim_);
  return config;
}

Tensor RotaryEmbeddingLayer::call(const Tensor& input, const CallArgs& args) {
  const detail::DecodingStep* step = detail::decoding();
  const Shape& shape = input.shape();
  const std::int64_t rank = shape.rank();
  const std::int64_t sequence_axis = sequence_axis_ < 0 ? sequence_axis_ + rank : sequence_axis_;
  const std::int64_t feature_axis = feature_axis_ < 0 ? feature_axis_ + rank : feature_axis_;
  if (sequence_axis <= 0 || sequence_axis >= rank || feature_axis <= 0 || feature_axis >= rank ||
      sequence_axis == feature_axis)
    shape_error("needs distinct sequence_axis " + std::to_string(sequence_axis_) + " and feature_axis " +
                    std::to_string(feature_axis_) + " inside the input, neither the batch axis",
                {{"input", shape}});
  const std::int64_t steps = shape[sequence_axis], features = shape[feature_axis];
  if (features == Shape::unknown || features % 2 != 0)
    shape_error("needs an even, known number of features", {{"input", shape}});
  const std::int64_t start = start_index(args, *this), half = features / 2;
  auto theta = [&](std::int64_t i) { return inverse_frequency(i, features); };
  // cos and sin of p·θ_i on feature i and i + D/2 (the rotate-half layout), shaped to broadcast: steps on the
  // sequence axis, features on the feature axis, 1 elsewhere.
  Graph& graph = input.graph();
  Tensor cos_table, sin_table;
  if (steps == Shape::unknown || step != nullptr) {
    // Computed when the positions are known: angles (rows, features), one row per position, laid out on
    // the sequence axis; decoding a token at a time, one row per batch row, at the step's position.
    Array thetas(Shape{1, features}, input.dtype());
    for (std::int64_t j = 0; j < features; ++j) thetas.set_flat(static_cast<std::size_t>(j), theta(j % half));
    Tensor placed;
    if (step != nullptr) {
      // Decoding: the step's positions (batch, tokens), angles (batch, tokens, features) laid out on the batch,
      // sequence and feature axes.
      if (steps != step->positions.shape()[1] || (steps > 1 && sequence_axis > feature_axis))
        shape_error("decodes the step's " + std::to_string(step->positions.shape()[1]) +
                        " tokens on a sequence axis before the features",
                    {{"input", shape}});
      const Tensor angles = ops::expand_dims(step->positions, 2) * ops::constant(graph, thetas, "rotary_thetas");
      std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), 1);
      dims[0] = -1;
      dims[static_cast<std::size_t>(sequence_axis)] = steps;
      dims[static_cast<std::size_t>(feature_axis)] = features;
      placed = ops::reshape(angles, dims);
    } else {
      const int rows_axis = static_cast<int>(sequence_axis);
      const Tensor positions = ops::expand_dims(positions_from(input, rows_axis, start), 1);
      const Tensor angles = positions * ops::constant(graph, thetas, "rotary_thetas");
      const Tensor laid_out = rows_axis < feature_axis ? angles : ops::transpose(angles, {1, 0});
      std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), 1);
      dims[static_cast<std::size_t>(rows_axis)] = -1;
      dims[static_cast<std::size_t>(feature_axis)] = features;
      placed = ops::reshape(laid_out, dims);
    }
    cos_table = ops::cos(placed);
    sin_table = ops::sin(placed);
  } else {
    std::vector<std::int64_t> table_dims(static_cast<std::size_t>(rank), 1);
    table_dims[static_cast<std::size_t>(sequence_axis)] = steps;
    table_dims[static_cast<std::size_t>(feature_axis)] = features;
    Array cos_values(Shape(table_dims), input.dtype()), sin_values(Shape(table_dims), input.dtype());
    const std::size_t feature_stride = sequence_axis < feature_axis ? 1 : static_cast<std::size_t>(steps);
    const std::size_t step_stride = sequence_axis < feature_axis ? static_cast<std::size_t>(features) : 1;
    for (std::int64_t i = 0; i < half; ++i) {
      for (std::int64_t p = 0; p < steps; ++p) {
        const double angle = static_cast<double>(start + p) * theta(i);
        for (const std::int64_t j : {i, i + half}) {
          const std::size_t at = static_cast<std::size_t>(p) * step_stride + static_cast<std::size_t>(j) * feature_stride;
          cos_values.set_flat(at, std::cos(angle));
          sin_values.set_flat(at, std::sin(angle));
        }
      }
    }
    cos_table = ops::constant(graph, cos_values, "rotary_cos");
    sin_table = ops::constant(graph, sin_values, "rotary_sin");
  }
  const std::vector<Tensor> halves = ops::split(input, 2, static_cast<int>(feature_axis));
  const Tensor rotated = ops::concat({ops::neg(halves[1]), halves[0]}, static_cast<int>(feature_axis));
  return input * cos_table + rotated * sin_table;
}

double RotaryEmbeddingLayer::base_inverse_frequency(std::int64_t i, std::int64_t features) const {
  const double denominator = denominator_dim_.is_null() ? static_cast<double>(features) : denominator_dim_.as_double();
  return std::pow(max_wavelength_, -2.0 * static_cast<double>(i) / denominator);
}

// keras-hub's inverse frequencies; "linear" divides them by the scaling factor, "dynamic" by a power of it.
double RotaryEmbeddingLayer::inverse_frequency(std::int64_t i, std::int64_t features) const {
  double divisor = 1.0;
  if (rope_type_ == "linear") divisor = scaling_factor_;
  if (rope_type_ == "dynamic")
    divisor = std::pow(scaling_factor_, static_cast<double>(features) / std::max<double>(1.0, features - 2.0));
  return base_inverse_frequency(i, features) / divisor;
}

RotaryEmbedding::RotaryEmbedding(double max_wavelength, const Config& options)
    : LayerHandle(std::make_shared<RotaryEmbeddingLayer>(options.with("max_wavelength", max_wavelength))) {}

KILN_REGISTER_LAYER("keras_hub>PositionEmbedding", PositionEmbeddingLayer);
KILN_REGISTER_LAYER("keras_hub>TokenAndPositionEmbedding", TokenAndPositionEmbeddingLayer);
KILN_REGISTER_LAYER("keras_hub>SinePositionEncoding", SinePositionEncodingLayer);
KILN_REGISTER_LAYER("keras_hub>RotaryEmbedding", RotaryEmbeddingLayer);

}  // namespace kiln
