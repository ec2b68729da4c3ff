// Where a fit's batches come from (Trainer::Fit::Batches): in-memory arrays, shuffled each epoch, with their
// validation split and class weights; or a batched Dataset, iterated per epoch as Keras iterates one.
#include <kiln/train/detail/fit.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/data/data.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/train/detail/sample_weights.hpp>

namespace kiln {
namespace {

using detail::num_rows;

// Gathers rows `order[start, start + count)` of `source` into the front of `buffer` (preallocated for a
// whole batch), so shuffled batches cost a copy but no allocation of data.
Array gather_rows(const Array& source, Array& buffer, const std::vector<std::int64_t>& order, std::int64_t start,
                  std::int64_t count) {
  const std::size_t row_bytes =
      source.shape()[0] == 0 ? 0 : source.nbytes() / static_cast<std::size_t>(source.shape()[0]);
  const auto* from = static_cast<const unsigned char*>(source.raw());
  auto* to = static_cast<unsigned char*>(buffer.raw());
  for (std::int64_t j = 0; j < count; ++j)
    std::memcpy(to + static_cast<std::size_t>(j) * row_bytes,
                from + static_cast<std::size_t>(order[static_cast<std::size_t>(start + j)]) * row_bytes, row_bytes);
  return buffer.rows(0, count);
}

Array batch_buffer(const Array& source, std::int64_t batch_size) {
  std::vector<std::int64_t> dims = source.shape().dims();
  dims[0] = std::min(batch_size, dims[0]);
  return Array(Shape(dims), source.dtype());
}

}  // namespace

// ---- arrays ----------------------------------------------------------------------------------------------------

// The arrays fit was given: checked, their validation part set aside, weighted by class, and batched in a
// new order each epoch into buffers made once.
class Trainer::Fit::ArrayBatches final : public Trainer::Fit::Batches {
 public:
  ArrayBatches(Fit& fit, std::vector<Array> x, std::vector<Array> y) : Batches(fit) {
    x_ = std::move(x);
    y_ = std::move(y);
  }

  void prepare() override {
    Trainer& trainer = fit_.trainer_;
    const FitOptions& options = fit_.options_;
    trainer.check_data(x_, y_, "fit");
    w_ = trainer.check_weights(options.sample_weight_, y_, "fit");
    fit_.check_options();
    split_validation();
    weigh_classes();
    rows_ = num_rows(x_);
    batch_size_ = trainer.batch_size_for(std::min(options.batch_size_, rows_), rows_, "fit");
    fit_.steps_ = (rows_ + batch_size_ - 1) / batch_size_;
    for (const Array& array : x_) buffers_x_.push_back(batch_buffer(array, batch_size_));
    for (const Array& array : y_) buffers_y_.push_back(batch_buffer(array, batch_size_));
    for (const Array& array : w_) buffers_w_.push_back(batch_buffer(array, batch_size_));
    order_.resize(static_cast<std::size_t>(rows_));
    fit_.batch_x_.resize(x_.size());
    fit_.batch_y_.resize(y_.size());
    fit_.batch_w_.resize(w_.size());
  }

  std::int64_t largest_batch() const override { return batch_size_; }

  // Each epoch's row order: seeded by (seed, epoch), so a resumed run shuffles as the uninterrupted one.
  void begin_epoch(int epoch) override {
    const FitOptions& options = fit_.options_;
    if (options.shuffle_)
      order_ = shuffled_row_order(rows_, mix64(options.seed_ ^ mix64(static_cast<std::uint64_t>(epoch))));
    else
      std::iota(order_.begin(), order_.end(), std::int64_t{0});
  }

