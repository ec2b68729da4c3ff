#include <kiln/core/detail/op_recording.hpp>

#include <atomic>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>

namespace kiln::detail {

namespace {
std::atomic<OpRecorder>& recorder() {
  static std::atomic<OpRecorder> installed{nullptr};
  return installed;
}
}  // namespace

bool set_op_recorder(OpRecorder value) {
  recorder().store(value);
  return true;
}

bool records_op(const std::vector<Tensor>& inputs) {
  if (recorder().load() == nullptr) return false;
  for (const Tensor& input : inputs)
    if (input.valid() && input.graph().writes_model() && !input.graph().in_name_scope()) return true;
  return false;
}

Tensor record_op(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attributes) {
  const OpRecorder installed = recorder().load();
  if (installed == nullptr) throw Error("ops::" + op + ": no operation recorder is installed");
  return installed(op, inputs, attributes);
}

Tensor add_or_record_op(const std::string& op, const std::vector<Tensor>& inputs, Attributes attributes,
                        const std::string& node_name) {
  if (inputs.empty()) throw Error("ops: " + node_name + " takes at least one tensor");
  if (records_op(inputs))
    if (Tensor recorded = record_op(op, inputs, attributes)) return recorded;
  return inputs.front().graph().add_op(op, inputs, std::move(attributes), node_name);
}

}  // namespace kiln::detail
