#include <kiln/serialize/detail/arrays.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include <kiln/core/error.hpp>

namespace kiln::detail {
namespace {

constexpr std::uint32_t kRecordVersion = 1;
constexpr std::uint32_t kMaxRank = 16;
constexpr std::uint64_t kMaxNameBytes = 4096;
// Each array takes at least 13 bytes (name length, dtype, rank): a count beyond that is damage.
constexpr std::uint64_t kSmallestArray = 13;
constexpr std::size_t kChunk = std::size_t{1} << 20;  // data converted or swapped a piece at a time

std::size_t item_size(DType dtype) { return dtype_size(dtype); }
// The dtype's code in a record: 0 float32, 1 float64, 2 int8 (quantized weights).
std::uint64_t dtype_code(DType dtype) { return dtype == DType::float32 ? 0 : dtype == DType::float64 ? 1 : 2; }

void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// An array's header: everything before its data.
std::string header_of(const NamedArray& array) {
  std::string header;
  put(header, array.name.size(), 8);
  header += array.name;
  put(header, dtype_code(array.value.dtype()), 1);
  put(header, static_cast<std::uint64_t>(array.value.shape().rank()), 4);
  for (std::int64_t dim : array.value.shape().dims()) put(header, static_cast<std::uint64_t>(dim), 8);
  return header;
}

std::string prologue(std::uint64_t count) {
  std::string bytes;
  put(bytes, 1, 1);  // little-endian, as cereal's portable archive writes it on this machine
  put(bytes, kRecordVersion, 4);
  put(bytes, count, 8);
  return bytes;
}

class StringSink : public ByteSink {
 public:
  void write(std::string_view bytes) override { text.append(bytes.data(), bytes.size()); }
  std::string text;
};

// Reads `length` bytes of a region through `fetch(offset, out, bytes)`, a buffer at a time, every read
// checked against what remains.
class RegionCursor {
 public:
  using Fetch = std::function<void(std::uint64_t offset, void* out, std::size_t bytes)>;
  RegionCursor(Fetch fetch, std::uint64_t length, std::string where)
      : fetch_(std::move(fetch)), length_(length), where_(std::move(where)) {}

  std::uint64_t position() const { return position_; }
  std::uint64_t remaining() const { return length_ - position_; }
  void require(bool ok, const std::string& what) const {
    if (!ok) throw SerializationError(where_ + ": damaged at byte " + std::to_string(position_) + ": " + what);
  }
  void bytes(void* out, std::size_t count) {
    require(count <= remaining(), "it ends before the data it declares");
    fetch_(position_, out, count);
    position_ += count;
  }
  std::uint64_t unsigned_int(int size, bool big_endian) {
    unsigned char raw[8] = {};
    bytes(raw, static_cast<std::size_t>(size));
    std::uint64_t value = 0;
    for (int i = 0; i < size; ++i) {
      const int shift = 8 * (big_endian ? size - 1 - i : i);
      value |= static_cast<std::uint64_t>(raw[i]) << shift;
    }
    return value;
  }
  void skip(std::uint64_t count) {
    require(count <= remaining(), "it ends before the data it declares");
    position_ += count;
  }

 private:
  Fetch fetch_;
  std::uint64_t length_, position_ = 0;
  std::string where_;
};

std::vector<ArrayEntry> list_with(RegionCursor cursor, const std::string& where) {
  cursor.require(cursor.remaining() >= 13, "shorter than the arrays' header");
  const std::uint64_t endianness = cursor.unsigned_int(1, false);
  cursor.require(endianness <= 1, "the byte order flag is " + std::to_string(endianness));
  const bool big = endianness == 0;
  const std::uint64_t version = cursor.unsigned_int(4, big);
  if (version > kRecordVersion)
    throw SerializationError(where + ": written by a newer kiln (record version " + std::to_string(version) +
                             ", this kiln reads up to " + std::to_string(kRecordVersion) + ")");
  const std::uint64_t count = cursor.unsigned_int(8, big);
  cursor.require(count <= cursor.remaining() / kSmallestArray, "an array count of " + std::to_string(count));
  std::vector<ArrayEntry> entries;
  entries.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t index = 0; index < count; ++index) {
    const std::string which = "array " + std::to_string(index + 1);
    const std::uint64_t name_size = cursor.unsigned_int(8, big);
    cursor.require(name_size <= kMaxNameBytes && name_size <= cursor.remaining(),
                   "the name length " + std::to_string(name_size) + " of " + which);
    ArrayEntry entry;
    entry.big_endian = big;
    entry.name.resize(static_cast<std::size_t>(name_size));
    cursor.bytes(entry.name.data(), entry.name.size());
    const std::string named = which + " '" + entry.name + "'";
    const std::uint64_t dtype = cursor.unsigned_int(1, big);
    const std::uint64_t rank = cursor.unsigned_int(4, big);
    cursor.require(dtype <= 2, "the dtype code " + std::to_string(dtype) + " of " + named);
    cursor.require(rank <= kMaxRank, "the rank " + std::to_string(rank) + " of " + named);
    entry.dtype = dtype == 0 ? DType::float32 : dtype == 1 ? DType::float64 : DType::int8;
    const std::uint64_t item = item_size(entry.dtype);
    std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
    std::uint64_t elements = 1;
    for (std::int64_t& dim : dims) {
      dim = static_cast<std::int64_t>(cursor.unsigned_int(8, big));
      cursor.require(dim >= 0, "the dimension " + std::to_string(dim) + " of " + named);
      // Checked before multiplying: the product never overflows past what the region holds.
      const std::uint64_t limit = cursor.remaining() / item;
      cursor.require(dim == 0 || elements <= limit / static_cast<std::uint64_t>(dim),
                     "the shape of " + named + ", larger than the file");
      elements *= static_cast<std::uint64_t>(dim);
    }
    cursor.require(elements * item <= cursor.remaining(), "the data of " + named + ", larger than what remains of the file");
    entry.shape = Shape(dims);
    entry.data_offset = cursor.position();
    cursor.skip(elements * item);
    entries.push_back(std::move(entry));
  }
  if (cursor.remaining() != 0)
    throw SerializationError(where + ": " + std::to_string(cursor.remaining()) + " unexpected bytes after the last array");
  return entries;
}

void swap_items(char* data, std::size_t count, std::size_t item) {
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * item, data + (i + 1) * item);
}

