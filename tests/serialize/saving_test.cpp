// Saving and reloading whole models and weights: every layer type, a functional model with nested
// models and a user's own layer, resuming training, atomic saves and the errors a user can make.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <zlib.h>

#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/container.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Model;
using kiln::Shape;
using kiln::Tensor;
using kiln::testing::random_input;
using kiln::testing::TempDir;

namespace {

constexpr std::int64_t None = Shape::unknown;

// A user's own layer, known to kiln only through the registry: outputs = inputs + shift.
class Shift : public kiln::Layer {
 public:
  explicit Shift(const Config& config) : Layer(config, "Shift") { config_reader(config).finish(); }
  Config get_config() const override { return base_config(); }

 protected:
  void build(const Shape& input_shape) override {
    shift_ = add_weight("shift", {input_shape.dim(-1)}, kiln::Initializer::get("random_normal"));
  }
  Tensor call(const Tensor& input, const kiln::CallArgs&) override { return input + variable(shift_, input); }

 private:
  kiln::WeightId shift_ = 0;
};
KILN_REGISTER_LAYER("acme>Shift", Shift);

// A user's loss, metric and initializer, registered as a layer is: by key, with a config.
KILN_REGISTER_LOSS("acme>Cubic", {"cubic",
                                  {{"scale", 1.0}},
                                  kiln::TargetForm::elementwise,
                                  [](const Tensor& y_true, const Tensor& y_pred, const Config& arguments) {
                                    const Tensor d = kiln::ops::abs(y_pred - y_true);
                                    return kiln::ops::mean(d * d * d) * arguments.get_double("scale");
                                  },
                                  {}});
KILN_REGISTER_METRIC("acme>WithinTenth",
                     {"within_tenth",
                      {{"tolerance", 0.1}},
                      kiln::TargetForm::elementwise,
                      [](const Tensor& y_true, const Tensor& y_pred, const Config& arguments) {
                        const Tensor tolerance = kiln::ops::scalar_like(y_pred, arguments.get_double("tolerance"));
                        return kiln::ops::mean(kiln::ops::less(kiln::ops::abs(y_pred - y_true), tolerance));
                      }});
KILN_REGISTER_INITIALIZER("acme>Halves", {kiln::Config::map(), [](std::vector<double>& values, const kiln::Fans&,
                                                                  const Config&, kiln::Rng&) {
                                            for (double& value : values) value = 0.5;
                                          }});

struct ModelCase {
  std::string covers;  // the registered class it is here for
  std::function<Model()> make;
  std::vector<Shape> input_shapes;  // with the batch
  bool integer_inputs = false;      // Embedding's indices
};

Tensor input(std::initializer_list<std::int64_t> dims) { return kiln::Input(Shape(dims)); }

// Dense(3) on an input of 3 features, then the keras.ops class `operation` with `config` called on the Dense
// output and `argument`, as Keras's functional config writes such a node.
// "T" anywhere in `value` becomes `tensor`.
Config with_tensor(const Config& value, const Config& tensor) {
  if (value.type() == Config::Type::string && value.as_string() == "T") return tensor;
  if (!value.is_list()) return value;
  Config list = Config::list();
  for (const Config& item : value.as_list()) list.push_back(with_tensor(item, tensor));
  return list;
}

Model operation_model(const std::string& operation, Config config, const Config& argument,
                      const Config& arguments = Config()) {
  auto tensor = [](const char* layer, int dims) {
    return Config{{"class_name", "__keras_tensor__"},
                  {"config",
                   {{"shape", Config::list({Config(), dims})},
                    {"dtype", "float32"},
                    {"keras_history", Config::list({Config(layer), 0, 0})}}}};
  };
  config.set("name", "op");
  const Config layers = Config::list(
      {{{"module", "keras.layers"},
        {"class_name", "InputLayer"},
        {"config", {{"batch_shape", Config::list({Config(), 3})}, {"dtype", "float32"}, {"name", "x"}}},
        {"name", "x"},
        {"inbound_nodes", Config::list()}},
       {{"module", "keras.layers"},
        {"class_name", "Dense"},
        {"config", {{"name", "dense"}, {"units", 3}}},
        {"name", "dense"},
        {"inbound_nodes", Config::list({{{"args", Config::list({tensor("x", 3)})}, {"kwargs", Config::map()}}})}},
       {{"module", "keras.src.ops.numpy"},
        {"class_name", operation},
        {"config", config},
        {"name", "op"},
        {"inbound_nodes",
         Config::list({{{"args", arguments.is_null() ? Config::list({tensor("dense", 3), argument})
                                                       : with_tensor(arguments, tensor("dense", 3))},
                        {"kwargs", Config::map()}}})}}});
  return kiln::model_from_config({{"module", "keras.src.models.functional"},
                                  {"class_name", "Functional"},
                                  {"config",
                                   {{"name", "m"},
                                    {"layers", layers},
                                    {"input_layers", Config::list({"x", 0, 0})},
                                    {"output_layers", Config::list({"op", 0, 0})}}}});
}

std::vector<ModelCase> every_layer_type() {
  using namespace kiln;
  std::vector<ModelCase> cases = {
      {"kiln>Dense",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Dense(3, "relu")(x));
       },
       {{4, 5}}},
      {"kiln>Activation",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Activation("swish")(Dense(3)(x)));
       },
       {{4, 5}}},
      {"kiln>Dropout",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Dropout(0.5)(Dense(3)(x)));
       },
       {{4, 5}}},
      {"kiln>LayerNormalization",
       [] {
         Tensor x = input({None, 5});
         return Model(x, LayerNormalization()(Dense(3)(x)));
       },
       {{4, 5}}},
      {"kiln>Reshape",
       [] {
         Tensor x = input({None, 6});
         return Model(x, Dense(2)(Reshape({3, 2})(x)));
       },
       {{4, 6}}},
      {"kiln>Flatten",
       [] {
         Tensor x = input({None, 3, 2});
         return Model(x, Dense(2)(Flatten()(x)));
       },
       {{4, 3, 2}}},
      {"kiln>Add",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Add()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Subtract",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Subtract()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Multiply",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Multiply()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Average",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Average()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Maximum",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Maximum()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Minimum",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {Minimum()({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Concatenate",
       [] {
         Tensor a = input({None, 4}), b = input({None, 2});
         return Model({a, b}, {Dense(2)(Concatenate()({a, b}))});
       },
       {{4, 4}, {4, 2}}},
      {"kiln>Embedding",
       [] {
         Tensor x = input({None, 6});
         return Model(x, Embedding(10, 3)(x));
       },
       {{4, 6}},
       true},
      {"kiln>ReversibleEmbedding",
       [] {
         Tensor x = input({None, 6});
         ReversibleEmbedding embed(10, 3, {{"tie_weights", false}});
         return Model(x, embed(embed(x), kiln::CallArgs().option("reverse", true)));
       },
       {{4, 6}},
       true},
      {"keras_hub>TokenAndPositionEmbedding",
       [] {
         Tensor x = input({None, 6});
         return Model(x, TokenAndPositionEmbedding(10, 8, 4, {{"mask_zero", true}})(x));
       },
       {{4, 6}},
       true},
      {"keras_hub>PositionEmbedding",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, PositionEmbedding(8)(x));
       },
       {{4, 6, 3}}},
      {"keras_hub>SinePositionEncoding",
       [] {
         Tensor x = input({None, 6, 4});
         return Model(x, Add()({x, SinePositionEncoding()(x)}));
       },
       {{4, 6, 4}}},
      {"keras_hub>RotaryEmbedding",
       [] {
         Tensor x = input({None, 6, 4});
         return Model(x, RotaryEmbedding(100.0)(Dense(4)(x)));
       },
       {{4, 6, 4}}},
      {"keras_hub>TransformerEncoder",
       [] {
         Tensor x = input({None, 6, 4});
         return Model(x,
                      TransformerEncoder(8, 2, {{"normalize_first", true}, {"bias_initializer", "random_normal"}})(x));
       },
       {{4, 6, 4}}},
      {"keras_hub>TransformerDecoder",
       [] {
         Tensor x = input({None, 6, 4});
         Tensor memory = input({None, 3, 5});
         const Tensor alone = TransformerDecoder(8, 2)(x);
         return Model({x, memory}, {TransformerDecoder(8, 2, {{"activation", "gelu"}})({alone, memory})[0]});
       },
       {{4, 6, 4}, {4, 3, 5}}},
      {"kiln>GlobalAveragePooling1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, GlobalAveragePooling1D()(Dense(4)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>SimpleRNN",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, SimpleRNN(4, {{"activation", "relu"}, {"go_backwards", true}})(x));
       },
       {{4, 6, 3}}},
      {"kiln>LSTM",
       [] {
         Tensor x = input({None, 6, 3});
         Outputs all = LSTM(4, {{"return_sequences", true}, {"return_state", true}})(std::vector<Tensor>{x});
         return Model(x, LSTM(4, {{"bias_initializer", "random_normal"}})({all[0], all[1], all[2]}));
       },
       {{4, 6, 3}}},
      {"kiln>GRU",
       [] {
         Tensor x = input({None, 6, 3});
         Tensor a = GRU(4, {{"bias_initializer", "random_normal"}})(x);
         Tensor b = GRU(4, {{"reset_after", false}, {"recurrent_activation", "hard_sigmoid"}})(x);
         return Model(x, Add()({a, b}));
       },
       {{4, 6, 3}}},
      {"kiln>Masking",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, LSTM(2)(Masking(0.5)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>Bidirectional",
       [] {
         Tensor x = input({None, 6, 3});
         Tensor seq = Bidirectional(LSTM(3, {{"return_sequences", true}}), "ave")(x);
         return Model(x, Bidirectional(GRU(2, {{"bias_initializer", "random_normal"}}))(seq));
       },
       {{4, 6, 3}}},
      {"kiln>TimeDistributed",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, TimeDistributed(Dense(2, "tanh"))(x));
       },
       {{4, 6, 3}}},
      {"kiln>Conv1D",
       [] {
         Tensor x = input({None, 9, 3});
         return Model(x, Conv1D(4, 3, "relu", {{"padding", "causal"}, {"dilation_rate", 2}})(x));
       },
       {{4, 9, 3}}},
      {"kiln>Conv2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, Conv2D(4, {3, 2}, "", {{"strides", 2}, {"padding", "same"}})(x));
       },
       {{4, 6, 5, 2}}},
      {"kiln>BatchNormalization",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, BatchNormalization(-1, {{"moving_mean_initializer", "random_normal"}})(x));
       },
       {{4, 6, 5, 2}}},
      {"kiln>GroupNormalization",
       [] {
         Tensor x = input({None, 6, 5, 4});
         return Model(x, GroupNormalization(2, {{"gamma_initializer", "random_normal"}})(Dense(4)(x)));
       },
       {{4, 6, 5, 4}}},
      {"kiln>RMSNormalization",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, RMSNormalization()(Dense(4)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>SpatialDropout1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, Dense(2)(SpatialDropout1D(0.3, {{"seed", 2}})(Dense(4)(x))));
       },
       {{4, 6, 3}}},
      {"kiln>SpatialDropout2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, Dense(2)(SpatialDropout2D(0.3, {{"data_format", "channels_first"}})(Dense(4)(x))));
       },
       {{4, 6, 5, 2}}},
      {"kiln>GaussianNoise",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Dense(2)(GaussianNoise(0.1)(Dense(3)(x))));
       },
       {{4, 5}}},
      {"kiln>GaussianDropout",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Dense(2)(GaussianDropout(0.2, {{"seed", 1}})(Dense(3)(x))));
       },
       {{4, 5}}},
      {"kiln>Dot",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, Dot(2, 2, {{"normalize", true}})({Dense(4)(x), Dense(4)(x)}));
       },
       {{4, 6, 3}}},
      {"kiln>Normalization",
       [] {
         Tensor x = input({None, 5});
         Normalization norm;
         norm.adapt(random_input({20, 5}, 3, -4.0, 9.0).astype(DType::float32));
         return Model(x, Dense(2)(norm(x)));
       },
       {{4, 5}}},
      {"kiln>ActivityRegularization",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Dense(2)(ActivityRegularization(0.01, 0.02)(Dense(3, "", {{"kernel_regularizer", "l2"}})(x))));
       },
       {{4, 5}}},
      {"kiln>MaxPooling1D",
       [] {
         Tensor x = input({None, 9, 3});
         return Model(x, MaxPooling1D(3, {{"strides", 2}})(Dense(2)(x)));
       },
       {{4, 9, 3}}},
      {"kiln>AveragePooling1D",
       [] {
         Tensor x = input({None, 9, 3});
         return Model(x, AveragePooling1D(2, {{"padding", "same"}})(Dense(2)(x)));
       },
       {{4, 9, 3}}},
      {"kiln>MaxPooling2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, MaxPooling2D()(Dense(3)(x)));
       },
       {{4, 6, 5, 2}}},
      {"kiln>AveragePooling2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, AveragePooling2D({3, 2}, {{"strides", 1}})(Dense(3)(x)));
       },
       {{4, 6, 5, 2}}},
      {"kiln>GlobalAveragePooling2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, GlobalAveragePooling2D()(Dense(3)(x)));
       },
       {{4, 6, 5, 2}}},
      {"kiln>GlobalMaxPooling1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, GlobalMaxPooling1D()(Dense(4)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>GlobalMaxPooling2D",
       [] {
         Tensor x = input({None, 6, 5, 2});
         return Model(x, GlobalMaxPooling2D("channels_first")(Dense(3)(x)));
       },
       {{4, 6, 5, 2}}},
      {"kiln>Permute",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, Permute({2, 1})(Dense(4)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>RepeatVector",
       [] {
         Tensor x = input({None, 5});
         return Model(x, RepeatVector(3)(Dense(2)(x)));
       },
       {{4, 5}}},
      {"kiln>LayerScale",
       [] {
         Tensor x = input({None, 3, 4});
         return Model(x, LayerScale(0.3, 4)(Dense(4)(x)));
       },
       {{2, 3, 4}}},
      {"kiln>StochasticDepth",
       [] {
         Tensor x = input({None, 5});
         return Model(x, StochasticDepth(0.2)(Dense(3)(x)));
       },
       {{4, 5}}},
      {"kiln>CustomScaleLayer",
       [] {
         Tensor a = input({None, 4}), b = input({None, 4});
         return Model({a, b}, {CustomScaleLayer(0.17)({Dense(3)(a), Dense(3)(b)})});
       },
       {{4, 4}, {4, 4}}},
      {"kiln>Rescaling",
       [] {
         Tensor x = input({None, 5});
         return Model(x, Rescaling(0.5, 0.25)(Dense(2)(x)));
       },
       {{4, 5}}},
      {"kiln>UnitNormalization",
       [] {
         Tensor x = input({None, 5});
         return Model(x, UnitNormalization()(Dense(3)(x)));
       },
       {{4, 5}}},
      {"kiln>ZeroPadding1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, ZeroPadding1D(2)(Dense(3)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>ZeroPadding2D",
       [] {
         Tensor x = input({None, 5, 4, 2});
         return Model(x, ZeroPadding2D(1)(Dense(3)(x)));
       },
       {{4, 5, 4, 2}}},
      {"kiln>Cropping1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, Cropping1D(1)(Dense(3)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>Cropping2D",
       [] {
         Tensor x = input({None, 5, 4, 2});
         return Model(x, Cropping2D(1)(Dense(3)(x)));
       },
       {{4, 5, 4, 2}}},
      {"kiln>UpSampling1D",
       [] {
         Tensor x = input({None, 6, 3});
         return Model(x, UpSampling1D(2)(Dense(3)(x)));
       },
       {{4, 6, 3}}},
      {"kiln>UpSampling2D",
       [] {
         Tensor x = input({None, 5, 4, 2});
         return Model(x, UpSampling2D(2, {{"interpolation", "bilinear"}})(Dense(3)(x)));
       },
       {{4, 5, 4, 2}}},
      {"kiln>Conv1DTranspose",
       [] {
         Tensor x = input({None, 5, 3});
         return Model(x, Conv1DTranspose(2, 3, "", {{"strides", 2}})(x));
       },
       {{4, 5, 3}}},
      {"kiln>Conv2DTranspose",
       [] {
         Tensor x = input({None, 4, 3, 2});
         return Model(x, Conv2DTranspose(3, 2, "", {{"strides", 2}, {"padding", "same"}})(x));
       },
       {{4, 4, 3, 2}}},
      {"kiln>DepthwiseConv2D",
       [] {
         Tensor x = input({None, 5, 4, 2});
         return Model(x, DepthwiseConv2D(3, "", {{"depth_multiplier", 2}})(x));
       },
       {{4, 5, 4, 2}}},
      {"kiln>SeparableConv1D",
       [] {
         Tensor x = input({None, 7, 3});
         return Model(x, SeparableConv1D(4, 3)(x));
       },
       {{4, 7, 3}}},
      {"kiln>SeparableConv2D",
       [] {
         Tensor x = input({None, 5, 4, 2});
         return Model(x, SeparableConv2D(3, 2, "relu", {{"padding", "same"}})(x));
       },
       {{4, 5, 4, 2}}},
      {"kiln>DotProductAttention",
       [] {
         Tensor x = input({None, 5, 4});
         Tensor q = Dense(4)(x);
         return Model(x, DotProductAttention()({q, x, x}));
       },
       {{3, 5, 4}}},
      {"kiln>Attention",
       [] {
         Tensor x = input({None, 5, 4});
         return Model(x, Attention(true)({Dense(4)(x), x}));
       },
       {{3, 5, 4}}},
      {"kiln>MultiHeadAttention",
       [] {
         Tensor x = input({None, 5, 8});
         Tensor a = MultiHeadAttention(2)({x, x, x});
         Tensor b = MultiHeadAttention(2, 3)({x, x});
         return Model(x, Add()({a, b}));
       },
       {{3, 5, 8}}},
      {"Custom>MHAttention",
       [] {
         Tensor x = input({None, 6, 4});
         return Model(x, MHAttention(4, 2)(x));
       },
       {{3, 6, 4}}},
      {"kiln>Sequential",
       [] {
         Sequential inner;
         inner.add(Dense(4, "tanh").ptr()).add(Dense(2).ptr());
         Tensor x = input({None, 5});
         return Model(x, inner(x));
       },
       {{4, 5}}},
      {"kiln>Functional",
       [] {
         Tensor x = input({None, 5});
         Model inner(x, Dense(3, "relu")(x), "inner");
         Tensor y = input({None, 5});
         return Model(y, Dense(2)(inner(y)));
       },
       {{4, 5}}},
      {"kiln>InputLayer",
       [] {
         Tensor x = input({None, 2});
         return Model(x, Dense(1)(x));
       },
       {{4, 2}}},
      {"kiln>ReLU",
       [] {
         Tensor x = input({None, 6});
         return Model(x, ReLU({{"max_value", 0.5}, {"negative_slope", 0.1}, {"threshold", 0.2}})(x));
       },
       {{4, 6}}},
      {"kiln>LeakyReLU",
       [] {
         Tensor x = input({None, 6});
         return Model(x, LeakyReLU(0.2)(x));
       },
       {{4, 6}}},
      {"kiln>ELU",
       [] {
         Tensor x = input({None, 6});
         return Model(x, ELU(0.7)(x));
       },
       {{4, 6}}},
      {"kiln>Softmax",
       [] {
         Tensor x = input({None, 3, 4});
         return Model(x, Softmax(1)(x));
       },
       {{2, 3, 4}}},
      {"kiln>PReLU",
       [] {
         Tensor x = input({None, 3, 4});
         return Model(x, PReLU({{"alpha_initializer", "random_uniform"}, {"shared_axes", 1}})(x));
       },
       {{2, 3, 4}}},
      {"acme>Shift",
       [] {
         Tensor x = input({None, 3});
         return Model(x, LayerHandle<Shift>(Config())(x));
       },
       {{4, 3}}},
      // keras.ops calls between layers (OperationLayer), as C++ records them.
      {"keras.ops>Add",
       [] {
         Tensor x = input({None, 3});
         Tensor h = Dense(3)(x);
         return Model(x, h + x + 1.5);
       },
       {{4, 3}}},
      {"keras.ops>Subtract",
       [] {
         Tensor x = input({None, 3});
         return Model(x, Dense(3)(x) - x - 0.5);
       },
       {{4, 3}}},
      {"keras.ops>Multiply",
       [] {
         Tensor x = input({None, 3});
         return Model(x, Dense(3)(x) * x * 2.0);
       },
       {{4, 3}}},
      {"keras.ops>Divide",
       [] {
         Tensor x = input({None, 3});
         return Model(x, Dense(3)(x) / (x * x + 1.0));
       },
       {{4, 3}}},
      {"keras.ops>Maximum",
       [] {
         Tensor x = input({None, 3});
         return Model(x, ops::maximum(Dense(3)(x), x));
       },
       {{4, 3}}},
      {"keras.ops>Minimum",
       [] {
         Tensor x = input({None, 3});
         return Model(x, ops::minimum(Dense(3)(x), x));
       },
       {{4, 3}}},
      {"keras.ops>Negative",
       [] {
         Tensor x = input({None, 3});
         return Model(x, -Dense(3)(x));
       },
       {{4, 3}}},
      {"keras.ops>GetItem",
       [] {
         Tensor x = input({None, 5, 3});
         return Model(x, ops::get_item(Dense(4)(x), {ops::Slice{}, ops::Slice{std::nullopt, std::nullopt, -2}, -1}));
       },
       {{4, 5, 3}}},
      // keras.ops.slice and ops.true_divide, which kiln's own ops record otherwise (as GetItem and Divide),
      // from Keras's node form.
      {"keras.ops>Slice",
       [] {
         return operation_model("Slice", {{"shape", {-1, 2}}}, Config::list({0, 1}));
       },
       {{4, 3}}},
      {"keras.ops>TrueDivide", [] { return operation_model("TrueDivide", Config::map(), Config(4.0)); }, {{4, 3}}},
      {"keras.ops>Matmul",
       [] {
         Tensor x = input({None, 3, 3});
         return Model(x, ops::matmul(Dense(3)(x), x, false, true));
       },
       {{4, 3, 3}}},
      {"keras.ops>Glu",
       [] {
         Tensor x = input({None, 3});
         return Model(x, ops::glu(Dense(4)(x), -1));
       },
       {{4, 3}}},
      {"keras.ops>Concatenate",
       [] {
         Tensor x = input({None, 3});
         return Model(x, ops::concat({Dense(2)(x), x}, 1));
       },
       {{4, 3}}},
  };
  // Every other keras.ops class from Keras's node form, on a Dense's (None, 3) output ("T" in the call's
  // arguments): its config and its call.
  const Config T("T");
  const std::vector<std::tuple<std::string, Config, Config>> operations = {
      {"Exp", Config::map(), {T}}, {"Log", Config::map(), {T}}, {"Sqrt", Config::map(), {T}},
      {"Rsqrt", Config::map(), {T}}, {"Square", Config::map(), {T}}, {"Absolute", Config::map(), {T}},
      {"Sin", Config::map(), {T}}, {"Cos", Config::map(), {T}}, {"Tanh", Config::map(), {T}},
      {"Reciprocal", Config::map(), {T}}, {"Relu", Config::map(), {T}}, {"Relu6", Config::map(), {T}},
      {"Sigmoid", Config::map(), {T}}, {"Softplus", Config::map(), {T}}, {"Softsign", Config::map(), {T}},
      {"Silu", Config::map(), {T}}, {"LogSigmoid", Config::map(), {T}}, {"HardSigmoid", Config::map(), {T}},
      {"HardSilu", Config::map(), {T}}, {"HardTanh", Config::map(), {T}}, {"TanhShrink", Config::map(), {T}},
      {"SparsePlus", Config::map(), {T}}, {"SparseSigmoid", Config::map(), {T}}, {"Selu", Config::map(), {T}},
      {"LeakyRelu", {{"negative_slope", 0.1}}, {T}}, {"Elu", {{"alpha", 0.5}}, {T}}, {"Celu", {{"alpha", 0.7}}, {T}},
      {"Gelu", {{"approximate", false}}, {T}}, {"SoftShrink", {{"threshold", 0.3}}, {T}},
      {"HardShrink", {{"threshold", 0.2}}, {T}}, {"Squareplus", {{"b", 3.0}}, {T}},
      {"Threshold", {{"threshold", 0.1}, {"default_value", -1.0}}, {T}},
      {"Softmax", {{"axis", -1}}, {T}}, {"LogSoftmax", {{"axis", 1}}, {T}}, {"Sparsemax", {{"axis", -1}}, {T}},
      {"Normalize", {{"axis", -1}, {"order", 2}, {"epsilon", Config()}}, {T}},
      {"Power", Config::map(), Config::list({T, 2.0})}, {"Greater", Config::map(), Config::list({T, 0.0})},
      {"GreaterEqual", Config::map(), Config::list({0.1, T})}, {"Less", Config::map(), Config::list({T, T})},
      {"LessEqual", Config::map(), Config::list({T, 0.2})}, {"Equal", Config::map(), Config::list({T, T})},
      {"Where", Config::map(), Config::list({T, 1.0, T})}, {"Clip", {{"x_min", -0.5}, {"x_max", 0.5}}, {T}},
      {"Mean", {{"axis", 1}, {"keepdims", true}}, {T}}, {"Sum", {{"axis", -1}, {"keepdims", false}}, {T}},
      {"Max", {{"axis", -1}, {"keepdims", false}, {"initial", Config()}}, {T}},
      {"Min", {{"axis", Config::list({1})}, {"keepdims", true}, {"initial", Config()}}, {T}},
      {"Var", {{"axis", 1}, {"keepdims", false}}, {T}}, {"Std", {{"axis", -1}, {"keepdims", true}}, {T}},
      {"Stack", {{"axis", 1}}, Config::list({Config::list({T, T})})}, {"ExpandDims", {{"axis", 1}}, {T}},
      {"Squeeze", {{"axis", Config()}}, {T}}, {"Reshape", {{"newshape", Config::list({-1, 3, 1})}}, {T}},
{"Transpose", {{"axes", Config::list({0, 1})}}, {T}},
      {"Swapaxes", {{"axis1", 0}, {"axis2", 0}}, {T}}, {"Moveaxis", {{"source", 1}, {"destination", 1}}, {T}},
      {"Flip", {{"axis", 1}}, {T}}, {"Pad", {{"pad_width", Config::list({Config::list({0, 0}), Config::list({1, 2})})}, {"mode", "constant"}}, {T}},
      {"BroadcastTo", {{"shape", Config::list({Config(), 3})}}, {T}}, {"ZerosLike", {{"dtype", Config()}}, {T}},
      {"OnesLike", {{"dtype", Config()}}, {T}},
  };
  for (const auto& [operation, config, arguments] : operations)
    cases.push_back({"keras.ops>" + operation,
                     [operation = operation, config = config, arguments = arguments] {
                       return operation_model(operation, config, Config(), arguments);
                     },
                     {{4, 3}}});
  // keras-hub's decoder blocks and norms (kiln/hub/layers), and its backbones, made from their arguments. Token
  // ids and masks are integers in [0, 10).
  const std::vector<std::pair<std::string, Config>> hub_layers = {
      {"keras_hub>LlamaTransformerDecoder",
       {{"intermediate_dim", 8}, {"num_query_heads", 2}, {"num_key_value_heads", 1}, {"rope_frequency_adjustment_factor", 8.0},
        {"rope_low_freq_factor", 1.0}, {"rope_high_freq_factor", 4.0}, {"rope_pretraining_sequence_length", 64}}},
      {"keras_hub>MistralTransformerDecoder",
       {{"intermediate_dim", 8}, {"num_query_heads", 4}, {"num_key_value_heads", 2}, {"sliding_window", 2}, {"head_dim", 2}}},
      {"keras_hub>QwenTransformerDecoder",
       {{"intermediate_dim", 8}, {"num_query_heads", 2}, {"num_key_value_heads", 2}, {"use_sliding_window_attention", true},
        {"sliding_window_size", 3}}},
      {"keras_hub>Qwen3TransformerDecoder",
       {{"intermediate_dim", 8}, {"num_query_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 2},
        {"sliding_window_size", 3}}},
      {"keras_hub>Phi3Decoder",
       {{"hidden_dim", 4}, {"intermediate_dim", 8}, {"num_query_heads", 2}, {"num_key_value_heads", 1},
        {"max_sequence_length", 8}, {"pretraining_sequence_length", 4}, {"rope_scaling_type", "su"},
        {"rope_scaling_short_factor", Config{1.0}}, {"rope_scaling_long_factor", Config{2.0}}}},
      {"keras_hub>FalconTransformerDecoder", {{"num_attention_heads", 2}, {"intermediate_dim", 8}}},
      {"keras_hub>GemmaDecoderBlock",
       {{"hidden_dim", 4}, {"intermediate_dim", 8}, {"head_dim", 2}, {"num_query_heads", 2}, {"num_key_value_heads", 1},
        {"logit_soft_cap", 2.0}, {"use_post_ffw_norm", true}, {"use_post_attention_norm", true},
        {"use_sliding_window_attention", true}, {"sliding_window_size", 2}}},
      {"keras_hub>LlamaLayerNorm", {{"epsilon", 1e-5}}},
      {"keras_hub>MistralLayerNormalization", Config::map()},
      {"keras_hub>QwenLayerNorm", Config::map()},
      {"keras_hub>Qwen3LayerNorm", Config::map()},
      {"keras_hub>Phi3LayerNorm", Config::map()},
      {"keras_hub>RMSNormalization", {{"epsilon", 1e-3}}},
  };
  for (const auto& [key, config] : hub_layers)
    cases.push_back({key,
                     [key = key, config = config] {
                       Tensor x = input({None, 6, 4});
                       return Model(x, (*kiln::create_layer(key, config))(Dense(4)(x)));
                     },
                     {{4, 6, 4}}});
  // keras-hub's MaskedLMHead, untied, on embedded ids that are also its positions (all in [0, 10)).
  cases.push_back({"keras_hub>MaskedLMHead",
                   [] {
                     Tensor ids = input({None, 10});
                     const Tensor sequence = Embedding(10, 4)(ids);
                     return Model(ids, (*kiln::create_layer("keras_hub>MaskedLMHead", {{"vocabulary_size", 6}}))(
                                           std::vector<Tensor>{sequence, ids}));
                   },
                   {{2, 10}},
                   true});
  const Config decoder = {{"vocabulary_size", 12}, {"num_layers", 2},      {"num_query_heads", 2},
                          {"num_key_value_heads", 1}, {"hidden_dim", 8}, {"intermediate_dim", 8}};
  const Config encoder = {{"vocabulary_size", 12}, {"num_layers", 2},       {"num_heads", 2},
                          {"hidden_dim", 8},       {"intermediate_dim", 8}, {"max_sequence_length", 8}};
  const std::vector<std::pair<std::string, Config>> backbones = {
      {"GPT2Backbone", encoder},
      {"BertBackbone", encoder.with("num_segments", 10)},
      {"RobertaBackbone", encoder},
      {"DistilBertBackbone", encoder},
      {"LlamaBackbone", decoder.with("tie_word_embeddings", true)},
      {"Llama3Backbone", decoder},
      {"MistralBackbone", decoder.with("sliding_window", 3)},
      {"QwenBackbone", decoder.with("tie_word_embeddings", false)},
      {"Qwen3Backbone", decoder.with("head_dim", 6).with("sliding_window_size", 3)},
      {"Phi3Backbone", decoder.with("pretraining_sequence_length", 4).with("rope_scaling_type", "su")
                           .with("rope_scaling_short_factor", Config{1.0, 2.0}).with("rope_scaling_long_factor", Config{3.0, 4.0})},
      {"GemmaBackbone", decoder.with("head_dim", 4).with("attention_logit_soft_cap", 5.0)},
      {"FalconBackbone",
       {{"vocabulary_size", 12}, {"num_layers", 2}, {"num_attention_heads", 2}, {"hidden_dim", 8}, {"intermediate_dim", 8}}},
  };
  for (const auto& [name, arguments] : backbones)
    cases.push_back({"keras_hub>" + name,
                     [name = name, arguments = arguments] { return Model(kiln::hub::Backbone(name, arguments)); },
                     std::vector<Shape>(name == "BertBackbone" ? 3 : 2, Shape{2, 5}),
                     true});
  // keras-hub's CausalLM tasks, one per decoder family.
  for (const auto& [name, arguments] : backbones) {
    if (name == "BertBackbone" || name == "RobertaBackbone" || name == "DistilBertBackbone") continue;
    const std::string task = name.substr(0, name.size() - std::string("Backbone").size()) + "CausalLM";
    cases.push_back({"keras_hub>" + task,
                     [name = name, arguments = arguments] {
                       return Model(kiln::hub::CausalLM(kiln::hub::Backbone(name, arguments)));
                     },
                     {Shape{2, 5}, Shape{2, 5}},
                     true});
  }
  // keras-hub's TextClassifier tasks, one per encoder family.
  for (const auto& [name, arguments] : backbones) {
    if (name != "BertBackbone" && name != "RobertaBackbone" && name != "DistilBertBackbone") continue;
    const std::string task = name.substr(0, name.size() - std::string("Backbone").size()) + "TextClassifier";
    cases.push_back({"keras_hub>" + task,
                     [name = name, arguments = arguments] {
                       return Model(kiln::hub::TextClassifier(kiln::hub::Backbone(name, arguments), 3));
                     },
                     std::vector<Shape>(name == "BertBackbone" ? 3 : 2, Shape{2, 5}),
                     true});
  }
  // keras-hub's MaskedLM tasks, one per encoder family: 3 positions among 10 steps.
  for (const auto& [name, arguments] : backbones) {
    if (name != "BertBackbone" && name != "RobertaBackbone" && name != "DistilBertBackbone") continue;
    const std::string task = name.substr(0, name.size() - std::string("Backbone").size()) + "MaskedLM";
    std::vector<Shape> shapes(name == "BertBackbone" ? 4 : 3, Shape{2, 10});
    shapes[0] = Shape{2, 3};
    cases.push_back({"keras_hub>" + task,
                     [name = name, arguments = arguments] {
                       return Model(kiln::hub::MaskedLM(kiln::hub::Backbone(name, arguments.with("max_sequence_length", 10))));
                     },
                     shapes, true});
  }
  return cases;
}

