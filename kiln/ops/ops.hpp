#pragma once
// Graph builders for every op: each call adds a node to its inputs' graph and returns its Tensor.
// Shapes are checked here, when the node is created; kernels and backward rules live in ops/*.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/attributes.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln {
class Array;
}

namespace kiln::ops {

/// The axes of a reduction or a squeeze; negative ones count from the end.
using Axes = std::vector<std::int64_t>;

// ---- constants -----------------------------------------------------------------------------------
/// A constant node of `value`'s shape and dtype, holding it. ValueError for an empty Array.
Tensor constant(Graph& graph, const Array& value, const std::string& name = "constant");
Tensor scalar_like(const Tensor& like, double value);  ///< a () constant of like's dtype
/// A (query_length, key_length) constant: 1 where query i may attend key j, i.e. j <= i (Keras's
/// top-left aligned causal mask), 0 elsewhere.
Tensor causal_mask(Graph& graph, std::int64_t query_length, std::int64_t key_length, DType dtype);
/// causal_mask for scores (..., T, S) whose lengths may be unknown until a plan is made: the constant when
/// both are known, else computed from the planned lengths. ShapeError for scores of rank below 2.
Tensor causal_mask_like(const Tensor& scores);
/// 0, 1, ..., n - 1 in x's dtype, for the size n that x's `axis` (negative from the end) has at run time:
/// the positions of a sequence whose length is unknown when the graph is built. No gradient flows into x.
Tensor positions(const Tensor& x, int axis);
Tensor zeros_like(const Tensor& like);  ///< computed from like's runtime shape
/// 1 everywhere, of like's dtype; computed from like's runtime shape, as zeros_like.
Tensor ones_like(const Tensor& like);
/// The size of x's `axis` (negative from the end) at run time, as a () tensor of x's dtype: the batch size
/// of an unknown batch. ShapeError for an axis x does not have; no gradient flows into x through it.
Tensor dim_size(const Tensor& x, int axis);

// ---- elementwise, NumPy broadcasting -------------------------------------------------------------
/// a + b, elementwise. The shapes broadcast as NumPy's; ShapeError when they cannot, DTypeError when the
/// dtypes differ (as for every op of two or more tensors).
Tensor add(const Tensor& a, const Tensor& b);
/// a − b, elementwise, broadcast as add.
Tensor sub(const Tensor& a, const Tensor& b);
/// a · b, elementwise, broadcast as add.
Tensor mul(const Tensor& a, const Tensor& b);
/// a / b, elementwise, broadcast as add. Division by 0 gives ±inf or NaN, as IEEE says.
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);  ///< base > 0 where the exponent is not an integer
/// The larger of a and b, elementwise, broadcast as add. A NaN on either side gives NaN, as NumPy's maximum
/// does. Ties send the whole gradient to `a`.
Tensor maximum(const Tensor& a, const Tensor& b);
/// The smaller of a and b, elementwise, broadcast as add. A NaN on either side gives NaN; ties send the whole
/// gradient to `a`.
Tensor minimum(const Tensor& a, const Tensor& b);
/// 1 where a > b and 0 elsewhere, in the inputs' dtype, broadcast as add. As for every comparison, no
/// gradient flows through it.
Tensor greater(const Tensor& a, const Tensor& b);
/// 1 where a >= b and 0 elsewhere, as greater.
Tensor greater_equal(const Tensor& a, const Tensor& b);
/// 1 where a < b and 0 elsewhere, as greater.
Tensor less(const Tensor& a, const Tensor& b);
/// 1 where a <= b and 0 elsewhere, as greater.
Tensor less_equal(const Tensor& a, const Tensor& b);
/// 1 where a == b and 0 elsewhere, as greater (a NaN equals nothing, itself included).
Tensor equal(const Tensor& a, const Tensor& b);

Tensor scale(const Tensor& x, double factor);         ///< x * factor
Tensor add_scalar(const Tensor& x, double value);     ///< x + value
Tensor pow_scalar(const Tensor& x, double exponent);  ///< x ** exponent

