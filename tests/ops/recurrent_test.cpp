#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// One recurrent problem: the cell, its options and sizes, and which optional inputs it has.
struct Case {
  ops::RecurrentOptions options;
  std::int64_t batch = 3, steps = 4, features = 2, units = 3;
  bool initial_state = false, mask = false, recurrent_masks = false;
};

int gates_of(const Case& c) { return c.options.cell == "lstm" ? 4 : c.options.cell == "gru" ? 3 : 1; }
int states_of(const Case& c) { return c.options.cell == "lstm" ? 2 : 1; }

std::string label_of(const Case& c) {
  std::string label = "recurrent " + c.options.cell + " " + c.options.activation + "/" +
                      c.options.recurrent_activation;
  if (c.options.cell == "gru") label += c.options.reset_after ? " reset_after" : " reset_before";
  if (c.options.go_backwards) label += " go_backwards";
  if (c.initial_state) label += " initial_state";
  if (c.mask) label += c.options.zero_output_for_mask ? " mask(zero_output)" : " mask";
  if (c.recurrent_masks) label += " recurrent_masks";
  if (!c.options.keep_records) label += " without records (gradient recomputed)";
  return label;
}

// Differentiable inputs: x, kernel, recurrent_kernel, bias[, h0[, c0]].
std::vector<Array> random_inputs(const Case& c, Rng& rng) {
  const std::int64_t width = gates_of(c) * c.units;
  const bool recurrent_bias = c.options.cell == "gru" && c.options.reset_after;
  std::vector<Array> inputs = {
      testing::random_array({c.batch, c.steps, c.features}, rng),
      testing::random_array({c.features, width}, rng, DType::float64, -0.8, 0.8),
      testing::random_array({c.units, width}, rng, DType::float64, -0.8, 0.8),
      testing::random_array(recurrent_bias ? Shape{2, width} : Shape{width}, rng, DType::float64, -0.5, 0.5)};
  for (int which = 0; c.initial_state && which < states_of(c); ++which)
    inputs.push_back(testing::random_array({c.batch, c.units}, rng, DType::float64, -0.7, 0.7));
  return inputs;
}

// A padding-like mask with a masked step inside a row too, and the dropout masks' 1/(1 - rate) or 0 values.
Array mask_of(const Case& c) {
  Array mask({c.batch, c.steps}, DType::float64);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t t = 0; t < c.steps; ++t)
      mask.set_flat(static_cast<std::size_t>(b * c.steps + t), (t < c.steps - b && (b + t) % 3 != 1) ? 1.0 : 0.0);
  return mask;
}

Array recurrent_masks_of(const Case& c, Rng& rng) {
  Array masks({c.batch, gates_of(c), c.units}, DType::float64);
  for (std::size_t i = 0; i < masks.size(); ++i) masks.set_flat(i, rng.uniform(0.0, 1.0) < 0.3 ? 0.0 : 1.0 / 0.7);
  return masks;
}

// The fused op on inputs laid out as random_inputs's, with the masks as constants.
Tensor fused(const Case& c, const std::vector<Tensor>& x, const Array& mask, const Array& recurrent_masks) {
  Graph& graph = x[0].graph();
  const std::vector<Tensor> initial(x.begin() + 4, x.end());
  return ops::recurrent(x[0], x[1], x[2], x[3], initial, c.options, c.mask ? graph.constant(mask.copy()) : Tensor(),
                        c.recurrent_masks ? graph.constant(recurrent_masks.copy()) : Tensor());
}

// ---- the same cell unrolled from primitive ops --------------------------------------------------------------

Tensor act(const Tensor& x, const std::string& name) {
  if (name == "hard_sigmoid")
    return ops::minimum(ops::maximum(ops::add_scalar(ops::scale(x, 1.0 / 6.0), 0.5), ops::scalar_like(x, 0.0)),
                        ops::scalar_like(x, 1.0));
  return ops::activation(x, name);
}

// Columns [gate·U, (gate + 1)·U) of a (B, G·U) tensor.
Tensor block(const Tensor& x, int gate, std::int64_t units) {
  return ops::slice(x, {0, gate * units}, {x.shape()[0], units});
}