  // Batch `batch` of the arrays, in this epoch's row order; in a distributed fit, this rank's rows of it, in
  // the order every rank drew.
  bool next(int, std::int64_t batch) override {
    std::int64_t start = batch * batch_size_, count = std::min(batch_size_, rows_ - start);
    if (Communicator* communicator = fit_.communicator_) {
      fit_.global_rows_ = count;
      fit_.shard_ = detail::shard_of(count, communicator->rank(), communicator->size());
      start += fit_.shard_.start;
      count = fit_.shard_.count;
    }
    const bool shuffle = fit_.options_.shuffle_;
    auto gather = [&](const std::vector<Array>& arrays, std::vector<Array>& buffers, std::vector<Array>& batch_arrays) {
      for (std::size_t i = 0; i < arrays.size(); ++i)
        batch_arrays[i] = shuffle ? gather_rows(arrays[i], buffers[i], order_, start, count) : arrays[i].rows(start, count);
    };
    gather(x_, buffers_x_, fit_.batch_x_);
    gather(y_, buffers_y_, fit_.batch_y_);
    gather(w_, buffers_w_, fit_.batch_w_);
    return true;
  }

  // Rows are ordered by (seed, epoch): the resumed epoch draws its order again and starts at `batch`.
  void skip_to(int, std::int64_t) override {}

  std::string run_description() const override {
    return "arrays " + std::to_string(rows_) + "," + std::to_string(batch_size_);
  }

 private:
  // Validation data: given, or the last fraction of the rows (before shuffling, as Keras takes it).
  void split_validation() {
    fit_.val_x_ = fit_.options_.validation_x_;
    fit_.val_y_ = fit_.options_.validation_y_;
    if (!fit_.val_x_.empty() || !fit_.val_y_.empty()) {
      fit_.trainer_.check_data(fit_.val_x_, fit_.val_y_, "fit validation_data");
      fit_.val_w_ = fit_.trainer_.check_weights(fit_.options_.validation_sample_weight_, fit_.val_y_, "fit validation_data");
      return;
    }
    if (fit_.options_.validation_split_ <= 0.0) return;
    const std::int64_t rows = num_rows(x_);
    const auto validation_rows =
        static_cast<std::int64_t>(std::floor(static_cast<double>(rows) * fit_.options_.validation_split_));
    if (validation_rows == 0 || validation_rows == rows)
      throw ValueError(fit_.who() + ": validation_split " + std::to_string(fit_.options_.validation_split_) + " of " +
                       std::to_string(rows) + " samples leaves an empty part");
    auto split = [&](std::vector<Array>& arrays, std::vector<Array>& validation) {
      for (Array& array : arrays) {
        validation.push_back(array.rows(rows - validation_rows, validation_rows));
        array = array.rows(0, rows - validation_rows);
      }
    };
    split(x_, fit_.val_x_);
    split(y_, fit_.val_y_);
    split(w_, fit_.val_w_);
  }

  // class_weight as sample weights of the training rows (Keras leaves validation rows unweighted by it).
  void weigh_classes() {
    if (fit_.options_.class_weight_.empty()) return;
    if (!fit_.options_.sample_weight_.empty())
      throw ValueError(fit_.who() + ": class_weight and sample_weight cannot be given together");
    if (y_.size() != 1) throw ValueError(fit_.who() + ": class_weight is only supported for models with a single output");
    const Loss& loss = fit_.trainer_.losses_[0];
    w_ = {detail::class_sample_weights(fit_.options_.class_weight_, y_[0], fit_.trainer_.model_.model_output_shapes()[0], loss,
                                       fit_.who())};
  }

  std::int64_t rows_ = 0, batch_size_ = 0;
  std::vector<Array> buffers_x_, buffers_y_, buffers_w_;
  std::vector<std::int64_t> order_;
};

// ---- a Dataset -------------------------------------------------------------------------------------------------

// A batched Dataset: its first batch read and checked before any step (the graph is made from its shapes),
// iterated afresh each epoch unless steps_per_epoch makes one pass run on across epochs, as Keras does.
class Trainer::Fit::DatasetBatches final : public Trainer::Fit::Batches {
 public:
  DatasetBatches(Fit& fit, const Dataset& data) : Batches(fit), data_(&data) {}

  void prepare() override {
    fit_.check_options();
    prepare_dataset();
  }

  std::int64_t largest_batch() const override { return num_rows(x_); }

