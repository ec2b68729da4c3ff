#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::CallArgs;
using kiln::Config;
using kiln::ConfigError;
using kiln::ConfigReader;
using kiln::Initializer;
using kiln::LayerPtr;
using kiln::LayerStateError;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// A user's own layer, known to kiln only through the registry: outputs = inputs * factor.
class Scale : public kiln::Layer {
 public:
  explicit Scale(const Config& config) : Layer(config, "Scale") {
    ConfigReader args = config_reader(config);
    if (args.has("factor_initializer")) initializer_ = Initializer::from_config(args.value("factor_initializer"));
    args.finish();
  }
  Config get_config() const override {
    Config config = base_config();
    config.set("factor_initializer", initializer_.get_config());
    return config;
  }

 protected:
  void build(const Shape& input_shape) override { factor_ = add_weight("factor", {input_shape.dim(-1)}, initializer_); }
  Tensor call(const Tensor& input, const CallArgs&) override { return input * variable(factor_, input); }

 private:
  Initializer initializer_ = Initializer::get("ones");
  kiln::WeightId factor_ = 0;
};
KILN_REGISTER_LAYER("acme>Scale", Scale);

// A composite layer that exposes the lifecycle for probing: a trainable weight, a non-trainable one,
// a child made in the constructor, and a call option.
class Probe : public kiln::Layer {
 public:
  explicit Probe(const Config& config = {}) : Layer(config, "Probe") {
    config_reader(config).finish();
    dense_ = track(std::make_shared<kiln::DenseLayer>(Config{{"units", 2}}));
  }
  void add_late_weight() { add_weight("extra", {2}, Initializer::get("zeros")); }
  void track_late_child() { track(std::make_shared<kiln::DenseLayer>(Config{{"units", 2}})); }
  kiln::DenseLayer& child() const { return *dense_; }

 protected:
  void build(const Shape& input_shape) override {
    gamma_ = add_weight("gamma", {2}, Initializer::get("random_normal"));
    dense_->build_for(input_shape);
    moving_ = add_weight("moving", {2}, Initializer::get("random_uniform"), /*trainable=*/false);
  }
  Tensor call(const Tensor& input, const CallArgs& args) override {
    Tensor output = (*dense_)(input)*variable(gamma_, input) + variable(moving_, input);
    return args.flag("double_it", false) ? output * 2.0 : output;
  }
  std::vector<std::string> call_argument_names() const override { return {"double_it"}; }

 private:
  std::shared_ptr<kiln::DenseLayer> dense_;
  kiln::WeightId gamma_ = 0, moving_ = 0;
};

// Creates its child in build() and then refuses inputs that are not matrices.
class Picky : public kiln::Layer {
 public:
  explicit Picky(const Config& config = {}) : Layer(config, "Picky") {}

 protected:
  void build(const Shape& input_shape) override {
    dense_ = track(std::make_shared<kiln::DenseLayer>(Config{{"units", 3}}));
    if (input_shape.rank() != 2) shape_error("takes matrices", {{"input", input_shape}});
    dense_->build_for(input_shape);
  }
  Tensor call(const Tensor& input, const CallArgs&) override { return (*dense_)(input); }

 private:
  std::shared_ptr<kiln::DenseLayer> dense_;
};

std::vector<std::string> paths(const std::vector<kiln::Weight>& weights) {
  std::vector<std::string> result;
  for (const kiln::Weight& weight : weights) result.push_back(weight.path);
  return result;
}

Config minimal_config(const std::string& key) {
  if (key == "kiln>Dense") return {{"units", 2}};
  if (key == "kiln>InputLayer") return {{"batch_shape", Config::list({Config(), 3})}};
  if (key == "kiln>Functional") {
    const Tensor x = kiln::Input({None, 3});
    return kiln::Model(x, kiln::Dense(2)(x)).get_config();
  }
  return Config();
}

}  // namespace

