// Keras's int8 quantization (data/keras/quantized: files Keras 3.16 quantized with model.quantize("int8")): kiln
// reads them, predicts Keras's outputs, quantizes as Keras's AbsMaxQuantizer does bit for bit, and writes files
// whose layers, configs and weights are Keras's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/kiln.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/serialize/saving.hpp>

#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace hdf5 = kiln::detail::hdf5;
using kiln::Array;
using kiln::Config;
using kiln::DType;

namespace {

std::string fixture(const std::string& name) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / "quantized" / name).string();
}

std::vector<Array> group_arrays(const hdf5::Object& group, DType dtype = DType::float32) {
  std::vector<Array> arrays;
  for (int i = 0; group.find("output_" + std::to_string(i)) || group.find("input_" + std::to_string(i)); ++i)
    arrays.push_back(group.at(group.find("output_" + std::to_string(i)) ? "output_" + std::to_string(i)
                                                                         : "input_" + std::to_string(i))
                         .read(dtype));
  return arrays;
}

double largest_difference(const Array& a, const Array& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a.flat(i) - b.flat(i)));
  return worst;
}

// The model's predictions of the fixture's inputs against Keras's: (largest difference, Keras's largest |output|).
std::pair<double, double> against_keras(kiln::ModelBase& model, const std::string& name) {
  const hdf5::File io(kiln::detail::read_whole_file(fixture(name + ".io.h5")), name);
  const std::vector<Array> inputs = group_arrays(io.root().at("inputs"));
  const std::vector<Array> stored = group_arrays(io.root().at("outputs"));
  const std::vector<Array> predicted = model.predict(inputs, 64);
  REQUIRE(predicted.size() == stored.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    worst = std::max(worst, largest_difference(predicted[i], stored[i]));
    for (std::size_t j = 0; j < stored[i].size(); ++j) scale = std::max(scale, std::abs(stored[i].flat(j)));
  }
  return {worst, scale};
}

// The float MLP make_quantized.py quantized (Input(40) -> Dense(33, relu) -> Dense(17, gelu, no bias) -> Dense(7)),
// rebuilt in kiln with the float weights Keras saved before quantizing `name`.
kiln::Model float_mlp(const std::string& name) {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 40}, DType::float32, "x");
  kiln::Tensor h = kiln::Dense(33, "relu", {{"name", "hidden"}})(x);
  h = kiln::Dense(17, "gelu", {{"name", "no_bias"}, {"use_bias", false}})(h);
  kiln::Model model(x, kiln::Dense(7, "", {{"name", "head"}})(h), "dense_mlp");
  kiln::load_keras_weights(*model.ptr(), fixture(name + ".float.weights.h5"));
  return model;
}

// Every weight of `model` against the same path's in Keras's quantized file `name`.keras, bit for bit; how many.
std::size_t check_weights_are_keras(const kiln::ModelBase& model, const std::string& name) {
  const auto keras = kiln::load_keras_model_base(fixture(name + ".keras"));
  std::map<std::string, Array> keras_weights;
  for (const kiln::Weight& weight : keras->weights()) keras_weights.emplace(weight.path, weight.value);
  std::size_t compared = 0;
  for (const kiln::Weight& weight : model.weights()) {
    INFO(weight.path);
    REQUIRE(keras_weights.count(weight.path) == 1);
    CHECK(weight.value.bitwise_equal(keras_weights.at(weight.path)));
    ++compared;
  }
  return compared;
}

}  // namespace

TEST_CASE("kiln quantizes as Keras's AbsMaxQuantizer, bit for bit", "[serialize][keras][quantize]") {
  const hdf5::File reference(kiln::detail::read_whole_file(fixture("quantizer_reference.h5")), "reference");
  int checked = 0;
  for (const std::string group : {"columns", "int4_columns"})
    for (const std::string& name : reference.root().at(group).member_names()) {
      INFO(group << "/" << name);
      const hdf5::Object entry = reference.root().at(group).at(name);
      const Array x = entry.at("x").read(DType::float32);
      const auto quantized = kiln::ops::abs_max_quantize(x, 0, group == "columns" ? 127 : 7);
      CHECK(quantized.values.dtype() == DType::int8);
      CHECK(quantized.values.bitwise_equal(entry.at("q").read(DType::int8)));
      CHECK(quantized.scale.bitwise_equal(entry.at("scale").read(DType::float32)));
      ++checked;
    }
  CHECK(checked == 10);
}

