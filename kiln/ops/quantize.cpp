// Keras's int8 quantization (keras/src/quantizers, Dense._int8_call): int8 kernels with a float scale per output
// column, applied to float activations.
//   QuantizedMatMul  x (..., K) float, kernel (K, N) int8, kernel_scale (N,) float -> (..., N):
//                    (Keras's EinsumDense projections too: attribute kernel_input_axes a, the kernel's first a axes
//                    are K and the others N, e.g. (d_model, heads, depth) with a = 1; the scale any shape holding
//                    N values, as Keras keeps them, (1, 1, heads, depth); attribute transpose_kernel: the kernel is
//                    stored (N, K), a tied ReversibleEmbedding's (vocabulary, features) table read in reverse)
//                    with quantize_inputs (Keras's default AbsMaxQuantizer on the inputs), each row of x is
//                    quantized as Keras's AbsMaxQuantizer(axis=-1) does it, s = 127 / (max|x_row| + 1e-7),
//                    q = clip(round(x_row · s), -127, 127) (ties to even), and y = (q · kernel, in int32) /
//                    (kernel_scale · s), every step in x's dtype as Keras's numpy arithmetic does it; without,
//                    y = (x · kernel) / kernel_scale with the kernel's values as floats (an int8 layer whose
//                    activation_quantizer is null). Differentiable in x only, as Keras's custom gradient:
//                    dx = dy · (kernel / kernel_scale)ᵀ, the float kernel the int8 one stands for.
//                    Attribute int4_units N > 0: the kernel is Keras's packed int4 (K, ceil(N/2)) (two values a
//                    byte, the even unit in the low nibble; an EinsumDense's flattened to 2-D), unpacked into the
//                    workspace each step as Keras unpacks it, then the same product (Keras's per-channel int4).
//   Dequantize       q int8, scale float -> q / scale in scale's dtype (Keras's float_kernel): the scale's N values
//                    for the trailing axes of q making N values (a kernel's units), or with attribute leading, for
//                    the leading ones (the rows of a transposed kernel).
//   DequantizeInt4   kernel (K, ceil(N/2)) int8 holding two int4 values a byte (the even column in the low nibble),
//                    scale (G, N) float, zero (G, N) int8, g_idx (K,) float -> (K, N): (value - zero[g]) · scale[g]
//                    with g = g_idx[k], Keras's int4 sub-channel kernel (Dense._int4_call's dequantize_with_sz_map).
//                    A g_idx entry that is not a group is refused when the step runs. Not differentiable.
//   QuantizedGather  table (V, ...) int8, scale (V,) float, ids (...) float -> (ids..., table's other axes): each
//                    id's row as floats divided by that row's scale (Keras's Embedding._int8_call). Ids are
//                    checked as gather checks them; nothing differentiable (the weights are not trained).
//                    Attribute int4_columns D > 0: the table is Keras's packed int4 (V, ceil(D/2)); per row
//                    (scale (V,)) each value / scale[id] (Keras's per-channel int4 Embedding), or by groups of
//                    columns with two more inputs, zero (V, G) int8 and g_idx (D,): (value - zero[id, g]) ·
//                    scale[id, g] with g = g_idx[column] (Keras's sub-channel int4 Embedding, scale (V, G)).
// The int8 products run on detail::gemm_s8s8s32 (oneDNN's VNNI kernels where the CPU has them). The activations'
// int8 copy, their scales and the int32 sums live in the op's workspace: a step allocates nothing.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/int4_rows.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// Keras's AbsMaxQuantizer epsilon (backend.epsilon()) and int8 range.
constexpr double quantize_epsilon = 1e-7;
constexpr double int8_limit = 127;

// One row's AbsMaxQuantizer, as Keras's numpy backend computes it in T: scale = 127 / (max|x| + eps), then
// clip(round(x · scale)) with round-half-to-even (std::nearbyint in the default rounding mode, as np.round).
template <class T>
T quantize_row(const T* x, std::int64_t k, std::int8_t* q) {
  T largest = T(0);
  bool nan = false;  // Keras's max of a row holding a NaN is NaN, and so are its scale and outputs
  for (std::int64_t p = 0; p < k; ++p) {
    largest = std::max(largest, std::abs(x[p]));
    nan = nan || std::isnan(x[p]);
  }
  if (nan) largest = std::numeric_limits<T>::quiet_NaN();
  const T scale = T(int8_limit) / (largest + T(quantize_epsilon));
  for (std::int64_t p = 0; p < k; ++p) {
    const T value = std::nearbyint(x[p] * scale);
    // (a NaN row: max ignores it, the product is NaN, and it becomes 0 here rather than an undefined conversion)
    q[p] = std::isnan(value) ? std::int8_t{0}
                             : static_cast<std::int8_t>(std::clamp(value, T(-int8_limit), T(int8_limit)));
  }
  return scale;
}

// A nibble as a signed int4 value, [-8, 7].
inline int int4_of(std::int8_t packed, bool high) {
  const int byte = static_cast<std::uint8_t>(packed);
  const int nibble = high ? (byte >> 4) : (byte & 0x0f);
  return nibble >= 8 ? nibble - 16 : nibble;
}
inline int int4_at(const std::int8_t* packed_row, std::int64_t column) {
  return int4_of(packed_row[column >> 1], (column & 1) != 0);
}

std::int64_t int4_units(const Attributes& attributes) {
  return attributes.has("int4_units") ? attributes.get_int("int4_units") : 0;
}
bool flag(const Attributes& attributes, const char* name) { return attributes.has(name) && attributes.get_bool(name); }
std::int64_t group_axis(const Attributes& attributes) {
  return attributes.has("group_axis") ? attributes.get_int("group_axis") : 0;
}

