// reshape, transpose, concat, split, slice, pad, broadcast_to, squeeze and expand_dims.
//
// Shape rules run twice: when the node is built, and again when a Program plans a batch size, with
// concrete input shapes but no batch size of its own. So an output's unknown dimension only promises
// "fixed by the batch size"; the plan-time run computes it (6 x batch rows after folding (None, 6, 8)
// into [-1, 8]), and any mismatch it implies surfaces there as a ShapeError.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

using Dims = std::array<std::int64_t, Shape::max_rank>;
using Ints = std::vector<std::int64_t>;

std::string ints_to_string(const Ints& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

Dims dims_of(const Shape& shape) {
  Dims dims{};
  for (int axis = 0; axis < shape.rank(); ++axis) dims[static_cast<std::size_t>(axis)] = shape[axis];
  return dims;
}

std::int64_t normalized(std::int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// A row-major walk over `dims` that reads with one set of strides and writes with another: transpose,
// slice and the slice gradient are this one copy with different strides and base pointers.
struct StridedCopy {
  int rank = 0;
  Dims dims{};
  Dims source_strides{};
  Dims target_strides{};

  template <class T>
  void run(const T* source, T* target) const {
    if (rank == 0) {
      *target = *source;
      return;
    }
    for (int axis = 0; axis < rank; ++axis)
      if (dims[static_cast<std::size_t>(axis)] == 0) return;
    // Large copies split their outermost axis over kiln's threads (a head split of attention: 1.3 MB).
    std::int64_t total = 1;
    for (int axis = 0; axis < rank; ++axis) total *= dims[static_cast<std::size_t>(axis)];
    const int max_workers = rank < 2 ? 1 : detail::workers_for_elements(total);
    detail::parallel_for(dims[0], max_workers, [&](std::int64_t begin, std::int64_t end, int) {
      StridedCopy part = *this;
      part.dims[0] = end - begin;
      part.run_serial(source + begin * source_strides[0], target + begin * target_strides[0]);
    });
  }

  template <class T>
  void run_serial(const T* source, T* target) const {
    const auto last = static_cast<std::size_t>(rank - 1);
    const std::int64_t n = dims[last], source_step = source_strides[last], target_step = target_strides[last];
    const bool contiguous = source_step == 1 && target_step == 1;
    Dims index{};
    std::int64_t s = 0, t = 0;
    for (;;) {
      if (contiguous)
        std::copy(source + s, source + s + n, target + t);
      else
        for (std::int64_t j = 0; j < n; ++j) target[t + j * target_step] = source[s + j * source_step];
      int axis = rank - 2;
      for (; axis >= 0; --axis) {
        const auto a = static_cast<std::size_t>(axis);
        s += source_strides[a];
        t += target_strides[a];
        if (++index[a] < dims[a]) break;
        s -= source_strides[a] * dims[a];
        t -= target_strides[a] * dims[a];
        index[a] = 0;
      }
      if (axis < 0) return;
    }
  }
};

// The fallback for the alias ops when the planner cannot alias: the bytes are the same, only the shape differs.
template <class T>
void copy_kernel(const KernelContext& k) {
  const T* in = k.in<T>(0);
  T* out = k.out<T>();
  if (in != out) std::memcpy(out, in, k.output_size() * sizeof(T));
}

// ---- reshape -------------------------------------------------------------------------------------------

// Whether some batch size gives an input of `known` x (unknown dimensions) elements `total` elements.
// Unknown dimensions may be different multiples of the batch size, so divisibility is all one can ask.
bool fits_some_batch(std::int64_t known, std::int64_t total) {
  if (known == 0) return total == 0;
  return total > 0 && total % known == 0;
}

struct DimCount {
  std::int64_t known = 1;  // product of the known dimensions
  int num_unknown = 0;
  int unknown_at = -1;  // the (last) position of an unknown dimension
};

DimCount count_dims(const Ints& dims) {
  DimCount count;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == Shape::unknown) {
      ++count.num_unknown;
      count.unknown_at = static_cast<int>(i);
    } else {
      count.known *= dims[i];
    }
  }
  return count;
}

// The target's -1, inferred. With an unknown input it stays unknown: "(None, 160) -> [-1, 40, 4]" is
// "(None, 40, 4)", and some batch size always makes the division exact, so only the plan can reject one.
std::int64_t inferred_dim(const InferContext& ctx, const DimCount& in, const DimCount& target,
                          const std::string& what) {
  if (target.known == 0) ctx.fail(what + ": -1 is ambiguous next to a zero-sized dimension");
  if (in.num_unknown > 0) return Shape::unknown;
  if (in.known % target.known != 0) ctx.fail(what + ": " + std::to_string(in.known) + " elements do not divide evenly");
  return in.known / target.known;
}

