// Inverted dropout with a counter-based mask: element i's fate in a program's run s depends only on
// (seed, s, i), so backward regenerates the mask instead of storing it, and a rerun with the
// same seed reproduces it exactly.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// y = x * mask / (1 - rate). The op is linear in x, so the same kernel is its own gradient.
template <class T>
void dropout_kernel(const KernelContext& k) {
  const double rate = k.attributes().get_double("rate");
  const auto seed = static_cast<std::uint64_t>(k.attributes().get_int("seed"));
  const std::uint64_t stream = mix64(seed ^ mix64(k.run));
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* x = k.in<T>(0);
  T* out = k.out<T>();
  const std::size_t n = k.output_size();
  for (std::size_t i = 0; i < n; ++i) {
    // mix64 adds the golden-ratio increment first: this is splitmix64's i-th draw from state `stream`.
    const double uniform = static_cast<double>(mix64(stream + i * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
    out[i] = uniform >= rate ? x[i] * scale : T(0);
  }
}

Tensor dropout_grad(const Tensor& dy, const Attributes& attributes) {
  const Attributes copied =
      Attributes().set("rate", attributes.get_double("rate")).set("seed", attributes.get_int("seed"));
  return dy.graph().add_op("kiln>DropoutGrad", {dy}, copied, "dropout_grad");
}

std::vector<Tensor> dropout_backward(const GradContext& g) { return {dropout_grad(g.output_grad(), g.attributes())}; }

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Dropout")
                     .inputs(1)
                     .attributes({"rate", "seed"})
                     .infer_shape(detail::first_input_shape)
                     .forward(dropout_kernel<float>, dropout_kernel<double>)
                     .backward(dropout_backward)
                     .sharing(Sharing::inplace));
// Its own op, not a second Dropout, so that graphs and messages show which node is the gradient.
KILN_REGISTER_OP(OpDef("kiln>DropoutGrad")
                     .inputs(1)
                     .attributes({"rate", "seed"})
                     .infer_shape(detail::first_input_shape)
                     .forward(dropout_kernel<float>, dropout_kernel<double>)
                     .backward(dropout_backward)
                     .sharing(Sharing::inplace));

namespace ops {

Tensor dropout(const Tensor& x, double rate, std::uint64_t seed, bool training) {
  if (!(rate >= 0.0 && rate < 1.0))
    throw ConfigError("dropout on " + x.node().describe() + ": rate must be in [0, 1), got " + std::to_string(rate));
  if (!training || rate == 0.0) return x;
  const Attributes attributes = Attributes().set("rate", rate).set("seed", static_cast<std::int64_t>(seed));
  return x.graph().add_op("kiln>Dropout", {x}, attributes, "dropout");
}

}  // namespace ops
}  // namespace kiln
