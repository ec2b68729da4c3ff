// Max and average pooling, 1-D and 2-D, with Keras's windows (ops/detail/window): pool_size, strides,
// "valid" or "same" padding, either data format.
//   MaxPool      x -> y: the largest value of each window (NaN if the window holds one, as kiln's max)
//   MaxPoolGrad  (x, dy) -> dx: each window's gradient goes to its maximum (the first, on ties)
//   AvgPool      x -> y: the mean of each window over the positions inside the input: padding does not
//                count, as in Keras (TensorFlow's and JAX's "SAME" average)
//   AvgPoolGrad  dy -> dx: the transpose of AvgPool, which is linear; so each is the other's gradient
// Kernels walk one output row (sample, output row) per task, channels innermost for channels_last data.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/detail/window.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// ---- geometry -------------------------------------------------------------------------------------------

struct PoolGeometry {
  detail::ImageLayout input, output;
  detail::WindowAxis rows, cols;
};

// From the input's layout; it runs at every launch, so it builds nothing on the heap.
PoolGeometry pool_geometry(const detail::ImageLayout& input, const Attributes& a) {
  const detail::WindowAttributes window = detail::window_attributes(a);
  const detail::SpatialInts pool(a.get_ints("pool_size"));
  PoolGeometry g;
  g.input = input;
  if (pool.rank == 2)
    g.rows = detail::window_axis(input.height, pool.height(), window.strides.height(), 1, window.padding);
  g.cols = detail::window_axis(input.width, pool.width(), window.strides.width(), 1, window.padding);
  g.output = detail::image_layout(input.batch, input.channels, g.rows.out, g.cols.out, window.channels_last);
  return g;
}
PoolGeometry pool_geometry(const Shape& x, const Attributes& a) {
  return pool_geometry(detail::image_layout(x, a.get_string("data_format") != "channels_first"), a);
}

using detail::input_taps;
using detail::TapRange;

// Runs body(n, oh, ow, rows, cols) for each output position of output row oh of sample n, with the taps of its
// window that read the input along each axis.
template <class Body>
void row_windows(const PoolGeometry& g, std::int64_t n, std::int64_t oh, const Body& body) {
  const TapRange rows = input_taps(g.rows, oh);
  for (std::int64_t ow = 0; ow < g.output.width; ++ow) body(n, oh, ow, rows, input_taps(g.cols, ow));
}

// The same for every output position of samples [begin, end), in order.
template <class Body>
void sample_windows(const PoolGeometry& g, std::int64_t begin, std::int64_t end, const Body& body) {
  for (std::int64_t n = begin; n < end; ++n)
    for (std::int64_t oh = 0; oh < g.output.height; ++oh) row_windows(g, n, oh, body);
}

// Runs body(n, oh, ow, rows, cols) for every output position, output rows spread over kiln's threads.
template <class Body>
void for_each_window(const PoolGeometry& g, const Body& body) {
  const std::int64_t tasks = g.output.batch * g.output.height;
  // The taps that read the input: at most min(size, input length) per axis.
  const std::int64_t per_task =
      g.output.width * g.output.channels * std::min(g.rows.size, g.rows.in) * std::min(g.cols.size, g.cols.in);
  detail::parallel_for(tasks, detail::workers_for_elements(tasks * per_task),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t task = begin; task < end; ++task)
                           row_windows(g, task / g.output.height, task % g.output.height, body);
                       });
}

std::int64_t input_offset(const PoolGeometry& g, std::int64_t n, std::int64_t ih, std::int64_t iw) {
  return n * g.input.batch_stride + ih * g.input.row_stride + iw * g.input.column_stride;
}
std::int64_t output_offset(const PoolGeometry& g, std::int64_t n, std::int64_t oh, std::int64_t ow) {
  return n * g.output.batch_stride + oh * g.output.row_stride + ow * g.output.column_stride;
}

// ---- kernels --------------------------------------------------------------------------------------------

