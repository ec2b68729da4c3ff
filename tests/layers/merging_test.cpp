#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

// ---- Add --------------------------------------------------------------------------------------------

TEST_CASE("Add: output shapes broadcast with an unknown batch", "[layers][add]") {
  kiln::Add add;
  CHECK(symbolic_output_shapes(*add, LayerCase{{random_input({4, 3, 5}, 1), random_input({4, 3, 5}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 3, 5}});
  kiln::Add broadcasting;
  const LayerCase three{{random_input({4, 3, 5}, 1), random_input({4, 1, 5}, 2), random_input({5}, 3)}};
  CHECK(symbolic_output_shapes(*broadcasting, three) == std::vector<Shape>{Shape{Shape::unknown, 3, 5}});
  CHECK(add.weights().empty());
}

TEST_CASE("Add: gradients of every input match central differences", "[layers][add][grad]") {
  kiln::Add add;
  const LayerCase c{{random_input({3, 2, 4}, 4), random_input({3, 1, 4}, 5), random_input({4}, 6)}};
  const GradcheckReport report = gradcheck_layer(*add, c);
  INFO(report.worst_entry());
  CHECK(report.num_checked == 24 + 12 + 4);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("Add: config round trip has only the base keys", "[layers][add][config]") {
  kiln::Add add({{"name", "residual"}});
  check_config_round_trip(add, LayerCase{{random_input({2, 3}, 7), random_input({2, 3}, 8)}});
  const Config config = add.get_config();
  CHECK(config.get_string("name") == "residual");
  CHECK(config.keys() == std::vector<std::string>{"name", "trainable", "dtype"});
}

TEST_CASE("Add: values are the elementwise sum", "[layers][add][values]") {
  const Array a = random_input({2, 3, 4}, 9), b = random_input({2, 1, 4}, 10), c = random_input({2, 3, 4}, 11);
  kiln::Add add;
  const Array y = run_layer(*add, LayerCase{{a, b, c}})[0];
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        const std::size_t at = n * 12 + i * 4 + j;
        CHECK(y.flat(at) == Approx(a.flat(at) + b.flat(n * 4 + j) + c.flat(at)).epsilon(1e-15));
      }
}

TEST_CASE("Add: shapes that do not broadcast fail, naming the layer and every shape", "[layers][add][errors]") {
  kiln::Add add;
  const kiln::Tensor a = kiln::Input({Shape::unknown, 3});
  const kiln::Tensor b = kiln::Input({Shape::unknown, 4});
  CHECK_THROWS_AS(add({a, b}), kiln::ShapeError);
  CHECK_THROWS_WITH(add({a, b}), Catch::Contains("Add 'add'") && Catch::Contains("input 0=(None, 3)") &&
                                     Catch::Contains("input 1=(None, 4)"));
  kiln::Add lonely({{"name", "lonely"}});
  CHECK_THROWS_AS(lonely(a), kiln::ConfigError);
  CHECK_THROWS_WITH(lonely(a), Catch::Contains("Add 'lonely'") && Catch::Contains("got 1"));
  CHECK_THROWS_WITH(kiln::Add({{"axis", 1}}), Catch::Contains("unknown argument 'axis'"));
}

// ---- Concatenate ------------------------------------------------------------------------------------

TEST_CASE("Concatenate: output shapes add up along the axis", "[layers][concatenate]") {
  kiln::Concatenate last;
  CHECK(symbolic_output_shapes(*last, LayerCase{{random_input({4, 3, 5}, 1), random_input({4, 3, 2}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 3, 7}});
  kiln::Concatenate middle(1);
  const LayerCase three{{random_input({4, 3, 5}, 1), random_input({4, 2, 5}, 2), random_input({4, 1, 5}, 3)}};
  CHECK(symbolic_output_shapes(*middle, three) == std::vector<Shape>{Shape{Shape::unknown, 6, 5}});
  kiln::Concatenate matrices;
  CHECK(symbolic_output_shapes(*matrices, LayerCase{{random_input({4, 3}, 1), random_input({4, 6}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 9}});
}

TEST_CASE("Concatenate: gradients of every input match central differences", "[layers][concatenate][grad]") {
  for (const int axis : {-1, 1}) {
    kiln::Concatenate concatenate(axis);
    const LayerCase c = axis == 1 ? LayerCase{{random_input({3, 2, 4}, 4), random_input({3, 3, 4}, 5)}}
                                  : LayerCase{{random_input({3, 2, 4}, 4), random_input({3, 2, 1}, 5)}};
    const GradcheckReport report = gradcheck_layer(*concatenate, c);
    INFO("axis " << axis << ": " << report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
    CHECK(report.num_checked > 24);
  }
}

TEST_CASE("Concatenate: config round trip keeps the axis", "[layers][concatenate][config]") {
  kiln::Concatenate concatenate(1, {{"name", "join"}});
  check_config_round_trip(concatenate, LayerCase{{random_input({2, 3, 2}, 7), random_input({2, 1, 2}, 8)}});
  CHECK(concatenate.get_config().get_int("axis") == 1);
  CHECK(concatenate.get_config().get_string("name") == "join");
  CHECK(kiln::Concatenate().get_config().get_int("axis") == -1);
}

TEST_CASE("Concatenate: values follow each input in order", "[layers][concatenate][values]") {
  const Array a = random_input({2, 3, 2}, 9), b = random_input({2, 3, 1}, 10);
  kiln::Concatenate concatenate;
  const Array y = run_layer(*concatenate, LayerCase{{a, b}})[0];
  REQUIRE(y.shape() == Shape{2, 3, 3});
  for (std::size_t row = 0; row < 6; ++row) {
    CHECK(y.flat(row * 3) == a.flat(row * 2));
    CHECK(y.flat(row * 3 + 1) == a.flat(row * 2 + 1));
    CHECK(y.flat(row * 3 + 2) == b.flat(row));
  }
}

TEST_CASE("Concatenate: mismatched shapes and bad axes fail, naming the layer", "[layers][concatenate][errors]") {
  const kiln::Tensor a = kiln::Input({Shape::unknown, 3, 5});
  const kiln::Tensor b = kiln::Input({Shape::unknown, 4, 2});
  kiln::Concatenate concatenate;
  CHECK_THROWS_AS(concatenate({a, b}), kiln::ShapeError);
  CHECK_THROWS_WITH(concatenate({a, b}), Catch::Contains("Concatenate 'concatenate'") &&
                                             Catch::Contains("input 0=(None, 3, 5)") &&
                                             Catch::Contains("input 1=(None, 4, 2)"));
  kiln::Concatenate batch(0, {{"name", "batch"}});
  CHECK_THROWS_WITH(batch({a, a}), Catch::Contains("Concatenate 'batch'") && Catch::Contains("unknown dimension"));
  kiln::Concatenate beyond(3, {{"name", "beyond"}});
  CHECK_THROWS_WITH(beyond({a, a}), Catch::Contains("Concatenate 'beyond'") && Catch::Contains("out of range"));
  kiln::Concatenate ranks({{"name", "ranks"}});
  const kiln::Tensor matrix = kiln::Input({Shape::unknown, 5});
  CHECK_THROWS_WITH(ranks({a, matrix}), Catch::Contains("Concatenate 'ranks'") && Catch::Contains("same rank"));
  CHECK_THROWS_AS(kiln::Concatenate(Config{{"axis", "last"}}), kiln::ConfigError);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec add_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Add()); };
  spec.call = LayerCase{{random_input({2, 3}, 1), random_input({2, 3}, 2), random_input({2, 3}, 3)}};
  spec.output_shapes = {Shape{any, 3}};
  spec.bad_inputs = {{"shapes that do not broadcast", {{any, 3}, {any, 4}}, "inputs must broadcast to one shape"},
                     {"one input", {{any, 3}}, "takes at least 2 inputs, got 1"}};
  return spec;
}

LayerSpec concatenate_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Concatenate(-1)); };
  spec.call = LayerCase{{random_input({2, 3}, 1), random_input({2, 4}, 2)}};
  spec.output_shapes = {Shape{any, 7}};
  spec.bad_inputs = {{"different ranks", {{any, 3}, {any, 2, 2}}, "inputs must have the same rank"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Add", add_spec)
KILN_LAYER_HARNESS("kiln>Concatenate", concatenate_spec)

// ---- Subtract, Multiply, Average, Maximum, Minimum ------------------------------------------------------

namespace {
constexpr std::int64_t unknown_batch = Shape::unknown;

// Two or three inputs of (2, 3), the last one (1, 3) broadcasting over the batch.
template <class Handle>
LayerSpec merge_spec(bool two_only) {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(Handle()); };
  spec.call = two_only ? LayerCase{{random_input({2, 3}, 1), random_input({2, 3}, 2)}}
                       : LayerCase{{random_input({2, 3}, 1), random_input({2, 3}, 2), random_input({2, 3}, 3)}};
  spec.output_shapes = {Shape{unknown_batch, 3}};
  spec.bad_inputs = {
      {"shapes that do not broadcast", {{unknown_batch, 3}, {unknown_batch, 4}}, "inputs must broadcast to one shape"},
      {"one input", {{unknown_batch, 3}}, two_only ? "takes 2 inputs, got 1" : "takes at least 2"}};
  return spec;
}

LayerSpec subtract_spec() { return merge_spec<kiln::Subtract>(true); }
LayerSpec multiply_spec() { return merge_spec<kiln::Multiply>(false); }
LayerSpec average_spec() { return merge_spec<kiln::Average>(false); }
LayerSpec maximum_spec() { return merge_spec<kiln::Maximum>(false); }
LayerSpec minimum_spec() { return merge_spec<kiln::Minimum>(false); }
}  // namespace

KILN_LAYER_HARNESS("kiln>Subtract", subtract_spec)
KILN_LAYER_HARNESS("kiln>Multiply", multiply_spec)
KILN_LAYER_HARNESS("kiln>Average", average_spec)
KILN_LAYER_HARNESS("kiln>Maximum", maximum_spec)
KILN_LAYER_HARNESS("kiln>Minimum", minimum_spec)

TEST_CASE("Subtract, Multiply, Average, Maximum, Minimum: values elementwise", "[layers][merging][values]") {
  const kiln::Array a = kiln::Array::from_vector(std::vector<double>{1, -2, 3, 4}, {2, 2});
  const kiln::Array b = kiln::Array::from_vector(std::vector<double>{2, 2, -1, 4}, {2, 2});
  const kiln::Array c = kiln::Array::from_vector(std::vector<double>{0, 5}, {1, 2});  // broadcasts
  auto run = [&](kiln::Layer& layer, std::vector<kiln::Array> inputs) {
    return run_layer(layer, LayerCase{std::move(inputs)}).at(0).to_vector<double>();
  };
  CHECK(run(*kiln::Subtract(), {a, b}) == std::vector<double>{-1, -4, 4, 0});
  CHECK(run(*kiln::Multiply(), {a, b, c}) == std::vector<double>{0, -20, -0.0, 80});
  CHECK(run(*kiln::Average(), {a, b}) == std::vector<double>{1.5, 0, 1, 4});
  CHECK(run(*kiln::Maximum(), {a, b, c}) == std::vector<double>{2, 5, 3, 5});
  CHECK(run(*kiln::Minimum(), {a, b, c}) == std::vector<double>{0, -2, -1, 4});
  kiln::Subtract subtract(Config{{"name", "difference"}});
  CHECK_THROWS_WITH(
      subtract({kiln::Input({unknown_batch, 2}), kiln::Input({unknown_batch, 2}), kiln::Input({unknown_batch, 2})}),
      Catch::Contains("Subtract 'difference'") && Catch::Contains("2 inputs, got 3"));
}

// ---- Dot ----------------------------------------------------------------------------------------------------

namespace {
LayerSpec dot_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Dot(2, 1)); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 1), random_input({2, 4, 5}, 2)}};
  spec.output_shapes = {Shape{unknown_batch, 3, 5}};
  spec.bad_inputs = {
      {"contracted sizes differ", {{unknown_batch, 3, 4}, {unknown_batch, 3, 5}}, "the contracted axes differ in size"},
      {"one input", {{unknown_batch, 3, 4}}, "takes 2 inputs, got 1"}};
  return spec;
}

