#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

constexpr std::int64_t None = Shape::unknown;

enum class MaskKind { none, padding, per_query, per_head };

// One attention problem: q (leading..., T, d), k (leading..., S, d), v (leading..., S, dv).
struct Case {
  std::vector<std::int64_t> leading;
  std::int64_t queries, keys, depth, value_depth;
  MaskKind mask;
  bool causal;
};

Shape shape_of(const std::vector<std::int64_t>& leading, std::int64_t rows, std::int64_t cols) {
  std::vector<std::int64_t> dims = leading;
  dims.push_back(rows);
  dims.push_back(cols);
  return Shape(std::move(dims));
}

std::string label_of(const Case& c) {
  const char* masks[] = {"no mask", "padding mask", "per-query mask", "per-head mask"};
  return "fused_attention q=" + shape_of(c.leading, c.queries, c.depth).to_string() +
         " k=" + shape_of(c.leading, c.keys, c.depth).to_string() +
         " v=" + shape_of(c.leading, c.keys, c.value_depth).to_string() + ", " + masks[static_cast<int>(c.mask)] +
         (c.causal ? ", causal" : "");
}

// The masks the layers produce (attention_math's combined_mask): (B, 1.., 1, S) padding or (B, 1.., T, S),
// and (1, S) or (T, S) without leading axes; and one mask per head, (B, H.., T, S).
Shape mask_shape(const Case& c) {
  if (c.mask == MaskKind::per_head) return shape_of(c.leading, c.queries, c.keys);
  std::vector<std::int64_t> dims;
  if (!c.leading.empty()) {
    dims.push_back(c.leading[0]);
    for (std::size_t axis = 1; axis < c.leading.size(); ++axis) dims.push_back(1);
  }
  dims.push_back(c.mask == MaskKind::padding ? 1 : c.queries);
  dims.push_back(c.keys);
  return Shape(std::move(dims));
}

// Padding: batch b attends its first S - b keys. Per query: 1 with probability 0.7.
Array random_mask(const Case& c, Rng& rng, DType dtype) {
  const Shape shape = mask_shape(c);
  Array mask(shape, dtype);
  for (std::size_t i = 0; i < mask.size(); ++i) {
    const auto key = static_cast<std::int64_t>(i) % c.keys;
    const auto batch = static_cast<std::int64_t>(i / (mask.size() / static_cast<std::size_t>(shape[0])));
    mask.set_flat(i,
                  c.mask == MaskKind::padding ? (key < c.keys - batch ? 1.0 : 0.0) : (rng.uniform() < 0.7 ? 1.0 : 0.0));
  }
  return mask;
}

double scale_of(const Case& c) { return 1.0 / std::sqrt(static_cast<double>(c.depth)); }

// What the layers composed before fusion: scores, masked softmax (0 exactly where masked, a fully masked
// row all 0), then the weighted sum of the values.
Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& given_mask,
                         bool causal) {
  const Tensor scores = ops::matmul(q, k, false, true) * scale;
  Tensor mask = given_mask;
  if (causal) {
    const Tensor lower = ops::causal_mask(q.graph(), q.shape().dim(-2), k.shape().dim(-2), q.dtype());
    mask = mask.valid() ? mask * lower : lower;
  }
  const Tensor weights = mask.valid()
                             ? ops::masked_fill(ops::softmax(ops::masked_fill(scores, mask, -1e9), -1), mask, 0.0)
                             : ops::softmax(scores, -1);
  return ops::matmul(weights, v);
}

using Attention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, bool);

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal) {
  return ops::fused_attention(q, k, v, scale, mask, causal);
}

std::vector<Array> random_inputs(const Case& c, Rng& rng, DType dtype) {
  std::vector<Array> inputs = {testing::random_array(shape_of(c.leading, c.queries, c.depth), rng, dtype, -1.5, 1.5),
                               testing::random_array(shape_of(c.leading, c.keys, c.depth), rng, dtype, -1.5, 1.5),
                               testing::random_array(shape_of(c.leading, c.keys, c.value_depth), rng, dtype)};
  if (c.mask != MaskKind::none) inputs.push_back(random_mask(c, rng, dtype));
  return inputs;
}

