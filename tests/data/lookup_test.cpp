// StringLookup (Keras's index assignment and adapt order) and read_csv's text columns.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/data/data.hpp>
#include <kiln/data/lookup.hpp>
#include <kiln/models/loading.hpp>
#include "support/temp_dir.hpp"

using namespace kiln;

namespace {

std::vector<double> values_of(const Array& array) {
  std::vector<double> values;
  for (std::size_t i = 0; i < array.size(); ++i) values.push_back(array.flat(i));
  return values;
}

}  // namespace

TEST_CASE("StringLookup learns Keras's vocabulary order and indices", "[train][lookup]") {
  StringLookup lookup;
  CHECK_THROWS_AS(lookup({"a"}), ValueError);  // nothing learned yet
  lookup.adapt({"b", "a", "c", "a", "b", "a", "d", "c", "[UNK]"});
  // a (3), then b and c (2 each: reverse lexicographic order, as NumPy's reversed lexsort), then d.
  CHECK(lookup.get_vocabulary() == std::vector<std::string>{"[UNK]", "a", "c", "b", "d"});
  CHECK(lookup.vocabulary_size() == 5);
  CHECK(values_of(lookup({"a", "b", "zebra", "d"})) == std::vector<double>{1, 3, 0, 4});
  CHECK(lookup.invert(lookup({"c", "zebra"})) == std::vector<std::string>{"c", "[UNK]"});
  CHECK_THROWS_AS(lookup.invert(Array::from_vector(std::vector<double>{5}, {1})), ValueError);
  CHECK_THROWS_AS(lookup.invert(Array::from_vector(std::vector<double>{1.5}, {1})), ValueError);

  StringLookup::Options masked;
  masked.mask_token = "";
  StringLookup with_mask({"x", "y"}, masked);
  CHECK(values_of(with_mask({"", "y", "q"})) == std::vector<double>{0, 3, 1});

  StringLookup::Options strict;
  strict.num_oov_indices = 0;
  StringLookup closed({"x", "y"}, strict);
  CHECK(values_of(closed({"y", "x"})) == std::vector<double>{1, 0});
  CHECK_THROWS_WITH(closed({"x", "q"}), Catch::Contains("'q' (value 1)"));

  StringLookup::Options small;
  small.max_tokens = 3;
  StringLookup capped(small);
  capped.adapt({"a", "a", "b", "b", "b", "c"});
  CHECK(capped.get_vocabulary() == std::vector<std::string>{"[UNK]", "b", "a"});

  // Another lookup's get_vocabulary(), special tokens first, is taken without them, as Keras does.
  CHECK(StringLookup(lookup.get_vocabulary(), StringLookup::Options()).get_vocabulary() == lookup.get_vocabulary());
  StringLookup::Options one;
  one.max_tokens = 1;
  CHECK_THROWS_AS(StringLookup(one), ConfigError);

  StringLookup::Options hashed;
  hashed.num_oov_indices = 2;
  CHECK_THROWS_AS(StringLookup(hashed), ConfigError);
  CHECK_THROWS_AS(StringLookup({"a", "a"}, StringLookup::Options()), ValueError);
}

TEST_CASE("StringLookup configs are Keras's and travel with a saved model", "[train][lookup][saving]") {
  StringLookup lookup({"setosa", "versicolor", "virginica"}, StringLookup::Options());
  const Config config = lookup.get_config();
  CHECK(config.get_int("num_oov_indices") == 1);
  CHECK(config.get_string("output_mode") == "int");
  CHECK(StringLookup::from_config(config).get_vocabulary() == lookup.get_vocabulary());
  // A config as Keras writes it.
  const Config keras = {{"name", "string_lookup"}, {"max_tokens", Config()}, {"num_oov_indices", 1},
                        {"oov_token", "[UNK]"},    {"mask_token", Config()},  {"output_mode", "int"},
                        {"invert", false},         {"vocabulary", Config::list({"cat", "dog"})}};
  CHECK(StringLookup::from_config(keras).get_vocabulary() == std::vector<std::string>{"[UNK]", "cat", "dog"});
  CHECK_THROWS_AS(StringLookup::from_config(keras.with("output_mode", "one_hot")), ConfigError);

  testing::TempDir dir;
  const Tensor x = Input({Shape::unknown, 4});
  Model model(x, Dense(4, "softmax")(x));
  lookup.attach(model, "species");
  model.save(dir.file("iris.kiln"));
  const StringLookup again = StringLookup::of(load_model(dir.file("iris.kiln")), "species");
  CHECK(again.get_vocabulary() == lookup.get_vocabulary());
  CHECK_THROWS_AS(StringLookup::of(model, "colour"), ValueError);
}

