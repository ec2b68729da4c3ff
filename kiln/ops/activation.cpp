// Activations by Keras name: what Dense(activation=...) and the Activation layer resolve.
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace ops {

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = {
      "linear",      "relu",        "sigmoid",     "tanh",           "softmax",      "swish",        "silu",
      "gelu",        "elu",         "softplus",    "leaky_relu",     "exponential",  "log_softmax",  "relu6",
      "selu",        "celu",        "softsign",    "mish",           "log_sigmoid",  "hard_sigmoid", "hard_silu",
      "hard_swish",  "hard_tanh",   "tanh_shrink", "soft_shrink",    "hard_shrink",  "squareplus",   "sparse_plus",
      "sparse_sigmoid", "sparsemax", "glu",        "hard_sigmoid_keras2", "gelu_approximate"};
  return names;
}

void check_activation(const std::string& name, const std::string& who) {
  if (name.empty()) return;
  if (name == "threshold")
    throw ConfigError(who + ": the activation 'threshold' takes two arguments (threshold, default_value) and has no "
                      "defaults, so it cannot be named alone (Keras fails when it is called); use ops::select or a ReLU "
                      "layer with a threshold");
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
  if (name == "gelu_approximate") return gelu(x, /*approximate=*/true);  // keras-hub's (GPT-2, BERT, Gemma)
  if (name == "elu") return elu(x, 1.0);
  if (name == "softplus") return softplus(x);
  if (name == "leaky_relu") return leaky_relu(x, 0.2);
  if (name == "relu6") return relu6(x);
  if (name == "selu") return selu(x);
  if (name == "celu") return celu(x, 1.0);
  if (name == "softsign") return softsign(x);
  if (name == "mish") return mish(x);
  if (name == "log_sigmoid") return log_sigmoid(x);
  if (name == "hard_sigmoid") return hard_sigmoid(x);
  if (name == "hard_sigmoid_keras2") return hard_sigmoid_keras2(x);
  if (name == "hard_silu" || name == "hard_swish") return hard_silu(x);
  if (name == "hard_tanh") return hard_tanh(x);
  if (name == "tanh_shrink") return tanh_shrink(x);
  if (name == "soft_shrink") return soft_shrink(x, 0.5);
  if (name == "hard_shrink") return hard_shrink(x, 0.5);
  if (name == "squareplus") return squareplus(x, 4.0);
  if (name == "sparse_plus") return sparse_plus(x);
  if (name == "sparse_sigmoid") return sparse_sigmoid(x);
  if (name == "sparsemax") return sparsemax(x);
  if (name == "glu") return glu(x, -1);
  return exp(x);  // "exponential"
}

}  // namespace ops
}  // namespace kiln
