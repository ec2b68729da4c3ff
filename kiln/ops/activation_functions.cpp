// The rest of Keras 3's activations (keras/src/activations/activations.py), each one op with its derivative
// beside it: relu6, selu, celu, softsign, mish, log_sigmoid, hard_sigmoid (and Keras 2's), hard_silu, hard_tanh,
// tanh_shrink, soft_shrink, hard_shrink, squareplus, sparse_plus, sparse_sigmoid; glu (two halves of an axis)
// and sparsemax (over the last axis). Each elementwise op is a function object with value(x, p) and
// derivative(x, p), p its one argument (celu's alpha, squareplus's b, the shrinks' threshold); its gradient op
// reads the forward input. A NaN stays NaN everywhere, as in relu (Keras's shrinks return 0 for one: a NaN
// vanishing into a finite loss hides a broken run).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

template <class T>
T softplus_of(T x) {
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::abs(x)));
}

template <class T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// 0 for a number, the NaN itself for a NaN: where a function is constant 0, a NaN still shows.
template <class T>
T zero_or_nan(T x) {
  return x == x ? T(0) : x;
}

struct Relu6 {  // min(max(x, 0), 6); derivative 0 at both kinks
  template <class T>
  static T value(T x, T) { return x < T(0) ? T(0) : (x > T(6) ? T(6) : x); }
  template <class T>
  static T derivative(T x, T) { return x > T(0) && x < T(6) ? T(1) : T(0); }
};

constexpr double selu_alpha = 1.6732632423543772848170429916717;
constexpr double selu_scale = 1.0507009873554804934193349852946;

struct Selu {  // scale · elu(x, alpha), Keras's constants; the right-hand derivative at 0
  template <class T>
  static T value(T x, T) { return x >= T(0) ? T(selu_scale) * x : T(selu_scale) * (T(selu_alpha) * std::expm1(x)); }
  template <class T>
  static T derivative(T x, T) { return x >= T(0) ? T(selu_scale) : T(selu_scale * selu_alpha) * std::exp(x); }
};

struct Celu {  // max(x, 0) + alpha · expm1(min(x, 0) / alpha)
  template <class T>
  static T value(T x, T alpha) { return x > T(0) ? x : alpha * std::expm1(x / alpha); }
  template <class T>
  static T derivative(T x, T alpha) { return x > T(0) ? T(1) : std::exp(x / alpha); }
};

struct Softsign {  // x / (1 + |x|)
  template <class T>
  static T value(T x, T) { return x / (T(1) + std::abs(x)); }
  template <class T>
  static T derivative(T x, T) {
    const T d = T(1) + std::abs(x);
    return T(1) / (d * d);
  }
};

struct Mish {  // x · tanh(softplus(x))
  template <class T>
  static T value(T x, T) { return x * std::tanh(softplus_of(x)); }
  template <class T>
  static T derivative(T x, T) {
    const T t = std::tanh(softplus_of(x));
    return t + x * (T(1) - t * t) * sigmoid_of(x);
  }
};

struct LogSigmoid {  // −softplus(−x), stable in both tails
  template <class T>
  static T value(T x, T) { return -softplus_of(-x); }
  template <class T>
  static T derivative(T x, T) { return sigmoid_of(-x); }
};

struct HardSigmoid {  // Keras 3: relu6(x + 3) / 6, computed as Keras's numpy backend does, x / 6 + 0.5 clipped
  template <class T>
  static T value(T x, T) {
    const T y = x / T(6) + T(0.5);
    return y <= T(0) ? T(0) : (y >= T(1) ? T(1) : y);
  }
  template <class T>
  static T derivative(T x, T) { return x > T(-3) && x < T(3) ? T(1) / T(6) : T(0); }
};