template <class T>
void max_pool_kernel(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  T* y = k.out<T>();
  const std::int64_t cs = g.input.channel_stride, ocs = g.output.channel_stride;
  if (cs == 1 && ocs == 1) {  // channels_last: a window's first tap, then the others, over contiguous channels
    const std::int64_t C = g.input.channels;
    for_each_window(g, [&](std::int64_t n, std::int64_t oh, std::int64_t ow, TapRange rows, TapRange cols) {
      using B = xsimd::batch<T>;
      constexpr std::int64_t S = B::size;
      T* out = y + output_offset(g, n, oh, ow);
      std::int64_t c = 0;
      for (; c + S <= C; c += S) {
        B best(-std::numeric_limits<T>::infinity());
        for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
          for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
            const B v = B::load_unaligned(x + input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw)) + c);
            best = xsimd::select((best >= v) | xsimd::isnan(best), best, v);  // propagating_max
          }
        best.store_unaligned(out + c);
      }
      for (; c < C; ++c) {
        T best = -std::numeric_limits<T>::infinity();
        for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
          for (std::int64_t kw = cols.first; kw < cols.last; ++kw)
            best = detail::propagating_max(
                best, x[input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw)) + c]);
        out[c] = best;
      }
    });
    return;
  }
  for_each_window(g, [&](std::int64_t n, std::int64_t oh, std::int64_t ow, TapRange rows, TapRange cols) {
    T* out = y + output_offset(g, n, oh, ow);
    for (std::int64_t c = 0; c < g.input.channels; ++c) out[c * ocs] = -std::numeric_limits<T>::infinity();
    for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
      for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
        const T* in = x + input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw));
        for (std::int64_t c = 0; c < g.input.channels; ++c)
          out[c * ocs] = detail::propagating_max(out[c * ocs], in[c * cs]);
      }
  });
}

// dx[argmax of each window] += dy. Windows overlap when strides < pool_size, so a sample's windows add
// into the same dx: each task is one whole sample here, never split. Channels go in blocks, each tap
// updating a block's running maxima, so channels_last data is read contiguously.
template <class T>
void max_pool_grad_kernel(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dx = k.out<T>();
  const std::int64_t cs = g.input.channel_stride, ocs = g.output.channel_stride;
  const std::int64_t per_sample = g.output.positions() * g.input.channels * g.rows.size * g.cols.size;
  if (cs == 1 && ocs == 1) {
    // channels_last, a vector of channels at a time: the tap each lane's maximum came from (the same rule as below,
    // kept as the tap's number in the lane), then each tap's pixel takes dy where its number was chosen.
    using B = xsimd::batch<T>;
    constexpr std::int64_t S = B::size;
    const std::int64_t C = g.input.channels, vector_end = C / S * S;
    // Windows that share no input pixel write their taps' dx instead of adding to it; windows that also cover the
    // image, edge to edge (no padding, no pixel left over), leave no pixel to zero first.
    const auto tiled = [](const detail::WindowAxis& a) {
      return a.stride == a.size && a.pad_before == 0 && a.out * a.size == a.in;
    };
    const bool disjoint = g.rows.stride >= g.rows.size && g.cols.stride >= g.cols.size;
    const bool tiles = tiled(g.rows) && tiled(g.cols);
    detail::parallel_for(
        g.input.batch, detail::workers_for_elements(g.input.batch * per_sample), [&](std::int64_t begin, std::int64_t end, int) {
          // Each worker zeroes its own samples' dx (then in its cache for the additions), unless the windows tile
          // the image, each input pixel in exactly one: then every pixel is written once, below, and never read.
          if (!tiles) std::fill(dx + begin * g.input.batch_stride, dx + end * g.input.batch_stride, T(0));
          sample_windows(g, begin, end, [&](std::int64_t n, std::int64_t oh, std::int64_t ow, TapRange rows, TapRange cols) {
            const T* grad = dy + output_offset(g, n, oh, ow);
            const auto tap_offset = [&](std::int64_t kh, std::int64_t kw) {
              return input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw));
            };
            if (rows.first >= rows.last || cols.first >= cols.last) return;
            for (std::int64_t c = 0; c < vector_end; c += S) {
              B best = B::load_unaligned(x + tap_offset(rows.first, cols.first) + c), chosen(T(0));
              T tap = 0;
              for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                for (std::int64_t kw = cols.first; kw < cols.last; ++kw, ++tap) {
                  const B value = B::load_unaligned(x + tap_offset(kh, kw) + c);
                  // The first maximum, or the first NaN: the element the forward max returned.
                  const auto take = ((value > best) | xsimd::isnan(value)) & !xsimd::isnan(best);
                  best = xsimd::select(take, value, best);
                  chosen = xsimd::select(take, B(tap), chosen);
                }
              const B g_vec = B::load_unaligned(grad + c);
              tap = 0;
              for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                for (std::int64_t kw = cols.first; kw < cols.last; ++kw, ++tap) {
                  T* target = dx + tap_offset(kh, kw) + c;
                  const B share = xsimd::select(chosen == B(tap), g_vec, B(T(0)));
                  (disjoint ? share : B::load_unaligned(target) + share).store_unaligned(target);
                }
            }
            for (std::int64_t c = vector_end; c < C; ++c) {  // the channels after the last whole vector
              T best = x[tap_offset(rows.first, cols.first) + c];
              std::int64_t where = tap_offset(rows.first, cols.first) + c;
              for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
                  const T value = x[tap_offset(kh, kw) + c];
                  if (best == best && (value > best || value != value)) {
                    best = value;
                    where = tap_offset(kh, kw) + c;
                  }
                }
              if (disjoint)
                for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                  for (std::int64_t kw = cols.first; kw < cols.last; ++kw) dx[tap_offset(kh, kw) + c] = T(0);
              dx[where] += grad[c];
            }
          });
        });
    return;
  }
  constexpr std::int64_t block = 64;
  detail::parallel_for(g.input.batch, detail::workers_for_elements(g.input.batch * per_sample),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         T best[block];
                         std::int64_t where[block];
                         std::fill(dx + begin * g.input.batch_stride, dx + end * g.input.batch_stride, T(0));
                         sample_windows(g, begin, end, [&](std::int64_t n, std::int64_t oh, std::int64_t ow,
                                                           TapRange rows, TapRange cols) {
                           const T* grad = dy + output_offset(g, n, oh, ow);
                           for (std::int64_t c0 = 0; c0 < g.input.channels; c0 += block) {
                             const std::int64_t width = std::min(block, g.input.channels - c0);
                             bool first = true;
                             for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                               for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
                                 const std::int64_t at =
                                     input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw)) + c0 * cs;
                                 const T* in = x + at;
                                 for (std::int64_t c = 0; c < width; ++c) {
                                   const T value = in[c * cs];
                                   // The first maximum, or the first NaN: the element the forward max returned.
                                   if (first || (best[c] == best[c] && (value > best[c] || value != value))) {
                                     best[c] = value;
                                     where[c] = at + c * cs;
                                   }
                                 }
                                 first = false;
                               }
                             if (first) continue;  // no tap inside the input (cannot happen with valid or same padding)
                             for (std::int64_t c = 0; c < width; ++c) dx[where[c]] += grad[(c0 + c) * ocs];
                           }
                         });
                       });
}

