#pragma once
// A hook for tools and tests: told of every backward rule gradients() runs on this thread, and of the nodes
// the rule added. docs/ops.md's table of gradients is made with it (tests/support/gradcheck.cpp).
#include <kiln/core/fwd.hpp>

namespace kiln::detail {

/// Told of each backward rule as gradients() runs it.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  /// The backward rule of node `node` of `graph` ran and added the nodes first_new to end - 1.
  virtual void backward_ran(const Graph& graph, NodeId node, NodeId first_new, NodeId end) = 0;
};

/// Makes `observer` this thread's (null: none) and returns the one before.
BackwardObserver* set_backward_observer(BackwardObserver* observer);

}  // namespace kiln::detail
