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
}

TEST_CASE("activation: gradients flow through the named ops", "[ops][elementwise_unary][grad]") {
  for (const char* name : {"relu", "sigmoid", "tanh", "softmax", "swish", "gelu", "elu", "softplus", "leaky_relu",
                           "exponential", "log_softmax", "linear"}) {
    SECTION(name) {
      Rng rng(7);
      testing::GradcheckOptions options;
      options.label = std::string("activation ") + name;
      const std::string activation = name;
      const auto report = testing::gradcheck(
          [&](const std::vector<Tensor>& x) { return ops::activation(ops::scale(x[0], 1.0), activation); },
          {testing::random_away_from({3, 4}, rng, {0.0})}, options, true);
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
      const Array output =
          testing::evaluate([&](const std::vector<Tensor>& x) { return ops::activation(x[0], name); }, {input});
      check_nan_at_1_and_4("activation " + name, output);
    }
  }
}
