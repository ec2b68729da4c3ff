#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace kiln;

namespace {

using UnaryOp = std::function<Tensor(const Tensor&)>;
using Reference = std::function<double(double)>;

// One op under test: how to build it, where its inputs may be drawn from, and a plain-loop reference.
struct UnaryCase {
  std::string label;
  UnaryOp op;
  Reference reference;
  double low = -2.0;
  double high = 2.0;
  std::vector<double> kinks;
};

const double pi = std::acos(-1.0);

double sigmoid_reference(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_tanh_reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
double gelu_erf_reference(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double softplus_reference(double x) { return std::log1p(std::exp(x)); }

std::vector<UnaryCase> unary_cases() {
  std::vector<UnaryCase> cases;
  auto add = [&](std::string label, UnaryOp op, Reference reference, double low = -2.0, double high = 2.0,
                 std::vector<double> kinks = {}) {
    cases.push_back(UnaryCase{std::move(label), std::move(op), std::move(reference), low, high, std::move(kinks)});
  };
  const std::vector<double> at_zero = {0.0};
  add(
      "neg", [](const Tensor& x) { return ops::neg(x); }, [](double x) { return -x; });
  add(
      "exp", [](const Tensor& x) { return ops::exp(x); }, [](double x) { return std::exp(x); });
  add(
      "log", [](const Tensor& x) { return ops::log(x); }, [](double x) { return std::log(x); }, 0.2, 3.0);
  add(
      "sqrt", [](const Tensor& x) { return ops::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 3.0);
  add(
      "rsqrt", [](const Tensor& x) { return ops::rsqrt(x); }, [](double x) { return 1.0 / std::sqrt(x); }, 0.2, 3.0);
  add(
      "square", [](const Tensor& x) { return ops::square(x); }, [](double x) { return x * x; });
  add(
      "abs", [](const Tensor& x) { return ops::abs(x); }, [](double x) { return std::abs(x); }, -2.0, 2.0, at_zero);
  add(
      "sin", [](const Tensor& x) { return ops::sin(x); }, [](double x) { return std::sin(x); }, -4.0, 4.0);
  add(
      "cos", [](const Tensor& x) { return ops::cos(x); }, [](double x) { return std::cos(x); }, -4.0, 4.0);
  add(
      "tanh", [](const Tensor& x) { return ops::tanh(x); }, [](double x) { return std::tanh(x); });
  add(
      "sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, sigmoid_reference, -4.0, 4.0);
  add(
      "relu", [](const Tensor& x) { return ops::relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -2.0, 2.0,
      at_zero);
  add(
      "leaky_relu slope=0.3", [](const Tensor& x) { return ops::leaky_relu(x, 0.3); },
      [](double x) { return x > 0 ? x : 0.3 * x; }, -2.0, 2.0, at_zero);
  add(
      "leaky_relu slope=-0.5", [](const Tensor& x) { return ops::leaky_relu(x, -0.5); },
      [](double x) { return x > 0 ? x : -0.5 * x; }, -2.0, 2.0, at_zero);
  add(
      "elu alpha=1", [](const Tensor& x) { return ops::elu(x); }, [](double x) { return x > 0 ? x : std::expm1(x); },
      -3.0, 2.0, at_zero);
  add(
      "elu alpha=0.5", [](const Tensor& x) { return ops::elu(x, 0.5); },
      [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); }, -3.0, 2.0, at_zero);
  add(
      "gelu approximate", [](const Tensor& x) { return ops::gelu(x, true); }, gelu_tanh_reference, -4.0, 4.0);
  add(
      "gelu erf", [](const Tensor& x) { return ops::gelu(x, false); }, gelu_erf_reference, -4.0, 4.0);
  add(
      "swish", [](const Tensor& x) { return ops::swish(x); }, [](double x) { return x * sigmoid_reference(x); }, -5.0,
      5.0);
  add(
      "silu", [](const Tensor& x) { return ops::silu(x); }, [](double x) { return x * sigmoid_reference(x); });
  add(
      "softplus", [](const Tensor& x) { return ops::softplus(x); }, softplus_reference, -5.0, 5.0);
  add(
      "scale factor=2.5", [](const Tensor& x) { return ops::scale(x, 2.5); }, [](double x) { return 2.5 * x; });
  add(
      "add_scalar value=-0.75", [](const Tensor& x) { return ops::add_scalar(x, -0.75); },
      [](double x) { return x - 0.75; });
  add(
      "pow_scalar exponent=3", [](const Tensor& x) { return ops::pow_scalar(x, 3.0); },
      [](double x) { return x * x * x; });
  add(
      "pow_scalar exponent=2", [](const Tensor& x) { return ops::pow_scalar(x, 2.0); }, [](double x) { return x * x; });
  add(
      "pow_scalar exponent=2.5", [](const Tensor& x) { return ops::pow_scalar(x, 2.5); },
      [](double x) { return std::pow(x, 2.5); }, 0.2, 2.0);
  add(
      "pow_scalar exponent=-1.5", [](const Tensor& x) { return ops::pow_scalar(x, -1.5); },
      [](double x) { return std::pow(x, -1.5); }, 0.5, 2.0);
  add(
      "pow_scalar exponent=1", [](const Tensor& x) { return ops::pow_scalar(x, 1.0); }, [](double x) { return x; });
  add(
      "pow_scalar exponent=0", [](const Tensor& x) { return ops::pow_scalar(x, 0.0); }, [](double) { return 1.0; });
  // Keras 3's other activations (keras/src/activations/activations.py), from their definitions.
  add(
      "relu6", [](const Tensor& x) { return ops::relu6(x); }, [](double x) { return std::min(std::max(x, 0.0), 6.0); },
      -2.0, 8.0, {0.0, 6.0});
  add(
      "selu", [](const Tensor& x) { return ops::selu(x); },
      [](double x) { return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x)); }, -3.0, 2.0,
      at_zero);
  add(
      "celu alpha=1", [](const Tensor& x) { return ops::celu(x); }, [](double x) { return x > 0 ? x : std::expm1(x); },
      -3.0, 2.0, at_zero);
  add(
      "celu alpha=0.5", [](const Tensor& x) { return ops::celu(x, 0.5); },
      [](double x) { return x > 0 ? x : 0.5 * std::expm1(x / 0.5); }, -3.0, 2.0, at_zero);
  add(
      "softsign", [](const Tensor& x) { return ops::softsign(x); }, [](double x) { return x / (1.0 + std::abs(x)); },
      -4.0, 4.0);
  add(
      "mish", [](const Tensor& x) { return ops::mish(x); },
      [](double x) { return x * std::tanh(softplus_reference(x)); }, -5.0, 5.0);
  add(
      "log_sigmoid", [](const Tensor& x) { return ops::log_sigmoid(x); },
      [](double x) { return std::log(sigmoid_reference(x)); }, -6.0, 6.0);
  add(
      "hard_sigmoid", [](const Tensor& x) { return ops::hard_sigmoid(x); },
      [](double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }, -5.0, 5.0, {-3.0, 3.0});
  add(
      "hard_sigmoid_keras2", [](const Tensor& x) { return ops::hard_sigmoid_keras2(x); },
      [](double x) { return std::min(std::max(0.2 * x + 0.5, 0.0), 1.0); }, -4.0, 4.0, {-2.5, 2.5});
  add(
      "hard_silu", [](const Tensor& x) { return ops::hard_silu(x); },
      [](double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }, -5.0, 5.0, {-3.0, 3.0});
  add(
      "hard_tanh", [](const Tensor& x) { return ops::hard_tanh(x); },
      [](double x) { return std::min(std::max(x, -1.0), 1.0); }, -2.0, 2.0, {-1.0, 1.0});
  add(
      "tanh_shrink", [](const Tensor& x) { return ops::tanh_shrink(x); }, [](double x) { return x - std::tanh(x); });
  add(
      "soft_shrink threshold=0.5", [](const Tensor& x) { return ops::soft_shrink(x); },
      [](double x) { return x > 0.5 ? x - 0.5 : (x < -0.5 ? x + 0.5 : 0.0); }, -2.0, 2.0, {-0.5, 0.5});
  add(
      "hard_shrink threshold=0.3", [](const Tensor& x) { return ops::hard_shrink(x, 0.3); },
      [](double x) { return std::abs(x) > 0.3 ? x : 0.0; }, -2.0, 2.0, {-0.3, 0.3});
  add(
      "squareplus b=4", [](const Tensor& x) { return ops::squareplus(x); },
      [](double x) { return (x + std::sqrt(x * x + 4.0)) / 2.0; }, -4.0, 4.0);
  add(
      "squareplus b=0.5", [](const Tensor& x) { return ops::squareplus(x, 0.5); },
      [](double x) { return (x + std::sqrt(x * x + 0.5)) / 2.0; }, -4.0, 4.0);
  add(
      "sparse_plus", [](const Tensor& x) { return ops::sparse_plus(x); },
      [](double x) { return x <= -1.0 ? 0.0 : (x >= 1.0 ? x : (x + 1.0) * (x + 1.0) / 4.0); }, -3.0, 3.0, {-1.0, 1.0});
  add(
      "sparse_sigmoid", [](const Tensor& x) { return ops::sparse_sigmoid(x); },
      [](double x) { return std::min(std::max((x + 1.0) / 2.0, 0.0), 1.0); }, -3.0, 3.0, {-1.0, 1.0});
  return cases;
}

void require_gradient(const UnaryCase& c, bool unknown_batch) {
  Rng rng(7);
  testing::GradcheckOptions options;
  options.label = c.label + (unknown_batch ? " unknown batch" : "");
  const Array input = testing::random_away_from({3, 4}, rng, c.kinks, 1e-2, DType::float64, c.low, c.high);
  const UnaryOp op = c.op;
  const auto report =
      testing::gradcheck([&](const std::vector<Tensor>& x) { return op(x[0]); }, {input}, options, unknown_batch);
  INFO(report.worst_entry());
  REQUIRE(report.max_relative_error <= 1e-6);
}

// Twelve float32 values spread over the case's domain, both tails and the middle.
std::vector<float> forward_inputs(const UnaryCase& c) {
  std::vector<float> values;
  for (int i = 0; i < 12; ++i) {
    double value = c.low + (c.high - c.low) * (i + 0.37) / 12.0;
    for (double kink : c.kinks)
      if (std::abs(value - kink) < 1e-3) value += 1e-2;
    values.push_back(static_cast<float>(value));
  }
  return values;
}

void require_forward_matches_reference(const UnaryCase& c) {
  const std::vector<float> values = forward_inputs(c);
  const UnaryOp op = c.op;
  const Array output =
      testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0]); }, {Array::from_vector(values, {3, 4})});
  REQUIRE(output.dtype() == DType::float32);
  REQUIRE(output.shape() == Shape{3, 4});
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double expected = c.reference(static_cast<double>(values[i]));
    INFO(c.label << " at x = " << values[i]);
    CHECK(output.flat(i) == Approx(expected).epsilon(1e-6).margin(1e-6));
  }
}

