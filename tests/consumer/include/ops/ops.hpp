#pragma once
// The consumer's own ops/ops.hpp.
namespace consumer::ops {
inline int twice(int value) { return 2 * value; }
}  // namespace consumer::ops
