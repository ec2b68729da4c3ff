#include <kiln/core/detail/op_recording.hpp>

#include <atomic>

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

}  // namespace kiln::detail
