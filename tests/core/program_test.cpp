#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/program.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;

TEST_CASE("the planner reuses dead buffers, runs elementwise ops in place and aliases reshapes", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 64}, DType::float32, "x");
  const Tensor w = graph.variable("w", Array::full({64, 64}, 0.01));
  Tensor h = x;
  for (int i = 0; i < 8; ++i) h = ops::tanh(ops::matmul(h, w));
  const Tensor out = ops::reshape(h, {-1, 8, 8});
  Program program(graph, {out});
  program.feed(x, Array::full({32, 64}, 0.1));
  program.run();
  const PlanStats stats = program.stats();
  CHECK(stats.num_kernels == 16);
  CHECK(stats.num_aliases == 1);
  CHECK(stats.num_inplace == 8);
  // Eight layer outputs, but only two are ever alive at once.
  CHECK(stats.unplanned_bytes == 8 * 32 * 64 * 4);
  CHECK(stats.arena_bytes == 2 * 32 * 64 * 4);
  CHECK(program.view(out).shape() == Shape({32, 8, 8}));
}

namespace {
// An identity op whose plan-time hook records what the planner gave it.
std::vector<Shape> prepared_shapes;
Shape same_shape(const InferContext& context) { return context.input_shape(0); }
void copy_kernel(const KernelContext& context) {
  std::memcpy(context.output, context.inputs[0], context.output_size() * dtype_size(context.node->dtype));
}
void record_prepare(const std::vector<Shape>& inputs, const Shape& output, const Attributes&, DType dtype) {
  CHECK(inputs.size() == 1);
  CHECK(output == inputs[0]);
  CHECK(dtype == DType::float32);
  prepared_shapes.push_back(inputs[0]);
}
KILN_REGISTER_OP(OpDef("test>Prepared")
                     .infer_shape(same_shape)
                     .forward(copy_kernel, copy_kernel)
                     .prepare(record_prepare)
                     .not_differentiable("a test of the prepare hook"));
}  // namespace

namespace {
// Elements [start, start + count) of a flat input, as a view (Sharing::alias at an offset): how an op's parts of
// one flat buffer are handed out.
Shape part_shape(const InferContext& context) { return Shape{context.attributes().get_int("count")}; }
std::int64_t part_start(const std::vector<Shape>&, const Attributes& attributes) { return attributes.get_int("start"); }
void part_copy(const KernelContext& context) {
  const std::size_t size = dtype_size(context.node->dtype);
  std::memcpy(context.output,
              static_cast<const unsigned char*>(context.inputs[0]) +
                  static_cast<std::size_t>(context.attributes().get_int("start")) * size,
              context.output_size() * size);
}
KILN_REGISTER_OP(OpDef("test>Part")
                     .attributes({"start", "count"})
                     .infer_shape(part_shape)
                     .forward(part_copy, part_copy)
                     .sharing(Sharing::alias)
                     .alias_offset(part_start)
                     .not_differentiable("a test of alias offsets"));

Tensor part(const Tensor& x, std::int64_t start, std::int64_t count) {
  return x.graph().add_op("test>Part", {x}, Attributes().set("start", start).set("count", count), "part");
}
}  // namespace

TEST_CASE("the planner aliases a part of a buffer at its offset and runs ops in place on it there", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({6}, DType::float64, "x");
  const Tensor h = ops::tanh(x);
  const Tensor head = ops::square(part(h, 0, 2));         // a reader of the head: h still has readers after it
  const Tensor tail = ops::exp(ops::neg(part(h, 2, 4)));  // h's last readers: in place, at element 2 of h
  Program program(graph, {head, tail});
  const std::vector<double> values = {-1.5, -0.5, 0.25, 0.75, 1.25, 2.0};
  program.feed(x, Array::from_vector(values, {6}));
  program.run();
  const PlanStats stats = program.stats();
  CHECK(stats.num_aliases == 2);
  CHECK(stats.num_inplace == 2);  // neg and exp
  for (std::size_t i = 0; i < 2; ++i) CHECK(program.view(head).flat(i) == std::tanh(values[i]) * std::tanh(values[i]));
  for (std::size_t i = 0; i < 4; ++i) CHECK(program.view(tail).flat(i) == std::exp(-std::tanh(values[i + 2])));

  const Tensor outside = part(h, 3, 4);  // elements 3 to 6 of 6
  Program bad(graph, {outside});
  bad.feed(x, Array::from_vector(values, {6}));
  REQUIRE_THROWS_WITH(bad.run(), Contains("test>Part") && Contains("(4,)") && Contains("element 3") &&
                                     Contains("(6,)") && Contains("outside"));
}

