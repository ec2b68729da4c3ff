// Convolution, 1-D and 2-D, as three ops that are each other's gradients (TensorFlow's design):
//   Conv                x (N, *spatial, C), kernel (*k, C/groups, F)   -> y (N, *out, F)
//   ConvBackpropInput   dy (N, *out, F),    kernel                     -> dx (N, *spatial, C)
//   ConvBackpropKernel  x,                  dy                         -> dkernel (*k, C/groups, F)
// (channels_first puts C and F right after N). ConvBackpropInput is also the transposed convolution.
// Each op is linear in each input, so every backward rule is one of the three again, and second
// derivatives work.
//
// Kernels are GEMMs over an im2col buffer: one row per output position, one column per kernel tap and
// input channel of a group, so that row · kernel[:, filters of the group] is one output. Buffers hold a
// chunk of samples at a time (about 2^19 elements), never the whole batch, and the backward ops reuse the
// same one buffer (a gradient im2col, scattered back by col2im). A 1×1 kernel with stride 1 and no padding
// on channels_last data is already in im2col layout: those run as one GEMM on the input itself. A depthwise
// convolution (one channel a group) on channels_last data, where the GEMMs would be one per channel with a
// column or two each, runs direct kernels over pixels and taps instead (ops/detail/depthwise), as do short windows
// (a first layer's few channels: ops/detail/direct_conv, forward and kernel gradient). A forward convolution with
// 16 channels or more reads its taps in place instead of through im2col: one batch-reduce product per output row.
// 1-D inputs are 2-D images of height 1 (ops/detail/window). A fourth op, FusedConv, is Conv with the bias and a
// ReLU applied in the same pass (what the Conv layers run); its gradient is the three above after ReluGrad.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/depthwise.hpp>
#include <kiln/ops/detail/direct_conv.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/detail/window.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// ---- geometry -------------------------------------------------------------------------------------------

// Everything a kernel needs about one convolution, from the concrete shapes of x, the kernel and y.
struct ConvGeometry {
  detail::ImageLayout input, output;  // x and y (C and F channels)
  detail::WindowAxis rows, cols;      // the height axis (size 1 in 1-D) and the width axis
  std::int64_t groups = 1, group_channels = 0, group_filters = 0;
  bool channels_last = true;

  std::int64_t positions() const { return output.positions(); }                  // output positions of a sample
  std::int64_t patch() const { return rows.size * cols.size * group_channels; }  // im2col row length
  std::int64_t filters() const { return output.channels; }
  // No im2col: a 1×1 window with stride 1 and no padding on channels_last data.
  bool pointwise() const {
    return channels_last && rows.size == 1 && cols.size == 1 && rows.stride == 1 && cols.stride == 1 &&
           rows.pad_before == 0 && cols.pad_before == 0 && rows.out == rows.in && cols.out == cols.in;
  }
  // Every input channel its own group on channels_last data: the direct kernels of ops/detail/depthwise.
  bool depthwise() const { return channels_last && groups > 1 && group_channels == 1; }
  detail::DepthwiseShape depthwise_shape() const { return {input.batch, input.channels, group_filters, rows, cols}; }
  // The direct kernel's view of a channels_last convolution with one group.
  detail::DirectConvShape direct_shape() const { return {input.batch, input.channels, output.channels, rows, cols}; }
  // Short windows on channels_last data with one group: the direct kernel of ops/detail/direct_conv (forward only).
  bool direct(DType dtype) const {
    return channels_last && groups == 1 && !pointwise() && detail::direct_conv_fits(direct_shape(), dtype);
  }
  // The product of one output row's positions inside the input by one tap of the kernel: the taps read in place.
  detail::GemmShape tap_product(std::int64_t rows) const {
    return {rows, filters(), input.channels, false, false, cols.stride * input.channels, filters(), filters(), false};
  }
  // Channels_last data with one group, at least 16 channels (a tap's product of decent depth), filters few enough for
  // libxsmm's batch-reduce kernel, and at most 64 taps: each output row is one batch-reduce product over its taps,
  // reading x in place (ops/detail/gemm's gemm_batch_reduce), with no im2col (forward only).
  bool by_taps(DType dtype) const {
    return channels_last && groups == 1 && !depthwise() && !pointwise() && !direct(dtype) && input.channels >= 16 &&
           rows.size * cols.size <= 64 && detail::gemm_batch_reduce_fused(tap_product(output.width), dtype);
  }
  // Samples per im2col chunk: about 2^19 buffer elements, at least one sample.
  std::int64_t chunk_samples() const {
    const std::int64_t per_sample = std::max<std::int64_t>(1, positions() * patch());
    return std::clamp<std::int64_t>((std::int64_t{1} << 19) / per_sample, 1, std::max<std::int64_t>(1, input.batch));
  }
};

// x's layout, the kernel's spatial size and the number of filters, with the window attributes. With an
// explicit pad_before, `explicit_out` gives the output lengths.
ConvGeometry conv_geometry(const detail::ImageLayout& input, const detail::SpatialInts& kernel_spatial,
                           std::int64_t filters, std::int64_t groups, const detail::WindowAttributes& window,
                           const detail::SpatialInts& explicit_out) {
  ConvGeometry g;
  g.channels_last = window.channels_last;
  g.input = input;
  g.groups = groups;
  g.group_channels = g.input.channels / groups;
  g.group_filters = filters / groups;
  const bool two_d = kernel_spatial.rank == 2;
  if (two_d)
    g.rows = detail::window_axis(g.input.height, kernel_spatial.height(), window.strides.height(),
                                 window.dilation.height(), window.padding);
  g.cols = detail::window_axis(g.input.width, kernel_spatial.width(), window.strides.width(), window.dilation.width(),
                               window.padding);
  if (!window.pad_before.empty()) {
    if (two_d) {
      g.rows.pad_before = window.pad_before.height();
      g.rows.out = explicit_out.height();
    }
    g.cols.pad_before = window.pad_before.width();
    g.cols.out = explicit_out.width();
  }
  g.output = detail::image_layout(g.input.batch, filters, g.rows.out, g.cols.out, g.channels_last);
  return g;
}

std::vector<std::int64_t> leading(const Shape& shape, int count) {
  return {shape.dims().begin(), shape.dims().begin() + count};
}
// The kernel's window sizes: its dimensions before (channels per group, filters).
detail::SpatialInts kernel_window(const Shape& kernel) { return {kernel.dims().data(), kernel.rank() - 2}; }

