#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/optim/schedules.hpp>

using namespace kiln;

namespace {
constexpr double pi = 3.14159265358979323846;

// Keras's CosineDecay decay phase, written out.
double cosine(double from, double step, double decay_steps, double alpha) {
  return from * ((1.0 - alpha) * 0.5 * (1.0 + std::cos(pi * step / decay_steps)) + alpha);
}
}  // namespace

TEST_CASE("ExponentialDecay decays continuously or in stairs", "[optim][schedules]") {
  const ExponentialDecay smooth(0.1, 10, 0.5);
  CHECK(smooth(0) == 0.1);
  CHECK(smooth(5) == Approx(0.07071067811865475).epsilon(1e-15));
  CHECK(smooth(10) == Approx(0.05).epsilon(1e-15));
  CHECK(smooth(25) == Approx(0.1 * std::pow(0.5, 2.5)).epsilon(1e-15));
  const ExponentialDecay stairs(0.1, 10, 0.5, /*staircase=*/true);
  CHECK(stairs(9) == 0.1);
  CHECK(stairs(10) == Approx(0.05).epsilon(1e-15));
  CHECK(stairs(29) == Approx(0.025).epsilon(1e-15));
}

TEST_CASE("PiecewiseConstantDecay switches just after each boundary", "[optim][schedules]") {
  const PiecewiseConstantDecay schedule({10, 20}, {1.0, 0.5, 0.1});
  CHECK(schedule(0) == 1.0);
  CHECK(schedule(10) == 1.0);  // boundaries close their interval, as in Keras (step <= boundary)
  CHECK(schedule(11) == 0.5);
  CHECK(schedule(20) == 0.5);
  CHECK(schedule(21) == 0.1);
  CHECK(schedule(100000) == 0.1);
}

TEST_CASE("CosineDecay falls from the initial rate to alpha times it and stays", "[optim][schedules]") {
  const CosineDecay schedule(1.0, 100, 0.1);
  CHECK(schedule(0) == Approx(1.0).epsilon(1e-15));
  CHECK(schedule(50) == Approx(0.55).epsilon(1e-15));
  CHECK(schedule(30) == Approx(cosine(1.0, 30, 100, 0.1)).epsilon(1e-15));
  CHECK(schedule(100) == Approx(0.1).epsilon(1e-15));
  CHECK(schedule(250) == Approx(0.1).epsilon(1e-15));
}

TEST_CASE("CosineDecay with warmup rises linearly to the target, then decays from it", "[optim][schedules]") {
  const CosineDecay schedule(0.0, 100, 0.0, "warm", /*warmup_target=*/1.0, /*warmup_steps=*/10);
  CHECK(schedule(0) == 0.0);
  CHECK(schedule(5) == Approx(0.5).epsilon(1e-15));
  CHECK(schedule(10) == Approx(1.0).epsilon(1e-15));
  CHECK(schedule(60) == Approx(0.5).epsilon(1e-15));
  CHECK(schedule(35) == Approx(cosine(1.0, 25, 100, 0.0)).epsilon(1e-15));
  CHECK(schedule(110) == Approx(0.0).margin(1e-15));
  CHECK(schedule(1000) == Approx(0.0).margin(1e-15));
}

TEST_CASE("schedule configs use Keras's keys and round-trip", "[optim][schedules][config]") {
  const std::vector<std::shared_ptr<LearningRateSchedule>> schedules = {
      std::make_shared<ExponentialDecay>(0.1, 1000, 0.96, true),
      std::make_shared<PiecewiseConstantDecay>(std::vector<double>{100, 200}, std::vector<double>{0.1, 0.01, 0.001}),
      std::make_shared<CosineDecay>(0.1, 500, 0.05),
      std::make_shared<CosineDecay>(0.0, 500, 0.0, "warm", 0.1, 50),
  };
  for (const auto& schedule : schedules) {
    INFO(schedule->class_name());
    const Config serialized = schedule->serialize();
    CHECK(serialized.get_string("module") == "keras.optimizers.schedules");
    const SchedulePtr copy = LearningRateSchedule::from_config(serialized);
    CHECK(copy->get_config() == schedule->get_config());
    for (std::int64_t step : {0, 1, 73, 150, 499, 600}) CHECK((*copy)(step) == (*schedule)(step));
  }
  CHECK(schedules[0]->get_config().keys() ==
        std::vector<std::string>{"initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name"});
  CHECK(schedules[1]->get_config().get_string("name") == "PiecewiseConstant");
  CHECK(schedules[1]->get_config().at("boundaries") == Config::from_ints({100, 200}));
  CHECK(schedules[2]->get_config().at("warmup_target").is_null());
  CHECK(schedules[3]->get_config().get_double("warmup_target") == 0.1);
  CHECK(schedules[3]->get_config().get_int("warmup_steps") == 50);
}

TEST_CASE("bad schedule arguments and names are ConfigErrors", "[optim][schedules][config][errors]") {
  CHECK_THROWS_WITH(ExponentialDecay(0.1, 0, 0.5), Catch::Contains("decay_steps must be > 0"));
  CHECK_THROWS_AS(CosineDecay(0.1, -5), ConfigError);
  CHECK_THROWS_WITH(PiecewiseConstantDecay({10}, {1.0}), Catch::Contains("one entry more"));
  CHECK_THROWS_WITH(PiecewiseConstantDecay({20, 10}, {1.0, 0.5, 0.1}), Catch::Contains("increase strictly"));
  CHECK_THROWS_WITH(LearningRateSchedule::from_config(Config{{"class_name", "CosineDecai"}}),
                    Catch::Contains("'kiln>CosineDecay'"));
  CHECK_THROWS_WITH(
      LearningRateSchedule::from_config(Config{
          {"class_name", "ExponentialDecay"},
          {"config", {{"initial_learning_rate", 0.1}, {"decay_steps", 5}, {"decay_rate", 0.5}, {"stair_case", true}}}}),
      Catch::Contains("ExponentialDecay") && Catch::Contains("'stair_case'") && Catch::Contains("'staircase'"));
}
