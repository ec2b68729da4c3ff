// keras-hub's int8 backbones (data/keras/quantized/gpt2_backbone_int8: a GPT2Backbone Keras 3.16 quantized with
// quantize("int8")): keras-hub records the quantized layers as one DTypePolicyMap by layer path in the backbone's
// dtype; kiln reads it, runs the int8 token embedding (a tied ReversibleEmbedding, in reverse too), the attention's
// int8 EinsumDense projections and the int8 feed-forward Dense layers, predicts Keras's outputs, writes the map
// back, and quantizes a float backbone as Keras does.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/hub/causal_lm.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>

#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace hdf5 = kiln::detail::hdf5;
using kiln::Array;
using kiln::Config;
using kiln::DType;
using kiln::Shape;

namespace {

std::string fixture(const std::string& name) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / "quantized" / name).string();
}

// The quantized keras-hub fixtures: a backbone, how many int8 weights Keras made in it, and a float twin's config.
struct Fixture {
  std::string name, backbone_class;
  Config arguments;
  int int8_weights;  // int8 arrays in the quantized model
  std::int64_t vocabulary;
  bool decoder = true;  // a CausalLM's backbone (logits, generation)
  std::string mode = "int8";  // what kiln::quantize is asked for to make Keras's weights
};

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> all = {
      // the token embedding (tied); per block four projections and two Dense layers
      {"gpt2_backbone_int8", "GPT2Backbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_heads", 2}, {"hidden_dim", 8},
              {"intermediate_dim", 16}, {"max_sequence_length", 12}},
       13, 50},
      // the token embedding untied (its table and reverse_embeddings); per block four grouped-query projections
      // and the gated feed-forward's three Dense layers
      {"llama_backbone_int8", "LlamaBackbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_query_heads", 4}, {"num_key_value_heads", 2},
              {"hidden_dim", 8}, {"intermediate_dim", 16}},
       16, 50},
      // per block query/key/value EinsumDense with biases and the output Dense; two feed-forward Dense layers
      {"falcon_backbone_int8", "FalconBackbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_attention_heads", 2}, {"hidden_dim", 8},
              {"intermediate_dim", 16}},
       13, 50},
      // an encoder: the token and segment embeddings, per block four projections and two Dense layers, the pooler
      {"bert_backbone_int8", "BertBackbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_heads", 2}, {"hidden_dim", 8},
              {"intermediate_dim", 16}, {"max_sequence_length", 12}},
       15, 50, false},
      // int4 by blocks of 4 (quantize("int4", config=Int4QuantizationConfig(block_size=4))): the tied token
      // embedding's packed table and zero points, per block four EinsumDense and two Dense packed kernels with theirs
      {"gpt2_backbone_int4", "GPT2Backbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_heads", 2}, {"hidden_dim", 8},
              {"intermediate_dim", 16}, {"max_sequence_length", 12}},
       26, 50, true, "int4/4"},
      // per-channel int4 (block_size -1): the untied token embedding's table and reverse map (packed along its
      // rows), per block four grouped-query projections and three Dense kernels, each with a scale per unit
      {"llama_backbone_int4_channel", "LlamaBackbone",
       Config{{"vocabulary_size", 50}, {"num_layers", 2}, {"num_query_heads", 4}, {"num_key_value_heads", 2},
              {"hidden_dim", 8}, {"intermediate_dim", 16}},
       16, 50, true, "int4/-1"},
  };
  return all;
}

struct KerasRun {
  std::vector<Array> inputs;  // by name: padding_mask, (segment_ids,) token_ids, as floats
  Array output, logits, float_output;  // the first output; a decoder's logits
  std::vector<Array> outputs, float_outputs;  // every output, by name (BERT: pooled_output, sequence_output)
};

KerasRun keras_run(const std::string& name = "gpt2_backbone_int8") {
  const hdf5::File io(kiln::detail::read_whole_file(fixture(name + ".io.h5")), "io");
  KerasRun run;
  for (int i = 0; io.root().at("inputs").find("input_" + std::to_string(i)); ++i)
    run.inputs.push_back(io.root().at("inputs").at("input_" + std::to_string(i)).read(DType::float32));
  for (int k = 0; io.root().at("outputs").find("output_" + std::to_string(k)); ++k) {
    run.outputs.push_back(io.root().at("outputs").at("output_" + std::to_string(k)).read(DType::float32));
    run.float_outputs.push_back(io.root().at("float_outputs").at("output_" + std::to_string(k)).read(DType::float32));
  }
  run.output = run.outputs.at(0);
  run.float_output = run.float_outputs.at(0);
  if (io.root().at("outputs").find("logits")) run.logits = io.root().at("outputs").at("logits").read(DType::float32);
  return run;
}

