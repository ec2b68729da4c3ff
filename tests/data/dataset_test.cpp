// Dataset: sources, steps, determinism with and without prefetch, errors that name the element, and fit,
// evaluate and predict fed by a dataset agreeing with the same data given as arrays.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/models/model.hpp>
#include "support/temp_dir.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;

// Row r of x is (r, r + 0.5), y is 2r: easy to trace through shuffles and batches.
Dataset counting(std::int64_t rows) {
  Array x({rows, 2}, DType::float64), y({rows, 1}, DType::float64);
  for (std::int64_t r = 0; r < rows; ++r) {
    x.set_flat(static_cast<std::size_t>(2 * r), static_cast<double>(r));
    x.set_flat(static_cast<std::size_t>(2 * r + 1), static_cast<double>(r) + 0.5);
    y.set_flat(static_cast<std::size_t>(r), 2.0 * static_cast<double>(r));
  }
  return Dataset::from_arrays(x, y);
}

// The first x value of every row of every element, in order.
std::vector<double> first_column(const Dataset& data, std::uint64_t iteration = 0) {
  std::vector<double> values;
  Dataset::Iterator it = data.iterate(iteration);
  Example example;
  while (it.next(example)) {
    const Array& x = example.x.at(0);
    const std::int64_t rows = x.shape().rank() == 2 ? x.shape()[0] : 1;
    const std::int64_t width = x.shape().dim(-1);
    for (std::int64_t r = 0; r < rows; ++r) values.push_back(x.flat(static_cast<std::size_t>(r * width)));
  }
  return values;
}

std::vector<double> range(int n) {
  std::vector<double> values;
  for (int i = 0; i < n; ++i) values.push_back(i);
  return values;
}

bool bitwise_equal(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  return true;
}

Model small_model() {
  const Tensor x = Input({None, 2}, DType::float64);
  Model model(x, Dense(1)(Dense(4, "tanh")(x)));
  std::vector<Array> weights = model.get_weights();
  for (Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, std::cos(static_cast<double>(i + 1)) / 3);
  model.set_weights(weights);
  model.compile(create_optimizer("sgd", {{"learning_rate", 0.001}}), "mse");
  return model;
}

}  // namespace

TEST_CASE("Dataset steps: batch, drop_remainder, take, repeat, map and their cardinality", "[train][dataset]") {
  const Dataset rows = counting(10);
  CHECK(rows.cardinality() == 10);
  CHECK_FALSE(rows.batched());
  CHECK(first_column(rows) == range(10));

  const Dataset batches = rows.batch(4);
  CHECK(batches.batched());
  CHECK(batches.cardinality() == 3);
  Dataset::Iterator it = batches.iterate();
  Example batch;
  std::vector<std::int64_t> sizes;
  while (it.next(batch)) sizes.push_back(batch.x[0].shape()[0]);
  CHECK(sizes == std::vector<std::int64_t>{4, 4, 2});
  CHECK(batch.y[0].shape() == Shape({2, 1}));
  CHECK(rows.batch(4, /*drop_remainder=*/true).cardinality() == 2);
  CHECK(first_column(rows.batch(4, true)) == range(8));

  CHECK(rows.take(3).cardinality() == 3);
  CHECK(first_column(rows.take(3)) == range(3));
  CHECK(rows.repeat(2).cardinality() == 20);
  CHECK(rows.repeat().cardinality() == Dataset::infinite);
  CHECK(rows.repeat().take(25).cardinality() == 25);
  CHECK(first_column(rows.repeat(2)).size() == 20);
  CHECK(rows.repeat(0).cardinality() == 0);
  CHECK(first_column(rows.repeat(0)).empty());

  const Dataset doubled = rows.map([](Example& example) {
    for (std::size_t i = 0; i < example.x[0].size(); ++i) example.x[0].set_flat(i, 2 * example.x[0].flat(i));
  });
  CHECK(first_column(doubled.take(3)) == std::vector<double>{0, 2, 4});
  CHECK_THROWS_AS(rows.batch(0), ValueError);
  CHECK_THROWS_AS(rows.shuffle(0), ValueError);
  CHECK_THROWS_AS(Dataset::from_arrays({Array({3, 2})}, {Array({4, 1})}), ValueError);
}

