#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;
using Ints = std::vector<std::int64_t>;

namespace {

// 0, 1, 2, ... as float32: every element distinct, so a misplaced copy shows.
Array iota(const Shape& shape) {
  Array array(shape, DType::float32);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, static_cast<double>(i));
  return array;
}

testing::GradcheckReport check(const testing::GraphFunction& f, const std::vector<Shape>& shapes, const char* label) {
  Rng rng(7);
  testing::GradcheckOptions options;
  options.label = label;
  return testing::gradcheck(f, shapes, rng, options);
}

// Random float64 inputs; input 0's first dimension is declared unknown (the batch).
testing::GradcheckReport check_unknown_batch(const testing::GraphFunction& f, const std::vector<Shape>& shapes,
                                             const char* label) {
  Rng rng(7);
  std::vector<Array> inputs;
  for (const Shape& shape : shapes) inputs.push_back(testing::random_array(shape, rng));
  testing::GradcheckOptions options;
  options.label = label;
  return testing::gradcheck(f, inputs, options, /*unknown_batch=*/true);
}

}  // namespace

// ---- gradients ------------------------------------------------------------------------------------------

TEST_CASE("reshape gradient matches central differences", "[ops][shape][grad]") {
  auto r = check([](const std::vector<Tensor>& x) { return ops::reshape(x[0], {4, -1}); }, {Shape{2, 3, 4}}, "reshape");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("reshape gradient with an unknown batch dimension", "[ops][shape][grad]") {
  auto kept = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        return ops::reshape(x[0], {-1, 3, 4});
      },
      {Shape{3, 12}}, "reshape unknown batch");
  INFO(kept.worst_entry());
  REQUIRE(kept.max_relative_error <= 1e-6);
  // The known target fixes the batch size at 4: the gradient must still get x's unknown shape back.
  // 4 x batch rows: contracted away by the matmul, because the harness's projection of the output
  // must have exactly the batch size in its unknown dimension.
  auto folded = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor rows = ops::reshape(x[0], {-1, 5});
        return ops::matmul(rows, ops::reshape(ops::reshape(rows, {-1, 4, 5}), {-1, 5}), true, false);
      },
      {Shape{3, 4, 5}}, "reshape unknown batch folded");
  INFO(folded.worst_entry());
  REQUIRE(folded.max_relative_error <= 1e-6);
  auto fixed = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        return ops::reshape(x[0], {2, 12});
      },
      {Shape{4, 6}}, "reshape unknown batch to known");
  INFO(fixed.worst_entry());
  REQUIRE(fixed.max_relative_error <= 1e-6);
}

TEST_CASE("transpose gradient matches central differences", "[ops][shape][grad]") {
  auto r = check(
      [](const std::vector<Tensor>& x) {
        return ops::transpose(x[0], {2, 0, 1});
      },
      {Shape{2, 3, 4}}, "transpose");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  auto reversed = check_unknown_batch([](const std::vector<Tensor>& x) { return ops::transpose(x[0]); },
                                      {Shape{2, 3, 4}}, "transpose reversed");
  INFO(reversed.worst_entry());
  REQUIRE(reversed.max_relative_error <= 1e-6);
}

