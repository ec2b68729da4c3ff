// Every optimizer against Keras 3's update rules written out by hand, step by step, in double.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/optim/schedules.hpp>

using namespace kiln;

namespace {

using Values = std::vector<std::vector<double>>;  // one flat vector per weight

// The problem every test trains: loss = ½ Σ c ⊙ w² over two weights, so the gradient is c ⊙ w. It changes
// every step (a linear loss would not), and each element has its own scale.
const Values initial_weights = {{0.5, -1.5, 2.0, -0.25}, {1.0, -3.0, 0.75}};
const Values coefficients = {{1.0, 2.0, 0.5, 4.0}, {3.0, 0.25, 1.5}};
const std::vector<Shape> weight_shapes = {Shape{2, 2}, Shape{3}};
const std::vector<std::string> weight_paths = {"dense/kernel", "dense/bias"};

Values gradient_of(const Values& w) {
  Values g = w;
  for (std::size_t i = 0; i < w.size(); ++i)
    for (std::size_t j = 0; j < w[i].size(); ++j) g[i][j] = coefficients[i][j] * w[i][j];
  return g;
}

Values zeros_like(const Values& values, double fill = 0.0) {
  Values result = values;
  for (auto& row : result) std::fill(row.begin(), row.end(), fill);
  return result;
}

Array to_array(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return Array::from_vector(values, shape).astype(dtype);
}

// Builds the loss, its gradients and the optimizer's update in one graph, and runs steps as fit() will.
class Trainer {
 public:
  explicit Trainer(Optimizer& optimizer, DType dtype = DType::float64, const Values& start = initial_weights)
      : optimizer_(optimizer) {
    Tensor loss;
    for (std::size_t i = 0; i < start.size(); ++i) {
      weights_.push_back(graph_.variable(weight_paths[i], to_array(start[i], weight_shapes[i], dtype)));
      const Tensor c = graph_.constant(to_array(coefficients[i], weight_shapes[i], dtype), "c");
      const Tensor term = ops::sum(ops::mul(c, ops::square(weights_[i])));
      loss = loss.valid() ? loss + term : term;
    }
    loss = loss * 0.5;
    grads_ = gradients(loss, weights_);
    updates_ = optimizer.build_updates(graph_, weights_, grads_, weight_paths);
    program_ = std::make_unique<Program>(graph_, std::vector<Tensor>{loss}, updates_);
  }

  Values step() {
    optimizer_.prepare_step();
    program_->run();
    optimizer_.finish_step();
    return weights();
  }

  Values weights() const {
    Values result;
    for (const Tensor& weight : weights_) result.push_back(graph_.value(weight).to_vector<double>());
    return result;
  }

  Graph& graph() { return graph_; }
  const std::vector<Tensor>& weight_tensors() const { return weights_; }
  const std::vector<Tensor>& grads() const { return grads_; }
  const std::vector<Update>& updates() const { return updates_; }

