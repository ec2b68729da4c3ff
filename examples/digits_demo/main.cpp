// The first thing `make demo` shows: a small CNN against the baselines a sceptic would try first, on real
// data held out from training. 1,797 handwritten digits (8×8 pixels, UCI's optical digits as scikit-learn's
// load_digits has them), 20 % held out, stratified by class:
//   - always guessing the most common class of the training set,
//   - the nearest class mean (each class's average image; the closest one in squared pixel distance),
//   - a linear model (softmax regression: Flatten, then Dense(10, "softmax"), trained by kiln),
//   - the CNN: two 3×3 convolutions, batch normalization, max pooling and dropout.
// It prints their held-out accuracy and mistakes, the CNN's confusion matrix, saves the CNN, reloads it and
// checks that the file predicts bit for bit what the trained model does, and plots the training curves.
// Writes digits_cnn.kiln, digits_history.csv, digits_training.svg and digits_cnn.dot in the current folder.
#include <kiln/kiln.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;

struct Digits {
  kiln::Array train_x, test_x;  // (rows, 8, 8, 1), pixels in [0, 1]
  kiln::Array train_y, test_y;  // (rows,), class ids 0 to 9
};

Digits load(const std::string& path) {
  kiln::CsvOptions options;
  options.header = kiln::CsvHeader::absent;
  options.label_indices = {-1};  // the last column is the digit
  const kiln::CsvTable table = kiln::read_csv(path, options);
  const std::int64_t rows = table.values.shape()[0];
  kiln::Array pixels({rows, 8, 8, 1});
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels.set_flat(i, table.values.flat(i) / 16.0);
  // 20 % held out, each digit in its share (train_test_split takes read_csv's (rows, 1) labels as they are).
  const std::vector<kiln::Array> parts =
      kiln::train_test_split({pixels, table.labels.reshape({rows})}, 0.2, /*seed=*/2024, table.labels);
  return {parts[0], parts[1], parts[2], parts[3]};
}

double accuracy(const kiln::Array& predicted, const kiln::Array& truth) {
  std::int64_t right = 0;
  for (std::size_t i = 0; i < truth.size(); ++i) right += predicted.flat(i) == truth.flat(i);
  return static_cast<double>(right) / static_cast<double>(truth.size());
}

// Guessing the training set's most common class for every image.
kiln::Array majority_class(const Digits& data) {
  std::vector<std::int64_t> counts(10, 0);
  for (std::size_t i = 0; i < data.train_y.size(); ++i) ++counts[static_cast<std::size_t>(data.train_y.flat(i))];
  std::size_t best = 0;
  for (std::size_t c = 1; c < counts.size(); ++c)
    if (counts[c] > counts[best]) best = c;
  return kiln::Array::full({data.test_y.shape()[0]}, static_cast<double>(best));
}

// The class whose mean training image is nearest (squared pixel distance).
kiln::Array nearest_class_mean(const Digits& data) {
  std::vector<double> means(10 * 64, 0.0), counts(10, 0.0);
  for (std::int64_t r = 0; r < data.train_x.shape()[0]; ++r) {
    const auto c = static_cast<std::size_t>(data.train_y.flat(static_cast<std::size_t>(r)));
    counts[c] += 1.0;
    for (std::size_t p = 0; p < 64; ++p) means[c * 64 + p] += data.train_x.flat(static_cast<std::size_t>(r) * 64 + p);
  }
  for (std::size_t i = 0; i < means.size(); ++i) means[i] /= counts[i / 64];
  kiln::Array predicted({data.test_x.shape()[0]});
  for (std::int64_t r = 0; r < data.test_x.shape()[0]; ++r) {
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < 10; ++c) {
      double distance = 0.0;
      for (std::size_t p = 0; p < 64; ++p) {
        const double d = data.test_x.flat(static_cast<std::size_t>(r) * 64 + p) - means[c * 64 + p];
        distance += d * d;
      }
      if (distance < best) {
        best = distance;
        predicted.set_flat(static_cast<std::size_t>(r), static_cast<double>(c));
      }
    }
  }
  return predicted;
}

