#include <kiln/layers/preprocessing/normalization.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/detail/nested_numbers.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Keras's backend.epsilon(): the smallest standard deviation divided by.
constexpr double epsilon = 1e-7;

// A given mean or variance, checked by the constructor.
detail::NestedNumbers read_statistic(const Config& value) {
  return detail::read_nested_numbers(value, "a Normalization mean or variance");
}

}  // namespace

NormalizationLayer::NormalizationLayer(const Config& config) : Layer(config, "Normalization") {
  ConfigReader args = config_reader(config);
  const Config& axis = args.value("axis");
  if (!args.has("axis") && !config.contains("axis"))
    axis_ = {-1};
  else if (axis.is_list())
    axis_ = axis.as_ints("Normalization argument 'axis'");
  else if (!axis.is_null())
    axis_ = {axis.as_int("Normalization argument 'axis'")};
  mean_config_ = args.value("mean");
  variance_config_ = args.value("variance");
  invert_ = args.boolean("invert", false);
  args.finish();
  if (mean_config_.is_null() != variance_config_.is_null())
    args.fail("mean and variance must be given together, or neither (then adapt() computes them)");
  if (!mean_config_.is_null()) {
    detail::NestedNumbers mean, variance;
    try {
      mean = read_statistic(mean_config_);
      variance = read_statistic(variance_config_);
    } catch (const ConfigError&) {
      args.fail("mean and variance must be numbers or nested lists of one shape, got " + mean_config_.to_string() +
                " and " + variance_config_.to_string());
    }
    if (mean.dims != variance.dims)
      args.fail("mean and variance must have the same shape, got " + mean_config_.to_string() + " and " +
                variance_config_.to_string());
    if (mean.dims.size() > axis_.size())
      args.fail("mean has more dimensions than the " + std::to_string(axis_.size()) + " kept axes");
  }
}

Config NormalizationLayer::get_config() const {
  Config config = base_config();
  config.set("axis", Config::from_ints(axis_));  // Keras keeps axis as a tuple
  config.set("invert", invert_);
  config.set("mean", mean_config_);
  config.set("variance", variance_config_);
  return config;
}

std::vector<int> NormalizationLayer::kept_axes(const Shape& input_shape) const {
  std::vector<int> kept;
  for (const std::int64_t axis : axis_) {
    if (axis >= input_shape.rank() || axis < -input_shape.rank())
      shape_error(
          "axis " + std::to_string(axis) + " does not exist in inputs of rank " + std::to_string(input_shape.rank()),
          {{"input", input_shape}});
    kept.push_back(static_cast<int>(axis < 0 ? axis + input_shape.rank() : axis));
  }
  std::sort(kept.begin(), kept.end());
  for (const int axis : kept)
    if (input_shape[axis] == Shape::unknown)
      shape_error("needs the kept axis " + std::to_string(axis) + " known", {{"input", input_shape}});
  return kept;
}

Shape NormalizationLayer::kept_shape(const Shape& input_shape) const {
  std::vector<std::int64_t> dims;
  for (const int axis : kept_axes(input_shape)) dims.push_back(input_shape[axis]);
  return Shape(std::move(dims));
}

void NormalizationLayer::build(const Shape& input_shape) {
  const Shape kept = kept_shape(input_shape);
  if (!mean_config_.is_null()) return;  // given statistics are constants, not weights
  mean_ = add_weight("mean", kept, Initializer::get("zeros"), /*trainable=*/false);
  variance_ = add_weight("variance", kept, Initializer::get("ones"), /*trainable=*/false);
  count_ = add_weight("count", Shape{}, Initializer::get("zeros"), /*trainable=*/false);
}

// A given mean or variance, broadcast to the kept axes' shape as Keras does: its dimensions align with the
// last kept axes.
Array NormalizationLayer::given_statistic(const Config& value, const Shape& kept) const {
  const detail::NestedNumbers s = read_statistic(value);  // checked by the constructor
  const std::size_t offset = static_cast<std::size_t>(kept.rank()) - s.dims.size();
  for (std::size_t i = 0; i < s.dims.size(); ++i)
    if (s.dims[i] != kept[static_cast<int>(offset + i)] && s.dims[i] != 1)
      shape_error("the given mean and variance of shape " + Shape(s.dims).to_string() +
                      " do not broadcast to the kept axes' " + kept.to_string(),
                  {{"kept", kept}});
  Array out(kept, dtype());
  // Element i of `out` reads the statistic at its last s.dims.size() indices (index 0 where a size is 1).
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::size_t rest = i, source = 0, stride = 1;
    for (int axis = kept.rank() - 1; axis >= static_cast<int>(offset); --axis) {
      const auto size = static_cast<std::size_t>(kept[axis]);
      const auto given = static_cast<std::size_t>(s.dims[static_cast<std::size_t>(axis) - offset]);
      source += (given == 1 ? 0 : rest % size) * stride;
      stride *= given;
      rest /= size;
    }
    out.set_flat(i, s.values[source]);
  }
  return out;
}

