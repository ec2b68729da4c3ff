// The `kiln` tool, run as a separate process on files written here: its output, and its exit status
// (0 done, 1 one `kiln: error:` line on stderr, 2 usage error), never a signal.
#ifdef KILN_CLI_PATH

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/data/data.hpp>
#include <kiln/data/lookup.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>

namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temporary one, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln_cli_test_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

struct Run {
  bool exited = false;  // false when a signal ended it
  int status = -1;
  std::string out, err;
};

// Runs `kiln <arguments>` (arguments already quoted for sh) through std::system, which is sh -c, with
// stdout and stderr captured in `dir`.
// `environment` is sh's "NAME=value " prefix, or empty.
Run run_kiln(const TempDir& dir, const std::string& arguments, const std::string& environment = "") {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string command =
      environment + quoted(KILN_CLI_PATH) + " " + arguments + " >" + quoted(out) + " 2>" + quoted(err);
  const int raw = std::system(command.c_str());
  Run run;
  run.exited = raw != -1 && WIFEXITED(raw);
  run.status = run.exited ? WEXITSTATUS(raw) : -1;
  run.out = read_text(out);
  run.err = read_text(err);
  return run;
}

// A path as one shell word.
std::string arg(const std::string& text) { return quoted(text); }

// Exit status 1 and exactly one line on stderr: "kiln: error: ...".
void check_failure(const Run& run) {
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exited);
  CHECK(run.status == 1);
  const std::vector<std::string> lines = lines_of(run.err);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("kiln: error: ", 0) == 0);
  CHECK(run.err.back() == '\n');
}

void check_success(const Run& run) {
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exited);
  CHECK(run.status == 0);
  CHECK(run.err.empty());
}

// Dense(3, relu) then Dense(2) on 4 features, with its own layer names.
kiln::Model small_model() {
  kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 4}, kiln::DType::float32, "features");
  kiln::Tensor h = kiln::Dense(3, "relu", {{"name", "hidden"}})(x);
  return kiln::Model(x, kiln::Dense(2, "", {{"name", "scores"}})(h));
}

kiln::Array inputs_3x4() {
  return kiln::Array::from_vector(
      std::vector<float>{0.5f, -1.25f, 2.0f, 3.5f, 0.0f, 1.0f, -2.0f, 0.125f, 1e-3f, 7.0f, -0.75f, 4.0f},
      kiln::Shape{3, 4});
}

// The rows of `array` (samples first) as CSV text, values printed exactly.
std::string csv_of(const kiln::Array& array) {
  const std::size_t width = array.size() / static_cast<std::size_t>(array.shape()[0]);
  std::ostringstream text;
  text.precision(9);
  for (std::size_t i = 0; i < array.size(); ++i) text << array.flat(i) << ((i + 1) % width == 0 ? "\n" : ",");
  return text.str();
}

std::vector<double> parse_row(const std::string& line) {
  std::vector<double> values;
  std::istringstream in(line);
  for (std::string field; std::getline(in, field, ',');) values.push_back(std::stod(field));
  return values;
}

// Predictions printed by the tool equal `expected` (samples first, flattened per row) to 1e-6 relative.
void check_predictions(const std::vector<std::string>& rows, const kiln::Array& expected) {
  const std::size_t samples = static_cast<std::size_t>(expected.shape()[0]);
  const std::size_t width = expected.size() / samples;
  REQUIRE(rows.size() == samples);
  for (std::size_t row = 0; row < samples; ++row) {
    const std::vector<double> values = parse_row(rows[row]);
    REQUIRE(values.size() == width);
    for (std::size_t j = 0; j < width; ++j)
      CHECK(values[j] == Approx(expected.flat(row * width + j)).epsilon(1e-6).margin(1e-12));
  }
}

void truncate_to_half(const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }

void flip_byte(const std::string& path, std::size_t offset) {
  std::string bytes = read_text(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x10);
  write_text(path, bytes);
}

}  // namespace

