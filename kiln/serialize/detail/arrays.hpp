#pragma once
// Named arrays (weights, optimizer slots) as kiln files hold them, in cereal's portable binary layout, the
// format kiln files have always had:
//
//   u8 1 (little-endian; 0, a big-endian writer's, is read too)   u32 record version (1)   u64 count
//   then each array: u64 name length, the name, u8 dtype (0 float32, 1 float64), u32 rank, i64 dims, the data
//
// Writing streams: arrays_size() gives the length before a byte is written, and write_arrays() hands the
// bytes to a sink array by array, so a save never holds a second copy of the weights. Reading lists the
// arrays first, names and shapes, every length checked against the bytes that remain before anything is
// allocated (a damaged count cannot make it allocate more than the section holds); the data is then read
// where the caller wants it: straight into a model's weights.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/detail/files.hpp>
#include <kiln/serialize/detail/container.hpp>

namespace kiln::detail {

struct NamedArray {
  std::string name;
  Array value;
};

// The length write_arrays() writes for `arrays`.
std::uint64_t arrays_size(const std::vector<NamedArray>& arrays);
// Writes `arrays` to `sink`, their data straight from their storage.
void write_arrays(const std::vector<NamedArray>& arrays, ByteSink& sink);
// The same, into a string.
std::string write_arrays(const std::vector<NamedArray>& arrays);

// One array of a region, listed but not read.
struct ArrayEntry {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
  std::uint64_t data_offset = 0;  // from the start of the region
  bool big_endian = false;
};

// The arrays of `length` bytes of `file` at `offset` (a section's payload), without their data.
// SerializationError naming `where` ("model.kiln: weights section") and the array on anything wrong.
std::vector<ArrayEntry> list_arrays(const ReadOnlyFile& file, std::uint64_t offset, std::uint64_t length,
                                    const std::string& where);
// The same for a payload in memory.
std::vector<ArrayEntry> list_arrays(std::string_view payload, const std::string& where);
// The data of `entry` of the region at `offset` into `into`, which has its shape (any dtype: converted).
void read_array(const ReadOnlyFile& file, std::uint64_t offset, const ArrayEntry& entry, Array& into);
// The same for a payload in memory.
void read_array(std::string_view payload, const ArrayEntry& entry, Array& into);
// Every array of a payload in memory, read.
std::vector<NamedArray> read_arrays(std::string_view payload, const std::string& where);

}  // namespace kiln::detail
