// Dataset: a description (a chain of DatasetNodes) opened into a chain of stages per pass. Each stage
// writes the next element into the Example it is given, reusing that example's arrays when their shapes
// fit, so after the first batches a pass allocates nothing: batch() copies rows into the batch's arrays,
// shuffle() swaps examples in and out of its buffer, prefetch() swaps ready examples for used ones.
#include <kiln/data/dataset.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <kiln/core/dtype.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/data/detail/csv_stream.hpp>

namespace kiln {

namespace detail {

class DatasetStage {
 public:
  virtual ~DatasetStage() = default;
  /// The next element into `out`; false at the end.
  virtual bool next(Example& out) = 0;
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const = 0;
  virtual std::int64_t cardinality() const = 0;
  virtual bool batched() const = 0;
};

}  // namespace detail

namespace {

using detail::DatasetNode;
using detail::DatasetStage;
using NodePtr = std::shared_ptr<const DatasetNode>;

// The iteration a step derives for what it opens, so two shuffles in one pipeline draw differently.
std::uint64_t derived(std::uint64_t iteration, std::uint64_t salt) { return mix64(iteration ^ mix64(salt + 1)); }

std::size_t row_bytes(const Array& array) {
  return array.shape()[0] == 0 ? 0 : array.nbytes() / static_cast<std::size_t>(array.shape()[0]);
}

// `rows` is an array of `count` rows each of `row`'s shape, and of its dtype (compared without making a Shape,
// which would allocate).
bool is_rows_of(const Array& rows, std::int64_t count, const Array& row) {
  if (rows.raw() == nullptr || rows.dtype() != row.dtype() || rows.shape().rank() != row.shape().rank() + 1 ||
      rows.shape()[0] != count)
    return false;
  for (int axis = 0; axis < row.shape().rank(); ++axis)
    if (rows.shape()[axis + 1] != row.shape()[axis]) return false;
  return true;
}

// `slot` holds one row of `source`: `source` is rows of slot's shape.
bool holds_row_of(const Array& slot, const Array& source) {
  return slot.raw() != nullptr && is_rows_of(source, source.shape()[0], slot);
}

Array row_slot_of(const Array& source) {
  std::vector<std::int64_t> dims(source.shape().dims().begin() + 1, source.shape().dims().end());
  return Array(Shape(dims), source.dtype());
}

// ---- sources ----------------------------------------------------------------------------------------------

class ArraysStage : public DatasetStage {
 public:
  explicit ArraysStage(const Example& arrays) : arrays_(arrays) {}
  bool next(Example& out) override {
    if (row_ >= arrays_.x[0].shape()[0]) return false;
    copy_rows(arrays_.x, out.x);
    copy_rows(arrays_.y, out.y);
    copy_rows(arrays_.sample_weight, out.sample_weight);
    ++row_;
    return true;
  }

 private:
  void copy_rows(const std::vector<Array>& sources, std::vector<Array>& slots) const {
    slots.resize(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (!holds_row_of(slots[i], sources[i])) slots[i] = row_slot_of(sources[i]);
      const std::size_t bytes = row_bytes(sources[i]);
      std::memcpy(slots[i].raw(), static_cast<const unsigned char*>(sources[i].raw()) + static_cast<std::size_t>(row_) * bytes,
                  bytes);
    }
  }

  const Example& arrays_;
  std::int64_t row_ = 0;
};

class ArraysNode : public DatasetNode {
 public:
  explicit ArraysNode(Example arrays) : arrays_(std::move(arrays)) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t) const override { return std::make_unique<ArraysStage>(arrays_); }
  std::int64_t cardinality() const override { return arrays_.x[0].shape()[0]; }
  bool batched() const override { return false; }