namespace {
// A copy that records how much of its output the planner says is read (KernelContext::read_output_elements).
std::vector<std::int64_t> read_extents;
void recording_copy(const KernelContext& context) {
  read_extents.push_back(context.read_output_elements);
  copy_kernel(context);
}
KILN_REGISTER_OP(OpDef("test>RecordsReads")
                     .infer_shape(same_shape)
                     .forward(recording_copy, recording_copy)
                     .not_differentiable("a test of read extents"));
}  // namespace

TEST_CASE("the planner tells a kernel how much of its output parts and other readers read", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({6}, DType::float64, "x");
  const Tensor r = graph.add_op("test>RecordsReads", {x}, Attributes(), "recorded");
  const Tensor first_two = ops::square(part(r, 0, 2));
  const Tensor middle = ops::neg(part(part(r, 1, 4), 1, 2));  // a part of a part: elements 2 and 3
  const Tensor everything = ops::exp(r);
  const std::vector<double> values = {-1.5, -0.5, 0.25, 0.75, 1.25, 2.0};
  auto read_by = [&](const std::vector<Tensor>& fetches) {
    read_extents.clear();
    Program program(graph, fetches);
    program.feed(x, Array::from_vector(values, {6}));
    program.run();
    REQUIRE(read_extents.size() == 1);
    return read_extents[0];
  };
  CHECK(read_by({first_two}) == 2);
  CHECK(read_by({middle}) == 4);
  CHECK(read_by({first_two, middle}) == 4);
  CHECK(read_by({middle, everything}) == 6);  // exp reads all of it
  CHECK(read_by({r}) == 6);                   // and so does a fetch
  CHECK(read_by({part(r, 0, 1), part(r, 5, 1)}) == 6);
}

TEST_CASE("the planner runs each op's prepare hook once per planned batch size, on concrete shapes",
          "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 4}, DType::float32, "x");
  const Tensor y = graph.add_op("test>Prepared", {x}, Attributes(), "prepared");
  Program program(graph, {y});
  prepared_shapes.clear();
  for (std::int64_t rows : {3, 3, 5, 3}) {
    program.feed(x, Array::full({rows, 4}, 1.5));
    program.run();
    CHECK(program.view(y).bitwise_equal(Array::full({rows, 4}, 1.5)));
  }
  CHECK(prepared_shapes == std::vector<Shape>{Shape{3, 4}, Shape{5, 4}});
}

TEST_CASE("a program plans once per batch size and gives the same values for each", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float64, "x");
  const Tensor w = graph.variable("w", Array::from_vector(std::vector<double>{1, 2, 3}, {3, 1}));
  const Tensor y = ops::matmul(x, w);
  Program program(graph, {y});
  const Array big = Array::from_vector(std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});
  program.feed(x, big);
  program.run();
  CHECK(program.fetch(y).to_vector<double>() == std::vector<double>{1, 2, 3});
  const Array small = Array::from_vector(std::vector<double>{1, 1, 1}, {1, 3});
  program.feed(x, small);
  program.run();
  CHECK(program.fetch(y).to_vector<double>() == std::vector<double>{6});
  CHECK(program.stats().batch_size == 1);
}