// The geometry of each op's node from its concrete input shapes (kernels and workspace functions). These
// run at every launch, so they build nothing on the heap.
ConvGeometry forward_geometry(const Shape& x, const Shape& kernel, const Attributes& a) {
  const detail::WindowAttributes window = detail::window_attributes(a);
  return conv_geometry(
      detail::image_layout(x, window.channels_last), kernel_window(kernel), kernel.dim(-1), a.get_int("groups"), window,
      window.pad_before.empty() ? detail::SpatialInts() : detail::SpatialInts(a.get_ints("output_spatial")));
}
ConvGeometry backprop_input_geometry(const Shape& dy, const Shape& kernel, const Attributes& a) {
  const detail::WindowAttributes window = detail::window_attributes(a);
  const std::int64_t groups = a.get_int("groups");
  const detail::ImageLayout x = detail::image_layout(
      dy[0], kernel.dim(-2) * groups, detail::SpatialInts(a.get_ints("input_spatial")), window.channels_last);
  return conv_geometry(x, kernel_window(kernel), kernel.dim(-1), groups, window,
                       detail::spatial_ints(dy, window.channels_last));
}
ConvGeometry backprop_kernel_geometry(const Shape& x, const Shape& dy, const Attributes& a) {
  const detail::WindowAttributes window = detail::window_attributes(a);
  return conv_geometry(detail::image_layout(x, window.channels_last), detail::SpatialInts(a.get_ints("kernel_spatial")),
                       detail::image_layout(dy, window.channels_last).channels, a.get_int("groups"), window,
                       detail::spatial_ints(dy, window.channels_last));
}

using GeometryFn = ConvGeometry (*)(const Shape&, const Shape&, const Attributes&);

template <GeometryFn Geometry>
ConvGeometry geometry_of(const KernelContext& k) {
  return Geometry(k.input_shape(0), k.input_shape(1), k.attributes());
}

// Workers for `units` pieces of a convolution's products: one per piece at most, one per gemm_split_work of the
// whole product's multiply-adds, and at most max_workers (the workspace's slots).
int product_workers(const ConvGeometry& g, std::int64_t units, std::int64_t max_workers) {
  const std::int64_t work = g.input.batch * g.positions() * g.patch() * g.filters() / detail::gemm_split_work;
  return units == 0 ? 0
                    : detail::parallel_workers(
                          units, static_cast<int>(std::clamp<std::int64_t>(work, 1, std::max<std::int64_t>(max_workers, 1))));
}
// The forward by taps splits its output rows.
int tap_workers(const ConvGeometry& g, std::int64_t max_workers) {
  return product_workers(g, g.input.batch * g.output.height, max_workers);
}

// One im2col buffer of a chunk, or none for pointwise and depthwise convolutions (but the depthwise kernel
// gradient's per-worker sums, and the forward by taps' one window per worker for the positions at the borders).
template <GeometryFn Geometry>
std::size_t im2col_workspace(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& attributes,
                             DType dtype) {
  const ConvGeometry g = Geometry(input_shapes[0], input_shapes[1], attributes);
  if (g.depthwise() && Geometry == backprop_kernel_geometry) {
    const detail::DepthwiseShape s = g.depthwise_shape();
    return static_cast<std::size_t>(detail::depthwise_kernel_partial_elements(s) * detail::depthwise_kernel_workers(s)) *
           dtype_size(dtype);
  }
  if (Geometry == backprop_kernel_geometry && g.direct(dtype)) {
    const detail::DirectConvShape s = g.direct_shape();
    return static_cast<std::size_t>(detail::direct_conv_kernel_partial_elements(s) *
                                    detail::direct_conv_kernel_workers(s)) *
           dtype_size(dtype);
  }
  if (Geometry == forward_geometry && g.by_taps(dtype))
    return static_cast<std::size_t>(tap_workers(g, std::int64_t{1} << 16) * g.patch()) * dtype_size(dtype);
  if (g.pointwise() || g.depthwise() || (Geometry == forward_geometry && g.direct(dtype))) return 0;
  return static_cast<std::size_t>(g.chunk_samples() * g.positions() * g.patch()) * dtype_size(dtype);
}

// ---- im2col and col2im ----------------------------------------------------------------------------------

// Copies `count` elements: a window's run of taps and channels, a few hundred bytes. GCC turns a plain copy loop
// into a memcpy call, which costs more than such a copy (a call and its size dispatch per run: a quarter of a 32-channel
// 3 × 3 convolution's time), so runs up to 1 KiB go through vector registers here.
template <class T>
void copy_short(const T* from, std::int64_t count, T* to) {
  using B = xsimd::batch<T>;
  constexpr std::int64_t S = B::size;
  if (count * static_cast<std::int64_t>(sizeof(T)) > 1024) {
    std::memcpy(to, from, static_cast<std::size_t>(count) * sizeof(T));
    return;
  }
  std::int64_t i = 0;
  for (; i + S <= count; i += S) B::load_unaligned(from + i).store_unaligned(to + i);
  for (; i < count; ++i) to[i] = from[i];
}

// One im2col row: the window of output position (oh, ow) of `image`, one group's channels. With
// channels_last data, one group and no dilation along the width, a kernel row's taps are one run.
template <class T>
void im2col_row(const ConvGeometry& g, const T* image, std::int64_t oh, std::int64_t ow, T* out) {
  const std::int64_t channels = g.group_channels, run = g.cols.size * channels;
  const detail::ImageLayout& in = g.input;
  const std::int64_t iw0 = g.cols.input_at(ow, 0);
  // (One group: with several, a pixel's channels of other groups lie between the taps.)
  const bool contiguous = in.channel_stride == 1 && in.column_stride == channels && g.cols.dilation == 1 && iw0 >= 0 &&
                          iw0 + g.cols.size <= in.width;
  for (std::int64_t kh = 0; kh < g.rows.size; ++kh, out += run) {
    const std::int64_t ih = g.rows.input_at(oh, kh);
    if (ih < 0 || ih >= in.height) {
      std::fill(out, out + run, T(0));
      continue;
    }
    const T* line = image + ih * in.row_stride;
    if (contiguous) {
      copy_short(line + iw0 * in.column_stride, run, out);
      continue;
    }
    for (std::int64_t kw = 0; kw < g.cols.size; ++kw) {
      const std::int64_t iw = g.cols.input_at(ow, kw);
      T* taps = out + kw * channels;
      if (iw < 0 || iw >= in.width)
        std::fill(taps, taps + channels, T(0));
      else if (in.channel_stride == 1)
        copy_short(line + iw * in.column_stride, channels, taps);
      else
        for (std::int64_t c = 0; c < channels; ++c) taps[c] = line[iw * in.column_stride + c * in.channel_stride];
    }
  }
}

