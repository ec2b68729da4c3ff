#include <kiln/core/array.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <utility>

#include <kiln/core/error.hpp>

namespace kiln {

namespace {
// 64-byte alignment: whole cache lines, and what AVX-512 loads like.
constexpr std::size_t alignment = 64;

thread_local detail::AllocationLimit* current_limit = nullptr;

// From this size up, arrays are anonymous mappings: the kernel hands out zero pages as they are first
// written, so an array costs memory only where it holds data (a model built to be filled from a file costs
// its weights once, as the file's values arrive), and no memset touches every page twice.
constexpr std::size_t kMappedBytes = std::size_t{1} << 20;

// The mappings of arrays freed lately, kept for the next array of the same size: predict's outputs, a fit's
// batches and the arrays a loop makes and drops are the same sizes again and again, and a new mapping faults each
// of its pages in when it is first written (on a hypervisor a microsecond or more a page: a 2 MiB output was 512
// faults, half of a small model's predict). A mapping taken again is zeroed with memset, its pages already there.
// At most kCachedBytes are kept, the oldest unmapped first; the process keeps them until it ends (the cache is
// never destroyed, so arrays freed during static destruction still find it).
constexpr std::size_t kCachedBytes = std::size_t{64} << 20;

class MappingCache {
 public:
  // A zeroed mapping of exactly `bytes`, or nullptr when none is kept.
  void* take(std::size_t bytes) {
    void* memory = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (it->second == bytes) {
          memory = it->first;
          kept_bytes_ -= bytes;
          kept_.erase(it);
          break;
        }
    }
    if (memory != nullptr) std::memset(memory, 0, bytes);
    return memory;
  }

  // Keeps the mapping, unmapping the oldest ones beyond kCachedBytes (or this one, when it alone is more).
  void give(void* memory, std::size_t bytes) {
    std::deque<std::pair<void*, std::size_t>> unmap;
    if (bytes > kCachedBytes) {
      unmap.emplace_back(memory, bytes);
    } else {
      const std::lock_guard<std::mutex> lock(mutex_);
      kept_.emplace_back(memory, bytes);
      kept_bytes_ += bytes;
      while (kept_bytes_ > kCachedBytes) {
        unmap.push_back(kept_.front());
        kept_bytes_ -= kept_.front().second;
        kept_.pop_front();
      }
    }
    for (const auto& [address, size] : unmap) ::munmap(address, size);
  }

 private:
  std::mutex mutex_;
  std::deque<std::pair<void*, std::size_t>> kept_;  // oldest first
  std::size_t kept_bytes_ = 0;
};

MappingCache& mapping_cache() {
  static MappingCache* cache = new MappingCache();  // never destroyed: see above
  return *cache;
}

std::shared_ptr<unsigned char> allocate_zeroed(std::size_t bytes) {
  if (current_limit) current_limit->charge(bytes);
  if (bytes >= kMappedBytes) {
    void* memory = mapping_cache().take(bytes);
    if (memory == nullptr) {
      memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) throw std::bad_alloc();
    }
    return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(memory),
                                          [bytes](unsigned char* p) { mapping_cache().give(p, bytes); });
  }
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void* memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) throw std::bad_alloc();
  std::memset(memory, 0, rounded);
  return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(memory), [](unsigned char* p) { std::free(p); });
}
}  // namespace

namespace detail {

AllocationLimit::AllocationLimit(std::size_t bytes, std::string what)
    : remaining_(bytes), what_(std::move(what)), outer_(current_limit) {
  current_limit = this;
}

AllocationLimit::~AllocationLimit() { current_limit = outer_; }

void AllocationLimit::charge(std::size_t bytes) {
  if (bytes > remaining_)
    throw ValueError(what_ + ": an array of " + std::to_string(bytes) + " bytes is more than the " +
                     std::to_string(remaining_) + " bytes left to it");
  remaining_ -= bytes;
}

}  // namespace detail

DType dtype_from_name(const std::string& name) {
  if (name == "float32") return DType::float32;
  if (name == "float64") return DType::float64;
  if (name == "int8") return DType::int8;
  throw ConfigError("unknown dtype '" + name + "' (kiln has float32, float64 and int8)");
}

Array::Array(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  if (!shape_.is_fully_defined())
    throw ShapeError("Array: a concrete array needs every dimension known, got " + shape_.to_string());
  size_ = static_cast<std::size_t>(shape_.num_elements());
  storage_ = allocate_zeroed(nbytes());
}