// keep_dim takes the input's size at its axis, -1 the element count's quotient; an unknown input size
// kept on both sides cancels out of that quotient, so (None, None, 64) -> [keep, keep, 4, -1] is
// (None, None, 4, 16).
Shape reshape_shape(const InferContext& ctx) {
  const Shape& input = ctx.input_shape(0);
  const Ints& target = ctx.attributes().get_ints("shape");
  const std::string what = "cannot reshape " + input.to_string() + " to " + ints_to_string(target);
  Ints dims = target;
  DimCount wanted;       // over the target's sizes; num_unknown counts the -1s
  int kept_unknown = 0;  // unknown input sizes kept at their axis
  for (std::size_t i = 0; i < target.size(); ++i) {
    const std::int64_t d = target[i];
    if (d == ops::keep_dim) {
      if (static_cast<int>(i) >= input.rank())
        ctx.fail(what + ": the input has no axis " + std::to_string(i) + " to keep");
      dims[i] = input[static_cast<int>(i)];
      if (dims[i] == Shape::unknown)
        ++kept_unknown;
      else
        wanted.known *= dims[i];
    } else if (d == -1) {
      ++wanted.num_unknown;
      wanted.unknown_at = static_cast<int>(i);
    } else if (d < 0) {
      ctx.fail(what + ": negative dimension " + std::to_string(d));
    } else {
      wanted.known *= d;
    }
  }
  if (wanted.num_unknown > 1) ctx.fail(what + ": only one dimension may be -1");
  DimCount in = count_dims(input.dims());
  in.num_unknown -= kept_unknown;  // what is left unknown once the kept sizes cancel
  if (wanted.num_unknown == 1) {
    dims[static_cast<std::size_t>(wanted.unknown_at)] = inferred_dim(ctx, in, wanted, what);
  } else if (in.num_unknown == 0 && in.known != wanted.known) {
    ctx.fail(what + ": " + std::to_string(in.known) + " elements do not fit " + std::to_string(wanted.known));
  } else if (in.num_unknown > 0 && !fits_some_batch(in.known, wanted.known)) {
    ctx.fail(what + ": no batch size gives " + std::to_string(wanted.known) + " elements");
  }
  return Shape(std::move(dims));
}

// The input's shape, whatever the batch size: how a gradient goes back through the reshape family
// when a plain reshape cannot say it (several unknown dimensions, or a known output of an unknown input).
// With "leading" and "trailing": like's first `leading` dimensions, then `trailing` (TimeDistributed's
// unfolding of (batch·steps, ...) into (batch, steps, ...), whatever batch and steps turn out to be).
Shape reshape_like_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Shape& like = ctx.input_shape(1);
  Shape target = like;
  if (ctx.attributes().has("leading")) {
    const std::int64_t leading = ctx.attributes().get_int("leading");
    if (leading < 0 || leading > like.rank())
      ctx.fail("cannot keep " + std::to_string(leading) + " leading dimensions of " + like.to_string());
    Ints dims(like.dims().begin(), like.dims().begin() + leading);
    for (std::int64_t d : ctx.attributes().get_ints("trailing")) {
      if (d < 0) ctx.fail("the trailing dimensions must be known, got " + std::to_string(d));
      dims.push_back(d);
    }
    target = Shape(std::move(dims));
  }
  if (in.is_fully_defined() && target.is_fully_defined() && in.num_elements() != target.num_elements())
    ctx.fail("the element counts differ: " + in.to_string() + " into " + target.to_string());
  return target;
}

// x with like's shape: a Reshape where that can express it (the common case: one node, aliased), else a ReshapeLike.
Tensor reshape_as(const Tensor& x, const Tensor& like) {
  const Shape& target = like.shape();
  if (x.shape() == target) return x;
  const DimCount wanted = count_dims(target.dims());
  const DimCount have = count_dims(x.shape().dims());
  if (wanted.num_unknown <= 1 && have.num_unknown == wanted.num_unknown) return ops::reshape(x, target.dims());
  return x.graph().add_op("kiln>ReshapeLike", {x, like}, {}, "reshape_like");
}

std::vector<Tensor> reshape_backward(const GradContext& g) { return {reshape_as(g.output_grad(), g.input(0))}; }

std::vector<Tensor> reshape_like_backward(const GradContext& g) {
  return {reshape_as(g.output_grad(), g.input(0)), Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Reshape")
                     .inputs(1)
                     .attributes({"shape"})
                     .infer_shape(reshape_shape)
                     .forward(copy_kernel<float>, copy_kernel<double>)
                     .backward(reshape_backward)
                     .sharing(Sharing::alias));
KILN_REGISTER_OP(OpDef("kiln>ReshapeLike")
                     .inputs(2)
                     .attributes({"leading", "trailing"})
                     .infer_shape(reshape_like_shape)
                     .forward(copy_kernel<float>, copy_kernel<double>)
                     .backward(reshape_like_backward)
                     .non_differentiable_inputs({1}, "only its shape is read")
                     .sharing(Sharing::alias));

namespace {

// ---- transpose -----------------------------------------------------------------------------------------

Shape transpose_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Ints& perm = ctx.attributes().get_ints("perm");
  const std::string what = "perm " + ints_to_string(perm);
  if (static_cast<int>(perm.size()) != in.rank()) ctx.fail(what + " does not have one entry per axis");
  std::vector<bool> seen(perm.size(), false);
  Ints dims(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    const std::int64_t axis = normalized(perm[i], in.rank());
    if (axis < 0 || axis >= in.rank()) ctx.fail(what + " names an axis out of range");
    if (seen[static_cast<std::size_t>(axis)]) ctx.fail(what + " is not a permutation");
    seen[static_cast<std::size_t>(axis)] = true;
    dims[i] = in[static_cast<int>(axis)];
  }
  return Shape(std::move(dims));
}

template <class T>
void transpose_kernel(const KernelContext& k) {
  const Shape& in = k.input_shape(0);
  const Ints& perm = k.attributes().get_ints("perm");
  const Dims in_strides = detail::strides_of(in);
  StridedCopy copy;
  copy.rank = in.rank();
  copy.dims = dims_of(*k.output_shape);
  copy.target_strides = detail::strides_of(*k.output_shape);
  for (std::size_t a = 0; a < perm.size(); ++a)
    copy.source_strides[a] = in_strides[static_cast<std::size_t>(normalized(perm[a], in.rank()))];
  copy.run(k.in<T>(0), k.out<T>());
}

std::vector<Tensor> transpose_backward(const GradContext& g) {
  const Ints& perm = g.attributes().get_ints("perm");
  Ints inverse(perm.size());
  const int rank = static_cast<int>(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<std::size_t>(normalized(perm[i], rank))] = static_cast<std::int64_t>(i);
  return {ops::transpose(g.output_grad(), inverse)};
}

// ---- concat --------------------------------------------------------------------------------------------

Shape concat_shape(const InferContext& ctx) {
  const Shape& first = ctx.input_shape(0);
  if (first.rank() == 0) ctx.fail("cannot concatenate scalars");
  const std::int64_t requested = ctx.attributes().get_int("axis");
  const std::int64_t axis = normalized(requested, first.rank());
  if (axis < 0 || axis >= first.rank()) ctx.fail("axis " + std::to_string(requested) + " is out of range");
  Shape result = first;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Shape& other = ctx.input_shape(i);
    if (other.rank() != first.rank()) ctx.fail("ranks differ");
    for (int a = 0; a < first.rank(); ++a)
      if (a != axis && other[a] != first[a]) ctx.fail("dimensions differ off axis " + std::to_string(axis));
    // The gradient's slices need each input's offset along the axis when the graph is built.
    if (other[static_cast<int>(axis)] == Shape::unknown || result[static_cast<int>(axis)] == Shape::unknown)
      ctx.fail("cannot concatenate along the batch axis (None): the offsets of the parts would not be known");
    result[static_cast<int>(axis)] += other[static_cast<int>(axis)];
  }
  return result;
}

