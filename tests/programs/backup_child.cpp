// The training process the BackupAndRestore test kills (tests/serialize/backup_test.cpp): a small model with
// dropout, trained with shuffling and Adam, backed up every few batches. Run again with the same arguments
// after a kill, it resumes from the backup. At the end it writes the raw bytes of every weight to OUT.
//
//   kiln_backup_child BACKUP_DIR OUT [--no-backup]
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include <kiln/kiln.hpp>

// Notes each start that resumed from a backup, and where: "epoch batch" lines in OUT.resumed. Every start
// also creates OUT.started once the model is set up and any backup restored, so that the test times its
// kill from the start of training rather than from an estimate of the start-up.
struct ResumeLog : kiln::Callback {
  std::string out;
  explicit ResumeLog(std::string file) : out(std::move(file)) {}
  void on_train_begin(kiln::TrainingState& state) override {
    if (state.resume_epoch >= 0)
      std::ofstream(out + ".resumed", std::ios::app) << state.resume_epoch << " " << state.resume_batch << "\n";
    std::ofstream(out + ".started").close();
  }
};

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string backup_dir = argv[1], out = argv[2];
  const bool backup = !(argc > 3 && std::strcmp(argv[3], "--no-backup") == 0);

  constexpr std::int64_t None = kiln::Shape::unknown, rows = 600;
  const kiln::Tensor input = kiln::Input({None, 8});
  kiln::Tensor h = kiln::Dense(32, "relu")(input);
  h = kiln::Dropout(0.2)(h);
  kiln::Model model(input, kiln::Dense(1)(h));
  std::vector<kiln::Array> weights = model.get_weights();
  for (kiln::Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, std::sin(static_cast<double>(i) * 0.7 + 1.0) * 0.3);
  model.set_weights(weights);
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 0.003}}), "mse");

  kiln::Rng rng(5);
  kiln::Array x({rows, 8}), y({rows, 1});
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < 8; ++c) {
      const double value = rng.uniform(-1.0, 1.0);
      x.set_flat(static_cast<std::size_t>(r * 8 + c), value);
      sum += value * static_cast<double>(c % 3 - 1);
    }
    y.set_flat(static_cast<std::size_t>(r), std::tanh(sum));
  }

  kiln::FitOptions options = kiln::FitOptions().epochs(24).batch_size(10).seed(3).verbose(0);
  std::shared_ptr<kiln::BackupAndRestore> callback;
  if (backup) {
    kiln::BackupAndRestore::Options backup_options;
    backup_options.backup_dir = backup_dir;
    backup_options.save_freq = std::int64_t{7};
    callback = std::make_shared<kiln::BackupAndRestore>(backup_options);
    options.callback(callback);
    options.callback(std::make_shared<ResumeLog>(out));
  }
  model.fit(x, y, options);

  std::ofstream file(out + ".part", std::ios::binary);
  for (const kiln::Array& weight : model.get_weights())
    file.write(static_cast<const char*>(weight.raw()), static_cast<std::streamsize>(weight.nbytes()));
  file.close();
  std::rename((out + ".part").c_str(), out.c_str());
  return 0;
}
