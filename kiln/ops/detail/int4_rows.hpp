#pragma once
// Few-row products by Keras's int4 kernels by groups (int4_rows.cpp says how). For kiln>QuantizedMatMul.
#include <cstdint>

namespace kiln::detail {

// Whether this CPU has AVX-512 F and BW, which int4_rows needs, and the dispatched kernels (detail::active_isa) are
// the library's own or x86-64-v4's.
bool int4_rows_available();
// y (m × n) = x (m × k) · W, W[p][j] = (value[p][j] - zero[g][j]) · scale[g][j] with g = g_idx[p] (checked by the
// caller), value the int4 in `packed` (k × ceil(n/2), two a byte along the columns, the even one in the low nibble):
// Keras's int4 kernel by groups of rows (Dense and EinsumDense's _int4_call), dequantized as it is read, each W
// value the same float32 operations as the dequantized kernel's. m ≤ 4, k ≥ 1. Columns [begin, end) of y only
// (begin a multiple of 64: a worker's share); `partial`: m × n floats of scratch (its own columns used). Only where
// int4_rows_available().
void int4_rows(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const std::int8_t* packed,
               const float* scale, const float* zero, const float* g_idx, float* y, float* partial,
               std::int64_t begin, std::int64_t end);

// y (m × n) = x (m × k) · Wᵀ, W (n × k) = `packed` (n × ceil(k/2)) by groups of `block` columns (a multiple of 16,
// or k), scale and zero (n × groups) in float: a tied ReversibleEmbedding's int4 table in reverse. x is the rows as
// they multiply (Keras's quantized inputs as floats); each sum divided by divisor[i] when divisor is given. Rows
// [begin, end) of W (columns of y). m ≤ 4.
void int4_rows_transposed(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups, std::int64_t block,
                          const float* x, const std::int8_t* packed, const float* scale, const float* zero, float* y,
                          const float* divisor, std::int64_t begin, std::int64_t end);

}  // namespace kiln::detail
