#include <kiln/layers/pooling.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln {

GlobalAveragePooling1DLayer::GlobalAveragePooling1DLayer(const Config& config)
    : Layer(config, "GlobalAveragePooling1D") {
  ConfigReader args = config_reader(config);
  data_format_ = args.text("data_format", "channels_last");
  keepdims_ = args.boolean("keepdims", false);
  args.finish();
  if (data_format_ != "channels_last" && data_format_ != "channels_first")
    args.fail("data_format must be 'channels_last' or 'channels_first', got '" + data_format_ + "'");
}

Config GlobalAveragePooling1DLayer::get_config() const {
  Config config = base_config();
  config.set("data_format", data_format_);
  config.set("keepdims", keepdims_);
  return config;
}

void GlobalAveragePooling1DLayer::check_rank(const Shape& input_shape) const {
  if (input_shape.rank() != 3)
    shape_error(data_format_ == "channels_last" ? "needs inputs of shape (batch, steps, features)"
                                                : "needs inputs of shape (batch, features, steps)",
                {{"input", input_shape}});
}

void GlobalAveragePooling1DLayer::build(const Shape& input_shape) { check_rank(input_shape); }

Tensor GlobalAveragePooling1DLayer::call(const Tensor& input, const CallArgs&) {
  check_rank(input.shape());
  const std::int64_t steps_axis = data_format_ == "channels_last" ? 1 : 2;
  return ops::mean(input, {steps_axis}, keepdims_);
}

GlobalAveragePooling1D::GlobalAveragePooling1D(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<GlobalAveragePooling1DLayer>(options.with("data_format", data_format))) {}

KILN_REGISTER_LAYER("kiln>GlobalAveragePooling1D", GlobalAveragePooling1DLayer);

}  // namespace kiln
