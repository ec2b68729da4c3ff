#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {
// 2 x 3 x 4 holding 0..23.
Array iota() {
  std::vector<float> values(24);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return Array::from_vector(values, {2, 3, 4});
}
std::vector<float> reduced_values(Tensor (*op)(const Tensor&, const ops::Axes&, bool), const ops::Axes& axes,
                                  bool keepdims, Shape* shape = nullptr) {
  const Array out = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], axes, keepdims); }, {iota()});
  if (shape != nullptr) *shape = out.shape();
  return out.to_vector<float>();
}
}  // namespace

TEST_CASE("reductions match hand-computed values over any axes", "[ops][reduce]") {
  Shape shape;
  CHECK(reduced_values(ops::sum, {}, false, &shape) == std::vector<float>{276});
  CHECK(shape == Shape{});
  CHECK(reduced_values(ops::sum, {-1}, false, &shape) == std::vector<float>{6, 22, 38, 54, 70, 86});
  CHECK(shape == Shape({2, 3}));
  CHECK(reduced_values(ops::sum, {0, 2}, true, &shape) == std::vector<float>{60, 92, 124});
  CHECK(shape == Shape({1, 3, 1}));
  CHECK(reduced_values(ops::mean, {1}, false) == std::vector<float>{4, 5, 6, 7, 16, 17, 18, 19});
  CHECK(reduced_values(ops::max, {0}, false, &shape) ==
        std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(reduced_values(ops::min, {2}, false) == std::vector<float>{0, 4, 8, 12, 16, 20});
}

TEST_CASE("reduction gradients match central differences in float64", "[ops][reduce][grad]") {
  Rng rng(21);
  const std::vector<std::pair<ops::Axes, bool>> settings = {
      {{}, false}, {{0}, false}, {{1}, true}, {{-1}, false}, {{0, 2}, true}};
  using Reducer = Tensor (*)(const Tensor&, const ops::Axes&, bool);
  const std::vector<std::pair<const char*, Reducer>> reducers = {
      {"sum", ops::sum}, {"mean", ops::mean}, {"max", ops::max}, {"min", ops::min}};
  for (const auto& [name, reducer] : reducers) {
    for (const auto& [axes, keepdims] : settings) {
      testing::GradcheckOptions options;
      options.label = std::string(name) + " axes=" + std::to_string(axes.size()) + (keepdims ? " keepdims" : "");
      // Distinct values: max/min ties would make the numeric gradient one-sided.
      const auto report = testing::gradcheck(
          [&, r = reducer, a = axes, k = keepdims](const std::vector<Tensor>& x) { return r(x[0], a, k); },
          {testing::random_array({2, 3, 4}, rng)}, options);
      INFO(report.worst_entry());
      CHECK(report.max_relative_error <= 1e-6);
    }
  }
  testing::GradcheckOptions options;
  options.label = "mean over an unknown batch";
  const auto report = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::mean(x[0], {0}); },
                                         {testing::random_array({5, 3}, rng)}, options, true);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("max shares its gradient among ties", "[ops][reduce]") {
  Graph graph;
  const Tensor x = graph.placeholder({4}, DType::float64, "x");
  const Tensor grad = gradients(ops::max(x), {x}).front();
  Program program(graph, {grad});
  const Array value = Array::from_vector(std::vector<double>{1, 3, 3, 2}, {4});
  program.feed(x, value);
  program.run();
  CHECK(program.fetch(grad).to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
}

TEST_CASE("sum_to reduces broadcast axes, and its gradient expands back", "[ops][reduce][grad]") {
  const Array out = testing::evaluate(
      [](const std::vector<Tensor>& x) {
        return ops::sum_to(x[0], {3, 1});
      },
      {Array::full({2, 3, 4}, 1.0)});
  CHECK(out.shape() == Shape({3, 1}));
  CHECK(out.to_vector<float>() == std::vector<float>{8, 8, 8});
  Rng rng(2);
  testing::GradcheckOptions options;
  options.label = "sum_to";
  const auto report = testing::gradcheck(
      [](const std::vector<Tensor>& x) {
        return ops::sum_to(x[0], {1, 4});
      },
      {Shape{2, 3, 4}}, rng, options);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("bad reduction axes throw ShapeError naming the op and shape", "[ops][reduce]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float32, "x");
  CHECK_THROWS_AS(ops::sum(x, {2}), ShapeError);
  CHECK_THROWS_WITH(ops::mean(x, {-3}), Catch::Contains("mean 'mean'") && Catch::Contains("(None, 3)"));
  CHECK_THROWS_WITH(ops::max(x, {1, -1}), Catch::Contains("repeated"));
  CHECK_THROWS_AS(ops::sum_to(x, {4}), ShapeError);
}

// The kernels walk runs of merged axes; a plain per-element reference checks every subset of axes of a
// shape with size-1 axes between the others and runs longer than a vector.
TEST_CASE("sum, max and min over every subset of axes match a plain reference", "[ops][reduce]") {
  const Shape shape({3, 1, 4, 2, 19});
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<double>(i) * 1.7) * 10.0;
  const Array x = Array::from_vector(values, shape);
  for (int subset = 0; subset < (1 << shape.rank()); ++subset) {
    ops::Axes axes;
    for (int axis = 0; axis < shape.rank(); ++axis)
      if (subset & (1 << axis)) axes.push_back(axis);
    if (axes.empty()) continue;  // (no axes means all of them)
    // The reference: each element's output position with the reduced axes dropped.
    std::vector<std::int64_t> out_dims;
    for (int axis = 0; axis < shape.rank(); ++axis)
      if (!(subset & (1 << axis))) out_dims.push_back(shape[axis]);
    const Shape out_shape(out_dims);
    const auto outputs = static_cast<std::size_t>(out_shape.num_elements());
    std::vector<double> sums(outputs, 0.0), maxima(outputs, -1e300), minima(outputs, 1e300);
    for (std::int64_t i = 0; i < shape.num_elements(); ++i) {
      std::int64_t rest = i, out = 0, stride = 1;
      for (int axis = shape.rank() - 1; axis >= 0; --axis) {
        const std::int64_t position = rest % shape[axis];
        rest /= shape[axis];
        if (subset & (1 << axis)) continue;
        out += position * stride;
        stride *= shape[axis];
      }
      const double value = values[static_cast<std::size_t>(i)];
      const auto o = static_cast<std::size_t>(out);
      sums[o] += value;
      maxima[o] = std::max(maxima[o], value);
      minima[o] = std::min(minima[o], value);
    }
    INFO("axes bitmask " << subset);
    auto run = [&](Tensor (*op)(const Tensor&, const ops::Axes&, bool)) {
      return testing::evaluate([&](const std::vector<Tensor>& in) { return op(in[0], axes, false); }, {x})
          .to_vector<double>();
    };
    const auto sum = run(ops::sum), max = run(ops::max), min = run(ops::min);
    REQUIRE(sum.size() == outputs);
    for (std::size_t o = 0; o < outputs; ++o) {
      REQUIRE(sum[o] == Approx(sums[o]).margin(1e-9));
      REQUIRE(max[o] == maxima[o]);
      REQUIRE(min[o] == minima[o]);
    }
  }
}

TEST_CASE("sum and sum_to over leading rows in float32 and float64", "[ops][reduce]") {
  // 35 rows of 13 (a bias gradient's reduction), with an axis of 1 between.
  const Shape shape({7, 5, 1, 13});
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::cos(static_cast<double>(i) * 0.9) * 3.0 + 0.25;
  std::vector<double> expected(13, 0.0);
  for (std::size_t i = 0; i < values.size(); ++i) expected[i % 13] += values[i];
  for (DType dtype : {DType::float32, DType::float64}) {
    const Array x = Array::from_vector(values, shape).astype(dtype);
    const auto sum = testing::evaluate(
                         [](const std::vector<Tensor>& in) {
                           return ops::sum(in[0], {0, 1, 2}, false);
                         },
                         {x})
                         .to_vector<double>();
    const auto sum_to = testing::evaluate([](const std::vector<Tensor>& in) { return ops::sum_to(in[0], {13}); }, {x})
                            .to_vector<double>();
    REQUIRE(sum.size() == 13);
    REQUIRE(sum_to.size() == 13);
    for (std::size_t j = 0; j < 13; ++j) {
      const double tolerance = dtype == DType::float32 ? 1e-5 : 1e-12;
      REQUIRE(sum[j] == Approx(expected[j]).margin(tolerance));
      REQUIRE(sum_to[j] == Approx(expected[j]).margin(tolerance));
    }
  }
}

TEST_CASE("reductions split over threads: rows' folds bitwise the same, leading sums within rounding",
          "[ops][reduce][threads]") {
  // (4000, 1, 130): large enough for 15 workers. Over the trailing axis each row's fold is its own, so any
  // thread count gives the serial bits; over the leading axes (a bias's gradient) each worker sums its rows into a
  // partial of its own, added in worker order: close to the serial sum, and bitwise the same at a given count.
  Rng rng(61);
  const Shape shape{4000, 1, 130};
  for (DType dtype : {DType::float32, DType::float64}) {
    INFO(dtype_name(dtype));
    const Array x = testing::random_array(shape, rng, dtype, -2.0, 3.0);
    const std::vector<std::pair<const char*, testing::GraphFunction>> rows = {
        {"sum over rows", [](const std::vector<Tensor>& t) { return ops::sum(t[0], {2}, false); }},
        {"mean over rows", [](const std::vector<Tensor>& t) { return ops::mean(t[0], {2}, false); }},
        {"max over rows",
         [](const std::vector<Tensor>& t) {
           return ops::max(t[0], {1, 2}, false);
         }},
        {"min over rows", [](const std::vector<Tensor>& t) { return ops::min(t[0], {2}, true); }}};
    const std::vector<std::pair<const char*, testing::GraphFunction>> columns = {
        {"sum over leading axes",
         [](const std::vector<Tensor>& t) {
           return ops::sum(t[0], {0, 1}, false);
         }},
        {"mean over leading axes", [](const std::vector<Tensor>& t) { return ops::mean(t[0], {0}, true); }},
        {"sum_to", [](const std::vector<Tensor>& t) { return ops::sum_to(t[0], {130}); }}};
    const auto on = [&](int threads, const testing::GraphFunction& f) {
      const int saved = get_num_threads();
      set_num_threads(threads);
      const Array out = testing::evaluate(f, {x});
      set_num_threads(saved);
      return out;
    };
    for (const auto& [name, f] : rows) {
      const Array one = on(1, f);
      for (int threads : {2, 3, 7, 16}) {
        INFO(name << " at " << threads << " threads");
        CHECK(on(threads, f).bitwise_equal(one));
      }
    }
    // Kept, reduced, kept (a global pooling's mean over a channels_last image's spatial axes): each outer index's
    // fold is its own, so any thread count gives the serial bits, which are the sums in order.
    const Array image = testing::random_array({40, 9, 11, 67}, rng, dtype, -2.0, 3.0);
    for (const auto& [name, f] : std::vector<std::pair<const char*, testing::GraphFunction>>{
             {"sum over middle axes", [](const std::vector<Tensor>& t) { return ops::sum(t[0], {1, 2}, false); }},
             {"mean over middle axes", [](const std::vector<Tensor>& t) { return ops::mean(t[0], {1, 2}, true); }},
             {"max over middle axes", [](const std::vector<Tensor>& t) { return ops::max(t[0], {1, 2}, false); }},
             {"min over a middle axis", [](const std::vector<Tensor>& t) { return ops::min(t[0], {2}, false); }}}) {
      const auto image_on = [&](int threads) {
        const int saved = get_num_threads();
        set_num_threads(threads);
        const Array out = testing::evaluate(f, {image});
        set_num_threads(saved);
        return out;
      };
      const Array one = image_on(1);
      for (int threads : {2, 3, 16}) {
        INFO(name << " at " << threads << " threads");
        CHECK(image_on(threads).bitwise_equal(one));
      }
    }
    {
      const Array sums = testing::evaluate([](const std::vector<Tensor>& t) { return ops::sum(t[0], {1, 2}, false); },
                                           {image.astype(DType::float64)});
      const std::vector<double> values = image.astype(DType::float64).to_vector<double>();
      for (std::int64_t n = 0; n < 40; n += 13)
        for (std::int64_t c = 0; c < 67; c += 11) {
          double expected = 0.0;
          for (std::int64_t p = 0; p < 99; ++p) expected += values[static_cast<std::size_t>((n * 99 + p) * 67 + c)];
          CHECK(sums.flat(static_cast<std::size_t>(n * 67 + c)) == Approx(expected).margin(1e-12));
        }
    }
    for (const auto& [name, f] : columns) {
      const Array one = on(1, f);
      for (int threads : {2, 3, 7, 16}) {
        INFO(name << " at " << threads << " threads");
        const Array split = on(threads, f);
        CHECK(split.bitwise_equal(on(threads, f)));
        CHECK(testing::max_relative_difference(split.astype(DType::float64), one.astype(DType::float64)) <
              (dtype == DType::float32 ? 2e-5 : 1e-12));
      }
    }
    // Against sums in double, in order.
    const Array columns_sum = on(16, columns[0].second).astype(DType::float64);
    const std::vector<double> values = x.astype(DType::float64).to_vector<double>();
    for (std::int64_t c = 0; c < 130; ++c) {
      double expected = 0.0;
      for (std::int64_t r = 0; r < 4000; ++r) expected += values[static_cast<std::size_t>(r * 130 + c)];
      CHECK(columns_sum.flat(static_cast<std::size_t>(c)) ==
            Approx(expected).margin(dtype == DType::float32 ? 1e-3 : 1e-10));
    }
  }
}

TEST_CASE("max and min over runs and across them keep a NaN wherever it is", "[ops][reduce][nan]") {
  // NaN first, in the middle and last of the reduced axis, along the inner axis (one run) and the outer one.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t where : {std::size_t{0}, std::size_t{5}, std::size_t{11}}) {
    std::vector<float> values(12, 1.0f);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    values[where] = nan;
    const Array input = Array::from_vector(values, {3, 4});
    for (auto op : {ops::max, ops::min}) {
      INFO("NaN at " << where);
      const Array all = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], {}, false); }, {input});
      CHECK(std::isnan(all.flat(0)));
      const Array rows = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], {1}, false); }, {input});
      CHECK(std::isnan(rows.flat(where / 4)));
      const Array columns =
          testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], {0}, false); }, {input});
      CHECK(std::isnan(columns.flat(where % 4)));
    }
  }
}

TEST_CASE("l2_normalize: unit norm over the axes, a zero vector stays zero, gradients", "[ops][reduce][grad]") {
  const Array x = Array::from_vector(std::vector<double>{3, 4, 0, 0}, {2, 2});
  const std::vector<double> y =
      testing::evaluate([](const std::vector<Tensor>& t) { return ops::l2_normalize(t[0]); }, {x}).to_vector<double>();
  CHECK(y[0] == Approx(0.6).epsilon(1e-15));
  CHECK(y[1] == Approx(0.8).epsilon(1e-15));
  CHECK(y[2] == 0.0);
  CHECK(y[3] == 0.0);
  Rng rng(12);
  for (const ops::Axes& axes : {ops::Axes{-1}, ops::Axes{1, 2}, ops::Axes{0}}) {
    testing::GradcheckOptions o;
    o.label = "l2_normalize";
    const auto r = testing::gradcheck([&axes](const std::vector<Tensor>& t) { return ops::l2_normalize(t[0], axes); },
                                      {Shape{2, 3, 4}}, rng, o);
    INFO(r.worst_entry());
    CHECK(r.max_relative_error <= 1e-6);
  }
}