TEST_CASE("QuantizedMatMul quantizes each row as Keras's activation quantizer does", "[serialize][keras][quantize]") {
  // The per-row quantization is internal to the op: a kernel of the identity (scale 1) shows the quantized rows
  // divided by their scales, which must be Keras's q / scale exactly.
  const hdf5::File reference(kiln::detail::read_whole_file(fixture("quantizer_reference.h5")), "reference");
  for (const std::string& name : reference.root().at("rows").member_names()) {
    INFO(name);
    const hdf5::Object entry = reference.root().at("rows").at(name);
    const Array x = entry.at("x").read(DType::float32);
    const Array q = entry.at("q").read(DType::float32), scale = entry.at("scale").read(DType::float32);
    const std::int64_t k = x.shape().dim(-1);
    if (k > 127) continue;  // (an identity kernel wider than int8's range would not be one)
    Array identity({k, k}, DType::int8);
    for (std::int64_t i = 0; i < k; ++i) identity.set_flat(static_cast<std::size_t>(i * k + i), 1);
    kiln::Graph graph;
    const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
    const kiln::Tensor kernel = graph.variable("kernel", identity, false);
    const kiln::Tensor ones = graph.variable("scale", Array::full(kiln::Shape{k}, 1.0), false);
    const kiln::Tensor y = kiln::ops::quantized_matmul(input, kernel, ones);
    kiln::Program program(graph, {y});
    program.feed(input, x);
    program.run();
    const Array out = program.fetch(y);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t row = i / static_cast<std::size_t>(k);
      const float expected = static_cast<float>(q.flat(i)) / (1.0f * static_cast<float>(scale.flat(row)));
      REQUIRE(out.flat(i) == expected);
    }
  }
}

TEST_CASE("Keras's int8-quantized Dense and Embedding models load and predict Keras's outputs",
          "[serialize][keras][quantize]") {
  for (const std::string name : {"dense_mlp_int8", "dense_sequence_int8", "embedding_int8", "dense_mlp_int4",
                                 "dense_mlp_int4_channel", "embedding_int4", "embedding_int4_channel"}) {
    INFO(name);
    const auto model = kiln::load_keras_model_base(fixture(name + ".keras"));
    const auto [difference, scale] = against_keras(*model, name);
    // Keras's float32 arithmetic against kiln's: the int8 products are exact, the scales and divisions are the
    // same float32 operations; only the float layers between them (gelu, tanh) differ in the last bits.
    CHECK(difference <= 1e-5 * std::max(1.0, scale));
    // The weights are int8 in memory: the kernel and its scale, as Keras stores them.
    bool saw_int8 = false;
    for (const kiln::Weight& weight : model->weights())
      if (weight.value.dtype() == DType::int8) saw_int8 = true;
    CHECK(saw_int8);
  }
}

TEST_CASE("an int8 Dense writes Keras's QuantizedDTypePolicy, config and weight order back", "[serialize][keras][quantize]") {
  kiln::testing::TempDir dir;
  const auto model = kiln::load_keras_model_base(fixture("dense_mlp_int8.keras"));
  const std::string path = dir.file("again.keras");
  kiln::save_keras_model(*model, path);
  // Read back by kiln: the same predictions, bit for bit.
  const auto again = kiln::load_keras_model_base(path);
  const hdf5::File io(kiln::detail::read_whole_file(fixture("dense_mlp_int8.io.h5")), "io");
  const std::vector<Array> inputs = group_arrays(io.root().at("inputs"));
  const std::vector<Array> first = model->predict(inputs, 64), second = again->predict(inputs, 64);
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].bitwise_equal(second[i]));
  // The layers' configs carry Keras's policy and quantization config; the weights are int8 where Keras's are.
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader zip(bytes, path);
  const Config config = kiln::parse_json(zip.read("config.json", 1 << 20));
  int quantized = 0;
  for (const Config& layer : config.at("config").at("layers").as_list()) {
    if (layer.get_string("class_name") != "Dense") continue;
    const Config& policy = layer.at("config").at("dtype");
    CHECK(policy.get_string("class_name") == "QuantizedDTypePolicy");
    CHECK(policy.at("config").get_string("mode") == "int8");
    CHECK(policy.at("config").get_string("source_name") == "float32");
    const Config& quantization = layer.at("config").at("quantization_config");
    CHECK(quantization.get_string("class_name") == "Int8QuantizationConfig");
    CHECK(quantization.get_string("module") == "keras.quantizers");  // Keras imports the classes from there
    CHECK(quantization.at("config").at("activation_quantizer").get_string("module") == "keras.quantizers");
    ++quantized;
  }
  CHECK(quantized == 3);
  const hdf5::File weights(zip.read("model.weights.h5", 1 << 24), "weights");
  const hdf5::Object hidden = weights.root().at("layers").at("dense").at("vars");
  CHECK(hidden.at("0").dataset_shape() == kiln::Shape{40, 33});
  CHECK(!hidden.at("0").dataset_is_float());
  CHECK(hidden.at("1").dataset_shape() == kiln::Shape{33});  // bias
  CHECK(hidden.at("2").dataset_shape() == kiln::Shape{33});  // kernel_scale
  const hdf5::Object no_bias = weights.root().at("layers").at("dense_1").at("vars");
  CHECK(no_bias.member_names().size() == 2);  // kernel, kernel_scale
}