struct HardSigmoidKeras2 {  // Keras 2 and tf.keras: clip(0.2 x + 0.5, 0, 1)
  template <class T>
  static T value(T x, T) {
    const T y = T(0.2) * x + T(0.5);
    return y <= T(0) ? T(0) : (y >= T(1) ? T(1) : y);
  }
  template <class T>
  static T derivative(T x, T) { return x > T(-2.5) && x < T(2.5) ? T(0.2) : T(0); }
};

struct HardSilu {  // x · hard_sigmoid(x); derivative 0 at −3 and 1 at 3
  template <class T>
  static T value(T x, T) { return x * HardSigmoid::value(x, T(0)); }
  template <class T>
  static T derivative(T x, T) { return x <= T(-3) ? T(0) : (x >= T(3) ? T(1) : (T(2) * x + T(3)) / T(6)); }
};

struct HardTanh {  // clip(x, −1, 1)
  template <class T>
  static T value(T x, T) { return x < T(-1) ? T(-1) : (x > T(1) ? T(1) : x); }
  template <class T>
  static T derivative(T x, T) { return x > T(-1) && x < T(1) ? T(1) : T(0); }
};

struct TanhShrink {  // x − tanh(x)
  template <class T>
  static T value(T x, T) { return x - std::tanh(x); }
  template <class T>
  static T derivative(T x, T) {
    const T t = std::tanh(x);
    return t * t;
  }
};

struct SoftShrink {  // x − t above t, x + t below −t, 0 between
  template <class T>
  static T value(T x, T t) { return x > t ? x - t : (x < -t ? x + t : zero_or_nan(x)); }
  template <class T>
  static T derivative(T x, T t) { return std::abs(x) > t ? T(1) : T(0); }
};

struct HardShrink {  // x where |x| > t, else 0
  template <class T>
  static T value(T x, T t) { return std::abs(x) > t ? x : zero_or_nan(x); }
  template <class T>
  static T derivative(T x, T t) { return std::abs(x) > t ? T(1) : T(0); }
};

struct Squareplus {  // (x + sqrt(x² + b)) / 2
  template <class T>
  static T value(T x, T b) { return (x + std::sqrt(x * x + b)) / T(2); }
  template <class T>
  static T derivative(T x, T b) { return (T(1) + x / std::sqrt(x * x + b)) / T(2); }
};

struct SparsePlus {  // 0 to −1, (x + 1)² / 4 on (−1, 1), x from 1
  template <class T>
  static T value(T x, T) { return x <= T(-1) ? T(0) : (x >= T(1) ? x : (x + T(1)) * (x + T(1)) / T(4)); }
  template <class T>
  static T derivative(T x, T) { return x <= T(-1) ? T(0) : (x >= T(1) ? T(1) : (x + T(1)) / T(2)); }
};

struct SparseSigmoid {  // clip((x + 1) / 2, 0, 1)
  template <class T>
  static T value(T x, T) { return x <= T(-1) ? T(0) : (x >= T(1) ? T(1) : T(0.5) * (x + T(1))); }
  template <class T>
  static T derivative(T x, T) { return x > T(-1) && x < T(1) ? T(0.5) : T(0); }
};

// ---- elementwise kernels, one template for every function -------------------------------------------------

template <class F, class T>
void function_kernel(const KernelContext& k) {
  const T p = static_cast<T>(k.attributes().get_double("parameter"));
  const T* x = k.in<T>(0);
  T* y = k.out<T>();
  const std::int64_t n = static_cast<std::int64_t>(k.output_size());
  detail::parallel_for(n, detail::workers_for_elements(n, 4), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i) y[i] = F::value(x[i], p);
  });
}

// Input 0 is the forward input, input 1 the output gradient; each element reads only its own, so in place.
template <class F, class T>
void derivative_kernel(const KernelContext& k) {
  const T p = static_cast<T>(k.attributes().get_double("parameter"));
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dx = k.out<T>();
  const std::int64_t n = static_cast<std::int64_t>(k.output_size());
  detail::parallel_for(n, detail::workers_for_elements(n, 4), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i) dx[i] = dy[i] * F::derivative(x[i], p);
  });
}

