#pragma once
// Keras's recurrent layers: SimpleRNN, LSTM and GRU over (batch, steps, features) sequences.
//
//   kiln::Tensor h = kiln::LSTM(32)(x);                                   // (None, 20, 8) -> (None, 32)
//   kiln::Tensor seq = kiln::GRU(16, {{"return_sequences", true}})(x);   // (None, 20, 16)
//   kiln::LSTM lstm(8, {{"return_state", true}});
//   kiln::Outputs all = lstm(std::vector<kiln::Tensor>{x});              // [output, h, c]
//   kiln::Tensor y = kiln::LSTM(8)({x, h0, c0});                           // initial states as inputs
//   kiln::Tensor z = lstm(x, kiln::CallArgs().tensor("mask", mask));      // mask (batch, steps): 0 skips
//
// Each runs the whole sequence as one fused op (ops::recurrent). The weights are Keras's: "kernel"
// (features, G·units), "recurrent_kernel" (units, G·units) and "bias", with the gates in Keras's order
// (LSTM i, f, c, o; GRU z, r, h), so Keras files load as they are. A masked step keeps the states and
// outputs the previous one. go_backwards reads the sequence from its end and returns the outputs in that
// order, as Keras does. dropout drops the same input features at every step, recurrent_dropout the same
// state units at every step (one mask per gate), in training only.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The base of SimpleRNN, LSTM and GRU (Keras's RNN with the cell's arguments flattened into the layer, as
/// Keras 3 serializes them).
class RecurrentLayer : public Layer {
 public:
  std::int64_t units() const { return units_; }                  ///< the size of the state and the output
  bool return_sequences() const { return return_sequences_; }    ///< every step's output, or only the last
  bool return_state() const { return return_state_; }            ///< the final states after the output
  bool go_backwards() const { return go_backwards_; }            ///< read the sequence from its end
  int num_states() const { return cell_ == "lstm" ? 2 : 1; }     ///< h, and c for LSTM
  const std::string& activation() const { return activation_; }  ///< the cell's activation
  double dropout() const { return dropout_; }                    ///< the input's dropout rate
  double recurrent_dropout() const { return recurrent_dropout_; }  ///< the state's dropout rate
  Config get_config() const override;
  /// Keras keeps an RNN layer's weights in its cell: "cell/vars/0" (kernel), "cell/vars/1" (recurrent
  /// kernel), "cell/vars/2" (bias).
  std::vector<std::string> keras_weight_paths() const override;
  /// The cell ("lstm_cell", "gru_cell", "simple_rnn_cell"), which Keras's files name.
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// A recurrent layer takes its input's mask (masked steps keep the state) and passes it on with
  /// return_sequences, as Keras's RNN does; the states carry none.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& /*inputs*/, const Tensor& mask) const override {
    return {return_sequences_ ? mask : Tensor()};
  }
  /// With stateful = true, each call starts from the states the last one ended with (Keras's "rnn_state"
  /// variables, (batch, units) each, zeros at first): every call in a model's fit, evaluate or predict
  /// carries them on, and reset_state() zeroes them. The batch size must be fixed (Input({32, T, F})).
  bool stateful() const { return stateful_; }
  /// The carried states (h, and c for LSTM), empty unless stateful and built. Not weights: never saved.
  const std::vector<Array>& states() const { return states_; }
  bool carries_state() const override { return stateful_; }
  void reset_state() override;  ///< zeroes the carried states (nothing when not stateful)

 protected:
  /// Reads the arguments every recurrent layer takes; `cell` is "simple_rnn", "lstm" or "gru".
  RecurrentLayer(const Config& config, const std::string& class_name, std::string cell);
  /// Creates kernel (features, G·units), recurrent_kernel (units, G·units) and bias, from the sequence's
  /// features (the last dimension of the first input, which must be known).
  void build(const std::vector<Shape>& input_shapes) override;
  /// [x] or [x, h0(, c0)]: the output (batch, units), or (batch, steps, units) with return_sequences, then
  /// with return_state the final states.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"mask"}; }
  std::pair<std::size_t, std::size_t> input_count() const override {
    return {1, 1 + static_cast<std::size_t>(num_states())};
  }

 private:
  Array bias_values(const Shape& shape, DType dtype, Rng& rng) const;
  std::vector<Tensor> state_variables(Graph& graph) const;
  std::int64_t gates() const { return cell_ == "lstm" ? 4 : cell_ == "gru" ? 3 : 1; }

  std::string cell_;
  std::string recurrent_activation_ = "sigmoid";  // LSTM and GRU
  bool reset_after_ = true;                       // GRU
  bool unit_forget_bias_ = true;                  // LSTM
  std::int64_t units_ = 0;
  std::string activation_;
  bool use_bias_ = true;
  Initializer kernel_initializer_, recurrent_initializer_, bias_initializer_;
  WeightRegularization kernel_regularization_, recurrent_regularization_, bias_regularization_;
  double dropout_ = 0.0, recurrent_dropout_ = 0.0;
  Config seed_;
  bool return_sequences_ = false, return_state_ = false, go_backwards_ = false, stateful_ = false, unroll_ = false;
  bool zero_output_for_mask_ = false;
  WeightId kernel_ = 0, recurrent_kernel_ = 0, bias_ = 0;
  std::vector<Array> states_;  // stateful: the carried states, shared with their graph variables
};

