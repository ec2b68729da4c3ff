#pragma once
// Model configs as Keras writes them, turned into the configs kiln's model_from_config reads. kiln's own
// configs already use Keras's class names, argument names and node format, so most of the work is
// removing what only Python needs and rewriting the older formats:
//   Keras 3 (config.json of a `.keras` file, and the model_config of Keras 3's legacy `.h5`):
//     "module", null "registered_name" and "shared_object_id" keys go; a merge layer's list argument
//     becomes its inputs; null call arguments (Keras's mask=None) go; build_config's "shapes_dict" becomes
//     kiln's "input_shapes"; an empty compile_config goes.
//   Keras 2 and tf.keras (the model_config of a legacy `.h5`):
//     "Model" is "Functional"; a Sequential whose config is a bare list, or whose first layer carries
//     "batch_input_shape", gets its InputLayer; InputLayer's "batch_input_shape" is "batch_shape";
//     inbound nodes [[layer, node, tensor, kwargs], ...] become {"args", "kwargs"}.
#include <string>

#include <kiln/layers/config.hpp>

namespace kiln::detail {

// The model config kiln reads, from a Keras model config ({"class_name", "config", ...}). ConfigError
// naming `where` for what cannot be read; a Lambda layer is refused here, as Keras's safe_mode refuses it.
Config import_keras_model_config(const Config& keras, const std::string& where);

// True for a file Keras 2 or tf.keras wrote: its keras_version ("2.15.0") is not Keras 3's. An empty version
// (a file that names none) counts as Keras 3's.
bool written_by_keras2(const std::string& keras_version);

// A Keras 2 model config with Keras 2's meanings: its "hard_sigmoid" (clip(0.2 x + 0.5, 0, 1)) is not Keras 3's
// (relu6(x + 3) / 6), so every activation and recurrent_activation named "hard_sigmoid" becomes
// "hard_sigmoid_keras2".
Config with_keras2_activations(const Config& keras);

// A compile config kiln's compile_from reads ({"optimizer", "loss", "metrics"}), from Keras 3's
// compile_config or from the training_config of a legacy `.h5` ({"optimizer_config", "loss", "metrics", ...}),
// where Keras 2's optimizers say "lr" for learning_rate and "decay" for an InverseTimeDecay schedule with
// decay_steps 1; without an optimizer, Keras's default ("rmsprop"). Null when it names no loss (Keras compiles
// such a model without one; kiln leaves it uncompiled). ConfigError for what kiln cannot honour (loss_weights).
Config import_keras_compile_config(const Config& keras);

}  // namespace kiln::detail
