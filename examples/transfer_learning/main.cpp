// Fine-tuning a Keras application in C++, as Keras's transfer-learning guide does it in Python:
//   1. read a keras.applications model from the .keras file Keras saved (data/keras/apps/app_resnet.keras:
//      a small ResNet, the architecture of keras.applications.ResNet50 with fewer blocks, made by Keras 3.16
//      with weights=None; data/keras/README.md says how),
//   2. take it without its classifier (keras.Model(model.inputs, model.get_layer("avg_pool").output)),
//      freeze it (its BatchNormalization layers then run in inference mode, as in Keras) and put a new head
//      on it for the ten digits,
//   3. train the head on the handwritten digits (8×8 pixels, resized to the model's 40×40×3 input),
//   4. unfreeze the top block's convolutions (batch normalization stays frozen, as the guide advises) and
//      train again with a learning rate 100× lower,
//   5. save the result as .keras (Keras reads it) and check the file predicts what the model does.
// The file's weights are Keras's random initial ones (ImageNet's would be 100 MB): what the frozen base
// gives is random convolutional features, which the head (standardization, dropout, softmax) still
// learns to read.
// Writes digits_resnet.keras in the current folder.
#include <kiln/kiln.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;
constexpr std::int64_t kSide = 40;  // the application's input: (40, 40, 3)

struct Digits {
  kiln::Array train_x, test_x;  // (rows, 40, 40, 3)
  kiln::Array train_y, test_y;  // (rows,), class ids 0 to 9
};

// Each 8×8 digit (0 to 16) scaled to [0, 1], enlarged 5× by repeating pixels, in three equal channels.
kiln::Array resized(const kiln::Array& pixels) {
  const std::int64_t rows = pixels.shape()[0], scale = kSide / 8;
  kiln::Array images({rows, kSide, kSide, 3});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t y = 0; y < kSide; ++y)
      for (std::int64_t x = 0; x < kSide; ++x) {
        const double value = pixels.flat(static_cast<std::size_t>(r * 64 + (y / scale) * 8 + x / scale)) / 16.0;
        for (std::int64_t c = 0; c < 3; ++c)
          images.set_flat(static_cast<std::size_t>(((r * kSide + y) * kSide + x) * 3 + c), value);
      }
  return images;
}

Digits load(const std::string& path) {
  kiln::CsvOptions options;
  options.header = kiln::CsvHeader::absent;
  options.label_indices = {-1};
  const kiln::CsvTable table = kiln::read_csv(path, options);
  const std::int64_t rows = table.values.shape()[0];
  const std::vector<kiln::Array> parts =
      kiln::train_test_split({resized(table.values), table.labels.reshape({rows})}, 0.2, /*seed=*/2024, table.labels);
  return {parts[0], parts[1], parts[2], parts[3]};
}

double accuracy(kiln::Model& model, const Digits& data) {
  const kiln::Array predicted = kiln::argmax(model.predict(data.test_x));
  std::int64_t right = 0;
  for (std::size_t i = 0; i < predicted.size(); ++i) right += predicted.flat(i) == data.test_y.flat(i);
  return static_cast<double>(right) / static_cast<double>(predicted.size());
}

bool starts_with(const std::string& text, const std::string& start) { return text.rfind(start, 0) == 0; }

}  // namespace

int main(int argc, char** argv) {
  try {
    const Digits data = load(argc > 1 ? argv[1] : KILN_DATA_DIR "/digits.csv");
    kiln::Model resnet = kiln::load_keras_model(KILN_DATA_DIR "/keras/apps/app_resnet.keras");

    // The application without its classifier, frozen, under a new head.
    kiln::Model base(resnet->up_to("avg_pool"));
    base.set_trainable(false);
    kiln::Tensor image = kiln::Input({None, kSide, kSide, 3});
    // Random features vary little between images next to their means: the head standardizes them with
    // their mean and variance over the training images (Keras's Normalization layer, adapted).
    kiln::Normalization standardize;
    standardize.adapt(base.predict(data.train_x));
    kiln::Tensor features = standardize(base(image));
    kiln::Tensor dropped = kiln::Dropout(0.2)(features);
    kiln::Model model(image, kiln::Dense(10, "softmax")(dropped), "digits_resnet");
    model.summary();

    const kiln::FitOptions options = kiln::FitOptions().batch_size(32).validation_split(0.1).seed(7).verbose(2);
    model.compile(kiln::create_optimizer("adam", {{"learning_rate", 1e-2}}), "sparse_categorical_crossentropy",
                  {"accuracy"});
    std::printf("\ntraining the new head (%zu trainable weights; the ResNet frozen):\n",
                model.trainable_weights().size());
    model.fit(data.train_x, data.train_y, kiln::FitOptions(options).epochs(8));
    const double head_only = accuracy(model, data);

    // Keras's pattern: the base trainable again, then everything but the top block's convolutions frozen.
    base.set_trainable(true);
    for (const kiln::LayerPtr& layer : base.layers())
      if (!starts_with(layer->name(), "conv3_block2") || layer->class_name() == "BatchNormalization")
        layer->set_trainable(false);
    model.compile(kiln::create_optimizer("adam", {{"learning_rate", 1e-4}}), "sparse_categorical_crossentropy",
                  {"accuracy"});
    std::printf("\nfine-tuning the top block too (%zu trainable weights):\n", model.trainable_weights().size());
    model.fit(data.train_x, data.train_y, kiln::FitOptions(options).epochs(4));
    const double fine_tuned = accuracy(model, data);

    model.save("digits_resnet.keras");
    const kiln::Model reloaded = kiln::load_keras_model("digits_resnet.keras");
    const bool same = reloaded.predict(data.test_x).bitwise_equal(model.predict(data.test_x));
    std::printf("\nheld-out accuracy on %lld digits: %.2f %% with the new head, %.2f %% fine-tuned\n",
                static_cast<long long>(data.test_y.shape()[0]), 100.0 * head_only, 100.0 * fine_tuned);
    std::printf("saved digits_resnet.keras; read back, it predicts %s\n",
                same ? "the same, bit for bit" : "DIFFERENTLY (a bug)");
    return same ? 0 : 1;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "transfer_learning: %s\n", error.what());
    return 1;
  }
}
