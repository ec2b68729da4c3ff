// kiln_bench: kiln against a peer measured in the same process, interleaved, as a ratio.
// The peer here is raw OpenBLAS (what kiln's GEMMs call) plus plain loops: the ratio shows what kiln's
// graph, planner and executor cost on top of the arithmetic itself. The libtorch peer comes with the
// performance issue.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double time_ms(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Ratio {
  double kiln_ms, peer_ms, median, q1, q3;
  int runs;
};

// Alternates A and B so that load from the rest of the machine hits both alike.
Ratio compare_interleaved(int runs, const std::function<void()>& a, const std::function<void()>& b) {
  for (int i = 0; i < 3; ++i) {
    a();
    b();
  }
  std::vector<double> ta, tb, ratios;
  for (int i = 0; i < runs; ++i) {
    ta.push_back(time_ms(a));
    tb.push_back(time_ms(b));
    ratios.push_back(ta.back() / tb.back());
  }
  auto median = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return {median(ta, 0.5), median(tb, 0.5), median(ratios, 0.5), median(ratios, 0.25), median(ratios, 0.75), runs};
}

kiln::Array random_array(const kiln::Shape& shape, kiln::Rng& rng) {
  kiln::Array array(shape);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(-1.0, 1.0));
  return array;
}

// Dense(512, relu) forward on a batch of 256: one GEMM, a bias add and a relu.
Ratio dense_forward(int runs) {
  const int batch = 256, in = 512, out = 512;
  kiln::Rng rng(1);
  kiln::Graph graph;
  const kiln::Tensor x = graph.placeholder({kiln::Shape::unknown, in}, kiln::DType::float32, "x");
  const kiln::Tensor w = graph.variable("kernel", random_array({in, out}, rng));
  const kiln::Tensor b = graph.variable("bias", random_array({out}, rng));
  const kiln::Tensor y = kiln::ops::relu(kiln::ops::matmul(x, w) + b);
  kiln::Program program(graph, {y});
  const kiln::Array input = random_array({batch, in}, rng);

  std::vector<float> peer_out(static_cast<std::size_t>(batch * out));
  const float* pw = graph.value(w).data<float>();
  const float* pb = graph.value(b).data<float>();
  const float* px = input.data<float>();
  auto peer = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out, in, 1.0f, px, in, pw, out, 0.0f,
                peer_out.data(), out);
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j < out; ++j) {
        float& v = peer_out[static_cast<std::size_t>(i * out + j)];
        v = std::max(0.0f, v + pb[j]);
      }
  };
  auto ours = [&] {
    program.feed(x, input);
    program.run();
  };
  return compare_interleaved(runs, ours, peer);
}

// Train step of a two-layer MLP (forward, MSE, backward, SGD update) against hand-written BLAS calls.
Ratio mlp_train_step(int runs) {
  const int batch = 128, in = 256, hidden = 256, out = 16;
  kiln::Rng rng(2);
  kiln::Graph graph;
  const kiln::Tensor x = graph.placeholder({kiln::Shape::unknown, in}, kiln::DType::float32, "x");
  const kiln::Tensor t = graph.placeholder({kiln::Shape::unknown, out}, kiln::DType::float32, "t");
  const kiln::Tensor w1 = graph.variable("w1", random_array({in, hidden}, rng));
  const kiln::Tensor w2 = graph.variable("w2", random_array({hidden, out}, rng));
  const kiln::Tensor h = kiln::ops::relu(kiln::ops::matmul(x, w1));
  const kiln::Tensor loss = kiln::ops::mean_squared_error(t, kiln::ops::matmul(h, w2));
  const auto grads = kiln::gradients(loss, {w1, w2});
  kiln::Program program(graph, {loss}, {{w1, w1 - grads[0] * 1e-4}, {w2, w2 - grads[1] * 1e-4}});
  const kiln::Array input = random_array({batch, in}, rng), target = random_array({batch, out}, rng);

  std::vector<float> pw1(graph.value(w1).data<float>(), graph.value(w1).data<float>() + in * hidden);
  std::vector<float> pw2(graph.value(w2).data<float>(), graph.value(w2).data<float>() + hidden * out);
  std::vector<float> ph(batch * hidden), py(batch * out), dy(batch * out), dh(batch * hidden), g1(in * hidden),
      g2(hidden * out);
  const float* px = input.data<float>();
  const float* pt = target.data<float>();
  auto peer = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, hidden, in, 1, px, in, pw1.data(), hidden, 0, ph.data(), hidden);
    for (float& v : ph) v = std::max(0.0f, v);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out, hidden, 1, ph.data(), hidden, pw2.data(), out, 0, py.data(), out);
    const float scale = 2.0f / static_cast<float>(batch * out);
    for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = scale * (py[i] - pt[i]);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hidden, out, batch, 1, ph.data(), hidden, dy.data(), out, 0, g2.data(), out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, hidden, out, 1, dy.data(), out, pw2.data(), out, 0, dh.data(), hidden);
    for (std::size_t i = 0; i < dh.size(); ++i) dh[i] = ph[i] > 0 ? dh[i] : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, hidden, batch, 1, px, in, dh.data(), hidden, 0, g1.data(), hidden);
    for (std::size_t i = 0; i < g1.size(); ++i) pw1[i] -= 1e-4f * g1[i];
    for (std::size_t i = 0; i < g2.size(); ++i) pw2[i] -= 1e-4f * g2[i];
  };
  auto ours = [&] {
    program.feed(x, input);
    program.feed(t, target);
    program.run();
  };
  return compare_interleaved(runs, ours, peer);
}

void report(const char* name, const char* mode, const Ratio& r) {
  std::printf("{\"impl\":\"kiln\",\"peer\":\"openblas+loops\",\"workload\":\"%s\",\"mode\":\"%s\",\"kiln_ms\":%.3f,"
              "\"peer_ms\":%.3f,\"ratio_median\":%.3f,\"ratio_q1\":%.3f,\"ratio_q3\":%.3f,\"pairs\":%d}\n",
              name, mode, r.kiln_ms, r.peer_ms, r.median, r.q1, r.q3, r.runs);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 41;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(5, std::atoi(argv[i + 1]));
  report("dense_512", "forward", dense_forward(runs));
  report("mlp_256", "train_step", mlp_train_step(runs));
  std::printf("# ratio = kiln time / peer time, median of %d interleaved pairs; reproduce with: make bench\n", runs);
  return 0;
}