template <class T>
void avg_pool_kernel(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  T* y = k.out<T>();
  const std::int64_t cs = g.input.channel_stride, ocs = g.output.channel_stride;
  for_each_window(g, [&](std::int64_t n, std::int64_t oh, std::int64_t ow, TapRange rows, TapRange cols) {
    T* out = y + output_offset(g, n, oh, ow);
    for (std::int64_t c = 0; c < g.input.channels; ++c) out[c * ocs] = T(0);
    for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
      for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
        const T* in = x + input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw));
        for (std::int64_t c = 0; c < g.input.channels; ++c) out[c * ocs] += in[c * cs];
      }
    const T inverse = T(1) / static_cast<T>((rows.last - rows.first) * (cols.last - cols.first));
    for (std::int64_t c = 0; c < g.input.channels; ++c) out[c * ocs] *= inverse;
  });
}

// dx = AvgPoolᵀ dy; per sample, as max_pool_grad, because windows may overlap.
template <class T>
void avg_pool_grad_kernel(const KernelContext& k) {
  const Shape& dy_shape = k.input_shape(0);
  const bool channels_last = k.attributes().get_string("data_format") != "channels_first";
  const detail::ImageLayout x =
      detail::image_layout(dy_shape[0], detail::image_layout(dy_shape, channels_last).channels,
                           detail::SpatialInts(k.attributes().get_ints("input_spatial")), channels_last);
  const PoolGeometry g = pool_geometry(x, k.attributes());
  const T* dy = k.in<T>(0);
  T* dx = k.out<T>();
  std::fill(dx, dx + g.input.batch * g.input.batch_stride, T(0));
  const std::int64_t cs = g.input.channel_stride, ocs = g.output.channel_stride;
  const std::int64_t per_sample = g.output.positions() * g.input.channels * g.rows.size * g.cols.size;
  detail::parallel_for(g.input.batch, detail::workers_for_elements(g.input.batch * per_sample),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t n = begin; n < end; ++n)
                           for (std::int64_t oh = 0; oh < g.output.height; ++oh) {
                             const TapRange rows = input_taps(g.rows, oh);
                             for (std::int64_t ow = 0; ow < g.output.width; ++ow) {
                               const TapRange cols = input_taps(g.cols, ow);
                               const T* grad = dy + output_offset(g, n, oh, ow);
                               const T inverse =
                                   T(1) / static_cast<T>((rows.last - rows.first) * (cols.last - cols.first));
                               for (std::int64_t kh = rows.first; kh < rows.last; ++kh)
                                 for (std::int64_t kw = cols.first; kw < cols.last; ++kw) {
                                   T* in = dx + input_offset(g, n, g.rows.input_at(oh, kh), g.cols.input_at(ow, kw));
                                   for (std::int64_t c = 0; c < g.input.channels; ++c)
                                     in[c * cs] += grad[c * ocs] * inverse;
                                 }
                             }
                           }
                       });
}