Tensor unrolled(const Case& c, const std::vector<Tensor>& x, const Array& mask_array, const Array& masks_array) {
  Graph& graph = x[0].graph();
  const std::int64_t u = c.units, B = c.batch;
  const int gates = gates_of(c);
  const auto& o = c.options;
  const bool recurrent_bias = o.cell == "gru" && o.reset_after;
  const Tensor input_bias = recurrent_bias ? ops::reshape(ops::slice(x[3], {0, 0}, {1, gates * u}), {gates * u}) : x[3];
  const Tensor hidden_bias = recurrent_bias ? ops::reshape(ops::slice(x[3], {1, 0}, {1, gates * u}), {gates * u}) : Tensor();
  const Tensor zeros = graph.constant(Array::full({B, u}, 0.0, DType::float64));
  Tensor h = c.initial_state ? x[4] : zeros;
  Tensor cell = c.initial_state && o.cell == "lstm" ? x[5] : zeros;
  const Tensor mask = c.mask ? graph.constant(mask_array.copy()) : Tensor();
  const Tensor masks = c.recurrent_masks ? graph.constant(masks_array.copy()) : Tensor();
  const Tensor recurrent_kernel = x[2];
  // h·U_g under gate g's recurrent dropout mask.
  auto recurrent_part = [&](const Tensor& left, int gate) {
    Tensor operand = left;
    if (c.recurrent_masks) operand = operand * ops::reshape(ops::slice(masks, {0, gate, 0}, {B, 1, u}), {B, u});
    return ops::matmul(operand, ops::slice(recurrent_kernel, {0, gate * u}, {u, u}));
  };
  std::vector<Tensor> outputs;
  for (std::int64_t k = 0; k < c.steps; ++k) {
    const std::int64_t t = o.go_backwards ? c.steps - 1 - k : k;
    const Tensor x_t = ops::reshape(ops::slice(x[0], {0, t, 0}, {B, 1, c.features}), {B, c.features});
    const Tensor in = ops::matmul(x_t, x[1]) + input_bias;
    Tensor new_h, new_c;
    if (o.cell == "simple_rnn") {
      new_h = act(in + recurrent_part(h, 0), o.activation);
    } else if (o.cell == "lstm") {
      const Tensor i = act(block(in, 0, u) + recurrent_part(h, 0), o.recurrent_activation);
      const Tensor f = act(block(in, 1, u) + recurrent_part(h, 1), o.recurrent_activation);
      const Tensor g = act(block(in, 2, u) + recurrent_part(h, 2), o.activation);
      const Tensor out = act(block(in, 3, u) + recurrent_part(h, 3), o.recurrent_activation);
      new_c = f * cell + i * g;
      new_h = out * act(new_c, o.activation);
    } else if (o.reset_after) {
      auto hidden = [&](int gate) { return recurrent_part(h, gate) + ops::slice(hidden_bias, {gate * u}, {u}); };
      const Tensor z = act(block(in, 0, u) + hidden(0), o.recurrent_activation);
      const Tensor r = act(block(in, 1, u) + hidden(1), o.recurrent_activation);
      const Tensor candidate = act(block(in, 2, u) + r * hidden(2), o.activation);
      new_h = z * h + (ops::scalar_like(z, 1.0) - z) * candidate;
    } else {
      const Tensor z = act(block(in, 0, u) + recurrent_part(h, 0), o.recurrent_activation);
      const Tensor r = act(block(in, 1, u) + recurrent_part(h, 1), o.recurrent_activation);
      const Tensor candidate = act(block(in, 2, u) + recurrent_part(r * h, 2), o.activation);
      new_h = z * h + (ops::scalar_like(z, 1.0) - z) * candidate;
    }
    Tensor output = new_h;
    if (c.mask) {
      const Tensor m = ops::slice(mask, {0, t}, {B, 1});
      const Tensor keep = ops::scalar_like(m, 1.0) - m;
      output = m * new_h + keep * (o.zero_output_for_mask ? zeros : h);
      new_h = m * new_h + keep * h;
      if (o.cell == "lstm") new_c = m * new_c + keep * cell;
    }
    outputs.push_back(ops::expand_dims(output, 1));
    h = new_h;
    if (o.cell == "lstm") cell = new_c;
  }
  std::vector<Tensor> all = {ops::expand_dims(h, 1)};
  if (o.cell == "lstm") all.push_back(ops::expand_dims(cell, 1));
  all.insert(all.end(), outputs.begin(), outputs.end());
  return ops::concat(all, 1);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  auto with = [](std::string cell, auto change) {
    Case c;
    c.options.cell = std::move(cell);
    change(c);
    return c;
  };
  for (const std::string cell : {"simple_rnn", "lstm", "gru"}) {
    all.push_back(with(cell, [](Case&) {}));
    all.push_back(with(cell, [](Case& c) { c.initial_state = true; }));
    all.push_back(with(cell, [](Case& c) { c.options.go_backwards = true, c.initial_state = true; }));
    all.push_back(with(cell, [](Case& c) { c.mask = true, c.initial_state = true; }));
    all.push_back(with(cell, [](Case& c) { c.mask = true, c.options.zero_output_for_mask = true, c.options.go_backwards = true; }));
    all.push_back(with(cell, [](Case& c) { c.recurrent_masks = true, c.initial_state = true, c.mask = true; }));
    all.push_back(with(cell, [](Case& c) { c.options.keep_records = false, c.initial_state = true, c.mask = true; }));
  }
  all.push_back(with("gru", [](Case& c) { c.options.keep_records = false, c.options.reset_after = false; }));
  all.push_back(with("simple_rnn", [](Case& c) { c.options.activation = "relu", c.initial_state = true; }));
  all.push_back(with("simple_rnn", [](Case& c) { c.options.activation = "linear"; }));
  all.push_back(with("lstm", [](Case& c) { c.options.recurrent_activation = "hard_sigmoid", c.options.activation = "relu"; }));
  for (bool masks : {false, true}) {
    all.push_back(with("gru", [&](Case& c) { c.options.reset_after = false, c.initial_state = true, c.recurrent_masks = masks; }));
    all.push_back(with("gru", [&](Case& c) { c.options.reset_after = false, c.mask = true, c.recurrent_masks = masks, c.options.go_backwards = true; }));
  }
  all.push_back(with("gru", [](Case& c) { c.options.recurrent_activation = "hard_sigmoid", c.initial_state = true; }));
  // Wider than a vector of doubles, with a partial one after: the LSTM's one-pass step with the default
  // activations runs whole vectors and then the rest through the scalar formulas; masked rows take the other path.
  all.push_back(with("lstm", [](Case& c) { c.units = 20, c.initial_state = true; }));
  all.push_back(with("lstm", [](Case& c) { c.units = 20, c.mask = true, c.options.go_backwards = true; }));
  // An odd number of steps: the backward's planes end the other way round (its row blocks alternate them by step).
  for (const std::string cell : {"simple_rnn", "lstm", "gru"})
    all.push_back(with(cell, [](Case& c) { c.steps = 5, c.initial_state = true, c.mask = true; }));
  return all;
}

}  // namespace

