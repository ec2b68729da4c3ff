#include <kiln/optim/optimizer.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- Adagrad -----------------------------------------------------------------------------------------------------

Adagrad::Adagrad(const Config& config) : Optimizer(config, "Adagrad", {"adagrad", 0.001, std::nullopt}) {
  ConfigReader args = config_reader(config);
  initial_accumulator_value_ = args.number("initial_accumulator_value", 0.1);
  epsilon_ = args.number("epsilon", 1e-7);
  args.finish();
  if (!(initial_accumulator_value_ >= 0.0))
    fail("initial_accumulator_value must be >= 0, got " + std::to_string(initial_accumulator_value_));
}

Config Adagrad::get_config() const {
  return Optimizer::get_config().set("initial_accumulator_value", initial_accumulator_value_).set("epsilon", epsilon_);
}

Tensor Adagrad::update_step(WeightUpdate& update) {
  const Tensor& grad = update.grad();
  const Tensor accumulator = update.slot("accumulator") + ops::square(grad);
  update.assign("accumulator", accumulator);
  return update.weight() - ops::div(ops::mul(update.learning_rate(), grad), ops::sqrt(accumulator + epsilon_));
}

KILN_REGISTER_OPTIMIZER("kiln>Adagrad", Adagrad);

}  // namespace kiln
