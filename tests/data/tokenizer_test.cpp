#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>
#include "support/temp_dir.hpp"

TEST_CASE("CharacterTokenizer: sorted characters as ids, as nanoGPT encodes text", "[train][tokenizer]") {
  const kiln::CharacterTokenizer tokenizer = kiln::CharacterTokenizer::from_text("hello world\n");
  // sorted(set(text)): '\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'
  CHECK(tokenizer.vocabulary_size() == 9);
  CHECK(tokenizer.encode("hold") == std::vector<std::int64_t>{4, 6, 5, 2});
  CHECK(tokenizer.decode({4, 3, 5, 5, 6, 0}) == "hello\n");
  CHECK(tokenizer.get_config() == kiln::Config{{"vocabulary", "\n dehlorw"}});
  CHECK(kiln::CharacterTokenizer::from_config(tokenizer.get_config()).encode("world") == tokenizer.encode("world"));
  // Characters beyond ASCII are one id each.
  const kiln::CharacterTokenizer accents = kiln::CharacterTokenizer::from_text("café ☕");
  CHECK(accents.vocabulary_size() == 6);
  CHECK(accents.decode(accents.encode("☕ é")) == "☕ é");
}

TEST_CASE("CharacterTokenizer: unknown characters, bad ids and bad vocabularies are refused",
          "[train][tokenizer][errors]") {
  const kiln::CharacterTokenizer tokenizer("abc");
  CHECK_THROWS_WITH(tokenizer.encode("abx"), Catch::Contains("character 2, 'x'"));
  CHECK_THROWS_WITH(tokenizer.decode({0, 3}), Catch::Contains("outside the vocabulary [0, 3)"));
  CHECK_THROWS_WITH(kiln::CharacterTokenizer("aba"), Catch::Contains("twice"));
  CHECK_THROWS_AS(kiln::CharacterTokenizer(""), kiln::ValueError);
  CHECK_THROWS_WITH(tokenizer.encode(std::string("a\xff")), Catch::Contains("not UTF-8 at byte 1"));
  CHECK_THROWS_AS(kiln::CharacterTokenizer::from_config(kiln::Config{{"vocab", "abc"}}), kiln::ConfigError);
}

TEST_CASE("CharacterTokenizer: attached to a model, it saves and loads with it", "[train][tokenizer][saving]") {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 4});
  kiln::Model model(x, kiln::Dense(2)(x));
  CHECK_THROWS_WITH(kiln::CharacterTokenizer::of(model), Catch::Contains("no tokenizer"));
  kiln::CharacterTokenizer::from_text("to be or not").attach(model);
  kiln::testing::TempDir dir;
  model.save(dir.file("m.kiln"));
  const kiln::Model loaded = kiln::load_model(dir.file("m.kiln"));
  CHECK(kiln::CharacterTokenizer::of(loaded).encode("not to be") ==
        kiln::CharacterTokenizer::from_text("to be or not").encode("not to be"));
}
