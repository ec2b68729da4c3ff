#pragma once
// Everything a kiln user needs: #include <kiln/kiln.hpp>
#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/layers/activation.hpp>
#include <kiln/layers/activity_regularization.hpp>
#include <kiln/layers/application_layers.hpp>
#include <kiln/layers/attention.hpp>
#include <kiln/layers/batch_normalization.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/constraints.hpp>
#include <kiln/layers/convolution.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/dropout.hpp>
#include <kiln/layers/embedding.hpp>
#include <kiln/layers/group_normalization.hpp>
#include <kiln/layers/initializers.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/layers/layer_normalization.hpp>
#include <kiln/layers/masking.hpp>
#include <kiln/layers/merging.hpp>
#include <kiln/layers/mh_attention.hpp>
#include <kiln/layers/model.hpp>
#include <kiln/layers/multi_head_attention.hpp>
#include <kiln/layers/noise.hpp>
#include <kiln/layers/normalization.hpp>
#include <kiln/layers/operation.hpp>
#include <kiln/layers/padding.hpp>
#include <kiln/layers/pooling.hpp>
#include <kiln/layers/position_embedding.hpp>
#include <kiln/layers/recurrent.hpp>
#include <kiln/layers/regularizers.hpp>
#include <kiln/layers/rescaling.hpp>
#include <kiln/layers/reshaping.hpp>
#include <kiln/layers/transformer.hpp>
#include <kiln/layers/wrappers.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/optim/schedules.hpp>
#include <kiln/serialize/backup.hpp>
#include <kiln/serialize/checkpoint.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/data.hpp>
#include <kiln/train/dataset.hpp>
#include <kiln/train/generate.hpp>
#include <kiln/train/lookup.hpp>
#include <kiln/train/model.hpp>
#include <kiln/train/plot.hpp>
#include <kiln/train/progress.hpp>
#include <kiln/train/tokenizer.hpp>

/// A small, fast, Keras-like deep-learning framework: a static graph with reverse-mode autodiff, layers that
/// build from their first input, Keras's training loop, and one checked file per model.
namespace kiln {
/// Every op as a function on symbolic tensors: each makes one graph node, with its shape checked at once.
namespace ops {}
}  // namespace kiln