 private:
  Optimizer& optimizer_;
  Graph graph_;
  std::vector<Tensor> weights_, grads_;
  std::vector<Update> updates_;
  std::unique_ptr<Program> program_;
};

// ---- the reference: Keras's apply(), one step at a time on the host -----------------------------------------------

struct HostOptions {
  double clipnorm = 0.0, clipvalue = 0.0, global_clipnorm = 0.0;
  bool decay = false;
  double weight_decay = 0.0;
};

double norm_of(const std::vector<double>& values) {
  double squared = 0.0;
  for (double v : values) squared += v * v;
  return std::sqrt(squared);
}

Values clipped(Values g, const HostOptions& options) {
  if (options.clipnorm > 0.0) {
    for (auto& row : g) {
      const double norm = norm_of(row);
      for (double& v : row) v = v * options.clipnorm / std::max(norm, options.clipnorm);
    }
  } else if (options.global_clipnorm > 0.0) {
    double squared = 0.0;
    for (const auto& row : g) squared += norm_of(row) * norm_of(row);
    const double norm = std::sqrt(squared);
    const double scale = options.global_clipnorm * std::min(1.0 / norm, 1.0 / options.global_clipnorm);
    for (auto& row : g)
      for (double& v : row) v *= scale;
  } else if (options.clipvalue > 0.0) {
    for (auto& row : g)
      for (double& v : row) v = std::min(std::max(v, -options.clipvalue), options.clipvalue);
  }
  return g;
}

// The optimizer's own rule: (weights, clipped gradients, learning rate, t = iterations + 1).
using HostRule = std::function<void(Values&, const Values&, double, std::int64_t)>;
using LearningRateAt = std::function<double(std::int64_t)>;  // of the steps done

std::vector<Values> reference(const HostRule& rule, int steps, const LearningRateAt& learning_rate,
                              const HostOptions& options = {}) {
  Values w = initial_weights;
  std::vector<Values> history;
  for (std::int64_t done = 0; done < steps; ++done) {
    const Values g = clipped(gradient_of(w), options);
    const double lr = learning_rate(done);
    if (options.decay)
      for (auto& row : w)
        for (double& v : row) v = v - v * options.weight_decay * lr;
    rule(w, g, lr, done + 1);
    history.push_back(w);
  }
  return history;
}

LearningRateAt constant(double lr) {
  return [lr](std::int64_t) { return lr; };
}

HostRule sgd_rule(double momentum, bool nesterov) {
  auto m = std::make_shared<Values>(zeros_like(initial_weights));
  return [=](Values& w, const Values& g, double lr, std::int64_t) {
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w[i].size(); ++j) {
        if (momentum == 0.0) {
          w[i][j] -= g[i][j] * lr;
          continue;
        }
        double& velocity = (*m)[i][j];
        velocity = velocity * momentum - g[i][j] * lr;
        w[i][j] += nesterov ? velocity * momentum - g[i][j] * lr : velocity;
      }
  };
}

HostRule adam_rule(double beta_1, double beta_2, double epsilon, bool amsgrad) {
  auto m = std::make_shared<Values>(zeros_like(initial_weights));
  auto v = std::make_shared<Values>(zeros_like(initial_weights));
  auto v_hat = std::make_shared<Values>(zeros_like(initial_weights));
  return [=](Values& w, const Values& g, double lr, std::int64_t t) {
    const double alpha =
        lr * std::sqrt(1 - std::pow(beta_2, static_cast<double>(t))) / (1 - std::pow(beta_1, static_cast<double>(t)));
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w[i].size(); ++j) {
        double& mean = (*m)[i][j];
        double& second = (*v)[i][j];
        mean += (g[i][j] - mean) * (1 - beta_1);
        second += (g[i][j] * g[i][j] - second) * (1 - beta_2);
        double denominator = second;
        if (amsgrad) denominator = (*v_hat)[i][j] = std::max((*v_hat)[i][j], second);
        w[i][j] -= mean * alpha / (std::sqrt(denominator) + epsilon);
      }
  };
}

HostRule rmsprop_rule(double rho, double momentum, double epsilon, bool centered) {
  auto v = std::make_shared<Values>(zeros_like(initial_weights));
  auto mom = std::make_shared<Values>(zeros_like(initial_weights));
  auto average = std::make_shared<Values>(zeros_like(initial_weights));
  return [=](Values& w, const Values& g, double lr, std::int64_t) {
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w[i].size(); ++j) {
        double& velocity = (*v)[i][j];
        velocity = rho * velocity + (1 - rho) * g[i][j] * g[i][j];
        double denominator = velocity + epsilon;
        if (centered) {
          double& average_gradient = (*average)[i][j];
          average_gradient = rho * average_gradient + (1 - rho) * g[i][j];
          denominator = velocity - average_gradient * average_gradient + epsilon;
        }
        const double increment = lr * g[i][j] / std::sqrt(denominator);
        if (momentum > 0.0) {
          double& m = (*mom)[i][j];
          m = momentum * m + increment;
          w[i][j] -= m;
        } else {
          w[i][j] -= increment;
        }
      }
  };
}

HostRule adagrad_rule(double initial_accumulator_value, double epsilon) {
  auto accumulator = std::make_shared<Values>(zeros_like(initial_weights, initial_accumulator_value));
  return [=](Values& w, const Values& g, double lr, std::int64_t) {
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w[i].size(); ++j) {
        double& acc = (*accumulator)[i][j];
        acc += g[i][j] * g[i][j];
        w[i][j] -= lr * g[i][j] / std::sqrt(acc + epsilon);
      }
  };
}