TEST_CASE("Layer registry: every built-in key resolves and the registry has no duplicates", "[layers][registry]") {
  REQUIRE_NOTHROW(kiln::layer_registry().check());
  const std::vector<std::string> keys = kiln::layer_registry().keys();
  for (const char* expected : {"kiln>Dense", "kiln>InputLayer", "kiln>Sequential", "kiln>Functional", "acme>Scale"})
    CHECK(std::find(keys.begin(), keys.end(), expected) != keys.end());
  int created = 0;
  for (const std::string& key : keys) {
    INFO(key);
    CHECK(kiln::layer_registry().contains(key));
    CHECK(key.find('>') != std::string::npos);
    LayerPtr layer;
    try {
      layer = kiln::create_layer(key, minimal_config(key));
    } catch (const ConfigError& error) {
      // A layer with required arguments says which; anything but a ConfigError fails the test.
      CHECK(std::string(error.what()).find(':') != std::string::npos);
      continue;
    }
    REQUIRE(layer);
    ++created;
    CHECK(layer->registered_name() == key);
    CHECK(key.substr(key.find('>') + 1) == layer->class_name());
    // What a layer writes, it reads back.
    const LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*layer));
    CHECK(copy->get_config() == layer->get_config());
    CHECK(copy->registered_name() == key);
  }
  CHECK(created >= 5);
}

TEST_CASE("Layer registry: unknown names fail with the nearest registered ones", "[layers][registry][errors]") {
  CHECK_THROWS_AS(kiln::create_layer("kiln>Dens", {{"units", 2}}), ConfigError);
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dens", {{"units", 2}}),
                    Catch::Contains("unknown layer 'kiln>Dens'") && Catch::Contains("did you mean 'kiln>Dense'"));
  // A bare misspelt class name is compared with the class names, not the whole keys.
  CHECK_THROWS_WITH(kiln::create_layer("Sequentail"), Catch::Contains("did you mean 'kiln>Sequential'"));
  CHECK_THROWS_WITH(kiln::create_layer("Scal"), Catch::Contains("did you mean 'acme>Scale'"));
  CHECK_THROWS_AS(kiln::layer_from_config({{"class_name", "Nope"}, {"config", Config::map()}}), ConfigError);
  CHECK_THROWS_WITH(kiln::layer_from_config(Config("Dense")), Catch::Contains("map"));
  CHECK_FALSE(kiln::layer_registry().contains("Dense"));
}

TEST_CASE("Layer registry: a bare class name resolves to its one key", "[layers][registry]") {
  const LayerPtr dense = kiln::create_layer("Dense", {{"units", 2}});
  CHECK(dense->registered_name() == "kiln>Dense");
  CHECK(dense->class_name() == "Dense");
  CHECK(kiln::create_layer("Scale")->registered_name() == "acme>Scale");
  // Keras writes the class name alone and registered_name null for built-ins.
  const LayerPtr keras = kiln::layer_from_config({{"module", "keras.layers"},
                                                  {"class_name", "Dense"},
                                                  {"config", {{"units", 3}, {"name", "fc"}}},
                                                  {"registered_name", Config()},
                                                  {"build_config", {{"input_shape", Config::list({Config(), 5})}}}});
  CHECK(keras->registered_name() == "kiln>Dense");
  CHECK(keras->built());
  CHECK(keras->name() == "fc");
  CHECK(keras->count_params() == 5 * 3 + 3);
}

