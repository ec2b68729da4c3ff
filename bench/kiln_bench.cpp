// kiln_bench: kiln's side of the benchmark against libtorch (bench/torch_bench.cpp, the peer) and raw
// OpenBLAS. One process times one workload and prints one JSON line; scripts/bench.sh (make bench) runs
// kiln and the peer alternately, in fresh processes, and prints the table. See bench/bench_common.hpp
// for the flags, the timing rule and what the memory fields mean.
//
// kiln is driven through the API users call: forward = model.predict(x, batch_size = the whole batch),
// train_step = model.train_on_batch(x, y) after model.compile(optimizer, "mse"). --api program drives
// the same graphs through a kiln::Program built by hand instead (what predict and train_on_batch run
// underneath), to show what the Keras-style calls cost on top.
//
// --callers C runs the forward on C threads at once, on one model (--share one) or a model each (--share
// each): one step is every caller's predict; kiln's predict is safe to call concurrently.
//
// --sgemm times, with raw cblas_sgemm into preallocated buffers, exactly the GEMMs (shapes, transposes,
// batch counts) the workload's forward or train step performs, and prints them as impl "openblas_sgemm":
// its ms over an implementation's ms is that implementation's fraction of OpenBLAS's own sgemm
// throughput on the same shapes ("gemm_gflop" is the arithmetic).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>
#include "bench_common.hpp"
#include "vision_models.hpp"
#include "../examples/stock_attention/stock_data.hpp"