// Rows [begin, end) of an im2col matrix from samples first, first + 1, ... of x, group `group`, written from
// `out` on (row `begin` first): row n·P + p holds the window of output position p, tap-major then channel
// (the kernel's (kh, kw, c) order); taps in the padding read 0. Positions are counted, not divided out of
// the row index (a 64-bit division per row cost more than a first layer's copy).
template <class T>
void im2col_rows(const ConvGeometry& g, const T* x, std::int64_t first, std::int64_t group, T* out, std::int64_t begin,
                 std::int64_t end) {
  const std::int64_t positions = g.positions(), patch = g.patch();
  const detail::ImageLayout& in = g.input;
  std::int64_t n = first + begin / positions, p = begin % positions;
  std::int64_t oh = p / g.output.width, ow = p % g.output.width;
  for (std::int64_t row = begin; row < end; ++row, out += patch) {
    const T* image = x + n * in.batch_stride + group * g.group_channels * in.channel_stride;
    im2col_row(g, image, oh, ow, out);
    if (++ow == g.output.width) {
      ow = 0;
      if (++oh == g.output.height) {
        oh = 0;
        ++n;
      }
    }
  }
}

// Rows [0, samples·P) of `col` for samples [first, first + samples), split over kiln's threads.
template <class T>
void im2col(const ConvGeometry& g, const T* x, std::int64_t first, std::int64_t samples, std::int64_t group, T* col) {
  const std::int64_t rows = samples * g.positions();
  detail::parallel_for(
      rows, detail::workers_for_elements(rows * g.patch()),
      [&](std::int64_t begin, std::int64_t end, int) { im2col_rows(g, x, first, group, col + begin * g.patch(), begin, end); });
}

// The transpose of im2col for samples [begin, end) of the chunk starting at `first`: adds each entry of
// `col` to the x element it was read from (padding taps are dropped).
template <class T>
void col2im_samples(const ConvGeometry& g, const T* col, std::int64_t first, std::int64_t group, T* dx,
                    std::int64_t begin, std::int64_t end) {
  const std::int64_t positions = g.positions(), patch = g.patch(), channels = g.group_channels;
  const detail::ImageLayout& in = g.input;
  for (std::int64_t s = begin; s < end; ++s) {
    T* image = dx + (first + s) * in.batch_stride + group * channels * in.channel_stride;
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t oh = p / g.output.width, ow = p - oh * g.output.width;  // one division a position
      const T* taps = col + (s * positions + p) * patch;
      for (std::int64_t kh = 0; kh < g.rows.size; ++kh) {
        const std::int64_t ih = g.rows.input_at(oh, kh);
        for (std::int64_t kw = 0; kw < g.cols.size; ++kw, taps += channels) {
          const std::int64_t iw = g.cols.input_at(ow, kw);
          if (ih < 0 || ih >= in.height || iw < 0 || iw >= in.width) continue;
          T* pixel = image + ih * in.row_stride + iw * in.column_stride;
          for (std::int64_t c = 0; c < channels; ++c) pixel[c * in.channel_stride] += taps[c];
        }
      }
    }
  }
}

// col2im of a chunk of `samples` samples. Samples write disjoint parts of dx, so they run in parallel.
template <class T>
void col2im(const ConvGeometry& g, const T* col, std::int64_t first, std::int64_t samples, std::int64_t group, T* dx) {
  const std::int64_t work = samples * g.positions() * g.patch();
  detail::parallel_for(samples, detail::workers_for_elements(work), [&](std::int64_t begin, std::int64_t end, int) {
    col2im_samples(g, col, first, group, dx, begin, end);
  });
}

// ---- the three GEMMs ------------------------------------------------------------------------------------
// Row-major views: the kernel of group g is a (patch × group_filters) block at column g·Fg of the
// (patch × F) kernel matrix; channels_last y is (N·P × F), channels_first y is one (F × P) matrix per sample.

template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, const T* a, std::int64_t lda, bool tb, const T* b,
          std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  detail::GemmShape shape{m, n, k, ta, tb, lda, ldb, ldc, accumulate};
  detail::gemm(shape, a, b, c);
}

// ---- the forward convolution, with the fused op's bias and activation -----------------------------------
// kiln>FusedConv(x, kernel, bias) is activation(conv(x, kernel) + bias), the bias over the channel axis and the
// activation "linear" or "relu", added to each part of the output right after the product that wrote it (an
// epilogue) rather than in passes of their own. Where the product has at most 128 columns (libxsmm's kernels)
// and a kernel matrix of at most 2^17 values, channels_last data with one group runs by blocks of output rows:
// each worker copies a block's windows, multiplies and adds the bias while the block is in its cache, so the
// im2col rows too stay in L2. Short windows run the direct kernel, which adds them before its one store, and
// convolutions by taps add them to each output row after its product.

// rows × F outputs (channels_last): y = act(y + bias). NaN passes the ReLU, as in kiln>Relu.
template <class T>
void bias_activation_rows(T* y, std::int64_t rows, std::int64_t F, const T* bias, bool relu) {
  for (std::int64_t r = 0; r < rows; ++r, y += F) {
    if (relu) {
      for (std::int64_t f = 0; f < F; ++f) {
        const T v = y[f] + bias[f];
        y[f] = v < T(0) ? T(0) : v;
      }
    } else {
      for (std::int64_t f = 0; f < F; ++f) y[f] += bias[f];
    }
  }
}

// The epilogue over samples [first, first + samples) of y, split over kiln's threads.
template <class T>
void bias_activation(const ConvGeometry& g, T* y, std::int64_t first, std::int64_t samples, const T* bias, bool relu) {
  const std::int64_t F = g.filters(), P = g.positions();
  if (g.channels_last) {
    const std::int64_t rows = samples * P;
    T* out = y + first * P * F;
    detail::parallel_for(rows, detail::workers_for_elements(rows * F), [&](std::int64_t begin, std::int64_t end, int) {
      bias_activation_rows(out + begin * F, end - begin, F, bias, relu);
    });
    return;
  }
  const std::int64_t planes = samples * F;  // channels_first: a plane of P outputs per sample and filter
  T* out = y + first * F * P;
  detail::parallel_for(planes, detail::workers_for_elements(planes * P), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T b = bias[plane % F];
      T* values = out + plane * P;
      for (std::int64_t p = 0; p < P; ++p) {
        const T v = values[p] + b;
        values[p] = relu && v < T(0) ? T(0) : v;
      }
    }
  });
}

