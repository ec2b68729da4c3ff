// keras-hub's WordPiece (BERT, DistilBERT) and SentencePiece (Llama 2, Mistral, Gemma) tokenizers
// (kiln/hub/tokenizers): token ids equal the references' on the whole of data/tinyshakespeare.txt and on Unicode,
// whitespace and emoji strings (WordPiece: Hugging Face's tokenizers.js with a BERT tokenizer.json,
// tests/oracles/node/word_piece_reference.mjs; SentencePiece: Google's Python binding, Debian's
// python3-sentencepiece, tests/oracles/python/sentence_piece_reference.py; both installed by
// scripts/install-test-oracles.sh); keras-hub's own pre-tokenizing rules; bad input refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/sentence_piece_tokenizer.hpp>
#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>
#include <kiln/serialize/json.hpp>
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Config;
using kiln::hub::SentencePieceOptions;
using kiln::hub::SentencePieceTokenizer;
using kiln::hub::WordPieceOptions;
using kiln::hub::WordPieceTokenizer;

namespace {

fs::path source_dir() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

std::string shakespeare() {
  return kiln::detail::read_whole_file((source_dir() / "data" / "tinyshakespeare.txt").string());
}

void write_texts(const std::vector<std::string>& texts, const std::string& path) {
  Config list = Config::list();
  for (const std::string& text : texts) list.push_back(Config(text));
  std::ofstream(path, std::ios::binary) << kiln::to_json(Config{{"texts", list}}, 0);
}

std::vector<std::vector<std::int64_t>> id_rows(const Config& rows) {
  std::vector<std::vector<std::int64_t>> result;
  for (const Config& row : rows.as_list()) {
    std::vector<std::int64_t> values;
    for (const Config& id : row.as_list()) values.push_back(id.as_int());
    result.push_back(std::move(values));
  }
  return result;
}

Config read_json(const std::string& path) { return kiln::parse_json(kiln::detail::read_whole_file(path)); }

// WordPiece's texts: keras-hub's and tokenizers.js's BERT rules agree on these (see word_piece_reference.mjs).
std::vector<std::string> word_piece_texts() {
  return {shakespeare(),
          "Hello world, 12345 it's  done. I'M, YOU'RE, they'll'd -- (parenthesis) [brackets] {braces}",
          "Caf\u00e9 CAF\u00c9 cafe\u0301 na\u00efve \u00dcn\u00efc\u00f6d\u00e9 R\u00c9SUM\u00c9 \u00c5ngstr\u00f6m \u0393\u0395\u0399\u0386 \u03c3\u03bf\u03c5",
          "\u4e2d\u6587\u5b57\u7b26\u65e5\u672c\u8a9e\u306e\u6587 \ud55c\uad6d\uc5b4 \u041f\u0440\u0438\u0432\u0435\u0442, \u041c\u0418\u0420! \u0645\u0631\u062d\u0628\u0627",
          "emoji \U0001F600\U0001F680 \U0001F44D\U0001F3FD thumbs, X marks \uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff21\uff22\uff23",
          "\t tabs\n\nnew  lines\r\n spaces   \u00bf\u00a1qu\u00e9? \u00abquoted\u00bb \u201cdouble\u201d \u2018single\u2019",
          "x = {'a': [1, 2]}; // code?! <tag attr=\"v\">&amp;</tag> 3.14159 -42 +7e10",
          std::string(6, ' ') + [] {
            std::string long_word;
            for (int i = 0; i < 6; ++i) long_word += "supercalifragilistic";  // 120 bytes: past 100, unknown
            return long_word;
          }(),
          "", " ", "a", "Unaffable"};
}

WordPieceOptions uncased() {
  WordPieceOptions options;
  options.lowercase = true;
  options.strip_accents = true;
  return options;
}

}  // namespace