Array gradient_of_sum(const UnaryOp& op, const Array& input) {
  Graph graph;
  const Tensor x = graph.placeholder(input.shape(), input.dtype(), "x");
  const Tensor loss = ops::sum(op(x));
  const Tensor grad = gradients(loss, {x}).front();
  Program program(graph, {grad});
  program.feed(x, input);
  program.run();
  return program.fetch(grad);
}

bool all_finite(const Array& array) {
  for (std::size_t i = 0; i < array.size(); ++i)
    if (!std::isfinite(array.flat(i))) return false;
  return true;
}

}  // namespace

TEST_CASE("unary ops: gradients match central differences", "[ops][elementwise_unary][grad]") {
  for (const UnaryCase& c : unary_cases()) {
    SECTION(c.label) {
      require_gradient(c, false);
      require_gradient(c, true);
    }
  }
}

TEST_CASE("unary ops: float32 forward matches a plain-loop reference", "[ops][elementwise_unary]") {
  for (const UnaryCase& c : unary_cases()) {
    SECTION(c.label) { require_forward_matches_reference(c); }
  }
}

TEST_CASE("unary ops: split over threads, values and gradients bitwise the same on any count",
          "[ops][elementwise_unary][threads]") {
  // 40003 elements: chunks of whole 64-byte lines on up to 16 threads, and a last partial vector.
  Rng rng(71);
  for (const UnaryCase& c : unary_cases()) {
    SECTION(c.label) {
      for (DType dtype : {DType::float32, DType::float64}) {
        INFO(dtype_name(dtype));
        const Array x = testing::random_array({40003}, rng, dtype, c.low, c.high);
        const Array weights = testing::random_array({40003}, rng, dtype);
        const testing::GraphFunction f = [&c](const std::vector<Tensor>& t) { return c.op(t[0]); };
        testing::check_thread_counts(f, {x}, weights, 2, 0.0);
      }
    }
  }
}

