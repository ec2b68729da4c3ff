// What every kiln writer promises about the user's files: loads that race an atomic replace see the old
// file or the new one; a save killed mid-way leaves a temporary that the next save removes; long names,
// file-size limits, symbolic links and special files (devices, FIFOs, sockets, folders).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/checkpoint.hpp>
#include <kiln/serialize/detail/container.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Model;
using kiln::SerializationError;
using kiln::Shape;
using kiln::Tensor;
using kiln::testing::read_bytes;
using kiln::testing::TempDir;
using kiln::testing::write_bytes;

namespace {

constexpr std::int64_t None = Shape::unknown;

Model small_model(std::uint64_t seed, std::int64_t units = 2) {
  Tensor x = kiln::Input({None, 3});
  Model model(x, kiln::Dense(units, "", kiln::Config{{"name", "out"}})(x));
  model->initialize_weights(seed);
  return model;
}

bool is_kiln_temporary(const std::string& name) { return name.rfind(".kiln-tmp-", 0) == 0; }

std::vector<std::string> temporaries(const TempDir& dir) {
  std::vector<std::string> found;
  for (const std::string& name : dir.entries())
    if (is_kiln_temporary(name)) found.push_back(name);
  return found;
}

// Every writer of a user's file, each writing to `path`.
std::vector<std::pair<std::string, std::function<void(const std::string&)>>> writers() {
  return {
      {"save_model", [](const std::string& path) { small_model(1).save(path); }},
      {"save_weights", [](const std::string& path) { small_model(1).save_weights(path); }},
      {"ModelCheckpoint",
       [](const std::string& path) {
         Model model = small_model(1);
         model.compile("sgd", "mse");
         const Array x = kiln::testing::random_input({8, 3}, 1), y = kiln::testing::random_input({8, 2}, 2);
         model.fit(x, y,
                   kiln::FitOptions().epochs(1).verbose(0).callback(std::make_shared<kiln::ModelCheckpoint>(path)));
       }},
      {"CSVLogger",
       [](const std::string& path) {
         kiln::CSVLogger logger(path);
         kiln::TrainingState state;
         logger.on_train_begin(state);
         kiln::Logs logs{{"loss", 0.5}};
         logger.on_epoch_end(state, 0, logs);
         logger.on_train_end(state, logs);
       }},
  };
}

}  // namespace

TEST_CASE("a load that races an atomic replace sees the old file or the new one, never an error",
          "[serialize][files]") {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  // Files of different sizes: a reader that takes the size from one look at the path and the bytes from
  // another saw a damaged file whenever a rename fell between the two.
  small_model(1).save(path);
  const std::string first = read_bytes(path);
  small_model(2, 5).save(path);
  const std::string second = read_bytes(path);
  REQUIRE(first.size() != second.size());
  const Array x = kiln::testing::random_input({4, 3}, 7);
  const Array expected[2] = {small_model(1).predict(x), small_model(2, 5).predict(x)};

  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (std::size_t i = 0; !done.load(); ++i) kiln::detail::write_file_atomically(path, i % 2 ? second : first);
  });
  int failures = 0, seen[2] = {0, 0};
  for (int load = 0; load < 2000; ++load) {
    try {
      const Array y = kiln::load_model(path).predict(x);
      const int which = y.bitwise_equal(expected[0]) ? 0 : y.bitwise_equal(expected[1]) ? 1 : -1;
      REQUIRE(which >= 0);
      ++seen[which];
    } catch (const SerializationError& error) {
      UNSCOPED_INFO(error.what());
      ++failures;
    }
  }
  done = true;
  writer.join();
  CHECK(failures == 0);
  CHECK(seen[0] + seen[1] == 2000);
  CHECK(temporaries(dir).empty());
}

TEST_CASE("a save killed mid-way leaves its temporary, the next save to that path removes it", "[serialize][files]") {
  TempDir dir;
  const std::string path = dir.file("model.kiln");
  small_model(1).save(path);
  const std::string whole = read_bytes(path);
  // A child is killed (SIGKILL, as a crash or the OOM killer would) half-way through writing a save.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    kiln::detail::kill_next_write_after_for_testing(1000);
    small_model(2).save(path);
    ::_exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(read_bytes(path) == whole);
  const std::vector<std::string> left = temporaries(dir);
  REQUIRE(left.size() == 1);
  CHECK(left[0].find("-" + std::to_string(child) + "-") != std::string::npos);  // named with its writer's PID

  // A live writer's temporary (this process's: another thread could be saving) and a dead writer's
  // temporary of another target are left alone.
  const std::string prefix = left[0].substr(0, left[0].find('-', 10) + 1);  // ".kiln-tmp-<hash>-"
  const std::string live = prefix + std::to_string(::getpid()) + "-abcdef";
  const std::string other = ".kiln-tmp-0000000000000000-" + std::to_string(child) + "-abcdef";
  write_bytes(dir.file(live), "in progress");
  write_bytes(dir.file(other), "another file's");
  small_model(2).save(path);
  std::vector<std::string> kept = {other, live};
  std::sort(kept.begin(), kept.end());
  CHECK(temporaries(dir) == kept);
  CHECK(kiln::load_model(path).get_weights()[0].bitwise_equal(small_model(2).get_weights()[0]));
}

