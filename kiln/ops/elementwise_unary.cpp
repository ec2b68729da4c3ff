// One-input elementwise ops (neg, exp, ..., gelu, softplus), the scalar-argument ops (scale, add_scalar,
// pow_scalar) and activation-by-name. Kernels wrap the arena in flat xtensor adaptors so that xsimd
// vectorizes the math; every forward op may run in place, which elementwise expressions allow.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// xsimd's AVX-512 intrinsics trip g++ 12's (maybe-)uninitialized warnings once inlined (at -O2 and -O3);
// they point into the compiler's own headers, so they are silenced for the xtensor includes only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xoperation.hpp>
#pragma GCC diagnostic pop

#include <kiln/core/attributes.hpp>
#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/detail/unary_kernels.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// ---- flat views of arena memory ------------------------------------------------------------------------

template <class T>
auto flat(T* data, std::size_t size) {
  // The pointer goes in as an rvalue: xt::adapt keeps an lvalue pointer by reference, which would
  // dangle once this function returns.
  return xt::adapt(std::move(data), size, xt::no_ownership(), std::array<std::size_t, 1>{size});
}

// The elements [begin, begin + size) of the output (and of each input: elementwise, they have its size) that one
// of kiln's threads computes.
struct Chunk {
  std::size_t begin, size;
};

template <class T>
auto input_view(const KernelContext& k, int index, Chunk c) {
  return flat(k.in<T>(index) + c.begin, c.size);
}

template <class T>
auto output_view(const KernelContext& k, Chunk c) {
  return flat(k.out<T>() + c.begin, c.size);
}

// A kernel over its chunks on kiln's threads: chunks of whole 64-byte lines but the last, so every chunk starts
// as aligned as the whole output and no chunk but the last has a partial vector. xsimd then computes every element
// as it would in one pass over the whole (the last partial vector included), and the results are bitwise the same
// on any thread count. `cost`: about how many times a copy's work an element takes (detail::workers_for_elements).
template <class T, void (*kernel)(const KernelContext&, Chunk), int cost>
void chunked(const KernelContext& k) {
  const auto n = static_cast<std::int64_t>(k.output_size());
  constexpr auto line = static_cast<std::int64_t>(64 / sizeof(T));
  detail::parallel_for((n + line - 1) / line, detail::workers_for_elements(n, cost),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         const std::int64_t first = begin * line, last = std::min(end * line, n);
                         kernel(k, Chunk{static_cast<std::size_t>(first), static_cast<std::size_t>(last - first)});
                       });
}

template <class T>
T attribute(const KernelContext& k, const char* name) {
  return static_cast<T>(k.attributes().get_double(name));
}

constexpr double sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double inv_sqrt_2 = 0.70710678118654752440;
constexpr double inv_sqrt_2pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double gelu_cubic = 0.044715;

// ---- forward kernels -----------------------------------------------------------------------------------

template <class T>
void neg_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = -input_view<T>(k, 0, c);
}

template <class T>
void exp_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::exp(input_view<T>(k, 0, c));
}

template <class T>
void log_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::log(input_view<T>(k, 0, c));
}

template <class T>
void sqrt_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::sqrt(input_view<T>(k, 0, c));
}

template <class T>
void rsqrt_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = T(1) / xt::sqrt(input_view<T>(k, 0, c));
}

template <class T>
void square_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = x * x;
}

template <class T>
void abs_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::abs(input_view<T>(k, 0, c));
}

template <class T>
void sin_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::sin(input_view<T>(k, 0, c));
}

template <class T>
void cos_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::cos(input_view<T>(k, 0, c));
}

template <class T>
void tanh_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::tanh(input_view<T>(k, 0, c));
}

// 1 / (1 + exp(-x)) never produces NaN: exp overflows to inf for very negative x, giving exactly 0.
template <class T>
void sigmoid_kernel(const KernelContext& k, Chunk c) {
  auto y = output_view<T>(k, c);
  xt::noalias(y) = T(1) / (T(1) + xt::exp(-input_view<T>(k, 0, c)));
}