TEST_CASE("a quantized policy on a layer kiln does not quantize is refused by name", "[serialize][keras][quantize]") {
  const Config policy = {{"class_name", "QuantizedDTypePolicy"}, {"config", {{"mode", "int8"}, {"source_name", "float32"}}}};
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Conv2D", Config{{"filters", 4}, {"kernel_size", 3}, {"name", "c"}, {"dtype", policy}}),
                    Contains("Conv2D 'c'") && Contains("quantization mode 'int8'"));
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", "float8_from_float32"}}),
                    Contains("Dense") && Contains("quantization mode 'float8'") && Contains("runs int8, int4"));
  // A quantization config on a float layer, or one kiln does not compute.
  CHECK_THROWS_AS(kiln::create_layer("kiln>Dense", Config{{"units", 4},
                                                           {"quantization_config", Config{{"class_name", "Int8QuantizationConfig"}}}}),
                  kiln::ConfigError);
  const Config odd_quantizer = {
      {"class_name", "Int8QuantizationConfig"},
      {"config", {{"activation_quantizer", {{"class_name", "AbsMaxQuantizer"}, {"config", {{"value_range", Config::list({Config(-100), Config(100)})}}}}}}}};
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", policy}, {"quantization_config", odd_quantizer}}),
                    Contains("AbsMaxQuantizer()"));
}

TEST_CASE("Keras's int4 Dense (by blocks, with zero points) writes back as Keras wrote it", "[serialize][keras][quantize]") {
  kiln::testing::TempDir dir;
  const auto model = kiln::load_keras_model_base(fixture("dense_mlp_int4.keras"));
  const std::string path = dir.file("again.keras");
  kiln::save_keras_model(*model, path);
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader zip(bytes, path);
  const Config config = kiln::parse_json(zip.read("config.json", 1 << 20));
  const std::string keras_bytes = kiln::detail::read_whole_file(fixture("dense_mlp_int4.keras"));
  const kiln::detail::ZipReader keras_zip(keras_bytes, "keras");
  const Config keras_config = kiln::parse_json(keras_zip.read("config.json", 1 << 20));
  const auto dense_configs = [](const Config& whole) {
    std::vector<Config> found;
    for (const Config& layer : whole.at("config").at("layers").as_list())
      if (layer.get_string("class_name") == "Dense") found.push_back(layer.at("config"));
    return found;
  };
  const std::vector<Config> ours = dense_configs(config), theirs = dense_configs(keras_config);
  REQUIRE(ours.size() == 3);
  REQUIRE(theirs.size() == 3);
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CHECK(ours[i].at("dtype").get_string("class_name") == "Int4DTypePolicy");
    CHECK(ours[i].at("dtype").at("config").get_string("mode") == theirs[i].at("dtype").at("config").get_string("mode"));
    CHECK(ours[i].at("quantization_config").at("config").get_int("block_size") == 128);
  }
  // The weights as Keras stores them: packed kernel, bias, scale, zero point, g_idx, bit for bit.
  const hdf5::File weights(zip.read("model.weights.h5", 1 << 24), "weights");
  const hdf5::File keras_weights(keras_zip.read("model.weights.h5", 1 << 24), "keras weights");
  for (const std::string layer : {"dense", "dense_1", "dense_2"}) {
    const hdf5::Object mine = weights.root().at("layers").at(layer).at("vars");
    const hdf5::Object keras = keras_weights.root().at("layers").at(layer).at("vars");
    REQUIRE(mine.member_names() == keras.member_names());
    for (const std::string& var : keras.member_names()) {
      INFO(layer << "/vars/" << var);
      const DType dtype = keras.at(var).dataset_is_float() ? DType::float32 : DType::int8;
      CHECK(mine.at(var).read(dtype).bitwise_equal(keras.at(var).read(dtype)));
    }
  }
}

