#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/regularization/dropout.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/models/model.hpp>
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
  const Tensor raw = kiln::ops::mish(dense(a));  // keras.ops has no mish: not recorded
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

namespace {

std::vector<std::string> weight_paths(const std::vector<kiln::Weight>& weights) {
  std::vector<std::string> result;
  for (const kiln::Weight& weight : weights) result.push_back(weight.path);
  return result;
}

std::vector<std::string> layer_names(const Config& functional_config) {
  std::vector<std::string> result;
  for (const Config& entry : functional_config.get_list("layers")) result.push_back(entry.get_string("name"));
  return result;
}

Config history(const std::string& layer, int call, int output) {
  return Config::list({Config(layer), Config(call), Config(output)});
}

// Outputs whose rows are not the batch's rows: a Gram matrix (None, None), whose second dimension is the
// batch size, and a reshape that folds the batch into twice as many rows.
class Gram : public kiln::Layer {
 public:
  explicit Gram(const Config& config = {}) : Layer(config, "Gram") {}

 protected:
  Tensor call(const Tensor& input, const kiln::CallArgs&) override {
    return kiln::ops::matmul(input, input, false, true);
  }
};

class Fold : public kiln::Layer {
 public:
  explicit Fold(const Config& config = {}) : Layer(config, "Fold") {}

 protected:
  Tensor call(const Tensor& input, const kiln::CallArgs&) override { return kiln::ops::reshape(input, {-1, 2}); }
};

class Total : public kiln::Layer {
 public:
  explicit Total(const Config& config = {}) : Layer(config, "Total") {}

 protected:
  Tensor call(const Tensor& input, const kiln::CallArgs&) override { return kiln::ops::sum(input); }
};

// Two inputs, two outputs, a layer shared three times (its second call needs a nested model's output)
// and a nested model.
kiln::Model multi_model() {
  const Tensor inner_input = kiln::Input({None, 3}, kiln::DType::float64, "inner_input");
  kiln::Model inner(inner_input, kiln::Dense(3, "tanh", {{"name", "inner_dense"}})(inner_input), "inner");
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float64, "a");
  const Tensor b = kiln::Input({None, 3}, kiln::DType::float64, "b");
  kiln::Dense shared(3, "tanh", {{"name", "shared"}});
  const Tensor h3 = shared(inner(shared(a)));
  const Tensor h4 = shared(b);
  kiln::Dense head(2, "", {{"name", "head"}}), aux(1, "sigmoid", {{"name", "aux"}});
  return kiln::Model({a, b}, {head(h3), aux(h4)}, "multi");
}

}  // namespace

TEST_CASE("Model: a functional config round trip rebuilds the graph, weights and predictions",
          "[layers][model][config]") {
  kiln::Model model = multi_model();
  const Config config = model.get_config();
  INFO(config.to_string());
  CHECK(config.get_string("name") == "multi");
  CHECK(layer_names(config) == std::vector<std::string>{"a", "b", "shared", "inner", "head", "aux"});
  CHECK(config.at("input_layers") == Config::list({history("a", 0, 0), history("b", 0, 0)}));
  CHECK(config.at("output_layers") == Config::list({history("head", 0, 0), history("aux", 0, 0)}));
  const Config& shared_entry = config.get_list("layers")[2];
  CHECK(shared_entry.get_string("class_name") == "Dense");
  const std::vector<Config>& calls = shared_entry.get_list("inbound_nodes");
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].get_list("args")[0].at("keras_history") == history("a", 0, 0));
  CHECK(calls[1].get_list("args")[0].at("keras_history") == history("inner", 0, 0));
  CHECK(calls[2].get_list("args")[0].at("keras_history") == history("b", 0, 0));
  CHECK(config.get_list("layers")[4].get_list("inbound_nodes")[0].get_list("args")[0].at("keras_history") ==
        history("shared", 1, 0));
  CHECK(config.get_list("layers")[0].get_list("inbound_nodes").empty());
  CHECK(config.get_list("layers")[3].at("config").contains("layers"));  // the nested model's own graph

  const kiln::LayerPtr restored_layer = kiln::layer_from_config(kiln::serialize_layer(*model));
  REQUIRE(restored_layer->built());
  CHECK(restored_layer->registered_name() == "kiln>Functional");
  const kiln::Model restored(std::dynamic_pointer_cast<kiln::ModelBase>(restored_layer));
  CHECK(restored.get_config() == config);
  CHECK(restored.get_config().to_string() == config.to_string());  // the same order, too
  CHECK(weight_paths(restored.weights()) == weight_paths(model.weights()));
  CHECK(weight_paths(model.weights()) ==
        std::vector<std::string>{"shared/kernel", "shared/bias", "inner/inner_dense/kernel", "inner/inner_dense/bias",
                                 "head/kernel", "head/bias", "aux/kernel", "aux/bias"});
  CHECK(restored.get_layer("shared") != model.get_layer("shared"));  // new layers, not the same ones

  restored.set_weights(model.get_weights());
  const std::vector<Array> data = {random_input({5, 3}, 1), random_input({5, 3}, 2)};
  const std::vector<Array> expected = model.predict(data, 2), actual = restored.predict(data, 2);
  REQUIRE(actual.size() == 2);
  CHECK(actual[0].shape() == Shape{5, 2});
  CHECK(actual[1].shape() == Shape{5, 1});
  for (std::size_t i = 0; i < actual.size(); ++i) CHECK(actual[i].bitwise_equal(expected[i]));

  // The restored model is a layer like any other: nested and saved again.
  const Tensor p = kiln::Input({None, 3}, kiln::DType::float64, "p");
  kiln::Model outer(p, restored({p, p})[1], "outer");
  CHECK(outer.count_params() == model.count_params());
  const kiln::LayerPtr again = kiln::layer_from_config(kiln::serialize_layer(*outer));
  CHECK(again->get_config() == outer.get_config());
}