// Not xt::maximum(x, 0): that is the CPU's maxps, which returns 0 for a NaN, so a NaN in the data would
// give a finite loss while the weights quietly turn NaN. NaN < 0 is false, so NaN passes through.
template <class T>
void relu_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::where(x < T(0), T(0), x);
}

template <class T>
void leaky_relu_kernel(const KernelContext& k, Chunk c) {
  const T slope = attribute<T>(k, "negative_slope");
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::where(x > T(0), x, slope * x);
}

// expm1 keeps the negative branch accurate near 0, where exp(x) - 1 would cancel.
template <class T>
void elu_kernel(const KernelContext& k, Chunk c) {
  const T alpha = attribute<T>(k, "alpha");
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::where(x > T(0), x, alpha * xt::expm1(x));
}

// GELU and its gradient run through detail::unary_kernels() (kiln/ops/detail/isa/unary_kernels.inl): built for each
// x86-64 level and chosen at run time (isa.hpp).
template <class T>
void gelu_kernel(const KernelContext& k, Chunk c) {
  detail::unary_kernels<T>().gelu(k.in<T>(0) + c.begin, k.out<T>() + c.begin, static_cast<std::int64_t>(c.size),
                                  k.attributes().get_bool("approximate"));
}

// x / (1 + exp(-x)) is x * sigmoid(x) without a second pass; for very negative x it gives -0, not NaN.
template <class T>
void swish_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = x / (T(1) + xt::exp(-x));
}

// log(1 + exp(x)) overflows for x > ~88 (float); this form is exact in both tails (max(x, 0) as in relu).
template <class T>
void softplus_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::where(x < T(0), T(0), x) + xt::log1p(xt::exp(-xt::abs(x)));
}

template <class T>
void scale_kernel(const KernelContext& k, Chunk c) {
  const T factor = attribute<T>(k, "factor");
  auto y = output_view<T>(k, c);
  xt::noalias(y) = input_view<T>(k, 0, c) * factor;
}

template <class T>
void add_scalar_kernel(const KernelContext& k, Chunk c) {
  const T value = attribute<T>(k, "value");
  auto y = output_view<T>(k, c);
  xt::noalias(y) = input_view<T>(k, 0, c) + value;
}

template <class T>
void pow_scalar_kernel(const KernelContext& k, Chunk c) {
  const T exponent = attribute<T>(k, "exponent");
  auto y = output_view<T>(k, c);
  xt::noalias(y) = xt::pow(input_view<T>(k, 0, c), exponent);
}

// ---- fused gradient kernels: input 0 is the forward input or output, input 1 the output gradient --------

template <class T>
void tanh_grad_kernel(const KernelContext& k, Chunk c) {
  auto y = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = dy * (T(1) - y * y);
}

template <class T>
void sigmoid_grad_kernel(const KernelContext& k, Chunk c) {
  auto y = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = dy * y * (T(1) - y);
}

template <class T>
void rsqrt_grad_kernel(const KernelContext& k, Chunk c) {
  auto y = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = T(-0.5) * dy * y * y * y;
}

template <class T>
void abs_grad_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = dy * xt::sign(x);
}

// Input 0 is relu's output: y > 0 exactly where x > 0, and reading y lets relu overwrite x.
template <class T>
void relu_grad_kernel(const KernelContext& k, Chunk c) {
  auto y = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = xt::where(y > T(0), dy, T(0));
}

template <class T>
void leaky_relu_grad_kernel(const KernelContext& k, Chunk c) {
  const T slope = attribute<T>(k, "negative_slope");
  auto a = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = xt::where(a > T(0), dy, slope * dy);
}

template <class T>
void elu_grad_kernel(const KernelContext& k, Chunk c) {
  const T alpha = attribute<T>(k, "alpha");
  auto x = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = xt::where(x > T(0), dy, dy * alpha * xt::exp(x));
}