// Whether the fused op runs by blocks of output rows (above), and how many rows a block holds: its im2col rows
// and its outputs about 128 KiB of float32, a multiple of 16 rows.
bool by_row_blocks(const ConvGeometry& g) {
  return g.channels_last && g.groups == 1 && !g.depthwise() && g.filters() <= 128 &&
         g.patch() * g.filters() <= (std::int64_t{1} << 17);
}
std::int64_t block_rows(const ConvGeometry& g) {
  const std::int64_t per_row = std::max<std::int64_t>(1, g.patch() + g.filters());
  return std::clamp<std::int64_t>((std::int64_t{1} << 15) / per_row / 16 * 16, 16, 1024);
}
// The workers of the row blocks: one per block at most, and one per gemm_split_work multiply-adds.
int block_workers(const ConvGeometry& g, std::int64_t max_workers) {
  const std::int64_t rows = g.input.batch * g.positions(), block = block_rows(g);
  return product_workers(g, (rows + block - 1) / block, max_workers);
}

// The fused op by row blocks; `slots` blocks of im2col rows at `scratch` (none needed when pointwise).
template <class T>
void forward_by_row_blocks(const ConvGeometry& g, const T* x, const T* kernel, const T* bias, bool relu, T* y,
                           T* scratch, std::int64_t slots) {
  const std::int64_t F = g.filters(), patch = g.patch(), rows = g.input.batch * g.positions();
  const std::int64_t block = block_rows(g), blocks = (rows + block - 1) / block;
  const int workers = block_workers(g, g.pointwise() ? std::int64_t{1} << 16 : slots);
  if (workers == 0) return;  // no rows
  detail::parallel_for(blocks, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    T* col = g.pointwise() ? nullptr : scratch + worker * block * patch;
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t first = b * block, count = std::min(block, rows - first);
      if (!g.pointwise()) im2col_rows(g, x, 0, 0, col, first, first + count);
      gemm<T>(count, F, patch, false, g.pointwise() ? x + first * patch : col, patch, false, kernel, F, y + first * F,
              F, false);
      bias_activation_rows(y + first * F, count, F, bias, relu);
    }
  });
}

// The forward by taps (ConvGeometry::by_taps): per output row, the positions whose windows lie inside the input
// as one batch-reduce product over the row's taps (a tap's rows are x's pixels sw·C apart, its weights the kernel's
// C × F block), the positions at the borders one window each through `scratch` (a window per worker, `slots` of
// them), then the row's bias and activation.
template <class T>
void forward_by_taps(const ConvGeometry& g, const T* x, const T* kernel, const T* bias, bool relu, T* y, T* scratch,
                     std::int64_t slots) {
  const std::int64_t C = g.input.channels, F = g.filters(), H = g.input.height, W = g.input.width;
  const std::int64_t OH = g.output.height, OW = g.output.width, KH = g.rows.size, KW = g.cols.size, patch = g.patch();
  std::int64_t lo = 0, hi = OW;  // the positions whose windows lie inside the input along the width
  while (lo < OW && g.cols.input_at(lo, 0) < 0) ++lo;
  while (hi > lo && g.cols.input_at(hi - 1, KW - 1) >= W) --hi;
  const std::int64_t rows = g.input.batch * OH;
  const int workers = tap_workers(g, slots);
  if (workers == 0) return;
  detail::parallel_for(rows, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    const T* a[64];
    const T* b[64];
    T* window = scratch + worker * patch;
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t n = r / OH, oh = r - n * OH;
      const T* image = x + n * g.input.batch_stride;
      T* out = y + r * OW * F;
      if (hi > lo) {
        std::int64_t count = 0;
        for (std::int64_t kh = 0; kh < KH; ++kh) {
          const std::int64_t ih = g.rows.input_at(oh, kh);
          if (ih < 0 || ih >= H) continue;  // a row of padding adds nothing
          for (std::int64_t kw = 0; kw < KW; ++kw, ++count) {
            a[count] = image + (ih * W + g.cols.input_at(lo, kw)) * C;
            b[count] = kernel + (kh * KW + kw) * C * F;
          }
        }
        detail::gemm_batch_reduce(g.tap_product(hi - lo), a, b, count, out + lo * F);
      }
      const auto border = [&](std::int64_t ow) {
        im2col_row(g, image, oh, ow, window);
        gemm<T>(1, F, patch, false, window, patch, false, kernel, F, out + ow * F, F, false);
      };
      for (std::int64_t ow = 0; ow < lo; ++ow) border(ow);
      for (std::int64_t ow = std::max(hi, lo); ow < OW; ++ow) border(ow);
      if (bias != nullptr) bias_activation_rows(out, OW, F, bias, relu);
    }
  });
}

// y = conv(x, kernel), then y = act(y + bias) when `bias` is given (kiln>FusedConv).
template <class T>
void conv_forward(const KernelContext& k, const T* bias, bool relu) {
  const ConvGeometry g = geometry_of<forward_geometry>(k);
  const T* x = k.in<T>(0);
  const T* kernel = k.in<T>(1);
  T* y = k.out<T>();
  const std::int64_t F = g.filters(), Fg = g.group_filters, P = g.positions(), patch = g.patch();
  if (g.direct(dtype_of<T>::value)) return detail::direct_conv_forward<T>(g.direct_shape(), x, kernel, bias, relu, y);
  if (g.by_taps(dtype_of<T>::value))
    return forward_by_taps(g, x, kernel, bias, relu, y, k.scratch<T>(),
                           static_cast<std::int64_t>(k.workspace_bytes / sizeof(T)) / std::max<std::int64_t>(1, patch));
  if (bias != nullptr && by_row_blocks(g)) {
    // The workspace holds the blocks of the thread count at planning: never more workers than that.
    const std::int64_t slots = static_cast<std::int64_t>(k.workspace_bytes / sizeof(T)) / (block_rows(g) * patch);
    return forward_by_row_blocks(g, x, kernel, bias, relu, y, k.scratch<T>(), slots);
  }
  if (g.depthwise() || g.pointwise()) {
    if (g.depthwise()) {
      detail::depthwise_forward(g.depthwise_shape(), x, kernel, y);
    } else {
      for (std::int64_t group = 0; group < g.groups; ++group)
        gemm<T>(g.input.batch * P, Fg, patch, false, x + group * g.group_channels, g.input.channels, false,
                kernel + group * Fg, F, y + group * Fg, F, false);
    }
    if (bias != nullptr) bias_activation(g, y, 0, g.input.batch, bias, relu);
    return;
  }
  T* col = k.scratch<T>();
  const std::int64_t chunk = g.chunk_samples();
  for (std::int64_t first = 0; first < g.input.batch; first += chunk) {
    const std::int64_t samples = std::min(chunk, g.input.batch - first);
    for (std::int64_t group = 0; group < g.groups; ++group) {
      im2col(g, x, first, samples, group, col);
      const T* weights = kernel + group * Fg;
      if (g.channels_last) {
        gemm<T>(samples * P, Fg, patch, false, col, patch, false, weights, F, y + first * P * F + group * Fg, F, false);
      } else {
        for (std::int64_t s = 0; s < samples; ++s)  // y_n (Fg × P) = weightsᵀ · col_nᵀ
          gemm<T>(Fg, P, patch, true, weights, F, true, col + s * P * patch, patch,
                  y + (first + s) * F * P + group * Fg * P, P, false);
      }
    }
    if (bias != nullptr) bias_activation(g, y, first, samples, bias, relu);  // the chunk's outputs, still warm
  }
}