// ---- elementwise, one input ----------------------------------------------------------------------
/// −x.
Tensor neg(const Tensor& x);
/// eˣ.
Tensor exp(const Tensor& x);
/// The natural logarithm: −inf at 0 and NaN below.
Tensor log(const Tensor& x);
/// √x: NaN below 0.
Tensor sqrt(const Tensor& x);
/// 1 / √x, in one op.
Tensor rsqrt(const Tensor& x);
/// x².
Tensor square(const Tensor& x);
/// |x|. Its gradient is sign(x): 0 at 0.
Tensor abs(const Tensor& x);
/// The sine, of x in radians.
Tensor sin(const Tensor& x);
/// The cosine, of x in radians.
Tensor cos(const Tensor& x);
/// The hyperbolic tangent.
Tensor tanh(const Tensor& x);
/// 1 / (1 + e⁻ˣ): exactly 0, never NaN, for very negative x.
Tensor sigmoid(const Tensor& x);
/// max(x, 0). A NaN stays NaN, so broken data shows in the loss instead of vanishing.
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.2);  ///< Keras's default slope
/// x where x > 0, else alpha·(eˣ − 1); alpha 1.0 is Keras's default.
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor gelu(const Tensor& x, bool approximate = true);  ///< approximate: tanh form (Keras default)
Tensor swish(const Tensor& x);                          ///< x * sigmoid(x), a.k.a. silu
/// swish under its other name.
inline Tensor silu(const Tensor& x) { return swish(x); }
/// log(1 + eˣ), computed so that it neither overflows for large x nor loses the tail for very negative x.
Tensor softplus(const Tensor& x);
// Keras 3's other activations (keras.activations), with Keras's formulas and defaults. Each keeps a NaN.
Tensor relu6(const Tensor& x);                        ///< min(max(x, 0), 6)
Tensor selu(const Tensor& x);                         ///< scale · elu(x, alpha), Keras's two constants
Tensor celu(const Tensor& x, double alpha = 1.0);     ///< max(x, 0) + alpha · expm1(min(x, 0) / alpha)
Tensor softsign(const Tensor& x);                     ///< x / (1 + |x|)
Tensor mish(const Tensor& x);                         ///< x · tanh(softplus(x))
Tensor log_sigmoid(const Tensor& x);                  ///< −softplus(−x), stable in both tails
/// Keras 3's hard_sigmoid: relu6(x + 3) / 6 (slope 1/6, 0 below −3, 1 above 3).
Tensor hard_sigmoid(const Tensor& x);
/// Keras 2's and tf.keras's hard_sigmoid: clip(0.2 x + 0.5, 0, 1). Files Keras 2 wrote mean this one
/// ("hard_sigmoid_keras2" by name); Keras 3 has no name for it.
Tensor hard_sigmoid_keras2(const Tensor& x);
Tensor hard_silu(const Tensor& x);                    ///< x · hard_sigmoid(x), a.k.a. hard_swish
Tensor hard_tanh(const Tensor& x);                    ///< clip(x, −1, 1)
Tensor tanh_shrink(const Tensor& x);                  ///< x − tanh(x)
Tensor soft_shrink(const Tensor& x, double threshold = 0.5);  ///< x ∓ threshold outside ±threshold, else 0
Tensor hard_shrink(const Tensor& x, double threshold = 0.5);  ///< x outside ±threshold, else 0
/// (x + √(x² + b)) / 2; ValueError for b < 0.
Tensor squareplus(const Tensor& x, double b = 4.0);
Tensor sparse_plus(const Tensor& x);                  ///< 0 to −1, (x + 1)² / 4 between, x from 1
Tensor sparse_sigmoid(const Tensor& x);               ///< clip((x + 1) / 2, 0, 1)
/// Sparsemax over the last axis (Martins & Astudillo 2016): the Euclidean projection onto the simplex, so
/// each row sums to 1 with exact zeros. Keras 3.16's differs whenever two or more entries are nonzero
/// (keras-team/keras#23425, fixed after 3.16); kiln computes the definition.
Tensor sparsemax(const Tensor& x);
/// The gated linear unit: the first half of `axis` times the sigmoid of the second; ShapeError for an odd
/// or unknown size.
Tensor glu(const Tensor& x, int axis = -1);
/// By Keras name, every name keras.activations.get takes: "linear"/"" (identity), "relu", "relu6",
/// "sigmoid", "tanh", "softmax", "log_softmax", "silu"/"swish", "gelu" (the exact erf form, as
/// keras.activations.gelu), "elu", "selu", "celu", "softplus", "softsign", "leaky_relu" (slope 0.2),
/// "exponential", "mish", "log_sigmoid", "hard_sigmoid", "hard_silu"/"hard_swish", "hard_tanh",
/// "tanh_shrink", "soft_shrink", "hard_shrink", "squareplus", "sparse_plus", "sparse_sigmoid", "sparsemax",
/// "glu", and "hard_sigmoid_keras2" (Keras 2's). "threshold" has no defaults in Keras and is refused by
/// name. Throws ConfigError on others, naming the nearest.
Tensor activation(const Tensor& x, const std::string& name);
/// The names activation() takes, in a fixed order ("" is taken too, as "linear").
const std::vector<std::string>& activation_names();
/// Throws ConfigError naming `who` and the nearest valid name unless `name` is a known activation.
void check_activation(const std::string& name, const std::string& who);

