#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
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
using Catch::Contains;

namespace {

// Keras's pooling windows written out: "valid" windows that fit; "same" ceil(in / stride) windows, with
// half the missing positions (rounded down) before the input. Padded positions are skipped, so the
// average divides by the positions inside the input.
struct Axis {
  std::int64_t in, size, stride, before, out;
};
Axis axis_of(std::int64_t in, std::int64_t size, std::int64_t stride, const std::string& padding) {
  if (padding == "valid") return {in, size, stride, 0, (in - size) / stride + 1};
  const std::int64_t out = (in + stride - 1) / stride;
  return {in, size, stride, std::max<std::int64_t>((out - 1) * stride + size - in, 0) / 2, out};
}

Array reference_pool(const Array& x, const ops::PoolOptions& o, bool max) {
  const bool last = o.data_format == "channels_last";
  const Shape& s = x.shape();
  const bool two_d = s.rank() == 4;
  const std::int64_t n = s[0], c = last ? s[s.rank() - 1] : s[1];
  const std::int64_t h = two_d ? s[last ? 1 : 2] : 1, w = s[last ? s.rank() - 2 : s.rank() - 1];
  const std::vector<std::int64_t> strides = o.strides.empty() ? o.pool_size : o.strides;
  const Axis rows = two_d ? axis_of(h, o.pool_size[0], strides[0], o.padding) : Axis{1, 1, 1, 0, 1};
  const Axis cols = axis_of(w, o.pool_size.back(), strides.back(), o.padding);
  auto at = [last](std::int64_t b, std::int64_t ch, std::int64_t i, std::int64_t j, std::int64_t C, std::int64_t H,
                   std::int64_t W) {
    return static_cast<std::size_t>(last ? ((b * H + i) * W + j) * C + ch : ((b * C + ch) * H + i) * W + j);
  };
  const Shape out_shape = two_d ? (last ? Shape{n, rows.out, cols.out, c} : Shape{n, c, rows.out, cols.out})
                                : (last ? Shape{n, cols.out, c} : Shape{n, c, cols.out});
  Array y = Array::full(out_shape, 0.0, DType::float64);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t oi = 0; oi < rows.out; ++oi)
        for (std::int64_t oj = 0; oj < cols.out; ++oj) {
          double best = -std::numeric_limits<double>::infinity(), total = 0;
          int count = 0;
          for (std::int64_t ki = 0; ki < rows.size; ++ki)
            for (std::int64_t kj = 0; kj < cols.size; ++kj) {
              const std::int64_t i = oi * rows.stride - rows.before + ki, j = oj * cols.stride - cols.before + kj;
              if (i < 0 || i >= h || j < 0 || j >= w) continue;
              const double v = x.flat(at(b, ch, i, j, c, h, w));
              best = std::max(best, v);
              total += v;
              ++count;
            }
          y.set_flat(at(b, ch, oi, oj, c, rows.out, cols.out), max ? best : total / count);
        }
  return y;
}

struct PoolCase {
  Shape x;
  ops::PoolOptions options;
};

std::vector<PoolCase> grid() {
  std::vector<PoolCase> cases;
  for (const bool two_d : {false, true})
    for (const bool last : {true, false})
      for (const std::int64_t size : {1, 2, 3})
        for (const std::int64_t stride : {1, 2, 3})
          for (const char* padding : {"valid", "same"}) {
            PoolCase c;
            c.x = two_d ? (last ? Shape{2, 5, 7, 3} : Shape{2, 3, 5, 7}) : (last ? Shape{2, 7, 3} : Shape{2, 3, 7});
            c.options.pool_size =
                two_d ? std::vector<std::int64_t>{size, size == 3 ? 2 : size} : std::vector<std::int64_t>{size};
            c.options.strides = two_d ? std::vector<std::int64_t>{stride, 1} : std::vector<std::int64_t>{stride};
            c.options.padding = padding;
            c.options.data_format = last ? "channels_last" : "channels_first";
            cases.push_back(c);
          }
  return cases;
}