// A packed int4 2-D array as Keras's unpack_int4 reads it: along its columns (axis -1) or its rows (axis 0; the
// rows 2i and 2i + 1 of a column in byte i, low nibble first). `rows` × `columns` is the unpacked shape.
struct Int4Matrix {
  std::int64_t rows = 0, columns = 0;
  bool packed_rows = false;
  std::int8_t at(const std::int8_t* packed, std::int64_t r, std::int64_t c) const {
    if (!packed_rows) return static_cast<std::int8_t>(int4_at(packed + r * ((columns + 1) / 2), c));
    return static_cast<std::int8_t>(int4_of(packed[(r >> 1) * columns + c], (r & 1) != 0));
  }
  void unpack(const std::int8_t* packed, std::int8_t* out) const {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < columns; ++c) out[r * columns + c] = at(packed, r, c);
  }
};

// The unpacked shape of a packed kernel whose packed axis holds `units` values.
Int4Matrix int4_matrix(const Shape& stored, std::int64_t units, bool packed_rows) {
  return packed_rows ? Int4Matrix{units, stored.dim(1), true} : Int4Matrix{stored.dim(0), units, false};
}

// Keras's dequantize_with_sz_map of an unpacked int4 matrix: groups along `axis` (g_idx one entry per row, or per
// column), scale and zero (groups, columns) for rows or (rows, groups) for columns: (value - zero) · scale, in T.
// A g_idx entry that is not a group is refused.
template <class T>
void check_groups(const KernelContext& k, const T* g_idx, std::int64_t count, std::int64_t groups) {
  for (std::int64_t i = 0; i < count; ++i) {
    const double group = static_cast<double>(g_idx[i]);
    if (!(group >= 0.0 && group < static_cast<double>(groups) && group == std::floor(group)))
      throw ValueError(k.node->describe() + ": g_idx[" + std::to_string(i) + "] = " + std::to_string(group) +
                       " is not one of the " + std::to_string(groups) + " groups");
  }
}

// Rows [first, last) of it (all by default) into `out`, compact; g_idx checked unless `checked`.
template <class T, class Z>
void dequantize_groups(const KernelContext& k, const Int4Matrix& m, const std::int8_t* packed, const T* scale,
                       const Z* zero, const T* g_idx, std::int64_t groups, std::int64_t axis, T* out,
                       std::int64_t first = 0, std::int64_t last = -1, bool checked = false) {
  if (last < 0) last = m.rows;
  if (!checked) check_groups(k, g_idx, axis == 0 ? m.rows : m.columns, groups);
  for (std::int64_t r = first; r < last; ++r)
    for (std::int64_t c = 0; c < m.columns; ++c) {
      const std::int64_t at = axis == 0 ? static_cast<std::int64_t>(g_idx[r]) * m.columns + c
                                        : r * groups + static_cast<std::int64_t>(g_idx[c]);
      out[(r - first) * m.columns + c] = (static_cast<T>(m.at(packed, r, c)) - static_cast<T>(zero[at])) * scale[at];
    }
}

// Rows of a kernel by groups made float at a time, for larger products (its stored rows: a multiple of 2, so that
// rows packed two a byte stay whole): about 1 MB of floats, whatever the kernel's size.
std::int64_t int4_block_rows(const Int4Matrix& m) {
  const std::int64_t rows = std::max<std::int64_t>(2, (std::int64_t{1} << 18) / std::max<std::int64_t>(m.columns, 1));
  return std::min(m.rows, rows / 2 * 2);
}

struct Layout {
  std::int64_t rows = 0, k = 0, n = 0;
};

// The kernel's (K, N): its first `input_axes` dimensions make K, the others N; transposed, (N, K).
std::pair<std::int64_t, std::int64_t> kernel_extents(const Shape& kernel, std::int64_t input_axes, bool transposed) {
  if (transposed) return {kernel.dim(1), kernel.dim(0)};
  std::int64_t k = 1, n = 1;
  for (int axis = 0; axis < kernel.rank(); ++axis) {
    const std::int64_t dim = kernel.dim(axis);
    std::int64_t& target = axis < input_axes ? k : n;
    target = dim == Shape::unknown || target == Shape::unknown ? Shape::unknown : target * dim;
  }
  return {k, n};
}

Layout layout_of(const Shape& x, const Shape& kernel, const Attributes& attributes) {
  Layout l;
  std::tie(l.k, l.n) = kernel_extents(kernel, attributes.get_int("kernel_input_axes"), attributes.get_bool("transpose_kernel"));
  if (int4_units(attributes) > 0) {  // the packed kernel's unpacked (K, N), or (N, K) transposed
    const Int4Matrix m = int4_matrix(kernel, int4_units(attributes), flag(attributes, "int4_packed_rows"));
    l.k = attributes.get_bool("transpose_kernel") ? m.columns : m.rows;
    l.n = attributes.get_bool("transpose_kernel") ? m.rows : m.columns;
  }
  l.rows = 1;  // the product of x's leading dimensions (x may have none to multiply when K is 0)
  for (int axis = 0; axis + 1 < x.rank(); ++axis) l.rows *= x.dim(axis);
  return l;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// Workspace: an int4 kernel unpacked; then with quantize_inputs, the rows' int8 copy, their scales and the int32
// sums; without, the kernel as floats.
std::size_t unpacked_bytes(const Layout& l, const Attributes& attributes) {
  return int4_units(attributes) > 0 ? aligned(static_cast<std::size_t>(l.k * l.n)) : 0;
}
// The floats the 5-input form keeps: a block of dequantized rows, or the few-row kernel's partial sums.
std::int64_t int4_dense_floats(const Layout& l, const Shape& kernel, const Attributes& attributes) {
  const Int4Matrix m = int4_matrix(kernel, int4_units(attributes), flag(attributes, "int4_packed_rows"));
  return std::max(int4_block_rows(m) * m.columns, std::min<std::int64_t>(l.rows, 4) * l.n);
}

std::size_t quantized_matmul_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes,
                                       DType dtype) {
  const Layout l = layout_of(inputs[0], inputs[1], attributes);
  if (inputs.size() == 5)  // int4 by groups: a block of the float kernel (or a few rows' sums), then the inputs as
                          // their quantized values and scales
    return aligned(static_cast<std::size_t>(int4_dense_floats(l, inputs[1], attributes)) * dtype_size(dtype)) +
           (attributes.get_bool("quantize_inputs")
                ? aligned(static_cast<std::size_t>(l.rows * l.k) * dtype_size(dtype)) +
                      aligned(static_cast<std::size_t>(l.rows * l.k)) + static_cast<std::size_t>(l.rows) * dtype_size(dtype)
                : 0);
  const std::size_t unpacked = unpacked_bytes(l, attributes);
  if (!attributes.get_bool("quantize_inputs"))
    return unpacked + static_cast<std::size_t>(l.k * l.n) * dtype_size(dtype);
  return unpacked + aligned(static_cast<std::size_t>(l.rows * l.k)) +
         aligned(static_cast<std::size_t>(l.rows) * dtype_size(dtype)) +
         static_cast<std::size_t>(l.rows * l.n) * sizeof(std::int32_t);
}

