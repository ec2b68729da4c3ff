// kiln's own HDF5 reader on real files written by h5py/libhdf5 (data/keras), and on those files damaged,
// truncated and crafted: every failure is a SerializationError, never a crash, a hang or a huge allocation.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>

namespace fs = std::filesystem;
namespace hdf5 = kiln::detail::hdf5;
using kiln::Array;
using kiln::DType;
using kiln::Shape;

namespace {

std::string fixture(const std::string& name) {
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
  return kiln::detail::read_whole_file((root / "data" / "keras" / name).string());
}

// Reads everything reachable from the root once (each object at most once, so a crafted cycle ends), as a
// loader might: member names, every attribute as strings or numbers, every dataset's values.
std::size_t read_everything(const std::string& bytes) {
  const hdf5::File file(bytes, "test.h5");
  std::set<std::uint64_t> seen;
  std::size_t values = 0;
  std::function<void(const hdf5::Object&, int)> walk = [&](const hdf5::Object& object, int depth) {
    if (depth > 32 || !seen.insert(object.address()).second) return;
    for (const std::string& name : object.attribute_names()) {
      try {
        values += object.attribute_strings(name).size();
      } catch (const kiln::SerializationError&) {
        values += object.attribute_numbers(name).size();
      }
    }
    if (object.is_dataset()) values += object.read(DType::float64).size();
    if (object.is_group())
      for (const std::string& name : object.member_names()) walk(*object.find(name), depth + 1);
  };
  walk(file.root(), 0);
  return values;
}

// The offset of the first `signature` at or after `from`.
std::size_t find(const std::string& bytes, const std::string& signature, std::size_t from = 0) {
  const std::size_t at = bytes.find(signature, from);
  REQUIRE(at != std::string::npos);
  return at;
}

void put64(std::string& bytes, std::size_t at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>(value >> (8 * i));
}

// The dimensions of a dataset's dataspace message in a version 1 object header: its messages start 16
// bytes in, each an 8-byte header (type, size, flags) and data; the dataspace (type 1) lists its dims from
// byte 8 of its data.
std::size_t dataspace_dims(const std::string& bytes, std::uint64_t header) {
  std::size_t at = static_cast<std::size_t>(header) + 16;
  for (int message = 0; message < 32; ++message) {
    const auto type = static_cast<unsigned char>(bytes[at]) | static_cast<unsigned char>(bytes[at + 1]) << 8;
    const auto size = static_cast<unsigned char>(bytes[at + 2]) | static_cast<unsigned char>(bytes[at + 3]) << 8;
    if (type == 1) return at + 8 + 8;
    at += 8 + static_cast<std::size_t>(size);
  }
  FAIL("no dataspace message");
  return 0;
}

}  // namespace

TEST_CASE("hdf5 reader: groups, attributes and datasets of files h5py wrote", "[serialize][hdf5]") {
  const hdf5::File legacy(fixture("keras2/conv1d_k2_s1_d1_cl_same_model.h5"), "model.h5");
  const hdf5::Object root = legacy.root();
  CHECK(root.path() == "/");
  CHECK(root.is_group());
  CHECK_FALSE(root.is_dataset());
  // Variable-length strings (the global heap).
  CHECK(root.attribute_strings("keras_version") == std::vector<std::string>{"2.3.1"});
  CHECK(root.attribute_strings("model_config").at(0).rfind("{\"class_name\": \"Sequential\"", 0) == 0);
  // Fixed-length strings, NUL-padded: Keras 2's layer and weight names.
  const hdf5::Object weights = root.at("model_weights");
  CHECK(weights.attribute_strings("layer_names") == std::vector<std::string>{"conv0"});
  CHECK(weights.at("conv0").attribute_strings("weight_names") ==
        std::vector<std::string>{"conv0/kernel:0", "conv0/bias:0"});
  CHECK(weights.member_names() == std::vector<std::string>{"conv0"});
  const hdf5::Object kernel = weights.at("conv0/conv0/kernel:0");
  CHECK(kernel.path() == "/model_weights/conv0/conv0/kernel:0");
  CHECK(kernel.is_dataset());
  CHECK(kernel.dataset_is_float());
  CHECK(kernel.dataset_shape() == Shape{2, 3, 4});
  const Array values32 = kernel.read(DType::float32), values64 = kernel.read(DType::float64);
  REQUIRE(values32.size() == 24);
  for (std::size_t i = 0; i < 24; ++i) CHECK(values64.flat(i) == values32.flat(i));  // float32 data, widened exactly
  CHECK_FALSE(root.find("model_weights/conv1"));
  CHECK_FALSE(root.has_attribute("nothing"));
  CHECK_THROWS_WITH(root.at("missing/group"), Catch::Contains("no object '/missing/group'"));
  CHECK_THROWS_WITH(root.attribute_strings("nothing"), Catch::Contains("has no attribute 'nothing'"));
  CHECK_THROWS_WITH(kernel.attribute_strings("x"), Catch::Contains("has no attribute 'x'"));
  CHECK_THROWS_WITH(kernel.member_names(), Catch::Contains("is not a group"));
  CHECK_THROWS_WITH(root.dataset_shape(), Catch::Contains("is not a dataset"));

  // Integer datasets and numeric attributes (Keras 3's io files: token ids are int32).
  const hdf5::File io(fixture("keras3/embedding_gap.io.h5"), "io.h5");
  const hdf5::Object tokens = io.root().at("inputs/input_0");
  CHECK_FALSE(tokens.dataset_is_float());
  const std::vector<double> ids = tokens.read_numbers();
  REQUIRE_FALSE(ids.empty());
  for (const double id : ids) CHECK(id == std::floor(id));
  CHECK(tokens.attribute_numbers("index") == std::vector<double>{0.0});
  CHECK(read_everything(fixture("keras3/cnn2d_bn_pool.legacy.h5")) > 0);
}

