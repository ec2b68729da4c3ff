// torch_bench: the benchmark's peer, the same workloads written with libtorch's C++ API (Debian 12's
// libtorch-dev 1.13, installed by scripts/install-peer.sh). Same flags and JSON as kiln_bench, with
// "impl":"libtorch"; see bench/bench_common.hpp.
//
// Each workload is kiln's layer written out in torch ops, the same math in the same order:
//   seed_dpa    softmax(q·kᵀ · 1/√512)·v with q = k = v
//   seed_mha    kiln's MultiHeadAttention(h = 8), the TF2 form: bias-free Q, K, V and output projections
//               (512 -> 8 heads of 64), queries scaled by 1/√64 before q·kᵀ (as kiln and Keras do)
//   mql5_block  kiln's MHAttention(16, 8) (Q, K, V = Linear(12, 128) with bias, softmax(q·kᵀ/√16)·v,
//               LayerNorm(ε 1e-6)(x + W0(context)), LayerNorm(ε 1e-6)(a + Linear(48, 12)(silu(Linear(12, 48)(a))))),
//               then flatten and tanh(Linear(480, 2))
//   long_mha    kiln's Keras-form MultiHeadAttention(8, key_dim 32) with biases, self-attention, on (4, T, 256)
//   cnn_small   Conv2d(1, 32, 3), relu, BatchNorm2d (ε 1e-3), max_pool2d(2), Conv2d(32, 64, 3), relu, mean over
//               height and width, Linear(64, 10), in NCHW; cross-entropy on the logits + Adam
//   tcn         three Conv1d(·, 64, 5) with dilations 1, 2, 4, each after a left pad of 4·dilation (causal),
//               relu, then Linear(64, 1) on every step, in NCL; MSE + Adam
//   norms       GroupNorm(8, ε 1e-3) and RMS normalization (composed: torch 1.13 has no RMSNorm), twice, in NCL;
//               MSE + Adam
//   rnn         LSTM(32, 128) over (32, 100, 32) returning every step, GRU(128, 64) (torch's GRU is Keras's with
//               reset_after) and Linear(64, 1) on its last step, batch first; MSE + Adam
//   lstm        LSTM(32, 128) over (64, 100, 32), Linear(128, 1) on the last hidden state; MSE + Adam
//   char_gpt    nanoGPT's CPU shakespeare_char model as kiln builds it from keras-hub's blocks: Embedding(65, 128) +
//               Embedding(64, 128) positions, 4 pre-norm blocks (LayerNorm ε 1e-5, causal 4-head attention with
//               biases, GELU feed-forward 512), a final LayerNorm and the head tied to the token embedding, on
//               (12, 64) ids; cross-entropy on the logits + Adam
//   char_gpt_generate  char_gpt with 320 positions, generating 256 tokens from a 64-token prompt as nanoGPT's
//               generate does: the whole sequence through the model for each token, top-k 200 at temperature 0.8
//   resnet50    torchvision's resnet50 (Bottleneck v1.5, BatchNorm2d defaults), NCHW, on (8, 3, 224, 224);
//               cross-entropy on the 1000 logits + SGD
//   mobilenet_v2  torchvision's mobilenet_v2 (width 1.0, ReLU6, depthwise Conv2d with groups = channels), NCHW;
//               forward on (32, 3, 224, 224) and one-image latency
//   noise       Linear(64, 64), then spatial dropout, additive and multiplicative Gaussian noise as Keras's
//               SpatialDropout1D, GaussianNoise and GaussianDropout compute them; MSE + SGD
// Losses and optimizers as kiln compiles them: mean squared error (cnn_small: cross-entropy); SGD(lr 0.01) (Keras's
// default, no momentum), Adam(lr 1e-3, β 0.9/0.999, ε 1e-7). Adam's ε sits where torch puts it, next to √v̂ rather than
// Keras's ε̂ next to √v; the cost is the same. Forward mode: module.eval() under torch::NoGradGuard. Train step:
// zero_grad, forward, loss, backward, optimizer step, and the loss read back as a number (what train_on_batch returns).
//
// torch_bench --check (not timed) builds mql5_block in kiln, gives it random weights, copies them into
// the torch modules and compares both forward outputs (the MHAttention block's and the model's) on one
// input: exit 1 unless max|kiln - torch| / max|kiln| <= 1e-5 for both.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>
#include "bench_common.hpp"
#include "vision_models.hpp"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

namespace nn = torch::nn;

// ---- the layers ---------------------------------------------------------------------------------------

// Self-attention with Q, K, V and output projections, as kiln's MultiHeadAttention computes it.
struct MultiHeadSelfAttentionImpl : nn::Module {
  std::int64_t heads, depth;
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, output{nullptr};

  MultiHeadSelfAttentionImpl(std::int64_t features, std::int64_t heads_, std::int64_t depth_, bool bias)
      : heads(heads_), depth(depth_) {
    query = register_module("query", nn::Linear(nn::LinearOptions(features, heads * depth).bias(bias)));
    key = register_module("key", nn::Linear(nn::LinearOptions(features, heads * depth).bias(bias)));
    value = register_module("value", nn::Linear(nn::LinearOptions(features, heads * depth).bias(bias)));
    output = register_module("attention_output", nn::Linear(nn::LinearOptions(heads * depth, features).bias(bias)));
  }

  torch::Tensor split(const torch::Tensor& x) const {  // (B, T, H·D) -> (B, H, T, D)
    return x.view({x.size(0), x.size(1), heads, depth}).transpose(1, 2);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor q = split(query(x)) * (1.0 / std::sqrt(static_cast<double>(depth)));
    const torch::Tensor k = split(key(x)), v = split(value(x));
    const torch::Tensor weights = torch::softmax(torch::matmul(q, k.transpose(-2, -1)), -1);
    const torch::Tensor context =
        torch::matmul(weights, v).transpose(1, 2).reshape({x.size(0), x.size(1), heads * depth});
    return output(context);
  }
};
TORCH_MODULE(MultiHeadSelfAttention);

