// keras-hub's byte-level BPE tokenizer (kiln/hub/tokenizers): token ids equal OpenAI's encodings as js-tiktoken
// computes them (tests/oracles/node, installed by scripts/install-test-oracles.sh) on the whole of
// data/tinyshakespeare.txt and on Unicode, whitespace and emoji strings; bad input is refused by byte offset.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/byte_pair_tokenizer.hpp>
#include <kiln/serialize/json.hpp>
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Config;
using kiln::hub::BytePairOptions;
using kiln::hub::BytePairTokenizer;

namespace {

fs::path source_dir() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

// The texts the encodings are compared on: the whole of tinyshakespeare, then strings of other scripts, emoji
// (with joiners and skin tones), accents composed and not, and every kind of whitespace run. (U+0085 and U+FEFF
// are left out: JavaScript's \s and Unicode's White_Space, which tiktoken and PCRE2 follow, disagree on them.)
std::vector<std::string> texts() {
  return {kiln::detail::read_whole_file((source_dir() / "data" / "tinyshakespeare.txt").string()),
          "Hello world, 12345 it's  done. I'M, YOU'RE, they'll'd",
          "caf\u00e9 cafe\u0301 \u2014 na\u00efve \U0001F600\U0001F680 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F44D\U0001F3FD",
          "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e\u306e\u6587 \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947",
          "  leading and trailing  \n\n\ttabs\r\n\u00a0nbsp\u2009thin\u3000ideographic   ",
          "1234567890 3.14159 -42 +7e10 \u0661\u0662\u0663 \u00bd \u2460",
          "x = {'a': [1, 2]}; // code?! <tag attr=\"v\">&amp;</tag>\n    indented\n",
          "", " ", "\n", "a"};
}

struct Reference {
  std::string folder;
  std::vector<std::vector<std::int64_t>> ids;
};

// Runs the js-tiktoken reference for `encoding` on texts(), into `dir`.
Reference reference(const std::string& encoding, const kiln::testing::TempDir& dir) {
  const fs::path oracles = source_dir() / "tests" / "oracles" / "node";
  INFO("the reference needs Node.js and js-tiktoken: run scripts/install-test-oracles.sh (make test does)");
  REQUIRE(fs::exists(oracles / "node_modules" / "js-tiktoken" / "package.json"));
  Config list = Config::list();
  for (const std::string& text : texts()) list.push_back(Config(text));
  const std::string texts_path = dir.file("texts.json"), out = dir.file(encoding);
  std::ofstream(texts_path, std::ios::binary) << kiln::to_json(Config{{"texts", list}}, 0);
  const std::string command = "cd '" + oracles.string() + "' && node byte_pair_reference.mjs " + encoding + " '" +
                              texts_path + "' '" + out + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  Reference result{out, {}};
  const Config ids = kiln::parse_json(kiln::detail::read_whole_file(out + "/ids.json"));
  for (const Config& row : ids.as_list()) {
    std::vector<std::int64_t> values;
    for (const Config& id : row.as_list()) values.push_back(id.as_int());
    result.ids.push_back(std::move(values));
  }
  return result;
}

}  // namespace

TEST_CASE("byte-level BPE gives OpenAI's token ids for GPT-2 and Llama 3's pattern, and reads them back",
          "[hub][tokenizer]") {
  kiln::testing::TempDir dir;
  for (const auto& [encoding, pattern] : {std::pair<std::string, std::string>{"gpt2", "gpt2"}, {"cl100k_base", "llama3"}}) {
    INFO(encoding);
    const Reference expected = reference(encoding, dir);
    BytePairOptions options;
    options.split_pattern = pattern;
    const BytePairTokenizer tokenizer =
        BytePairTokenizer::from_files(expected.folder + "/vocabulary.json", expected.folder + "/merges.txt", options);
    const std::vector<std::string> cases = texts();
    REQUIRE(expected.ids.size() == cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      INFO("text " << i << ": " << cases[i].substr(0, 60));
      const std::vector<std::int64_t> ids = tokenizer.tokenize(cases[i]);
      CHECK(ids.size() == expected.ids[i].size());
      CHECK(ids == expected.ids[i]);
      CHECK(tokenizer.detokenize(ids) == cases[i]);
    }
    if (encoding == "gpt2") {
      CHECK(cases[0].size() > 1000000);          // the whole of tinyshakespeare
      CHECK(expected.ids[0].size() > 300000);    // 338,025 tokens
      CHECK(tokenizer.vocabulary_size() == 50257);
      CHECK(tokenizer.token_to_id("Hello") == 15496);
      CHECK(tokenizer.id_to_token(995) == "\u0120world");  // "Ġworld": a space is Ġ in GPT-2's byte characters
    }
  }
}