template <class T>
void concat_kernel(const KernelContext& k) {
  const Shape& out_shape = *k.output_shape;
  const auto axis = static_cast<int>(normalized(k.attributes().get_int("axis"), out_shape.rank()));
  const detail::AxisSplit out = detail::split_at_axis(out_shape, axis);
  const std::int64_t out_block = out.extent * out.inner;
  T* target = k.out<T>();
  std::int64_t position = 0;
  for (int i = 0; i < k.num_inputs; ++i) {
    const std::int64_t block = k.input_shape(i)[axis] * out.inner;
    const T* source = k.in<T>(i);
    for (std::int64_t o = 0; o < out.outer; ++o)
      std::copy(source + o * block, source + (o + 1) * block, target + o * out_block + position);
    position += block;
  }
}

// An input's own extent at the start of the slice; -1 ("to the end") keeps unknown dimensions unknown.
Ints full_extent(const Shape& shape) {
  Ints size = shape.dims();
  for (std::int64_t& d : size)
    if (d == Shape::unknown) d = -1;
  return size;
}

std::vector<Tensor> concat_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const auto axis = static_cast<std::size_t>(normalized(g.attributes().get_int("axis"), dy.rank()));
  std::vector<Tensor> grads;
  std::int64_t position = 0;
  for (int i = 0; i < g.num_inputs(); ++i) {
    const Shape& shape = g.input(i).shape();
    if (g.needs_grad(i)) {
      Ints begin(static_cast<std::size_t>(shape.rank()), 0);
      begin[axis] = position;
      grads.push_back(ops::slice(dy, begin, full_extent(shape)));
    } else {
      grads.emplace_back();
    }
    position += shape[static_cast<int>(axis)];
  }
  return grads;
}

// ---- flip ------------------------------------------------------------------------------------------------

Shape flip_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const std::int64_t requested = ctx.attributes().get_int("axis");
  const std::int64_t axis = normalized(requested, in.rank());
  if (axis < 0 || axis >= in.rank()) ctx.fail("axis " + std::to_string(requested) + " is out of range");
  return in;
}

// A strided copy that reads the axis from its end: the source starts at its last element with the axis's
// stride negated.
template <class T>
void flip_kernel(const KernelContext& k) {
  const Shape& in = k.input_shape(0);
  const auto axis = static_cast<std::size_t>(normalized(k.attributes().get_int("axis"), in.rank()));
  StridedCopy copy;
  copy.rank = in.rank();
  copy.dims = dims_of(in);
  copy.target_strides = detail::strides_of(in);
  copy.source_strides = copy.target_strides;
  copy.source_strides[axis] = -copy.source_strides[axis];
  const std::int64_t extent = in[static_cast<int>(axis)];
  if (extent == 0) return;
  copy.run(k.in<T>(0) + (extent - 1) * copy.target_strides[axis], k.out<T>());
}

std::vector<Tensor> flip_backward(const GradContext& g) {
  return {ops::flip(g.output_grad(), static_cast<int>(g.attributes().get_int("axis")))};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Flip")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(flip_shape)
                     .forward(flip_kernel<float>, flip_kernel<double>)
                     .backward(flip_backward));
KILN_REGISTER_OP(OpDef("kiln>Transpose")
                     .inputs(1)
                     .attributes({"perm"})
                     .infer_shape(transpose_shape)
                     .forward(transpose_kernel<float>, transpose_kernel<double>)
                     .backward(transpose_backward));
KILN_REGISTER_OP(OpDef("kiln>Concat")
                     .inputs(1, 64)
                     .attributes({"axis"})
                     .infer_shape(concat_shape)
                     .forward(concat_kernel<float>, concat_kernel<double>)
                     .backward(concat_backward));

