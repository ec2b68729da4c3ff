// dnnl_bench: oneDNN's own primitives as a benchmark peer (issue 39). PyTorch 2 runs its CPU LSTM, convolutions,
// batch norm and large products on oneDNN (through its mkldnn backend); timing oneDNN's primitives directly, here,
// in the same command as kiln, is the measurable stand-in for PyTorch 2 on this machine.
//
//   dnnl_bench --workload lstm --mode forward|train_step --threads N [timing flags as kiln_bench]
//
// lstm: (64, 100, 32) -> LSTM(128) -> the last hidden state -> Dense(1); MSE + Adam (lr 1e-3, betas 0.9/0.999,
// eps 1e-7), as kiln_bench's and torch_bench's lstm row.
// - forward: the lstm_forward primitive (forward_inference) with its weights reordered once into the layout it
//   chose, then the Dense head.
// - train step: the user's weights (ldigo) reordered into the forward's and the backward's layouts (they change
//   every step), lstm_forward (forward_training, with its workspace), the head and MSE's gradient, lstm_backward,
//   the weight gradients reordered back to ldigo, and Adam on every parameter.
// One JSON line, bench_common.hpp's fields, impl "onednn" and oneDNN's version.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "bench_common.hpp"

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

std::vector<float> uniform(std::size_t size, std::mt19937& rng, float low = -0.1f, float high = 0.1f) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(size);
  for (float& v : values) v = dist(rng);
  return values;
}

// Adam's state for one parameter and its update (the same arithmetic kiln's and torch's Adam do).
struct Adam {
  std::vector<float> m, v;
  explicit Adam(std::size_t size) : m(size, 0.0f), v(size, 0.0f) {}
  void step(float* w, const float* g, std::size_t size, int t) {
    constexpr float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t)), c2 = 1.0f - std::pow(b2, static_cast<float>(t));
    const float step = lr * std::sqrt(c2) / c1;
    for (std::size_t i = 0; i < size; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      w[i] -= step * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
};

// A memory in `wanted`'s layout holding `user`, reordered from it when the layouts differ (or `user` itself).
memory in_layout(const memory& user, const memory::desc& wanted, const dnnl::engine& engine) {
  if (user.get_desc() == wanted) return user;
  return memory(wanted, engine);
}
void reorder_if(memory& from, memory& to, dnnl::stream& stream) {
  if (from != to) dnnl::reorder(from, to).execute(stream, from, to);
}

class LstmRow {
 public:
  static constexpr int T = 100, N = 64, C = 32, H = 128, G = 4;