// Largest |a - b| over the positions where the padding mask is 1 (Keras's padded positions are computed too, but
// with every key masked their attention is a mean over garbage both ways).
double largest_difference(const Array& a, const Array& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a.flat(i) - b.flat(i)));
  return worst;
}

// The paths keras-hub's quantize("int8") recorded in the file's DTypePolicyMap.
Config config_of(const std::string& file) {
  const std::string bytes = kiln::detail::read_whole_file(file);
  const kiln::detail::ZipReader archive(bytes, file);
  return kiln::parse_json(archive.read("config.json", 1 << 20));
}

std::set<std::string> keras_policy_paths(const std::string& file) {
  const Config config = config_of(file);
  std::set<std::string> paths;
  for (const std::string& key : config.at("config").at("dtype").at("config").at("policy_map").keys()) paths.insert(key);
  return paths;
}

const std::set<std::string>& expected_paths() {
  static const std::set<std::string> paths = [] {
    std::set<std::string> all = {"token_embedding"};
    for (const std::string block : {"transformer_layer_0", "transformer_layer_1"}) {
      for (const char* projection : {"query", "key", "value", "attention_output"})
        all.insert(block + "/self_attention/" + projection);
      all.insert(block + "/feedforward_intermediate_dense");
      all.insert(block + "/feedforward_output_dense");
    }
    return all;
  }();
  return paths;
}

kiln::hub::Backbone float_gpt2() {
  kiln::hub::Backbone gpt2("GPT2Backbone", {{"vocabulary_size", 50},
                                            {"num_layers", 2},
                                            {"num_heads", 2},
                                            {"hidden_dim", 8},
                                            {"intermediate_dim", 16},
                                            {"max_sequence_length", 12}});
  kiln::load_keras_weights(*gpt2.ptr(), fixture("gpt2_backbone_int8.float.weights.h5"));
  return gpt2;
}

}  // namespace

TEST_CASE("keras-hub's int8 and int4 backbones load, predict Keras's outputs and logits, write back and "
          "quantize as keras-hub does", "[hub][quantize]") {
  for (const Fixture& f : fixtures()) {
    INFO(f.name);
    const std::string file = fixture(f.name + ".keras");
    const kiln::Model loaded = kiln::load_keras_model(file);
    int int8_weights = 0;
    for (const kiln::Weight& weight : loaded.ptr()->weights())
      if (weight.value.dtype() == DType::int8) ++int8_weights;
    CHECK(int8_weights == f.int8_weights);
    const KerasRun run = keras_run(f.name);
    const kiln::hub::Backbone backbone = kiln::hub::Backbone::of(loaded);
    const std::vector<Array> predicted = backbone.predict(run.inputs);
    REQUIRE(predicted.size() == run.outputs.size());
    for (std::size_t k = 0; k < predicted.size(); ++k) CHECK(largest_difference(predicted[k], run.outputs[k]) <= 2e-4);
    if (f.decoder)
      CHECK(largest_difference(kiln::hub::CausalLM(backbone).predict(run.inputs)[0], run.logits) <= 2e-4);
    // Written back: keras-hub's map, the same weights.
    kiln::testing::TempDir dir;
    const std::string copy = dir.file("copy.keras");
    loaded.save(copy);
    CHECK(keras_policy_paths(copy) == keras_policy_paths(file));
    const kiln::Model again = kiln::load_keras_model(copy);
    CHECK(again.predict(run.inputs)[0].bitwise_equal(loaded.predict(run.inputs)[0]));
    // And in kiln's own format.
    const std::string own = dir.file("copy.kiln");
    loaded.save(own);
    CHECK(kiln::load_model(own).predict(run.inputs)[0].bitwise_equal(loaded.predict(run.inputs)[0]));
    // kiln::quantize of the float backbone: Keras's weights bit for bit, every path Keras quantized.
    kiln::hub::Backbone float_backbone(f.backbone_class, f.arguments);
    kiln::load_keras_weights(*float_backbone.ptr(), fixture(f.name + ".float.weights.h5"));
    REQUIRE(largest_difference(float_backbone.predict(run.inputs)[0], run.float_output) <= 1e-5);
    kiln::QuantizationReport report;
    const kiln::Model quantized = kiln::quantize(float_backbone, f.mode, &report);
    CHECK(std::set<std::string>(report.quantized.begin(), report.quantized.end()) == keras_policy_paths(file));
    CHECK(report.skipped.empty());
    std::map<std::string, Array> keras_weights;
    for (const kiln::Weight& weight : loaded.ptr()->weights()) keras_weights.emplace(weight.path, weight.value);
    for (const kiln::Weight& weight : quantized.ptr()->weights()) {
      INFO(weight.path);
      REQUIRE(keras_weights.count(weight.path) == 1);
      CHECK(weight.value.bitwise_equal(keras_weights.at(weight.path)));
    }
  }
}