void require_close(const Values& actual, const Values& expected, double tolerance = 1e-12) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    REQUIRE(actual[i].size() == expected[i].size());
    for (std::size_t j = 0; j < actual[i].size(); ++j) {
      INFO("weight " << i << " element " << j << ": " << actual[i][j] << " vs " << expected[i][j]);
      CHECK(std::abs(actual[i][j] - expected[i][j]) <= tolerance * std::max(1.0, std::abs(expected[i][j])));
    }
  }
}

// Runs `steps` steps of `optimizer` and compares every step with the reference.
void check_against(Optimizer& optimizer, const std::vector<Values>& expected, DType dtype = DType::float64,
                   double tolerance = 1e-12) {
  Trainer trainer(optimizer, dtype);
  for (std::size_t step = 0; step < expected.size(); ++step) {
    INFO("step " << step + 1);
    require_close(trainer.step(), expected[step], tolerance);
  }
  // The weights really moved, so agreement is not the trivial kind.
  CHECK(std::abs(expected.back()[0][1] - initial_weights[0][1]) > 1e-3);
  CHECK(optimizer.iterations() == static_cast<std::int64_t>(expected.size()));
}

constexpr int num_steps = 4;

}  // namespace

// ---- update rules ---------------------------------------------------------------------------------------------------

TEST_CASE("SGD without momentum follows w -= lr g", "[optim][optimizer][sgd]") {
  SGD sgd(Config{{"learning_rate", 0.1}});
  check_against(sgd, reference(sgd_rule(0.0, false), num_steps, constant(0.1)));
  CHECK(sgd.variables().size() == 2);  // iterations and learning_rate: no slots without momentum
}

TEST_CASE("SGD with momentum keeps a velocity of lr-scaled gradients", "[optim][optimizer][sgd]") {
  SGD sgd(Config{{"learning_rate", 0.1}, {"momentum", 0.9}});
  check_against(sgd, reference(sgd_rule(0.9, false), num_steps, constant(0.1)));
}

TEST_CASE("SGD with nesterov momentum looks ahead by the new velocity", "[optim][optimizer][sgd]") {
  SGD sgd(Config{{"learning_rate", 0.05}, {"momentum", 0.8}, {"nesterov", true}});
  check_against(sgd, reference(sgd_rule(0.8, true), num_steps, constant(0.05)));
}

TEST_CASE("Adam matches Keras's update with epsilon on the uncorrected root", "[optim][optimizer][adam]") {
  Adam adam(Config{{"learning_rate", 0.1}});
  check_against(adam, reference(adam_rule(0.9, 0.999, 1e-7, false), num_steps, constant(0.1)));
}

TEST_CASE("Adam with amsgrad divides by the running maximum of v", "[optim][optimizer][adam]") {
  // A fast-forgetting beta_2 and a large step make v fall, so the maximum differs from v.
  Adam adam(Config{{"learning_rate", 0.4}, {"beta_1", 0.5}, {"beta_2", 0.3}, {"epsilon", 1e-3}, {"amsgrad", true}});
  check_against(adam, reference(adam_rule(0.5, 0.3, 1e-3, true), num_steps, constant(0.4)));
  bool differs = false;
  for (const Weight& slot : adam.variables())
    if (slot.path.rfind("velocity_hat/", 0) == 0)
      for (const Weight& plain : adam.variables())
        if (plain.path == "velocity/" + slot.path.substr(13))
          differs = differs || !slot.value.bitwise_equal(plain.value);
  CHECK(differs);
}

TEST_CASE("AdamW decays the weights by w wd lr before the Adam step", "[optim][optimizer][adam]") {
  AdamW adamw(Config{{"learning_rate", 0.1}, {"weight_decay", 0.2}});
  HostOptions options;
  options.decay = true;
  options.weight_decay = 0.2;
  check_against(adamw, reference(adam_rule(0.9, 0.999, 1e-7, false), num_steps, constant(0.1), options));
  CHECK(AdamW().weight_decay() == Approx(0.004));
}

TEST_CASE("RMSprop keeps epsilon inside the square root", "[optim][optimizer][rmsprop]") {
  RMSprop rmsprop(Config{{"learning_rate", 0.05}});
  check_against(rmsprop, reference(rmsprop_rule(0.9, 0.0, 1e-7, false), num_steps, constant(0.05)));
}

