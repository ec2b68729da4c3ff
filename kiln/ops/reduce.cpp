// sum, mean, max, min over axes; sum_to (autodiff's broadcast reduction) and expand_like (its inverse).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

using AxisMask = std::array<bool, Shape::max_rank>;
enum class Reduction { sum, max, min };

AxisMask mask_from_attributes(const Shape& input, const Attributes& attributes) {
  AxisMask mask{};
  const auto& axes = attributes.get_ints("axes");
  if (axes.empty()) mask.fill(true);
  for (std::int64_t axis : axes) mask[static_cast<std::size_t>(axis < 0 ? axis + input.rank() : axis)] = true;
  return mask;
}

// The input as runs: adjacent axes merge into groups that are all reduced or all kept (axes of size 1
// drop out), and the walk goes over the innermost group's contiguous runs. f(input_offset,
// output_offset, length, output_stride) is called for each run in input order; along a run the input
// offset advances by 1 and the output offset by output_stride: 1 where the innermost group is kept, 0
// where it is reduced. A run loop is plain enough for the compiler to vectorize.
template <class F>
void walk_runs(const Shape& input, const AxisMask& reduced, F f) {
  const std::int64_t total = input.num_elements();
  if (total == 0) return;
  std::array<std::int64_t, Shape::max_rank> sizes{};
  std::array<bool, Shape::max_rank> group_reduced{};
  int groups = 0;
  for (int axis = 0; axis < input.rank(); ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    if (input[axis] == 1) continue;
    if (groups > 0 && group_reduced[static_cast<std::size_t>(groups - 1)] == reduced[a]) {
      sizes[static_cast<std::size_t>(groups - 1)] *= input[axis];
    } else {
      sizes[static_cast<std::size_t>(groups)] = input[axis];
      group_reduced[static_cast<std::size_t>(groups)] = reduced[a];
      ++groups;
    }
  }
  if (groups == 0) {  // a single element
    f(0, 0, 1, 0);
    return;
  }
  std::array<std::int64_t, Shape::max_rank> strides{};
  std::int64_t stride = 1;
  for (int g = groups - 1; g >= 0; --g) {
    const auto i = static_cast<std::size_t>(g);
    strides[i] = group_reduced[i] ? 0 : stride;
    if (!group_reduced[i]) stride *= sizes[i];
  }
  const auto innermost = static_cast<std::size_t>(groups - 1);
  const std::int64_t length = sizes[innermost];
  std::array<std::int64_t, Shape::max_rank> index{};
  std::int64_t out = 0;
  for (std::int64_t in = 0; in < total; in += length) {
    f(in, out, length, strides[innermost]);
    for (int g = groups - 2; g >= 0; --g) {
      const auto i = static_cast<std::size_t>(g);
      out += strides[i];
      if (++index[i] < sizes[i]) break;
      out -= strides[i] * sizes[i];
      index[i] = 0;
    }
  }
}

// Calls f(input_offset, output_offset) for every input element, walking the input in order.
template <class F>
void walk_reduction(const Shape& input, const AxisMask& reduced, F f) {
  walk_runs(input, reduced, [&](std::int64_t in, std::int64_t out, std::int64_t length, std::int64_t stride) {
    for (std::int64_t j = 0; j < length; ++j) f(in + j, out + j * stride);
  });
}

// A run's sum in 8 independent partial sums, which the compiler keeps in one vector register.
template <class T>
T run_sum(const T* in, std::int64_t length) {
  constexpr std::int64_t lanes = 8;
  T partial[lanes] = {};
  std::int64_t j = 0;
  for (; j + lanes <= length; j += lanes)
    for (std::int64_t l = 0; l < lanes; ++l) partial[l] += in[j + l];
  T sum = T(0);
  for (std::int64_t l = 0; l < lanes; ++l) sum += partial[l];
  for (; j < length; ++j) sum += in[j];
  return sum;
}

