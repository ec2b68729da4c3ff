#pragma once
// Internal: one call of fit() (Trainer::Fit), in parts a newcomer reads top to bottom:
//   - where its batches come from, Fit::Batches: the arrays (shuffled, split for validation, weighted by
//     class) or a Dataset (iterated per epoch, its own weights), in train/fit_batches.cpp;
//   - the loop over epochs and batches, with its callbacks, progress bar and validation, in train/fit.cpp;
//   - a distributed fit's steps (the ranks' agreement, gradient buckets, replica checks, validation split
//     over the ranks), in train/detail/data_parallel_fit.cpp, beside the other data-parallel pieces.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/detail/program_pool.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/communicator.hpp>
#include <kiln/train/detail/data_parallel.hpp>
#include <kiln/train/detail/step_graph.hpp>
#include <kiln/train/fit_options.hpp>
#include <kiln/train/progress.hpp>
#include <kiln/train/trainer.hpp>

namespace kiln {

/// One call of fit: the batches and the validation data, the training graph's program, the callbacks' state
/// and the history, stepped through epochs and batches.
class Trainer::Fit {
 public:
  /// The arrays are checked when the fit runs, where a distributed fit's ranks agree on failures.
  Fit(Trainer& trainer, std::vector<Array> x, std::vector<Array> y, const FitOptions& options);
  Fit(Trainer& trainer, const Dataset& data, const FitOptions& options);
  ~Fit();
  Fit(const Fit&) = delete;
  Fit& operator=(const Fit&) = delete;

  /// Prepares (data, graph, callbacks), runs the epochs and returns their logs.
  History run();

 private:
  class Batches;
  class ArrayBatches;
  class DatasetBatches;

  std::string who() const { return trainer_.model_.describe() + ".fit"; }
  bool chief() const { return options_.communicator_ == nullptr || options_.communicator_->rank() == 0; }

  // ---- the loop (train/fit.cpp) -------------------------------------------------------------------------------
  void check_options() const;
  /// The step graph for the first batch's shapes, and its program, leased for the largest batch.
  void prepare_step();
  void prepare_state();
  /// Where a callback said to resume (state_.resume_epoch, resume_batch): returns the epoch to start at.
  int resume();
  void run_epoch(int epoch);
  void train_batch(int epoch, std::int64_t batch);
  void warn_if_not_finite(int epoch, std::int64_t batch);
  void add_validation();
  double seconds_since_start() const;

  // ---- distributed fits (train/detail/data_parallel_fit.cpp) ------------------------------------------------
  // Every rank runs this same code; each collective below is reached by every rank in the same order. A rank
  // that throws keeps the exception (agreement_) until the next exchange, where every rank learns of it and
  // stops. Rank 0 prints and writes files.

  /// Runs `body`; in a distributed fit, an exception is kept rather than thrown now, and every rank agrees
  /// here: any rank's failure throws on every rank, and any rank's stop request stops every rank.
  template <class Body>
  void guarded(const Body& body, const char* where = "the start of training") {
    if (agreement_ == nullptr) return body();
    try {
      body();
    } catch (...) {
      agreement_->fail(std::current_exception());
    }
    if (agreement_->agree(where, state_.stop_training)) state_.stop_training = true;
  }
  /// Runs `body`; in a distributed fit, an exception is kept for the next agreement (the next step's).
  template <class Body>
  void deferred(const Body& body) {
    if (agreement_ == nullptr) return body();
    try {
      body();
    } catch (...) {
      agreement_->fail(std::current_exception());
    }
  }
  void prepare_distributed();
  void start_distributed();
  void keep_replicas_equal(int epoch);
  void end_distributed_epoch(int epoch);
  bool distributed_batch(int epoch, std::int64_t batch);
  /// The most rows of a batch of `rows` that one rank trains on.
  std::int64_t local_batch(std::int64_t rows) const;
  void add_distributed_validation(int epoch);

  Trainer& trainer_;
  const FitOptions& options_;
  std::unique_ptr<Batches> batches_;
  std::int64_t skip_batches_ = 0;  // batches of the first epoch a resumed run has trained already
  std::vector<Array> val_x_, val_y_, val_w_;
  std::int64_t steps_ = 0;  // batches per epoch; 0: unknown until a dataset ends
  TrainingState state_;
  ProgressBar bar_;
  History history_;
  std::shared_ptr<detail::StepGraph> step_graph_;
  std::unique_ptr<detail::ProgramPool::Lease> program_;
  std::vector<Array> batch_x_, batch_y_, batch_w_;  // the current batch (this rank's rows of it)
  detail::StepTotals totals_;
  std::chrono::steady_clock::time_point started_;
  Logs logs_;
  bool warned_nan_ = false;
  bool terminates_on_nan_ = false;
  // A distributed fit's (options_.communicator_ set):
  Communicator* communicator_ = options_.communicator_;
  std::unique_ptr<detail::Agreement> agreement_;
  std::unique_ptr<detail::GradientBuckets> buckets_;
  std::vector<std::size_t> hooked_index_;  // the hooked gradients' weight indices
  std::vector<double> exchange_;
  detail::Shard shard_;            // this rank's rows of the current batch
  std::int64_t global_rows_ = 0;   // the current batch's rows on all ranks
  bool stop_asked_ = false;        // the last batch's callbacks set stop_training: agreed at the next exchange
  bool warned_drift_ = false;
  std::vector<ReportingCallback*> silenced_;  // given their messages back when the fit ends
};

/// Where a fit's batches come from; the fit pulls them one at a time into its batch_x_, batch_y_ and batch_w_
/// (a distributed fit's: this rank's rows of each batch, the shard).
class Trainer::Fit::Batches {
 public:
  /// The arrays fit was given (train/fit_batches.cpp's ArrayBatches).
  static std::unique_ptr<Batches> arrays(Fit& fit, std::vector<Array> x, std::vector<Array> y);
  /// A batched Dataset (DatasetBatches).
  static std::unique_ptr<Batches> dataset(Fit& fit, const Dataset& data);
  explicit Batches(Fit& fit) : fit_(fit) {}
  virtual ~Batches() = default;
  Batches(const Batches&) = delete;
  Batches& operator=(const Batches&) = delete;

  /// Everything checked before any step, the validation data set aside (fit_.val_x_, ...), the batches per
  /// epoch (fit_.steps_), and x(), y(), w() ready: the arrays the step graph is made for.
  virtual void prepare() = 0;
  /// The rows of the largest batch: what the program is planned for.
  virtual std::int64_t largest_batch() const = 0;
  /// An epoch starts: arrays take the epoch's row order, a dataset is iterated afresh (Keras's rule).
  virtual void begin_epoch(int epoch) = 0;
  /// The next batch, `batch` of `epoch`, into the fit's batch arrays; false at the end of the data.
  virtual bool next(int epoch, std::int64_t batch) = 0;
  /// A resumed run: the batches the interrupted run trained, up to batch `batch` of epoch `epoch`, are passed
  /// over, drawn as that run drew them.
  virtual void skip_to(int epoch, std::int64_t batch) = 0;
  /// What every rank of a distributed fit must have alike besides the arrays' shapes, as text.
  virtual std::string run_description() const = 0;

  const std::vector<Array>& x() const { return x_; }
  const std::vector<Array>& y() const { return y_; }
  const std::vector<Array>& w() const { return w_; }

 protected:
  Fit& fit_;
  std::vector<Array> x_, y_, w_;  // the arrays, or a dataset's first batch
};

}  // namespace kiln