TEST_CASE("WordPiece gives Hugging Face's BERT token ids, cased and uncased, and reads them back", "[hub][tokenizer]") {
  kiln::testing::TempDir dir;
  const fs::path oracles = source_dir() / "tests" / "oracles" / "node";
  INFO("the reference needs Node.js and @huggingface/tokenizers: run scripts/install-test-oracles.sh (make test does)");
  REQUIRE(fs::exists(oracles / "node_modules" / "@huggingface" / "tokenizers" / "package.json"));
  const std::vector<std::string> texts = word_piece_texts();
  const std::string texts_path = dir.file("texts.json"), out = dir.file("word_piece");
  write_texts(texts, texts_path);
  const std::string command =
      "cd '" + oracles.string() + "' && node word_piece_reference.mjs '" + texts_path + "' '" + out + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  for (const bool lower : {false, true}) {
    INFO((lower ? "uncased" : "cased"));
    const WordPieceTokenizer tokenizer =
        WordPieceTokenizer::from_file(out + "/vocabulary.txt", lower ? uncased() : WordPieceOptions{});
    const Config expected = read_json(out + (lower ? "/uncased.json" : "/cased.json"));
    const auto ids = id_rows(expected.at("ids"));
    REQUIRE(ids.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      INFO("text " << i << ": " << texts[i].substr(0, 60));
      const std::vector<std::int64_t> got = tokenizer.tokenize(texts[i]);
      CHECK(got.size() == ids[i].size());
      CHECK(got == ids[i]);
      CHECK(tokenizer.detokenize(got) == expected.at("decoded").as_list()[i].as_string());
    }
    CHECK(ids[0].size() > 250000);  // the whole of tinyshakespeare
    // Some words are unknown (emoji, 'X' when cased), the long one among them; most are cut into pieces.
    const std::int64_t unknown = tokenizer.token_to_id("[UNK]");
    CHECK(std::count(ids[4].begin(), ids[4].end(), unknown) >= 2);
    CHECK(ids[7] == std::vector<std::int64_t>{unknown});
  }
  // Written back, the vocabulary is the same file.
  const WordPieceTokenizer tokenizer = WordPieceTokenizer::from_file(out + "/vocabulary.txt");
  const std::string saved = dir.file("saved");
  fs::create_directories(saved);
  tokenizer.save_assets(saved);
  CHECK(kiln::detail::read_whole_file(saved + "/vocabulary.txt") == kiln::detail::read_whole_file(out + "/vocabulary.txt"));
}

TEST_CASE("WordPiece pre-tokenizes as keras-hub does: splits, folds, strips, keeps special tokens whole",
          "[hub][tokenizer]") {
  const std::vector<std::string> vocabulary = {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello",
                                               "!", ",", "world", "strasse", "ss", "stra", "##sse", "\u00df"};
  const WordPieceTokenizer cased(vocabulary);
  const WordPieceTokenizer lower(vocabulary, uncased());
  using Words = std::vector<std::string>;
  CHECK(lower.pretokenize("Hello, WORLD!") == Words{"hello", ",", "world", "!"});
  CHECK(cased.pretokenize("Hello, WORLD!") == Words{"Hello", ",", "WORLD", "!"});
  CHECK(lower.pieces("unaffable!") == Words{"un", "##aff", "##able", "!"});
  CHECK(lower.detokenize(lower.tokenize("unaffable, hello!")) == "unaffable , hello !");
  // A word that cannot be cut whole is the oov token, not a partial cut.
  CHECK(lower.pieces("unaffablez") == Words{"[UNK]"});
  // Case folding is NFKC_Casefold (tf_text.case_fold_utf8): ß folds to ss, fullwidth letters to ASCII.
  CHECK(lower.pretokenize("Stra\u00dfe \uff21\uff22") == Words{"strasse", "ab"});
  CHECK(cased.pieces("\u00df") == Words{"\u00df"});
  // Accents stripped only with strip_accents; CJK ideographs split one by one; format and control characters
  // split like spaces (keras-hub's \p{Cc} and \p{Cf}); only ASCII spaces are RE2's \s, so a no-break space stays
  // inside its word.
  CHECK(lower.pretokenize("Caf\u00e9") == Words{"cafe"});
  CHECK(cased.pretokenize("Caf\u00e9") == Words{"Caf\u00e9"});
  CHECK(cased.pretokenize("\u4e2d\u6587x") == Words{"\u4e2d", "\u6587", "x"});
  CHECK(cased.pretokenize("a\u200bb\x01" "c") == Words{"a", "b", "c"});
  CHECK(cased.pretokenize("a\u00a0b") == Words{"a\u00a0b"});
  // Special tokens: split like any text unless special_tokens_in_strings, then kept whole and never folded.
  CHECK(lower.pretokenize("[CLS] hi [SEP]") == Words{"[", "cls", "]", "hi", "[", "sep", "]"});
  WordPieceOptions special = uncased();
  special.special_tokens = {"[CLS]", "[SEP]", "[MASK]"};
  special.special_tokens_in_strings = true;
  const WordPieceTokenizer with_special(vocabulary, special);
  CHECK(with_special.pretokenize("[CLS]Hello [MASK]![SEP]") == Words{"[CLS]", "hello", "[MASK]", "!", "[SEP]"});
  CHECK(with_special.tokenize("[CLS] hello [SEP]") == std::vector<std::int64_t>{1, 7, 2});
  // split = false: the text is one word.
  WordPieceOptions whole;
  whole.split = false;
  CHECK(WordPieceTokenizer(vocabulary, whole).pieces("hello!") == Words{"[UNK]"});
}