namespace {

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
constexpr std::int64_t None = Shape::unknown;

Array random_array(const Shape& shape, std::uint64_t seed) {
  kiln::Rng rng(seed);
  Array array(shape);
  float* data = array.data<float>();
  for (std::size_t i = 0; i < array.size(); ++i) data[i] = static_cast<float>(rng.uniform(-1.0, 1.0));
  return array;
}

// ---- the workloads in kiln --------------------------------------------------------------------------------

struct Workload {
  kiln::Model model;
  Array x, y;
  const char* optimizer;
  kiln::Loss loss = "mse";
  std::vector<Array> inputs = {};  // a model of several inputs (bert_base): these, x being the first's rows
};

// Class labels 0..classes-1 as floats, one per row.
Array random_labels(std::int64_t rows, std::int64_t classes, std::uint64_t seed) {
  kiln::Rng rng(seed);
  Array labels({rows});
  for (std::int64_t i = 0; i < rows; ++i)
    labels.set_flat(static_cast<std::size_t>(i),
                    std::min<double>(static_cast<double>(classes - 1), std::floor(rng.uniform(0.0, 1.0) * classes)));
  return labels;
}

Workload make_workload(const std::string& name, int seq) {
  if (name == "seed_dpa") {
    const Tensor x = kiln::Input({None, 150, 512}, kiln::DType::float32, "x");
    const Tensor out = kiln::DotProductAttention(/*use_scale=*/true)({x, x, x});
    return {kiln::Model(x, out, "seed_dpa"), random_array({10, 150, 512}, 1), random_array({10, 150, 512}, 2), "sgd"};
  }
  if (name == "seed_mha") {
    const Tensor x = kiln::Input({None, 150, 512}, kiln::DType::float32, "x");
    const Tensor out = kiln::MultiHeadAttention(/*h=*/8)({x, x, x});
    return {kiln::Model(x, out, "seed_mha"), random_array({10, 150, 512}, 1), random_array({10, 150, 512}, 2), "sgd"};
  }
  if (name == "mql5_block") {
    const Tensor x = kiln::Input({None, 40, 12}, kiln::DType::float32, "x");
    Tensor h = kiln::MHAttention(/*key_size=*/16, /*heads=*/8)(x);
    h = kiln::Flatten()(h);
    const Tensor out = kiln::Dense(2, "tanh")(h);
    return {kiln::Model(x, out, "mql5_block"), random_array({64, 40, 12}, 1), random_array({64, 2}, 2), "adam"};
  }
  if (name == "stock_demo") {
    kiln::Model model = stock::attention_model();
    return {model, random_array({32, stock::window * 4}, 1), random_array({32, 2}, 2), "adam"};
  }
  if (name == "mlp") {
    const Tensor x = kiln::Input({None, 1024}, kiln::DType::float32, "x");
    Tensor h = kiln::Dense(2048, "relu")(x);
    h = kiln::Dense(2048, "relu")(h);
    return {kiln::Model(x, kiln::Dense(10)(h), "mlp"), random_array({64, 1024}, 1), random_array({64, 10}, 2), "adam"};
  }
  if (name == "cnn_small") {
    const Tensor x = kiln::Input({None, 28, 28, 1}, kiln::DType::float32, "x");
    Tensor h = kiln::Conv2D(32, 3, "relu")(x);
    h = kiln::MaxPooling2D()(kiln::BatchNormalization()(h));
    h = kiln::GlobalAveragePooling2D()(kiln::Conv2D(64, 3, "relu")(h));
    Workload w{kiln::Model(x, kiln::Dense(10)(h), "cnn_small"), random_array({64, 28, 28, 1}, 1),
               random_labels(64, 10, 2), "adam"};
    w.loss = kiln::Loss::from_config(
        Config{{"class_name", "SparseCategoricalCrossentropy"}, {"config", Config{{"from_logits", true}}}});
    return w;
  }
  if (name == "resnet50" || name == "mobilenet_v2") {
    // Batch 8 (ResNet-50) and 32 (MobileNetV2); latency rows take the first image.
    const std::int64_t batch = name == "resnet50" ? 8 : 32;
    Workload w{name == "resnet50" ? bench::resnet50() : bench::mobilenet_v2(), random_array({batch, 224, 224, 3}, 1),
               random_labels(batch, 1000, 2), "sgd"};
    w.loss = kiln::Loss::from_config(
        Config{{"class_name", "SparseCategoricalCrossentropy"}, {"config", Config{{"from_logits", true}}}});
    return w;
  }
  if (name == "tcn") {
    const Tensor x = kiln::Input({None, 256, 16}, kiln::DType::float32, "x");
    Tensor h = x;
    for (const std::int64_t dilation : {1, 2, 4})
      h = kiln::Conv1D(64, 5, "relu", {{"padding", "causal"}, {"dilation_rate", dilation}})(h);
    return {kiln::Model(x, kiln::Dense(1)(h), "tcn"), random_array({32, 256, 16}, 1), random_array({32, 256, 1}, 2),
            "adam"};
  }
  if (name == "norms") {
    // Only normalization kernels: the first GroupNormalization needs no input gradient, the other three
    // compute every gradient (input, gamma and beta, or scale).
    const Tensor x = kiln::Input({None, 256, 64}, kiln::DType::float32, "x");
    Tensor h = x;
    for (int block = 0; block < 2; ++block) h = kiln::RMSNormalization()(kiln::GroupNormalization(8)(h));
    return {kiln::Model(x, h, "norms"), random_array({32, 256, 64}, 1), random_array({32, 256, 64}, 2), "adam"};
  }
  if (name == "noise") {
    // The random ops in training mode, forward and backward: dropout_mask (one draw per sample and
    // channel) and random_normal_like (one per element, twice). The Dense gives them a gradient to carry.
    const Tensor x = kiln::Input({None, 256, 64}, kiln::DType::float32, "x");
    Tensor h = kiln::SpatialDropout1D(0.2)(kiln::Dense(64)(x));
    h = kiln::GaussianDropout(0.2)(kiln::GaussianNoise(0.1)(h));
    return {kiln::Model(x, h, "noise"), random_array({32, 256, 64}, 1), random_array({32, 256, 64}, 2), "sgd"};
  }
  if (name == "rnn") {
    // The fused recurrent ops: an LSTM returning every step into a GRU returning its last, then a Dense.
    const Tensor x = kiln::Input({None, 100, 32}, kiln::DType::float32, "x");
    Tensor h = kiln::LSTM(128, {{"return_sequences", true}})(x);
    h = kiln::GRU(64)(h);
    return {kiln::Model(x, kiln::Dense(1)(h), "rnn"), random_array({32, 100, 32}, 1), random_array({32, 1}, 2),
            "adam"};
  }
  if (name == "lstm") {
    const Tensor x = kiln::Input({None, 100, 32}, kiln::DType::float32, "x");
    return {kiln::Model(x, kiln::Dense(1)(kiln::LSTM(128)(x)), "lstm"), random_array({64, 100, 32}, 1),
            random_array({64, 1}, 2), "adam"};
  }
  if (name == "char_gpt" || name == "char_gpt_generate") {
    // nanoGPT's CPU run of shakespeare_char in keras-hub's blocks: 65 characters, context 64, 4 pre-norm
    // decoder blocks of 4 heads over 128 features (GELU feed-forward 512), a final LayerNorm and the output
    // head tied to the token embedding; batch 12.
    // For generation, a context of 320: the prompt and the 256 tokens fit, and every token can use the cache.
    const std::int64_t context = name == "char_gpt" ? 64 : 320;
    const Tensor ids = kiln::Input({None, context}, kiln::DType::float32, "ids");
    kiln::ReversibleEmbedding tokens(65, 128);
    Tensor h = tokens(ids);
    h = kiln::Add()({h, kiln::PositionEmbedding(context)(h)});
    for (int block = 0; block < 4; ++block)
      h = kiln::TransformerDecoder(512, 4, {{"normalize_first", true}, {"activation", "gelu"}})(h);
    h = kiln::LayerNormalization({{"epsilon", 1e-5}})(h);
    Array x({12, 64}), y({12, 64});
    kiln::Rng rng(3);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x.set_flat(i, std::floor(rng.uniform(0.0, 65.0)));
      y.set_flat(i, std::floor(rng.uniform(0.0, 65.0)));
    }
    Workload w{kiln::Model(ids, tokens(h, kiln::CallArgs().option("reverse", true)), "char_gpt"), x, y, "adam"};
    w.loss = kiln::Loss::from_config(
        Config{{"class_name", "SparseCategoricalCrossentropy"}, {"config", Config{{"from_logits", true}}}});
    return w;
  }
  if (name == "bert_base") {
    // keras-hub's BertBackbone at BERT-base's size, random weights; inputs padding_mask, segment_ids, token_ids.
    kiln::hub::Backbone bert("BertBackbone", {{"vocabulary_size", 30522},
                                              {"num_layers", 12},
                                              {"num_heads", 12},
                                              {"hidden_dim", 768},
                                              {"intermediate_dim", 3072},
                                              {"max_sequence_length", 512}});
    bert.initialize_weights(1);
    Array ids({8, 128});
    kiln::Rng rng(3);
    for (std::size_t i = 0; i < ids.size(); ++i) ids.set_flat(i, std::floor(rng.uniform(0.0, 30522.0)));
    Workload w{kiln::Model(bert.ptr()), ids, Array(), "adam"};
    w.inputs = {Array::full(Shape{8, 128}, 1.0), Array::full(Shape{8, 128}, 0.0), ids};
    return w;
  }
  // long_mha: Keras's form, self-attention mha(x, x), biases on.
  const Tensor x = kiln::Input({None, seq, 256}, kiln::DType::float32, "x");
  const Tensor out = kiln::MultiHeadAttention(/*num_heads=*/8, /*key_dim=*/32, {{"use_bias", true}})(x, x);
  return {kiln::Model(x, out, "long_mha"), random_array({4, seq, 256}, 1), random_array({4, seq, 256}, 2), "sgd"};
}

