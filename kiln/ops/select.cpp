// where and masked_fill: elementwise selection by a numeric condition (nonzero meaning true).
#include <algorithm>
#include <string>
#include <vector>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

Shape where_shape(const InferContext& ctx) { return detail::broadcast_all_inputs(ctx); }

// The output is x's shape: the mask may broadcast to x, never x to the mask.
Shape masked_fill_shape(const InferContext& ctx) {
  const Shape result = detail::broadcast_all_inputs(ctx);
  if (result != ctx.input_shape(0)) ctx.fail("the mask does not broadcast to x's shape");
  return result;
}

template <class T>
void where_kernel(const KernelContext& k) {
  const T* condition = k.in<T>(0);
  const T* a = k.in<T>(1);
  const T* b = k.in<T>(2);
  T* out = k.out<T>();
  const std::size_t n = k.output_size();
  const bool dense = detail::num_elements(k.input_shape(0)) == n && detail::num_elements(k.input_shape(1)) == n &&
                     detail::num_elements(k.input_shape(2)) == n;
  if (dense) {
    for (std::size_t i = 0; i < n; ++i) out[i] = condition[i] != T(0) ? a[i] : b[i];
    return;
  }
  detail::BroadcastWalk(*k.output_shape, k.input_shapes, 3)
      .for_each([&](std::int64_t i, std::int64_t ic, std::int64_t ia, std::int64_t ib) {
        out[i] = condition[ic] != T(0) ? a[ia] : b[ib];
      });
}

template <class T>
void masked_fill_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* mask = k.in<T>(1);
  const T value = static_cast<T>(k.attributes().get_double("value"));
  T* out = k.out<T>();
  const std::size_t n = k.output_size();
  if (detail::num_elements(k.input_shape(1)) == n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = mask[i] != T(0) ? x[i] : value;
    return;
  }
  detail::BroadcastWalk(*k.output_shape, k.input_shapes, 2)
      .for_each([&](std::int64_t i, std::int64_t ix, std::int64_t im, std::int64_t) {
        out[i] = mask[im] != T(0) ? x[ix] : value;
      });
}

std::vector<Tensor> where_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor condition = g.input(0);
  const Tensor zero = ops::scalar_like(dy, 0.0);
  return {Tensor{}, g.needs_grad(1) ? ops::where(condition, dy, zero) : Tensor{},
          g.needs_grad(2) ? ops::where(condition, zero, dy) : Tensor{}};
}

// A filled element is a constant: no gradient reaches x there.
std::vector<Tensor> masked_fill_backward(const GradContext& g) {
  return {ops::masked_fill(g.output_grad(), g.input(1), 0.0), Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Where")
                     .inputs(3)
                     .infer_shape(where_shape)
                     .forward(where_kernel<float>, where_kernel<double>)
                     .backward(where_backward)
                     .non_differentiable_inputs({0}, "a condition")
                     .sharing(Sharing::inplace));
KILN_REGISTER_OP(OpDef("kiln>MaskedFill")
                     .inputs(2)
                     .attributes({"value"})
                     .infer_shape(masked_fill_shape)
                     .forward(masked_fill_kernel<float>, masked_fill_kernel<double>)
                     .backward(masked_fill_backward)
                     .non_differentiable_inputs({1}, "a mask")
                     .sharing(Sharing::inplace));

namespace ops {

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return detail::add_or_record_op("kiln>Where", {condition, a, b}, {}, "where");
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return x.graph().add_op("kiln>MaskedFill", {x, mask}, Attributes().set("value", value), "masked_fill");
}

}  // namespace ops
}  // namespace kiln