TEST_CASE("kiln summary prints the layer table of a saved model", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  const Run run = run_kiln(dir, "summary " + arg(dir / "m.kiln"));
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("hidden") && Catch::Contains("scores") && Catch::Contains("Total params"));
}

TEST_CASE("kiln summary loads a compiled model without its optimizer", "[cli]") {
  TempDir dir;
  kiln::Model model = small_model();
  model.compile("adam", "mse");
  model.save(dir / "m.kiln");
  const Run run = run_kiln(dir, "summary " + arg(dir / "m.kiln"));
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("Total params"));
}

TEST_CASE("kiln config prints the config section as JSON that parses back", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  const Run run = run_kiln(dir, "config " + arg(dir / "m.kiln"));
  check_success(run);
  const kiln::Config config = kiln::parse_json(run.out, "kiln config output");
  REQUIRE(config.is_map());
  CHECK(config.contains("class_name"));
  CHECK(config == kiln::read_model_config(dir / "m.kiln"));
  CHECK(lines_of(run.out).size() > 3);  // pretty, not one line
}

TEST_CASE("kiln verify lists the sections and says OK", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  const Run run = run_kiln(dir, "verify " + arg(dir / "m.kiln"));
  check_success(run);
  const kiln::FileInfo info = kiln::verify_file(dir / "m.kiln");
  const std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == info.sections.size() + 2);
  CHECK(lines[0] == dir / "m.kiln" + ": kiln file format " + std::to_string(info.format_version) + ", " +
                        std::to_string(info.size) + " bytes, " + std::to_string(info.sections.size()) +
                        " sections, OK");
  for (std::size_t i = 0; i < info.sections.size(); ++i) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "0x%08x", static_cast<unsigned>(info.sections[i].crc32));
    CHECK_THAT(lines[i + 1], Catch::Contains(info.sections[i].name) && Catch::Contains(crc) &&
                                 Catch::Contains(std::to_string(info.sections[i].offset)) &&
                                 Catch::Contains(std::to_string(info.sections[i].length)));
  }
  CHECK_THAT(lines.back(), Catch::Contains("4 weights"));
}

TEST_CASE("kiln verify accepts a weights-only file", "[cli]") {
  TempDir dir;
  small_model().save_weights(dir / "m.weights.kiln");
  const Run run = run_kiln(dir, "verify " + arg(dir / "m.weights.kiln"));
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("OK"));
}

TEST_CASE("kiln predict gives the rows model.predict gives", "[cli]") {
  TempDir dir;
  kiln::Model model = small_model();
  model.save(dir / "m.kiln");
  const kiln::Array x = inputs_3x4();
  write_text(dir / "x.csv", csv_of(x));
  const Run run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv") + " --batch-size 2");
  check_success(run);
  std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "output_0,output_1");
  check_predictions({lines.begin() + 1, lines.end()}, model.predict(x));
}

TEST_CASE("kiln predict shapes each row into the input shape and skips a header", "[cli]") {
  TempDir dir;
  kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 2, 2});
  kiln::Model model(x, kiln::Dense(3)(x));  // (None, 2, 3): six values per sample
  model.save(dir / "m.kiln");
  const kiln::Array samples = inputs_3x4().reshape(kiln::Shape{3, 2, 2});
  write_text(dir / "x.csv", "a,b,c,d\n\n" + csv_of(samples));
  const Run run = run_kiln(dir, "predict --header " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv"));
  check_success(run);
  std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "output_0,output_1,output_2,output_3,output_4,output_5");
  check_predictions({lines.begin() + 1, lines.end()}, model.predict(samples));
}

TEST_CASE("kiln predict names the columns of several outputs by output", "[cli]") {
  TempDir dir;
  kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 4});
  kiln::Model model(std::vector<kiln::Tensor>{x}, std::vector<kiln::Tensor>{kiln::Dense(2)(x), kiln::Dense(1)(x)});
  model.save(dir / "m.kiln");
  const kiln::Array samples = inputs_3x4();
  write_text(dir / "x.csv", csv_of(samples));
  const Run run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv"));
  check_success(run);
  std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "out0_0,out0_1,out1_0");
  const std::vector<kiln::Array> expected = model.predict(std::vector<kiln::Array>{samples});
  for (std::size_t row = 0; row < 3; ++row) {
    const std::vector<double> values = parse_row(lines[row + 1]);
    REQUIRE(values.size() == 3);
    CHECK(values[0] == Approx(expected[0].flat(2 * row)).epsilon(1e-6));
    CHECK(values[1] == Approx(expected[0].flat(2 * row + 1)).epsilon(1e-6));
    CHECK(values[2] == Approx(expected[1].flat(row)).epsilon(1e-6));
  }
}