TEST_CASE("flip reverses one axis, any axis, and its gradient is the flipped gradient", "[ops][shape][grad]") {
  const Array x = Array::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto flipped = [&](int axis) {
    return testing::evaluate([axis](const std::vector<Tensor>& t) { return ops::flip(t[0], axis); }, {x})
        .to_vector<double>();
  };
  CHECK(flipped(1) == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK(flipped(-1) == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK(flipped(0) == std::vector<double>{4, 5, 6, 1, 2, 3});
  for (int axis : {0, 1, 2, -1}) {
    auto r = check([axis](const std::vector<Tensor>& t) { return ops::flip(t[0], axis); }, {Shape{3, 4, 2}},
                   ("flip axis=" + std::to_string(axis)).c_str());
    INFO(r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
  auto batch = check_unknown_batch([](const std::vector<Tensor>& t) { return ops::flip(t[0], 1); }, {Shape{2, 5, 3}},
                                   "flip unknown batch");
  REQUIRE(batch.max_relative_error <= 1e-6);
  Graph graph;
  CHECK_THROWS_WITH(ops::flip(graph.placeholder({2, 3}, DType::float32, "x"), 2), Contains("axis 2 is out of range"));
}

TEST_CASE("concat gradient matches central differences", "[ops][shape][grad]") {
  auto r = check(
      [](const std::vector<Tensor>& x) {
        return ops::concat({x[0], x[1], x[2]}, 1);
      },
      {Shape{2, 3, 2}, Shape{2, 1, 2}, Shape{2, 4, 2}}, "concat axis=1");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  auto batch = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        return ops::concat({x[0], x[0] * x[0]}, -1);
      },
      {Shape{3, 2}}, "concat unknown batch");
  INFO(batch.worst_entry());
  REQUIRE(batch.max_relative_error <= 1e-6);
}

TEST_CASE("split gradient matches central differences", "[ops][shape][grad]") {
  auto equal = check(
      [](const std::vector<Tensor>& x) {
        const auto parts = ops::split(x[0], 3, 1);
        return parts[0] * parts[1] + parts[2];
      },
      {Shape{2, 6, 2}}, "split num_splits=3");
  INFO(equal.worst_entry());
  REQUIRE(equal.max_relative_error <= 1e-6);
  auto sized = check(
      [](const std::vector<Tensor>& x) {
        const auto parts = ops::split(x[0], Ints{1, 3, 2}, -1);
        return ops::concat({parts[2], parts[0], parts[1]}, -1);
      },
      {Shape{3, 6}}, "split sizes");
  INFO(sized.worst_entry());
  REQUIRE(sized.max_relative_error <= 1e-6);
}

TEST_CASE("slice gradient matches central differences", "[ops][shape][grad]") {
  auto r = check(
      [](const std::vector<Tensor>& x) {
        return ops::slice(x[0], {1, 0, 1}, {2, -1, 2});
      },
      {Shape{4, 5, 3}}, "slice");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  // batch - 1 rows: contracted away by the matmul, for the same reason as in the folded reshape check.
  auto batch = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor rows = ops::slice(x[0], {1, 2}, {-1, 3});
        return ops::matmul(rows, ops::slice(x[0], {1, 0}, {-1, 3}), true, false);
      },
      {Shape{4, 6}}, "slice unknown batch");
  INFO(batch.worst_entry());
  REQUIRE(batch.max_relative_error <= 1e-6);
}

TEST_CASE("broadcast_to gradient matches central differences", "[ops][shape][grad]") {
  auto r = check(
      [](const std::vector<Tensor>& x) {
        return ops::broadcast_to(x[0], Shape{2, 3, 4});
      },
      {Shape{3, 1}}, "broadcast_to");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  auto batch = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        return ops::broadcast_to(x[0], Shape{Shape::unknown, 2, 3});
      },
      {Shape{4, 1, 3}}, "broadcast_to unknown batch");
  INFO(batch.worst_entry());
  REQUIRE(batch.max_relative_error <= 1e-6);
}

TEST_CASE("squeeze and expand_dims gradients match central differences", "[ops][shape][grad]") {
  auto squeezed =
      check([](const std::vector<Tensor>& x) { return ops::squeeze(x[0]); }, {Shape{2, 1, 3, 1}}, "squeeze");
  INFO(squeezed.worst_entry());
  REQUIRE(squeezed.max_relative_error <= 1e-6);
  auto expanded = check_unknown_batch([](const std::vector<Tensor>& x) { return ops::expand_dims(x[0], -1); },
                                      {Shape{2, 3}}, "expand_dims");
  INFO(expanded.worst_entry());
  REQUIRE(expanded.max_relative_error <= 1e-6);
}

TEST_CASE("the gradient ops of slice and reshape have gradients too", "[ops][shape][grad]") {
  // The gradient of sum(y^3) is 3 y^2 placed back by SliceGrad / ReshapeLike; checking its own
  // derivative runs their backward rules.
  auto sliced = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::slice(x[0], {1, 2}, {2, -1});
        return gradients(ops::sum(y * y * y), {x[0]})[0];
      },
      {Shape{3, 5}}, "slice_grad");
  INFO(sliced.worst_entry());
  REQUIRE(sliced.max_relative_error <= 1e-6);
  auto reshaped = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::reshape(x[0], {2, 6});
        return gradients(ops::sum(y * y * y), {x[0]})[0];
      },
      {Shape{4, 3}}, "reshape_like");
  INFO(reshaped.worst_entry());
  REQUIRE(reshaped.max_relative_error <= 1e-6);
}