TEST_CASE("keras-hub's int8 GPT-2 backbone loads and predicts Keras's outputs and logits", "[hub][quantize]") {
  REQUIRE(keras_policy_paths(fixture("gpt2_backbone_int8.keras")) == expected_paths());
  const kiln::hub::Backbone backbone = kiln::hub::Backbone::of(kiln::load_keras_model(fixture("gpt2_backbone_int8.keras")));
  // int8: the token embedding's table, and per block the four projections' and two Dense kernels.
  int int8_weights = 0;
  for (const kiln::Weight& weight : backbone.ptr()->weights())
    if (weight.value.dtype() == DType::int8) ++int8_weights;
  CHECK(int8_weights == 13);
  const KerasRun run = keras_run();
  const Array output = backbone.predict(run.inputs)[0];
  // The int8 products are exact and the scales the same float32 operations: only the float layers between them
  // (softmax, layer norms, gelu) differ in their last bits, and a row's quantization can round the other way.
  CHECK(largest_difference(output, run.output) <= 2e-4);
  // Keras's own int8 error, for scale: the float model's outputs are 3e-3 away.
  CHECK(largest_difference(run.output, run.float_output) > 1e-3);
  kiln::hub::CausalLM lm(backbone);
  const Array logits = lm.predict(run.inputs)[0];
  CHECK(largest_difference(logits, run.logits) <= 2e-4);
}

TEST_CASE("a quantized backbone writes keras-hub's DTypePolicyMap and its int8 weights back", "[hub][quantize]") {
  kiln::testing::TempDir dir;
  const kiln::Model loaded = kiln::load_keras_model(fixture("gpt2_backbone_int8.keras"));
  const std::string copy = dir.file("copy.keras");
  loaded.save(copy);
  const Config config = config_of(copy);
  const Config& dtype = config.at("config").at("dtype");
  CHECK(dtype.get_string("class_name") == "DTypePolicyMap");
  CHECK(dtype.get_string("module") == "keras.dtype_policies");  // Keras's form, as the fixture has it
  CHECK(dtype.at("config").at("default_policy").is_null());
  CHECK(keras_policy_paths(copy) == expected_paths());
  for (const std::string& path : expected_paths()) {
    const Config& policy = dtype.at("config").at("policy_map").at(path);
    CHECK(policy.get_string("class_name") == "QuantizedDTypePolicy");
    CHECK(policy.get_string("module") == "keras.dtype_policies");
    CHECK(policy.contains("registered_name"));
    CHECK(policy.at("config").get_string("mode") == "int8");
  }
  // The same weights, the same predictions.
  const kiln::Model again = kiln::load_keras_model(copy);
  const std::vector<kiln::Weight> before = loaded.ptr()->weights(), after = again.ptr()->weights();
  REQUIRE(before.size() == after.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    INFO(before[i].path);
    CHECK(before[i].path == after[i].path);
    CHECK(before[i].value.bitwise_equal(after[i].value));
  }
  const KerasRun run = keras_run();
  CHECK(loaded.predict(run.inputs)[0].bitwise_equal(again.predict(run.inputs)[0]));
  // And in kiln's own format.
  const std::string own = dir.file("copy.kiln");
  loaded.save(own);
  CHECK(kiln::load_model(own).predict(run.inputs)[0].bitwise_equal(loaded.predict(run.inputs)[0]));
}

