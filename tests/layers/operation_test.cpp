// keras.ops calls in functional models: kiln::ops functions called on a model's tensors outside any layer are
// recorded as OperationLayers (Keras's GetItem, Add, Multiply, ... nodes), run, train, and round-trip through
// kiln's files, model configs and Keras's files; Keras's own files with such nodes load.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using kiln::Array;
using kiln::Config;
using kiln::Model;
using kiln::Shape;
using kiln::Tensor;
using kiln::ops::Index;
using kiln::ops::Slice;

namespace {

constexpr std::int64_t None = Shape::unknown;

// The last step of an LSTM's sequence, by get_item: Keras's h[:, -1].
Model last_step_model() {
  const Tensor x = kiln::Input({None, 6, 4}, kiln::DType::float32, "x");
  const Tensor h = kiln::LSTM(5, {{"return_sequences", true}, {"name", "lstm"}})(x);
  const Tensor last = kiln::ops::get_item(h, {Slice{}, -1});
  return Model(x, kiln::Dense(2, "", {{"name", "dense"}})(last), "last_step");
}

std::string fixture(const std::string& name) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / "ops" / name).string();
}

// One dataset of a fixture's M.io.h5 ("inputs/input_0", "outputs/output_2").
Array read_fixture_array(const std::string& path, const std::string& group, const std::string& name) {
  const kiln::detail::hdf5::File io(kiln::detail::read_whole_file(path), path);
  return io.root().at(group).at(name).read(kiln::DType::float32);
}

double largest_difference(const Array& a, const Array& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a.flat(i) - b.flat(i)));
  return worst;
}

}  // namespace

TEST_CASE("an op on a model's tensors is a recorded operation: x[:, -1] needs no Cropping1D and Flatten",
          "[layers][operation]") {
  Model model = last_step_model();
  // The call is a layer of the model (an operation), not one of Keras's model.layers.
  REQUIRE(model->nodes().size() == 4);
  const kiln::LayerPtr get_item = model->nodes()[2].layer;
  CHECK(get_item->class_name() == "GetItem");
  CHECK(get_item->registered_name() == "keras.ops>GetItem");
  CHECK(kiln::is_operation(*get_item));
  CHECK(model.layers().size() == 3);  // x, lstm, dense
  CHECK(model->model_output_shapes().at(0) == Shape{None, 2});

  // It computes the last step: the same as the LSTM without return_sequences, with the same weights.
  const Tensor x = kiln::Input({None, 6, 4});
  const kiln::LSTM lstm(5);
  Model reference(x, kiln::Dense(2)(lstm(x)));
  reference.ptr()->set_weights(model.ptr()->get_weights());
  const Array data = kiln::testing::random_input({7, 6, 4}, 3);
  CHECK(model.predict(data).bitwise_equal(reference.predict(data)));

  // It trains: the gradient reaches the LSTM through the slice.
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 0.03}}), "mse");
  const Array targets = kiln::testing::random_input({7, 2}, 4);
  const double before = model.evaluate(data, targets).at("loss");
  model.fit(data, targets, kiln::FitOptions().epochs(60).batch_size(7).verbose(0));
  CHECK(model.evaluate(data, targets).at("loss") < 0.5 * before);
}

TEST_CASE("arithmetic on model tensors records Keras's Add, Subtract, Multiply, Divide, Maximum and Negative",
          "[layers][operation]") {
  const Tensor a = kiln::Input({None, 3}, kiln::DType::float32, "a");
  const Tensor b = kiln::Input({None, 3}, kiln::DType::float32, "b");  // another graph: the op joins them
  const std::vector<Tensor> outputs = {
      a + b, kiln::ops::sub(a, b), a * 2.5, a + 1.0, a / b, -a, kiln::ops::maximum(a, b), kiln::ops::minimum(a, b) * b};
  Model model({a, b}, outputs);
  std::vector<std::string> classes;
  for (const auto& node : model->nodes())
    if (kiln::is_operation(*node.layer)) classes.push_back(node.layer->class_name());
  CHECK(classes == std::vector<std::string>{"Add", "Subtract", "Multiply", "Add", "Divide", "Negative", "Maximum",
                                            "Minimum", "Multiply"});
  const Array x = kiln::testing::random_input({4, 3}, 5), y = kiln::testing::random_input({4, 3}, 6, 0.5, 1.5);
  const std::vector<Array> got = model.predict({x, y});
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float p = static_cast<float>(x.flat(i)), q = static_cast<float>(y.flat(i));
    CHECK(got[0].flat(i) == p + q);
    CHECK(got[1].flat(i) == p - q);
    CHECK(got[2].flat(i) == p * 2.5f);
    CHECK(got[3].flat(i) == p + 1.0f);
    CHECK(got[4].flat(i) == p / q);
    CHECK(got[5].flat(i) == -p);
    CHECK(got[6].flat(i) == std::max(p, q));
    CHECK(got[7].flat(i) == std::min(p, q) * q);
  }
}