 private:
  Example arrays_;
};

// Writes `count` values of a double row into an array of float32 or float64.
void write_values(Array& slot, const double* values, std::size_t count) {
  if (slot.dtype() == DType::float64) {
    std::memcpy(slot.raw(), values, count * sizeof(double));
  } else {
    auto* into = static_cast<float*>(slot.raw());
    for (std::size_t i = 0; i < count; ++i) into[i] = static_cast<float>(values[i]);
  }
}

class CsvStage : public DatasetStage {
 public:
  CsvStage(const std::vector<std::string>& paths, const CsvOptions& options) : paths_(paths), options_(options) {
    labels_ = options.label_names.size() + options.label_indices.size();
  }
  bool next(Example& out) override {
    while (!stream_ || !stream_->next(row_.data())) {
      if (file_ == paths_.size()) return false;
      stream_ = std::make_unique<detail::CsvStream>(paths_[file_], options_);
      if (file_ > 0 && stream_->width() != row_.size()) {
        const std::string message = paths_[file_] + ": " + std::to_string(stream_->width()) +
                                    " columns are read, but " + std::to_string(row_.size()) + " from " + paths_[0];
        stream_.reset();
        file_ = paths_.size();  // the pass ends here: this file's rows would not fit the others'
        throw ValueError(message);
      }
      row_.resize(stream_->width());
      ++file_;
    }
    const std::size_t features = row_.size() - labels_;
    out.x.resize(1);
    out.y.resize(labels_ > 0 ? 1 : 0);
    out.sample_weight.clear();
    ensure(out.x[0], features);
    write_values(out.x[0], row_.data(), features);
    if (labels_ > 0) {
      ensure(out.y[0], labels_);
      write_values(out.y[0], row_.data() + features, labels_);
    }
    return true;
  }

 private:
  void ensure(Array& slot, std::size_t width) const {
    if (slot.raw() == nullptr || slot.dtype() != options_.dtype || slot.shape().rank() != 1 ||
        slot.shape()[0] != static_cast<std::int64_t>(width))
      slot = Array(Shape{static_cast<std::int64_t>(width)}, options_.dtype);
  }

  const std::vector<std::string>& paths_;
  const CsvOptions& options_;
  std::size_t labels_ = 0;
  std::size_t file_ = 0;
  std::unique_ptr<detail::CsvStream> stream_;
  std::vector<double> row_;
};

class CsvNode : public DatasetNode {
 public:
  CsvNode(std::vector<std::string> paths, CsvOptions options) : paths_(std::move(paths)), options_(std::move(options)) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t) const override {
    return std::make_unique<CsvStage>(paths_, options_);
  }
  std::int64_t cardinality() const override { return Dataset::unknown; }
  bool batched() const override { return false; }

 private:
  std::vector<std::string> paths_;
  CsvOptions options_;
};

class GeneratorStage : public DatasetStage {
 public:
  explicit GeneratorStage(Dataset::Generator generator) : generator_(std::move(generator)) {}
  bool next(Example& out) override {
    if (ended_) return false;
    ended_ = !generator_(out);
    return !ended_;
  }

 private:
  Dataset::Generator generator_;
  bool ended_ = false;
};

class GeneratorNode : public DatasetNode {
 public:
  GeneratorNode(std::function<Dataset::Generator()> make, std::int64_t cardinality)
      : make_(std::move(make)), cardinality_(cardinality) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t) const override {
    Dataset::Generator generator = make_();
    if (!generator) throw ValueError("Dataset::from_generator: the factory gave an empty generator");
    return std::make_unique<GeneratorStage>(std::move(generator));
  }
  std::int64_t cardinality() const override { return cardinality_; }
  bool batched() const override { return false; }

 private:
  std::function<Dataset::Generator()> make_;
  std::int64_t cardinality_;
};

// ---- steps ------------------------------------------------------------------------------------------------

// A step over one upstream node.
class StepNode : public DatasetNode {
 public:
  explicit StepNode(NodePtr upstream) : upstream_(std::move(upstream)) {}
  std::int64_t cardinality() const override { return upstream_->cardinality(); }
  bool batched() const override { return upstream_->batched(); }

 protected:
  NodePtr upstream_;
};

