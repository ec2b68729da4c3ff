// The shapes of the original 'Attention is all you need' TF2 demo (batch 10, sequence 150,
// d_model 512), built from kiln's ops: scaled dot-product attention, its gradients, and one run.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>

int main() {
  using kiln::Shape;
  using kiln::Tensor;
  namespace ops = kiln::ops;

  const std::int64_t batch = 10, sequence = 150, d_model = 512;
  kiln::Graph graph;
  const Tensor query = graph.placeholder({Shape::unknown, sequence, d_model}, kiln::DType::float32, "query");
  const Tensor key = graph.placeholder({Shape::unknown, sequence, d_model}, kiln::DType::float32, "key");
  const Tensor value = graph.placeholder({Shape::unknown, sequence, d_model}, kiln::DType::float32, "value");

  Tensor weights, context;
  {
    kiln::Graph::NameScope scope(graph, "dot_product_attention");
    const Tensor scores = ops::matmul(query, key, false, true) * (1.0 / std::sqrt(static_cast<double>(d_model)));
    weights = ops::softmax(scores, -1);
    context = ops::matmul(weights, value);
  }
  std::printf("query   %s\n", query.shape().to_string().c_str());
  std::printf("weights %s  (%s)\n", weights.shape().to_string().c_str(), weights.name().c_str());
  std::printf("output  %s  (%s)\n", context.shape().to_string().c_str(), context.name().c_str());

  const Tensor loss = ops::mean(ops::square(context));
  const auto grads = kiln::gradients(loss, {query, key, value});
  std::vector<Tensor> fetches = {context, loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  kiln::Program program(graph, fetches);

  kiln::Rng rng(42);
  kiln::Array data({batch, sequence, d_model});
  for (std::size_t i = 0; i < data.size(); ++i) data.set_flat(i, rng.normal());
  program.feed(query, data);
  program.feed(key, data);
  program.feed(value, data);
  program.run();

  const kiln::PlanStats stats = program.stats();
  std::printf("ran batch %lld: output %s, loss %.6f, d(loss)/d(query) %s\n", static_cast<long long>(batch),
              program.view(context).shape().to_string().c_str(), program.scalar(loss),
              program.view(grads[0]).shape().to_string().c_str());
  std::printf("plan: %zu kernels, %zu in place, %zu aliases, arena %.1f MB (%.1f MB without reuse)\n",
              stats.num_kernels, stats.num_inplace, stats.num_aliases, stats.arena_bytes / 1e6,
              stats.unplanned_bytes / 1e6);
  return 0;
}
