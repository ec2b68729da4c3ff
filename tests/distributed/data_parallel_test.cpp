// Data-parallel fits across processes: `mpirun -np 2` of tests/programs/distributed_child.cpp on this
// machine (loopback only), against the same program run alone. Built only when kiln finds MPI.
//
// A 2-rank fit of a global batch equals a 1-process fit of that batch: the shards' gradients summed are the
// batch's, dropout draws as the whole batch would (Program::set_batch_offset), and every rank shuffles alike.
// Then the faults: a rank that throws, ranks with other models, and a rank killed with SIGKILL; none hangs.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include "support/temp_dir.hpp"

extern char** environ;

using namespace kiln;

namespace {

struct Finished {
  int status = -1;     // the exit code; -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string output;  // stdout and stderr
  double seconds = 0;
  std::chrono::steady_clock::time_point ended;
};

// Runs `arguments` in a process group of its own with stdout and stderr into `log`; kills the group after
// `timeout` seconds.
Finished run(const std::vector<std::string>& arguments, const std::string& log, double timeout) {
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  REQUIRE(spawned == 0);
  Finished finished;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout) {
      finished.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  finished.ended = std::chrono::steady_clock::now();
  finished.seconds = std::chrono::duration<double>(finished.ended - start).count();
  if (!finished.timed_out && WIFEXITED(status)) finished.status = WEXITSTATUS(status);
  std::ifstream text(log);
  std::stringstream all;
  all << text.rdbuf();
  finished.output = all.str();
  return finished;
}

// As root, Open MPI wants to be told (the two environment variables are the other way, docs/distributed.md).
std::vector<std::string> mpirun(int ranks) {
  return {KILN_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks)};
}

// Each child is bounded (ctest's TIMEOUT, 900 s, is above the sum of one test's children's bounds).
Finished child(const std::vector<std::string>& launcher, const std::string& mode, const std::string& out,
               const std::string& dir = "", double timeout = 100) {
  std::vector<std::string> arguments = launcher;
  arguments.insert(arguments.end(), {KILN_DISTRIBUTED_CHILD_PATH, mode, out});
  if (!dir.empty()) arguments.push_back(dir);
  Finished finished = run(arguments, out + ".log", timeout);
  INFO(mode << " printed:\n" << finished.output);
  CHECK_FALSE(finished.timed_out);
  return finished;
}

void require_success(const Finished& finished) {
  INFO(finished.output);
  REQUIRE(finished.status == 0);
}

// The largest difference between the weights of two saved models.
double weight_difference(const std::string& a, const std::string& b) {
  const std::vector<Array> wa = load_model(a).get_weights(), wb = load_model(b).get_weights();
  REQUIRE(wa.size() == wb.size());
  double largest = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    REQUIRE(wa[i].shape() == wb[i].shape());
    for (std::size_t j = 0; j < wa[i].size(); ++j) largest = std::max(largest, std::abs(wa[i].flat(j) - wb[i].flat(j)));
  }
  return largest;
}

std::map<std::string, std::vector<double>> read_history(const std::string& path) {
  std::map<std::string, std::vector<double>> history;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::stringstream fields(line);
    std::string name, value;
    std::getline(fields, name, ',');
    while (std::getline(fields, value, ',')) history[name].push_back(std::stod(value));
  }
  return history;
}

// Every logged value of every epoch within `tolerance`, the same names in both.
void require_same_history(const std::string& a, const std::string& b, double tolerance) {
  const auto ha = read_history(a), hb = read_history(b);
  REQUIRE(ha.size() == hb.size());
  REQUIRE(ha.count("val_loss") == 1);
  for (const auto& [name, values] : ha) {
    INFO(name);
    REQUIRE(hb.count(name) == 1);
    REQUIRE(values.size() == hb.at(name).size());
    for (std::size_t e = 0; e < values.size(); ++e) CHECK(std::abs(values[e] - hb.at(name)[e]) <= tolerance);
  }
}

}  // namespace

TEST_CASE("a 2-rank fit equals a 1-process fit of the same global batches, dropout and shuffling included",
          "[distributed]") {
  testing::TempDir dir;
  for (const auto& [suffix, tolerance] : {std::pair<std::string, double>{"", 1e-12}, {"32", 1e-6}}) {
    INFO("dtype " << (suffix.empty() ? "float64" : "float32"));
    require_success(child({}, "single" + suffix, dir.file("single" + suffix + ".kiln")));
    require_success(child(mpirun(2), "mpi" + suffix, dir.file("mpi" + suffix + ".kiln")));
    const double difference = weight_difference(dir.file("single" + suffix + ".kiln"), dir.file("mpi" + suffix + ".kiln"));
    INFO("largest weight difference " << difference);
    CHECK(difference <= tolerance);
    require_same_history(dir.file("single" + suffix + ".kiln.csv"), dir.file("mpi" + suffix + ".kiln.csv"),
                         suffix.empty() ? 1e-12 : 1e-5);
  }
}