// ---- forward against plain loops -------------------------------------------------------------------------

TEST_CASE("transpose moves every element to its permuted index", "[ops][shape]") {
  const Array x = iota({2, 3, 4});
  const Array y = testing::evaluate([](const std::vector<Tensor>& t) { return ops::transpose(t[0], {2, 0, 1}); }, {x});
  REQUIRE(y.shape() == Shape{4, 2, 3});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        CHECK(y.flat(static_cast<std::size_t>(k * 6 + i * 3 + j)) ==
              x.flat(static_cast<std::size_t>(i * 12 + j * 4 + k)));
  const Array reversed = testing::evaluate([](const std::vector<Tensor>& t) { return ops::transpose(t[0]); }, {x});
  REQUIRE(reversed.shape() == Shape{4, 3, 2});
  CHECK(reversed.flat(1) == x.flat(12));
}

TEST_CASE("reshape, squeeze and expand_dims keep the bytes and change the shape", "[ops][shape]") {
  const Array x = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Array r = testing::evaluate([](const std::vector<Tensor>& t) { return ops::reshape(t[0], {3, 1, -1}); }, {x});
  CHECK(r.shape() == Shape{3, 1, 2});
  CHECK(r.to_vector<float>() == x.to_vector<float>());
  const Array s = testing::evaluate(
      [](const std::vector<Tensor>& t) { return ops::squeeze(ops::expand_dims(ops::expand_dims(t[0], 0), -1)); }, {x});
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.to_vector<float>() == x.to_vector<float>());
  const Array e = testing::evaluate([](const std::vector<Tensor>& t) { return ops::expand_dims(t[0], 1); }, {x});
  CHECK(e.shape() == Shape{2, 1, 3});
}

TEST_CASE("reshape, squeeze and expand_dims are aliases: no kernel runs", "[ops][shape]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 6}, DType::float32, "x");
  const Tensor y = ops::squeeze(ops::expand_dims(ops::reshape(x, {-1, 2, 3}), 1), {1});
  CHECK(y.shape() == Shape{Shape::unknown, 2, 3});
  Program program(graph, {y});
  const Array data = iota({4, 6});
  program.feed(x, data);
  program.run();
  CHECK(program.stats().num_aliases == 3);
  CHECK(program.stats().num_kernels == 0);
  CHECK(program.fetch(y).to_vector<float>() == data.to_vector<float>());
}

TEST_CASE("the alias ops' fallback kernels copy the bytes", "[ops][shape]") {
  const std::vector<double> source{1, 2, 3, 4, 5, 6};
  for (const char* name : {"kiln>Reshape", "kiln>Squeeze", "kiln>ExpandDims", "kiln>ReshapeLike"}) {
    INFO(name);
    const OpDef& op = op_registry().get(name);
    CHECK(op.sharing() == Sharing::alias);
    std::vector<double> target(6, 0.0);
    const Shape shape{2, 3};
    const Shape* shapes[] = {&shape, &shape};
    const void* inputs[] = {source.data(), source.data()};
    KernelContext k;
    k.inputs = inputs;
    k.input_shapes = shapes;
    k.num_inputs = 1;
    k.output = target.data();
    k.output_shape = &shape;
    op.kernel(DType::float64)(k);
    CHECK(target == source);
  }
}

TEST_CASE("concat joins blocks along the axis", "[ops][shape]") {
  const Array a = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Array b = Array::from_vector(std::vector<float>{7, 8, 9, 10}, {2, 2});
  const Array y = testing::evaluate([](const std::vector<Tensor>& t) { return ops::concat({t[0], t[1]}, 1); }, {a, b});
  CHECK(y.shape() == Shape{2, 5});
  CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 3, 7, 8, 4, 5, 6, 9, 10});
  const Array rows = testing::evaluate([](const std::vector<Tensor>& t) { return ops::concat({t[0], t[0]}, 0); }, {a});
  CHECK(rows.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("split returns consecutive slices", "[ops][shape]") {
  const Array x = iota({2, 6});
  for (int part = 0; part < 3; ++part) {
    const Array y = testing::evaluate(
        [part](const std::vector<Tensor>& t) {
          return ops::split(t[0], Ints{1, 2, 3}, 1)[static_cast<std::size_t>(part)];
        },
        {x});
    const int begin = part == 0 ? 0 : part == 1 ? 1 : 3;
    const int width = part + 1;
    REQUIRE(y.shape() == Shape{2, width});
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < width; ++j)
        CHECK(y.flat(static_cast<std::size_t>(i * width + j)) == x.flat(static_cast<std::size_t>(i * 6 + begin + j)));
  }
}

