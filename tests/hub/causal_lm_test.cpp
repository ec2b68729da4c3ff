// keras-hub's CausalLM tasks (kiln/hub/causal_lm): logits from the backbone's token embedding in reverse, keras-hub's
// generate (greedy tokens equal to keras-hub's own on every decoder fixture, cached or not), task files, training.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/causal_lm.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Array;
using kiln::Config;
using kiln::Model;
using kiln::Shape;

namespace {

std::string fixtures(const std::string& path) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / path).string();
}

Array rows_of(const Config& list) {
  const std::vector<Config>& rows = list.as_list();
  const auto width = static_cast<std::int64_t>(rows.at(0).as_list().size());
  Array array(Shape{static_cast<std::int64_t>(rows.size()), width});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].as_list().size(); ++c)
      array.set_flat(r * static_cast<std::size_t>(width) + c, rows[r].as_list()[c].as_double());
  return array;
}

kiln::hub::CausalLM causal_lm(const std::string& file) {
  return kiln::hub::CausalLM(kiln::hub::Backbone::of(kiln::load_keras_model(fixtures(file))));
}

}  // namespace

TEST_CASE("CausalLM.generate's greedy tokens are keras-hub's, with the cache and without", "[hub][generate]") {
  const Config expected = kiln::parse_json(kiln::detail::read_whole_file(fixtures("hub_generations.json")));
  std::size_t checked = 0;
  for (const auto& [name, run] : expected.items()) {
    INFO(name);
    kiln::hub::CausalLM lm = causal_lm(run.get_string("file"));
    const Array ids = rows_of(run.at("token_ids")), mask = rows_of(run.at("padding_mask"));
    const Array generated = rows_of(run.at("generated"));
    // keras-hub's Falcon adds ALiBi in its prompt pass only: its cached one-token steps pass no padding mask, so each
    // builds its bias from a one-token mask, which is zero. kiln's cached steps do the same; a whole-window pass
    // (use_cache = false, and the beam search) puts ALiBi on every position, as the model's own forward does, so
    // those tokens are not keras-hub's cached ones.
    const bool falcon = name.rfind("falcon", 0) == 0;
    for (const bool cache : {true, false}) {
      if (falcon && !cache) continue;
      INFO("use_cache " << cache);
      kiln::GenerateOptions greedy;
      greedy.use_cache = cache;
      const kiln::hub::Generated result = lm.generate(ids, mask, greedy);
      CHECK(result.token_ids.bitwise_equal(generated));
      CHECK(result.padding_mask.bitwise_equal(Array::full(ids.shape(), 1.0)));
    }
    ++checked;
  }
  CHECK(checked == 15);  // GPT-2, Llama, Llama 3, Mistral, Qwen, Qwen 3, Phi-3, Gemma, Gemma 2 and Falcon, windows included
}

TEST_CASE("CausalLM.generate's beam search keeps keras-hub's best beams", "[hub][generate]") {
  const Config expected = kiln::parse_json(kiln::detail::read_whole_file(fixtures("hub_generations.json")));
  std::size_t checked = 0;
  for (const auto& [name, run] : expected.items()) {
    INFO(name);
    const Config& beam = run.at("beam");
    kiln::hub::CausalLM lm = causal_lm(run.get_string("file"));
    // kiln's beams read whole windows, which for Falcon are not keras-hub's cached steps (see the greedy test).
    if (name.rfind("falcon", 0) == 0) continue;
    kiln::GenerateOptions options;
    options.sampler = "beam";
    options.num_beams = beam.at("num_beams").as_int();
    const kiln::hub::Generated result = lm.generate(rows_of(beam.at("token_ids")), rows_of(beam.at("padding_mask")), options);
    CHECK(result.token_ids.bitwise_equal(rows_of(beam.at("generated"))));
    ++checked;
  }
  CHECK(checked == 13);  // all but the two Falcons
  kiln::GenerateOptions one_beam;
  one_beam.sampler = "beam";
  one_beam.num_beams = 1;  // one beam is greedy
  kiln::hub::CausalLM lm = causal_lm("hub/llama.keras");
  CHECK(lm.generate({31, 38, 18}, 12, one_beam) == lm.generate({31, 38, 18}, 12));
}