TEST_CASE("Layer: a user's own layer is created by name, called, gradient-checked and round-tripped",
          "[layers][custom]") {
  const Config config = {{"name", "gain"}, {"factor_initializer", "random_normal"}};
  const LayerPtr layer = kiln::create_layer("acme>Scale", config);
  CHECK(layer->class_name() == "Scale");
  CHECK(layer->registered_name() == "acme>Scale");
  CHECK(layer->describe() == "Scale 'gain'");

  const Tensor x = kiln::Input({None, 4}, kiln::DType::float64);
  const Tensor y = (*layer)(x);
  CHECK(y.shape() == Shape{None, 4});
  CHECK(paths(layer->weights()) == std::vector<std::string>{"factor"});
  CHECK(layer->get_config().at("factor_initializer").get_string("class_name") == "RandomNormal");

  const LayerCase c{{random_input({3, 4}, 5)}};
  const GradcheckReport report = gradcheck_layer(*layer, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
  CHECK(report.num_checked == 3 * 4 + 4);

  check_config_round_trip(layer, c);
  const Config serialized = kiln::serialize_layer(*layer);
  CHECK(serialized.get_string("class_name") == "Scale");
  CHECK(serialized.get_string("registered_name") == "acme>Scale");
  CHECK(serialized.at("build_config") == Config{{"input_shape", Config::list({Config(), 4})}});

  // Through a handle and in a model, like a built-in layer.
  kiln::LayerHandle<Scale> handle(
      Config{{"name", "twice"}, {"factor_initializer", {{"class_name", "Constant"}, {"config", {{"value", 2.0}}}}}});
  const Tensor z = kiln::Input({None, 2}, kiln::DType::float64);
  kiln::Model model(z, handle(z));
  const Array data = random_input({3, 2}, 1);
  const Array output = model.predict(data);
  for (std::size_t i = 0; i < data.size(); ++i) CHECK(output.flat(i) == 2.0 * data.flat(i));
}

TEST_CASE("Layer: weights may only be created before or during build", "[layers][lifecycle][errors]") {
  auto probe = std::make_shared<Probe>(Config{{"name", "probe"}});
  CHECK_FALSE(probe->built());
  probe->build_for(Shape{None, 3});
  REQUIRE(probe->built());
  CHECK_THROWS_AS(probe->add_late_weight(), LayerStateError);
  CHECK_THROWS_WITH(probe->add_late_weight(),
                    Catch::Contains("Probe 'probe'") && Catch::Contains("add_weight('extra') after build()"));
  CHECK_THROWS_AS(probe->track_late_child(), LayerStateError);
  CHECK(probe->weights().size() == 4);  // nothing half-added
  CHECK(probe->layers().size() == 1);
  probe->build_for(Shape{None, 5});  // a no-op once built
  CHECK(probe->build_shapes() == std::vector<Shape>{Shape{None, 3}});
  CHECK(probe->build_config() == Config{{"input_shape", Config::list({Config(), 3})}});
}

TEST_CASE("Layer: weights are the layer's own then its children's, and freezing never reorders them",
          "[layers][weights]") {
  auto probe = std::make_shared<Probe>();
  probe->build_for(Shape{None, 3});
  CHECK(probe->name() == "probe");
  CHECK(probe->child().name() == "dense");
  const std::vector<std::string> order = {"gamma", "moving", "dense/kernel", "dense/bias"};
  CHECK(paths(probe->weights()) == order);
  CHECK(paths(probe->trainable_weights()) == std::vector<std::string>{"gamma", "dense/kernel", "dense/bias"});
  CHECK(paths(probe->non_trainable_weights()) == std::vector<std::string>{"moving"});
  CHECK(probe->count_params() == 2 + 3 * 2 + 2 + 2);
  for (const kiln::Weight& weight : probe->weights()) CHECK(weight.trainable == (weight.path != "moving"));

  // A frozen child: its weights move to the non-trainable list.
  probe->child().set_trainable(false);
  CHECK(paths(probe->trainable_weights()) == std::vector<std::string>{"gamma"});
  CHECK(paths(probe->non_trainable_weights()) == std::vector<std::string>{"moving", "dense/kernel", "dense/bias"});
  CHECK(paths(probe->weights()) == order);
  probe->child().set_trainable(true);

  // A frozen parent freezes everything it holds; the count stays.
  probe->set_trainable(false);
  CHECK(probe->trainable_weights().empty());
  CHECK(paths(probe->non_trainable_weights()) == order);
  CHECK(paths(probe->weights()) == order);
  for (const kiln::Weight& weight : probe->weights()) CHECK_FALSE(weight.trainable);
  CHECK(probe->count_params() == 12);
  CHECK(probe->get_config().get_bool("trainable") == false);

  // trainable=false from the config; the graph variables it makes are not trainable either.
  kiln::Dense frozen(2, "", {{"trainable", false}});
  kiln::Graph graph;
  const Tensor x = graph.placeholder({None, 3}, kiln::DType::float32, "x");
  frozen(x);
  CHECK(frozen.weights().size() == 2);
  CHECK(frozen->trainable_weights().empty());
  CHECK(frozen->non_trainable_weights().size() == 2);
  CHECK(graph.variables().size() == 2);
  CHECK(graph.trainable_variables().empty());
}

TEST_CASE("Layer: get_weights and set_weights follow weights() order", "[layers][weights]") {
  auto probe = std::make_shared<Probe>();
  probe->build_for(Shape{None, 3});
  const std::vector<Array> before = probe->get_weights();
  REQUIRE(before.size() == 4);
  CHECK(before[0].shape() == Shape{2});     // gamma
  CHECK(before[1].shape() == Shape{2});     // moving
  CHECK(before[2].shape() == Shape{3, 2});  // dense/kernel
  std::vector<Array> values;
  for (std::size_t i = 0; i < before.size(); ++i)
    values.push_back(Array::full(before[i].shape(), static_cast<double>(i + 1), kiln::DType::float64));
  probe->set_weights(values);  // float64 arrays into float32 weights: converted
  const std::vector<Array> after = probe->get_weights();
  for (std::size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].dtype() == kiln::DType::float32);
    CHECK(after[i].flat(0) == static_cast<double>(i + 1));
  }
  CHECK(probe->child().get_weights()[0].flat(0) == 3.0);  // the child shares the storage
  // get_weights copies.
  Array copy = probe->get_weights()[0];
  copy.set_flat(0, 42.0);
  CHECK(probe->get_weights()[0].flat(0) == 1.0);

  CHECK_THROWS_WITH(probe->set_weights({values[0]}), Catch::Contains("got 1 arrays for 4 weights"));
  std::swap(values[0], values[2]);
  CHECK_THROWS_AS(probe->set_weights(values), kiln::ShapeError);
  CHECK_THROWS_WITH(probe->set_weights(values), Catch::Contains("'gamma'"));
  CHECK(probe->get_weights()[0].flat(0) == 1.0);  // nothing written on failure

  kiln::Dense unbuilt(2);
  CHECK_THROWS_WITH(unbuilt.set_weights({Array({3, 2})}), Catch::Contains("not built yet"));
}