TEST_CASE("slice copies the block at begin, with -1 meaning to the end", "[ops][shape]") {
  const Array x = iota({4, 5, 3});
  const Array y = testing::evaluate(
      [](const std::vector<Tensor>& t) {
        return ops::slice(t[0], {1, 2, 0}, {2, -1, 2});
      },
      {x});
  REQUIRE(y.shape() == Shape{2, 3, 2});
  std::size_t flat = 0;
  for (int i = 1; i < 3; ++i)
    for (int j = 2; j < 5; ++j)
      for (int k = 0; k < 2; ++k) CHECK(y.flat(flat++) == x.flat(static_cast<std::size_t>(i * 15 + j * 3 + k)));
}

TEST_CASE("broadcast_to repeats along the size-1 and missing axes", "[ops][shape]") {
  const Array x = Array::from_vector(std::vector<float>{1, 2, 3}, {3, 1});
  const Array y = testing::evaluate(
      [](const std::vector<Tensor>& t) {
        return ops::broadcast_to(t[0], Shape{2, 3, 4});
      },
      {x});
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.flat(i) == x.flat((i / 4) % 3));
}

// ---- unknown batch dimensions ------------------------------------------------------------------------------

TEST_CASE("reshape keeps the batch dimension unknown", "[ops][shape]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 160}, DType::float32, "x");
  CHECK(ops::reshape(x, {-1, 40, 4}).shape() == Shape{Shape::unknown, 40, 4});
  CHECK(ops::reshape(x, {40, -1, 4}).shape() == Shape{40, Shape::unknown, 4});
  CHECK(ops::transpose(x).shape() == Shape{160, Shape::unknown});
  CHECK(ops::slice(x, {0, 10}, {-1, 20}).shape() == Shape{Shape::unknown, 20});
  CHECK(ops::squeeze(ops::expand_dims(x, 1)).shape() == Shape{Shape::unknown, 160});
}

TEST_CASE("reshape's keep_dim keeps a size known only when planned: heads split and merged", "[ops][shape]") {
  Graph graph;
  constexpr std::int64_t None = Shape::unknown, keep = ops::keep_dim;
  const Tensor x = graph.placeholder({None, None, 12}, DType::float32, "x");
  const Tensor heads = ops::reshape(x, {keep, keep, 3, -1});
  CHECK(heads.shape() == Shape{None, None, 3, 4});
  const Tensor merged = ops::reshape(heads, {keep, keep, -1});
  CHECK(merged.shape() == Shape{None, None, 12});
  CHECK(ops::reshape(x, {-1, keep, 3, 4}).shape() == Shape{None, None, 3, 4});
  Program program(graph, {heads, merged});
  for (const std::int64_t length : {5, 2}) {
    const Array data = iota({2, length, 12});
    program.feed(x, data);
    program.run();
    CHECK(program.fetch(heads).shape() == Shape{2, length, 3, 4});
    CHECK(program.fetch(merged).to_vector<float>() == data.to_vector<float>());
  }
  CHECK(program.stats().num_kernels == 0);  // aliases, as every reshape
}