  explicit LstmRow(bool training) : training_(training) {
    std::mt19937 rng(7);
    x_ = uniform(static_cast<std::size_t>(T * N * C), rng, -1.0f, 1.0f);
    target_ = uniform(N, rng, -1.0f, 1.0f);
    w_layer_ = uniform(static_cast<std::size_t>(C * G * H), rng);
    w_iter_ = uniform(static_cast<std::size_t>(H * G * H), rng);
    bias_ = uniform(static_cast<std::size_t>(G * H), rng);
    head_w_ = uniform(H, rng);
    head_b_ = 0.0f;

    const memory::desc src_md({T, N, C}, f32, Tag::tnc), dst_md({T, N, H}, f32, Tag::tnc);
    const memory::desc w_layer_user({1, 1, C, G, H}, f32, Tag::ldigo), w_iter_user({1, 1, H, G, H}, f32, Tag::ldigo);
    const memory::desc bias_md({1, 1, G, H}, f32, Tag::ldgo);
    const memory::desc w_layer_any({1, 1, C, G, H}, f32, Tag::any), w_iter_any({1, 1, H, G, H}, f32, Tag::any);
    const memory::desc none;
    const auto kind = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    forward_pd_ = dnnl::lstm_forward::primitive_desc(
        dnnl::lstm_forward::desc(kind, dnnl::rnn_direction::unidirectional_left2right, src_md, none, none,
                                 w_layer_any, w_iter_any, bias_md, dst_md, none, none),
        engine_);
    forward_ = dnnl::lstm_forward(forward_pd_);

    src_ = memory(src_md, engine_, x_.data());
    dst_ = memory(dst_md, engine_);
    bias_mem_ = memory(bias_md, engine_, bias_.data());
    w_layer_mem_ = memory(w_layer_user, engine_, w_layer_.data());
    w_iter_mem_ = memory(w_iter_user, engine_, w_iter_.data());
    fwd_w_layer_ = in_layout(w_layer_mem_, forward_pd_.weights_layer_desc(), engine_);
    fwd_w_iter_ = in_layout(w_iter_mem_, forward_pd_.weights_iter_desc(), engine_);
    if (training) workspace_ = memory(forward_pd_.workspace_desc(), engine_);
    // Inference packs the weights once, as a plan would.
    if (!training) pack_forward_weights();

    if (training) {
      backward_pd_ = dnnl::lstm_backward::primitive_desc(
          dnnl::lstm_backward::desc(dnnl::prop_kind::backward, dnnl::rnn_direction::unidirectional_left2right, src_md,
                                    none, none, w_layer_any, w_iter_any, bias_md, dst_md, none, none, src_md, none,
                                    none, w_layer_any, w_iter_any, bias_md, dst_md, none, none),
          engine_, forward_pd_);
      backward_ = dnnl::lstm_backward(backward_pd_);
      bwd_w_layer_ = in_layout(w_layer_mem_, backward_pd_.weights_layer_desc(), engine_);
      bwd_w_iter_ = in_layout(w_iter_mem_, backward_pd_.weights_iter_desc(), engine_);
      diff_src_ = memory(backward_pd_.diff_src_layer_desc(), engine_);
      diff_dst_values_.assign(static_cast<std::size_t>(T * N * H), 0.0f);
      diff_dst_ = memory(dst_md, engine_, diff_dst_values_.data());
      g_w_layer_.assign(w_layer_.size(), 0.0f);
      g_w_iter_.assign(w_iter_.size(), 0.0f);
      g_bias_.assign(bias_.size(), 0.0f);
      g_w_layer_user_ = memory(w_layer_user, engine_, g_w_layer_.data());
      g_w_iter_user_ = memory(w_iter_user, engine_, g_w_iter_.data());
      g_w_layer_mem_ = in_layout(g_w_layer_user_, backward_pd_.diff_weights_layer_desc(), engine_);
      g_w_iter_mem_ = in_layout(g_w_iter_user_, backward_pd_.diff_weights_iter_desc(), engine_);
      g_bias_mem_ = memory(backward_pd_.diff_bias_desc(), engine_, g_bias_.data());
      adam_.reserve(5);
      for (std::size_t size : {w_layer_.size(), w_iter_.size(), bias_.size(), head_w_.size(), std::size_t{1}})
        adam_.emplace_back(size);
    }
  }

  void forward() {
    forward_.execute(stream_, {{DNNL_ARG_SRC_LAYER, src_},
                               {DNNL_ARG_WEIGHTS_LAYER, fwd_w_layer_},
                               {DNNL_ARG_WEIGHTS_ITER, fwd_w_iter_},
                               {DNNL_ARG_BIAS, bias_mem_},
                               {DNNL_ARG_DST_LAYER, dst_}});
    stream_.wait();
    head();
  }

  float train_step() {
    pack_forward_weights();
    forward_.execute(stream_, {{DNNL_ARG_SRC_LAYER, src_},
                               {DNNL_ARG_WEIGHTS_LAYER, fwd_w_layer_},
                               {DNNL_ARG_WEIGHTS_ITER, fwd_w_iter_},
                               {DNNL_ARG_BIAS, bias_mem_},
                               {DNNL_ARG_DST_LAYER, dst_},
                               {DNNL_ARG_WORKSPACE, workspace_}});
    stream_.wait();
    head();
    // MSE over the batch: dL/dy = 2 (y - t) / N; the head's gradients, and dL/dh_T into the last step's rows.
    float loss = 0.0f, g_head_b = 0.0f;
    std::vector<float>& g_head_w = g_head_w_;
    g_head_w.assign(H, 0.0f);
    const float* last = static_cast<const float*>(dst_.get_data_handle()) + static_cast<std::size_t>((T - 1) * N * H);
    float* d_last = diff_dst_values_.data() + static_cast<std::size_t>((T - 1) * N * H);
    for (int n = 0; n < N; ++n) {
      const float error = y_[static_cast<std::size_t>(n)] - target_[static_cast<std::size_t>(n)];
      loss += error * error / N;
      const float dy = 2.0f * error / N;
      g_head_b += dy;
      for (int h = 0; h < H; ++h) {
        g_head_w[static_cast<std::size_t>(h)] += last[n * H + h] * dy;
        d_last[n * H + h] = dy * head_w_[static_cast<std::size_t>(h)];
      }
    }
    reorder_if(w_layer_mem_, bwd_w_layer_, stream_);
    reorder_if(w_iter_mem_, bwd_w_iter_, stream_);
    backward_.execute(stream_, {{DNNL_ARG_SRC_LAYER, src_},
                                {DNNL_ARG_WEIGHTS_LAYER, bwd_w_layer_},
                                {DNNL_ARG_WEIGHTS_ITER, bwd_w_iter_},
                                {DNNL_ARG_BIAS, bias_mem_},
                                {DNNL_ARG_DST_LAYER, dst_},
                                {DNNL_ARG_DIFF_DST_LAYER, diff_dst_},
                                {DNNL_ARG_DIFF_SRC_LAYER, diff_src_},
                                {DNNL_ARG_DIFF_WEIGHTS_LAYER, g_w_layer_mem_},
                                {DNNL_ARG_DIFF_WEIGHTS_ITER, g_w_iter_mem_},
                                {DNNL_ARG_DIFF_BIAS, g_bias_mem_},
                                {DNNL_ARG_WORKSPACE, workspace_}});
    reorder_if(g_w_layer_mem_, g_w_layer_user_, stream_);
    reorder_if(g_w_iter_mem_, g_w_iter_user_, stream_);
    stream_.wait();
    ++t_;
    adam_[0].step(w_layer_.data(), g_w_layer_.data(), w_layer_.size(), t_);
    adam_[1].step(w_iter_.data(), g_w_iter_.data(), w_iter_.size(), t_);
    adam_[2].step(bias_.data(), static_cast<const float*>(g_bias_mem_.get_data_handle()), bias_.size(), t_);
    adam_[3].step(head_w_.data(), g_head_w.data(), head_w_.size(), t_);
    adam_[4].step(&head_b_, &g_head_b, 1, t_);
    return loss;
  }

