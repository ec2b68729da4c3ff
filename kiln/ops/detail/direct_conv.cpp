// The direct kernel of a convolution with short windows (see direct_conv.hpp). An output row's positions go
// PX at a time: the window's values of PX pixels, each broadcast against the tap's NV vectors of filters into
// PX · NV accumulators (16 of AVX-512's 32 registers), so the loads of a tap's weights are shared by PX pixels
// and enough multiply-adds are in flight to hide their latency. Pixels whose window reaches into the padding
// go one at a time over their in-bounds taps. Work splits over output rows.
#include <kiln/ops/detail/direct_conv.hpp>

#include <algorithm>
#include <cstddef>

#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/simd.hpp>

namespace kiln::detail {
namespace {

template <class T>
using Batch = xsimd::batch<T>;

template <class T>
Batch<T> activated(const Batch<T>& v, bool relu) {
  return relu ? xsimd::select(v < Batch<T>(T(0)), Batch<T>(T(0)), v) : v;
}

// PX pixels whose windows lie inside the input: pixel j's tap t reads origin[j·step + offsets[t]]. `kernel`,
// `bias` and `out` start at this pass's first filter; `out` steps F a pixel.
template <class T, int PX, int NV>
void interior_pixels(const T* origin, std::int64_t step, const std::int64_t* offsets, std::int64_t taps,
                     const T* kernel, std::int64_t F, const T* bias, bool relu, T* out) {
  constexpr std::int64_t S = Batch<T>::size;
  Batch<T> acc[PX][NV];
  for (int v = 0; v < NV; ++v) {
    const Batch<T> b = bias != nullptr ? Batch<T>::load_unaligned(bias + v * S) : Batch<T>(T(0));
    for (int j = 0; j < PX; ++j) acc[j][v] = b;
  }
  for (std::int64_t t = 0; t < taps; ++t) {
    Batch<T> w[NV];
    for (int v = 0; v < NV; ++v) w[v] = Batch<T>::load_unaligned(kernel + t * F + v * S);
    const T* in = origin + offsets[t];
    for (int j = 0; j < PX; ++j) {
      const Batch<T> value(in[j * step]);
      for (int v = 0; v < NV; ++v) acc[j][v] = xsimd::fma(value, w[v], acc[j][v]);
    }
  }
  for (int j = 0; j < PX; ++j)
    for (int v = 0; v < NV; ++v) activated(acc[j][v], relu).store_unaligned(out + j * F + v * S);
}

// One pixel (oh, ow) of `image`, over the taps that read the input (the rest read padded zeros).
template <class T, int NV>
void border_pixel(const DirectConvShape& s, const T* image, std::int64_t oh, std::int64_t ow, const T* kernel,
                  const T* bias, bool relu, T* out) {
  constexpr std::int64_t S = Batch<T>::size;
  const std::int64_t C = s.channels, F = s.filters;
  Batch<T> acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = bias != nullptr ? Batch<T>::load_unaligned(bias + v * S) : Batch<T>(T(0));
  const TapRange th = input_taps(s.rows, oh), tw = input_taps(s.cols, ow);
  for (std::int64_t kh = th.first; kh < th.last; ++kh)
    for (std::int64_t kw = tw.first; kw < tw.last; ++kw) {
      const T* in = image + (s.rows.input_at(oh, kh) * s.cols.in + s.cols.input_at(ow, kw)) * C;
      const T* w = kernel + (kh * s.cols.size + kw) * C * F;
      for (std::int64_t c = 0; c < C; ++c) {
        const Batch<T> value(in[c]);
        for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(value, Batch<T>::load_unaligned(w + c * F + v * S), acc[v]);
      }
    }
  for (int v = 0; v < NV; ++v) activated(acc[v], relu).store_unaligned(out + v * S);
}

// NV vectors of filters from f0 for every position of output row oh of sample n.
template <class T, int NV>
void row_pass(const DirectConvShape& s, const T* image, std::int64_t oh, const std::int64_t* offsets, const T* kernel,
              const T* bias, bool relu, T* out_row, std::int64_t f0) {
  constexpr int PX = NV >= 4 ? 4 : 8;
  const std::int64_t C = s.channels, F = s.filters, W = s.cols.in, OW = s.cols.out, taps = s.patch();
  const TapRange th = input_taps(s.rows, oh);
  const bool rows_inside = th.first == 0 && th.last == s.rows.size;
  const T* k = kernel + f0;
  const T* b = bias != nullptr ? bias + f0 : nullptr;
  std::int64_t ow = 0;
  while (ow < OW) {
    if (rows_inside && ow + PX <= OW && s.cols.input_at(ow, 0) >= 0 &&
        s.cols.input_at(ow + PX - 1, s.cols.size - 1) < W) {
      const T* origin = image + (s.rows.input_at(oh, 0) * W + s.cols.input_at(ow, 0)) * C;
      interior_pixels<T, PX, NV>(origin, s.cols.stride * C, offsets, taps, k, F, b, relu, out_row + ow * F + f0);
      ow += PX;
    } else {
      border_pixel<T, NV>(s, image, oh, ow, k, b, relu, out_row + ow * F + f0);
      ++ow;
    }
  }
}

// ---- the kernel's gradient ----

// Where tap t of a window lies from the window's first value, and its (kh, kw).
struct Taps {
  std::int64_t offset[direct_conv_max_patch], kh[direct_conv_max_patch], kw[direct_conv_max_patch];
  explicit Taps(const DirectConvShape& s) {
    for (std::int64_t h = 0, t = 0; h < s.rows.size; ++h)
      for (std::int64_t w = 0; w < s.cols.size; ++w)
        for (std::int64_t c = 0; c < s.channels; ++c, ++t) {
          offset[t] = (h * s.rows.dilation * s.cols.in + w * s.cols.dilation) * s.channels + c;
          kh[t] = h;
          kw[t] = w;
        }
  }
};

// part[t, f0 + ...] += Σ over the output rows [begin, end) and their positions of x(tap t) · dy[f0 + ...], for taps
// [t0, t0 + TB) and NV vectors of filters: the sums in TB · NV registers across all the rows.
template <class T, int TB, int NV>
void kernel_grad_block(const DirectConvShape& s, const Taps& taps, const T* x, const T* dy, std::int64_t begin,
                       std::int64_t end, std::int64_t t0, std::int64_t f0, T* part) {
  constexpr std::int64_t S = Batch<T>::size;
  const std::int64_t C = s.channels, F = s.filters, H = s.rows.in, W = s.cols.in, OH = s.rows.out, OW = s.cols.out;
  const std::int64_t count = std::min<std::int64_t>(TB, s.patch() - t0);
  // The positions whose windows lie inside the input along the width: [ow_lo, ow_hi).
  std::int64_t ow_lo = 0, ow_hi = OW;
  while (ow_lo < OW && s.cols.input_at(ow_lo, 0) < 0) ++ow_lo;
  while (ow_hi > ow_lo && s.cols.input_at(ow_hi - 1, s.cols.size - 1) >= W) --ow_hi;
  Batch<T> acc[TB][NV];
  for (int t = 0; t < TB; ++t)
    for (int v = 0; v < NV; ++v) acc[t][v] = Batch<T>(T(0));
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t n = r / OH, oh = r - n * OH;
    const T* image = x + n * H * W * C;
    const T* grad_row = dy + r * OW * F + f0;
    const bool rows_inside = s.rows.input_at(oh, 0) >= 0 && s.rows.input_at(oh, s.rows.size - 1) < H;
    for (std::int64_t ow = 0; ow < OW; ++ow) {
      Batch<T> g[NV];
      for (int v = 0; v < NV; ++v) g[v] = Batch<T>::load_unaligned(grad_row + ow * F + v * S);
      if (rows_inside && ow >= ow_lo && ow < ow_hi) {
        const T* origin = image + (s.rows.input_at(oh, 0) * W + s.cols.input_at(ow, 0)) * C;
        for (int t = 0; t < TB; ++t) {
          if (t >= count) break;
          const Batch<T> value(origin[taps.offset[t0 + t]]);
          for (int v = 0; v < NV; ++v) acc[t][v] = xsimd::fma(value, g[v], acc[t][v]);
        }
      } else {  // a window reaching into the padding: only its taps inside the input
        for (int t = 0; t < TB; ++t) {
          if (t >= count) break;
          const std::int64_t ih = s.rows.input_at(oh, taps.kh[t0 + t]), iw = s.cols.input_at(ow, taps.kw[t0 + t]);
          if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
          const Batch<T> value(image[(ih * W + iw) * C + (t0 + t) % C]);
          for (int v = 0; v < NV; ++v) acc[t][v] = xsimd::fma(value, g[v], acc[t][v]);
        }
      }
    }
  }
  for (std::int64_t t = 0; t < count; ++t)
    for (int v = 0; v < NV; ++v) {
      T* out = part + (t0 + t) * F + f0 + v * S;
      (Batch<T>::load_unaligned(out) + acc[t][v]).store_unaligned(out);
    }
}

template <class T, int NV>
void kernel_grad_filters(const DirectConvShape& s, const Taps& taps, const T* x, const T* dy, std::int64_t begin,
                         std::int64_t end, std::int64_t f0, T* part) {
  constexpr int TB = NV == 1 ? 24 : NV == 2 ? 12 : 6;  // TB · NV of the 32 vector registers hold the sums
  for (std::int64_t t0 = 0; t0 < s.patch(); t0 += TB) kernel_grad_block<T, TB, NV>(s, taps, x, dy, begin, end, t0, f0, part);
}

// Output rows per worker of the kernel's gradient: one worker per 2^15 multiply-adds' worth.
int kernel_grad_workers(const DirectConvShape& s, std::int64_t rows) {
  return workers_for_elements(rows * s.cols.out * s.filters, s.patch());
}

}  // namespace