TEST_CASE("recurrent's gradients match central differences for every cell and option", "[ops][recurrent][gradcheck]") {
  for (const Case& c : cases()) {
    INFO(label_of(c));
    Rng rng(31);
    const std::vector<Array> inputs = random_inputs(c, rng);
    const Array mask = mask_of(c), masks = recurrent_masks_of(c, rng);
    testing::GradcheckOptions options;
    options.label = label_of(c);
    const auto report = testing::gradcheck(
        [&](const std::vector<Tensor>& x) { return fused(c, x, mask, masks); }, inputs, options);
    INFO(report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
    CHECK(report.num_checked > 0);
  }
}

TEST_CASE("recurrent equals the same cell unrolled from primitive ops, outputs and gradients",
          "[ops][recurrent]") {
  for (const Case& c : cases()) {
    INFO(label_of(c));
    Rng rng(5);
    const std::vector<Array> inputs = random_inputs(c, rng);
    const Array mask = mask_of(c), masks = recurrent_masks_of(c, rng);
    const Array weights = testing::random_array({c.batch, c.steps + states_of(c), c.units}, rng);
    const auto expected = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& x) { return unrolled(c, x, mask, masks); }, inputs, weights);
    const auto actual = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& x) { return fused(c, x, mask, masks); }, inputs, weights);
    REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
      INFO("result " << i << " (0 is the output, then the gradient of each input)");
      CHECK(testing::max_relative_difference(actual[i], expected[i]) <= 1e-12);
    }
  }
}