// The data of `entry` into `into` through `fetch(offset, out, bytes)`: straight into its storage when the
// dtype and byte order match, else a chunk at a time, swapped and converted.
void read_with(const std::function<void(std::uint64_t, void*, std::size_t)>& fetch, const ArrayEntry& entry,
               Array& into) {
  if (into.shape() != entry.shape)
    throw ShapeError("array '" + entry.name + "' has shape " + entry.shape.to_string() + ", not " +
                     into.shape().to_string());
  const std::size_t item = item_size(entry.dtype);
  const std::size_t count = into.size();
  if (is_floating(entry.dtype) != is_floating(into.dtype()))  // quantized weights never pass for float ones
    throw DTypeError("array '" + entry.name + "' is " + dtype_name(entry.dtype) + ", not " + dtype_name(into.dtype()));
  if (entry.dtype == into.dtype() && !entry.big_endian) {
    if (count > 0) fetch(entry.data_offset, into.raw(), count * item);
    return;
  }
  std::vector<char> chunk(std::min(count * item, kChunk));
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(count - done, chunk.size() / item);
    fetch(entry.data_offset + done * item, chunk.data(), n * item);
    if (entry.big_endian) swap_items(chunk.data(), n, item);
    for (std::size_t i = 0; i < n; ++i) {
      double value;
      if (entry.dtype == DType::float32) {
        float f;
        std::memcpy(&f, chunk.data() + i * item, sizeof f);
        value = f;
      } else if (entry.dtype == DType::int8) {  // (only when the order was swapped: the same dtype)
        value = static_cast<std::int8_t>(chunk[i]);
      } else {
        std::memcpy(&value, chunk.data() + i * item, sizeof value);
      }
      into.set_flat(done + i, value);
    }
    done += n;
  }
}

}  // namespace

std::uint64_t arrays_size(const std::vector<NamedArray>& arrays) {
  std::uint64_t total = prologue(arrays.size()).size();
  for (const NamedArray& array : arrays) total += header_of(array).size() + array.value.nbytes();
  return total;
}

void write_arrays(const std::vector<NamedArray>& arrays, ByteSink& sink) {
  sink.write(prologue(arrays.size()));
  for (const NamedArray& array : arrays) {
    sink.write(header_of(array));
    sink.write(std::string_view(static_cast<const char*>(array.value.raw()), array.value.nbytes()));
  }
}

std::string write_arrays(const std::vector<NamedArray>& arrays) {
  StringSink sink;
  sink.text.reserve(static_cast<std::size_t>(arrays_size(arrays)));
  write_arrays(arrays, sink);
  return std::move(sink.text);
}

std::vector<ArrayEntry> list_arrays(const ReadOnlyFile& file, std::uint64_t offset, std::uint64_t length,
                                    const std::string& where) {
  return list_with(RegionCursor([&](std::uint64_t at, void* out, std::size_t bytes) {
                                  file.read(offset + at, out, bytes, "an array");
                                },
                                length, where),
                   where);
}

std::vector<ArrayEntry> list_arrays(std::string_view payload, const std::string& where) {
  return list_with(RegionCursor([payload](std::uint64_t at, void* out, std::size_t bytes) {
                                  std::memcpy(out, payload.data() + at, bytes);
                                },
                                payload.size(), where),
                   where);
}

void read_array(const ReadOnlyFile& file, std::uint64_t offset, const ArrayEntry& entry, Array& into) {
  read_with([&](std::uint64_t at, void* out, std::size_t bytes) { file.read(offset + at, out, bytes, "an array"); },
            entry, into);
}

void read_array(std::string_view payload, const ArrayEntry& entry, Array& into) {
  read_with([payload](std::uint64_t at, void* out, std::size_t bytes) { std::memcpy(out, payload.data() + at, bytes); },
            entry, into);
}

std::vector<NamedArray> read_arrays(std::string_view payload, const std::string& where) {
  std::vector<NamedArray> arrays;
  for (const ArrayEntry& entry : list_arrays(payload, where)) {
    NamedArray array{entry.name, Array(entry.shape, entry.dtype)};
    read_array(payload, entry, array.value);
    arrays.push_back(std::move(array));
  }
  return arrays;
}

}  // namespace kiln::detail