bool fused_relu(const Attributes& a) { return a.get_string("activation") == "relu"; }

template <class T>
void conv_kernel(const KernelContext& k) {
  conv_forward<T>(k, nullptr, false);
}
template <class T>
void fused_conv_kernel(const KernelContext& k) {
  conv_forward<T>(k, k.in<T>(2), fused_relu(k.attributes()));
}

// One block of im2col rows per worker where the fused op runs by row blocks; conv's workspace elsewhere.
std::size_t fused_conv_workspace(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                                 const Attributes& attributes, DType dtype) {
  const ConvGeometry g = forward_geometry(input_shapes[0], input_shapes[1], attributes);
  if (!by_row_blocks(g) || g.direct(dtype) || g.by_taps(dtype))
    return im2col_workspace<forward_geometry>(input_shapes, output_shape, attributes, dtype);
  if (g.pointwise()) return 0;
  return static_cast<std::size_t>(block_workers(g, std::int64_t{1} << 16) * block_rows(g) * g.patch()) *
         dtype_size(dtype);
}

// dx = conv_backprop_input(dy, kernel): the gradient of conv with respect to x, and the transposed
// convolution of dy.
template <class T>
void conv_backprop_input_kernel(const KernelContext& k) {
  const ConvGeometry g = geometry_of<backprop_input_geometry>(k);
  const T* dy = k.in<T>(0);
  const T* kernel = k.in<T>(1);
  T* dx = k.out<T>();
  const std::int64_t F = g.filters(), Fg = g.group_filters, P = g.positions(), patch = g.patch();
  if (g.depthwise()) return detail::depthwise_backprop_input(g.depthwise_shape(), dy, kernel, dx);
  if (g.pointwise()) {  // dx[:, group channels] = dy[:, group filters] · weightsᵀ
    for (std::int64_t group = 0; group < g.groups; ++group)
      gemm<T>(g.input.batch * P, g.group_channels, Fg, false, dy + group * Fg, F, true, kernel + group * Fg, F,
              dx + group * g.group_channels, g.input.channels, false);
    return;
  }
  std::fill(dx, dx + g.input.batch * g.input.batch_stride, T(0));
  T* col = k.scratch<T>();
  const std::int64_t chunk = g.chunk_samples();
  for (std::int64_t first = 0; first < g.input.batch; first += chunk) {
    const std::int64_t samples = std::min(chunk, g.input.batch - first);
    for (std::int64_t group = 0; group < g.groups; ++group) {
      const T* weights = kernel + group * Fg;
      if (g.channels_last) {  // dcol (rows × patch) = dy (rows × Fg) · weightsᵀ
        gemm<T>(samples * P, patch, Fg, false, dy + first * P * F + group * Fg, F, true, weights, F, col, patch, false);
      } else {
        for (std::int64_t s = 0; s < samples; ++s)  // dcol_n (P × patch) = dy_nᵀ · weightsᵀ
          gemm<T>(P, patch, Fg, true, dy + (first + s) * F * P + group * Fg * P, P, true, weights, F,
                  col + s * P * patch, patch, false);
      }
      col2im(g, col, first, samples, group, dx);
    }
  }
}

// dkernel = conv_backprop_kernel(x, dy): the gradient of conv with respect to its kernel.
template <class T>
void conv_backprop_kernel_kernel(const KernelContext& k) {
  const ConvGeometry g = geometry_of<backprop_kernel_geometry>(k);
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dkernel = k.out<T>();
  const std::int64_t F = g.filters(), Fg = g.group_filters, P = g.positions(), patch = g.patch();
  if (g.input.batch == 0 || P == 0) {
    std::fill(dkernel, dkernel + patch * F, T(0));
    return;
  }
  if (g.depthwise()) {
    const detail::DepthwiseShape s = g.depthwise_shape();
    const auto slots = static_cast<std::int64_t>(k.workspace_bytes / sizeof(T)) /
                       std::max<std::int64_t>(1, detail::depthwise_kernel_partial_elements(s));
    return detail::depthwise_backprop_kernel(s, x, dy, dkernel, k.scratch<T>(), slots);
  }
  if (g.direct(dtype_of<T>::value)) {
    const detail::DirectConvShape s = g.direct_shape();
    const auto slots = static_cast<std::int64_t>(k.workspace_bytes / sizeof(T)) /
                       std::max<std::int64_t>(1, detail::direct_conv_kernel_partial_elements(s));
    return detail::direct_conv_backprop_kernel(s, x, dy, dkernel, k.scratch<T>(), slots);
  }
  if (g.pointwise()) {  // dkernel[:, group filters] = x[:, group channels]ᵀ · dy[:, group filters]
    for (std::int64_t group = 0; group < g.groups; ++group)
      gemm<T>(patch, Fg, g.input.batch * P, true, x + group * g.group_channels, g.input.channels, false,
              dy + group * Fg, F, dkernel + group * Fg, F, false);
    return;
  }
  T* col = k.scratch<T>();
  const std::int64_t chunk = g.chunk_samples();
  for (std::int64_t first = 0; first < g.input.batch; first += chunk) {
    const std::int64_t samples = std::min(chunk, g.input.batch - first);
    for (std::int64_t group = 0; group < g.groups; ++group) {
      im2col(g, x, first, samples, group, col);
      T* weights = dkernel + group * Fg;
      if (g.channels_last) {  // dweights (patch × Fg) += colᵀ · dy
        gemm<T>(patch, Fg, samples * P, true, col, patch, false, dy + first * P * F + group * Fg, F, weights, F,
                first > 0);
      } else {
        for (std::int64_t s = 0; s < samples; ++s)  // dweights += col_nᵀ · dy_nᵀ
          gemm<T>(patch, Fg, P, true, col + s * P * patch, patch, true, dy + (first + s) * F * P + group * Fg * P, P,
                  weights, F, first + s > 0);
      }
    }
  }
}

