// dnnl_bench: oneDNN's own primitives as a benchmark peer (issue 39). PyTorch 2 runs its CPU LSTM and GRU,
// convolutions, batch norm and large products on oneDNN (through its mkldnn backend); timing oneDNN's primitives
// directly, here, in the same command as kiln, is the measurable stand-in for PyTorch 2 on this machine.
//
//   dnnl_bench --workload lstm|rnn --mode forward|train_step --threads N [timing flags as kiln_bench]
//   dnnl_bench --workload cnn_small --mode forward|train_step --threads N
//
// The rows, as kiln_bench's and torch_bench's, with Adam (lr 1e-3, betas 0.9/0.999, eps 1e-7) and MSE:
// - lstm: (64, 100, 32) -> LSTM(128) -> the last hidden state -> Dense(1).
// - rnn: (32, 100, 32) -> LSTM(128) returning every step -> GRU(64) (oneDNN's linear-before-reset GRU, which is
//   Keras's reset_after) -> the last hidden state -> Dense(1).
// - cnn_small (forward): (64, 28, 28, 1) channels-last -> convolution 32 3×3 + ReLU -> batch norm (moving
//   statistics) -> max pool 2×2 -> convolution 64 3×3 + ReLU -> global average pool -> inner product 10, as
//   PyTorch 2 runs a channels-last CNN in inference: each primitive in the layout it chooses (format_tag::any),
//   the ReLUs as the convolutions' post-ops, a reorder only where one primitive's output layout is not the next's
//   input layout. The input is reordered from the user's nhwc every call, as a framework gets it.
// - cnn_small (train_step): the same layers with Keras's training semantics, activations nhwc (PyTorch 2's
//   channels-last CNN): forward_training convolutions, ReLU as eltwise primitives (their gradient from their
//   output), batch norm on the batch's statistics (its moving statistics updated), max pool with its workspace (the
//   arg max), global average pool, inner product; sparse categorical cross-entropy from the logits in C++; then
//   every backward primitive, last to first (no gradient for the input), and Adam on every weight, kept by the
//   user in oihw and reordered into each primitive's layout every step (their gradients back).
// Forward runs forward_inference with each layer's weights reordered once into the layout the primitive chose.
// A train step reorders the user's weights (ldigo) into the forward's and the backward's layouts (they change
// every step), runs forward_training (with its workspace), the head and MSE's gradient, the layers' backward
// primitives from the last to the first, reorders the weight gradients back to ldigo, and runs Adam on every
// parameter. One JSON line, bench_common.hpp's fields, impl "onednn" and oneDNN's version.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
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
constexpr auto left2right = dnnl::rnn_direction::unidirectional_left2right;

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

// A memory in `wanted`'s layout for `user`'s values: `user` itself when the layouts agree, else a new one that
// reorder_if fills.
memory in_layout(const memory& user, const memory::desc& wanted, const dnnl::engine& engine) {
  if (user.get_desc() == wanted) return user;
  return memory(wanted, engine);
}
void reorder_if(memory& from, memory& to, dnnl::stream& stream) {
  if (from != to) dnnl::reorder(from, to).execute(stream, from, to);
}

enum class Kind { lstm, gru };

