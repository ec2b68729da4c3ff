// The training process the distributed tests start (tests/distributed/data_parallel_test.cpp), under
// `mpirun -np 2` or alone. It trains a small model with dropout, shuffling, Adam, a metric and validation,
// on data it makes the same way on every rank; rank 0 (or the lone process) then saves the model to OUT
// and its history to OUT.csv.
//
//   kiln_distributed_child MODE OUT [DIR]
//
// MODE:
//   single | single32       one process, no MPI: the reference (float64 | float32)
//   mpi | mpi32             data-parallel over the mpirun job (float64 | float32)
//   dataset-single | dataset-mpi   the same from a shuffled, batched Dataset
//   throw                   rank 1's generator throws at row 75, past the first batch
//   mismatch                rank 1 builds another model
//   kill                    backs up to DIR every 3 batches; rank 1 kills itself (SIGKILL) at epoch 3, batch 2,
//                           after writing the time to OUT.killed
//   backup                  the same without the kill: resumes from DIR's backup when there is one
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <kiln/distributed/context.hpp>
#include <kiln/kiln.hpp>

namespace {

constexpr std::int64_t kRows = 113, kFeatures = 6;

kiln::Model make_model(kiln::DType dtype, int units) {
  constexpr std::int64_t None = kiln::Shape::unknown;
  const kiln::Tensor input = kiln::Input({None, kFeatures}, dtype);
  kiln::Tensor h = kiln::Dense(units, "tanh")(input);
  h = kiln::Dropout(0.25)(h);
  h = kiln::Dense(units, "relu")(h);
  kiln::Model model(input, kiln::Dense(1)(h));
  // Every rank starts from other weights; rank 0's are copied to the others before the first step.
  std::vector<kiln::Array> weights = model.get_weights();
  for (kiln::Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i)
      weight.set_flat(i, std::sin(static_cast<double>(i) * 0.37 + static_cast<double>(weight.size())) * 0.4);
  model.set_weights(weights);
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 0.01}}), "mse", {"mae"});
  return model;
}

void make_data(kiln::DType dtype, kiln::Array& x, kiln::Array& y) {
  kiln::Rng rng(11);
  x = kiln::Array({kRows, kFeatures}, dtype);
  y = kiln::Array({kRows, 1}, dtype);
  for (std::int64_t r = 0; r < kRows; ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < kFeatures; ++c) {
      const double value = rng.uniform(-1.0, 1.0);
      x.set_flat(static_cast<std::size_t>(r * kFeatures + c), value);
      sum += value * static_cast<double>(c % 3 - 1);
    }
    y.set_flat(static_cast<std::size_t>(r), std::sin(sum));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1], out = argv[2], dir = argc > 3 ? argv[3] : "";
  const bool single = mode.rfind("single", 0) == 0 || mode == "dataset-single";
  std::optional<kiln::distributed::Context> context;
  if (!single) context.emplace(argc, argv);
  const int rank = context ? context->rank() : 0;
  kiln::set_num_threads(1);
  try {
    const kiln::DType dtype = mode.find("32") != std::string::npos ? kiln::DType::float32 : kiln::DType::float64;
    kiln::Model model = make_model(dtype, mode == "mismatch" && rank == 1 ? 9 : 8);
    kiln::Array x, y;
    make_data(dtype, x, y);
    // 113 rows, 20% for validation: 91 training rows in batches of 10, the last of 1 (an empty shard on rank 1).
    kiln::FitOptions options =
        kiln::FitOptions().epochs(4).batch_size(10).seed(7).verbose(0).validation_split(0.2);
    if (context) options.distribute(*context);
    std::shared_ptr<kiln::BackupAndRestore> backup;
    if (mode == "kill" || mode == "backup") {
      kiln::BackupAndRestore::Options backup_options;
      backup_options.backup_dir = dir;
      backup_options.save_freq = std::int64_t{3};
      backup = std::make_shared<kiln::BackupAndRestore>(backup_options);
      options.callback(backup);
    }
    if (mode == "kill" && rank == 1) {
      kiln::LambdaCallback::Options hooks;
      hooks.on_batch_end = [&](kiln::TrainingState&, std::int64_t batch, const kiln::Logs&) {
        static int epoch_batches = 0;
        if (++epoch_batches != 2 * 10 + 2) return;  // epoch 3 (10 batches an epoch), batch 2
        const auto now = std::chrono::steady_clock::now().time_since_epoch();
        std::ofstream(out + ".killed") << std::chrono::duration_cast<std::chrono::milliseconds>(now).count() << "\n";
        std::cerr << "rank 1: killing itself at batch " << batch + 1 << std::endl;
        std::raise(SIGKILL);
      };
      options.callback(std::make_shared<kiln::LambdaCallback>(hooks));
    }
    kiln::History history;
    if (mode.rfind("dataset", 0) == 0 || mode == "throw") {
      kiln::Dataset data = kiln::Dataset::from_arrays(x.rows(0, 91), y.rows(0, 91));
      if (mode == "throw") {
        // Rank 1's source fails at row 75, in the 3rd or 4th batch (after the shuffle buffer's 50): bad data on
        // one rank.
        const kiln::Array fx = x, fy = y;
        const int me = rank;
        data = kiln::Dataset::from_generator([fx, fy, me] {
          return kiln::Dataset::Generator([fx, fy, me, row = std::int64_t{0}](kiln::Example& next) mutable {
            if (row == 91) return false;
            if (me == 1 && row == 75) throw std::runtime_error("row 75 of rank 1's file is corrupt");
            next.x = {fx.rows(row, 1).reshape(kiln::Shape({kFeatures}))};
            next.y = {fy.rows(row, 1).reshape(kiln::Shape({1}))};
            ++row;
            return true;
          });
        });
      }
      options.validation_split(0.0).validation_data(x.rows(91, kRows - 91), y.rows(91, kRows - 91));
      history = model.fit(data.shuffle(50, 3).batch(10), options);
    } else {
      history = model.fit(x, y, options);
    }
    if (rank == 0) {
      model.save(out);
      std::ofstream csv(out + ".csv");
      csv.precision(17);
      for (const auto& [name, values] : history.history) {
        csv << name;
        for (const double value : values) csv << "," << value;
        csv << "\n";
      }
    }
  } catch (const std::exception& error) {
    // One write, so the ranks' lines do not interleave.
    std::cerr << ("rank " + std::to_string(rank) + ": " + error.what() + "\n") << std::flush;
    return 1;
  }
  return 0;
}