// Rows of the product per worker, or (few rows, as in generation) columns in blocks of 64.
template <class Body>
void split_product(const Layout& l, const Body& body) {
  const int workers = detail::workers_for_elements(l.rows * l.n * std::max<std::int64_t>(l.k, 1) / 64);
  if (l.rows >= 4 * workers || l.n < 128) {
    detail::parallel_for(l.rows, workers, [&](std::int64_t begin, std::int64_t end, int) {
      body(begin, end, std::int64_t{0}, l.n);
    });
    return;
  }
  const std::int64_t blocks = (l.n + 63) / 64;
  detail::parallel_for(blocks, workers, [&](std::int64_t begin, std::int64_t end, int) {
    body(std::int64_t{0}, l.rows, begin * 64, std::min(l.n, end * 64));
  });
}

template <class T>
void quantized_matmul_kernel(const KernelContext& k) {
  const Layout l = layout_of(k.input_shape(0), k.input_shape(1), k.attributes());
  const bool transposed = k.attributes().get_bool("transpose_kernel");
  const T* x = k.in<T>(0);
  const auto* kernel = k.in<std::int8_t>(1);
  const T* kernel_scale = k.in<T>(2);
  T* y = k.out<T>();
  if (l.rows == 0 || l.n == 0) return;
  if (l.k == 0) {  // an empty sum: zeros, as Keras's matmul gives (then the bias)
    std::fill(y, y + l.rows * l.n, T(0));
    return;
  }
  auto* bytes = static_cast<unsigned char*>(k.workspace);
  const bool packed_rows = flag(k.attributes(), "int4_packed_rows");
  if (k.num_inputs == 5) {
    // Keras's int4 by groups: the float kernel (value - zero) · scale times the inputs, as they are or quantized per
    // row (their values as floats, each sum then divided by the row's scale: Keras's matmul of int8 inputs by a
    // float kernel). Workspace: a block of the float kernel (or the few-row kernel's partial sums), then the
    // quantized rows as floats, as int8 and their scales.
    const Int4Matrix m = int4_matrix(k.input_shape(1), int4_units(k.attributes()), packed_rows);
    const std::int64_t axis = group_axis(k.attributes()), groups = k.input_shape(2).dim(axis);
    const T* zero = k.in<T>(3);
    const T* g_idx = k.in<T>(4);
    check_groups(k, g_idx, axis == 0 ? m.rows : m.columns, groups);
    T* dense = reinterpret_cast<T*>(bytes);
    bytes += aligned(static_cast<std::size_t>(int4_dense_floats(l, k.input_shape(1), k.attributes())) * sizeof(T));
    const T* rows = x;
    T* row_scale = nullptr;
    if (k.attributes().get_bool("quantize_inputs")) {
      T* qx = reinterpret_cast<T*>(bytes);
      auto* q = reinterpret_cast<std::int8_t*>(bytes + aligned(static_cast<std::size_t>(l.rows * l.k) * sizeof(T)));
      row_scale = reinterpret_cast<T*>(bytes + aligned(static_cast<std::size_t>(l.rows * l.k) * sizeof(T)) +
                                       aligned(static_cast<std::size_t>(l.rows * l.k)));
      for (std::int64_t i = 0; i < l.rows; ++i) {
        row_scale[i] = quantize_row(x + i * l.k, l.k, q + i * l.k);
        for (std::int64_t p = 0; p < l.k; ++p) qx[i * l.k + p] = static_cast<T>(q[i * l.k + p]);
      }
      rows = qx;
    }
    if constexpr (std::is_same_v<T, float>) {
      // A token's few rows read the packed kernel directly, dequantizing each value as it is read (half a byte a
      // weight) instead of making the kernel float first: a Dense or EinsumDense kernel (inputs not quantized) ...
      if (l.rows <= 4 && l.k >= 1 && !packed_rows && !transposed && axis == 0 && row_scale == nullptr &&
          detail::int4_rows_available()) {
        detail::parallel_for((l.n + 63) / 64, detail::workers_for_elements(l.rows * l.n * l.k / 16),
                             [&](std::int64_t begin, std::int64_t end, int) {
                               detail::int4_rows(l.rows, l.n, l.k, x, kernel, kernel_scale, zero, g_idx, y, dense,
                                                 begin * 64, std::min(l.n, end * 64));
                             });
        return;
      }
      // ... or a tied table in reverse, its groups along its columns as Keras's g_idx makes them, blocks of a
      // multiple of 16 columns.
      if (l.rows <= 4 && l.k >= 1 && !packed_rows && transposed && axis == 1 && detail::int4_rows_available()) {
        const std::int64_t block = std::find_if(g_idx, g_idx + l.k, [](float g) { return g != 0.0f; }) - g_idx;
        bool standard = block > 0 && (block % 16 == 0 || block >= l.k) && (l.k - 1) / block + 1 == groups;
        for (std::int64_t c = 0; c < l.k && standard; ++c) standard = g_idx[c] == static_cast<float>(c / block);
        if (standard) {
          detail::parallel_for(l.n, detail::workers_for_elements(l.rows * l.n * l.k / 16),
                               [&](std::int64_t begin, std::int64_t end, int) {
                                 detail::int4_rows_transposed(l.rows, l.n, l.k, groups, block, rows, kernel,
                                                              kernel_scale, zero, y, row_scale, begin, end);
                               });
          return;
        }
      }
    }
    // Otherwise as Keras, the float kernel a block of its stored rows at a time (~1 MB whatever the kernel).
    const std::int64_t block = int4_block_rows(m);
    for (std::int64_t first = 0; first < m.rows; first += block) {
      const std::int64_t last = std::min(m.rows, first + block);
      dequantize_groups<T, T>(k, m, kernel, kernel_scale, zero, g_idx, groups, axis, dense, first, last, true);
      if (transposed)  // stored (N, K): columns [first, last) of y
        detail::gemm({l.rows, last - first, l.k, false, true, l.k, m.columns, l.n, false}, rows, dense, y + first);
      else  // stored (K, N): rows [first, last) of the sum over K, added up
        detail::gemm({l.rows, l.n, last - first, false, false, l.k, m.columns, l.n, first > 0}, rows + first, dense, y);
    }
    if (m.rows == 0 && !transposed) std::fill(y, y + l.rows * l.n, T(0));  // (K = 0: an empty sum)
    if (row_scale != nullptr)
      for (std::int64_t i = 0; i < l.rows; ++i)
        for (std::int64_t j = 0; j < l.n; ++j) y[i * l.n + j] /= row_scale[i];
    return;
  }
  if (int4_units(k.attributes()) > 0) {  // Keras's unpack_int4 of the packed kernel, every call
    auto* unpacked = reinterpret_cast<std::int8_t*>(bytes);
    int4_matrix(k.input_shape(1), int4_units(k.attributes()), packed_rows).unpack(kernel, unpacked);
    kernel = unpacked;
    bytes += unpacked_bytes(l, k.attributes());
  }
  if (!k.attributes().get_bool("quantize_inputs")) {
    // Keras's matmul of float inputs by the int8 kernel (promoted to floats), then the division by its scale.
    T* dense = reinterpret_cast<T*>(bytes);
    for (std::int64_t i = 0; i < l.k * l.n; ++i) dense[i] = static_cast<T>(kernel[i]);
    detail::gemm({l.rows, l.n, l.k, false, transposed, l.k, transposed ? l.k : l.n, l.n, false}, x, dense, y);
    detail::parallel_for(l.rows, detail::workers_for_elements(l.rows * l.n), [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i)
        for (std::int64_t j = 0; j < l.n; ++j) y[i * l.n + j] /= kernel_scale[j];
    });
    return;
  }
  auto* q = reinterpret_cast<std::int8_t*>(bytes);
  T* row_scale = reinterpret_cast<T*>(bytes + aligned(static_cast<std::size_t>(l.rows * l.k)));
  auto* sums = reinterpret_cast<std::int32_t*>(bytes + aligned(static_cast<std::size_t>(l.rows * l.k)) +
                                               aligned(static_cast<std::size_t>(l.rows) * sizeof(T)));
  detail::parallel_for(l.rows, detail::workers_for_elements(l.rows * l.k, 4), [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i) row_scale[i] = quantize_row(x + i * l.k, l.k, q + i * l.k);
  });
  split_product(l, [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t col_begin, std::int64_t col_end) {
    detail::gemm_s8s8s32(row_end - row_begin, col_end - col_begin, l.k, q + row_begin * l.k, l.k,
                         transposed ? kernel + col_begin * l.k : kernel + col_begin, transposed ? l.k : l.n,
                         sums + row_begin * l.n + col_begin, l.n, transposed);
    // Keras: cast(sums) / (kernel_scale · inputs_scale), the scales' product first, in T.
    for (std::int64_t i = row_begin; i < row_end; ++i)
      for (std::int64_t j = col_begin; j < col_end; ++j)
        y[i * l.n + j] = static_cast<T>(sums[i * l.n + j]) / (kernel_scale[j] * row_scale[i]);
  });
}

