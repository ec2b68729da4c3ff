#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/rnn/recurrent.hpp>
#include <kiln/layers/rnn/wrappers.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// A (B, T, U) or (B, U) array's element.
struct Grid {
  std::vector<double> values;
  std::int64_t rows, cols;
  double& at(std::int64_t r, std::int64_t c) { return values[static_cast<std::size_t>(r * cols + c)]; }
};

// Keras's LSTM and GRU (reset_after) written out for one sequence, from the formulas in Keras 3's
// lstm.py and gru.py: every product and gate by hand, in double.
struct Reference {
  std::string cell;
  Array kernel, recurrent, bias;
  std::int64_t units;

  double k(std::int64_t i, std::int64_t j) const { return kernel.flat(static_cast<std::size_t>(i * kernel.shape()[1] + j)); }
  double u(std::int64_t i, std::int64_t j) const {
    return recurrent.flat(static_cast<std::size_t>(i * recurrent.shape()[1] + j));
  }
  double b(std::int64_t row, std::int64_t j) const {
    const std::int64_t width = bias.shape().dim(-1);
    return bias.flat(static_cast<std::size_t>(row * width + j));
  }

  // Outputs of every step (processing order) of one sample x (T, I); mask[t] false skips step t.
  std::vector<std::vector<double>> run(const Array& x, std::int64_t sample, const std::vector<bool>& mask,
                                       bool backwards, std::vector<double>& h, std::vector<double>& c) const {
    const std::int64_t steps = x.shape()[1], features = x.shape()[2], n = units;
    std::vector<std::vector<double>> outputs;
    for (std::int64_t k_step = 0; k_step < steps; ++k_step) {
      const std::int64_t t = backwards ? steps - 1 - k_step : k_step;
      auto xin = [&](std::int64_t column) {  // (x_t · kernel)[column] + input bias
        double sum = b(0, column);
        for (std::int64_t i = 0; i < features; ++i)
          sum += x.flat(static_cast<std::size_t>((sample * steps + t) * features + i)) * k(i, column);
        return sum;
      };
      auto hin = [&](std::int64_t column) {  // (h · recurrent_kernel)[column]
        double sum = 0;
        for (std::int64_t i = 0; i < n; ++i) sum += h[static_cast<std::size_t>(i)] * u(i, column);
        return sum;
      };
      std::vector<double> new_h(static_cast<std::size_t>(n)), new_c(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        if (cell == "lstm") {
          const double i_gate = sigmoid(xin(j) + hin(j)), f = sigmoid(xin(n + j) + hin(n + j));
          const double g = std::tanh(xin(2 * n + j) + hin(2 * n + j)), o = sigmoid(xin(3 * n + j) + hin(3 * n + j));
          new_c[jj] = f * c[jj] + i_gate * g;
          new_h[jj] = o * std::tanh(new_c[jj]);
        } else {  // GRU, reset_after: bias row 1 is the recurrent bias
          const double z = sigmoid(xin(j) + hin(j) + b(1, j)), r = sigmoid(xin(n + j) + hin(n + j) + b(1, n + j));
          const double candidate = std::tanh(xin(2 * n + j) + r * (hin(2 * n + j) + b(1, 2 * n + j)));
          new_h[jj] = z * h[jj] + (1 - z) * candidate;
        }
      }
      if (mask[static_cast<std::size_t>(t)]) {
        h = new_h;
        if (cell == "lstm") c = new_c;
      }
      outputs.push_back(h);
    }
    return outputs;
  }
};

Config random_bias() { return {{"bias_initializer", "random_normal"}}; }

}  // namespace