TEST_CASE("read_csv returns text columns as strings, apart from the numbers", "[train][lookup][csv]") {
  testing::TempDir dir;
  std::ofstream(dir.file("iris.csv")) << "sepal,petal,species,note\n5.1,1.4,setosa,\"small, pale\"\n"
                                         "7.0,4.7,versicolor,x\n6.3,6.0,virginica,y\n";
  CsvOptions options;
  options.text_names = {"species", "note"};
  const CsvTable table = read_csv(dir.file("iris.csv"), options);
  CHECK(table.column_names == std::vector<std::string>{"sepal", "petal"});
  CHECK(table.values.shape() == Shape({3, 2}));
  CHECK(table.text_names == std::vector<std::string>{"species", "note"});
  CHECK(table.text[0] == std::vector<std::string>{"setosa", "versicolor", "virginica"});
  CHECK(table.text[1][0] == "small, pale");

  StringLookup species;
  species.adapt(table.text[0]);
  CHECK(species(table.text[0]).shape() == Shape({3}));

  // A headerless file whose text column is given by index.
  std::ofstream(dir.file("plain.csv")) << "5.1,1.4,setosa\n7.0,4.7,versicolor\n";
  CsvOptions by_index;
  by_index.text_indices = {2};
  const CsvTable plain = read_csv(dir.file("plain.csv"), by_index);
  CHECK(plain.values.shape() == Shape({2, 2}));
  CHECK(plain.text[0] == std::vector<std::string>{"setosa", "versicolor"});

  // Without text_names the text is refused, naming the line and column.
  CHECK_THROWS_WITH(read_csv(dir.file("iris.csv")), Catch::Contains("iris.csv:2") && Catch::Contains("species"));
  CsvOptions both = options;
  both.label_names = {"species"};
  CHECK_THROWS_AS(read_csv(dir.file("iris.csv"), both), ConfigError);
  CsvOptions chosen;
  chosen.column_names = {"sepal", "species"};
  chosen.text_names = {"species"};
  CHECK_THROWS_AS(read_csv(dir.file("iris.csv"), chosen), ConfigError);
}

TEST_CASE("IntegerLookup maps integer codes to consecutive indices, as Keras's", "[train][lookup]") {
  IntegerLookup codes;
  // 42 three times, 7 and 17 twice each (ties: the larger first), 3 once; -1 is the OOV token, left out.
  codes.adapt(Array::from_vector(std::vector<double>{42, 7, 17, 42, 3, 7, 17, 42, -1}, {9}));
  CHECK(codes.get_vocabulary() == std::vector<std::int64_t>{-1, 42, 17, 7, 3});
  const Array labels = Array::from_vector(std::vector<double>{3, 42, 99, 7, 17, 42}, {2, 3});
  const Array indices = codes(labels);
  CHECK(indices.shape() == Shape({2, 3}));
  CHECK(values_of(indices) == std::vector<double>{4, 1, 0, 3, 2, 1});
  CHECK(values_of(codes.invert(indices)) == std::vector<double>{3, 42, -1, 7, 17, 42});
  CHECK_THROWS_AS(codes(Array::from_vector(std::vector<double>{1.5}, {1})), ValueError);
  CHECK(IntegerLookup::from_config(codes.get_config()).get_vocabulary() == codes.get_vocabulary());
  CHECK(IntegerLookup(codes.get_vocabulary(), IntegerLookup::Options()).get_vocabulary() == codes.get_vocabulary());

  IntegerLookup::Options masked;
  masked.mask_token = 0;
  masked.num_oov_indices = 0;
  const IntegerLookup strict({5, 6}, masked);
  CHECK(values_of(strict(Array::from_vector(std::vector<double>{0, 6, 5}, {3}))) == std::vector<double>{0, 2, 1});
  CHECK_THROWS_WITH(strict(Array::from_vector(std::vector<double>{9}, {1})), Catch::Contains("9 (value 0)"));

  testing::TempDir dir;
  const Tensor x = Input({Shape::unknown, 2});
  Model model(x, Dense(5, "softmax")(x));
  codes.attach(model, "codes");
  model.save(dir.file("codes.kiln"));
  CHECK(IntegerLookup::of(load_model(dir.file("codes.kiln")), "codes").get_vocabulary() == codes.get_vocabulary());
}