std::size_t dequantize_workspace(const std::vector<Shape>&, const Shape& output, const Attributes& attributes, DType) {
  return int4_units(attributes) > 0 ? static_cast<std::size_t>(output.num_elements()) : 0;
}

template <class T>
void dequantize_kernel(const KernelContext& k) {
  const auto* q = k.in<std::int8_t>(0);
  const T* scale = k.in<T>(1);
  T* out = k.out<T>();
  const std::int64_t n = k.input_shape(1).num_elements(), total = k.output_shape->num_elements();
  if (const std::int64_t units = int4_units(k.attributes()); units > 0 && total > 0) {
    auto* unpacked = static_cast<std::int8_t*>(k.workspace);
    int4_matrix(k.input_shape(0), units, flag(k.attributes(), "int4_packed_rows")).unpack(q, unpacked);
    q = unpacked;
  }
  if (n == 0 || total == 0) return;
  if (k.attributes().get_bool("leading")) {  // the scale runs over the leading axes: one value per block of total / n
    const std::int64_t block = total / n;
    for (std::int64_t i = 0; i < total; ++i) out[i] = static_cast<T>(q[i]) / scale[i / block];
    return;
  }
  for (std::int64_t i = 0; i < total; ++i) out[i] = static_cast<T>(q[i]) / scale[i % n];
}

// Only reached on bad data, so the message may allocate (as gather's).
[[noreturn]] void throw_bad_id(const KernelContext& k, double value, std::size_t position, const Shape& table) {
  std::string message = k.node->describe() + ": index " + std::to_string(value) + " at position " + std::to_string(position);
  message += value == std::floor(value) ? " is out of range [0, " + std::to_string(table[0]) + ")" : " is not an integer";
  throw ValueError(message + " for a table of shape " + table.to_string());
}

