#include <kiln/layers/regularization/noise.hpp>

#include <cmath>
#include <string>

#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

NoiseLayer::NoiseLayer(const Config& config, const std::string& class_name, const char* amount_key, bool multiplicative)
    : Layer(config, class_name), amount_key_(amount_key), multiplicative_(multiplicative) {
  ConfigReader args = config_reader(config);
  if (!args.has(amount_key)) args.fail("the argument '" + std::string(amount_key) + "' is required");
  amount_ = args.number(amount_key, 0.0);
  if (const Config& seed = args.value("seed"); !seed.is_null()) seed_ = seed.as_int(class_name + " argument 'seed'");
  args.finish();
  // Keras checks [0, 1]; a GaussianDropout rate of 1 would have infinite variance.
  if (!(amount_ >= 0.0 && (multiplicative ? amount_ < 1.0 : amount_ <= 1.0)))
    args.fail(std::string(amount_key) + " must be in " + (multiplicative ? "[0, 1)" : "[0, 1]") + ", got " +
              std::to_string(amount_));
}

Config NoiseLayer::get_config() const {
  Config config = base_config();
  config.set(amount_key_, amount_);
  config.set("seed", seed_ ? Config(*seed_) : Config());
  return config;
}

Tensor NoiseLayer::call(const Tensor& input, const CallArgs& args) {
  if (!args.training() || amount_ == 0.0) return input;
  const Tensor normal =
      ops::random_normal_like(input, detail::call_seed(seed_ ? Config(*seed_) : Config(), name(), input));
  if (!multiplicative_) return input + normal * amount_;
  return input * (normal * std::sqrt(amount_ / (1.0 - amount_)) + 1.0);
}

GaussianNoise::GaussianNoise(double stddev, const Config& options)
    : LayerHandle(std::make_shared<GaussianNoiseLayer>(options.with("stddev", stddev))) {}
GaussianDropout::GaussianDropout(double rate, const Config& options)
    : LayerHandle(std::make_shared<GaussianDropoutLayer>(options.with("rate", rate))) {}

KILN_REGISTER_LAYER("kiln>GaussianNoise", GaussianNoiseLayer);
KILN_REGISTER_LAYER("kiln>GaussianDropout", GaussianDropoutLayer);

}  // namespace kiln
