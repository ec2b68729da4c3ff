#include <kiln/serialize/detail/hdf5_writer.hpp>

#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::detail {

namespace {

// Debian's libhdf5 is the serial build, not thread-safe: every call into it holds this.
std::mutex& library_mutex() {
  static std::mutex mutex;
  return mutex;
}

[[noreturn]] void fail(const std::string& what) { throw SerializationError("writing HDF5: " + what); }

// One libhdf5 handle, closed with its own close function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) fail(what);
  }
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& what) {
  if (status < 0) fail(what);
}

// The parent folders of "a/b/c": "a", "a/b".
std::vector<std::string> parents_of(const std::string& path) {
  std::vector<std::string> parents;
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1))
    if (slash > 0) parents.push_back(path.substr(0, slash));
  return parents;
}

std::string clean(const std::string& path) {
  std::string result = path;
  while (!result.empty() && result.front() == '/') result.erase(result.begin());
  return result;
}

}  // namespace

struct Hdf5Builder::State {
  std::unique_lock<std::mutex> lock{library_mutex()};
  H5E_auto2_t saved_handler = nullptr;
  void* saved_data = nullptr;
  hid_t file = -1;

  // In memory when `path` is empty, else the file at `path` (replaced).
  explicit State(const std::string& path) {
    // libhdf5 prints its error stack to stderr by default; kiln reports errors itself.
    H5Eget_auto2(H5E_DEFAULT, &saved_handler, &saved_data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    if (path.empty()) {
      const Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "a file access list");
      check(H5Pset_fapl_core(access.get(), 1 << 16, /*backing_store=*/0), "the in-memory driver");
      static std::atomic<std::uint64_t> counter{0};
      const std::string name = "kiln-in-memory-" + std::to_string(counter++) + ".h5";
      file = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
    } else {
      file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    }
    if (file < 0) {
      H5Eset_auto2(H5E_DEFAULT, saved_handler, saved_data);
      fail(path.empty() ? "creating the file in memory" : "creating " + path);
    }
  }
  ~State() {
    if (file >= 0) H5Fclose(file);
    H5Eset_auto2(H5E_DEFAULT, saved_handler, saved_data);
  }

  bool exists(const std::string& path) const { return path.empty() || H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0; }

  void make_group(const std::string& path) {
    if (exists(path)) return;
    const Handle group(H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                       "creating the group '" + path + "'");
  }

  void make_parents(const std::string& path) {
    for (const std::string& parent : parents_of(path)) make_group(parent);
  }

  hid_t open_object(const std::string& path) const {
    return H5Oopen(file, path.empty() ? "/" : path.c_str(), H5P_DEFAULT);
  }

  void write_dataset(const std::string& path, hid_t file_type, hid_t memory_type, const std::vector<hsize_t>& dims,
                     const void* data) {
    make_parents(path);
    const Handle space(
        dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
        H5Sclose, "a dataspace for '" + path + "'");
    const Handle dataset(H5Dcreate2(file, path.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose, "creating the dataset '" + path + "'");
    check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing '" + path + "'");
  }
};

Hdf5Builder::Hdf5Builder() : state_(std::make_unique<State>("")) {}

Hdf5Builder::Hdf5Builder(const std::string& path) : state_(std::make_unique<State>(path)) {}

void Hdf5Builder::close() {
  const hid_t file = state_->file;
  state_->file = -1;
  check(H5Fclose(file), "closing the file");
}

Hdf5Builder::~Hdf5Builder() = default;

void Hdf5Builder::group(const std::string& path) {
  const std::string clean_path = clean(path);
  state_->make_parents(clean_path + "/");
}

void Hdf5Builder::string_attribute(const std::string& path, const std::string& name, const std::string& value) {
  const std::string clean_path = clean(path);
  const Handle object(state_->open_object(clean_path), H5Oclose, "opening '" + clean_path + "'");
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "a string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "a variable-length string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "a UTF-8 string type");
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose, "a scalar dataspace");
  const Handle attribute(H5Acreate2(object.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose, "creating the attribute '" + name + "'");
  const char* text = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &text), "writing the attribute '" + name + "'");
}

void Hdf5Builder::strings_attribute(const std::string& path, const std::string& name,
                                    const std::vector<std::string>& values) {
  const std::string clean_path = clean(path);
  const Handle object(state_->open_object(clean_path), H5Oclose, "opening '" + clean_path + "'");
  std::size_t width = 1;
  for (const std::string& value : values) width = std::max(width, value.size());
  std::string packed(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) packed.replace(i * width, values[i].size(), values[i]);
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "a string type");
  check(H5Tset_size(type.get(), width), "a fixed-length string type");
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "a NUL-padded string type");
  const hsize_t count = values.size();
  const Handle space(H5Screate_simple(1, &count, nullptr), H5Sclose, "a dataspace");
  const Handle attribute(H5Acreate2(object.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose, "creating the attribute '" + name + "'");
  check(H5Awrite(attribute.get(), type.get(), packed.data()), "writing the attribute '" + name + "'");
}

void Hdf5Builder::dataset(const std::string& path, const Array& value) {
  std::vector<hsize_t> dims;
  for (const std::int64_t dim : value.shape().dims()) dims.push_back(static_cast<hsize_t>(dim));
  switch (value.dtype()) {
    case DType::float32:
      state_->write_dataset(clean(path), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, value.raw());
      return;
    case DType::float64:
      state_->write_dataset(clean(path), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, value.raw());
      return;
    case DType::int8:  // quantized weights, as Keras stores them
      state_->write_dataset(clean(path), H5T_STD_I8LE, H5T_NATIVE_INT8, dims, value.raw());
      return;
  }
}

void Hdf5Builder::bfloat16_dataset(const std::string& path, const Array& value) {
  if (value.dtype() != DType::float32)
    throw SerializationError("writing '" + path + "' as bfloat16: the values are " + dtype_name(value.dtype()) +
                             ", not float32");
  std::vector<hsize_t> dims;
  for (const std::int64_t dim : value.shape().dims()) dims.push_back(static_cast<hsize_t>(dim));
  const Array rounded = ops::round_to_bfloat16(value);  // float32 whose low halves are zero
  std::vector<std::uint16_t> bits(rounded.size());
  const float* values = rounded.data<float>();
  for (std::size_t i = 0; i < bits.size(); ++i) {
    std::uint32_t word;
    std::memcpy(&word, values + i, sizeof word);
    bits[i] = static_cast<std::uint16_t>(word >> 16);
  }
  const Handle type(H5Tcreate(H5T_OPAQUE, 2), H5Tclose, "an opaque type");
  state_->write_dataset(clean(path), type.get(), type.get(), dims, bits.data());
  string_attribute(path, "dtype", "bfloat16");
}

void Hdf5Builder::int64_dataset(const std::string& path, std::int64_t value) {
  state_->write_dataset(clean(path), H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
}

std::string Hdf5Builder::bytes() {
  check(H5Fflush(state_->file, H5F_SCOPE_GLOBAL), "flushing the file");
  const ssize_t size = H5Fget_file_image(state_->file, nullptr, 0);
  if (size < 0) fail("reading back the file image");
  std::string image(static_cast<std::size_t>(size), '\0');
  if (H5Fget_file_image(state_->file, image.data(), image.size()) != size) fail("reading back the file image");
  return image;
}

}  // namespace kiln::detail