// ---- softmax ------------------------------------------------------------------------------------
/// exp(x) / sum(exp(x)) along `axis` (negative counts from the end), shifted by the maximum so that large
/// logits do not overflow. ShapeError for an axis out of range.
Tensor softmax(const Tensor& x, int axis = -1);
/// (x − max) − log(sum(exp(x − max))) along `axis`: finite where log(softmax(x)) would be −inf. ShapeError
/// for an axis out of range.
Tensor log_softmax(const Tensor& x, int axis = -1);

// ---- reductions -----------------------------------------------------------------------------------
/// Empty axes: reduce over every axis. Negative axes count from the end.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
/// The mean over `axes` (empty: every axis; negative ones count from the end).
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false);  ///< ties share the gradient
/// The minimum over `axes`, read as sum's. A NaN among the values gives NaN; ties share the gradient.
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
/// Sums x down to `shape` over the axes that broadcasting expanded (autodiff's reduction).
Tensor sum_to(const Tensor& x, const Shape& shape);
/// x scaled to unit L2 norm over `axes`: x · rsqrt(max(sum(x², axes), 1e-24)), Keras's ops.normalize with
/// its epsilon 1e-12 on the norm, so a zero vector stays zero with a finite gradient. Composed of the ops
/// above.
Tensor l2_normalize(const Tensor& x, const Axes& axes = {-1});

// ---- matrix products ------------------------------------------------------------------------------
/// a: (..., m, k) or (..., k, m) when transpose_a; b likewise. Batch dimensions broadcast. A rank-2 b
/// with a rank-3+ a is one GEMM over all rows (a Dense layer). Straight to cblas, no transposed copies.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ---- int8 quantization (Keras's int8 mode) -------------------------------------------------------------------
/// Keras's int8 Dense product (Dense._int8_call): x (..., K) float32 or float64, kernel (K, N) int8, kernel_scale
/// (N,) in x's dtype. With quantize_inputs (Keras's default AbsMaxQuantizer on the inputs), each row of x is
/// quantized to int8 as Keras does it (scale s = 127 / (max|row| + 1e-7), values round(x · s) clipped to ±127,
/// ties to even), multiplied by the kernel in int32 (oneDNN's VNNI kernels where the CPU has them), and divided by
/// kernel_scale · s; without, y = (x · kernel) / kernel_scale. Differentiable in x only, as Keras's custom
/// gradient: dx = dy · (kernel / kernel_scale)ᵀ.
/// Keras's EinsumDense projections: `kernel_input_axes` = a, the kernel's first a axes are the input features
/// (K = their product) and the others the units (N), e.g. (d_model, heads, depth) with a = 1 or (heads, depth,
/// d_model) with a = 2 (x then (..., heads · depth)); kernel_scale then holds N values in any shape, as Keras keeps
/// it ((1, 1, heads, depth)). `transpose_kernel`: the kernel is (N, K), a tied ReversibleEmbedding's table in reverse,
/// with one scale per row of it. `int4_units` N > 0: the kernel is Keras's packed per-channel int4 (K, ceil(N/2))
/// (two values a byte, the even unit in the low nibble; an EinsumDense's flattened to 2-D), unpacked each step as
/// Keras's _int4_call unpacks it; kernel_scale its N values.
/// `int4_packed_rows`: packed along the stored kernel's rows instead (Keras's unpack_int4(axis=0), an untied
/// ReversibleEmbedding's reverse_embeddings (ceil(features/2), vocabulary)); `int4_units` is then the row count.
/// Transposed, the packed axis is the stored kernel's last one and `int4_units` its K.
Tensor quantized_matmul(const Tensor& x, const Tensor& kernel, const Tensor& kernel_scale, bool quantize_inputs = true,
                        int kernel_input_axes = 1, bool transpose_kernel = false, std::int64_t int4_units = 0,
                        bool int4_packed_rows = false);
/// Keras's int4 by groups in a product whose inputs may be quantized (a ReversibleEmbedding in reverse,
/// _int4_call): the float kernel (value - zero) · scale (ops::dequantize_int4 with `units`, `packed_rows` and
/// `group_axis`), multiplied by x, or with quantize_inputs by each row's AbsMaxQuantizer values q and divided by
/// its scale s (Keras's matmul of int8 inputs by a float kernel, then / s). `transpose_kernel`: the stored kernel
/// is (N, K). Differentiable in x through the float kernel (straight through the input quantizer).
Tensor quantized_matmul_int4_groups(const Tensor& x, const Tensor& kernel, const Tensor& scale, const Tensor& zero,
                                    const Tensor& g_idx, std::int64_t units, bool packed_rows, std::int64_t group_axis,
                                    bool quantize_inputs, bool transpose_kernel);
/// q / scale in scale's dtype: the float values a quantized kernel stands for (Keras's `kernel` of a quantized
/// layer). The scale's N values go with q's trailing axes that make N values (a kernel's units: scale (N,) for q
/// (..., N)), or with `leading`, with its leading ones (one per row of a transposed kernel). Not differentiable.
/// `int4_units` C > 0: q is a packed int4 (R, ceil(C/2)), the result (R, C).
Tensor dequantize(const Tensor& q, const Tensor& scale, bool leading = false, std::int64_t int4_units = 0,
                  bool int4_packed_rows = false);