TEST_CASE("ops inside a layer's call and in a graph of one's own stay plain ops", "[layers][operation]") {
  // A graph that is not a model being written records nothing.
  kiln::Graph graph;
  const Tensor p = graph.placeholder({None, 3});
  const Tensor sum = p + p;
  CHECK(sum.producer() == nullptr);
  CHECK(sum.node().op != nullptr);
  // An op with no Keras operation stays an op, and a model of it says which: a model is made of layers.
  const Tensor x = kiln::Input({None, 3});
  const Tensor e = kiln::ops::mish(kiln::Dense(3)(x));  // keras.ops has no mish
  CHECK(e.producer() == nullptr);
  CHECK_THROWS_WITH(Model(x, e), Contains("which no layer made"));
}

TEST_CASE("operations round-trip through model configs, kiln files and Keras files", "[layers][operation][serialize]") {
  const Tensor x = kiln::Input({None, 6, 4}, kiln::DType::float32, "x");
  const Tensor h = kiln::LSTM(5, {{"return_sequences", true}})(x);
  const Tensor last = kiln::ops::get_item(h, {Slice{}, -1});
  const Tensor strided =
      kiln::ops::get_item(h, {Slice{}, Slice{std::nullopt, std::nullopt, -2}, Index::new_axis(), Slice{1}});
  const Tensor window = kiln::ops::slice(h, {0, 1, 0}, {-1, 3, 2});
  const Tensor mixed = kiln::Dense(3)(last) * 0.5 + kiln::Dense(3)(last);
  Model model(std::vector<Tensor>{x}, std::vector<Tensor>{mixed, strided, window});
  const Array data = kiln::testing::random_input({3, 6, 4}, 8);
  const std::vector<Array> expected = model.predict(std::vector<Array>{data});

  // The Keras JSON: a GetItem node with Keras's serialized slices, ops.slice as the GetItem it is.
  const Config config = kiln::model_config(*model);
  const std::string json = kiln::to_json(config, 0);
  CHECK_THAT(json,
             Contains(R"("module": "keras.src.ops.numpy","class_name": "GetItem","config": {"name": "get_item"})"));
  CHECK_THAT(json, Contains(R"({"class_name": "__slice__","config": {"start": null,"stop": null,"step": null}},-1])"));
  CHECK_THAT(json, Contains(R"("class_name": "Multiply")"));

  Model from_json = kiln::model_from_json(model.to_json());
  from_json.ptr()->set_weights(model.ptr()->get_weights());
  const std::vector<Array> again = from_json.predict(std::vector<Array>{data});
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(again[i].bitwise_equal(expected[i]));

  // A nested model's config (get_config, kiln's own form) keeps the calls' arguments too.
  const kiln::LayerPtr rebuilt = kiln::layer_from_config(kiln::serialize_layer(*model));
  rebuilt->set_weights(model.ptr()->get_weights());
  const std::vector<Array> nested = static_cast<kiln::ModelBase&>(*rebuilt).predict(std::vector<Array>{data});
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(nested[i].bitwise_equal(expected[i]));

  const kiln::testing::TempDir folder;
  for (const std::string name : {"ops.kiln", "ops.keras", "ops.h5"}) {
    INFO(name);
    model.save(folder.file(name));
    const std::vector<Array> loaded = kiln::load_model(folder.file(name)).predict(std::vector<Array>{data});
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(loaded[i].bitwise_equal(expected[i]));
  }
}

TEST_CASE("Keras's own file with GetItem, Slice and arithmetic nodes predicts what Keras stored",
          "[layers][operation][serialize][keras]") {
  Model model = kiln::load_keras_model(fixture("ops_getitem.keras"));
  CHECK(model.layers().size() == 4);  // x, lstm, dense, flatten: Keras's model.layers
  const kiln::testing::TempDir folder;
  model.save(folder.file("again.keras"));  // and kiln writes it back as Keras's nodes
  Model again = kiln::load_keras_model(folder.file("again.keras"));
  for (Model* m : {&model, &again}) {
    // The inputs and Keras's outputs, as tests/serialize/keras_test.cpp reads them.
    const kiln::Array input = read_fixture_array(fixture("ops_getitem.io.h5"), "inputs", "input_0");
    const std::vector<Array> predicted = m->predict(std::vector<Array>{input});
    REQUIRE(predicted.size() == 6);
    for (std::size_t k = 0; k < predicted.size(); ++k) {
      const Array stored = read_fixture_array(fixture("ops_getitem.io.h5"), "outputs", "output_" + std::to_string(k));
      INFO("output " << k);
      double scale = 0;
      for (std::size_t i = 0; i < stored.size(); ++i) scale = std::max(scale, std::abs(stored.flat(i)));
      CHECK(largest_difference(predicted[k], stored) <= 1e-5 * scale);
    }
  }
}

