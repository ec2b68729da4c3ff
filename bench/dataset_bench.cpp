// dataset_bench: fit of the stock model (examples/stock_attention: 40-day windows of 4 returns through
// MHAttention and two Dense layers) fed by a CSV file streamed through Dataset::from_csv(...).shuffle()
// .batch(32).prefetch(2), against the same rows given as in-memory arrays, the same epochs, alternating in
// one process. Prints one JSON line and a sentence; the ratio streamed / in-memory is the result (the
// target is <= 1.1: reading and parsing on the prefetch thread hide behind the training steps).
//
//   dataset_bench [--rows N] [--epochs E] [--rounds R] [--dir D]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "../examples/stock_attention/stock_data.hpp"

namespace {

using stock::window;

kiln::Model stock_model() {
  kiln::Model model = stock::attention_model();
  model.compile("adam", "mse");
  return model;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t rows = 2000;
  int epochs = 3, rounds = 3;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rows") == 0) rows = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
  }
  // Windows of a random walk's returns, with next-day absolute returns as targets, written as a CSV of 160
  // feature columns and 2 label columns (what a user exports from pandas).
  kiln::Rng rng(1);
  kiln::Array x({rows, window * 4}), y({rows, 2});
  const std::string path = dir + "/kiln_dataset_bench.csv";
  {
    std::ofstream csv(path);
    for (std::int64_t c = 0; c < window * 4; ++c) csv << "r" << c << ",";
    csv << "y0,y1\n";
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < window * 4; ++c) {
        const auto value = static_cast<float>(rng.normal(0.0, 0.01));
        x.set_flat(static_cast<std::size_t>(r * window * 4 + c), value);
        csv << value << ",";
      }
      const auto a = static_cast<float>(std::abs(rng.normal(0.0, 0.01))), b = static_cast<float>(std::abs(rng.normal(0.0, 0.01)));
      y.set_flat(static_cast<std::size_t>(2 * r), a);
      y.set_flat(static_cast<std::size_t>(2 * r + 1), b);
      csv << a << "," << b << "\n";
    }
  }
  kiln::CsvOptions options;
  options.label_names = {"y0", "y1"};
  const kiln::Dataset streamed = kiln::Dataset::from_csv({path}, options).shuffle(1024, 7).batch(32).prefetch(2);

  auto seconds = [](auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<double> in_memory, from_csv;
  for (int round = 0; round < rounds; ++round) {
    // Fresh models, the order flipped each round, so load on the machine hits both alike.
    for (int which = 0; which < 2; ++which) {
      const bool csv_first = round % 2 == 1;
      kiln::Model model = stock_model();
      if ((which == 0) != csv_first)
        in_memory.push_back(
            seconds([&] { model.fit(x, y, kiln::FitOptions().epochs(epochs).batch_size(32).verbose(0)); }));
      else
        from_csv.push_back(seconds([&] { model.fit(streamed, kiln::FitOptions().epochs(epochs).verbose(0)); }));
    }
  }
  std::remove(path.c_str());
  const double memory_s = median(in_memory), csv_s = median(from_csv);
  std::printf("{\"workload\": \"dataset_csv_fit\", \"rows\": %lld, \"epochs\": %d, \"in_memory_s\": %.3f, "
              "\"streamed_csv_s\": %.3f, \"ratio\": %.3f}\n",
              static_cast<long long>(rows), epochs, memory_s, csv_s, csv_s / memory_s);
  std::printf("fit of the stock model, %lld rows x %d epochs: in-memory arrays %.2f s, streamed CSV dataset %.2f s "
              "(ratio %.2f)\n",
              static_cast<long long>(rows), epochs, memory_s, csv_s, csv_s / memory_s);
  return 0;
}