TEST_CASE("Model: restore_graph reports dangling references", "[layers][model][config][errors]") {
  Config config = multi_model().get_config();
  Config broken = config;
  broken.set("output_layers", Config::list({history("nothing", 0, 0)}));
  CHECK_THROWS_WITH(kiln::create_layer("Functional", broken), Catch::Contains("nothing"));
  broken = config;
  broken.set("output_layers", Config::list({history("head", 3, 0)}));
  CHECK_THROWS_AS(kiln::create_layer("Functional", broken), kiln::ConfigError);
  broken = config;
  broken.set("extra", 1);
  CHECK_THROWS_WITH(kiln::create_layer("Functional", broken), Catch::Contains("unknown argument 'extra'"));
}

TEST_CASE("Model: Keras's __keras_tensor__ references are read too", "[layers][model][config]") {
  Config config = multi_model().get_config();
  Config layers = Config::list();
  for (const Config& entry : config.get_list("layers")) {
    Config inbound = Config::list();
    for (const Config& call : entry.get_list("inbound_nodes")) {
      Config args = Config::list();
      for (const Config& ref : call.get_list("args"))
        args.push_back({{"class_name", "__keras_tensor__"},
                        {"config",
                         {{"shape", Config::list({Config(), 3})},
                          {"dtype", "float64"},
                          {"keras_history", ref.at("keras_history")}}}});
      inbound.push_back({{"args", args}, {"kwargs", Config::map()}});
    }
    layers.push_back(entry.with("inbound_nodes", inbound));
  }
  const kiln::LayerPtr restored = kiln::create_layer("Functional", config.with("layers", layers));
  CHECK(restored->get_config() == config);
}

TEST_CASE("Sequential: config round trip without an InputLayer", "[layers][model][config]") {
  kiln::Sequential model({kiln::Dense(4, "relu"), kiln::Dense(2)}, "stack");
  model.build({None, 3});
  const Config config = model.get_config();
  INFO(config.to_string());
  CHECK(config.at("build_input_shape") == Config::list({Config(), 3}));
  CHECK(config.get_list("layers").size() == 2);
  const kiln::LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*model));
  REQUIRE(copy->built());
  CHECK(copy->get_config() == config);
  CHECK(weight_paths(copy->weights()) == weight_paths(model.weights()));
  copy->set_weights(model.get_weights());
  const Array data = random_input({6, 3}, 4);
  const kiln::Sequential restored(std::dynamic_pointer_cast<kiln::SequentialModel>(copy));
  CHECK(restored.predict(data).bitwise_equal(model.predict(data)));
  CHECK(restored.predict(data).dtype() == kiln::DType::float32);

  // Unbuilt, it stays unbuilt.
  kiln::Sequential lazy({kiln::Dense(4)});
  const kiln::LayerPtr lazy_copy = kiln::layer_from_config(kiln::serialize_layer(*lazy));
  CHECK_FALSE(lazy_copy->built());
  CHECK(lazy_copy->get_config() == lazy.get_config());
}

TEST_CASE("Sequential: config round trip with an InputLayer first", "[layers][model][config]") {
  auto input = std::make_shared<kiln::InputLayer>(
      Config{{"batch_shape", Config::from_shape({None, 3})}, {"dtype", "float64"}, {"name", "features"}});
  kiln::Sequential model({input, kiln::Dense(4, "tanh"), kiln::Dense(2)});
  REQUIRE(model.built());
  CHECK(model->input_shapes() == std::vector<Shape>{Shape{None, 3}});
  const Config config = model.get_config();
  INFO(config.to_string());
  const std::vector<Config>& layers = config.get_list("layers");
  REQUIRE(layers.size() == 3);
  CHECK(layers[0].get_string("class_name") == "InputLayer");
  CHECK(layers[0].at("config") ==
        Config{{"batch_shape", Config::list({Config(), 3})}, {"dtype", "float64"}, {"name", "features"}});
  CHECK(model.get_weights()[0].dtype() == kiln::DType::float64);

  const kiln::LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*model));
  CHECK(copy->get_config() == config);
  copy->set_weights(model.get_weights());
  const Array data = random_input({5, 3}, 2);
  const kiln::Sequential restored(std::dynamic_pointer_cast<kiln::SequentialModel>(copy));
  CHECK(restored.predict(data, 2).bitwise_equal(model.predict(data, 2)));
  const std::string summary = restored.summary_string();
  INFO(summary);
  CHECK(summary.find("InputLayer") == std::string::npos);
  CHECK(summary.find("Connected to") == std::string::npos);

  CHECK_THROWS_WITH(model.add(std::make_shared<kiln::InputLayer>(Config{{"shape", Config::list({3})}})),
                    Catch::Contains("first layer"));
}