template <class T>
void quantized_gather_kernel(const KernelContext& k) {
  const Shape& table_shape = k.input_shape(0);
  const auto* table = k.in<std::int8_t>(0);
  const T* scale = k.in<T>(1);
  const T* ids = k.in<T>(2);
  T* out = k.out<T>();
  const std::int64_t columns = k.attributes().has("int4_columns") ? k.attributes().get_int("int4_columns") : 0;
  const std::int64_t rows = table_shape[0], stored_row = rows == 0 ? 0 : table_shape.num_elements() / rows;
  const std::int64_t row_size = columns > 0 ? columns : stored_row;
  const std::int64_t count = k.input_shape(2).num_elements();
  const bool grouped = k.num_inputs == 5;  // Keras's sub-channel int4: zero points and g_idx
  const auto* zero = grouped ? k.in<std::int8_t>(3) : nullptr;
  const T* g_idx = grouped ? k.in<T>(4) : nullptr;
  const std::int64_t groups = grouped ? k.input_shape(1).dim(1) : 0;
  if (grouped) check_groups(k, g_idx, columns, groups);  // every column's group, once a step
  for (std::int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(ids[i]);
    if (!(value >= 0.0 && value < static_cast<double>(rows) && value == std::floor(value)))
      throw_bad_id(k, value, static_cast<std::size_t>(i), table_shape);
    const auto id = static_cast<std::int64_t>(value);
    const std::int8_t* row = table + id * stored_row;
    T* target = out + i * row_size;
    if (columns == 0) {
      for (std::int64_t j = 0; j < row_size; ++j) target[j] = static_cast<T>(row[j]) / scale[id];
    } else if (!grouped) {  // Keras: cast(unpacked) / scale[id]
      for (std::int64_t j = 0; j < row_size; ++j) target[j] = static_cast<T>(int4_at(row, j)) / scale[id];
    } else {  // Keras's dequantize_with_sz_map: (value - float(zero)) · scale, in T
      for (std::int64_t j = 0; j < row_size; ++j) {
        const auto g = static_cast<std::int64_t>(g_idx[j]);
        target[j] = (static_cast<T>(int4_at(row, j)) - static_cast<T>(zero[id * groups + g])) * scale[id * groups + g];
      }
    }
  }
}

template <class T>
void dequantize_int4_kernel(const KernelContext& k) {
  const std::int64_t axis = group_axis(k.attributes());
  const Int4Matrix m = int4_matrix(k.input_shape(0), k.attributes().get_int("units"), flag(k.attributes(), "packed_rows"));
  dequantize_groups<T, std::int8_t>(k, m, k.in<std::int8_t>(0), k.in<T>(1), k.in<std::int8_t>(2), k.in<T>(3),
                       k.input_shape(1).dim(axis == 0 ? 0 : 1), axis, k.out<T>());
}

// ---- shape rules ----------------------------------------------------------------------------------------------

// The number of values a shape holds, or unknown.
std::int64_t known_elements(const Shape& shape) {
  std::int64_t count = 1;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    if (shape.dim(axis) == Shape::unknown) return Shape::unknown;
    count *= shape.dim(axis);
  }
  return count;
}

// The packed kernel, its scale and zero (groups along group_axis) and g_idx of Keras's int4 by groups; the
// unpacked (rows, columns).
Shape int4_groups_shape(const InferContext& ctx, int first, std::int64_t units, bool packed_rows, std::int64_t axis) {
  const Shape& kernel = ctx.input_shape(first);
  const Shape& scale = ctx.input_shape(first + 1);
  const Shape& zero = ctx.input_shape(first + 2);
  const Shape& g_idx = ctx.input_shape(first + 3);
  if (kernel.rank() != 2) ctx.fail("the packed kernel must be 2-D");
  const std::int64_t packed = kernel.dim(packed_rows ? 0 : 1);
  if (units < 1 || (packed != Shape::unknown && packed != (units + 1) / 2))
    ctx.fail("the packed kernel holds " + std::to_string(packed) + " bytes along its packed axis, not ceil(" +
             std::to_string(units) + " / 2)");
  if (axis != 0 && axis != 1) ctx.fail("group_axis must be 0 (rows) or 1 (columns)");
  const Int4Matrix m = int4_matrix(kernel, units, packed_rows);
  const std::int64_t other = axis == 0 ? m.columns : m.rows;
  if (scale.rank() != 2 || scale.dim(axis == 0 ? 1 : 0) != other || zero != scale)
    ctx.fail(axis == 0 ? "kernel_scale and kernel_zero must both be (groups, columns)"
                       : "the scale and zero must both be (rows, groups)");
  if (g_idx.rank() != 1 || g_idx.dim(0) != (axis == 0 ? m.rows : m.columns))
    ctx.fail(std::string("g_idx must hold one group per ") + (axis == 0 ? "row" : "column"));
  return Shape{m.rows, m.columns};
}