// batch_dot written out: out[n, i..., j...] = Σ_d x[n, ..., d at ax, ...] · y[n, ..., d at ay, ...], with x's
// remaining indices i then y's j (each in their order).
std::vector<double> reference_dot(const Array& x, const Array& y, int ax, int ay) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  auto strides = [](const Shape& s) {
    std::vector<std::int64_t> st(static_cast<std::size_t>(s.rank()), 1);
    for (int i = s.rank() - 2; i >= 0; --i)
      st[static_cast<std::size_t>(i)] = st[static_cast<std::size_t>(i) + 1] * s[i + 1];
    return st;
  };
  const std::vector<std::int64_t> xst = strides(xs), yst = strides(ys);
  std::vector<int> x_rest, y_rest;
  for (int i = 1; i < xs.rank(); ++i)
    if (i != ax) x_rest.push_back(i);
  for (int i = 1; i < ys.rank(); ++i)
    if (i != ay) y_rest.push_back(i);
  std::int64_t x_count = 1, y_count = 1;
  for (const int i : x_rest) x_count *= xs[i];
  for (const int i : y_rest) y_count *= ys[i];
  std::vector<double> out;
  for (std::int64_t n = 0; n < xs[0]; ++n)
    for (std::int64_t i = 0; i < x_count; ++i)
      for (std::int64_t j = 0; j < y_count; ++j) {
        // Unravel i over x_rest and j over y_rest into element offsets.
        std::int64_t x_offset = n * xst[0], y_offset = n * yst[0], rest = i;
        for (auto it = x_rest.rbegin(); it != x_rest.rend(); ++it) {
          x_offset += (rest % xs[*it]) * xst[static_cast<std::size_t>(*it)];
          rest /= xs[*it];
        }
        rest = j;
        for (auto it = y_rest.rbegin(); it != y_rest.rend(); ++it) {
          y_offset += (rest % ys[*it]) * yst[static_cast<std::size_t>(*it)];
          rest /= ys[*it];
        }
        double sum = 0;
        for (std::int64_t d = 0; d < xs[ax]; ++d)
          sum += x.flat(static_cast<std::size_t>(x_offset + d * xst[static_cast<std::size_t>(ax)])) *
                 y.flat(static_cast<std::size_t>(y_offset + d * yst[static_cast<std::size_t>(ay)]));
        out.push_back(sum);
      }
  return out;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Dot", dot_spec)

