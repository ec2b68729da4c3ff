#include <catch2/catch.hpp>

#include <sstream>

#include "core/error.hpp"
#include "core/graph.hpp"
#include "layers/dense.hpp"
#include "layers/model.hpp"
#include "ops/ops.hpp"
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {
constexpr std::int64_t None = Shape::unknown;
}

TEST_CASE("Model: a functional model predicts what its layers compute", "[layers][model]") {
  const Tensor x = kiln::Input({None, 4}, kiln::DType::float64);
  kiln::Dense hidden(8, "tanh"), head(2);
  const Tensor y = head(hidden(x));
  kiln::Model model(x, y);
  CHECK(model.name() == "functional");
  CHECK(model.count_params() == (4 * 8 + 8) + (8 * 2 + 2));
  const Array data = random_input({5, 4}, 1);
  const Array predicted = model.predict(data, 2);  // batches of 2, 2 and 1
  REQUIRE(predicted.shape() == Shape{5, 2});
  const Array direct = evaluate([&](const std::vector<Tensor>& in) { return head(hidden(in[0])); }, {data});
  CHECK(max_relative_difference(predicted, direct) == 0.0);
}

TEST_CASE("Model: several inputs and outputs, shared layers and nested models", "[layers][model]") {
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float64, "a");
  const Tensor b = kiln::Input({None, 3}, kiln::DType::float64, "b");
  kiln::Dense shared(4, "tanh", {{"name", "shared"}});
  const Tensor ha = shared(a), hb = shared(b);  // one layer, two calls, two graphs
  kiln::Dense out(1, "", {{"name", "out"}});
  kiln::Model model({a, b}, {out(ha), out(hb)}, "siamese");
  CHECK(model->member_layers().size() == 4);
  CHECK(model.weights().size() == 4);
  const std::vector<Array> outputs = model.predict({random_input({3, 3}, 1), random_input({3, 3}, 1)});
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].bitwise_equal(outputs[1]));  // same weights, same inputs

  // The model as a layer inside another model.
  const Tensor c = kiln::Input({None, 3}, kiln::DType::float64, "c");
  const std::vector<Tensor> inner = model({c, c});
  kiln::Model outer(c, inner[0], "outer");
  const Array single = outer.predict(random_input({3, 3}, 1));
  CHECK(single.bitwise_equal(outputs[0]));
  CHECK(outer.count_params() == model.count_params());
}

TEST_CASE("Model: automatically named layers from different input graphs get unique names", "[layers][model]") {
  const Tensor a = kiln::Input({None, 2});
  const Tensor b = kiln::Input({None, 2});
  kiln::Dense da(3), db(3);
  const Tensor ya = da(a), yb = db(b);
  kiln::Model model({a, b}, {ya, yb});
  std::vector<std::string> names;
  for (const auto& layer : model->member_layers()) names.push_back(layer->name());
  CHECK(names == std::vector<std::string>{"input_layer", "input_layer_1", "dense", "dense_1"});
  CHECK_FALSE(da.get_weights()[0].bitwise_equal(db.get_weights()[0]));  // renamed, so drawn anew
}

TEST_CASE("Model: raw ops between layers and missing inputs are reported", "[layers][model][errors]") {
  const Tensor a = kiln::Input({None, 2});
  const Tensor b = kiln::Input({None, 2});
  kiln::Dense dense(2);
  const Tensor raw = kiln::ops::tanh(dense(a));
  CHECK_THROWS_WITH(kiln::Model(a, raw), Catch::Contains("no layer made"));
  kiln::Dense other(2);
  CHECK_THROWS_WITH(kiln::Model(a, other(b)), Catch::Contains("not among the model's inputs"));
}

TEST_CASE("Sequential: builds from its first input and matches Keras's summary layout", "[layers][model][summary]") {
  kiln::Sequential model({kiln::Dense(64, "relu"), kiln::Dense(10)});
  CHECK_FALSE(model.built());
  model.build({None, 8});
  REQUIRE(model.built());
  CHECK(model.count_params() == 8 * 64 + 64 + 64 * 10 + 10);
  const std::string summary = model.summary_string();
  INFO(summary);
  CHECK(summary.find("Model: \"sequential\"") == 0);
  CHECK(summary.find("dense (Dense)") != std::string::npos);
  CHECK(summary.find("(None, 64)") != std::string::npos);
  CHECK(summary.find("Total params: 1,226 (4.79 KB)") != std::string::npos);
  CHECK(summary.find("Trainable params: 1,226 (4.79 KB)") != std::string::npos);
  CHECK(summary.find("Non-trainable params: 0 (0.00 B)") != std::string::npos);
  CHECK(summary.find("InputLayer") == std::string::npos);
}