TEST_CASE("Sequential: built lazily by its first call, like any layer", "[layers][model]") {
  kiln::Sequential model({kiln::Dense(4, "tanh"), kiln::Dense(2)});
  CHECK_FALSE(model.built());
  const Tensor x = kiln::Input({None, 3}, kiln::DType::float64, "x");
  const Tensor y = model(x);
  REQUIRE(model.built());
  CHECK(y.shape() == Shape{None, 2});
  CHECK(model->input_shapes() == std::vector<Shape>{Shape{None, 3}});
  CHECK(model->dtype() == kiln::DType::float64);
  CHECK(model.get_config().at("build_input_shape") == Config::list({Config(), 3}));
  kiln::Model outer(x, y);
  const Array data = random_input({7, 3}, 3);
  CHECK(outer.predict(data, 3).bitwise_equal(model.predict(data, 3)));
  CHECK(outer->member_layers().size() == 2);  // the input and the Sequential
  CHECK(outer.count_params() == model.count_params());

  // First called on a placeholder with a concrete batch, it still predicts any number of rows.
  kiln::Sequential fixed({kiln::Dense(2)});
  kiln::Graph graph;
  fixed(graph.placeholder({4, 3}, kiln::DType::float64, "batch_of_four"));
  CHECK(fixed->input_shapes() == std::vector<Shape>{Shape{None, 3}});
  CHECK(fixed.predict(data, 3).shape() == Shape{7, 2});
}

TEST_CASE("Sequential: add and pop after build rebuild the model", "[layers][model]") {
  kiln::Sequential model({kiln::Dense(4, "relu")}, "growing");
  model.build({None, 3});
  const Array data = random_input({5, 3}, 1);
  CHECK(model.predict(data).shape() == Shape{5, 4});
  model.add(kiln::Dense(2));
  CHECK(model->stack().size() == 2);
  CHECK(model.count_params() == (3 * 4 + 4) + (4 * 2 + 2));
  CHECK(model.predict(data).shape() == Shape{5, 2});
  CHECK(model.summary_string().find("dense_1 (Dense)") != std::string::npos);
  model->pop();
  CHECK(model->stack().size() == 1);
  CHECK(model.count_params() == 3 * 4 + 4);
  CHECK(model.predict(data).shape() == Shape{5, 4});
  model->pop();
  CHECK(model.predict(data).bitwise_equal(data.astype(kiln::DType::float32)));  // nothing left: the identity
  CHECK_THROWS_WITH(model->pop(), Catch::Contains("empty"));
}

TEST_CASE("Sequential: a layer that does not fit is refused and the model stays usable", "[layers][model][errors]") {
  kiln::Dense first(4, "relu");
  kiln::Sequential model({first}, "fitting");
  model.build({None, 3});
  const Array data = random_input({5, 3}, 1);
  const Array before = model.predict(data);
  const std::string summary = model.summary_string();

  kiln::Dense misfit(2, "", {{"name", "misfit"}});
  misfit->build_for(Shape{None, 7});
  CHECK_THROWS_AS(model.add(misfit), kiln::ShapeError);
  CHECK_THROWS_WITH(model.add(misfit), Catch::Contains("misfit"));
  CHECK(model->stack().size() == 1);
  CHECK(model.count_params() == 3 * 4 + 4);
  CHECK(model.summary_string() == summary);
  CHECK(model.predict(data).bitwise_equal(before));
  CHECK_THROWS_WITH(model.add(first), Catch::Contains("already in the stack"));
  model.add(kiln::Dense(1));
  CHECK(model.predict(data).shape() == Shape{5, 1});
}

TEST_CASE("Model: predict in batches that do not divide the rows", "[layers][model][predict]") {
  const Tensor x = kiln::Input({None, 3}, kiln::DType::float64);
  kiln::Model model(x, kiln::Dense(2, "tanh")(kiln::Dense(5, "relu")(x)), "batched");
  const Array data = random_input({7, 3}, 6);
  const Array whole = model.predict(data, 100);
  REQUIRE(whole.shape() == Shape{7, 2});
  for (std::int64_t batch_size : {1, 2, 3, 6, 7}) {
    INFO("batch_size " << batch_size);
    // Kernels may round the last ulp differently for other row counts (SIMD body vs tail), so not bitwise.
    CHECK(max_relative_difference(model.predict(data, batch_size), whole) <= 1e-14);
  }
  CHECK(model.predict(random_input({1, 3}, 6), 4).shape() == Shape{1, 2});
  CHECK_THROWS_AS(model.predict(data, 0), kiln::ValueError);
}