TEST_CASE("Dot: batch_dot over every pairing of axes, against the sum written out", "[layers][merging][dot]") {
  struct Case {
    Shape x, y;
    std::vector<std::int64_t> axes;
    Shape out;  // with the batch
  };
  const std::vector<Case> cases{
      {{2, 4}, {2, 4}, {1, 1}, {2, 1}},                  // two vectors: (batch, 1), as Keras
      {{2, 4}, {2, 3, 4}, {1, 2}, {2, 3}},               // Keras's docstring example
      {{2, 3, 4}, {2, 4}, {2, 1}, {2, 3}},               //
      {{2, 3, 4}, {2, 5, 4}, {2, 2}, {2, 3, 5}},         // attention scores q·kᵀ
      {{2, 4, 3}, {2, 4, 5}, {1, 1}, {2, 3, 5}},         //
      {{2, 3, 4, 2}, {2, 5, 4}, {2, -1}, {2, 3, 2, 5}},  // rank 4 and a negative axis
      {{2, 3, 4}, {2, 2, 4, 6}, {-1, 2}, {2, 3, 2, 6}},
  };
  for (const Case& c : cases) {
    INFO(c.x.to_string() << " · " << c.y.to_string() << " axes " << Config::from_ints(c.axes).to_string());
    const Array x = random_input(c.x, 3), y = random_input(c.y, 4);
    const Array out = run_layer(*kiln::Dot(c.axes[0], c.axes[1]), LayerCase{{x, y}}).at(0);
    REQUIRE(out.shape() == c.out);
    const int ax = static_cast<int>(c.axes[0] < 0 ? c.axes[0] + c.x.rank() : c.axes[0]);
    const int ay = static_cast<int>(c.axes[1] < 0 ? c.axes[1] + c.y.rank() : c.axes[1]);
    const std::vector<double> expected = reference_dot(x, y, ax, ay);
    const std::vector<double> got = out.to_vector<double>();
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-14));
  }
}