// ---- shape rules ----------------------------------------------------------------------------------------

using detail::ints_text;

// Checks what every convolution has in common: an image of rank 3 (1-D) or 4 (2-D) whose channel axis is
// known, a window that fits, and channels and filters that divide into `groups`. Returns y's shape.
Shape checked_output(const InferContext& ctx, const Shape& x, const std::vector<std::int64_t>& kernel_spatial,
                     std::int64_t kernel_channels, std::int64_t filters, std::int64_t groups, const char* x_name,
                     const std::vector<std::int64_t>* explicit_out = nullptr) {
  const int spatial_rank = static_cast<int>(kernel_spatial.size());
  if (spatial_rank < 1 || spatial_rank > 2) ctx.fail("only 1-D and 2-D convolutions are supported");
  if (x.rank() != spatial_rank + 2)
    ctx.fail(std::string(x_name) + " must have rank " + std::to_string(spatial_rank + 2) + " (batch, " +
             (spatial_rank == 2 ? "height, width" : "length") + " and channels) for a " + std::to_string(spatial_rank) +
             "-D kernel, got rank " + std::to_string(x.rank()));
  const detail::WindowAttributes window = detail::window_attributes(ctx, spatial_rank);
  const detail::ImageLayout in = detail::image_layout(x, window.channels_last);
  if (in.channels == Shape::unknown) ctx.fail("the channel axis of " + std::string(x_name) + " must be known");
  for (const std::int64_t size : kernel_spatial)
    if (size < 1) ctx.fail("kernel size " + ints_text(kernel_spatial) + " must be positive");
  if (groups < 1) ctx.fail("groups must be positive, got " + std::to_string(groups));
  if (in.channels != kernel_channels * groups)
    ctx.fail("the input's " + std::to_string(in.channels) + " channels are not the kernel's " +
             std::to_string(kernel_channels) + " channels per group times " + std::to_string(groups) + " group(s)");
  if (filters % groups != 0)
    ctx.fail(std::to_string(filters) + " filters do not divide into " + std::to_string(groups) + " groups");
  const std::vector<std::int64_t> spatial = detail::spatial_dims(x, window.channels_last);
  if (!window.pad_before.empty()) {
    // Explicit padding (window_attributes checked its count): the output lengths are given, and any length
    // is a valid convolution of them.
    if (explicit_out == nullptr || explicit_out->size() != spatial.size())
      ctx.fail("an explicit pad_before needs the output's length on every spatial axis");
    for (const std::int64_t length : *explicit_out)
      if (length != Shape::unknown && length < 1) ctx.fail("the output lengths must be positive");
    return detail::image_shape(x[0], filters, *explicit_out, window.channels_last);
  }
  std::vector<std::int64_t> out;
  const std::vector<std::int64_t>& strides = ctx.attributes().get_ints("strides");
  const std::vector<std::int64_t>& dilation = ctx.attributes().get_ints("dilation_rate");
  for (std::size_t axis = 0; axis < spatial.size(); ++axis) {
    if (const std::string why = detail::window_overflow(spatial[axis], kernel_spatial[axis], strides[axis], dilation[axis]);
        !why.empty())
      ctx.fail("the kernel " + ints_text(kernel_spatial) + " with dilation_rate " + ints_text(dilation) + ": " + why);
    const detail::WindowAxis w =
        detail::window_axis(spatial[axis], kernel_spatial[axis], strides[axis], dilation[axis], window.padding);
    if (w.out != Shape::unknown && w.out < 1)
      ctx.fail("the kernel " + ints_text(kernel_spatial) + " with dilation_rate " + ints_text(dilation) +
               " spans more than the input's " + ints_text(spatial) + " with padding 'valid'");
    out.push_back(w.out);
  }
  return detail::image_shape(x[0], filters, out, window.channels_last);
}

std::vector<std::int64_t> kernel_spatial_of(const InferContext& ctx, const Shape& kernel) {
  if (kernel.rank() < 3 || kernel.rank() > 4)
    ctx.fail("the kernel must have rank 3 (1-D) or 4 (2-D): (*kernel_size, channels per group, filters)");
  if (!kernel.is_fully_defined()) ctx.fail("the kernel's shape must be known");
  return leading(kernel, kernel.rank() - 2);
}

Shape conv_shape(const InferContext& ctx) {
  const Shape& kernel = ctx.input_shape(1);
  const std::vector<std::int64_t> spatial = kernel_spatial_of(ctx, kernel);
  const std::vector<std::int64_t> out = ctx.attributes().has("output_spatial")
                                            ? ctx.attributes().get_ints("output_spatial")
                                            : std::vector<std::int64_t>{};
  return checked_output(ctx, ctx.input_shape(0), spatial, kernel.dim(-2), kernel.dim(-1),
                        ctx.attributes().get_int("groups"), "the input", &out);
}

// conv's shape, a bias of one value per filter and an activation the kernel applies.
Shape fused_conv_shape(const InferContext& ctx) {
  const Shape y = conv_shape(ctx);
  const Shape& bias = ctx.input_shape(2);
  const std::int64_t filters = ctx.input_shape(1).dim(-1);
  if (bias.rank() != 1 || (bias[0] != Shape::unknown && bias[0] != filters))
    ctx.fail("the bias must be (" + std::to_string(filters) + ",), one value per filter, got " + bias.to_string());
  const std::string& activation = ctx.attributes().get_string("activation");
  if (activation != "linear" && activation != "relu")
    ctx.fail("the fused activation must be 'linear' or 'relu', got '" + activation + "'");
  return y;
}

