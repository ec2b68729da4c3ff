#pragma once
// What Python's repr() prints for a float, which is what Keras's CSV files, messages and checkpoint file
// names hold: the shortest digits that read back to the same double, in fixed notation for exponents in
// [-4, 16), else scientific ("1e-05", "1.5e+16").
#include <string>

namespace kiln::detail {
std::string python_float(double value);
}  // namespace kiln::detail