TEST_CASE("Dataset.shuffle: a permutation, the same for a seed and iteration, another for the next iteration",
          "[train][dataset]") {
  const Dataset rows = counting(50);
  const std::vector<double> first = first_column(rows.shuffle(50, 7));
  const std::vector<double> all = range(50);
  CHECK(std::multiset<double>(first.begin(), first.end()) == std::multiset<double>(all.begin(), all.end()));
  CHECK(first != range(50));
  CHECK(first_column(rows.shuffle(50, 7)) == first);
  CHECK(first_column(rows.shuffle(50, 7), 1) != first);
  CHECK(first_column(rows.shuffle(50, 8)) != first);
  // A small buffer only moves rows locally: row r comes out no earlier than position r - buffer + 1.
  const std::vector<double> local = first_column(rows.shuffle(4, 1));
  for (std::size_t position = 0; position < local.size(); ++position) CHECK(local[position] <= position + 3);
  // Prefetching changes nothing.
  CHECK(first_column(rows.shuffle(10, 3).batch(7).prefetch(3)) == first_column(rows.shuffle(10, 3).batch(7)));
}

TEST_CASE("Dataset errors name the element and keep the cause, prefetch threads end cleanly",
          "[train][dataset][errors]") {
  // A generator that throws at its 13th sample: batches of 4 fail in batch 3 (counting from 0).
  auto failing = [] {
    return Dataset::from_generator([] {
      auto count = std::make_shared<int>(0);
      return [count](Example& next) {
        if (++*count == 13) throw std::runtime_error("sensor 7 went away");
        next.x = {Array::full({2}, *count, DType::float64)};
        next.y = {Array::full({1}, 0.0, DType::float64)};
        return *count < 40;
      };
    });
  };
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    const Dataset data = prefetch ? failing().batch(4).prefetch(2) : failing().batch(4);
    Dataset::Iterator it = data.iterate();
    Example batch;
    for (int i = 0; i < 3; ++i) REQUIRE(it.next(batch));
    try {
      it.next(batch);
      FAIL("no error");
    } catch (const DatasetError& error) {
      CHECK(std::string(error.what()).find("element 3") != std::string::npos);
      CHECK(std::string(error.what()).find("sensor 7 went away") != std::string::npos);
      CHECK_THROWS_WITH(std::rethrow_if_nested(error), "sensor 7 went away");
    }
  }
  // An element of another shape cannot join a batch.
  const Dataset ragged = Dataset::from_generator([] {
    auto count = std::make_shared<int>(0);
    return [count](Example& next) {
      ++*count;
      next.x = {Array::full({*count == 3 ? 3 : 2}, 1.0, DType::float64)};
      next.y = {Array::full({1}, 0.0, DType::float64)};
      return *count <= 6;
    };
  });
  Dataset::Iterator it = ragged.batch(4).iterate();
  Example batch;
  CHECK_THROWS_WITH(it.next(batch), Catch::Contains("element 2 has x[0] of shape (3,)"));
  // An iterator dropped mid-pass stops its prefetch thread (which is waiting for a free slot).
  for (int i = 0; i < 20; ++i) {
    Dataset::Iterator partial = counting(100).batch(5).prefetch(2).iterate();
    Example one;
    REQUIRE(partial.next(one));
  }
}

TEST_CASE("Dataset::from_csv streams files with label columns, and names the file and line of a bad row",
          "[train][dataset][csv]") {
  testing::TempDir dir;
  {
    std::ofstream(dir.file("a.csv")) << "# sensor log\nf1,f2,target\n1,2,10\n3,4,20\n";
    std::ofstream(dir.file("b.csv")) << "# sensor log\nf1,f2,target\n5,6,30\n";
    std::ofstream(dir.file("bad.csv")) << "f1,f2,target\n1,2,10\n3,4\n";
  }
  CsvOptions options;
  options.comment = '#';
  options.label_names = {"target"};
  options.dtype = DType::float64;
  const Dataset data = Dataset::from_csv({dir.file("a.csv"), dir.file("b.csv")}, options);
  CHECK(data.cardinality() == Dataset::unknown);
  Dataset::Iterator it = data.batch(2).iterate();
  Example batch;
  REQUIRE(it.next(batch));
  CHECK(batch.x[0].shape() == Shape({2, 2}));
  CHECK(batch.y[0].shape() == Shape({2, 1}));
  CHECK(batch.x[0].flat(2) == 3.0);
  CHECK(batch.y[0].flat(1) == 20.0);
  REQUIRE(it.next(batch));
  CHECK(batch.x[0].flat(0) == 5.0);
  CHECK(batch.y[0].flat(0) == 30.0);
  CHECK_FALSE(it.next(batch));

  // read_csv splits labels off the same way.
  const CsvTable table = read_csv(dir.file("a.csv"), options);
  CHECK(table.column_names == std::vector<std::string>{"f1", "f2"});
  CHECK(table.label_names == std::vector<std::string>{"target"});
  CHECK(table.labels.shape() == Shape({2, 1}));
  CHECK(table.labels.flat(1) == 20.0);

  Dataset::Iterator bad = Dataset::from_csv({dir.file("bad.csv")}, options).iterate();
  REQUIRE(bad.next(batch));
  CHECK_THROWS_WITH(bad.next(batch), Catch::Contains("bad.csv:3") && Catch::Contains("2 fields"));
}