namespace {

// ---- slice ---------------------------------------------------------------------------------------------

// One axis of a slice. An unknown axis is checked against begin and size when the plan knows it.
std::int64_t sliced_dim(const InferContext& ctx, int axis, std::int64_t dim, std::int64_t begin, std::int64_t size) {
  const std::string where = "axis " + std::to_string(axis) + ": ";
  if (begin < 0) ctx.fail(where + "begin " + std::to_string(begin) + " is negative");
  if (size < -1) ctx.fail(where + "size " + std::to_string(size) + " is negative");
  if (dim == Shape::unknown) return size;
  if (begin > dim) ctx.fail(where + "begin " + std::to_string(begin) + " is past the end");
  if (size == -1) return dim - begin;
  if (begin + size > dim)
    ctx.fail(where + "begin " + std::to_string(begin) + " + size " + std::to_string(size) + " is past the end");
  return size;
}

Shape slice_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Ints& begin = ctx.attributes().get_ints("begin");
  const Ints& size = ctx.attributes().get_ints("size");
  if (static_cast<int>(begin.size()) != in.rank() || static_cast<int>(size.size()) != in.rank())
    ctx.fail("begin " + ints_to_string(begin) + " and size " + ints_to_string(size) + " need one entry per axis");
  Ints dims(begin.size());
  for (std::size_t a = 0; a < dims.size(); ++a)
    dims[a] = sliced_dim(ctx, static_cast<int>(a), in[static_cast<int>(a)], begin[a], size[a]);
  return Shape(std::move(dims));
}

// The copy between a block of `whole` starting at `begin` and a dense array the block's size.
StridedCopy block_copy(const Shape& block, const Shape& whole, const Ints& begin, std::int64_t* whole_offset,
                       bool into_whole) {
  const Dims whole_strides = detail::strides_of(whole);
  StridedCopy copy;
  copy.rank = block.rank();
  copy.dims = dims_of(block);
  (into_whole ? copy.source_strides : copy.target_strides) = detail::strides_of(block);
  (into_whole ? copy.target_strides : copy.source_strides) = whole_strides;
  *whole_offset = 0;
  for (std::size_t a = 0; a < begin.size(); ++a) *whole_offset += begin[a] * whole_strides[a];
  return copy;
}

template <class T>
void slice_kernel(const KernelContext& k) {
  std::int64_t offset = 0;
  const StridedCopy copy =
      block_copy(*k.output_shape, k.input_shape(0), k.attributes().get_ints("begin"), &offset, false);
  copy.run(k.in<T>(0) + offset, k.out<T>());
}

// The gradient of a slice: dy in its place, zeros around it.
template <class T>
void slice_grad_kernel(const KernelContext& k) {
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  std::int64_t offset = 0;
  const StridedCopy copy =
      block_copy(k.input_shape(0), *k.output_shape, k.attributes().get_ints("begin"), &offset, true);
  copy.run(k.in<T>(0), out + offset);
}

Shape slice_grad_shape(const InferContext& ctx) {
  if (ctx.input_shape(0).rank() != ctx.input_shape(1).rank())
    ctx.fail("the gradient and the sliced input differ in rank");
  return ctx.input_shape(1);
}

std::vector<Tensor> slice_backward(const GradContext& g) {
  const Attributes attributes = Attributes().set("begin", g.attributes().get_ints("begin"));
  return {g.output_grad().graph().add_op("kiln>SliceGrad", {g.output_grad(), g.input(0)}, attributes, "slice_grad")};
}

std::vector<Tensor> slice_grad_backward(const GradContext& g) {
  return {ops::slice(g.output_grad(), g.attributes().get_ints("begin"), full_extent(g.input(0).shape())), Tensor{}};
}

// ---- pad -----------------------------------------------------------------------------------------------

// Zeros around x: `before` and `after` elements on each axis. An unknown axis stays unknown, and may not
// be padded (its size is only known per plan).
Shape pad_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Ints& before = ctx.attributes().get_ints("before");
  const Ints& after = ctx.attributes().get_ints("after");
  if (static_cast<int>(before.size()) != in.rank() || static_cast<int>(after.size()) != in.rank())
    ctx.fail("before " + ints_to_string(before) + " and after " + ints_to_string(after) + " need one entry per axis");
  Ints dims = in.dims();
  for (std::size_t a = 0; a < dims.size(); ++a) {
    if (before[a] < 0 || after[a] < 0)
      ctx.fail("axis " + std::to_string(a) + ": padding " + std::to_string(before[a]) + ", " +
               std::to_string(after[a]) + " is negative (crop with slice)");
    if (dims[a] == Shape::unknown) {
      if (before[a] != 0 || after[a] != 0) ctx.fail("axis " + std::to_string(a) + " is unknown and cannot be padded");
      continue;
    }
    dims[a] += before[a] + after[a];
  }
  return Shape(std::move(dims));
}

template <class T>
void pad_kernel(const KernelContext& k) {
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  std::int64_t offset = 0;
  const StridedCopy copy =
      block_copy(k.input_shape(0), *k.output_shape, k.attributes().get_ints("before"), &offset, true);
  copy.run(k.in<T>(0), out + offset);
}

// The gradient of padding is the padded gradient's middle.
std::vector<Tensor> pad_backward(const GradContext& g) {
  return {ops::slice(g.output_grad(), g.attributes().get_ints("before"), full_extent(g.input(0).shape()))};
}

// ---- strided slice: NumPy's basic indexing ------------------------------------------------------------