// Folds the input into out: combine(out, x) element by element along kept runs, fold(out, run, length)
// for a reduced run.
template <class T, class Combine, class Fold>
void reduce_runs(const T* in, const Shape& input, const AxisMask& reduced, T* out, Combine combine, Fold fold) {
  walk_runs(input, reduced, [&](std::int64_t i, std::int64_t o, std::int64_t length, std::int64_t stride) {
    if (stride == 0) {
      out[o] = fold(out[o], in + i, length);
    } else {
      for (std::int64_t j = 0; j < length; ++j) out[o + j] = combine(out[o + j], in[i + j]);
    }
  });
}

// max and min fold a reduced run one element at a time.
template <class T, class Combine>
void reduce_runs(const T* in, const Shape& input, const AxisMask& reduced, T* out, Combine combine) {
  reduce_runs(in, input, reduced, out, combine, [&](T value, const T* run, std::int64_t length) {
    for (std::int64_t j = 0; j < length; ++j) value = combine(value, run[j]);
    return value;
  });
}

// ---- over threads ----------------------------------------------------------------------------------------
// Three layouts are split over kiln's threads: the reduced axes trailing (each row's fold is its own: any split gives
// the serial result), reduced axes between kept ones (each outer index's fold is its own, likewise) and, for sums,
// leading (a bias's gradient: each worker adds its rows, in order, into a partial of its own in the workspace, 64
// bytes apart, and the partials are added in worker order: the result depends on the thread count only, and with
// one worker is the serial sum). Other layouts run serially.

// The input's axes as groups of neighbours, size-1 axes dropped, each group all reduced or all kept (as walk_runs
// merges them): their sizes, up to three, and whether the first is reduced. More than three: count 4.
struct AxisGroups {
  int count = 0;
  bool first_reduced = false;
  std::int64_t sizes[3] = {1, 1, 1};
};

AxisGroups axis_groups(const Shape& input, const AxisMask& reduced) {
  AxisGroups groups;
  bool last_reduced = false;
  for (int axis = 0; axis < input.rank(); ++axis) {
    if (input[axis] == 1) continue;
    const bool r = reduced[static_cast<std::size_t>(axis)];
    if (groups.count == 0 || r != last_reduced) {
      if (++groups.count > 3) return groups;
      if (groups.count == 1) groups.first_reduced = r;
      last_reduced = r;
    }
    groups.sizes[groups.count - 1] *= input[axis];
  }
  return groups;
}

// The input as (outer, inner) rows when its axes are two groups, one reduced and one kept.
struct Rows2 {
  bool valid = false;
  bool leading_reduced = false;  // (outer reduced, inner kept) or (outer kept, inner reduced)
  std::int64_t outer = 0, inner = 0;
};

Rows2 rows_of(const Shape& input, const AxisMask& reduced) {
  const AxisGroups groups = axis_groups(input, reduced);
  if (groups.count != 2) return {};
  return {true, groups.first_reduced, groups.sizes[0], groups.sizes[1]};
}

// The input as (outer, middle, inner) when its axes are three groups: kept, reduced, kept (a global pooling's
// mean over the spatial axes of channels_last images). Each outer index folds its own middle rows.
struct Rows3 {
  bool valid = false;
  std::int64_t outer = 0, middle = 0, inner = 0;
};

Rows3 rows3_of(const Shape& input, const AxisMask& reduced) {
  const AxisGroups groups = axis_groups(input, reduced);
  if (groups.count != 3 || groups.first_reduced) return {};
  return {true, groups.sizes[0], groups.sizes[1], groups.sizes[2]};
}

std::int64_t padded_size(std::int64_t count, std::size_t element) {
  const auto per_line = static_cast<std::int64_t>(64 / element);
  return (count + per_line - 1) / per_line * per_line;
}

// Workers for summing leading rows into partials: no more than a quarter of the rows each, so the partials take at
// most a quarter of the input's size.
int partial_workers(const Rows2& rows) {
  return detail::parallel_workers(
      rows.outer, std::min<std::int64_t>(detail::workers_for_elements(rows.outer * rows.inner), rows.outer / 4));
}

