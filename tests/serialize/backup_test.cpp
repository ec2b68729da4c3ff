// BackupAndRestore: a training process killed with SIGKILL at random moments, and started again with the
// same call each time, ends with the weights of a run that was never interrupted, bit for bit.
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/serialize/backup.hpp>
#include <kiln/models/model.hpp>
#include "support/temp_dir.hpp"

extern char** environ;

using namespace kiln;

namespace {

pid_t spawn_child(const std::vector<std::string>& arguments) {
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

// Waits for the child; its exit status, or -signal when a signal ended it.
int wait_child(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Waits until the child creates `path`: true, or false when the child ended first (it is then reaped).
bool wait_for_file(pid_t pid, const std::string& path) {
  for (;;) {
    if (std::filesystem::exists(path)) return true;
    int status = 0;
    const pid_t ended = waitpid(pid, &status, WNOHANG);
    REQUIRE(ended >= 0);
    if (ended == pid) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string contents(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

}  // namespace

TEST_CASE("BackupAndRestore: a run killed with SIGKILL 20 times ends bitwise equal to an uninterrupted one",
          "[serialize][backup][slow]") {
  testing::TempDir dir;
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  const std::string child = KILN_BACKUP_CHILD_PATH;
  const std::string reference = dir.file("reference.bin"), resumed = dir.file("resumed.bin");
  REQUIRE(wait_child(spawn_child({child, dir.file("unused"), reference, "--no-backup"})) == 0);

  // How long the training takes here (builds under sanitizers are slower), timed from the moment the child
  // says it has started training (it creates OUT.started once set up and restored). Each kill comes a random
  // 1/100 to 1/40 of the training after that moment, so 20 of them land before the run is done, most of them
  // after a backup, however long the start-up takes on a loaded machine.
  const std::string started = resumed + ".started";
  // Each kill also waits as long as the first backup took to appear: a kill any sooner would find no backup to
  // resume from, and delays shortened after early finishes (below) once fell under that, so that no start resumed.
  double training = 0, first_backup = 0;
  {
    const std::string timing = dir.file("timing.bin"), backup_file = dir.file("timing") + "/backup.kiln";
    const pid_t pid = spawn_child({child, dir.file("timing"), timing});
    REQUIRE(wait_for_file(pid, timing + ".started"));
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    REQUIRE(wait_for_file(pid, backup_file));
    first_backup = elapsed();
    REQUIRE(wait_child(pid) == 0);
    training = std::max(elapsed(), 0.01);
    REQUIRE(contents(timing) == contents(reference));  // uninterrupted, with backups: the same
  }

  Rng rng(42);
  int kills = 0, attempts = 0;
  auto resumes = [&] {
    const std::string log = contents(resumed + ".resumed");
    return std::count(log.begin(), log.end(), '\n');
  };
  // At least 20 kills, and until at least 5 starts resumed from a backup.
  while ((kills < 20 || resumes() < 5) && attempts < 400) {
    ++attempts;
    std::filesystem::remove(started);
    const pid_t pid = spawn_child({child, dir.file("backup"), resumed});
    if (wait_for_file(pid, started)) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(first_backup + training * rng.uniform(1.0 / 100, 1.0 / 40)));
      if (kill(pid, SIGKILL) == 0 && wait_child(pid) == -SIGKILL) {
        ++kills;
        continue;
      }
    }
    // It finished before it was killed 20 times (the machine ran it faster than timed): start over, a little
    // sooner after each start from now on.
    kills = 0;
    training *= 0.8;
    std::filesystem::remove_all(dir.file("backup"));
    std::filesystem::remove(resumed);
    std::filesystem::remove(resumed + ".resumed");
  }
  REQUIRE(kills >= 20);
  REQUIRE(wait_child(spawn_child({child, dir.file("backup"), resumed})) == 0);
  CHECK(resumes() >= 5);  // restarts resumed from backups, not all from the start
  const std::string expected = contents(reference), got = contents(resumed);
  REQUIRE_FALSE(expected.empty());
  CHECK(got.size() == expected.size());
  CHECK(got == expected);  // bitwise
  CHECK_FALSE(std::filesystem::exists(dir.file("backup") + "/backup.kiln"));  // deleted at the end
}

TEST_CASE("BackupAndRestore checks its options and refuses a backup of another model",
          "[serialize][backup][errors]") {
  CHECK_THROWS_AS(BackupAndRestore(""), ConfigError);
  BackupAndRestore::Options bad;
  bad.backup_dir = "somewhere";
  bad.save_freq = std::string("hourly");
  CHECK_THROWS_AS(BackupAndRestore(bad), ConfigError);
  bad.save_freq = std::int64_t{0};
  CHECK_THROWS_AS(BackupAndRestore(bad), ConfigError);

  testing::TempDir dir;
  constexpr std::int64_t None = Shape::unknown;
  const Array x = Array::full({8, 3}, 0.5), y = Array::full({8, 1}, 1.0);
  const Tensor a = Input({None, 3});
  Model small(a, Dense(1, "", {{"name", "lin"}})(a));
  small.compile("adam", "mse");
  BackupAndRestore::Options keep;
  keep.backup_dir = dir.file("run");
  keep.delete_checkpoint = false;
  auto backup = std::make_shared<BackupAndRestore>(keep);
  small.fit(x, y, FitOptions().epochs(2).batch_size(4).verbose(0).callback(backup));
  CHECK_FALSE(backup->restored());
  REQUIRE(std::filesystem::exists(backup->backup_path()));
  // Started again, the finished run resumes at its end: no epoch left to train.
  const History again = small.fit(x, y, FitOptions().epochs(2).batch_size(4).verbose(0).callback(backup));
  CHECK(backup->restored());
  CHECK(again.epochs.empty());

  // The same layers with another optimizer cannot take the backup's (Adam's) state: the weights stay.
  const Tensor c = Input({None, 3});
  Model renamed(c, Dense(1, "", {{"name", "lin"}})(c));
  renamed.compile("rmsprop", "mse");
  renamed.fit(x, y, FitOptions().epochs(1).batch_size(4).verbose(0));  // RMSprop's slots exist
  const std::vector<Array> rmsprop_before = renamed.get_weights();
  BackupAndRestore::Options adam_backup = keep;
  auto restore_into_rmsprop = std::make_shared<BackupAndRestore>(adam_backup);
  CHECK_THROWS(renamed.fit(x, y, FitOptions().epochs(3).batch_size(4).verbose(0).callback(restore_into_rmsprop)));
  for (std::size_t i = 0; i < rmsprop_before.size(); ++i)
    CHECK(std::memcmp(rmsprop_before[i].raw(), renamed.get_weights()[i].raw(), rmsprop_before[i].nbytes()) == 0);

  const Tensor b = Input({None, 3});
  Model other(b, Dense(2)(b));
  other.compile("sgd", "mse");
  const std::vector<Array> before = other.get_weights();
  CHECK_THROWS(other.fit(x, Array::full({8, 2}, 1.0), FitOptions().verbose(0).callback(backup)));
  const std::vector<Array> after = other.get_weights();
  for (std::size_t i = 0; i < before.size(); ++i)
    CHECK(std::memcmp(before[i].raw(), after[i].raw(), before[i].nbytes()) == 0);
}