Shape conv_backprop_input_shape(const InferContext& ctx) {
  const Shape& dy = ctx.input_shape(0);
  const Shape& kernel = ctx.input_shape(1);
  const std::vector<std::int64_t> spatial = kernel_spatial_of(ctx, kernel);
  const std::int64_t groups = ctx.attributes().get_int("groups");
  const std::vector<std::int64_t>& input_spatial = ctx.attributes().get_ints("input_spatial");
  if (input_spatial.size() != spatial.size())
    ctx.fail("input_spatial " + ints_text(input_spatial) + " must have one size per kernel axis");
  const bool channels_last = ctx.attributes().get_string("data_format") != "channels_first";
  const Shape x = detail::image_shape(dy.rank() > 0 ? dy[0] : 0, kernel.dim(-2) * groups, input_spatial, channels_last);
  if (dy.rank() != x.rank()) ctx.fail("the gradient must have rank " + std::to_string(x.rank()));
  const std::vector<std::int64_t> dy_spatial = detail::spatial_dims(dy, channels_last);
  const Shape y = checked_output(ctx, x, spatial, kernel.dim(-2), kernel.dim(-1), groups, "the output", &dy_spatial);
  if (!y.accepts(dy)) ctx.fail("the gradient's shape is not the convolution's output " + y.to_string());
  return x;
}

Shape conv_backprop_kernel_shape(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Shape& dy = ctx.input_shape(1);
  const std::vector<std::int64_t>& spatial = ctx.attributes().get_ints("kernel_spatial");
  const std::int64_t groups = ctx.attributes().get_int("groups");
  const bool channels_last = ctx.attributes().get_string("data_format") != "channels_first";
  if (dy.rank() != x.rank()) ctx.fail("the input and the gradient differ in rank");
  const std::int64_t filters = detail::image_layout(dy, channels_last).channels;
  const std::int64_t channels = detail::image_layout(x, channels_last).channels;
  if (filters == Shape::unknown || channels == Shape::unknown || channels % std::max<std::int64_t>(groups, 1) != 0)
    ctx.fail("the channels must be known and divide into " + std::to_string(groups) + " groups");
  const std::vector<std::int64_t> dy_spatial = detail::spatial_dims(dy, channels_last);
  const Shape y = checked_output(ctx, x, spatial, channels / groups, filters, groups, "the input", &dy_spatial);
  if (!y.accepts(dy)) ctx.fail("the gradient's shape is not the convolution's output " + y.to_string());
  std::vector<std::int64_t> dims = spatial;
  dims.push_back(channels / groups);
  dims.push_back(filters);
  return Shape(std::move(dims));
}

// ---- backward rules -------------------------------------------------------------------------------------

// The attributes of `base` for another op of the family, with its spatial attribute.
Attributes family_attributes(const Attributes& base, const char* spatial_key, std::vector<std::int64_t> spatial) {
  Attributes a;
  for (const char* key : {"strides", "dilation_rate"}) a.set(key, base.get_ints(key));
  a.set("padding", base.get_string("padding"));
  a.set("data_format", base.get_string("data_format"));
  a.set("groups", base.get_int("groups"));
  if (base.has("pad_before")) a.set("pad_before", base.get_ints("pad_before"));
  if (spatial_key != nullptr) a.set(spatial_key, std::move(spatial));
  return a;
}

bool channels_last_of(const Attributes& a) { return a.get_string("data_format") != "channels_first"; }

// `like` has the output's shape: with an explicit pad_before, it fixes the output lengths.
Tensor make_conv(const Tensor& x, const Tensor& kernel, const Attributes& base, const Tensor& like) {
  const bool explicit_padding = base.has("pad_before");
  Attributes a = family_attributes(
      base, explicit_padding ? "output_spatial" : nullptr,
      explicit_padding ? detail::spatial_dims(like.shape(), base.get_string("data_format") != "channels_first")
                       : std::vector<std::int64_t>{});
  return x.graph().add_op("kiln>Conv", {x, kernel}, std::move(a), "conv");
}
Tensor make_backprop_input(const Tensor& dy, const Tensor& kernel, const Attributes& base,
                           std::vector<std::int64_t> input_spatial) {
  return dy.graph().add_op("kiln>ConvBackpropInput", {dy, kernel},
                           family_attributes(base, "input_spatial", std::move(input_spatial)), "conv_grad_input");
}
Tensor make_backprop_kernel(const Tensor& x, const Tensor& dy, const Attributes& base,
                            std::vector<std::int64_t> kernel_spatial) {
  return x.graph().add_op("kiln>ConvBackpropKernel", {x, dy},
                          family_attributes(base, "kernel_spatial", std::move(kernel_spatial)), "conv_grad_kernel");
}

std::vector<std::int64_t> image_spatial(const Tensor& image, const Attributes& a) {
  return detail::spatial_dims(image.shape(), channels_last_of(a));
}
std::vector<std::int64_t> kernel_spatial(const Tensor& kernel) { return leading(kernel.shape(), kernel.rank() - 2); }

// y = A_K x: dx = A_Kᵀ dy, dK = conv_backprop_kernel(x, dy).
std::vector<Tensor> conv_backward(const GradContext& g) {
  const Tensor x = g.input(0), kernel = g.input(1), dy = g.output_grad();
  const Attributes& a = g.attributes();
  return {g.needs_grad(0) ? make_backprop_input(dy, kernel, a, image_spatial(x, a)) : Tensor(),
          g.needs_grad(1) ? make_backprop_kernel(x, dy, a, kernel_spatial(kernel)) : Tensor()};
}

// y = act(A_K x + b): dz = act'(dz) (ReLU's from its output), then conv's gradients of dz, and b's the sum of dz
// over every axis but the channels.
std::vector<Tensor> fused_conv_backward(const GradContext& g) {
  const Tensor x = g.input(0), kernel = g.input(1);
  const Attributes& a = g.attributes();
  Tensor dz = g.output_grad();
  if (fused_relu(a)) dz = dz.graph().add_op("kiln>ReluGrad", {g.output(), dz}, Attributes(), "grad");
  Tensor dbias;
  if (g.needs_grad(2)) {
    ops::Axes axes;
    const std::int64_t channel_axis = channels_last_of(a) ? x.rank() - 1 : 1;
    for (std::int64_t axis = 0; axis < x.rank(); ++axis)
      if (axis != channel_axis) axes.push_back(axis);
    dbias = ops::sum(dz, axes);
  }
  return {g.needs_grad(0) ? make_backprop_input(dz, kernel, a, image_spatial(x, a)) : Tensor(),
          g.needs_grad(1) ? make_backprop_kernel(x, dz, a, kernel_spatial(kernel)) : Tensor(), dbias};
}

