#pragma once
// Keras's recurrent wrappers: Bidirectional runs a recurrent layer both ways over a sequence and merges
// the two; TimeDistributed applies one layer to every step of a sequence.
//
//   kiln::Tensor both = kiln::Bidirectional(kiln::LSTM(16, {{"return_sequences", true}}))(x);  // (None, T, 32)
//   kiln::Tensor sum = kiln::Bidirectional(kiln::GRU(8), "sum")(x);                             // (None, 8)
//   kiln::Tensor each = kiln::TimeDistributed(kiln::Dense(4, "relu"))(x);                       // (None, T, 4)
//
// Both hold their layers as Keras does: config keys "layer" (and Bidirectional's "backward_layer") with the
// wrapped layer's serialized config, weights in Keras's files under forward_layer/, backward_layer/ and
// layer/.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>
#include <kiln/layers/rnn/recurrent.hpp>

namespace kiln {

/// The layer behind kiln::Bidirectional.
class BidirectionalLayer : public Layer {
 public:
  /// Keras's arguments: layer (a serialized SimpleRNN, LSTM or GRU; required), merge_mode = "concat" (also
  /// "sum", "mul", "ave", or null for the two outputs apart) and backward_layer (null: a copy of layer with
  /// go_backwards = true). As Keras, the copies are named "forward_<name>" and "backward_<name>", and both
  /// get zero_output_for_mask = return_sequences. Keras's `weights` is not supported.
  explicit BidirectionalLayer(const Config& config);
  /// "concat", "sum", "mul", "ave", or "" for Keras's None (the two outputs apart).
  const std::string& merge_mode() const { return merge_mode_; }
  const RecurrentLayer& forward_layer() const { return *forward_; }    ///< reads the sequence forwards
  const RecurrentLayer& backward_layer() const { return *backward_; }  ///< reads it from its end
  Config get_config() const override;
  /// The two layers' weights under "forward_layer/" and "backward_layer/", as Keras's files hold them.
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// As a recurrent layer: the input's mask goes to both directions, and on with return_sequences.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& /*inputs*/, const Tensor& mask) const override {
    return {forward_->return_sequences() ? mask : Tensor()};
  }

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// [x] or [x, the forward layer's initial states..., the backward layer's...]: the merged output (the
  /// backward outputs put back in the input's time order with return_sequences), then with return_state
  /// the forward layer's final states and the backward layer's.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"mask"}; }
  std::pair<std::size_t, std::size_t> input_count() const override;

 private:
  std::shared_ptr<RecurrentLayer> forward_, backward_;
  std::string merge_mode_;
};

/// The layer behind kiln::TimeDistributed.
class TimeDistributedLayer : public Layer {
 public:
  /// Keras's argument: layer (a serialized layer; required), applied to each step of (batch, steps, ...).
  explicit TimeDistributedLayer(const Config& config);
  /// Wraps `layer` itself (not a copy, as Keras), with further config keys in `options` (name, ...).
  TimeDistributedLayer(LayerPtr layer, const Config& options);
  const Layer& layer() const { return *layer_; }  ///< the layer applied at every step
  Config get_config() const override;
  /// The wrapped layer's weights under "layer/", as Keras's files hold them.
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// The steps stay where they were: a mask on the input goes on to the output when the wrapped layer
  /// passes masks on (Dense, Dropout, ...).
  bool supports_masking() const override { return layer_->supports_masking(); }

 protected:
  /// Builds the wrapped layer for one step, (batch, ...) of an input (batch, steps, ...).
  void build(const Shape& input_shape) override;
  /// The wrapped layer on every step at once (the steps folded into the batch): (batch, steps, ...out).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  LayerPtr layer_;
};

/// A bidirectional wrapper for recurrent layers: Keras's layers.Bidirectional.
class Bidirectional : public LayerHandle<BidirectionalLayer> {
 public:
  /// Wraps a copy of `layer` (a SimpleRNN, LSTM or GRU, by its config); `merge_mode` "concat", "sum", "mul",
  /// "ave", or "" for none; further keys in `options` (name, backward_layer, ...).
  explicit Bidirectional(const LayerPtr& layer, const std::string& merge_mode = "concat", const Config& options = {});
  /// From a whole config, with the keys of BidirectionalLayer(const Config&).
  explicit Bidirectional(const Config& config) : LayerHandle(std::make_shared<BidirectionalLayer>(config)) {}
};

/// Applies a layer to every step of a sequence: Keras's layers.TimeDistributed.
class TimeDistributed : public LayerHandle<TimeDistributedLayer> {
 public:
  /// Wraps `layer` itself, whose weights it then holds; further keys in `options` (name, ...).
  explicit TimeDistributed(const LayerPtr& layer, const Config& options = {});
  /// From a whole config, with the keys of TimeDistributedLayer(const Config&).
  explicit TimeDistributed(const Config& config) : LayerHandle(std::make_shared<TimeDistributedLayer>(config)) {}
};

}  // namespace kiln
