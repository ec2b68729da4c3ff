// The README's tour, compiled and run (smaller sizes), so the front page never shows code that fails.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

TEST_CASE("README: the functional attention model builds, summarizes and predicts", "[e2e][readme]") {
  constexpr auto None = kiln::Shape::unknown;
  kiln::Tensor x = kiln::Input({None, 12, 16});             // (batch, sequence, d_model)
  kiln::Tensor h = kiln::MultiHeadAttention(8)({x, x, x});  // 'Attention is all you need' form
  h = kiln::LayerNormalization()(kiln::Add()({x, h}));
  kiln::Tensor y = kiln::Dense(1)(kiln::GlobalAveragePooling1D()(h));
  kiln::Model model(x, y);
  const std::string summary = model.summary_string();
  CHECK(summary.find("multi_head_attention (MultiHeadAttention)") != std::string::npos);
  CHECK(summary.find("Connected to") != std::string::npos);
  kiln::Rng rng(1);
  kiln::Array data({5, 12, 16});
  for (std::size_t i = 0; i < data.size(); ++i) data.set_flat(i, rng.normal());
  const kiln::Array prediction = model.predict(data, /*batch_size=*/2);
  CHECK(prediction.shape() == kiln::Shape{5, 1});

  // A shape mistake fails where the model is written, naming the layer and the shapes.
  CHECK_THROWS_WITH(
      kiln::MultiHeadAttention(3)({x, x, x}),
      Catch::Contains("MultiHeadAttention 'multi_head_attention_1'") && Catch::Contains("(None, 12, 16)"));
}