TEST_CASE("reshape with keep_dim: gradient through a split and a merge", "[ops][shape][grad]") {
  auto r = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor heads = ops::reshape(x[0], {ops::keep_dim, ops::keep_dim, 2, 3});
        return ops::reshape(ops::transpose(heads, {0, 1, 3, 2}), {ops::keep_dim, ops::keep_dim, 6});
      },
      {Shape{3, 4, 6}}, "reshape keep_dim");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("reshape_like unfolds rows into like's leading dimensions, known only when planned", "[ops][shape][grad]") {
  Graph graph;
  constexpr std::int64_t None = Shape::unknown;
  const Tensor x = graph.placeholder({None, None, 4}, DType::float32, "x");
  const Tensor rows = ops::reshape(x, {-1, 4});
  const Tensor unfolded = ops::reshape_like(ops::slice(rows, {0, 0}, {-1, 3}), x, 2, {3});
  CHECK(unfolded.shape() == Shape{None, None, 3});
  Program program(graph, {unfolded});
  program.feed(x, iota({2, 5, 4}));
  program.run();
  const Array got = program.fetch(unfolded);
  REQUIRE(got.shape() == Shape{2, 5, 3});
  CHECK(got.flat(3) == 4.0);  // row 1's first element
  CHECK_THROWS_WITH(ops::reshape_like(rows, x, 4, {}), Contains("leading dimensions"));
  auto r = check_unknown_batch(
      [](const std::vector<Tensor>& in) {
        return ops::reshape_like(ops::reshape(in[0], {-1, 2}) * 2.0, in[0], 2, {2});
      },
      {Shape{3, 4, 2}}, "reshape_like leading");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("reshape can fold the batch into another axis and back", "[ops][shape]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 6, 8}, DType::float32, "x");
  const Tensor rows = ops::reshape(x, {-1, 8});
  CHECK(rows.shape() == Shape{Shape::unknown, 8});  // 6 x batch: fixed when the plan knows the batch
  const Tensor back = ops::reshape(rows, {-1, 6, 8});
  Program program(graph, {rows, back});
  const Array data = iota({3, 6, 8});
  program.feed(x, data);
  program.run();
  CHECK(program.fetch(rows).shape() == Shape{18, 8});
  CHECK(program.fetch(back).shape() == Shape{3, 6, 8});
  CHECK(program.fetch(back).to_vector<float>() == data.to_vector<float>());
}

TEST_CASE("slicing the batch axis gives a batch-dependent size, checked by the plan", "[ops][shape]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 2}, DType::float32, "x");
  const Tensor tail = ops::slice(x, {1, 0}, {-1, -1});
  CHECK(tail.shape() == Shape{Shape::unknown, 2});
  Program program(graph, {tail});
  program.feed(x, iota({3, 2}));
  program.run();
  CHECK(program.fetch(tail).to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  const Tensor head = ops::slice(x, {0, 0}, {4, -1});
  CHECK(head.shape() == Shape{4, 2});
  Program short_batch(graph, {head});
  short_batch.feed(x, iota({3, 2}));
  CHECK_THROWS_WITH(short_batch.run(), Contains("slice") && Contains("past the end") && Contains("(3, 2)"));
}

TEST_CASE("reshape of an unknown batch to a known shape works when the batch fits", "[ops][shape]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 6}, DType::float32, "x");
  const Tensor y = ops::reshape(x, {4, 6});
  CHECK(y.shape() == Shape{4, 6});
  Program program(graph, {y});
  program.feed(x, iota({4, 6}));
  program.run();
  CHECK(program.fetch(y).to_vector<float>() == iota({4, 6}).to_vector<float>());
  program.feed(x, iota({5, 6}));
  CHECK_THROWS_AS(program.run(), ShapeError);
}

// ---- shape errors -----------------------------------------------------------------------------------------

TEST_CASE("reshape rejects impossible targets", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 6}, DType::float32, "x");
  const Tensor fixed = graph.placeholder({2, 3}, DType::float32, "fixed");
  CHECK_THROWS_AS(ops::reshape(x, {4, 5}), ShapeError);
  CHECK_THROWS_WITH(ops::reshape(x, {4, 5}),
                    Contains("reshape 'reshape") && Contains("[4, 5]") && Contains("(None, 6)"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {4, -1}), Contains("reshape") && Contains("[4, -1]") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {-1, -1}), Contains("only one dimension may be -1") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {7}), Contains("6 elements do not fit 7") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {-3, 3}), Contains("negative dimension") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {2, 3, ops::keep_dim}), Contains("no axis 2 to keep"));
  CHECK_THROWS_WITH(ops::reshape(fixed, {ops::keep_dim, 4}), Contains("6 elements do not fit 8"));
}

TEST_CASE("transpose rejects a perm that is not a permutation of the axes", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 3, 4}, DType::float32, "x");
  CHECK_THROWS_AS(ops::transpose(x, {0, 1}), ShapeError);
  CHECK_THROWS_WITH(ops::transpose(x, {0, 1}), Contains("transpose 'transpose") && Contains("(2, 3, 4)"));
  CHECK_THROWS_WITH(ops::transpose(x, {0, 1, 1}), Contains("not a permutation") && Contains("(2, 3, 4)"));
  CHECK_THROWS_WITH(ops::permute(x, {0, 1, 3}), Contains("out of range") && Contains("(2, 3, 4)"));
}

