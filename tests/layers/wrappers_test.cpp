#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/rnn/wrappers.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// x with its steps in reverse order: (B, T, F).
Array reversed_steps(const Array& x) {
  const std::int64_t batch = x.shape()[0], steps = x.shape()[1], features = x.shape()[2];
  Array result(x.shape(), x.dtype());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t f = 0; f < features; ++f)
        result.set_flat(static_cast<std::size_t>((b * steps + t) * features + f),
                        x.flat(static_cast<std::size_t>((b * steps + steps - 1 - t) * features + f)));
  return result;
}

}  // namespace

TEST_CASE("Bidirectional is a forward layer and a backward one put back in time order, merged as Keras does",
          "[layers][wrappers]") {
  const Array x = random_input({2, 5, 3}, 4);
  for (const bool sequences : {true, false})
    for (const std::string merge : {"concat", "sum", "mul", "ave", ""}) {
      INFO((sequences ? "sequences, " : "last, ") << "merge '" << merge << "'");
      const Config options = {{"return_sequences", sequences}, {"bias_initializer", "random_normal"}, {"dtype", "float64"}};
      kiln::Bidirectional bidirectional(kiln::LSTM(4, options), merge);
      const std::vector<Array> outputs = run_layer(*bidirectional, LayerCase{{x}});
      // The same two layers on their own: the backward one reads the reversed sequence forwards, so its
      // outputs, reversed again, are what the wrapper merges (its last output is after reading x[0]).
      kiln::LSTM forward(4, options), backward(4, options);
      forward->build_for(Shape{None, 5, 3});
      backward->build_for(Shape{None, 5, 3});
      forward.set_weights(bidirectional->forward_layer().get_weights());
      backward.set_weights(bidirectional->backward_layer().get_weights());
      const Array y = run_layer(*forward, LayerCase{{x}})[0];
      Array y_reverse = run_layer(*backward, LayerCase{{reversed_steps(x)}})[0];
      if (sequences) y_reverse = reversed_steps(y_reverse);
      REQUIRE(outputs.size() == (merge.empty() ? 2u : 1u));
      const std::size_t units = 4, rows = y.size() / units;
      for (std::size_t row = 0; row < rows; ++row)
        for (std::size_t j = 0; j < units; ++j) {
          const double a = y.flat(row * units + j), b = y_reverse.flat(row * units + j);
          if (merge == "concat") {
            CHECK(outputs[0].flat(row * 2 * units + j) == Approx(a).epsilon(1e-12));
            CHECK(outputs[0].flat(row * 2 * units + units + j) == Approx(b).epsilon(1e-12));
          } else if (merge.empty()) {
            CHECK(outputs[0].flat(row * units + j) == Approx(a).epsilon(1e-12));
            CHECK(outputs[1].flat(row * units + j) == Approx(b).epsilon(1e-12));
          } else {
            const double expected = merge == "sum" ? a + b : merge == "mul" ? a * b : (a + b) / 2;
            CHECK(outputs[0].flat(row * units + j) == Approx(expected).epsilon(1e-12));
          }
        }
    }
}

TEST_CASE("Bidirectional: Keras's names, config, states and masks", "[layers][wrappers]") {
  kiln::Bidirectional bidirectional(kiln::GRU(3, {{"return_sequences", true}, {"return_state", true}, {"name", "enc"}}));
  CHECK(bidirectional->forward_layer().name() == "forward_enc");
  CHECK(bidirectional->backward_layer().name() == "backward_enc");
  CHECK(bidirectional->backward_layer().go_backwards());
  CHECK_FALSE(bidirectional->forward_layer().go_backwards());
  const LayerCase c{{random_input({2, 4, 5}, 1)}};
  CHECK(symbolic_output_shapes(*bidirectional, c) ==
        std::vector<Shape>{Shape{None, 4, 6}, Shape{None, 3}, Shape{None, 3}});
  const Config config = bidirectional->get_config();
  std::vector<std::string> keys;
  for (const auto& [key, value] : config.items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"name", "trainable", "dtype", "merge_mode", "layer", "backward_layer"});
  CHECK(config.at("layer").at("config").get_bool("zero_output_for_mask"));
  CHECK(config.at("backward_layer").at("config").get_bool("go_backwards"));
  const std::vector<kiln::Weight> weights = bidirectional.weights();
  REQUIRE(weights.size() == 6);
  CHECK(weights[0].path == "forward_enc/kernel");
  CHECK(weights[3].path == "backward_enc/kernel");
  CHECK(bidirectional->keras_weight_paths() ==
        std::vector<std::string>{"forward_layer/cell/vars/0", "forward_layer/cell/vars/1", "forward_layer/cell/vars/2",
                                 "backward_layer/cell/vars/0", "backward_layer/cell/vars/1",
                                 "backward_layer/cell/vars/2"});
  CHECK(bidirectional->keras_sublayers() ==
        std::vector<std::pair<std::string, std::string>>{{"backward_layer", "backward_enc"},
                                                         {"backward_layer/cell", "gru_cell"},
                                                         {"forward_layer", "forward_enc"},
                                                         {"forward_layer/cell", "gru_cell"}});

  // A padding mask: the merged outputs are zeros at masked steps (zero_output_for_mask in both directions).
  kiln::Bidirectional masked(kiln::LSTM(2, {{"return_sequences", true}, {"dtype", "float64"}}));
  Array mask({1, 4}, kiln::DType::float64);
  for (std::size_t t = 0; t < 4; ++t) mask.set_flat(t, t < 3 ? 1.0 : 0.0);
  LayerCase with_mask{{random_input({1, 4, 3}, 2)}};
  with_mask.tensor_args = {{"mask", mask}};
  const Array out = run_layer(*masked, with_mask)[0];
  for (std::size_t j = 0; j < 4; ++j) CHECK(out.flat(3 * 4 + j) == 0.0);
  for (std::size_t j = 0; j < 4; ++j) CHECK(out.flat(2 * 4 + j) != 0.0);

  // Initial states: both directions' or none.
  kiln::Bidirectional stateful_inputs(kiln::LSTM(3, {{"bias_initializer", "random_normal"}}), "sum");
  LayerCase states{{random_input({2, 4, 2}, 3), random_input({2, 3}, 4), random_input({2, 3}, 5), random_input({2, 3}, 6),
                    random_input({2, 3}, 7)}};
  const GradcheckReport report = gradcheck_layer(*stateful_inputs, states);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
  CHECK_THROWS_WITH(stateful_inputs({kiln::Input({None, 4, 2}), kiln::Input({None, 3})}),
                    Catch::Contains("initial states of both directions"));
}