TEST_CASE("pow_scalar: a negative base with an integer exponent keeps its sign", "[ops][elementwise_unary]") {
  const Array output = testing::evaluate([](const std::vector<Tensor>& x) { return ops::pow_scalar(x[0], 3.0); },
                                         {Array::from_vector(std::vector<float>{-2.0f, -0.5f, 1.5f}, {3})});
  CHECK(output.flat(0) == Approx(-8.0));
  CHECK(output.flat(1) == Approx(-0.125));
  CHECK(output.flat(2) == Approx(3.375));
}

TEST_CASE("unary ops: extreme inputs give finite values and gradients", "[ops][elementwise_unary]") {
  const Array extremes = Array::from_vector(std::vector<float>{-1000.0f, -100.0f, -30.0f, 30.0f, 100.0f, 1000.0f}, {6});
  const std::vector<std::pair<std::string, UnaryOp>> bounded = {
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); }},
      {"swish", [](const Tensor& x) { return ops::swish(x); }},
      {"gelu approximate", [](const Tensor& x) { return ops::gelu(x, true); }},
      {"gelu erf", [](const Tensor& x) { return ops::gelu(x, false); }},
      {"elu", [](const Tensor& x) { return ops::elu(x); }},
      {"leaky_relu", [](const Tensor& x) { return ops::leaky_relu(x); }},
      {"relu", [](const Tensor& x) { return ops::relu(x); }},
  };
  for (const auto& [label, op] : bounded) {
    INFO(label);
    const UnaryOp f = op;
    const Array output = testing::evaluate([&](const std::vector<Tensor>& x) { return f(x[0]); }, {extremes});
    CHECK(all_finite(output));
    CHECK(all_finite(gradient_of_sum(f, extremes)));
  }
  const Array softplus =
      testing::evaluate([](const std::vector<Tensor>& x) { return ops::softplus(x[0]); }, {extremes});
  CHECK(softplus.flat(0) == 0.0);
  CHECK(softplus.flat(5) == 1000.0);
  const Array sigmoid = testing::evaluate([](const std::vector<Tensor>& x) { return ops::sigmoid(x[0]); }, {extremes});
  CHECK(sigmoid.flat(0) == 0.0);
  CHECK(sigmoid.flat(5) == 1.0);
}

