// Every dispatched family of one build, and the build's table of tables (isa.hpp's IsaTables), in namespace
// KILN_ISA_NAMESPACE: kiln/ops/detail/kernels_own.cpp includes it for the library's own build, and
// level_kernels.cpp once per x86-64 level, each compiled with its own -march.
#include <kiln/ops/detail/isa/attention_rows.inl>
#include <kiln/ops/detail/isa/group_norm_blocks.inl>
#include <kiln/ops/detail/isa/norm_rows.inl>
#include <kiln/ops/detail/isa/random_kernels.inl>
#include <kiln/ops/detail/isa/transpose_kernels.inl>
#include <kiln/ops/detail/isa/unary_kernels.inl>

namespace kiln::detail::KILN_ISA_NAMESPACE {

extern const IsaTables tables;  // (external linkage: isa.cpp reads every build's)
const IsaTables tables{&random_table,          &attention_rows_float,     &attention_rows_double,
                       &norm_rows_float,       &norm_rows_double,         &group_norm_blocks_float,
                       &group_norm_blocks_double, &unary_kernels_float,   &unary_kernels_double,
                       &transpose_table};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