std::vector<Array> inputs_for(const ModelCase& c) {
  std::vector<Array> inputs;
  std::uint64_t seed = 11;
  for (const Shape& shape : c.input_shapes) {
    Array values = random_input(shape, seed++, c.integer_inputs ? 0.0 : -1.0, c.integer_inputs ? 10.0 : 1.0);
    if (c.integer_inputs)
      for (std::size_t i = 0; i < values.size(); ++i) values.set_flat(i, std::floor(values.flat(i)));
    inputs.push_back(values);
  }
  return inputs;
}

void require_identical(const std::vector<Array>& a, const std::vector<Array>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].bitwise_equal(b[i]));
}

void require_same_weights(const Model& a, const Model& b) {
  const std::vector<Array> wa = a.get_weights(), wb = b.get_weights();
  REQUIRE(wa.size() == wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) REQUIRE(wa[i].bitwise_equal(wb[i]));
}

}  // namespace

TEST_CASE("every registered layer type saves and reloads with identical predictions", "[serialize][saving]") {
  TempDir dir;
  std::set<std::string> covered;
  for (const ModelCase& c : every_layer_type()) {
    INFO(c.covers);
    covered.insert(c.covers);
    Model model = c.make();
    const std::vector<Array> inputs = inputs_for(c);
    const std::vector<Array> expected = model.predict(inputs);

    model.save(dir.file("model.kiln"));
    Model loaded = kiln::load_model(dir.file("model.kiln"));
    require_identical(loaded.predict(inputs), expected);
    // The architecture reads back as the same JSON text, key for key.
    REQUIRE(loaded.to_json() == model.to_json());

    // Weights only: a model rebuilt from the JSON has fresh weights until load_weights.
    model.save_weights(dir.file("weights.kiln"));
    Model fresh = kiln::model_from_json(model.to_json());
    fresh.load_weights(dir.file("weights.kiln"));
    require_identical(fresh.predict(inputs), expected);

    // kiln -> .keras -> kiln is bitwise too, and the config is the same Keras JSON.
    model.save(dir.file("model.keras"));
    REQUIRE(kiln::is_keras_file(dir.file("model.keras")));
    Model from_keras = kiln::load_model(dir.file("model.keras"));
    require_identical(from_keras.predict(inputs), expected);
    require_same_weights(from_keras, model);
    REQUIRE(from_keras.to_json() == model.to_json());
  }
  for (const std::string& key : kiln::layer_registry().keys())
    if (key.rfind("acme>", 0) != 0) {
      INFO(key << " has no save/reload case here");
      REQUIRE(covered.count(key) == 1);
    }
}

