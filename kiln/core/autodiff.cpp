#include <kiln/core/autodiff.hpp>
#include <kiln/core/detail/backward_trace.hpp>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>

namespace kiln {

namespace {

// Which nodes up to `last` a gradient can flow into from `sources`: through differentiable inputs only,
// or (to explain a missing gradient) through any input.
std::vector<char> reachable_from(const Graph& graph, const std::vector<NodeId>& sources, NodeId last,
                                 bool differentiable_only) {
  std::vector<char> reached(static_cast<std::size_t>(last) + 1, 0);
  for (NodeId source : sources)
    if (source <= last) reached[static_cast<std::size_t>(source)] = 1;
  for (NodeId id = 0; id <= last; ++id) {
    const Node& node = graph.node(id);
    if (node.kind != NodeKind::op || reached[static_cast<std::size_t>(id)]) continue;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (!reached[static_cast<std::size_t>(node.inputs[i])]) continue;
      if (differentiable_only && !node.op->input_is_differentiable(static_cast<int>(i))) continue;
      reached[static_cast<std::size_t>(id)] = 1;
      break;
    }
  }
  return reached;
}

std::vector<char> feeding(const Graph& graph, NodeId last) {
  std::vector<char> feeds(static_cast<std::size_t>(last) + 1, 0);
  feeds[static_cast<std::size_t>(last)] = 1;
  for (NodeId id = last; id >= 0; --id) {
    if (!feeds[static_cast<std::size_t>(id)]) continue;
    for (NodeId input : graph.node(id).inputs) feeds[static_cast<std::size_t>(input)] = 1;
  }
  return feeds;
}

// The engine adds the ops it needs by name from the op registry (core/op.hpp): ops/ is the room above
// this one, and its helpers would be an include pointing up.
Tensor sum_all(const std::vector<Tensor>& terms) {
  Tensor total = terms.front();
  for (std::size_t i = 1; i < terms.size(); ++i) total = total.graph().add_op("kiln>Add", {total, terms[i]}, {}, "add");
  return total;
}

// The gradient a rule returned, reduced over the axes broadcasting added, and checked like ggml does:
// a gradient always has its input's shape and dtype.
Tensor fit_to_input(Tensor grad, const Node& input, const Node& node, std::size_t index) {
  if (!grad.valid())
    throw Error("internal: the backward rule of " + node.describe() + " returned no gradient for input " +
                std::to_string(index));
  if (grad.shape() != input.shape)
    grad = grad.graph().add_op("kiln>SumTo", {grad}, Attributes().set("shape", input.shape.dims()), "sum_to");
  if (grad.shape() != input.shape || grad.dtype() != input.dtype)
    throw Error("internal: the gradient of " + node.describe() + " for input " + std::to_string(index) + " has shape " +
                grad.shape().to_string() + ", but the input has " + input.shape.to_string());
  return grad;
}

// Why `target` got no gradient: a message naming the op input that blocks it, or that it is unused.
std::string missing_gradient_reason(const Graph& graph, const Tensor& loss, const Tensor& target) {
  const NodeId last = loss.id();
  const std::string head =
      "no gradient of " + graph.node(last).describe() + " with respect to " + graph.node(target.id()).describe() + ": ";
  if (target.id() > last) return head + "it was created after the loss and cannot affect it";
  const auto connected = reachable_from(graph, {target.id()}, last, false);
  if (!connected[static_cast<std::size_t>(last)]) return head + "the loss does not depend on it";
  for (NodeId id = 0; id <= last; ++id) {
    const Node& node = graph.node(id);
    if (node.kind != NodeKind::op) continue;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (connected[static_cast<std::size_t>(node.inputs[i])] && !node.op->input_is_differentiable(static_cast<int>(i)))
        return head + "every path to the loss passes input " + std::to_string(i) + " of " + node.describe() +
               ", which is not differentiable (" + node.op->non_differentiable_inputs_reason() + ")";
    }
  }
  return head + "no differentiable path";
}