TEST_CASE("Model: predict converts data to the model's dtype", "[layers][model][predict]") {
  const Tensor x = kiln::Input({None, 3});  // float32
  kiln::Model model(x, kiln::Dense(2)(x));
  const Array data = random_input({4, 3}, 2);  // float64
  const Array converted = model.predict(data);
  CHECK(converted.dtype() == kiln::DType::float32);
  CHECK(converted.bitwise_equal(model.predict(data.astype(kiln::DType::float32))));
}

TEST_CASE("Model: predict refuses data that does not fit, naming the model", "[layers][model][predict][errors]") {
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float64, "a");
  const Tensor b = kiln::Input({None, 2}, kiln::DType::float64, "b");
  kiln::Dense da(2), db(2);
  kiln::Model model({a, b}, {da(a), db(b)}, "pair");
  CHECK_THROWS_AS(model.predict({random_input({4, 5}, 1), random_input({4, 2}, 1)}), kiln::ShapeError);
  CHECK_THROWS_WITH(model.predict({random_input({4, 5}, 1), random_input({4, 2}, 1)}),
                    Catch::Contains("Functional 'pair'") && Catch::Contains("(4, 5)"));
  CHECK_THROWS_WITH(model.predict({random_input({4, 3}, 1), random_input({5, 2}, 1)}),
                    Catch::Contains("Functional 'pair'") && Catch::Contains("rows"));
  CHECK_THROWS_WITH(model.predict({random_input({4, 3}, 1)}), Catch::Contains("takes 2 arrays"));
  CHECK_THROWS_WITH(model.predict(random_input({4, 3}, 1)), Catch::Contains("takes 2 arrays"));
  CHECK_THROWS_AS(model.predict({random_input({4}, 1), random_input({4, 2}, 1)}), kiln::ShapeError);
  kiln::Sequential sequential({kiln::Dense(2)}, "seq");
  sequential.build({None, 3});
  CHECK_THROWS_WITH(sequential.predict(random_input({2, 4}, 1)), Catch::Contains("Sequential 'seq'"));
}

TEST_CASE("Model: predict refuses outputs whose rows are not the batch's rows", "[layers][model][predict][errors]") {
  const Tensor x = kiln::Input({None, 4}, kiln::DType::float64);
  kiln::Model gram(x, kiln::LayerHandle<Gram>(Config())(x), "gram");
  CHECK(gram->model_output_shapes() == std::vector<Shape>{Shape{None, None}});
  const Array data = random_input({5, 4}, 1);
  const Array whole = gram.predict(data, 5);  // one batch: rows are rows
  CHECK(whole.shape() == Shape{5, 5});
  CHECK_THROWS_AS(gram.predict(data, 2), kiln::ShapeError);  // a (2, 2) then a (1, 1) batch cannot be stacked
  CHECK_THROWS_WITH(gram.predict(data, 2), Catch::Contains("Functional 'gram'"));
  // Batches of equal size look stackable, but the Gram dimension follows the batch: still refused.
  CHECK_THROWS_WITH(gram.predict(random_input({4, 4}, 2), 2), Catch::Contains("follows the batch size"));

  kiln::Model fold(x, kiln::LayerHandle<Fold>(Config())(x), "fold");
  CHECK_THROWS_AS(fold.predict(data, 2), kiln::ShapeError);  // 2 rows in, 4 rows out
  CHECK_THROWS_AS(fold.predict(data, 5), kiln::ShapeError);

  kiln::Model total(x, kiln::LayerHandle<Total>(Config())(x), "total");
  CHECK_THROWS_WITH(total.predict(data), Catch::Contains("batch dimension"));
}

TEST_CASE("Model: predict_on_batch runs one batch, into new arrays or the caller's", "[layers][model][predict]") {
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float64, "a");
  const Tensor b = kiln::Input({None, 2}, kiln::DType::float64, "b");
  kiln::Dense da(4, "tanh"), db(1);
  kiln::Model model({a, b}, {da(a), db(b)}, "pair");
  const std::vector<Array> data = {random_input({5, 3}, 1), random_input({5, 2}, 2)};
  const std::vector<Array> expected = model.predict(data, 5);
  const std::vector<Array> returned = model.predict_on_batch(data);
  REQUIRE(returned.size() == 2);
  CHECK(returned[0].bitwise_equal(expected[0]));
  CHECK(returned[1].bitwise_equal(expected[1]));

  std::vector<Array> outputs = {Array(Shape{5, 4}, kiln::DType::float64), Array(Shape{5, 1}, kiln::DType::float64)};
  const std::vector<Array> caller = outputs;  // the same storage: written in place
  model.predict_on_batch(data, outputs);
  CHECK(caller[0].bitwise_equal(expected[0]));
  CHECK(caller[1].bitwise_equal(expected[1]));
  // A wrong array is refused before any array is written.
  std::vector<Array> one_wrong = {Array(Shape{5, 4}, kiln::DType::float64), Array(Shape{5, 3}, kiln::DType::float64)};
  CHECK_THROWS_AS(model.predict_on_batch(data, one_wrong), kiln::ShapeError);
  CHECK(one_wrong[0].bitwise_equal(Array(Shape{5, 4}, kiln::DType::float64)));

  // One input and one output, one row: a deployed model's call.
  const Tensor x = kiln::Input({None, 3});
  kiln::Model single(x, kiln::Dense(2)(x), "single");
  const Array row = random_input({1, 3}, 3).astype(kiln::DType::float32);
  Array out(Shape{1, 2});
  single.predict_on_batch(row, out);
  CHECK(out.bitwise_equal(single.predict(row)));
  CHECK(single.predict_on_batch(row).bitwise_equal(out));
  single.predict_on_batch(random_input({1, 3}, 3), out);  // float64 data is converted, as predict converts it
  CHECK(out.bitwise_equal(single.predict(row)));
}