TEST_CASE("LSTM and GRU compute Keras's formulas, with a mask, go_backwards and return_state",
          "[layers][recurrent]") {
  for (const std::string cell : {"lstm", "gru"})
    for (const bool backwards : {false, true}) {
      INFO(cell << (backwards ? " go_backwards" : ""));
      const Config options = random_bias()
                                 .with("return_sequences", true)
                                 .with("return_state", true)
                                 .with("go_backwards", backwards)
                                 .with("dtype", "float64");
      kiln::LayerPtr layer =
          cell == "lstm" ? kiln::LayerPtr(kiln::LSTM(3, options)) : kiln::LayerPtr(kiln::GRU(3, options));
      const Array x = random_input({2, 5, 4}, 7);
      Array mask({2, 5}, kiln::DType::float64);
      const std::vector<std::vector<bool>> keep = {{true, true, false, true, true}, {true, true, true, false, false}};
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t t = 0; t < 5; ++t) mask.set_flat(b * 5 + t, keep[b][t] ? 1.0 : 0.0);
      LayerCase c{{x}};
      c.tensor_args = {{"mask", mask}};
      const std::vector<Array> outputs = run_layer(*layer, c);
      REQUIRE(outputs.size() == (cell == "lstm" ? 3u : 2u));
      CHECK(outputs[0].shape() == Shape{2, 5, 3});
      const std::vector<kiln::Weight> weights = layer->weights();
      const Reference reference{cell, weights[0].value, weights[1].value, weights[2].value, 3};
      double worst = 0;
      for (std::int64_t b = 0; b < 2; ++b) {
        std::vector<double> h(3, 0.0), state_c(3, 0.0);
        const auto expected = reference.run(x, b, keep[static_cast<std::size_t>(b)], backwards, h, state_c);
        for (std::int64_t k = 0; k < 5; ++k)
          for (std::int64_t j = 0; j < 3; ++j)
            worst = std::max(worst, std::fabs(outputs[0].flat(static_cast<std::size_t>((b * 5 + k) * 3 + j)) -
                                              expected[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)]));
        for (std::int64_t j = 0; j < 3; ++j) {
          worst = std::max(worst, std::fabs(outputs[1].flat(static_cast<std::size_t>(b * 3 + j)) - h[static_cast<std::size_t>(j)]));
          if (cell == "lstm")
            worst = std::max(worst, std::fabs(outputs[2].flat(static_cast<std::size_t>(b * 3 + j)) -
                                              state_c[static_cast<std::size_t>(j)]));
        }
      }
      CHECK(worst <= 1e-13);
    }
}

TEST_CASE("recurrent layers: shapes, Keras's weights and initial values", "[layers][recurrent]") {
  kiln::LSTM lstm(4);
  const LayerCase c{{random_input({2, 6, 3}, 1)}};
  CHECK(symbolic_output_shapes(*lstm, c) == std::vector<Shape>{Shape{None, 4}});
  const std::vector<kiln::Weight> weights = lstm.weights();
  REQUIRE(weights.size() == 3);
  CHECK(weights[0].path == "kernel");
  CHECK(weights[0].value.shape() == Shape{3, 16});
  CHECK(weights[1].path == "recurrent_kernel");
  CHECK(weights[1].value.shape() == Shape{4, 16});
  CHECK(weights[2].path == "bias");
  CHECK(weights[2].value.shape() == Shape{16});
  // unit_forget_bias: zeros for i, ones for f, zeros for c and o.
  for (std::size_t j = 0; j < 16; ++j) CHECK(weights[2].value.flat(j) == (j >= 4 && j < 8 ? 1.0 : 0.0));
  // Orthogonal recurrent kernel (4, 16): its four rows are orthonormal.
  for (std::int64_t a = 0; a < 4; ++a)
    for (std::int64_t b = 0; b < 4; ++b) {
      double dot = 0;
      for (std::int64_t j = 0; j < 16; ++j)
        dot += weights[1].value.flat(static_cast<std::size_t>(a * 16 + j)) * weights[1].value.flat(static_cast<std::size_t>(b * 16 + j));
      CHECK(dot == Approx(a == b ? 1.0 : 0.0).margin(1e-6));
    }
  CHECK(lstm->keras_weight_paths() == std::vector<std::string>{"cell/vars/0", "cell/vars/1", "cell/vars/2"});
  CHECK(lstm->keras_sublayers() == std::vector<std::pair<std::string, std::string>>{{"cell", "lstm_cell"}});

  kiln::GRU gru(5, {{"return_sequences", true}, {"return_state", true}});
  CHECK(symbolic_output_shapes(*gru, c) == std::vector<Shape>{Shape{None, 6, 5}, Shape{None, 5}});
  CHECK(gru.weights()[2].value.shape() == Shape{2, 15});
  kiln::GRU before(5, {{"reset_after", false}, {"use_bias", false}});
  before->build_for(Shape{None, 6, 3});
  CHECK(before.weights().size() == 2);
  CHECK(before->keras_weight_paths() == std::vector<std::string>{"cell/vars/0", "cell/vars/1"});
  kiln::SimpleRNN rnn(2, {{"return_state", true}});
  CHECK(symbolic_output_shapes(*rnn, c) == std::vector<Shape>{Shape{None, 2}, Shape{None, 2}});
  CHECK(rnn->keras_sublayers().front().second == "simple_rnn_cell");
  kiln::LSTM states(4, {{"return_state", true}});
  CHECK(symbolic_output_shapes(*states, c) == std::vector<Shape>{Shape{None, 4}, Shape{None, 4}, Shape{None, 4}});
}