// Per input axis, Python's slice(begin, end, step) (kNoBound for a missing bound) or, where `shrink` is 1, the
// one position `begin` (negative from the end), the axis then dropped: x[:, -1, 1:8:2] on (None, T, 16) is
// begin [kNoBound, -1, 1], end [kNoBound, kNoBound, 8], strides [1, 1, 2], shrink [0, 1, 0], output (None, 4).
constexpr std::int64_t kNoBound = std::numeric_limits<std::int64_t>::min();

struct AxisRange {
  std::int64_t start = 0;   // the first position read
  std::int64_t step = 1;    // between positions read
  std::int64_t length = 0;  // positions read
};

// Python's slice.indices(n) and the length of range(start, stop, step), without overflow for any bounds.
AxisRange resolve_range(std::int64_t n, std::int64_t begin, std::int64_t end, std::int64_t step) {
  const std::int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto bound = [&](std::int64_t given, std::int64_t missing) {
    if (given == kNoBound) return missing;
    if (given < 0) return given < -n ? lower : std::max(given + n, lower);
    return std::min(given, upper);
  };
  AxisRange range;
  range.step = step;
  range.start = bound(begin, step > 0 ? lower : upper);
  const std::int64_t stop = bound(end, step > 0 ? upper : lower);
  if (step > 0)
    range.length = range.start < stop ? (stop - range.start - 1) / step + 1 : 0;
  else
    range.length = stop < range.start ? (range.start - stop - 1) / -step + 1 : 0;
  return range;
}

struct StridedSliceArgs {
  const Ints& begin;
  const Ints& end;
  const Ints& strides;
  const Ints& shrink;
};

StridedSliceArgs strided_slice_args(const Attributes& attributes) {
  return {attributes.get_ints("begin"), attributes.get_ints("end"), attributes.get_ints("strides"),
          attributes.get_ints("shrink")};
}

// Each axis's range in `in` (concrete where known); ShapeError through `fail` for a bad index.
template <class Fail>
std::vector<AxisRange> strided_ranges(const Shape& in, const StridedSliceArgs& args, const Fail& fail) {
  const auto rank = static_cast<std::size_t>(in.rank());
  if (args.begin.size() != rank || args.end.size() != rank || args.strides.size() != rank || args.shrink.size() != rank)
    fail("begin, end, strides and shrink need one entry per axis");
  std::vector<AxisRange> ranges(rank);
  for (std::size_t a = 0; a < rank; ++a) {
    const std::int64_t n = in[static_cast<int>(a)];
    const std::string where = "axis " + std::to_string(a) + ": ";
    if (args.shrink[a] != 0) {
      if (args.begin[a] == kNoBound) fail(where + "an index needs a position");
      if (n == Shape::unknown) {
        ranges[a] = {args.begin[a], 1, 1};
        continue;
      }
      const std::int64_t index = args.begin[a] < 0 && args.begin[a] >= -n ? args.begin[a] + n : args.begin[a];
      if (index < 0 || index >= n)
        fail(where + "index " + std::to_string(args.begin[a]) + " is out of range for size " + std::to_string(n));
      ranges[a] = {index, 1, 1};
      continue;
    }
    if (args.strides[a] == 0) fail(where + "the step is 0");
    if (args.strides[a] == kNoBound) fail(where + "the step is out of range");
    ranges[a] = n == Shape::unknown ? AxisRange{0, args.strides[a], Shape::unknown}
                                    : resolve_range(n, args.begin[a], args.end[a], args.strides[a]);
  }
  return ranges;
}

Shape strided_slice_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const StridedSliceArgs args = strided_slice_args(ctx.attributes());
  const std::vector<AxisRange> ranges = strided_ranges(in, args, [&](const std::string& what) { ctx.fail(what); });
  Ints dims;
  for (std::size_t a = 0; a < ranges.size(); ++a)
    if (args.shrink[a] == 0) dims.push_back(ranges[a].length);
  return Shape(std::move(dims));
}

// The copy between the positions a strided slice reads in `whole` and a dense array of the kept axes.
StridedCopy strided_copy(const Shape& whole, const Attributes& attributes, std::int64_t* whole_offset,
                         bool into_whole) {
  const StridedSliceArgs args = strided_slice_args(attributes);
  const std::vector<AxisRange> ranges =
      strided_ranges(whole, args, [](const std::string& what) { throw ShapeError("strided_slice: " + what); });
  const Dims whole_strides = detail::strides_of(whole);
  StridedCopy copy;
  *whole_offset = 0;
  Ints kept;
  for (std::size_t a = 0; a < ranges.size(); ++a) {
    *whole_offset += ranges[a].start * whole_strides[a];
    if (args.shrink[a] != 0) continue;
    const auto k = static_cast<std::size_t>(copy.rank++);
    copy.dims[k] = ranges[a].length;
    (into_whole ? copy.target_strides : copy.source_strides)[k] = whole_strides[a] * ranges[a].step;
    kept.push_back(ranges[a].length);
  }
  const Dims dense = detail::strides_of(Shape(kept));
  for (int k = 0; k < copy.rank; ++k)
    (into_whole ? copy.source_strides : copy.target_strides)[static_cast<std::size_t>(k)] =
        dense[static_cast<std::size_t>(k)];
  return copy;
}

template <class T>
void strided_slice_kernel(const KernelContext& k) {
  if (k.output_size() == 0) return;
  std::int64_t offset = 0;
  const StridedCopy copy = strided_copy(k.input_shape(0), k.attributes(), &offset, false);
  copy.run(k.in<T>(0) + offset, k.out<T>());
}