TEST_CASE("Bidirectional refuses what Keras refuses", "[layers][wrappers]") {
  CHECK_THROWS_WITH(kiln::Bidirectional(kiln::LSTM(3), "max"), Catch::Contains("merge_mode must be"));
  CHECK_THROWS_WITH(kiln::Bidirectional(kiln::Dense(3)), Catch::Contains("must be a recurrent layer"));
  CHECK_THROWS_WITH(kiln::Bidirectional(Config{{"merge_mode", "sum"}}), Catch::Contains("'layer'"));
  const Config lstm = kiln::serialize_layer(*kiln::LayerPtr(kiln::LSTM(3)));
  CHECK_THROWS_WITH(kiln::Bidirectional(Config{{"layer", lstm}, {"backward_layer", lstm}}),
                    Catch::Contains("backward_layer must read the sequence the other way"));
  CHECK_THROWS_WITH(kiln::Bidirectional(Config{{"layer", lstm}, {"weights", Config::list({1})}}),
                    Catch::Contains("weights"));
}

TEST_CASE("TimeDistributed applies its layer to every step, holding that layer's weights", "[layers][wrappers]") {
  kiln::Dense dense(4, "relu", {{"bias_initializer", "random_normal"}, {"dtype", "float64"}});
  kiln::TimeDistributed each(dense);
  const Array x = random_input({2, 3, 5}, 8);
  const Array y = run_layer(*each, LayerCase{{x}})[0];
  CHECK(y.shape() == Shape{2, 3, 4});
  // The same Dense on each step alone.
  for (std::int64_t t = 0; t < 3; ++t) {
    Array step({2, 5}, kiln::DType::float64);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t f = 0; f < 5; ++f)
        step.set_flat(static_cast<std::size_t>(b * 5 + f), x.flat(static_cast<std::size_t>((b * 3 + t) * 5 + f)));
    const Array expected = run_layer(*dense, LayerCase{{step}})[0];
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t j = 0; j < 4; ++j)
        CHECK(y.flat(static_cast<std::size_t>((b * 3 + t) * 4 + j)) == expected.flat(static_cast<std::size_t>(b * 4 + j)));
  }
  CHECK(each.weights().size() == 2);
  CHECK(each.weights()[0].path == "dense/kernel");
  CHECK(each->keras_weight_paths() == std::vector<std::string>{"layer/vars/0", "layer/vars/1"});
  CHECK(each->keras_sublayers() == std::vector<std::pair<std::string, std::string>>{{"layer", "dense"}});
  kiln::TimeDistributed images(kiln::Dense(2));
  CHECK(symbolic_output_shapes(*images, LayerCase{{random_input({2, 3, 4, 5}, 1)}}) ==
        std::vector<Shape>{Shape{None, 3, 4, 2}});
  CHECK_THROWS_WITH(kiln::TimeDistributed(Config{{"name", "td"}}), Catch::Contains("'layer'"));
  kiln::TimeDistributed flat(kiln::Dense(2), {{"name", "td"}});
  CHECK_THROWS_WITH(flat(kiln::Input({None, 4})), Catch::Contains("TimeDistributed 'td'") && Catch::Contains("rank 3"));
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec bidirectional_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Bidirectional(
        kiln::GRU(3, {{"return_sequences", true}, {"return_state", true}, {"bias_initializer", "random_normal"}})));
  };
  spec.call = LayerCase{{random_input({2, 4, 5}, 2)}};
  spec.output_shapes = {Shape{None, 4, 6}, Shape{None, 3}, Shape{None, 3}};
  spec.bad_inputs = {{"other features", {{None, 4, 6}}, "was built for sequences (batch, steps, features) of 5 features"},
                     {"no steps", {{None, 5}}, "was built for sequences (batch, steps, features)"}};
  return spec;
}
LayerSpec time_distributed_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::TimeDistributed(kiln::Dense(3, "tanh", {{"bias_initializer", "random_normal"}}))); };
  spec.call = LayerCase{{random_input({2, 4, 5}, 3)}};
  spec.output_shapes = {Shape{None, 4, 3}};
  spec.bad_inputs = {{"other features", {{None, 4, 6}}, "was built for steps of shape (5,)"},
                     {"no steps", {{None, 5}}, "takes inputs of rank 3 or more"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Bidirectional", bidirectional_spec)
KILN_LAYER_HARNESS("kiln>TimeDistributed", time_distributed_spec)
