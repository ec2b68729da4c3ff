// Handwritten digits with a small CNN, as a Keras user would write it: two 3×3 convolutions, batch
// normalization, max pooling and dropout, then a softmax. Each 8×8 image is one channel. Held-out test:
// 20 %, the same split as digits_attention, so their accuracies compare. The trained model is saved,
// reloaded, and must predict bitwise the same.
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
    kiln::Array pixels({samples, 8, 8, 1}), labels({samples});
    for (std::int64_t r = 0; r < samples; ++r) {
      for (std::int64_t c = 0; c < 64; ++c)
        pixels.set_flat(static_cast<std::size_t>(r * 64 + c), table.flat(static_cast<std::size_t>(r * 65 + c)) / 16.0);
      labels.set_flat(static_cast<std::size_t>(r), table.flat(static_cast<std::size_t>(r * 65 + 64)));
    }
    // The same seed shuffles images and labels alike, so they stay paired.
    const std::vector<kiln::Array> x = kiln::shuffled_split_rows(pixels, {0.8, 0.2}, 2024);
    const std::vector<kiln::Array> y = kiln::shuffled_split_rows(labels, {0.8, 0.2}, 2024);

    kiln::Sequential model({kiln::Conv2D(32, 3, "", {{"padding", "same"}}), kiln::BatchNormalization(),
                            kiln::Activation("relu"), kiln::Conv2D(64, 3, "relu", {{"padding", "same"}}),
                            kiln::MaxPooling2D(), kiln::Dropout(0.25), kiln::Flatten(), kiln::Dense(64, "relu"),
                            kiln::Dropout(0.3), kiln::Dense(10, "softmax")},
                           "digits_cnn");
    model.build({None, 8, 8, 1});
    model.summary();

    model.compile(kiln::create_optimizer("adam", {{"learning_rate", 2e-3}}), "sparse_categorical_crossentropy",
                  {"accuracy"});
    kiln::EarlyStopping::Options stopping;
    stopping.patience = 5;
    stopping.restore_best_weights = true;
    model.fit(x[0], y[0],
              kiln::FitOptions().epochs(30).batch_size(32).validation_split(0.1).seed(7).callback(
                  std::make_shared<kiln::EarlyStopping>(stopping)));
    const kiln::Logs test = model.evaluate(x[1], y[1]);
    std::printf("\ntest accuracy on %lld held-out images: %.2f %%\n", static_cast<long long>(x[1].shape()[0]),
                100.0 * test.at("accuracy"));

    const std::string path = argc > 2 ? argv[2] : "digits_cnn.kiln";
    model.save(path);
    kiln::Model reloaded = kiln::load_model(path);
    const bool same = reloaded.predict(x[1]).bitwise_equal(model.predict(x[1]));
    std::printf("saved to %s and reloaded: predictions %s\n", path.c_str(), same ? "identical" : "DIFFER");
    return test.at("accuracy") >= 0.95 && same ? 0 : 1;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "digits_cnn: %s\n", error.what());
    return 1;
  }
}