// ---- shape rules ----------------------------------------------------------------------------------------

using detail::ints_text;

// The pooled shape of `x`, checking the rank, the options and that every window fits.
Shape pooled_shape(const InferContext& ctx, const Shape& x) {
  const std::vector<std::int64_t>& pool = ctx.attributes().get_ints("pool_size");
  const int spatial_rank = static_cast<int>(pool.size());
  if (spatial_rank < 1 || spatial_rank > 2) ctx.fail("pool_size " + ints_text(pool) + " must have 1 or 2 sizes");
  if (x.rank() != spatial_rank + 2)
    ctx.fail("a " + std::to_string(spatial_rank) + "-D pool needs inputs of rank " + std::to_string(spatial_rank + 2) +
             ", got rank " + std::to_string(x.rank()));
  const detail::WindowAttributes window = detail::window_attributes(ctx, spatial_rank);
  if (window.padding == detail::Padding::causal) ctx.fail("padding must be 'valid' or 'same' for pooling");
  for (const std::int64_t size : pool)
    if (size < 1) ctx.fail("pool_size " + ints_text(pool) + " must be positive");
  const std::vector<std::int64_t> spatial = detail::spatial_dims(x, window.channels_last);
  std::vector<std::int64_t> out;
  for (std::size_t axis = 0; axis < spatial.size(); ++axis) {
    const std::int64_t stride = ctx.attributes().get_ints("strides")[axis];
    if (const std::string why = detail::window_overflow(spatial[axis], pool[axis], stride, 1); !why.empty())
      ctx.fail("pool_size " + ints_text(pool) + ": " + why);
    const detail::WindowAxis w = detail::window_axis(spatial[axis], pool[axis], stride, 1, window.padding);
    if (w.out != Shape::unknown && w.out < 1)
      ctx.fail("the pool " + ints_text(pool) + " is larger than the input's " + ints_text(spatial) +
               " with padding 'valid'");
    out.push_back(w.out);
  }
  return detail::image_shape(x[0], detail::image_layout(x, window.channels_last).channels, out, window.channels_last);
}

Shape pool_shape(const InferContext& ctx) { return pooled_shape(ctx, ctx.input_shape(0)); }

Shape max_pool_grad_shape(const InferContext& ctx) {
  const Shape y = pooled_shape(ctx, ctx.input_shape(0));
  if (!y.accepts(ctx.input_shape(1))) ctx.fail("the gradient's shape is not the pooled shape " + y.to_string());
  return ctx.input_shape(0);
}

Shape avg_pool_grad_shape(const InferContext& ctx) {
  const Shape& dy = ctx.input_shape(0);
  const bool channels_last = ctx.attributes().get_string("data_format") != "channels_first";
  const std::vector<std::int64_t>& spatial = ctx.attributes().get_ints("input_spatial");
  if (dy.rank() != static_cast<int>(spatial.size()) + 2)
    ctx.fail("the gradient must have rank " + std::to_string(spatial.size() + 2));
  const Shape x = detail::image_shape(dy[0], detail::image_layout(dy, channels_last).channels, spatial, channels_last);
  const Shape y = pooled_shape(ctx, x);
  if (!y.accepts(dy)) ctx.fail("the gradient's shape is not the pooled shape " + y.to_string());
  return x;
}