/// Keras's int4 sub-channel kernel as floats (Dense._int4_call, "int4/<block>"): `kernel` (K, ceil(units/2)) int8
/// packs two int4 values a byte (even column in the low nibble), `scale` (G, units) in the result's dtype, `zero`
/// (G, units) int8, `g_idx` (K,) each row's group: (value - zero[g]) · scale[g]. Not differentiable.
/// `packed_rows`: packed along the rows instead (Keras's unpack_int4(axis=0)), `units` then the row count;
/// `group_axis` 1: the groups run along the columns (g_idx one per column, scale and zero (rows, groups)), as a
/// ReversibleEmbedding's tied table in reverse.
Tensor dequantize_int4(const Tensor& kernel, const Tensor& scale, const Tensor& zero, const Tensor& g_idx,
                       std::int64_t units, bool packed_rows = false, std::int64_t group_axis = 0);
/// Keras's int8 Embedding lookup (Embedding._int8_call): the rows of an int8 table (V, ...) picked by integer-valued
/// ids (in scale's dtype), each as floats divided by its row's scale (V,): output ids.shape + table.shape[1:]. An id
/// outside [0, V) or not whole throws ValueError when the step runs. Not differentiable.
Tensor quantized_gather(const Tensor& table, const Tensor& scale, const Tensor& ids);
/// Keras's int4 Embedding lookup (Embedding._int4_call): `table` (V, ceil(D/2)) packs two int4 values a byte (even
/// column in the low nibble), `columns` = D. Per-channel (no zero): scale (V,), each value / scale[id]. By groups
/// of columns: scale (V, G) in the result's dtype, zero (V, G) int8, g_idx (D,) each column's group:
/// (value - zero[id, g]) · scale[id, g]. Ids as quantized_gather checks them; not differentiable.
Tensor quantized_gather_int4(const Tensor& table, const Tensor& scale, const Tensor& ids, std::int64_t columns,
                             const Tensor& zero = Tensor(), const Tensor& g_idx = Tensor());
/// An int8 array and its scale (`values` / `scale` approximates the float array).
struct QuantizedArray {
  Array values;  ///< int8, the input's shape
  Array scale;   ///< the input's dtype and shape with `axis` of size 1
};
/// Keras's abs_max_quantize(values, axis, value_range=(-value_max, value_max)) as its numpy path computes it in
/// the values' dtype: scale = value_max / (max|values| along axis + 1e-7), values = clip(round(values · scale)),
/// ties to even. Dense.quantize("int8") quantizes its kernel this way along axis 0 (one scale per unit).
/// Throws ValueError on a bad axis or value_max, DTypeError on int8 input.
QuantizedArray abs_max_quantize(const Array& values, int axis, int value_max = 127);
/// float32 values rounded to bfloat16 (to nearest, ties to even; as ml_dtypes and vcvtneps2bf16), held in float32:
/// a Keras bfloat16 variable's values. A new array; DTypeError unless float32.
Array round_to_bfloat16(const Array& values);
/// The same in a graph: float32 values rounded to bfloat16 (float64 ones unchanged), what a training step assigns
/// to a "bfloat16" layer's variable after the optimizer's update. Not differentiable.
Tensor round_to_bfloat16(const Tensor& x);

// ---- attention -------------------------------------------------------------------------------------
/// softmax(scale·q·kᵀ)·v over the last two axes of q (..., T, d), k (..., S, d) and v (..., S, dv), whose
/// leading axes (batch, heads, ...) are equal: output (..., T, dv). Where `mask` (broadcastable to
/// (..., T, S), keys on its last axis) is 0, and where key j > query i when `causal` (top-left aligned, as
/// ops::causal_mask), the weight is exactly 0; a query that may attend nothing gets zeros. Fused: a long
/// sequence (T or S above 256) streams over key blocks with an online softmax and recomputes the weights in
/// backward, so neither pass holds a T×S buffer; a shorter one keeps its weights for the backward (T×S per
/// head, as the unfused composition), when the plan has a backward. Differentiable in q, k and v.
/// heads_last: q (..., T, H, d), k (..., S, H, d), v (..., S, H, dv) and the output (..., T, H, dv), the
/// layout a head-split reshape of (..., T, H·d) gives, read in place with strides: no transposed copies.
/// The mask still broadcasts to (..., H, T, S).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask = {},
                       bool causal = false, bool heads_last = false);