Shape same_shape_as_gradient(const InferContext& ctx) {
  if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("the value and its output gradient differ in shape");
  return ctx.input_shape(0);
}

std::string grad_name(const std::string& op) { return op + "Grad"; }

std::vector<Tensor> backward_through(const char* grad_op, const GradContext& g) {
  return {g.input(0).graph().add_op(grad_op, {g.input(0), g.output_grad()},
                                    Attributes().set("parameter", g.attributes().get_double("parameter")), "grad")};
}

template <class F>
OpDef function_op(const std::string& name, BackwardFn backward) {
  OpDef op(name);
  op.inputs(1)
      .infer_shape(detail::first_input_shape)
      .forward(function_kernel<F, float>, function_kernel<F, double>)
      .backward(backward)
      .attributes({"parameter"});
  op.sharing(Sharing::inplace);
  return op;
}

template <class F>
OpDef derivative_op(const std::string& name) {
  OpDef op(grad_name(name));
  op.inputs(2)
      .infer_shape(same_shape_as_gradient)
      .forward(derivative_kernel<F, float>, derivative_kernel<F, double>)
      .not_differentiable("second-order gradients are not supported")
      .attributes({"parameter"});
  op.sharing(Sharing::inplace);
  return op;
}

// One line registers the function and its derivative (KILN_AT_STARTUP names its flag by line).
#define KILN_ACTIVATION_FUNCTION(Function, op_name)                                                   \
  std::vector<Tensor> Function##_backward(const GradContext& g) {                                     \
    return backward_through("kiln>" op_name "Grad", g);                                               \
  }                                                                                                   \
  KILN_AT_STARTUP(::kiln::detail::register_op(function_op<Function>("kiln>" op_name, Function##_backward)) && \
                  ::kiln::detail::register_op(derivative_op<Function>("kiln>" op_name)))

KILN_ACTIVATION_FUNCTION(Relu6, "Relu6");
KILN_ACTIVATION_FUNCTION(Selu, "Selu");
KILN_ACTIVATION_FUNCTION(Celu, "Celu");
KILN_ACTIVATION_FUNCTION(Softsign, "Softsign");
KILN_ACTIVATION_FUNCTION(Mish, "Mish");
KILN_ACTIVATION_FUNCTION(LogSigmoid, "LogSigmoid");
KILN_ACTIVATION_FUNCTION(HardSigmoid, "HardSigmoid");
KILN_ACTIVATION_FUNCTION(HardSigmoidKeras2, "HardSigmoidKeras2");
KILN_ACTIVATION_FUNCTION(HardSilu, "HardSilu");
KILN_ACTIVATION_FUNCTION(HardTanh, "HardTanh");
KILN_ACTIVATION_FUNCTION(TanhShrink, "TanhShrink");
KILN_ACTIVATION_FUNCTION(SoftShrink, "SoftShrink");
KILN_ACTIVATION_FUNCTION(HardShrink, "HardShrink");
KILN_ACTIVATION_FUNCTION(Squareplus, "Squareplus");
KILN_ACTIVATION_FUNCTION(SparsePlus, "SparsePlus");
KILN_ACTIVATION_FUNCTION(SparseSigmoid, "SparseSigmoid");

#undef KILN_ACTIVATION_FUNCTION

// ---- sparsemax over the last axis --------------------------------------------------------------------------

// Martins & Astudillo (2016): with z sorted descending, k = max{j : 1 + j z_(j) > Σ_{i≤j} z_(i)},
// τ = (Σ_{i≤k} z_(i) − 1) / k, out = max(z − τ, 0). Keras 3.16 computes τ from the sum of the cumulative sums
// (keras-team/keras#23425, fixed after 3.16); kiln computes the definition. A NaN in a row makes the row NaN.
template <class T>
void sparsemax_kernel(const KernelContext& k) {
  const Shape& shape = k.input_shape(0);
  const std::int64_t width = shape.rank() == 0 ? 1 : shape.dim(shape.rank() - 1);
  const std::int64_t rows = width == 0 ? 0 : static_cast<std::int64_t>(k.output_size()) / width;
  const T* x = k.in<T>(0);
  T* y = k.out<T>();
  // The row is sorted in its output first (the op never runs in place), so nothing is allocated.
  detail::parallel_for(rows, detail::workers_for_elements(rows * width, 8), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T* z = x + r * width;
      T* out = y + r * width;
      bool nan = false;
      for (std::int64_t j = 0; j < width; ++j) nan = nan || z[j] != z[j];
      if (nan) {
        std::fill(out, out + width, std::numeric_limits<T>::quiet_NaN());
        continue;
      }
      T* sorted = out;
      std::copy(z, z + width, sorted);
      std::sort(sorted, sorted + width, [](T a, T b) { return a > b; });
      T cumulative = T(0), tau_sum = T(0);
      std::int64_t support = 0;
      for (std::int64_t j = 0; j < width; ++j) {
        cumulative += sorted[j];
        if (T(1) + T(j + 1) * sorted[j] > cumulative) {
          support = j + 1;
          tau_sum = cumulative;
        }
      }
      const T tau = (tau_sum - T(1)) / T(support);
      for (std::int64_t j = 0; j < width; ++j) out[j] = std::max(z[j] - tau, T(0));
    }
  });
}

