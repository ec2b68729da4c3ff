#pragma once
// Operation layers: keras.ops calls recorded in a functional model. Keras 3 records `x[:, -1]` on a symbolic
// tensor as a GetItem node and `keras.ops.add(a, b)` as an Add node (module keras.src.ops.numpy), each an
// Operation with its own config and the call's non-tensor arguments (the index, a scalar) in the node's args.
// kiln records the same: a kiln::ops function that has a Keras operation, called on the tensors of a model
// being written (from kiln::Input) outside any layer, becomes a call of an OperationLayer, so
//
//   kiln::Tensor x = kiln::Input({None, 24, 8});
//   kiln::Tensor h = kiln::LSTM(16, {{"return_sequences", true}})(x);
//   kiln::Tensor last = kiln::ops::get_item(h, {kiln::ops::Slice{}, -1});   // Keras's h[:, -1]
//   kiln::Model model(x, kiln::Dense(1)(last));
//
// saves, reloads and round-trips through Keras's files as Keras's own model would.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// One keras.ops call in a functional model: the Keras operation class (GetItem, Add, Multiply, Slice, ...),
/// its config (its name and constructor arguments, as Keras writes them) and the call's arguments, in which
/// each tensor is a marker for one of the layer's inputs. Registered as "keras.ops>GetItem", ...; a model
/// file names them as Keras does (module keras.src.ops.numpy, class_name GetItem). Keras's model.layers
/// leaves operations out, and so do the layer lists of Keras's weight files.
class OperationLayer final : public Layer {
 public:
  /// The operation `keras_class` ("GetItem") with `config` (name and the class's own keys: Slice's "shape").
  /// ConfigError for a class kiln does not implement or an unknown key.
  OperationLayer(const std::string& keras_class, const Config& config);

  /// The call's arguments, {"args": [...], "kwargs": {...}} as Keras's node writes them, with each tensor
  /// replaced by {"__tensor__": k}, k its position among the layer's inputs. A second call with other
  /// arguments is a ConfigError: one operation layer is one call, as in Keras.
  void set_arguments(const Config& arguments);
  /// The arguments set_arguments() gave (null before).
  const Config& arguments() const { return arguments_; }
  /// The arguments with each tensor marker replaced by `tensor(k)`: how a model writes the call.
  Config arguments_with(const std::function<Config(std::size_t)>& tensor) const;
  /// The module Keras imports the class from ("keras.src.ops.numpy").
  const std::string& keras_module() const;

  /// {"name": ..., the class's keys}: what Keras's Operation.get_config writes (no trainable, no dtype).
  Config get_config() const override;
  /// "keras.ops>" + the class ("keras.ops>GetItem").
  std::string registered_name() const override;

 protected:
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override { return {1, 1024}; }

 private:
  Config config_;     ///< the class's own keys, without the name
  Config arguments_;  ///< null until set
};

/// Whether `layer` is an OperationLayer (a keras.ops call, not one of Keras's model.layers).
bool is_operation(const Layer& layer);

/// The registry key prefix of operation layers: "keras.ops>".
inline const char* const kOperationPackage = "keras.ops";

/// Whether kiln implements the Keras operation `keras_class` ("GetItem").
bool has_keras_operation(const std::string& keras_class);

}  // namespace kiln