// The gradient of a strided slice: dy at the positions read, zeros elsewhere (positions are read once).
template <class T>
void strided_slice_grad_kernel(const KernelContext& k) {
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  if (k.input_shape(0).num_elements() == 0) return;
  std::int64_t offset = 0;
  const StridedCopy copy = strided_copy(*k.output_shape, k.attributes(), &offset, true);
  copy.run(k.in<T>(0), out + offset);
}

Shape strided_slice_grad_shape(const InferContext& ctx) { return ctx.input_shape(1); }

Attributes strided_slice_attributes(const Attributes& attributes) {
  return Attributes()
      .set("begin", attributes.get_ints("begin"))
      .set("end", attributes.get_ints("end"))
      .set("strides", attributes.get_ints("strides"))
      .set("shrink", attributes.get_ints("shrink"));
}

std::vector<Tensor> strided_slice_backward(const GradContext& g) {
  return {g.output_grad().graph().add_op("kiln>StridedSliceGrad", {g.output_grad(), g.input(0)},
                                         strided_slice_attributes(g.attributes()), "strided_slice_grad")};
}

std::vector<Tensor> strided_slice_grad_backward(const GradContext& g) {
  return {g.output_grad().graph().add_op("kiln>StridedSlice", {g.output_grad()},
                                         strided_slice_attributes(g.attributes()), "strided_slice"),
          Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Slice")
                     .inputs(1)
                     .attributes({"begin", "size"})
                     .infer_shape(slice_shape)
                     .forward(slice_kernel<float>, slice_kernel<double>)
                     .backward(slice_backward));
KILN_REGISTER_OP(OpDef("kiln>Pad")
                     .inputs(1)
                     .attributes({"before", "after"})
                     .infer_shape(pad_shape)
                     .forward(pad_kernel<float>, pad_kernel<double>)
                     .backward(pad_backward));
KILN_REGISTER_OP(OpDef("kiln>StridedSlice")
                     .inputs(1)
                     .attributes({"begin", "end", "strides", "shrink"})
                     .infer_shape(strided_slice_shape)
                     .forward(strided_slice_kernel<float>, strided_slice_kernel<double>)
                     .backward(strided_slice_backward));
KILN_REGISTER_OP(OpDef("kiln>StridedSliceGrad")
                     .inputs(2)
                     .attributes({"begin", "end", "strides", "shrink"})
                     .infer_shape(strided_slice_grad_shape)
                     .forward(strided_slice_grad_kernel<float>, strided_slice_grad_kernel<double>)
                     .backward(strided_slice_grad_backward)
                     .non_differentiable_inputs({1}, "only its shape is read"));
KILN_REGISTER_OP(OpDef("kiln>SliceGrad")
                     .inputs(2)
                     .attributes({"begin"})
                     .infer_shape(slice_grad_shape)
                     .forward(slice_grad_kernel<float>, slice_grad_kernel<double>)
                     .backward(slice_grad_backward)
                     .non_differentiable_inputs({1}, "only its shape is read"));

namespace {

// ---- broadcast_to --------------------------------------------------------------------------------------

// A target dimension of -1 keeps x's dimension (as torch's expand does): that is how the unknown batch
// size passes through, since a plan-time shape rule has no batch size to put in its place.
Shape broadcast_to_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Ints& target = ctx.attributes().get_ints("shape");
  const std::string what = "cannot broadcast to " + ints_to_string(target);
  const int shift = static_cast<int>(target.size()) - in.rank();
  if (shift < 0) ctx.fail(what + ": the target has fewer axes");
  Ints dims = target;
  for (int a = 0; a < static_cast<int>(dims.size()); ++a) {
    std::int64_t& d = dims[static_cast<std::size_t>(a)];
    const int in_axis = a - shift;
    if (d < -1) ctx.fail(what + ": negative dimension " + std::to_string(d));
    if (d == -1 && in_axis < 0) ctx.fail(what + ": -1 (keep) on axis " + std::to_string(a) + ", which x lacks");
    if (in_axis < 0) continue;
    if (d == -1)
      d = in[in_axis];
    else if (in[in_axis] != d && in[in_axis] != 1)
      ctx.fail(what + ": axis " + std::to_string(a) + " is neither 1 nor " + std::to_string(d));
  }
  return Shape(std::move(dims));
}

template <class T>
void broadcast_to_kernel(const KernelContext& k) {
  const T* in = k.in<T>(0);
  T* out = k.out<T>();
  detail::BroadcastWalk(*k.output_shape, k.input_shapes, 1)
      .for_each([&](std::int64_t i, std::int64_t offset, std::int64_t, std::int64_t) { out[i] = in[offset]; });
}

std::vector<Tensor> broadcast_to_backward(const GradContext& g) {
  return {ops::sum_to(g.output_grad(), g.input(0).shape())};
}

// ---- squeeze, expand_dims -----------------------------------------------------------------------------

// The axes are explicit here: the builder resolves "every size-1 axis" once, at build time, so that a
// batch of size 1 at plan time cannot squeeze the batch axis away.
Shape squeeze_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Ints& axes = ctx.attributes().get_ints("axes");
  std::vector<bool> dropped(static_cast<std::size_t>(in.rank()), false);
  for (std::int64_t requested : axes) {
    const std::int64_t axis = normalized(requested, in.rank());
    const std::string what = "cannot squeeze axis " + std::to_string(requested);
    if (axis < 0 || axis >= in.rank()) ctx.fail(what + ": out of range");
    if (in[static_cast<int>(axis)] == Shape::unknown) ctx.fail(what + ": it is the batch axis (None)");
    if (in[static_cast<int>(axis)] != 1) ctx.fail(what + ": its size is not 1");
    dropped[static_cast<std::size_t>(axis)] = true;
  }
  Ints dims;
  for (int a = 0; a < in.rank(); ++a)
    if (!dropped[static_cast<std::size_t>(a)]) dims.push_back(in[a]);
  return Shape(std::move(dims));
}

