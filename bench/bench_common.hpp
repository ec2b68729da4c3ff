#pragma once
// What kiln_bench and its peer torch_bench share: the workload table, the command line, the timing loop,
// peak-memory accounting and the one-line JSON report. Header-only, no kiln and no torch in here.
//
//   <bench> --workload NAME --mode forward|train_step|latency --threads N [--seq T] [--iters N] [--warmup N]
//           [--min-time S] [--max-time S] [--min-iters N] [--max-iters N]
//   <bench> --workload NAME --mode forward --threads N --callers C [--share one|each]
//                             C threads predict at once, each step every caller runs one forward: on one
//                             shared model (one), or each on a model of its own (each); kiln and libtorch alike
//   kiln_bench ... --quantize int8   the workload's model through kiln::quantize first (forward, latency): its
//                             float Dense layers int8, as Keras's model.quantize("int8") makes them
//   kiln_bench ... --policy mixed_bfloat16   the workload's model made under that global dtype policy
//                             (kiln::set_dtype_policy, Keras's keras.config.set_dtype_policy)
//   <bench> --list            workload names, one a line, with their modes
//   <bench>                   every workload and mode, each in a fresh process (this binary again)
//
// Timing: `warmup` untimed steps (the first one plans and allocates), then timed steps until
// max-iters, or min-time seconds and min-iters steps, or max-time seconds and 3 steps, whichever comes
// first; --iters N times exactly N steps. Reports the median and the minimum.
// latency: the forward of one sample (the workload's first row), --calls (10,000) calls after 200 untimed
// ones, each timed: "us_median" and "us_p99" (ms_median is us_median / 1000, for the main table).
// Memory: "baseline_rss_mb" is VmRSS just before the workload is built (after the libraries, their
// thread pools and BLAS buffers are up); "peak_rss_mb" is VmHWM at the end minus that baseline: what the
// workload's weights, inputs, activations, gradients and optimizer state cost at their peak.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace bench {

struct WorkloadInfo {
  const char* name;
  bool forward, train_step, has_seq;
  const char* what;
  bool generate = false;  // the mode "generate": one call generates 256 tokens from a 64-token prompt
};

inline const std::vector<WorkloadInfo>& workloads() {
  static const std::vector<WorkloadInfo> table = {
      {"seed_dpa", true, false, false, "DotProductAttention(use_scale) on q=k=v (10,150,512)"},
      {"seed_mha", true, true, false, "MultiHeadAttention(h=8), TF2 form, on (10,150,512); MSE + SGD"},
      {"mql5_block", true, true, false,
       "Input (64,40,12) -> MHAttention(16, 8) -> Flatten -> Dense(2, tanh); MSE + Adam"},
      {"long_mha", true, true, true, "MultiHeadAttention(8, key_dim 32, bias) self-attention on (4,T,256); MSE + SGD"},
      {"cnn_small", true, true, false,
       "(64,28,28,1) -> Conv2D(32,3,relu) -> BatchNorm -> MaxPool2D -> Conv2D(64,3,relu) -> GAP2D -> Dense(10); "
       "sparse CE (logits) + Adam"},
      {"tcn", false, true, false, "(32,256,16) -> 3 x Conv1D(64,5,causal,dilation 1/2/4,relu) -> Dense(1); MSE + Adam"},
      {"norms", true, true, false, "(32,256,64) -> GroupNorm(8) -> RMSNorm -> GroupNorm(8) -> RMSNorm; MSE + Adam"},
      {"rnn", true, true, false, "(32,100,32) -> LSTM(128, return_sequences) -> GRU(64) -> Dense(1); MSE + Adam"},
      {"lstm", true, true, false, "(64,100,32) -> LSTM(128) -> Dense(1); MSE + Adam"},
      {"char_gpt", true, true, false,
       "nanoGPT's CPU shakespeare_char: ids (12,64) -> token + position embedding (65 chars, 128) -> 4 x "
       "TransformerDecoder(512, 4 heads, pre-norm, GELU) -> LayerNorm -> tied head (65); sparse CE (logits) + Adam"},
      {"char_gpt_generate", false, false, false,
       "char_gpt with a context of 320: 256 tokens from a 64-token prompt (top-k 200, temperature 0.8); kiln with "
       "its key/value cache, libtorch re-reading the sequence each token as nanoGPT's generate",
       true},
      {"gpt2_small_generate", false, false, false,
       "GPT-2 small's configuration (124M parameters, random weights; vocabulary 50257, 12 layers of 12 heads over "
       "768, context 1024): batch 1, a 128-token prompt, 128 new tokens, greedy; both with a key/value cache. "
       "prompt_tok_s = 128 / (time to the first new token), new_tok_s = 127 / (the rest); peak RSS from the model "
       "made (weights counted, random initialization's transients not)",
       true},
      {"bert_base", true, false, false,
       "BERT-base (110M: vocabulary 30522, 12 post-norm layers of 12 heads over 768, GELU (tanh) 3072, pooler) on "
       "token, segment and padding inputs (8,128)"},
      {"stock_demo", true, false, false,
       "the demo's model (examples/stock_attention): (B,160) -> Reshape(40,4) -> MHAttention(16, 8) -> Flatten -> "
       "2 x Dense(40, swish) -> Dense(2, tanh); for latency"},
      {"resnet50", true, true, false,
       "torchvision's ResNet-50 (v1.5, convolutions without bias + BatchNorm) on (8,224,224,3) -> 1000 logits; "
       "sparse CE (logits) + SGD"},
      {"mobilenet_v2", true, false, false,
       "torchvision's MobileNetV2 (width 1.0, ReLU6, depthwise 3x3) on (32,224,224,3) -> 1000 logits; forward "
       "and latency"},
      {"mlp", true, false, false,
       "(64,1024) -> Dense(2048, relu) -> Dense(2048, relu) -> Dense(10): the Dense layers a quantized model runs in "
       "int8 (kiln_bench --quantize int8 against the float model); forward and latency"},
      {"noise", false, true, false,
       "(32,256,64) -> Dense(64) -> SpatialDropout1D(0.2) -> GaussianNoise(0.1) -> GaussianDropout(0.2); MSE + SGD"},
  };
  return table;
}

