#pragma once
// Ops called on the tensors of a model being written (Graph::writes_model), outside any layer's call, are
// recorded as calls of operation layers: Keras's functional models record keras.ops calls the same way
// (`x[:, -1]` is a GetItem node, `ops.add(a, b)` an Add node). The ops room asks here; the layers room, which
// knows what an operation layer is, installs the recorder when it starts.
//
//   Tensor slice(const Tensor& x, ...) {
//     if (detail::records_op({x})) return detail::record_op("slice", {x}, attributes);
//     return x.graph().add_op("kiln>Slice", {x}, attributes, "slice");
//   }
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln::detail {

/// Makes `op` (kiln::ops's name: "slice", "add") with `attributes` a recorded layer call on `inputs` and
/// returns its output.
using OpRecorder = Tensor (*)(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attributes);

/// Installs the recorder (the layers room, at startup); returns true, for KILN_AT_STARTUP.
bool set_op_recorder(OpRecorder recorder);

/// True when an op on `inputs` is being written into a model: some input belongs to a graph that
/// writes_model() and no layer's call is open in it, and a recorder is installed.
bool records_op(const std::vector<Tensor>& inputs);

/// The recorder's output for `op` on `inputs`; call it only when records_op(inputs). An invalid Tensor when
/// the op has no recorded form.
Tensor record_op(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attributes = {});

/// What most ops do: the recorded call when records_op(inputs) and the op has a recorded form, else
/// inputs.front().graph().add_op(op, inputs, attributes, node_name).
Tensor add_or_record_op(const std::string& op, const std::vector<Tensor>& inputs, Attributes attributes,
                        const std::string& node_name);

}  // namespace kiln::detail