TEST_CASE("bad WordPiece input is refused with the file or the byte where it goes wrong", "[hub][tokenizer]") {
  kiln::testing::TempDir dir;
  CHECK_THROWS_WITH(WordPieceTokenizer({"a", "b"}), Catch::Contains("[UNK]") && Catch::Contains("not in the vocabulary"));
  WordPieceOptions special;
  special.special_tokens = {"[CLS]"};
  CHECK_THROWS_WITH(WordPieceTokenizer({"[UNK]"}, special), Catch::Contains("[CLS]"));
  const WordPieceTokenizer tokenizer({"[UNK]", "a"});
  CHECK_THROWS_WITH(tokenizer.tokenize("ab\x80"), Catch::Contains("byte 2"));
  CHECK_THROWS_WITH(tokenizer.tokenize("x\xed\xa0\x80"), Catch::Contains("byte 1"));
  CHECK_THROWS_AS(tokenizer.detokenize({0, 2}), kiln::ValueError);
  CHECK_THROWS_WITH(tokenizer.id_to_token(-1), Catch::Contains("-1"));
  CHECK_THROWS_AS(tokenizer.token_to_id("zz"), kiln::ValueError);
  const std::string bad = dir.file("vocabulary.txt");
  std::ofstream(bad, std::ios::binary) << "[UNK]\nok\nb\xff" "d\n";
  CHECK_THROWS_WITH(WordPieceTokenizer::from_file(bad), Catch::Contains(bad) && Catch::Contains("byte 10"));
  CHECK_THROWS_AS(WordPieceTokenizer::from_file(dir.file("missing.txt")), kiln::SerializationError);
  // Lines are right-stripped as keras-hub reads them; a last line without a newline counts.
  const std::string spaced = dir.file("spaced.txt");
  std::ofstream(spaced, std::ios::binary) << "[UNK]  \r\nhello\t\nworld";
  CHECK(WordPieceTokenizer::from_file(spaced).vocabulary() == std::vector<std::string>{"[UNK]", "hello", "world"});
}

