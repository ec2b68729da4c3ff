// keras-hub's TextClassifier tasks (kiln/hub/text_classifier): keras-hub's own files (data/keras/hub_tasks, made by
// data/keras/oracle/make_hub_classifiers.py) load and predict keras-hub's logits, write back as keras-hub writes
// them, and a BERT classifier fine-tunes with fit on labelled text through the WordPiece tokenizer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/text_classifier.hpp>
#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/json.hpp>
#include "support/hub_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Array;
using kiln::Config;
using kiln::DType;
using kiln::Model;
using kiln::Shape;
using kiln::testing::archive_config;
using kiln::testing::error_against_stored;

namespace {

fs::path source_dir() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }
std::string task_file(const std::string& name) { return (source_dir() / "data" / "keras" / "hub_tasks" / name).string(); }

}  // namespace

TEST_CASE("keras-hub's TextClassifier files load, predict keras-hub's logits and write back the same config",
          "[hub][text_classifier]") {
  kiln::testing::TempDir dir;
  for (const std::string name : {"bert", "distil_bert", "roberta"}) {
    INFO(name);
    const std::string file = task_file(name + "_text_classifier.keras");
    Model model = kiln::load_keras_model(file);
    const kiln::hub::TextClassifier classifier = kiln::hub::TextClassifier::of(model);
    CHECK(classifier->num_classes() == 3);
    CHECK(error_against_stored(model, task_file(name + "_text_classifier.io.h5")) < 1e-5);
    // Written back: keras-hub's config value for value, and kiln reads its own file to the same logits.
    const std::string written = dir.file(name + ".keras");
    kiln::save_keras_model(model, written);
    const Config theirs = archive_config(file), ours = archive_config(written);
    CHECK(ours.at("config") == theirs.at("config"));
    for (const char* key : {"module", "class_name", "registered_name"}) CHECK(ours.at(key) == theirs.at(key));
    Model again = kiln::load_keras_model(written);
    CHECK(error_against_stored(again, task_file(name + "_text_classifier.io.h5")) < 1e-5);
  }
}

