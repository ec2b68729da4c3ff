#pragma once
// Internal: fit's and evaluate's sample and class weights, checked before any step (train/sample_weights.cpp).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/optim/losses.hpp>

namespace kiln::detail {

/// The sample weights as the graph takes them: one array per output (none when `weights` is empty), each of
/// `dtype`, shaped as the per-sample loss of its output (samples,) or (samples, steps, ...), a trailing axis
/// of 1 dropped. `who` starts every message ("Functional 'm'.fit: sample_weight[0]"). ValueError for a
/// count other than the outputs', rows other than the targets', a NaN, infinite or negative weight (naming
/// its index); ShapeError for a shape that does not fit the output.
std::vector<Array> checked_sample_weights(const std::vector<Array>& weights, const std::vector<Array>& y,
                                          const std::vector<Shape>& outputs, DType dtype, const std::string& who);

/// Keras's class_weight_to_sample_weights: each sample weighs its class's weight (1 for a class not named),
/// its class being the arg-max of a one-hot target, or the rounded index (0/1 label) of a target of one
/// value. ValueError (starting with `who`) for a loss that compares no classes, a class the output
/// `output` does not have, a weight that is NaN, infinite or negative, or targets of more than two axes.
Array class_sample_weights(const std::map<std::int64_t, double>& class_weight, const Array& y, const Shape& output,
                           const Loss& loss, const std::string& who);

}  // namespace kiln::detail