TEST_CASE("RMSprop centered with momentum subtracts the squared mean gradient", "[optim][optimizer][rmsprop]") {
  RMSprop rmsprop(Config{{"learning_rate", 0.02}, {"rho", 0.8}, {"momentum", 0.5}, {"centered", true}});
  check_against(rmsprop, reference(rmsprop_rule(0.8, 0.5, 1e-7, true), num_steps, constant(0.02)));
  std::vector<std::string> paths;
  for (const Weight& variable : rmsprop.variables()) paths.push_back(variable.path);
  CHECK(paths == std::vector<std::string>{"iterations", "learning_rate", "velocity/dense/kernel",
                                          "momentum/dense/kernel", "average_gradient/dense/kernel",
                                          "velocity/dense/bias", "momentum/dense/bias", "average_gradient/dense/bias"});
}

TEST_CASE("Adagrad accumulates squared gradients from its initial value", "[optim][optimizer][adagrad]") {
  Adagrad adagrad(Config{{"learning_rate", 0.3}, {"initial_accumulator_value", 0.2}});
  check_against(adagrad, reference(adagrad_rule(0.2, 1e-7), num_steps, constant(0.3)));
}

// ---- clipping, weight decay, learning rates -------------------------------------------------------------------------

TEST_CASE("clipnorm rescales each gradient whose norm exceeds it", "[optim][optimizer][clip]") {
  // The first gradients' norms are √11.25 ≈ 3.35 (kernel) and √10.83 ≈ 3.29 (bias): only the kernel's is
  // clipped at 3.32.
  SGD sgd(Config{{"learning_rate", 0.1}, {"momentum", 0.5}, {"clipnorm", 3.32}});
  HostOptions options;
  options.clipnorm = 3.32;
  const std::vector<Values> expected = reference(sgd_rule(0.5, false), num_steps, constant(0.1), options);
  check_against(sgd, expected);
  const std::vector<Values> unclipped = reference(sgd_rule(0.5, false), 1, constant(0.1));
  CHECK(std::abs(expected[0][0][1] - unclipped[0][0][1]) > 1e-3);   // the kernel was clipped
  CHECK(std::abs(expected[0][1][1] - unclipped[0][1][1]) < 1e-15);  // the bias was not
}

TEST_CASE("clipvalue clips every gradient element to the range", "[optim][optimizer][clip]") {
  Adam adam(Config{{"learning_rate", 0.1}, {"clipvalue", 0.6}});
  HostOptions options;
  options.clipvalue = 0.6;
  check_against(adam, reference(adam_rule(0.9, 0.999, 1e-7, false), num_steps, constant(0.1), options));
}

TEST_CASE("global_clipnorm scales all gradients by one factor", "[optim][optimizer][clip]") {
  RMSprop rmsprop(Config{{"learning_rate", 0.05}, {"global_clipnorm", 2.0}});
  HostOptions options;
  options.global_clipnorm = 2.0;
  check_against(rmsprop, reference(rmsprop_rule(0.9, 0.0, 1e-7, false), num_steps, constant(0.05), options));
}

TEST_CASE("global_clipnorm leaves gradients within the norm unchanged", "[optim][optimizer][clip]") {
  SGD clipped_sgd(Config{{"learning_rate", 0.1}, {"global_clipnorm", 100.0}});
  check_against(clipped_sgd, reference(sgd_rule(0.0, false), num_steps, constant(0.1)));
}

TEST_CASE("weight_decay on SGD is decoupled and uses the step's learning rate", "[optim][optimizer][decay]") {
  SGD sgd(Config{{"learning_rate", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.5}});
  HostOptions options;
  options.decay = true;
  options.weight_decay = 0.5;
  check_against(sgd, reference(sgd_rule(0.9, false), num_steps, constant(0.1), options));
}