TEST_CASE("Model: predict_on_batch refuses arrays that do not fit, naming the model",
          "[layers][model][predict][errors]") {
  const Tensor x = kiln::Input({None, 3}, kiln::DType::float64);
  kiln::Model model(x, kiln::Dense(2)(x), "deployed");
  const Array row = random_input({1, 3}, 1);
  Array wrong_rows(Shape{2, 2}, kiln::DType::float64);
  CHECK_THROWS_AS(model.predict_on_batch(row, wrong_rows), kiln::ShapeError);
  CHECK_THROWS_WITH(model.predict_on_batch(row, wrong_rows),
                    Catch::Contains("Functional 'deployed'") && Catch::Contains("(1, 2)") && Catch::Contains("(2, 2)"));
  Array wrong_dtype(Shape{1, 2}, kiln::DType::float32);
  CHECK_THROWS_AS(model.predict_on_batch(row, wrong_dtype), kiln::DTypeError);
  Array right(Shape{1, 2}, kiln::DType::float64);
  CHECK_THROWS_AS(model.predict_on_batch(random_input({1, 4}, 1), right), kiln::ShapeError);
  std::vector<Array> none;
  CHECK_THROWS_WITH(model.predict_on_batch({row}, none), Catch::Contains("writes 1 outputs"));
  CHECK_THROWS_WITH(model.predict_on_batch(std::vector<Array>{}), Catch::Contains("takes 1 arrays"));
  model.predict_on_batch(row, right);  // still usable
  CHECK(right.bitwise_equal(model.predict(row)));
}

TEST_CASE("Model: a non-linear summary shows connections and the input layers", "[layers][model][summary]") {
  kiln::Model model = multi_model();
  const std::string summary = model.summary_string();
  INFO(summary);
  CHECK(summary.find("Model: \"multi\"") == 0);
  CHECK(summary.find("Connected to") != std::string::npos);
  CHECK(summary.find("a (InputLayer)") != std::string::npos);
  CHECK(summary.find("b (InputLayer)") != std::string::npos);
  CHECK(summary.find("inner (Functional)") != std::string::npos);
  for (const char* connection : {"a[0][0]", "b[0][0]", "shared[0][0]", "inner[0][0]", "shared[1][0]", "shared[2][0]"})
    CHECK(summary.find(connection) != std::string::npos);
  // One row per layer: the shared layer's three calls are its three connections.
  const std::size_t shared_row = summary.find("shared (Dense)");
  REQUIRE(shared_row != std::string::npos);
  CHECK(summary.find("shared (Dense)", shared_row + 1) == std::string::npos);
  CHECK(summary.find("│ -") != std::string::npos);  // inputs connect to nothing
  CHECK(summary.find("Total params: 36 (288.00 B)") != std::string::npos);
  // A linear functional model has no connections column.
  const Tensor x = kiln::Input({None, 2});
  kiln::Model linear(x, kiln::Dense(3)(kiln::Dense(2)(x)));
  CHECK(linear.summary_string().find("Connected to") == std::string::npos);
  CHECK(linear.summary_string().find("(InputLayer)") != std::string::npos);
}

TEST_CASE("Model: get_layer by name", "[layers][model]") {
  const Tensor x = kiln::Input({None, 3});
  kiln::Dense hidden(4, "relu", {{"name", "hidden"}});
  kiln::Model model(x, kiln::Dense(1)(hidden(x)));
  CHECK(model.get_layer("hidden") == hidden.ptr());
  CHECK(model.get_layer("input_layer")->class_name() == "InputLayer");
  CHECK_THROWS_AS(model.get_layer("hiden"), kiln::ValueError);
  CHECK_THROWS_WITH(model.get_layer("hiden"), Catch::Contains("no layer named 'hiden'") && Catch::Contains("hidden"));
}