TEST_CASE("feeding mistakes are typed errors naming the placeholder", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float32, "x");
  const Tensor z = graph.placeholder({Shape::unknown, 3}, DType::float32, "z");
  const Tensor y = ops::add(x, z);
  Program program(graph, {y});
  CHECK_THROWS_WITH(program.feed(x, Array({2, 4})), Catch::Contains("placeholder 'x'") && Catch::Contains("(2, 4)"));
  CHECK_THROWS_AS(program.feed(x, Array({2, 3}, DType::float64)), DTypeError);
  program.feed(x, Array({2, 3}));
  CHECK_THROWS_WITH(program.run(), Catch::Contains("placeholder 'z' was not fed"));
  program.feed(z, Array({5, 3}));
  CHECK_THROWS_WITH(program.run(), Catch::Contains("batch sizes disagree"));
  program.feed(x, Array({0, 3}));
  program.feed(z, Array({0, 3}));
  CHECK_THROWS_WITH(program.run(), Catch::Contains("empty batch"));
  CHECK_THROWS_AS(program.fetch(x), Error);
}

TEST_CASE("updates write variables after the step, and a step reads the old values", "[core][program]") {
  Graph graph;
  const Tensor w = graph.variable("w", Array::full({2}, 1.0, DType::float64));
  const Tensor doubled = ops::scale(w, 2.0);
  Program program(graph, {doubled}, {{w, doubled}});
  program.run();
  CHECK(program.fetch(doubled).to_vector<double>() == std::vector<double>{2, 2});
  CHECK(graph.value(w).to_vector<double>() == std::vector<double>{2, 2});
  program.run();
  CHECK(graph.value(w).to_vector<double>() == std::vector<double>{4, 4});
  CHECK(program.run_count() == 2);
}

