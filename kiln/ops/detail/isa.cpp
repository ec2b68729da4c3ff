#include <kiln/ops/detail/isa.hpp>

#include <algorithm>
#include <atomic>
#include <string>

#include <kiln/core/error.hpp>

// KILN_ARCH_LEVEL (from CMake): 0 for a native build, else the x86-64 level libkiln is compiled for (1 to 4).
// KILN_ISA_X86_64_V2/V3/V4: 1 for each level whose kernels are compiled (on x86-64).
#ifndef KILN_ARCH_LEVEL
#define KILN_ARCH_LEVEL 0
#endif

namespace kiln::detail {

namespace {

int level_of(Isa isa) {
  switch (isa) {
    case Isa::x86_64_v2: return 2;
    case Isa::x86_64_v3: return 3;
    case Isa::x86_64_v4: return 4;
    case Isa::own: break;
  }
  return KILN_ARCH_LEVEL;
}

bool built(Isa isa) {
  switch (isa) {
    case Isa::own: return true;
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return true;
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return true;
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return true;
#endif
    default: return false;
  }
}

// Whether this CPU runs code built for the level (the instructions -march=x86-64-vN may use).
bool cpu_has(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("avx");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512cd");
  switch (isa) {
    case Isa::own: return true;
    case Isa::x86_64_v2: return v2;
    case Isa::x86_64_v3: return v3;
    case Isa::x86_64_v4: return v4;
  }
#endif
  return isa == Isa::own;
}

Isa chosen() {
  if (KILN_ARCH_LEVEL == 0) return Isa::own;  // native: the build is for this CPU
  Isa best = Isa::own;
  for (const Isa isa : {Isa::x86_64_v2, Isa::x86_64_v3, Isa::x86_64_v4})
    if (built(isa) && cpu_has(isa) && level_of(isa) > level_of(best)) best = isa;
  return best;
}

std::atomic<int>& active() {
  static std::atomic<int> isa{static_cast<int>(chosen())};
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::own: return KILN_ARCH_LEVEL == 0 ? "own (native)" : "own (its KILN_ARCH level)";
    case Isa::x86_64_v2: return "x86-64-v2";
    case Isa::x86_64_v3: return "x86-64-v3";
    case Isa::x86_64_v4: return "x86-64-v4";
  }
  return "?";
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : {Isa::own, Isa::x86_64_v2, Isa::x86_64_v3, Isa::x86_64_v4})
    if (built(isa) && cpu_has(isa)) isas.push_back(isa);
  return isas;
}

Isa active_isa() { return static_cast<Isa>(active().load(std::memory_order_relaxed)); }

#define KILN_DECLARE_TABLES(level) \
  namespace level {                 \
  extern const IsaTables tables;    \
  }
KILN_DECLARE_TABLES(isa_own)
#if defined(KILN_ISA_X86_64_V2)
KILN_DECLARE_TABLES(isa_x86_64_v2)
#endif
#if defined(KILN_ISA_X86_64_V3)
KILN_DECLARE_TABLES(isa_x86_64_v3)
#endif
#if defined(KILN_ISA_X86_64_V4)
KILN_DECLARE_TABLES(isa_x86_64_v4)
#endif
#undef KILN_DECLARE_TABLES

const IsaTables& isa_tables(Isa isa) {
  switch (isa) {
    case Isa::own: return isa_own::tables;
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return isa_x86_64_v2::tables;
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return isa_x86_64_v3::tables;
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return isa_x86_64_v4::tables;
#endif
    default: break;
  }
  throw ValueError(std::string("dispatched kernels: not built for ") + isa_name(isa));
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(active_isa()) {
  const std::vector<Isa> runnable = runnable_isas();
  if (std::find(runnable.begin(), runnable.end(), isa) == runnable.end())
    throw ValueError(std::string("ScopedIsa: this CPU or build does not run ") + isa_name(isa));
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
}

ScopedIsa::~ScopedIsa() { active().store(static_cast<int>(previous_), std::memory_order_relaxed); }

}  // namespace kiln::detail
