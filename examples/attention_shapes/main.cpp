// The original 'Attention is all you need' TF2 demo, in kiln: batch 10, sequence 150, d_model 512.
// DotProductAttention(use_scale) and MultiHeadAttention(h = 8) on [query, key, value], their output
// and attention-weight shapes, the model summary, and one prediction on random data.
#include <kiln/kiln.hpp>

#include <cstdio>

int main() {
  using kiln::Shape;
  using kiln::Tensor;
  constexpr std::int64_t None = Shape::unknown;
  const std::int64_t batch = 10, sequence = 150, d_model = 512;

  const Tensor query = kiln::Input({None, sequence, d_model}, kiln::DType::float32, "query");
  const Tensor key = kiln::Input({None, sequence, d_model}, kiln::DType::float32, "key");
  const Tensor value = kiln::Input({None, sequence, d_model}, kiln::DType::float32, "value");
  const kiln::CallArgs with_weights = kiln::CallArgs().option("return_attention_scores", true);

  kiln::DotProductAttention attention(/*use_scale=*/true);
  const std::vector<Tensor> attended = attention({query, key, value}, with_weights);
  std::printf("DotProductAttention(use_scale=true)\n  output  %s\n  weights %s\n",
              attended[0].shape().to_string().c_str(), attended[1].shape().to_string().c_str());

  kiln::MultiHeadAttention multi_head(/*h=*/8);
  const std::vector<Tensor> heads = multi_head({query, key, value}, with_weights);
  std::printf("MultiHeadAttention(h=8)\n  output  %s\n  weights %s\n\n", heads[0].shape().to_string().c_str(),
              heads[1].shape().to_string().c_str());

  kiln::Model model({query, key, value}, {attended[0], attended[1], heads[0], heads[1]}, "attention_shapes");
  model.summary();

  kiln::Rng rng(42);
  kiln::Array data({batch, sequence, d_model});
  for (std::size_t i = 0; i < data.size(); ++i) data.set_flat(i, rng.normal());
  const std::vector<kiln::Array> outputs = model.predict({data, data, data}, batch);
  std::printf("\npredict on a batch of %lld:\n", static_cast<long long>(batch));
  const char* names[] = {"DotProductAttention output ", "DotProductAttention weights", "MultiHeadAttention output  ",
                         "MultiHeadAttention weights "};
  for (std::size_t i = 0; i < outputs.size(); ++i)
    std::printf("  %s %s\n", names[i], outputs[i].shape().to_string().c_str());
  return 0;
}