TEST_CASE("an in-place op writes a variable straight into it when it alone reads it and the step updates it",
          "[core][program]") {
  // A running total: total := total + x, nothing else reads total: Add writes into the variable, no copy after.
  Graph graph;
  const Tensor total = graph.variable("total", Array::full({3}, 0.0, DType::float64), false);
  const Tensor x = graph.placeholder({3}, DType::float64, "x");
  const Tensor sum = total + x;
  Program program(graph, {sum}, {{total, sum}});
  program.feed(x, Array::from_vector(std::vector<double>{1, 2, 3}, Shape{3}));
  program.run();
  program.run();
  CHECK(graph.value(total).to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(program.view(sum).raw() == graph.value(total).raw());  // the fetch is the variable's own memory
  CHECK(program.stats().num_inplace == 1);

  // Read by another op too: that reader sees the value from before the step; the update is a copy after it.
  Graph other;
  const Tensor t = other.variable("t", Array::full({3}, 0.0, DType::float64), false);
  const Tensor y = other.placeholder({3}, DType::float64, "y");
  const Tensor next = t + y;
  const Tensor before = ops::scale(t, 1.0);
  Program both(other, {next, before}, {{t, next}});
  both.feed(y, Array::from_vector(std::vector<double>{1, 1, 1}, Shape{3}));
  both.run();
  both.run();
  CHECK(both.fetch(before).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(both.fetch(next).to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK(other.value(t).to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK(both.view(next).raw() != other.value(t).raw());

  // A key/value cache (generation's): each step writes its row into the cache variable in place.
  Graph decode;
  const Tensor cache = decode.variable("cache", Array::full({1, 4, 2}, 0.0, DType::float64), false);
  const Tensor row = decode.placeholder({1, 1, 2}, DType::float64, "row");
  const Tensor start = decode.placeholder({1}, DType::float64, "start");
  const Tensor written = ops::write_steps(cache, row, start);
  const Tensor sums = ops::sum(written, {1});  // (an attention would read the written cache)
  Program step(decode, {sums}, {{cache, written}});
  for (int s = 0; s < 3; ++s) {
    step.feed(row, Array::from_vector(std::vector<double>{1.0 + s, 10.0 + s}, Shape{1, 1, 2}));
    step.feed(start, Array::from_vector(std::vector<double>{static_cast<double>(s)}, Shape{1}));
    step.run();
  }
  CHECK(decode.value(cache).to_vector<double>() == std::vector<double>{1, 10, 2, 11, 3, 12, 0, 0});
  CHECK(step.fetch(sums).to_vector<double>() == std::vector<double>{6, 33});
}

namespace {
// A short training run, start to finish, returning the final weights.
Array train(std::uint64_t seed) {
  Rng rng(seed);
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 16}, DType::float32, "x");
  const Tensor y = graph.placeholder({Shape::unknown, 4}, DType::float32, "y");
  const Tensor w1 = graph.variable("w1", testing::random_array({16, 32}, rng, DType::float32, -0.3, 0.3));
  const Tensor w2 = graph.variable("w2", testing::random_array({32, 4}, rng, DType::float32, -0.3, 0.3));
  const Tensor hidden = ops::dropout(ops::relu(ops::matmul(x, w1)), 0.2, seed);
  const Tensor loss = ops::mean_squared_error(y, ops::matmul(hidden, w2));
  const auto grads = gradients(loss, {w1, w2});
  Program program(graph, {loss}, {{w1, w1 - grads[0] * 0.1}, {w2, w2 - grads[1] * 0.1}});
  const Array inputs = testing::random_array({64, 16}, rng, DType::float32);
  const Array targets = testing::random_array({64, 4}, rng, DType::float32);
  for (int step = 0; step < 20; ++step) {
    program.feed(x, inputs);
    program.feed(y, targets);
    program.run();
  }
  Array result = graph.value(w1).copy();
  return result;
}
}  // namespace

TEST_CASE("the same seed gives bitwise identical training", "[core][program][determinism]") {
  const Array first = train(5);
  const Array second = train(5);
  CHECK(first.bitwise_equal(second));
  CHECK_FALSE(first.bitwise_equal(train(6)));
}

TEST_CASE("a program plans once per batch size and sequence length, and reuses each plan", "[core][program]") {
  Graph graph;
  constexpr std::int64_t None = Shape::unknown;
  const Tensor x = graph.placeholder({None, None, 2}, DType::float64, "x");
  const Tensor mask = graph.placeholder({None, None}, DType::float64, "mask");
  const Tensor y = ops::sum(x * ops::expand_dims(mask, -1), {1});  // (None, 2): masked sums over the steps
  Program program(graph, {y});
  auto run = [&](std::int64_t batch, std::int64_t length) {
    program.feed(x, Array::full({batch, length, 2}, 1.0, DType::float64));
    program.feed(mask, Array::full({batch, length}, 1.0, DType::float64));
    program.run();
    CHECK(program.fetch(y).shape() == Shape{batch, 2});
    CHECK(program.fetch(y).flat(0) == static_cast<double>(length));
  };
  run(2, 3);
  run(2, 5);
  run(4, 3);
  CHECK(program.num_plans() == 3);
  run(2, 3);
  run(2, 5);
  CHECK(program.num_plans() == 3);  // seen before: planned already
  CHECK(program.stats().batch_size == 2);
  CHECK(program.has_plan(4));

  // Lengths that disagree reach an op that refuses them when planning; the message names the fed shapes.
  program.feed(x, Array({2, 3, 2}, DType::float64));
  program.feed(mask, Array({2, 4}, DType::float64));
  CHECK_THROWS_AS(program.run(), ShapeError);
  CHECK_THROWS_WITH(program.run(),
                    Contains("planning for the fed shapes") && Contains("(2, 3, 2)") && Contains("(2, 4)"));
  CHECK(program.num_plans() == 3);
  // The batch is still one size everywhere, and no unknown dimension may be empty.
  program.feed(mask, Array({3, 3}, DType::float64));
  CHECK_THROWS_AS(program.run(), ValueError);
  program.feed(x, Array({3, 0, 2}, DType::float64));
  CHECK_THROWS_WITH(program.run(), Contains("empty dimension"));
}

TEST_CASE("a program keeps the plans of the 16 batch sizes used last", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 2}, DType::float64, "x");
  const Tensor y = ops::scale(x, 2.0);
  Program program(graph, {y});
  for (std::int64_t batch = 1; batch <= 20; ++batch) {
    program.feed(x, Array::full({batch, 2}, 1.0, DType::float64));
    program.run();
    CHECK(program.fetch(y).flat(0) == 2.0);
  }
  for (std::int64_t batch = 1; batch <= 4; ++batch) CHECK_FALSE(program.has_plan(batch));
  for (std::int64_t batch = 5; batch <= 20; ++batch) CHECK(program.has_plan(batch));
  // Using a kept plan makes it the most recent: the next new size drops batch 6's, not 5's.
  program.feed(x, Array::full({5, 2}, 1.0, DType::float64));
  program.run();
  program.feed(x, Array::full({21, 2}, 1.0, DType::float64));
  program.run();
  CHECK(program.has_plan(5));
  CHECK_FALSE(program.has_plan(6));
  CHECK(program.fetch(y).shape() == Shape({21, 2}));
}

