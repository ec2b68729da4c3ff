// The experiment the MHAttention block was written for: predict tomorrow's size of move of two
// European stock indices from the last 40 days of all four, with a Transformer encoder block.
//
// Data: data/eu_stock_markets.csv (DAX, SMI, CAC, FTSE daily closes, 1991-1998; see data/README.md).
// Inputs: 40 days of log returns of the four indices, flattened to 160 values and standardized on the
// training part. Targets: the next day's absolute log return of DAX and FTSE, scaled into [-1, 1] on the
// training part. Splits are in time order: 70 % train, 15 % validation, 15 % test.
//
// It prints the model, trains it with early stopping (keeping the best epoch in best.kiln), compares its
// test MSE with a Dense-only model, a causal dilated Conv1D model and predicting the training mean, saves
// the model to stock_attention.kiln, reloads it and checks that the reloaded model predicts the test set
// bit for bit the same (exit status 2 if not). It writes history.csv, training.svg and the .kiln files into the
// current directory (`make demo` runs it in build/).
#include <kiln/kiln.hpp>

#include "stock_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

namespace {

using stock::attention_model;
using stock::load;
using stock::Dataset;
using stock::None;
using stock::window;

kiln::Model dense_model() {
  const kiln::Tensor input = kiln::Input({None, window * 4}, kiln::DType::float32, "returns");
  kiln::Tensor h = kiln::Dense(40, "swish")(input);
  h = kiln::Dense(40, "swish")(h);
  return kiln::Model(input, kiln::Dense(2, "tanh")(h), "dense_only");
}

// A temporal convolution network: causal, dilated Conv1D layers see 1, 3 and 7 days back, so the last
// step's features summarize the recent past without looking ahead.
kiln::Model conv_model() {
  const kiln::Tensor input = kiln::Input({None, window * 4}, kiln::DType::float32, "returns");
  kiln::Tensor h = kiln::Reshape({window, 4})(input);
  for (const std::int64_t dilation : {1, 2, 4})
    h = kiln::Conv1D(16, 2, "swish", {{"padding", "causal"}, {"dilation_rate", dilation}})(h);
  h = kiln::Flatten()(h);
  h = kiln::Dense(40, "swish")(h);
  return kiln::Model(input, kiln::Dense(2, "tanh")(h), "causal_conv");
}

// With a checkpoint, the best epoch by validation loss so far is kept in that file as training goes.
kiln::History train(kiln::Model& model, const Dataset& data, int verbose, const std::string& csv_path,
                    const std::shared_ptr<kiln::ModelCheckpoint>& checkpoint = nullptr) {
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 1e-3}}), "mse");
  kiln::EarlyStopping::Options stopping;
  stopping.patience = 8;
  stopping.restore_best_weights = true;
  kiln::FitOptions options = kiln::FitOptions()
                                 .epochs(60)
                                 .batch_size(32)
                                 .validation_data(data.validation_x, data.validation_y)
                                 .seed(1)
                                 .verbose(verbose)
                                 .callback(std::make_shared<kiln::EarlyStopping>(stopping));
  if (!csv_path.empty()) options.callback(std::make_shared<kiln::CSVLogger>(csv_path));
  if (checkpoint) options.callback(checkpoint);
  return model.fit(data.train_x, data.train_y, options);
}

// The mean squared error of always predicting the training targets' mean.
double naive_mse(const Dataset& data) {
  const std::int64_t columns = data.train_y.shape()[1];
  std::vector<double> mean(static_cast<std::size_t>(columns), 0.0);
  for (std::size_t i = 0; i < data.train_y.size(); ++i)
    mean[i % static_cast<std::size_t>(columns)] += data.train_y.flat(i);
  for (double& m : mean) m /= static_cast<double>(data.train_y.shape()[0]);
  double total = 0.0;
  for (std::size_t i = 0; i < data.test_y.size(); ++i) {
    const double error = data.test_y.flat(i) - mean[i % static_cast<std::size_t>(columns)];
    total += error * error;
  }
  return total / static_cast<double>(data.test_y.size());
}