// What predict and train_on_batch run underneath, built by hand: one Program, fed and run.
struct ProgramStep {
  kiln::Graph graph;
  Tensor input, target;
  std::unique_ptr<kiln::Program> program;
  kiln::OptimizerPtr optimizer;

  ProgramStep(Workload& w, bool training) {
    std::vector<std::int64_t> dims = w.x.shape().dims();
    dims[0] = None;
    input = graph.placeholder(Shape(dims), kiln::DType::float32, "x");
    const Tensor output = w.model.ptr()->apply({input}, training)[0];
    if (!training) {
      program = std::make_unique<kiln::Program>(graph, std::vector<Tensor>{output});
      return;
    }
    std::vector<std::int64_t> target_dims = w.y.shape().dims();
    target_dims[0] = None;
    target = graph.placeholder(Shape(target_dims), kiln::DType::float32, "y");
    const Tensor loss = w.loss(target, output);
    std::vector<Tensor> weights;
    std::vector<std::string> paths;
    for (const kiln::Weight& weight : w.model.ptr()->trainable_weights()) {
      const Tensor variable = graph.find_variable(weight.value);
      if (!variable.valid()) continue;
      weights.push_back(variable);
      paths.push_back(weight.path);
    }
    optimizer = kiln::create_optimizer(w.optimizer);
    std::vector<kiln::Update> updates = optimizer->build_updates(graph, weights, kiln::gradients(loss, weights), paths);
    updates.insert(updates.end(), graph.state_updates().begin(), graph.state_updates().end());  // moving statistics
    program = std::make_unique<kiln::Program>(graph, std::vector<Tensor>{loss}, updates);
  }