// One recurrent layer over (T, N, C) into (T, N, H): its weights (ldigo, as a user keeps them), the primitives and
// their memories, the gradients and Adam.
class Layer {
 public:
  Layer(Kind kind, int steps, int batch, int channels, int hidden, bool training, const dnnl::engine& engine,
        std::mt19937& rng)
      : training_(training) {
    // LSTM: 4 gates and biases; the linear-before-reset GRU: 3 gates, 4 biases (the candidate's recurrent one).
    const int gates = kind == Kind::lstm ? 4 : 3, bias_gates = 4;
    w_layer_ = uniform(static_cast<std::size_t>(channels * gates * hidden), rng);
    w_iter_ = uniform(static_cast<std::size_t>(hidden * gates * hidden), rng);
    bias_ = uniform(static_cast<std::size_t>(bias_gates * hidden), rng);

    const memory::desc src_md({steps, batch, channels}, f32, Tag::tnc), dst_md({steps, batch, hidden}, f32, Tag::tnc);
    const memory::desc w_layer_user({1, 1, channels, gates, hidden}, f32, Tag::ldigo);
    const memory::desc w_iter_user({1, 1, hidden, gates, hidden}, f32, Tag::ldigo);
    const memory::desc bias_md({1, 1, bias_gates, hidden}, f32, Tag::ldgo);
    const memory::desc w_layer_any({1, 1, channels, gates, hidden}, f32, Tag::any);
    const memory::desc w_iter_any({1, 1, hidden, gates, hidden}, f32, Tag::any);
    const memory::desc none;
    const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    if (kind == Kind::lstm) {
      const dnnl::lstm_forward::primitive_desc fwd(
          dnnl::lstm_forward::desc(prop, left2right, src_md, none, none, w_layer_any, w_iter_any, bias_md, dst_md,
                                   none, none),
          engine);
      forward_pd_ = fwd;
      forward_ = dnnl::lstm_forward(fwd);
      if (training) {
        const dnnl::lstm_backward::primitive_desc bwd(
            dnnl::lstm_backward::desc(dnnl::prop_kind::backward, left2right, src_md, none, none, w_layer_any,
                                      w_iter_any, bias_md, dst_md, none, none, src_md, none, none, w_layer_any,
                                      w_iter_any, bias_md, dst_md, none, none),
            engine, fwd);
        backward_pd_ = bwd;
        backward_ = dnnl::lstm_backward(bwd);
      }
    } else {
      const dnnl::lbr_gru_forward::primitive_desc fwd(
          dnnl::lbr_gru_forward::desc(prop, left2right, src_md, none, w_layer_any, w_iter_any, bias_md, dst_md, none),
          engine);
      forward_pd_ = fwd;
      forward_ = dnnl::lbr_gru_forward(fwd);
      if (training) {
        const dnnl::lbr_gru_backward::primitive_desc bwd(
            dnnl::lbr_gru_backward::desc(dnnl::prop_kind::backward, left2right, src_md, none, w_layer_any, w_iter_any,
                                         bias_md, dst_md, none, src_md, none, w_layer_any, w_iter_any, bias_md, dst_md,
                                         none),
            engine, fwd);
        backward_pd_ = bwd;
        backward_ = dnnl::lbr_gru_backward(bwd);
      }
    }

    dst_ = memory(dst_md, engine);
    bias_mem_ = memory(bias_md, engine, bias_.data());
    w_layer_mem_ = memory(w_layer_user, engine, w_layer_.data());
    w_iter_mem_ = memory(w_iter_user, engine, w_iter_.data());
    fwd_w_layer_ = in_layout(w_layer_mem_, forward_pd_.weights_layer_desc(), engine);
    fwd_w_iter_ = in_layout(w_iter_mem_, forward_pd_.weights_iter_desc(), engine);
    if (!training) {
      dnnl::stream stream(engine);
      pack_forward_weights(stream);  // inference packs the weights once, as a plan would
      stream.wait();
      return;
    }
    workspace_ = memory(forward_pd_.workspace_desc(), engine);
    bwd_w_layer_ = in_layout(w_layer_mem_, backward_pd_.weights_layer_desc(), engine);
    bwd_w_iter_ = in_layout(w_iter_mem_, backward_pd_.weights_iter_desc(), engine);
    diff_src_ = memory(backward_pd_.diff_src_layer_desc(), engine);
    diff_dst_ = memory(dst_md, engine);
    g_w_layer_.assign(w_layer_.size(), 0.0f);
    g_w_iter_.assign(w_iter_.size(), 0.0f);
    g_w_layer_user_ = memory(w_layer_user, engine, g_w_layer_.data());
    g_w_iter_user_ = memory(w_iter_user, engine, g_w_iter_.data());
    g_w_layer_mem_ = in_layout(g_w_layer_user_, backward_pd_.diff_weights_layer_desc(), engine);
    g_w_iter_mem_ = in_layout(g_w_iter_user_, backward_pd_.diff_weights_iter_desc(), engine);
    g_bias_mem_ = memory(backward_pd_.diff_bias_desc(), engine);
    for (std::size_t size : {w_layer_.size(), w_iter_.size(), bias_.size()}) adam_.emplace_back(size);
  }