TEST_CASE("a schedule drives the learning rate at the steps done", "[optim][optimizer][schedule]") {
  const ExponentialDecay decay(0.2, 2, 0.5);
  Adam adam(Config{{"learning_rate", decay.serialize()}});
  const std::vector<Values> expected =
      reference(adam_rule(0.9, 0.999, 1e-7, false), num_steps, [&](std::int64_t done) { return decay(done); });
  Trainer trainer(adam);
  for (std::size_t step = 0; step < expected.size(); ++step) {
    CHECK(adam.current_learning_rate() == decay(static_cast<std::int64_t>(step)));
    require_close(trainer.step(), expected[step]);
  }
  CHECK(adam.current_learning_rate() == Approx(0.05));
  CHECK_THROWS_AS(adam.set_learning_rate(0.1), ValueError);
  CHECK(adam.get_config().at("learning_rate") == decay.serialize());
}

TEST_CASE("set_learning_rate changes the next step without rebuilding", "[optim][optimizer][schedule]") {
  SGD sgd(Config{{"learning_rate", 0.1}});
  const std::vector<Values> expected =
      reference(sgd_rule(0.0, false), num_steps, [](std::int64_t done) { return done < 2 ? 0.1 : 0.025; });
  Trainer trainer(sgd);
  for (std::size_t step = 0; step < expected.size(); ++step) {
    if (step == 2) sgd.set_learning_rate(0.025);
    require_close(trainer.step(), expected[step]);
  }
  CHECK(sgd.current_learning_rate() == 0.025);
  CHECK(sgd.get_config().get_double("learning_rate") == 0.025);
}

TEST_CASE("float32 weights get float32 step scalars and the same trajectory", "[optim][optimizer][adam]") {
  Adam adam(Config{{"learning_rate", 0.1}, {"weight_decay", 0.1}});
  HostOptions options;
  options.decay = true;
  options.weight_decay = 0.1;
  Trainer trainer(adam, DType::float32);
  const std::vector<Values> expected = reference(adam_rule(0.9, 0.999, 1e-7, false), num_steps, constant(0.1), options);
  for (const Values& step : expected) require_close(trainer.step(), step, 1e-5);
  for (const Weight& variable : adam.variables())
    if (variable.path != "iterations" && variable.path != "learning_rate")
      CHECK(variable.value.dtype() == DType::float32);
}

// ---- building -------------------------------------------------------------------------------------------------------

TEST_CASE("building twice in one graph reuses the slots and scalars", "[optim][optimizer]") {
  Adam adam;
  Trainer trainer(adam);
  const std::size_t variables_before = trainer.graph().variables().size();
  const std::vector<Update> again =
      adam.build_updates(trainer.graph(), trainer.weight_tensors(), trainer.grads(), weight_paths);
  CHECK(trainer.graph().variables().size() == variables_before);
  REQUIRE(again.size() == trainer.updates().size());
  for (std::size_t i = 0; i < again.size(); ++i) CHECK(again[i].variable == trainer.updates()[i].variable);
  // Adam: per weight the weight itself, m and v.
  CHECK(again.size() == 6);
  CHECK(adam.variables().size() == 2 + 4);
}

TEST_CASE("an empty gradient skips its weight, as Keras skips None", "[optim][optimizer]") {
  SGD sgd(Config{{"momentum", 0.5}});
  Graph graph;
  const Tensor used = graph.variable("used", Array::full({2}, 1.0, DType::float64));
  const Tensor unused = graph.variable("unused", Array::full({2}, 1.0, DType::float64));
  const Tensor loss = ops::sum(ops::square(used));
  GradientOptions allow;
  allow.allow_unused = true;
  const std::vector<Tensor> grads = gradients(loss, {used, unused}, allow);
  REQUIRE_FALSE(grads[1].valid());
  const std::vector<Update> updates = sgd.build_updates(graph, {used, unused}, grads, {"used", "unused"});
  CHECK(updates.size() == 2);  // the used weight and its momentum
  for (const Update& update : updates) CHECK(update.variable != unused);
  CHECK_THROWS_WITH(sgd.build_updates(graph, {unused}, {Tensor()}, {"unused"}),
                    Catch::Contains("no gradients provided"));
}