TEST_CASE("concat rejects mismatched inputs and the batch axis", "[ops][shape][errors]") {
  Graph graph;
  const Tensor a = graph.placeholder({Shape::unknown, 3}, DType::float32, "a");
  const Tensor b = graph.placeholder({Shape::unknown, 4}, DType::float32, "b");
  const Tensor c = graph.placeholder({2, 3, 1}, DType::float32, "c");
  CHECK_THROWS_AS(ops::concat({a, b}, 0), ShapeError);
  CHECK_THROWS_WITH(ops::concat({a, b}, 0),
                    Contains("concat 'concat") && Contains("dimensions differ") && Contains("(None, 3), (None, 4)"));
  CHECK_THROWS_WITH(ops::concat({a, c}, 1), Contains("ranks differ") && Contains("(None, 3), (2, 3, 1)"));
  CHECK_THROWS_WITH(ops::concat({a, a}, 0), Contains("batch axis") && Contains("(None, 3), (None, 3)"));
  CHECK_THROWS_WITH(ops::concat({a, a}, 2), Contains("out of range") && Contains("(None, 3)"));
  CHECK_THROWS_AS(ops::concat({}, 0), ValueError);
}

TEST_CASE("split needs sizes that sum to the axis", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 6}, DType::float32, "x");
  CHECK_THROWS_AS(ops::split(x, Ints{2, 3}, 1), ShapeError);
  CHECK_THROWS_WITH(ops::split(x, Ints{2, 3}, 1),
                    Contains("split 'x'") && Contains("sum to 5") && Contains("(None, 6)"));
  CHECK_THROWS_WITH(ops::split(x, 4, 1), Contains("split 'x'") && Contains("4 equal parts") && Contains("(None, 6)"));
  CHECK_THROWS_WITH(ops::split(x, 2, 0), Contains("split 'x'") && Contains("(None, 6)"));
  CHECK(ops::split(x, 3, -1).size() == 3);
}

TEST_CASE("slice rejects blocks outside the input", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 5}, DType::float32, "x");
  CHECK_THROWS_AS(ops::slice(x, {0, 4}, {-1, 2}), ShapeError);
  CHECK_THROWS_WITH(ops::slice(x, {0, 4}, {-1, 2}),
                    Contains("slice 'slice") && Contains("past the end") && Contains("(None, 5)"));
  CHECK_THROWS_WITH(ops::slice(x, {0, 6}, {-1, -1}), Contains("begin 6 is past the end") && Contains("(None, 5)"));
  CHECK_THROWS_WITH(ops::slice(x, {0}, {-1}), Contains("one entry per axis") && Contains("(None, 5)"));
  CHECK_THROWS_WITH(ops::slice(x, {0, -1}, {-1, 1}), Contains("negative") && Contains("(None, 5)"));
}

TEST_CASE("broadcast_to rejects shapes x cannot stretch to", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({3, 2}, DType::float32, "x");
  CHECK_THROWS_AS(ops::broadcast_to(x, Shape{3, 4}), ShapeError);
  CHECK_THROWS_WITH(ops::broadcast_to(x, Shape{3, 4}),
                    Contains("broadcast_to 'broadcast_to") && Contains("[3, 4]") && Contains("(3, 2)"));
  CHECK_THROWS_WITH(ops::broadcast_to(x, Shape{2}), Contains("fewer axes") && Contains("(3, 2)"));
  CHECK_THROWS_WITH(ops::broadcast_to(x, Shape{Shape::unknown, 3, 2}), Contains("which x lacks") && Contains("(3, 2)"));
}

TEST_CASE("squeeze and expand_dims reject bad axes", "[ops][shape][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 1, 3}, DType::float32, "x");
  CHECK(ops::squeeze(x).shape() == Shape{Shape::unknown, 3});
  CHECK_THROWS_AS(ops::squeeze(x, {2}), ShapeError);
  CHECK_THROWS_WITH(ops::squeeze(x, {2}),
                    Contains("squeeze 'squeeze") && Contains("not 1") && Contains("(None, 1, 3)"));
  CHECK_THROWS_WITH(ops::squeeze(x, {0}), Contains("batch axis") && Contains("(None, 1, 3)"));
  CHECK_THROWS_WITH(ops::squeeze(x, {3}), Contains("out of range") && Contains("(None, 1, 3)"));
  CHECK_THROWS_AS(ops::expand_dims(x, 4), ShapeError);
  CHECK_THROWS_WITH(ops::expand_dims(x, -5), Contains("expand_dims 'expand_dims") && Contains("(None, 1, 3)"));
  CHECK(ops::expand_dims(x, 3).shape() == Shape{Shape::unknown, 1, 3, 1});
  CHECK(ops::expand_dims(x, -4).shape() == Shape{1, Shape::unknown, 1, 3});
}

