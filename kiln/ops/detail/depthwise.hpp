#pragma once
// Internal to ops/convolution.cpp: the direct kernels of a depthwise convolution on channels_last data (every
// input channel its own group: Keras's DepthwiseConv1D/2D, and SeparableConv's first half). The im2col + GEMM
// path would run one GEMM per channel with one or a few output columns; these loop over output positions and
// taps with the channels innermost (contiguous in channels_last), so each tap is one vector multiply-add over
// a pixel's channels. 1-D inputs are images of height 1, as in ops/detail/window.
#include <cstddef>
#include <cstdint>

#include <kiln/ops/detail/window.hpp>

namespace kiln::detail {

// A depthwise convolution's shape: x (batch, rows.in, cols.in, channels), the kernel (rows.size, cols.size,
// 1, channels · multiplier) as Keras's grouped kernel holds it (filter f reads channel f / multiplier), and
// y (batch, rows.out, cols.out, channels · multiplier).
struct DepthwiseShape {
  std::int64_t batch = 0, channels = 0, multiplier = 1;
  WindowAxis rows, cols;
  std::int64_t filters() const { return channels * multiplier; }
  std::int64_t taps() const { return rows.size * cols.size; }
};

// y = the convolution of x with the kernel.
template <class T>
void depthwise_forward(const DepthwiseShape& s, const T* x, const T* kernel, T* y);
// dx = its gradient with respect to x, from dy (y's shape).
template <class T>
void depthwise_backprop_input(const DepthwiseShape& s, const T* dy, const T* kernel, T* dx);
// dkernel = its gradient with respect to the kernel, from x and dy. Each worker sums into its own part of
// `partials` (depthwise_kernel_partial_elements each, `slots` of them; workers are capped at slots).
template <class T>
void depthwise_backprop_kernel(const DepthwiseShape& s, const T* x, const T* dy, T* dkernel, T* partials,
                               std::int64_t slots);
// The elements of one worker's partial kernel gradient; the workers backprop_kernel would use now.
std::int64_t depthwise_kernel_partial_elements(const DepthwiseShape& s);
int depthwise_kernel_workers(const DepthwiseShape& s);

}  // namespace kiln::detail