std::int64_t direct_conv_kernel_partial_elements(const DirectConvShape& s) { return s.patch() * s.filters; }

int direct_conv_kernel_workers(const DirectConvShape& s) {
  const std::int64_t rows = s.batch * s.rows.out;
  return parallel_workers(rows, kernel_grad_workers(s, rows));
}

template <class T>
void direct_conv_backprop_kernel(const DirectConvShape& s, const T* x, const T* dy, T* dkernel, T* partials,
                                 std::int64_t slots) {
  constexpr std::int64_t S = Batch<T>::size;
  const std::int64_t F = s.filters, rows = s.batch * s.rows.out;
  const Taps taps(s);
  parallel_sum_parts(rows, kernel_grad_workers(s, rows), slots, direct_conv_kernel_partial_elements(s), partials,
                     dkernel, [&](std::int64_t begin, std::int64_t end, T* mine) {
                       std::int64_t f0 = 0;
                       for (; F - f0 >= 4 * S; f0 += 4 * S) kernel_grad_filters<T, 4>(s, taps, x, dy, begin, end, f0, mine);
                       for (; F - f0 >= 2 * S; f0 += 2 * S) kernel_grad_filters<T, 2>(s, taps, x, dy, begin, end, f0, mine);
                       for (; f0 < F; f0 += S) kernel_grad_filters<T, 1>(s, taps, x, dy, begin, end, f0, mine);
                     });
}

