// Regularizers, constraints and how training uses them: the penalties and projections against their
// formulas written out, by name and by config, and in fit: the loss reported and minimized includes the
// penalties, and each update is projected.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/regularization/activity_regularization.hpp>
#include <kiln/layers/constraints.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/layers/regularizers.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include "support/gradcheck.hpp"
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

// A 3×2 matrix with rows (1, −2), (0, 3), (2, 2).
Array matrix() { return Array::from_vector(std::vector<double>{1, -2, 0, 3, 2, 2}, {3, 2}); }

double evaluate_scalar(const kiln::Regularizer& regularizer, const Array& x) {
  return kiln::testing::evaluate([&](const std::vector<kiln::Tensor>& t) { return regularizer(t[0]); }, {x}).flat(0);
}

std::vector<double> project(const kiln::Constraint& constraint, const Array& w) {
  return kiln::testing::evaluate([&](const std::vector<kiln::Tensor>& t) { return constraint(t[0]); }, {w})
      .to_vector<double>();
}

Config object(const char* class_name, Config arguments) {
  return Config{{"class_name", class_name}, {"config", std::move(arguments)}};
}
}  // namespace

TEST_CASE("Regularizers: L1, L2, L1L2 and OrthogonalRegularizer against their formulas", "[layers][regularizers]") {
  // Σ|x| = 10, Σx² = 22.
  CHECK(evaluate_scalar(kiln::Regularizer::get("l1"), matrix()) == Approx(0.1).epsilon(1e-14));
  CHECK(evaluate_scalar(kiln::Regularizer::get("L2"), matrix()) == Approx(0.22).epsilon(1e-14));
  CHECK(evaluate_scalar(kiln::Regularizer::from_config(object("L1L2", {{"l1", 0.5}, {"l2", 0.25}})), matrix()) ==
        Approx(5.0 + 5.5).epsilon(1e-14));
  CHECK(evaluate_scalar(kiln::Regularizer::get("l1l2"), matrix()) == 0.0);  // Keras's defaults: both 0

  // Rows mode: the unit rows are (1, −2)/√5, (0, 1), (1, 1)/√2; their pairwise |cosines| are 2/√5,
  // 1/√10 and 1/√2. Keras: factor · ½ · (the off-diagonal sum, each pair twice) / (3 pairs).
  const double cosines = 2 / std::sqrt(5.0) + 1 / std::sqrt(10.0) + 1 / std::sqrt(2.0);
  CHECK(evaluate_scalar(kiln::Regularizer::from_config(object("OrthogonalRegularizer", {{"factor", 0.3}})), matrix()) ==
        Approx(0.3 * 0.5 * 2 * cosines / 3).epsilon(1e-13));
  // Columns mode: one pair, (1, 0, 2)/√5 and (−2, 3, 2)/√17, cosine 2/√85.
  CHECK(evaluate_scalar(
            kiln::Regularizer::from_config(object("OrthogonalRegularizer", {{"factor", 0.3}, {"mode", "columns"}})),
            matrix()) == Approx(0.3 * 0.5 * 2 * (2 / std::sqrt(85.0)) / 1).epsilon(1e-13));

  // Every penalty's float64 gradient against central differences.
  kiln::Rng rng(5);
  for (const Config& config : {Config("l2"), object("L1L2", {{"l1", 0.1}, {"l2", 0.2}}),
                               object("OrthogonalRegularizer", {{"mode", "columns"}})}) {
    const kiln::Regularizer regularizer = kiln::Regularizer::from_config(config);
    GradcheckOptions o;
    o.label = regularizer.class_name();
    const auto r = gradcheck([&](const std::vector<kiln::Tensor>& t) { return regularizer(t[0]); },
                             {random_away_from({4, 3}, rng, {0.0}, 0.05)}, o);
    INFO(o.label << ": " << r.worst_entry());
    CHECK(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("Regularizers: Keras's names, config form and argument checks", "[layers][regularizers][errors]") {
  const kiln::Regularizer l2 = kiln::Regularizer::get("l2");
  CHECK(l2.get_config() == object("L2", {{"l2", 0.01}}));
  CHECK(kiln::Regularizer::from_config(l2.get_config()) == l2);
  CHECK(kiln::Regularizer::get("orthogonal_regularizer").arguments() == Config{{"factor", 0.01}, {"mode", "rows"}});
  CHECK_FALSE(kiln::Regularizer::from_config(Config()));
  CHECK(kiln::Regularizer().get_config().is_null());
  CHECK_THROWS_AS(kiln::Regularizer::get("l3"), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Regularizer::from_config(object("L2", {{"l2", -1.0}})),
                    Contains("l2 must be a non-negative number"));
  CHECK_THROWS_WITH(kiln::Regularizer::from_config(object("OrthogonalRegularizer", {{"mode", "diagonal"}})),
                    Contains("mode must be 'rows' or 'columns'"));
  CHECK_THROWS_WITH(kiln::Regularizer::from_config(object("L1", {{"l1", 0.1}, {"l2", 0.1}})),
                    Contains("unknown argument 'l2'"));
  CHECK_THROWS_WITH(evaluate_scalar(kiln::Regularizer::get("orthogonal_regularizer"), Array({2, 2, 2})),
                    Contains("needs a matrix"));
}

namespace {
// A user's regularizer, registered under its own key, found by name and written back with that key.
KILN_REGISTER_REGULARIZER("acme>Quartic", {Config{{"weight", 1.0}}, [](const kiln::Tensor& x, const Config& args) {
                                             return kiln::ops::sum(kiln::ops::square(kiln::ops::square(x))) *
                                                    args.get_double("weight");
                                           }});
}  // namespace

TEST_CASE("Regularizers: a user's class by name and by config", "[layers][regularizers]") {
  const kiln::Regularizer quartic = kiln::Regularizer::from_config(object("Quartic", {{"weight", 0.5}}));
  CHECK(evaluate_scalar(quartic, matrix()) == Approx(0.5 * (1 + 16 + 0 + 81 + 16 + 16)).epsilon(1e-14));
  CHECK(quartic.get_config().get_string("registered_name") == "acme>Quartic");
  CHECK(kiln::Regularizer::from_config(quartic.get_config()) == quartic);
}

TEST_CASE("Constraints: MaxNorm, NonNeg, UnitNorm and MinMaxNorm against their formulas", "[layers][constraints]") {
  // Column norms of matrix(): √5 and √17; row norms √5, 3, √8.
  const double eps = 1e-7, n0 = std::sqrt(5.0), n1 = std::sqrt(17.0);
  const std::vector<double> max_norm = project(kiln::Constraint::get("max_norm"), matrix());  // max_value 2
  CHECK(max_norm[0] == Approx(1 * 2 / (eps + n0)).epsilon(1e-14));
  CHECK(max_norm[1] == Approx(-2 * 2 / (eps + n1)).epsilon(1e-14));
  const std::vector<double> nonneg = project(kiln::Constraint::get("NonNeg"), matrix());
  CHECK(nonneg == std::vector<double>{1, 0, 0, 3, 2, 2});
  const std::vector<double> unit_rows =
      project(kiln::Constraint::from_config(object("UnitNorm", {{"axis", 1}})), matrix());
  CHECK(unit_rows[2] == 0.0);
  CHECK(unit_rows[3] == Approx(3 / (eps + 3)).epsilon(1e-14));
  // MinMaxNorm(1, 3, rate 0.5): column 0's norm √5 is inside, kept; column 1's √17 moves halfway to 3.
  const std::vector<double> min_max = project(
      kiln::Constraint::from_config(object("MinMaxNorm", {{"min_value", 1.0}, {"max_value", 3.0}, {"rate", 0.5}})),
      matrix());
  CHECK(min_max[0] == Approx(1 * n0 / (eps + n0)).epsilon(1e-14));
  CHECK(min_max[1] == Approx(-2 * (0.5 * 3 + 0.5 * n1) / (eps + n1)).epsilon(1e-14));
  // A list of axes: one norm over the whole matrix, √22 > 2.
  const std::vector<double> whole =
      project(kiln::Constraint::from_config(object("MaxNorm", {{"axis", Config::list({0, 1})}})), matrix());
  CHECK(whole[4] == Approx(2 * 2 / (eps + std::sqrt(22.0))).epsilon(1e-14));

  CHECK(kiln::Constraint::get("max_norm").get_config() == object("MaxNorm", {{"max_value", 2}, {"axis", 0}}));
  CHECK_THROWS_AS(kiln::Constraint::get("non_negative"), kiln::ConfigError);
  CHECK_THROWS_WITH(project(kiln::Constraint::from_config(object("UnitNorm", {{"axis", 2}})), matrix()),
                    Contains("constraint axis 2 does not exist"));
  CHECK_THROWS_WITH(kiln::Constraint::from_config(object("MaxNorm", {{"max_value", "big"}})),
                    Contains("argument 'max_value'"));
}

// ---- in training ----------------------------------------------------------------------------------------

namespace {
Array inputs() { return Array::from_vector(std::vector<double>{1, 2, -1, 0.5, 0, 3, 2, -2}, {4, 2}); }
Array targets() { return Array::from_vector(std::vector<double>{1, 0, -1, 2}, {4, 1}); }

kiln::Model dense_model(const Config& options) {
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::Model model(x,
                    kiln::Dense(1, "", options.with("kernel_initializer", "ones").with("bias_initializer", "ones"))(x));
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse");
  return model;
}

double mse_of(kiln::Model& model) {
  const std::vector<double> y = model.predict(inputs()).to_vector<double>();
  double sum = 0;
  for (std::size_t i = 0; i < 4; ++i) sum += (y[i] - targets().flat(i)) * (y[i] - targets().flat(i)) / 4;
  return sum;
}
}  // namespace

TEST_CASE("kernel_regularizer and bias_regularizer join the loss reported and minimized",
          "[layers][regularizers][train]") {
  kiln::Model plain = dense_model({});
  kiln::Model regularized = dense_model(
      {{"kernel_regularizer", object("L2", {{"l2", 0.1}})}, {"bias_regularizer", object("L1", {{"l1", 0.2}})}});
  // Kernel ones (Σk² = 2), bias one (Σ|b| = 1): the penalty is 0.1·2 + 0.2·1.
  const double data_loss = mse_of(plain);
  CHECK(regularized.evaluate(inputs(), targets()).at("loss") == Approx(data_loss + 0.4).epsilon(1e-12));
  CHECK(plain.evaluate(inputs(), targets()).at("loss") == Approx(data_loss).epsilon(1e-12));

  // One SGD step: the regularized kernel moves by the extra −lr · 2 · 0.1 · k, the bias by −lr · 0.2 · sign(b).
  const kiln::Logs logs = regularized.train_on_batch(inputs(), targets());
  CHECK(logs.at("loss") == Approx(data_loss + 0.4).epsilon(1e-12));
  plain.train_on_batch(inputs(), targets());
  const std::vector<Array> a = plain.get_weights(), b = regularized.get_weights();
  for (std::size_t i = 0; i < 2; ++i) CHECK(b[0].flat(i) == Approx(a[0].flat(i) - 0.1 * 0.2 * 1.0).epsilon(1e-12));
  CHECK(b[1].flat(0) == Approx(a[1].flat(0) - 0.1 * 0.2).epsilon(1e-12));
}

TEST_CASE("activity_regularizer: the output's penalty over the batch size joins the loss",
          "[layers][regularizers][train]") {
  kiln::Model plain = dense_model({});
  kiln::Model regularized = dense_model({{"activity_regularizer", object("L1", {{"l1", 0.5}})}});
  const std::vector<double> y = plain.predict(inputs()).to_vector<double>();
  double penalty = 0;
  for (const double value : y) penalty += 0.5 * std::abs(value) / 4;  // divided by the batch of 4
  CHECK(regularized.evaluate(inputs(), targets()).at("loss") == Approx(mse_of(plain) + penalty).epsilon(1e-12));
  // Keras writes activity_regularizer into the config only when it is set.
  CHECK(regularized.layers().back()->get_config().at("activity_regularizer") == object("L1", {{"l1", 0.5}}));
  CHECK_FALSE(plain.layers().back()->get_config().contains("activity_regularizer"));

  // The layer that only regularizes: the identity, with l1 and l2 in its config.
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::ActivityRegularization activity(0.5, 0.25);
  kiln::Model model(x, activity(x));
  model.compile(kiln::create_optimizer("sgd", {}), "mse");
  double expected = 0;
  for (std::size_t i = 0; i < 8; ++i)
    expected += (0.5 * std::abs(inputs().flat(i)) + 0.25 * inputs().flat(i) * inputs().flat(i)) / 4;
  const Array zeros({4, 2}, kiln::DType::float64);
  double mse = 0;
  for (std::size_t i = 0; i < 8; ++i) mse += inputs().flat(i) * inputs().flat(i) / 8;
  CHECK(model.evaluate(inputs(), zeros).at("loss") == Approx(mse + expected).epsilon(1e-12));
  const Config config = activity.get_config();
  CHECK(config.get_double("l1") == 0.5);
  CHECK_FALSE(config.contains("activity_regularizer"));
}

TEST_CASE("kernel_constraint projects each update, a frozen layer adds no penalty", "[layers][constraints][train]") {
  kiln::Rng rng(3);
  const Array x = random_input({32, 4}, 1), y = random_input({32, 3}, 2, -4, 4);
  const kiln::Tensor input = kiln::Input({any, 4}, kiln::DType::float64);
  kiln::Dense nonneg(3, "", {{"kernel_constraint", "non_neg"}});
  kiln::Dense capped(3, "", {{"kernel_constraint", object("MaxNorm", {{"max_value", 0.5}})}});
  kiln::Model model(input, kiln::Add()({nonneg(input), capped(input)}));
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.5}}), "mse");
  model.fit(x, y, kiln::FitOptions().epochs(3).batch_size(8).verbose(0));
  for (const double w : nonneg.weights()[0].value.to_vector<double>()) CHECK(w >= 0.0);
  const Array kernel = capped.weights()[0].value;
  for (std::int64_t column = 0; column < 3; ++column) {
    double norm = 0;
    for (std::int64_t row = 0; row < 4; ++row)
      norm += std::pow(kernel.flat(static_cast<std::size_t>(row * 3 + column)), 2);
    CHECK(std::sqrt(norm) <= 0.5 + 1e-9);
  }

  // Keras counts only trainable weights' regularizers: a frozen layer's penalty leaves the loss.
  kiln::Model frozen = dense_model({{"kernel_regularizer", object("L2", {{"l2", 0.1}})}});
  frozen.layers().back()->set_trainable(false);
  frozen.compile(kiln::create_optimizer("sgd", {}), "mse");
  CHECK(frozen.evaluate(inputs(), targets()).at("loss") == Approx(mse_of(frozen)).epsilon(1e-12));
}