TEST_CASE("kiln fails with one error line on a missing file", "[cli]") {
  TempDir dir;
  for (const char* command : {"summary", "config", "verify"}) {
    const Run run = run_kiln(dir, std::string(command) + " " + arg(dir / "absent.kiln"));
    check_failure(run);
    CHECK_THAT(run.err, Catch::Contains("absent.kiln"));
  }
  write_text(dir / "x.csv", "1,2,3,4\n");
  check_failure(run_kiln(dir, "predict " + arg(dir / "absent.kiln") + " " + arg(dir / "x.csv")));
}

TEST_CASE("kiln fails with one error line on a truncated file", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  truncate_to_half(dir / "m.kiln");
  for (const char* command : {"summary", "config", "verify"})
    check_failure(run_kiln(dir, std::string(command) + " " + arg(dir / "m.kiln")));
}

TEST_CASE("kiln fails with one error line on a file with a flipped byte", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  const std::size_t size = static_cast<std::size_t>(fs::file_size(dir / "m.kiln"));
  for (std::size_t offset : {std::size_t{9}, size / 3, size / 2, size - 1}) {
    INFO("flipped byte " << offset);
    small_model().save(dir / "m.kiln");
    flip_byte(dir / "m.kiln", offset);
    for (const char* command : {"summary", "verify"})
      check_failure(run_kiln(dir, std::string(command) + " " + arg(dir / "m.kiln")));
  }
}

TEST_CASE("kiln fails with one error line on a text file and on a directory", "[cli]") {
  TempDir dir;
  write_text(dir / "notes.txt", "this is not a model\nsecond line\n");
  for (const char* command : {"summary", "config", "verify"}) {
    check_failure(run_kiln(dir, std::string(command) + " " + arg(dir / "notes.txt")));
    const Run run = run_kiln(dir, std::string(command) + " " + arg(dir / ""));
    check_failure(run);
    CHECK_THAT(run.err, Catch::Contains("is a folder, not a file kiln reads"));
  }
}

TEST_CASE("kiln config fails on a weights-only file", "[cli]") {
  TempDir dir;
  small_model().save_weights(dir / "w.kiln");
  check_failure(run_kiln(dir, "config " + arg(dir / "w.kiln")));
  check_failure(run_kiln(dir, "summary " + arg(dir / "w.kiln")));
}

TEST_CASE("kiln predict names the line and both counts of a row of the wrong length", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  write_text(dir / "short.csv", "\n1,2,3\n4,5,6\n");
  Run run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "short.csv"));
  check_failure(run);
  CHECK_THAT(run.err, Catch::Contains("short.csv:2") && Catch::Contains("3 values") && Catch::Contains("takes 4"));

  write_text(dir / "ragged.csv", "1,2,3,4\n5,6,7\n");
  run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "ragged.csv"));
  check_failure(run);
  CHECK_THAT(run.err, Catch::Contains("ragged.csv:2"));
}

TEST_CASE("kiln predict fails with one error line on a bad CSV", "[cli]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  write_text(dir / "text.csv", "1,2,3,4\n5,six,7,8\n");
  Run run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "text.csv"));
  check_failure(run);
  CHECK_THAT(run.err, Catch::Contains("text.csv:2") && Catch::Contains("six"));

  write_text(dir / "empty.csv", "");
  check_failure(run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "empty.csv")));
  check_failure(run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "absent.csv")));
  write_text(dir / "header.csv", "a,b,c,d\n1,2,3,4\n");
  check_failure(run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "header.csv")));
}