Shape quantized_matmul_shape(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Shape& kernel = ctx.input_shape(1);
  const Shape& scale = ctx.input_shape(2);
  const std::int64_t input_axes = ctx.attributes().get_int("kernel_input_axes");
  const bool transposed = ctx.attributes().get_bool("transpose_kernel");
  if (x.rank() < 1) ctx.fail("x needs at least one dimension");
  const std::int64_t units = int4_units(ctx.attributes());
  if (units != 0) {
    const bool packed_rows = flag(ctx.attributes(), "int4_packed_rows");
    if (units < 0 || kernel.rank() != 2 || input_axes != 1)
      ctx.fail("an int4 kernel is a packed 2-D array");
    const std::int64_t packed = kernel.dim(packed_rows ? 0 : 1);
    if (packed != Shape::unknown && packed != (units + 1) / 2)
      ctx.fail("the packed int4 kernel holds " + std::to_string(packed) + " bytes along its packed axis, not ceil(" +
               std::to_string(units) + " / 2)");
  }
  if (ctx.num_inputs() == 5) {
    if (units == 0) ctx.fail("takes a zero point and g_idx only for an int4 kernel by groups");
    int4_groups_shape(ctx, 1, units, flag(ctx.attributes(), "int4_packed_rows"), group_axis(ctx.attributes()));
  }
  if (transposed ? kernel.rank() != 2 : (input_axes < 1 || input_axes >= kernel.rank()))
    ctx.fail(transposed ? "a transposed kernel must be (units, input_dim)"
                        : "the kernel must have its kernel_input_axes (" + std::to_string(input_axes) +
                              ") input axes, then at least one axis of units");
  auto [k, n] = kernel_extents(kernel, input_axes, transposed);
  if (units > 0) {
    const Int4Matrix m = int4_matrix(kernel, units, flag(ctx.attributes(), "int4_packed_rows"));
    k = transposed ? m.columns : m.rows;
    n = transposed ? m.rows : m.columns;
  }
  if (x.dim(-1) != Shape::unknown && k != Shape::unknown && x.dim(-1) != k)
    ctx.fail("x's last dimension is not the kernel's input_dim (" + std::to_string(k) + ")");
  const std::int64_t scales = known_elements(scale);
  if (ctx.num_inputs() == 3 && (scale.rank() < 1 || (scales != Shape::unknown && n != Shape::unknown && scales != n)))
    ctx.fail("kernel_scale must be (units,), one scale per unit of the kernel (" + std::to_string(n) + "), in any shape");
  if (k > detail::int8_gemm_max_k)
    ctx.fail("input_dim above " + std::to_string(detail::int8_gemm_max_k) + " could overflow the int32 sums");
  std::vector<std::int64_t> dims = x.dims();
  dims.back() = n;
  return Shape(dims);
}

Shape dequantize_shape(const InferContext& ctx) {
  Shape q = ctx.input_shape(0);
  const Shape& scale = ctx.input_shape(1);
  const bool leading = ctx.attributes().get_bool("leading");
  if (const std::int64_t units = int4_units(ctx.attributes()); units != 0) {
    const bool packed_rows = flag(ctx.attributes(), "int4_packed_rows");
    const std::int64_t packed = q.rank() == 2 ? q.dim(packed_rows ? 0 : 1) : 0;
    if (units < 0 || q.rank() != 2 || (packed != Shape::unknown && packed != (units + 1) / 2))
      ctx.fail(std::string("a packed int4 array must be ") +
               (packed_rows ? "(ceil(" + std::to_string(units) + " / 2), columns)"
                            : "(rows, ceil(" + std::to_string(units) + " / 2))"));
    const Int4Matrix m = int4_matrix(q, units, packed_rows);
    q = Shape{m.rows, m.columns};
  }
  // The scale's values cover q's trailing (or leading) axes: the product of some of them.
  std::int64_t covered = 1;
  const std::int64_t scales = known_elements(scale);
  bool fits = scales == 0 && known_elements(q) == 0;
  for (int i = 0; i < q.rank() && scales != Shape::unknown && !fits; ++i) {
    const std::int64_t dim = q.dim(leading ? i : q.rank() - 1 - i);
    if (dim == Shape::unknown) {
      fits = true;  // checked when the step runs, by the sizes
      break;
    }
    covered *= dim;
    fits = covered == scales;
  }
  if (q.rank() < 1 || scale.rank() < 1 || (scales != Shape::unknown && !fits))
    ctx.fail(std::string("the scale must hold one value per entry of q's ") + (leading ? "leading" : "trailing") + " axes");
  return q;
}

Shape dequantize_int4_shape(const InferContext& ctx) {
  return int4_groups_shape(ctx, 0, ctx.attributes().get_int("units"), flag(ctx.attributes(), "packed_rows"),
                           group_axis(ctx.attributes()));
}

Shape quantized_gather_shape(const InferContext& ctx) {
  const Shape& table = ctx.input_shape(0);
  const Shape& scale = ctx.input_shape(1);
  const std::int64_t columns = ctx.attributes().has("int4_columns") ? ctx.attributes().get_int("int4_columns") : 0;
  const bool grouped = ctx.num_inputs() == 5;
  if (table.rank() < 1) ctx.fail("the table needs an axis of rows to pick from");
  if (grouped != (ctx.num_inputs() != 3)) ctx.fail("takes (table, scale, ids) or, int4 by groups, (table, scale, ids, zero, g_idx)");
  if (columns != 0 || grouped) {
    if (columns <= 0 || table.rank() != 2 || (table.dim(1) != Shape::unknown && table.dim(1) != (columns + 1) / 2))
      ctx.fail("an int4 table is packed (rows, ceil(" + std::to_string(columns) + " / 2))");
  }
  if (grouped) {
    const Shape& zero = ctx.input_shape(3);
    const Shape& g_idx = ctx.input_shape(4);
    if (scale.rank() != 2 || scale.dim(0) != table.dim(0) || zero != scale)
      ctx.fail("scale and zero must both be (rows, groups)");
    if (g_idx.rank() != 1 || g_idx.dim(0) != columns) ctx.fail("g_idx must be (" + std::to_string(columns) + ",)");
  } else if (scale.rank() != 1 ||
             (scale.dim(0) != Shape::unknown && table.dim(0) != Shape::unknown && scale.dim(0) != table.dim(0))) {
    ctx.fail("the scale must hold one value per row of the table");
  }
  std::vector<std::int64_t> dims = ctx.input_shape(2).dims();
  if (columns > 0)
    dims.push_back(columns);
  else
    dims.insert(dims.end(), table.dims().begin() + 1, table.dims().end());
  return Shape(dims);
}

// ---- backward -------------------------------------------------------------------------------------------------

