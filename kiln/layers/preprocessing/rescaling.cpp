#include <kiln/layers/preprocessing/rescaling.hpp>

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

KILN_REGISTER_LAYER("kiln>Rescaling", RescalingLayer);

}  // namespace kiln