TEST_CASE("kiln predict refuses a model with several inputs", "[cli]") {
  TempDir dir;
  kiln::Tensor a = kiln::Input({kiln::Shape::unknown, 2});
  kiln::Tensor b = kiln::Input({kiln::Shape::unknown, 2});
  kiln::Model model(std::vector<kiln::Tensor>{a, b}, std::vector<kiln::Tensor>{kiln::Add()({a, b})});
  model.save(dir / "m.kiln");
  write_text(dir / "x.csv", "1,2,3,4\n");
  const Run run = run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv"));
  check_failure(run);
  CHECK_THAT(run.err, Catch::Contains("one input") && Catch::Contains("has 2 inputs"));
}

TEST_CASE("kiln exits with status 2 on a usage error", "[cli]") {
  TempDir dir;
  for (const std::string arguments : {"", "frobnicate", "summary", "predict only_one.kiln", "summary a b",
                                      "predict m.kiln x.csv --batch-size 0", "--no-such-flag"}) {
    INFO("kiln " << arguments);
    const Run run = run_kiln(dir, arguments);
    REQUIRE(run.exited);
    CHECK(run.status == 2);
    CHECK_FALSE(run.err.empty());
  }
}

// The largest resident size any finished child of this process reached, in bytes (after run_kiln).
std::int64_t children_peak_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

TEST_CASE("kiln predict reads a long CSV line without holding it several times over", "[cli][memory]") {
  // One sample of a million values on one line (about 11 MB): kiln once held every field as its own
  // string, 20 times the file. Each run is a fresh process, so its peak is its own; ASan's quarantine (which
  // keeps freed blocks resident) is off for these two.
  TempDir dir;
  constexpr std::int64_t width = 1'000'000;
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, width});
  kiln::Model(x, kiln::Dense(1)(x)).save(dir / "wide.kiln");
  {
    std::ofstream out(dir / "wide.csv");
    out.precision(9);  // what a float32 writer prints: about 11 characters a value
    for (std::int64_t i = 0; i < width; ++i)
      out << 0.123456789 * static_cast<double>(i % 7 + 1) << (i + 1 < width ? "," : "\n");
  }
  const auto file_bytes = static_cast<std::int64_t>(fs::file_size(dir / "wide.csv"));
  const std::string no_quarantine = "ASAN_OPTIONS=quarantine_size_mb=0:detect_leaks=0 ";
  check_success(run_kiln(dir, "summary " + arg(dir / "wide.kiln"), no_quarantine));
  const std::int64_t loading = children_peak_bytes();  // the process, its libraries and the model
  const Run run = run_kiln(dir, "predict " + arg(dir / "wide.kiln") + " " + arg(dir / "wide.csv"), no_quarantine);
  check_success(run);
  CHECK(lines_of(run.out).size() == 2);
  const std::int64_t reading = children_peak_bytes() - loading;
  INFO("file " << file_bytes << " bytes; predict's peak is " << reading << " bytes above loading the model");
  CHECK(reading < 4 * file_bytes);
}

TEST_CASE("kiln says what --batch-size takes, and exits 2", "[cli]") {
  TempDir dir;
  kiln::Model model = small_model();
  model.save(dir / "m.kiln");
  write_text(dir / "x.csv", csv_of(inputs_3x4()));
  for (const std::string value : {"0", "abc", "-3", "2.5", "99999999999999999999999"}) {
    INFO("--batch-size " << value);
    const Run run =
        run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv") + " --batch-size " + arg(value));
    REQUIRE(run.exited);
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::StartsWith("--batch-size must be a positive integer, got '" + value + "'\n"));
    CHECK(run.err.size() < 200);
  }
  check_success(run_kiln(dir, "predict " + arg(dir / "m.kiln") + " " + arg(dir / "x.csv") + " --batch-size 1"));
}

TEST_CASE("kiln --help lists the subcommands and --version prints the version", "[cli]") {
  TempDir dir;
  Run run = run_kiln(dir, "--help");
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("summary") && Catch::Contains("config") && Catch::Contains("verify") &&
                          Catch::Contains("predict") && Catch::Contains("convert"));
  run = run_kiln(dir, "--version");
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("0.1.0"));
}

