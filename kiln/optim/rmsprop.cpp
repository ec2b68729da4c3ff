#include <kiln/optim/optimizer.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- RMSprop -----------------------------------------------------------------------------------------------------

RMSprop::RMSprop(const Config& config) : Optimizer(config, "RMSprop", {"rmsprop", 0.001, std::nullopt}) {
  ConfigReader args = config_reader(config);
  rho_ = args.number("rho", 0.9);
  momentum_ = args.number("momentum", 0.0);
  epsilon_ = args.number("epsilon", 1e-7);
  centered_ = args.boolean("centered", false);
  args.finish();
  if (!(rho_ >= 0.0 && rho_ <= 1.0)) fail("rho must be in [0, 1], got " + std::to_string(rho_));
  if (!(momentum_ >= 0.0)) fail("momentum must be >= 0, got " + std::to_string(momentum_));
}

Config RMSprop::get_config() const {
  return Optimizer::get_config()
      .set("rho", rho_)
      .set("momentum", momentum_)
      .set("epsilon", epsilon_)
      .set("centered", centered_);
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names{"velocity"};
  if (momentum_ > 0.0) names.push_back("momentum");
  if (centered_) names.push_back("average_gradient");
  return names;
}

// ε sits inside the square root (torch adds it outside).
Tensor RMSprop::update_step(WeightUpdate& update) {
  const Tensor& grad = update.grad();
  const Tensor velocity = update.slot("velocity") * rho_ + ops::square(grad) * (1.0 - rho_);
  update.assign("velocity", velocity);
  Tensor denominator;
  if (centered_) {
    const Tensor average_gradient = update.slot("average_gradient") * rho_ + grad * (1.0 - rho_);
    update.assign("average_gradient", average_gradient);
    denominator = (velocity - ops::square(average_gradient)) + epsilon_;
  } else {
    denominator = velocity + epsilon_;
  }
  const Tensor increment = ops::div(ops::mul(update.learning_rate(), grad), ops::sqrt(denominator));
  if (momentum_ == 0.0) return update.weight() - increment;
  const Tensor momentum = update.slot("momentum") * momentum_ + increment;
  update.assign("momentum", momentum);
  return update.weight() - momentum;
}

KILN_REGISTER_OPTIMIZER("kiln>RMSprop", RMSprop);

}  // namespace kiln
