#include <kiln/layers/regularization/activity_regularization.hpp>

#include <string>

namespace kiln {

ActivityRegularizationLayer::ActivityRegularizationLayer(const Config& config)
    : Layer(config, "ActivityRegularization") {
  ConfigReader args = config_reader(config);
  l1_ = args.number("l1", 0.0);
  l2_ = args.number("l2", 0.0);
  args.finish();
  // Keras builds L1L2(l1, l2), which checks both factors.
  set_activity_regularizer(
      Regularizer::from_config(Config{{"class_name", "L1L2"}, {"config", Config{{"l1", l1_}, {"l2", l2_}}}}));
}

Config ActivityRegularizationLayer::get_config() const {
  Config config = base_config();
  config.erase("activity_regularizer");
  config.set("l1", l1_);
  config.set("l2", l2_);
  return config;
}

ActivityRegularization::ActivityRegularization(double l1, double l2, const Config& options)
    : LayerHandle(std::make_shared<ActivityRegularizationLayer>(options.with("l1", l1).with("l2", l2))) {}

KILN_REGISTER_LAYER("kiln>ActivityRegularization", ActivityRegularizationLayer);

}  // namespace kiln