// Through detail::unary_kernels, as GELU's forward.
template <class T>
void gelu_grad_kernel(const KernelContext& k, Chunk c) {
  detail::unary_kernels<T>().gelu_grad(k.in<T>(0) + c.begin, k.in<T>(1) + c.begin, k.out<T>() + c.begin,
                                       static_cast<std::int64_t>(c.size), k.attributes().get_bool("approximate"));
}

// d/dx x*s(x) = s * (1 + x * (1 - s)); s goes to dx first, so this op never runs in place.
template <class T>
void swish_grad_kernel(const KernelContext& k, Chunk c) {
  auto x = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = T(1) / (T(1) + xt::exp(-x));
  xt::noalias(dx) = dy * dx * (T(1) + x * (T(1) - dx));
}

// Input 0 is softplus's output y: sigmoid(x) = 1 - exp(-y) = -expm1(-y), accurate in both tails, and
// reading y lets softplus overwrite x.
template <class T>
void softplus_grad_kernel(const KernelContext& k, Chunk c) {
  auto y = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = -dy * xt::expm1(-y);
}

template <class T>
void pow_scalar_grad_kernel(const KernelContext& k, Chunk c) {
  const T exponent = attribute<T>(k, "exponent");
  const T lowered = exponent - T(1);
  auto x = input_view<T>(k, 0, c);
  auto dy = input_view<T>(k, 1, c);
  auto dx = output_view<T>(k, c);
  xt::noalias(dx) = dy * exponent * xt::pow(x, lowered);
}

// ---- shape rules ---------------------------------------------------------------------------------------

Shape same_shape_as_gradient(const InferContext& ctx) {
  if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("the value and its output gradient differ in shape");
  return ctx.input_shape(0);
}

// ---- backward rules ------------------------------------------------------------------------------------

Tensor fused_grad(const char* op_name, const Tensor& value, const Tensor& output_grad, Attributes attributes = {}) {
  return value.graph().add_op(op_name, {value, output_grad}, std::move(attributes), "grad");
}

std::vector<Tensor> neg_backward(const GradContext& g) { return {ops::neg(g.output_grad())}; }

std::vector<Tensor> exp_backward(const GradContext& g) { return {ops::mul(g.output_grad(), g.output())}; }

std::vector<Tensor> log_backward(const GradContext& g) { return {ops::div(g.output_grad(), g.input(0))}; }

std::vector<Tensor> sqrt_backward(const GradContext& g) {
  return {ops::div(ops::scale(g.output_grad(), 0.5), g.output())};
}

std::vector<Tensor> rsqrt_backward(const GradContext& g) {
  return {fused_grad("kiln>RsqrtGrad", g.output(), g.output_grad())};
}

std::vector<Tensor> square_backward(const GradContext& g) {
  return {ops::mul(g.output_grad(), ops::scale(g.input(0), 2.0))};
}

std::vector<Tensor> abs_backward(const GradContext& g) {
  return {fused_grad("kiln>AbsGrad", g.input(0), g.output_grad())};
}

std::vector<Tensor> sin_backward(const GradContext& g) { return {ops::mul(g.output_grad(), ops::cos(g.input(0)))}; }

std::vector<Tensor> cos_backward(const GradContext& g) {
  return {ops::neg(ops::mul(g.output_grad(), ops::sin(g.input(0))))};
}

std::vector<Tensor> tanh_backward(const GradContext& g) {
  return {fused_grad("kiln>TanhGrad", g.output(), g.output_grad())};
}

std::vector<Tensor> sigmoid_backward(const GradContext& g) {
  return {fused_grad("kiln>SigmoidGrad", g.output(), g.output_grad())};
}

std::vector<Tensor> relu_backward(const GradContext& g) {
  return {fused_grad("kiln>ReluGrad", g.output(), g.output_grad())};
}