class MapStage : public DatasetStage {
 public:
  MapStage(std::unique_ptr<DatasetStage> upstream, const std::function<void(Example&)>& function)
      : upstream_(std::move(upstream)), function_(function) {}
  bool next(Example& out) override {
    if (!upstream_->next(out)) return false;
    function_(out);
    return true;
  }

 private:
  std::unique_ptr<DatasetStage> upstream_;
  const std::function<void(Example&)>& function_;
};

class MapNode : public StepNode {
 public:
  MapNode(NodePtr upstream, std::function<void(Example&)> function)
      : StepNode(std::move(upstream)), function_(std::move(function)) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    return std::make_unique<MapStage>(upstream_->open(iteration), function_);
  }

 private:
  std::function<void(Example&)> function_;
};

class BatchStage : public DatasetStage {
 public:
  BatchStage(std::unique_ptr<DatasetStage> upstream, std::int64_t size, bool drop_remainder)
      : upstream_(std::move(upstream)), size_(size), drop_remainder_(drop_remainder) {}

  bool next(Example& out) override {
    std::int64_t count = 0;
    for (; count < size_; ++count) {
      // Once the upstream has ended it is not asked again (a generator is not called past its end).
      if (exhausted_ || !upstream_->next(row_)) {
        exhausted_ = true;
        break;
      }
      check_layout();
      if (count == 0) shape_batch(out);
      place(row_.x, out.x, count);
      place(row_.y, out.y, count);
      place(row_.sample_weight, out.sample_weight, count);
      ++element_;
    }
    if (count == 0 || (count < size_ && drop_remainder_)) return false;
    if (count < size_)
      for (std::vector<Array>* arrays : {&out.x, &out.y, &out.sample_weight})
        for (Array& array : *arrays) array = array.rows(0, count);
    return true;
  }

 private:
  // Every element has the first one's arrays: their number, shapes and dtypes.
  void check_layout() {
    const std::vector<Array>* parts[] = {&row_.x, &row_.y, &row_.sample_weight};
    if (first_.empty()) {
      for (const std::vector<Array>* arrays : parts) {
        first_.emplace_back();
        first_dtypes_.emplace_back();
        for (const Array& array : *arrays) {
          first_.back().push_back(array.shape());
          first_dtypes_.back().push_back(array.dtype());
        }
      }
      return;
    }
    static const char* names[] = {"x", "y", "sample_weight"};
    for (std::size_t p = 0; p < 3; ++p) {
      const std::vector<Array>& arrays = *parts[p];
      const std::vector<Shape>& expected = first_[p];
      if (arrays.size() != expected.size())
        throw ShapeError("Dataset.batch: element " + std::to_string(element_) + " has " + std::to_string(arrays.size()) +
                         " " + names[p] + " arrays, but the first element has " + std::to_string(expected.size()));
      for (std::size_t i = 0; i < arrays.size(); ++i) {
        if (arrays[i].shape() != expected[i])
          throw ShapeError("Dataset.batch: element " + std::to_string(element_) + " has " + names[p] + "[" +
                           std::to_string(i) + "] of shape " + arrays[i].shape().to_string() +
                           ", but the first element's is " + expected[i].to_string() +
                           " (elements of a batch must share their shapes)");
        if (arrays[i].dtype() != first_dtypes_[p][i])
          throw DTypeError("Dataset.batch: element " + std::to_string(element_) + " has " + names[p] + "[" +
                           std::to_string(i) + "] of dtype " + dtype_name(arrays[i].dtype()) +
                           ", but the first element's is " + dtype_name(first_dtypes_[p][i]));
      }
    }
  }