TEST_CASE("unary ops: chained ops running in place give the same values", "[ops][elementwise_unary]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 3}, DType::float32, "x");
  // Every intermediate has one reader, so the planner may let each op overwrite its input.
  const Tensor y = ops::softplus(ops::gelu(ops::tanh(ops::sigmoid(ops::add_scalar(ops::scale(x, 2.0), 0.5)))));
  Program program(graph, {y});
  const std::vector<float> values = {-1.5f, -0.5f, 0.0f, 0.25f, 1.0f, 2.0f};
  program.feed(x, Array::from_vector(values, {2, 3}));
  program.run();
  CHECK(program.stats().num_inplace >= 4);
  const Array output = program.fetch(y);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double chained = softplus_reference(gelu_tanh_reference(std::tanh(sigmoid_reference(2.0 * values[i] + 0.5))));
    CHECK(output.flat(i) == Approx(chained).epsilon(1e-6).margin(1e-6));
  }
}

TEST_CASE("activation: Keras names dispatch to the matching op", "[ops][elementwise_unary]") {
  const Array input = Array::from_vector(std::vector<float>{-2.0f, -0.5f, 0.3f, 1.7f, 0.9f, -1.1f}, {2, 3});
  auto by_name = [&](const std::string& name) {
    return testing::evaluate([&](const std::vector<Tensor>& x) { return ops::activation(x[0], name); }, {input});
  };
  auto direct = [&](const UnaryOp& op) {
    return testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0]); }, {input});
  };
  CHECK(by_name("linear").bitwise_equal(input));
  CHECK(by_name("").bitwise_equal(input));
  CHECK(by_name("relu").bitwise_equal(direct([](const Tensor& x) { return ops::relu(x); })));
  CHECK(by_name("sigmoid").bitwise_equal(direct([](const Tensor& x) { return ops::sigmoid(x); })));
  CHECK(by_name("tanh").bitwise_equal(direct([](const Tensor& x) { return ops::tanh(x); })));
  CHECK(by_name("softmax").bitwise_equal(direct([](const Tensor& x) { return ops::softmax(x, -1); })));
  CHECK(by_name("log_softmax").bitwise_equal(direct([](const Tensor& x) { return ops::log_softmax(x, -1); })));
  CHECK(by_name("swish").bitwise_equal(direct([](const Tensor& x) { return ops::swish(x); })));
  CHECK(by_name("silu").bitwise_equal(direct([](const Tensor& x) { return ops::swish(x); })));
  // keras.activations.gelu defaults to the exact erf form (keras.ops.gelu to the tanh one).
  CHECK(by_name("gelu").bitwise_equal(direct([](const Tensor& x) { return ops::gelu(x, false); })));
  CHECK(by_name("elu").bitwise_equal(direct([](const Tensor& x) { return ops::elu(x, 1.0); })));
  CHECK(by_name("softplus").bitwise_equal(direct([](const Tensor& x) { return ops::softplus(x); })));
  CHECK(by_name("leaky_relu").bitwise_equal(direct([](const Tensor& x) { return ops::leaky_relu(x, 0.2); })));
  CHECK(by_name("exponential").bitwise_equal(direct([](const Tensor& x) { return ops::exp(x); })));
  CHECK(by_name("hard_swish").bitwise_equal(direct([](const Tensor& x) { return ops::hard_silu(x); })));
  CHECK(by_name("celu").bitwise_equal(direct([](const Tensor& x) { return ops::celu(x, 1.0); })));
  CHECK(by_name("soft_shrink").bitwise_equal(direct([](const Tensor& x) { return ops::soft_shrink(x, 0.5); })));
  CHECK(by_name("hard_shrink").bitwise_equal(direct([](const Tensor& x) { return ops::hard_shrink(x, 0.5); })));
  CHECK(by_name("squareplus").bitwise_equal(direct([](const Tensor& x) { return ops::squareplus(x, 4.0); })));
  CHECK(by_name("sparsemax").bitwise_equal(direct([](const Tensor& x) { return ops::sparsemax(x); })));
}