TEST_CASE("Model: a placeholder from the user's own graph is a model input", "[layers][model]") {
  kiln::Dense dense(2, "tanh", {{"name", "fc"}});
  const kiln::Model model = [&] {
    kiln::Graph graph;  // gone once the model is made
    const Tensor features = graph.placeholder({None, 3}, kiln::DType::float64, "features");
    return kiln::Model(features, dense(features), "raw");
  }();
  const std::vector<kiln::LayerPtr> members = model->member_layers();
  REQUIRE(members.size() == 2);
  CHECK(members[0]->class_name() == "InputLayer");
  CHECK(members[0]->name() == "features");
  CHECK(model->input_shapes() == std::vector<Shape>{Shape{None, 3}});
  const Array data = random_input({4, 3}, 9);
  const Array predicted = model.predict(data);
  CHECK(predicted.shape() == Shape{4, 2});
  const Array direct = evaluate([&](const std::vector<Tensor>& in) { return dense(in[0]); }, {data});
  CHECK(predicted.bitwise_equal(direct));
  CHECK(model.summary_string().find("features (InputLayer)") != std::string::npos);
  const kiln::LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*model));
  CHECK(copy->get_config() == model.get_config());
}

TEST_CASE("Model: renaming prefers the automatic name and keeps weights that were set", "[layers][model][names]") {
  SECTION("an automatic name gives way to a given one, in either order") {
    for (bool given_first : {true, false}) {
      const Tensor a = kiln::Input({None, 2}, kiln::DType::float32, "a");
      const Tensor b = kiln::Input({None, 2}, kiln::DType::float32, "b");
      kiln::Dense automatic(3), given(3, "", {{"name", "dense"}});
      const Tensor ya = automatic(a), yb = given(b);
      REQUIRE(automatic.name() == "dense");
      const kiln::Model model = given_first ? kiln::Model({b, a}, {yb, ya}) : kiln::Model({a, b}, {ya, yb});
      CHECK(given.name() == "dense");
      CHECK(automatic.name() == "dense_1");
      CHECK(model.get_layer("dense_1") == automatic.ptr());
    }
  }
  SECTION("two given names still clash") {
    const Tensor a = kiln::Input({None, 2});
    const Tensor b = kiln::Input({None, 2});
    kiln::Dense one(3, "", {{"name", "same"}}), two(3, "", {{"name", "same"}});
    CHECK_THROWS_WITH(kiln::Model({a, b}, {one(a), two(b)}), Catch::Contains("two different layers are named 'same'"));
  }
  SECTION("a renamed layer keeps weights that were set or trained") {
    const Tensor x = kiln::Input({None, 2}, kiln::DType::float32, "x");
    kiln::Dense first(2);
    const kiln::Model original(x, first(x));
    std::vector<Array> values = {Array::full({2, 2}, 0.5), Array::full({2}, 0.25)};
    original.set_weights(values);  // through the model, not the layer
    const Tensor z = kiln::Input({None, 2}, kiln::DType::float32, "z");
    kiln::Dense second(2);
    const Tensor w = second(z);
    REQUIRE(second.name() == first.name());
    const kiln::Model both({z, x}, {w, first(x)});
    CHECK(first.name() == "dense_1");
    CHECK(first.get_weights()[0].bitwise_equal(values[0]));
    CHECK(first.get_weights()[1].bitwise_equal(values[1]));
  }
}

TEST_CASE("Model: a layer held twice (directly and in a nested model) counts once", "[layers][model][weights]") {
  const Tensor x = kiln::Input({None, 3}, kiln::DType::float64, "x");
  kiln::Dense shared(3, "tanh", {{"name", "shared"}});
  kiln::Model inner(x, shared(x), "inner");
  const Tensor y = kiln::Input({None, 3}, kiln::DType::float64, "y");
  kiln::Model outer(y, shared(inner(y)), "outer");
  CHECK(outer->member_layers().size() == 3);
  CHECK(weight_paths(outer.weights()) == std::vector<std::string>{"inner/shared/kernel", "inner/shared/bias"});
  CHECK(outer.count_params() == 3 * 3 + 3);
  outer.set_weights({Array::full({3, 3}, 0.1, kiln::DType::float64), Array::full({3}, 0.0, kiln::DType::float64)});
  CHECK(shared.get_weights()[0].flat(0) == 0.1);
}

namespace {

// Weightless, with a call option and a named tensor argument: what a model must record, save and replay.
class Doubler : public kiln::Layer {
 public:
  explicit Doubler(const Config& config = {}) : Layer(config, "Doubler") { config_reader(config).finish(); }

 protected:
  Tensor call(const Tensor& input, const kiln::CallArgs& args) override {
    Tensor output = args.flag("double_it", false) ? input * 2.0 : input;
    if (const Tensor* offset = args.find_tensor("offset")) output = output + *offset;
    return output;
  }
  std::vector<std::string> call_argument_names() const override { return {"double_it", "offset"}; }
};
KILN_REGISTER_LAYER("acme>Doubler", Doubler);

}  // namespace

