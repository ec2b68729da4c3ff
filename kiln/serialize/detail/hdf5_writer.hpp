#pragma once
// HDF5 files as h5py writes them for Keras, built in memory through libhdf5 (Debian's libhdf5-dev): groups,
// float and integer datasets, variable-length UTF-8 string attributes (h5py's str) and fixed-length ASCII
// string-array attributes (h5py's numpy bytes arrays, as Keras's legacy format writes its name lists). The
// file uses HDF5's earliest format, as h5py's default does, which kiln's own reader reads back.
//
// kiln writes with libhdf5 and reads with its own reader: what libhdf5 writes is the format by
// definition, and what a user hands kiln to read is never given to libhdf5 (hdf5_reader.hpp says why).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>

namespace kiln::detail {

class Hdf5Builder {
 public:
  Hdf5Builder();  ///< in memory: bytes() gives the file
  /// Writes the file at `path` (replacing any there) as it is built, so no copy of its datasets is kept;
  /// close() finishes it.
  explicit Hdf5Builder(const std::string& path);
  ~Hdf5Builder();
  Hdf5Builder(const Hdf5Builder&) = delete;
  Hdf5Builder& operator=(const Hdf5Builder&) = delete;

  // Creates the group at `path` ("layers/dense/vars"), and its parents, unless it exists.
  void group(const std::string& path);
  // A scalar variable-length UTF-8 string attribute of the group at `path` ("" or "/" for the root).
  void string_attribute(const std::string& path, const std::string& name, const std::string& value);
  // A one-dimensional attribute of fixed-length strings, NUL-padded to the longest (numpy's "S" arrays).
  void strings_attribute(const std::string& path, const std::string& name, const std::vector<std::string>& values);
  // A dataset holding `value` in its dtype (float32 or float64), of its shape (a scalar for rank 0). Its
  // parent groups are created.
  void dataset(const std::string& path, const Array& value);
  // A scalar int64 dataset (Keras's optimizer iteration count).
  void int64_dataset(const std::string& path, std::int64_t value);
  // A float32 array as bfloat16, as Keras's H5IOStore stores a bfloat16 variable: h5py's two-byte opaque type for
  // ml_dtypes.bfloat16, the values rounded to nearest even, and the attribute dtype="bfloat16".
  void bfloat16_dataset(const std::string& path, const Array& value);
  // The file's bytes (of a builder in memory). SerializationError when libhdf5 fails.
  std::string bytes();
  // Flushes and closes the file of a builder writing at a path. SerializationError when libhdf5 fails.
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::detail