TEST_CASE("Layer: weights are a function of the layer's name and the seed", "[layers][weights][rng]") {
  auto a = std::make_shared<Probe>(Config{{"name", "p1"}});
  auto b = std::make_shared<Probe>(Config{{"name", "p1"}});
  auto c = std::make_shared<Probe>(Config{{"name", "p2"}});
  for (const auto& probe : {a, b, c}) probe->build_for(Shape{None, 3});
  const std::vector<Array> wa = a->get_weights(), wb = b->get_weights(), wc = c->get_weights();
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wa[i].bitwise_equal(wb[i]));
  for (std::size_t i : {0, 1, 2})             // gamma, moving, dense/kernel: random (the bias is zeros)
    CHECK_FALSE(wa[i].bitwise_equal(wc[i]));  // another name, other streams (children included)
  a->initialize_weights(5);
  CHECK_FALSE(a->get_weights()[1].bitwise_equal(wb[1]));
  b->initialize_weights(5);
  CHECK(a->get_weights()[1].bitwise_equal(b->get_weights()[1]));
}

TEST_CASE("Layer: a failed build leaves nothing behind, so a corrected call builds", "[layers][lifecycle][errors]") {
  auto picky = std::make_shared<Picky>();
  const Tensor cube = kiln::Input({None, 2, 4});
  CHECK_THROWS_AS((*picky)(cube), kiln::ShapeError);
  CHECK_FALSE(picky->built());
  CHECK(picky->layers().empty());
  const Tensor matrix = kiln::Input({None, 4});
  const Tensor y = (*picky)(matrix);
  CHECK(y.shape() == Shape{None, 3});
  CHECK(picky->layers().size() == 1);
  CHECK(paths(picky->weights()) == std::vector<std::string>{"dense/kernel", "dense/bias"});
}

TEST_CASE("Layer: calls are checked before anything is built", "[layers][lifecycle][errors]") {
  // A layer that is not held by a shared_ptr cannot record its calls: an error, not a crash.
  kiln::DenseLayer on_stack(Config{{"units", 2}, {"name", "local"}});
  const Tensor x = kiln::Input({None, 3});
  CHECK_THROWS_AS(on_stack(x), LayerStateError);
  CHECK_THROWS_WITH(on_stack(x), Catch::Contains("Dense 'local'") && Catch::Contains("std::shared_ptr"));

  kiln::Dense dense(2, "", {{"name", "fc"}});
  CHECK_THROWS_WITH(dense(std::vector<Tensor>{x, x}), Catch::Contains("Dense 'fc'") && Catch::Contains("got 2"));
  dense(x);
  // Once built, a second input is still refused rather than ignored.
  CHECK_THROWS_WITH(dense(std::vector<Tensor>{x, x}), Catch::Contains("Dense 'fc'") && Catch::Contains("got 2"));
  CHECK_THROWS_WITH(dense(Tensor()), Catch::Contains("empty Tensor"));
  CHECK_THROWS_WITH(dense(x, CallArgs().option("training_mode", true)),
                    Catch::Contains("does not take the call argument 'training_mode'"));

  auto probe = std::make_shared<Probe>();
  const Tensor z = kiln::Input({None, 3}, kiln::DType::float64);
  CHECK_THROWS_WITH((*probe)(z, CallArgs().option("double", true)), Catch::Contains("it takes 'double_it'"));
  const Tensor once = (*probe)(z);
  const Tensor twice = (*probe)(z, CallArgs().option("double_it", true));
  kiln::Model model(z, twice);
  const Array data = random_input({2, 3}, 3);
  kiln::Model plain(z, once);
  const Array a = plain.predict(data), b = model.predict(data);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(b.flat(i) == 2.0 * a.flat(i));
  CHECK_THROWS_WITH(CallArgs().option("double_it", 3).flag("double_it", false), Catch::Contains("double_it"));
}

