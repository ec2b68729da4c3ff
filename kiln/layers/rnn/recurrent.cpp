#include <kiln/layers/rnn/recurrent.hpp>

#include <cstring>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// The activations the fused cell computes (its backward reads each derivative from the activated value).
bool cell_activation(const std::string& name) {
  return name == "linear" || name == "tanh" || name == "sigmoid" || name == "relu" || name == "hard_sigmoid" ||
         name == "hard_sigmoid_keras2";
}

// An activation argument: absent means Keras's default, null (Python's None) and "" mean linear.
std::string activation_argument(const Config& config, ConfigReader& args, const std::string& key,
                                const std::string& fallback) {
  const Config* given = config.find(key);
  std::string name = given == nullptr ? fallback : args.text(key, "linear");
  if (name.empty()) name = "linear";
  if (!cell_activation(name))
    args.fail(key + " must be linear, tanh, sigmoid, relu, hard_sigmoid or hard_sigmoid_keras2 (the activations "
                    "kiln's fused cell computes), got '" +
              name + "'");
  return name;
}

// A dropout rate in [0, 1]: Keras applies a rate of 1 in SimpleRNN (every input dropped) and ignores it in
// LSTM and GRU; kiln refuses it, as the dropped elements would be scaled by 1 / 0.
double rate_argument(ConfigReader& args, const std::string& key) {
  const double rate = args.number(key, 0.0);
  if (!(rate >= 0.0 && rate < 1.0)) args.fail(key + " must be in [0, 1), got " + std::to_string(rate));
  return rate;
}

// The cell's name in Keras's files: "lstm_cell" for LSTM.
std::string cell_name(const std::string& cell) { return cell + "_cell"; }

}  // namespace

RecurrentLayer::RecurrentLayer(const Config& config, const std::string& class_name, std::string cell)
    : Layer(config, class_name), cell_(std::move(cell)) {
  ConfigReader args = config_reader(config);
  units_ = args.integer("units");
  activation_ = activation_argument(config, args, "activation", "tanh");
  if (cell_ != "simple_rnn") {
    recurrent_activation_ = activation_argument(config, args, "recurrent_activation", "sigmoid");
    args.value("use_cudnn");       // Keras's choice of backend kernel: kiln has one
    args.value("implementation");  // Keras's ways of splitting the same arithmetic
  }
  if (cell_ == "lstm") unit_forget_bias_ = args.boolean("unit_forget_bias", true);
  if (cell_ == "gru") reset_after_ = args.boolean("reset_after", true);
  use_bias_ = args.boolean("use_bias", true);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform");
  recurrent_initializer_ = Initializer::from_argument(args, "recurrent_initializer", "orthogonal");
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros");
  kernel_regularization_ = WeightRegularization::from_arguments(args, "kernel");
  recurrent_regularization_ = WeightRegularization::from_arguments(args, "recurrent");
  bias_regularization_ = WeightRegularization::from_arguments(args, "bias");
  dropout_ = rate_argument(args, "dropout");
  recurrent_dropout_ = rate_argument(args, "recurrent_dropout");
  seed_ = args.value("seed");
  if (!seed_.is_null()) seed_.as_int(args.who() + " argument 'seed'");
  return_sequences_ = args.boolean("return_sequences", false);
  return_state_ = args.boolean("return_state", false);
  go_backwards_ = args.boolean("go_backwards", false);
  stateful_ = args.boolean("stateful", false);
  unroll_ = args.boolean("unroll", false);
  zero_output_for_mask_ = args.boolean("zero_output_for_mask", false);
  args.finish();
  if (units_ <= 0) args.fail("units must be positive, got " + std::to_string(units_));
}