TEST_CASE("a 250-character file name saves: the temporary's name is short", "[serialize][files]") {
  TempDir dir;
  const std::string name = std::string(245, 'm') + ".kiln";
  REQUIRE(name.size() == 250);
  small_model(1).save(dir.file(name));
  CHECK(dir.entries() == std::vector<std::string>{name});
  CHECK(kiln::load_model(dir.file(name)).get_weights()[0].bitwise_equal(small_model(1).get_weights()[0]));
}

TEST_CASE("a save past the file-size limit fails with SerializationError, not SIGXFSZ, and keeps the old file",
          "[serialize][files]") {
  TempDir dir;
  for (const auto& [label, write] : writers()) {
    INFO(label);
    const std::string path = dir.file(label + ".out");
    write_bytes(path, "old");
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct rlimit tight = saved;
    tight.rlim_cur = 8;  // smaller than anything these write
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
    bool refused = false;
    std::string message;
    try {
      write(path);
    } catch (const SerializationError& error) {
      refused = true;
      message = error.what();
    }
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
    CHECK(refused);
    CHECK_THAT(message, Catch::Contains("file-size limit"));
    if (label != "CSVLogger") CHECK(read_bytes(path) == "old");  // CSVLogger truncates as it opens, as Keras's does
    CHECK(temporaries(dir).empty());
  }
}

TEST_CASE("every writer saves through a symbolic link to its target, and keeps the link", "[serialize][files]") {
  TempDir dir;
  REQUIRE(::mkdir(dir.file("real").c_str(), 0755) == 0);
  for (const auto& [label, write] : writers()) {
    INFO(label);
    const std::string target = dir.file("real/" + label + ".out");
    // A chain: link -> relative link -> the target (missing before the first save).
    REQUIRE(::symlink(("real/" + label + ".out").c_str(), dir.file(label + ".hop").c_str()) == 0);
    REQUIRE(::symlink((label + ".hop").c_str(), dir.file(label + ".link").c_str()) == 0);
    for (int round = 0; round < 2; ++round) {
      write(dir.file(label + ".link"));
      struct stat status {};
      REQUIRE(::lstat(dir.file(label + ".link").c_str(), &status) == 0);
      CHECK(S_ISLNK(status.st_mode));
      REQUIRE(::lstat(target.c_str(), &status) == 0);
      CHECK(S_ISREG(status.st_mode));
    }
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("real")))
    files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  CHECK(files ==
        std::vector<std::string>{"CSVLogger.out", "ModelCheckpoint.out", "save_model.out", "save_weights.out"});
  CHECK(kiln::load_model(dir.file("save_model.link")).get_weights()[0].bitwise_equal(small_model(1).get_weights()[0]));
}

TEST_CASE("every writer refuses a folder, a device, a FIFO or a socket and leaves it as it was", "[serialize][files]") {
  TempDir dir;
  REQUIRE(::mkdir(dir.file("folder").c_str(), 0755) == 0);
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0644) == 0);
  const int server = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(server >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = dir.file("socket");
  REQUIRE(socket_path.size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(::bind(server, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  // The device is reached through a link in the test's folder: were it replaced, only the link would go.
  REQUIRE(::symlink("/dev/null", dir.file("device").c_str()) == 0);

  for (const auto& [label, write] : writers()) {
    for (const char* special : {"folder", "fifo", "socket", "device"}) {
      INFO(label << " to " << special);
      const std::string path = dir.file(special);
      struct stat before {};
      REQUIRE(::lstat(path.c_str(), &before) == 0);
      CHECK_THROWS_AS(write(path), SerializationError);
      CHECK_THROWS_WITH(write(path), Catch::Contains(path) && Catch::Contains("nothing was written"));
      struct stat after {};
      REQUIRE(::lstat(path.c_str(), &after) == 0);
      CHECK(after.st_mode == before.st_mode);
      CHECK(after.st_ino == before.st_ino);
    }
  }
  struct stat null {};
  REQUIRE(::stat("/dev/null", &null) == 0);
  CHECK(S_ISCHR(null.st_mode));
  ::close(server);
  CHECK(temporaries(dir).empty());
}

TEST_CASE("loading a FIFO, a device or a folder is refused without blocking", "[serialize][files]") {
  TempDir dir;
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0644) == 0);
  for (const std::string& path : {dir.file("fifo"), std::string("/dev/null"), dir.path()}) {
    INFO(path);
    CHECK_THROWS_AS(kiln::load_model(path), SerializationError);
    CHECK_THROWS_WITH(kiln::load_model(path), Catch::Contains("not a file kiln reads"));
  }
}
