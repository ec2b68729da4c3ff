#pragma once
// Dataset: a stream of examples for fit, evaluate and predict, as Keras users build them with tf.data:
//
//   kiln::CsvOptions csv;
//   csv.label_names = {"target"};
//   kiln::Dataset train = kiln::Dataset::from_csv({"part-0.csv", "part-1.csv"}, csv)
//                             .shuffle(10000, /*seed=*/1)
//                             .batch(32)
//                             .prefetch(2);                       // read and parse on a background thread
//   model.fit(train, kiln::FitOptions().epochs(5));
//
// A dataset is a description: each iteration (fit iterates once per epoch) opens the files or the generator
// again. Elements are written in place into buffers the pipeline keeps, so once the first batches have
// been made, reading, shuffling, batching and prefetching allocate nothing. Shuffles draw from the seed
// and the iteration, so the same seed gives the same batches, prefetch on or off.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/data/data.hpp>

namespace kiln {

/// One element of a dataset: one array per model input (x), per output (y), and the sample weights (none,
/// or one per output). Before batch() each array is one sample, without a batch axis; after it, a batch.
struct Example {
  std::vector<Array> x;              ///< one array per model input
  std::vector<Array> y;              ///< one array per model output (none for predict)
  std::vector<Array> sample_weight;  ///< none, or one array per output
};

namespace detail {
class DatasetNode;
class DatasetStage;
}  // namespace detail

/// A pipeline of examples: a source (arrays, CSV files, a generator) and the steps after it. Copies share
/// the description; every step returns a new Dataset and leaves this one as it was.
class Dataset {
 public:
  /// cardinality() of a dataset without end (repeat()).
  static constexpr std::int64_t infinite = -1;
  /// cardinality() when the source does not know its length (CSV files, generators).
  static constexpr std::int64_t unknown = -2;

  /// The rows of arrays: element i holds row i of each array (shared, not copied). Every array has the same
  /// number of rows: ValueError otherwise, or for no x arrays.
  static Dataset from_arrays(std::vector<Array> x, std::vector<Array> y = {}, std::vector<Array> sample_weight = {});
  /// The rows of one input and one target array.
  static Dataset from_arrays(const Array& x, const Array& y) {
    return from_arrays(std::vector<Array>{x}, std::vector<Array>{y});
  }
  /// The rows of CSV files, one after the other, read a line at a time as they are needed (files larger
  /// than memory stream through). Each row is x = the chosen columns and, when `options` names label
  /// columns (label_names or label_indices), y = the labels, of options.dtype. The files are opened when
  /// iterated: a bad option or file throws then, as read_csv does (a row with another field count names
  /// the file and line).
  static Dataset from_csv(std::vector<std::string> paths, CsvOptions options = {});
  /// A function that writes the next example (one sample) into `next` and returns true, or returns false
  /// at the end. `next` holds the previous example's arrays: writing into them reuses their storage.
  using Generator = std::function<bool(Example& next)>;
  /// The examples of a generator; `make` gives a fresh one for each iteration (each epoch of fit).
  static Dataset from_generator(std::function<Generator()> make, std::int64_t cardinality = unknown);

  /// Calls `function` on each element, which may change it in place (its arrays, their number and shapes).
  Dataset map(std::function<void(Example&)> function) const;
  /// Stacks `batch_size` consecutive elements into one (a batch axis first); the last batch takes what is
  /// left unless `drop_remainder`. Elements of another shape or array count than the first: DatasetError.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  /// Keras's (tf.data's) shuffle: elements pass through a buffer of `buffer_size` from which one is drawn at
  /// random, seeded by `seed` and the iteration, so each epoch is shuffled differently and reproducibly. A
  /// buffer as large as the dataset shuffles it uniformly.
  Dataset shuffle(std::int64_t buffer_size, std::uint64_t seed = 0) const;
  /// The dataset `count` times over (-1: without end); each repetition is iterated afresh (reshuffled).
  Dataset repeat(std::int64_t count = -1) const;
  /// The first `count` elements.
  Dataset take(std::int64_t count) const;
  /// Makes up to `buffer_size` elements ahead on a background thread, so reading and parsing overlap the
  /// training step. An exception in the thread reaches the caller at the element it concerns.
  Dataset prefetch(std::int64_t buffer_size = 2) const;

  /// The number of elements, or infinite, or unknown.
  std::int64_t cardinality() const;
  /// batch() has been applied: elements are batches, as fit takes them.
  bool batched() const;

  /// One pass over the elements. Not copyable; destroying it stops its prefetch threads.
  class Iterator {
   public:
    ~Iterator();
    /// Takes over the other's pass (and its prefetch threads).
    Iterator(Iterator&&) noexcept;
    /// Stops this pass's prefetch threads, then takes over the other's pass.
    Iterator& operator=(Iterator&&) noexcept;
    /// Writes the next element into `out` (reusing its arrays' storage when they fit) and returns true, or
    /// returns false at the end. Whatever the source throws is rethrown as a DatasetError naming the element
    /// ("element 12"), the original nested in it.
    bool next(Example& out);
    /// Elements given so far.
    std::int64_t position() const { return position_; }

   private:
    friend class Dataset;
    Iterator(std::shared_ptr<const detail::DatasetNode> node, std::unique_ptr<detail::DatasetStage> stage);
    std::shared_ptr<const detail::DatasetNode> node_;  // the stages read their nodes' data and functions
    std::unique_ptr<detail::DatasetStage> stage_;
    std::int64_t position_ = 0;
  };
  /// Starts a pass; `iteration` seeds its shuffles (fit passes the epoch).
  Iterator iterate(std::uint64_t iteration = 0) const;

  /// The description the steps share (for the trainer).
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {}

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
};

}  // namespace kiln