/// The layer behind kiln::SimpleRNN: h_t = activation(x_t · kernel + h_{t-1} · recurrent_kernel + bias).
class SimpleRNNLayer : public RecurrentLayer {
 public:
  /// Keras's arguments and defaults: units (required), activation = tanh, use_bias = true,
  /// kernel_initializer = glorot_uniform, recurrent_initializer = orthogonal, bias_initializer = zeros,
  /// kernel/recurrent/bias regularizers and constraints, dropout = 0, recurrent_dropout = 0, seed,
  /// return_sequences = false, return_state = false, go_backwards = false, unroll = false (accepted; the op
  /// is fused either way), zero_output_for_mask = false, stateful = false (see RecurrentLayer::stateful).
  explicit SimpleRNNLayer(const Config& config);
};

/// The layer behind kiln::LSTM: Keras's LSTM, gates i, f, c, o.
class LSTMLayer : public RecurrentLayer {
 public:
  /// SimpleRNN's arguments, plus recurrent_activation = sigmoid and unit_forget_bias = true (the forget
  /// gate's bias starts at 1); use_cudnn and implementation are accepted and not written, as in Keras.
  explicit LSTMLayer(const Config& config);
};

/// The layer behind kiln::GRU: Keras's GRU, gates z, r, h.
class GRULayer : public RecurrentLayer {
 public:
  /// SimpleRNN's arguments, plus recurrent_activation = sigmoid and reset_after = true (the reset gate
  /// multiplies h·U_h + b_h, and the bias is (2, 3·units): the input's, then the recurrent one's).
  explicit GRULayer(const Config& config);
};

/// A fully connected recurrent layer: Keras's layers.SimpleRNN.
class SimpleRNN : public LayerHandle<SimpleRNNLayer> {
 public:
  /// `units` and further config keys in `options` (see SimpleRNNLayer).
  explicit SimpleRNN(std::int64_t units, const Config& options = {});
  /// From a whole config, with the keys of SimpleRNNLayer(const Config&).
  explicit SimpleRNN(const Config& config) : LayerHandle(std::make_shared<SimpleRNNLayer>(config)) {}
};

/// Long short-term memory: Keras's layers.LSTM.
class LSTM : public LayerHandle<LSTMLayer> {
 public:
  /// `units` and further config keys in `options` (see LSTMLayer).
  explicit LSTM(std::int64_t units, const Config& options = {});
  /// From a whole config, with the keys of LSTMLayer(const Config&).
  explicit LSTM(const Config& config) : LayerHandle(std::make_shared<LSTMLayer>(config)) {}
};

/// Gated recurrent unit: Keras's layers.GRU.
class GRU : public LayerHandle<GRULayer> {
 public:
  /// `units` and further config keys in `options` (see GRULayer).
  explicit GRU(std::int64_t units, const Config& options = {});
  /// From a whole config, with the keys of GRULayer(const Config&).
  explicit GRU(const Config& config) : LayerHandle(std::make_shared<GRULayer>(config)) {}
};

}  // namespace kiln