// ---- recurrence ------------------------------------------------------------------------------------
/// Which recurrent cell runs and how, with Keras 3's names (SimpleRNN, LSTM, GRU).
struct RecurrentOptions {
  std::string cell = "lstm";  ///< "simple_rnn", "lstm" or "gru"
  /// The cell's activations: linear, tanh, sigmoid, relu or hard_sigmoid (Keras 3's, relu6(x + 3) / 6).
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";  ///< the gates' (LSTM and GRU)
  bool reset_after = true;            ///< GRU: r multiplies h·U_h + b_h (the bias is then (2, 3U)), else h before it
  bool go_backwards = false;          ///< read x from the last step to the first; outputs stay in that order
  bool zero_output_for_mask = false;  ///< a masked step outputs zeros instead of the previous h
  /// Keep every step's gates for backward (training). false (inference) keeps two steps' at a time, so the
  /// op's memory does not grow with the sequence; a gradient asked for anyway runs the forward pass again.
  bool keep_records = true;
};

/// A whole sequence through a recurrent cell, as Keras 3's cells compute it: x (B, T, I), kernel (I, G·U),
/// recurrent_kernel (U, G·U) with gate blocks [i|f|c|o] (LSTM, G = 4), [z|r|h] (GRU, G = 3) or one (SimpleRNN),
/// bias (G·U), or (2, G·U) for GRU with reset_after (input bias, then recurrent bias). `initial_states`: none
/// (zeros) or the cell's states, h (B, U) and for LSTM also c (B, U). `mask` (B, T): where 0, the step keeps
/// the states and outputs the previous h (or zeros). `recurrent_masks` (B, G, U): recurrent dropout, each
/// gate's mask multiplying h in that gate's product, fixed over the sequence.
/// Returns (B, S + T, U): the S final states (h, and c for LSTM), then the T outputs in processing order.
/// Fused: one GEMM for every step's input projection, one a step for the recurrence; backward through time
/// in one op. Differentiable in x, the weights and the initial states.
Tensor recurrent(const Tensor& x, const Tensor& kernel, const Tensor& recurrent_kernel, const Tensor& bias,
                 const std::vector<Tensor>& initial_states, const RecurrentOptions& options, const Tensor& mask = {},
                 const Tensor& recurrent_masks = {});

// ---- convolution -----------------------------------------------------------------------------------
/// How a convolution slides its kernel, with Keras's names and defaults.
struct ConvOptions {
  /// The step between windows, one value per spatial axis or one for all; empty means 1.
  std::vector<std::int64_t> strides;
  /// The spacing between kernel taps (atrous convolution), one per spatial axis or one for all; empty means 1.
  std::vector<std::int64_t> dilation_rate;
  /// "valid" (windows that fit), "same" (output length ceil(input / stride), zeros split around the input,
  /// the odd one after) or, in 1-D only, "causal" (dilation·(kernel − 1) zeros before the input).
  std::string padding = "valid";
  /// "channels_last": x is (batch, *spatial, channels); "channels_first": (batch, channels, *spatial).
  std::string data_format = "channels_last";
};
/// The cross-correlation of x, (batch, length, C) in 1-D or (batch, height, width, C) in 2-D (or
/// channels_first), with a kernel of Keras's layout (*kernel_size, C / groups, filters): the output is
/// (batch, *out, filters). The groups follow from the shapes, as in Keras: C / kernel's second-to-last
/// dimension (so a kernel with 1 input channel per group on C channels is a depthwise convolution).
/// ShapeError, naming the shapes, for a wrong rank, channels that do not divide into groups, filters that
/// do not, a window larger than the input with "valid" padding, zero strides or dilations, an unknown
/// data_format or padding, or "causal" in 2-D. Differentiable in x and kernel (to any order).
Tensor conv(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
/// activation(conv(x, kernel) + bias), the bias (filters,) over the channel axis, in one op (kiln>FusedConv) that
/// adds the bias and a "relu" while each block of outputs is in cache; any other Keras activation name follows as
/// its own op. What Conv1D and Conv2D with a bias run. conv's errors, a ShapeError for a bias that is not one value
/// per filter, and ConfigError for an unknown activation. Differentiable in x, kernel and bias.
Tensor conv_bias_activation(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                            const std::string& activation = "linear", const ConvOptions& options = {});
/// The shape conv(x, kernel, options) would have, or the ShapeError conv would throw; for layers that check
/// their inputs when they build, before any node exists.
Shape conv_output_shape(const Shape& x, const Shape& kernel, const ConvOptions& options = {});
/// The transposed convolution (the gradient of conv with respect to its input): x is (batch, *in,
/// kernel's last dimension), the kernel (*kernel_size, output channels, x's channels) as Keras's
/// ConvTranspose layers store it, and the output (batch, *output_spatial, output channels), where conv of
/// the output with the same options would give x's spatial shape (ShapeError otherwise). With
/// `pad_before` (one count per spatial axis), the convolution it is the gradient of pads that many zeros
/// before its input instead of what `options.padding` says, and the output may have any length: taps that
/// fall outside it are dropped (how Keras's transposed convolutions with output_padding pad).
Tensor conv_transpose(const Tensor& x, const Tensor& kernel, const std::vector<std::int64_t>& output_spatial,
                      const ConvOptions& options = {}, const std::vector<std::int64_t>& pad_before = {});

// ---- pooling ---------------------------------------------------------------------------------------
/// How a pooling op slides its window, with Keras's names and defaults.
struct PoolOptions {
  /// The window, one size per spatial axis (1 in 1-D, 2 in 2-D).
  std::vector<std::int64_t> pool_size;
  /// The step between windows, per spatial axis or one for all; empty means pool_size (Keras's default).
  std::vector<std::int64_t> strides;
  /// "valid" (windows that fit) or "same" (output length ceil(input / stride)).
  std::string padding = "valid";
  /// "channels_last": x is (batch, *spatial, channels); "channels_first": (batch, channels, *spatial).
  std::string data_format = "channels_last";
};
/// The largest value of each window, per channel: x (batch, *spatial, channels) to (batch, *out, channels).
/// A window holding a NaN gives NaN. The gradient goes to the window's maximum, the first one on ties.
/// ShapeError, naming the shapes, for a rank that is not the window's + 2, a window larger than the input
/// with "valid" padding, zero sizes or strides, or an unknown padding or data_format.
Tensor max_pool(const Tensor& x, const PoolOptions& options);
/// The mean of each window over the positions inside the input (padding does not count, as in Keras).
/// Shapes and errors as max_pool; differentiable to any order.
Tensor avg_pool(const Tensor& x, const PoolOptions& options);
/// The shape max_pool and avg_pool give for x, or the ShapeError they throw.
Shape pool_output_shape(const Shape& x, const PoolOptions& options);

// ---- batch normalization -------------------------------------------------------------------------------
/// What batch_norm_train makes: the normalized output, and the batch statistics the moving ones follow.
struct BatchNormTraining {
  Tensor output;    ///< (x − mean)·rsqrt(variance + epsilon)·gamma + beta, x's shape
  Tensor mean;      ///< (features,): the mean over every axis but `axis`
  Tensor variance;  ///< (features,): the biased variance (divided by the count, as Keras's ops.moments)
};
/// Batch normalization in training mode: x normalized with its own batch statistics over every axis but
/// `axis` (the features; negative counts from the end), then scaled by gamma and shifted by beta, both
/// (features,). Fused: one kernel for the statistics, one for the output, and a backward of two kernels
/// that is the whole derivative through the statistics. Differentiable in x, gamma and beta (once);
/// mean and variance carry no gradient. ShapeError for an axis out of range, an unknown feature axis, or
/// gamma or beta of another shape.
BatchNormTraining batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon = 1e-3,
                                   int axis = -1);