TEST_CASE("hdf5 reader: truncated and bit-flipped files are refused or read, never a crash", "[serialize][hdf5]") {
  const std::string original = fixture("keras3/seq_dense_mlp.legacy.h5");
  const std::size_t total = read_everything(original);
  std::size_t refused = 0, read = 0;
  for (std::size_t length = 0; length < original.size(); length += 61) {
    try {
      read_everything(original.substr(0, length));
      ++read;
    } catch (const kiln::SerializationError&) {
      ++refused;
    }
  }
  CHECK(refused > 0);
  kiln::Rng rng(5);
  for (int trial = 0; trial < 1500; ++trial) {
    std::string damaged = original;
    const int flips = 1 + static_cast<int>(rng.uniform(0.0, 4.0));
    for (int f = 0; f < flips; ++f) {
      const auto at = static_cast<std::size_t>(rng.uniform(0.0, static_cast<double>(damaged.size())));
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << static_cast<int>(rng.uniform(0.0, 8.0))));
    }
    try {
      read += read_everything(damaged) == total;
    } catch (const kiln::SerializationError&) {
      ++refused;
    }
  }
  CHECK(read > 0);
}

TEST_CASE("hdf5 reader: crafted structures are refused with a reason", "[serialize][hdf5]") {
  const std::string original = fixture("keras3/seq_dense_mlp.legacy.h5");

  SECTION("a group B-tree that points to itself") {
    std::string crafted = original;
    const std::size_t tree = find(crafted, "TREE");
    crafted[tree + 5] = 1;            // level 1: its child is another B-tree node...
    put64(crafted, tree + 32, tree);  // ...which is itself
    CHECK_THROWS_WITH(read_everything(crafted), Catch::Contains("a group B-tree that refers to itself"));
  }
  SECTION("a symbol table node whose member is the root again: read once, no endless walk") {
    std::string crafted = original;
    const hdf5::File file(original, "x");
    const std::size_t node = find(crafted, "SNOD");
    put64(crafted, node + 8 + 8, file.root().address());  // the first entry's object header
    CHECK_NOTHROW(read_everything(crafted));
    const hdf5::File cyclic(crafted, "cyclic.h5");
    const std::string first = cyclic.root().member_names().front();
    CHECK(cyclic.root().at(first).address() == cyclic.root().address());
    CHECK(cyclic.root().find_path(first + "/" + first + "/" + first)->address() == cyclic.root().address());
  }
  SECTION("a member name without its terminating NUL") {
    std::string crafted = original;
    const std::size_t heap = find(crafted, "HEAP");
    std::uint64_t size = 0, data = 0;
    std::memcpy(&size, crafted.data() + heap + 8, 8);
    std::memcpy(&data, crafted.data() + heap + 24, 8);
    for (std::uint64_t i = 0; i < size; ++i) crafted[static_cast<std::size_t>(data + i)] = 'x';
    CHECK_THROWS_WITH(read_everything(crafted), Catch::Contains("without its terminating NUL"));
  }
  SECTION("a dataset declaring 2^40 elements: refused before any allocation") {
    std::string crafted = original;
    const hdf5::File file(original, "x");
    const hdf5::Object bias = file.root().at("model_weights/dense_relu/seq_dense_mlp/dense_relu/bias");
    put64(crafted, dataspace_dims(crafted, bias.address()), std::uint64_t{1} << 40);
    const hdf5::File huge(crafted, "huge.h5");
    const hdf5::Object dataset = huge.root().at("model_weights/dense_relu/seq_dense_mlp/dense_relu/bias");
    CHECK(dataset.dataset_shape() == Shape{std::int64_t{1} << 40});
    CHECK_THROWS_WITH(dataset.read(DType::float32), Catch::Contains("declares more data than it holds"));
  }
  SECTION("a global heap object that is not there") {
    // Every object of every collection renumbered: each object is its index (2 bytes), a reference count (2),
    // 4 reserved bytes, its size (8) and its data padded to 8 bytes; index 0 starts the free space.
    std::string crafted = original;
    for (std::size_t heap = crafted.find("GCOL"); heap != std::string::npos; heap = crafted.find("GCOL", heap + 4)) {
      std::uint64_t collection_size = 0;
      std::memcpy(&collection_size, crafted.data() + heap + 8, 8);
      for (std::size_t at = heap + 16; at + 16 <= heap + collection_size && crafted[at] != 0;) {
        std::uint64_t size = 0;
        std::memcpy(&size, crafted.data() + at + 8, 8);
        crafted[at + 1] = 0x70;  // index + 0x7000
        at += 16 + static_cast<std::size_t>((size + 7) / 8 * 8);
      }
    }
    CHECK_THROWS_WITH(hdf5::File(crafted, "x").root().attribute_strings("model_config"),
                      Catch::Contains("does not exist"));
  }
  SECTION("not HDF5 at all") {
    CHECK_THROWS_WITH(hdf5::File("just text", "notes.txt"), Catch::Contains("notes.txt: not a readable HDF5 file"));
    CHECK_FALSE(hdf5::looks_like_hdf5("PK\x03\x04"));
    CHECK(hdf5::looks_like_hdf5(original));
  }
}