TEST_CASE("one Program run from two threads at once is refused, two Programs over one graph run together",
          "[core][program][concurrency]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 256}, DType::float32, "x");
  const Tensor w = graph.variable("w", Array::full({256, 256}, 0.001));
  Tensor h = x;
  for (int i = 0; i < 40; ++i) h = ops::tanh(ops::matmul(h, w));  // long enough runs to overlap
  const Array input = Array::full({256, 256}, 0.5);

  Program reference(graph, {h});
  reference.feed(x, input);
  reference.run();
  const Array expected = reference.fetch(h);

  Program shared(graph, {h});
  shared.feed(x, input);
  std::atomic<bool> done{false};
  std::atomic<int> refused{0}, other_errors{0};
  std::thread runner([&] {
    for (int i = 0; i < 20; ++i) {
      try {
        shared.run();
      } catch (const LayerStateError&) {
        ++refused;  // the main thread's run came first
      } catch (...) {
        ++other_errors;
      }
    }
    done = true;
  });
  for (int attempt = 0; attempt < 100000 && !done.load() && refused.load() == 0; ++attempt) {
    try {
      shared.run();
    } catch (const LayerStateError&) {
      ++refused;
    } catch (...) {
      ++other_errors;
    }
  }
  runner.join();
  CHECK(refused > 0);
  CHECK(other_errors == 0);
  CHECK(shared.fetch(h).bitwise_equal(expected));

  std::vector<Array> results(3);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      Program own(graph, {h});
      own.feed(x, input);
      own.run();
      results[t] = own.fetch(h);
    });
  for (std::thread& thread : threads) thread.join();
  for (const Array& result : results) CHECK(result.bitwise_equal(expected));
}

TEST_CASE("an update of the wrong dtype is a DTypeError, of the wrong shape a ShapeError", "[core][program]") {
  Graph graph;
  const Tensor w = graph.variable("w", Array::full({2}, 1.0, DType::float64));
  const Tensor single = graph.variable("single", Array::full({2}, 1.0, DType::float32));
  const Tensor wide = graph.variable("wide", Array::full({3}, 1.0, DType::float64));
  CHECK_THROWS_AS(Program(graph, {}, {{w, single}}), DTypeError);
  CHECK_THROWS_AS(Program(graph, {}, {{w, wide}}), ShapeError);
}

TEST_CASE("on_ready reports each hooked fetch once per run, as soon as it is final", "[core][program]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 4}, DType::float64, "x");
  const Tensor w1 = graph.variable("w1", Array::full({4, 4}, 0.3, DType::float64));
  const Tensor w2 = graph.variable("w2", Array::full({4, 1}, -0.2, DType::float64));
  const Tensor h = ops::tanh(ops::matmul(x, w1));
  const Tensor loss = ops::mean(ops::square(ops::matmul(h, w2)));
  const std::vector<Tensor> grads = gradients(loss, {w1, w2});
  Program program(graph, {loss, grads[0], grads[1]});
  std::vector<std::size_t> order;
  std::vector<std::vector<double>> seen(2);
  program.on_ready(grads, [&](std::size_t i, const void* data) {
    order.push_back(i);
    const auto* values = static_cast<const double*>(data);
    seen[i].assign(values, values + grads[i].shape().num_elements());
  });
  program.feed(x, Array::full({3, 4}, 0.5, DType::float64));
  for (int run = 0; run < 2; ++run) {
    order.clear();
    program.run();
    // Backward reaches w2 (the last layer) before w1.
    REQUIRE(order == std::vector<std::size_t>{1, 0});
    for (std::size_t i = 0; i < 2; ++i) CHECK(seen[i] == program.fetch(grads[i]).to_vector<double>());
  }
  CHECK_THROWS_AS(program.on_ready({h}, [](std::size_t, const void*) {}), Error);  // not a fetch
  program.on_ready({}, {});
  order.clear();
  program.run();
  CHECK(order.empty());
}
