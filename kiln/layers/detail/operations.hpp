#pragma once
// The keras.ops classes kiln implements (operations.cpp) and the forms kiln's own ops record as
// (operation_recordings.cpp), behind kiln/layers/operation.hpp's OperationLayer.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/layer.hpp>

namespace kiln::detail {

/// {"__tensor__": index}: a tensor among a call's arguments, the operation layer's input `index`.
Config tensor_marker(std::size_t index);
bool is_tensor_marker(const Config& value);

/// One call of an operation, as its class computes it.
struct OperationCall {
  const Layer& layer;
  const std::vector<Tensor>& inputs;
  const Config& config;  // the class's keys, defaults filled in
  const std::vector<Config>& args;
  const Config& kwargs;

  [[noreturn]] void fail(const std::string& what) const;
  const Config& arg(std::size_t index, const char* what) const;
  /// The tensor a marker refers to; ConfigError naming `what` for anything else.
  Tensor tensor(const Config& value, const char* what) const;
  /// args[0] as a tensor: the x of Keras's unary operations.
  Tensor x() const { return tensor(arg(0, "x"), "x"); }
  /// args[index] as a tensor, or a Python number made a scalar of `like`'s dtype.
  Tensor operand(std::size_t index, const char* what, const Tensor& like) const;
  /// Refuses any keyword argument but `allowed` ones, whose values are checked by the class.
  void no_kwargs(const std::vector<std::string>& allowed = {}) const;
  /// Refuses other than `count` positional arguments.
  void takes(std::size_t count) const;
};

/// A Keras operation class: the module Keras imports it from, its config keys besides name with the values
/// Keras's constructor defaults them to (nullopt: the key is required), and how kiln computes a call.
struct OperationClass {
  std::string module;
  std::vector<std::pair<std::string, std::optional<Config>>> keys;
  std::function<Tensor(const OperationCall&)> call;
};

/// Every Keras operation class kiln implements, by class name ("GetItem", "Mean", "Softmax").
const std::map<std::string, OperationClass>& operation_classes();

/// How a call of one of kiln's ops is written as a Keras operation: the class, its config keys (without the
/// name) and the call's args and kwargs, tensors as markers.
struct OperationRecording {
  std::string keras_class;
  Config config = Config::map();
  Config args = Config::list();
  Config kwargs = Config::map();
};

/// The Keras form of kiln's op `op` ("kiln>Exp", "get_item", "glu") with `attributes` on `inputs` tensors;
/// nullopt for an op Keras has no operation for.
std::optional<OperationRecording> operation_recording(const std::string& op, const Attributes& attributes,
                                                      std::size_t inputs);

}  // namespace kiln::detail