TEST_CASE("pad puts zeros around x, its gradient is the middle, differentiable again", "[ops][shape][pad]") {
  Graph graph;
  const Tensor x = graph.constant(Array::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}));
  const Tensor y = ops::pad(x, {1, 0}, {0, 2});
  REQUIRE(y.shape() == Shape{3, 4});
  Program program(graph, {y});
  program.run();
  CHECK(program.fetch(y).to_vector<double>() == std::vector<double>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});

  auto r = check(
      [](const std::vector<Tensor>& t) {
        return ops::pad(t[0], {0, 2, 1}, {0, 1, 3});
      },
      {Shape{3, 2, 4}}, "pad");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  auto second = check(
      [](const std::vector<Tensor>& t) {
        const Tensor padded = ops::pad(t[0], {1, 1}, {2, 0});
        const Tensor grad = gradients(ops::sum(ops::square(padded)), {t[0]})[0];
        return ops::sum(ops::square(grad));
      },
      {Shape{2, 3}}, "pad second order");
  INFO(second.worst_entry());
  REQUIRE(second.max_relative_error <= 1e-6);

  Graph g;
  const Tensor batch = g.placeholder({Shape::unknown, 3}, DType::float32, "batch");
  CHECK(ops::pad(batch, {0, 1}, {0, 1}).shape() == Shape{Shape::unknown, 5});
  CHECK_THROWS_WITH(ops::pad(batch, {1, 0}, {0, 0}), Contains("axis 0 is unknown and cannot be padded"));
  CHECK_THROWS_WITH(ops::pad(batch, {0, -1}, {0, 0}), Contains("is negative"));
  CHECK_THROWS_WITH(ops::pad(batch, {0}, {0}), Contains("need one entry per axis"));
}

// ---- get_item: NumPy's basic indexing (strided slices) ---------------------------------------------------------

namespace {
// x[index] by NumPy's rules, computed by hand on a (4, 5, 3) iota for the cases below.
std::vector<float> values_of(const Array& y) { return y.to_vector<float>(); }
}  // namespace

TEST_CASE("get_item follows NumPy: positions drop axes, slices keep them, steps and negatives",
          "[ops][shape][get_item]") {
  using ops::Index;
  using ops::Slice;
  const Array x = iota({4, 5, 3});
  auto item = [&](const std::vector<Index>& index) {
    return testing::evaluate([&](const std::vector<Tensor>& t) { return ops::get_item(t[0], index); }, {x});
  };
  auto at = [&](int i, int j, int k) { return static_cast<float>(i * 15 + j * 3 + k); };
  // x[:, -1]: the last step of every row.
  const Array last = item({Slice{}, -1});
  REQUIRE(last.shape() == Shape{4, 3});
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 3; ++k) CHECK(last.flat(static_cast<std::size_t>(i * 3 + k)) == at(i, 4, k));
  // x[1:4:2, ::-2, 2]: a step, a negative step, a position.
  const Array strided = item({Slice{1, 4, 2}, Slice{std::nullopt, std::nullopt, -2}, 2});
  REQUIRE(strided.shape() == Shape{2, 3});
  CHECK(values_of(strided) ==
        std::vector<float>{at(1, 4, 2), at(1, 2, 2), at(1, 0, 2), at(3, 4, 2), at(3, 2, 2), at(3, 0, 2)});
  // x[..., None, 1:]: an ellipsis and a new axis.
  const Array expanded = item({Index::ellipsis(), Index::new_axis(), Slice{1}});
  REQUIRE(expanded.shape() == Shape{4, 5, 1, 2});
  CHECK(expanded.flat(0) == at(0, 0, 1));
  CHECK(expanded.flat(expanded.size() - 1) == at(3, 4, 2));
  // Out-of-range slice bounds clamp, as in Python; an empty slice has size 0.
  CHECK(item({Slice{-100, 100}}).shape() == Shape{4, 5, 3});
  CHECK(item({Slice{3, 1}}).shape() == Shape{0, 5, 3});
  // x[-1, -1, -1] is a scalar.
  const Array corner = item({-1, -1, -1});
  REQUIRE(corner.shape() == Shape{});
  CHECK(corner.flat(0) == at(3, 4, 2));
  // The same as ops::slice where both apply.
  const Array sliced = testing::evaluate(
      [](const std::vector<Tensor>& t) {
        return ops::slice(t[0], {1, 2, 0}, {2, -1, 2});
      },
      {x});
  CHECK(item({Slice{1, 3}, Slice{2}, Slice{0, 2}}).bitwise_equal(sliced));
}

