// One model used from several threads, as a server's thread pool uses it: predict and evaluate run at
// once and give, bitwise, what a single-threaded call gives; fit takes the model alone, and the calls that
// would race with it are refused with LayerStateError.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/attention/mh_attention.hpp>
#include <kiln/layers/pooling/pooling.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Shape;
using kiln::Tensor;

namespace {

constexpr std::int64_t None = Shape::unknown;

// An attention block (fused attention, its per-thread scratch, GEMM splits) and two Dense layers.
kiln::Model attention_model() {
  const Tensor x = kiln::Input({None, 6, 4});
  const Tensor h = kiln::MHAttention(4, 2)(x);
  return kiln::Model(x, kiln::Dense(3)(kiln::GlobalAveragePooling1D()(h)));
}

struct Request {
  std::int64_t rows;
  std::int64_t batch_size;
};

// Rows and batch sizes that give full batches, a tail, and one batch smaller than batch_size.
const std::vector<Request>& requests() {
  static const std::vector<Request> all = {{1, 1}, {3, 4}, {7, 4}, {16, 16}, {16, 5}, {9, 32}, {20, 3}};
  return all;
}

// Runs `body(thread)` on `count` threads that start together.
template <class Body>
void on_threads(int count, Body body) {
  std::atomic<int> waiting{count};
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t)
    threads.emplace_back([&, t] {
      --waiting;
      while (waiting.load() > 0) std::this_thread::yield();
      body(t);
    });
  for (std::thread& thread : threads) thread.join();
}

struct KeepThreads {
  int saved = kiln::get_num_threads();
  ~KeepThreads() { kiln::set_num_threads(saved); }
};

}  // namespace

TEST_CASE("predict from 4 threads, 1000 calls each with mixed batch sizes, is bitwise the single-threaded result",
          "[train][concurrency]") {
  KeepThreads keep;
  kiln::set_num_threads(2);  // the kernels split over the pool too, while four callers share it
  kiln::Model model = attention_model();
  const Array data = kiln::testing::random_input({20, 6, 4}, 3).astype(kiln::DType::float32);
  std::vector<Array> expected;
  for (const Request& request : requests())
    expected.push_back(model.predict(data.rows(0, request.rows), request.batch_size));

  std::atomic<int> wrong{0}, errors{0};
  on_threads(4, [&](int thread) {
    for (int call = 0; call < 1000; ++call) {
      const std::size_t which = static_cast<std::size_t>(thread * 7 + call * 3) % requests().size();
      const Request& request = requests()[which];
      try {
        if (!model.predict(data.rows(0, request.rows), request.batch_size).bitwise_equal(expected[which])) ++wrong;
      } catch (const std::exception&) {
        ++errors;
      }
    }
  });
  CHECK(errors == 0);
  CHECK(wrong == 0);
}

TEST_CASE("the first predict, made by several threads at once, builds one inference graph safely",
          "[train][concurrency]") {
  const Array data = kiln::testing::random_input({5, 6, 4}, 4).astype(kiln::DType::float32);
  const Array expected = attention_model().predict(data, 2);
  for (int round = 0; round < 20; ++round) {
    kiln::Model model = attention_model();  // the same weights each time: they come from the layer names
    std::atomic<int> wrong{0};
    on_threads(4, [&](int) {
      if (!model.predict(data, 2).bitwise_equal(expected)) ++wrong;
    });
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("evaluate and predict on one compiled model from several threads agree with one thread",
          "[train][concurrency]") {
  kiln::Model model = attention_model();
  model.compile("adam", "mse", {"mae"});
  const Array x = kiln::testing::random_input({12, 6, 4}, 5).astype(kiln::DType::float32);
  const Array y = kiln::testing::random_input({12, 3}, 6).astype(kiln::DType::float32);
  const kiln::Logs expected_scores = model.evaluate(x, y, 5);
  const Array expected_predictions = model.predict(x, 5);
  std::atomic<int> wrong{0}, errors{0};
  on_threads(4, [&](int thread) {
    for (int call = 0; call < 200; ++call) {
      try {
        if (thread % 2 == 0) {
          const kiln::Logs scores = model.evaluate(x, y, 5);
          if (scores.at("loss") != expected_scores.at("loss") || scores.at("mae") != expected_scores.at("mae")) ++wrong;
        } else if (!model.predict(x, 5).bitwise_equal(expected_predictions)) {
          ++wrong;
        }
      } catch (const std::exception&) {
        ++errors;
      }
    }
  });
  CHECK(errors == 0);
  CHECK(wrong == 0);
}

TEST_CASE("fit is refused while another thread predicts, and predict while another thread fits",
          "[train][concurrency]") {
  kiln::Model model = attention_model();
  model.compile("sgd", "mse");
  const Array x = kiln::testing::random_input({8, 6, 4}, 7).astype(kiln::DType::float32);
  const Array y = kiln::testing::random_input({8, 3}, 8).astype(kiln::DType::float32);
  const kiln::FitOptions options = kiln::FitOptions().epochs(1).batch_size(4).verbose(0);

  SECTION("training while inference runs elsewhere") {
    std::atomic<bool> holding{false}, release{false};
    std::thread predictor([&] {
      const kiln::ModelBase::Use use = model->use_for_inference("predict");  // a predict in flight
      holding = true;
      while (!release.load()) std::this_thread::yield();
    });
    while (!holding.load()) std::this_thread::yield();
    CHECK_THROWS_AS(model.fit(x, y, options), kiln::LayerStateError);
    CHECK_THROWS_WITH(model.fit(x, y, options), Catch::Contains("Functional 'functional'.fit") &&
                                                    Catch::Contains("1 predict or evaluate call(s) are running"));
    CHECK_THROWS_AS(model.train_on_batch(x, y), kiln::LayerStateError);
    CHECK_THROWS_AS(model.compile("adam", "mse"), kiln::LayerStateError);
    release = true;
    predictor.join();
    CHECK_NOTHROW(model.fit(x, y, options));  // once it returned
  }

  SECTION("inference from another thread while fit runs; the fit's own thread may predict") {
    std::string refused;
    bool own_thread_predicted = false;
    kiln::LambdaCallback::Options hooks;
    hooks.on_epoch_end = [&](kiln::TrainingState&, int, kiln::Logs&) {
      own_thread_predicted = model.predict(x).shape() == Shape{8, 3};  // a callback's predict: allowed
      std::thread other([&] {
        try {
          model.predict(x);
        } catch (const kiln::LayerStateError& error) {
          refused += error.what();
        }
        try {
          model.evaluate(x, y);
        } catch (const kiln::LayerStateError& error) {
          refused += error.what();
        }
        try {
          model.fit(x, y, options);
        } catch (const kiln::LayerStateError& error) {
          refused += error.what();
        }
      });
      other.join();
    };
    model.fit(x, y, kiln::FitOptions(options).callback(std::make_shared<kiln::LambdaCallback>(hooks)));
    CHECK(own_thread_predicted);
    CHECK_THAT(refused, Catch::Contains(".predict: the model is training on another thread") &&
                            Catch::Contains(".evaluate: the model is training on another thread") &&
                            Catch::Contains(".fit: the model is already training on another thread"));
    CHECK(model.predict(x).shape() == Shape{8, 3});  // after fit, from any thread
  }
}
