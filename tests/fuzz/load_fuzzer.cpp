// libFuzzer target for kiln's file loader (`make fuzz`, scripts/fuzz.sh). The first byte of an input picks
// what the rest is fed to:
//   0  the whole file, as is: load_model, then verify_file (the frame and its checksums stop most mutations)
//   1  the config JSON behind the checksums: parse_json, then model_from_config (allocations bounded)
//   2  a weights / optimizer-state section behind the checksums: detail::read_arrays
//   3  the frame alone: detail::read_container
//   4  the whole file with its header and section checksums recomputed first, so mutations of the config,
//      weights, optimizer state and metadata reach load_model's later steps (weights assigned by name,
//      compile_config, the optimizer's slots, epochs_trained) instead of stopping at a CRC mismatch
//   5  a Keras 3 .keras archive: load_keras_model, then verify_keras_file (libzip, the config, the weights)
//   6  an HDF5 file: kiln's HDF5 reader walks every group, attribute and dataset, then the file is loaded
//      as a legacy Keras .h5 (seeds: legacy files, and the model.weights.h5 of .keras archives)
// (the byte is taken modulo 7). Mode 1 reads Keras configs too: its seeds include config.json files. kiln::Error is the
// one expected outcome of bad input: any other exception, crash, leak or sanitizer report is a finding. When a model
// loads (modes 0, 1, 4) it also runs predict on a zero batch of one, if its single input has a small, known shape.
//
// `kiln_load_fuzzer --make-corpus DIR` writes a seed corpus (saved models of several kinds, in every mode)
// into DIR and exits.
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;
constexpr unsigned kModes = 7;
constexpr std::size_t kHeaderSize = 20;
constexpr std::size_t kSectionHeaderSize = 16;

// One path per process, reused by every input (libFuzzer's -jobs/-fork workers are separate processes).
// The file is removed after each input, so only a crash leaves it behind.
const std::string& temp_path() {
  static const std::string path = "/tmp/kiln_fuzz_" + std::to_string(::getpid()) + ".kiln";
  return path;
}

void write_temp(std::string_view bytes) {
  std::FILE* file = std::fopen(temp_path().c_str(), "wb");
  if (!file) {
    std::perror("kiln_load_fuzzer: cannot write the temporary file");
    std::abort();
  }
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) std::abort();
  std::fclose(file);
}

// Exercises a loaded model when that is cheap: one input, every dim known but the batch, < 1e5 elements.
void try_predict(const kiln::Model& model) {
  if (model->num_inputs() != 1) return;
  const kiln::Shape shape = model->input_shapes().front();
  if (shape.rank() == 0) return;
  std::int64_t elements = 1;
  std::vector<std::int64_t> dims = shape.dims();
  for (std::size_t axis = 0; axis < dims.size(); ++axis) {
    if (axis == 0 && dims[axis] == None) dims[axis] = 1;
    if (dims[axis] < 0) return;
    if (axis == 0 && dims[axis] != 1) return;  // a fixed batch size other than 1
    if (dims[axis] != 0 && elements > 100000 / dims[axis]) return;
    elements *= dims[axis];
  }
  if (elements >= 100000) return;
  kiln::detail::AllocationLimit limit(256u << 20, "fuzz predict");
  model.predict(kiln::Array(kiln::Shape(dims)), 1);
}

void load_file(std::string_view bytes) {
  write_temp(bytes);
  try {
    kiln::Model model = kiln::load_model(temp_path());
    try_predict(model);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::verify_file(temp_path());
  } catch (const kiln::Error&) {
  }
  std::remove(temp_path().c_str());
}

void load_keras(std::string_view bytes) {
  write_temp(bytes);
  try {
    kiln::Model model = kiln::load_keras_model(temp_path());
    try_predict(model);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::verify_keras_file(temp_path());
  } catch (const kiln::Error&) {
  }
  std::remove(temp_path().c_str());
}

