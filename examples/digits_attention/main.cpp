// Handwritten digits with attention: each 8×8 image is read as a sequence of 8 rows of 8 pixels, the
// rows attend to each other, and a softmax classifies the result. Held-out test: 20 %.
// Data: data/digits.csv (UCI optical digits, as in scikit-learn's load_digits; see data/README.md).
#include <kiln/kiln.hpp>

#include <cstdio>
#include <string>

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

int main(int argc, char** argv) {
  constexpr std::int64_t None = kiln::Shape::unknown;
  try {
    kiln::CsvOptions options;
    options.header = kiln::CsvHeader::absent;
    const kiln::Array table = kiln::read_csv(argc > 1 ? argv[1] : KILN_DATA_DIR "/digits.csv", options).values;
    const std::int64_t samples = table.shape()[0];
    kiln::Array pixels({samples, 64}), labels({samples});
    for (std::int64_t r = 0; r < samples; ++r) {
      for (std::int64_t c = 0; c < 64; ++c)
        pixels.set_flat(static_cast<std::size_t>(r * 64 + c), table.flat(static_cast<std::size_t>(r * 65 + c)) / 16.0);
      labels.set_flat(static_cast<std::size_t>(r), table.flat(static_cast<std::size_t>(r * 65 + 64)));
    }
    // The same seed shuffles images and labels alike, so they stay paired.
    const std::vector<kiln::Array> x = kiln::shuffled_split_rows(pixels, {0.8, 0.2}, 2024);
    const std::vector<kiln::Array> y = kiln::shuffled_split_rows(labels, {0.8, 0.2}, 2024);

    const kiln::Tensor image = kiln::Input({None, 64}, kiln::DType::float32, "pixels");
    const kiln::Tensor rows = kiln::Dense(32)(kiln::Reshape({8, 8})(image));  // each row of pixels, embedded
    const kiln::Tensor attended = kiln::MultiHeadAttention(4, 8)(rows, rows);
    const kiln::Tensor encoded = kiln::LayerNormalization()(kiln::Add()({rows, attended}));
    // Attention and pooling both ignore the order of the rows; flattening keeps which row is which.
    const kiln::Tensor features = kiln::Flatten()(kiln::Dense(16, "relu")(encoded));
    kiln::Model model(image, kiln::Dense(10, "softmax")(kiln::Dropout(0.3)(features)), "digits_attention");
    model.summary();

    model.compile(kiln::create_optimizer("adam", {{"learning_rate", 3e-3}}), "sparse_categorical_crossentropy",
                  {"accuracy"});
    kiln::EarlyStopping::Options stopping;
    stopping.patience = 6;
    stopping.restore_best_weights = true;
    model.fit(x[0], y[0],
              kiln::FitOptions().epochs(40).batch_size(32).validation_split(0.1).seed(7).callback(
                  std::make_shared<kiln::EarlyStopping>(stopping)));
    const kiln::Logs test = model.evaluate(x[1], y[1]);
    std::printf("\ntest accuracy on %lld held-out images: %.2f %%\n", static_cast<long long>(x[1].shape()[0]),
                100.0 * test.at("accuracy"));
    return test.at("accuracy") >= 0.95 ? 0 : 1;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "digits_attention: %s\n", error.what());
    return 1;
  }
}