TEST_CASE("fit on a dataset equals fit on the same batches as arrays, and the same seed gives the same weights",
          "[train][dataset][fit]") {
  const Dataset rows = counting(40).map([](Example& example) {
    example.x[0].set_flat(0, std::sin(example.x[0].flat(0)));
    example.x[0].set_flat(1, std::cos(example.x[0].flat(1)));
    example.y[0].set_flat(0, std::sin(example.y[0].flat(0)));
  });
  // The same rows as arrays, unshuffled.
  Array x({40, 2}, DType::float64), y({40, 1}, DType::float64);
  {
    Dataset::Iterator it = rows.iterate();
    Example example;
    for (std::size_t r = 0; it.next(example); ++r) {
      x.set_flat(2 * r, example.x[0].flat(0));
      x.set_flat(2 * r + 1, example.x[0].flat(1));
      y.set_flat(r, example.y[0].flat(0));
    }
  }
  Model from_arrays = small_model(), from_dataset = small_model();
  const History by_arrays = from_arrays.fit(x, y, FitOptions().epochs(3).batch_size(8).shuffle(false).verbose(0));
  const History by_dataset = from_dataset.fit(rows.batch(8), FitOptions().epochs(3).verbose(0));
  CHECK(bitwise_equal(from_arrays.get_weights(), from_dataset.get_weights()));
  CHECK(by_arrays["loss"] == by_dataset["loss"]);

  // Shuffled and prefetched, or not prefetched: the same batches, the same weights.
  Model plain = small_model(), prefetched = small_model();
  plain.fit(rows.shuffle(16, 5).batch(8), FitOptions().epochs(3).verbose(0));
  prefetched.fit(rows.shuffle(16, 5).batch(8).prefetch(2), FitOptions().epochs(3).verbose(0));
  CHECK(bitwise_equal(plain.get_weights(), prefetched.get_weights()));

  // evaluate and predict agree with the arrays too.
  CHECK(from_dataset.evaluate(rows.batch(7)).at("loss") == Approx(from_dataset.evaluate(x, y, 7).at("loss")).epsilon(1e-14));
  CHECK(bitwise_equal(from_dataset.predict(rows.batch(16)), {from_dataset.predict(x)}));
  CHECK(from_dataset.evaluate(rows.batch(8), EvaluateOptions().steps(2)).count("loss") == 1);

  // steps_per_epoch over a repeated dataset, validation from a dataset.
  const History stepped = plain.fit(rows.shuffle(40, 1).repeat().batch(8),
                                    FitOptions().epochs(2).steps_per_epoch(3).validation_data(rows.batch(10)).verbose(0));
  CHECK(stepped["val_loss"].size() == 2);
}

TEST_CASE("fit refuses a dataset it cannot train on before the first step", "[train][dataset][fit][errors]") {
  Model model = small_model();
  const std::vector<Array> before = model.get_weights();
  const Dataset rows = counting(12);
  CHECK_THROWS_WITH(model.fit(rows, FitOptions().verbose(0)), Catch::Contains("batch(n)"));
  CHECK_THROWS_WITH(model.fit(rows.repeat().batch(4), FitOptions().verbose(0)), Catch::Contains("steps_per_epoch"));
  CHECK_THROWS_WITH(model.fit(rows.batch(4), FitOptions().epochs(2).steps_per_epoch(2).verbose(0)),
                    Catch::Contains("repeat() it"));
  CHECK_THROWS_AS(model.fit(rows.take(0).batch(4), FitOptions().verbose(0)), ValueError);
  CHECK_THROWS_AS(model.evaluate(rows.batch(4), EvaluateOptions().steps(9)), ValueError);
  CHECK(bitwise_equal(model.get_weights(), before));
}

