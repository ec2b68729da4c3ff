#pragma once
// Few-row int8 products on AVX512-VNNI that read B as stored (int8_rows.cpp says how). For detail::gemm_s8s8s32.
#include <cstdint>

namespace kiln::detail {

// Whether this CPU has AVX512-F, -BW and -VNNI, which int8_rows needs, and the dispatched kernels (detail::active_isa)
// are the library's own or x86-64-v4's.
bool int8_rows_available();
// C (m × n, int32) = A (m × k, int8) · B (k × n, int8), row-major, exactly; only where int8_rows_available().
// b_transposed: B stored n × k.
void int8_rows(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
               const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc, bool b_transposed = false);

}  // namespace kiln::detail