TEST_CASE("build_updates rejects what cannot be an update, naming the optimizer", "[optim][optimizer][errors]") {
  Adam adam;
  Graph graph;
  const Tensor w = graph.variable("w", Array::full({2, 2}, 1.0, DType::float64));
  const Tensor x = graph.placeholder({2, 2}, DType::float64, "x");
  const Tensor grad = ops::sum(ops::square(w));
  CHECK_THROWS_AS(adam.build_updates(graph, {w}, {}, {"w"}), ValueError);
  CHECK_THROWS_WITH(adam.build_updates(graph, {x}, {x}, {"x"}),
                    Catch::Contains("Adam 'adam'") && Catch::Contains("not a variable"));
  CHECK_THROWS_AS(adam.build_updates(graph, {w}, {grad}, {"w"}), ShapeError);
  CHECK_THROWS_WITH(adam.build_updates(graph, {w}, {grad}, {"w"}), Catch::Contains("(2, 2)") && Catch::Contains("()"));
  CHECK_THROWS_WITH(adam.build_updates(graph, {w, w}, {w * 2.0, w * 2.0}, {"w", "v"}), Catch::Contains("given twice"));
  const Tensor w32 = graph.variable("w32", Array::full({2, 2}, 1.0, DType::float32));
  CHECK_THROWS_AS(adam.build_updates(graph, {w32}, {w * 2.0}, {"w32"}), DTypeError);
}

// ---- state
// ------------------------------------------------------------------------------------------------------------

TEST_CASE("restoring variables resumes a run bit for bit", "[optim][optimizer][state]") {
  const Config config = {{"learning_rate", 0.1}, {"amsgrad", true}, {"clipnorm", 3.0}};
  Adam first(config);
  Trainer uninterrupted(first);
  uninterrupted.step();
  uninterrupted.step();
  const Values weights_at_checkpoint = uninterrupted.weights();
  std::vector<Weight> saved;
  for (const Weight& variable : first.variables()) saved.push_back({variable.path, variable.value.copy(), false});
  uninterrupted.step();
  const Values expected = uninterrupted.step();

  SECTION("restored before the graph is built") {
    Adam second(config);
    second.set_variables(saved);
    CHECK(second.iterations() == 2);
    Trainer resumed(second, DType::float64, weights_at_checkpoint);
    resumed.step();
    CHECK(resumed.step() == expected);
  }
  SECTION("restored into a built graph") {
    Adam second(config);
    Trainer resumed(second, DType::float64, weights_at_checkpoint);
    second.set_variables(saved);
    resumed.step();
    CHECK(resumed.step() == expected);
  }
}

TEST_CASE("set_variables rejects unknown, missing and misshapen state", "[optim][optimizer][state][errors]") {
  Adam adam;
  adam.build({{"dense/kernel", Array({2, 2}, DType::float64), true}});
  std::vector<Weight> saved = adam.variables();
  REQUIRE(saved.size() == 4);
  CHECK(saved[2].path == "momentum/dense/kernel");
  CHECK(saved[3].path == "velocity/dense/kernel");

  std::vector<Weight> missing(saved.begin(), saved.end() - 1);
  CHECK_THROWS_WITH(adam.set_variables(missing), Catch::Contains("'velocity/dense/kernel' was not given"));
  std::vector<Weight> unknown = saved;
  unknown.push_back({"velocity_hat/dense/kernel", Array({2, 2}, DType::float64), false});
  CHECK_THROWS_WITH(adam.set_variables(unknown), Catch::Contains("not one of its variables"));
  std::vector<Weight> misshapen = saved;
  misshapen[2].value = Array({3}, DType::float64);
  CHECK_THROWS_AS(adam.set_variables(misshapen), ShapeError);
  std::vector<Weight> counted = saved;
  counted[0].value = Array::full({}, 7.0, DType::float64);
  adam.set_variables(counted);
  CHECK(adam.iterations() == 7);
  CHECK_THROWS_AS(adam.set_iterations(-1), ValueError);
}

// ---- configs and the registry
// ----------------------------------------------------------------------------------------

