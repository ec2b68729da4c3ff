// Keras's bfloat16 policies in Keras files: the policies in config.json, a "bfloat16" layer's variables stored as
// Keras's H5IOStore stores them (h5py's two-byte opaque type, attribute dtype="bfloat16"), read back exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/hdf5_writer.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/saving.hpp>

#include "support/temp_dir.hpp"

namespace hdf5 = kiln::detail::hdf5;
using kiln::Array;
using kiln::Config;
using kiln::DType;

namespace {
kiln::Model mixed_model() {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 12}, DType::float32, "x");
  const kiln::Tensor h =
      kiln::Dense(16, "relu", {{"name", "stored_bf16"}, {"dtype", "bfloat16"}, {"bias_initializer", "random_normal"}})(x);
  const kiln::Tensor y = kiln::Dense(3, "", {{"name", "mixed"}, {"dtype", "mixed_bfloat16"}})(h);
  return kiln::Model(x, kiln::Dense(2, "", {{"name", "plain"}, {"dtype", "float32"}})(y), "bf16_model");
}
}  // namespace

TEST_CASE("a .keras file keeps bfloat16 policies and stores bfloat16 variables as Keras does",
          "[serialize][keras][bfloat16]") {
  kiln::testing::TempDir folder;
  kiln::Model model = mixed_model();
  const std::string path = folder.file("bf16.keras");
  model.save(path);

  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader zip(bytes, path);
  const Config config = kiln::parse_json(zip.read("config.json", 1 << 20));
  std::vector<std::string> policies;
  for (const Config& layer : config.at("config").at("layers").as_list()) {
    if (layer.get_string("class_name") != "Dense") continue;
    const Config& policy = layer.at("config").at("dtype");
    CHECK(policy.get_string("class_name") == "DTypePolicy");
    CHECK(policy.get_string("module") == "keras");
    policies.push_back(policy.at("config").get_string("name"));
  }
  CHECK(policies == std::vector<std::string>{"bfloat16", "mixed_bfloat16", "float32"});

  const std::string weights_bytes = zip.read("model.weights.h5", 1 << 24);
  const hdf5::File weights(weights_bytes, "model.weights.h5");
  const hdf5::Object kernel = weights.root().at("layers/dense/vars/0");
  CHECK(kernel.dataset_is_bfloat16());
  CHECK(kernel.attribute_strings("dtype") == std::vector<std::string>{"bfloat16"});
  CHECK(weights.root().at("layers/dense/vars/1").dataset_is_bfloat16());
  CHECK_FALSE(weights.root().at("layers/dense_1/vars/0").dataset_is_bfloat16());  // mixed: float32 variables
  // (Keras names the groups by attribute: dense, dense_1, ...) The stored values are the variables' (bfloat16 already), exactly.
  CHECK(kernel.read(DType::float32).bitwise_equal(model.get_layer("stored_bf16")->weights()[0].value));

  kiln::Model again = kiln::load_model(path);
  CHECK(again.get_layer("stored_bf16")->policy_name() == "bfloat16");
  CHECK(again.get_layer("mixed")->policy_name() == "mixed_bfloat16");
  const std::vector<Array> before = model.get_weights(), after = again.get_weights();
  REQUIRE(before.size() == after.size());
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(before[i].bitwise_equal(after[i]));
  Array x({5, 12}, DType::float32);
  for (std::size_t i = 0; i < x.size(); ++i) x.set_flat(i, std::sin(0.37 * static_cast<double>(i)));
  CHECK(model.predict(x).bitwise_equal(again.predict(x)));
  // kiln's own file keeps them too.
  model.save(folder.file("bf16.kiln"));
  kiln::Model native = kiln::load_model(folder.file("bf16.kiln"));
  CHECK(native.get_layer("stored_bf16")->policy_name() == "bfloat16");
  CHECK(native.get_weights()[0].bitwise_equal(before[0]));
}

TEST_CASE("an opaque dataset that is not Keras's bfloat16 is refused by name", "[serialize][hdf5][bfloat16]") {
  const Array values = Array::full({3}, 1.5).astype(DType::float32);
  std::string bytes;
  {  // (a builder holds libhdf5 for its life: one at a time)
    kiln::detail::Hdf5Builder file;
    file.bfloat16_dataset("weights", values);
    bytes = file.bytes();
  }
  {
    const hdf5::File read(bytes, "bf16.h5");
    CHECK(read.root().at("weights").read(DType::float32).bitwise_equal(values));
  }
  // The same bytes with the attribute's value changed: an opaque dataset Keras would not read as bfloat16.
  for (std::size_t at = bytes.find("bfloat16"); at != std::string::npos; at = bytes.find("bfloat16", at + 1))
    bytes[at + 7] = '7';
  const hdf5::File changed(bytes, "changed.h5");
  CHECK_THROWS_WITH(changed.root().at("weights").read(DType::float32),
                    Catch::Contains("weights") && Catch::Contains("bfloat17"));
  CHECK_THROWS_AS(kiln::detail::Hdf5Builder().bfloat16_dataset("x", Array::full({3}, 1.5).astype(DType::float64)),
                  kiln::Error);
}