// ---- shapes ----------------------------------------------------------------------------------------
/// In a reshape's target: this axis keeps the input's size at the same axis, known or not. Splitting the
/// features of (None, None, 64) into heads is reshape(x, {keep_dim, keep_dim, 4, 16}), whatever the batch
/// and the sequence length turn out to be.
constexpr std::int64_t keep_dim = -2;
/// x with the dimensions `shape`: one may be -1 (inferred from the element count), any may be keep_dim.
/// Keeps the batch dimension unknown when it is. ShapeError when the counts cannot agree.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
/// x with like's shape, whatever its unknown dimensions turn out to be (no gradient flows into like).
/// ShapeError when the element counts cannot agree.
Tensor reshape_like(const Tensor& x, const Tensor& like);
/// x with like's first `leading_axes` dimensions, known or not, then `trailing` (known): unfolding
/// (batch·steps, units) into (batch, steps, units) is reshape_like(y, x, 2, {units}) for x (batch, steps, ...).
/// ShapeError when the element counts cannot agree.
Tensor reshape_like(const Tensor& x, const Tensor& like, int leading_axes, const std::vector<std::int64_t>& trailing);
Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& perm = {});  ///< default: reverse axes
/// x with the order of `axis` reversed (negative from the end), as Keras's ops.flip; any axis, the batch's
/// too. ShapeError for an axis x does not have.
Tensor flip(const Tensor& x, int axis);
/// transpose under its other name.
inline Tensor permute(const Tensor& x, const std::vector<std::int64_t>& perm) { return transpose(x, perm); }
/// The tensors joined along `axis` (negative counts from the end). They share their rank and every dimension
/// off the axis, and the axis is not the unknown batch axis: ShapeError otherwise, ValueError for no tensors.
Tensor concat(const std::vector<Tensor>& xs, int axis = -1);
/// `num_splits` equal, consecutive parts along `axis`. ShapeError when the axis is unknown (the batch) or
/// does not divide evenly.
std::vector<Tensor> split(const Tensor& x, int num_splits, int axis = -1);
/// Consecutive parts of these sizes along `axis`, each a slice. The sizes must sum to the axis's extent,
/// which must be known: ShapeError otherwise.
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis = -1);
/// `buffer` (batch, S, ...) with its steps [start, start + T) replaced by `rows` (batch, T, ...), where
/// `start` is a tensor of one element holding a whole number: data, not a shape (a decoder's position in
/// its key/value cache). ShapeError when the shapes disagree or T > S; ValueError at run time for a start
/// that is not whole or runs past S. Its gradient reaches buffer and rows, not start.
Tensor write_steps(const Tensor& buffer, const Tensor& rows, const Tensor& start);
/// Steps [start, start + steps) of `buffer` (batch, S, ...), start a one-element tensor as in write_steps.
Tensor read_steps(const Tensor& buffer, const Tensor& start, std::int64_t steps);
/// begin/size per axis; size -1 means "to the end".
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& size);
/// Python's slice(start, stop, step) in an index: a missing bound is std::nullopt (Slice{} is `:`, Slice{1, 8, 2}
/// is `1:8:2`, Slice{std::nullopt, std::nullopt, -1} is `::-1`); negative bounds count from the end.
struct Slice {
  /// Python's slice(start, stop, step); Slice() is `:`.
  Slice(std::optional<std::int64_t> start_at = std::nullopt, std::optional<std::int64_t> stop_before = std::nullopt,
        std::optional<std::int64_t> every = std::nullopt)
      : start(start_at), stop(stop_before), step(every) {}
  std::optional<std::int64_t> start;  ///< the first position (default: the start, or the end for a negative step)
  std::optional<std::int64_t> stop;   ///< the position the slice stops before (default: past the end)
  std::optional<std::int64_t> step;   ///< between positions, not 0 (default 1)
};
/// One entry of a NumPy basic index, as Python writes x[...]: a position (negative from the end; the axis is
/// dropped), a Slice, a new axis of size 1 (Python's None) or an ellipsis (every axis not otherwise named).
class Index {
 public:
  /// What an entry is.
  enum class Kind { integer = 0, slice = 1, new_axis = 2, ellipsis = 3 };
  Index(std::int64_t position) : kind_(Kind::integer), position_(position) {}  ///< NOLINT: x[-1]
  Index(int position) : Index(static_cast<std::int64_t>(position)) {}          ///< NOLINT
  Index(Slice slice) : kind_(Kind::slice), slice_(slice) {}                    ///< NOLINT: x[1:8:2]
  static Index new_axis();                                                     ///< x[None]
  static Index ellipsis();                                                     ///< x[...]
  Kind kind() const { return kind_; }
  std::int64_t position() const { return position_; }  ///< for Kind::integer
  const Slice& slice() const { return slice_; }        ///< for Kind::slice
 private:
  Kind kind_;
  std::int64_t position_ = 0;
  Slice slice_;
};
/// x[index] with NumPy's basic indexing, as Keras's GetItem (x[:, -1] on a symbolic tensor): each position
/// drops its axis, each Slice keeps it (steps may be negative), new axes add one of size 1, and an ellipsis
/// (one at most; else implied at the end) stands for the axes not named. get_item(x, {Slice{}, -1}) is the
/// last step of (batch, steps, features); an unknown axis is resolved when a plan knows its size. ShapeError
/// for too many indices, two ellipses, a step of 0, or a position out of range (when the plan knows the size).
/// Differentiable in x.
Tensor get_item(const Tensor& x, const std::vector<Index>& index);
/// An index as an op's attributes (kinds, starts, stops, steps; a missing bound is INT64_MIN): how a model
/// records a get_item call. index_from_attributes reads it back (ValueError for malformed attributes).
Attributes index_attributes(const std::vector<Index>& index);
/// The index index_attributes wrote.
std::vector<Index> index_from_attributes(const Attributes& attributes);
/// x with `before[a]` zeros before and `after[a]` zeros after it on each axis a (NumPy's pad with a constant
/// 0). ShapeError for a count per axis that is missing or negative, or padding on an unknown axis.
Tensor pad(const Tensor& x, const std::vector<std::int64_t>& before, const std::vector<std::int64_t>& after);
/// x repeated along its size-1 axes and new leading ones up to `shape`, as NumPy's broadcast_to. An unknown
/// (-1) dimension of `shape` keeps x's, which is how the batch passes. ShapeError when x cannot stretch to it.
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, const Axes& axes = {});  ///< empty: every axis of size 1
/// x with a new axis of size 1 at `axis`, counted in the output's axes: -1 appends one. ShapeError out of
/// range.
Tensor expand_dims(const Tensor& x, int axis);

