#include <kiln/serialize/detail/arrays.hpp>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>

#include <cstdint>
#include <istream>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <streambuf>

#include <kiln/core/error.hpp>

namespace kiln::detail {
namespace {

constexpr std::uint32_t kMaxRank = 16;
constexpr std::uint64_t kMaxNameBytes = 4096;

// A read-only buffer over bytes already in memory (checked by the container's CRC) that knows how many remain.
class MemoryBuffer : public std::streambuf {
 public:
  explicit MemoryBuffer(std::string_view bytes) : size_(bytes.size()) {
    char* begin = const_cast<char*>(bytes.data());  // never written: streambuf's get area wants char*
    setg(begin, begin, begin + bytes.size());
  }
  std::uint64_t remaining() const { return static_cast<std::uint64_t>(egptr() - gptr()); }
  std::uint64_t position() const { return size_ - remaining(); }

 private:
  std::size_t size_;
};

// The stream cereal reads, with the buffer's counts at hand for the length checks.
class MemoryInput {
 public:
  explicit MemoryInput(std::string_view bytes) : buffer_(bytes), stream_(&buffer_) {}
  std::istream& stream() { return stream_; }
  std::uint64_t remaining() const { return buffer_.remaining(); }
  std::uint64_t position() const { return buffer_.position(); }

 private:
  MemoryBuffer buffer_;
  std::istream stream_;
};

// The section's one record: a list of named arrays. Its cereal class version is written once, before
// the records, and a version newer than this kiln knows is refused.
struct ArrayRecords {
  static constexpr std::uint32_t kVersion = 1;
  const std::vector<NamedArray>* source = nullptr;  // when saving
  std::vector<NamedArray>* arrays = nullptr;        // when loading
  MemoryInput* input = nullptr;

  template <class Archive>
  void save(Archive& archive, std::uint32_t /*version*/) const {
    archive(static_cast<std::uint64_t>(source->size()));
    for (const NamedArray& array : *source) {
      archive(static_cast<std::uint64_t>(array.name.size()));
      archive(cereal::binary_data(array.name.data(), array.name.size()));
      archive(static_cast<std::uint8_t>(array.value.dtype() == DType::float32 ? 0 : 1));
      archive(static_cast<std::uint32_t>(array.value.shape().rank()));
      for (std::int64_t dim : array.value.shape().dims()) archive(dim);
      if (array.value.dtype() == DType::float32)
        archive(cereal::binary_data(array.value.data<float>(), array.value.nbytes()));
      else
        archive(cereal::binary_data(array.value.data<double>(), array.value.nbytes()));
    }
  }

  template <class Archive>
  void load(Archive& archive, std::uint32_t version) {
    if (version > kVersion)
      fail("written by a newer kiln (record version " + std::to_string(version) + ", this kiln reads up to " +
           std::to_string(kVersion) + ")");
    std::uint64_t count = 0;
    archive(count);
    // Each array takes at least 13 bytes (name length, dtype, rank): a count beyond that is damage.
    require(count <= input->remaining() / 13, "an array count of " + std::to_string(count));
    arrays->reserve(static_cast<std::size_t>(count));
    for (std::uint64_t index = 0; index < count; ++index) arrays->push_back(load_one(archive, index));
  }

  template <class Archive>
  NamedArray load_one(Archive& archive, std::uint64_t index) {
    const std::string which = "array " + std::to_string(index + 1);
    std::uint64_t name_size = 0;
    archive(name_size);
    require(name_size <= kMaxNameBytes && name_size <= input->remaining(),
            "the name length " + std::to_string(name_size) + " of " + which);
    NamedArray array;
    array.name.resize(static_cast<std::size_t>(name_size));
    archive(cereal::binary_data(array.name.data(), array.name.size()));
    const std::string named = which + " '" + array.name + "'";
    std::uint8_t dtype = 0;
    std::uint32_t rank = 0;
    archive(dtype, rank);
    require(dtype <= 1, "the dtype code " + std::to_string(dtype) + " of " + named);
    require(rank <= kMaxRank, "the rank " + std::to_string(rank) + " of " + named);
    const std::size_t item = dtype == 0 ? 4 : 8;
    std::vector<std::int64_t> dims(rank);
    std::uint64_t elements = 1;
    for (std::int64_t& dim : dims) {
      archive(dim);
      require(dim >= 0, "the dimension " + std::to_string(dim) + " of " + named);
      // Checked before multiplying: the product never overflows past what the section holds.
      const std::uint64_t limit = input->remaining() / item;
      require(dim == 0 || elements <= limit / static_cast<std::uint64_t>(dim),
              "the shape of " + named + ", larger than the file");
      elements *= static_cast<std::uint64_t>(dim);
    }
    require(elements * item <= input->remaining(), "the data of " + named + ", larger than what remains of the file");
    array.value = Array(Shape(dims), dtype == 0 ? DType::float32 : DType::float64);
    if (dtype == 0)
      archive(cereal::binary_data(array.value.data<float>(), array.value.nbytes()));
    else
      archive(cereal::binary_data(array.value.data<double>(), array.value.nbytes()));
    return array;
  }

  void require(bool ok, const std::string& what) const {
    if (!ok) fail("damaged at byte " + std::to_string(input->position()) + ": " + what);
  }
  [[noreturn]] static void fail(const std::string& message) { throw SerializationError(message); }
};

}  // namespace
}  // namespace kiln::detail

CEREAL_CLASS_VERSION(kiln::detail::ArrayRecords, kiln::detail::ArrayRecords::kVersion);

namespace kiln::detail {

std::string write_arrays(const std::vector<NamedArray>& arrays) {
  std::ostringstream out(std::ios::binary);
  {
    cereal::PortableBinaryOutputArchive archive(out);
    ArrayRecords records{&arrays, nullptr, nullptr};
    archive(records);
  }
  return std::move(out).str();
}

std::vector<NamedArray> read_arrays(std::string_view payload, const std::string& where) {
  std::vector<NamedArray> arrays;
  MemoryInput input(payload);
  try {
    cereal::PortableBinaryInputArchive archive(input.stream());
    ArrayRecords records{nullptr, &arrays, &input};
    archive(records);
  } catch (const SerializationError& error) {
    throw SerializationError(where + ": " + error.what());
  } catch (const cereal::Exception& error) {
    throw SerializationError(where + ": damaged (" + error.what() + ")");
  } catch (const std::bad_alloc&) {
    throw SerializationError(where + ": damaged (an impossible size)");
  } catch (const std::length_error&) {
    throw SerializationError(where + ": damaged (an impossible size)");
  }
  if (input.remaining() != 0)
    throw SerializationError(where + ": " + std::to_string(input.remaining()) +
                             " unexpected bytes after the last array");
  return arrays;
}

}  // namespace kiln::detail
