#pragma once
// Reads the part of HDF5 that Keras, h5py and libhdf5 write for weights and model files, from bytes in
// memory, trusting none of them. It is kiln's own reader, not libhdf5's: libhdf5 1.10 crashes, hangs or
// allocates without bound on damaged files (docs/keras.md has what fuzzing it found), and a file a user
// downloaded must never do that to their process. Every offset, length and count is checked against the
// bytes there are before it is followed or allocated; B-trees, heaps and continuation chains are walked
// with a visited set and a depth limit, so cycles and deep nesting are refused; and nothing is recursive
// without a bound.
//
// Read: superblock versions 0 to 3; object headers version 1 and 2 (with continuation blocks); groups
// with a symbol table (v1 B-tree, local heap, symbol nodes) or compact links; datasets with compact or
// contiguous storage; attributes in the object header; datatypes fixed-point (1, 2, 4, 8 bytes),
// IEEE floating point (2, 4, 8 bytes), fixed-length strings and variable-length strings (global heap);
// either byte order. Refused, each with a message that names it: chunked or filtered (compressed)
// datasets, dense link or attribute storage (fractal heaps), external and soft links, shared messages.
// Keras's files never need them; the error says what to re-save the file with if one does.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/serialize/detail/byte_source.hpp>
#include <kiln/core/shape.hpp>

namespace kiln::detail::hdf5 {

using detail::ByteSource;

struct FileState;
struct ObjectHeader;

// A group or a dataset of a File, by the address of its object header. Cheap to copy; valid while its
// File lives. Every accessor throws SerializationError naming the file and the object's path.
class Object {
 public:
  const std::string& path() const { return path_; }   // "/model_weights/dense" ("/" for the root)
  std::uint64_t address() const { return address_; }  // of its object header: the same object, the same address
  bool is_group() const;
  bool is_dataset() const;

  // A group's members, sorted by name (as HDF5 lists them). Throws when this is not a group.
  std::vector<std::string> member_names() const;
  // The member called `name` (one path component), or nullopt.
  std::optional<Object> find(const std::string& name) const;
  // The object at `relative` ("layers/dense/vars"), or nullopt when a component is missing.
  std::optional<Object> find_path(const std::string& relative) const;
  // find_path, or SerializationError naming the missing path.
  Object at(const std::string& relative) const;

  std::vector<std::string> attribute_names() const;  // in header order
  bool has_attribute(const std::string& name) const;
  // A string attribute (scalar or one-dimensional; fixed-length or variable-length) as its strings, each
  // cut at its first NUL (Keras 2 pads names with NULs). Throws when it is absent or not a string.
  std::vector<std::string> attribute_strings(const std::string& name) const;
  // A numeric attribute's values as doubles. Throws when it is absent or not numeric.
  std::vector<double> attribute_numbers(const std::string& name) const;

  // A dataset's shape (a scalar is rank 0) and whether its elements are floating point.
  Shape dataset_shape() const;
  bool dataset_is_float() const;  // floating point, or Keras's bfloat16
  // Whether the dataset is Keras's bfloat16 (a two-byte opaque type with the attribute dtype="bfloat16", as h5py
  // stores ml_dtypes.bfloat16); other opaque data fails. read() and read_into() give its values exactly.
  bool dataset_is_bfloat16() const;
  // The dataset's values converted to `dtype` (float32 or float64). Checks that the data lies inside the
  // file before allocating anything.
  Array read(DType dtype) const;
  // The dataset's values into `into`, which has the dataset's shape (SerializationError otherwise): straight
  // into its storage when the dtypes match, else a chunk at a time, converted.
  void read_into(Array& into) const;
  // Reads every value, a chunk at a time, keeping none: what verifying a file does.
  void check_data() const;
  // The dataset's values as doubles (for counters such as an optimizer's iterations).
  std::vector<double> read_numbers() const;

 private:
  friend class File;
  Object(std::shared_ptr<FileState> file, std::uint64_t address, std::string path);
  const ObjectHeader& header() const;
  std::shared_ptr<FileState> file_;
  std::uint64_t address_ = 0;
  std::string path_;
};

// An HDF5 file, in memory or read from a file as needed. The constructor checks the signature and the
// superblock; everything else is read when it is asked for, and each object header is parsed once.
class File {
 public:
  // `source` names the file in messages ("m.keras: model.weights.h5").
  File(std::string bytes, std::string source);
  // A file whose bytes `data` gives.
  File(std::shared_ptr<const ByteSource> data, std::string source);
  Object root() const;

 private:
  std::shared_ptr<FileState> state_;
};

// True when `bytes` starts like an HDF5 file (its signature at offset 0).
bool looks_like_hdf5(std::string_view bytes);

}  // namespace kiln::detail::hdf5