template <class T>
static Array array_from(const std::vector<T>& values, Shape shape) {
  Array array(std::move(shape), dtype_of<T>::value);
  if (array.size() != values.size())
    throw ShapeError("Array::from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                     array.shape().to_string());
  if (array.nbytes() > 0) std::memcpy(array.raw(), values.data(), array.nbytes());  // data() may be null
  return array;
}

Array Array::from_vector(const std::vector<float>& values, Shape shape) { return array_from(values, std::move(shape)); }
Array Array::from_vector(const std::vector<double>& values, Shape shape) {
  return array_from(values, std::move(shape));
}
Array Array::from_vector(const std::vector<std::int8_t>& values, Shape shape) {
  return array_from(values, std::move(shape));
}

Array Array::full(Shape shape, double value, DType dtype) {
  Array array(std::move(shape), dtype);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, value);
  return array;
}

Array Array::view(void* data, Shape shape, DType dtype) {
  Array array;
  array.shape_ = std::move(shape);
  array.dtype_ = dtype;
  array.size_ = static_cast<std::size_t>(array.shape_.num_elements());
  array.storage_ = std::shared_ptr<unsigned char>(static_cast<unsigned char*>(data), [](unsigned char*) {});
  return array;
}

void Array::check_dtype(DType requested) const {
  if (requested != dtype_)
    throw DTypeError(std::string("Array: requested ") + dtype_name(requested) + " data of a " + dtype_name(dtype_) +
                     " array of shape " + shape_.to_string());
}

double Array::flat(std::size_t index) const {
  switch (dtype_) {
    case DType::float32: return reinterpret_cast<const float*>(storage_.get())[index];
    case DType::float64: return reinterpret_cast<const double*>(storage_.get())[index];
    case DType::int8: return reinterpret_cast<const std::int8_t*>(storage_.get())[index];
  }
  return 0;
}

void Array::set_flat(std::size_t index, double value) {
  switch (dtype_) {
    case DType::float32:
      reinterpret_cast<float*>(storage_.get())[index] = static_cast<float>(value);
      return;
    case DType::float64:
      reinterpret_cast<double*>(storage_.get())[index] = value;
      return;
    case DType::int8:  // to nearest, ties to even, saturated (a NaN is 0): never an out-of-range conversion
      reinterpret_cast<std::int8_t*>(storage_.get())[index] =
          std::isnan(value) ? std::int8_t{0}
                            : static_cast<std::int8_t>(std::clamp(std::nearbyint(value), -128.0, 127.0));
      return;
  }
}

Array Array::copy() const {
  if (empty()) return Array();
  Array result(shape_, dtype_);
  std::memcpy(result.raw(), raw(), nbytes());
  return result;
}

Array Array::astype(DType dtype) const {
  if (dtype == dtype_ || empty()) return copy();  // an empty Array stays empty, as copy() keeps it
  Array result(shape_, dtype);
  for (std::size_t i = 0; i < size_; ++i) result.set_flat(i, flat(i));
  return result;
}

Array Array::reshape(Shape shape) const {
  if (!shape.is_fully_defined() || static_cast<std::size_t>(shape.num_elements()) != size_)
    throw ShapeError("Array::reshape: cannot reshape " + shape_.to_string() + " into " + shape.to_string());
  Array result = *this;
  result.shape_ = std::move(shape);
  return result;
}

Array Array::rows(std::int64_t start, std::int64_t count) const {
  if (shape_.rank() == 0 || start < 0 || count < 0 || start + count > shape_[0])
    throw ShapeError("Array::rows: rows [" + std::to_string(start) + ", " + std::to_string(start + count) +
                     ") are outside an array of shape " + shape_.to_string());
  const std::size_t row_size = shape_[0] == 0 ? 0 : size_ / static_cast<std::size_t>(shape_[0]);
  Array result = *this;
  result.shape_[0] = count;
  result.size_ = row_size * static_cast<std::size_t>(count);
  // The aliasing constructor: the view points into the block and keeps the whole block alive.
  result.storage_ = std::shared_ptr<unsigned char>(
      storage_, storage_.get() + row_size * static_cast<std::size_t>(start) * dtype_size(dtype_));
  return result;
}

void Array::set_rows(std::int64_t start, const Array& rows) {
  if (rows.dtype() != dtype_)
    throw DTypeError("Array::set_rows: a " + std::string(dtype_name(rows.dtype())) + " block into a " +
                     dtype_name(dtype_) + " array");
  const Array target = this->rows(start, rows.shape().rank() == 0 ? 0 : rows.shape()[0]);
  if (target.shape() != rows.shape())
    throw ShapeError("Array::set_rows: rows of shape " + rows.shape().to_string() + " into " +
                     target.shape().to_string());
  if (rows.nbytes() > 0) std::memcpy(const_cast<void*>(target.raw()), rows.raw(), rows.nbytes());
}

bool Array::bitwise_equal(const Array& other) const {
  if (shape_ != other.shape_ || dtype_ != other.dtype_) return false;
  return nbytes() == 0 || std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

}  // namespace kiln