Config RecurrentLayer::get_config() const {
  Config config = base_config();
  config.erase("activity_regularizer");  // written in its place below
  config.set("return_sequences", return_sequences_);
  config.set("return_state", return_state_);
  config.set("go_backwards", go_backwards_);
  config.set("stateful", stateful_);
  config.set("unroll", unroll_);
  config.set("zero_output_for_mask", zero_output_for_mask_);
  config.set("units", units_);
  config.set("activation", activation_);
  if (cell_ != "simple_rnn") config.set("recurrent_activation", recurrent_activation_);
  config.set("use_bias", use_bias_);
  config.set("kernel_initializer", kernel_initializer_.get_config());
  config.set("recurrent_initializer", recurrent_initializer_.get_config());
  config.set("bias_initializer", bias_initializer_.get_config());
  if (cell_ == "lstm") config.set("unit_forget_bias", unit_forget_bias_);
  config.set("kernel_regularizer", kernel_regularization_.regularizer.get_config());
  config.set("recurrent_regularizer", recurrent_regularization_.regularizer.get_config());
  config.set("bias_regularizer", bias_regularization_.regularizer.get_config());
  config.set("activity_regularizer", activity_regularizer().get_config());
  config.set("kernel_constraint", kernel_regularization_.constraint.get_config());
  config.set("recurrent_constraint", recurrent_regularization_.constraint.get_config());
  config.set("bias_constraint", bias_regularization_.constraint.get_config());
  config.set("dropout", dropout_);
  config.set("recurrent_dropout", recurrent_dropout_);
  if (cell_ == "gru") config.set("reset_after", reset_after_);
  if (cell_ != "simple_rnn") config.set("seed", seed_);  // Keras's SimpleRNN writes no seed
  return config;
}

std::vector<std::string> RecurrentLayer::keras_weight_paths() const {
  std::vector<std::string> paths = {"cell/vars/0", "cell/vars/1"};
  if (use_bias_) paths.push_back("cell/vars/2");
  return paths;
}

std::vector<std::pair<std::string, std::string>> RecurrentLayer::keras_sublayers() const {
  return {{"cell", cell_name(cell_)}};
}

// Keras's LSTMCell with unit_forget_bias: the bias initializer's values for i, then ones for f, then the
// initializer's for c and o (drawn as two weights of those shapes, as Keras draws them).
Array RecurrentLayer::bias_values(const Shape& shape, DType dtype, Rng& rng) const {
  if (cell_ != "lstm" || !unit_forget_bias_) return bias_initializer_.sample(shape, dtype, rng);
  const Array input_gate = bias_initializer_.sample({units_}, DType::float64, rng);
  const Array cell_and_output = bias_initializer_.sample({2 * units_}, DType::float64, rng);
  std::vector<double> values = input_gate.to_vector<double>();
  values.insert(values.end(), static_cast<std::size_t>(units_), 1.0);
  const std::vector<double> rest = cell_and_output.to_vector<double>();
  values.insert(values.end(), rest.begin(), rest.end());
  return Array::from_vector(values, shape).astype(dtype);
}

void RecurrentLayer::build(const std::vector<Shape>& input_shapes) {
  const Shape& input = input_shapes.at(0);
  if (input.rank() != 3 || input[2] == Shape::unknown)
    shape_error("takes sequences (batch, steps, features) with known features", {{"input", input}});
  const std::int64_t width = gates() * units_;
  kernel_ = add_weight("kernel", {input[2], width}, kernel_initializer_);
  regularize(kernel_, kernel_regularization_);
  recurrent_kernel_ = add_weight("recurrent_kernel", {units_, width}, recurrent_initializer_);
  regularize(recurrent_kernel_, recurrent_regularization_);
  if (use_bias_) {
    const Shape bias_shape = cell_ == "gru" && reset_after_ ? Shape{2, width} : Shape{width};
    bias_ = add_weight("bias", bias_shape,
                       [this](const Shape& shape, DType dtype, Rng& rng) { return bias_values(shape, dtype, rng); });
    regularize(bias_, bias_regularization_);
  }
  if (stateful_) {
    // Keras's rnn_state variables: zeros of the batch's size, not weights (never saved, never trained).
    if (input[0] == Shape::unknown)
      throw ValueError(describe() + ": when using stateful=True in a RNN, the batch size must be static. Found "
                       "dynamic batch size: sequence.shape=" + input.to_string() +
                       "; give the model's Input a batch size, as Input({32, steps, features})");
    states_.clear();
    for (int which = 0; which < num_states(); ++which) states_.emplace_back(Shape{input[0], units_}, dtype());
  }
}