  void run(const Workload& w) {
    program->feed(input, w.x);
    if (optimizer) {
      program->feed(target, w.y);
      optimizer->prepare_step();
      program->run();
      optimizer->finish_step();
    } else {
      program->run();
    }
  }
};

// ---- the same GEMMs in raw OpenBLAS ---------------------------------------------------------------------------

struct Gemm {
  std::int64_t count, m, n, k;
  bool ta, tb;
};

// C(m×n) = A(m×k)·B(k×n) (B given as n×k when b_transposed), `count` times; in a train step also the
// gradients the backward pass computes: dA = dC·Bᵀ when A needs one, dB = Aᵀ·dC when B does.
void add_matmul(std::vector<Gemm>& list, bool training, std::int64_t count, std::int64_t m, std::int64_t n,
                std::int64_t k, bool b_transposed, bool grad_a, bool grad_b) {
  list.push_back({count, m, n, k, false, b_transposed});
  if (!training) return;
  if (grad_a) list.push_back({count, m, k, n, false, !b_transposed});          // dA = dC·Bᵀ (m×k)
  if (grad_b && !b_transposed) list.push_back({count, k, n, m, true, false});  // dB = Aᵀ·dC (k×n)
  if (grad_b && b_transposed) list.push_back({count, n, k, m, true, false});   // dB = dCᵀ·A (n×k)
}