TEST_CASE("get_item gradient matches central differences, steps negative or not", "[ops][shape][get_item][grad]") {
  using ops::Slice;
  auto r = check(
      [](const std::vector<Tensor>& x) {
        return ops::get_item(x[0], {Slice{1, std::nullopt, 2}, -2, Slice{std::nullopt, std::nullopt, -1}});
      },
      {Shape{5, 4, 3}}, "get_item");
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
  // The gradient op's own gradient (second order), on an unknown batch with a negative position.
  auto second = check_unknown_batch(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::get_item(x[0], {Slice{}, -1});
        const std::vector<Tensor> dx = gradients(ops::sum(ops::mul(y, y)), {x[0]});
        return ops::mul(dx[0], x[0]);
      },
      {Shape{3, 4}}, "get_item second order");
  INFO(second.worst_entry());
  REQUIRE(second.max_relative_error <= 1e-6);
}

TEST_CASE("get_item on an unknown axis resolves negative positions when a plan knows the size",
          "[ops][shape][get_item]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, Shape::unknown, 2}, DType::float32, "x");
  const Tensor last = ops::get_item(x, {ops::Slice{}, -1});
  CHECK(last.shape() == Shape{Shape::unknown, 2});
  Program program(graph, {last});
  program.feed(x, iota({2, 3, 2}));
  program.run();
  CHECK(program.fetch(last).to_vector<float>() == std::vector<float>{4, 5, 10, 11});
  program.feed(x, iota({1, 4, 2}));  // another length, another plan
  program.run();
  CHECK(program.fetch(last).to_vector<float>() == std::vector<float>{6, 7});
  const Tensor fifth = ops::get_item(x, {ops::Slice{}, 4});
  Program short_sequence(graph, {fifth});
  short_sequence.feed(x, iota({2, 3, 2}));
  CHECK_THROWS_WITH(short_sequence.run(), Contains("index 4 is out of range for size 3"));
}

TEST_CASE("get_item rejects what NumPy rejects", "[ops][shape][get_item][errors]") {
  using ops::Index;
  using ops::Slice;
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 5}, DType::float32, "x");
  CHECK_THROWS_AS(ops::get_item(x, {0, 1, 2}), ShapeError);
  CHECK_THROWS_WITH(ops::get_item(x, {0, 1, 2}), Contains("too many indices") && Contains("(None, 5)"));
  CHECK_THROWS_WITH(ops::get_item(x, {Index::ellipsis(), Index::ellipsis()}), Contains("one ellipsis"));
  CHECK_THROWS_WITH(ops::get_item(x, {Slice{}, Slice{0, 5, 0}}), Contains("step is 0"));
  CHECK_THROWS_WITH(ops::get_item(x, {Slice{}, 5}), Contains("index 5 is out of range for size 5"));
  CHECK_THROWS_WITH(ops::get_item(x, {Slice{}, -6}), Contains("index -6 is out of range for size 5"));
  // index_attributes and index_from_attributes are each other's inverse.
  const std::vector<Index> index = {Slice{1, std::nullopt, -1}, Index::new_axis(), -3, Index::ellipsis()};
  const std::vector<Index> back = ops::index_from_attributes(ops::index_attributes(index));
  REQUIRE(back.size() == index.size());
  for (std::size_t i = 0; i < index.size(); ++i) {
    CHECK(back[i].kind() == index[i].kind());
    CHECK(back[i].position() == index[i].position());
    CHECK(back[i].slice().start == index[i].slice().start);
    CHECK(back[i].slice().stop == index[i].slice().stop);
    CHECK(back[i].slice().step == index[i].slice().step);
  }
}
