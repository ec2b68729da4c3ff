#include "layers/detail/attention_math.hpp"

#include "core/array.hpp"
#include "core/error.hpp"
#include "core/graph.hpp"
#include "ops/ops.hpp"

namespace kiln::detail {

Tensor causal_mask(Graph& graph, std::int64_t query_length, std::int64_t key_length, DType dtype) {
  Array mask({query_length, key_length}, dtype);
  for (std::int64_t i = 0; i < query_length; ++i)
    for (std::int64_t j = 0; j < key_length; ++j)
      mask.set_flat(static_cast<std::size_t>(i * key_length + j), j <= i ? 1.0 : 0.0);
  return ops::constant(graph, mask, "causal_mask");
}

Tensor broadcastable_mask(const std::string& who, const Tensor& mask, const Tensor& scores) {
  const Shape& scores_shape = scores.shape();
  const Shape& shape = mask.shape();
  if (mask.dtype() != scores.dtype())
    throw DTypeError(who + ": the mask is " + dtype_name(mask.dtype()) + " but the attention runs in " +
                     dtype_name(scores.dtype()) + "; give a mask of 1s and 0s in the model's dtype");
  const int rank = scores_shape.rank();
  const std::int64_t batch = scores_shape[0], queries = scores_shape.dim(-2), keys = scores_shape.dim(-1);
  auto fits = [](std::int64_t given, std::int64_t wanted) { return given == wanted || given == 1; };
  auto fail = [&]() -> Tensor {
    throw ShapeError(who, "the mask must be (batch, key_length) or (batch, query_length, key_length)",
                     {{"mask", shape}, {"scores", scores_shape}});
  };
  Tensor result = mask;
  if (shape.rank() == 2) {  // padding over keys
    if (!fits(shape[0], batch) || !fits(shape[1], keys)) return fail();
    result = ops::expand_dims(result, 1);
  } else if (shape.rank() == 3) {
    if (!fits(shape[0], batch) || !fits(shape[1], queries) || !fits(shape[2], keys)) return fail();
  } else {
    return fail();
  }
  // Heads (or any axes between batch and the last two) broadcast.
  for (int axis = 1; axis < rank - 2; ++axis) result = ops::expand_dims(result, 1);
  return result;
}

Tensor masked_softmax(const Tensor& scores, const Tensor& mask) {
  if (!mask.valid()) return ops::softmax(scores, -1);
  // -1e9 (not -inf) keeps a fully masked row finite; multiplying by the mask then zeroes it, where the
  // softmax alone would have spread it uniformly.
  return ops::softmax(ops::masked_fill(scores, mask, -1e9), -1) * mask;
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