// 1234567 -> "1,234,567"
std::string with_commas(std::uintmax_t number) {
  std::string digits = std::to_string(number);
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<std::size_t>(at), ",");
  return digits;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string path = argc > 1 ? argv[1] : KILN_DATA_DIR "/eu_stock_markets.csv";
    const Dataset data = load(path);
    std::printf("%lld training, %lld validation and %lld test windows of %lld days\n\n",
                static_cast<long long>(data.train_x.shape()[0]), static_cast<long long>(data.validation_x.shape()[0]),
                static_cast<long long>(data.test_x.shape()[0]), static_cast<long long>(window));

    kiln::Model model = attention_model();
    model.summary();
    auto best_checkpoint = std::make_shared<kiln::ModelCheckpoint>("best.kiln", /*save_best_only=*/true);
    const kiln::History history = train(model, data, /*verbose=*/1, "history.csv", best_checkpoint);
    kiln::plot_history(history, "training.svg");  // every logged metric per epoch

    kiln::Model baseline = dense_model();
    train(baseline, data, /*verbose=*/0, "");
    kiln::Model convolution = conv_model();
    train(convolution, data, /*verbose=*/0, "");

    const double attention_mse = model.evaluate(data.test_x, data.test_y).at("loss");
    const double dense_mse = baseline.evaluate(data.test_x, data.test_y).at("loss");
    const double conv_mse = convolution.evaluate(data.test_x, data.test_y).at("loss");
    const double mean_mse = naive_mse(data);
    std::printf("\ntest MSE (targets scaled into [-1, 1]):\n");
    std::printf("  MHAttention model        %.5f\n", attention_mse);
    std::printf("  Dense-only model         %.5f\n", dense_mse);
    std::printf("  causal Conv1D model      %.5f\n", conv_mse);
    std::printf("  training-mean predictor  %.5f\n", mean_mse);
    const double best = std::min({attention_mse, dense_mse, conv_mse, mean_mse});
    std::printf("best: %s\n", best == attention_mse ? "the MHAttention model"
                              : best == dense_mse   ? "the Dense-only model"
                              : best == conv_mse    ? "the causal Conv1D model"
                                                    : "the training mean (no network beats it)");

    // Save, reload, and check that the file gives back exactly the model that was trained.
    const std::string saved = "stock_attention.kiln";
    model.save(saved);
    const kiln::Model reloaded = kiln::load_model(saved);
    const kiln::Array expected = model.predict(data.test_x), got = reloaded.predict(data.test_x);
    const auto windows = static_cast<long long>(data.test_x.shape()[0]);
    if (!got.bitwise_equal(expected)) {
      double largest = 0.0;
      for (std::size_t i = 0; i < expected.size(); ++i)
        largest = std::max(largest, std::fabs(got.flat(i) - expected.flat(i)));
      std::printf("saved %s; reloaded: predictions DIFFER on the test set (max |difference| %.3g)\n", saved.c_str(),
                  largest);
      return 2;
    }
    std::printf("saved %s (%s bytes); reloaded: predictions identical on %lld test windows\n", saved.c_str(),
                with_commas(std::filesystem::file_size(saved)).c_str(), windows);
    // EarlyStopping restored the best epoch's weights, which best.kiln holds as well.
    const kiln::Model best_epoch = kiln::load_model("best.kiln");
    std::printf("best.kiln: epoch %d, val_loss %.5f, %s\n", best_epoch.epochs_trained(), best_checkpoint->best(),
                best_epoch.predict(data.test_x).bitwise_equal(expected) ? "the weights EarlyStopping restored"
                                                                        : "not the weights EarlyStopping restored");
    std::printf("wrote history.csv, training.svg, %s and best.kiln\n", saved.c_str());
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "stock_attention: %s\n", error.what());
    return 1;
  }
  return 0;
}