std::vector<Gemm> gemm_list(const std::string& name, bool training, int seq) {
  std::vector<Gemm> list;
  // Self-attention over (batch, T, E) with `heads` heads of depth d: projections of the input (which
  // needs no gradient), scores Q·Kᵀ and context P·V per batch and head, the output projection.
  auto attention = [&](std::int64_t batch, std::int64_t t, std::int64_t e, std::int64_t heads, std::int64_t d,
                       std::int64_t out) {
    for (int p = 0; p < 3; ++p) add_matmul(list, training, 1, batch * t, heads * d, e, false, false, true);
    add_matmul(list, training, batch * heads, t, t, d, true, true, true);
    add_matmul(list, training, batch * heads, t, d, t, false, true, true);
    add_matmul(list, training, 1, batch * t, out, heads * d, false, true, true);
  };
  if (name == "seed_dpa") {
    add_matmul(list, training, 10, 150, 150, 512, true, false, false);
    add_matmul(list, training, 10, 150, 512, 150, false, true, false);
  } else if (name == "seed_mha") {
    attention(10, 150, 512, 8, 64, 512);
  } else if (name == "mql5_block") {
    attention(64, 40, 12, 8, 16, 12);                                   // Q, K, V, scores, context, W0
    add_matmul(list, training, 1, 64 * 40, 48, 12, false, true, true);  // feed-forward hidden
    add_matmul(list, training, 1, 64 * 40, 12, 48, false, true, true);  // feed-forward output
    add_matmul(list, training, 1, 64, 2, 40 * 12, false, true, true);   // the Dense(2) head
  } else if (name == "cnn_small") {
    // Each convolution is one GEMM of im2col rows (positions) by taps·channels by filters; the first
    // convolution's input needs no gradient.
    add_matmul(list, training, 1, 64 * 26 * 26, 32, 9, false, false, true);
    add_matmul(list, training, 1, 64 * 11 * 11, 64, 9 * 32, false, true, true);
    add_matmul(list, training, 1, 64, 10, 64, false, true, true);
  } else if (name == "tcn") {
    add_matmul(list, training, 1, 32 * 256, 64, 5 * 16, false, false, true);
    for (int layer = 0; layer < 2; ++layer) add_matmul(list, training, 1, 32 * 256, 64, 5 * 64, false, true, true);
    add_matmul(list, training, 1, 32 * 256, 1, 64, false, true, true);
  } else if (name == "noise") {
    add_matmul(list, training, 1, 32 * 256, 64, 64, false, false, true);
  } else if (name == "rnn") {
    // Each layer: one GEMM for every step's input projection, then one a step for the recurrence (whose
    // gradient needs both products: the state's and the recurrent kernel's).
    add_matmul(list, training, 1, 32 * 100, 4 * 128, 32, false, false, true);
    add_matmul(list, training, 100, 32, 4 * 128, 128, false, true, true);
    add_matmul(list, training, 1, 32 * 100, 3 * 64, 128, false, true, true);
    add_matmul(list, training, 100, 32, 3 * 64, 64, false, true, true);
    add_matmul(list, training, 1, 32, 1, 64, false, true, true);
  } else if (name == "lstm") {
    add_matmul(list, training, 1, 64 * 100, 4 * 128, 32, false, false, true);
    add_matmul(list, training, 100, 64, 4 * 128, 128, false, true, true);
    add_matmul(list, training, 1, 64, 1, 128, false, true, true);
  } else if (name == "char_gpt") {
    // Per block: Q, K, V, scores, context and output projection (attention(...)), then the feed-forward
    // pair; finally the tied head.
    for (int block = 0; block < 4; ++block) {
      attention(12, 64, 128, 4, 32, 128);
      add_matmul(list, training, 1, 12 * 64, 512, 128, false, true, true);
      add_matmul(list, training, 1, 12 * 64, 128, 512, false, true, true);
    }
    add_matmul(list, training, 1, 12 * 64, 65, 128, false, true, true);
  } else if (name == "resnet50") {
    // Each convolution is one GEMM: output positions × filters × (taps · channels); the stem's input needs
    // no gradient. The pooling, normalizations and additions are not GEMMs.
    const std::int64_t batch = 8;
    auto conv = [&](std::int64_t size, std::int64_t channels, std::int64_t filters, std::int64_t out, bool grad_a) {
      add_matmul(list, training, 1, batch * out * out, filters, size * size * channels, false, grad_a, true);
    };
    conv(7, 3, 64, 112, false);
    std::int64_t channels = 64, spatial = 56;
    const std::int64_t blocks[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage)
      for (std::int64_t block = 0; block < blocks[stage]; ++block) {
        const std::int64_t filters = 64 << stage, out = block == 0 && stage > 0 ? spatial / 2 : spatial;
        if (block == 0) conv(1, channels, 4 * filters, out, true);
        conv(1, channels, filters, spatial, true);
        conv(3, filters, filters, out, true);
        conv(1, filters, 4 * filters, out, true);
        channels = 4 * filters;
        spatial = out;
      }
    add_matmul(list, training, 1, batch, 1000, 2048, false, true, true);
  } else if (name == "mobilenet_v2") {
    // The stem and the pointwise convolutions (the depthwise ones are not GEMMs), then the classifier.
    const std::int64_t batch = 32;
    auto conv = [&](std::int64_t size, std::int64_t channels, std::int64_t filters, std::int64_t out) {
      add_matmul(list, training, 1, batch * out * out, filters, size * size * channels, false, true, true);
    };
    conv(3, 3, 32, 112);
    std::int64_t channels = 32, spatial = 112;
    const std::int64_t settings[][4] = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                        {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};
    for (const auto& [t, c, n, s] : settings)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t out = i == 0 ? spatial / s : spatial;
        if (t != 1) conv(1, channels, channels * t, spatial);
        conv(1, channels * t, c, out);
        channels = c;
        spatial = out;
      }
    conv(1, 320, 1280, 7);
    add_matmul(list, training, 1, batch, 1000, 1280, false, true, true);
  } else if (name == "mlp") {
    add_matmul(list, training, 1, 64, 2048, 1024, false, false, true);
    add_matmul(list, training, 1, 64, 2048, 2048, false, true, true);
    add_matmul(list, training, 1, 64, 10, 2048, false, true, true);
  } else if (name == "norms" || name == "char_gpt_generate" || name == "stock_demo" || name == "gpt2_small_generate" ||
             name == "bert_base") {
    // No GEMMs (generation's are hundreds of tiny ones, not worth a column): the %sgemm columns show "-".
  } else {
    attention(4, seq, 256, 8, 32, 256);
  }
  return list;
}