std::vector<Tensor> quantized_matmul_backward(const GradContext& g) {
  // Keras's custom gradient: dy times the float kernel the int8 one stands for, as (K, N) (or (N, K) transposed).
  const bool transposed = g.attributes().get_bool("transpose_kernel");
  const Shape& kernel = g.input(1).shape();
  const auto [k, n] = kernel_extents(kernel, g.attributes().get_int("kernel_input_axes"), transposed);
  const std::int64_t units = int4_units(g.attributes());
  const bool packed_rows = flag(g.attributes(), "int4_packed_rows");
  if (g.num_inputs() == 5) {
    // int4 by groups: through the float kernel (value - zero) · scale, each value's zero and scale picked by g_idx
    // along the grouped axis (the zero point in the float dtype here, as an untied reverse map keeps it)
    const Int4Matrix m = int4_matrix(kernel, units, packed_rows);
    Array ones(Shape{m.columns}, g.input(2).dtype());
    for (std::size_t i = 0; i < ones.size(); ++i) ones.set_flat(i, 1.0);
    const Tensor values = ops::dequantize(g.input(1), ops::constant(g.input(1).graph(), ones, "ones"), false, units,
                                          packed_rows);
    const bool columns = group_axis(g.attributes()) == 1;  // (scale and zero (rows, groups): picked by column)
    const auto picked = [&](const Tensor& per_group) {
      return columns ? ops::transpose(ops::gather(ops::transpose(per_group), g.input(4)))
                     : ops::gather(per_group, g.input(4));
    };
    const Tensor float_kernel = (values - picked(g.input(3))) * picked(g.input(2));
    return {ops::matmul(g.output_grad(), float_kernel, false, !transposed), Tensor(), Tensor(), Tensor(), Tensor()};
  }
  Tensor float_kernel = ops::dequantize(g.input(1), g.input(2), transposed, units, packed_rows);
  if (kernel.rank() != 2) float_kernel = ops::reshape(float_kernel, {k, n});
  return {ops::matmul(g.output_grad(), float_kernel, false, !transposed), Tensor(), Tensor()};
}

KILN_REGISTER_OP(OpDef("kiln>QuantizedMatMul")
                     .inputs(3, 5)
                     .input_dtype(1, DType::int8)
                     .attributes({"quantize_inputs", "kernel_input_axes", "transpose_kernel", "int4_units",
                                  "int4_packed_rows", "group_axis"})
                     .infer_shape(quantized_matmul_shape)
                     .forward(quantized_matmul_kernel<float>, quantized_matmul_kernel<double>)
                     .backward(quantized_matmul_backward)
                     .non_differentiable_inputs({1, 2, 3, 4}, "quantized weights are not trained (Keras: trainable=False)")
                     .workspace(quantized_matmul_workspace)
                     .display_name("quantized_matmul"));

KILN_REGISTER_OP(OpDef("kiln>Dequantize")
                     .inputs(2)
                     .input_dtype(0, DType::int8)
                     .attributes({"leading", "int4_units", "int4_packed_rows"})
                     .infer_shape(dequantize_shape)
                     .forward(dequantize_kernel<float>, dequantize_kernel<double>)
                     .workspace(dequantize_workspace)
                     .not_differentiable("quantized weights are not trained (Keras: trainable=False)")
                     .non_differentiable_inputs({0, 1}, "a quantized kernel and its scale"));

KILN_REGISTER_OP(OpDef("kiln>DequantizeInt4")
                     .inputs(4)
                     .input_dtype(0, DType::int8)
                     .input_dtype(2, DType::int8)
                     .attributes({"units", "packed_rows", "group_axis"})
                     .infer_shape(dequantize_int4_shape)
                     .forward(dequantize_int4_kernel<float>, dequantize_int4_kernel<double>)
                     .not_differentiable("quantized weights are not trained (Keras: trainable=False)")
                     .non_differentiable_inputs({0, 1, 2, 3}, "a quantized kernel and its group parameters")
                     .display_name("dequantize_int4"));

KILN_REGISTER_OP(OpDef("kiln>QuantizedGather")
                     .inputs(3, 5)
                     .input_dtype(0, DType::int8)
                     .input_dtype(3, DType::int8)
                     .attributes({"int4_columns"})
                     .infer_shape(quantized_gather_shape)
                     .forward(quantized_gather_kernel<float>, quantized_gather_kernel<double>)
                     .not_differentiable("quantized weights are not trained (Keras: trainable=False)")
                     .non_differentiable_inputs({0, 1, 2, 3, 4}, "a quantized table, its scales and the ids")
                     .display_name("quantized_gather"));

// ---- bfloat16 variables ------------------------------------------------------------------------------------
// A "bfloat16" layer's variables after an optimizer's update (kiln holds them in float32): the new values rounded
// to bfloat16, as Keras assigns to a bfloat16 variable. float64 values pass unchanged (no float64 layer is bfloat16).
Shape same_shape(const InferContext& ctx) { return ctx.input_shape(0); }

template <class T>
void round_to_bfloat16_kernel(const KernelContext& k) {
  const std::int64_t n = k.input_shape(0).num_elements();
  const T* in = k.in<T>(0);
  T* out = k.out<T>();
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>)
      out[i] = detail::round_to_bfloat16(in[i]);
    else
      out[i] = in[i];
  }
}

KILN_REGISTER_OP(OpDef("kiln>RoundToBfloat16")
                     .inputs(1)
                     .infer_shape(same_shape)
                     .forward(round_to_bfloat16_kernel<float>, round_to_bfloat16_kernel<double>)
                     .sharing(Sharing::inplace)
                     .not_differentiable("a bfloat16 variable's assignment, after the optimizer's update")
                     .display_name("round_to_bfloat16"));

}  // namespace

