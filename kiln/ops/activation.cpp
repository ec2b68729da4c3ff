// Activations by Keras name: what Dense(activation=...) and the Activation layer resolve.
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace ops {

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = {"linear",     "relu",        "sigmoid",    "tanh", "softmax",
                                                 "swish",      "silu",        "gelu",       "elu",  "softplus",
                                                 "leaky_relu", "exponential", "log_softmax"};
  return names;
}

void check_activation(const std::string& name, const std::string& who) {
  if (name.empty()) return;
  for (const std::string& known : activation_names())
    if (known == name) return;
  std::string valid;
  for (const std::string& known : activation_names()) valid += (valid.empty() ? "" : ", ") + known;
  const std::string nearest = nearest_names(name, activation_names(), 1).front();
  throw ConfigError(who + ": unknown activation '" + name + "' (did you mean '" + nearest +
                    "'?); valid names: " + valid);
}

Tensor activation(const Tensor& x, const std::string& name) {
  check_activation(name, "activation");
  if (name.empty() || name == "linear") return x;
  if (name == "relu") return relu(x);
  if (name == "sigmoid") return sigmoid(x);
  if (name == "tanh") return tanh(x);
  if (name == "softmax") return softmax(x, -1);
  if (name == "log_softmax") return log_softmax(x, -1);
  if (name == "swish" || name == "silu") return swish(x);
  if (name == "gelu") return gelu(x, /*approximate=*/false);
  if (name == "elu") return elu(x, 1.0);
  if (name == "softplus") return softplus(x);
  if (name == "leaky_relu") return leaky_relu(x, 0.2);
  return exp(x);  // "exponential"
}

}  // namespace ops
}  // namespace kiln
