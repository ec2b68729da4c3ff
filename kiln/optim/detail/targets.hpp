#pragma once
// How targets meet predictions, shared by losses and metrics (defined in optim/losses.cpp).
#include <string>

#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/optim/losses.hpp>

namespace kiln::detail {

// Equal ranks and every dimension equal, or unknown (None) on either side.
bool shapes_compatible(const Shape& a, const Shape& b);

// Keras's squeeze_or_expand_to_same_rank for elementwise targets: y_true (batch,) meets y_pred (batch, 1),
// and y_true (batch, n, 1) meets y_pred (batch, n). The shape y_true is compared as, or nothing.
bool elementwise_fits(const Shape& y_true, const Shape& y_pred);
// y_true reshaped (expand or squeeze of the last axis) to y_pred's rank, when elementwise_fits says so.
Tensor match_rank(const Tensor& y_true, const Tensor& y_pred);

// Class indices: y_pred's shape without its last axis, or with a last axis of 1.
bool sparse_fits(const Shape& y_true, const Shape& y_pred);
// The indices with the trailing axis of 1 (if any) dropped.
Tensor sparse_labels(const Tensor& y_true, const Tensor& y_pred);

// check_targets throws ShapeError naming `who` and both shapes when y_true cannot meet y_pred as `form`
// says (and when y_pred has no axis at all, unless the form is any).
void check_targets(const std::string& who, TargetForm form, const Shape& y_true, const Shape& y_pred);

// Index of the first maximum along the last axis, as the input's dtype: NumPy's argmax, composed from
// max, equal, where and min. A row holding a NaN yields the class count, which matches no label.
Tensor argmax_last(const Tensor& x);

}  // namespace kiln::detail