TEST_CASE("Dataset edge cases: dtype changes, ended generators, endless repeats, dataset options fit refuses",
          "[train][dataset][errors]") {
  // An element of another dtype cannot join a batch (its bytes would not fit).
  const Dataset mixed = Dataset::from_generator([] {
    auto count = std::make_shared<int>(0);
    return [count](Example& next) {
      ++*count;
      next.x = {Array::full({2}, 1.0, *count == 2 ? DType::float64 : DType::float32)};
      next.y = {Array::full({1}, 0.0)};
      return *count <= 4;
    };
  });
  Dataset::Iterator it = mixed.batch(4).iterate();
  Example batch;
  CHECK_THROWS_WITH(it.next(batch), Catch::Contains("dtype float64"));

  // A generator is not called again once it has said it is done.
  auto calls = std::make_shared<int>(0);
  const Dataset counted = Dataset::from_generator([calls] {
    auto count = std::make_shared<int>(0);
    return [calls, count](Example& next) {
      ++*calls;
      next.x = {Array::full({1}, 1.0)};
      next.y = {Array::full({1}, 1.0)};
      return ++*count <= 5;
    };
  });
  Dataset::Iterator five = counted.batch(2).iterate();
  int batches = 0;
  while (five.next(batch)) ++batches;
  CHECK(batches == 3);
  CHECK_FALSE(five.next(batch));
  CHECK(*calls == 6);

  // repeat() of a source of unknown length has no end: fit asks for steps_per_epoch.
  CHECK(counted.repeat().cardinality() == Dataset::infinite);
  CHECK(counted.repeat(2).cardinality() == Dataset::unknown);
  Model model = small_model();
  const Dataset rows = counting(12);
  CHECK_THROWS_WITH(model.fit(counted.repeat().batch(2), FitOptions().verbose(0)), Catch::Contains("steps_per_epoch"));
  CHECK_THROWS_WITH(model.predict(counted.repeat().batch(2)), Catch::Contains("give steps"));
  CHECK_THROWS_WITH(model.fit(rows.batch(4), FitOptions().validation_split(0.2).verbose(0)),
                    Catch::Contains("validation_split"));
  CHECK_THROWS_WITH(model.fit(rows.batch(4), FitOptions().sample_weight(Array::full({12}, 1.0)).verbose(0)),
                    Catch::Contains("in its elements"));
}

TEST_CASE("fit on a dataset applies class_weight to every batch, as on arrays", "[train][dataset][weights]") {
  Array x({12, 2}, DType::float64), y({12, 1}, DType::float64);
  for (std::size_t r = 0; r < 12; ++r) {
    x.set_flat(2 * r, std::sin(static_cast<double>(r)));
    x.set_flat(2 * r + 1, std::cos(static_cast<double>(r)));
    y.set_flat(r, r % 3 == 0 ? 1.0 : 0.0);
  }
  auto classifier = [] {
    const Tensor input = Input({None, 2}, DType::float64);
    Model model(input, Dense(1, "sigmoid")(input));
    std::vector<Array> weights = model.get_weights();
    for (Array& weight : weights)
      for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, 0.1 * static_cast<double>(i + 1));
    model.set_weights(weights);
    model.compile(create_optimizer("sgd", {{"learning_rate", 0.1}}), "binary_crossentropy");
    return model;
  };
  Model by_arrays = classifier(), by_dataset = classifier();
  by_arrays.fit(x, y, FitOptions().epochs(2).batch_size(4).shuffle(false).class_weight({{1, 3.0}}).verbose(0));
  by_dataset.fit(Dataset::from_arrays(x, y).batch(4), FitOptions().epochs(2).class_weight({{1, 3.0}}).verbose(0));
  CHECK(bitwise_equal(by_arrays.get_weights(), by_dataset.get_weights()));
}
