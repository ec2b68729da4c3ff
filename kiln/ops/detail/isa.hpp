#pragma once
// Which build of kiln's dispatched kernels a process runs (internal to ops/: not installed).
//
// libkiln's own code is compiled for KILN_ARCH: the CPU that builds it (native, the default) or a portable
// x86-64 level for packages. The kernels whose speed depends most on the vector width are also compiled, in
// translation units of their own (kiln/ops/detail/isa/), for the portable levels x86-64-v2 (SSE4.2), -v3 (AVX2
// and FMA) and -v4 (AVX-512), and called through a table chosen when the process first needs one:
// - a native build runs its own (the CPU that built it is the one it is for);
// - a portable build runs the best level this CPU has, at or above its own: a package built for x86-64-v3 runs
//   the AVX-512 kernels on a CPU that has AVX-512.
// Tests run every level this CPU has and compare them (tests/ops/isa_test.cpp).
//
// The level builds hold nothing but their kernels, in a namespace of their own (isa_x86_64_v3, ...), and link
// after the rest of the library: where one inlines a function another translation unit also emits (a std::
// algorithm, kiln::mix64), the linker keeps the first copy, which is the library's own.
#include <type_traits>
#include <vector>

namespace kiln::detail {

enum class Isa { own, x86_64_v2, x86_64_v3, x86_64_v4 };

// "own (native)", "x86-64-v3", ...
const char* isa_name(Isa isa);

// The builds this CPU runs: own first, then the levels compiled here that the CPU has.
std::vector<Isa> runnable_isas();

// The build kernels dispatch to.
Isa active_isa();

// For tests: kernels dispatch to `isa` (which must be in runnable_isas()) until this is destroyed. Not for use
// while other threads run kernels.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

// ---- the builds' tables --------------------------------------------------------------------------------------
// Each family is a table of function pointers (random_kernels.hpp, attention_rows.hpp, ...); every build defines all
// of them at once (kiln/ops/detail/isa/all_kernels.inl), and the families' accessors pick theirs from this.

struct RandomKernels;
template <class T>
struct AttentionRows;
template <class T>
struct NormRows;
template <class T>
struct GroupNormBlocks;
template <class T>
struct UnaryKernels;
struct TransposeKernels;

struct IsaTables {
  const RandomKernels* random;
  const AttentionRows<float>* attention_float;
  const AttentionRows<double>* attention_double;
  const NormRows<float>* norm_float;
  const NormRows<double>* norm_double;
  const GroupNormBlocks<float>* group_norm_float;
  const GroupNormBlocks<double>* group_norm_double;
  const UnaryKernels<float>* unary_float;
  const UnaryKernels<double>* unary_double;
  const TransposeKernels* transpose;
};

// The tables of a build (Isa::own, or a level compiled here); a ValueError for a level this build lacks.
const IsaTables& isa_tables(Isa isa);

// *float_table or *double_table, as T is.
template <class T, class F, class D>
const auto& by_dtype(const F* float_table, const D* double_table) {
  if constexpr (std::is_same_v<T, float>)
    return *float_table;
  else
    return *double_table;
}

}  // namespace kiln::detail