std::string label(const PoolCase& c) {
  std::string text = c.x.to_string() + " pool";
  for (auto s : c.options.pool_size) text += " " + std::to_string(s);
  text += " strides";
  for (auto s : c.options.strides) text += " " + std::to_string(s);
  return text + " " + c.options.padding + " " + c.options.data_format;
}

}  // namespace

TEST_CASE("max_pool and avg_pool match the nested-loop reference over a grid", "[ops][pool]") {
  Rng rng(21);
  for (const PoolCase& c : grid()) {
    INFO(label(c));
    const Array x = testing::random_array(c.x, rng);
    for (const bool max : {true, false}) {
      const auto f = [&](const std::vector<Tensor>& t) {
        return max ? ops::max_pool(t[0], c.options) : ops::avg_pool(t[0], c.options);
      };
      const Array expected = reference_pool(x, c.options, max);
      const Array actual = testing::evaluate(f, {x});
      REQUIRE(actual.shape() == expected.shape());
      CHECK(testing::max_relative_difference(actual, expected) < 1e-12);
      CHECK(testing::max_relative_difference(testing::evaluate(f, {x.astype(DType::float32)}).astype(DType::float64),
                                             expected) < 1e-6);
    }
  }
}

TEST_CASE("pooling gradients match central differences", "[ops][pool][grad]") {
  Rng rng(22);
  const std::vector<PoolCase> cases = grid();
  for (std::size_t i = 0; i < cases.size(); i += 5) {
    const PoolCase& c = cases[i];
    for (const bool max : {true, false}) {
      testing::GradcheckOptions o;
      o.label = std::string(max ? "max_pool " : "avg_pool ") + label(c);
      const auto r = testing::gradcheck(
          [&](const std::vector<Tensor>& t) {
            return max ? ops::max_pool(t[0], c.options) : ops::avg_pool(t[0], c.options);
          },
          {c.x}, rng, o);
      INFO(o.label << ": " << r.worst_entry());
      REQUIRE(r.max_relative_error <= 1e-6);
    }
  }
}

TEST_CASE("avg_pool's gradient is differentiable again, max_pool's gradient with an unknown batch",
          "[ops][pool][grad]") {
  Rng rng(23);
  ops::PoolOptions o;
  o.pool_size = {3, 2};
  o.strides = {2, 1};
  o.padding = "same";
  testing::GradcheckOptions g;
  g.label = "avg_pool second order";
  const auto second = testing::gradcheck(
      [&](const std::vector<Tensor>& t) {
        const Tensor grad = gradients(ops::sum(ops::square(ops::avg_pool(t[0], o))), {t[0]})[0];
        return ops::sum(ops::square(grad));
      },
      {testing::random_array({2, 5, 4, 2}, rng)}, g);
  INFO(second.worst_entry());
  CHECK(second.max_relative_error <= 1e-6);
  g.label = "max_pool unknown batch";
  const auto batch = testing::gradcheck([&](const std::vector<Tensor>& t) { return ops::max_pool(t[0], o); },
                                        {testing::random_array({3, 5, 4, 2}, rng)}, g, /*unknown_batch=*/true);
  INFO(batch.worst_entry());
  CHECK(batch.max_relative_error <= 1e-6);
}

TEST_CASE("max_pool: NaN propagates, and ties send the gradient to the first maximum", "[ops][pool]") {
  Graph graph;
  const Tensor x = graph.variable("x", Array::from_vector(std::vector<double>{1, 3, 3, std::nan(""), 2, 0}, {1, 6, 1}));
  ops::PoolOptions o;
  o.pool_size = {3};
  const Tensor y = ops::max_pool(x, o);
  const Tensor grad = gradients(ops::sum(y), {x})[0];
  Program program(graph, {y, grad});
  program.run();
  const Array values = program.fetch(y), dx = program.fetch(grad);
  CHECK(values.flat(0) == 3);
  CHECK(std::isnan(values.flat(1)));
  CHECK(dx.to_vector<double>() == std::vector<double>{0, 1, 0, 1, 0, 0});
}

