// matmul and batched matmul with transpose flags, straight to detail::gemm (no transposed copies). With the attribute
// bfloat16 (set where Graph::bfloat16_products() was, inside a layer whose dtype policy computes in bfloat16) a
// float32 product rounds its operands to bfloat16 and sums in float32 (detail::gemm_bf16), as do its gradient's
// products; a float64 one stays exact, so the float64 gradient checks still check the rule.
#include <algorithm>
#include <type_traits>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

struct MatrixDims {
  std::int64_t rows, cols;  // of the operand as used, after its transpose flag
};

MatrixDims used_dims(const Shape& shape, bool transpose) {
  const std::int64_t r = shape[shape.rank() - 2];
  const std::int64_t c = shape[shape.rank() - 1];
  return transpose ? MatrixDims{c, r} : MatrixDims{r, c};
}

bool dims_agree(std::int64_t a, std::int64_t b) { return a == b || a == Shape::unknown || b == Shape::unknown; }

Shape matmul_shape(const InferContext& context) {
  const Shape& a = context.input_shape(0);
  const Shape& b = context.input_shape(1);
  if (a.rank() < 2 || b.rank() < 2) context.fail_with("needs rank 2 or more: " + a.to_string() + " @ " + b.to_string());
  const bool transpose_a = context.attributes().get_bool("transpose_a");
  const bool transpose_b = context.attributes().get_bool("transpose_b");
  const MatrixDims left = used_dims(a, transpose_a);
  const MatrixDims right = used_dims(b, transpose_b);
  if (!dims_agree(left.cols, right.rows))
    context.fail_with("inner dimensions differ: " + a.to_string() + (transpose_a ? "ᵀ" : "") + " @ " + b.to_string() +
                      (transpose_b ? "ᵀ" : ""));
  // Batch dimensions broadcast like NumPy's.
  const int batch_rank = std::max(a.rank(), b.rank()) - 2;
  std::vector<std::int64_t> dims(static_cast<std::size_t>(batch_rank));
  for (int i = 0; i < batch_rank; ++i) {
    const int ia = a.rank() - 2 - batch_rank + i;
    const int ib = b.rank() - 2 - batch_rank + i;
    const std::int64_t da = ia >= 0 ? a[ia] : 1;
    const std::int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      context.fail_with("batch dimensions cannot be broadcast: " + a.to_string() + " @ " + b.to_string());
    dims[static_cast<std::size_t>(i)] = da == 1 ? db : da;
  }
  dims.push_back(left.rows);
  dims.push_back(right.cols);
  return Shape(std::move(dims));
}

// Offset of batch `index` (in the output's batch shape) in an operand whose batch dims may broadcast.
std::int64_t batch_offset(std::int64_t index, const Shape& out, const Shape& operand, int batch_rank) {
  std::int64_t offset = 0;
  std::int64_t stride = operand[operand.rank() - 1] * operand[operand.rank() - 2];
  const int shift = (operand.rank() - 2) - batch_rank;
  for (int axis = batch_rank - 1; axis >= 0; --axis) {
    const std::int64_t position = index % out[axis];
    index /= out[axis];
    const int operand_axis = axis + shift;
    if (operand_axis < 0) continue;
    if (operand[operand_axis] != 1) offset += position * stride;
    stride *= operand[operand_axis];
  }
  return offset;
}

// Shared weights (a Dense layer): every row of every batch of `a` in one GEMM.
bool shared_weights(const Shape& b, bool transpose_a) { return b.rank() == 2 && !transpose_a; }

// The product each GEMM call computes: one per batch, or one for all when the weights are shared.
detail::GemmShape gemm_of(const Shape& a, const Shape& b, const Attributes& attributes) {
  const bool transpose_a = attributes.get_bool("transpose_a");
  const bool transpose_b = attributes.get_bool("transpose_b");
  const MatrixDims left = used_dims(a, transpose_a);
  const MatrixDims right = used_dims(b, transpose_b);
  detail::GemmShape gemm{left.rows,   right.cols,      left.cols,       transpose_a,
                         transpose_b, a[a.rank() - 1], b[b.rank() - 1], right.cols};
  if (shared_weights(b, transpose_a)) {
    gemm.m = 1;
    for (int axis = 0; axis + 1 < a.rank(); ++axis) gemm.m *= a[axis];
  }
  return gemm;
}

bool in_bfloat16(const Attributes& attributes) { return attributes.has("bfloat16") && attributes.get_bool("bfloat16"); }

void matmul_prepare(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes, DType dtype) {
  if (!in_bfloat16(attributes)) detail::prepare_gemm(gemm_of(inputs[0], inputs[1], attributes), dtype);
}