// With a slope >= 0 the output has the input's sign wherever it matters, so the output is read;
// a negative slope flips it, and then only the input tells the two branches apart.
std::vector<Tensor> leaky_relu_backward(const GradContext& g) {
  const double slope = g.attributes().get_double("negative_slope");
  const Tensor branch_source = slope >= 0.0 ? g.output() : g.input(0);
  return {fused_grad("kiln>LeakyReluGrad", branch_source, g.output_grad(), Attributes().set("negative_slope", slope))};
}

std::vector<Tensor> elu_backward(const GradContext& g) {
  return {fused_grad("kiln>EluGrad", g.input(0), g.output_grad(),
                     Attributes().set("alpha", g.attributes().get_double("alpha")))};
}

std::vector<Tensor> gelu_backward(const GradContext& g) {
  return {fused_grad("kiln>GeluGrad", g.input(0), g.output_grad(),
                     Attributes().set("approximate", g.attributes().get_bool("approximate")))};
}

std::vector<Tensor> swish_backward(const GradContext& g) {
  return {fused_grad("kiln>SwishGrad", g.input(0), g.output_grad())};
}

std::vector<Tensor> softplus_backward(const GradContext& g) {
  return {fused_grad("kiln>SoftplusGrad", g.output(), g.output_grad())};
}

std::vector<Tensor> scale_backward(const GradContext& g) {
  return {ops::scale(g.output_grad(), g.attributes().get_double("factor"))};
}

std::vector<Tensor> add_scalar_backward(const GradContext& g) { return {g.output_grad()}; }

std::vector<Tensor> pow_scalar_backward(const GradContext& g) {
  const double exponent = g.attributes().get_double("exponent");
  // 0 * x^-1 would be NaN at x = 0, where the true derivative of x^0 is 0.
  if (exponent == 0.0) return {ops::zeros_like(g.input(0))};
  if (exponent == 1.0) return {g.output_grad()};
  return {fused_grad("kiln>PowScalarGrad", g.input(0), g.output_grad(), Attributes().set("exponent", exponent))};
}

// ---- registration --------------------------------------------------------------------------------------

const char* const second_order = "second-order gradients are not supported";

OpDef unary_op(const char* name, KernelFn float32_kernel, KernelFn float64_kernel, BackwardFn backward) {
  OpDef op(name);
  op.inputs(1).infer_shape(detail::first_input_shape).forward(float32_kernel, float64_kernel).backward(backward);
  op.sharing(Sharing::inplace);
  return op;
}

OpDef grad_op(const char* name, KernelFn float32_kernel, KernelFn float64_kernel, Sharing sharing) {
  OpDef op(name);
  op.inputs(2).infer_shape(same_shape_as_gradient).forward(float32_kernel, float64_kernel);
  op.not_differentiable(second_order).sharing(sharing);
  return op;
}

KILN_REGISTER_OP(unary_op("kiln>Neg", chunked<float, neg_kernel<float>, 1>, chunked<double, neg_kernel<double>, 1>,
                          neg_backward));
KILN_REGISTER_OP(unary_op("kiln>Exp", chunked<float, exp_kernel<float>, 4>, chunked<double, exp_kernel<double>, 4>,
                          exp_backward));
KILN_REGISTER_OP(unary_op("kiln>Log", chunked<float, log_kernel<float>, 4>, chunked<double, log_kernel<double>, 4>,
                          log_backward));
KILN_REGISTER_OP(unary_op("kiln>Sqrt", chunked<float, sqrt_kernel<float>, 2>, chunked<double, sqrt_kernel<double>, 2>,
                          sqrt_backward));
KILN_REGISTER_OP(unary_op("kiln>Rsqrt", chunked<float, rsqrt_kernel<float>, 2>,
                          chunked<double, rsqrt_kernel<double>, 2>, rsqrt_backward));
KILN_REGISTER_OP(unary_op("kiln>Square", chunked<float, square_kernel<float>, 1>,
                          chunked<double, square_kernel<double>, 1>, square_backward));
KILN_REGISTER_OP(unary_op("kiln>Abs", chunked<float, abs_kernel<float>, 1>, chunked<double, abs_kernel<double>, 1>,
                          abs_backward));
