#pragma once
// LayerNorm's and RMSNorm's row kernels, dispatched by instruction set (internal to ops/: not installed; see
// isa.hpp). Each takes rows [first, end) of a (rows, size) array; first is a multiple of kNormRowUnit, so that
// every build's block of rows (a vector's lanes of rows, 2 to 16) starts at the same rows whatever the split.
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

constexpr std::int64_t kNormRowUnit = 16;

template <class T>
struct NormRows {
  // out = (x − mean)·rstd·gamma + beta per row.
  void (*layer_norm)(const T* x, const T* gamma, const T* beta, T* out, std::int64_t first, std::int64_t end,
                     std::int64_t size, double epsilon);
  // dx = rstd·(g − mean(g) − xhat·mean(g·xhat)), g = dy·gamma, per row.
  void (*layer_norm_grad)(const T* x, const T* gamma, const T* dy, T* dx, std::int64_t first, std::int64_t end,
                          std::int64_t size, double epsilon);
  // target += the sum over the rows, in row order, of dy·xhat.
  void (*layer_norm_gamma_grad)(const T* x, const T* dy, T* target, std::int64_t first, std::int64_t end,
                                std::int64_t size, double epsilon);
  // out = x·r·scale per row, r = 1/sqrt(mean(x²) + ε).
  void (*rms_norm)(const T* x, const T* scale, T* out, std::int64_t first, std::int64_t end, std::int64_t size,
                   double epsilon);
  // dx = r·(g − x·r²·mean(g·x)), g = dy·scale, per row.
  void (*rms_norm_grad)(const T* x, const T* scale, const T* dy, T* dx, std::int64_t first, std::int64_t end,
                        std::int64_t size, double epsilon);
  // target += the sum over the rows, in row order, of dy·x·r.
  void (*rms_norm_scale_grad)(const T* x, const T* dy, T* target, std::int64_t first, std::int64_t end,
                              std::int64_t size, double epsilon);
};

template <class T>
const NormRows<T>& norm_rows(Isa isa) {
  const IsaTables& tables = isa_tables(isa);
  return by_dtype<T>(tables.norm_float, tables.norm_double);
}
template <class T>
const NormRows<T>& norm_rows() {
  return norm_rows<T>(active_isa());
}

}  // namespace kiln::detail