template <class T>
void product(bool bfloat16, const detail::GemmShape& gemm, const T* a, const T* b, T* c) {
  if constexpr (std::is_same_v<T, float>)
    if (bfloat16) return detail::gemm_bf16(gemm, a, b, c);
  detail::gemm(gemm, a, b, c);
}

template <class T>
void matmul_kernel(const KernelContext& k) {
  const Shape& a = k.input_shape(0);
  const Shape& b = k.input_shape(1);
  const Shape& out = *k.output_shape;
  const detail::GemmShape gemm = gemm_of(a, b, k.attributes());
  const bool bfloat16 = in_bfloat16(k.attributes());
  const T* pa = k.in<T>(0);
  const T* pb = k.in<T>(1);
  T* pc = k.out<T>();
  if (shared_weights(b, gemm.transpose_a)) {
    product(bfloat16, gemm, pa, pb, pc);
    return;
  }
  const int batch_rank = out.rank() - 2;
  std::int64_t batches = 1;
  for (int axis = 0; axis < batch_rank; ++axis) batches *= out[axis];
  const std::int64_t out_matrix = gemm.m * gemm.n;
  // Batches on kiln's threads when each product is too small to split (see detail::gemm), else one by one.
  const std::int64_t work = gemm.m * gemm.n * gemm.k;
  const int max_workers =
      work >= detail::gemm_split_work ? 1 : static_cast<int>(std::min<std::int64_t>(batches, 1 << 16));
  detail::parallel_for(batches, max_workers, [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i)
      product(bfloat16, gemm, pa + batch_offset(i, out, a, batch_rank), pb + batch_offset(i, out, b, batch_rank),
              pc + i * out_matrix);
  });
}

// Gradient of a shared rank-2 weight: fold every batch row into one GEMM instead of summing per-batch
// products that autodiff would otherwise materialize.
Tensor shared_weight_grad(const Tensor& a, const Tensor& dy, bool transpose_b) {
  const Tensor rows_a = ops::reshape(a, {-1, a.shape().dim(-1)});
  const Tensor rows_dy = ops::reshape(dy, {-1, dy.shape().dim(-1)});
  return transpose_b ? ops::matmul(rows_dy, rows_a, true, false) : ops::matmul(rows_a, rows_dy, true, false);
}

std::vector<Tensor> matmul_backward(const GradContext& g) {
  const Tensor a = g.input(0);
  const Tensor b = g.input(1);
  const Tensor dy = g.output_grad();
  const bool ta = g.attributes().get_bool("transpose_a");
  const bool tb = g.attributes().get_bool("transpose_b");
  Graph::ProductPrecision precision(dy.graph(), in_bfloat16(g.attributes()));
  Tensor da, db;
  if (g.needs_grad(0)) {
    if (!ta)
      da = ops::matmul(dy, b, false, !tb);  // dA = dY·Bᵀ
    else
      da = ops::matmul(b, dy, tb, true);  // dAᵀ = B·dYᵀ
  }
  if (g.needs_grad(1)) {
    if (b.rank() == 2 && a.rank() > 2 && !ta)
      db = shared_weight_grad(a, dy, tb);
    else if (!tb)
      db = ops::matmul(a, dy, !ta, false);  // dB = Aᵀ·dY
    else
      db = ops::matmul(dy, a, true, ta);  // dBᵀ = dYᵀ·A
  }
  return {da, db};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>MatMul")
                     .display_name("matmul")
                     .inputs(2)
                     .attributes({"transpose_a", "transpose_b", "bfloat16"})
                     .infer_shape(matmul_shape)
                     .forward(matmul_kernel<float>, matmul_kernel<double>)
                     .prepare(matmul_prepare)
                     .backward(matmul_backward));

namespace ops {
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  // Keras's Matmul has no transposed forms: a model being written records the transposes as their own calls.
  if ((transpose_a || transpose_b) && detail::records_op({a, b})) {
    auto swap_last = [](const Tensor& x) {
      std::vector<std::int64_t> perm;
      for (int axis = 0; axis < x.rank(); ++axis) perm.push_back(axis);
      if (x.rank() >= 2) std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return transpose(x, perm);
    };
    return matmul(transpose_a ? swap_last(a) : a, transpose_b ? swap_last(b) : b);
  }
  Attributes attributes = Attributes().set("transpose_a", transpose_a).set("transpose_b", transpose_b);
  if (a.graph().bfloat16_products()) attributes.set("bfloat16", true);
  return detail::add_or_record_op("kiln>MatMul", {a, b}, attributes, "matmul");
}
}  // namespace ops
}  // namespace kiln