TEST_CASE("Model: call options and tensor arguments are saved and replayed", "[layers][model][config]") {
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float64, "a");
  const Tensor b = kiln::Input({None, 3}, kiln::DType::float64, "b");
  kiln::Dense projection(3, "", {{"name", "projection"}});
  kiln::LayerHandle<Doubler> doubler(Config{{"name", "doubler"}});
  const Tensor y = doubler(projection(a), kiln::CallArgs().tensor("offset", b).option("double_it", true));
  kiln::Model model({a, b}, {y}, "with_arguments");
  const Config config = model.get_config();
  INFO(config.to_string());
  const Config& call = config.get_list("layers")[3].get_list("inbound_nodes").at(0);
  CHECK(call.at("args") == Config::list({Config{{"keras_history", history("projection", 0, 0)}}}));
  CHECK(call.at("kwargs") == Config{{"offset", {{"keras_history", history("b", 0, 0)}}}, {"double_it", true}});

  const std::vector<Array> data = {random_input({4, 3}, 1), random_input({4, 3}, 2)};
  const Array projected = evaluate([&](const std::vector<Tensor>& in) { return projection(in[0]); }, {data[0]});
  const Array predicted = model.predict(data).at(0);
  for (std::size_t i = 0; i < predicted.size(); ++i)
    CHECK(predicted.flat(i) == 2.0 * projected.flat(i) + data[1].flat(i));

  const kiln::LayerPtr restored = kiln::layer_from_config(kiln::serialize_layer(*model));
  CHECK(restored->get_config() == config);
  restored->set_weights(model.get_weights());
  CHECK(std::dynamic_pointer_cast<kiln::ModelBase>(restored)->predict(data)[0].bitwise_equal(predicted));
}

TEST_CASE("Model: restore_graph refuses two layers of one name", "[layers][model][config][errors]") {
  Config config = multi_model().get_config();
  std::vector<Config> entries = config.get_list("layers");
  entries.push_back(entries[4]);  // "head" again
  CHECK_THROWS_WITH(kiln::create_layer("Functional", config.with("layers", Config::list(entries))),
                    Catch::Contains("two layers are named 'head'"));
}

TEST_CASE("InputLayer: shapes, batch sizes and errors", "[layers][model][input]") {
  const kiln::LayerPtr from_shape = kiln::create_layer("InputLayer", {{"shape", Config::list({8})}});
  CHECK(std::static_pointer_cast<kiln::InputLayer>(from_shape)->batch_shape() == Shape{None, 8});
  CHECK(from_shape->name() == "input_layer");
  CHECK(from_shape->built());
  const kiln::LayerPtr batched = kiln::create_layer("InputLayer", {{"shape", Config::list({8})}, {"batch_size", 4}});
  CHECK(std::static_pointer_cast<kiln::InputLayer>(batched)->batch_shape() == Shape{4, 8});
  // What Keras writes for an InputLayer.
  const kiln::LayerPtr keras = kiln::create_layer("InputLayer", {{"batch_shape", Config::list({Config(), 8})},
                                                                 {"dtype", "float32"},
                                                                 {"sparse", false},
                                                                 {"ragged", false},
                                                                 {"name", "in"}});
  CHECK(keras->get_config() ==
        Config{{"batch_shape", Config::list({Config(), 8})}, {"dtype", "float32"}, {"name", "in"}});
  CHECK(keras->count_params() == 0);

  CHECK_THROWS_WITH(kiln::create_layer("InputLayer", Config::map()), Catch::Contains("needs 'batch_shape'"));
  CHECK_THROWS_WITH(kiln::create_layer("InputLayer", {{"shape", Config::list({8})}, {"sparse", true}}),
                    Catch::Contains("not supported"));
  CHECK_THROWS_WITH(kiln::create_layer("InputLayer", {{"shape", Config::list({8})}, {"shap", 1}}),
                    Catch::Contains("did you mean 'shape'"));
  kiln::InputLayer on_stack(Config{{"shape", Config::list({3})}});
  CHECK_THROWS_AS(on_stack.make_input(), kiln::LayerStateError);

  const Tensor named = kiln::Input({None, 2, 5}, kiln::DType::float64, "tokens");
  CHECK(named.shape() == Shape{None, 2, 5});
  CHECK(named.dtype() == kiln::DType::float64);
  CHECK(kiln::layer_call_of(named)->layer->name() == "tokens");
}

TEST_CASE("Model: a layer called twice on the same tensor is two calls", "[layers][model]") {
  const Tensor x = kiln::Input({Shape::unknown, 64}, kiln::DType::float64);
  kiln::Dropout dropout(0.5, {{"seed", 1}});
  const Tensor once = dropout(x), twice = dropout(x);
  kiln::Model model(x, kiln::Add()({once, twice}));
  CHECK(model->nodes().size() == 4);  // input, dropout, dropout, add
  // ... and draws two masks, as Keras's seed generator advances per call.
  const Array difference = evaluate(
      [&](const std::vector<Tensor>& in) {
        const kiln::CallArgs training = kiln::CallArgs().training(true);
        return dropout(in[0], training) - dropout(in[0], training);
      },
      {Array::full({2, 64}, 1.0, kiln::DType::float64)});
  double largest = 0;
  for (std::size_t i = 0; i < difference.size(); ++i) largest = std::max(largest, std::fabs(difference.flat(i)));
  CHECK(largest > 0);
}