kiln::History train(kiln::Sequential& model, const Digits& data, int verbose, double learning_rate, int epochs,
                    const std::string& csv_path = "") {
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", learning_rate}}), "sparse_categorical_crossentropy",
                {"accuracy"});
  kiln::EarlyStopping::Options stopping;
  stopping.patience = 5;
  stopping.restore_best_weights = true;
  kiln::FitOptions options =
      kiln::FitOptions().epochs(epochs).batch_size(32).validation_split(0.1).seed(7).verbose(verbose).callback(
          std::make_shared<kiln::EarlyStopping>(stopping));
  if (!csv_path.empty()) options.callback(std::make_shared<kiln::CSVLogger>(csv_path));
  return model.fit(data.train_x, data.train_y, options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Digits data = load(argc > 1 ? argv[1] : KILN_DATA_DIR "/digits.csv");
    const auto test_rows = static_cast<long long>(data.test_y.shape()[0]);
    std::printf("handwritten digits: %lld training and %lld held-out images of 8x8 pixels\n\n",
                static_cast<long long>(data.train_y.shape()[0]), test_rows);

    kiln::Sequential cnn(
        {kiln::Input({None, 8, 8, 1}), kiln::Conv2D(32, 3, "", {{"padding", "same"}}), kiln::BatchNormalization(),
         kiln::Activation("relu"), kiln::Conv2D(64, 3, "relu", {{"padding", "same"}}), kiln::MaxPooling2D(),
         kiln::Dropout(0.25), kiln::Flatten(), kiln::Dense(64, "relu"), kiln::Dropout(0.3), kiln::Dense(10, "softmax")},
        "digits_cnn");
    cnn.summary();
    const kiln::History history = train(cnn, data, /*verbose=*/1, 2e-3, 40, "digits_history.csv");
    kiln::plot_history(history, "digits_training.svg");

    kiln::Sequential linear({kiln::Input({None, 8, 8, 1}), kiln::Flatten(), kiln::Dense(10, "softmax")},
                            "softmax_regression");
    train(linear, data, /*verbose=*/0, 1e-2, 200);  // more steps: a linear model learns more slowly

    const kiln::Array cnn_classes = kiln::argmax(cnn.predict(data.test_x));
    struct Row {
      const char* name;
      double accuracy;
    };
    const std::vector<Row> rows = {
        {"the CNN (kiln)", accuracy(cnn_classes, data.test_y)},
        {"linear model (kiln)", accuracy(kiln::argmax(linear.predict(data.test_x)), data.test_y)},
        {"nearest class mean", accuracy(nearest_class_mean(data), data.test_y)},
        {"most common class", accuracy(majority_class(data), data.test_y)},
    };
    std::printf("\nheld-out accuracy on %lld images:\n", test_rows);
    for (const Row& row : rows)
      std::printf("  %-22s %6.2f %%   %3lld mistakes\n", row.name, 100.0 * row.accuracy,
                  static_cast<long long>((1.0 - row.accuracy) * static_cast<double>(test_rows) + 0.5));

    // Which digits the CNN takes for which: rows are the true digit, columns the CNN's answer.
    const kiln::Array confusion = kiln::confusion_matrix(data.test_y, cnn_classes, 10);
    std::printf("\nthe CNN's confusion matrix (row: the digit, column: the CNN's answer)\n     ");
    for (int c = 0; c < 10; ++c) std::printf("%4d", c);
    std::printf("\n");
    for (int r = 0; r < 10; ++r) {
      std::printf("  %d  ", r);
      for (int c = 0; c < 10; ++c) {
        const auto count = static_cast<long long>(confusion.flat(static_cast<std::size_t>(r * 10 + c)));
        if (count == 0 && r != c)
          std::printf("   .");
        else
          std::printf("%4lld", count);
      }
      std::printf("\n");
    }

    // Saved, reloaded, and the file predicts exactly what the trained model does.
    cnn.save("digits_cnn.kiln");
    const kiln::Model reloaded = kiln::load_model("digits_cnn.kiln");
    const bool same = reloaded.predict(data.test_x).bitwise_equal(cnn.predict(data.test_x));
    std::printf("\nsaved digits_cnn.kiln; reloaded, it predicts the held-out images %s\n",
                same ? "bit for bit as the trained model" : "DIFFERENTLY");
    std::ofstream("digits_cnn.dot") << kiln::model_to_dot(reloaded);
    std::printf("wrote digits_history.csv, digits_training.svg (the training curves) and digits_cnn.dot\n\n");
    const bool cnn_wins = rows[0].accuracy > rows[1].accuracy && rows[0].accuracy >= 0.95;
    return same && cnn_wins ? 0 : 1;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "digits_demo: %s\n", error.what());
    return 1;
  }
}