void RecurrentLayer::reset_state() {
  for (Array& state : states_) std::memset(state.raw(), 0, state.nbytes());
}

// The graph variables of the carried states, made on first use in a graph (as weights' variables are).
std::vector<Tensor> RecurrentLayer::state_variables(Graph& graph) const {
  std::vector<Tensor> variables;
  for (std::size_t which = 0; which < states_.size(); ++which) {
    Tensor variable = graph.find_variable(states_[which]);
    if (!variable.valid()) variable = graph.variable(name() + "/rnn_state_" + std::to_string(which), states_[which], false);
    variables.push_back(variable);
  }
  return variables;
}

std::vector<Tensor> RecurrentLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& x = inputs[0];
  const Shape& built_for = build_shapes().at(0);
  if (x.rank() != 3 || x.shape()[2] != built_for[2])
    shape_error("was built for sequences of " + std::to_string(built_for[2]) + " features",
                {{"built for", built_for}, {"input", x.shape()}});
  std::vector<Tensor> initial(inputs.begin() + 1, inputs.end());
  if (!initial.empty() && static_cast<int>(initial.size()) != num_states())
    shape_error("takes " + std::to_string(num_states()) + " initial state" + (num_states() > 1 ? "s (h, c)" : " (h)") +
                    ", got " + std::to_string(initial.size()),
                {{"input", x.shape()}});
  for (const Tensor& state : initial)
    if (state.rank() != 2 || state.shape()[1] != units_ ||
        (state.shape()[0] != x.shape()[0] && state.shape()[0] != Shape::unknown && x.shape()[0] != Shape::unknown))
      shape_error("an initial state must be (batch, units) with units = " + std::to_string(units_),
                  {{"input", x.shape()}, {"initial state", state.shape()}});
  std::vector<Tensor> carried;
  // Decoding a token at a time (kiln::generate): the states live in the step's caches, so each one-step
  // call starts where the last ended, as the whole sequence would.
  const detail::DecodingStep* step = detail::decoding();
  if (step != nullptr) {
    if (go_backwards_) throw ValueError(describe() + ": with go_backwards it reads the sequence from its end, so it "
                                                     "cannot decode a token at a time; generate with use_cache = false");
    if (x.shape()[1] != 1 || x.shape()[0] == Shape::unknown)
      shape_error("decodes one step of a known batch at a time", {{"input", x.shape()}});
    if (!initial.empty())
      throw ValueError(describe() + ": with initial states given as inputs it cannot decode a token at a time (each "
                                    "step would start again from them); generate with use_cache = false");
    for (int which = 0; which < num_states(); ++which)
      carried.push_back(step->cache(describe() + "/" + (which == 0 ? "h" : "c"), Shape{x.shape()[0], units_}));
    initial = carried;
  } else if (stateful_) {
    if (x.shape()[0] != states_.at(0).shape()[0])
      throw ValueError(describe() + ": if an RNN is stateful, the batch size of the input sequences must be the "
                       "same as the batch size of the initial state: expected " +
                       std::to_string(states_[0].shape()[0]) + ", got input " + x.shape().to_string());
    carried = state_variables(x.graph());
    if (initial.empty()) initial = carried;  // an initial state given explicitly wins, as in Keras
  }
  Tensor mask;
  if (const Tensor* given = args.find_tensor("mask")) {
    const Shape& shape = given->shape();
    if (given->rank() != 2 || (shape[1] != x.shape()[1] && shape[1] != Shape::unknown && x.shape()[1] != Shape::unknown))
      shape_error("the mask must be (batch, steps)", {{"input", x.shape()}, {"mask", shape}});
    if (given->dtype() != x.dtype())
      config_error(std::string("the mask must have the input's dtype, ") + dtype_name(x.dtype()) + ", got " +
                   dtype_name(given->dtype()));
    mask = *given;
  }

  Tensor sequence = x;
  Tensor recurrent_masks;
  if (args.training() && (dropout_ > 0.0 || recurrent_dropout_ > 0.0)) {
    const std::uint64_t seed = detail::call_seed(seed_, name(), x);
    // One mask of the input's features for every step (Keras's dropout masks are fixed over the sequence).
    if (dropout_ > 0.0) sequence = x * ops::dropout_mask(x, dropout_, seed, {1});
    if (recurrent_dropout_ > 0.0) {
      const Tensor one_per_row = ops::slice(x, {0, 0, 0}, {-1, 1, 1});  // (batch, 1, 1)
      const Tensor like = ops::broadcast_to(one_per_row, Shape{Shape::unknown, gates(), units_});
      recurrent_masks = ops::dropout_mask(like, recurrent_dropout_, mix64(seed ^ 0x7265637572726e74ull), {});
    }
  }

  ops::RecurrentOptions options;
  options.cell = cell_;
  options.activation = activation_;
  options.recurrent_activation = recurrent_activation_;
  options.reset_after = reset_after_;
  options.go_backwards = go_backwards_;
  options.zero_output_for_mask = zero_output_for_mask_;
  options.keep_records = args.training();  // inference keeps no per-step records (a gradient recomputes them)
  const std::int64_t width = gates() * units_;
  const Tensor bias = use_bias_ ? variable(bias_, x)
                                : ops::constant(x.graph(), Array::full({width}, 0.0, x.dtype()), "no_bias");
  const Tensor all = ops::recurrent(sequence, variable(kernel_, x), variable(recurrent_kernel_, x), bias, initial,
                                    options, mask, recurrent_masks);
  // (batch, S + T, units): the final states, then the outputs in processing order.
  const int states = num_states();
  std::vector<Tensor> states_out;
  for (int which = 0; which < states; ++which)
    states_out.push_back(ops::squeeze(ops::slice(all, {0, which, 0}, {-1, 1, -1}), {1}));
  Tensor output;
  if (return_sequences_) {
    output = ops::slice(all, {0, states, 0}, {-1, -1, -1});
  } else if (zero_output_for_mask_ && mask.valid()) {
    // The last output is zeros where the last step processed was masked, else the final h.
    // (Reversed when going forwards: the last step is then first, at a known index whatever the length.)
    const Tensor last_step = ops::slice(go_backwards_ ? mask : ops::flip(mask, 1), {0, 0}, {-1, 1});
    output = states_out[0] * (ops::scalar_like(last_step, 1.0) - ops::equal(last_step, ops::scalar_like(last_step, 0.0)));
  } else {
    // Masked steps carry h and output it, so the last output is the final h.
    output = states_out[0];
  }
  // A stateful layer's next call, or the next decoded token, starts where this one ended.
  for (std::size_t which = 0; which < carried.size(); ++which) {
    if (step != nullptr)
      step->update(carried[which], states_out[which]);
    else
      x.graph().add_state_update(carried[which], states_out[which]);
  }
  std::vector<Tensor> outputs = {output};
  if (return_state_) outputs.insert(outputs.end(), states_out.begin(), states_out.end());
  return outputs;
}

// ---- the three cells ---------------------------------------------------------------------------------------

SimpleRNNLayer::SimpleRNNLayer(const Config& config) : RecurrentLayer(config, "SimpleRNN", "simple_rnn") {}
LSTMLayer::LSTMLayer(const Config& config) : RecurrentLayer(config, "LSTM", "lstm") {}
GRULayer::GRULayer(const Config& config) : RecurrentLayer(config, "GRU", "gru") {}

SimpleRNN::SimpleRNN(std::int64_t units, const Config& options)
    : LayerHandle(std::make_shared<SimpleRNNLayer>(options.with("units", units))) {}
LSTM::LSTM(std::int64_t units, const Config& options)
    : LayerHandle(std::make_shared<LSTMLayer>(options.with("units", units))) {}
GRU::GRU(std::int64_t units, const Config& options)
    : LayerHandle(std::make_shared<GRULayer>(options.with("units", units))) {}

KILN_REGISTER_LAYER("kiln>SimpleRNN", SimpleRNNLayer);
KILN_REGISTER_LAYER("kiln>LSTM", LSTMLayer);
KILN_REGISTER_LAYER("kiln>GRU", GRULayer);

}  // namespace kiln