TEST_CASE("a Keras operation kiln does not implement is refused by name", "[layers][operation][errors]") {
  const Config keras = {
      {"module", "keras.src.models.functional"},
      {"class_name", "Functional"},
      {"config",
       {{"name", "m"},
        {"layers",
         Config::list({{{"module", "keras.layers"},
                        {"class_name", "InputLayer"},
                        {"config", {{"batch_shape", Config::list({Config(), 3})}, {"dtype", "float32"}, {"name", "x"}}},
                        {"name", "x"},
                        {"inbound_nodes", Config::list()}},
                       {{"module", "keras.src.ops.numpy"},
                        {"class_name", "Einsum"},
                        {"config", {{"name", "einsum"}}},
                        {"name", "einsum"},
                        {"inbound_nodes", Config::list()}}})},
        {"input_layers", Config::list({"x", 0, 0})},
        {"output_layers", Config::list({"einsum", 0, 0})}}}};
  CHECK_THROWS_AS(kiln::model_from_config(keras), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::model_from_config(keras), Contains("keras.ops's Einsum") && Contains("does not implement"));
}

namespace {

// Keras's ops.sparsemax on its numpy backend (3.16) sums every cumulative sum in the support where it means
// the k-th one: those outputs are not compared (kiln's sparsemax has its own reference tests).
constexpr std::size_t kRecordedSparsemax = 34, kReadSparsemax = 20;

// Every output of `model` on the fixture's inputs within 1e-5 of Keras's (relative to the largest), but `skip`.
void check_against_keras(Model& model, const std::string& name, std::size_t skip) {
  const std::string io = fixture(name + ".io.h5");
  const std::vector<Array> inputs = {read_fixture_array(io, "inputs", "input_0"),
                                     read_fixture_array(io, "inputs", "input_1")};
  const std::vector<Array> predicted = model.predict(inputs);
  for (std::size_t k = 0; k < predicted.size(); ++k) {
    if (k == skip) continue;
    const Array stored = read_fixture_array(io, "outputs", "output_" + std::to_string(k));
    INFO(name << " output " << k);
    double scale = 1e-3;
    for (std::size_t i = 0; i < stored.size(); ++i) scale = std::max(scale, std::abs(stored.flat(i)));
    CHECK(largest_difference(predicted[k], stored) <= 1e-5 * scale);
  }
}

// The operation nodes of a model config as Keras's JSON, without names: the tensors in their calls become
// "T" (which layer made them is named differently in kiln and in Keras), sorted.
Config without_names(const Config& value) {
  if (value.is_map() && value.get_string("class_name", "") == "__keras_tensor__") return Config("T");
  if (value.is_list()) {
    Config list = Config::list();
    for (const Config& item : value.as_list()) list.push_back(without_names(item));
    return list;
  }
  if (!value.is_map()) return value;
  Config map = Config::map();
  for (const auto& [key, item] : value.items())
    if (key != "name") map.set(key, without_names(item));
  return map;
}

std::vector<std::string> operation_nodes(const Model& model) {
  std::vector<std::string> nodes;
  const Config config = kiln::model_config(*model);
  for (const Config& layer : config.at("config").get_list("layers"))
    if (layer.get_string("module").rfind("keras.src.ops.", 0) == 0)
      nodes.push_back(kiln::to_json(without_names(layer), 0));
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

// The model make_ops_breadth.py's recorded() makes, written with kiln::ops.
Model recorded_in_cpp() {
  namespace ops = kiln::ops;
  const Tensor x = kiln::Input({None, 4, 6}, kiln::DType::float32, "x");
  const Tensor y = kiln::Input({None, 4, 6}, kiln::DType::float32, "y");
  const Tensor p = ops::abs(x) + 0.5;
  const std::vector<Tensor> outputs = {
      ops::exp(x), ops::log(p), ops::sqrt(p), ops::rsqrt(p), ops::square(x), ops::sin(x), ops::cos(x), ops::tanh(x),
      ops::neg(x), ops::relu(x), ops::relu6(x * 4.0), ops::sigmoid(x), ops::softplus(x), ops::softsign(x),
      ops::swish(x), ops::log_sigmoid(x), ops::hard_sigmoid(x), ops::hard_silu(x), ops::hard_tanh(x),
      ops::tanh_shrink(x), ops::sparse_plus(x), ops::sparse_sigmoid(x), ops::selu(x), ops::leaky_relu(x, 0.1),
      ops::elu(x, 0.5), ops::celu(x, 0.7), ops::gelu(x, false), ops::gelu(x, true), ops::soft_shrink(x, 0.3),
      ops::hard_shrink(x, 0.2), ops::squareplus(x, 3.0), ops::glu(x, -1), ops::softmax(x, 1), ops::log_softmax(x, -1),
      ops::sparsemax(x), ops::pow(p, y), ops::pow_scalar(x, 2.0), ops::matmul(x, y, false, true),
      ops::reshape(x, {-1, 24}), ops::concat({x, y}, 1), ops::mean(x, {1}), ops::sum(x, {1, 2}, true),
      ops::max(x, {-1}), ops::min(x, {1, 2}), ops::squeeze(ops::expand_dims(x, 1), {1}),
      ops::where(ops::greater(x, y), x, y), ops::where(ops::greater_equal(x, y), y, x),
      ops::where(ops::less(x, y), x, y), ops::where(ops::less_equal(x, y), y, x),
      ops::where(ops::equal(x, ops::maximum(x, y)), x, y), ops::flip(x, 1), ops::pad(x, {0, 1, 0}, {0, 2, 0}),
      ops::sub(x, y), ops::mul(x, y), ops::div(x, p), ops::minimum(x, y)};
  return Model({x, y}, outputs, "ops_recorded");
}

}  // namespace

TEST_CASE("Keras's files of keras.ops calls (numpy, nn and math operations) predict what Keras stored",
          "[layers][operation][serialize][keras]") {
  for (const auto& [name, skip] : {std::pair<std::string, std::size_t>{"ops_recorded", kRecordedSparsemax},
                                   {"ops_read", kReadSparsemax}}) {
    INFO(name);
    Model model = kiln::load_keras_model(fixture(name + ".keras"));
    CHECK(model.layers().size() == 2);  // the inputs: operations are not Keras's model.layers
    check_against_keras(model, name, skip);
    // Written back, each operation keeps Keras's class, config and call.
    const kiln::testing::TempDir folder;
    model.save(folder.file("again.keras"));
    Model again = kiln::load_keras_model(folder.file("again.keras"));
    CHECK(operation_nodes(again) == operation_nodes(model));
    check_against_keras(again, name, skip);
  }
}

TEST_CASE("kiln::ops on a model's tensors record the nodes Keras records for the same keras.ops calls",
          "[layers][operation][serialize][keras]") {
  Model cpp = recorded_in_cpp();
  const Model keras = kiln::load_keras_model(fixture("ops_recorded.keras"));
  const std::vector<std::string> ours = operation_nodes(cpp), theirs = operation_nodes(keras);
  CHECK(ours.size() == theirs.size());
  for (std::size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) CHECK(ours[i] == theirs[i]);
  check_against_keras(cpp, "ops_recorded", kRecordedSparsemax);

  // It saves and loads in every format, and the gradient reaches both inputs through the recorded calls.
  const kiln::testing::TempDir folder;
  const std::vector<Array> data = {kiln::testing::random_input({3, 4, 6}, 11), kiln::testing::random_input({3, 4, 6}, 12)};
  const std::vector<Array> expected = cpp.predict(data);
  for (const std::string name : {"ops.kiln", "ops.keras", "ops.h5"}) {
    INFO(name);
    cpp.save(folder.file(name));
    const std::vector<Array> loaded = kiln::load_model(folder.file(name)).predict(data);
    REQUIRE(loaded.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) CHECK(loaded[k].bitwise_equal(expected[k]));
  }
}

TEST_CASE("keras.ops operations refuse arguments kiln cannot compute, naming the operation",
          "[layers][operation][errors]") {
  const auto call = [](const std::string& keras_class, const Config& config, const Config& args) {
    auto layer = kiln::layer_from_config({{"class_name", std::string("keras.ops>") + keras_class}, {"config", config}});
    static_cast<kiln::OperationLayer&>(*layer).set_arguments({{"args", args}, {"kwargs", Config::map()}});
    const Tensor x = kiln::Input({None, 4, 6});
    return kiln::Model(x, (*layer)(std::vector<Tensor>{x}));
  };
  const Config x = Config{{"__tensor__", 0}};
  CHECK_THROWS_WITH(call("Max", {{"name", "m"}, {"axis", 1}, {"initial", 0.5}}, Config::list({x})),
                    Contains("'m'") && Contains("initial"));
  CHECK_THROWS_WITH(call("Pad", {{"name", "p"}, {"pad_width", 1}, {"mode", "reflect"}}, Config::list({x})),
                    Contains("reflect"));
  CHECK_THROWS_WITH(call("Mean", {{"name", "m"}, {"axis", 3}}, Config::list({x})), Contains("axis 3"));
  CHECK_THROWS_WITH(call("Reshape", {{"name", "r"}}, Config::list({x})), Contains("newshape"));
  CHECK_THROWS_AS(call("Softmax", {{"name", "s"}, {"axis", 1}, {"color", 2}}, Config::list({x})), kiln::ConfigError);
}
