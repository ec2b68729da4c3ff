// The trainer's data-parallel path (FitOptions::distribute) with ranks that are threads of this process
// (support/thread_communicator.hpp): no MPI needed, and the sanitizers see all of it. The MPI runs of the
// same path are in tests/distributed/.
#include <catch2/catch.hpp>

#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/regularization/dropout.hpp>
#include <kiln/layers/regularization/noise.hpp>
#include <kiln/layers/rnn/recurrent.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/detail/data_parallel.hpp>
#include <kiln/models/model.hpp>
#include "support/thread_communicator.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// The same model on every rank: fixed names (so the same dropout and noise seeds and configs) and weights.
Model make_model(int units = 8) {
  const Tensor input = Input({Shape::unknown, 5}, DType::float64, "x");
  Tensor h = Dense(units, "tanh", {{"name", "hidden"}})(input);
  h = Dropout(0.3, {{"name", "drop"}})(h);
  h = GaussianNoise(0.1, {{"name", "noise"}})(h);
  Model model(input, Dense(1, "", {{"name", "out"}})(h), "replica");
  std::vector<Array> weights = model.get_weights();
  for (Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, std::cos(static_cast<double>(i) * 0.9) * 0.5);
  model.set_weights(weights);
  model.compile(create_optimizer("adam", {{"learning_rate", 0.02}}), "mse", {"mae"});
  return model;
}

void make_data(Array& x, Array& y, std::int64_t rows) {
  Rng rng(4);
  x = Array({rows, 5}, DType::float64);
  y = Array({rows, 1}, DType::float64);
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < 5; ++c) {
      const double value = rng.uniform(-1.0, 1.0);
      x.set_flat(static_cast<std::size_t>(r * 5 + c), value);
      sum += value * (c % 2 ? 1.0 : -0.5);
    }
    y.set_flat(static_cast<std::size_t>(r), std::sin(sum));
  }
}

double largest_difference(const std::vector<Array>& a, const std::vector<Array>& b) {
  double largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) largest = std::max(largest, std::abs(a[i].flat(j) - b[i].flat(j)));
  return largest;
}

// Runs `body(rank, communicator)` on `ranks` threads; the exceptions they threw, by rank.
std::vector<std::exception_ptr> on_ranks(int ranks, const std::function<void(int, testing::ThreadCommunicator&)>& body,
                                         std::size_t bucket_bytes = std::size_t{25} << 20) {
  testing::ThreadWorld world(ranks);
  std::vector<std::unique_ptr<testing::ThreadCommunicator>> communicators;
  for (int r = 0; r < ranks; ++r) {
    communicators.push_back(std::make_unique<testing::ThreadCommunicator>(world, r));
    communicators.back()->set_bucket_bytes(bucket_bytes);
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, *communicators[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (std::thread& thread : threads) thread.join();
  return errors;
}

std::string message(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& caught) {
    return caught.what();
  }
}

}  // namespace

TEST_CASE("shard_of splits a batch's rows over the ranks: disjoint, covering, in rank order", "[train][distributed]") {
  for (const std::int64_t rows : {0, 1, 2, 7, 10, 33})
    for (const int size : {1, 2, 3, 4}) {
      std::int64_t next = 0;
      for (int rank = 0; rank < size; ++rank) {
        const detail::Shard shard = detail::shard_of(rows, rank, size);
        CHECK(shard.start == next);
        CHECK(shard.count >= rows / size);
        CHECK(shard.count <= rows / size + 1);
        next += shard.count;
      }
      CHECK(next == rows);
    }
}

TEST_CASE("a fit on 2 and 3 thread ranks equals one process's fit of the same batches", "[train][distributed]") {
  Array x, y;
  make_data(x, y, 67);  // 53 training rows in batches of 8: the last of 5 (3 ranks: shards of 2, 2, 1)
  const FitOptions base = FitOptions().epochs(3).batch_size(8).seed(5).verbose(0).validation_split(0.2);
  Model reference = make_model();
  const History expected = reference.fit(x, y, base);
  for (const int ranks : {2, 3}) {
    for (const std::size_t bucket_bytes : {std::size_t{25} << 20, std::size_t{64}}) {
      INFO(ranks << " ranks, buckets of " << bucket_bytes << " bytes");
      std::vector<Model> models;
      for (int r = 0; r < ranks; ++r) models.push_back(make_model());
      // The ranks start from other weights: rank 0's are copied to the others.
      for (int r = 1; r < ranks; ++r) {
        std::vector<Array> weights = models[static_cast<std::size_t>(r)].get_weights();
        for (Array& weight : weights) weight.set_flat(0, 3.0 * r);
        models[static_cast<std::size_t>(r)].set_weights(weights);
      }
      std::vector<History> histories(static_cast<std::size_t>(ranks));
      std::vector<std::size_t> sums(static_cast<std::size_t>(ranks));
      const auto errors = on_ranks(ranks, [&](int rank, testing::ThreadCommunicator& communicator) {
        FitOptions options = base;
        histories[static_cast<std::size_t>(rank)] = models[static_cast<std::size_t>(rank)].fit(x, y, options.distribute(communicator));
        sums[static_cast<std::size_t>(rank)] = communicator.sums_started();
      }, bucket_bytes);
      for (const auto& error : errors) REQUIRE_FALSE(error);
      for (int r = 0; r < ranks; ++r) {
        CHECK(largest_difference(models[static_cast<std::size_t>(r)].get_weights(), reference.get_weights()) <= 1e-12);
        const History& history = histories[static_cast<std::size_t>(r)];
        REQUIRE(history.history.size() == expected.history.size());
        for (const auto& [name, values] : expected.history)
          for (std::size_t e = 0; e < values.size(); ++e) CHECK(std::abs(history.history.at(name)[e] - values[e]) <= 1e-12);
      }
      // Small buckets: one per gradient (4), 7 steps an epoch, 3 epochs.
      if (bucket_bytes == 64) CHECK(sums[0] == 4 * 7 * 3);
      if (bucket_bytes != 64) CHECK(sums[0] == 1 * 7 * 3);
    }
  }
}