KILN_REGISTER_OP(unary_op("kiln>Sin", chunked<float, sin_kernel<float>, 8>, chunked<double, sin_kernel<double>, 8>,
                          sin_backward));
KILN_REGISTER_OP(unary_op("kiln>Cos", chunked<float, cos_kernel<float>, 8>, chunked<double, cos_kernel<double>, 8>,
                          cos_backward));
KILN_REGISTER_OP(unary_op("kiln>Tanh", chunked<float, tanh_kernel<float>, 8>, chunked<double, tanh_kernel<double>, 8>,
                          tanh_backward));
KILN_REGISTER_OP(unary_op("kiln>Sigmoid", chunked<float, sigmoid_kernel<float>, 4>,
                          chunked<double, sigmoid_kernel<double>, 4>, sigmoid_backward));
KILN_REGISTER_OP(unary_op("kiln>Relu", chunked<float, relu_kernel<float>, 1>, chunked<double, relu_kernel<double>, 1>,
                          relu_backward));
KILN_REGISTER_OP(unary_op("kiln>LeakyRelu", chunked<float, leaky_relu_kernel<float>, 1>,
                          chunked<double, leaky_relu_kernel<double>, 1>, leaky_relu_backward)
                     .attributes({"negative_slope"}));
KILN_REGISTER_OP(unary_op("kiln>Elu", chunked<float, elu_kernel<float>, 4>, chunked<double, elu_kernel<double>, 4>,
                          elu_backward)
                     .attributes({"alpha"}));
KILN_REGISTER_OP(unary_op("kiln>Gelu", chunked<float, gelu_kernel<float>, 8>, chunked<double, gelu_kernel<double>, 8>,
                          gelu_backward)
                     .attributes({"approximate"}));
KILN_REGISTER_OP(unary_op("kiln>Swish", chunked<float, swish_kernel<float>, 4>,
                          chunked<double, swish_kernel<double>, 4>, swish_backward));
KILN_REGISTER_OP(unary_op("kiln>Softplus", chunked<float, softplus_kernel<float>, 8>,
                          chunked<double, softplus_kernel<double>, 8>, softplus_backward));
KILN_REGISTER_OP(unary_op("kiln>Scale", chunked<float, scale_kernel<float>, 1>,
                          chunked<double, scale_kernel<double>, 1>, scale_backward)
                     .attributes({"factor"}));
KILN_REGISTER_OP(unary_op("kiln>AddScalar", chunked<float, add_scalar_kernel<float>, 1>,
                          chunked<double, add_scalar_kernel<double>, 1>, add_scalar_backward)
                     .attributes({"value"}));
KILN_REGISTER_OP(unary_op("kiln>PowScalar", chunked<float, pow_scalar_kernel<float>, 8>,
                          chunked<double, pow_scalar_kernel<double>, 8>, pow_scalar_backward)
                     .attributes({"exponent"}));

KILN_REGISTER_OP(grad_op("kiln>TanhGrad", chunked<float, tanh_grad_kernel<float>, 1>,
                         chunked<double, tanh_grad_kernel<double>, 1>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>SigmoidGrad", chunked<float, sigmoid_grad_kernel<float>, 1>,
                         chunked<double, sigmoid_grad_kernel<double>, 1>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>RsqrtGrad", chunked<float, rsqrt_grad_kernel<float>, 1>,
                         chunked<double, rsqrt_grad_kernel<double>, 1>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>AbsGrad", chunked<float, abs_grad_kernel<float>, 1>,
                         chunked<double, abs_grad_kernel<double>, 1>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>ReluGrad", chunked<float, relu_grad_kernel<float>, 1>,
                         chunked<double, relu_grad_kernel<double>, 1>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>LeakyReluGrad", chunked<float, leaky_relu_grad_kernel<float>, 1>,
                         chunked<double, leaky_relu_grad_kernel<double>, 1>, Sharing::inplace)
                     .attributes({"negative_slope"}));
