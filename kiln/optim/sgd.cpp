#include <kiln/optim/optimizer.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- SGD ---------------------------------------------------------------------------------------------------------

SGD::SGD(const Config& config) : Optimizer(config, "SGD", {"SGD", 0.01, std::nullopt}) {
  ConfigReader args = config_reader(config);
  momentum_ = args.number("momentum", 0.0);
  nesterov_ = args.boolean("nesterov", false);
  args.finish();
  if (!(momentum_ >= 0.0 && momentum_ <= 1.0)) fail("momentum must be in [0, 1], got " + std::to_string(momentum_));
}

Config SGD::get_config() const { return Optimizer::get_config().set("momentum", momentum_).set("nesterov", nesterov_); }

std::vector<std::string> SGD::slot_names() const {
  if (momentum_ == 0.0) return {};
  return {"momentum"};
}

// Keras's velocity holds lr·g, so a learning-rate change takes effect gradually (torch's does not).
Tensor SGD::update_step(WeightUpdate& update) {
  const Tensor scaled_grad = ops::mul(update.grad(), update.learning_rate());
  if (momentum_ == 0.0) return update.weight() - scaled_grad;
  const Tensor momentum = update.slot("momentum") * momentum_ - scaled_grad;
  update.assign("momentum", momentum);
  if (nesterov_) return update.weight() + (momentum * momentum_ - scaled_grad);
  return update.weight() + momentum;
}

KILN_REGISTER_OPTIMIZER("kiln>SGD", SGD);

}  // namespace kiln