  // The batch's arrays: `size_` rows of each element array, reused when they already are.
  void shape_batch(Example& out) const {
    auto shape = [&](const std::vector<Array>& rows, std::vector<Array>& batch) {
      batch.resize(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (!is_rows_of(batch[i], size_, rows[i])) {
          std::vector<std::int64_t> dims = {size_};
          dims.insert(dims.end(), rows[i].shape().dims().begin(), rows[i].shape().dims().end());
          batch[i] = Array(Shape(dims), rows[i].dtype());
        }
    };
    shape(row_.x, out.x);
    shape(row_.y, out.y);
    shape(row_.sample_weight, out.sample_weight);
  }

  static void place(const std::vector<Array>& rows, std::vector<Array>& batch, std::int64_t at) {
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(static_cast<unsigned char*>(batch[i].raw()) + static_cast<std::size_t>(at) * rows[i].nbytes(),
                  rows[i].raw(), rows[i].nbytes());
  }

  std::unique_ptr<DatasetStage> upstream_;
  std::int64_t size_;
  bool drop_remainder_;
  Example row_;
  std::vector<std::vector<Shape>> first_;  // the first element's shapes: x, y, sample_weight
  std::vector<std::vector<DType>> first_dtypes_;
  std::int64_t element_ = 0;
  bool exhausted_ = false;
};

class BatchNode : public StepNode {
 public:
  BatchNode(NodePtr upstream, std::int64_t size, bool drop_remainder)
      : StepNode(std::move(upstream)), size_(size), drop_remainder_(drop_remainder) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    return std::make_unique<BatchStage>(upstream_->open(iteration), size_, drop_remainder_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = upstream_->cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / size_ : (n + size_ - 1) / size_;
  }
  bool batched() const override { return true; }

 private:
  std::int64_t size_;
  bool drop_remainder_;
};

// tf.data's shuffle: a buffer of elements, one drawn at random and replaced by the next from upstream.
class ShuffleStage : public DatasetStage {
 public:
  ShuffleStage(std::unique_ptr<DatasetStage> upstream, std::int64_t buffer_size, std::uint64_t seed)
      : upstream_(std::move(upstream)), buffer_(static_cast<std::size_t>(buffer_size)), rng_(seed) {}

  bool next(Example& out) override {
    while (!exhausted_ && size_ < buffer_.size()) {
      if (upstream_->next(buffer_[size_]))
        ++size_;
      else
        exhausted_ = true;
    }
    if (size_ == 0) return false;
    const std::size_t drawn = static_cast<std::size_t>(rng_.below(size_));
    std::swap(out, buffer_[drawn]);
    if (exhausted_ || !upstream_->next(buffer_[drawn])) {
      exhausted_ = true;
      std::swap(buffer_[drawn], buffer_[size_ - 1]);
      --size_;
    }
    return true;
  }

 private:
  std::unique_ptr<DatasetStage> upstream_;
  std::vector<Example> buffer_;
  std::size_t size_ = 0;
  bool exhausted_ = false;
  Rng rng_;
};

class ShuffleNode : public StepNode {
 public:
  ShuffleNode(NodePtr upstream, std::int64_t buffer_size, std::uint64_t seed)
      : StepNode(std::move(upstream)), buffer_size_(buffer_size), seed_(seed) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    return std::make_unique<ShuffleStage>(upstream_->open(derived(iteration, 1)), buffer_size_,
                                          mix64(seed_ ^ mix64(iteration)));
  }

 private:
  std::int64_t buffer_size_;
  std::uint64_t seed_;
};

class RepeatStage : public DatasetStage {
 public:
  RepeatStage(const DatasetNode& upstream, std::int64_t count, std::uint64_t iteration)
      : node_(upstream), count_(count), iteration_(iteration), upstream_(node_.open(derived(iteration_, 0))) {}
  bool next(Example& out) override {
    while (true) {
      if (upstream_->next(out)) {
        produced_ = true;
        return true;
      }
      // An empty pass ends the repetition, or repeat() of nothing would spin for ever.
      if (!produced_ || (count_ >= 0 && ++repetition_ >= count_)) return false;
      if (count_ < 0) ++repetition_;
      produced_ = false;
      upstream_ = node_.open(derived(iteration_, static_cast<std::uint64_t>(repetition_)));
    }
  }

 private:
  const DatasetNode& node_;
  std::int64_t count_;
  std::uint64_t iteration_;
  std::int64_t repetition_ = 0;
  bool produced_ = false;
  std::unique_ptr<DatasetStage> upstream_;
};