struct DotProductAttentionImpl : nn::Module {
  torch::Tensor forward(const torch::Tensor& x) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(x.size(-1)));
    return torch::matmul(torch::softmax(torch::matmul(x, x.transpose(-2, -1)) * scale, -1), x);
  }
};
TORCH_MODULE(DotProductAttention);

// kiln's MHAttention block (layers/attention/mh_attention.hpp).
struct MHAttentionImpl : nn::Module {
  std::int64_t heads, key_size;
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, w0{nullptr}, ff_hidden{nullptr}, ff_output{nullptr};
  nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};

  MHAttentionImpl(std::int64_t window, std::int64_t key_size_, std::int64_t heads_)
      : heads(heads_), key_size(key_size_) {
    query = register_module("query", nn::Linear(window, heads * key_size));
    key = register_module("key", nn::Linear(window, heads * key_size));
    value = register_module("value", nn::Linear(window, heads * key_size));
    w0 = register_module("w0", nn::Linear(heads * key_size, window));
    attention_norm = register_module("attention_norm", nn::LayerNorm(nn::LayerNormOptions({window}).eps(1e-6)));
    ff_hidden = register_module("feed_forward_hidden", nn::Linear(window, 4 * window));
    ff_output = register_module("feed_forward_output", nn::Linear(4 * window, window));
    output_norm = register_module("output_norm", nn::LayerNorm(nn::LayerNormOptions({window}).eps(1e-6)));
  }

  torch::Tensor split(const torch::Tensor& x) const {
    return x.view({x.size(0), x.size(1), heads, key_size}).transpose(1, 2);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor q = split(query(x)), k = split(key(x)), v = split(value(x));
    const double scale = 1.0 / std::sqrt(static_cast<double>(key_size));
    const torch::Tensor weights = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale, -1);
    const torch::Tensor context =
        torch::matmul(weights, v).transpose(1, 2).reshape({x.size(0), x.size(1), heads * key_size});
    const torch::Tensor attended = attention_norm(x + w0(context));
    return output_norm(attended + ff_output(torch::silu(ff_hidden(attended))));
  }
};
TORCH_MODULE(MHAttention);

struct Mql5BlockImpl : nn::Module {
  MHAttention block{nullptr};
  nn::Linear head{nullptr};

  Mql5BlockImpl() {
    block = register_module("mh_attention", MHAttention(12, 16, 8));
    head = register_module("dense", nn::Linear(40 * 12, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(head(block(x).flatten(1))); }
};
TORCH_MODULE(Mql5Block);

// The demo's model (examples/stock_attention): 160 returns as 40 days of 4, the MHAttention block, then
// Dense(40, swish) twice and Dense(2, tanh).
struct StockDemoImpl : nn::Module {
  MHAttention block{nullptr};
  nn::Linear hidden1{nullptr}, hidden2{nullptr}, head{nullptr};

  StockDemoImpl() {
    block = register_module("mh_attention", MHAttention(4, 16, 8));
    hidden1 = register_module("dense", nn::Linear(40 * 4, 40));
    hidden2 = register_module("dense_1", nn::Linear(40, 40));
    head = register_module("dense_2", nn::Linear(40, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = block(x.view({x.size(0), 40, 4})).flatten(1);
    return torch::tanh(head(torch::silu(hidden2(torch::silu(hidden1(h))))));
  }
};
TORCH_MODULE(StockDemo);

// mlp: three Linear layers, ReLU between.
struct MlpImpl : nn::Module {
  nn::Linear hidden1{nullptr}, hidden2{nullptr}, head{nullptr};
  MlpImpl() {
    hidden1 = register_module("dense", nn::Linear(1024, 2048));
    hidden2 = register_module("dense_1", nn::Linear(2048, 2048));
    head = register_module("dense_2", nn::Linear(2048, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::relu(hidden2(torch::relu(hidden1(x))))); }
};
TORCH_MODULE(Mlp);

// cnn_small in NCHW, torch's native layout (kiln runs it channels_last): BatchNorm2d with Keras's
// epsilon 1e-3 and momentum 0.01 (Keras's 0.99 for the old statistics).
struct CnnSmallImpl : nn::Module {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d norm{nullptr};
  nn::Linear head{nullptr};

  CnnSmallImpl() {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3)));
    norm = register_module("norm", nn::BatchNorm2d(nn::BatchNormOptions(32).eps(1e-3).momentum(0.01)));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3)));
    head = register_module("head", nn::Linear(64, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(norm(torch::relu(conv1(x))), 2);
    return head(torch::relu(conv2(h)).mean({2, 3}));
  }
};
TORCH_MODULE(CnnSmall);

// tcn in NCL: each causal convolution pads dilation·(kernel − 1) steps on the left, then the Dense(1) head
// reads the channels of each step.
struct TcnImpl : nn::Module {
  std::vector<nn::Conv1d> convs;
  nn::Linear head{nullptr};

  TcnImpl() {
    std::int64_t channels = 16;
    for (const std::int64_t dilation : {1, 2, 4}) {
      convs.push_back(register_module("conv" + std::to_string(dilation),
                                      nn::Conv1d(nn::Conv1dOptions(channels, 64, 5).dilation(dilation))));
      channels = 64;
    }
    head = register_module("head", nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x;
    for (nn::Conv1d& conv : convs) {
      const std::int64_t left = conv->options.dilation()->at(0) * 4;
      h = torch::relu(conv(torch::constant_pad_nd(h, {left, 0})));
    }
    return head(h.transpose(1, 2));
  }
};
TORCH_MODULE(Tcn);

// norms in NCL, the layout torch's group_norm takes (channels in dim 1): GroupNorm(8 groups, ε 1e-3, Keras's
// default) then Keras's RMSNormalization (ε 1e-6, a scale per channel), which torch 1.13 has no module for,
// written as x·rsqrt(mean(x², channels) + ε)·scale; twice.
struct NormsImpl : nn::Module {
  std::vector<nn::GroupNorm> group_norms;
  std::vector<torch::Tensor> scales;