namespace {
std::string keras_fixture(const std::string& name) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / name).string();
}
}  // namespace

TEST_CASE("kiln summary, config, verify and predict take Keras files", "[cli][keras]") {
  TempDir dir;
  const std::string keras3 = keras_fixture("keras3/seq_dense_mlp.keras");
  const std::string keras2 = keras_fixture("keras2/conv1d_k2_s1_d1_cl_same_model.h5");
  check_success(run_kiln(dir, "summary " + arg(keras3)));
  CHECK_THAT(run_kiln(dir, "summary " + arg(keras2)).out, Catch::Contains("conv0") && Catch::Contains("Total params"));

  Run run = run_kiln(dir, "config " + arg(keras3));
  check_success(run);
  CHECK(kiln::parse_json(run.out, "config").get_string("module") == "keras");
  CHECK(kiln::parse_json(run_kiln(dir, "config " + arg(keras2)).out, "config").contains("training_config"));

  run = run_kiln(dir, "verify " + arg(keras3));
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("Keras 3 .keras archive (keras_version 3.16.0)") && Catch::Contains(", OK") &&
                          Catch::Contains("config.json (") && Catch::Contains("weight dataset"));
  run = run_kiln(dir, "verify " + arg(keras2));
  check_success(run);
  CHECK_THAT(run.out,
             Catch::Contains("legacy Keras HDF5 (keras_version 2.3.1)") && Catch::Contains("2 weight datasets"));

  // predict reads the rows and writes what the model predicts: a row of 8 features in, 4 outputs out.
  write_text(dir / "x.csv", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8\n");
  run = run_kiln(dir, "predict " + arg(keras3) + " " + arg(dir / "x.csv"));
  check_success(run);
  CHECK(lines_of(run.out).size() == 2);  // a header naming the columns, then the row
}

TEST_CASE("kiln quantize writes Keras's int8 model and says which layers it quantized", "[cli][keras][quantize]") {
  TempDir dir;
  kiln::Model model = small_model();
  model.save(dir / "m.kiln");
  const kiln::Array x = inputs_3x4();
  const Run run = run_kiln(dir, "quantize " + arg(dir / "m.kiln") + " " + arg(dir / "m_int8.keras"));
  check_success(run);
  CHECK_THAT(run.out, Catch::Contains("-> " + dir / "m_int8.keras") && Catch::Contains("in int8"));
  const kiln::Model quantized = kiln::load_model(dir / "m_int8.keras");
  CHECK(quantized.predict(x).bitwise_equal(kiln::quantize(model, "int8").predict(x)));
  bool int8 = false;
  for (const kiln::Weight& weight : quantized.ptr()->weights()) int8 = int8 || weight.value.dtype() == kiln::DType::int8;
  CHECK(int8);
  const Run int4 = run_kiln(dir, "quantize --mode int4/2 " + arg(dir / "m.kiln") + " " + arg(dir / "m_int4.kiln"));
  check_success(int4);
  CHECK(kiln::load_model(dir / "m_int4.kiln").predict(x).bitwise_equal(kiln::quantize(model, "int4/2").predict(x)));
  const Run bad = run_kiln(dir, "quantize --mode float8 " + arg(dir / "m.kiln") + " " + arg(dir / "m8.keras"));
  CHECK(bad.status == 2);  // a bad option value
  CHECK_THAT(bad.err, Catch::Contains("float8"));
  CHECK_FALSE(fs::exists(dir / "m8.keras"));
}