// Input 0 is sparsemax's output y, input 1 the output gradient g: with s = (y > 0) and k = Σ s,
// dx = s · (g − Σ(g · s) / k), row by row.
template <class T>
void sparsemax_grad_kernel(const KernelContext& k) {
  const Shape& shape = k.input_shape(0);
  const std::int64_t width = shape.rank() == 0 ? 1 : shape.dim(shape.rank() - 1);
  const std::int64_t rows = width == 0 ? 0 : static_cast<std::int64_t>(k.output_size()) / width;
  const T* y = k.in<T>(0);
  const T* g = k.in<T>(1);
  T* dx = k.out<T>();
  detail::parallel_for(rows, detail::workers_for_elements(rows * width, 2), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t o = r * width;
      T sum = T(0);
      std::int64_t support = 0;
      for (std::int64_t j = 0; j < width; ++j)
        if (y[o + j] > T(0)) {
          sum += g[o + j];
          ++support;
        }
      const T mean = support > 0 ? sum / T(support) : T(0);
      for (std::int64_t j = 0; j < width; ++j) dx[o + j] = y[o + j] > T(0) ? g[o + j] - mean : T(0);
    }
  });
}

std::vector<Tensor> sparsemax_backward(const GradContext& g) {
  return {g.output().graph().add_op("kiln>SparsemaxGrad", {g.output(), g.output_grad()}, {}, "grad")};
}

Shape sparsemax_shape(const InferContext& ctx) {
  if (ctx.input_shape(0).rank() == 0) ctx.fail("sparsemax needs an axis, got a scalar");
  return ctx.input_shape(0);
}

OpDef sparsemax_op() {
  OpDef op("kiln>Sparsemax");
  op.inputs(1)
      .infer_shape(sparsemax_shape)
      .forward(sparsemax_kernel<float>, sparsemax_kernel<double>)
      .backward(sparsemax_backward);
  return op;
}

OpDef sparsemax_grad_op() {
  OpDef op("kiln>SparsemaxGrad");
  op.inputs(2)
      .infer_shape(same_shape_as_gradient)
      .forward(sparsemax_grad_kernel<float>, sparsemax_grad_kernel<double>)
      .not_differentiable("second-order gradients are not supported");
  return op;
}

KILN_REGISTER_OP(sparsemax_op());
KILN_REGISTER_OP(sparsemax_grad_op());

Tensor apply_function(const Tensor& x, const char* op_name, const char* node_name, double parameter = 0.0) {
  return detail::add_or_record_op(op_name, {x}, Attributes().set("parameter", parameter), node_name);
}

}  // namespace

