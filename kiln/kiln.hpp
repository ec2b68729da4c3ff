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
#include <kiln/data/data.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/data/lookup.hpp>
#include <kiln/data/tokenizer.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/hub/causal_lm.hpp>
#include <kiln/hub/masked_lm.hpp>
#include <kiln/hub/preset.hpp>
#include <kiln/hub/text_classifier.hpp>
#include <kiln/hub/tokenizers/byte_pair_tokenizer.hpp>
#include <kiln/hub/tokenizers/sentence_piece_tokenizer.hpp>
#include <kiln/hub/tokenizers/tokenizer.hpp>
#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>
#include <kiln/layers/activations/activation.hpp>
#include <kiln/layers/applications/application_layers.hpp>
#include <kiln/layers/attention/attention.hpp>
#include <kiln/layers/attention/mh_attention.hpp>
#include <kiln/layers/attention/multi_head_attention.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/constraints.hpp>
#include <kiln/layers/convolutional/convolution.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/layers/core/masking.hpp>
#include <kiln/layers/hub/position_embedding.hpp>
#include <kiln/layers/hub/reversible_embedding.hpp>
#include <kiln/layers/hub/transformer.hpp>
#include <kiln/layers/initializers.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/normalization/batch_normalization.hpp>
#include <kiln/layers/normalization/group_normalization.hpp>
#include <kiln/layers/normalization/layer_normalization.hpp>
#include <kiln/layers/normalization/unit_normalization.hpp>
#include <kiln/layers/operation.hpp>
#include <kiln/layers/pooling/pooling.hpp>
#include <kiln/layers/preprocessing/normalization.hpp>
#include <kiln/layers/preprocessing/rescaling.hpp>
#include <kiln/layers/regularization/activity_regularization.hpp>
#include <kiln/layers/regularization/dropout.hpp>
#include <kiln/layers/regularization/noise.hpp>
#include <kiln/layers/regularizers.hpp>
#include <kiln/layers/reshaping/padding.hpp>
#include <kiln/layers/reshaping/reshaping.hpp>
#include <kiln/layers/rnn/recurrent.hpp>
#include <kiln/layers/rnn/wrappers.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/optim/schedules.hpp>
#include <kiln/serialize/backup.hpp>
#include <kiln/serialize/checkpoint.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/serialize/quantize.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/fit_options.hpp>
#include <kiln/train/generate.hpp>
#include <kiln/train/plot.hpp>
#include <kiln/train/progress.hpp>
#include <kiln/train/trainer.hpp>
#include <kiln/train/training.hpp>

/// A small, fast, Keras-like deep-learning framework: a static graph with reverse-mode autodiff, layers that
/// build from their first input, Keras's training loop, and one checked file per model.
namespace kiln {
/// Every op as a function on symbolic tensors: each makes one graph node, with its shape checked at once.
namespace ops {}
}  // namespace kiln
