// Loading and saving models of real sizes: a model of about 1M, 30M and 150M parameters, made here, saved and
// loaded in each format (kiln's, Keras 3's .keras, legacy .h5). A load may take at most 1.25 times the
// weights' bytes and 64 MiB more (its peak resident memory over what the process held before), a save no
// second copy of the weights. A binary of its own, left out of the sanitizer build, whose allocator and
// shadow memory would be measured too.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <kiln/kiln.hpp>
#include "support/temp_dir.hpp"

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;
constexpr double kMiB = 1024.0 * 1024.0;

// A field of /proc/self/status, in bytes.
std::int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  FAIL("no " << field << " in /proc/self/status");
  return -1;
}

// Restarts the peak (VmHWM) from the current resident size.
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Measure {
  std::int64_t before = 0;
  std::chrono::steady_clock::time_point start;
  Measure() {
    reset_peak();
    before = status_bytes("VmRSS");
    start = std::chrono::steady_clock::now();
  }
  double peak_over() const { return static_cast<double>(status_bytes("VmHWM") - before); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

}  // namespace

TEST_CASE("models of 1M, 30M and 150M parameters save and load in every format within 1.25x their weights",
          "[serialize][memory]") {
  const kiln::testing::TempDir dir;
  for (const std::int64_t width : {1000, 5477, 12247}) {
    for (const std::string format : {".kiln", ".keras", ".h5"}) {
      const std::string path = dir.file("model" + format);
      double weight_bytes = 0;
      kiln::Array probe({2, width}), expected;
      for (std::size_t i = 0; i < probe.size(); ++i) probe.set_flat(i, static_cast<double>(i % 7) - 3.0);
      {
        const kiln::Tensor x = kiln::Input({None, width});
        kiln::Model model(x, kiln::Dense(1)(kiln::Dense(width)(x)));
        weight_bytes = static_cast<double>(model.count_params()) * 4;
        expected = model.predict(probe);
        const Measure save;
        model.save(path);
        INFO(format << ", " << model.count_params() << " parameters: save took " << save.peak_over() / kMiB << " MiB over "
                    << weight_bytes / kMiB << " MiB of weights in " << save.seconds() << " s");
        CHECK(save.peak_over() <= 0.25 * weight_bytes + 64 * kMiB);
      }
      const Measure load;
      const kiln::Model loaded = kiln::load_model(path);
      const double peak = load.peak_over(), seconds = load.seconds();
      std::printf("%s: %.0f MiB of weights loaded in %.2f s, peak %.0f MiB (%.2fx)\n", format.c_str(),
                  weight_bytes / kMiB, seconds, peak / kMiB, peak / weight_bytes);
      INFO(format << ": load peak " << peak / kMiB << " MiB for " << weight_bytes / kMiB << " MiB of weights");
      CHECK(peak <= 1.25 * weight_bytes + 64 * kMiB);
      CHECK(loaded.predict(probe).bitwise_equal(expected));
      std::remove(path.c_str());
    }
  }
}