TEST_CASE("a functional model with nested models, a shared layer and a user layer round-trips", "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor a = Input({None, 4}, DType::float32, "a");
  Tensor b = Input({None, 4}, DType::float32, "b");
  Dense shared(4, "tanh");
  Tensor x = Input({None, 4});
  Model encoder(x, LayerHandle<Shift>(Config{{"name", "shift"}})(Dense(4, "swish")(x)), "encoder");
  Sequential head({Dense(3, "relu").ptr(), Dropout(0.25).ptr(), Dense(2).ptr()}, "head");
  Tensor merged = Concatenate()({encoder(shared(a)), shared(b)});
  Model model({a, b}, {head(merged), Dense(1)(merged)}, "two_headed");

  const std::vector<Array> data = {random_input({6, 4}, 1), random_input({6, 4}, 2)};
  const std::vector<Array> expected = model.predict(data);
  model.save(dir.file("nested.kiln"));
  Model loaded = load_model(dir.file("nested.kiln"));
  require_identical(loaded.predict(data), expected);
  REQUIRE(loaded.to_json() == model.to_json());
  REQUIRE(read_model_config(dir.file("nested.kiln")) == model_config(*model.ptr()));
  auto encoder_again = std::dynamic_pointer_cast<ModelBase>(loaded.get_layer("encoder"));
  REQUIRE(encoder_again);
  REQUIRE(encoder_again->get_layer("shift")->get_config().get_string("name") == "shift");
  require_same_weights(loaded, model);
}