  // Keras iterates a dataset afresh each epoch unless steps_per_epoch is given.
  void begin_epoch(int epoch) override {
    if (fit_.options_.steps_per_epoch_ < 0 && opened_for_ != epoch) {
      iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(epoch)));
      opened_for_ = epoch;
    }
  }

  // The next batch; in a distributed fit, this rank's rows of it (every rank reads the whole batch).
  bool next(int epoch, std::int64_t batch) override {
    if (!next_dataset_batch(epoch, batch)) return false;
    if (fit_.communicator_ != nullptr) take_shard();
    return true;
  }

  // A dataset pass is opened as the interrupted run opened it and read past the batches it trained.
  void skip_to(int epoch, std::int64_t batch) override {
    const FitOptions& options = fit_.options_;
    std::int64_t skipped = batch;
    if (options.steps_per_epoch_ > 0) {
      // One pass runs on across epochs: the batches of the epochs before count too.
      skipped += static_cast<std::int64_t>(epoch - options.initial_epoch_) * options.steps_per_epoch_;
      iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(options.initial_epoch_)));
    } else {
      iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(epoch)));
      opened_for_ = epoch;
    }
    pending_ = false;
    for (std::int64_t i = 0; i < skipped; ++i)
      if (!iterator_->next(example_))
        throw ValueError(fit_.who() + ": the dataset ran out while skipping the " + std::to_string(skipped) +
                         " batches the interrupted run had trained");
  }

  std::string run_description() const override { return "dataset " + std::to_string(data_->cardinality()); }

 private:
  // A dataset's steps per epoch, checked against its length, and its first batch read and checked, all
  // before any step: the graph is made from that batch's shapes.
  void prepare_dataset() {
    if (!data_->batched())
      throw ValueError(fit_.who() + ": the dataset's elements are single samples; call batch(n) on it first");
    const std::int64_t length = data_->cardinality();
    const std::int64_t per_epoch = fit_.options_.steps_per_epoch_;
    if (per_epoch == 0 || per_epoch < -1)
      throw ValueError(fit_.who() + ": steps_per_epoch must be positive, got " + std::to_string(per_epoch));
    if (per_epoch < 0 && length == Dataset::infinite)
      throw ValueError(fit_.who() + ": the dataset repeats without end; give steps_per_epoch");
    const std::int64_t epochs = std::max(0, fit_.options_.epochs_ - fit_.options_.initial_epoch_);
    if (per_epoch > 0 && length >= 0 && per_epoch * epochs > length)
      throw ValueError(fit_.who() + ": steps_per_epoch " + std::to_string(per_epoch) + " over " + std::to_string(epochs) +
                       " epochs needs " + std::to_string(per_epoch * epochs) + " batches, but the dataset has " +
                       std::to_string(length) + "; repeat() it");
    fit_.steps_ = per_epoch > 0 ? per_epoch : std::max<std::int64_t>(length, 0);  // 0: unknown until the data ends
    iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(fit_.options_.initial_epoch_)));
    // Keras's rules for a dataset: the weights come in its elements, and validation_split cannot cut it.
    if (!fit_.options_.sample_weight_.empty())
      throw ValueError(fit_.who() + ": with a dataset, give sample weights in its elements (Example::sample_weight)");
    if (fit_.options_.validation_split_ > 0.0)
      throw ValueError(fit_.who() + ": validation_split cannot split a dataset; give validation_data");
    if (!fit_.options_.class_weight_.empty() && fit_.trainer_.model_.num_outputs() != 1)
      throw ValueError(fit_.who() + ": class_weight is only supported for models with a single output");
    if (!fit_.options_.validation_x_.empty() || !fit_.options_.validation_y_.empty()) {
      fit_.val_x_ = fit_.options_.validation_x_;
      fit_.val_y_ = fit_.options_.validation_y_;
      fit_.trainer_.check_data(fit_.val_x_, fit_.val_y_, "fit validation_data");
      fit_.val_w_ = fit_.trainer_.check_weights(fit_.options_.validation_sample_weight_, fit_.val_y_, "fit validation_data");
    }
    if (!iterator_->next(example_)) throw ValueError(fit_.who() + ": the dataset is empty");
    x_ = example_.x;
    y_ = example_.y;
    fit_.trainer_.check_data(x_, y_, "fit");
    input_dtypes_ = fit_.trainer_.model_.input_dtypes();
    w_ = dataset_weights(y_);
    fit_.batch_x_ = x_;
    fit_.batch_y_ = y_;
    fit_.batch_w_ = w_;
    pending_ = true;
    opened_for_ = fit_.options_.initial_epoch_;
  }

  // The next batch of the dataset into batch_x_, batch_y_ and batch_w_ (converted to the model's dtype);
  // false at the end of the data.
  bool next_dataset_batch(int epoch, std::int64_t batch) {
    if (pending_) {
      pending_ = false;
      return true;
    }
    if (!iterator_->next(example_)) {
      if (fit_.options_.steps_per_epoch_ > 0)
        throw ValueError(fit_.who() + ": the dataset ran out at epoch " + std::to_string(epoch + 1) + ", batch " +
                         std::to_string(batch + 1) + " of steps_per_epoch " +
                         std::to_string(fit_.options_.steps_per_epoch_) + "; repeat() it");
      return false;
    }
    if (example_.x.size() != x_.size() || example_.y.size() != y_.size() ||
        example_.sample_weight.size() != (fit_.options_.class_weight_.empty() ? w_.size() : 0))
      throw ValueError(fit_.who() + ": batch " + std::to_string(batch + 1) + " of epoch " + std::to_string(epoch + 1) +
                       " has other arrays than the first batch (inputs, targets or sample weights)");
    // Each input in its own dtype, the targets in the model's (the first input's), as check_data does.
    const std::vector<DType>& dtypes = input_dtypes_;
    fit_.batch_x_.resize(example_.x.size());
    for (std::size_t i = 0; i < example_.x.size(); ++i)
      fit_.batch_x_[i] = example_.x[i].dtype() == dtypes[i] ? example_.x[i] : example_.x[i].astype(dtypes[i]);
    fit_.batch_y_.resize(example_.y.size());
    for (std::size_t k = 0; k < example_.y.size(); ++k)
      fit_.batch_y_[k] = example_.y[k].dtype() == dtypes[0] ? example_.y[k] : example_.y[k].astype(dtypes[0]);
    fit_.batch_w_ = dataset_weights(fit_.batch_y_);
    return true;
  }

  // A dataset batch's sample weights: its own, checked, or made from class_weight.
  std::vector<Array> dataset_weights(const std::vector<Array>& y) const {
    if (fit_.options_.class_weight_.empty())
      return example_.sample_weight.empty() ? std::vector<Array>{}
                                            : fit_.trainer_.check_weights(example_.sample_weight, y, "fit");
    if (!example_.sample_weight.empty())
      throw ValueError(fit_.who() + ": class_weight and the dataset's own sample weights cannot be given together");
    return {detail::class_sample_weights(fit_.options_.class_weight_, y.at(0), fit_.trainer_.model_.model_output_shapes()[0],
                                         fit_.trainer_.losses_[0], fit_.who())};
  }

  // This rank's rows of the global batch in batch_x_, batch_y_ and batch_w_ (which hold the whole batch).
  void take_shard() {
    fit_.global_rows_ = num_rows(fit_.batch_x_);
    fit_.shard_ = detail::shard_of(fit_.global_rows_, fit_.communicator_->rank(), fit_.communicator_->size());
    for (std::vector<Array>* arrays : {&fit_.batch_x_, &fit_.batch_y_, &fit_.batch_w_})
      for (Array& array : *arrays) array = array.rows(fit_.shard_.start, fit_.shard_.count);
  }

  const Dataset* data_;
  std::unique_ptr<Dataset::Iterator> iterator_;
  Example example_;
  bool pending_ = false;             // the first batch, read by prepare(), is not trained on yet
  std::vector<DType> input_dtypes_;  // the model's, what the batches are converted to
  int opened_for_ = -1;              // the epoch iterator_ was opened for
};

std::unique_ptr<Trainer::Fit::Batches> Trainer::Fit::Batches::arrays(Fit& fit, std::vector<Array> x,
                                                                     std::vector<Array> y) {
  return std::make_unique<ArrayBatches>(fit, std::move(x), std::move(y));
}

std::unique_ptr<Trainer::Fit::Batches> Trainer::Fit::Batches::dataset(Fit& fit, const Dataset& data) {
  return std::make_unique<DatasetBatches>(fit, data);
}

}  // namespace kiln
