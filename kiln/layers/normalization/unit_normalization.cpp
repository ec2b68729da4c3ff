#include <kiln/layers/normalization/unit_normalization.hpp>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

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

KILN_REGISTER_LAYER("kiln>UnitNormalization", UnitNormalizationLayer);

}  // namespace kiln