std::size_t partials_workspace(const Shape& input, const AxisMask& reduced, DType dtype) {
  const Rows2 rows = rows_of(input, reduced);
  if (!rows.valid || !rows.leading_reduced) return 0;
  const int workers = partial_workers(rows);
  if (workers <= 1) return 0;
  const std::size_t element = dtype_size(dtype);
  return static_cast<std::size_t>(padded_size(rows.inner, element) * workers) * element + 64;
}

// Reduces the input into out, in parallel where the layout allows (above); workspace: partials_workspace's bytes.
template <class T>
void reduce_into(const T* in, const Shape& input, const AxisMask& reduced, T* out, std::size_t out_size, Reduction kind,
                 void* workspace = nullptr, std::size_t workspace_bytes = 0) {
  const T initial = kind == Reduction::sum   ? T(0)
                    : kind == Reduction::max ? -std::numeric_limits<T>::infinity()
                                             : std::numeric_limits<T>::infinity();
  std::fill(out, out + out_size, initial);
  const auto sum = [](T a, T b) { return a + b; };
  const auto max = [](T a, T b) { return detail::propagating_max(a, b); };
  const auto min = [](T a, T b) { return detail::propagating_min(a, b); };
  const Rows2 rows = rows_of(input, reduced);
  if (rows.valid && !rows.leading_reduced) {  // out[r] = the fold of row r
    detail::parallel_for(rows.outer, detail::workers_for_elements(rows.outer * rows.inner),
                         [&](std::int64_t begin, std::int64_t end, int) {
                           for (std::int64_t r = begin; r < end; ++r) {
                             const T* row = in + r * rows.inner;
                             if (kind == Reduction::sum) {
                               out[r] = T(0) + run_sum(row, rows.inner);
                             } else {
                               T value = out[r];
                               for (std::int64_t j = 0; j < rows.inner; ++j)
                                 value = kind == Reduction::max ? max(value, row[j]) : min(value, row[j]);
                               out[r] = value;
                             }
                           }
                         });
    return;
  }
  if (rows.valid && kind == Reduction::sum) {  // out[c] = the sum over rows of column c
    const std::int64_t stride = padded_size(rows.inner, sizeof(T));
    const std::size_t room = workspace_bytes > 64 ? workspace_bytes - 64 : 0;
    const auto capacity = static_cast<std::int64_t>(room / (static_cast<std::size_t>(stride) * sizeof(T)));
    const int workers = static_cast<int>(std::min<std::int64_t>(capacity, partial_workers(rows)));
    const auto add_rows = [&](std::int64_t begin, std::int64_t end, T* __restrict target) {
      const std::int64_t inner = rows.inner;
      for (std::int64_t r = begin; r < end; ++r) {
        const T* __restrict row = in + r * inner;
        for (std::int64_t c = 0; c < inner; ++c) target[c] += row[c];
      }
    };
    if (workers > 1) {
      const auto start = reinterpret_cast<std::uintptr_t>(workspace);
      T* partials = reinterpret_cast<T*>((start + 63) / 64 * 64);
      std::fill(partials, partials + stride * workers, T(0));
      detail::parallel_for(rows.outer, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
        add_rows(begin, end, partials + stride * worker);
      });
      for (int worker = 0; worker < workers; ++worker) {
        const T* partial = partials + stride * worker;
        for (std::int64_t c = 0; c < rows.inner; ++c) out[c] += partial[c];
      }
      return;
    }
  }
  if (const Rows3 rows3 = rows3_of(input, reduced); rows3.valid) {
    // out[o, i] folds in[o, m, i] over m, in the serial walk's order: any split over o gives the serial result.
    const std::int64_t inner = rows3.inner, middle = rows3.middle;
    const auto fold_rows = [&](const auto& combine) {
      detail::parallel_for(rows3.outer, detail::workers_for_elements(rows3.outer * middle * inner),
                           [&](std::int64_t begin, std::int64_t end, int) {
                             for (std::int64_t o = begin; o < end; ++o) {
                               T* __restrict target = out + o * inner;
                               for (std::int64_t m = 0; m < middle; ++m) {
                                 const T* __restrict row = in + (o * middle + m) * inner;
                                 for (std::int64_t i = 0; i < inner; ++i) target[i] = combine(target[i], row[i]);
                               }
                             }
                           });
    };
    if (kind == Reduction::sum)
      fold_rows(sum);
    else if (kind == Reduction::max)
      fold_rows(max);
    else
      fold_rows(min);
    return;
  }
  if (kind == Reduction::sum)
    reduce_runs(in, input, reduced, out, sum,
                [](T value, const T* run, std::int64_t length) { return value + run_sum(run, length); });
  else if (kind == Reduction::max)
    reduce_runs(in, input, reduced, out, max);
  else
    reduce_runs(in, input, reduced, out, min);
}