// Every layer of kiln's copy of Keras's file `name` against Keras's own: class, policy mode and quantization config
// by layer, and every weight dataset bit for bit.
void check_writes_back_as_keras(const std::string& name) {
  kiln::testing::TempDir dir;
  const auto model = kiln::load_keras_model_base(fixture(name + ".keras"));
  const std::string path = dir.file("again.keras");
  kiln::save_keras_model(*model, path);
  // Read back by kiln, and through kiln's own format: the same predictions, bit for bit.
  const hdf5::File io(kiln::detail::read_whole_file(fixture(name + ".io.h5")), "io");
  const std::vector<Array> inputs = group_arrays(io.root().at("inputs"));
  const std::string own = dir.file("again.kiln");
  kiln::save_model(*model, own);
  for (const std::string& copy : {path, own}) {
    const auto again = copy == own ? kiln::load_model_base(copy) : kiln::load_keras_model_base(copy);
    const std::vector<Array> first = model->predict(inputs, 64), second = again->predict(inputs, 64);
    REQUIRE(first.size() == second.size());
    for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].bitwise_equal(second[i]));
  }
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader zip(bytes, path);
  const std::string keras_bytes = kiln::detail::read_whole_file(fixture(name + ".keras"));
  const kiln::detail::ZipReader keras_zip(keras_bytes, "keras");
  const Config ours = kiln::parse_json(zip.read("config.json", 1 << 20)).at("config").at("layers");
  const Config theirs = kiln::parse_json(keras_zip.read("config.json", 1 << 20)).at("config").at("layers");
  REQUIRE(ours.size() == theirs.size());
  std::vector<std::string> quantized_layers;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const Config& mine = ours.as_list()[i].at("config");
    const Config& keras = theirs.as_list()[i].at("config");
    if (!keras.contains("quantization_config") || keras.at("quantization_config").is_null()) continue;
    INFO(keras.get_string("name"));
    CHECK(mine.at("dtype").get_string("class_name") == keras.at("dtype").get_string("class_name"));
    CHECK(mine.at("dtype").at("config").get_string("mode") == keras.at("dtype").at("config").get_string("mode"));
    const Config& q = keras.at("quantization_config");
    CHECK(mine.at("quantization_config").get_string("class_name") == q.get_string("class_name"));
    CHECK(mine.at("quantization_config").at("config").get_int("block_size") == q.at("config").get_int("block_size"));
    CHECK(mine.at("quantization_config").at("config").at("activation_quantizer").is_null() ==
          q.at("config").at("activation_quantizer").is_null());
    quantized_layers.push_back(keras.get_string("name"));
  }
  CHECK(!quantized_layers.empty());
  const hdf5::File weights(zip.read("model.weights.h5", 1 << 24), "weights");
  const hdf5::File keras_weights(keras_zip.read("model.weights.h5", 1 << 24), "keras weights");
  const hdf5::Object layers = keras_weights.root().at("layers");
  for (const std::string& layer : layers.member_names()) {
    if (!layers.at(layer).find("vars")) continue;
    const hdf5::Object mine = weights.root().at("layers").at(layer).at("vars");
    const hdf5::Object keras = layers.at(layer).at("vars");
    REQUIRE(mine.member_names() == keras.member_names());
    for (const std::string& var : keras.member_names()) {
      INFO(name << ": " << layer << "/vars/" << var);
      const DType dtype = keras.at(var).dataset_is_float() ? DType::float32 : DType::int8;
      CHECK(mine.at(var).dataset_shape() == keras.at(var).dataset_shape());
      CHECK(mine.at(var).read(dtype).bitwise_equal(keras.at(var).read(dtype)));
    }
  }
}

TEST_CASE("Keras's per-channel int4 Dense and int4 Embeddings write back as Keras wrote them", "[serialize][keras][quantize]") {
  for (const std::string name : {"dense_mlp_int4", "dense_mlp_int4_channel", "embedding_int4", "embedding_int4_channel"}) {
    INFO(name);
    check_writes_back_as_keras(name);
  }
  // Per-channel: a kernel_scale per unit, no zero point nor g_idx (Keras numbers the variables it writes).
  const auto model = kiln::load_keras_model_base(fixture("dense_mlp_int4_channel.keras"));
  std::vector<std::string> paths;
  for (const kiln::Weight& weight : model->weights()) paths.push_back(weight.path);
  CHECK(paths == std::vector<std::string>{"hidden/kernel", "hidden/bias", "hidden/kernel_scale", "no_bias/kernel",
                                          "no_bias/kernel_scale", "head/kernel", "head/bias", "head/kernel_scale"});
}

