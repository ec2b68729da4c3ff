#include <kiln/data/data.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>

namespace kiln {

Array pad_sequences(const std::vector<std::vector<std::int64_t>>& sequences, const PadOptions& options) {
  if (!is_floating(options.dtype))  // (token ids as int8 would saturate at 127)
    throw DTypeError(std::string("pad_sequences: dtype must be float32 or float64, not ") + dtype_name(options.dtype));
  if (options.padding != "pre" && options.padding != "post")
    throw ValueError("pad_sequences: padding must be \"pre\" or \"post\", got \"" + options.padding + "\"");
  if (options.truncating != "pre" && options.truncating != "post")
    throw ValueError("pad_sequences: truncating must be \"pre\" or \"post\", got \"" + options.truncating + "\"");
  if (options.maxlen < -1)
    throw ValueError("pad_sequences: maxlen must be -1 (the longest sequence) or at least 0, got " +
                     std::to_string(options.maxlen));
  if (options.pad_to_multiple_of < 1)
    throw ValueError("pad_sequences: pad_to_multiple_of must be at least 1, got " +
                     std::to_string(options.pad_to_multiple_of));
  std::size_t length = 0;
  for (const std::vector<std::int64_t>& sequence : sequences) length = std::max(length, sequence.size());
  const auto multiple = static_cast<std::size_t>(options.pad_to_multiple_of);
  length = (length + multiple - 1) / multiple * multiple;
  if (options.maxlen >= 0) length = static_cast<std::size_t>(options.maxlen);
  const auto rows = static_cast<std::int64_t>(sequences.size());
  Array padded = Array::full(Shape{rows, static_cast<std::int64_t>(length)}, options.value, options.dtype);
  for (std::size_t r = 0; r < sequences.size(); ++r) {
    const std::vector<std::int64_t>& sequence = sequences[r];
    const std::size_t kept = std::min(length, sequence.size());
    // Keras's truncating: "pre" keeps the last tokens, "post" the first; padding: "pre" right-aligns.
    const std::size_t from = options.truncating == "pre" ? sequence.size() - kept : 0;
    const std::size_t to = options.padding == "pre" ? length - kept : 0;
    for (std::size_t i = 0; i < kept; ++i)
      padded.set_flat(r * length + to + i, static_cast<double>(sequence[from + i]));
  }
  return padded;
}

Array padding_mask(const Array& padded, double value) {
  Array mask(padded.shape(), padded.dtype());
  for (std::size_t i = 0; i < padded.size(); ++i) mask.set_flat(i, padded.flat(i) == value ? 0.0 : 1.0);
  return mask;
}

}  // namespace kiln