// ---- the layer harness: models are layers ------------------------------------------------------------------

namespace {
LayerSpec sequential_spec() {
  LayerSpec spec;
  spec.make = [] {
    kiln::Sequential model({kiln::Dense(3, "tanh"), kiln::Dense(2, "", {{"bias_initializer", "random_normal"}})});
    return kiln::LayerPtr(model.ptr());
  };
  spec.call = LayerCase({random_input({2, 4}, 1)});
  spec.output_shapes = {Shape{None, 2}};
  spec.bad_inputs = {{"another feature size", {{None, 5}}, "does not fit the model's input"}};
  return spec;
}

LayerSpec functional_spec() {
  LayerSpec spec;
  spec.make = [] {
    const Tensor x = kiln::Input({None, 4}, kiln::DType::float64);
    const Tensor h = kiln::Dense(3, "tanh")(x);
    return kiln::LayerPtr(kiln::Model(x, kiln::Add()({h, kiln::Dense(3)(h)})).ptr());
  };
  spec.call = LayerCase({random_input({2, 4}, 1)});
  spec.output_shapes = {Shape{None, 3}};
  spec.bad_inputs = {{"another feature size", {{None, 5}}, "does not fit the model's input"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Sequential", sequential_spec)
KILN_LAYER_HARNESS("kiln>Functional", functional_spec)

TEST_CASE("Sequential: starts from an Input or an input shape, as keras.Sequential does",
          "[layers][model][sequential]") {
  const Array data = random_input({3, 4}, 1).astype(kiln::DType::float32);
  kiln::Sequential from_input({kiln::Input({None, 4}), kiln::Dense(3, "tanh"), kiln::Dense(2)});
  kiln::Sequential from_shape({Shape{None, 4}, kiln::Dense(3, "tanh"), kiln::Dense(2)});
  for (kiln::Sequential* model : {&from_input, &from_shape}) {
    REQUIRE(model->built());
    CHECK(model->predict(data).shape() == Shape{3, 2});
    const std::vector<kiln::LayerPtr> layers = model->layers();  // Keras's model.layers: no InputLayer
    REQUIRE(layers.size() == 2);
    CHECK(layers[0]->name() == "dense");
    CHECK(layers[1]->name() == "dense_1");
  }
  CHECK(from_input.predict(data).bitwise_equal(from_shape.predict(data)));
  CHECK_THROWS_AS(kiln::Sequential({kiln::Dense(2), Shape{None, 4}}), kiln::ConfigError);
  const Tensor x = kiln::Input({None, 4});
  CHECK_THROWS_WITH(kiln::Sequential({kiln::Dense(2)(x)}), Catch::Contains("starts from a kiln::Input"));
}

TEST_CASE("Sequential: unbuilt, it lists its layers, summarizes as unbuilt, and builds at its first predict or fit",
          "[layers][model][sequential]") {
  kiln::Sequential lazy({kiln::Dense(3, "relu"), kiln::Dense(2)});
  CHECK_FALSE(lazy.built());
  CHECK(lazy.layers().size() == 2);
  const std::string unbuilt = lazy.summary_string();
  CHECK_THAT(unbuilt, Catch::StartsWith("Model: \"sequential\"") && Catch::Contains("dense (Dense)") &&
                          Catch::Contains("dense_1 (Dense)") && Catch::Contains("0 (unbuilt)") &&
                          Catch::Contains("Total params: 0") && !Catch::Contains("Connected to"));
  CHECK(lazy.predict(random_input({5, 4}, 2)).shape() == Shape{5, 2});
  CHECK(lazy.built());
  CHECK_THAT(lazy.summary_string(), Catch::Contains("(None, 2)") && Catch::Contains("Total params: 23"));

  kiln::Sequential trained({kiln::Dense(2)});
  trained.compile("sgd", "mse");  // compiled before it is built, as Keras allows
  trained.fit(random_input({8, 3}, 3), random_input({8, 2}, 4), kiln::FitOptions().epochs(1).verbose(0));
  CHECK(trained.built());
  CHECK(trained.count_params() == 3 * 2 + 2);
}

TEST_CASE("Model: what the README shows on a model exists on the handle", "[layers][model]") {
  const Tensor x = kiln::Input({None, 3});
  kiln::Model model(x, kiln::Dense(2)(kiln::Dense(4, "relu")(x)));
  const std::vector<kiln::Array> first = model.get_weights();
  model.initialize_weights(11);  // another draw
  CHECK_FALSE(model.get_weights()[0].bitwise_equal(first[0]));
  model.initialize_weights(0);  // the draw a model starts with
  CHECK(model.get_weights()[0].bitwise_equal(first[0]));
  model.set_trainable(false);
  CHECK_FALSE(model.trainable());
  CHECK(model.trainable_weights().empty());
  CHECK(model.non_trainable_weights().size() == 4);
  model.set_trainable(true);
  CHECK(model.trainable_weights().size() == 4);
  model.reset_state();  // nothing to reset, and no error
}