TEST_CASE("kiln convert writes .keras, .h5 and kiln files that load to the same model", "[cli][keras]") {
  TempDir dir;
  kiln::Model model = small_model();
  model.save(dir / "m.kiln");
  const kiln::Array x = inputs_3x4();
  const kiln::Array expected = model.predict(x);
  for (const std::string target : {"m.keras", "m.h5", "back.kiln"}) {
    INFO(target);
    const std::string from = target == "back.kiln" ? dir / "m.h5" : dir / "m.kiln";
    const Run run = run_kiln(dir, "convert " + arg(from) + " " + arg(dir / target));
    check_success(run);
    CHECK_THAT(run.out, Catch::Contains("-> " + dir / target));
    CHECK(kiln::load_model(dir / target).predict(x).bitwise_equal(expected));
  }
  const Run missing = run_kiln(dir, "convert " + arg(dir / "m.kiln"));
  CHECK(missing.status == 2);
  const Run bad = run_kiln(dir, "convert " + arg(dir / "none.keras") + " " + arg(dir / "out.keras"));
  CHECK(bad.status == 1);
  CHECK_FALSE(fs::exists(dir / "out.keras"));
}

TEST_CASE("kiln plot-model and plot-history draw a saved model and a CSVLogger file", "[cli][plot]") {
  TempDir dir;
  small_model().save(dir / "m.kiln");
  const Run dot = run_kiln(dir, "plot-model " + arg(dir / "m.kiln") + " " + arg(dir / "m.dot"));
  check_success(dot);
  const std::string text = read_text(dir / "m.dot");
  CHECK(text.find("<b>hidden</b> (Dense)") != std::string::npos);
  CHECK(text.find("Output shape: <b>(None, 2)</b>") != std::string::npos);
  check_failure(run_kiln(dir, "plot-model " + arg(dir / "m.kiln") + " " + arg(dir / "m.bmp")));

  write_text(dir / "history.csv", "epoch,loss,val_loss\n0,1.0,1.1\n1,0.5,0.6\n");
  check_success(run_kiln(dir, "plot-history " + arg(dir / "history.csv") + " " + arg(dir / "history.svg")));
  CHECK(read_text(dir / "history.svg").find("<polyline") != std::string::npos);
  check_failure(run_kiln(dir, "plot-history " + arg(dir / "missing.csv") + " " + arg(dir / "x.svg")));
}

TEST_CASE("kiln ops lists every op with its backward rule, and with a gradient check log the test that runs it",
          "[cli][ops]") {
  TempDir dir;
  const Run plain = run_kiln(dir, "ops");
  check_success(plain);
  CHECK(plain.out.find("| `kiln>Softmax` | 1 | rule |  | — |") != std::string::npos);
  CHECK(plain.out.find("| `kiln>SoftmaxGrad` | 2 | not differentiable: ") != std::string::npos);
  CHECK(plain.out.find("none, and no reason given") == std::string::npos);

  write_text(dir / "ops.log", "kiln>Softmax\tkiln>SoftmaxGrad\tsoftmax checked\t1\n"
                              "kiln>Softmax\tkiln>SoftmaxGrad\tsoftmax in a bigger check\t3\n");
  const Run logged = run_kiln(dir, "ops --gradchecks " + arg(dir / "ops.log"));
  check_success(logged);
  CHECK(logged.out.find("| `kiln>Softmax` | 1 | rule | `kiln>SoftmaxGrad` | softmax checked (+1 more) |") !=
        std::string::npos);

  write_text(dir / "bad.log", "kiln>Softmax only\n");
  check_failure(run_kiln(dir, "ops --gradchecks " + arg(dir / "bad.log")));
  write_text(dir / "unknown.log", "kiln>NoSuchOp\t\tsome test\t1\n");
  check_failure(run_kiln(dir, "ops --gradchecks " + arg(dir / "unknown.log")));
  check_failure(run_kiln(dir, "ops --gradchecks " + arg(dir / "missing.log")));
}

