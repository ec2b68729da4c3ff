// keras-hub's backbones (kiln/hub/): the .keras files keras-hub wrote (data/keras/hub/, and the options those leave
// at rest in data/keras/hub_variants/) load, predict keras-hub's stored outputs, and are written back as
// keras-hub wrote them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace hdf5 = kiln::detail::hdf5;
using kiln::Array;
using kiln::Config;
using kiln::DType;
using kiln::Model;
using kiln::Shape;

namespace {

std::string fixtures(const std::string& folder) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / folder).string();
}

std::vector<Array> datasets(const hdf5::Object& group, const std::string& prefix) {
  std::vector<Array> arrays;
  for (std::size_t i = 0; group.find(prefix + std::to_string(i)); ++i)
    arrays.push_back(group.at(prefix + std::to_string(i)).read(DType::float32));
  return arrays;
}

// max |predicted - stored| / max |stored|.
double relative_error(const Array& predicted, const Array& stored) {
  REQUIRE(predicted.shape() == stored.shape());
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) scale = std::max(scale, std::abs(stored.flat(i)));
  for (std::size_t i = 0; i < stored.size(); ++i) worst = std::max(worst, std::abs(predicted.flat(i) - stored.flat(i)));
  return worst / std::max(scale, 1e-30);
}

// The error of `model` on the inputs and outputs keras-hub stored. The stored outputs are in the order of the
// backbone's output dictionary (BERT: sequence, then pooled); kiln's in Keras's flattened order (by key).
double error_against_stored(Model& model, const std::string& io_path) {
  const hdf5::File io(kiln::detail::read_whole_file(io_path), io_path);
  const std::vector<Array> inputs = datasets(io.root().at("inputs"), "input_");
  std::vector<Array> stored = datasets(io.root().at("outputs"), "output_");
  const std::vector<Array> predicted = model.predict(inputs);
  REQUIRE(predicted.size() == stored.size());
  if (stored.size() == 2) std::swap(stored[0], stored[1]);
  double worst = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) worst = std::max(worst, relative_error(predicted[i], stored[i]));
  // KILN_FIXTURE_LOG=file: one line per fixture and its error, for reports.
  if (const char* log = std::getenv("KILN_FIXTURE_LOG"))
    std::ofstream(log, std::ios::app) << fs::path(io_path).filename().string() << "\t" << worst << "\n";
  return worst;
}

std::vector<std::string> keras_files(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(fixtures(folder)))
    if (entry.path().extension() == ".keras") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

Config archive_json(const std::string& path, const std::string& entry) {
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader archive(bytes, path);
  return kiln::parse_json(archive.read(entry, 1 << 20));
}

// Every dataset of a .keras file's model.weights.h5: path -> values.
std::map<std::string, Array> weight_datasets(const std::string& path) {
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader archive(bytes, path);
  const hdf5::File file(archive.read("model.weights.h5", 64 << 20), path);
  std::map<std::string, Array> found;
  std::vector<hdf5::Object> pending = {file.root()};
  while (!pending.empty()) {
    const hdf5::Object group = pending.back();
    pending.pop_back();
    for (const std::string& name : group.member_names()) {
      const hdf5::Object member = group.at(name);
      if (member.is_dataset())
        found.emplace(member.path(), member.read(DType::float32));
      else
        pending.push_back(member);
    }
  }
  return found;
}

}  // namespace

TEST_CASE("every keras-hub backbone loads from its .keras file and predicts keras-hub's outputs within 1e-5",
          "[hub][keras][fixtures]") {
  std::set<std::string> classes;
  for (const std::string folder : {"hub", "hub_variants"})
    for (const std::string& path : keras_files(folder)) {
      const std::string name = fs::path(path).stem().string();
      INFO(folder << "/" << name);
      Model model = kiln::load_keras_model(path);
      const double error = error_against_stored(model, fixtures(folder) + "/" + name + ".io.h5");
      CAPTURE(error);
      CHECK(error <= 1e-5);
      classes.insert(model->class_name());
    }
  CHECK(classes == std::set<std::string>{"BertBackbone", "DistilBertBackbone", "FalconBackbone", "GPT2Backbone", "GemmaBackbone",
                                         "Llama3Backbone", "LlamaBackbone", "MistralBackbone", "Phi3Backbone",
                                         "Qwen3Backbone", "QwenBackbone", "RobertaBackbone"});
}

