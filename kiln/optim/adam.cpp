#include <kiln/optim/optimizer.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- Adam / AdamW ------------------------------------------------------------------------------------------------

Adam::Adam(const Config& config) : Adam(config, "Adam", {"adam", 0.001, std::nullopt}) {}

Adam::Adam(const Config& config, std::string class_name, const OptimizerDefaults& defaults)
    : Optimizer(config, std::move(class_name), defaults) {
  alpha_scalar_ = add_step_scalar("alpha");
  read_config(config);
}

void Adam::read_config(const Config& config) {
  ConfigReader args = config_reader(config);
  beta_1_ = args.number("beta_1", 0.9);
  beta_2_ = args.number("beta_2", 0.999);
  epsilon_ = args.number("epsilon", 1e-7);
  amsgrad_ = args.boolean("amsgrad", false);
  args.finish();
  // β = 1 would divide by zero in the bias correction.
  if (!(beta_1_ >= 0.0 && beta_1_ < 1.0)) fail("beta_1 must be in [0, 1), got " + std::to_string(beta_1_));
  if (!(beta_2_ >= 0.0 && beta_2_ < 1.0)) fail("beta_2 must be in [0, 1), got " + std::to_string(beta_2_));
}

Config Adam::get_config() const {
  return Optimizer::get_config()
      .set("beta_1", beta_1_)
      .set("beta_2", beta_2_)
      .set("epsilon", epsilon_)
      .set("amsgrad", amsgrad_);
}

std::vector<std::string> Adam::slot_names() const {
  if (amsgrad_) return {"momentum", "velocity", "velocity_hat"};
  return {"momentum", "velocity"};
}

// Both bias corrections fold into one host scalar, so the graph does no per-step power.
void Adam::compute_step_scalars(std::int64_t local_step, double learning_rate) {
  const double t = static_cast<double>(local_step);
  const double beta_1_power = std::pow(beta_1_, t);
  const double beta_2_power = std::pow(beta_2_, t);
  set_step_scalar(alpha_scalar_, learning_rate * std::sqrt(1.0 - beta_2_power) / (1.0 - beta_1_power));
}

// Keras adds ε to the uncorrected √v (torch adds it to the corrected one).
Tensor Adam::update_step(WeightUpdate& update) {
  const Tensor& grad = update.grad();
  const Tensor m = update.slot("momentum");
  const Tensor v = update.slot("velocity");
  const Tensor new_m = m + (grad - m) * (1.0 - beta_1_);
  Tensor new_v = v + (ops::square(grad) - v) * (1.0 - beta_2_);
  update.assign("momentum", new_m);
  update.assign("velocity", new_v);
  if (amsgrad_) {
    new_v = ops::maximum(update.slot("velocity_hat"), new_v);
    update.assign("velocity_hat", new_v);
  }
  return update.weight() - ops::div(ops::mul(new_m, update.scalar(alpha_scalar_)), ops::sqrt(new_v) + epsilon_);
}

AdamW::AdamW(const Config& config) : Adam(config, "AdamW", {"adamw", 0.001, 0.004}) {
  if (!weight_decay()) fail("weight_decay must be a number, got null");
}

KILN_REGISTER_OPTIMIZER("kiln>Adam", Adam);
KILN_REGISTER_OPTIMIZER("kiln>AdamW", AdamW);

}  // namespace kiln