TEST_CASE("kiln predict skips rows, picks columns, and names classes by an attached StringLookup", "[cli][predict]") {
  TempDir dir;
  kiln::Model model = small_model();
  const kiln::StringLookup species(std::vector<std::string>{"setosa"}, kiln::StringLookup::Options{});
  species.attach(model, "species");  // [UNK], setosa: one name per output
  model.save(dir / "m.kiln");
  const kiln::Array x = inputs_3x4();
  const kiln::Array expected = model.predict(x);
  // A title line, then an id column and the four features, then a label column.
  std::string text = "a title line, not data\n";
  for (int row = 0; row < 3; ++row) {
    text += std::to_string(100 + row);
    for (int j = 0; j < 4; ++j) {
      std::ostringstream value;
      value.precision(9);
      value << x.flat(static_cast<std::size_t>(row * 4 + j));
      text += "," + value.str();
    }
    text += ",label\n";
  }
  write_text(dir / "rows.csv", text);
  Run run =
      run_kiln(dir, "predict --skip-rows 1 --columns 1,2,3,-2 " + arg(dir / "m.kiln") + " " + arg(dir / "rows.csv"));
  check_success(run);
  std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "output_0,output_1,class");
  for (int row = 0; row < 3; ++row) {
    const std::string name =
        expected.flat(static_cast<std::size_t>(2 * row)) >= expected.flat(static_cast<std::size_t>(2 * row + 1))
            ? "[UNK]"
            : "setosa";
    CHECK(lines[static_cast<std::size_t>(row + 1)].substr(lines[static_cast<std::size_t>(row + 1)].rfind(',') + 1) ==
          name);
  }
  run = run_kiln(
      dir, "predict --classes --skip-rows 1 --columns 1,2,3,4 " + arg(dir / "m.kiln") + " " + arg(dir / "rows.csv"));
  check_success(run);
  lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "class");
  // Without a lookup, --classes prints the index of the largest output.
  small_model().save(dir / "plain.kiln");
  write_text(dir / "plain.csv", csv_of(x));
  run = run_kiln(dir, "predict --classes " + arg(dir / "plain.kiln") + " " + arg(dir / "plain.csv"));
  check_success(run);
  lines = lines_of(run.out);
  REQUIRE(lines.size() == 4);
  CHECK((lines[1] == "0" || lines[1] == "1"));
  // Columns by name need --header.
  check_failure(run_kiln(dir, "predict --columns a,b " + arg(dir / "plain.kiln") + " " + arg(dir / "plain.csv")));
}

TEST_CASE("kiln: a typo of a command suggests the command, an unknown extension is a usage error", "[cli]") {
  TempDir dir;
  Run run = run_kiln(dir, "predcit x");
  CHECK(run.status == 2);
  CHECK_THAT(run.err, Catch::Contains("'predcit' is not a command; did you mean 'predict'?"));
  run = run_kiln(dir, "frobnicate");
  CHECK(run.status == 2);
  CHECK_THAT(run.err, Catch::Contains("'frobnicate' is not a command"));
  CHECK_THAT(run.err, !Catch::Contains("did you mean"));
  small_model().save(dir / "m.kiln");
  run = run_kiln(dir, "convert " + arg(dir / "m.kiln") + " " + arg(dir / "m.txt"));
  CHECK(run.status == 2);
  CHECK_THAT(run.err, Catch::Contains(".kiln") && Catch::Contains(".keras") && Catch::Contains(".h5"));
  CHECK_FALSE(fs::exists(dir / "m.txt"));
}

TEST_CASE("kiln: a CSV file given as a model names the formats kiln reads", "[cli]") {
  TempDir dir;
  write_text(dir / "data.csv", "1,2,3,4\n5,6,7,8\n");
  const Run run = run_kiln(dir, "summary " + arg(dir / "data.csv"));
  check_failure(run);
  CHECK_THAT(run.err, Catch::Contains(".kiln") && Catch::Contains(".keras") && Catch::Contains(".h5"));
  CHECK_THROWS_AS(kiln::load_model(dir / "data.csv"), kiln::SerializationError);
  // A missing model and a missing data file: one type, naming the path.
  CHECK_THROWS_AS(kiln::load_model(dir / "absent.kiln"), kiln::FileNotFoundError);
  CHECK_THROWS_WITH(kiln::load_model(dir / "absent.kiln"), Catch::Contains("absent.kiln: no such file"));
  CHECK_THROWS_AS(kiln::read_csv(dir / "absent.csv"), kiln::FileNotFoundError);
}

#endif  // KILN_CLI_PATH