void NormalizationLayer::adapt(const Array& data) { adapt(std::vector<Array>{data}); }

void NormalizationLayer::adapt(const std::vector<Array>& batches) {
  if (!mean_config_.is_null()) config_error("adapt() needs a layer without a given mean and variance");
  if (batches.empty()) config_error("adapt() needs at least one batch");
  std::vector<std::int64_t> dims = batches[0].shape().dims();
  if (!dims.empty()) dims[0] = Shape::unknown;
  if (!built()) {
    take_input_dtype(batches[0].dtype());
    build_for(Shape(dims));
  }
  const Shape& built_shape = build_shapes().at(0);
  const std::vector<int> kept = kept_axes(built_shape);
  const Shape kept_dims = kept_shape(built_shape);
  const auto positions = static_cast<std::size_t>(kept_dims.num_elements());
  std::vector<double> total_mean(positions, 0.0), total_variance(positions, 0.0);
  double total_count = 0;
  for (const Array& batch : batches) {
    const Shape& shape = batch.shape();
    if (shape.rank() != built_shape.rank())
      shape_error("adapt() got data of another rank than the layer's", {{"built for", built_shape}, {"data", shape}});
    for (const int axis : kept)
      if (shape[axis] != built_shape[axis])
        shape_error("adapt() got data whose kept axis " + std::to_string(axis) + " differs from the layer's",
                    {{"built for", built_shape}, {"data", shape}});
    if (batch.size() == 0) continue;
    // Each element's position among the kept axes, from its row-major index.
    std::vector<std::size_t> position(batch.size(), 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      std::size_t rest = i, p = 0, stride = 1;
      for (int axis = shape.rank() - 1; axis >= 0; --axis) {
        const auto size = static_cast<std::size_t>(shape[axis]);
        if (std::find(kept.begin(), kept.end(), axis) != kept.end()) {
          p += (rest % size) * stride;
          stride *= size;
        }
        rest /= size;
      }
      position[i] = p;
    }
    // The batch's mean and biased variance per position, two passes in double.
    const double count = static_cast<double>(batch.size()) / static_cast<double>(positions);
    std::vector<double> mean(positions, 0.0), variance(positions, 0.0);
    for (std::size_t i = 0; i < batch.size(); ++i) mean[position[i]] += batch.flat(i) / count;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const double d = batch.flat(i) - mean[position[i]];
      variance[position[i]] += d * d / count;
    }
    // Keras's combination of a new batch with what came before (Chan et al.).
    total_count += count;
    const double weight = count / total_count, existing = 1.0 - weight;
    for (std::size_t p = 0; p < positions; ++p) {
      const double new_mean = total_mean[p] * existing + mean[p] * weight;
      total_variance[p] = (total_variance[p] + (total_mean[p] - new_mean) * (total_mean[p] - new_mean)) * existing +
                          (variance[p] + (mean[p] - new_mean) * (mean[p] - new_mean)) * weight;
      total_mean[p] = new_mean;
    }
  }
  Array mean(kept_dims, dtype()), variance(kept_dims, dtype());
  for (std::size_t p = 0; p < positions; ++p) {
    mean.set_flat(p, total_mean[p]);
    variance.set_flat(p, total_variance[p]);
  }
  set_weights({mean, variance, weight_value(count_).copy()});
}

Tensor NormalizationLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& built_shape = build_shapes().at(0);
  if (input.rank() != built_shape.rank())
    shape_error("was built for inputs of rank " + std::to_string(built_shape.rank()),
                {{"built for", built_shape}, {"input", input.shape()}});
  const std::vector<int> kept = kept_axes(input.shape());
  const Shape kept_dims = kept_shape(input.shape()), built_dims = kept_shape(built_shape);
  if (kept_dims != built_dims)
    shape_error("was built for inputs whose kept axes have the sizes " + built_dims.to_string(),
                {{"built for", built_shape}, {"input", input.shape()}});
  Tensor mean, variance;
  if (mean_config_.is_null()) {
    mean = variable(mean_, input);
    variance = variable(variance_, input);
  } else {
    mean = ops::constant(input.graph(), given_statistic(mean_config_, kept_dims), "mean");
    variance = ops::constant(input.graph(), given_statistic(variance_config_, kept_dims), "variance");
  }
  // The kept axes' sizes, 1 on every other axis, to broadcast against the input.
  std::vector<std::int64_t> broadcast(static_cast<std::size_t>(input.rank()), 1);
  for (const int axis : kept) broadcast[static_cast<std::size_t>(axis)] = input.shape()[axis];
  mean = ops::reshape(mean, broadcast);
  const Tensor scale = ops::maximum(ops::sqrt(ops::reshape(variance, broadcast)), ops::scalar_like(mean, epsilon));
  return invert_ ? mean + input * scale : (input - mean) / scale;
}

Normalization::Normalization(std::int64_t axis, const Config& options)
    : LayerHandle(std::make_shared<NormalizationLayer>(options.with("axis", axis))) {}

KILN_REGISTER_LAYER("kiln>Normalization", NormalizationLayer);

}  // namespace kiln