TEST_CASE("a quantized model saves and loads in kiln's own format, int8 weights and all", "[serialize][quantize]") {
  kiln::testing::TempDir dir;
  const auto model = kiln::load_keras_model_base(fixture("dense_sequence_int8.keras"));
  const std::string path = dir.file("model.kiln");
  kiln::save_model(*model, path);
  const auto again = kiln::load_model_base(path);
  const hdf5::File io(kiln::detail::read_whole_file(fixture("dense_sequence_int8.io.h5")), "io");
  const std::vector<Array> inputs = group_arrays(io.root().at("inputs"));
  const std::vector<Array> first = model->predict(inputs, 64), second = again->predict(inputs, 64);
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].bitwise_equal(second[i]));
  std::size_t int8_weights = 0;
  for (const kiln::Weight& weight : again->weights()) int8_weights += weight.value.dtype() == DType::int8 ? 1 : 0;
  CHECK(int8_weights == 2);
}

TEST_CASE("kiln::quantize(model, \"int8\") is Keras's model.quantize: the same weights and outputs",
          "[serialize][quantize]") {
  // The float model Keras quantized, rebuilt in kiln with Keras's float weights.
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 40}, DType::float32, "x");
  kiln::Tensor h = kiln::Dense(33, "relu", {{"name", "hidden"}})(x);
  h = kiln::Dense(17, "gelu", {{"name", "no_bias"}, {"use_bias", false}})(h);
  h = kiln::LayerNormalization(Config{{"name", "norm"}})(h);  // nothing Keras quantizes: left as it is
  kiln::Model with_norm(x, kiln::Dense(7, "", {{"name", "head"}})(h), "with_norm");
  kiln::QuantizationReport report;
  std::vector<std::string> warnings;
  const auto previous = kiln::set_warning_handler([&](const std::string& message) { warnings.push_back(message); });
  const kiln::Model quantized_norm = kiln::quantize(with_norm, "int8", &report);
  kiln::set_warning_handler(previous);
  CHECK(report.quantized == std::vector<std::string>{"hidden", "no_bias", "head"});
  CHECK(report.skipped.empty());
  CHECK(warnings.empty());
  CHECK(quantized_norm.ptr()->weights().size() == with_norm.ptr()->weights().size() + 3);  // a kernel_scale each

  const kiln::Model model = float_mlp("dense_mlp_int8");
  const std::vector<Array> float_before = model.ptr()->get_weights();
  const kiln::Model quantized = kiln::quantize(model, "int8");
  // Keras's own quantized file: the same int8 kernels and scales, bit for bit, and the same outputs but for the
  // last bit of a few (kiln's float32 gelu takes erf as TensorFlow does, a rational approximation within 4e-7).
  const std::size_t compared = check_weights_are_keras(*quantized.ptr(), "dense_mlp_int8");
  CHECK(compared == 8);
  const auto [difference, scale] = against_keras(*quantized.ptr(), "dense_mlp_int8");
  CHECK(difference <= 2.4e-7);
  (void)scale;
  // The float model is left as it was.
  const std::vector<Array> float_after = model.ptr()->get_weights();
  for (std::size_t i = 0; i < float_before.size(); ++i) CHECK(float_before[i].bitwise_equal(float_after[i]));

  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(kiln::quantize(model, "float8"), Contains("'float8' is not one kiln runs yet"));
  CHECK_THROWS_WITH(kiln::quantize(model, "int3"), Contains("unknown mode 'int3'"));
  // Quantizing again leaves every layer as it is: nothing to quantize.
  CHECK_THROWS_WITH(kiln::quantize(quantized, "int8"), Contains("no layer kiln quantizes"));
}