TEST_CASE("SentencePiece gives the sentencepiece library's ids through keras-hub's tokenizer, and reads them back",
          "[hub][tokenizer]") {
  kiln::testing::TempDir dir;
  const fs::path script = source_dir() / "tests" / "oracles" / "python" / "sentence_piece_reference.py";
  INFO("the reference needs Debian's python3-sentencepiece: run scripts/install-test-oracles.sh (make test does)");
  REQUIRE(std::system("/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null") == 0);
  const std::vector<std::string> texts = {
      shakespeare(),
      "Hello world, 12345 it's  done. I'M, YOU'RE",
      "caf\u00e9 cafe\u0301 \u2014 na\u00efve \U0001F600\U0001F680 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F44D\U0001F3FD",
      "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e\u306e\u6587 \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
      "  leading and trailing  \n\n\ttabs\r\n\u00a0nbsp\u2009thin\u3000ideographic   \uff26\uff55\uff4c\uff4c",
      "", " ", "a"};
  const std::string texts_path = dir.file("texts.json"), out = dir.file("sentence_piece");
  write_texts(texts, texts_path);
  const std::string command = "/usr/bin/python3 '" + script.string() + "' '" + texts_path + "' '" + out + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  for (const std::string name : {"llama", "unigram"}) {
    INFO(name);
    const SentencePieceTokenizer tokenizer = SentencePieceTokenizer::from_file(out + "/" + name + ".spm");
    SentencePieceOptions both;
    both.add_bos = both.add_eos = true;
    const SentencePieceTokenizer wrapped = SentencePieceTokenizer::from_file(out + "/" + name + ".spm", both);
    const Config expected = read_json(out + "/" + name + ".json");
    const auto ids = id_rows(expected.at("ids"));
    const auto bos_eos = id_rows(expected.at("bos_eos"));
    REQUIRE(ids.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      INFO("text " << i << ": " << texts[i].substr(0, 60));
      const std::vector<std::int64_t> got = tokenizer.tokenize(texts[i]);
      CHECK(got == ids[i]);
      CHECK(wrapped.tokenize(texts[i]) == bos_eos[i]);
      CHECK(tokenizer.detokenize(got) == expected.at("decoded").as_list()[i].as_string());
      if (i > 0) {
        std::vector<std::string> pieces;
        for (const Config& piece : expected.at("pieces").as_list()[i].as_list()) pieces.push_back(piece.as_string());
        CHECK(tokenizer.pieces(texts[i]) == pieces);
      }
    }
    CHECK(ids[0].size() > 300000);
    CHECK(tokenizer.vocabulary_size() == 1000);
    if (name == "llama") {
      // Llama's layout: <unk> 0, <s> 1, </s> 2; bytes fall back to <0xNN> pieces; the text comes back whole.
      CHECK(tokenizer.unk_id() == 0);
      CHECK(tokenizer.bos_id() == 1);
      CHECK(tokenizer.eos_id() == 2);
      CHECK(tokenizer.id_to_token(1) == "<s>");
      CHECK(tokenizer.token_to_id("<0xF0>") > 2);
      CHECK(tokenizer.detokenize(tokenizer.tokenize(texts[2])) == texts[2]);
    }
    // keras-hub's token_to_id: a piece the model lacks is the unknown id.
    CHECK(tokenizer.token_to_id("no such piece") == tokenizer.unk_id());
    const std::string saved = dir.file("saved_" + name);
    fs::create_directories(saved);
    tokenizer.save_assets(saved);
    CHECK(kiln::detail::read_whole_file(saved + "/vocabulary.spm") ==
          kiln::detail::read_whole_file(out + "/" + name + ".spm"));
  }
}

TEST_CASE("bad SentencePiece input is refused by name", "[hub][tokenizer]") {
  kiln::testing::TempDir dir;
  const std::string garbage = dir.file("vocabulary.spm");
  std::ofstream(garbage, std::ios::binary) << "this is not a model proto \x01\x02\x03";
  CHECK_THROWS_WITH(SentencePieceTokenizer::from_file(garbage), Catch::Contains(garbage) && Catch::Contains("not a SentencePiece model"));
  CHECK_THROWS_AS(SentencePieceTokenizer(std::string()), kiln::ValueError);
  CHECK_THROWS_AS(SentencePieceTokenizer::from_file(dir.file("missing.spm")), kiln::SerializationError);
}