TEST_CASE("config JSON round trip is equal JSON and model_from_json builds every layer at once",
          "[serialize][saving]") {
  using namespace kiln;
  Tensor x = Input({None, 8, 4});
  Tensor h = MHAttention(4, 2)(x);
  Model model(x, Dense(2)(Flatten()(h)));
  const std::string json = model.to_json();
  Model again = model_from_json(json);
  REQUIRE(again.to_json() == json);
  REQUIRE(again.built());
  REQUIRE(again.count_params() == model.count_params());
  REQUIRE(parse_json(json).at("class_name").as_string() == "Functional");
}

TEST_CASE("an unknown class name in a config names the nearest registered ones", "[serialize][saving]") {
  using namespace kiln;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2)(x));
  std::string json = model.to_json();
  // Keras's form names a built-in class by class_name alone (registered_name null).
  const std::string name = "\"class_name\": \"Dense\"";
  const std::size_t at = json.find(name);
  REQUIRE(at != std::string::npos);
  json.replace(at, name.size(), "\"class_name\": \"Dense2\"");
  try {
    model_from_json(json);
    FAIL("an unknown class was accepted");
  } catch (const ConfigError& error) {
    REQUIRE_THAT(error.what(), Catch::Contains("Dense2") && Catch::Contains("kiln>Dense"));
  }
}

