#include "layers/detail/attention_math.hpp"

#include "core/error.hpp"
#include "core/graph.hpp"
#include "ops/ops.hpp"

namespace kiln::detail {

namespace {

Tensor broadcastable_mask(const std::string& who, const Tensor& mask, const Tensor& scores) {
  const Shape& scores_shape = scores.shape();
  const Shape& shape = mask.shape();
  if (mask.dtype() != scores.dtype())
    throw DTypeError(who + ": the mask is " + dtype_name(mask.dtype()) + " but the attention runs in " +
                     dtype_name(scores.dtype()) + "; give a mask of 1s and 0s in the model's dtype");
  const int rank = scores_shape.rank();
  const std::int64_t batch = scores_shape[0], queries = scores_shape.dim(-2), keys = scores_shape.dim(-1);
  // An unknown dimension (the batch) is checked when the data arrives; a known one must fit now.
  auto fits = [](std::int64_t given, std::int64_t wanted) {
    return given == wanted || given == 1 || given == Shape::unknown || wanted == Shape::unknown;
  };
  const bool padding = shape.rank() == 2 && fits(shape[0], batch) && fits(shape[1], keys);
  const bool per_query = shape.rank() == 3 && fits(shape[0], batch) && fits(shape[1], queries) && fits(shape[2], keys);
  if (!padding && !per_query)
    throw ShapeError(who, "the mask must be (batch, key_length) or (batch, query_length, key_length)",
                     {{"mask", shape}, {"scores", scores_shape}});
  Tensor result = padding ? ops::expand_dims(mask, 1) : mask;
  for (int axis = 1; axis < rank - 2; ++axis) result = ops::expand_dims(result, 1);
  return result;
}

}  // namespace

Tensor combined_mask(const std::string& who, const Tensor* given, bool causal, const Tensor& scores) {
  Tensor mask;
  if (given != nullptr) mask = broadcastable_mask(who, *given, scores);
  if (!causal) return mask;
  const std::int64_t queries = scores.shape().dim(-2), keys = scores.shape().dim(-1);
  if (queries == Shape::unknown || keys == Shape::unknown)
    throw ShapeError(who, "use_causal_mask needs known sequence lengths", {{"scores", scores.shape()}});
  const Tensor causal_part = ops::causal_mask(scores.graph(), queries, keys, scores.dtype());
  return mask.valid() ? mask * causal_part : causal_part;
}

Tensor masked_softmax(const Tensor& scores, const Tensor& mask) {
  if (!mask.valid()) return ops::softmax(scores, -1);
  // -1e9 (not -inf) keeps a fully masked row finite; zeroing after the softmax then empties it, where
  // the softmax alone would have spread it uniformly.
  return ops::masked_fill(ops::softmax(ops::masked_fill(scores, mask, -1e9), -1), mask, 0.0);
}

Tensor attention_scores(const Tensor& q, const Tensor& k, double scale) {
  const Tensor scores = ops::matmul(q, k, false, true);
  return scale == 1.0 ? scores : scores * scale;
}

Attended attend(const Tensor& scores, const Tensor& v, const Tensor& mask, double dropout_rate, std::uint64_t seed,
                bool training) {
  Attended result;
  result.weights = masked_softmax(scores, mask);
  Tensor weights = result.weights;
  if (training && dropout_rate > 0.0) weights = ops::dropout(weights, dropout_rate, seed, true);
  result.output = ops::matmul(weights, v);
  return result;
}

}  // namespace kiln::detail