Shape reduce_shape(const InferContext& context) {
  const Shape& input = context.input_shape(0);
  const auto axes = detail::reduction_axes(input, context.attributes().get_ints("axes"), context);
  return detail::reduced_shape(input, axes, context.attributes().get_bool("keepdims"));
}

template <class T, Reduction kind, bool average>
void reduce_kernel(const KernelContext& k) {
  const Shape& input = k.input_shape(0);
  reduce_into(k.in<T>(0), input, mask_from_attributes(input, k.attributes()), k.out<T>(), k.output_size(), kind,
              k.workspace, k.workspace_bytes);
  if (average && k.output_size() > 0) {
    const T factor = static_cast<T>(static_cast<double>(k.output_size()) / static_cast<double>(input.num_elements()));
    T* out = k.out<T>();
    const std::size_t size = k.output_size();
    for (std::size_t i = 0; i < size; ++i) out[i] *= factor;
  }
}

// The reduced gradient with its reduced axes put back as size 1, ready to broadcast.
Tensor with_kept_dims(const GradContext& g, Tensor dy) {
  if (g.attributes().get_bool("keepdims")) return dy;
  const Shape& input = g.input(0).shape();
  const auto& axes = g.attributes().get_ints("axes");
  for (int axis = 0; axis < input.rank(); ++axis) {
    const bool reduced = axes.empty() || std::any_of(axes.begin(), axes.end(), [&](std::int64_t a) {
                           return (a < 0 ? a + input.rank() : a) == axis;
                         });
    if (reduced) dy = ops::expand_dims(dy, axis);
  }
  return dy;
}

Tensor expand_like(const Tensor& x, const Tensor& like, bool average) {
  return x.graph().add_op("kiln>ExpandLike", {x, like}, Attributes().set("average", average), "expand_like");
}

std::vector<Tensor> sum_backward(const GradContext& g) {
  return {expand_like(with_kept_dims(g, g.output_grad()), g.input(0), false)};
}
std::vector<Tensor> mean_backward(const GradContext& g) {
  return {expand_like(with_kept_dims(g, g.output_grad()), g.input(0), true)};
}
std::vector<Tensor> extremum_backward(const GradContext& g) {
  Attributes attributes = g.attributes();
  return {g.output().graph().add_op("kiln>ReduceExtremumGrad", {g.input(0), g.output(), g.output_grad()},
                                    std::move(attributes), "extremum_grad")};
}

std::size_t sum_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& a, DType dtype) {
  return partials_workspace(inputs[0], mask_from_attributes(inputs[0], a), dtype);
}

OpDef reduction(const char* name, KernelFn f32, KernelFn f64, BackwardFn backward, WorkspaceFn workspace = nullptr) {
  OpDef def = OpDef(name)
                  .inputs(1)
                  .attributes({"axes", "keepdims"})
                  .infer_shape(reduce_shape)
                  .forward(f32, f64)
                  .backward(backward);
  if (workspace != nullptr) def.workspace(workspace);
  return def;
}