TEST_CASE("kiln::quantize(backbone, \"int8\") is keras-hub's quantize: the same policies, weights and outputs",
          "[hub][quantize]") {
  const kiln::hub::Backbone gpt2 = float_gpt2();
  const KerasRun run = keras_run();
  REQUIRE(largest_difference(gpt2.predict(run.inputs)[0], run.float_output) <= 1e-5);
  kiln::QuantizationReport report;
  const kiln::Model quantized = kiln::quantize(gpt2, "int8", &report);
  CHECK(std::set<std::string>(report.quantized.begin(), report.quantized.end()) == expected_paths());
  CHECK(report.quantized.size() == expected_paths().size());
  CHECK(report.skipped.empty());
  // Keras's quantized weights, bit for bit, under the same paths.
  const kiln::Model keras = kiln::load_keras_model(fixture("gpt2_backbone_int8.keras"));
  std::map<std::string, Array> keras_weights;
  for (const kiln::Weight& weight : keras.ptr()->weights()) keras_weights.emplace(weight.path, weight.value);
  REQUIRE(quantized.ptr()->weights().size() == keras_weights.size());
  for (const kiln::Weight& weight : quantized.ptr()->weights()) {
    INFO(weight.path);
    REQUIRE(keras_weights.count(weight.path) == 1);
    CHECK(weight.value.bitwise_equal(keras_weights.at(weight.path)));
  }
  CHECK(quantized.predict(run.inputs)[0].bitwise_equal(keras.predict(run.inputs)[0]));
  // The float backbone is left as it was.
  CHECK(largest_difference(gpt2.predict(run.inputs)[0], run.float_output) <= 1e-5);

  // A task quantizes through its backbone: the CausalLM's logits come from the int8 table in reverse.
  kiln::hub::CausalLM float_lm(float_gpt2());
  kiln::QuantizationReport task_report;
  const kiln::Model lm = kiln::quantize(float_lm, "int8", &task_report);
  CHECK(task_report.quantized.size() == expected_paths().size());
  CHECK(largest_difference(lm.predict(run.inputs)[0], run.logits) <= 2e-4);
}

TEST_CASE("an int8 or int4 CausalLM generates with its cache the tokens it generates without", "[hub][quantize][generate]") {
  for (const Fixture& f : fixtures()) {
  if (!f.decoder) continue;
  INFO(f.name);
  kiln::hub::CausalLM lm(kiln::hub::Backbone::of(kiln::load_keras_model(fixture(f.name + ".keras"))));
  kiln::GenerateOptions greedy;
  const std::vector<std::int64_t> cached = lm.generate({3, 9, 27, 4}, 11, greedy);
  greedy.use_cache = false;
  const std::vector<std::int64_t> uncached = lm.generate({3, 9, 27, 4}, 11, greedy);
  CHECK(cached.size() == 11);
  CHECK(cached == uncached);
  // Each new token is the argmax of the int8 logits of the sequence before it.
  for (std::size_t step = 4; step < cached.size(); ++step) {
    Array ids(Shape{1, static_cast<std::int64_t>(step)}), mask = Array::full(Shape{1, static_cast<std::int64_t>(step)}, 1.0);
    for (std::size_t i = 0; i < step; ++i) ids.set_flat(i, static_cast<double>(cached[i]));
    const Array logits = lm.predict({mask, ids})[0];
    std::size_t best = 0;
    const std::size_t last = (step - 1) * 50;
    for (std::size_t v = 1; v < 50; ++v)
      if (logits.flat(last + v) > logits.flat(last + best)) best = v;
    CHECK(static_cast<std::int64_t>(best) == cached[step]);
  }
  }
}

