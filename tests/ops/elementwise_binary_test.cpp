#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
using Reference = std::function<double(double, double)>;

struct Case {
  const char* name;
  Binary op;
  Reference reference;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"add", ops::add, [](double a, double b) { return a + b; }},
      {"sub", ops::sub, [](double a, double b) { return a - b; }},
      {"mul", ops::mul, [](double a, double b) { return a * b; }},
      {"div", ops::div, [](double a, double b) { return a / b; }},
      {"pow", ops::pow, [](double a, double b) { return std::pow(a, b); }},
      {"maximum", ops::maximum, [](double a, double b) { return std::max(a, b); }},
      {"minimum", ops::minimum, [](double a, double b) { return std::min(a, b); }},
  };
  return all;
}

// Positive, well-separated values: in pow's domain, away from div's pole and from max/min ties.
Array operand(const Shape& shape, Rng& rng, double offset) {
  Array array = testing::random_array(shape, rng, DType::float64, 0.5, 1.5);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, array.flat(i) + offset * ((i % 2) ? 1 : -1));
  return array;
}
}  // namespace

TEST_CASE("binary ops broadcast like NumPy and match a plain loop in float32", "[ops][elementwise]") {
  Rng rng(11);
  // The last four repeat one input along outer axes with rows of 16 or more elements (a SpatialDropout mask,
  // a per-sample scale): the row-wise path, with the repeating input on either side.
  const std::vector<std::pair<Shape, Shape>> layouts = {{{2, 3}, {2, 3}},
                                                        {{2, 3}, {3}},
                                                        {{3}, {2, 3}},
                                                        {{2, 3}, {}},
                                                        {{4, 1, 3}, {2, 1}},
                                                        {{2, 1}, {1, 3}},
                                                        {{3, 5, 16}, {3, 1, 16}},
                                                        {{3, 1, 17}, {3, 4, 17}},
                                                        {{2, 3, 4, 20}, {3, 1, 20}},
                                                        {{2, 3, 40}, {2, 1, 1}}};
  for (const Case& c : cases()) {
    for (const auto& layout : layouts) {
      INFO(c.name << " " << layout.first.to_string() << " " << layout.second.to_string());
      const Array a = operand(layout.first, rng, 0.2).astype(DType::float32);
      const Array b = operand(layout.second, rng, 0.0).astype(DType::float32);
      const Array out = testing::evaluate([&](const std::vector<Tensor>& x) { return c.op(x[0], x[1]); }, {a, b});
      const Shape expected = broadcast_shapes(a.shape(), b.shape(), "test");
      REQUIRE(out.shape() == expected);
      // Reference: index each input by the broadcast rule directly.
      const int rank = expected.rank();
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::size_t rest = i, offset_a = 0, offset_b = 0, stride_a = 1, stride_b = 1;
        for (int axis = rank - 1; axis >= 0; --axis) {
          const auto position = static_cast<std::int64_t>(rest % static_cast<std::size_t>(expected[axis]));
          rest /= static_cast<std::size_t>(expected[axis]);
          const int axis_a = axis - (rank - a.shape().rank());
          const int axis_b = axis - (rank - b.shape().rank());
          if (axis_a >= 0) {
            if (a.shape()[axis_a] != 1) offset_a += static_cast<std::size_t>(position) * stride_a;
            stride_a *= static_cast<std::size_t>(a.shape()[axis_a]);
          }
          if (axis_b >= 0) {
            if (b.shape()[axis_b] != 1) offset_b += static_cast<std::size_t>(position) * stride_b;
            stride_b *= static_cast<std::size_t>(b.shape()[axis_b]);
          }
        }
        const double expected_value = c.reference(a.flat(offset_a), b.flat(offset_b));
        CHECK(out.flat(i) == Approx(expected_value).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("binary op gradients match central differences in float64", "[ops][elementwise][grad]") {
  Rng rng(12);
  for (const Case& c : cases()) {
    for (const auto& layout :
         std::vector<std::pair<Shape, Shape>>{{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 4}, {3, 1}}}) {
      testing::GradcheckOptions options;
      options.label = std::string(c.name) + " " + layout.first.to_string() + " " + layout.second.to_string();
      const auto report =
          testing::gradcheck([&](const std::vector<Tensor>& x) { return c.op(x[0], x[1]); },
                             {operand(layout.first, rng, 0.2), operand(layout.second, rng, 0.0)}, options);
      INFO(report.worst_entry());
      CHECK(report.max_relative_error <= 1e-6);
    }
  }
  testing::GradcheckOptions options;
  options.label = "mul unknown batch";
  const auto report = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::mul(x[0], x[1]); },
                                         {operand({5, 3}, rng, 0), operand({3}, rng, 0)}, options, true);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("comparisons give 1 and 0", "[ops][elementwise]") {
  const Array a = Array::from_vector(std::vector<float>{1, 2, 3}, {3});
  const Array b = Array::from_vector(std::vector<float>{2, 2, 2}, {3});
  auto run = [&](Tensor (*op)(const Tensor&, const Tensor&)) {
    return testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], x[1]); }, {a, b}).to_vector<float>();
  };
  CHECK(run(ops::greater) == std::vector<float>{0, 0, 1});
  CHECK(run(ops::greater_equal) == std::vector<float>{0, 1, 1});
  CHECK(run(ops::less) == std::vector<float>{1, 0, 0});
  CHECK(run(ops::less_equal) == std::vector<float>{1, 1, 0});
  CHECK(run(ops::equal) == std::vector<float>{0, 1, 0});
}

TEST_CASE("shapes that cannot broadcast throw ShapeError naming the op and both shapes", "[ops][elementwise]") {
  Graph graph;
  const Tensor a = graph.placeholder({Shape::unknown, 3}, DType::float32, "a");
  const Tensor b = graph.placeholder({4}, DType::float32, "b");
  for (const Case& c : cases()) {
    INFO(c.name);
    CHECK_THROWS_AS(c.op(a, b), ShapeError);
    CHECK_THROWS_WITH(c.op(a, b), Catch::Contains(std::string(c.name) + " '") && Catch::Contains("(None, 3), (4,)"));
  }
}

TEST_CASE("maximum and minimum keep a NaN from either side, as NumPy does", "[ops][elementwise][nan]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Array a = Array::from_vector(std::vector<float>{nan, 1.0f, 2.0f, nan}, {4});
  const Array b = Array::from_vector(std::vector<float>{1.0f, nan, 1.0f, nan}, {4});
  for (const Binary& op : {Binary(ops::maximum), Binary(ops::minimum)}) {
    const Array out = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], x[1]); }, {a, b});
    CHECK(std::isnan(out.flat(0)));
    CHECK(std::isnan(out.flat(1)));
    CHECK_FALSE(std::isnan(out.flat(2)));
    CHECK(std::isnan(out.flat(3)));
  }
}
