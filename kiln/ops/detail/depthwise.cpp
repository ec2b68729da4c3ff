// The direct kernels of a depthwise convolution on channels_last data (see depthwise.hpp). Each output
// position sums its window's taps, a tap being one multiply-add over the pixel's channels (multiplier
// outputs per channel); the loops over channels are contiguous and vectorize. Work splits over output rows
// (forward, kernel gradient) or input rows (input gradient, gathered from the output positions that read
// each input pixel, so no two workers write the same element); the kernel gradient sums per worker and adds
// the workers' parts at the end.
#include <kiln/ops/detail/depthwise.hpp>

#include <algorithm>

#include <kiln/core/parallel.hpp>

namespace kiln::detail {
namespace {

// out[f] += in[f / multiplier] * weights[f] over a pixel's filters.
template <class T>
void multiply_add(T* __restrict out, const T* __restrict in, const T* __restrict weights, std::int64_t channels,
                  std::int64_t multiplier) {
  if (multiplier == 1) {
    for (std::int64_t c = 0; c < channels; ++c) out[c] += in[c] * weights[c];
    return;
  }
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t j = 0; j < multiplier; ++j) out[c * multiplier + j] += in[c] * weights[c * multiplier + j];
}

// in[c] += sum over j of out[c·multiplier + j] * weights[c·multiplier + j]: the transpose of multiply_add.
template <class T>
void multiply_add_transposed(T* __restrict in, const T* __restrict out, const T* __restrict weights,
                             std::int64_t channels, std::int64_t multiplier) {
  if (multiplier == 1) {
    for (std::int64_t c = 0; c < channels; ++c) in[c] += out[c] * weights[c];
    return;
  }
  for (std::int64_t c = 0; c < channels; ++c) {
    T sum = 0;
    for (std::int64_t j = 0; j < multiplier; ++j) sum += out[c * multiplier + j] * weights[c * multiplier + j];
    in[c] += sum;
  }
}

// The output position along `axis` whose tap `tap` reads input position `i`, or -1 when none does.
std::int64_t output_reading(const WindowAxis& axis, std::int64_t i, std::int64_t tap) {
  const std::int64_t start = i + axis.pad_before - tap * axis.dilation;  // o · stride
  if (start < 0 || start % axis.stride != 0) return -1;
  const std::int64_t o = start / axis.stride;
  return o < axis.out ? o : -1;
}

// For each output position ow of output row r (sample r / rows.out): start(ow), then visit(ow, tap,
// input_offset) for each of its in-bounds taps, with the tap's index in the kernel and where its input pixel
// starts in x.
template <class Start, class Visit>
void for_each_tap(const DepthwiseShape& s, std::int64_t r, const Start& start, const Visit& visit) {
  const std::int64_t n = r / s.rows.out, oh = r - n * s.rows.out;
  const TapRange taps_h = input_taps(s.rows, oh);
  for (std::int64_t ow = 0; ow < s.cols.out; ++ow) {
    start(ow);
    const TapRange taps_w = input_taps(s.cols, ow);
    for (std::int64_t kh = taps_h.first; kh < taps_h.last; ++kh) {
      const std::int64_t row_offset = (n * s.rows.in + s.rows.input_at(oh, kh)) * s.cols.in;
      for (std::int64_t kw = taps_w.first; kw < taps_w.last; ++kw)
        visit(ow, kh * s.cols.size + kw, (row_offset + s.cols.input_at(ow, kw)) * s.channels);
    }
  }
}

// Work per output row: its positions, filters and taps.
int row_workers(const DepthwiseShape& s, std::int64_t rows) {
  return workers_for_elements(rows * s.cols.out * s.filters(), s.taps());
}

}  // namespace

template <class T>
void depthwise_forward(const DepthwiseShape& s, const T* x, const T* kernel, T* y) {
  const std::int64_t F = s.filters(), OW = s.cols.out, rows = s.batch * s.rows.out;
  parallel_for(rows, row_workers(s, rows), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      T* out_row = y + r * OW * F;
      for_each_tap(
          s, r, [&](std::int64_t ow) { std::fill(out_row + ow * F, out_row + (ow + 1) * F, T(0)); },
          [&](std::int64_t ow, std::int64_t tap, std::int64_t input) {
            multiply_add(out_row + ow * F, x + input, kernel + tap * F, s.channels, s.multiplier);
          });
    }
  });
}

template <class T>
void depthwise_backprop_input(const DepthwiseShape& s, const T* dy, const T* kernel, T* dx) {
  const std::int64_t C = s.channels, F = s.filters(), H = s.rows.in, W = s.cols.in, OH = s.rows.out, OW = s.cols.out;
  const std::int64_t rows = s.batch * H;
  parallel_for(rows, row_workers(s, rows), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t n = r / H, ih = r - n * H;
      for (std::int64_t iw = 0; iw < W; ++iw) {
        T* in = dx + (r * W + iw) * C;
        std::fill(in, in + C, T(0));
        for (std::int64_t kh = 0; kh < s.rows.size; ++kh) {
          const std::int64_t oh = output_reading(s.rows, ih, kh);
          if (oh < 0) continue;
          for (std::int64_t kw = 0; kw < s.cols.size; ++kw) {
            const std::int64_t ow = output_reading(s.cols, iw, kw);
            if (ow < 0) continue;
            multiply_add_transposed(in, dy + ((n * OH + oh) * OW + ow) * F, kernel + (kh * s.cols.size + kw) * F, C,
                                    s.multiplier);
          }
        }
      }
    }
  });
}

std::int64_t depthwise_kernel_partial_elements(const DepthwiseShape& s) { return s.taps() * s.filters(); }

int depthwise_kernel_workers(const DepthwiseShape& s) {
  const std::int64_t rows = s.batch * s.rows.out;
  return parallel_workers(rows, row_workers(s, rows));
}

template <class T>
void depthwise_backprop_kernel(const DepthwiseShape& s, const T* x, const T* dy, T* dkernel, T* partials,
                               std::int64_t slots) {
  const std::int64_t F = s.filters(), OW = s.cols.out, rows = s.batch * s.rows.out;
  parallel_sum_parts(rows, row_workers(s, rows), slots, depthwise_kernel_partial_elements(s), partials, dkernel,
                     [&](std::int64_t begin, std::int64_t end, T* sums) {
                       for (std::int64_t r = begin; r < end; ++r)
                         for_each_tap(
                             s, r, [](std::int64_t) {},
                             [&](std::int64_t ow, std::int64_t tap, std::int64_t input) {
                               multiply_add(sums + tap * F, x + input, dy + (r * OW + ow) * F, s.channels, s.multiplier);
                             });
                     });
}

template void depthwise_forward<float>(const DepthwiseShape&, const float*, const float*, float*);
template void depthwise_forward<double>(const DepthwiseShape&, const double*, const double*, double*);
template void depthwise_backprop_input<float>(const DepthwiseShape&, const float*, const float*, float*);
template void depthwise_backprop_input<double>(const DepthwiseShape&, const double*, const double*, double*);
template void depthwise_backprop_kernel<float>(const DepthwiseShape&, const float*, const float*, float*, float*,
                                               std::int64_t);
template void depthwise_backprop_kernel<double>(const DepthwiseShape&, const double*, const double*, double*, double*,
                                                std::int64_t);

}  // namespace kiln::detail