TEST_CASE("a BERT TextClassifier fine-tunes with fit on labelled text", "[hub][text_classifier]") {
  // Lines of tinyshakespeare that ask (end in '?', label 1) or state (end in '.', label 0).
  std::istringstream lines(kiln::detail::read_whole_file((source_dir() / "data" / "tinyshakespeare.txt").string()));
  std::vector<std::string> asks, states;
  for (std::string line; std::getline(lines, line);) {
    if (line.size() < 12 || line.size() > 60) continue;
    if (line.back() == '?' && asks.size() < 300) asks.push_back(line);
    if (line.back() == '.' && states.size() < 300) states.push_back(line);
  }
  // Alternating, so that the held-out rows at the end are half of each.
  std::vector<std::string> texts;
  std::vector<double> labels;
  for (std::size_t i = 0; i < std::min(asks.size(), states.size()); ++i) {
    texts.insert(texts.end(), {asks[i], states[i]});
    labels.insert(labels.end(), {1.0, 0.0});
  }
  std::map<std::string, int> counts;
  REQUIRE(texts.size() == 600);
  // A WordPiece vocabulary of the texts' frequent words, and every letter as a word start and a "##" piece.
  kiln::hub::WordPieceOptions options;
  options.lowercase = true;
  options.strip_accents = true;
  const kiln::hub::WordPieceTokenizer splitter({"[UNK]"}, options);
  for (const std::string& text : texts)
    for (const std::string& word : splitter.pretokenize(text)) counts[word]++;
  std::vector<std::string> vocabulary = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 'a'; c <= 'z'; ++c) {
    vocabulary.push_back(std::string(1, c));
    vocabulary.push_back("##" + std::string(1, c));
  }
  for (const auto& [word, count] : counts)
    if (count >= 3 && std::find(vocabulary.begin(), vocabulary.end(), word) == vocabulary.end()) vocabulary.push_back(word);
  const kiln::hub::WordPieceTokenizer tokenizer(vocabulary, options);

  kiln::hub::Backbone bert("BertBackbone", {{"vocabulary_size", static_cast<std::int64_t>(vocabulary.size())},
                                            {"num_layers", 2},
                                            {"num_heads", 2},
                                            {"hidden_dim", 32},
                                            {"intermediate_dim", 64},
                                            {"max_sequence_length", 24}});
  bert.initialize_weights(5);
  kiln::hub::TextClassifier classifier(bert, 2);
  CHECK(classifier->class_name() == "BertTextClassifier");
  classifier->initialize_weights(5);
  const kiln::hub::PackedText packed = kiln::hub::pack_text(tokenizer, texts, 24);
  // [CLS] first, [SEP] after the text, [PAD] after that.
  CHECK(packed.token_ids.flat(0) == 2);
  Array y(Shape{static_cast<std::int64_t>(labels.size())});
  for (std::size_t i = 0; i < labels.size(); ++i) y.set_flat(i, labels[i]);
  // Rows 0..399 train, 400..499 validate (early stopping), 500..599 are held out; asks and states alike in each.
  auto rows = [](const Array& a, std::int64_t from, std::int64_t to) { return a.rows(from, to - from); };
  std::vector<Array> train, validation, held;
  for (const Array& input : packed.inputs()) {
    train.push_back(rows(input, 0, 400));
    validation.push_back(rows(input, 400, 500));
    held.push_back(rows(input, 500, 600));
  }
  classifier.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.001}}),
                     kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                    {"config", Config{{"from_logits", true}}}}));
  const double before = classifier.evaluate(held, {rows(y, 500, 600)}).at("loss");
  // As a Keras user fine-tunes: a small model on 400 rows overfits after a while (its held-out loss climbs again
  // while its accuracy holds), so training stops when the validation loss has not improved for 8 epochs and
  // keeps the best epoch's weights.
  kiln::EarlyStopping::Options stop;
  stop.patience = 8;
  stop.restore_best_weights = true;
  const kiln::History history =
      classifier.fit(train, {rows(y, 0, 400)},
                     kiln::FitOptions()
                         .epochs(60)
                         .batch_size(32)
                         .verbose(0)
                         .shuffle(true)
                         .validation_data(validation, {rows(y, 400, 500)})
                         .callback(std::make_shared<kiln::EarlyStopping>(stop)));
  const double after = classifier.evaluate(held, {rows(y, 500, 600)}).at("loss");
  const Array logits = classifier.predict(held).at(0);
  int right = 0;
  for (std::int64_t i = 0; i < 100; ++i) {
    const bool asks_predicted = logits.flat(static_cast<std::size_t>(2 * i + 1)) > logits.flat(static_cast<std::size_t>(2 * i));
    right += asks_predicted == (y.flat(static_cast<std::size_t>(500 + i)) == 1.0);
  }
  const std::vector<double>& val_loss = history["val_loss"];
  INFO("held-out loss " << before << " -> " << after << ", accuracy " << right << "/100 after " << val_loss.size()
                        << " epochs, best validation loss " << *std::min_element(val_loss.begin(), val_loss.end()));
  // Measured: loss 0.693 -> 0.37, 88 of 100 right after 13 epochs; over initial weights seeded 1..12, 0.22 to 0.50
  // and 85 to 92 right. (Without early stopping, 60 epochs overfit: the held-out loss climbed back to 0.64 in the
  // sanitizer's build, whose rounding takes another path through training, while 89 of 100 stayed right.)
  CHECK(after < before - 0.15);
  CHECK(right >= 80);
}

TEST_CASE("TextClassifier refuses what keras-hub refuses", "[hub][text_classifier]") {
  const Config decoder = {{"vocabulary_size", 20}, {"num_layers", 1}, {"num_query_heads", 2}, {"num_key_value_heads", 1},
                          {"hidden_dim", 8}, {"intermediate_dim", 16}};
  CHECK_THROWS_WITH(kiln::hub::TextClassifier(kiln::hub::Backbone("LlamaBackbone", decoder), 2),
                    Catch::Contains("LlamaBackbone") && Catch::Contains("TextClassifier"));
  const kiln::hub::Backbone bert("BertBackbone", {{"vocabulary_size", 20}, {"num_layers", 1}, {"num_heads", 2},
                                                 {"hidden_dim", 8}, {"intermediate_dim", 16}});
  CHECK_THROWS_AS(kiln::hub::TextClassifier(bert, 0), kiln::ConfigError);
  kiln::hub::TextClassifierOptions bad;
  bad.dropout = 1.5;
  CHECK_THROWS_WITH(kiln::hub::TextClassifier(bert, 2, bad), Catch::Contains("dropout"));
  const kiln::hub::WordPieceTokenizer tokenizer({"[UNK]", "a"});
  CHECK_THROWS_WITH(kiln::hub::pack_text(tokenizer, {"a"}, 8), Catch::Contains("start"));
  CHECK_THROWS_AS(kiln::hub::pack_text(tokenizer, {"a"}, 1, 0, 0, 0), kiln::ValueError);
}
