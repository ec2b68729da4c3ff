// The random ops of regularization, all counter-based: element i's draw in a program's run s depends only
// on (seed, s, i), so backward regenerates a mask instead of storing it, and a rerun with the same seed
// reproduces every draw exactly.
//   Dropout       inverted dropout of x (its own gradient: the op is linear in x)
//   DropoutMask   the mask alone (0 or 1/(1 − rate)) of x's shape with some axes of size 1, for Keras's
//                 noise_shape and SpatialDropout: one draw shared along those axes; y = x · mask
//   RandomNormal  standard normal draws of x's shape (Box–Muller), for GaussianNoise and GaussianDropout
// DropoutMask and RandomNormal read only x's shape, so no gradient flows into x through them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>


#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/detail/random_kernels.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {


std::uint64_t stream_of(const KernelContext& k) {
  return mix64(static_cast<std::uint64_t>(k.attributes().get_int("seed")) ^ mix64(k.run));
}

// The whole batch's index of this run's element 0 (KernelContext::batch_offset): a distributed fit's shard
// draws what its rows would draw in one process's run of the whole batch. The batch is the outermost axis,
// alone or merged with the axes after it ((batch·heads, ...)), so rows are runs of size / batch_rows
// elements; a tensor without the batch in axis 0 (a mask shared along it) draws from 0.
std::uint64_t first_draw(const KernelContext& k) {
  const Shape& shape = *k.output_shape;
  if (k.batch_offset == 0 || k.batch_rows <= 0 || shape.rank() == 0 || shape[0] % k.batch_rows != 0) return 0;
  return static_cast<std::uint64_t>(k.batch_offset) * (k.output_size() / static_cast<std::uint64_t>(k.batch_rows));
}