// ---- ExpandLike: broadcast x to like's shape (optionally dividing by the expansion: mean's gradient) -----

Shape like_shape(const InferContext& context) { return context.input_shape(1); }

template <class T>
void expand_like_kernel(const KernelContext& k) {
  const Shape& small = k.input_shape(0);
  const Shape& big = *k.output_shape;
  const T* in = k.in<T>(0);
  T* out = k.out<T>();
  const Shape* shapes[] = {&small};
  T factor = T(1);
  if (k.attributes().get_bool("average") && big.num_elements() > 0)
    factor = static_cast<T>(static_cast<double>(small.num_elements()) / static_cast<double>(big.num_elements()));
  // Row by row of the last axis (per element, the walk's index updates took 0.9 ns an element: 435 µs for
  // cnn_small's pooling gradient (64, 11, 11, 64)).
  const detail::BroadcastWalk walk(big, shapes, 1);
  const std::int64_t step = walk.inner_stride(0);
  walk.for_each_row([&](std::int64_t i, std::int64_t o, std::int64_t, std::int64_t, std::int64_t run) {
    T* row = out + i;
    if (step == 0) {
      std::fill(row, row + run, in[o] * factor);
    } else {
      for (std::int64_t j = 0; j < run; ++j) row[j] = in[o + j * step] * factor;
    }
  });
}

std::vector<Tensor> expand_like_backward(const GradContext& g) {
  if (g.attributes().get_bool("average"))
    throw NotDifferentiable(g.node().describe() + ": second-order gradients of mean are not supported");
  return {ops::sum_to(g.output_grad(), g.input(0).shape()), Tensor{}};
}

// ---- SumTo -----------------------------------------------------------------------------------------------

Shape sum_to_shape(const InferContext& context) {
  const Shape& input = context.input_shape(0);
  const auto& target = context.attributes().get_ints("shape");
  const int rank = static_cast<int>(target.size());
  if (rank > input.rank()) context.fail("cannot sum to a shape of higher rank");
  std::vector<std::int64_t> dims(target.begin(), target.end());
  for (int i = 0; i < rank; ++i) {
    const std::int64_t from = input[input.rank() - rank + i];
    std::int64_t& to = dims[static_cast<std::size_t>(i)];
    if (to == Shape::unknown) to = from;
    if (to != from && to != 1) context.fail("cannot sum to shape " + Shape(dims).to_string());
  }
  return Shape(std::move(dims));
}

// The axes SumTo reduces: the leading ones beyond the target's rank, and those the target has as 1.
AxisMask sum_to_mask(const Shape& input, const Shape& output) {
  AxisMask reduced{};
  const int shift = input.rank() - output.rank();
  for (int axis = 0; axis < input.rank(); ++axis)
    reduced[static_cast<std::size_t>(axis)] = axis < shift || (output[axis - shift] == 1 && input[axis] != 1);
  return reduced;
}

template <class T>
void sum_to_kernel(const KernelContext& k) {
  const Shape& input = k.input_shape(0);
  reduce_into(k.in<T>(0), input, sum_to_mask(input, *k.output_shape), k.out<T>(), k.output_size(), Reduction::sum,
              k.workspace, k.workspace_bytes);
}

std::size_t sum_to_workspace(const std::vector<Shape>& inputs, const Shape& output, const Attributes&, DType dtype) {
  return partials_workspace(inputs[0], sum_to_mask(inputs[0], output), dtype);
}

std::vector<Tensor> sum_to_backward(const GradContext& g) { return {expand_like(g.output_grad(), g.input(0), false)}; }

// ---- the gradient of max/min: ties share it equally --------------------------------------------------------