inline const WorkloadInfo* find_workload(const std::string& name) {
  for (const WorkloadInfo& w : workloads())
    if (name == w.name) return &w;
  return nullptr;
}

struct Args {
  std::string workload, mode;
  int calls = 10000;  // latency mode
  int threads = 1;
  int seq = 1024;
  bool seq_given = false;
  int iters = 0;  // 0: by time
  int warmup = 3;
  double min_time = 2.0, max_time = 5.0;
  int min_iters = 20, max_iters = 500;
  bool list = false;
  bool check = false;                    // torch_bench only
  std::string api = "keras";             // kiln_bench only: keras (predict / train_on_batch) or program
  bool sgemm = false;                    // kiln_bench only: time the workload's GEMMs with raw OpenBLAS
  int callers = 1;                       // threads running the forward at once
  std::string share = "one";             // with callers > 1: one model for all callers, or one each
  std::string quantize;                  // kiln_bench only: kiln::quantize(model, MODE) before timing ("int8")
  std::string policy;                    // kiln_bench only: kiln::set_dtype_policy(POLICY) before the model is made
  std::vector<std::string> passthrough;  // timing flags, handed to child processes in run-all mode
};

[[noreturn]] inline void usage_error(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  std::fprintf(stderr,
               "usage: %s --workload NAME --mode forward|train_step --threads N [--seq T] [--iters N] [--warmup N]\n"
               "       [--min-time S] [--max-time S] [--min-iters N] [--max-iters N]\n"
               "       %s --list\n",
               program, program);
  std::exit(2);
}