// (..., H, L, d) <-> (..., L, H, d).
Tensor swap_heads_and_length(const Tensor& x) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(x.shape().rank()));
  for (std::size_t axis = 0; axis < perm.size(); ++axis) perm[axis] = static_cast<std::int64_t>(axis);
  std::swap(perm[perm.size() - 3], perm[perm.size() - 2]);
  return ops::transpose(x, perm);
}

// The heads_last layout on heads-first inputs: transposed in, fused with strides, transposed back.
Tensor fused_heads_last(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask,
                        bool causal) {
  return swap_heads_and_length(ops::fused_attention(swap_heads_and_length(q), swap_heads_and_length(k),
                                                    swap_heads_and_length(v), scale, mask, causal, true));
}

void require_gradient(const Case& c, bool heads_last = false) {
  Rng rng(17);
  testing::GradcheckOptions options;
  options.label = label_of(c) + (heads_last ? " heads_last" : "");
  options.wrt = {0, 1, 2};
  const double scale = scale_of(c);
  const auto report = testing::gradcheck(
      [&](const std::vector<Tensor>& x) {
        const Tensor mask = x.size() > 3 ? x[3] : Tensor();
        return heads_last ? fused_heads_last(x[0], x[1], x[2], scale, mask, c.causal)
                          : ops::fused_attention(x[0], x[1], x[2], scale, mask, c.causal);
      },
      random_inputs(c, rng, DType::float64), options);
  INFO(report.worst_entry());
  REQUIRE(report.max_relative_error <= 1e-6);
}

struct Evaluated {
  Array output;
  std::vector<Array> grads;  // of sum(output * R) with respect to q, k, v
};

// Output and gradients of `attention` on `inputs` (q, k, v[, mask]), for a fixed random projection R.
Evaluated evaluate(Attention attention, const Case& c, const std::vector<Array>& inputs) {
  Graph graph;
  std::vector<Tensor> x;
  for (const Array& input : inputs) x.push_back(graph.placeholder(input.shape(), input.dtype(), "x"));
  const Tensor output = attention(x[0], x[1], x[2], scale_of(c), x.size() > 3 ? x[3] : Tensor(), c.causal);
  Rng projection_rng(99);
  const Tensor projection = graph.constant(testing::random_array(output.shape(), projection_rng, output.dtype()), "r");
  std::vector<Tensor> fetches = gradients(ops::sum(output * projection), {x[0], x[1], x[2]});
  fetches.push_back(output);
  Program program(graph, fetches);
  for (std::size_t i = 0; i < inputs.size(); ++i) program.feed(x[i], inputs[i]);
  program.run();
  return {program.fetch(output), {program.fetch(fetches[0]), program.fetch(fetches[1]), program.fetch(fetches[2])}};
}

void require_agreement(const Case& c, DType dtype, double tolerance, Attention attention = fused) {
  Rng rng(23);
  const std::vector<Array> inputs = random_inputs(c, rng, dtype);
  const Evaluated expected = evaluate(unfused_attention, c, inputs);
  const Evaluated actual = evaluate(attention, c, inputs);
  INFO(label_of(c) << " " << dtype_name(dtype));
  CHECK(testing::max_relative_difference(actual.output, expected.output) <= tolerance);
  const char* names[] = {"dq", "dk", "dv"};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO(names[i]);
    CHECK(testing::max_relative_difference(actual.grads[i], expected.grads[i]) <= tolerance);
  }
}

// T and S not multiples of any plausible block (64, 128, 256), T ≠ S both ways, d ≠ dv, 0 to 3 leading axes.
const std::vector<Case> gradient_cases = {
    // 300 keys: two key blocks of the online softmax. 37 queries, not 130: the same code paths (one query
    // block either way) at a quarter of the central differences, which the sanitizer build runs slowly.
    {{1}, 37, 300, 3, 2, MaskKind::none, false},      {{1}, 37, 300, 3, 2, MaskKind::padding, true},
    {{2}, 5, 7, 4, 3, MaskKind::none, false},         {{2}, 5, 7, 4, 3, MaskKind::padding, false},
    {{2}, 7, 5, 4, 6, MaskKind::per_query, true},     {{2, 3}, 6, 9, 5, 2, MaskKind::per_query, false},
    {{2, 3}, 6, 9, 5, 2, MaskKind::per_head, true},   {{2, 3}, 9, 6, 2, 5, MaskKind::none, true},
    {{2, 2, 2}, 4, 6, 3, 3, MaskKind::padding, true}, {{}, 9, 11, 2, 4, MaskKind::per_query, true},
    {{}, 3, 4, 5, 1, MaskKind::none, false},
};

}  // namespace