TEST_CASE("optimizers take Keras's defaults and names", "[optim][optimizer][config]") {
  const Config sgd = SGD().get_config();
  CHECK(sgd.get_string("name") == "SGD");
  CHECK(sgd.get_double("learning_rate") == 0.01);
  CHECK(sgd.get_double("momentum") == 0.0);
  CHECK_FALSE(sgd.get_bool("nesterov"));
  const Config adam = Adam().get_config();
  CHECK(adam.get_string("name") == "adam");
  CHECK(adam.get_double("learning_rate") == 0.001);
  CHECK(adam.get_double("beta_1") == 0.9);
  CHECK(adam.get_double("beta_2") == 0.999);
  CHECK(adam.get_double("epsilon") == 1e-7);
  CHECK(adam.at("weight_decay").is_null());
  CHECK(adam.keys() == std::vector<std::string>{"name", "learning_rate", "weight_decay", "clipnorm", "global_clipnorm",
                                                "clipvalue", "use_ema", "ema_momentum", "ema_overwrite_frequency",
                                                "loss_scale_factor", "gradient_accumulation_steps", "beta_1", "beta_2",
                                                "epsilon", "amsgrad"});
  CHECK(AdamW().get_config().get_double("weight_decay") == 0.004);
  CHECK(AdamW().get_config().get_string("name") == "adamw");
  const Config rmsprop = RMSprop().get_config();
  CHECK(rmsprop.get_double("rho") == 0.9);
  CHECK(rmsprop.get_double("epsilon") == 1e-7);
  CHECK_FALSE(rmsprop.get_bool("centered"));
  const Config adagrad = Adagrad().get_config();
  CHECK(adagrad.get_double("initial_accumulator_value") == 0.1);
  CHECK(adagrad.get_string("name") == "adagrad");
}

TEST_CASE("optimizer configs round-trip through serialize and from_config", "[optim][optimizer][config]") {
  const std::vector<OptimizerPtr> optimizers = {
      std::make_shared<SGD>(Config{{"learning_rate", 0.2}, {"momentum", 0.3}, {"nesterov", true}, {"clipvalue", 1.0}}),
      std::make_shared<Adam>(Config{{"amsgrad", true}, {"global_clipnorm", 2.0}, {"name", "outer"}}),
      std::make_shared<AdamW>(Config{{"weight_decay", 0.01}, {"beta_2", 0.99}}),
      std::make_shared<RMSprop>(Config{{"centered", true}, {"momentum", 0.1}, {"clipnorm", 1.0}}),
      std::make_shared<Adagrad>(Config{{"learning_rate", CosineDecay(0.1, 100, 0.1, "cos", 0.5, 10).serialize()}}),
  };
  for (const OptimizerPtr& optimizer : optimizers) {
    INFO(optimizer->describe());
    const Config serialized = optimizer->serialize();
    CHECK(serialized.get_string("registered_name") == "kiln>" + optimizer->class_name());
    const OptimizerPtr copy = Optimizer::from_config(serialized);
    CHECK(copy->class_name() == optimizer->class_name());
    CHECK(copy->get_config() == optimizer->get_config());
  }
  CHECK(optimizers[4]->schedule() != nullptr);
  CHECK(optimizers[4]->current_learning_rate() == Approx(0.1));
}

TEST_CASE("optimizers are found by Keras's strings", "[optim][optimizer][config]") {
  for (const std::string name :
       {"sgd", "SGD", "adam", "Adam", "kiln>Adam", "adamw", "AdamW", "rmsprop", "RMSprop", "adagrad", "Adagrad"})
    CHECK(create_optimizer(name) != nullptr);
  CHECK(create_optimizer("rmsprop")->class_name() == "RMSprop");
  CHECK(Optimizer::from_config(Config("adamw"))->class_name() == "AdamW");
  CHECK(Optimizer::from_config(Config{{"class_name", "Adam"}, {"config", {{"learning_rate", 0.5}}}})
            ->current_learning_rate() == 0.5);
  CHECK_THROWS_AS(create_optimizer("adma"), ConfigError);
  CHECK_THROWS_WITH(create_optimizer("adma"), Catch::Contains("unknown optimizer 'adma'") && Catch::Contains("'adam'"));
  CHECK_THROWS_WITH(create_optimizer("RMSProp"), Catch::Contains("RMSprop"));
  CHECK_NOTHROW(optimizer_registry().check());
}

