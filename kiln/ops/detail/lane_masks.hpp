#pragma once
// AVX-512 masks of a vector's first lanes, for the few-row kernels' partial vectors (gemm_bf16.cpp, int4_rows.cpp).
// Include only where immintrin.h is (x86-64 with GCC or Clang).
#include <cstdint>

#include <immintrin.h>

namespace kiln::detail {

// The first `count` of 16 lanes (none for count <= 0, all for count >= 16).
inline __mmask16 lanes_below(std::int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
}

}  // namespace kiln::detail