TEST_CASE("recurrent over zero steps outputs its initial states, and their gradients pass straight through",
          "[ops][recurrent]") {
  for (const std::string cell : {"simple_rnn", "lstm", "gru"})
    for (const bool backwards : {false, true}) {
      INFO(cell << (backwards ? ", go_backwards" : ""));
      Case c;
      c.options.cell = cell;
      c.options.go_backwards = backwards;
      c.steps = 0, c.initial_state = true;
      Rng rng(3);
      const std::vector<Array> inputs = random_inputs(c, rng);
      const Array weights = testing::random_array({c.batch, states_of(c), c.units}, rng);
      const auto results = testing::evaluate_with_gradients(
          [&](const std::vector<Tensor>& x) { return fused(c, x, Array(), Array()); }, inputs, weights);
      // The head is the final states then no outputs: h0 (and c0) themselves.
      for (int which = 0; which < states_of(c); ++which)
        for (std::int64_t b = 0; b < c.batch; ++b)
          for (std::int64_t u = 0; u < c.units; ++u) {
            const auto at = static_cast<std::size_t>((b * states_of(c) + which) * c.units + u);
            const auto initial_at = static_cast<std::size_t>(b * c.units + u);
            CHECK(results[0].flat(at) == inputs[static_cast<std::size_t>(4 + which)].flat(initial_at));
            CHECK(results[static_cast<std::size_t>(5 + which)].flat(initial_at) == weights.flat(at));
          }
    }
}

TEST_CASE("recurrent gives the same outputs and gradients on 1, 2, 3, 7 and 16 threads", "[ops][recurrent]") {
  for (Case c : cases()) {
    // Big enough that the steps' rows and products split (kiln splits no work below 2^15 operations a worker); an
    // odd number of steps, as the backward's row blocks alternate their planes by step.
    c.batch = 64, c.steps = 5, c.features = 8, c.units = 64;
    INFO(label_of(c));
    Rng rng(8);
    const std::vector<Array> inputs = random_inputs(c, rng);
    const Array mask = mask_of(c), masks = recurrent_masks_of(c, rng);
    const Array weights = testing::random_array({c.batch, c.steps + states_of(c), c.units}, rng);
    // The products split over threads may run on another library's kernel for a narrower slice: within rounding.
    testing::check_thread_counts([&](const std::vector<Tensor>& x) { return fused(c, x, mask, masks); }, inputs,
                                 weights, 0, 1e-12);
  }
}

TEST_CASE("recurrent without records gives the same outputs in a state that does not grow with the steps",
          "[ops][recurrent]") {
  for (const std::string cell : {"simple_rnn", "lstm", "gru"}) {
    INFO(cell);
    Case c;
    c.options.cell = cell;
    c.batch = 3, c.steps = 9, c.mask = true;
    Rng rng(12);
    const std::vector<Array> inputs = random_inputs(c, rng);
    const Array mask = mask_of(c), masks = recurrent_masks_of(c, rng);
    Case lean = c;
    lean.options.keep_records = false;
    const Array kept = testing::evaluate([&](const std::vector<Tensor>& x) { return fused(c, x, mask, masks); }, inputs);
    const Array recomputed =
        testing::evaluate([&](const std::vector<Tensor>& x) { return fused(lean, x, mask, masks); }, inputs);
    CHECK(recomputed.bitwise_equal(kept));
    // The op's state: the outputs and two steps' records, against every step's.
    Graph graph;
    std::vector<Tensor> x;
    for (const Array& input : inputs) x.push_back(graph.constant(input));
    const Tensor full = fused(c, x, mask, masks), lean_output = fused(lean, x, mask, masks);
    const std::int64_t full_state = graph.node(full.node().inputs[0]).shape.num_elements();
    const std::int64_t lean_state = graph.node(lean_output.node().inputs[0]).shape.num_elements();
    const std::int64_t head = c.batch * (c.steps + states_of(c)) * c.units;
    CHECK((full_state - head) == (lean_state - head) * c.steps / 2);
  }
}