 private:
  void pack_forward_weights() {
    reorder_if(w_layer_mem_, fwd_w_layer_, stream_);
    reorder_if(w_iter_mem_, fwd_w_iter_, stream_);
  }

  // y = h_T · w + b, h_T the last step's output rows.
  void head() {
    const float* last = static_cast<const float*>(dst_.get_data_handle()) + static_cast<std::size_t>((T - 1) * N * H);
    y_.resize(N);
    for (int n = 0; n < N; ++n) {
      float sum = head_b_;
      for (int h = 0; h < H; ++h) sum += last[n * H + h] * head_w_[static_cast<std::size_t>(h)];
      y_[static_cast<std::size_t>(n)] = sum;
    }
  }

  bool training_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<float> x_, target_, w_layer_, w_iter_, bias_, head_w_, y_, diff_dst_values_, g_w_layer_, g_w_iter_,
      g_bias_, g_head_w_;
  float head_b_ = 0.0f;
  dnnl::lstm_forward::primitive_desc forward_pd_;
  dnnl::lstm_forward forward_;
  dnnl::lstm_backward::primitive_desc backward_pd_;
  dnnl::lstm_backward backward_;
  memory src_, dst_, bias_mem_, w_layer_mem_, w_iter_mem_, fwd_w_layer_, fwd_w_iter_, workspace_;
  memory bwd_w_layer_, bwd_w_iter_, diff_src_, diff_dst_, g_w_layer_user_, g_w_iter_user_, g_w_layer_mem_,
      g_w_iter_mem_, g_bias_mem_;
  std::vector<Adam> adam_;
  int t_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args a = bench::parse_args(argc, argv, true);
  if (a.workload != "lstm" || (a.mode != "forward" && a.mode != "train_step")) {
    std::fprintf(stderr, "dnnl_bench: only --workload lstm --mode forward|train_step (got %s %s)\n",
                 a.workload.c_str(), a.mode.c_str());
    return 2;
  }
  omp_set_num_threads(a.threads);
  const dnnl_version_t* version = dnnl_version();
  const std::string extra =
      ",\"version\":\"" + std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
      std::to_string(version->patch) + "\"";
  {  // oneDNN's start-up (its engine, a first primitive) before the baseline, as the other benches do
    LstmRow warm(false);
    warm.forward();
  }
  const double baseline = bench::status_mb("VmRSS");
  bench::reset_peak();
  LstmRow row(a.mode == "train_step");
  bench::Timing timing;
  if (a.mode == "forward") {
    timing = bench::time_steps(a, [&] { row.forward(); });
  } else {
    float sink = 0.0f;
    timing = bench::time_steps(a, [&] { sink += row.train_step(); });
    if (!std::isfinite(sink)) {
      std::fprintf(stderr, "dnnl_bench: the loss is not finite\n");
      return 1;
    }
  }
  bench::print_json("onednn", a, timing, baseline, bench::status_mb("VmHWM") - baseline, extra);
  return 0;
}