TEST_CASE("CausalLM's logits are the backbone's output times its token embedding, tied or not", "[hub]") {
  for (const std::string file : {"hub/gpt2.keras", "hub/llama.keras", "hub_variants/gemma2.keras"}) {
    INFO(file);
    kiln::hub::CausalLM lm = causal_lm(file);
    Array ids(Shape{1, 4}), mask = Array::full(Shape{1, 4}, 1.0);
    for (std::size_t i = 0; i < 4; ++i) ids.set_flat(i, static_cast<double>(5 * i + 2));
    const Array logits = lm.predict({mask, ids})[0];
    const Array hidden = lm.backbone().predict({mask, ids})[0];
    const std::vector<kiln::Weight> embedding = lm.backbone()->token_embedding()->weights();
    const Array& head = embedding.size() == 2 ? embedding[1].value : embedding[0].value;  // untied: (hidden, vocab)
    const bool tied = embedding.size() == 1;
    const std::int64_t vocabulary = logits.shape()[2], width = hidden.shape()[2];
    const bool capped = file == "hub_variants/gemma2.keras";  // final_logit_soft_cap = 30
    for (std::int64_t t = 0; t < 4; ++t)
      for (std::int64_t v = 0; v < vocabulary; v += 7) {
        double dot = 0;
        for (std::int64_t d = 0; d < width; ++d)
          dot += hidden.flat(static_cast<std::size_t>(t * width + d)) *
                 head.flat(static_cast<std::size_t>(tied ? v * width + d : d * vocabulary + v));
        if (capped) dot = 30.0 * std::tanh(dot / 30.0);
        CHECK(logits.flat(static_cast<std::size_t>(t * vocabulary + v)) == Approx(dot).epsilon(1e-5).margin(1e-5));
      }
  }
}

TEST_CASE("CausalLM samples the same tokens with the cache and without, for every sampler and seed", "[hub][generate]") {
  kiln::hub::CausalLM lm = causal_lm("hub_variants/mistral_window.keras");
  for (const std::string sampler : {"random", "top_k", "top_p"}) {
    INFO(sampler);
    kiln::GenerateOptions options;
    options.sampler = sampler;
    options.seed = 7;
    options.p = 0.6;
    options.temperature = 0.8;
    const std::vector<std::int64_t> cached = lm.generate({3, 9, 27}, 10, options);
    options.use_cache = false;
    const std::vector<std::int64_t> windowed = lm.generate({3, 9, 27}, 10, options);
    CHECK(cached.size() == 10);
    CHECK(cached == windowed);
    CHECK(std::vector<std::int64_t>(cached.begin(), cached.begin() + 3) == std::vector<std::int64_t>{3, 9, 27});
  }
}

TEST_CASE("CausalLM.generate stops as keras-hub does: every row past a stop token, masked after it", "[hub][generate]") {
  kiln::hub::CausalLM lm = causal_lm("hub/llama.keras");
  // llama's second row generates 6, 48, 18, 6, 33, ... greedily (hub_generations.json): stop at 18.
  Array ids = Array::full(Shape{1, 12}, 0.0), mask = ids.copy();
  for (std::size_t i = 0; i < 3; ++i) mask.set_flat(i, 1.0);
  ids.set_flat(0, 31);
  ids.set_flat(1, 38);
  ids.set_flat(2, 18);
  const kiln::hub::Generated stopped = lm.generate(ids, mask, {}, {48});
  const std::vector<double> tokens = {31, 38, 18, 6, 48, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<double> kept = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < 12; ++i) {
    CHECK(stopped.token_ids.flat(i) == tokens[i]);
    CHECK(stopped.padding_mask.flat(i) == kept[i]);
  }
  CHECK(lm.generate({31, 38, 18}, 12, {}, {48}) == std::vector<std::int64_t>{31, 38, 18, 6, 48});
}

