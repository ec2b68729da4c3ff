#include <kiln/layers/regularization/dropout.hpp>

#include <string>

#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

void DropoutLayer::read_common(ConfigReader& args) {
  if (!args.has("rate")) args.fail("the argument 'rate' is required");
  rate_ = args.number("rate", 0.0);
  if (const Config& seed = args.value("seed"); !seed.is_null()) seed_ = seed.as_int(args.who() + " argument 'seed'");
}

DropoutLayer::DropoutLayer(const Config& config) : Layer(config, "Dropout") {
  ConfigReader args = config_reader(config);
  read_common(args);
  noise_shape_ = args.value("noise_shape");
  args.finish();
  if (!noise_shape_.is_null()) {
    if (!noise_shape_.is_list())
      args.fail("noise_shape must be a list of ints and nulls, got " + noise_shape_.to_string());
    for (const Config& entry : noise_shape_.as_list())
      if (!entry.is_null()) entry.as_int("Dropout argument 'noise_shape'");
  }
  // Keras accepts rate = 1, but then the kept elements would be scaled by 1 / 0.
  if (!(rate_ >= 0.0 && rate_ < 1.0)) args.fail("rate must be in [0, 1), got " + std::to_string(rate_));
}

DropoutLayer::DropoutLayer(const Config& config, const std::string& class_name, int spatial_rank)
    : Layer(config, class_name), spatial_rank_(spatial_rank) {
  ConfigReader args = config_reader(config);
  read_common(args);
  if (spatial_rank == 2) data_format_ = args.data_format();
  args.unsupported("noise_shape");  // tf.keras wrote noise_shape: null; the shape is the layer's own
  args.finish();
  if (!(rate_ >= 0.0 && rate_ < 1.0)) args.fail("rate must be in [0, 1), got " + std::to_string(rate_));
}

Config DropoutLayer::get_config() const {
  Config config = base_config();
  config.set("rate", rate_);
  config.set("seed", seed_ ? Config(*seed_) : Config());
  if (spatial_rank_ == 0) {
    config.set("noise_shape", noise_shape_);
    return config;
  }
  // Keras's spatial dropouts take only rate, seed, name and dtype (and data_format): no trainable.
  config.erase("trainable");
  if (spatial_rank_ == 2) config.set("data_format", data_format_);
  return config;
}

std::vector<int> DropoutLayer::broadcast_axes(const Shape& input_shape) const {
  if (spatial_rank_ > 0) {
    if (input_shape.rank() != spatial_rank_ + 2)
      shape_error("needs inputs of rank " + std::to_string(spatial_rank_ + 2) +
                      (spatial_rank_ == 1 ? " (batch, steps, channels)" : " (batch, height, width, channels)") +
                      ", got rank " + std::to_string(input_shape.rank()),
                  {{"input", input_shape}});
    if (spatial_rank_ == 1) return {1};
    return data_format_ == "channels_first" ? std::vector<int>{2, 3} : std::vector<int>{1, 2};
  }
  if (noise_shape_.is_null()) return {};
  const std::vector<Config>& entries = noise_shape_.as_list();
  if (static_cast<int>(entries.size()) != input_shape.rank())
    shape_error("noise_shape " + noise_shape_.to_string() + " has " + std::to_string(entries.size()) +
                    " entries for an input of rank " + std::to_string(input_shape.rank()),
                {{"input", input_shape}});
  std::vector<int> axes;
  for (int axis = 0; axis < input_shape.rank(); ++axis) {
    const Config& entry = entries[static_cast<std::size_t>(axis)];
    if (entry.is_null() || entry.as_int() == input_shape[axis]) continue;
    if (entry.as_int() != 1)
      shape_error("noise_shape " + noise_shape_.to_string() + " does not broadcast to the input on axis " +
                      std::to_string(axis) + " (each entry must be null, 1 or the input's size)",
                  {{"input", input_shape}});
    axes.push_back(axis);
  }
  return axes;
}

Tensor DropoutLayer::call(const Tensor& input, const CallArgs& args) {
  const std::vector<int> axes = broadcast_axes(input.shape());  // checked in inference too: as early as known
  const std::uint64_t seed = detail::call_seed(seed_ ? Config(*seed_) : Config(), name(), input);
  if (axes.empty() || !args.training() || rate_ == 0.0) return ops::dropout(input, rate_, seed, args.training());
  return input * ops::dropout_mask(input, rate_, seed, axes);
}

Dropout::Dropout(double rate, const Config& options)
    : LayerHandle(std::make_shared<DropoutLayer>(options.with("rate", rate))) {}
SpatialDropout1D::SpatialDropout1D(double rate, const Config& options)
    : LayerHandle(std::make_shared<SpatialDropout1DLayer>(options.with("rate", rate))) {}
SpatialDropout2D::SpatialDropout2D(double rate, const Config& options)
    : LayerHandle(std::make_shared<SpatialDropout2DLayer>(options.with("rate", rate))) {}

KILN_REGISTER_LAYER("kiln>Dropout", DropoutLayer);
KILN_REGISTER_LAYER("kiln>SpatialDropout1D", SpatialDropout1DLayer);
KILN_REGISTER_LAYER("kiln>SpatialDropout2D", SpatialDropout2DLayer);

}  // namespace kiln