TEST_CASE("bad optimizer arguments are ConfigErrors naming the optimizer", "[optim][optimizer][config][errors]") {
  CHECK_THROWS_WITH(Adam(Config{{"beta1", 0.8}}), Catch::Contains("Adam") && Catch::Contains("'beta_1'"));
  CHECK_THROWS_WITH(SGD(Config{{"clipnorm", 1.0}, {"clipvalue", 1.0}}), Catch::Contains("only one of clipnorm"));
  CHECK_THROWS_WITH(AdamW(Config{{"weight_decay", nullptr}}), Catch::Contains("AdamW 'adamw'"));
  CHECK_THROWS_AS(SGD(Config{{"momentum", 1.5}}), ConfigError);
  CHECK_THROWS_AS(Adam(Config{{"use_ema", true}}), ConfigError);
  CHECK_THROWS_AS(Adam(Config{{"gradient_accumulation_steps", 4}}), ConfigError);
  CHECK_THROWS_AS(Adam(Config{{"learning_rate", "fast"}}), ConfigError);
  CHECK_THROWS_AS(Adam(Config{{"learning_rate", Config{{"class_name", "ExponentialDecy"}}}}), ConfigError);
  CHECK_NOTHROW(Adam(Config{{"ema_momentum", 0.99}, {"ema_overwrite_frequency", nullptr}, {"weight_decay", nullptr}}));
}

TEST_CASE("a Keras-saved Adam config loads", "[optim][optimizer][config]") {
  // compile_config.optimizer of a model saved by Keras 3 (keras3.md, section 2.4).
  const Config saved = {{"module", "keras.optimizers"},
                        {"class_name", "Adam"},
                        {"config",
                         {{"name", "adam"},
                          {"learning_rate", 0.0010000000474974513},
                          {"weight_decay", nullptr},
                          {"clipnorm", nullptr},
                          {"global_clipnorm", nullptr},
                          {"clipvalue", nullptr},
                          {"use_ema", false},
                          {"ema_momentum", 0.99},
                          {"ema_overwrite_frequency", nullptr},
                          {"loss_scale_factor", nullptr},
                          {"gradient_accumulation_steps", nullptr},
                          {"beta_1", 0.9},
                          {"beta_2", 0.999},
                          {"epsilon", 1e-07},
                          {"amsgrad", false}}},
                        {"registered_name", nullptr}};
  const OptimizerPtr adam = Optimizer::from_config(saved);
  CHECK(adam->class_name() == "Adam");
  CHECK(adam->current_learning_rate() == 0.0010000000474974513);
  CHECK(adam->get_config() == saved.at("config"));
}

namespace {
// An optimizer written outside kiln: sign descent with a decaying trace of the sign, to use a slot.
class SignDescent : public Optimizer {
 public:
  explicit SignDescent(const Config& config) : Optimizer(config, "SignDescent", {"sign_descent", 0.1}) {
    config_reader(config).finish();
  }

 protected:
  std::vector<std::string> slot_names() const override { return {"trace"}; }
  Tensor update_step(WeightUpdate& update) override {
    const Tensor sign = ops::tanh(update.grad() * 1e6);
    update.assign("trace", update.slot("trace") * 0.5 + sign);
    return update.weight() - ops::mul(sign, update.learning_rate());
  }
};
KILN_REGISTER_OPTIMIZER("test>SignDescent", SignDescent);
}  // namespace

TEST_CASE("an optimizer registered outside kiln builds, steps and serializes", "[optim][optimizer][config]") {
  // Every |w| exceeds two steps of 0.1, so each weight moves by exactly 0.2 toward zero.
  const OptimizerPtr optimizer = create_optimizer("SignDescent", Config{{"learning_rate", 0.1}});
  CHECK(optimizer->serialize().get_string("registered_name") == "test>SignDescent");
  CHECK(Optimizer::from_config(optimizer->serialize())->current_learning_rate() == 0.1);
  Trainer trainer(*optimizer);
  trainer.step();
  const Values after = trainer.step();
  for (std::size_t i = 0; i < after.size(); ++i)
    for (std::size_t j = 0; j < after[i].size(); ++j) {
      const double sign = initial_weights[i][j] > 0 ? 1.0 : -1.0;
      CHECK(after[i][j] == Approx(initial_weights[i][j] - 2 * 0.1 * sign).epsilon(1e-12));
    }
  CHECK(optimizer->variables().back().path == "trace/dense/bias");
  CHECK(optimizer->variables().back().value.flat(0) == Approx(1.5));
}