// ---- backward rules -------------------------------------------------------------------------------------

Attributes pool_attributes(const Attributes& base) {
  return Attributes()
      .set("pool_size", base.get_ints("pool_size"))
      .set("strides", base.get_ints("strides"))
      .set("padding", base.get_string("padding"))
      .set("data_format", base.get_string("data_format"));
}

std::vector<Tensor> max_pool_backward(const GradContext& g) {
  return {g.input(0).graph().add_op("kiln>MaxPoolGrad", {g.input(0), g.output_grad()}, pool_attributes(g.attributes()),
                                    "grad")};
}

std::vector<Tensor> avg_pool_backward(const GradContext& g) {
  const Attributes& a = g.attributes();
  const std::vector<std::int64_t> spatial =
      detail::spatial_dims(g.input(0).shape(), a.get_string("data_format") != "channels_first");
  return {g.input(0).graph().add_op("kiln>AvgPoolGrad", {g.output_grad()},
                                    pool_attributes(a).set("input_spatial", spatial), "grad")};
}

std::vector<Tensor> avg_pool_grad_backward(const GradContext& g) {
  return {
      g.output_grad().graph().add_op("kiln>AvgPool", {g.output_grad()}, pool_attributes(g.attributes()), "avg_pool")};
}

// ---- registration ---------------------------------------------------------------------------------------

KILN_REGISTER_OP(OpDef("kiln>MaxPool")
                     .inputs(1)
                     .attributes({"pool_size", "strides", "padding", "data_format"})
                     .infer_shape(pool_shape)
                     .forward(max_pool_kernel<float>, max_pool_kernel<double>)
                     .backward(max_pool_backward));

KILN_REGISTER_OP(OpDef("kiln>MaxPoolGrad")
                     .inputs(2)
                     .attributes({"pool_size", "strides", "padding", "data_format"})
                     .infer_shape(max_pool_grad_shape)
                     .forward(max_pool_grad_kernel<float>, max_pool_grad_kernel<double>)
                     .not_differentiable("second-order gradients of max pooling are not supported"));

KILN_REGISTER_OP(OpDef("kiln>AvgPool")
                     .inputs(1)
                     .attributes({"pool_size", "strides", "padding", "data_format"})
                     .infer_shape(pool_shape)
                     .forward(avg_pool_kernel<float>, avg_pool_kernel<double>)
                     .backward(avg_pool_backward));

KILN_REGISTER_OP(OpDef("kiln>AvgPoolGrad")
                     .inputs(1)
                     .attributes({"pool_size", "strides", "padding", "data_format", "input_spatial"})
                     .infer_shape(avg_pool_grad_shape)
                     .forward(avg_pool_grad_kernel<float>, avg_pool_grad_kernel<double>)
                     .backward(avg_pool_grad_backward));

Attributes node_attributes(const ops::PoolOptions& options) {
  std::vector<std::int64_t> strides = options.strides.empty() ? options.pool_size : options.strides;
  if (strides.size() == 1 && options.pool_size.size() > 1) strides.resize(options.pool_size.size(), strides[0]);
  return Attributes()
      .set("pool_size", options.pool_size)
      .set("strides", strides)
      .set("padding", options.padding)
      .set("data_format", options.data_format);
}

}  // namespace

namespace ops {

Tensor max_pool(const Tensor& x, const PoolOptions& options) {
  return x.graph().add_op("kiln>MaxPool", {x}, node_attributes(options), "max_pool");
}

Tensor avg_pool(const Tensor& x, const PoolOptions& options) {
  return x.graph().add_op("kiln>AvgPool", {x}, node_attributes(options), "avg_pool");
}

Shape pool_output_shape(const Shape& x, const PoolOptions& options) {
  const std::vector<Shape> shapes{x};
  const std::string node = "pool";
  return pool_shape(InferContext(op_registry().get("kiln>MaxPool"), node, shapes, node_attributes(options)));
}

}  // namespace ops
}  // namespace kiln
