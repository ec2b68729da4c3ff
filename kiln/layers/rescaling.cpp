#include <kiln/layers/rescaling.hpp>

#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/nested_numbers.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- Rescaling --------------------------------------------------------------------------------------

RescalingLayer::RescalingLayer(const Config& config) : Layer(config, "Rescaling") {
  ConfigReader args = config_reader(config);
  if (!args.has("scale")) args.fail("argument 'scale' is required");
  scale_ = args.value("scale");
  offset_ = args.has("offset") ? args.value("offset") : Config(0.0);
  args.finish();
  try {
    detail::read_nested_numbers(scale_, "scale");
    detail::read_nested_numbers(offset_, "offset");
  } catch (const ConfigError& error) {
    args.fail(error.what());
  }
}

Config RescalingLayer::get_config() const {
  Config config = base_config();
  config.set("scale", scale_);
  config.set("offset", offset_);
  return config;
}

void RescalingLayer::build(const Shape& input_shape) {
  for (const auto& [value, name] : {std::pair{&scale_, "scale"}, std::pair{&offset_, "offset"}}) {
    const Shape given(detail::read_nested_numbers(*value, name).dims);
    bool fits = given.rank() <= input_shape.rank();
    for (int i = 1; fits && i <= given.rank(); ++i) {
      const std::int64_t size = given[given.rank() - i], against = input_shape[input_shape.rank() - i];
      fits = size == 1 || against == Shape::unknown || size == against;
    }
    if (!fits)
      shape_error(std::string(name) + " of shape " + given.to_string() +
                      " does not broadcast over the input's last axes without changing its shape",
                  {{"input", input_shape}});
  }
}

Tensor RescalingLayer::call(const Tensor& input, const CallArgs&) {
  build(input.shape());
  // inputs · scale + offset, NumPy broadcasting over the last axes (per channel in channels_last images).
  const detail::NestedNumbers scale = detail::read_nested_numbers(scale_, "scale");
  const detail::NestedNumbers offset = detail::read_nested_numbers(offset_, "offset");
  const auto constant = [&](const detail::NestedNumbers& numbers, const char* name) {
    return ops::constant(input.graph(), detail::nested_array(numbers, input.dtype()), name);
  };
  Tensor output = scale.dims.empty() ? input * scale.values[0] : input * constant(scale, "scale");
  if (offset.dims.empty()) return offset.values[0] == 0.0 ? output : output + offset.values[0];
  return output + constant(offset, "offset");
}

Rescaling::Rescaling(double scale, double offset, const Config& options)
    : LayerHandle(std::make_shared<RescalingLayer>(options.with("scale", scale).with("offset", offset))) {}

Rescaling::Rescaling(const std::vector<double>& scale, const std::vector<double>& offset, const Config& options)
    : LayerHandle(std::make_shared<RescalingLayer>(
          options.with("scale", Config(scale))
              .with("offset", offset.size() == 1 ? Config(offset[0]) : Config(offset)))) {}

// ---- UnitNormalization ------------------------------------------------------------------------------

UnitNormalizationLayer::UnitNormalizationLayer(const Config& config) : Layer(config, "UnitNormalization") {
  ConfigReader args = config_reader(config);
  axis_ = args.int_or_ints("axis", -1, axis_is_list_);
  args.finish();
  if (axis_.empty()) args.fail("axis must not be an empty list");
}

Config UnitNormalizationLayer::get_config() const {
  Config config = base_config();
  config.set("axis", axis_is_list_ ? Config::from_ints(axis_) : Config(axis_[0]));
  return config;
}

void UnitNormalizationLayer::check_axes(const Shape& input_shape) const {
  for (const std::int64_t axis : axis_)
    if (axis >= input_shape.rank() || axis < -input_shape.rank())
      shape_error(
          "axis " + std::to_string(axis) + " is out of range for inputs of rank " + std::to_string(input_shape.rank()),
          {{"input", input_shape}});
}

void UnitNormalizationLayer::build(const Shape& input_shape) { check_axes(input_shape); }

Tensor UnitNormalizationLayer::call(const Tensor& input, const CallArgs&) {
  check_axes(input.shape());
  return ops::l2_normalize(input, axis_);
}

UnitNormalization::UnitNormalization(std::int64_t axis, const Config& options)
    : LayerHandle(std::make_shared<UnitNormalizationLayer>(options.with("axis", axis))) {}

KILN_REGISTER_LAYER("kiln>Rescaling", RescalingLayer);
KILN_REGISTER_LAYER("kiln>UnitNormalization", UnitNormalizationLayer);

}  // namespace kiln