TEST_CASE("a keras-hub backbone is written back as keras-hub wrote it: its arguments and its weights' layout",
          "[hub][keras][write]") {
  kiln::testing::TempDir folder;
  for (const std::string source : {"hub", "hub_variants"})
    for (const std::string& path : keras_files(source)) {
      const std::string name = fs::path(path).stem().string();
      INFO(name);
      Model model = kiln::load_keras_model(path);
      const std::string copy = folder.file(name + ".keras");
      kiln::save_keras_model(*model.ptr(), copy);
      Config theirs = archive_json(path, "config.json"), ours = archive_json(copy, "config.json");
      // keras-hub's Llama leaves tie_word_embeddings out of its config, and cannot read its own tied file back
      // (keras-hub 71453d0); kiln writes it, and keras-hub reads that.
      if (name == "llama3_scaled") theirs.set("config", theirs.at("config").with("tie_word_embeddings", true));
      CHECK(ours == theirs);
      // Every dataset where keras-hub put it, with the same values.
      const std::map<std::string, Array> expected = weight_datasets(path), written = weight_datasets(copy);
      std::set<std::string> expected_paths, written_paths;
      for (const auto& [key, value] : expected) expected_paths.insert(key);
      for (const auto& [key, value] : written) written_paths.insert(key);
      CHECK(written_paths == expected_paths);
      for (const auto& [key, value] : expected)
        if (written.count(key)) CHECK(written.at(key).bitwise_equal(value));
      // And kiln reads its own copy back to the same predictions.
      Model again = kiln::load_keras_model(copy);
      const std::vector<Array> a = again.get_weights(), b = model.get_weights();
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));
    }
}

TEST_CASE("a backbone is made in C++ from keras-hub's class name and arguments, with keras-hub's defaults",
          "[hub]") {
  kiln::hub::Backbone llama("LlamaBackbone", {{"vocabulary_size", 50},
                                              {"num_layers", 2},
                                              {"num_query_heads", 4},
                                              {"num_key_value_heads", 2},
                                              {"hidden_dim", 16},
                                              {"intermediate_dim", 24}});
  CHECK(llama->name() == "llama_backbone");
  const Config arguments = llama->arguments();
  CHECK(arguments.at("rope_max_wavelength").as_double() == 10000);
  CHECK(arguments.at("layer_norm_epsilon").as_double() == 1e-6);
  CHECK(llama->get_config().contains("tie_word_embeddings") == false);  // keras-hub leaves it out
  // keras-hub's parameter count: embeddings in and out (untied), per block q, k, v, o, three FFN kernels and
  // two norms, and the final norm.
  const std::int64_t per_block = 16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 24 + 2 * 16;
  CHECK(llama.count_params() == 2 * 50 * 16 + 2 * per_block + 16);
  // Inputs by name, sorted: padding_mask, then token_ids.
  Array mask(Shape{1, 5}), ids(Shape{1, 5});
  for (std::size_t i = 0; i < 5; ++i) {
    mask.set_flat(i, 1);
    ids.set_flat(i, static_cast<double>(3 * i + 1));
  }
  const std::vector<Array> out = llama.predict({mask, ids});
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{1, 5, 16});
  // Causal: the first four outputs do not depend on the fifth token.
  Array changed = ids.copy();
  changed.set_flat(4, 40);
  const Array other = llama.predict({mask, changed})[0];
  for (std::size_t i = 0; i < 4 * 16; ++i) CHECK(other.flat(i) == out[0].flat(i));
  // It saves as keras-hub does, and comes back from its config alone.
  kiln::testing::TempDir folder;
  llama.save(folder.file("llama.kiln"));
  Model again = kiln::load_model(folder.file("llama.kiln"));
  CHECK(again->class_name() == "LlamaBackbone");
  const Array reloaded = again.predict({mask, ids})[0];
  CHECK(reloaded.bitwise_equal(out[0]));
}

TEST_CASE("bad backbone arguments are refused by name", "[hub]") {
  CHECK_THROWS_AS(kiln::hub::Backbone("GPT2Backbone", {{"vocabulary_size", 10}}), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::hub::Backbone("GPT2Backbone", {{"vocabulary_size", 10}}),
                    Catch::Contains("intermediate_dim") || Catch::Contains("num_layers"));
  CHECK_THROWS_AS(kiln::hub::Backbone("NoSuchBackbone", Config::map()), kiln::ConfigError);
  CHECK_THROWS_AS(kiln::hub::Backbone("LlamaBackbone", {{"vocabulary_size", 10},
                                                        {"num_layers", 1},
                                                        {"num_query_heads", 3},
                                                        {"num_key_value_heads", 2},
                                                        {"hidden_dim", 12},
                                                        {"intermediate_dim", 8}}),
                  kiln::ConfigError);
  CHECK_THROWS_AS(kiln::hub::Backbone("MistralBackbone", {{"vocabulary_size", 10},
                                                          {"num_layers", 1},
                                                          {"num_query_heads", 2},
                                                          {"num_key_value_heads", 1},
                                                          {"hidden_dim", 8},
                                                          {"intermediate_dim", 8},
                                                          {"unknown_option", 1}}),
                  kiln::ConfigError);
  // Keras's legacy .h5 cannot hold a keras-hub model: refused before anything is written.
  kiln::hub::Backbone gpt2("GPT2Backbone", {{"vocabulary_size", 10},
                                            {"num_layers", 1},
                                            {"num_heads", 2},
                                            {"hidden_dim", 8},
                                            {"intermediate_dim", 8}});
  kiln::testing::TempDir folder;
  CHECK_THROWS_AS(kiln::save_keras_h5(*gpt2.ptr(), folder.file("gpt2.h5")), kiln::ConfigError);
  CHECK_FALSE(fs::exists(folder.file("gpt2.h5")));
}