TEST_CASE("kiln::quantize(model, \"int4\") is Keras's quantize(\"int4\"): packed kernels, scales and zero points",
          "[serialize][quantize]") {
  const kiln::Model model = float_mlp("dense_mlp_int4");
  kiln::QuantizationReport report;
  const kiln::Model quantized = kiln::quantize(model, "int4", &report);
  CHECK(report.quantized == std::vector<std::string>{"hidden", "no_bias", "head"});
  const std::size_t compared = check_weights_are_keras(*quantized.ptr(), "dense_mlp_int4");
  CHECK(compared == 14);  // 3 kernels, 2 biases, 3 scales, 3 zero points, 3 g_idx
  CHECK(against_keras(*quantized.ptr(), "dense_mlp_int4").first <= 1e-6);
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(kiln::quantize(model, "int4/0"), Contains("'int4/<block size>'"));
  CHECK_THROWS_WITH(kiln::quantize(model, "int4/x"), Contains("'int4/<block size>'"));
  // Another block size: 16 rows a block, so the 40-row kernel has 3 blocks, the last one padded.
  const kiln::Model blocks = kiln::quantize(model, "int4/16");
  for (const kiln::Weight& weight : blocks.ptr()->weights())
    if (weight.path == "hidden/kernel_scale") CHECK(weight.value.shape() == kiln::Shape({3, 33}));
}

TEST_CASE("kiln::quantize(model, \"int4/-1\") is Keras's per-channel int4, bit for bit", "[serialize][quantize]") {
  const kiln::Model model = float_mlp("dense_mlp_int4_channel");
  kiln::QuantizationReport report;
  const kiln::Model quantized = kiln::quantize(model, "int4/-1", &report);
  CHECK(report.quantized == std::vector<std::string>{"hidden", "no_bias", "head"});
  CHECK(check_weights_are_keras(*quantized.ptr(), "dense_mlp_int4_channel") == 8);
  CHECK(against_keras(*quantized.ptr(), "dense_mlp_int4_channel").first <= 1e-6);
  // The int4 kernels hold 0.14 of the float bytes (half a byte a value, a float scale per unit).
  std::size_t float_bytes = 0, int4_bytes = 0;
  for (const kiln::Weight& weight : model.ptr()->weights())
    if (weight.path.find("kernel") != std::string::npos) float_bytes += weight.value.nbytes();
  for (const kiln::Weight& weight : quantized.ptr()->weights())
    if (weight.path.find("kernel") != std::string::npos) int4_bytes += weight.value.nbytes();
  CHECK(static_cast<double>(int4_bytes) <= 0.16 * static_cast<double>(float_bytes));
}

// Embedding(50, 10) -> GlobalAveragePooling1D -> Dense(3), with the float weights Keras quantized as `name`.
kiln::Model float_embedding_classifier(const std::string& name) {
  const kiln::Tensor tokens = kiln::Input({kiln::Shape::unknown, 6}, DType::float32, "tokens");
  kiln::Tensor h = kiln::Embedding(50, 10, Config{{"name", "embed"}})(tokens);
  h = kiln::GlobalAveragePooling1D("channels_last", Config{{"name", "pool"}})(h);
  kiln::Model model(tokens, kiln::Dense(3, "", {{"name", "out"}})(h), "embedding_int4_classifier");
  kiln::load_keras_weights(*model.ptr(), fixture(name + ".float.weights.h5"));
  return model;
}

TEST_CASE("kiln::quantize(model, \"int4/...\") quantizes Embedding rows as Keras does, by blocks or per row",
          "[serialize][quantize]") {
  for (const auto& [name, mode] : std::vector<std::pair<std::string, std::string>>{{"embedding_int4", "int4/4"},
                                                                                    {"embedding_int4_channel", "int4/-1"}}) {
    INFO(name);
    const kiln::Model model = float_embedding_classifier(name);
    kiln::QuantizationReport report;
    const kiln::Model quantized = kiln::quantize(model, mode, &report);
    CHECK(report.quantized == std::vector<std::string>{"embed", "out"});
    check_weights_are_keras(*quantized.ptr(), name);
    // (the rows are Keras's exactly; the pooling's float32 mean sums in another order than numpy's)
    CHECK(against_keras(*quantized.ptr(), name).first <= 1e-6);
    Array bad({1, 6});
    bad.set_flat(2, -1);
    CHECK_THROWS_WITH(quantized.ptr()->predict(std::vector<Array>{bad}, 1),
                      Catch::Matchers::Contains("quantized_gather") && Catch::Matchers::Contains("out of range [0, 50)"));
  }
}

