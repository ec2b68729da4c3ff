#pragma once
// Sliding windows over 1-D and 2-D images, shared by the convolution and pooling ops (internal). A 1-D
// input (batch, length, channels) is a 2-D one of height 1, so every kernel is written once, for 2-D.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/op.hpp>
#include <kiln/core/shape.hpp>

namespace kiln::detail {

// Keras's paddings: "valid" (no padding: windows that fit), "same" (output length ceil(in / stride),
// the padding split with the odd element after, as TensorFlow and JAX split it), "causal" (1-D only:
// dilation * (size - 1) zeros before, none after, so output t sees inputs up to t).
enum class Padding { valid, same, causal };

// One spatial axis of a window: its input length, window size, stride, dilation, the zeros padded before
// the input, and the output length. `in` and `out` are Shape::unknown when the input length is.
struct WindowAxis {
  std::int64_t in = 1, size = 1, stride = 1, dilation = 1, pad_before = 0, out = 1;
  std::int64_t span() const { return dilation * (size - 1) + 1; }  // input positions one window covers
  // The input position of window tap `tap` of output `o`; outside [0, in) it reads a padded zero.
  std::int64_t input_at(std::int64_t o, std::int64_t tap) const { return o * stride - pad_before + tap * dilation; }
};
WindowAxis window_axis(std::int64_t in, std::int64_t size, std::int64_t stride, std::int64_t dilation, Padding padding);
// For shape rules, before window_axis: "" when the window's arithmetic (its span, the padding, the input
// positions it reads) fits in 64 bits for an input of length `in` (or of any length up to 2^48 when unknown),
// else why not. Sizes, strides and dilations come from files and users: a dilation of 2^63 must be refused,
// not wrap around.
std::string window_overflow(std::int64_t in, std::int64_t size, std::int64_t stride, std::int64_t dilation);
// The taps of one window along `axis` that read the input rather than padding, [first, last), in O(1): work
// bounded by the input and the output, whatever the window's size.
struct TapRange {
  std::int64_t first, last;
};
TapRange input_taps(const WindowAxis& axis, std::int64_t o);

// Up to two ints, one per spatial axis (a 1-D or 2-D window's sizes, strides, lengths), held without the
// heap: kernels rebuild their geometry at every launch, and a step allocates nothing. A 1-D list is the
// width of an image of height 1.
struct SpatialInts {
  std::array<std::int64_t, 2> values{1, 1};
  int rank = 0;  // 0: no list

  SpatialInts() = default;
  explicit SpatialInts(const std::vector<std::int64_t>& list);  // 1 or 2 values
  SpatialInts(const std::int64_t* first, int count);            // `count` (1 or 2) values from `first`
  bool empty() const { return rank == 0; }
  std::int64_t height() const { return rank == 2 ? values[0] : 1; }
  std::int64_t width() const { return values[static_cast<std::size_t>(rank == 2 ? 1 : 0)]; }
};

// The checked attributes of a windowed op: "strides", "dilation_rate" (ints, one per spatial axis),
// "padding" and "data_format" ("channels_last" or "channels_first"). Each `fail`s through `context`.
// Without a "dilation_rate" (pooling), every dilation is 1.
// An optional "pad_before" (ints) replaces the padding mode's zeros before each axis; such an op takes its
// output lengths from elsewhere (an attribute or another input), since padding alone does not fix them.
struct WindowAttributes {
  SpatialInts strides, dilation;
  Padding padding = Padding::valid;
  bool channels_last = true;
  SpatialInts pad_before;  // empty: from `padding`
};
WindowAttributes window_attributes(const InferContext& context, int spatial_rank);
// The same without checks, for kernels and workspace functions (the shape rule checked them).
WindowAttributes window_attributes(const Attributes& attributes);

// A batch of 1-D or 2-D images in either layout, as (batch, channels, height, width) and the element
// strides of each of those axes. 1-D inputs have height 1.
struct ImageLayout {
  std::int64_t batch = 0, channels = 0, height = 1, width = 1;
  std::int64_t batch_stride = 0, channel_stride = 0, row_stride = 0, column_stride = 0;
  std::int64_t positions() const { return height * width; }
};
ImageLayout image_layout(const Shape& shape, bool channels_last);
// The layout of an image shape given by its parts (an image of height 1 is a 1-D one).
ImageLayout image_layout(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
                         bool channels_last);
ImageLayout image_layout(std::int64_t batch, std::int64_t channels, const SpatialInts& spatial, bool channels_last);

// The spatial dimensions of an image shape (1 or 2 of them), and the shape rebuilt from its parts, for
// shape rules and backward rules; kernels use spatial_ints.
std::vector<std::int64_t> spatial_dims(const Shape& shape, bool channels_last);
SpatialInts spatial_ints(const Shape& shape, bool channels_last);
Shape image_shape(std::int64_t batch, std::int64_t channels, const std::vector<std::int64_t>& spatial,
                  bool channels_last);

// "(3, 5)", "(3,)": a list of sizes as messages show it, in Python's tuple spelling.
std::string ints_text(const std::vector<std::int64_t>& values);

// Parses Keras's padding names (lower case, as Keras stores them); `ok` is false for any other.
Padding parse_padding(const std::string& name, bool& ok);
const char* padding_name(Padding padding);

}  // namespace kiln::detail
