#pragma once
// The random ops' per-element loops, dispatched by instruction set (internal to ops/: not installed; see
// isa.hpp). Each draw is splitmix64's index-th value of a stream: 64-bit multiplies, which AVX-512 does a vector at
// a time and AVX2 one at a time, so these are the loops a portable build loses most on without dispatch.
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

template <class T>
struct DropoutLoop {
  // out[i] ← (draw(first + i) ≥ rate ? scale · x[i] : 0), or the mask alone (scale or 0) when x is null, for i in
  // [begin, end).
  void (*fill)(const T* x, T* out, std::int64_t begin, std::int64_t end, std::uint64_t stream, std::uint64_t first,
               double rate, T scale);
};

struct RandomKernels {
  DropoutLoop<float> dropout_float;
  DropoutLoop<double> dropout_double;
  // Box–Muller on `count` pairs from pair `first_pair` of a stream: cosine[j] and sine[j] are pair j's two
  // standard normals (draws 2·pair and 2·pair + 1 as u and v: r·cos(2πv), r·sin(2πv), r = sqrt(−2 ln(1 − u))), in
  // double. count ≤ kNormalBlock.
  void (*normal_pairs)(std::uint64_t stream, std::uint64_t first_pair, std::int64_t count, double* cosine,
                       double* sine);

  template <class T>
  const DropoutLoop<T>& dropout() const {
    if constexpr (sizeof(T) == sizeof(float))
      return dropout_float;
    else
      return dropout_double;
  }
};

constexpr std::int64_t kNormalBlock = 256;

// The kernels of one build (Isa::own, or a level compiled here that the CPU runs), and of the active one.
inline const RandomKernels& random_kernels(Isa isa) { return *isa_tables(isa).random; }
inline const RandomKernels& random_kernels() { return random_kernels(active_isa()); }

}  // namespace kiln::detail