// ---- selection -----------------------------------------------------------------------------------
/// condition is numeric, nonzero meaning true; all three broadcast together.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
/// x where mask is zero becomes `value`; mask broadcasts to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// Rows of params (vocabulary, ...) picked by integer-valued indices of any shape:
/// output shape = indices.shape + params.shape[1:]. Throws ValueError at run time on an index out of range.
Tensor gather(const Tensor& params, const Tensor& indices);
/// NumPy's and Keras's take_along_axis: x's entries at the integer-valued `indices` along `axis` (negative ones count
/// from the axis's end). indices has x's rank and, off the axis, x's sizes or 1 (stretched to x's); the output has
/// x's shape with indices' size on the axis. ShapeError when they do not fit; ValueError at run time on an index out
/// of range or not an integer. Its gradient adds each pick back at its position.
Tensor take_along_axis(const Tensor& x, const Tensor& indices, int axis);

// ---- regularization, normalization -----------------------------------------------------------------
/// Inverted dropout: keeps each element with probability 1 - rate and scales it by 1 / (1 - rate).
/// The mask depends on (seed, the program's run count, element), so it is reproducible and backward
/// regenerates it.
/// With training = false it is the identity.
Tensor dropout(const Tensor& x, double rate, std::uint64_t seed, bool training = true);
/// The mask of inverted dropout alone: 0 with probability `rate`, else 1 / (1 − rate), of x's shape with each
/// of `broadcast_axes` (negative from the end) of size 1, so that x · mask drops whole slices along them
/// (Keras's noise_shape; SpatialDropout drops whole channels). Drawn as dropout draws, per run; no gradient
/// flows into x through it.
Tensor dropout_mask(const Tensor& x, double rate, std::uint64_t seed, const std::vector<int>& broadcast_axes);
/// Standard normal draws of x's shape, new in each run of a program and reproducible from `seed` (as
/// dropout's masks); no gradient flows into x through them.
Tensor random_normal_like(const Tensor& x, std::uint64_t seed);
/// Over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta; gamma and beta have the last
/// dimension's size. Fused forward and backward.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon = 1e-3);
/// Root-mean-square normalization over the last `trailing_axes` axes: x · rsqrt(mean(x²) + epsilon) · scale,
/// where scale has the shape of those axes (Keras's ops.rms_normalization). Fused forward and backward.
Tensor rms_norm(const Tensor& x, const Tensor& scale, double epsilon = 1e-6, int trailing_axes = 1);
/// Group normalization (Wu and He): the channels on `axis` split into `groups` equal groups; each sample's
/// group is normalized over its channels and every axis but the batch (axis 0), with the biased variance,
/// then y = x̂ · gamma + beta per channel. gamma and beta have the channel count's size. Fused forward and
/// backward.
Tensor group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t groups, int axis = -1,
                  double epsilon = 1e-3);