// Every group, attribute and dataset, each object once, as a loader might read them.
void walk_hdf5(const kiln::detail::hdf5::Object& object, std::vector<std::uint64_t>& seen, int depth) {
  if (depth > 32 || std::find(seen.begin(), seen.end(), object.address()) != seen.end()) return;
  seen.push_back(object.address());
  for (const std::string& name : object.attribute_names()) {
    try {
      object.attribute_strings(name);
    } catch (const kiln::Error&) {
      object.attribute_numbers(name);
    }
  }
  if (object.is_dataset()) object.read(kiln::DType::float32);
  if (object.is_group())
    for (const std::string& name : object.member_names()) walk_hdf5(*object.find(name), seen, depth + 1);
}

void read_hdf5(std::string_view bytes) {
  try {
    const kiln::detail::hdf5::File file{std::string(bytes), "fuzz.h5"};
    std::vector<std::uint64_t> seen;
    walk_hdf5(file.root(), seen, 0);
  } catch (const kiln::Error&) {
  }
  load_keras(bytes);
}

std::uint32_t crc_of(std::string_view bytes, std::uint32_t crc = 0) {
  return static_cast<std::uint32_t>(
      ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}
void put_u32(std::string& out, std::size_t offset, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
std::uint64_t get_le(std::string_view bytes, std::size_t offset, int width) {
  std::uint64_t value = 0;
  for (int i = 0; i < width; ++i)
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

// Makes the header's and every whole section's CRC32 right (container.hpp has the layout).
std::string with_checksums(std::string bytes) {
  if (bytes.size() < kHeaderSize) return bytes;
  put_u32(bytes, 16, crc_of(std::string_view(bytes).substr(0, 16)));
  const std::uint64_t count = get_le(bytes, 12, 4);
  std::size_t offset = kHeaderSize;
  for (std::uint64_t index = 0; index < count && index < 64; ++index) {
    const std::size_t remaining = bytes.size() - offset;
    if (remaining < kSectionHeaderSize) break;
    const std::uint64_t length = get_le(bytes, offset + 4, 8);
    if (length > remaining - kSectionHeaderSize) break;
    const std::string_view view(bytes);
    const std::uint32_t crc = crc_of(view.substr(offset + kSectionHeaderSize, length), crc_of(view.substr(offset, 12)));
    put_u32(bytes, offset + 12, crc);
    offset += kSectionHeaderSize + static_cast<std::size_t>(length);
  }
  return bytes;
}

// ---- the seed corpus ---------------------------------------------------------------------------------------

kiln::Tensor input(std::initializer_list<std::int64_t> dims) { return kiln::Input(kiln::Shape(dims)); }

std::vector<std::pair<std::string, kiln::Model>> corpus_models() {
  using namespace kiln;
  std::vector<std::pair<std::string, Model>> models;
  {
    Tensor x = input({None, 5});
    models.emplace_back("mlp", Model(x, Dense(2)(Dense(4, "relu")(x))));
  }
  {
    Sequential stack;
    stack.add(Dense(4, "tanh").ptr()).add(LayerNormalization().ptr()).add(Dropout(0.25).ptr()).add(Dense(2).ptr());
    stack.build({None, 3});
    models.emplace_back("sequential", Model(stack));
  }
  {
    Tensor x = input({None, 6});
    models.emplace_back("embedding", Model(x, Dense(1)(GlobalAveragePooling1D()(Embedding(10, 3)(x)))));
  }
  {
    Tensor x = input({None, 4, 8});
    Tensor a = MultiHeadAttention(2)({x, x, x});
    Tensor b = Attention(true)({Dense(8)(x), x});
    models.emplace_back("attention", Model(x, Flatten()(Add()({a, b}))));
  }
  {
    Tensor x = input({None, 5, 4});
    models.emplace_back("mhattention", Model(x, Reshape({20})(MHAttention(4, 2)(x))));
  }
  {
    Tensor a = input({None, 4}), b = input({None, 2});
    models.emplace_back("two_inputs", Model({a, b}, {Dense(2)(Concatenate()({Dense(3)(a), b}))}));
  }
  {
    Tensor x = input({None, 3});
    Model model(x, Dense(1)(Dense(4, "relu")(x)));
    model.compile(create_optimizer("adam", Config{{"learning_rate", 0.01}}), "mse", {"mae"});
    model.train_on_batch(Array(Shape{8, 3}), Array::full(Shape{8, 1}, 1.0));
    models.emplace_back("compiled_adam", model);
  }
  {
    Tensor x = input({None, 3});
    Model model(x, Activation("sigmoid")(Dense(2)(x)));
    model.compile(create_optimizer("sgd", Config{{"learning_rate", 0.1}, {"momentum", 0.9}}), "binary_crossentropy");
    model.train_on_batch(Array(Shape{4, 3}), Array::full(Shape{4, 2}, 1.0));
    models.emplace_back("compiled_sgd", model);
  }
  return models;
}

void write_seed(const std::string& dir, const std::string& name, unsigned mode, std::string_view body) {
  std::string bytes(1, static_cast<char>(mode));
  bytes.append(body.data(), body.size());
  std::ofstream out(dir + "/" + name + ".mode" + std::to_string(mode), std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + dir + "/" + name);
}

int make_corpus(const std::string& dir) {
  int seeds = 0;
  auto seed = [&](const std::string& name, unsigned mode, std::string_view body) {
    write_seed(dir, name, mode, body);
    ++seeds;
  };
  const std::string path = dir + "/.model.tmp";
  for (auto& [name, model] : corpus_models()) {
    for (int weights_only = 0; weights_only < 2; ++weights_only) {
      if (weights_only && name != "mlp") continue;
      const std::string file_name = weights_only ? name + "_weights" : name;
      if (weights_only)
        model.save_weights(path);
      else
        model.save(path);
      const std::string bytes = kiln::detail::read_whole_file(path);
      std::remove(path.c_str());
      seed(file_name, 0, bytes);
      seed(file_name, 3, bytes);
      seed(file_name, 4, bytes);
      const kiln::detail::Container container = kiln::detail::read_container(bytes, file_name);
      if (const auto* config = container.find("CONF")) seed(file_name, 1, config->payload);
      if (const auto* weights = container.find("WGHT"))
        write_seed(dir, file_name + "_weights_section", 2, weights->payload), ++seeds;
      if (const auto* state = container.find("OPTM"))
        write_seed(dir, file_name + "_optimizer_section", 2, state->payload), ++seeds;
    }
    // The same model as Keras files: the archive, its config.json and model.weights.h5, a legacy .h5.
    model.save(path + ".keras");
    const std::string archive = kiln::detail::read_whole_file(path + ".keras");
    std::remove((path + ".keras").c_str());
    seed(name, 5, archive);
    const kiln::detail::ZipReader entries(archive, name);
    seed(name + "_config_json", 1, entries.read("config.json", 1 << 20));
    seed(name + "_weights_h5", 6, entries.read("model.weights.h5", 1 << 20));
    model.save(path + ".h5");
    const std::string legacy = kiln::detail::read_whole_file(path + ".h5");
    std::remove((path + ".h5").c_str());
    seed(name + "_legacy", 6, legacy);
    seed(name + "_legacy", 0, legacy);
  }
  std::cout << "kiln_load_fuzzer: wrote " << seeds << " seeds to " << dir << "\n";
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp((*argv)[i], "--make-corpus") == 0) {
      if (i + 1 >= *argc) {
        std::cerr << "usage: kiln_load_fuzzer --make-corpus DIR\n";
        std::exit(2);
      }
      try {
        std::exit(make_corpus((*argv)[i + 1]));
      } catch (const std::exception& error) {
        std::cerr << "kiln_load_fuzzer: making the corpus failed: " << error.what() << "\n";
        std::exit(1);
      }
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned mode = data[0] % kModes;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
      load_file(body);
      break;
    case 1:
      try {
        const kiln::Config config = kiln::parse_json(std::string(body), "fuzz");
        kiln::Model model = [&] {
          kiln::detail::AllocationLimit limit(64u << 20, "fuzz");
          return kiln::model_from_config(config);
        }();
        try_predict(model);  // with a limit of its own (limits do not nest)
      } catch (const kiln::Error&) {
      }
      break;
    case 5:
      load_keras(body);
      break;
    case 6:
      read_hdf5(body);
      break;
    case 2:
      try {
        kiln::detail::read_arrays(body, "fuzz");
      } catch (const kiln::Error&) {
      }
      break;
    case 3:
      try {
        kiln::detail::read_container(body, "fuzz");
      } catch (const kiln::Error&) {
      }
      break;
    case 4:
      load_file(with_checksums(std::string(body)));
      break;
  }
  return 0;
}
