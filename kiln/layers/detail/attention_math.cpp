#include <kiln/layers/detail/attention_math.hpp>

#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::detail {

namespace {

// The caller's mask shaped to broadcast over scores of `scores_shape` (which need not exist).
Tensor broadcastable_mask(const std::string& who, const Tensor& mask, const Shape& scores_shape, DType dtype) {
  const Shape& shape = mask.shape();
  if (mask.dtype() != dtype)
    throw DTypeError(who + ": the mask is " + dtype_name(mask.dtype()) + " but the attention runs in " +
                     dtype_name(dtype) + "; give a mask of 1s and 0s in the model's dtype");
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

// (batch, L, H, d) <-> (batch, H, L, d).
Tensor swap_length_and_heads(const Tensor& x) { return ops::transpose(x, {0, 2, 1, 3}); }

// The shape q·kᵀ has: q's, with the keys' length last; (batch, H, T, S) for the heads_last layout.
Shape scores_shape_of(const Tensor& q, const Tensor& k, bool heads_last) {
  if (heads_last) return Shape({q.shape()[0], q.shape()[2], q.shape()[1], k.shape()[1]});
  std::vector<std::int64_t> dims(q.shape().dims().begin(), q.shape().dims().end() - 1);
  dims.push_back(k.shape().dim(-2));
  return Shape(std::move(dims));
}

}  // namespace

Tensor combined_mask(const std::string& who, const Tensor* given, bool causal, const Tensor& scores) {
  Tensor mask;
  if (given != nullptr) mask = broadcastable_mask(who, *given, scores.shape(), scores.dtype());
  if (!causal) return mask;
  const Tensor causal_part = ops::causal_mask_like(scores);
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

Attended attend(const std::string& who, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                const AttentionOptions& options) {
  const bool dropout = options.training && options.dropout_rate > 0.0;
  if (options.heads_last && (options.return_weights || dropout)) {  // the composition works heads-first
    AttentionOptions heads_first = options;
    heads_first.heads_last = false;
    Attended result =
        attend(who, swap_length_and_heads(q), swap_length_and_heads(k), swap_length_and_heads(v), scale, heads_first);
    result.output = swap_length_and_heads(result.output);
    return result;
  }
  if (options.return_weights || dropout) {
    const Tensor scores = attention_scores(q, k, scale);
    const Tensor mask = combined_mask(who, options.mask, options.causal, scores);
    const std::uint64_t seed = dropout && options.seed ? options.seed() : 0;
    return attend(scores, v, mask, options.dropout_rate, seed, options.training);
  }
  const Shape scores_shape = scores_shape_of(q, k, options.heads_last);
  Tensor mask;
  if (options.mask != nullptr) mask = broadcastable_mask(who, *options.mask, scores_shape, q.dtype());
  Attended result;
  result.output = ops::fused_attention(q, k, v, scale, mask, options.causal, options.heads_last);
  return result;
}

}  // namespace kiln::detail