Shape expand_dims_shape(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const std::int64_t requested = ctx.attributes().get_int("axis");
  const std::int64_t axis = normalized(requested, in.rank() + 1);
  if (axis < 0 || axis > in.rank()) ctx.fail("axis " + std::to_string(requested) + " is out of range");
  Ints dims = in.dims();
  dims.insert(dims.begin() + axis, 1);
  return Shape(std::move(dims));
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>BroadcastTo")
                     .inputs(1)
                     .attributes({"shape"})
                     .infer_shape(broadcast_to_shape)
                     .forward(broadcast_to_kernel<float>, broadcast_to_kernel<double>)
                     .backward(broadcast_to_backward));
KILN_REGISTER_OP(OpDef("kiln>Squeeze")
                     .inputs(1)
                     .attributes({"axes"})
                     .infer_shape(squeeze_shape)
                     .forward(copy_kernel<float>, copy_kernel<double>)
                     .backward(reshape_backward)
                     .sharing(Sharing::alias));
KILN_REGISTER_OP(OpDef("kiln>ExpandDims")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(expand_dims_shape)
                     .forward(copy_kernel<float>, copy_kernel<double>)
                     .backward(reshape_backward)
                     .sharing(Sharing::alias));

namespace ops {

Tensor reshape_like(const Tensor& x, const Tensor& like) { return reshape_as(x, like); }

Tensor reshape_like(const Tensor& x, const Tensor& like, int leading_axes, const std::vector<std::int64_t>& trailing) {
  const Attributes attributes = Attributes().set("leading", leading_axes).set("trailing", trailing);
  return x.graph().add_op("kiln>ReshapeLike", {x, like}, attributes, "reshape_like");
}

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
  return detail::add_or_record_op("kiln>Reshape", {x}, Attributes().set("shape", shape), "reshape");
}

Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& perm) {
  Ints resolved = perm;
  if (resolved.empty())
    for (int axis = x.rank() - 1; axis >= 0; --axis) resolved.push_back(axis);
  return detail::add_or_record_op("kiln>Transpose", {x}, Attributes().set("perm", resolved), "transpose");
}

Tensor flip(const Tensor& x, int axis) {
  return detail::add_or_record_op("kiln>Flip", {x}, Attributes().set("axis", static_cast<std::int64_t>(axis)), "flip");
}

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  if (xs.empty()) throw ValueError("concat: no tensors to concatenate");
  return detail::add_or_record_op("kiln>Concat", xs, Attributes().set("axis", axis), "concat");
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis) {
  const Shape& shape = x.shape();
  const int a = shape.normalize_axis(axis, "split '" + x.name() + "'");
  const std::int64_t extent = shape[a];
  if (extent == Shape::unknown)
    throw ShapeError("split '" + x.name() + "'", "cannot split the batch axis (None)", {{"x", shape}});
  std::int64_t total = 0;
  for (std::int64_t size : sizes) {
    if (size < 0)
      throw ShapeError("split '" + x.name() + "'", "negative size in " + ints_to_string(sizes), {{"x", shape}});
    total += size;
  }
  if (total != extent)
    throw ShapeError("split '" + x.name() + "'",
                     "sizes " + ints_to_string(sizes) + " sum to " + std::to_string(total) + ", but axis " +
                         std::to_string(axis) + " has " + std::to_string(extent),
                     {{"x", shape}});
  std::vector<Tensor> parts;
  Ints begin(static_cast<std::size_t>(shape.rank()), 0);
  Ints size = full_extent(shape);
  for (std::int64_t part : sizes) {
    size[static_cast<std::size_t>(a)] = part;
    parts.push_back(slice(x, begin, size));
    begin[static_cast<std::size_t>(a)] += part;
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int num_splits, int axis) {
  const Shape& shape = x.shape();
  const std::int64_t extent = shape[shape.normalize_axis(axis, "split '" + x.name() + "'")];
  if (num_splits <= 0 || extent == Shape::unknown || extent % num_splits != 0)
    throw ShapeError(
        "split '" + x.name() + "'",
        "axis " + std::to_string(axis) + " cannot be split into " + std::to_string(num_splits) + " equal parts",
        {{"x", shape}});
  return split(x, Ints(static_cast<std::size_t>(num_splits), extent / num_splits), axis);
}

Tensor pad(const Tensor& x, const std::vector<std::int64_t>& before, const std::vector<std::int64_t>& after) {
  return detail::add_or_record_op("kiln>Pad", {x}, Attributes().set("before", before).set("after", after), "pad");
}

Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& size) {
  const Attributes attributes = Attributes().set("begin", begin).set("size", size);
  if (detail::records_op({x}))
    if (Tensor recorded = detail::record_op("kiln>Slice", {x}, attributes)) return recorded;
  return x.graph().add_op("kiln>Slice", {x}, attributes, "slice");
}

Index Index::new_axis() {
  Index index(0);
  index.kind_ = Kind::new_axis;
  return index;
}

Index Index::ellipsis() {
  Index index(0);
  index.kind_ = Kind::ellipsis;
  return index;
}

namespace {
std::int64_t bound_of(const std::optional<std::int64_t>& value) { return value ? *value : kNoBound; }
}  // namespace