  NormsImpl() {
    for (int block = 0; block < 2; ++block) {
      const std::string index = std::to_string(block);
      group_norms.push_back(
          register_module("group_norm" + index, nn::GroupNorm(nn::GroupNormOptions(8, 64).eps(1e-3))));
      scales.push_back(register_parameter("rms_scale" + index, torch::ones({1, 64, 1})));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x;
    for (std::size_t block = 0; block < group_norms.size(); ++block) {
      h = group_norms[block](h);
      h = h * torch::rsqrt(h.square().mean({1}, /*keepdim=*/true) + 1e-6) * scales[block];
    }
    return h;
  }
};
TORCH_MODULE(Norms);

// noise in NLC, as kiln: Linear(64, 64), then in training SpatialDropout1D(0.2) (one Bernoulli draw per sample
// and channel, kept values scaled by 1/0.8), GaussianNoise(0.1) (x + 0.1·N(0, 1)) and GaussianDropout(0.2)
// (x·N(1, √(0.2/0.8)), Keras's formula).
struct NoiseImpl : nn::Module {
  nn::Linear dense{nullptr};

  NoiseImpl() { dense = register_module("dense", nn::Linear(64, 64)); }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = dense(x);
    if (!is_training()) return h;
    const double keep = 0.8;
    h = h * torch::empty({h.size(0), 1, h.size(2)}, h.options()).bernoulli_(keep).div_(keep);
    h = h + torch::randn_like(h) * 0.1;
    return h * (torch::randn_like(h) * std::sqrt(0.2 / keep) + 1.0);
  }
};
TORCH_MODULE(Noise);

// rnn: torch's fused LSTM and GRU (one layer each, batch first), then a Linear on the GRU's last output.
struct RnnImpl : nn::Module {
  nn::LSTM lstm{nullptr};
  nn::GRU gru{nullptr};
  nn::Linear head{nullptr};

  RnnImpl() {
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(32, 128).batch_first(true)));
    gru = register_module("gru", nn::GRU(nn::GRUOptions(128, 64).batch_first(true)));
    head = register_module("head", nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor sequence = std::get<0>(lstm(x));
    const torch::Tensor last = std::get<1>(gru(sequence));  // (layers, batch, 64)
    return head(last[0]);
  }
};
TORCH_MODULE(Rnn);

// lstm: torch's fused LSTM, then a Linear on the last hidden state.
struct LstmImpl : nn::Module {
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
  LstmImpl() {
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(32, 128).batch_first(true)));
    head = register_module("head", nn::Linear(128, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(std::get<0>(std::get<1>(lstm(x)))[0]); }
};
TORCH_MODULE(Lstm);

// char_gpt: keras-hub's pre-norm TransformerDecoder as kiln runs it (biases on, LayerNorm ε 1e-5, exact GELU,
// causal attention with queries scaled by 1/√32), four of them, a final LayerNorm and the head tied to the
// token embedding. Logits come out as (batch·64, 65) rows for cross_entropy.
struct GptBlockImpl : nn::Module {
  nn::LayerNorm attention_norm{nullptr}, feed_norm{nullptr};
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, output{nullptr}, hidden{nullptr}, out{nullptr};
  GptBlockImpl() {
    attention_norm = register_module("attention_norm", nn::LayerNorm(nn::LayerNormOptions({128}).eps(1e-5)));
    feed_norm = register_module("feed_norm", nn::LayerNorm(nn::LayerNormOptions({128}).eps(1e-5)));
    query = register_module("query", nn::Linear(128, 128));
    key = register_module("key", nn::Linear(128, 128));
    value = register_module("value", nn::Linear(128, 128));
    output = register_module("output", nn::Linear(128, 128));
    hidden = register_module("hidden", nn::Linear(128, 512));
    out = register_module("out", nn::Linear(512, 128));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t batch = x.size(0), steps = x.size(1);
    auto split = [&](const torch::Tensor& t) { return t.view({batch, steps, 4, 32}).transpose(1, 2); };
    const torch::Tensor a = attention_norm(x);
    const torch::Tensor q = split(query(a)) * (1.0 / std::sqrt(32.0)), k = split(key(a)), v = split(value(a));
    const torch::Tensor causal = torch::ones({steps, steps}, torch::kBool).triu(1);
    const torch::Tensor weights = torch::softmax(torch::matmul(q, k.transpose(-2, -1)).masked_fill(causal, -1e9), -1);
    const torch::Tensor h = x + output(torch::matmul(weights, v).transpose(1, 2).reshape({batch, steps, 128}));
    return h + out(torch::gelu(hidden(feed_norm(h))));
  }
};
TORCH_MODULE(GptBlock);

struct CharGptImpl : nn::Module {
  nn::Embedding tokens{nullptr}, positions{nullptr};
  nn::Sequential blocks;
  nn::LayerNorm final_norm{nullptr};
  explicit CharGptImpl(std::int64_t context = 64) {
    tokens = register_module("tokens", nn::Embedding(65, 128));
    positions = register_module("positions", nn::Embedding(context, 128));
    for (int block = 0; block < 4; ++block) blocks->push_back(GptBlock());
    register_module("blocks", blocks);
    final_norm = register_module("final_norm", nn::LayerNorm(nn::LayerNormOptions({128}).eps(1e-5)));
  }
  torch::Tensor logits(const torch::Tensor& ids) {  // (batch, steps, 65)
    const torch::Tensor steps = torch::arange(ids.size(1), torch::kLong);
    const torch::Tensor h = final_norm(blocks->forward(tokens(ids) + positions(steps)));
    return torch::matmul(h, tokens->weight.t());
  }
  torch::Tensor forward(const torch::Tensor& ids) { return logits(ids).reshape({-1, 65}); }
};
TORCH_MODULE(CharGpt);

// nanoGPT's generate: each new token runs the model over the whole sequence so far (it fits the context of
// 320), then top-k (200: every character) of the last logits / temperature 0.8, softmax, multinomial.
torch::Tensor generate_tokens(CharGpt& model, torch::Tensor ids, std::int64_t new_tokens) {
  torch::NoGradGuard no_grad;
  for (std::int64_t n = 0; n < new_tokens; ++n) {
    torch::Tensor last = model->logits(ids).select(1, ids.size(1) - 1) / 0.8;
    const auto top = torch::topk(last, std::min<std::int64_t>(200, last.size(-1)));
    last = last.masked_fill(last < std::get<0>(top).select(-1, std::get<0>(top).size(-1) - 1).unsqueeze(-1),
                            -std::numeric_limits<float>::infinity());
    ids = torch::cat({ids, torch::multinomial(torch::softmax(last, -1), 1)}, 1);
  }
  return ids;
}

// ---- GPT-2 small and BERT-base ---------------------------------------------------------------------------
// gpt2_small_generate: GPT-2 as nanoGPT's model.py and llm.c write it (pre-norm blocks, fused c_attn, tanh GELU,
// ln_f, the head tied to wte), with a key/value cache per layer: the prompt in one pass (causal), then one token
// a step against the cache; the head runs on the last position only, as nanoGPT's inference does. Greedy.
struct Gpt2BlockImpl : nn::Module {
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
  torch::Tensor k_cache, v_cache;  // (1, 12, capacity, 64)
  Gpt2BlockImpl() {
    ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-5)));
    ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-5)));
    c_attn = register_module("c_attn", nn::Linear(768, 3 * 768));
    attn_proj = register_module("attn_proj", nn::Linear(768, 768));
    c_fc = register_module("c_fc", nn::Linear(768, 3072));
    mlp_proj = register_module("mlp_proj", nn::Linear(3072, 768));
  }
  // x: (1, T, 768) at positions start..start+T-1; the cache holds 0..start-1.
  torch::Tensor forward(const torch::Tensor& x, std::int64_t start) {
    const std::int64_t steps = x.size(1);
    const std::vector<torch::Tensor> qkv = c_attn(ln_1(x)).split(768, -1);
    auto heads = [&](const torch::Tensor& t) { return t.view({1, steps, 12, 64}).transpose(1, 2); };
    k_cache.narrow(2, start, steps).copy_(heads(qkv[1]));
    v_cache.narrow(2, start, steps).copy_(heads(qkv[2]));
    const torch::Tensor k = k_cache.narrow(2, 0, start + steps), v = v_cache.narrow(2, 0, start + steps);
    torch::Tensor scores = torch::matmul(heads(qkv[0]), k.transpose(-2, -1)) * (1.0 / 8.0);
    if (steps > 1) {
      const torch::Tensor causal = torch::ones({steps, start + steps}, torch::kBool).triu(start + 1);
      scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
    }
    const torch::Tensor attended = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({1, steps, 768});
    const torch::Tensor h = x + attn_proj(attended);
    return h + mlp_proj(torch::gelu(c_fc(ln_2(h)), "tanh"));
  }
};
TORCH_MODULE(Gpt2Block);