TEST_CASE("Regularizers and constraints save and reload with the model, and keep training",
          "[layers][regularizers][serialize]") {
  TempDir dir;
  kiln::Model model = dense_model({{"kernel_regularizer", object("L1L2", {{"l1", 0.01}, {"l2", 0.1}})},
                                   {"bias_constraint", "non_neg"},
                                   {"activity_regularizer", "l2"}});
  const double loss = model.evaluate(inputs(), targets()).at("loss");
  model.save(dir.file("m.kiln"));
  kiln::Model loaded = kiln::load_model(dir.file("m.kiln"));
  CHECK(loaded.to_json() == model.to_json());
  CHECK(loaded.evaluate(inputs(), targets()).at("loss") == Approx(loss).epsilon(1e-14));
  const Config dense = loaded.layers().back()->get_config();
  CHECK(dense.at("kernel_regularizer") == object("L1L2", {{"l1", 0.01}, {"l2", 0.1}}));
  CHECK(dense.at("bias_constraint") == object("NonNeg", Config::map()));
  CHECK(dense.at("kernel_constraint").is_null());
  loaded.fit(inputs(), targets(), kiln::FitOptions().epochs(2).verbose(0));
  CHECK(loaded.get_weights()[1].flat(0) >= 0.0);
}

// ---- the layer harness -------------------------------------------------------------------------------------

namespace {
LayerSpec activity_regularization_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::ActivityRegularization(0.1, 0.2)); };
  spec.call = LayerCase{{random_input({2, 3}, 1)}};
  spec.output_shapes = {Shape{any, 3}};
  spec.bad_inputs = {{"two inputs", {{any, 3}, {any, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>ActivityRegularization", activity_regularization_spec)