void check_arguments(const Tensor& loss, const std::vector<Tensor>& wrt, const Tensor& output_grad) {
  Graph& graph = loss.graph();
  for (const Tensor& target : wrt)
    if (!target.valid() || &target.graph() != &graph)
      throw Error("gradients: every tensor to differentiate must belong to the loss's graph");
  if (output_grad.valid()) {
    if (&output_grad.graph() != &graph)
      throw Error("gradients: the output gradient must belong to the graph of " + loss.node().describe());
    if (output_grad.dtype() != loss.dtype())
      throw DTypeError("gradients: the output gradient is " + std::string(dtype_name(output_grad.dtype())) + " but " +
                       loss.node().describe() + " is " + dtype_name(loss.dtype()));
    if (output_grad.shape() != loss.shape())
      throw ShapeError("gradients: the output gradient's shape " + output_grad.shape().to_string() +
                       " differs from the shape of " + loss.node().describe() + ", " + loss.shape().to_string());
  } else if (!loss.shape().is_scalar()) {
    throw ShapeError("gradients: " + loss.node().describe() + " has shape " + loss.shape().to_string() +
                     "; reduce it to a scalar or pass its output gradient");
  }
}

thread_local detail::BackwardObserver* backward_observer = nullptr;

}  // namespace

detail::BackwardObserver* detail::set_backward_observer(BackwardObserver* observer) {
  BackwardObserver* before = backward_observer;
  backward_observer = observer;
  return before;
}

std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& wrt, const GradientOptions& options,
                              const Tensor& output_grad) {
  check_arguments(loss, wrt, output_grad);
  Graph& graph = loss.graph();
  const NodeId last = loss.id();

  std::vector<NodeId> sources;
  for (const Tensor& target : wrt) sources.push_back(target.id());
  const auto depends = reachable_from(graph, sources, last, true);
  const auto feeds = feeding(graph, last);
  auto relevant = [&](NodeId id) {
    return depends[static_cast<std::size_t>(id)] && feeds[static_cast<std::size_t>(id)];
  };

  std::vector<std::vector<Tensor>> contributions(static_cast<std::size_t>(last) + 1);
  contributions[static_cast<std::size_t>(last)].push_back(
      output_grad.valid() ? output_grad : graph.scalar(1.0, loss.dtype(), "gradients/seed"));

  for (NodeId id = last; id >= 0; --id) {
    auto& terms = contributions[static_cast<std::size_t>(id)];
    if (!relevant(id) || terms.empty()) continue;
    const Node& node = graph.node(id);
    Graph::NameScope scope(graph, "gradients/" + node.name);
    terms = {sum_all(terms)};
    if (node.kind != NodeKind::op) continue;

    std::vector<bool> needs(node.inputs.size());
    bool any = false;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      needs[i] = relevant(node.inputs[i]) && node.op->input_is_differentiable(static_cast<int>(i));
      any = any || needs[i];
    }
    if (!any) continue;
    if (!node.op->has_backward()) {
      const std::string& reason = node.op->not_differentiable_reason();
      throw NotDifferentiable("gradient of " + graph.node(last).describe() + " needed through " + node.describe() +
                              ", which has no gradient" + (reason.empty() ? std::string() : " (" + reason + ")"));
    }
    const auto first_new = static_cast<NodeId>(graph.num_nodes());
    const std::vector<Tensor> grads = node.op->backward_fn()(GradContext(graph, id, terms.front(), needs));
    if (backward_observer != nullptr)
      backward_observer->backward_ran(graph, id, first_new, static_cast<NodeId>(graph.num_nodes()));
    if (grads.size() != node.inputs.size())
      throw Error("internal: the backward rule of " + node.describe() + " returned " + std::to_string(grads.size()) +
                  " gradients for " + std::to_string(node.inputs.size()) + " inputs");
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needs[i]) continue;
      const Node& input = graph.node(node.inputs[i]);
      contributions[static_cast<std::size_t>(input.id)].push_back(fit_to_input(grads[i], input, node, i));
    }
  }

  std::vector<Tensor> result;
  for (const Tensor& target : wrt) {
    const bool has = target.id() <= last && !contributions[static_cast<std::size_t>(target.id())].empty();
    if (has) {
      result.push_back(contributions[static_cast<std::size_t>(target.id())].front());
    } else if (options.allow_unused) {
      result.emplace_back();
    } else {
      throw NotDifferentiable(missing_gradient_reason(graph, loss, target));
    }
  }
  return result;
}

}  // namespace kiln