struct Gpt2Impl : nn::Module {
  nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Gpt2Block> blocks;
  nn::LayerNorm ln_f{nullptr};
  Gpt2Impl() {
    wte = register_module("wte", nn::Embedding(50257, 768));
    wpe = register_module("wpe", nn::Embedding(1024, 768));
    for (int i = 0; i < 12; ++i) blocks.push_back(register_module("h" + std::to_string(i), Gpt2Block()));
    ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-5)));
  }
  // The next token after `ids` (1, T) at positions start..: the cache filled as it goes.
  std::int64_t next(const torch::Tensor& ids, std::int64_t start) {
    torch::Tensor h = wte(ids) + wpe(torch::arange(start, start + ids.size(1), torch::kLong));
    for (Gpt2Block& block : blocks) h = block->forward(h, start);
    const torch::Tensor last = ln_f(h.select(1, h.size(1) - 1));
    return torch::matmul(last, wte->weight.t()).argmax(-1).item<std::int64_t>();
  }
  // Greedy: the prompt, then tokens up to `length` in all.
  void generate(const torch::Tensor& prompt, std::int64_t length) {
    torch::NoGradGuard no_grad;
    for (Gpt2Block& block : blocks) {
      if (!block->k_cache.defined() || block->k_cache.size(2) < length) {
        block->k_cache = torch::zeros({1, 12, length, 64});
        block->v_cache = torch::zeros({1, 12, length, 64});
      }
    }
    std::int64_t token = next(prompt, 0);
    for (std::int64_t position = prompt.size(1); position + 1 < length; ++position)
      token = next(torch::full({1, 1}, token, torch::kLong), position);
  }
};
TORCH_MODULE(Gpt2);

// bert_base: BERT as Hugging Face's BertModel computes it (post-norm, LayerNorm ε 1e-12, tanh GELU as keras-hub's
// BertBackbone, additive padding mask, tanh pooler on the first token), on (8, 128) token, segment and padding ids.
struct BertLayerImpl : nn::Module {
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, output{nullptr}, intermediate{nullptr}, out{nullptr};
  nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};
  BertLayerImpl() {
    query = register_module("query", nn::Linear(768, 768));
    key = register_module("key", nn::Linear(768, 768));
    value = register_module("value", nn::Linear(768, 768));
    output = register_module("output", nn::Linear(768, 768));
    intermediate = register_module("intermediate", nn::Linear(768, 3072));
    out = register_module("out", nn::Linear(3072, 768));
    attention_norm = register_module("attention_norm", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-12)));
    output_norm = register_module("output_norm", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-12)));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask) {
    const std::int64_t batch = x.size(0), steps = x.size(1);
    auto heads = [&](const torch::Tensor& t) { return t.view({batch, steps, 12, 64}).transpose(1, 2); };
    const torch::Tensor scores = torch::matmul(heads(query(x)), heads(key(x)).transpose(-2, -1)) * 0.125 + additive_mask;
    const torch::Tensor attended =
        torch::matmul(torch::softmax(scores, -1), heads(value(x))).transpose(1, 2).reshape({batch, steps, 768});
    const torch::Tensor h = attention_norm(x + output(attended));
    return output_norm(h + out(torch::gelu(intermediate(h), "tanh")));
  }
};
TORCH_MODULE(BertLayer);