template void direct_conv_backprop_kernel<float>(const DirectConvShape&, const float*, const float*, float*, float*,
                                                 std::int64_t);
template void direct_conv_backprop_kernel<double>(const DirectConvShape&, const double*, const double*, double*,
                                                  double*, std::int64_t);

bool direct_conv_fits(const DirectConvShape& s, DType dtype) {
  const std::int64_t lanes =
      dtype == DType::float32 ? std::int64_t{Batch<float>::size} : std::int64_t{Batch<double>::size};
  return s.patch() <= direct_conv_max_patch && s.filters > 0 && s.filters % lanes == 0;
}

template <class T>
void direct_conv_forward(const DirectConvShape& s, const T* x, const T* kernel, const T* bias, bool relu, T* y) {
  constexpr std::int64_t S = Batch<T>::size;
  const std::int64_t C = s.channels, F = s.filters, W = s.cols.in, OH = s.rows.out, OW = s.cols.out;
  const Taps taps(s);  // where each tap of a window lies from its first value, in the kernel's (kh, kw, c) order
  const std::int64_t* offsets = taps.offset;
  const std::int64_t rows = s.batch * OH;
  parallel_for(rows, workers_for_elements(rows * OW * F, s.patch()), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t n = r / OH, oh = r - n * OH;
      const T* image = x + n * s.rows.in * W * C;
      T* out_row = y + r * OW * F;
      std::int64_t f0 = 0;
      for (; F - f0 >= 4 * S; f0 += 4 * S) row_pass<T, 4>(s, image, oh, offsets, kernel, bias, relu, out_row, f0);
      for (; F - f0 >= 2 * S; f0 += 2 * S) row_pass<T, 2>(s, image, oh, offsets, kernel, bias, relu, out_row, f0);
      for (; f0 < F; f0 += S) row_pass<T, 1>(s, image, oh, offsets, kernel, bias, relu, out_row, f0);
    }
  });
}

template void direct_conv_forward<float>(const DirectConvShape&, const float*, const float*, const float*, bool, float*);
template void direct_conv_forward<double>(const DirectConvShape&, const double*, const double*, const double*, bool,
                                          double*);

}  // namespace kiln::detail