Attributes index_attributes(const std::vector<Index>& index) {
  Ints kinds, starts, stops, steps;
  for (const Index& entry : index) {
    kinds.push_back(static_cast<std::int64_t>(entry.kind()));
    starts.push_back(entry.kind() == Index::Kind::integer ? entry.position() : bound_of(entry.slice().start));
    stops.push_back(bound_of(entry.slice().stop));
    steps.push_back(bound_of(entry.slice().step));
  }
  return Attributes().set("kinds", kinds).set("starts", starts).set("stops", stops).set("steps", steps);
}

std::vector<Index> index_from_attributes(const Attributes& attributes) {
  const Ints& kinds = attributes.get_ints("kinds");
  const Ints& starts = attributes.get_ints("starts");
  const Ints& stops = attributes.get_ints("stops");
  const Ints& steps = attributes.get_ints("steps");
  if (starts.size() != kinds.size() || stops.size() != kinds.size() || steps.size() != kinds.size())
    throw ValueError("get_item: kinds, starts, stops and steps differ in length");
  auto optional = [](std::int64_t value) { return value == kNoBound ? std::nullopt : std::optional(value); };
  std::vector<Index> index;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    switch (kinds[i]) {
      case static_cast<std::int64_t>(Index::Kind::integer):
        index.emplace_back(starts[i]);
        break;
      case static_cast<std::int64_t>(Index::Kind::slice):
        index.emplace_back(Slice{optional(starts[i]), optional(stops[i]), optional(steps[i])});
        break;
      case static_cast<std::int64_t>(Index::Kind::new_axis):
        index.push_back(Index::new_axis());
        break;
      case static_cast<std::int64_t>(Index::Kind::ellipsis):
        index.push_back(Index::ellipsis());
        break;
      default:
        throw ValueError("get_item: unknown index kind " + std::to_string(kinds[i]));
    }
  }
  return index;
}

Tensor get_item(const Tensor& x, const std::vector<Index>& index) {
  if (detail::records_op({x}))
    if (Tensor recorded = detail::record_op("get_item", {x}, index_attributes(index))) return recorded;
  const std::string who = "get_item '" + x.name() + "'";
  std::vector<Index> entries = index;
  const auto ellipses =
      std::count_if(entries.begin(), entries.end(), [](const Index& e) { return e.kind() == Index::Kind::ellipsis; });
  if (ellipses > 1)
    throw ShapeError(who, "an index may hold one ellipsis, this one holds " + std::to_string(ellipses),
                     {{"x", x.shape()}});
  if (ellipses == 0) entries.push_back(Index::ellipsis());
  const auto consuming = std::count_if(entries.begin(), entries.end(), [](const Index& e) {
    return e.kind() == Index::Kind::integer || e.kind() == Index::Kind::slice;
  });
  if (consuming > x.rank())
    throw ShapeError(who,
                     "too many indices: " + std::to_string(consuming) + " for " + std::to_string(x.rank()) + " axes",
                     {{"x", x.shape()}});
  Ints begin, end, strides, shrink, new_axes;  // new_axes: positions in the output
  std::int64_t output_axis = 0;
  bool identity = true;
  auto keep_axes = [&](std::int64_t count) {
    for (std::int64_t a = 0; a < count; ++a) {
      begin.push_back(kNoBound);
      end.push_back(kNoBound);
      strides.push_back(1);
      shrink.push_back(0);
      ++output_axis;
    }
  };
  for (const Index& entry : entries) {
    switch (entry.kind()) {
      case Index::Kind::ellipsis:
        keep_axes(x.rank() - consuming);
        break;
      case Index::Kind::new_axis:
        new_axes.push_back(output_axis++);
        break;
      case Index::Kind::integer:
        begin.push_back(entry.position());
        end.push_back(kNoBound);
        strides.push_back(1);
        shrink.push_back(1);
        identity = false;
        break;
      case Index::Kind::slice: {
        const Slice& range = entry.slice();
        const std::int64_t step = range.step ? *range.step : 1;
        if (step == 0) throw ShapeError(who, "a slice's step is 0", {{"x", x.shape()}});
        begin.push_back(bound_of(range.start));
        end.push_back(bound_of(range.stop));
        strides.push_back(step);
        shrink.push_back(0);
        identity = identity && !range.start && !range.stop && step == 1;
        ++output_axis;
        break;
      }
    }
  }
  Tensor y = x;
  if (!identity)
    y = x.graph().add_op("kiln>StridedSlice", {x},
                         Attributes().set("begin", begin).set("end", end).set("strides", strides).set("shrink", shrink),
                         "get_item");
  for (const std::int64_t axis : new_axes) y = expand_dims(y, static_cast<int>(axis));
  return y;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  return detail::add_or_record_op("kiln>BroadcastTo", {x}, Attributes().set("shape", shape.dims()), "broadcast_to");
}

Tensor squeeze(const Tensor& x, const Axes& axes) {
  Ints resolved = axes;
  if (resolved.empty())
    for (int axis = 0; axis < x.rank(); ++axis)
      if (x.shape()[axis] == 1) resolved.push_back(axis);
  return detail::add_or_record_op("kiln>Squeeze", {x}, Attributes().set("axes", resolved), "squeeze");
}

Tensor expand_dims(const Tensor& x, int axis) {
  return detail::add_or_record_op("kiln>ExpandDims", {x}, Attributes().set("axis", axis), "expand_dims");
}

}  // namespace ops
}  // namespace kiln
