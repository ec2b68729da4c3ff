// add, sub, mul, div, pow, maximum, minimum and the comparisons, with NumPy broadcasting.
#include <array>
#include <cmath>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// True when `small` equals the trailing dimensions of `big`: the bias-add pattern.
bool is_suffix(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  for (int i = 0; i < small.rank(); ++i)
    if (small[i] != big[big.rank() - small.rank() + i]) return false;
  return true;
}

// The broadcast of one input of full size (`full`) with one that repeats along some outer axes (`part`,
// as x · mask with a mask of shape (batch, 1, channels)): the output splits into rows over the trailing axes
// where `part` matches the output, and each output row reads one contiguous row of `part`. False (nothing
// done) when those rows are too short to pay for finding them; the general walk then runs.
template <class T, class F>
bool broadcast_rows(const Shape& out_shape, const Shape& part_shape, const T* full, const T* part, T* out, F f,
                    bool part_first, int workers) {
  constexpr int kMaxRank = 16;
  const int rank = out_shape.rank();
  if (rank > kMaxRank || part_shape.rank() > rank) return false;
  std::array<std::int64_t, kMaxRank> part_dims{};
  for (int d = 0; d < rank; ++d) {
    const int from = d - (rank - part_shape.rank());
    part_dims[d] = from < 0 ? 1 : part_shape[from];
  }
  int split = rank;  // axes [split, rank) form a row
  std::int64_t row = 1;
  while (split > 0 && part_dims[split - 1] == out_shape[split - 1]) row *= out_shape[--split];
  if (row < 16) return false;
  std::array<std::int64_t, kMaxRank> part_strides{};  // along the outer axes; 0 where `part` repeats
  for (std::int64_t d = rank - 1, stride = 1; d >= 0; --d) {
    part_strides[d] = part_dims[d] == 1 ? 0 : stride;
    stride *= part_dims[d];
  }
  const std::int64_t rows = out_shape.num_elements() / row;
  detail::parallel_for(rows, workers, [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::int64_t offset = 0;
      for (std::int64_t d = split - 1, rest = r; d >= 0; --d) {
        offset += (rest % out_shape[static_cast<int>(d)]) * part_strides[d];
        rest /= out_shape[static_cast<int>(d)];
      }
      const T* p = part + offset;
      const T* x = full + r * row;
      T* y = out + r * row;
      if (part_first) {
        for (std::int64_t j = 0; j < row; ++j) y[j] = f(p[j], x[j]);
      } else {
        for (std::int64_t j = 0; j < row; ++j) y[j] = f(x[j], p[j]);
      }
    }
  });
  return true;
}

// Runs f elementwise with broadcasting, taking the cheap path for the common layouts.
template <class T, class F>
void broadcast_apply(const KernelContext& k, F f) {
  const T* a = k.in<T>(0);
  const T* b = k.in<T>(1);
  T* out = k.out<T>();
  const Shape& shape_a = k.input_shape(0);
  const Shape& shape_b = k.input_shape(1);
  const auto n = static_cast<std::int64_t>(k.output_size());
  const auto size_a = shape_a.num_elements();
  const auto size_b = shape_b.num_elements();
  // The cheap paths split their elements (or rows) over the threads; every element is computed alone,
  // so the result is the same for any thread count.
  const int workers = detail::workers_for_elements(n);
  if (size_a == n && size_b == n) {
    detail::parallel_for(n, workers, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = f(a[i], b[i]);
    });
  } else if (size_b == 1) {
    const T value = b[0];
    detail::parallel_for(n, workers, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = f(a[i], value);
    });
  } else if (size_a == 1) {
    const T value = a[0];
    detail::parallel_for(n, workers, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = f(value, b[i]);
    });
  } else if (size_a == n && is_suffix(shape_b, *k.output_shape)) {
    detail::parallel_for(n / size_b, workers, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t row = begin * size_b; row < end * size_b; row += size_b)
        for (std::int64_t j = 0; j < size_b; ++j) out[row + j] = f(a[row + j], b[j]);
    });
  } else if (size_b == n && is_suffix(shape_a, *k.output_shape)) {
    detail::parallel_for(n / size_a, workers, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t row = begin * size_a; row < end * size_a; row += size_a)
        for (std::int64_t j = 0; j < size_a; ++j) out[row + j] = f(a[j], b[row + j]);
    });
  } else if (!(size_a == n && broadcast_rows(*k.output_shape, shape_b, a, b, out, f, false, workers)) &&
             !(size_b == n && broadcast_rows(*k.output_shape, shape_a, b, a, out, f, true, workers))) {
    detail::BroadcastWalk(*k.output_shape, k.input_shapes, 2)
        .for_each([&](std::int64_t i, std::int64_t ia, std::int64_t ib, std::int64_t) { out[i] = f(a[ia], b[ib]); });
  }
}

#define KILN_BINARY_KERNEL(name, expression)                         \
  template <class T>                                                 \
  void name(const KernelContext& k) {                                \
    broadcast_apply<T>(k, [](T a, T b) -> T { return expression; }); \
  }

KILN_BINARY_KERNEL(add_kernel, a + b)
KILN_BINARY_KERNEL(sub_kernel, a - b)
KILN_BINARY_KERNEL(mul_kernel, a* b)
KILN_BINARY_KERNEL(div_kernel, a / b)
KILN_BINARY_KERNEL(pow_kernel, std::pow(a, b))
KILN_BINARY_KERNEL(maximum_kernel, detail::propagating_max(a, b))
KILN_BINARY_KERNEL(minimum_kernel, detail::propagating_min(a, b))
KILN_BINARY_KERNEL(greater_kernel, a > b ? T(1) : T(0))
KILN_BINARY_KERNEL(greater_equal_kernel, a >= b ? T(1) : T(0))
KILN_BINARY_KERNEL(less_kernel, a < b ? T(1) : T(0))
KILN_BINARY_KERNEL(less_equal_kernel, a <= b ? T(1) : T(0))
KILN_BINARY_KERNEL(equal_kernel, a == b ? T(1) : T(0))
#undef KILN_BINARY_KERNEL