TEST_CASE("a 2-rank fit of a Dataset takes each rank's rows of every batch", "[distributed]") {
  testing::TempDir dir;
  require_success(child({}, "dataset-single", dir.file("single.kiln")));
  require_success(child(mpirun(2), "dataset-mpi", dir.file("mpi.kiln")));
  CHECK(weight_difference(dir.file("single.kiln"), dir.file("mpi.kiln")) <= 1e-12);
  require_same_history(dir.file("single.kiln.csv"), dir.file("mpi.kiln.csv"), 1e-12);
}

TEST_CASE("a rank that throws stops every rank at the next step, with its message", "[distributed]") {
  testing::TempDir dir;
  const Finished finished = child(mpirun(2), "throw", dir.file("out.kiln"), "", 60);
  INFO(finished.output);
  CHECK(finished.status != 0);
  CHECK(finished.seconds < 30);
  // Rank 1 throws its own error; rank 0 learns it from the step's agreement and names rank 1.
  CHECK(finished.output.find("rank 1: ") != std::string::npos);
  CHECK(finished.output.find("row 75 of rank 1's file is corrupt") != std::string::npos);
  CHECK(finished.output.find("rank 0: ") != std::string::npos);
  CHECK(finished.output.find("rank 1 of 2 failed at epoch 1, batch ") != std::string::npos);
  CHECK(finished.output.find("failed at the start of training") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("out.kiln")));
}

TEST_CASE("ranks whose models differ are refused before any collective on weights", "[distributed]") {
  testing::TempDir dir;
  const Finished finished = child(mpirun(2), "mismatch", dir.file("out.kiln"), "", 60);
  INFO(finished.output);
  CHECK(finished.status != 0);
  CHECK(finished.output.find("rank 1's model differs from rank 0's (config and weights hash 0x") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("out.kiln")));
}

TEST_CASE("a rank killed with SIGKILL ends the job within 10 s, a restart resumes from the last backup",
          "[distributed]") {
  testing::TempDir dir;
  const std::string backups = dir.file("backups"), out = dir.file("out.kiln");
  const Finished killed = child(mpirun(2), "kill", out, backups, 90);
  INFO(killed.output);
  REQUIRE(std::filesystem::exists(out + ".killed"));
  CHECK(killed.status != 0);
  // The survivors are gone within 10 s of the kill, and mpirun names the lost rank.
  std::ifstream stamp(out + ".killed");
  long long killed_at = 0;
  stamp >> killed_at;
  const double after_kill =
      std::chrono::duration<double>(killed.ended.time_since_epoch()).count() - static_cast<double>(killed_at) / 1000.0;
  INFO("the job ended " << after_kill << " s after the kill");
  CHECK(after_kill < 10.0);
  CHECK(killed.output.find("rank 1") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
  // The last backup is whole, and the run started again resumes from it to the uninterrupted run's weights.
  REQUIRE(std::filesystem::exists(backups + "/backup.kiln"));
  CHECK_NOTHROW(load_model(backups + "/backup.kiln"));
  require_success(child(mpirun(2), "backup", out, backups));
  require_success(child(mpirun(2), "backup", dir.file("reference.kiln"), dir.file("reference-backups")));
  CHECK(weight_difference(out, dir.file("reference.kiln")) == 0.0);
  // It resumed: its history holds only the epochs after the backup (the reference's holds all 4).
  CHECK(read_history(out + ".csv").at("loss").size() == 2);
  CHECK(read_history(dir.file("reference.kiln") + ".csv").at("loss").size() == 4);
}

#ifdef KILN_DISTRIBUTED_STOCK_PATH
// The demo's model on the demo's data (examples/distributed_stock): 2 ranks reach the 1-rank test MSE.
TEST_CASE("the stock demo trained on 2 ranks reaches the 1-rank test MSE", "[distributed]") {
  testing::TempDir dir;
  auto test_mse = [&](int ranks) {
    std::vector<std::string> arguments = mpirun(ranks);
    arguments.insert(arguments.end(), {KILN_DISTRIBUTED_STOCK_PATH, "--epochs", "6"});
    const Finished finished = run(arguments, dir.file("stock" + std::to_string(ranks) + ".log"), 200);
    INFO(finished.output);
    REQUIRE(finished.status == 0);
    const std::string marker = "ranks " + std::to_string(ranks) + ", test MSE ";
    const std::size_t at = finished.output.find(marker);
    REQUIRE(at != std::string::npos);
    return std::stod(finished.output.substr(at + marker.size()));
  };
  const double one = test_mse(1), two = test_mse(2);
  INFO("test MSE: 1 rank " << one << ", 2 ranks " << two);
  CHECK(one > 0.0);
  // The same arithmetic in another order (float32): equal to within rounding, far inside run-to-run noise.
  CHECK(std::abs(two - one) <= 1e-3 * one);
}
#endif