TEST_CASE("a distributed fit of a Dataset equals one process's fit of it", "[train][distributed]") {
  Array x, y;
  make_data(x, y, 50);
  const Dataset data = Dataset::from_arrays(x, y).shuffle(20, 2).batch(6);
  const FitOptions base = FitOptions().epochs(2).verbose(0);
  Model reference = make_model();
  reference.fit(data, base);
  std::vector<Model> models = {make_model(), make_model()};
  const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
    FitOptions options = base;
    models[static_cast<std::size_t>(rank)].fit(data, options.distribute(communicator));
  });
  for (const auto& error : errors) REQUIRE_FALSE(error);
  for (const Model& model : models) CHECK(largest_difference(model.get_weights(), reference.get_weights()) <= 1e-12);
}

TEST_CASE("a rank whose callback throws stops every rank at the next exchange", "[train][distributed]") {
  Array x, y;
  make_data(x, y, 40);
  std::vector<Model> models = {make_model(), make_model()};
  const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
    FitOptions options = FitOptions().epochs(2).batch_size(8).verbose(0).distribute(communicator);
    LambdaCallback::Options hooks;
    hooks.on_batch_end = [rank](TrainingState&, std::int64_t batch, const Logs&) {
      if (rank == 1 && batch == 2) throw std::runtime_error("disk full on rank 1");
    };
    options.callback(std::make_shared<LambdaCallback>(hooks));
    models[static_cast<std::size_t>(rank)].fit(x, y, options);
  });
  REQUIRE(errors[0]);
  REQUIRE(errors[1]);
  CHECK(message(errors[1]) == "disk full on rank 1");
  CHECK_THROWS_AS(std::rethrow_exception(errors[0]), DistributedError);
  CHECK_THAT(message(errors[0]), Contains("rank 1 of 2 failed at epoch 1, batch 4") && Contains("disk full on rank 1"));
}

TEST_CASE("ranks with other models or other data are refused before any collective on weights",
          "[train][distributed]") {
  Array x, y, x2, y2;
  make_data(x, y, 40);
  make_data(x2, y2, 48);
  SECTION("another model") {
    std::vector<Model> models = {make_model(8), make_model(9)};
    const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
      models[static_cast<std::size_t>(rank)].fit(x, y, FitOptions().verbose(0).distribute(communicator));
    });
    for (const auto& error : errors) {
      REQUIRE(error);
      CHECK_THAT(message(error), Contains("rank 1's model differs from rank 0's (config and weights hash 0x"));
    }
    CHECK(models[1].get_weights()[0].flat(0) == make_model(9).get_weights()[0].flat(0));  // not overwritten
  }
  SECTION("other rows") {
    std::vector<Model> models = {make_model(), make_model()};
    const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
      models[static_cast<std::size_t>(rank)].fit(rank ? x2 : x, rank ? y2 : y, FitOptions().verbose(0).distribute(communicator));
    });
    for (const auto& error : errors) {
      REQUIRE(error);
      CHECK_THAT(message(error), Contains("rank 1's data or fit options differ from rank 0's"));
    }
  }
  SECTION("bad data on one rank, found while preparing") {
    std::vector<Model> models = {make_model(), make_model()};
    const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
      FitOptions options = FitOptions().verbose(0).distribute(communicator);
      if (rank == 1) options.sample_weight(Array::full({40}, -1.0, DType::float64));
      models[static_cast<std::size_t>(rank)].fit(x, y, options);
    });
    REQUIRE(errors[0]);
    REQUIRE(errors[1]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[1]), ValueError);
    CHECK_THAT(message(errors[0]), Contains("rank 1 of 2 failed at the start of training"));
  }
}

