// Sample and class weights, checked before fit's or evaluate's first step, so a bad weight never reaches
// the weights of the model: Keras's data adapters convert them the same way (class_weight_to_sample_weights),
// and its losses weigh the per-sample loss with them (losses/loss.py, reduce_weighted_values).
#include <kiln/train/detail/sample_weights.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/detail/python_float.hpp>

namespace kiln::detail {

namespace {

void check_values(const Array& weights, const std::string& who) {
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double weight = weights.flat(i);
    if (!std::isfinite(weight) || weight < 0.0)
      throw ValueError(who + ": weights must be finite and not negative, got " + python_float(weight) +
                       " at flat index " + std::to_string(i));
  }
}

}  // namespace

std::vector<Array> checked_sample_weights(const std::vector<Array>& weights, const std::vector<Array>& y,
                                          const std::vector<Shape>& outputs, DType dtype, const std::string& who) {
  if (weights.empty()) return {};
  if (weights.size() != outputs.size())
    throw ValueError(who + ": sample_weight has " + std::to_string(weights.size()) + " arrays for " +
                     std::to_string(outputs.size()) + " outputs; give one per output");
  std::vector<Array> checked;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    const std::string label = who + ": sample_weight[" + std::to_string(k) + "]";
    Array weight = weights[k];
    const Shape& output = outputs[k];
    // The per-sample loss has the output's shape without its last axis; Keras squeezes a trailing axis of 1.
    const int loss_rank = std::max(output.rank() - 1, 1);
    if (weight.shape().rank() == loss_rank + 1 && weight.shape().dim(-1) == 1) {
      std::vector<std::int64_t> dims = weight.shape().dims();
      dims.pop_back();
      weight = weight.reshape(Shape(dims));
    }
    bool fits = weight.shape().rank() >= 1 && weight.shape().rank() <= loss_rank;
    for (int axis = 1; fits && axis < weight.shape().rank(); ++axis)
      fits = output[axis] == Shape::unknown || output[axis] == weight.shape()[axis];
    if (!fits)
      throw ShapeError(label, "weights are (samples,) or the shape of each sample's loss (the output's without its "
                              "last axis)",
                       {{"sample_weight", weights[k].shape()}, {"output", output}});
    if (weight.shape()[0] != y[k].shape()[0])
      throw ValueError(label + " has " + std::to_string(weight.shape()[0]) + " samples but y[" + std::to_string(k) +
                       "] has " + std::to_string(y[k].shape()[0]));
    check_values(weight, label);
    checked.push_back(weight.dtype() == dtype ? weight : weight.astype(dtype));
  }
  return checked;
}

Array class_sample_weights(const std::map<std::int64_t, double>& class_weight, const Array& y, const Shape& output,
                           const Loss& loss, const std::string& who) {
  if (!loss.classification())
    throw ValueError(who + ": class_weight weighs classes, and loss '" + loss.name() +
                     "' compares no classes; give sample_weight instead");
  const std::int64_t last = output.rank() > 0 ? output.dim(-1) : 1;
  const std::int64_t classes = last == 1 ? 2 : last;  // one sigmoid output: classes 0 and 1
  for (const auto& [index, weight] : class_weight) {
    if (classes != Shape::unknown && (index < 0 || index >= classes))
      throw ValueError(who + ": class_weight names class " + std::to_string(index) + ", but output " +
                       output.to_string() + " has classes 0 to " + std::to_string(classes - 1));
    if (!std::isfinite(weight) || weight < 0.0)
      throw ValueError(who + ": class_weight of class " + std::to_string(index) + " must be finite and not negative, got " +
                       python_float(weight));
  }
  const Shape& shape = y.shape();
  const bool one_hot = shape.rank() == 2 && shape[1] != 1;
  if (shape.rank() > 2 || shape.rank() < 1)
    throw ValueError(who + ": class_weight is not supported for targets of shape " + shape.to_string() +
                     " (3+ dimensional targets); give sample_weight instead");
  const std::int64_t rows = shape[0];
  const std::int64_t width = one_hot ? shape[1] : 1;
  Array weights(Shape{rows}, y.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t label = 0;
    if (one_hot) {
      for (std::int64_t c = 1; c < width; ++c)
        if (y.flat(static_cast<std::size_t>(r * width + c)) > y.flat(static_cast<std::size_t>(r * width + label)))
          label = c;
    } else {
      const double value = y.flat(static_cast<std::size_t>(r));
      if (!std::isfinite(value))
        throw ValueError(who + ": class_weight needs class labels, got " + python_float(value) + " at row " +
                         std::to_string(r));
      label = static_cast<std::int64_t>(std::llround(value));
    }
    const auto found = class_weight.find(label);
    weights.set_flat(static_cast<std::size_t>(r), found == class_weight.end() ? 1.0 : found->second);
  }
  return weights;
}

}  // namespace kiln::detail