inline Args parse_args(int argc, char** argv, bool is_torch) {
  Args a;
  const char* program = argv[0];
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(program, std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto integer = [&](int& i, int low) {
    const std::string flag = argv[i], text = value(i);
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || v < low || v > 1000000)
      usage_error(program, flag + ": bad value '" + text + "'");
    return static_cast<int>(v);
  };
  auto seconds = [&](int& i) {
    const std::string flag = argv[i], text = value(i);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v >= 0)) usage_error(program, flag + ": bad value '" + text + "'");
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--workload")
      a.workload = value(i);
    else if (flag == "--mode")
      a.mode = value(i);
    else if (flag == "--threads")
      a.threads = integer(i, 1);
    else if (flag == "--seq")
      a.seq = integer(i, 1), a.seq_given = true;
    else if (flag == "--iters")
      a.iters = integer(i, 1), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--warmup")
      a.warmup = integer(i, 0), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--min-time")
      a.min_time = seconds(i), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--max-time")
      a.max_time = seconds(i), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--min-iters")
      a.min_iters = integer(i, 1), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--max-iters")
      a.max_iters = integer(i, 1), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--list")
      a.list = true;
    else if (flag == "--check" && is_torch)
      a.check = true;
    else if (flag == "--api" && !is_torch)
      a.api = value(i), a.passthrough.insert(a.passthrough.end(), {flag, argv[i]});
    else if (flag == "--sgemm" && !is_torch)
      a.sgemm = true, a.passthrough.push_back(flag);
    else if (flag == "--calls")
      a.calls = integer(i, 1);
    else if (flag == "--callers")
      a.callers = integer(i, 1);
    else if (flag == "--share")
      a.share = value(i);
    else if (flag == "--quantize" && !is_torch)
      a.quantize = value(i);
    else if (flag == "--policy" && !is_torch)
      a.policy = value(i);
    else
      usage_error(program, "unknown argument '" + flag + "'");
  }
  if (a.api != "keras" && a.api != "program") usage_error(program, "--api must be keras or program");
  if (a.share != "one" && a.share != "each") usage_error(program, "--share must be one or each");
  if (a.callers > 1 && (a.mode != "forward" || a.sgemm || a.api != "keras"))
    usage_error(program, "--callers takes --mode forward (through predict)");
  if (!a.workload.empty()) {
    const WorkloadInfo* w = find_workload(a.workload);
    if (w == nullptr) usage_error(program, "unknown workload '" + a.workload + "' (see --list)");
    if (a.mode.empty()) usage_error(program, "--mode forward|train_step is required with --workload");
    if (a.mode != "forward" && a.mode != "train_step" && a.mode != "generate" && a.mode != "latency")
      usage_error(program, "--mode must be forward, train_step, generate or latency");
    if (((a.mode == "forward" || a.mode == "latency") && !w->forward) || (a.mode == "train_step" && !w->train_step) ||
        (a.mode == "generate" && !w->generate))
      usage_error(program, a.workload + " has no " + a.mode + " mode (see --list)");
    if (a.seq_given && !w->has_seq) usage_error(program, "--seq applies to long_mha only");
  }
  return a;
}

inline void print_list() {
  for (const WorkloadInfo& w : workloads()) {
    std::string modes = w.forward ? "forward" : "";
    if (w.train_step) modes += modes.empty() ? "train_step" : ",train_step";
    if (w.generate) modes += modes.empty() ? "generate" : ",generate";
    std::printf("%-11s %-19s %s%s\n", w.name, modes.c_str(), w.what, w.has_seq ? " [--seq T, default 1024]" : "");
  }
}