class RepeatNode : public StepNode {
 public:
  RepeatNode(NodePtr upstream, std::int64_t count) : StepNode(std::move(upstream)), count_(count) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    if (count_ == 0) return std::make_unique<GeneratorStage>([](Example&) { return false; });
    return std::make_unique<RepeatStage>(*upstream_, count_, iteration);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = upstream_->cardinality();
    if (count_ == 0 || n == 0) return 0;
    if (count_ < 0 || n == Dataset::infinite) return Dataset::infinite;  // tf.data's too, for an unknown length
    if (n == Dataset::unknown) return Dataset::unknown;
    return n * count_;
  }

 private:
  std::int64_t count_;
};

class TakeStage : public DatasetStage {
 public:
  TakeStage(std::unique_ptr<DatasetStage> upstream, std::int64_t count) : upstream_(std::move(upstream)), left_(count) {}
  bool next(Example& out) override {
    if (left_ <= 0 || !upstream_->next(out)) return false;
    --left_;
    return true;
  }

 private:
  std::unique_ptr<DatasetStage> upstream_;
  std::int64_t left_;
};

class TakeNode : public StepNode {
 public:
  TakeNode(NodePtr upstream, std::int64_t count) : StepNode(std::move(upstream)), count_(count) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    return std::make_unique<TakeStage>(upstream_->open(iteration), count_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = upstream_->cardinality();
    if (n == Dataset::infinite) return count_;
    if (n == Dataset::unknown) return Dataset::unknown;
    return std::min(n, count_);
  }

 private:
  std::int64_t count_;
};

// A producer thread fills free slots from upstream; next() swaps a ready slot for the caller's example,
// whose arrays become a free slot to be filled again. The queues are rings of slot indices, made once.
class PrefetchStage : public DatasetStage {
 public:
  PrefetchStage(std::unique_ptr<DatasetStage> upstream, std::int64_t buffer_size)
      : upstream_(std::move(upstream)), slots_(static_cast<std::size_t>(buffer_size)) {
    for (std::size_t i = 0; i < slots_.size(); ++i) free_.push_back(i);
    ready_.reserve(slots_.size());
    producer_ = std::thread([this] { produce(); });
  }

  ~PrefetchStage() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    producer_.join();
  }

  bool next(Example& out) override {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return false;
    }
    const std::size_t slot = ready_.front();
    ready_.erase(ready_.begin());  // at most buffer_size indices: no allocation, a short move
    std::swap(out, slots_[slot]);
    free_.push_back(slot);
    lock.unlock();
    changed_.notify_all();
    return true;
  }

 private:
  void produce() {
    while (true) {
      std::size_t slot = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return !free_.empty() || stopping_; });
        if (stopping_) return;
        slot = free_.back();
        free_.pop_back();
      }
      bool more = false;
      std::exception_ptr error;
      try {
        more = upstream_->next(slots_[slot]);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (more) {
          ready_.push_back(slot);
        } else {
          error_ = error;
          finished_ = true;
        }
      }
      changed_.notify_all();
      if (!more) return;
    }
  }

  std::unique_ptr<DatasetStage> upstream_;
  std::vector<Example> slots_;
  std::vector<std::size_t> free_, ready_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false, finished_ = false;
  std::exception_ptr error_;
  std::thread producer_;
};

class PrefetchNode : public StepNode {
 public:
  PrefetchNode(NodePtr upstream, std::int64_t buffer_size) : StepNode(std::move(upstream)), buffer_size_(buffer_size) {}
  std::unique_ptr<DatasetStage> open(std::uint64_t iteration) const override {
    return std::make_unique<PrefetchStage>(upstream_->open(iteration), buffer_size_);
  }

 private:
  std::int64_t buffer_size_;
};

void check_positive(std::int64_t value, const std::string& what) {
  if (value <= 0) throw ValueError("Dataset." + what + " must be positive, got " + std::to_string(value));
}

}  // namespace

// ---- Dataset ----------------------------------------------------------------------------------------------------