TEST_CASE("keras-hub's task files load as CausalLMs, predict as their backbones do, and are written back alike",
          "[hub][keras]") {
  kiln::testing::TempDir folder;
  for (const std::string name : {"gpt2_causal_lm", "llama_causal_lm"}) {
    INFO(name);
    const std::string path = fixtures("hub_tasks/" + name + ".keras");
    Model model = kiln::load_keras_model(path);
    kiln::hub::CausalLM lm = kiln::hub::CausalLM::of(model);
    CHECK(lm->name() == name);
    Array ids(Shape{2, 5}), mask = Array::full(Shape{2, 5}, 1.0);
    for (std::size_t i = 0; i < 10; ++i) ids.set_flat(i, static_cast<double>((7 * i + 3) % 61));
    const Array logits = lm.predict({mask, ids})[0];
    kiln::hub::CausalLM from_backbone =
        causal_lm(std::string("hub/") + (name == "gpt2_causal_lm" ? "gpt2" : "llama") + ".keras");
    CHECK(logits.bitwise_equal(from_backbone.predict({mask, ids})[0]));
    // Written back with keras-hub's config (the compile config aside: kiln writes what it compiled).
    const std::string copy = folder.file(name + ".keras");
    kiln::save_keras_model(*model.ptr(), copy);
    auto config_of = [](const std::string& file) {
      const std::string bytes = kiln::detail::read_whole_file(file);
      const kiln::detail::ZipReader archive(bytes, file);
      Config config = kiln::parse_json(archive.read("config.json", 1 << 20));
      config.erase("compile_config");
      return config;
    };
    CHECK(config_of(copy) == config_of(path));
    Model again = kiln::load_keras_model(copy);
    CHECK(again.predict({mask, ids})[0].bitwise_equal(logits));
  }
}

TEST_CASE("a CausalLM fine-tunes with fit on next-token targets and saves with its backbone", "[hub][train]") {
  kiln::hub::Backbone backbone("GPT2Backbone", {{"vocabulary_size", 20},
                                               {"num_layers", 1},
                                               {"num_heads", 2},
                                               {"hidden_dim", 8},
                                               {"intermediate_dim", 16},
                                               {"max_sequence_length", 16},
                                               {"dropout", 0.0}});
  kiln::hub::CausalLM lm(backbone);
  CHECK(lm->class_name() == "GPT2CausalLM");
  CHECK(lm->name() == "gpt2_causal_lm");
  lm.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.01}}), kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                    {"config", Config{{"from_logits", true}}}}));
  Array ids(Shape{8, 8}), targets(Shape{8, 8}), mask = Array::full(Shape{8, 8}, 1.0);
  for (std::size_t i = 0; i < 64; ++i) {
    ids.set_flat(i, static_cast<double>(i % 20));
    targets.set_flat(i, static_cast<double>((i + 1) % 20));
  }
  const double before = lm.evaluate({mask, ids}, {targets}).at("loss");
  lm.fit({mask, ids}, {targets}, kiln::FitOptions().epochs(30).batch_size(8).verbose(0));
  const double after = lm.evaluate({mask, ids}, {targets}).at("loss");
  CHECK(after < 0.5 * before);
  kiln::testing::TempDir folder;
  for (const std::string file : {"lm.kiln", "lm.keras"}) {
    INFO(file);
    lm.save(folder.file(file));
    kiln::hub::CausalLM again = kiln::hub::CausalLM::of(kiln::load_model(folder.file(file)));
    CHECK(again.predict({mask, ids})[0].bitwise_equal(lm.predict({mask, ids})[0]));
    CHECK(again.generate({1, 2, 3}, 8) == lm.generate({1, 2, 3}, 8));
  }
}

TEST_CASE("bad generate calls are refused by name", "[hub][generate]") {
  kiln::hub::CausalLM lm = causal_lm("hub/gpt2.keras");
  CHECK_THROWS_AS(lm.generate(std::vector<std::int64_t>{}, 5), kiln::ValueError);
  CHECK_THROWS_AS(lm.generate({1, 2, 3}, 2), kiln::ValueError);
  CHECK_THROWS_WITH(lm.generate({1, 99}, 5), Catch::Contains("vocabulary"));
  Array ids = Array::full(Shape{1, 4}, 1.0), mask = Array::full(Shape{1, 4}, 0.0);
  CHECK_THROWS_WITH(lm.generate(ids, mask), Catch::Contains("at least one token"));
  mask.set_flat(1, 1.0);
  CHECK_THROWS_WITH(lm.generate(ids, mask), Catch::Contains("left-aligned"));
  kiln::GenerateOptions unknown;
  unknown.sampler = "beam_search";
  kiln::GenerateOptions no_beams;
  no_beams.sampler = "beam";
  no_beams.num_beams = 0;
  CHECK_THROWS_AS(lm.generate({1, 2}, 4, no_beams), kiln::ValueError);
  CHECK_THROWS_AS(lm.generate({1, 2}, 4, unknown), kiln::ConfigError);
  CHECK_THROWS_AS(kiln::hub::CausalLM(kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/bert.keras")))),
                  kiln::ConfigError);
}