struct BertBaseImpl : nn::Module {
  nn::Embedding words{nullptr}, positions{nullptr}, segments{nullptr};
  nn::LayerNorm norm{nullptr};
  std::vector<BertLayer> layers;
  nn::Linear pooler{nullptr};
  torch::Tensor segment_ids, padding_mask;
  BertBaseImpl() {
    words = register_module("words", nn::Embedding(30522, 768));
    positions = register_module("positions", nn::Embedding(512, 768));
    segments = register_module("segments", nn::Embedding(2, 768));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({768}).eps(1e-12)));
    for (int i = 0; i < 12; ++i) layers.push_back(register_module("layer" + std::to_string(i), BertLayer()));
    pooler = register_module("pooler", nn::Linear(768, 768));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    const std::int64_t steps = ids.size(1);
    torch::Tensor h = norm(words(ids) + positions(torch::arange(steps, torch::kLong)) + segments(segment_ids));
    const torch::Tensor additive = (1.0 - padding_mask.to(torch::kFloat32)).view({ids.size(0), 1, 1, steps}) * -1e9;
    for (BertLayer& layer : layers) h = layer->forward(h, additive);
    return torch::tanh(pooler(h.select(1, 0)));
  }
};
TORCH_MODULE(BertBase);

// ---- torchvision's ResNet-50 and MobileNetV2 -------------------------------------------------------------
// torchvision/models/resnet.py (Bottleneck, v1.5: the stride on conv2) and mobilenetv2.py (InvertedResidual),
// written out in libtorch's modules, NCHW as torchvision runs them, with torchvision's BatchNorm2d defaults.

nn::Conv2d conv2d(std::int64_t in, std::int64_t out, std::int64_t size, std::int64_t stride, std::int64_t groups = 1) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, size).stride(stride).padding((size - 1) / 2).groups(groups).bias(false));
}

struct BottleneckImpl : nn::Module {
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, down{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr}, down_bn{nullptr};