TEST_CASE("a compiled model reloads compiled, with its optimizer state and epoch count", "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model model(x, Dense(1)(Dense(4, "relu")(x)));
  model.compile(create_optimizer("adam", Config{{"learning_rate", 0.01}}), "mse", {"mae"});
  const Array features = random_input({32, 3}, 5), targets = random_input({32, 1}, 6);
  model.fit(features, targets, FitOptions().epochs(3).batch_size(8).verbose(0));
  model.save(dir.file("compiled.kiln"));

  Model loaded = load_model(dir.file("compiled.kiln"));
  REQUIRE(loaded.epochs_trained() == 3);
  REQUIRE(loaded.optimizer().iterations() == model.optimizer().iterations());
  REQUIRE(loaded.optimizer().class_name() == "Adam");
  REQUIRE(loaded.optimizer().current_learning_rate() == Approx(0.01));
  const std::vector<Weight> saved = model.optimizer().variables(), restored = loaded.optimizer().variables();
  REQUIRE(saved.size() == restored.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    REQUIRE(saved[i].path == restored[i].path);
    REQUIRE(saved[i].value.bitwise_equal(restored[i].value));
  }
  REQUIRE(loaded.evaluate(features, targets).at("mae") == model.evaluate(features, targets).at("mae"));

  Model uncompiled = load_model(dir.file("compiled.kiln"), LoadOptions{false});
  REQUIRE_THROWS_AS(uncompiled.optimizer(), LayerStateError);
}