TEST_CASE("a DTypePolicyMap kiln cannot follow is refused by name", "[hub][quantize]") {
  using Catch::Matchers::Contains;
  const auto policy = [](const std::string& mode) {
    return Config{{"module", "keras.dtype_policies"},
                  {"class_name", "QuantizedDTypePolicy"},
                  {"config", {{"mode", mode}, {"source_name", Config()}}},
                  {"registered_name", Config()}};
  };
  const auto backbone_with = [&](const Config& policy_map) {
    return Config{{"vocabulary_size", 50}, {"num_layers", 1},  {"num_heads", 2},           {"hidden_dim", 8},
                  {"intermediate_dim", 16}, {"max_sequence_length", 12},
                  {"dtype", {{"module", "keras.dtype_policies"},
                             {"class_name", "DTypePolicyMap"},
                             {"config", {{"default_policy", Config()}, {"policy_map", policy_map}}},
                             {"registered_name", Config()}}}};
  };
  // int8 on a layer norm: Keras does not quantize it, nor does kiln.
  CHECK_THROWS_AS(kiln::hub::Backbone("GPT2Backbone",
                                      backbone_with({{"transformer_layer_0/self_attention_layer_norm", policy("int8")}})),
                  kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::hub::Backbone("GPT2Backbone",
                                        backbone_with({{"transformer_layer_0/self_attention_layer_norm", policy("int8")}})),
                    Contains("self_attention_layer_norm") && Contains("int8"));
  // A mode kiln does not run on the attention's projections.
  CHECK_THROWS_WITH(kiln::hub::Backbone("GPT2Backbone", backbone_with({{"transformer_layer_0/self_attention/query",
                                                                        policy("float8")}})),
                    Contains("query") && Contains("float8"));
  // Two regex keys for one path, as Keras refuses it.
  CHECK_THROWS_WITH(kiln::hub::Backbone("GPT2Backbone", backbone_with({{"transformer_layer_0/feedforward_.*_dense", policy("int8")},
                                                                       {".*/feedforward_output_dense", policy("int8")}})),
                    Contains("more than one"));
  // A regex key, as Keras reads it: every block's feed-forward layers in int8.
  const kiln::hub::Backbone patterned("GPT2Backbone",
                                      backbone_with({{"transformer_layer_.*/feedforward_.*_dense", policy("int8")}}));
  int int8_weights = 0;
  for (const kiln::Weight& weight : patterned.ptr()->weights())
    if (weight.value.dtype() == DType::int8) ++int8_weights;
  CHECK(int8_weights == 2);
}

TEST_CASE("a partly quantized backbone quantizes the rest, and a quantized one has nothing left", "[hub][quantize]") {
  const auto int8 = Config{{"module", "keras.dtype_policies"},
                           {"class_name", "QuantizedDTypePolicy"},
                           {"config", {{"mode", "int8"}, {"source_name", "float32"}}},
                           {"registered_name", Config()}};
  const Config map = {{"module", "keras.dtype_policies"},
                      {"class_name", "DTypePolicyMap"},
                      {"config", {{"default_policy", Config()},
                                  {"policy_map", {{"transformer_layer_.*/feedforward_.*_dense", int8}}}}},
                      {"registered_name", Config()}};
  const kiln::hub::Backbone partly("GPT2Backbone", {{"vocabulary_size", 50}, {"num_layers", 2}, {"num_heads", 2},
                                                    {"hidden_dim", 8}, {"intermediate_dim", 16},
                                                    {"max_sequence_length", 12}, {"dtype", map}});
  // The map goes back as it came: its regex key, its null default.
  CHECK(partly.ptr()->get_config().at("dtype") == map);
  kiln::QuantizationReport report;
  std::vector<std::string> warnings;
  const auto previous = kiln::set_warning_handler([&](const std::string& message) { warnings.push_back(message); });
  const kiln::Model quantized = kiln::quantize(partly, "int8", &report);
  kiln::set_warning_handler(previous);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::Contains("already quantized"));
  CHECK(report.quantized.size() == 9);  // the token embedding and each block's four projections
  CHECK(report.skipped.size() == 4);    // each block's two feed-forward layers
  for (const auto& [path, why] : report.skipped) CHECK(why == "already quantized");
  int int8_weights = 0;
  for (const kiln::Weight& weight : quantized.ptr()->weights())
    if (weight.value.dtype() == DType::int8) ++int8_weights;
  CHECK(int8_weights == 13);
  // The feed-forward layers kept their int8 weights.
  std::map<std::string, Array> before;
  for (const kiln::Weight& weight : partly.ptr()->weights()) before.emplace(weight.path, weight.value);
  for (const kiln::Weight& weight : quantized.ptr()->weights())
    if (weight.path.find("feedforward") != std::string::npos && weight.path.find("layer_norm") == std::string::npos) {
      INFO(weight.path);
      CHECK(weight.value.bitwise_equal(before.at(weight.path)));
    }
  // The new map holds the old key and the new paths.
  const Config written = quantized.ptr()->get_config();
  const Config& entries = written.at("dtype").at("config").at("policy_map");
  CHECK(entries.contains("transformer_layer_.*/feedforward_.*_dense"));
  CHECK(entries.contains("transformer_layer_1/self_attention/query"));
  CHECK(entries.contains("token_embedding"));
  // Nothing left to quantize: refused, as Keras refuses a quantized model.
  kiln::QuantizationReport again;
  CHECK_THROWS_AS(kiln::quantize(quantized, "int8", &again), kiln::ValueError);
}