TEST_CASE("Dot: an int axes, normalize for cosine similarity, Keras's config", "[layers][merging][dot]") {
  const Array a = Array::from_vector(std::vector<double>{3, 4, 1, 0}, {2, 2});
  const Array b = Array::from_vector(std::vector<double>{4, 3, 0, 2}, {2, 2});
  CHECK(run_layer(*kiln::Dot(1), LayerCase{{a, b}}).at(0).to_vector<double>() == std::vector<double>{24, 0});
  const std::vector<double> cosine =
      run_layer(*kiln::Dot(-1, {{"normalize", true}}), LayerCase{{a, b}}).at(0).to_vector<double>();
  CHECK(cosine[0] == Approx(24.0 / 25.0).epsilon(1e-14));
  CHECK(cosine[1] == Approx(0.0).margin(1e-15));
  const GradcheckReport report = gradcheck_layer(*kiln::Dot(2, {{"normalize", true}}),
                                                 LayerCase{{random_input({2, 3, 4}, 5), random_input({2, 5, 4}, 6)}});
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);

  const Config one = kiln::Dot(2).get_config();
  CHECK(one.get_int("axes") == 2);
  CHECK_FALSE(one.get_bool("normalize"));
  CHECK(kiln::Dot(1, 2).get_config().at("axes") == Config::from_ints({1, 2}));
  CHECK_THROWS_WITH(kiln::Dot(Config::map()), Catch::Contains("'axes' is required"));
  CHECK_THROWS_WITH(kiln::Dot(Config{{"axes", Config::from_ints({1, 2, 3})}}),
                    Catch::Contains("an int or a list of two ints"));
  const kiln::Tensor x = kiln::Input({unknown_batch, 4});
  CHECK_THROWS_AS(kiln::Dot(0)({x, x}), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::Dot(0)({x, x}), Catch::Contains("Dot") && Catch::Contains("cannot contract the batch axis"));
  CHECK_THROWS_WITH(kiln::Dot(3)({x, x}), Catch::Contains("axis 3 does not exist in input 0 of rank 2"));
  const kiln::Tensor flat = kiln::Input({unknown_batch});
  CHECK_THROWS_WITH(kiln::Dot(1)({flat, x}), Catch::Contains("needs two inputs of rank 2 or more"));
}