TEST_CASE("kiln::quantize(model, \"int8\") quantizes Embedding rows as Keras does", "[serialize][quantize]") {
  const kiln::Tensor tokens = kiln::Input({kiln::Shape::unknown, 6}, DType::float32, "tokens");
  kiln::Tensor h = kiln::Embedding(50, 8, Config{{"name", "embed"}})(tokens);
  h = kiln::GlobalAveragePooling1D("channels_last", Config{{"name", "pool"}})(h);
  kiln::Model model(tokens, kiln::Dense(3, "", {{"name", "out"}})(h), "embedding_classifier");
  kiln::load_keras_weights(*model.ptr(), fixture("embedding_int8.float.weights.h5"));
  kiln::QuantizationReport report;
  const kiln::Model quantized = kiln::quantize(model, "int8", &report);
  CHECK(report.quantized == std::vector<std::string>{"embed", "out"});
  check_weights_are_keras(*quantized.ptr(), "embedding_int8");
  // (the rows are Keras's exactly; the pooling's float32 mean sums in another order than numpy's)
  CHECK(against_keras(*quantized.ptr(), "embedding_int8").first <= 1e-7);
  // An id outside the table is refused when the step runs, as the float Embedding refuses it.
  Array bad({1, 6});
  bad.set_flat(3, 50);
  CHECK_THROWS_WITH(quantized.ptr()->predict(std::vector<Array>{bad}, 1),
                    Catch::Matchers::Contains("quantized_gather") && Catch::Matchers::Contains("out of range [0, 50)"));
}

TEST_CASE("quantize names the layers Keras would quantize that kiln leaves float", "[serialize][quantize]") {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 5, 8}, DType::float32, "x");
  kiln::Tensor h = kiln::MultiHeadAttention(2, 4, Config{{"name", "mha"}})(x, x)[0];
  h = kiln::GlobalAveragePooling1D("channels_last")(h);
  kiln::Model model(x, kiln::Dense(3, "", {{"name", "out"}})(h), "attention");
  kiln::QuantizationReport report;
  std::vector<std::string> warnings;
  const auto previous = kiln::set_warning_handler([&](const std::string& message) { warnings.push_back(message); });
  const kiln::Model quantized = kiln::quantize(model, "int8", &report);
  kiln::set_warning_handler(previous);
  CHECK(report.quantized == std::vector<std::string>{"out"});
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].first == "mha");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::Contains("mha (MultiHeadAttention:"));
}

TEST_CASE("int4 policies and configs kiln does not run, bad modes, and wrappers are named", "[serialize][quantize]") {
  using Catch::Matchers::Contains;
  // Per-channel int4 by any of Keras's spellings: one scale per unit.
  for (const std::string mode : {"int4/None", "int4/-1"}) {
    const Config policy = {{"class_name", "Int4DTypePolicy"}, {"config", {{"mode", mode}, {"source_name", "float32"}}}};
    INFO(mode);
    const kiln::LayerPtr dense = kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", policy}});
    CHECK(dense->get_config().at("quantization_config").at("config").get_int("block_size") == -1);
  }
  const Config bad_config = {{"class_name", "Int4QuantizationConfig"},
                             {"config", {{"block_size", 0}}}};
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", "int4_from_float32"},
                                                            {"quantization_config", bad_config}}),
                    Contains("block_size must be positive, or -1"));
  const Config quantizer_on_blocks = {
      {"class_name", "Int4QuantizationConfig"},
      {"config", {{"block_size", 64}, {"activation_quantizer", {{"class_name", "AbsMaxQuantizer"}}}}}};
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", "int4_from_float32"},
                                                            {"quantization_config", quantizer_on_blocks}}),
                    Contains("by blocks takes no activation quantizer"));
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Embedding", Config{{"input_dim", 4}, {"output_dim", 3}, {"dtype", "int4_from_float32"},
                                                                {"quantization_config", Config{{"class_name", "Int8QuantizationConfig"}}}}),
                    Contains("Int4QuantizationConfig"));
  const Config bad_block = {{"class_name", "Int4DTypePolicy"}, {"config", {{"mode", "int4/12x"}, {"source_name", "float32"}}}};
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", bad_block}}),
                    Contains("'int4/<block size>'"));
  const Config odd_int8 = {{"class_name", "QuantizedDTypePolicy"}, {"config", {{"mode", "int8/2"}, {"source_name", "float32"}}}};
  CHECK_THROWS_WITH(kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"dtype", odd_int8}}),
                    Contains("quantization mode 'int8/2'"));
  // A Dense inside a wrapper stays float, and the report says so.
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 5, 8}, DType::float32, "x");
  kiln::Tensor h = kiln::TimeDistributed(kiln::LayerPtr(kiln::Dense(4)), Config{{"name", "per_step"}})(x);
  h = kiln::Flatten()(h);
  kiln::Model model(x, kiln::Dense(2, "", {{"name", "out"}})(h), "wrapped");
  kiln::QuantizationReport report;
  const auto previous = kiln::set_warning_handler([](const std::string&) {});
  kiln::quantize(model, "int8", &report);
  kiln::set_warning_handler(previous);
  CHECK(report.quantized == std::vector<std::string>{"out"});
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].first == "per_step");
  CHECK_THAT(report.skipped[0].second, Contains("a wrapper"));
}