std::vector<Tensor> add_backward(const GradContext& g) { return {g.output_grad(), g.output_grad()}; }

std::vector<Tensor> sub_backward(const GradContext& g) {
  return {g.output_grad(), g.needs_grad(1) ? ops::neg(g.output_grad()) : Tensor{}};
}

std::vector<Tensor> mul_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  return {g.needs_grad(0) ? ops::mul(dy, g.input(1)) : Tensor{}, g.needs_grad(1) ? ops::mul(dy, g.input(0)) : Tensor{}};
}

std::vector<Tensor> div_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor da = ops::div(dy, g.input(1));
  // d(a/b)/db = -a/b^2 = -(dy/b) * (a/b): reuses da and the forward output.
  return {g.needs_grad(0) ? da : Tensor{}, g.needs_grad(1) ? ops::neg(ops::mul(da, g.output())) : Tensor{}};
}

std::vector<Tensor> pow_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor base = g.input(0);
  const Tensor exponent = g.input(1);
  Tensor d_base, d_exponent;
  // b * a^(b-1) rather than b * y / a: finite at a = 0.
  if (g.needs_grad(0)) d_base = ops::mul(dy, ops::mul(exponent, ops::pow(base, ops::add_scalar(exponent, -1.0))));
  if (g.needs_grad(1)) d_exponent = ops::mul(dy, ops::mul(g.output(), ops::log(base)));
  return {d_base, d_exponent};
}

// The gradient goes to the input that won; a tie goes to `a` (maximum/minimum keep `a` on ties).
std::vector<Tensor> extremum_backward(const GradContext& g, bool is_maximum) {
  const Tensor dy = g.output_grad();
  const Tensor a_won =
      is_maximum ? ops::greater_equal(g.input(0), g.input(1)) : ops::less_equal(g.input(0), g.input(1));
  const Tensor da = ops::mul(dy, a_won);
  return {g.needs_grad(0) ? da : Tensor{}, g.needs_grad(1) ? ops::sub(dy, da) : Tensor{}};
}
std::vector<Tensor> maximum_backward(const GradContext& g) { return extremum_backward(g, true); }
std::vector<Tensor> minimum_backward(const GradContext& g) { return extremum_backward(g, false); }

OpDef binary(const char* name, KernelFn f32, KernelFn f64) {
  return OpDef(name).inputs(2).infer_shape(detail::broadcast_all_inputs).forward(f32, f64).sharing(Sharing::inplace);
}

OpDef comparison(const char* name, KernelFn f32, KernelFn f64) {
  return binary(name, f32, f64)
      .non_differentiable_inputs({0, 1}, "a comparison is piecewise constant: its gradient is zero almost everywhere");
}

}  // namespace

KILN_REGISTER_OP(binary("kiln>Add", add_kernel<float>, add_kernel<double>).backward(add_backward));
KILN_REGISTER_OP(binary("kiln>Sub", sub_kernel<float>, sub_kernel<double>).backward(sub_backward));
KILN_REGISTER_OP(binary("kiln>Mul", mul_kernel<float>, mul_kernel<double>).backward(mul_backward));
KILN_REGISTER_OP(binary("kiln>Div", div_kernel<float>, div_kernel<double>).backward(div_backward));
KILN_REGISTER_OP(binary("kiln>Pow", pow_kernel<float>, pow_kernel<double>).backward(pow_backward));
KILN_REGISTER_OP(binary("kiln>Maximum", maximum_kernel<float>, maximum_kernel<double>).backward(maximum_backward));
KILN_REGISTER_OP(binary("kiln>Minimum", minimum_kernel<float>, minimum_kernel<double>).backward(minimum_backward));
KILN_REGISTER_OP(comparison("kiln>Greater", greater_kernel<float>, greater_kernel<double>));
KILN_REGISTER_OP(comparison("kiln>GreaterEqual", greater_equal_kernel<float>, greater_equal_kernel<double>));
KILN_REGISTER_OP(comparison("kiln>Less", less_kernel<float>, less_kernel<double>));
KILN_REGISTER_OP(comparison("kiln>LessEqual", less_equal_kernel<float>, less_equal_kernel<double>));
KILN_REGISTER_OP(comparison("kiln>Equal", equal_kernel<float>, equal_kernel<double>));

namespace ops {

namespace {
Tensor binary_node(const char* op, const Tensor& a, const Tensor& b, const char* name) {
  return detail::add_or_record_op(op, {a, b}, {}, name);
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_node("kiln>Add", a, b, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_node("kiln>Sub", a, b, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_node("kiln>Mul", a, b, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_node("kiln>Div", a, b, "div"); }
Tensor pow(const Tensor& base, const Tensor& exponent) { return binary_node("kiln>Pow", base, exponent, "pow"); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_node("kiln>Maximum", a, b, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_node("kiln>Minimum", a, b, "minimum"); }
Tensor greater(const Tensor& a, const Tensor& b) { return binary_node("kiln>Greater", a, b, "greater"); }
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  return binary_node("kiln>GreaterEqual", a, b, "greater_equal");
}
Tensor less(const Tensor& a, const Tensor& b) { return binary_node("kiln>Less", a, b, "less"); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return binary_node("kiln>LessEqual", a, b, "less_equal"); }
Tensor equal(const Tensor& a, const Tensor& b) { return binary_node("kiln>Equal", a, b, "equal"); }

}  // namespace ops
}  // namespace kiln