Dataset Dataset::from_arrays(std::vector<Array> x, std::vector<Array> y, std::vector<Array> sample_weight) {
  if (x.empty()) throw ValueError("Dataset::from_arrays: no x arrays");
  Example arrays{std::move(x), std::move(y), std::move(sample_weight)};
  const std::int64_t rows = arrays.x[0].shape().rank() > 0 ? arrays.x[0].shape()[0] : -1;
  for (const std::vector<Array>* part : {&arrays.x, &arrays.y, &arrays.sample_weight})
    for (const Array& array : *part)
      if (array.shape().rank() == 0 || array.shape()[0] != rows)
        throw ValueError("Dataset::from_arrays: every array needs the same number of rows (axis 0); x[0] has shape " +
                         arrays.x[0].shape().to_string() + ", another " + array.shape().to_string());
  return Dataset(std::make_shared<ArraysNode>(std::move(arrays)));
}

Dataset Dataset::from_csv(std::vector<std::string> paths, CsvOptions options) {
  if (paths.empty()) throw ValueError("Dataset::from_csv: no files");
  return Dataset(std::make_shared<CsvNode>(std::move(paths), std::move(options)));
}

Dataset Dataset::from_generator(std::function<Generator()> make, std::int64_t cardinality) {
  if (!make) throw ValueError("Dataset::from_generator: no generator factory");
  if (cardinality < unknown) throw ValueError("Dataset::from_generator: bad cardinality " + std::to_string(cardinality));
  return Dataset(std::make_shared<GeneratorNode>(std::move(make), cardinality));
}

Dataset Dataset::map(std::function<void(Example&)> function) const {
  if (!function) throw ValueError("Dataset.map: no function");
  return Dataset(std::make_shared<MapNode>(node_, std::move(function)));
}

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  check_positive(batch_size, "batch: batch_size");
  return Dataset(std::make_shared<BatchNode>(node_, batch_size, drop_remainder));
}

Dataset Dataset::shuffle(std::int64_t buffer_size, std::uint64_t seed) const {
  check_positive(buffer_size, "shuffle: buffer_size");
  return Dataset(std::make_shared<ShuffleNode>(node_, buffer_size, seed));
}

Dataset Dataset::repeat(std::int64_t count) const {
  if (count < -1) throw ValueError("Dataset.repeat: count must be -1 (for ever) or more, got " + std::to_string(count));
  return Dataset(std::make_shared<RepeatNode>(node_, count));
}

Dataset Dataset::take(std::int64_t count) const {
  if (count < 0) throw ValueError("Dataset.take: count must not be negative, got " + std::to_string(count));
  return Dataset(std::make_shared<TakeNode>(node_, count));
}

Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  check_positive(buffer_size, "prefetch: buffer_size");
  return Dataset(std::make_shared<PrefetchNode>(node_, buffer_size));
}

std::int64_t Dataset::cardinality() const { return node_->cardinality(); }

bool Dataset::batched() const { return node_->batched(); }

Dataset::Iterator Dataset::iterate(std::uint64_t iteration) const { return Iterator(node_, node_->open(iteration)); }

Dataset::Iterator::Iterator(std::shared_ptr<const detail::DatasetNode> node, std::unique_ptr<detail::DatasetStage> stage)
    : node_(std::move(node)), stage_(std::move(stage)) {}
Dataset::Iterator::~Iterator() = default;
Dataset::Iterator::Iterator(Iterator&&) noexcept = default;
// The stages first: they read their nodes' data, and a prefetch thread may be running in them.
Dataset::Iterator& Dataset::Iterator::operator=(Iterator&& other) noexcept {
  stage_.reset();
  node_ = std::move(other.node_);
  stage_ = std::move(other.stage_);
  position_ = other.position_;
  return *this;
}

bool Dataset::Iterator::next(Example& out) {
  try {
    if (!stage_->next(out)) return false;
  } catch (const std::exception& error) {
    std::throw_with_nested(
        DatasetError("Dataset: reading element " + std::to_string(position_) + " (from 0) failed: " + error.what()));
  }
  ++position_;
  return true;
}

}  // namespace kiln