// Every workload and mode in its own process (so each row's peak memory is its own): this binary again.
inline int run_all(const char* self_path, const Args& a) {
  int failures = 0;
  for (const WorkloadInfo& w : workloads()) {
    for (const char* mode : {"forward", "train_step", "generate"}) {
      if ((std::strcmp(mode, "forward") == 0 && !w.forward) || (std::strcmp(mode, "train_step") == 0 && !w.train_step) ||
          (std::strcmp(mode, "generate") == 0 && !w.generate))
        continue;
      std::vector<std::string> args = {
          self_path, "--workload", w.name, "--mode", mode, "--threads", std::to_string(a.threads)};
      if (w.has_seq) args.insert(args.end(), {"--seq", std::to_string(a.seq)});
      args.insert(args.end(), a.passthrough.begin(), a.passthrough.end());
      std::vector<char*> argv;
      for (std::string& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      std::fflush(stdout);
      pid_t pid = 0;
      if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
        std::perror("posix_spawn");
        return 1;
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

// A field of /proc/self/status in MB ("VmRSS", "VmHWM").
inline double status_mb(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.compare(0, key.size(), key) == 0) return std::atof(line.c_str() + key.size()) / 1024.0;
  return 0.0;
}

// Resets the process's peak resident size (VmHWM) to its current size (Linux's clear_refs "5"): a row that makes
// its model with random weights (which a model loaded from a file never draws) then measures the peak of what it
// times, the weights still counted.
inline void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Timing {
  double median_ms = 0, min_ms = 0;
  int iters = 0;
};

inline Timing time_steps(const Args& a, const std::function<void()>& step) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < a.warmup; ++i) step();
  std::vector<double> times;
  const auto start = Clock::now();
  for (;;) {
    const auto t0 = Clock::now();
    step();
    const auto t1 = Clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const int n = static_cast<int>(times.size());
    const double elapsed = std::chrono::duration<double>(t1 - start).count();
    if (a.iters > 0) {
      if (n >= a.iters) break;
    } else if (n >= a.max_iters || (elapsed >= a.min_time && n >= a.min_iters) || (elapsed >= a.max_time && n >= 3)) {
      break;
    }
  }
  Timing t;
  t.iters = static_cast<int>(times.size());
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  t.median_ms = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  t.min_ms = times.front();
  return t;
}

// latency mode: `call` (one sample's forward) 200 times untimed, then 10,000 times, each timed on its own.
struct Latency {
  double us_median = 0, us_p99 = 0;
  int calls = 0;
};

inline Latency time_calls(const std::function<void()>& call, int calls = 10000) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 200; ++i) call();
  std::vector<double> times(static_cast<std::size_t>(calls));
  for (double& time : times) {
    const auto t0 = Clock::now();
    call();
    time = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::sort(times.begin(), times.end());
  Latency l;
  l.calls = calls;
  l.us_median = times[times.size() / 2];
  l.us_p99 = times[times.size() * 99 / 100];
  return l;
}

// A latency result as a Timing (ms) for print_json, and its extra fields.
inline Timing latency_timing(const Latency& l) {
  Timing t;
  t.median_ms = l.us_median / 1000.0;
  t.min_ms = l.us_median / 1000.0;
  t.iters = l.calls;
  return t;
}
inline std::string latency_fields(const Latency& l) {
  char text[96];
  std::snprintf(text, sizeof text, ",\"us_median\":%.3f,\"us_p99\":%.3f", l.us_median, l.us_p99);
  return text;
}

inline void print_json(const char* impl, const Args& a, const Timing& t, double baseline_mb, double peak_mb,
                       const std::string& extra = "") {
  std::printf("{\"impl\":\"%s\",\"workload\":\"%s\",\"mode\":\"%s\",\"threads\":%d,", impl, a.workload.c_str(),
              a.mode.c_str(), a.threads);
  if (find_workload(a.workload)->has_seq) std::printf("\"seq\":%d,", a.seq);
  if (a.callers > 1) std::printf("\"callers\":%d,\"share\":\"%s\",", a.callers, a.share.c_str());
  if (!a.quantize.empty()) std::printf("\"quantize\":\"%s\",", a.quantize.c_str());
  if (!a.policy.empty()) std::printf("\"policy\":\"%s\",", a.policy.c_str());
  std::printf("\"ms_median\":%.4f,\"ms_min\":%.4f,\"iters\":%d,\"peak_rss_mb\":%.1f,\"baseline_rss_mb\":%.1f%s}\n",
              t.median_ms, t.min_ms, t.iters, peak_mb, baseline_mb, extra.c_str());
  std::fflush(stdout);
}

// `callers` threads that each run work(caller) once per step(), at the same time: caller 0 on the thread
// that calls step(), the others on threads of their own that wait, spinning, between steps. A step ends
// when every caller is done.
class Callers {
 public:
  Callers(int callers, std::function<void(int)> work) : work_(std::move(work)) {
    for (int caller = 1; caller < callers; ++caller)
      threads_.emplace_back([this, caller] {
        for (std::uint64_t seen = 0;;) {
          std::uint64_t now;
          while ((now = generation_.load(std::memory_order_acquire)) == seen) std::this_thread::yield();
          if (stopping_.load()) return;
          seen = now;
          work_(caller);
          remaining_.fetch_sub(1, std::memory_order_acq_rel);
        }
      });
  }
  ~Callers() {
    stopping_ = true;
    generation_.fetch_add(1);
    for (std::thread& thread : threads_) thread.join();
  }

  void step() {
    remaining_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    work_(0);
    while (remaining_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  std::function<void(int)> work_;
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace bench
