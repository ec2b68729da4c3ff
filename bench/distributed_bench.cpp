// distributed_bench: data-parallel training throughput over MPI, kiln against kiln. Run under mpirun with
// 1 and then 2 ranks (scripts/bench.sh does, when kiln::distributed is built), 1 kiln thread a rank:
//
//   mpirun -np R distributed_bench --workload seed_mha|mql5_block [--steps N] [--rounds N] [--bucket-kb N]
//
// Each rank trains on the workload's own batch (seed_mha 10 rows, mql5_block 64), so the global batch is R
// times that (weak scaling, as data-parallel training is used); the models are kiln_bench's seed_mha and
// mql5_block train steps. Rank 0 prints one JSON line: samples per second over the timed fits (the median
// of the rounds); the gradient bytes summed per step (a ring allreduce sends and receives about 2·(R−1)/R
// of them a rank); the milliseconds a step waited for its sums after backward (what overlap did not hide);
// and the milliseconds the same sums take alone, with nothing to overlap.
// Scaling efficiency is samples/s at R ranks over R × samples/s at 1 rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <kiln/distributed/context.hpp>
#include <kiln/kiln.hpp>

namespace {

using kiln::Array;
using kiln::Tensor;
constexpr std::int64_t None = kiln::Shape::unknown;

Array random_array(const kiln::Shape& shape, std::uint64_t seed) {
  kiln::Rng rng(seed);
  Array array(shape);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(-1.0, 1.0));
  return array;
}

struct Workload {
  kiln::Model model;
  std::int64_t batch;
  std::vector<std::int64_t> x_row, y_row;
  const char* optimizer;
};

Workload make_workload(const std::string& name) {
  if (name == "seed_mha") {
    const Tensor x = kiln::Input({None, 150, 512}, kiln::DType::float32, "x");
    return {kiln::Model(x, kiln::MultiHeadAttention(8)({x, x, x}), "seed_mha"), 10, {150, 512}, {150, 512}, "sgd"};
  }
  if (name == "mql5_block") {
    const Tensor x = kiln::Input({None, 40, 12}, kiln::DType::float32, "x");
    const Tensor h = kiln::Flatten()(kiln::MHAttention(16, 8)(x));
    return {kiln::Model(x, kiln::Dense(2, "tanh")(h), "mql5_block"), 64, {40, 12}, {2}, "adam"};
  }
  throw kiln::ValueError("distributed_bench: unknown workload '" + name + "' (seed_mha or mql5_block)");
}

kiln::Shape rows_of(std::int64_t rows, const std::vector<std::int64_t>& row) {
  std::vector<std::int64_t> dims = {rows};
  dims.insert(dims.end(), row.begin(), row.end());
  return kiln::Shape(dims);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::distributed::Context context(argc, argv);
  std::string name = "mql5_block";
  int steps = 20, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--workload") == 0) name = argv[i + 1];
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--bucket-kb") == 0) context.set_bucket_bytes(std::stoul(argv[i + 1]) << 10);
  }
  try {
    kiln::set_num_threads(1);
    Workload workload = make_workload(name);
    workload.model.compile(kiln::create_optimizer(workload.optimizer), "mse");
    const std::int64_t global = workload.batch * context.size();
    const Array x = random_array(rows_of(global * steps, workload.x_row), 1);
    const Array y = random_array(rows_of(global * steps, workload.y_row), 2);
    const Array warm_x = x.rows(0, global * 2), warm_y = y.rows(0, global * 2);
    const auto options = [&] {
      return kiln::FitOptions().batch_size(global).epochs(1).shuffle(false).verbose(0).distribute(context);
    };
    workload.model.fit(warm_x, warm_y, options());  // plans and allocates
    std::vector<double> rates;
    context.reset_stats();
    for (int round = 0; round < rounds; ++round) {
      context.barrier();
      const auto start = std::chrono::steady_clock::now();
      workload.model.fit(x, y, options());
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rates.push_back(static_cast<double>(global * steps) / seconds);
    }
    std::sort(rates.begin(), rates.end());
    const kiln::distributed::Context::Stats fitted = context.stats();
    const double steps_run = static_cast<double>(steps) * rounds;
    // The same bytes summed alone, as one bucket would be, with no backward to hide them behind.
    std::size_t gradient_bytes = 0;
    for (const kiln::Weight& weight : workload.model->trainable_weights()) gradient_bytes += weight.value.nbytes();
    std::vector<float> gradients(gradient_bytes / sizeof(float), 1.0f);
    context.reset_stats();
    for (int i = 0; i < 20; ++i) {
      context.start_sum(gradients.data(), gradients.size(), kiln::DType::float32);
      context.wait_all();
    }
    const double alone_ms = context.stats().wait_seconds / 20 * 1e3;
    if (context.rank() == 0)
      std::printf("{\"impl\":\"kiln\",\"workload\":\"%s\",\"mode\":\"distributed_train\",\"ranks\":%d,"
                  "\"batch_per_rank\":%lld,\"steps\":%d,\"samples_per_second\":%.2f,\"gradient_bytes\":%zu,"
                  "\"buckets_per_step\":%.2f,\"wait_ms_per_step\":%.4f,\"sum_alone_ms\":%.4f}\n",
                  name.c_str(), context.size(), static_cast<long long>(workload.batch), steps,
                  rates[rates.size() / 2], gradient_bytes, static_cast<double>(fitted.sums) / steps_run,
                  fitted.wait_seconds / steps_run * 1e3, alone_ms);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "distributed_bench rank %d: %s\n", context.rank(), error.what());
    return 1;
  }
  return 0;
}