TEST_CASE("Layer: names, dtypes and configs of unbuilt layers", "[layers][config]") {
  kiln::Dense unnamed(3);
  CHECK(unnamed.name().empty());
  const Config config = unnamed.get_config();
  CHECK(config.at("name").is_null());
  CHECK(config.at("dtype").is_null());
  // An unbuilt, unnamed layer round-trips too: null means "choose one".
  const LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*unnamed));
  CHECK_FALSE(copy->built());
  CHECK(copy->get_config() == config);
  CHECK_FALSE(kiln::serialize_layer(*unnamed).contains("build_config"));

  // Keras 3 writes a dtype policy object.
  const LayerPtr policy = kiln::create_layer(
      "Dense", {{"units", 2},
                {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "float64"}}}}}});
  CHECK(policy->dtype() == kiln::DType::float64);
  CHECK(policy->has_dtype());
  CHECK_THROWS_AS(kiln::create_layer("Dense", {{"units", 2}, {"dtype", "float16"}}), ConfigError);
  CHECK_THROWS_AS(kiln::create_layer("Dense", {{"units", 2}, {"name", 3}}), ConfigError);
  CHECK_THROWS_WITH(kiln::create_layer("Dense", Config::list()), Catch::Contains("Dense") && Catch::Contains("map"));

  // Without a given dtype, the first input decides.
  kiln::Dense wide(2);
  wide(kiln::Input({None, 3}, kiln::DType::float64));
  CHECK(wide->dtype() == kiln::DType::float64);
  CHECK(wide.get_weights()[0].dtype() == kiln::DType::float64);
  CHECK(wide.get_config().get_string("dtype") == "float64");
}

TEST_CASE("to_snake_case: Keras's base names", "[layers][names]") {
  CHECK(kiln::to_snake_case("Dense") == "dense");
  CHECK(kiln::to_snake_case("MultiHeadAttention") == "multi_head_attention");
  CHECK(kiln::to_snake_case("MHAttention") == "mh_attention");
  CHECK(kiln::to_snake_case("GlobalAveragePooling1D") == "global_average_pooling1d");
  CHECK(kiln::to_snake_case("Conv2DTranspose") == "conv2d_transpose");
  CHECK(kiln::to_snake_case("InputLayer") == "input_layer");
  CHECK(kiln::to_snake_case("ReLU") == "re_lu");
  CHECK(kiln::to_snake_case("PReLU") == "p_re_lu");
  CHECK(kiln::to_snake_case("LSTM") == "lstm");
  CHECK(kiln::to_snake_case("Layer2Norm") == "layer2_norm");  // Keras's "(.)([A-Z][a-z]+)" takes any character before
  CHECK(kiln::to_snake_case("dense") == "dense");
  CHECK(kiln::to_snake_case("") == "");
}

TEST_CASE("every registered layer goes through the layer harness", "[layers][harness]") {
  // Test-only layers (acme>, test>) are exempt, and so is the InputLayer: it makes placeholders and is
  // never called on tensors (tests/layers/model_test.cpp covers it).
  for (const std::string& key : kiln::layer_registry().keys()) {
    const bool hub = key.rfind("keras_hub>", 0) == 0;
    if (key.rfind("kiln>", 0) != 0 && key.rfind("Custom>", 0) != 0 && !hub) continue;
    if (key == "kiln>InputLayer") continue;
    // keras-hub's backbones and tasks are models, checked against keras-hub's own files (tests/hub/).
    auto ends_with = [&](const std::string& suffix) {
      return key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (hub && (ends_with("Backbone") || ends_with("CausalLM") || ends_with("TextClassifier") ||
                ends_with("MaskedLM")))
      continue;
    INFO(key << " has no KILN_LAYER_HARNESS case");
    CHECK(kiln::testing::harnessed_layers().count(key) == 1);
  }
}