struct SgemmRunner {
  std::vector<Gemm> list;
  std::vector<float> a, b, c;
  double gflop = 0;

  explicit SgemmRunner(std::vector<Gemm> gemms) : list(std::move(gemms)) {
    std::size_t sa = 0, sb = 0, sc = 0;
    for (const Gemm& g : list) {
      sa = std::max(sa, static_cast<std::size_t>(g.count * g.m * g.k));
      sb = std::max(sb, static_cast<std::size_t>(g.count * g.k * g.n));
      sc = std::max(sc, static_cast<std::size_t>(g.count * g.m * g.n));
      gflop += 2.0 * static_cast<double>(g.count * g.m * g.n * g.k) * 1e-9;
    }
    kiln::Rng rng(3);
    a.resize(sa);
    b.resize(sb);
    c.assign(sc, 0.0f);
    for (float& v : a) v = static_cast<float>(rng.uniform(-1.0, 1.0));
    for (float& v : b) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  }

  void run() {
    for (const Gemm& g : list) {
      const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
      const int lda = g.ta ? m : k, ldb = g.tb ? k : n;
      for (std::int64_t i = 0; i < g.count; ++i)
        cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                    a.data() + i * g.m * g.k, lda, b.data() + i * g.k * g.n, ldb, 0.0f, c.data() + i * g.m * g.n, n);
    }
  }
};