// z = A_Kᵀ dy, so <w, z> = <A_K w, dy>: d(dy) = conv(w, K), dK = conv_backprop_kernel(w, dy).
std::vector<Tensor> conv_backprop_input_backward(const GradContext& g) {
  const Tensor dy = g.input(0), kernel = g.input(1), w = g.output_grad();
  const Attributes& a = g.attributes();
  return {g.needs_grad(0) ? make_conv(w, kernel, a, dy) : Tensor(),
          g.needs_grad(1) ? make_backprop_kernel(w, dy, a, kernel_spatial(kernel)) : Tensor()};
}

// <W, conv_backprop_kernel(x, dy)> = <A_W x, dy>: dx = A_Wᵀ dy, d(dy) = conv(x, W).
std::vector<Tensor> conv_backprop_kernel_backward(const GradContext& g) {
  const Tensor x = g.input(0), dy = g.input(1), w = g.output_grad();
  const Attributes& a = g.attributes();
  return {g.needs_grad(0) ? make_backprop_input(dy, w, a, image_spatial(x, a)) : Tensor(),
          g.needs_grad(1) ? make_conv(x, w, a, dy) : Tensor()};
}

// ---- registration ---------------------------------------------------------------------------------------

KILN_REGISTER_OP(OpDef("kiln>Conv")
                     .inputs(2)
                     .attributes({"strides", "dilation_rate", "padding", "data_format", "groups", "pad_before",
                                  "output_spatial"})
                     .infer_shape(conv_shape)
                     .forward(conv_kernel<float>, conv_kernel<double>)
                     .backward(conv_backward)
                     .workspace(im2col_workspace<forward_geometry>));

KILN_REGISTER_OP(OpDef("kiln>FusedConv")
                     .inputs(3)
                     .attributes({"strides", "dilation_rate", "padding", "data_format", "groups", "pad_before",
                                  "output_spatial", "activation"})
                     .infer_shape(fused_conv_shape)
                     .forward(fused_conv_kernel<float>, fused_conv_kernel<double>)
                     .backward(fused_conv_backward)
                     .workspace(fused_conv_workspace));

KILN_REGISTER_OP(OpDef("kiln>ConvBackpropInput")
                     .inputs(2)
                     .attributes({"strides", "dilation_rate", "padding", "data_format", "groups", "input_spatial",
                                  "pad_before"})
                     .infer_shape(conv_backprop_input_shape)
                     .forward(conv_backprop_input_kernel<float>, conv_backprop_input_kernel<double>)
                     .backward(conv_backprop_input_backward)
                     .workspace(im2col_workspace<backprop_input_geometry>));

KILN_REGISTER_OP(OpDef("kiln>ConvBackpropKernel")
                     .inputs(2)
                     .attributes({"strides", "dilation_rate", "padding", "data_format", "groups", "kernel_spatial",
                                  "pad_before"})
                     .infer_shape(conv_backprop_kernel_shape)
                     .forward(conv_backprop_kernel_kernel<float>, conv_backprop_kernel_kernel<double>)
                     .backward(conv_backprop_kernel_backward)
                     .workspace(im2col_workspace<backprop_kernel_geometry>));

// The node attributes of ops::conv's options for a kernel of `spatial_rank` axes; empty strides and
// dilations mean 1 on every axis, and a single value means that value on every axis, as in Keras.
Attributes conv_attributes(const ops::ConvOptions& options, int spatial_rank, std::int64_t groups) {
  auto per_axis = [spatial_rank](std::vector<std::int64_t> values) {
    if (values.empty()) values.push_back(1);
    if (values.size() == 1) values.resize(static_cast<std::size_t>(std::max(spatial_rank, 1)), values[0]);
    return values;
  };
  return Attributes()
      .set("strides", per_axis(options.strides))
      .set("dilation_rate", per_axis(options.dilation_rate))
      .set("padding", options.padding)
      .set("data_format", options.data_format)
      .set("groups", groups);
}

// Keras's ops.conv infers the groups from the shapes: the kernel holds C / groups input channels. Shapes
// that do not divide get 1, and the shape rule then says why they do not fit.
std::int64_t inferred_groups(const Shape& x, const Shape& kernel, const ops::ConvOptions& options) {
  if (x.rank() < 3 || kernel.rank() < 3) return 1;
  const std::int64_t channels = x[options.data_format == "channels_first" ? 1 : x.rank() - 1];
  const std::int64_t per_group = kernel.dim(-2);
  return channels > 0 && per_group > 0 && channels % per_group == 0 ? channels / per_group : 1;
}

}  // namespace

namespace ops {

Tensor conv(const Tensor& x, const Tensor& kernel, const ConvOptions& options) {
  return x.graph().add_op(
      "kiln>Conv", {x, kernel},
      conv_attributes(options, kernel.rank() - 2, inferred_groups(x.shape(), kernel.shape(), options)), "conv");
}

Tensor conv_bias_activation(const Tensor& x, const Tensor& kernel, const Tensor& bias, const std::string& activation,
                            const ConvOptions& options) {
  check_activation(activation, "conv_bias_activation");
  const bool fused = activation == "relu";
  Attributes attributes = conv_attributes(options, kernel.rank() - 2, inferred_groups(x.shape(), kernel.shape(), options));
  attributes.set("activation", fused ? "relu" : "linear");
  const Tensor y = x.graph().add_op("kiln>FusedConv", {x, kernel, bias}, std::move(attributes), "conv");
  return fused ? y : ops::activation(y, activation);
}

Shape conv_output_shape(const Shape& x, const Shape& kernel, const ConvOptions& options) {
  const Attributes attributes = conv_attributes(options, kernel.rank() - 2, inferred_groups(x, kernel, options));
  const std::vector<Shape> shapes{x, kernel};
  const std::string node = "conv";
  return conv_shape(InferContext(op_registry().get("kiln>Conv"), node, shapes, attributes));
}

Tensor conv_transpose(const Tensor& x, const Tensor& kernel, const std::vector<std::int64_t>& output_spatial,
                      const ConvOptions& options, const std::vector<std::int64_t>& pad_before) {
  Attributes attributes = conv_attributes(options, kernel.rank() - 2, 1).set("input_spatial", output_spatial);
  if (!pad_before.empty()) attributes.set("pad_before", pad_before);
  return x.graph().add_op("kiln>ConvBackpropInput", {x, kernel}, std::move(attributes), "conv_transpose");
}

}  // namespace ops
}  // namespace kiln