TEST_CASE("special tokens are kept whole, a prefix space is added when asked", "[hub][tokenizer]") {
  // A tiny byte-level vocabulary: the 256 byte characters, "he", "hel", "hell", "hello", and a special token.
  std::vector<std::pair<std::string, std::int64_t>> vocabulary;
  for (std::size_t b = 0; b < 256; ++b) vocabulary.emplace_back(kiln::hub::byte_characters()[b], static_cast<std::int64_t>(b));
  const std::string space = kiln::hub::byte_characters()[' '];
  vocabulary.insert(vocabulary.end(), {{"he", 256}, {"hel", 257}, {"hell", 258}, {"hello", 259}, {space + "hello", 260},
                                       {"<|endoftext|>", 261}});
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"}, {space, "hello"}};
  BytePairOptions options;
  options.unsplittable_tokens = {"<|endoftext|>"};
  const BytePairTokenizer tokenizer(vocabulary, merges, options);
  CHECK(tokenizer.tokenize("hello hello<|endoftext|>hello") == std::vector<std::int64_t>{259, 260, 261, 259});
  CHECK(tokenizer.detokenize({259, 260, 261, 259}) == "hello hello<|endoftext|>hello");
  CHECK(tokenizer.tokenize("<|endoftext|>") == std::vector<std::int64_t>{261});
  options.add_prefix_space = true;
  const BytePairTokenizer prefixed(vocabulary, merges, options);
  CHECK(prefixed.tokenize("hello") == std::vector<std::int64_t>{260});
  CHECK(tokenizer.split("it's 12 cats!!") == std::vector<std::string>{"it", "'s", " 12", " cats", "!!"});
}

TEST_CASE("bad tokenizer input is refused with the file or the byte where it goes wrong", "[hub][tokenizer]") {
  std::vector<std::pair<std::string, std::int64_t>> vocabulary;
  for (std::size_t b = 0; b < 256; ++b) vocabulary.emplace_back(kiln::hub::byte_characters()[b], static_cast<std::int64_t>(b));
  const BytePairTokenizer tokenizer(vocabulary, {});
  // Invalid UTF-8: a lone continuation byte, a cut sequence, an overlong form, a surrogate.
  CHECK_THROWS_WITH(tokenizer.tokenize("ab\x80"), Catch::Contains("byte 2"));
  CHECK_THROWS_WITH(tokenizer.tokenize("abc\xe2\x82"), Catch::Contains("byte 3"));
  CHECK_THROWS_WITH(tokenizer.tokenize("\xc0\xaf"), Catch::Contains("byte 0"));
  CHECK_THROWS_WITH(tokenizer.tokenize("x\xed\xa0\x80"), Catch::Contains("byte 1"));
  CHECK_THROWS_AS(tokenizer.detokenize({5, 300}), kiln::ValueError);
  CHECK_THROWS_WITH(tokenizer.detokenize({5, 300}), Catch::Contains("300"));
  CHECK_THROWS_AS(tokenizer.token_to_id("nope"), kiln::ValueError);
  // Vocabulary files that do not parse.
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"{\"a\": 1,", "byte 8"},
           {"{\"a\": 1.5}", "not an integer"},
           {"{\"a\" 1}", "expected ':'"},
           {"[\"a\"]", "expected '{'"},
           {"{\"\\ud800\": 1}", "surrogate"},
           {"{\"a\": 1} x", "text after"},
           {"{\"a\x01\": 1}", "control character"}}) {
    INFO(text);
    CHECK_THROWS_WITH(BytePairTokenizer::from_text(text, "", {}, "v.json"), Catch::Contains(where) && Catch::Contains("v.json"));
  }
  // Merges that do not parse or name tokens the vocabulary lacks; ids given twice.
  CHECK_THROWS_WITH(BytePairTokenizer::from_text("{\"a\": 0, \"b\": 1}", "a b c\n", {}, "m"), Catch::Contains("line 1"));
  CHECK_THROWS_WITH(BytePairTokenizer::from_text("{\"a\": 0, \"b\": 1}", "#version: 0.2\na z\n", {}, "m"),
                    Catch::Contains("not in the vocabulary"));
  CHECK_THROWS_WITH(BytePairTokenizer::from_text("{\"a\": 0, \"b\": 0}", "", {}, "m"), Catch::Contains("both"));
  CHECK_THROWS_AS(BytePairTokenizer::from_files("/nonexistent/vocabulary.json", "/nonexistent/merges.txt"),
                  kiln::SerializationError);
  BytePairOptions bad_pattern;
  bad_pattern.split_pattern = "(unclosed";
  CHECK_THROWS_AS(BytePairTokenizer(vocabulary, {}, bad_pattern), kiln::ConfigError);
}