TEST_CASE("a policy kiln cannot follow inside a map leaves no half-made layer", "[hub][quantize]") {
  // int8 from float16: kiln computes in float32, float64 and bfloat16; the error names the layer.
  const auto policy = Config{{"module", "keras.dtype_policies"},
                             {"class_name", "QuantizedDTypePolicy"},
                             {"config", {{"mode", "int8"}, {"source_name", "float16"}}},
                             {"registered_name", Config()}};
  const Config arguments = {{"vocabulary_size", 50}, {"num_layers", 1}, {"num_heads", 2}, {"hidden_dim", 8},
                            {"intermediate_dim", 16},  {"max_sequence_length", 12},
                            {"dtype", {{"module", "keras.dtype_policies"},
                                       {"class_name", "DTypePolicyMap"},
                                       {"config", {{"default_policy", Config()},
                                                   {"policy_map", {{"transformer_layer_0/feedforward_output_dense", policy}}}}},
                                       {"registered_name", Config()}}}};
  CHECK_THROWS_AS(kiln::hub::Backbone("GPT2Backbone", arguments), kiln::ConfigError);
  // A pattern std::regex cannot read is refused by name, not skipped.
  const Config bad = {{"vocabulary_size", 50}, {"num_layers", 1}, {"num_heads", 2}, {"hidden_dim", 8},
                      {"intermediate_dim", 16},  {"max_sequence_length", 12},
                      {"dtype", {{"module", "keras.dtype_policies"},
                                 {"class_name", "DTypePolicyMap"},
                                 {"config", {{"default_policy", Config()}, {"policy_map", {{"transformer_(", policy}}}}},
                                 {"registered_name", Config()}}}};
  CHECK_THROWS_WITH(kiln::hub::Backbone("GPT2Backbone", bad), Catch::Matchers::Contains("transformer_("));
}

TEST_CASE("Gemma's int8 attention and EinsumDense feed-forward are refused or left float by name", "[hub][quantize]") {
  const Config arguments = {{"vocabulary_size", 50}, {"num_layers", 1},        {"num_query_heads", 2},
                            {"num_key_value_heads", 1}, {"hidden_dim", 8},     {"intermediate_dim", 16},
                            {"head_dim", 4}};
  const kiln::hub::Backbone gemma("GemmaBackbone", arguments);
  kiln::QuantizationReport report;
  std::vector<std::string> warnings;
  const auto previous = kiln::set_warning_handler([&](const std::string& message) { warnings.push_back(message); });
  const kiln::Model quantized = kiln::quantize(gemma, "int8", &report);
  kiln::set_warning_handler(previous);
  CHECK(report.quantized == std::vector<std::string>{"token_embedding"});
  REQUIRE(report.skipped.size() == 4);  // the attention's projections and the three feed-forward layers
  for (const auto& [path, why] : report.skipped) CHECK_THAT(why, Catch::Matchers::Contains("Gemma") || Catch::Matchers::Contains("Attention"));
  REQUIRE(warnings.size() == 1);
  // keras-hub's int8 Gemma file: its attention is refused by name.
  const Config int8 = {{"module", "keras.dtype_policies"},
                       {"class_name", "QuantizedDTypePolicy"},
                       {"config", {{"mode", "int8"}, {"source_name", Config()}}},
                       {"registered_name", Config()}};
  const Config map = {{"module", "keras.dtype_policies"},
                      {"class_name", "DTypePolicyMap"},
                      {"config", {{"default_policy", Config()}, {"policy_map", {{"decoder_block_0/attention/query", int8}}}}},
                      {"registered_name", Config()}};
  CHECK_THROWS_WITH(kiln::hub::Backbone("GemmaBackbone", arguments.with("dtype", map)),
                    Catch::Matchers::Contains("CachedGemmaAttention") && Catch::Matchers::Contains("heads first"));
}