TEST_CASE("training resumed from a saved file matches an uninterrupted run bit for bit", "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  auto make = [] {
    Tensor x = Input({None, 4});
    Tensor h = Dropout(0.3, Config{{"seed", 3}})(Dense(8, "relu")(x));
    Model model(x, Dense(2)(h));
    model.compile(create_optimizer("adam", Config{{"learning_rate", 0.01}}), "mse");
    return model;
  };
  const Array features = random_input({40, 4}, 21), targets = random_input({40, 2}, 22);
  auto options = [](int initial, int epochs) {
    return FitOptions().epochs(epochs).initial_epoch(initial).batch_size(8).seed(17).verbose(0);
  };

  Model straight = make();
  Model interrupted = make();
  interrupted.set_weights(straight.get_weights());
  straight.fit(features, targets, options(0, 4));

  interrupted.fit(features, targets, options(0, 2));
  interrupted.save(dir.file("checkpoint.kiln"));
  Model resumed = load_model(dir.file("checkpoint.kiln"));
  REQUIRE(resumed.epochs_trained() == 2);
  resumed.fit(features, targets, options(resumed.epochs_trained(), 4));
  require_same_weights(resumed, straight);
}

TEST_CASE("a save that fails half way leaves the old file whole and no temporary behind", "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2)(x));
  const Array data = random_input({4, 3}, 3);
  const Array before = model.predict(data);
  model.save(dir.file("model.kiln"));
  const std::string old_bytes = testing::read_bytes(dir.file("model.kiln"));

  std::vector<Array> changed = model.get_weights();
  changed[0].set_flat(0, 42.0);
  model.set_weights(changed);
  for (std::int64_t after : {0, 1, 20, 200}) {
    detail::fail_next_write_after_for_testing(after);
    REQUIRE_THROWS_AS(model.save(dir.file("model.kiln")), SerializationError);
    REQUIRE(testing::read_bytes(dir.file("model.kiln")) == old_bytes);
    REQUIRE(dir.entries() == std::vector<std::string>{"model.kiln"});
  }
  REQUIRE(load_model(dir.file("model.kiln")).predict(data).bitwise_equal(before));

  // A folder that does not exist: refused, nothing created.
  REQUIRE_THROWS_AS(model.save(dir.file("missing/model.kiln")), SerializationError);
  // The next save works again.
  model.save(dir.file("model.kiln"));
  REQUIRE(!load_model(dir.file("model.kiln")).predict(data).bitwise_equal(before));
}