template <class T>
void extremum_grad_kernel(const KernelContext& k) {
  const Shape& input = k.input_shape(0);
  const AxisMask reduced = mask_from_attributes(input, k.attributes());
  const T* x = k.in<T>(0);
  const T* y = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  // Mark the winners with 1, count them per output position, then share dy among them.
  walk_reduction(input, reduced, [&](std::int64_t i, std::int64_t o) { dx[i] = x[i] == y[o] ? T(1) : T(0); });
  T* counts = k.scratch<T>();
  const std::size_t outputs = static_cast<std::size_t>(k.input_shape(1).num_elements());
  std::fill(counts, counts + outputs, T(0));
  walk_reduction(input, reduced, [&](std::int64_t i, std::int64_t o) { counts[o] += dx[i]; });
  walk_reduction(input, reduced, [&](std::int64_t i, std::int64_t o) { dx[i] = dx[i] * dy[o] / counts[o]; });
}

std::size_t extremum_grad_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes&, DType dtype) {
  return static_cast<std::size_t>(inputs[1].num_elements()) * dtype_size(dtype);
}

}  // namespace

KILN_REGISTER_OP(reduction("kiln>Sum", reduce_kernel<float, Reduction::sum, false>,
                           reduce_kernel<double, Reduction::sum, false>, sum_backward, sum_workspace));
KILN_REGISTER_OP(reduction("kiln>Mean", reduce_kernel<float, Reduction::sum, true>,
                           reduce_kernel<double, Reduction::sum, true>, mean_backward, sum_workspace));
KILN_REGISTER_OP(reduction("kiln>Max", reduce_kernel<float, Reduction::max, false>,
                           reduce_kernel<double, Reduction::max, false>, extremum_backward));
KILN_REGISTER_OP(reduction("kiln>Min", reduce_kernel<float, Reduction::min, false>,
                           reduce_kernel<double, Reduction::min, false>, extremum_backward));
KILN_REGISTER_OP(OpDef("kiln>SumTo")
                     .inputs(1)
                     .attributes({"shape"})
                     .infer_shape(sum_to_shape)
                     .forward(sum_to_kernel<float>, sum_to_kernel<double>)
                     .workspace(sum_to_workspace)
                     .backward(sum_to_backward));
KILN_REGISTER_OP(OpDef("kiln>ExpandLike")
                     .inputs(2)
                     .attributes({"average"})
                     .infer_shape(like_shape)
                     .forward(expand_like_kernel<float>, expand_like_kernel<double>)
                     .backward(expand_like_backward)
                     .non_differentiable_inputs({1}, "only its shape is read"));
KILN_REGISTER_OP(OpDef("kiln>ReduceExtremumGrad")
                     .inputs(3)
                     .attributes({"axes", "keepdims"})
                     .infer_shape(detail::first_input_shape)
                     .forward(extremum_grad_kernel<float>, extremum_grad_kernel<double>)
                     .workspace(extremum_grad_workspace)
                     .not_differentiable("second-order gradients of max and min are not supported"));

namespace ops {

namespace {
Tensor reduce_node(const char* op, const Tensor& x, const Axes& axes, bool keepdims, const char* name) {
  return detail::add_or_record_op(op, {x}, Attributes().set("axes", axes).set("keepdims", keepdims), name);
}
}  // namespace

Tensor sum(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce_node("kiln>Sum", x, axes, keepdims, "sum");
}
Tensor mean(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce_node("kiln>Mean", x, axes, keepdims, "mean");
}
Tensor max(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce_node("kiln>Max", x, axes, keepdims, "max");
}
Tensor min(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce_node("kiln>Min", x, axes, keepdims, "min");
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  return x.graph().add_op("kiln>SumTo", {x}, Attributes().set("shape", shape.dims()), "sum_to");
}

Tensor l2_normalize(const Tensor& x, const Axes& axes) {
  const Tensor square_sum = sum(square(x), axes, /*keepdims=*/true);
  return x * rsqrt(maximum(square_sum, scalar_like(square_sum, 1e-24)));
}

}  // namespace ops
}  // namespace kiln