TEST_CASE("the data helpers refuse int8, which would saturate their ids", "[data][quantize]") {
  CHECK_THROWS_AS(kiln::pad_sequences({{1, 2, 300}}, [] {
                    kiln::PadOptions options;
                    options.dtype = DType::int8;
                    return options;
                  }()),
                  kiln::DTypeError);
  CHECK_THROWS_AS(kiln::to_categorical(Array::from_vector(std::vector<float>{0, 1}, kiln::Shape{2}), 2, DType::int8),
                  kiln::DTypeError);
  kiln::CsvOptions options;
  options.dtype = DType::int8;
  CHECK_THROWS_AS(kiln::read_csv("anything.csv", options), kiln::DTypeError);
}

TEST_CASE("layers given a DTypePolicyMap in a functional model read their paths and write the map back",
          "[serialize][quantize]") {
  // Keras hands a DTypePolicyMap to a layer as its dtype; each layer (and MultiHeadAttention's projections) reads
  // its own path. Here without biases in the attention: Keras numbers an int8 projection's kernel_scale vars/1.
  const auto int8 = Config{{"module", "keras.dtype_policies"},
                           {"class_name", "QuantizedDTypePolicy"},
                           {"config", {{"mode", "int8"}, {"source_name", "float32"}}},
                           {"registered_name", Config()}};
  const Config map = {{"module", "keras.dtype_policies"},
                      {"class_name", "DTypePolicyMap"},
                      {"config", {{"default_policy", Config()},
                                  {"policy_map", {{"mha/(query|key|value)", int8}, {"mha/attention_output", int8},
                                                  {"out", int8}}}}},
                      {"registered_name", Config()}};
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 5, 8}, DType::float32, "x");
  kiln::Tensor h =
      kiln::MultiHeadAttention(2, 4, Config{{"name", "mha"}, {"use_bias", false}, {"dtype", map}})(x, x)[0];
  h = kiln::GlobalAveragePooling1D("channels_last")(h);
  kiln::Model model(x, kiln::Dense(3, "", {{"name", "out"}, {"dtype", map}})(h), "mapped");
  kiln::Rng rng(21);
  std::vector<Array> values;
  int int8_weights = 0;
  for (const kiln::Weight& weight : model.ptr()->weights()) {
    Array value(weight.value.shape(), weight.value.dtype());
    const bool scale = weight.path.find("kernel_scale") != std::string::npos;
    for (std::size_t i = 0; i < value.size(); ++i)
      value.set_flat(i, weight.value.dtype() == DType::int8 ? std::round(rng.uniform(-127.0, 127.0))
                                                            : (scale ? rng.uniform(50.0, 150.0) : rng.uniform(-1.0, 1.0)));
    if (weight.value.dtype() == DType::int8) ++int8_weights;
    values.push_back(value);
  }
  CHECK(int8_weights == 5);
  model.ptr()->set_weights(values);
  const kiln::Layer* mha = nullptr;
  for (const kiln::LayerPtr& layer : model.ptr()->layers())
    if (layer->name() == "mha") mha = layer.get();
  REQUIRE(mha != nullptr);
  CHECK(mha->keras_weight_paths() ==
        std::vector<std::string>{"query_dense/vars/0", "query_dense/vars/1", "key_dense/vars/0", "key_dense/vars/1",
                                 "value_dense/vars/0", "value_dense/vars/1", "output_dense/vars/0", "output_dense/vars/1"});
  CHECK(mha->get_config().at("dtype") == map);
  kiln::testing::TempDir dir;
  const std::string path = dir.file("mapped.keras");
  model.save(path);
  const kiln::Model again = kiln::load_model(path);
  Array batch(kiln::Shape{2, 5, 8});
  for (std::size_t i = 0; i < batch.size(); ++i) batch.set_flat(i, std::sin(0.37 * static_cast<double>(i)));
  CHECK(again.predict(batch).bitwise_equal(model.predict(batch)));
}