TEST_CASE("gradients that arrive out of bucket order (an LSTM's) are summed in bucket order on every rank",
          "[train][distributed]") {
  // An LSTM's gradients come kernel, recurrent kernel, bias: not the reverse weight order. With buckets of a
  // gradient or two, and a last batch of 1 row (rank 1's shard empty: it starts its buckets without running),
  // the ranks must still start the same sums in the same order.
  auto make = [] {
    const Tensor input = Input({Shape::unknown, 6, 3}, DType::float64, "seq");
    const Tensor h = LSTM(5, {{"name", "lstm"}})(input);
    Model model(input, Dense(1, "", {{"name", "out"}})(h), "recurrent");
    std::vector<Array> weights = model.get_weights();
    for (Array& weight : weights)
      for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, std::sin(static_cast<double>(i) * 0.7) * 0.3);
    model.set_weights(weights);
    model.compile(create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse");
    return model;
  };
  Rng rng(9);
  Array x({25, 6, 3}, DType::float64), y({25, 1}, DType::float64);
  for (std::size_t i = 0; i < x.size(); ++i) x.set_flat(i, rng.uniform(-1.0, 1.0));
  for (std::size_t i = 0; i < y.size(); ++i) y.set_flat(i, rng.uniform(-1.0, 1.0));
  const FitOptions base = FitOptions().epochs(2).batch_size(8).seed(1).verbose(0);  // the last batch: 1 row
  Model reference = make();
  reference.fit(x, y, base);
  for (const std::size_t bucket_bytes : {std::size_t{1}, std::size_t{200}, std::size_t{25} << 20}) {
    INFO("buckets of " << bucket_bytes << " bytes");
    std::vector<Model> models = {make(), make()};
    const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
      FitOptions options = base;
      models[static_cast<std::size_t>(rank)].fit(x, y, options.distribute(communicator));
    }, bucket_bytes);
    for (const auto& error : errors) {
      if (error) FAIL(message(error));
    }
    for (const Model& model : models) CHECK(largest_difference(model.get_weights(), reference.get_weights()) <= 1e-12);
  }
}

TEST_CASE("a stop asked for by one rank's callback stops every rank after the same batch", "[train][distributed]") {
  Array x, y;
  make_data(x, y, 64);
  std::vector<Model> models = {make_model(), make_model()};
  std::vector<History> histories(2);
  std::vector<std::int64_t> batches(2, 0);
  const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
    FitOptions options = FitOptions().epochs(5).batch_size(8).verbose(0).distribute(communicator);
    LambdaCallback::Options hooks;
    hooks.on_batch_end = [rank, &batches](TrainingState& state, std::int64_t, const Logs&) {
      ++batches[static_cast<std::size_t>(rank)];
      if (rank == 1 && batches[1] == 11) state.stop_training = true;  // epoch 2, batch 3: rank 1's own reason
    };
    options.callback(std::make_shared<LambdaCallback>(hooks));
    histories[static_cast<std::size_t>(rank)] = models[static_cast<std::size_t>(rank)].fit(x, y, options);
  });
  for (const auto& error : errors)
    if (error) FAIL(message(error));
  // Both ranks trained 11 batches and ended in epoch 2, with the same weights.
  CHECK(batches[0] == 11);
  CHECK(batches[1] == 11);
  CHECK(histories[0].epochs.size() == 2);
  CHECK(histories[1].epochs.size() == 2);
  CHECK(largest_difference(models[0].get_weights(), models[1].get_weights()) == 0.0);
}

TEST_CASE("a rank that fails at an epoch's start, or at the end of training, stops every rank", "[train][distributed]") {
  Array x, y;
  make_data(x, y, 32);
  for (const bool at_end : {false, true}) {
    INFO((at_end ? "on_train_end" : "on_epoch_begin"));
    std::vector<Model> models = {make_model(), make_model()};
    const auto errors = on_ranks(2, [&](int rank, testing::ThreadCommunicator& communicator) {
      FitOptions options = FitOptions().epochs(3).batch_size(8).verbose(0).distribute(communicator);
      LambdaCallback::Options hooks;
      if (at_end)
        hooks.on_train_end = [rank](TrainingState&, const Logs&) {
          if (rank == 1) throw std::runtime_error("cannot write the report");
        };
      else
        hooks.on_epoch_begin = [rank](TrainingState&, int epoch) {
          if (rank == 1 && epoch == 1) throw std::runtime_error("schedule failed");
        };
      options.callback(std::make_shared<LambdaCallback>(hooks));
      models[static_cast<std::size_t>(rank)].fit(x, y, options);
    });
    REQUIRE(errors[0]);
    REQUIRE(errors[1]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[0]), DistributedError);
    CHECK_THAT(message(errors[0]), Contains(at_end ? "the end of training: cannot write the report"
                                                   : "epoch 2, batch 1: schedule failed"));
  }
}
