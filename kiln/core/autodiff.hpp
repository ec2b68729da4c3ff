#pragma once
// Reverse-mode autodiff that writes the backward pass into the same graph, so backward nodes are
// planned, pruned and run like forward ones.
#include <vector>

#include <kiln/core/tensor.hpp>

namespace kiln {

/// Options of gradients().
struct GradientOptions {
  /// When false, asking the gradient of something the loss does not depend on throws
  /// NotDifferentiable; when true its gradient is an empty Tensor (the optimizer skips it).
  bool allow_unused = false;
};

/// d(loss)/d(each of wrt). `loss` must be a scalar unless `output_grad` (the seed, same shape) is given.
/// Throws NotDifferentiable when a path needs an op without a gradient rule, naming the op and node.
std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& wrt, const GradientOptions& options = {},
                              const Tensor& output_grad = {});

}  // namespace kiln
