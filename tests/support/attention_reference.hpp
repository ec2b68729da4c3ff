#pragma once
// Plain-loop float64 references for the attention layers' tests: no ops, no BLAS, just the formulas.
#include <cstdint>
#include <vector>

#include <kiln/core/array.hpp>

namespace kiln::testing {

struct ReferenceAttention {
  Array output;   // (B, T, dv)
  Array weights;  // (B, T, S)
};

// softmax(q·kᵀ·scale) · v per batch, where mask (B, T, S) (empty: all ones) and, with causal, j <= i
// decide what may be attended; a row with nothing to attend is zeros.
ReferenceAttention reference_attention(const Array& q, const Array& k, const Array& v, const Array& mask, bool causal,
                                       double scale);

// x (B, L, E) · W (E, U) + b (U) (b may be empty).
Array reference_dense(const Array& x, const Array& kernel, const Array& bias);
// Over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta.
Array reference_layer_norm(const Array& x, const Array& gamma, const Array& beta, double epsilon);
// Columns [begin, begin + count) of the last axis.
Array last_axis_slice(const Array& x, std::int64_t begin, std::int64_t count);
// Concatenation over the last axis.
Array last_axis_concat(const std::vector<Array>& parts);
// (B, S) padding mask -> (B, T, S).
Array expand_padding_mask(const Array& padding, std::int64_t query_length);

}  // namespace kiln::testing