TEST_CASE("activation: Keras 3.16's values at -2, -0.5, 0, 0.5 and 2", "[ops][elementwise_unary][keras]") {
  // keras.activations.<name>(np.float32([-2, -0.5, 0, 0.5, 2])) printed by Keras 3.16 (numpy backend).
  const std::vector<std::pair<std::string, std::vector<double>>> keras = {
      {"celu", {-0.8646647334098816, -0.39346933364868164, 0.0, 0.5, 2.0}},
      {"hard_shrink", {-2.0, 0.0, 0.0, 0.0, 2.0}},
      {"hard_sigmoid", {0.1666666567325592, 0.4166666567325592, 0.5, 0.5833333134651184, 0.8333333730697632}},
      {"hard_silu", {-0.3333333134651184, -0.2083333283662796, 0.0, 0.2916666567325592, 1.6666667461395264}},
      {"hard_swish", {-0.3333333134651184, -0.2083333283662796, 0.0, 0.2916666567325592, 1.6666667461395264}},
      {"hard_tanh", {-1.0, -0.5, 0.0, 0.5, 1.0}},
      {"log_sigmoid",
       {-2.1269280910491943, -0.9740769863128662, -0.6931471824645996, -0.4740769863128662, -0.12692800164222717}},
      {"mish", {-0.2525014579296112, -0.22074377536773682, 0.0, 0.37524518370628357, 1.9439588785171509}},
      {"relu6", {0.0, 0.0, 0.0, 0.5, 2.0}},
      {"selu", {-1.5201665163040161, -0.6917582154273987, 0.0, 0.5253505110740662, 2.1014020442962646}},
      {"soft_shrink", {-1.5, 0.0, 0.0, 0.0, 1.5}},
      {"softsign", {-0.6666666865348816, -0.3333333432674408, 0.0, 0.3333333432674408, 0.6666666865348816}},
      {"sparse_plus", {0.0, 0.0625, 0.25, 0.5625, 2.0}},
      {"sparse_sigmoid", {0.0, 0.25, 0.5, 0.75, 1.0}},
      {"squareplus", {0.41421353816986084, 0.7807763814926147, 1.0, 1.2807763814926147, 2.4142136573791504}},
      {"tanh_shrink", {-1.0359723567962646, -0.03788280487060547, 0.0, 0.03788280487060547, 1.0359723567962646}},
      {"sparsemax", {0.0, 0.0, 0.0, 0.0, 1.0}},  // one nonzero: where Keras 3.16's sparsemax is right
      // Keras 2's hard_sigmoid, as Keras 2.3 (keras/backend/tensorflow_backend.py) defines it.
      {"hard_sigmoid_keras2", {0.1, 0.4, 0.5, 0.6, 0.9}},
  };
  const Array input = Array::from_vector(std::vector<float>{-2.0f, -0.5f, 0.0f, 0.5f, 2.0f}, {1, 5});
  for (const auto& [name, expected] : keras) {
    INFO(name);
    const std::string activation = name;
    const Array output =
        testing::evaluate([&](const std::vector<Tensor>& x) { return ops::activation(x[0], activation); }, {input});
    for (std::size_t i = 0; i < expected.size(); ++i)
      CHECK(output.flat(i) == Approx(expected[i]).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("celu and squareplus refuse arguments their formulas cannot take", "[ops][elementwise_unary]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 3});
  REQUIRE_THROWS_AS(ops::celu(x, 0.0), ValueError);
  REQUIRE_THROWS_WITH(ops::celu(x, 0.0), Catch::Contains("celu") && Catch::Contains("alpha"));
  REQUIRE_THROWS_AS(ops::celu(x, std::numeric_limits<double>::infinity()), ValueError);
  REQUIRE_THROWS_AS(ops::squareplus(x, -1.0), ValueError);
  REQUIRE_THROWS_WITH(ops::squareplus(x, -1.0), Catch::Contains("squareplus") && Catch::Contains("b must be >= 0"));
}

TEST_CASE("sparsemax: the projection onto the simplex, row by row, and its gradient", "[ops][elementwise_unary]") {
  // Martins & Astudillo (2016); Keras 3.16 gives [0.0667, 0, 0] for the first row and zeros for the second
  // (keras-team/keras#23425).
  const Array input = Array::from_vector(
      std::vector<double>{0.5, 0.4, 0.0, -3.0, 0.1, 0.2, 0.3, 0.4, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 1.0, 5.0}, {4, 4});
  const Array output = testing::evaluate([](const std::vector<Tensor>& x) { return ops::sparsemax(x[0]); }, {input});
  const std::vector<double> expected = {0.5 + 1.0 / 30, 0.4 + 1.0 / 30, 1.0 / 30, 0.0,  0.1, 0.2, 0.3, 0.4,
                                        0.25,           0.25,           0.25,     0.25, 0.0, 0.0, 0.0, 1.0};
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(output.flat(i) == Approx(expected[i]).margin(1e-12));
  // float32 gives the same within rounding.
  const Array single = testing::evaluate([](const std::vector<Tensor>& x) { return ops::sparsemax(x[0]); },
                                         {input.astype(DType::float32)});
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(single.flat(i) == Approx(expected[i]).margin(1e-6));
  // Away from the threshold, the gradient matches central differences (rows with 3, 4 and 1 nonzeros, and a
  // batch of unknown size).
  const Array away = Array::from_vector(
      std::vector<double>{0.5, 0.4, 0.05, -3.0, 0.1, 0.2, 0.3, 0.4, -2.0, 0.3, 1.7, 0.2, 0.7, -0.4, 0.35, 0.1}, {4, 4});
  for (const bool unknown_batch : {false, true}) {
    testing::GradcheckOptions options;
    options.label = "sparsemax";
    const auto report = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::sparsemax(x[0]); }, {away},
                                           options, unknown_batch);
    INFO(report.worst_entry());
    REQUIRE(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("glu: the first half times the sigmoid of the second, on any axis", "[ops][elementwise_unary]") {
  Rng rng(3);
  const Array input = testing::random_away_from({2, 6, 4}, rng, {}, 1e-2, DType::float64, -2.0, 2.0);
  for (const int axis : {-1, 1}) {
    INFO("axis " << axis);
    const Array output = testing::evaluate([&](const std::vector<Tensor>& x) { return ops::glu(x[0], axis); }, {input});
    const std::int64_t rows = 2, middle = 6, last = 4;
    const Shape expected_shape = axis == -1 ? Shape{rows, middle, last / 2} : Shape{rows, middle / 2, last};
    REQUIRE(output.shape() == expected_shape);
    for (std::int64_t a = 0; a < expected_shape.dim(0); ++a)
      for (std::int64_t b = 0; b < expected_shape.dim(1); ++b)
        for (std::int64_t c = 0; c < expected_shape.dim(2); ++c) {
          auto at = [&](std::int64_t i, std::int64_t j, std::int64_t k) {
            return input.flat((i * middle + j) * last + k);
          };
          const double gate = axis == -1 ? at(a, b, c + last / 2) : at(a, b + middle / 2, c);
          const double value = at(a, b, c) * sigmoid_reference(gate);
          CHECK(output.flat((a * expected_shape.dim(1) + b) * expected_shape.dim(2) + c) ==
                Approx(value).epsilon(1e-12));
        }
    testing::GradcheckOptions options;
    options.label = "glu";
    const auto report =
        testing::gradcheck([&](const std::vector<Tensor>& x) { return ops::glu(x[0], axis); }, {input}, options, true);
    INFO(report.worst_entry());
    REQUIRE(report.max_relative_error <= 1e-6);
  }
  Graph graph;
  REQUIRE_THROWS_AS(ops::glu(graph.placeholder({2, 5}), -1), ShapeError);
  REQUIRE_THROWS_WITH(ops::glu(graph.placeholder({2, 5}), -1), Catch::Contains("5"));
}

TEST_CASE("activation: gradients flow through the named ops", "[ops][elementwise_unary][grad]") {
  for (const std::string& name : ops::activation_names()) {
    SECTION(name) {
      Rng rng(7);
      testing::GradcheckOptions options;
      options.label = std::string("activation ") + name;
      const std::string activation = name;
      const auto report = testing::gradcheck(
          [&](const std::vector<Tensor>& x) { return ops::activation(ops::scale(x[0], 1.0), activation); },
          {testing::random_away_from({3, 4}, rng, {0.0, -0.5, 0.5, -1.0, 1.0}, 2e-2)}, options, true);
      INFO(report.worst_entry());
      REQUIRE(report.max_relative_error <= 1e-6);
    }
  }
}

TEST_CASE("activation: an unknown name is a ConfigError listing the valid names", "[ops][elementwise_unary]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 3});
  REQUIRE_THROWS_AS(ops::activation(x, "relux"), ConfigError);
  REQUIRE_THROWS_WITH(ops::activation(x, "relux"),
                      Catch::Contains("'relux'") && Catch::Contains("did you mean 'relu'") &&
                          Catch::Contains("leaky_relu") && Catch::Contains("log_softmax") &&
                          Catch::Contains("exponential"));
  REQUIRE_THROWS_AS(ops::activation(x, "Relu"), ConfigError);
  // Keras resolves "threshold" by name but cannot call it (it has no defaults): kiln says so when it is named.
  REQUIRE_THROWS_WITH(ops::activation(x, "threshold"), Catch::Contains("threshold") && Catch::Contains("no defaults"));
}

TEST_CASE("unary ops and activations propagate NaN, as NumPy does", "[ops][elementwise_unary][nan]") {
  // A NaN among finite values, in both dtypes: an op that drops it (relu as maxps gives 0) lets a broken
  // run train on with a finite loss.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : {DType::float32, DType::float64}) {
    const Array input =
        Array::from_vector(std::vector<float>{-1.5f, nan, 0.5f, 2.0f, nan, -0.25f}, {2, 3}).astype(dtype);
    auto check_nan_at_1_and_4 = [&](const std::string& label, const Array& output) {
      INFO(label << " in " << dtype_name(dtype));
      CHECK(std::isnan(output.flat(1)));
      CHECK(std::isnan(output.flat(4)));
    };
    for (const UnaryCase& c : unary_cases()) {
      if (c.label == "pow_scalar exponent=0") continue;  // pow(NaN, 0) is 1 in IEEE 754, NumPy and C alike
      const UnaryOp op = c.op;
      check_nan_at_1_and_4(c.label, testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0]); }, {input}));
    }
    for (const std::string& name : ops::activation_names()) {
      if (name == "glu") continue;  // it halves the last axis, of odd size here: below
      const Array output =
          testing::evaluate([&](const std::vector<Tensor>& x) { return ops::activation(x[0], name); }, {input});
      check_nan_at_1_and_4("activation " + name, output);
    }
    const Array even =
        Array::from_vector(std::vector<float>{-1.5f, nan, 0.5f, 2.0f, 1.0f, -0.25f, nan, 3.0f}, {2, 4}).astype(dtype);
    const Array glu =
        testing::evaluate([](const std::vector<Tensor>& x) { return ops::activation(x[0], "glu"); }, {even});
    INFO("glu in " << dtype_name(dtype));
    CHECK(std::isnan(glu.flat(1)));  // the NaN in the value half
    CHECK(std::isnan(glu.flat(2)));  // the gate of (1, 0)
    CHECK(std::isfinite(glu.flat(0)));
  }
}