KILN_REGISTER_OP(grad_op("kiln>EluGrad", chunked<float, elu_grad_kernel<float>, 4>,
                         chunked<double, elu_grad_kernel<double>, 4>, Sharing::inplace)
                     .attributes({"alpha"}));
KILN_REGISTER_OP(grad_op("kiln>GeluGrad", chunked<float, gelu_grad_kernel<float>, 8>,
                         chunked<double, gelu_grad_kernel<double>, 8>, Sharing::none)
                     .attributes({"approximate"}));
KILN_REGISTER_OP(grad_op("kiln>SwishGrad", chunked<float, swish_grad_kernel<float>, 4>,
                         chunked<double, swish_grad_kernel<double>, 4>, Sharing::none));
KILN_REGISTER_OP(grad_op("kiln>SoftplusGrad", chunked<float, softplus_grad_kernel<float>, 4>,
                         chunked<double, softplus_grad_kernel<double>, 4>, Sharing::inplace));
KILN_REGISTER_OP(grad_op("kiln>PowScalarGrad", chunked<float, pow_scalar_grad_kernel<float>, 8>,
                         chunked<double, pow_scalar_grad_kernel<double>, 8>, Sharing::inplace)
                     .attributes({"exponent"}));

// ---- activation by name --------------------------------------------------------------------------------

Tensor unary(const Tensor& x, const char* op_name, const char* node_name, Attributes attributes = {}) {
  return detail::add_or_record_op(op_name, {x}, std::move(attributes), node_name);
}

}  // namespace

namespace ops {

Tensor neg(const Tensor& x) { return unary(x, "kiln>Neg", "neg"); }
Tensor exp(const Tensor& x) { return unary(x, "kiln>Exp", "exp"); }
Tensor log(const Tensor& x) { return unary(x, "kiln>Log", "log"); }
Tensor sqrt(const Tensor& x) { return unary(x, "kiln>Sqrt", "sqrt"); }
Tensor rsqrt(const Tensor& x) { return unary(x, "kiln>Rsqrt", "rsqrt"); }
Tensor square(const Tensor& x) { return unary(x, "kiln>Square", "square"); }
Tensor abs(const Tensor& x) { return unary(x, "kiln>Abs", "abs"); }
Tensor sin(const Tensor& x) { return unary(x, "kiln>Sin", "sin"); }
Tensor cos(const Tensor& x) { return unary(x, "kiln>Cos", "cos"); }
Tensor tanh(const Tensor& x) { return unary(x, "kiln>Tanh", "tanh"); }
Tensor sigmoid(const Tensor& x) { return unary(x, "kiln>Sigmoid", "sigmoid"); }
Tensor relu(const Tensor& x) { return unary(x, "kiln>Relu", "relu"); }
Tensor swish(const Tensor& x) { return unary(x, "kiln>Swish", "swish"); }
Tensor softplus(const Tensor& x) { return unary(x, "kiln>Softplus", "softplus"); }

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary(x, "kiln>LeakyRelu", "leaky_relu", Attributes().set("negative_slope", negative_slope));
}

Tensor elu(const Tensor& x, double alpha) { return unary(x, "kiln>Elu", "elu", Attributes().set("alpha", alpha)); }

Tensor gelu(const Tensor& x, bool approximate) {
  return unary(x, "kiln>Gelu", "gelu", Attributes().set("approximate", approximate));
}

Tensor scale(const Tensor& x, double factor) {
  return unary(x, "kiln>Scale", "scale", Attributes().set("factor", factor));
}

Tensor add_scalar(const Tensor& x, double value) {
  return unary(x, "kiln>AddScalar", "add_scalar", Attributes().set("value", value));
}

Tensor pow_scalar(const Tensor& x, double exponent) {
  return unary(x, "kiln>PowScalar", "pow_scalar", Attributes().set("exponent", exponent));
}

// Keras's defaults per name: keras.activations.gelu is the exact erf form (unlike ops.gelu), and
// leaky_relu's slope is 0.2.
}  // namespace ops
}  // namespace kiln