TEST_CASE("recurrent runs in float32 as in float64", "[ops][recurrent]") {
  // 9 units: less than a vector of floats; 37: two vectors of AVX-512 floats and a partial one.
  for (const std::string cell : {"simple_rnn", "lstm", "gru"})
  for (const std::int64_t units : {9, 37}) {
    Case c;
    c.options.cell = cell;
    c.batch = 5, c.steps = 7, c.features = 6, c.units = units, c.mask = true, c.initial_state = true;
    Rng rng(8);
    const std::vector<Array> inputs = random_inputs(c, rng);
    std::vector<Array> singles;
    for (const Array& input : inputs) singles.push_back(input.astype(DType::float32));
    const Array mask = mask_of(c), masks = recurrent_masks_of(c, rng);
    const Array mask32 = mask.astype(DType::float32);
    const Array doubles = testing::evaluate([&](const std::vector<Tensor>& x) { return fused(c, x, mask, masks); }, inputs);
    const Array floats = testing::evaluate([&](const std::vector<Tensor>& x) { return fused(c, x, mask32, masks); }, singles);
    INFO(cell << ", " << units << " units");
    CHECK(floats.dtype() == DType::float32);
    CHECK(testing::max_relative_difference(floats.astype(DType::float64), doubles) <= 1e-5);
  }
}

TEST_CASE("recurrent's shape rule takes an unknown batch and refuses bad inputs naming them", "[ops][recurrent]") {
  Graph graph;
  constexpr std::int64_t None = Shape::unknown;
  const Tensor x = graph.placeholder({None, 5, 3}, DType::float32, "x");
  const Tensor kernel = graph.placeholder({3, 8}, DType::float32, "kernel");
  const Tensor recurrent_kernel = graph.placeholder({2, 8}, DType::float32, "recurrent_kernel");
  const Tensor bias = graph.placeholder({8}, DType::float32, "bias");
  ops::RecurrentOptions lstm;
  const Tensor out = ops::recurrent(x, kernel, recurrent_kernel, bias, {}, lstm);
  CHECK(out.shape() == Shape{None, 7, 2});

  ops::RecurrentOptions gru;
  gru.cell = "gru";
  CHECK_THROWS_AS(ops::recurrent(x, graph.placeholder({3, 6}, DType::float32, "k"),
                                 graph.placeholder({2, 6}, DType::float32, "r"),
                                 graph.placeholder({6}, DType::float32, "b"), {}, gru),
                  ShapeError);
  CHECK_THROWS_WITH(ops::recurrent(x, graph.placeholder({4, 8}, DType::float32, "k"), recurrent_kernel, bias, {}, lstm),
                    Contains("kernel must be (features, gates · units)") && Contains("x=(None, 5, 3)"));
  CHECK_THROWS_WITH(ops::recurrent(x, kernel, recurrent_kernel, bias, {graph.placeholder({None, 2}, DType::float32, "h")},
                                   lstm),
                    Contains("takes 6 inputs"));
  ops::RecurrentOptions bad = lstm;
  bad.cell = "transformer";
  CHECK_THROWS_WITH(ops::recurrent(x, kernel, recurrent_kernel, bias, {}, bad), Contains("'simple_rnn', 'lstm' or 'gru'"));
  bad = lstm;
  bad.activation = "gelu";
  CHECK_THROWS_WITH(ops::recurrent(x, kernel, recurrent_kernel, bias, {}, bad), Contains("gelu"));
  CHECK_THROWS_WITH(ops::recurrent(x, kernel, recurrent_kernel, bias, {}, lstm,
                                   graph.placeholder({None, 4}, DType::float32, "mask")),
                    Contains("the mask must be (batch, steps)"));
}
