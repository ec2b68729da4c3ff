#pragma once
// Graph builders for every op: each call adds a node to its inputs' graph and returns its Tensor.
// Shapes are checked here, when the node is created; kernels and backward rules live in ops/*.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/tensor.hpp>

namespace kiln {
class Array;
}

namespace kiln::ops {

using Axes = std::vector<std::int64_t>;

// ---- constants -----------------------------------------------------------------------------------
Tensor constant(Graph& graph, const Array& value, const std::string& name = "constant");
Tensor scalar_like(const Tensor& like, double value);  ///< a () constant of like's dtype
/// A (query_length, key_length) constant: 1 where query i may attend key j, i.e. j <= i (Keras's
/// top-left aligned causal mask), 0 elsewhere.
Tensor causal_mask(Graph& graph, std::int64_t query_length, std::int64_t key_length, DType dtype);
Tensor zeros_like(const Tensor& like);  ///< computed from like's runtime shape
Tensor ones_like(const Tensor& like);

// ---- elementwise, NumPy broadcasting -------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);  ///< base > 0 where the exponent is not an integer
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/// Ties in maximum/minimum send the whole gradient to `a`.
/// Comparisons give 1 where true and 0 elsewhere, in the inputs' dtype; no gradient flows through them.
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);

Tensor scale(const Tensor& x, double factor);         ///< x * factor
Tensor add_scalar(const Tensor& x, double value);     ///< x + value
Tensor pow_scalar(const Tensor& x, double exponent);  ///< x ** exponent

// ---- elementwise, one input ----------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.2);  ///< Keras's default slope
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor gelu(const Tensor& x, bool approximate = true);  ///< approximate: tanh form (Keras default)
Tensor swish(const Tensor& x);                          ///< x * sigmoid(x), a.k.a. silu
inline Tensor silu(const Tensor& x) { return swish(x); }
Tensor softplus(const Tensor& x);
/// By Keras name: "linear"/"" (identity), "relu", "sigmoid", "tanh", "softmax", "swish"/"silu", "gelu",
/// "elu", "softplus", "leaky_relu", "exponential", "log_softmax". Throws ConfigError on others.
Tensor activation(const Tensor& x, const std::string& name);
const std::vector<std::string>& activation_names();
/// Throws ConfigError naming `who` and the nearest valid name unless `name` is a known activation.
void check_activation(const std::string& name, const std::string& who);

// ---- softmax ------------------------------------------------------------------------------------
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);

// ---- reductions -----------------------------------------------------------------------------------
/// Empty axes: reduce over every axis. Negative axes count from the end.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false);  ///< ties share the gradient
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
/// Sums x down to `shape` over the axes that broadcasting expanded (autodiff's reduction).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- matrix products ------------------------------------------------------------------------------
/// a: (..., m, k) or (..., k, m) when transpose_a; b likewise. Batch dimensions broadcast. A rank-2 b
/// with a rank-3+ a is one GEMM over all rows (a Dense layer). Straight to cblas, no transposed copies.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ---- attention -------------------------------------------------------------------------------------
/// softmax(scale·q·kᵀ)·v over the last two axes of q (..., T, d), k (..., S, d) and v (..., S, dv), whose
/// leading axes (batch, heads, ...) are equal: output (..., T, dv). Where `mask` (broadcastable to
/// (..., T, S), keys on its last axis) is 0, and where key j > query i when `causal` (top-left aligned, as
/// ops::causal_mask), the weight is exactly 0; a query that may attend nothing gets zeros. Fused: streams
/// over key blocks with an online softmax and recomputes the weights in backward, so neither pass holds a
/// T×S buffer. Differentiable in q, k and v.
/// heads_last: q (..., T, H, d), k (..., S, H, d), v (..., S, H, dv) and the output (..., T, H, dv), the
/// layout a head-split reshape of (..., T, H·d) gives, read in place with strides: no transposed copies.
/// The mask still broadcasts to (..., H, T, S).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask = {},
                       bool causal = false, bool heads_last = false);

// ---- shapes ----------------------------------------------------------------------------------------
/// One dimension may be -1 (inferred). Keeps the batch dimension unknown when it is.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& perm = {});  ///< default: reverse axes
inline Tensor permute(const Tensor& x, const std::vector<std::int64_t>& perm) { return transpose(x, perm); }
Tensor concat(const std::vector<Tensor>& xs, int axis = -1);
std::vector<Tensor> split(const Tensor& x, int num_splits, int axis = -1);
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis = -1);
/// begin/size per axis; size -1 means "to the end".
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& size);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, const Axes& axes = {});  ///< empty: every axis of size 1
Tensor expand_dims(const Tensor& x, int axis);

// ---- selection -----------------------------------------------------------------------------------
/// condition is numeric, nonzero meaning true; all three broadcast together.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
/// x where mask is zero becomes `value`; mask broadcasts to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// Rows of params (vocabulary, ...) picked by integer-valued indices of any shape:
/// output shape = indices.shape + params.shape[1:]. Throws ValueError at run time on an index out of range.
Tensor gather(const Tensor& params, const Tensor& indices);

// ---- regularization, normalization -----------------------------------------------------------------
/// Inverted dropout: keeps each element with probability 1 - rate and scales it by 1 / (1 - rate).
/// The mask depends on (seed, the program's run count, element), so it is reproducible and backward
/// regenerates it.
/// With training = false it is the identity.
Tensor dropout(const Tensor& x, double rate, std::uint64_t seed, bool training = true);
/// Over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta; gamma and beta have the last
/// dimension's size. Fused forward and backward.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon = 1e-3);

// ---- losses (mean over every element but the last axis's reduction, like Keras) ---------------------
/// Each returns a scalar: the mean over the batch of the per-sample loss.
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);
Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta = 1.0);
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
/// y_true holds class indices (shape of y_pred without its last axis).
Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);

}  // namespace kiln::ops

namespace kiln {
/// Arithmetic on symbolic tensors reads like the math.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& x) { return ops::neg(x); }
inline Tensor operator*(const Tensor& x, double factor) { return ops::scale(x, factor); }
inline Tensor operator*(double factor, const Tensor& x) { return ops::scale(x, factor); }
inline Tensor operator+(const Tensor& x, double value) { return ops::add_scalar(x, value); }
inline Tensor operator-(const Tensor& x, double value) { return ops::add_scalar(x, -value); }
}  // namespace kiln
