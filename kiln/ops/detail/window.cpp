#include <kiln/ops/detail/window.hpp>

#include <algorithm>
#include <string>

#include <kiln/core/attributes.hpp>

namespace kiln::detail {

SpatialInts::SpatialInts(const std::vector<std::int64_t>& list)
    : SpatialInts(list.data(), static_cast<int>(list.size())) {}

SpatialInts::SpatialInts(const std::int64_t* first, int count) : rank(std::clamp(count, 0, 2)) {
  for (int i = 0; i < rank; ++i) values[static_cast<std::size_t>(i)] = first[i];
}

WindowAxis window_axis(std::int64_t in, std::int64_t size, std::int64_t stride, std::int64_t dilation,
                       Padding padding) {
  WindowAxis axis;
  axis.in = in;
  axis.size = size;
  axis.stride = stride;
  axis.dilation = dilation;
  if (padding == Padding::causal) axis.pad_before = axis.span() - 1;
  if (in == Shape::unknown) {
    axis.out = Shape::unknown;
    return axis;
  }
  if (padding == Padding::valid) {
    // May be 0 or negative: the shape rules refuse a window that does not fit.
    axis.out = in >= axis.span() ? (in - axis.span()) / stride + 1 : 0;
  } else {
    axis.out = (in + stride - 1) / stride;
    if (padding == Padding::same) {
      const std::int64_t needed = (axis.out - 1) * stride + axis.span() - in;
      axis.pad_before = needed > 0 ? needed / 2 : 0;
    }
  }
  return axis;
}

std::string window_overflow(std::int64_t in, std::int64_t size, std::int64_t stride, std::int64_t dilation) {
  constexpr std::int64_t longest_unknown = std::int64_t{1} << 48;
  const std::int64_t length = in == Shape::unknown ? longest_unknown : in;
  std::int64_t reach = 0, span = 0, end = 0;
  if (__builtin_mul_overflow(dilation, size - 1, &reach) || __builtin_add_overflow(reach, 1, &span))
    return "the window's span, dilation_rate " + std::to_string(dilation) + " x (size " + std::to_string(size) +
           " - 1) + 1, overflows 64 bits";
  // "same": (out - 1) * stride + span with out <= length; "causal": span - 1 zeros before the input.
  if (__builtin_add_overflow(length, stride, &end) || __builtin_add_overflow(end, span, &end))
    return "the window (span " + std::to_string(span) + ", stride " + std::to_string(stride) +
           ") on an input of length " + std::to_string(length) + " overflows 64 bits";
  return "";
}

TapRange input_taps(const WindowAxis& axis, std::int64_t o) {
  // Tap t reads position start + t * dilation, inside the input when 0 <= it < in.
  const std::int64_t start = o * axis.stride - axis.pad_before;
  std::int64_t first = start >= 0 ? 0 : (-start + axis.dilation - 1) / axis.dilation;
  std::int64_t last = start >= axis.in ? 0 : (axis.in - 1 - start) / axis.dilation + 1;
  first = std::min(first, axis.size);
  last = std::max(first, std::min(last, axis.size));
  return {first, last};
}

Padding parse_padding(const std::string& name, bool& ok) {
  ok = true;
  if (name == "valid") return Padding::valid;
  if (name == "same") return Padding::same;
  if (name == "causal") return Padding::causal;
  ok = false;
  return Padding::valid;
}

const char* padding_name(Padding padding) {
  switch (padding) {
    case Padding::valid:
      return "valid";
    case Padding::same:
      return "same";
    case Padding::causal:
      return "causal";
  }
  return "valid";
}

std::string ints_text(const std::vector<std::int64_t>& values) {
  std::string text = "(";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + (values.size() == 1 ? ",)" : ")");
}

WindowAttributes window_attributes(const Attributes& attributes) {
  WindowAttributes window;
  window.strides = SpatialInts(attributes.get_ints("strides"));
  // Pooling windows have no dilation attribute: their taps are adjacent.
  window.dilation.rank = window.strides.rank;  // values stay {1, 1}
  if (attributes.has("dilation_rate")) window.dilation = SpatialInts(attributes.get_ints("dilation_rate"));
  bool ok = true;
  window.padding = parse_padding(attributes.get_string("padding"), ok);
  window.channels_last = attributes.get_string("data_format") != "channels_first";
  if (attributes.has("pad_before")) window.pad_before = SpatialInts(attributes.get_ints("pad_before"));
  return window;
}

WindowAttributes window_attributes(const InferContext& context, int spatial_rank) {
  const Attributes& attributes = context.attributes();
  const std::string& format = attributes.get_string("data_format");
  if (format != "channels_last" && format != "channels_first")
    context.fail("data_format must be 'channels_last' or 'channels_first', got '" + format + "'");
  const std::string& padding = attributes.get_string("padding");
  bool ok = true;
  parse_padding(padding, ok);
  if (!ok) context.fail("padding must be 'valid', 'same' or 'causal', got '" + padding + "'");
  if (padding == "causal" && spatial_rank != 1) context.fail("'causal' padding is only for 1-D inputs");
  for (const char* key : {"strides", "dilation_rate", "pad_before"}) {
    if (!attributes.has(key)) continue;
    const std::vector<std::int64_t>& values = attributes.get_ints(key);
    if (static_cast<int>(values.size()) != spatial_rank)
      context.fail(std::string(key) + " " + ints_text(values) + " must have " + std::to_string(spatial_rank) +
                   " value(s), one per spatial axis");
    const std::int64_t least = std::string(key) == "pad_before" ? 0 : 1;
    for (const std::int64_t value : values)
      if (value < least)
        context.fail(std::string(key) + (least ? " must be positive, got " : " must not be negative, got ") +
                     ints_text(values));
  }
  return window_attributes(attributes);
}

ImageLayout image_layout(const Shape& shape, bool channels_last) {
  return image_layout(shape[0], channels_last ? shape[shape.rank() - 1] : shape[1], spatial_ints(shape, channels_last),
                      channels_last);
}

ImageLayout image_layout(std::int64_t batch, std::int64_t channels, const SpatialInts& spatial, bool channels_last) {
  return image_layout(batch, channels, spatial.height(), spatial.width(), channels_last);
}

ImageLayout image_layout(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
                         bool channels_last) {
  ImageLayout layout;
  layout.batch = batch;
  layout.channels = channels;
  layout.height = height;
  layout.width = width;
  if (channels_last) {
    layout.channel_stride = 1;
    layout.column_stride = layout.channels;
    layout.row_stride = layout.width * layout.channels;
  } else {
    layout.column_stride = 1;
    layout.row_stride = layout.width;
    layout.channel_stride = layout.height * layout.width;
  }
  layout.batch_stride = layout.channels * layout.height * layout.width;
  return layout;
}

SpatialInts spatial_ints(const Shape& shape, bool channels_last) {
  return SpatialInts(shape.dims().data() + (channels_last ? 1 : 2), shape.rank() - 2);
}

std::vector<std::int64_t> spatial_dims(const Shape& shape, bool channels_last) {
  const int first = channels_last ? 1 : 2;
  std::vector<std::int64_t> dims;
  for (int axis = first; axis < first + shape.rank() - 2; ++axis) dims.push_back(shape[axis]);
  return dims;
}

Shape image_shape(std::int64_t batch, std::int64_t channels, const std::vector<std::int64_t>& spatial,
                  bool channels_last) {
  std::vector<std::int64_t> dims{batch};
  if (!channels_last) dims.push_back(channels);
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  if (channels_last) dims.push_back(channels);
  return Shape(std::move(dims));
}

}  // namespace kiln::detail