  memory& forward(dnnl::stream& stream, memory& src) {
    if (training_) pack_forward_weights(stream);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC_LAYER, src},
                                            {DNNL_ARG_WEIGHTS_LAYER, fwd_w_layer_},
                                            {DNNL_ARG_WEIGHTS_ITER, fwd_w_iter_},
                                            {DNNL_ARG_BIAS, bias_mem_},
                                            {DNNL_ARG_DST_LAYER, dst_}};
    if (training_) args[DNNL_ARG_WORKSPACE] = workspace_;
    forward_.execute(stream, args);
    return dst_;
  }

  // diff_dst() holds the output's gradient; after it, diff_src() the input's.
  void backward(dnnl::stream& stream, memory& src) {
    reorder_if(w_layer_mem_, bwd_w_layer_, stream);
    reorder_if(w_iter_mem_, bwd_w_iter_, stream);
    backward_.execute(stream, {{DNNL_ARG_SRC_LAYER, src},
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
    reorder_if(g_w_layer_mem_, g_w_layer_user_, stream);
    reorder_if(g_w_iter_mem_, g_w_iter_user_, stream);
  }

  void adam(int t) {
    adam_[0].step(w_layer_.data(), g_w_layer_.data(), w_layer_.size(), t);
    adam_[1].step(w_iter_.data(), g_w_iter_.data(), w_iter_.size(), t);
    adam_[2].step(bias_.data(), static_cast<const float*>(g_bias_mem_.get_data_handle()), bias_.size(), t);
  }

  memory& dst() { return dst_; }
  memory& diff_dst() { return diff_dst_; }
  memory& diff_src() { return diff_src_; }

 private:
  void pack_forward_weights(dnnl::stream& stream) {
    reorder_if(w_layer_mem_, fwd_w_layer_, stream);
    reorder_if(w_iter_mem_, fwd_w_iter_, stream);
  }

  bool training_;
  std::vector<float> w_layer_, w_iter_, bias_, g_w_layer_, g_w_iter_;
  dnnl::rnn_primitive_desc_base forward_pd_, backward_pd_;
  dnnl::primitive forward_, backward_;
  memory dst_, bias_mem_, w_layer_mem_, w_iter_mem_, fwd_w_layer_, fwd_w_iter_, workspace_;
  memory bwd_w_layer_, bwd_w_iter_, diff_src_, diff_dst_, g_w_layer_user_, g_w_iter_user_, g_w_layer_mem_,
      g_w_iter_mem_, g_bias_mem_;
  std::vector<Adam> adam_;
};

// A stack of recurrent layers, then Dense(1) on the last layer's last hidden state, MSE against a target.
class Row {
 public:
  Row(const std::string& workload, bool training) {
    std::mt19937 rng(7);
    const bool lstm = workload == "lstm";
    steps_ = 100, batch_ = lstm ? 64 : 32;
    const int channels = 32;
    layers_.push_back(std::make_unique<Layer>(Kind::lstm, steps_, batch_, channels, 128, training, engine_, rng));
    if (!lstm) layers_.push_back(std::make_unique<Layer>(Kind::gru, steps_, batch_, 128, 64, training, engine_, rng));
    hidden_ = lstm ? 128 : 64;
    x_ = uniform(static_cast<std::size_t>(steps_ * batch_ * channels), rng, -1.0f, 1.0f);
    target_ = uniform(static_cast<std::size_t>(batch_), rng, -1.0f, 1.0f);
    head_w_ = uniform(static_cast<std::size_t>(hidden_), rng);
    src_ = memory({{steps_, batch_, channels}, f32, Tag::tnc}, engine_, x_.data());
    adam_.emplace_back(head_w_.size());
    adam_.emplace_back(1);
  }

  void forward() {
    run_layers();
    stream_.wait();
    head();
  }

  float train_step() {
    run_layers();
    stream_.wait();
    head();
    // MSE over the batch: dL/dy = 2 (y - t) / N; the head's gradients, and dL/dh_T into the last step's rows (the
    // other steps' rows stay zero).
    const std::size_t n_h = static_cast<std::size_t>(batch_ * hidden_);
    const float* last = last_hidden();
    float* d_top = static_cast<float*>(layers_.back()->diff_dst().get_data_handle());
    std::fill(d_top, d_top + static_cast<std::size_t>(steps_) * n_h, 0.0f);
    float* d_last = d_top + static_cast<std::size_t>(steps_ - 1) * n_h;
    float loss = 0.0f, g_head_b = 0.0f;
    g_head_w_.assign(static_cast<std::size_t>(hidden_), 0.0f);
    for (int n = 0; n < batch_; ++n) {
      const float error = y_[static_cast<std::size_t>(n)] - target_[static_cast<std::size_t>(n)];
      loss += error * error / static_cast<float>(batch_);
      const float dy = 2.0f * error / static_cast<float>(batch_);
      g_head_b += dy;
      for (int h = 0; h < hidden_; ++h) {
        g_head_w_[static_cast<std::size_t>(h)] += last[n * hidden_ + h] * dy;
        d_last[n * hidden_ + h] = dy * head_w_[static_cast<std::size_t>(h)];
      }
    }
    // Back through the layers, last to first: each one's input gradient is the one below's output gradient.
    for (std::size_t i = layers_.size(); i-- > 0;) {
      memory& below = i == 0 ? src_ : layers_[i - 1]->dst();
      layers_[i]->backward(stream_, below);
      if (i > 0) {
        dnnl::reorder(layers_[i]->diff_src(), layers_[i - 1]->diff_dst())
            .execute(stream_, layers_[i]->diff_src(), layers_[i - 1]->diff_dst());
      }
    }
    stream_.wait();
    ++t_;
    for (auto& layer : layers_) layer->adam(t_);
    adam_[0].step(head_w_.data(), g_head_w_.data(), head_w_.size(), t_);
    adam_[1].step(&head_b_, &g_head_b, 1, t_);
    return loss;
  }

 private:
  void run_layers() {
    memory* input = &src_;
    for (auto& layer : layers_) input = &layer->forward(stream_, *input);
  }
  const float* last_hidden() const {
    return static_cast<const float*>(layers_.back()->dst().get_data_handle()) +
           static_cast<std::size_t>((steps_ - 1) * batch_ * hidden_);
  }
  // y = h_T · w + b, h_T the last step's output rows.
  void head() {
    const float* last = last_hidden();
    y_.resize(static_cast<std::size_t>(batch_));
    for (int n = 0; n < batch_; ++n) {
      float sum = head_b_;
      for (int h = 0; h < hidden_; ++h) sum += last[n * hidden_ + h] * head_w_[static_cast<std::size_t>(h)];
      y_[static_cast<std::size_t>(n)] = sum;
    }
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  int steps_ = 0, batch_ = 0, hidden_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> x_, target_, head_w_, g_head_w_, y_;
  float head_b_ = 0.0f;
  memory src_;
  std::vector<Adam> adam_;
  int t_ = 0;
};


// cnn_small's forward as a chain of oneDNN primitives (see the top of this file).
class CnnSmall {
 public:
  CnnSmall() {
    std::mt19937 rng(7);
    const memory::dim n = 64;
    x_ = uniform(static_cast<std::size_t>(n * 28 * 28), rng, -1.0f, 1.0f);
    user_src_ = memory({{n, 1, 28, 28}, f32, Tag::nhwc}, engine_, x_.data());
    // convolution 1 (+ ReLU)
    memory::desc c1_src({n, 1, 28, 28}, f32, Tag::any), c1_w({32, 1, 3, 3}, f32, Tag::any), c1_b({32}, f32, Tag::x),
        c1_dst({n, 32, 26, 26}, f32, Tag::any);
    conv1_pd_ = conv_pd(c1_src, c1_w, c1_b, c1_dst);
    src_ = in_layout(user_src_, conv1_pd_.src_desc(), engine_);
    w1_ = weights({32, 1, 3, 3}, conv1_pd_.weights_desc(), rng, 9);
    b1_ = filled({32}, rng);
    conv1_dst_ = memory(conv1_pd_.dst_desc(), engine_);
    // batch norm on the moving statistics, in conv1's layout, in place
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    bn_pd_ = dnnl::batch_normalization_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, conv1_pd_.dst_desc(), 1e-3f, flags}, engine_);
    bn_scale_ = filled({32}, rng, 0.5f, 1.5f);
    bn_shift_ = filled({32}, rng);
    bn_mean_ = filled({32}, rng);
    bn_var_ = filled({32}, rng, 0.5f, 1.5f);
    // max pool 2×2
    pool_pd_ = dnnl::pooling_v2_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, conv1_pd_.dst_desc(),
         memory::desc({n, 32, 13, 13}, f32, Tag::any), {2, 2}, {2, 2}, {0, 0}, {0, 0}, {0, 0}},
        engine_);
    pool_dst_ = memory(pool_pd_.dst_desc(), engine_);
    // convolution 2 (+ ReLU)
    conv2_pd_ = conv_pd(memory::desc({n, 32, 13, 13}, f32, Tag::any), memory::desc({64, 32, 3, 3}, f32, Tag::any),
                        memory::desc({64}, f32, Tag::x), memory::desc({n, 64, 11, 11}, f32, Tag::any));
    conv2_src_ = in_layout(pool_dst_, conv2_pd_.src_desc(), engine_);
    w2_ = weights({64, 32, 3, 3}, conv2_pd_.weights_desc(), rng, 288);
    b2_ = filled({64}, rng);
    conv2_dst_ = memory(conv2_pd_.dst_desc(), engine_);
    // global average pool over 11×11
    gap_pd_ = dnnl::pooling_v2_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding, conv2_pd_.dst_desc(),
         memory::desc({n, 64, 1, 1}, f32, Tag::any), {1, 1}, {11, 11}, {0, 0}, {0, 0}, {0, 0}},
        engine_);
    gap_dst_ = memory(gap_pd_.dst_desc(), engine_);
    // inner product 64 -> 10
    dense_pd_ = dnnl::inner_product_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, gap_pd_.dst_desc(), memory::desc({10, 64, 1, 1}, f32, Tag::any),
         memory::desc({10}, f32, Tag::x), memory::desc({n, 10}, f32, Tag::nc)},
        engine_);
    w3_ = weights({10, 64, 1, 1}, dense_pd_.weights_desc(), rng, 64);
    b3_ = filled({10}, rng);
    logits_ = memory(dense_pd_.dst_desc(), engine_);
  }

  void forward() {
    reorder_if(user_src_, src_, stream_);
    dnnl::convolution_forward(conv1_pd_).execute(
        stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w1_}, {DNNL_ARG_BIAS, b1_}, {DNNL_ARG_DST, conv1_dst_}});
    dnnl::batch_normalization_forward(bn_pd_).execute(
        stream_, {{DNNL_ARG_SRC, conv1_dst_}, {DNNL_ARG_DST, conv1_dst_}, {DNNL_ARG_SCALE, bn_scale_},
                  {DNNL_ARG_SHIFT, bn_shift_}, {DNNL_ARG_MEAN, bn_mean_}, {DNNL_ARG_VARIANCE, bn_var_}});
    dnnl::pooling_v2_forward(pool_pd_).execute(stream_, {{DNNL_ARG_SRC, conv1_dst_}, {DNNL_ARG_DST, pool_dst_}});
    reorder_if(pool_dst_, conv2_src_, stream_);
    dnnl::convolution_forward(conv2_pd_).execute(
        stream_, {{DNNL_ARG_SRC, conv2_src_}, {DNNL_ARG_WEIGHTS, w2_}, {DNNL_ARG_BIAS, b2_}, {DNNL_ARG_DST, conv2_dst_}});
    dnnl::pooling_v2_forward(gap_pd_).execute(stream_, {{DNNL_ARG_SRC, conv2_dst_}, {DNNL_ARG_DST, gap_dst_}});
    dnnl::inner_product_forward(dense_pd_).execute(
        stream_, {{DNNL_ARG_SRC, gap_dst_}, {DNNL_ARG_WEIGHTS, w3_}, {DNNL_ARG_BIAS, b3_}, {DNNL_ARG_DST, logits_}});
    stream_.wait();
  }

  float checksum() const {
    const float* y = static_cast<const float*>(logits_.get_data_handle());
    float sum = 0.0f;
    for (int i = 0; i < 64 * 10; ++i) sum += y[i];
    return sum;
  }

 private:
  dnnl::convolution_forward::primitive_desc conv_pd(const memory::desc& src, const memory::desc& w,
                                                    const memory::desc& b, const memory::desc& dst) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    return dnnl::convolution_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, w, b, dst, {1, 1}, {0, 0},
         {0, 0}},
        attr, engine_);
  }
  // Glorot-like uniform weights in the user's oihw, reordered once into the primitive's layout.
  memory weights(const memory::dims& dims, const memory::desc& wanted, std::mt19937& rng, int fan_in) {
    std::size_t size = 1;
    for (const auto d : dims) size *= static_cast<std::size_t>(d);
    const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + dims[0]));
    user_weights_.push_back(uniform(size, rng, -limit, limit));
    memory user(memory::desc(dims, f32, dims.size() == 4 ? Tag::oihw : Tag::oi), engine_, user_weights_.back().data());
    memory placed = in_layout(user, wanted, engine_);
    reorder_if(user, placed, stream_);
    stream_.wait();
    return placed;
  }
  memory filled(const memory::dims& dims, std::mt19937& rng, float low = -0.1f, float high = 0.1f) {
    user_weights_.push_back(uniform(static_cast<std::size_t>(dims[0]), rng, low, high));
    return memory(memory::desc(dims, f32, Tag::x), engine_, user_weights_.back().data());
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<float> x_;
  std::vector<std::vector<float>> user_weights_;
  memory user_src_, src_, w1_, b1_, conv1_dst_, bn_scale_, bn_shift_, bn_mean_, bn_var_, pool_dst_, conv2_src_, w2_,
      b2_, conv2_dst_, gap_dst_, w3_, b3_, logits_;
  dnnl::convolution_forward::primitive_desc conv1_pd_, conv2_pd_;
  dnnl::batch_normalization_forward::primitive_desc bn_pd_;
  dnnl::pooling_v2_forward::primitive_desc pool_pd_, gap_pd_;
  dnnl::inner_product_forward::primitive_desc dense_pd_;
};