// ---- losses (mean over every element but the last axis's reduction, like Keras) ---------------------
/// (y_pred − y_true)² averaged over every element. Each loss here returns a scalar: the mean over the batch
/// of the per-sample loss. y_true and y_pred must have the same shape (ShapeError); kiln::Loss matches their
/// ranks first, as Keras does.
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
/// |y_pred − y_true| averaged over every element, with mean_squared_error's shape rule.
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);
/// Per element, with e = y_pred − y_true: e²/2 where |e| <= delta, else delta·(|e| − delta/2); averaged over
/// every element, with mean_squared_error's shape rule. delta 1.0 is Keras's default.
Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta = 1.0);
/// −(t·log p + (1 − t)·log(1 − p)) averaged over every element (shapes as mean_squared_error). p is clipped to
/// [1e-7, 1 − 1e-7] (Keras's epsilon) and the gradient is 0 where it was; from_logits reads y_pred as logits,
/// computed without overflow.
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
/// −Σ t·log q over the last axis, averaged over the rows. q is y_pred divided by its row sum and clipped to
/// [1e-7, 1 − 1e-7], as Keras does; from_logits reads y_pred as logits (log_softmax). y_true is one-hot (or
/// probabilities) of y_pred's shape.
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
/// y_true holds class indices (shape of y_pred without its last axis).
Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);

}  // namespace kiln::ops

namespace kiln {
/// Arithmetic on symbolic tensors reads like the math.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
/// ops::sub.
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
/// ops::mul.
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
/// ops::div.
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
/// ops::neg.
inline Tensor operator-(const Tensor& x) { return ops::neg(x); }
/// ops::scale: one node, no constant for the factor.
inline Tensor operator*(const Tensor& x, double factor) { return ops::scale(x, factor); }
/// ops::scale, as x * factor.
inline Tensor operator*(double factor, const Tensor& x) { return ops::scale(x, factor); }
/// ops::add_scalar: one node, no constant for the value.
inline Tensor operator+(const Tensor& x, double value) { return ops::add_scalar(x, value); }
/// ops::add_scalar of −value.
inline Tensor operator-(const Tensor& x, double value) { return ops::add_scalar(x, -value); }
}  // namespace kiln