namespace ops {

Tensor relu6(const Tensor& x) { return apply_function(x, "kiln>Relu6", "relu6"); }
Tensor selu(const Tensor& x) { return apply_function(x, "kiln>Selu", "selu"); }
Tensor celu(const Tensor& x, double alpha) {
  if (!(alpha != 0.0) || !std::isfinite(alpha))
    throw ValueError("celu: alpha must be finite and not 0, got " + std::to_string(alpha));
  return apply_function(x, "kiln>Celu", "celu", alpha);
}
Tensor softsign(const Tensor& x) { return apply_function(x, "kiln>Softsign", "softsign"); }
Tensor mish(const Tensor& x) { return apply_function(x, "kiln>Mish", "mish"); }
Tensor log_sigmoid(const Tensor& x) { return apply_function(x, "kiln>LogSigmoid", "log_sigmoid"); }
Tensor hard_sigmoid(const Tensor& x) { return apply_function(x, "kiln>HardSigmoid", "hard_sigmoid"); }
Tensor hard_sigmoid_keras2(const Tensor& x) {
  return apply_function(x, "kiln>HardSigmoidKeras2", "hard_sigmoid_keras2");
}
Tensor hard_silu(const Tensor& x) { return apply_function(x, "kiln>HardSilu", "hard_silu"); }
Tensor hard_tanh(const Tensor& x) { return apply_function(x, "kiln>HardTanh", "hard_tanh"); }
Tensor tanh_shrink(const Tensor& x) { return apply_function(x, "kiln>TanhShrink", "tanh_shrink"); }
Tensor soft_shrink(const Tensor& x, double threshold) {
  return apply_function(x, "kiln>SoftShrink", "soft_shrink", threshold);
}
Tensor hard_shrink(const Tensor& x, double threshold) {
  return apply_function(x, "kiln>HardShrink", "hard_shrink", threshold);
}
Tensor squareplus(const Tensor& x, double b) {
  if (!(b >= 0.0)) throw ValueError("squareplus: b must be >= 0, got " + std::to_string(b));
  return apply_function(x, "kiln>Squareplus", "squareplus", b);
}
Tensor sparse_plus(const Tensor& x) { return apply_function(x, "kiln>SparsePlus", "sparse_plus"); }
Tensor sparse_sigmoid(const Tensor& x) { return apply_function(x, "kiln>SparseSigmoid", "sparse_sigmoid"); }

Tensor sparsemax(const Tensor& x) { return detail::add_or_record_op("kiln>Sparsemax", {x}, {}, "sparsemax"); }

Tensor glu(const Tensor& x, int axis) {
  const std::int64_t rank = x.rank();
  if (axis < -rank || axis >= rank)
    throw ShapeError("glu: axis " + std::to_string(axis) + " does not exist in an input of shape " +
                     x.shape().to_string());
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  const std::int64_t size = x.shape().dim(a);
  if (size >= 0 && size % 2 != 0)
    throw ShapeError("glu: axis " + std::to_string(axis) + " of an input of shape " + x.shape().to_string() +
                     " has an odd size, " + std::to_string(size) + "; glu splits it in two halves");
  if (size < 0)
    throw ShapeError("glu: axis " + std::to_string(axis) + " of an input of shape " + x.shape().to_string() +
                     " has an unknown size; glu splits it in two halves");
  if (detail::records_op({x}))
    if (Tensor recorded = detail::record_op("glu", {x}, Attributes().set("axis", static_cast<std::int64_t>(axis))))
      return recorded;
  std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0), extent(static_cast<std::size_t>(rank), -1);
  extent[static_cast<std::size_t>(a)] = size / 2;
  const Tensor first = slice(x, begin, extent);
  begin[static_cast<std::size_t>(a)] = size / 2;
  const Tensor second = slice(x, begin, extent);
  return mul(first, sigmoid(second));
}

}  // namespace ops
}  // namespace kiln
