#include <kiln/train/detail/data_parallel.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include <kiln/core/error.hpp>

namespace kiln::detail {

Shard shard_of(std::int64_t rows, int rank, int size) {
  const std::int64_t each = rows / size, extra = rows % size;
  return {rank * each + std::min<std::int64_t>(rank, extra), each + (rank < extra ? 1 : 0)};
}

// ---- gradient buckets ---------------------------------------------------------------------------------------

namespace {
constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;
}

GradientBuckets::GradientBuckets(Communicator& communicator, const std::vector<Tensor>& gradients)
    : communicator_(communicator), slots_(gradients.size()), reduced_(gradients.size()) {
  // Packed in the order backward computes them: a plan launches its kernels in node order, the same on every
  // rank, and the last layers' gradients come first. So the first bucket fills while the earlier layers'
  // gradients are still being computed. A bucket holds one dtype; a gradient without elements stays out.
  for (std::size_t i = 0; i < gradients.size(); ++i)
    if (gradients[i].valid() && gradients[i].shape().num_elements() > 0) order_.push_back(i);
  std::sort(order_.begin(), order_.end(),
            [&](std::size_t a, std::size_t b) { return gradients[a].id() < gradients[b].id(); });
  const std::size_t capacity = communicator_.bucket_bytes();
  std::vector<std::size_t> counts;                                      // elements per bucket
  std::vector<std::size_t> open(2, static_cast<std::size_t>(-1));       // the open bucket per dtype
  std::vector<bool> first_closed(2, false);                             // past the first bucket, per dtype
  for (const std::size_t i : order_) {
    const DType dtype = gradients[i].dtype();
    const auto kind = static_cast<std::size_t>(dtype == DType::float64);
    const auto count = static_cast<std::size_t>(gradients[i].shape().num_elements());
    // The first bucket is small (1 MB at most, as PyTorch's DDP does), so its sum starts early.
    const std::size_t limit = first_closed[kind] ? capacity : std::min(capacity, kFirstBucketBytes);
    std::size_t& bucket = open[kind];
    if (bucket == static_cast<std::size_t>(-1) || (counts[bucket] + count) * dtype_size(dtype) > limit) {
      if (bucket != static_cast<std::size_t>(-1)) first_closed[kind] = true;
      bucket = buckets_.size();
      buckets_.emplace_back();
      buckets_.back().dtype = dtype;
      counts.push_back(0);
    }
    slots_[i] = {bucket, counts[bucket], count, false};
    counts[bucket] += count;
    ++buckets_[bucket].size;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    buckets_[b].data = Array(Shape({static_cast<std::int64_t>(counts[b])}), buckets_[b].dtype);
  for (const std::size_t i : order_) {
    Bucket& bucket = buckets_[slots_[i].bucket];
    auto* base = static_cast<unsigned char*>(bucket.data.raw());
    reduced_[i] = Array::view(base + slots_[i].offset * dtype_size(bucket.dtype), gradients[i].shape(), bucket.dtype);
  }
}

void GradientBuckets::begin(double scale) {
  scale_ = scale;
  finishing_ = false;
  started_early_ = 0;
  next_start_ = 0;
  for (Bucket& bucket : buckets_) bucket.pending = bucket.size;
  for (Slot& slot : slots_) slot.filled = false;
}

namespace {
template <class T>
void scaled_copy(const void* from, void* to, std::size_t count, double scale) {
  const T* source = static_cast<const T*>(from);
  T* target = static_cast<T*>(to);
  const T factor = static_cast<T>(scale);
  if (scale == 1.0)
    std::memcpy(target, source, count * sizeof(T));
  else
    for (std::size_t i = 0; i < count; ++i) target[i] = source[i] * factor;
}
}  // namespace

void GradientBuckets::ready(std::size_t i, const void* data) {
  Slot& slot = slots_.at(i);
  if (slot.count == 0 || slot.filled) return;
  Bucket& bucket = buckets_[slot.bucket];
  auto* to = static_cast<unsigned char*>(bucket.data.raw()) + slot.offset * dtype_size(bucket.dtype);
  if (data == nullptr)
    std::memset(to, 0, slot.count * dtype_size(bucket.dtype));
  else if (bucket.dtype == DType::float64)
    scaled_copy<double>(data, to, slot.count, scale_);
  else
    scaled_copy<float>(data, to, slot.count, scale_);
  slot.filled = true;
  --bucket.pending;
  // Buckets start in their order on every rank, whatever order their gradients came in (a recurrent layer's
  // come first to last): a full bucket waits for the ones before it.
  while (next_start_ < buckets_.size() && buckets_[next_start_].pending == 0) {
    communicator_.start_sum(buckets_[next_start_].data.raw(), buckets_[next_start_].data.size(),
                            buckets_[next_start_].dtype);
    ++next_start_;
    if (!finishing_) ++started_early_;
  }
  communicator_.progress();
}

void GradientBuckets::finish() {
  finishing_ = true;
  // Every rank starts every bucket, whatever it computed: the gradients still missing (a rank without rows,
  // or one that failed) are zeros now.
  for (const std::size_t i : order_)
    if (!slots_[i].filled) ready(i, nullptr);
  communicator_.wait_all();
}

// ---- agreeing on failures -------------------------------------------------------------------------------------

Agreement::Agreement(Communicator& communicator, std::string who)
    : communicator_(communicator), who_(std::move(who)) {}

void Agreement::fail(std::exception_ptr error) {
  if (!error_) error_ = std::move(error);
}

namespace {
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& caught) {
    return caught.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}
}  // namespace

bool Agreement::exchange(std::vector<double>& values, const std::string& where, bool stop) {
  return exchange(values, [&] { return where; }, stop);
}

bool Agreement::exchange_step(std::vector<double>& values, int epoch, std::int64_t batch, bool stop) {
  return exchange(
      values, [epoch, batch] { return "epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(batch + 1); },
      stop);
}

bool Agreement::exchange(std::vector<double>& values, const std::function<std::string()>& where, bool stop) {
  // [each rank's status][ranks asking to stop][the values]
  const auto ranks = static_cast<std::size_t>(communicator_.size());
  buffer_.assign(ranks + 1, 0.0);
  buffer_.insert(buffer_.end(), values.begin(), values.end());
  if (error_) buffer_[static_cast<std::size_t>(communicator_.rank())] = 1.0;
  buffer_[ranks] = stop ? 1.0 : 0.0;
  communicator_.sum(buffer_.data(), buffer_.size());
  std::size_t failed = ranks;
  for (std::size_t r = 0; r < ranks && failed == ranks; ++r)
    if (buffer_[r] != 0.0) failed = r;
  if (failed == ranks) {
    std::copy(buffer_.begin() + static_cast<std::ptrdiff_t>(ranks + 1), buffer_.end(), values.begin());
    return buffer_[ranks] != 0.0;
  }
  // Every rank knows that rank `failed` failed; it tells the others why, and they all stop.
  std::string message = error_ ? message_of(error_) : std::string();
  std::uint64_t length = message.size();
  communicator_.broadcast(&length, sizeof length, static_cast<int>(failed));
  message.resize(length);
  if (length > 0) communicator_.broadcast(message.data(), length, static_cast<int>(failed));
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  std::size_t others = 0;
  for (std::size_t r = failed + 1; r < ranks; ++r) others += buffer_[r] != 0.0;
  throw DistributedError(who_ + ": rank " + std::to_string(failed) + " of " + std::to_string(ranks) + " failed at " +
                         where() + (others ? " (and " + std::to_string(others) + " more ranks)" : std::string()) +
                         ": " + message);
}

bool Agreement::agree(const std::string& where, bool stop) {
  std::vector<double> none;
  return exchange(none, where, stop);
}

// ---- checks and copies ------------------------------------------------------------------------------------------

std::uint64_t hash_bytes(const void* data, std::size_t size, std::uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
  return hash;
}

namespace {
std::string hex(std::uint64_t value) {
  std::ostringstream text;
  text << "0x" << std::hex << value;
  return text.str();
}
}  // namespace

void check_same_on_every_rank(Communicator& communicator, std::uint64_t model, std::uint64_t fit,
                              const std::string& who) {
  const std::vector<std::uint64_t> models = communicator.all_gather(model);
  const std::vector<std::uint64_t> fits = communicator.all_gather(fit);
  for (std::size_t r = 1; r < models.size(); ++r) {
    if (models[r] != models[0])
      throw DistributedError(who + ": rank " + std::to_string(r) + "'s model differs from rank 0's (config and weights "
                             "hash " + hex(models[r]) + " against " + hex(models[0]) +
                             "); every rank must build the same model");
    if (fits[r] != fits[0])
      throw DistributedError(who + ": rank " + std::to_string(r) + "'s data or fit options differ from rank 0's (hash " +
                             hex(fits[r]) + " against " + hex(fits[0]) +
                             "); every rank must pass the same rows, batch_size, epochs and steps");
  }
}

void broadcast_arrays(Communicator& communicator, std::vector<Array>& arrays) {
  for (Array& array : arrays)
    if (array.nbytes() > 0) communicator.broadcast(array.raw(), array.nbytes(), 0);
}

}  // namespace kiln::detail