TEST_CASE("fused_attention: gradients match central differences", "[ops][attention][grad]") {
  for (const Case& c : gradient_cases) require_gradient(c);
}

TEST_CASE("fused_attention: gradients of self-attention with an unknown batch", "[ops][attention][grad]") {
  // The harness leaves only input 0's batch unknown, so q, k and v are all that input (their gradients add up).
  Rng rng(5);
  testing::GradcheckOptions options;
  options.label = "fused_attention self-attention unknown batch";
  const Array padding = Array::from_vector(std::vector<double>{1, 1, 1, 1, 1, 0, 1, 1, 0, 0}, {2, 1, 5});
  for (bool causal : {false, true}) {
    const auto report = testing::gradcheck(
        [&](const std::vector<Tensor>& x) {
          const Tensor mask = x[0].graph().constant(padding, "padding");
          return ops::fused_attention(x[0], x[0], x[0], 0.7, mask, causal);
        },
        {testing::random_array({2, 5, 3}, rng)}, options, /*unknown_batch=*/true);
    INFO(report.worst_entry());
    REQUIRE(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("fused_attention: a query that may attend nothing gets zeros, and gradients still match",
          "[ops][attention][grad]") {
  // Batch 1 attends no key at all; in batch 0, query 2 is masked out everywhere.
  const Case c{{2}, 4, 6, 3, 2, MaskKind::per_query, false};
  Rng rng(3);
  std::vector<Array> inputs = random_inputs(c, rng, DType::float64);
  Array& mask = inputs[3];
  for (std::size_t i = 0; i < mask.size(); ++i) {
    const std::size_t batch = i / 24, query = i / 6 % 4;
    mask.set_flat(i, batch == 1 || query == 2 ? 0.0 : 1.0);
  }
  const Evaluated result = evaluate(fused, c, inputs);
  for (std::size_t i = 0; i < result.output.size(); ++i) {
    const std::size_t batch = i / 8, query = i / 2 % 4;
    if (batch == 1 || query == 2) CHECK(result.output.flat(i) == 0.0);
  }
  for (std::size_t i = 0; i < result.grads[0].size(); ++i)
    if (i / 12 == 1 || i / 3 % 4 == 2) CHECK(result.grads[0].flat(i) == 0.0);  // no gradient into those queries
  const Evaluated expected = evaluate(unfused_attention, c, inputs);
  CHECK(testing::max_relative_difference(result.output, expected.output) <= 1e-12);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(testing::max_relative_difference(result.grads[i], expected.grads[i]) <= 1e-12);

  testing::GradcheckOptions options;
  options.label = "fused_attention fully masked rows";
  options.wrt = {0, 1, 2};
  const auto report = testing::gradcheck(
      [](const std::vector<Tensor>& x) { return ops::fused_attention(x[0], x[1], x[2], 0.5, x[3]); }, inputs, options);
  INFO(report.worst_entry());
  REQUIRE(report.max_relative_error <= 1e-6);
}

TEST_CASE("fused_attention: matches the unfused composition in float32 and float64", "[ops][attention]") {
  const std::vector<Case> cases = {
      {{2, 3}, 150, 150, 64, 64, MaskKind::none, false},
      {{2, 3}, 150, 150, 64, 64, MaskKind::padding, false},
      {{2, 2}, 150, 150, 16, 24, MaskKind::per_query, false},
      {{2, 2}, 150, 150, 16, 24, MaskKind::per_head, true},
      {{2, 2}, 150, 150, 16, 16, MaskKind::none, true},
      {{3}, 70, 530, 32, 8, MaskKind::padding, true},
      {{3}, 530, 70, 8, 32, MaskKind::per_query, true},
      {{}, 257, 129, 7, 5, MaskKind::none, false},
      // The longest sequence that keeps its probabilities (one block pair: T and S up to 256), and one key more.
      {{2}, 256, 256, 8, 8, MaskKind::per_query, true},
      {{2}, 256, 257, 8, 8, MaskKind::padding, false},
      // Kept rows without a mask of one to four vectors (in passes), causal and not, T ≠ S; and five vectors.
      {{2, 3}, 40, 40, 16, 16, MaskKind::none, false},
      {{2}, 33, 60, 8, 4, MaskKind::none, true},
      {{2}, 50, 12, 5, 3, MaskKind::none, true},
      {{3}, 20, 30, 4, 4, MaskKind::none, false},
      {{2}, 9, 70, 6, 6, MaskKind::none, false},
  };
  for (const Case& c : cases) {
    require_agreement(c, DType::float32, 1e-5);
    require_agreement(c, DType::float64, 1e-12);
  }
}

TEST_CASE("fused_attention: a plan without the backward gives the same output bit for bit", "[ops][attention]") {
  // Without a backward nothing reads the kept probabilities, so the kernel keeps them in its scratch instead of the
  // state (KernelContext::read_output_elements): the output must not change by a bit. Kept heads with and
  // without a mask, and a sequence on the online path.
  for (const Case& c :
       {Case{{2, 3}, 40, 40, 16, 16, MaskKind::none, false}, Case{{2}, 33, 60, 8, 4, MaskKind::padding, true},
        Case{{2}, 20, 300, 4, 4, MaskKind::none, true}}) {
    for (DType dtype : {DType::float32, DType::float64}) {
      Rng rng(31);
      const std::vector<Array> inputs = random_inputs(c, rng, dtype);
      const Evaluated trained = evaluate(fused, c, inputs);
      Graph graph;
      std::vector<Tensor> x;
      for (const Array& input : inputs) x.push_back(graph.placeholder(input.shape(), input.dtype(), "x"));
      const Tensor output = fused(x[0], x[1], x[2], scale_of(c), x.size() > 3 ? x[3] : Tensor(), c.causal);
      Program program(graph, {output});
      for (std::size_t i = 0; i < inputs.size(); ++i) program.feed(x[i], inputs[i]);
      program.run();
      INFO(label_of(c) << " " << dtype_name(dtype));
      CHECK(program.fetch(output).bitwise_equal(trained.output));
    }
  }
}

TEST_CASE("fused_attention: heads_last reads (..., T, H, d) in place, with the same results",
          "[ops][attention][grad]") {
  // Gradients in float64 through the strided kernels (the transposes around them are exact), then
  // agreement with the unfused composition: T, S and d not multiples of anything, masks, causal, H = 1.
  for (const Case& c :
       {Case{{2, 3}, 150, 150, 64, 64, MaskKind::padding, false},
        Case{{2, 2}, 150, 150, 16, 24, MaskKind::per_head, true}, Case{{3, 8}, 40, 40, 16, 16, MaskKind::none, false},
        Case{{1, 3}, 70, 530, 32, 8, MaskKind::per_query, true}}) {
    require_agreement(c, DType::float32, 1e-5, fused_heads_last);
    require_agreement(c, DType::float64, 1e-12, fused_heads_last);
  }
  for (const Case& c :
       {Case{{2, 3}, 6, 9, 5, 2, MaskKind::per_head, true}, Case{{1, 2}, 37, 300, 3, 2, MaskKind::padding, false},
        Case{{2, 1}, 7, 5, 4, 6, MaskKind::per_query, true}, Case{{2, 2, 2}, 4, 6, 3, 3, MaskKind::none, false}})
    require_gradient(c, /*heads_last=*/true);
}

TEST_CASE("fused_attention: heads_last needs rank 3 and equal heads", "[ops][attention]") {
  Graph graph;
  const Tensor q2 = graph.placeholder({5, 4}, DType::float32, "q");
  REQUIRE_THROWS_WITH(ops::fused_attention(q2, q2, q2, 1.0, Tensor(), false, true),
                      Contains("fused_attention") && Contains("(..., length, heads, depth)") && Contains("(5, 4)"));
  const Tensor q = graph.placeholder({2, 5, 3, 4}, DType::float32, "q");
  const Tensor k = graph.placeholder({2, 7, 2, 4}, DType::float32, "k");
  REQUIRE_THROWS_WITH(ops::fused_attention(q, k, k, 1.0, Tensor(), false, true), Contains("(2, 7, 2, 4)"));
  const Tensor good_k = graph.placeholder({2, 7, 3, 4}, DType::float32, "k");
  const Tensor mask = graph.placeholder({2, 1, 5, 7}, DType::float32, "mask");  // (B, 1, T, S): heads-first view
  REQUIRE(ops::fused_attention(q, good_k, good_k, 1.0, mask, false, true).shape() == Shape({2, 5, 3, 4}));
}

TEST_CASE("fused_attention: runs at batch sizes it was not built for", "[ops][attention]") {
  const Case c{{None, 2}, 9, 13, 4, 3, MaskKind::padding, true};
  Graph graph;
  const Tensor q = graph.placeholder({None, 2, 9, 4}, DType::float32, "q");
  const Tensor k = graph.placeholder({None, 2, 13, 4}, DType::float32, "k");
  const Tensor v = graph.placeholder({None, 2, 13, 3}, DType::float32, "v");
  const Tensor mask = graph.placeholder({None, 1, 1, 13}, DType::float32, "mask");
  const Tensor output = ops::fused_attention(q, k, v, 0.5, mask, true);
  CHECK(output.shape() == Shape{None, 2, 9, 3});
  const Tensor expected = unfused_attention(q, k, v, 0.5, mask, true);
  const std::vector<Tensor> grads = gradients(ops::sum(ops::square(output)), {q, k, v});
  const std::vector<Tensor> expected_grads = gradients(ops::sum(ops::square(expected)), {q, k, v});
  Program program(
      graph, {output, expected, grads[0], grads[1], grads[2], expected_grads[0], expected_grads[1], expected_grads[2]});
  for (std::int64_t batch : {3, 1, 4}) {
    INFO("batch " << batch);
    Rng rng(static_cast<std::uint64_t>(batch));
    const Case concrete{{batch, 2}, c.queries, c.keys, c.depth, c.value_depth, c.mask, c.causal};
    const std::vector<Array> inputs = random_inputs(concrete, rng, DType::float32);
    program.feed(q, inputs[0]);
    program.feed(k, inputs[1]);
    program.feed(v, inputs[2]);
    program.feed(mask, inputs[3]);
    program.run();
    CHECK(program.fetch(output).shape() == Shape{batch, 2, 9, 3});
    CHECK(testing::max_relative_difference(program.fetch(output), program.fetch(expected)) <= 1e-5);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(testing::max_relative_difference(program.fetch(grads[i]), program.fetch(expected_grads[i])) <= 1e-5);
  }
}

TEST_CASE("fused_attention: forward and backward plan no T x S buffer", "[ops][attention]") {
  constexpr std::int64_t length = 2048;
  Graph graph;
  const Tensor q = graph.placeholder({1, length, 16}, DType::float32, "q");
  const Tensor k = graph.placeholder({1, length, 16}, DType::float32, "k");
  const Tensor v = graph.placeholder({1, length, 16}, DType::float32, "v");
  const Tensor output = ops::fused_attention(q, k, v, 0.25, Tensor(), true);
  const std::vector<Tensor> grads = gradients(ops::sum(ops::square(output)), {q, k, v});
  Program program(graph, grads);
  Rng rng(1);
  const Array data = testing::random_array({1, length, 16}, rng, DType::float32);
  program.feed(q, data);
  program.feed(k, data);
  program.feed(v, data);
  program.run();
  const std::size_t scores_bytes = length * length * sizeof(float);
  INFO("arena " << program.stats().arena_bytes << " bytes");
  CHECK(program.stats().arena_bytes < scores_bytes / 8);
}

TEST_CASE("fused_attention: any thread count gives bitwise the same output and gradients",
          "[ops][attention][threads]") {
  // Heads (and query blocks) are split among threads; each is computed by the same code whichever thread
  // runs it. A thread count raised after planning runs on the scratch the plan has (fewer threads).
  const int saved = kiln::get_num_threads();
  const Case c{{3, 2}, 70, 90, 8, 5, MaskKind::padding, true};
  Rng rng(41);
  const std::vector<Array> inputs = random_inputs(c, rng, DType::float32);
  kiln::set_num_threads(1);
  const Evaluated one = evaluate(fused, c, inputs);
  kiln::set_num_threads(3);
  const Evaluated three = evaluate(fused, c, inputs);
  Graph graph;
  std::vector<Tensor> x;
  for (const Array& input : inputs) x.push_back(graph.placeholder(input.shape(), input.dtype(), "x"));
  const Tensor output = fused(x[0], x[1], x[2], scale_of(c), x[3], c.causal);
  kiln::set_num_threads(1);
  Program program(graph, {output});
  for (std::size_t i = 0; i < inputs.size(); ++i) program.feed(x[i], inputs[i]);
  program.run();  // planned for 1 thread
  kiln::set_num_threads(4);
  program.run();  // runs with 4
  const Array raised = program.fetch(output);
  kiln::set_num_threads(saved);
  REQUIRE(three.output.to_vector<float>() == one.output.to_vector<float>());
  REQUIRE(raised.to_vector<float>() == one.output.to_vector<float>());
  for (std::size_t i = 0; i < 3; ++i) REQUIRE(three.grads[i].to_vector<float>() == one.grads[i].to_vector<float>());
}

TEST_CASE("fused_attention: mismatched shapes are ShapeErrors naming the op and the shapes", "[ops][attention]") {
  Graph graph;
  const Tensor q = graph.placeholder({None, 5, 4}, DType::float32, "q");
  const Tensor k = graph.placeholder({None, 7, 4}, DType::float32, "k");
  const Tensor v = graph.placeholder({None, 7, 6}, DType::float32, "v");
  const Tensor k3 = graph.placeholder({None, 7, 3}, DType::float32, "k3");
  REQUIRE_THROWS_AS(ops::fused_attention(q, k3, v, 1.0), ShapeError);
  REQUIRE_THROWS_WITH(ops::fused_attention(q, k3, v, 1.0), Contains("fused_attention 'fused_attention") &&
                                                               Contains("same depth") && Contains("q=(None, 5, 4)") &&
                                                               Contains("k=(None, 7, 3)"));

  const Tensor q2 = graph.placeholder({2, 5, 4}, DType::float32, "q2");
  const Tensor k2 = graph.placeholder({3, 7, 4}, DType::float32, "k2");
  const Tensor v2 = graph.placeholder({3, 7, 6}, DType::float32, "v2");
  REQUIRE_THROWS_WITH(ops::fused_attention(q2, k2, v2, 1.0), Contains("fused_attention 'fused_attention") &&
                                                                 Contains("before their last two") &&
                                                                 Contains("q=(2, 5, 4)") && Contains("k=(3, 7, 4)"));
  const Tensor heads = graph.placeholder({None, 2, 5, 4}, DType::float32, "heads");
  REQUIRE_THROWS_AS(ops::fused_attention(heads, k, v, 1.0), ShapeError);

  const Tensor short_v = graph.placeholder({None, 6, 6}, DType::float32, "short_v");
  REQUIRE_THROWS_WITH(ops::fused_attention(q, k, short_v, 1.0), Contains("same length") && Contains("v=(None, 6, 6)"));

  const Tensor wrong_keys = graph.placeholder({None, 1, 6}, DType::float32, "wrong_keys");
  REQUIRE_THROWS_WITH(ops::fused_attention(q, k, v, 1.0, wrong_keys),
                      Contains("mask") && Contains("mask=(None, 1, 6)"));
  const Tensor wrong_queries = graph.placeholder({None, 4, 7}, DType::float32, "wrong_queries");
  REQUIRE_THROWS_AS(ops::fused_attention(q, k, v, 1.0, wrong_queries), ShapeError);
  REQUIRE_NOTHROW(ops::fused_attention(q, k, v, 1.0, graph.placeholder({None, 5, 7}, DType::float32, "per_query")));
  REQUIRE_NOTHROW(ops::fused_attention(q, k, v, 1.0, graph.placeholder({None, 1, 7}, DType::float32, "padding")));
}