// Each element's draw depends on its index only, so the ranges of parallel_for give the serial result.
template <class Body>
void for_ranges(std::size_t n, std::int64_t cost, const Body& body) {
  const auto count = static_cast<std::int64_t>(n);
  detail::parallel_for(count, detail::workers_for_elements(count, cost),
                       [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}

// y = x * mask / (1 - rate). The op is linear in x, so the same kernel is its own gradient.
// The draws' loop is detail::random_kernels(): built for each x86-64 level and chosen at run time (isa.hpp).
template <class T>
void dropout_kernel(const KernelContext& k) {
  const double rate = k.attributes().get_double("rate");
  const std::uint64_t stream = stream_of(k), first = first_draw(k);
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* x = k.in<T>(0);
  T* out = k.out<T>();
  const auto fill = detail::random_kernels().dropout<T>().fill;
  for_ranges(k.output_size(), 4,
             [&](std::int64_t begin, std::int64_t end) { fill(x, out, begin, end, stream, first, rate, scale); });
}

template <class T>
void dropout_mask_kernel(const KernelContext& k) {
  const double rate = k.attributes().get_double("rate");
  const std::uint64_t stream = stream_of(k);
  // A mask shared along the batch (axis 0 broadcast) is one draw for every row, of every shard too.
  const std::vector<std::int64_t> shared = k.attributes().get_ints("broadcast_axes");
  const std::uint64_t first = std::find(shared.begin(), shared.end(), 0) != shared.end() ? 0 : first_draw(k);
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  T* out = k.out<T>();
  const auto fill = detail::random_kernels().dropout<T>().fill;
  for_ranges(k.output_size(), 4,
             [&](std::int64_t begin, std::int64_t end) { fill(nullptr, out, begin, end, stream, first, rate, scale); });
}

// Box–Muller on draws 2j and 2j + 1 (u in (0, 1], so the log is finite, and v): elements 2j and 2j + 1 are
// r·cos(2πv) and r·sin(2πv) with r = sqrt(−2 ln u), two independent standard normals from one pair. The
// logs, roots, cosines and sines run through xsimd on blocks of pairs (detail::random_kernels, dispatched by
// instruction set), in double for both dtypes, so the float32 draws are the float64 ones rounded. Pairs are
// counted in the whole batch (first_draw), so a shard that starts at an odd element takes the sine half of its
// first pair.
template <class T>
void random_normal_kernel(const KernelContext& k) {
  const std::uint64_t stream = stream_of(k);
  T* out = k.out<T>();
  const auto n = static_cast<std::int64_t>(k.output_size());
  const auto first = static_cast<std::int64_t>(first_draw(k));
  const std::int64_t first_pair = first / 2, pairs = (first + n + 1) / 2 - first_pair;
  const auto normal_pairs = detail::random_kernels().normal_pairs;
  detail::parallel_for(pairs, detail::workers_for_elements(n, 8), [&](std::int64_t begin, std::int64_t end, int) {
    std::array<double, detail::kNormalBlock> cosine, sine;
    for (std::int64_t start = begin; start < end; start += detail::kNormalBlock) {
      const auto count = static_cast<std::size_t>(std::min(detail::kNormalBlock, end - start));
      normal_pairs(stream, static_cast<std::uint64_t>(first_pair + start), static_cast<std::int64_t>(count),
                   cosine.data(), sine.data());
      for (std::size_t j = 0; j < count; ++j) {
        // This run's elements of the pair: 2·pair and 2·pair + 1 of the whole batch, less `first`.
        const std::int64_t i = 2 * (first_pair + start + static_cast<std::int64_t>(j)) - first;
        if (i >= 0) out[i] = static_cast<T>(cosine[j]);
        if (i + 1 < n) out[i + 1] = static_cast<T>(sine[j]);
      }
    }
  });
}

// x's shape with each of "broadcast_axes" of size 1.
Shape dropout_mask_shape(const InferContext& ctx) {
  std::vector<std::int64_t> dims = ctx.input_shape(0).dims();
  for (const std::int64_t axis : ctx.attributes().get_ints("broadcast_axes")) {
    if (axis < 0 || axis >= static_cast<std::int64_t>(dims.size()))
      ctx.fail("broadcast axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(dims.size()));
    dims[static_cast<std::size_t>(axis)] = 1;
  }
  return Shape(std::move(dims));
}

Tensor dropout_grad(const Tensor& dy, const Attributes& attributes) {
  const Attributes copied =
      Attributes().set("rate", attributes.get_double("rate")).set("seed", attributes.get_int("seed"));
  return dy.graph().add_op("kiln>DropoutGrad", {dy}, copied, "dropout_grad");
}

std::vector<Tensor> dropout_backward(const GradContext& g) { return {dropout_grad(g.output_grad(), g.attributes())}; }

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Dropout")
                     .inputs(1)
                     .attributes({"rate", "seed"})
                     .infer_shape(detail::first_input_shape)
                     .forward(dropout_kernel<float>, dropout_kernel<double>)
                     .backward(dropout_backward)
                     .sharing(Sharing::inplace));
// Its own op, not a second Dropout, so that graphs and messages show which node is the gradient.
KILN_REGISTER_OP(OpDef("kiln>DropoutGrad")
                     .inputs(1)
                     .attributes({"rate", "seed"})
                     .infer_shape(detail::first_input_shape)
                     .forward(dropout_kernel<float>, dropout_kernel<double>)
                     .backward(dropout_backward)
                     .sharing(Sharing::inplace));

KILN_REGISTER_OP(OpDef("kiln>DropoutMask")
                     .inputs(1)
                     .attributes({"rate", "seed", "broadcast_axes"})
                     .infer_shape(dropout_mask_shape)
                     .forward(dropout_mask_kernel<float>, dropout_mask_kernel<double>)
                     .non_differentiable_inputs({0}, "the mask depends on x's shape only"));
KILN_REGISTER_OP(OpDef("kiln>RandomNormal")
                     .inputs(1)
                     .attributes({"seed"})
                     .infer_shape(detail::first_input_shape)
                     .forward(random_normal_kernel<float>, random_normal_kernel<double>)
                     .non_differentiable_inputs({0}, "the draws depend on x's shape only"));

namespace ops {

Tensor dropout(const Tensor& x, double rate, std::uint64_t seed, bool training) {
  if (!(rate >= 0.0 && rate < 1.0))
    throw ConfigError("dropout on " + x.node().describe() + ": rate must be in [0, 1), got " + std::to_string(rate));
  if (!training || rate == 0.0) return x;
  const Attributes attributes = Attributes().set("rate", rate).set("seed", static_cast<std::int64_t>(seed));
  return x.graph().add_op("kiln>Dropout", {x}, attributes, "dropout");
}

Tensor dropout_mask(const Tensor& x, double rate, std::uint64_t seed, const std::vector<int>& broadcast_axes) {
  if (!(rate >= 0.0 && rate < 1.0))
    throw ConfigError("dropout_mask on " + x.node().describe() + ": rate must be in [0, 1), got " +
                      std::to_string(rate));
  std::vector<std::int64_t> axes;
  for (const int axis : broadcast_axes) axes.push_back(axis < 0 ? axis + x.rank() : axis);
  const Attributes attributes =
      Attributes().set("rate", rate).set("seed", static_cast<std::int64_t>(seed)).set("broadcast_axes", axes);
  return x.graph().add_op("kiln>DropoutMask", {x}, attributes, "dropout_mask");
}

Tensor random_normal_like(const Tensor& x, std::uint64_t seed) {
  return x.graph().add_op("kiln>RandomNormal", {x}, Attributes().set("seed", static_cast<std::int64_t>(seed)),
                          "random_normal");
}

}  // namespace ops
}  // namespace kiln