namespace ops {

Tensor round_to_bfloat16(const Tensor& x) {
  return x.graph().add_op("kiln>RoundToBfloat16", {x}, Attributes(), "round_to_bfloat16");
}

Tensor dequantize_int4(const Tensor& kernel, const Tensor& scale, const Tensor& zero, const Tensor& g_idx,
                       std::int64_t units, bool packed_rows, std::int64_t group_axis) {
  Attributes attributes = Attributes().set("units", units);
  if (packed_rows) attributes.set("packed_rows", true);
  if (group_axis != 0) attributes.set("group_axis", group_axis);
  return kernel.graph().add_op("kiln>DequantizeInt4", {kernel, scale, zero, g_idx}, attributes, "dequantize_int4");
}

Tensor quantized_gather(const Tensor& table, const Tensor& scale, const Tensor& ids) {
  return table.graph().add_op("kiln>QuantizedGather", {table, scale, ids}, Attributes(), "quantized_gather");
}
Tensor quantized_gather_int4(const Tensor& table, const Tensor& scale, const Tensor& ids, std::int64_t columns,
                             const Tensor& zero, const Tensor& g_idx) {
  std::vector<Tensor> inputs = {table, scale, ids};
  if (zero.valid()) inputs.insert(inputs.end(), {zero, g_idx});
  return table.graph().add_op("kiln>QuantizedGather", inputs, Attributes().set("int4_columns", columns),
                              "quantized_gather");
}

Tensor quantized_matmul(const Tensor& x, const Tensor& kernel, const Tensor& kernel_scale, bool quantize_inputs,
                        int kernel_input_axes, bool transpose_kernel, std::int64_t int4_units, bool int4_packed_rows) {
  Attributes attributes = Attributes()
                              .set("quantize_inputs", quantize_inputs)
                              .set("kernel_input_axes", std::int64_t{kernel_input_axes})
                              .set("transpose_kernel", transpose_kernel);
  if (int4_units != 0) attributes.set("int4_units", int4_units);
  if (int4_packed_rows) attributes.set("int4_packed_rows", true);
  return x.graph().add_op("kiln>QuantizedMatMul", {x, kernel, kernel_scale}, attributes, "quantized_matmul");
}

Tensor quantized_matmul_int4_groups(const Tensor& x, const Tensor& kernel, const Tensor& scale, const Tensor& zero,
                                    const Tensor& g_idx, std::int64_t units, bool packed_rows, std::int64_t group_axis,
                                    bool quantize_inputs, bool transpose_kernel) {
  Attributes attributes = Attributes()
                              .set("quantize_inputs", quantize_inputs)
                              .set("kernel_input_axes", std::int64_t{1})
                              .set("transpose_kernel", transpose_kernel)
                              .set("int4_units", units)
                              .set("group_axis", group_axis);
  if (packed_rows) attributes.set("int4_packed_rows", true);
  return x.graph().add_op("kiln>QuantizedMatMul", {x, kernel, scale, zero, g_idx}, attributes, "quantized_matmul");
}

Tensor dequantize(const Tensor& q, const Tensor& scale, bool leading, std::int64_t int4_units, bool int4_packed_rows) {
  Attributes attributes = Attributes().set("leading", leading);
  if (int4_units != 0) attributes.set("int4_units", int4_units);
  if (int4_packed_rows) attributes.set("int4_packed_rows", true);
  return q.graph().add_op("kiln>Dequantize", {q, scale}, attributes, "dequantize");
}

Array round_to_bfloat16(const Array& values) {
  if (values.dtype() != DType::float32)
    throw DTypeError("round_to_bfloat16: rounds float32 values, got " + std::string(dtype_name(values.dtype())) + " " +
                     values.shape().to_string());
  Array rounded(values.shape(), DType::float32);
  const float* from = values.data<float>();
  float* to = rounded.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i) to[i] = detail::round_to_bfloat16(from[i]);
  return rounded;
}

QuantizedArray abs_max_quantize(const Array& values, int axis, int value_max) {
  if (values.empty() || values.shape().rank() < 1) throw ValueError("abs_max_quantize: needs an array of rank 1 or more");
  if (!is_floating(values.dtype())) throw DTypeError("abs_max_quantize: quantizes float32 or float64 values");
  if (value_max < 1 || value_max > 127)
    throw ValueError("abs_max_quantize: value_max must be in [1, 127], got " + std::to_string(value_max));
  const int rank = values.shape().rank();
  if (axis < -rank || axis >= rank)
    throw ValueError("abs_max_quantize: axis " + std::to_string(axis) + " is out of range for " + values.shape().to_string());
  if (axis < 0) axis += rank;
  // (outer, extent, inner) around the axis, as Keras's max(abs(x), axis, keepdims=True) reduces it.
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= values.shape().dim(d);
  for (int d = axis + 1; d < rank; ++d) inner *= values.shape().dim(d);
  const std::int64_t extent = values.shape().dim(axis);
  std::vector<std::int64_t> scale_dims = values.shape().dims();
  scale_dims[static_cast<std::size_t>(axis)] = 1;
  QuantizedArray result{Array(values.shape(), DType::int8), Array(Shape(scale_dims), values.dtype())};
  auto* q = result.values.data<std::int8_t>();
  const auto run = [&](auto* x, auto* scale) {
    using T = std::remove_pointer_t<decltype(scale)>;
    // numpy in T: scale = value_max / (max|x| + eps), q = clip(round(x · scale), -value_max, value_max).
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        T largest = T(0);
        for (std::int64_t e = 0; e < extent; ++e) largest = std::max(largest, std::abs(x[(o * extent + e) * inner + i]));
        scale[o * inner + i] = T(value_max) / (largest + T(quantize_epsilon));
      }
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t e = 0; e < extent; ++e)
        for (std::int64_t i = 0; i < inner; ++i) {
          const std::int64_t at = (o * extent + e) * inner + i;
          const T value = std::nearbyint(x[at] * scale[o * inner + i]);
          q[at] = std::isnan(value) ? std::int8_t{0}
                                    : static_cast<std::int8_t>(std::clamp(value, T(-value_max), T(value_max)));
        }
  };
  if (values.dtype() == DType::float32)
    run(values.data<float>(), result.scale.data<float>());
  else
    run(values.data<double>(), result.scale.data<double>());
  return result;
}

}  // namespace ops
}  // namespace kiln