TEST_CASE("gelu erf, float32: values and gradient within float's error of erf over the whole line",
          "[ops][elementwise_unary]") {
  // float32 runs erf as a rational approximation (Eigen's and TensorFlow's); each of 200001 points from -12 to
  // 12, both tails and the clamp at |x/sqrt 2| = 4 included, against std::erf in double.
  std::vector<float> values;
  for (int i = 0; i <= 200000; ++i) values.push_back(-12.0f + 24.0f * static_cast<float>(i) / 200000.0f);
  const Array x = Array::from_vector(values, {static_cast<std::int64_t>(values.size())});
  const UnaryOp gelu = [](const Tensor& t) { return ops::gelu(t, false); };
  const Array y = testing::evaluate([&](const std::vector<Tensor>& t) { return gelu(t[0]); }, {x});
  const Array dy = gradient_of_sum(gelu, x);
  double worst_value = 0, worst_gradient = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    const double expected = gelu_erf_reference(v);
    const double slope = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    worst_value = std::max(worst_value, std::abs(y.flat(i) - expected) / std::max(1.0, std::abs(expected)));
    worst_gradient = std::max(worst_gradient, std::abs(dy.flat(i) - slope));
  }
  CHECK(worst_value < 1e-6);
  CHECK(worst_gradient < 1e-6);
  CHECK(y.flat(0) == 0.0);                        // -12: erf is -1 in float
  CHECK(y.flat(values.size() - 1) == 12.0f);      // 12: x itself
}