TEST_CASE("recurrent layers write Keras 3's config keys in Keras's order", "[layers][recurrent][config]") {
  const std::vector<std::string> head = {"name",     "trainable", "dtype",  "return_sequences", "return_state",
                                         "go_backwards", "stateful", "unroll", "zero_output_for_mask", "units",
                                         "activation"};
  const std::vector<std::string> regularization = {"kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
                                                   "activity_regularizer", "kernel_constraint",
                                                   "recurrent_constraint", "bias_constraint", "dropout",
                                                   "recurrent_dropout"};
  auto keys_of = [](const Config& config) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : config.items()) keys.push_back(key);
    return keys;
  };
  auto join = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> initializers = {"kernel_initializer", "recurrent_initializer", "bias_initializer"};
  CHECK(keys_of(kiln::SimpleRNN(3).get_config()) ==
        join(join(join(head, {"use_bias"}), initializers), regularization));
  CHECK(keys_of(kiln::LSTM(3).get_config()) ==
        join(join(join(join(head, {"recurrent_activation", "use_bias"}), initializers), {"unit_forget_bias"}),
             join(regularization, {"seed"})));
  CHECK(keys_of(kiln::GRU(3).get_config()) ==
        join(join(join(head, {"recurrent_activation", "use_bias"}), initializers),
             join(regularization, {"reset_after", "seed"})));
  const Config config = kiln::GRU(3, {{"seed", 4}, {"activation", nullptr}}).get_config();
  CHECK(config.get_int("seed") == 4);
  CHECK(config.get_string("activation") == "linear");
  CHECK(config.at("recurrent_initializer").get_string("class_name") == "Orthogonal");
  CHECK(config.at("recurrent_initializer").at("config").get_double("gain") == 1.0);
  // Keras's backend choices are read and not written, as Keras does.
  CHECK_FALSE(kiln::LSTM(3, {{"use_cudnn", "auto"}, {"implementation", 2}}).get_config().contains("use_cudnn"));
}