TEST_CASE("load_weights into a model of another shape names the weight and both shapes and changes nothing",
          "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model small(x, Dense(2, "", Config{{"name", "out"}})(x));
  small.save_weights(dir.file("small.kiln"));

  Tensor y = Input({None, 3});
  Model wide(y, Dense(5, "", Config{{"name", "out"}})(y));
  const std::vector<Array> before = wide.get_weights();
  try {
    wide.load_weights(dir.file("small.kiln"));
    FAIL("a mismatched weight was accepted");
  } catch (const ShapeError& error) {
    REQUIRE_THAT(error.what(), Catch::Contains("out/kernel") && Catch::Contains("(3, 5)") && Catch::Contains("(3, 2)"));
  }
  require_identical(wide.get_weights(), before);

  Tensor z = Input({None, 3});
  Model renamed(z, Dense(2, "", Config{{"name", "other"}})(z), "clf");
  // Named once, without a doubled apostrophe ("Functional 'clf''s weight").
  REQUIRE_THROWS_WITH(renamed.load_weights(dir.file("small.kiln")),
                      "weight 'other/kernel' of Functional 'clf' is not in the file");
  REQUIRE_THROWS_AS(load_model(dir.file("small.kiln")), SerializationError);  // weights only: no config
}

TEST_CASE("a file from a newer kiln is refused with a clear message", "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2)(x));
  model.save(dir.file("model.kiln"));
  const std::string bytes = testing::read_bytes(dir.file("model.kiln"));

  // The frame of format 2, with a valid header checksum.
  std::string newer = bytes;
  newer[8] = 2;
  const uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(newer.data()), 16);
  for (int i = 0; i < 4; ++i) newer[16 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  testing::write_bytes(dir.file("newer.kiln"), newer);
  REQUIRE_THROWS_WITH(load_model(dir.file("newer.kiln")), Catch::Contains("newer kiln") && Catch::Contains("format 2"));

  // A weights record of a newer cereal class version (the u32 after the endianness byte).
  const detail::Container container = detail::read_container(bytes, "model");
  std::vector<std::string> payloads;
  for (const detail::Section& section : container.sections) payloads.emplace_back(section.payload);
  std::vector<detail::Section> sections;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (container.sections[i].tag == "WGHT") payloads[i][1] = 2;
    sections.push_back({container.sections[i].tag, payloads[i]});
  }
  testing::write_bytes(dir.file("newer_record.kiln"), detail::write_container(sections));
  REQUIRE_THROWS_WITH(load_model(dir.file("newer_record.kiln")),
                      Catch::Contains("weights section") && Catch::Contains("newer kiln"));
}