// Starts OpenBLAS's threads and buffers before the baseline is taken (the peer does the same).
void warm_blas() {
  std::vector<float> a(64 * 64, 0.5f), c(64 * 64);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0f, a.data(), 64, a.data(), 64, 0.0f, c.data(),
              64);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, /*is_torch=*/false);
  if (args.list) {
    bench::print_list();
    return 0;
  }
  if (args.workload.empty()) return bench::run_all(argv[0], args);

  // kiln runs its kernels and its GEMMs on its own threads (OpenBLAS single-threaded in each); the sgemm
  // rows time OpenBLAS alone, on OpenBLAS's own threads.
  if (args.sgemm)
    openblas_set_num_threads(args.threads);
  else
    kiln::set_num_threads(args.threads);
  warm_blas();
  const bool training = args.mode == "train_step";

  try {
    if (!args.policy.empty()) kiln::set_dtype_policy(args.policy);
    if (args.sgemm) {
      const double baseline = bench::status_mb("VmRSS");
      SgemmRunner runner(gemm_list(args.workload, training, args.seq));
      const bench::Timing t = bench::time_steps(args, [&] { runner.run(); });
      char extra[64];
      std::snprintf(extra, sizeof extra, ",\"gemm_gflop\":%.4f", runner.gflop);
      bench::print_json("openblas_sgemm", args, t, baseline, bench::status_mb("VmHWM") - baseline, extra);
      return 0;
    }

    const double baseline = bench::status_mb("VmRSS");
    if (args.workload == "gpt2_small_generate") {
      // GPT-2 small from keras-hub's arguments, random weights; keras-hub's CausalLM.generate, greedy, cached.
      // --quantize: keras-hub's quantize on the same weights (the token embedding, the attention's projections and
      // the feed-forward Dense layers in int8, as a DTypePolicyMap in the backbone's config); the float model is
      // gone before the peak is measured.
      const kiln::hub::Backbone backbone = [&] {
        kiln::hub::Backbone gpt2("GPT2Backbone", {{"vocabulary_size", 50257},
                                                  {"num_layers", 12},
                                                  {"num_heads", 12},
                                                  {"hidden_dim", 768},
                                                  {"intermediate_dim", 3072},
                                                  {"max_sequence_length", 1024}});
        return args.quantize.empty() ? gpt2 : kiln::hub::Backbone::of(kiln::quantize(gpt2, args.quantize));
      }();
      const kiln::hub::CausalLM lm(backbone);
      double weight_bytes = 0;  // as held (int8 entries a byte)
      for (const kiln::Weight& weight : backbone.ptr()->weights()) weight_bytes += static_cast<double>(weight.value.nbytes());
      bench::reset_peak();
      std::vector<std::int64_t> prompt(128);
      for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % 50257);
      kiln::GenerateOptions greedy;
      // The prompt and the first new token, then the whole: the difference is the other 127 new tokens.
      bench::Timing t;
      const bench::Timing first = bench::time_steps(args, [&] { lm.generate(prompt, 129, greedy); });
      t = bench::time_steps(args, [&] { lm.generate(prompt, 256, greedy); });
      const double peak = bench::status_mb("VmHWM") - baseline;
      char extra[160];
      std::snprintf(extra, sizeof extra, ",\"prompt_tok_s\":%.2f,\"new_tok_s\":%.2f,\"weights_mb\":%.1f",
                    128.0 / (first.median_ms / 1000.0), 127.0 / ((t.median_ms - first.median_ms) / 1000.0),
                    weight_bytes / (1024.0 * 1024.0));
      bench::print_json("kiln", args, t, baseline, peak, extra);
      return 0;
    }
    Workload w = make_workload(args.workload, args.seq);
    if (!args.quantize.empty()) {
      if (training) throw kiln::ValueError("--quantize times forward, latency and generate, not train_step");
      w.model = kiln::quantize(w.model, args.quantize);  // (the float model's weights, quantized as Keras does)
    }
    const std::int64_t batch = w.x.shape()[0];
    double weight_bytes = 0;  // the model's weights as they are held (int8 ones a byte an entry)
    for (const kiln::Weight& weight : w.model.ptr()->weights()) weight_bytes += static_cast<double>(weight.value.nbytes());
    char weights_field[48];
    std::snprintf(weights_field, sizeof weights_field, ",\"weights_mb\":%.3f", weight_bytes / (1024.0 * 1024.0));
    bench::Timing t;
    if (args.api == "program") {
      ProgramStep step(w, training);
      t = bench::time_steps(args, [&] { step.run(w); });
    } else if (args.callers > 1) {
      // Each caller predicts on the shared model, or on a model of its own (the same weights: they come
      // from the layer names).
      std::vector<Workload> own;
      if (args.share == "each")
        for (int caller = 1; caller < args.callers; ++caller) own.push_back(make_workload(args.workload, args.seq));
      bench::Callers callers(args.callers, [&](int caller) {
        Workload& mine = caller == 0 || own.empty() ? w : own[static_cast<std::size_t>(caller - 1)];
        mine.model.predict(mine.x, batch);
      });
      t = bench::time_steps(args, [&] { callers.step(); });
    } else if (args.mode == "generate") {
      // nanoGPT's sample.py: top-k 200 (every character) at temperature 0.8, from a 64-token prompt.
      std::vector<std::int64_t> prompt(64);
      for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7) % 65);
      kiln::GenerateOptions options;
      options.sampler = "top_k";
      options.k = 200;
      options.temperature = 0.8;
      options.max_new_tokens = 256;
      t = bench::time_steps(args, [&] { kiln::generate(w.model, prompt, options); });
    } else if (args.mode == "latency") {
      // One sample at a time, as a deployed model runs: the first row, through predict_on_batch into an output
      // array made once (the call that allocates nothing). predict(one, 1), which returns a new array and
      // handles any number of rows, is timed too, as predict_us_median.
      const Array one = w.x.rows(0, 1);
      Array out = w.model.predict_on_batch(one);
      const bench::Latency latency = bench::time_calls([&] { w.model.predict_on_batch(one, out); }, args.calls);
      const bench::Latency general = bench::time_calls([&] { w.model.predict(one, 1); }, args.calls);
      char general_field[64];
      std::snprintf(general_field, sizeof general_field, ",\"predict_us_median\":%.3f", general.us_median);
      bench::print_json("kiln", args, bench::latency_timing(latency), baseline, bench::status_mb("VmHWM") - baseline,
                        bench::latency_fields(latency) + general_field + weights_field);
      return 0;
    } else if (training) {
      w.model.compile(w.optimizer, w.loss);
      t = bench::time_steps(args, [&] { w.model.train_on_batch(w.x, w.y); });
    } else if (!w.inputs.empty()) {
      t = bench::time_steps(args, [&] { w.model.predict(w.inputs, batch); });
    } else {
      t = bench::time_steps(args, [&] { w.model.predict(w.x, batch); });
    }
    const double peak = bench::status_mb("VmHWM") - baseline;
    bench::print_json("kiln", args, t, baseline, peak,
                      std::string(args.api == "program" ? ",\"api\":\"program\"" : "") + weights_field);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kiln_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