  BottleneckImpl(std::int64_t in, std::int64_t width, std::int64_t stride, bool project) {
    conv1 = register_module("conv1", conv2d(in, width, 1, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(width));
    conv2 = register_module("conv2", conv2d(width, width, 3, stride));
    bn2 = register_module("bn2", nn::BatchNorm2d(width));
    conv3 = register_module("conv3", conv2d(width, 4 * width, 1, 1));
    bn3 = register_module("bn3", nn::BatchNorm2d(4 * width));
    if (project) {
      down = register_module("down", conv2d(in, 4 * width, 1, stride));
      down_bn = register_module("down_bn", nn::BatchNorm2d(4 * width));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(bn1(conv1(x)));
    h = torch::relu(bn2(conv2(h)));
    h = bn3(conv3(h));
    return torch::relu(h + (down ? down_bn(down(x)) : x));
  }
};
TORCH_MODULE(Bottleneck);

struct ResNet50Impl : nn::Module {
  nn::Conv2d stem{nullptr};
  nn::BatchNorm2d stem_bn{nullptr};
  nn::Sequential blocks;
  nn::Linear fc{nullptr};

  ResNet50Impl() {
    stem = register_module("stem", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
    stem_bn = register_module("stem_bn", nn::BatchNorm2d(64));
    std::int64_t in = 64;
    const std::int64_t counts[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage)
      for (std::int64_t block = 0; block < counts[stage]; ++block) {
        const std::int64_t width = 64 << stage;
        blocks->push_back(Bottleneck(in, width, block == 0 && stage > 0 ? 2 : 1, block == 0));
        in = 4 * width;
      }
    register_module("blocks", blocks);
    fc = register_module("fc", nn::Linear(2048, 1000));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(torch::relu(stem_bn(stem(x))), 3, 2, 1);
    return fc(blocks->forward(h).mean({2, 3}));
  }
};
TORCH_MODULE(ResNet50);

struct MobileNetV2Impl : nn::Module {
  nn::Sequential stem, head;
  std::vector<nn::Sequential> blocks;
  std::vector<bool> residual;  // each inverted residual block: whether it adds its input
  nn::Linear classifier{nullptr};

  // Conv2d, BatchNorm2d and (optionally) ReLU6, as torchvision's Conv2dNormActivation.
  static void conv_bn(std::int64_t in, std::int64_t out, std::int64_t size, std::int64_t stride, std::int64_t groups,
                      bool relu6, nn::Sequential& into) {
    into->push_back(conv2d(in, out, size, stride, groups));
    into->push_back(nn::BatchNorm2d(out));
    if (relu6) into->push_back(nn::ReLU6());
  }

  MobileNetV2Impl() {
    conv_bn(3, 32, 3, 2, 1, true, stem);
    register_module("stem", stem);
    std::int64_t in = 32;
    const std::int64_t settings[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                        {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    for (const auto& [t, c, n, s] : settings)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t stride = i == 0 ? s : 1, hidden = in * t;
        nn::Sequential block;
        if (t != 1) conv_bn(in, hidden, 1, 1, 1, true, block);
        conv_bn(hidden, hidden, 3, stride, hidden, true, block);
        conv_bn(hidden, c, 1, 1, 1, false, block);
        blocks.push_back(register_module("block" + std::to_string(blocks.size()), block));
        residual.push_back(stride == 1 && in == c);
        in = c;
      }
    conv_bn(320, 1280, 1, 1, 1, true, head);
    register_module("head", head);
    classifier = register_module("classifier", nn::Linear(1280, 1000));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = stem->forward(x);
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const torch::Tensor out = blocks[b]->forward(h);
      h = residual[b] ? h + out : out;
    }
    h = torch::dropout(head->forward(h).mean({2, 3}), 0.2, is_training());
    return classifier(h);
  }
};
TORCH_MODULE(MobileNetV2);

// ---- the workloads --------------------------------------------------------------------------------------

struct Workload {
  std::shared_ptr<nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  torch::Tensor x, y;
  bool adam = false;
  bool classes = false;  // y holds class indices: cross-entropy on logits instead of MSE
};

template <class M>
Workload wrap(M module, torch::Tensor x, torch::Tensor y, bool adam) {
  Workload w;
  w.module = module.ptr();
  w.forward = [module](const torch::Tensor& input) mutable { return module->forward(input); };
  w.x = std::move(x);
  w.y = std::move(y);
  w.adam = adam;
  return w;
}

Workload make_workload(const std::string& name, int seq) {
  torch::manual_seed(1);
  auto uniform = [](std::vector<std::int64_t> shape) { return torch::rand(shape) * 2 - 1; };
  if (name == "seed_dpa") return wrap(DotProductAttention(), uniform({10, 150, 512}), uniform({10, 150, 512}), false);
  if (name == "seed_mha")
    return wrap(MultiHeadSelfAttention(512, 8, 64, /*bias=*/false), uniform({10, 150, 512}), uniform({10, 150, 512}),
                false);
  if (name == "mql5_block") return wrap(Mql5Block(), uniform({64, 40, 12}), uniform({64, 2}), true);
  if (name == "stock_demo") return wrap(StockDemo(), uniform({32, 160}), uniform({32, 2}), true);
  if (name == "mlp") return wrap(Mlp(), uniform({64, 1024}), uniform({64, 10}), true);
  if (name == "cnn_small") {
    Workload w = wrap(CnnSmall(), uniform({64, 1, 28, 28}), torch::randint(0, 10, {64}, torch::kLong), true);
    w.classes = true;
    return w;
  }
  if (name == "tcn") return wrap(Tcn(), uniform({32, 16, 256}), uniform({32, 256, 1}), true);
  if (name == "norms") return wrap(Norms(), uniform({32, 64, 256}), uniform({32, 64, 256}), true);
  if (name == "noise") return wrap(Noise(), uniform({32, 256, 64}), uniform({32, 256, 64}), false);
  if (name == "rnn") return wrap(Rnn(), uniform({32, 100, 32}), uniform({32, 1}), true);
  if (name == "lstm") return wrap(Lstm(), uniform({64, 100, 32}), uniform({64, 1}), true);
  if (name == "resnet50" || name == "mobilenet_v2") {
    const std::int64_t batch = name == "resnet50" ? 8 : 32;
    Workload w = name == "resnet50" ? wrap(ResNet50(), uniform({batch, 3, 224, 224}), torch::randint(0, 1000, {batch}, torch::kLong), false)
                                    : wrap(MobileNetV2(), uniform({batch, 3, 224, 224}), torch::randint(0, 1000, {batch}, torch::kLong), false);
    w.classes = true;
    return w;
  }
  if (name == "bert_base") {
    BertBase bert;
    bert->segment_ids = torch::zeros({8, 128}, torch::kLong);
    bert->padding_mask = torch::ones({8, 128}, torch::kLong);
    return wrap(bert, torch::randint(0, 30522, {8, 128}, torch::kLong), torch::Tensor(), false);
  }
  if (name == "char_gpt" || name == "char_gpt_generate") {
    Workload w = wrap(CharGpt(), torch::randint(0, 65, {12, 64}, torch::kLong),
                      torch::randint(0, 65, {12 * 64}, torch::kLong), true);
    w.classes = true;
    return w;
  }
  return wrap(MultiHeadSelfAttention(256, 8, 32, /*bias=*/true), uniform({4, seq, 256}), uniform({4, seq, 256}), false);
}

// ---- the agreement check ----------------------------------------------------------------------------------

torch::Tensor to_torch(const kiln::Array& array) {
  std::vector<std::int64_t> dims = array.shape().dims();
  return torch::from_blob(const_cast<float*>(array.data<float>()), dims, torch::kFloat32).clone();
}

double relative_difference(const torch::Tensor& reference, const torch::Tensor& other) {
  const double scale = reference.abs().max().item<double>();
  return (reference - other).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

double check_vision(const std::string& name);

int check() {
  // kiln's model, with every weight (biases, LayerNorm's gamma and beta included) made random, so a
  // weight copied to the wrong place cannot go unnoticed.
  const kiln::Tensor input = kiln::Input({kiln::Shape::unknown, 40, 12}, kiln::DType::float32, "x");
  const kiln::Tensor block_output = kiln::MHAttention(16, 8)(input);
  const kiln::Tensor output = kiln::Dense(2, "tanh")(kiln::Flatten()(block_output));
  kiln::Model model(input, output, "mql5_block");
  kiln::Model block_model(input, block_output, "mql5_block_attention");
  kiln::Rng rng(7);
  for (const kiln::Weight& weight : model.weights()) {
    kiln::Array value = weight.value;
    float* data = value.data<float>();
    const bool is_gamma = weight.path.size() >= 5 && weight.path.compare(weight.path.size() - 5, 5, "gamma") == 0;
    for (std::size_t i = 0; i < value.size(); ++i)
      data[i] = static_cast<float>((is_gamma ? 1.0 : data[i]) + rng.uniform(-0.2, 0.2));
  }

  Mql5Block peer;
  std::vector<std::string> unmatched;
  {
    torch::NoGradGuard no_grad;
    auto find = [&](const std::string& suffix) -> kiln::Array {
      for (const kiln::Weight& weight : model.weights())
        if (weight.path.size() >= suffix.size() &&
            weight.path.compare(weight.path.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            (weight.path.size() == suffix.size() || weight.path[weight.path.size() - suffix.size() - 1] == '/'))
          return weight.value;
      unmatched.push_back(suffix);
      return kiln::Array();
    };
    auto linear = [&](nn::Linear& layer, const std::string& name) {
      const kiln::Array kernel = find(name + "/kernel"), bias = find(name + "/bias");
      if (!kernel.empty()) layer->weight.copy_(to_torch(kernel).t());  // kiln (in, out), torch (out, in)
      if (!bias.empty()) layer->bias.copy_(to_torch(bias));
    };
    auto norm = [&](nn::LayerNorm& layer, const std::string& name) {
      const kiln::Array gamma = find(name + "/gamma"), beta = find(name + "/beta");
      if (!gamma.empty()) layer->weight.copy_(to_torch(gamma));
      if (!beta.empty()) layer->bias.copy_(to_torch(beta));
    };
    MHAttentionImpl& block = *peer->block;
    linear(block.query, "query");
    linear(block.key, "key");
    linear(block.value, "value");
    linear(block.w0, "w0");
    norm(block.attention_norm, "attention_norm");
    linear(block.ff_hidden, "feed_forward_hidden");
    linear(block.ff_output, "feed_forward_output");
    norm(block.output_norm, "output_norm");
    linear(peer->head, "dense");
  }
  if (!unmatched.empty()) {
    std::fprintf(stderr, "torch_bench --check: no kiln weight for:");
    for (const std::string& name : unmatched) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\nkiln's weights:");
    for (const kiln::Weight& weight : model.weights()) std::fprintf(stderr, " %s", weight.path.c_str());
    std::fprintf(stderr, "\n");
    return 1;
  }
  std::size_t kiln_params = 0;
  for (const kiln::Weight& weight : model.weights()) kiln_params += weight.value.size();
  std::int64_t torch_params = 0;
  for (const torch::Tensor& p : peer->parameters()) torch_params += p.numel();
  if (static_cast<std::int64_t>(kiln_params) != torch_params) {
    std::fprintf(stderr, "torch_bench --check: kiln has %zu parameters, the peer %lld\n", kiln_params,
                 static_cast<long long>(torch_params));
    return 1;
  }

  kiln::Array x({64, 40, 12});
  float* data = x.data<float>();
  for (std::size_t i = 0; i < x.size(); ++i) data[i] = static_cast<float>(rng.uniform(-2.0, 2.0));
  const torch::Tensor kiln_block = to_torch(block_model.predict(x, 64));
  const torch::Tensor kiln_output = to_torch(model.predict(x, 64));

  peer->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor tx = to_torch(x);
  const torch::Tensor torch_block = peer->block->forward(tx);
  const torch::Tensor torch_output = peer->forward(tx);

  const double block_difference = relative_difference(kiln_block, torch_block);
  const double output_difference = relative_difference(kiln_output, torch_output);
  const bool ok = block_difference <= 1e-5 && output_difference <= 1e-5;
  std::printf(
      "{\"check\":\"mql5_block\",\"params\":%zu,\"block_rel_diff\":%.3g,\"output_rel_diff\":%.3g,\"tolerance\":1e-5,"
      "\"agree\":%s}\n",
      kiln_params, block_difference, output_difference, ok ? "true" : "false");
  if (!ok) return 1;
  for (const char* name : {"resnet50", "mobilenet_v2"}) {
    const double difference = check_vision(name);
    std::printf("{\"check\":\"%s\",\"output_rel_diff\":%.3g,\"tolerance\":1e-4,\"agree\":%s}\n", name, difference,
                difference <= 1e-4 ? "true" : "false");
    if (difference > 1e-4) return 1;
  }
  return 0;
}

// resnet50 and mobilenet_v2: kiln's (bench/vision_models.hpp) and torch's, with every weight and moving statistic
// of kiln's model drawn at random and copied into torch's modules in their order (Conv2d: kiln's (kh, kw, in,
// out) kernel as (out, in, kh, kw); BatchNorm2d: gamma, beta, moving mean and variance; Linear: the transposed
// kernel and the bias), then both forwards in inference mode on two images. The row's two sides are then the
// same network, weight for weight.
double check_vision(const std::string& name) {
  kiln::Model model = name == "resnet50" ? bench::resnet50() : bench::mobilenet_v2();
  kiln::Rng rng(11);
  std::vector<kiln::Array> values;
  for (const kiln::Weight& weight : model.weights()) {
    kiln::Array value = weight.value;
    float* data = value.data<float>();
    // Scales and variances near 1, everything else moved a little from its initial value.
    const bool near_one = weight.path.find("moving_variance") != std::string::npos ||
                          weight.path.find("gamma") != std::string::npos;
    for (std::size_t i = 0; i < value.size(); ++i)
      data[i] = near_one ? static_cast<float>(rng.uniform(0.5, 1.5)) : data[i] + static_cast<float>(rng.uniform(-0.05, 0.05));
    values.push_back(value);
  }
  std::shared_ptr<nn::Module> peer;
  if (name == "resnet50")
    peer = ResNet50().ptr();
  else
    peer = MobileNetV2().ptr();
  std::size_t next = 0;
  auto take = [&](const torch::Tensor& target, std::vector<std::int64_t> permutation) {
    if (next >= values.size()) throw std::runtime_error(name + ": kiln has fewer weights than the peer");
    torch::Tensor value = to_torch(values[next++]);
    if (!permutation.empty()) value = value.permute(permutation).contiguous();
    if (value.sizes() != target.sizes())
      throw std::runtime_error(name + ": weight " + std::to_string(next - 1) + " has another shape than the peer's");
    target.copy_(value);
  };
  {
    torch::NoGradGuard no_grad;
    for (const std::shared_ptr<nn::Module>& module : peer->modules(/*include_self=*/false)) {
      if (auto* conv = module->as<nn::Conv2d>()) {
        // (kh, kw, in, out) -> (out, in, kh, kw); a depthwise kernel (kh, kw, channels, 1) -> (channels, 1, kh, kw).
        take(conv->weight, conv->options.groups() > 1 ? std::vector<std::int64_t>{2, 3, 0, 1}
                                                      : std::vector<std::int64_t>{3, 2, 0, 1});
      } else if (auto* norm = module->as<nn::BatchNorm2d>()) {
        take(norm->weight, {});
        take(norm->bias, {});
        take(norm->running_mean, {});
        take(norm->running_var, {});
      } else if (auto* linear = module->as<nn::Linear>()) {
        take(linear->weight, {1, 0});
        take(linear->bias, {});
      }
    }
  }
  if (next != values.size()) throw std::runtime_error(name + ": kiln has more weights than the peer");
  kiln::Array x({2, 224, 224, 3});
  for (std::size_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(rng.uniform(-1.0, 1.0));
  const torch::Tensor kiln_output = to_torch(model.predict(x, 2));
  peer->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor input = to_torch(x).permute({0, 3, 1, 2}).contiguous();
  const torch::Tensor torch_output =
      name == "resnet50" ? std::dynamic_pointer_cast<ResNet50Impl>(peer)->forward(input)
                         : std::dynamic_pointer_cast<MobileNetV2Impl>(peer)->forward(input);
  return relative_difference(kiln_output, torch_output);
}

// Starts torch's and OpenBLAS's threads, buffers and lazily initialized kernels (and the autograd
// engine) before the baseline is taken, on tiny tensors: one-time library start-up is not charged to a
// workload's peak memory. kiln_bench starts OpenBLAS the same way.
void warm_up_libraries() {
  nn::Linear linear(8, 8);
  nn::LayerNorm norm(nn::LayerNormOptions({8}).eps(1e-6));
  const torch::Tensor x = torch::rand({2, 4, 8});
  const torch::Tensor h = norm(x + linear(torch::silu(x)));
  const torch::Tensor s = torch::softmax(torch::matmul(h, h.transpose(-2, -1)) * 0.5, -1);
  const torch::Tensor loss = torch::mse_loss(torch::tanh(torch::matmul(s, h)), x);
  loss.backward();
  torch::optim::SGD(linear->parameters(), torch::optim::SGDOptions(0.01)).step();
  (void)loss.item<float>();
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, /*is_torch=*/true);
  if (args.list) {
    bench::print_list();
    return 0;
  }
  try {
    if (args.check) return check();
    if (args.workload.empty()) return bench::run_all(argv[0], args);

    // torch's intra-op threads (OpenMP) and OpenBLAS's, which torch's GEMMs call.
    torch::set_num_threads(args.threads);
    openblas_set_num_threads(args.threads);
    warm_up_libraries();

    const double baseline = bench::status_mb("VmRSS");
    if (args.workload == "gpt2_small_generate") {
      Gpt2 gpt2;
      gpt2->eval();
      bench::reset_peak();
      const torch::Tensor prompt = (torch::arange(128, torch::kLong) * 7919).remainder(50257).unsqueeze(0);
      // The prompt and the first new token, then the whole: the difference is the other 127 new tokens.
      const bench::Timing first = bench::time_steps(args, [&] { gpt2->generate(prompt, 129); });
      const bench::Timing t = bench::time_steps(args, [&] { gpt2->generate(prompt, 256); });
      std::int64_t parameters = 0;
      for (const torch::Tensor& p : gpt2->parameters()) parameters += p.numel();
      char extra[160];
      std::snprintf(extra, sizeof extra, ",\"prompt_tok_s\":%.2f,\"new_tok_s\":%.2f,\"weights_mb\":%.1f",
                    128.0 / (first.median_ms / 1000.0), 127.0 / ((t.median_ms - first.median_ms) / 1000.0),
                    static_cast<double>(parameters) * 4.0 / (1024.0 * 1024.0));
      bench::print_json("libtorch", args, t, baseline, bench::status_mb("VmHWM") - baseline, extra);
      return 0;
    }
    Workload w = make_workload(args.workload, args.seq);
    bench::Timing t;
    if (args.mode == "forward" && args.callers > 1) {
      // NoGradGuard is per thread: each caller sets its own.
      std::vector<Workload> own;
      if (args.share == "each")
        for (int caller = 1; caller < args.callers; ++caller) own.push_back(make_workload(args.workload, args.seq));
      w.module->eval();
      for (Workload& other : own) other.module->eval();
      bench::Callers callers(args.callers, [&](int caller) {
        torch::NoGradGuard no_grad;
        Workload& mine = caller == 0 || own.empty() ? w : own[static_cast<std::size_t>(caller - 1)];
        (void)mine.forward(mine.x);
      });
      t = bench::time_steps(args, [&] { callers.step(); });
    } else if (args.mode == "generate") {
      CharGpt model(320);
      model->eval();
      const torch::Tensor prompt = (torch::arange(64, torch::kLong) * 7).remainder(65).unsqueeze(0);
      t = bench::time_steps(args, [&] { (void)generate_tokens(model, prompt, 256); });
    } else if (args.mode == "forward") {
      w.module->eval();
      torch::NoGradGuard no_grad;
      t = bench::time_steps(args, [&] { (void)w.forward(w.x); });
    } else if (args.mode == "latency") {
      // One sample at a time: the module called directly (no torch::jit), without autograd.
      w.module->eval();
      torch::NoGradGuard no_grad;
      const torch::Tensor one = w.x.slice(0, 0, 1).contiguous();
      const bench::Latency latency = bench::time_calls([&] { (void)w.forward(one); }, args.calls);
      bench::print_json("libtorch", args, bench::latency_timing(latency), baseline,
                        bench::status_mb("VmHWM") - baseline, bench::latency_fields(latency));
      return 0;
    } else {
      w.module->train();
      std::unique_ptr<torch::optim::Optimizer> optimizer;
      if (w.adam)
        optimizer = std::make_unique<torch::optim::Adam>(w.module->parameters(),
                                                         torch::optim::AdamOptions(1e-3).betas({0.9, 0.999}).eps(1e-7));
      else
        optimizer = std::make_unique<torch::optim::SGD>(w.module->parameters(), torch::optim::SGDOptions(0.01));
      t = bench::time_steps(args, [&] {
        optimizer->zero_grad();
        const torch::Tensor output = w.forward(w.x);
        const torch::Tensor loss =
            w.classes ? torch::nn::functional::cross_entropy(output, w.y) : torch::mse_loss(output, w.y);
        loss.backward();
        optimizer->step();
        (void)loss.item<float>();
      });
    }
    bench::print_json("libtorch", args, t, baseline, bench::status_mb("VmHWM") - baseline);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "torch_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
