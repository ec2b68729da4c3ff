#include <kiln/layers/dropout.hpp>

#include <string>

#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

DropoutLayer::DropoutLayer(const Config& config) : Layer(config, "Dropout") {
  ConfigReader args = config_reader(config);
  if (!args.has("rate")) args.fail("the argument 'rate' is required");
  rate_ = args.number("rate", 0.0);
  args.unsupported("noise_shape");
  if (const Config& seed = args.value("seed"); !seed.is_null()) seed_ = seed.as_int("Dropout argument 'seed'");
  args.finish();
  // Keras accepts rate = 1, but then the kept elements would be scaled by 1 / 0.
  if (!(rate_ >= 0.0 && rate_ < 1.0)) args.fail("rate must be in [0, 1), got " + std::to_string(rate_));
}

Config DropoutLayer::get_config() const {
  Config config = base_config();
  config.set("rate", rate_);
  config.set("seed", seed_ ? Config(*seed_) : Config());
  config.set("noise_shape", Config());
  return config;
}

Tensor DropoutLayer::call(const Tensor& input, const CallArgs& args) {
  const std::uint64_t seed = detail::call_seed(seed_ ? Config(*seed_) : Config(), name(), input);
  return ops::dropout(input, rate_, seed, args.training());
}

Dropout::Dropout(double rate, const Config& options)
    : LayerHandle(std::make_shared<DropoutLayer>(options.with("rate", rate))) {}

KILN_REGISTER_LAYER("kiln>Dropout", DropoutLayer);

}  // namespace kiln