TEST_CASE("max_pool over many channels (vectors and a tail) matches the reference and keeps NaNs", "[ops][pool]") {
  // channels_last with 37 channels: two vectors of 16 floats (or four of 8 doubles) and a scalar tail; NaNs in a
  // few windows at vector and tail channels; windows that overlap and reach into the padding.
  Rng rng(71);
  // The reference's std::max drops NaNs: it runs on a copy with +inf where x has NaN, whose windows must give NaN.
  Array x = testing::random_array({2, 6, 7, 37}, rng);
  Array marked = testing::random_array({2, 6, 7, 37}, rng);
  for (std::size_t i = 0; i < x.size(); ++i) marked.set_flat(i, x.flat(i));
  for (const std::size_t at : {std::size_t{5}, std::size_t{37 * 9 + 20}, std::size_t{37 * 30 + 36}, std::size_t{37 * 50}}) {
    x.set_flat(at, std::nan(""));
    marked.set_flat(at, std::numeric_limits<double>::infinity());
  }
  for (const char* padding : {"valid", "same"})
    for (const std::int64_t stride : {1, 2}) {
      ops::PoolOptions o;
      o.pool_size = {3, 2};
      o.strides = {stride, 2};
      o.padding = padding;
      INFO(padding << " stride " << stride);
      const Array expected = reference_pool(marked, o, true);
      for (const DType dtype : {DType::float64, DType::float32}) {
        const Array actual =
            testing::evaluate([&o](const std::vector<Tensor>& t) { return ops::max_pool(t[0], o); }, {x.astype(dtype)})
                .astype(DType::float64);
        REQUIRE(actual.shape() == expected.shape());
        std::size_t nans = 0;
        for (std::size_t i = 0; i < expected.size(); ++i) {
          if (std::isinf(expected.flat(i))) {
            ++nans;
            INFO("element " << i << " of " << dtype_name(dtype) << ": " << actual.flat(i));
            CHECK(std::isnan(actual.flat(i)));
          } else {
            CHECK(actual.flat(i) == Approx(expected.flat(i)).epsilon(1e-6));
          }
        }
        CHECK(nans > 0);
      }
    }
}

TEST_CASE("pooling refuses bad shapes and options with the shapes in the message", "[ops][pool][errors]") {
  Graph g;
  const Tensor x = g.placeholder({Shape::unknown, 4, 6, 2}, DType::float32, "x");
  ops::PoolOptions o;
  o.pool_size = {5, 2};
  CHECK_THROWS_WITH(ops::max_pool(x, o), Contains("larger than the input's (4, 6)") && Contains("(None, 4, 6, 2)"));
  o.pool_size = {2};
  CHECK_THROWS_WITH(ops::avg_pool(x, o), Contains("needs inputs of rank 3"));
  o.pool_size = {2, 0};
  CHECK_THROWS_WITH(ops::max_pool(x, o), Contains("must be positive"));
  o.pool_size = {2, 2};
  o.strides = {0};
  CHECK_THROWS_WITH(ops::max_pool(x, o), Contains("strides must be positive"));
  o.strides = {};
  o.padding = "causal";
  CHECK_THROWS_WITH(ops::max_pool(x, o), Contains("only for 1-D"));
  ops::PoolOptions causal;
  causal.pool_size = {2};
  causal.padding = "causal";
  CHECK_THROWS_WITH(ops::max_pool(g.placeholder({Shape::unknown, 6, 2}, DType::float32, "steps"), causal),
                    Contains("padding must be 'valid' or 'same' for pooling"));
  o.padding = "valid";
  o.data_format = "channels_sideways";
  CHECK_THROWS_AS(ops::max_pool(x, o), ShapeError);
  CHECK(ops::pool_output_shape({Shape::unknown, 4, 6, 2}, ops::PoolOptions{{2, 2}, {}, "valid", "channels_last"}) ==
        Shape{Shape::unknown, 2, 3, 2});
}
