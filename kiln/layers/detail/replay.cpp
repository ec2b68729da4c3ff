#include <kiln/layers/detail/replay.hpp>

#include <map>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

// ---- replay across graphs -----------------------------------------------------------------------------------

namespace detail {
namespace {

Tensor import_with(const Tensor& tensor, Graph& graph, std::map<const LayerCall*, std::vector<Tensor>>& memo) {
  if (&tensor.graph() == &graph) return tensor;
  const std::shared_ptr<const LayerCall>& call = layer_call_of(tensor);
  if (!call)
    throw ValueError(
        "tensor '" + tensor.name() +
        "' lives in another graph and was not made by a layer, so it cannot be brought into this one; "
        "make model inputs with kiln::Input and combine tensors with layers (kiln::Add, kiln::Concatenate)");
  auto found = memo.find(call.get());
  if (found == memo.end()) {
    std::vector<Tensor> outputs;
    if (auto* input = dynamic_cast<InputLayer*>(call->layer.get())) {
      outputs = {input->placeholder_in(graph)};
    } else {
      std::vector<Tensor> inputs;
      for (const Tensor& t : call->inputs) inputs.push_back(import_with(t, graph, memo));
      CallArgs args;
      for (const auto& [name, t] : call->args.tensors()) args.tensor(name, import_with(t, graph, memo));
      if (call->args.options().is_map())
        for (const auto& [name, value] : call->args.options().items()) args.option(name, value);
      args.training(call->args.training());
      outputs = (*call->layer)(inputs, args);
    }
    found = memo.emplace(call.get(), std::move(outputs)).first;
  }
  return found->second.at(static_cast<std::size_t>(tensor.producer_output()));
}

}  // namespace

Tensor import_tensor(const Tensor& tensor, Graph& graph) {
  std::map<const LayerCall*, std::vector<Tensor>> memo;
  return import_with(tensor, graph, memo);
}

}  // namespace detail

}  // namespace kiln