TEST_CASE("a kiln file from before config version 2 keeps MHAttention's old dimension, the sequence length",
          "[serialize][saving][mh_attention]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 40, 4});
  Model model(x, Dense(1)(GlobalAveragePooling1D()(MHAttention(16, 8, {{"name", "encoder"}})(x))));
  model.save(dir.file("model.kiln"));
  const Array data = random_input({3, 40, 4}, 9);
  const Array expected = model.predict(data);

  // The same file as kiln wrote it before: "dimension": 40 (the sequence length) and no config_version.
  const std::string bytes = testing::read_bytes(dir.file("model.kiln"));
  const detail::Container container = detail::read_container(bytes, "model");
  std::vector<std::string> payloads;
  for (const detail::Section& section : container.sections) {
    Config payload =
        section.tag == "CONF" || section.tag == "META" ? parse_json(std::string(section.payload), "section") : Config();
    if (section.tag == "CONF") {
      std::vector<Config> list = payload.at("config").get_list("layers");
      for (Config& layer : list)
        if (layer.get_string("class_name") == "MHAttention") {
          Config inner = layer.at("config");
          CHECK(inner.get_int("dimension") == 128);
          inner.set("dimension", 40);
          layer.set("config", inner);
        }
      Config inner = payload.at("config");
      inner.set("layers", Config::list(list));
      payload.set("config", inner);
    }
    if (section.tag == "META") payload.erase("config_version");
    payloads.push_back(payload.is_null() ? std::string(section.payload) : to_json(payload, 0));
  }
  std::vector<detail::Section> sections;
  for (std::size_t i = 0; i < payloads.size(); ++i) sections.push_back({container.sections[i].tag, payloads[i]});
  testing::write_bytes(dir.file("old.kiln"), detail::write_container(sections));

  const Model old = load_model(dir.file("old.kiln"));
  CHECK(old.predict(data).bitwise_equal(expected));
  CHECK(old.get_layer("encoder")->get_config().get_int("dimension") == 128);  // saved again, it has the new meaning
  // The same config read as a current one is a mistake, not an old file.
  Config current = read_model_config(dir.file("old.kiln"));
  CHECK_THROWS_AS(model_from_config(current), ConfigError);
}

TEST_CASE("a model compiled with a user's registered loss and metric saves and reloads compiled",
          "[serialize][saving][registry]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2, "", Config{{"kernel_initializer", "halves"}})(x));
  CHECK(model.get_weights()[0].flat(0) == 0.5);
  model.compile(create_optimizer("adam"),
                Loss::from_config(Config{{"class_name", "Cubic"}, {"config", Config{{"scale", 2.0}}}}),
                {Metric::from_config(Config{{"class_name", "WithinTenth"}, {"config", Config{{"tolerance", 0.25}}}})});
  const Array data = random_input({12, 3}, 3), targets = random_input({12, 2}, 4);
  model.fit(data, targets, FitOptions().epochs(2).batch_size(4).verbose(0));
  model.save(dir.file("model.kiln"));

  const Model loaded = load_model(dir.file("model.kiln"));
  REQUIRE_NOTHROW(loaded.optimizer());  // compiled (a user's loss used to reload uncompiled)
  CHECK(loaded.epochs_trained() == 2);
  const Logs expected = model.evaluate(data, targets), scores = loaded.evaluate(data, targets);
  CHECK(scores.at("loss") == expected.at("loss"));
  CHECK(scores.at("within_tenth") == expected.at("within_tenth"));
  const Config compiled = read_model_config(dir.file("model.kiln")).at("compile_config");
  CHECK(compiled.at("loss").get_string("registered_name") == "acme>Cubic");
  CHECK(compiled.at("loss").at("config").get_double("scale") == 2.0);
  CHECK(compiled.get_list("metrics").at(0).get_string("registered_name") == "acme>WithinTenth");
  CHECK(compiled.get_list("metrics").at(0).at("config").get_double("tolerance") == 0.25);
  const Config layer = read_model_config(dir.file("model.kiln")).at("config").get_list("layers").at(1);
  CHECK(layer.at("config").at("kernel_initializer").get_string("registered_name") == "acme>Halves");
  // Training goes on from the file, as an uninterrupted run would.
  CHECK_NOTHROW(loaded.fit(data, targets, FitOptions().initial_epoch(2).epochs(3).batch_size(4).verbose(0)));
}

TEST_CASE("a model compiled with an unregistered loss function still saves, uncompiled",
          "[serialize][saving][registry]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2)(x));
  model.compile(create_optimizer("sgd"), Loss("mine", [](const Tensor& y_true, const Tensor& y_pred) {
                  return ops::mean(ops::abs(y_pred - y_true));
                }));
  model.save(dir.file("model.kiln"));
  CHECK_THROWS_AS(load_model(dir.file("model.kiln")).optimizer(), LayerStateError);
}

TEST_CASE("configs and files written by earlier kiln versions, in kiln's own config form, still load",
          "[serialize][saving]") {
  using namespace kiln;
  TempDir dir;
  Tensor x = Input({None, 6, 4});
  Tensor a = MultiHeadAttention(2, 3)(x, x);
  Model model(x, Dense(2)(Flatten()(Add()({x, a}))));
  model.compile("adam", "mse");
  // Before Keras's form: registered_name "kiln>Dense", node arguments {"keras_history": ...}, no modules.
  const Config old_form = serialize_layer(*model.ptr());
  REQUIRE(old_form.at("registered_name").as_string() == "kiln>Functional");
  Model rebuilt = model_from_config(old_form);
  CHECK(rebuilt.to_json() == model.to_json());
  // A whole kiln file of that time: its config section held that form, and the compile config kiln's own.
  Config config = old_form;
  config.set("compile_config", Config{{"optimizer", create_optimizer("adam")->serialize()},
                                      {"loss", "mse"},
                                      {"loss_weights", Config()},
                                      {"metrics", Config::list()}});
  std::vector<kiln::detail::NamedArray> weights;
  for (const Weight& weight : model.weights()) weights.push_back({weight.path, weight.value});
  const std::string file =
      kiln::detail::write_container({{"CONF", to_json(config)},
                                     {"WGHT", kiln::detail::write_arrays(weights)},
                                     {"META", to_json(Config{{"config_version", 2}, {"epochs_trained", 0}})}});
  testing::write_bytes(dir.file("old.kiln"), file);
  Model loaded = load_model(dir.file("old.kiln"));
  REQUIRE(kiln::trainer_of(*loaded.ptr()));
  const Array input = random_input({3, 6, 4}, 4).astype(DType::float32);
  CHECK(loaded.predict(input).bitwise_equal(model.predict(input)));
}
