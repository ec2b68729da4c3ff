#include <kiln/layers/rescaling.hpp>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- Rescaling --------------------------------------------------------------------------------------

RescalingLayer::RescalingLayer(const Config& config) : Layer(config, "Rescaling") {
  ConfigReader args = config_reader(config);
  if (!args.has("scale")) args.fail("argument 'scale' is required");
  for (const char* key : {"scale", "offset"})
    if (args.value(key).is_list() || args.value(key).is_map())
      args.fail(std::string(key) + " must be a number (per-channel arrays are not supported), got " +
                args.value(key).to_string());
  scale_ = args.number("scale", 1.0);
  offset_ = args.number("offset", 0.0);
  args.finish();
}

Config RescalingLayer::get_config() const {
  Config config = base_config();
  config.set("scale", scale_);
  config.set("offset", offset_);
  return config;
}

Tensor RescalingLayer::call(const Tensor& input, const CallArgs&) {
  Tensor output = input * scale_;
  return offset_ == 0.0 ? output : output + offset_;
}

Rescaling::Rescaling(double scale, double offset, const Config& options)
    : LayerHandle(std::make_shared<RescalingLayer>(options.with("scale", scale).with("offset", offset))) {}

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