TEST_CASE("recurrent layers take initial states as inputs and differentiate them", "[layers][recurrent][grad]") {
  kiln::LSTM lstm(3, random_bias().with("return_sequences", true));
  LayerCase c{{random_input({2, 4, 2}, 3), random_input({2, 3}, 4), random_input({2, 3}, 5)}};
  const GradcheckReport report = gradcheck_layer(*lstm, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
  CHECK(report.num_checked == 16u + 6u + 6u + 24u + 36u + 12u);
  // Initial states change the outputs.
  const Array with = run_layer(*lstm, c)[0];
  const Array without = run_layer(*lstm, LayerCase{{c.inputs[0]}})[0];
  CHECK(max_relative_difference(with, without) > 1e-3);
}

TEST_CASE("recurrent dropout: only in training, the same masks at every step of a run, new ones each run",
          "[layers][recurrent]") {
  for (const char* key : {"dropout", "recurrent_dropout"}) {
    INFO(key);
    kiln::GRU gru(4, random_bias().with(key, 0.5).with("return_sequences", true).with("seed", 3));
    const Array x = random_input({8, 5, 3}, 6);
    LayerCase inference{{x}};
    LayerCase training{{x}};
    training.training = true;
    const Array a = run_layer(*gru, inference)[0], b = run_layer(*gru, training)[0];
    CHECK(max_relative_difference(a, b) > 1e-3);
    kiln::GRU plain(4, random_bias().with("return_sequences", true).with("dtype", "float64"));
    plain->build_for(Shape{None, 5, 3});
    plain.set_weights(gru.get_weights());
    CHECK(max_relative_difference(run_layer(*plain, inference)[0], a) == 0.0);
    // Gradients in training mode agree with central differences: the masks stay fixed within a run.
    const GradcheckReport report = gradcheck_layer(*gru, training);
    INFO(report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("recurrent layers refuse what they cannot take, naming the layer", "[layers][recurrent]") {
  CHECK_THROWS_WITH(kiln::LSTM(0), Catch::Contains("units must be positive"));
  CHECK_THROWS_WITH(kiln::LSTM(3, {{"activation", "gelu"}}), Catch::Contains("tanh, sigmoid, relu"));
  CHECK_THROWS_WITH(kiln::GRU(3, {{"recurrent_dropout", 1.0}}), Catch::Contains("recurrent_dropout must be in [0, 1)"));
  CHECK_THROWS_WITH(kiln::SimpleRNN(3, {{"stateful", true}})(kiln::Input({None, 4, 2})),
                    Catch::Contains("SimpleRNN") && Catch::Contains("batch size must be static") &&
                        Catch::Contains("(None, 4, 2)"));
  CHECK_THROWS_WITH(kiln::SimpleRNN(3, {{"recurrent_activation", "sigmoid"}}),
                    Catch::Contains("unknown argument 'recurrent_activation'"));
  CHECK_THROWS_WITH(kiln::LSTM(3, {{"unit_forget_bais", true}}), Catch::Contains("unit_forget_bias"));

  kiln::LSTM lstm(3, {{"name", "enc"}});
  const kiln::Tensor x = kiln::Input({None, 5, 2});
  CHECK_THROWS_WITH(lstm(kiln::Input({None, 2})), Catch::Contains("LSTM 'enc'") && Catch::Contains("(batch, steps, features)"));
  lstm(x);
  CHECK_THROWS_WITH(lstm(kiln::Input({None, 5, 3})), Catch::Contains("built for sequences of 2 features"));
  CHECK_THROWS_WITH(lstm({x, kiln::Input({None, 3})}), Catch::Contains("takes 2 initial states"));
  CHECK_THROWS_WITH(lstm({x, kiln::Input({None, 4}), kiln::Input({None, 4})}), Catch::Contains("initial state must be (batch, units)"));
  CHECK_THROWS_WITH(lstm(x, kiln::CallArgs().tensor("mask", kiln::Input({None, 6}))),
                    Catch::Contains("the mask must be (batch, steps)"));
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec recurrent_spec(const std::string& cell, Config options) {
  LayerSpec spec;
  options = options.with("bias_initializer", "random_normal");
  spec.make = [cell, options] {
    if (cell == "lstm") return kiln::LayerPtr(kiln::LSTM(3, options));
    if (cell == "gru") return kiln::LayerPtr(kiln::GRU(3, options));
    return kiln::LayerPtr(kiln::SimpleRNN(3, options));
  };
  spec.call = LayerCase{{random_input({2, 4, 5}, 2)}};
  spec.output_shapes = {Shape{None, 4, 3}, Shape{None, 3}};
  if (cell == "lstm") spec.output_shapes.push_back(Shape{None, 3});
  spec.bad_inputs = {{"other features", {{None, 4, 6}}, "was built for sequences of 5 features"},
                     {"no steps", {{None, 5}}, "was built for sequences"}};
  return spec;
}
const Config sequences_and_state = {{"return_sequences", true}, {"return_state", true}};
LayerSpec simple_rnn_spec() { return recurrent_spec("simple_rnn", sequences_and_state); }
LayerSpec lstm_spec() { return recurrent_spec("lstm", sequences_and_state.with("go_backwards", true)); }
LayerSpec gru_spec() { return recurrent_spec("gru", sequences_and_state); }
}  // namespace

KILN_LAYER_HARNESS("kiln>SimpleRNN", simple_rnn_spec)
KILN_LAYER_HARNESS("kiln>LSTM", lstm_spec)
KILN_LAYER_HARNESS("kiln>GRU", gru_spec)

// ---- stateful -----------------------------------------------------------------------------------------------

namespace {

// Steps [from, from + count) of a (batch, steps, features) array.
Array steps_of(const Array& x, std::int64_t from, std::int64_t count) {
  const std::int64_t batch = x.shape()[0], steps = x.shape()[1], features = x.shape()[2];
  Array part({batch, count, features}, x.dtype());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < count; ++t)
      for (std::int64_t f = 0; f < features; ++f)
        part.set_flat(static_cast<std::size_t>((b * count + t) * features + f),
                      x.flat(static_cast<std::size_t>((b * steps + from + t) * features + f)));
  return part;
}

kiln::LayerPtr recurrent(const std::string& cell, const Config& options) {
  const Config config = options.with("units", 4).with("return_sequences", true).with("dtype", "float64");
  if (cell == "lstm") return kiln::LSTM(config);
  if (cell == "gru") return kiln::GRU(config);
  return kiln::SimpleRNN(config);
}

}  // namespace

TEST_CASE("a stateful recurrent layer carries its states from batch to batch, as one long sequence would",
          "[layers][recurrent][stateful]") {
  for (const std::string cell : {"lstm", "gru", "simple_rnn"}) {
    INFO(cell);
    const kiln::Tensor whole_input = kiln::Input({2, 6, 3}, kiln::DType::float64);
    kiln::Model whole(whole_input, (*recurrent(cell, {}))(whole_input));
    const kiln::Tensor half_input = kiln::Input({2, 3, 3}, kiln::DType::float64);
    const kiln::LayerPtr stateful = recurrent(cell, {{"stateful", true}});
    kiln::Model halves(half_input, (*stateful)(half_input));
    halves->set_weights(whole->get_weights());
    CHECK(halves->carries_state());
    CHECK_FALSE(whole->carries_state());

    const Array x = random_input({2, 6, 3}, 4);
    const Array expected = whole.predict(x);
    const Array first = halves.predict(steps_of(x, 0, 3));
    const Array second = halves.predict(steps_of(x, 3, 3));
    CHECK(max_abs_difference(first, steps_of(expected, 0, 3)) <= 1e-12);
    CHECK(max_abs_difference(second, steps_of(expected, 3, 3)) <= 1e-12);

    // reset_state zeroes the states: the first half again gives what it gave first.
    const auto& layer = static_cast<const kiln::RecurrentLayer&>(*stateful);
    REQUIRE(layer.states().size() == (cell == "lstm" ? 2u : 1u));
    CHECK(layer.states()[0].shape() == Shape{2, 4});
    CHECK(max_abs_difference(layer.states()[0], Array({2, 4}, kiln::DType::float64)) > 0.0);
    halves->reset_states();
    CHECK(max_abs_difference(layer.states()[0], Array({2, 4}, kiln::DType::float64)) == 0.0);
    CHECK(halves.predict(steps_of(x, 0, 3)).bitwise_equal(first));
  }
}

TEST_CASE("a stateful layer carries its states through training and evaluation, and saves without them",
          "[layers][recurrent][stateful]") {
  const kiln::Tensor input = kiln::Input({2, 3, 3}, kiln::DType::float64);
  kiln::LSTM lstm(4, {{"stateful", true}, {"dtype", "float64"}});
  kiln::Model model(input, kiln::Dense(1, "", {{"dtype", "float64"}})(lstm(input)));
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.01}}), "mse");
  const Array x = random_input({2, 3, 3}, 5), y = random_input({2, 1}, 6);
  const Array zeros({2, 4}, kiln::DType::float64);
  model.train_on_batch(x, y);
  const Array after_training = lstm->states()[0].copy();
  CHECK(max_abs_difference(after_training, zeros) > 0.0);
  model.test_on_batch(x, y);  // starts from the trained batch's states and moves them on
  CHECK(max_abs_difference(lstm->states()[0], after_training) > 0.0);
  model->reset_state();
  CHECK(max_abs_difference(lstm->states()[1], zeros) == 0.0);

  // The states are not weights: a saved model reloads with zeros and the same outputs from them.
  const Array before = model.predict(x);
  model->reset_state();
  TempDir dir;
  model.save(dir.file("stateful.kiln"));
  kiln::Model loaded = kiln::load_model(dir.file("stateful.kiln"));
  CHECK(loaded->carries_state());
  CHECK(loaded->get_weights().size() == model->get_weights().size());
  CHECK(loaded.predict(x).bitwise_equal(before));

  // Bidirectional carries both directions' states, and resets them with the model.
  const kiln::Tensor pair_input = kiln::Input({2, 3, 3}, kiln::DType::float64);
  kiln::Model bidirectional(pair_input, kiln::Bidirectional(kiln::GRU(2, {{"stateful", true}, {"dtype", "float64"}}),
                                                            "concat", {{"dtype", "float64"}})(pair_input));
  CHECK(bidirectional->carries_state());
  const Array once = bidirectional.predict(x);
  CHECK_FALSE(bidirectional.predict(x).bitwise_equal(once));
  bidirectional->reset_state();
  CHECK(bidirectional.predict(x).bitwise_equal(once));

  // fit and evaluate run batches of the fixed size, and refuse rows that do not split into them.
  const Array x4 = random_input({4, 3, 3}, 7), y4 = random_input({4, 1}, 8);
  CHECK(model.evaluate(x4, y4, 32).count("loss") == 1);
  CHECK_THROWS_WITH(model.evaluate(random_input({3, 3, 3}, 7), random_input({3, 1}, 8)),
                    Catch::Contains("batches of 2 rows"));

  // A batch of another size cannot take the carried states.
  CHECK_THROWS_WITH(lstm(kiln::Input({3, 3, 3}, kiln::DType::float64)),
                    Catch::Contains("LSTM") && Catch::Contains("stateful") && Catch::Contains("(3, 3, 3)"));
}
