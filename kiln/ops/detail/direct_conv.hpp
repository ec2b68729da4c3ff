#pragma once
// Internal to ops/convolution.cpp: the direct kernel of a convolution whose windows are a few values long (a
// first layer: one or three channels under a 3 × 3 window), on channels_last data with one group. There im2col
// copies runs of a few floats per output position and the product has a handful of terms per output: the copy
// costs more than the arithmetic. This kernel reads the input where it lies instead, a few pixels of an output
// row at a time, with the filters in vector registers (one broadcast input value times a vector of a tap's
// filters), and adds the bias and a ReLU before the one store. The kernel's gradient runs the same way round:
// a vector of dy's filters times each tap's broadcast input value, every tap's sum in a register. 1-D inputs are
// images of height 1.
#include <cstdint>

#include <kiln/core/dtype.hpp>
#include <kiln/ops/detail/window.hpp>

namespace kiln::detail {

// x (batch, rows.in, cols.in, channels), the kernel (rows.size, cols.size, channels, filters) and y (batch,
// rows.out, cols.out, filters).
struct DirectConvShape {
  std::int64_t batch = 0, channels = 0, filters = 0;
  WindowAxis rows, cols;
  std::int64_t patch() const { return rows.size * cols.size * channels; }  // values of one window
};

// The longest window the direct kernel takes.
constexpr std::int64_t direct_conv_max_patch = 32;

// Whether the direct kernel runs this convolution: a window of at most direct_conv_max_patch values and filters
// that fill whole vectors of `dtype`.
bool direct_conv_fits(const DirectConvShape& s, DType dtype);

// y = relu?(conv(x, kernel) + bias); `bias` may be null (none), relu lets NaN through as kiln>Relu does.
template <class T>
void direct_conv_forward(const DirectConvShape& s, const T* x, const T* kernel, const T* bias, bool relu, T* y);

// dkernel = the kernel's gradient from x and dy (y's shape): each worker sums its output rows into its own part of
// `partials` (direct_conv_kernel_partial_elements each, `slots` of them; workers are capped at slots), added in
// worker order at the end, so a thread count always gives the same bits.
template <class T>
void direct_conv_backprop_kernel(const DirectConvShape& s, const T* x, const T* dy, T* dkernel, T* partials,
                                 std::int64_t slots);
// The elements of one worker's part, and the workers direct_conv_backprop_kernel would use now.
std::int64_t direct_conv_kernel_partial_elements(const DirectConvShape& s);
int direct_conv_kernel_workers(const DirectConvShape& s);

}  // namespace kiln::detail