// cnn_small's train step as oneDNN primitives (see the top of this file).
class CnnSmallTrain {
 public:
  CnnSmallTrain() {
    std::mt19937 rng(7);
    x_ = uniform(static_cast<std::size_t>(n_ * 28 * 28), rng, -1.0f, 1.0f);
    labels_.resize(static_cast<std::size_t>(n_));
    for (int& label : labels_) label = static_cast<int>(rng() % 10);
    const auto nhwc = [](memory::dims dims) { return memory::desc(dims, f32, Tag::nhwc); };
    const memory::desc x_md = nhwc({n_, 1, 28, 28}), a1_md = nhwc({n_, 32, 26, 26}), p_md = nhwc({n_, 32, 13, 13}),
                       a2_md = nhwc({n_, 64, 11, 11}), g_md = nhwc({n_, 64, 1, 1}), out_md({n_, 10}, f32, Tag::nc);
    x_mem_ = memory(x_md, engine_, x_.data());
    conv1_ = std::make_unique<Conv>(engine_, x_md, a1_md, 32, 1, rng, false);
    relu1_ = Relu(engine_, a1_md);
    // batch norm on the batch's statistics, scale and shift learned
    const auto bn_flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    bn_fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, a1_md, 1e-3f, bn_flags}, engine_);
    bn_bwd_pd_ = dnnl::batch_normalization_backward::primitive_desc(
        {dnnl::prop_kind::backward, a1_md, a1_md, 1e-3f, bn_flags}, engine_, bn_fwd_pd_);
    gamma_ = std::vector<float>(32, 1.0f), beta_ = std::vector<float>(32, 0.0f);
    moving_mean_.assign(32, 0.0f), moving_var_.assign(32, 1.0f);
    g_gamma_.resize(32), g_beta_.resize(32), mean_.resize(32), var_.resize(32);
    bn_dst_ = memory(a1_md, engine_), d_bn_dst_ = memory(a1_md, engine_);
    // max pool 2×2 (its workspace keeps the arg max)
    pool_fwd_pd_ = dnnl::pooling_v2_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, a1_md, p_md, {2, 2}, {2, 2}, {0, 0}, {0, 0},
         {0, 0}},
        engine_);
    pool_bwd_pd_ = dnnl::pooling_v2_backward::primitive_desc(
        {dnnl::algorithm::pooling_max, a1_md, p_md, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {0, 0}}, engine_, pool_fwd_pd_);
    pool_dst_ = memory(p_md, engine_), d_pool_dst_ = memory(p_md, engine_);
    pool_ws_ = memory(pool_fwd_pd_.workspace_desc(), engine_);
    conv2_ = std::make_unique<Conv>(engine_, p_md, a2_md, 64, 32, rng, true);
    relu2_ = Relu(engine_, a2_md);
    // global average pool over 11×11
    gap_fwd_pd_ = dnnl::pooling_v2_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_avg_exclude_padding, a2_md, g_md, {1, 1}, {11, 11},
         {0, 0}, {0, 0}, {0, 0}},
        engine_);
    gap_bwd_pd_ = dnnl::pooling_v2_backward::primitive_desc(
        {dnnl::algorithm::pooling_avg_exclude_padding, a2_md, g_md, {1, 1}, {11, 11}, {0, 0}, {0, 0}, {0, 0}}, engine_,
        gap_fwd_pd_);
    gap_dst_ = memory(g_md, engine_), d_gap_dst_ = memory(g_md, engine_);
    // inner product 64 -> 10, its weights (oi) and bias as the user keeps them
    const memory::desc w3_md({10, 64, 1, 1}, f32, Tag::any);
    ip_fwd_pd_ = dnnl::inner_product_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, g_md, w3_md, memory::desc({10}, f32, Tag::x), out_md}, engine_);
    ip_bwd_data_pd_ =
        dnnl::inner_product_backward_data::primitive_desc({g_md, w3_md, out_md}, engine_, ip_fwd_pd_);
    ip_bwd_w_pd_ = dnnl::inner_product_backward_weights::primitive_desc(
        {g_md, w3_md, memory::desc({10}, f32, Tag::x), out_md}, engine_, ip_fwd_pd_);
    const float limit = std::sqrt(6.0f / 74.0f);
    w3_ = uniform(640, rng, -limit, limit), b3_.assign(10, 0.0f), g_w3_.resize(640), g_b3_.resize(10);
    logits_ = memory(out_md, engine_), d_logits_ = memory(out_md, engine_);
    for (const std::size_t size : {std::size_t{32}, std::size_t{32}, std::size_t{640}, std::size_t{10}})
      adam_.emplace_back(size);
  }

  void forward() { train_step(); }  // measure()'s warm-up: oneDNN's start-up, as a first step

  float train_step() {
    const memory::desc oihw3({10, 64, 1, 1}, f32, Tag::oihw);
    memory w3_user(oihw3, engine_, w3_.data()), g_w3_user(oihw3, engine_, g_w3_.data());
    memory b3(memory::desc({10}, f32, Tag::x), engine_, b3_.data()), g_b3(memory::desc({10}, f32, Tag::x), engine_, g_b3_.data());
    // forward
    conv1_->forward(stream_, x_mem_);
    relu1_.forward(stream_, conv1_->dst);
    memory gamma = vec(gamma_), beta = vec(beta_), mean = vec(mean_), var = vec(var_);
    dnnl::batch_normalization_forward(bn_fwd_pd_).execute(
        stream_, {{DNNL_ARG_SRC, conv1_->dst}, {DNNL_ARG_DST, bn_dst_}, {DNNL_ARG_SCALE, gamma}, {DNNL_ARG_SHIFT, beta},
                  {DNNL_ARG_MEAN, mean}, {DNNL_ARG_VARIANCE, var}});
    dnnl::pooling_v2_forward(pool_fwd_pd_).execute(
        stream_, {{DNNL_ARG_SRC, bn_dst_}, {DNNL_ARG_DST, pool_dst_}, {DNNL_ARG_WORKSPACE, pool_ws_}});
    conv2_->forward(stream_, pool_dst_);
    relu2_.forward(stream_, conv2_->dst);
    dnnl::pooling_v2_forward(gap_fwd_pd_).execute(stream_, {{DNNL_ARG_SRC, conv2_->dst}, {DNNL_ARG_DST, gap_dst_}});
    memory w3 = placed(w3_user, ip_fwd_pd_.weights_desc());
    dnnl::inner_product_forward(ip_fwd_pd_).execute(
        stream_, {{DNNL_ARG_SRC, gap_dst_}, {DNNL_ARG_WEIGHTS, w3}, {DNNL_ARG_BIAS, b3}, {DNNL_ARG_DST, logits_}});
    stream_.wait();
    // sparse categorical cross-entropy from the logits, and its gradient (softmax − one-hot) / N
    const float* logits = static_cast<const float*>(logits_.get_data_handle());
    float* d_logits = static_cast<float*>(d_logits_.get_data_handle());
    float loss = 0.0f;
    for (int i = 0; i < n_; ++i) {
      const float* row = logits + i * 10;
      const float top = *std::max_element(row, row + 10);
      float sum = 0.0f;
      for (int c = 0; c < 10; ++c) sum += std::exp(row[c] - top);
      const int label = labels_[static_cast<std::size_t>(i)];
      loss += (std::log(sum) + top - row[label]) / static_cast<float>(n_);
      for (int c = 0; c < 10; ++c)
        d_logits[i * 10 + c] = (std::exp(row[c] - top) / sum - (c == label ? 1.0f : 0.0f)) / static_cast<float>(n_);
    }
    // backward, last to first
    memory g_w3 = g_w3_user.get_desc() == ip_bwd_w_pd_.diff_weights_desc() ? g_w3_user
                                                                            : memory(ip_bwd_w_pd_.diff_weights_desc(), engine_);
    dnnl::inner_product_backward_weights(ip_bwd_w_pd_).execute(
        stream_, {{DNNL_ARG_SRC, gap_dst_}, {DNNL_ARG_DIFF_DST, d_logits_}, {DNNL_ARG_DIFF_WEIGHTS, g_w3},
                  {DNNL_ARG_DIFF_BIAS, g_b3}});
    reorder_if(g_w3, g_w3_user, stream_);
    memory w3_data = placed(w3_user, ip_bwd_data_pd_.weights_desc());
    dnnl::inner_product_backward_data(ip_bwd_data_pd_).execute(
        stream_, {{DNNL_ARG_DIFF_DST, d_logits_}, {DNNL_ARG_WEIGHTS, w3_data}, {DNNL_ARG_DIFF_SRC, d_gap_dst_}});
    dnnl::pooling_v2_backward(gap_bwd_pd_).execute(
        stream_, {{DNNL_ARG_DIFF_DST, d_gap_dst_}, {DNNL_ARG_DIFF_SRC, conv2_->d_dst}});
    relu2_.backward(stream_, conv2_->dst, conv2_->d_dst);
    conv2_->backward(stream_, pool_dst_, &d_pool_dst_);
    dnnl::pooling_v2_backward(pool_bwd_pd_).execute(
        stream_, {{DNNL_ARG_DIFF_DST, d_pool_dst_}, {DNNL_ARG_WORKSPACE, pool_ws_}, {DNNL_ARG_DIFF_SRC, d_bn_dst_}});
    memory g_gamma = vec(g_gamma_), g_beta = vec(g_beta_);
    dnnl::batch_normalization_backward(bn_bwd_pd_).execute(
        stream_, {{DNNL_ARG_SRC, conv1_->dst}, {DNNL_ARG_MEAN, mean}, {DNNL_ARG_VARIANCE, var},
                  {DNNL_ARG_DIFF_DST, d_bn_dst_}, {DNNL_ARG_SCALE, gamma}, {DNNL_ARG_SHIFT, beta},
                  {DNNL_ARG_DIFF_SRC, conv1_->d_dst},
                  {DNNL_ARG_DIFF_SCALE, g_gamma}, {DNNL_ARG_DIFF_SHIFT, g_beta}});
    relu1_.backward(stream_, conv1_->dst, conv1_->d_dst);
    conv1_->backward(stream_, x_mem_, nullptr);  // the input needs no gradient
    stream_.wait();
    // the moving statistics (Keras's momentum 0.99; oneDNN's variance is the biased one Keras keeps too), Adam
    for (std::size_t c = 0; c < 32; ++c) {
      moving_mean_[c] = 0.99f * moving_mean_[c] + 0.01f * mean_[c];
      moving_var_[c] = 0.99f * moving_var_[c] + 0.01f * var_[c];
    }
    ++t_;
    conv1_->adam(t_);
    conv2_->adam(t_);
    adam_[0].step(gamma_.data(), g_gamma_.data(), 32, t_);
    adam_[1].step(beta_.data(), g_beta_.data(), 32, t_);
    adam_[2].step(w3_.data(), g_w3_.data(), 640, t_);
    adam_[3].step(b3_.data(), g_b3_.data(), 10, t_);
    return loss;
  }

 private:
  // A 3×3 convolution, stride 1, no padding: forward_training, backward weights (and bias), backward data when the
  // input needs a gradient; its weights (oihw) and bias as the user keeps them, reordered every step.
  struct Conv {
    Conv(const dnnl::engine& engine, const memory::desc& src, const memory::desc& dst_md, int filters, int channels,
         std::mt19937& rng, bool data_grad)
        : engine(engine), filters(filters), w_md({filters, channels, 3, 3}, f32, Tag::oihw) {
      const memory::desc w_any({filters, channels, 3, 3}, f32, Tag::any), b_md({filters}, f32, Tag::x);
      fwd_pd = dnnl::convolution_forward::primitive_desc(
          {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, w_any, b_md, dst_md, {1, 1},
           {0, 0}, {0, 0}},
          engine);
      bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(
          {dnnl::algorithm::convolution_direct, src, w_any, b_md, dst_md, {1, 1}, {0, 0}, {0, 0}}, engine, fwd_pd);
      if (data_grad)
        bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
            {dnnl::algorithm::convolution_direct, src, w_any, dst_md, {1, 1}, {0, 0}, {0, 0}}, engine, fwd_pd);
      const std::size_t size = static_cast<std::size_t>(filters * channels * 9);
      const float limit = std::sqrt(6.0f / static_cast<float>(channels * 9 + filters * 9));
      w = uniform(size, rng, -limit, limit), b.assign(static_cast<std::size_t>(filters), 0.0f);
      g_w.resize(size), g_b.resize(static_cast<std::size_t>(filters));
      dst = memory(dst_md, engine), d_dst = memory(dst_md, engine);
      adam_w = std::make_unique<Adam>(size), adam_b = std::make_unique<Adam>(static_cast<std::size_t>(filters));
    }
    void forward(dnnl::stream& stream, memory& src) {
      memory user(w_md, engine, w.data()), bias({{filters}, f32, Tag::x}, engine, b.data());
      memory weights = user.get_desc() == fwd_pd.weights_desc() ? user : memory(fwd_pd.weights_desc(), engine);
      reorder_if(user, weights, stream);
      dnnl::convolution_forward(fwd_pd).execute(
          stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
    }
    void backward(dnnl::stream& stream, memory& src, memory* d_src) {
      memory g_user(w_md, engine, g_w.data()), g_bias({{filters}, f32, Tag::x}, engine, g_b.data());
      memory g_weights =
          g_user.get_desc() == bwd_w_pd.diff_weights_desc() ? g_user : memory(bwd_w_pd.diff_weights_desc(), engine);
      dnnl::convolution_backward_weights(bwd_w_pd).execute(
          stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, d_dst}, {DNNL_ARG_DIFF_WEIGHTS, g_weights},
                   {DNNL_ARG_DIFF_BIAS, g_bias}});
      reorder_if(g_weights, g_user, stream);
      if (d_src == nullptr) return;
      memory user(w_md, engine, w.data());
      memory weights = user.get_desc() == bwd_data_pd.weights_desc() ? user : memory(bwd_data_pd.weights_desc(), engine);
      reorder_if(user, weights, stream);
      dnnl::convolution_backward_data(bwd_data_pd).execute(
          stream, {{DNNL_ARG_DIFF_DST, d_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, *d_src}});
    }
    void adam(int t) {
      adam_w->step(w.data(), g_w.data(), w.size(), t);
      adam_b->step(b.data(), g_b.data(), b.size(), t);
    }
    dnnl::engine engine;
    int filters;
    memory::desc w_md;
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
    std::vector<float> w, b, g_w, g_b;
    memory dst, d_dst;
    std::unique_ptr<Adam> adam_w, adam_b;
  };
  // ReLU in place on its input, its gradient from its output (oneDNN's relu_use_dst_for_bwd), in place on d_dst.
  struct Relu {
    Relu() = default;
    Relu(const dnnl::engine& engine, const memory::desc& md)
        : fwd_pd({dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu_use_dst_for_bwd, md, 0.0f, 0.0f},
                 engine),
          bwd_pd({dnnl::algorithm::eltwise_relu_use_dst_for_bwd, md, md, 0.0f, 0.0f}, engine, fwd_pd) {}
    void forward(dnnl::stream& stream, memory& data) {
      dnnl::eltwise_forward(fwd_pd).execute(stream, {{DNNL_ARG_SRC, data}, {DNNL_ARG_DST, data}});
    }
    void backward(dnnl::stream& stream, memory& dst, memory& diff) {
      dnnl::eltwise_backward(bwd_pd).execute(stream,
                                             {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff}, {DNNL_ARG_DIFF_SRC, diff}});
    }
    dnnl::eltwise_forward::primitive_desc fwd_pd;
    dnnl::eltwise_backward::primitive_desc bwd_pd;
  };

  memory vec(std::vector<float>& values) {
    return memory(memory::desc({static_cast<memory::dim>(values.size())}, f32, Tag::x), engine_, values.data());
  }
  memory placed(memory& user, const memory::desc& wanted) {
    memory out = in_layout(user, wanted, engine_);
    reorder_if(user, out, stream_);
    return out;
  }

  const memory::dim n_ = 64;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<float> x_, gamma_, beta_, g_gamma_, g_beta_, mean_, var_, moving_mean_, moving_var_, w3_, b3_, g_w3_, g_b3_;
  std::vector<int> labels_;
  memory x_mem_, bn_dst_, d_bn_dst_, pool_dst_, d_pool_dst_, pool_ws_, gap_dst_, d_gap_dst_, logits_, d_logits_;
  std::unique_ptr<Conv> conv1_, conv2_;
  Relu relu1_, relu2_;
  dnnl::batch_normalization_forward::primitive_desc bn_fwd_pd_;
  dnnl::batch_normalization_backward::primitive_desc bn_bwd_pd_;
  dnnl::pooling_v2_forward::primitive_desc pool_fwd_pd_, gap_fwd_pd_;
  dnnl::pooling_v2_backward::primitive_desc pool_bwd_pd_, gap_bwd_pd_;
  dnnl::inner_product_forward::primitive_desc ip_fwd_pd_;
  dnnl::inner_product_backward_data::primitive_desc ip_bwd_data_pd_;
  dnnl::inner_product_backward_weights::primitive_desc ip_bwd_w_pd_;
  std::vector<Adam> adam_;
  int t_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args a = bench::parse_args(argc, argv, true);
  const bool cnn = a.workload == "cnn_small";
  if ((!cnn && a.workload != "lstm" && a.workload != "rnn") || (a.mode != "forward" && a.mode != "train_step")) {
    std::fprintf(stderr, "dnnl_bench: only --workload lstm|rnn|cnn_small --mode forward|train_step (got %s %s)\n",
                 a.workload.c_str(), a.mode.c_str());
    return 2;
  }
  omp_set_num_threads(a.threads);
  const dnnl_version_t* version = dnnl_version();
  const std::string extra =
      ",\"version\":\"" + std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
      std::to_string(version->patch) + "\"";
  // oneDNN's start-up (its engine, a first primitive) before the baseline, as the other benches do; then the timed
  // model, each step's loss (or checksum of the logits) summed to check that it stays finite.
  const auto measure = [&](const auto& make, const auto& step) {
    make(false)->forward();
    const double baseline = bench::status_mb("VmRSS");
    bench::reset_peak();
    const auto model = make(a.mode == "train_step");
    float sink = 0.0f;
    const bench::Timing timing = bench::time_steps(a, [&] { sink += step(*model); });
    if (!std::isfinite(sink)) {
      std::fprintf(stderr, "dnnl_bench: the %s is not finite\n", cnn ? "logits' sum" : "loss");
      return 1;
    }
    bench::print_json("onednn", a, timing, baseline, bench::status_mb("VmHWM") - baseline, extra);
    return 0;
  };
  if (cnn && a.mode == "train_step")
    return measure([](bool) { return std::make_unique<CnnSmallTrain>(); },
                   [](CnnSmallTrain& model) { return model.train_step(); });
  if (cnn)
    return measure([](bool) { return std::make_unique<CnnSmall>(); },
                   [](CnnSmall& model) {
                     model.forward();
                     return model.checksum();
                   });
  return measure([&](bool training) { return std::make_unique<Row>(a.workload, training); },
                 [&](Row& row) {
                   if (a.mode == "train_step") return row.train_step();
                   row.forward();
                   return 0.0f;
                 });
}
