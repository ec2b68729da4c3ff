// The recurrent layers' one op family: a whole sequence through a SimpleRNN, LSTM or GRU cell, as Keras 3's
// cells compute it, and back through time.
//   Recurrent          x (B, T, I), kernel (I, G·U), recurrent_kernel (U, G·U), bias (G·U, or 2 × G·U for GRU with
//                      reset_after)[, h0 (B, U)[, c0 (B, U)]][, mask (B, T)][, recurrent_masks (B, G, U)]:
//                      a packed state, the outputs (what RecurrentOutput shows) then per step the records that
//                      backward needs (the states and the activated gates)
//   RecurrentOutput    state, x, kernel, recurrent_kernel, bias[, h0[, c0]]: the state's head, (B, S + T, U): the
//                      S final states (h; and c for LSTM), then the T outputs in processing order (the states
//                      first, so that they are found without knowing T). Differentiable:
//                      its backward is RecurrentGrad, which finds the masks on the Recurrent node
//   RecurrentGrad      state, output gradient, then Recurrent's inputs: back through time, into one flat buffer
//                      [dx | dkernel | drecurrent_kernel | dbias (| dh0 (| dc0))]
//   RecurrentGradPart  one of those, with its input's shape
// Without initial states the cell starts from zeros, as Keras's get_initial_state does.
// Forward, a step is one GEMM of B rows, [x_t | h]·[kernel; recurrent_kernel] (LSTM and SimpleRNN without
// recurrent dropout; the others take x_t·kernel and h·recurrent_kernel apart), then one pass over the rows for
// the input bias, the gates, the mask and the next step's [x_t | h]: the step's projections stay in cache.
// (One GEMM for every step's input projection before the loop left a (B·T, G·U) array bigger than the caches,
// which the gate pass then read a row a sequence apart: 80 % of that pass waited on one load.) Backward: each
// step's gate gradients, then one GEMM each for the recurrent kernel's gradient and the previous state's
// (against recurrent_kernelᵀ, made once), and after the loop one each for dx and dkernel. The gate gradients of
// all steps are laid out time-major, (T, B, G·U), as oneDNN's RNN keeps them, so that a step's are one block; x
// goes time-major for dkernel's GEMM, and dx comes back batch-major.
//
// Gate order is Keras's: LSTM [i | f | c | o], GRU [z | r | h]. GRU's bias is (2, 3U) with reset_after (input
// bias, then recurrent bias, the reset gate multiplying the recurrent part), (3U,) without (the reset gate
// multiplying h before its product). Masked steps (mask 0) keep the state and output the previous state, or
// zeros with zero_output_for_mask, as Keras's loop does. go_backwards reads x from the last step to the first
// and writes the outputs in that processing order, not reversed back. Recurrent dropout's masks (one per gate,
// fixed over time) multiply h in each gate's product, as Keras's implementation 1 does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/flat_parts.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

enum class Cell { simple_rnn, lstm, gru };
// The activations the cells take; each derivative is read from the activated value.
enum class Act { linear, tanh, sigmoid, relu, hard_sigmoid, hard_sigmoid_keras2 };

Cell cell_of(const std::string& name, const InferContext* ctx) {
  if (name == "simple_rnn") return Cell::simple_rnn;
  if (name == "lstm") return Cell::lstm;
  if (name == "gru") return Cell::gru;
  if (ctx) ctx->fail("cell must be 'simple_rnn', 'lstm' or 'gru', got '" + name + "'");
  throw ConfigError("recurrent: unknown cell '" + name + "'");
}

Act act_of(const std::string& name) {
  if (name == "linear" || name.empty()) return Act::linear;
  if (name == "tanh") return Act::tanh;
  if (name == "sigmoid") return Act::sigmoid;
  if (name == "relu") return Act::relu;
  if (name == "hard_sigmoid") return Act::hard_sigmoid;
  if (name == "hard_sigmoid_keras2") return Act::hard_sigmoid_keras2;
  throw ConfigError(
      "recurrent cells take the activations linear, tanh, sigmoid, relu, hard_sigmoid and hard_sigmoid_keras2, got '" +
      name + "'");
}

template <class T>
T apply(Act act, T x) {
  switch (act) {
    case Act::linear: return x;
    case Act::tanh: return std::tanh(x);
    case Act::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Act::relu: return x > T(0) ? x : (x != x ? x : T(0));
    case Act::hard_sigmoid: return std::clamp(x / T(6) + T(0.5), T(0), T(1));  // Keras 3's: relu6(x + 3) / 6
    case Act::hard_sigmoid_keras2: return std::clamp(T(0.2) * x + T(0.5), T(0), T(1));  // Keras 2's
  }
  return x;
}

// out[j] = act(in[j]) for n elements, in SIMD batches: the gates' transcendentals are most of a step's
// elementwise time (std::tanh and std::exp one at a time made the forward pass 2x libtorch's). Matches
// apply() to rounding; in and out may be the same array.
template <class T>
void activate(Act act, const T* in, T* out, std::int64_t n) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  std::int64_t j = 0;
  switch (act) {
    case Act::linear:
      if (in != out) std::copy(in, in + n, out);
      return;
    case Act::tanh:
      for (; j + lanes <= n; j += lanes) xsimd::tanh(Batch::load_unaligned(in + j)).store_unaligned(out + j);
      break;
    case Act::sigmoid:
      for (; j + lanes <= n; j += lanes)
        (Batch(T(1)) / (Batch(T(1)) + xsimd::exp(-Batch::load_unaligned(in + j)))).store_unaligned(out + j);
      break;
    case Act::relu:
    case Act::hard_sigmoid:
    case Act::hard_sigmoid_keras2:
      break;  // cheap: the scalar loop below (which keeps a NaN, as relu does)
  }
  for (; j < n; ++j) out[j] = apply(act, in[j]);
}

// One LSTM row's step with Keras's default activations (sigmoid gates, tanh candidate and output) in one pass
// over the units: the pre-activations `in` (x_t·kernel + h·recurrent_kernel, [i | f | c | o]) plus the bias, the
// activated gates, the new c, act(c) and the new h, each vector of units kept in registers from the first load
// to the last store (the separate passes, the bias add and three activations and two loops, read and wrote the
// step's projections four times: 14 % of an LSTM forward at 1 thread). The same formulas as activate() and
// cell_step; the last partial vector through apply(). The new h also goes to h_copy (the step's output and the
// next step's [x_t | h] row, when the row is not masked: a memcpy call each, 2.5 % of the forward) unless null.
template <class T>
void lstm_row_default(std::int64_t u, const T* __restrict in, const T* __restrict bias, const T* __restrict c_prev,
                      T* __restrict gates, T* __restrict new_c, T* __restrict act_c, T* __restrict new_h,
                      T* __restrict h_copy, T* __restrict h_copy2) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  const Batch one(T(1));
  const auto sigmoid = [&](const Batch& x) { return one / (one + xsimd::exp(-x)); };
  const auto pre = [&](int gate, std::int64_t j) {
    return Batch::load_unaligned(in + gate * u + j) + Batch::load_unaligned(bias + gate * u + j);
  };
  std::int64_t j = 0;
  for (; j + lanes <= u; j += lanes) {
    const Batch i = sigmoid(pre(0, j)), f = sigmoid(pre(1, j)), g = xsimd::tanh(pre(2, j)), o = sigmoid(pre(3, j));
    i.store_unaligned(gates + j);
    f.store_unaligned(gates + u + j);
    g.store_unaligned(gates + 2 * u + j);
    o.store_unaligned(gates + 3 * u + j);
    const Batch c = f * Batch::load_unaligned(c_prev + j) + i * g;
    c.store_unaligned(new_c + j);
    const Batch a = xsimd::tanh(c);
    a.store_unaligned(act_c + j);
    const Batch h = o * a;
    h.store_unaligned(new_h + j);
    if (h_copy) h.store_unaligned(h_copy + j);
    if (h_copy2) h.store_unaligned(h_copy2 + j);
  }
  for (; j < u; ++j) {
    const T i = apply(Act::sigmoid, in[j] + bias[j]), f = apply(Act::sigmoid, in[u + j] + bias[u + j]);
    const T g = apply(Act::tanh, in[2 * u + j] + bias[2 * u + j]), o = apply(Act::sigmoid, in[3 * u + j] + bias[3 * u + j]);
    gates[j] = i, gates[u + j] = f, gates[2 * u + j] = g, gates[3 * u + j] = o;
    new_c[j] = f * c_prev[j] + i * g;
    act_c[j] = apply(Act::tanh, new_c[j]);
    new_h[j] = o * act_c[j];
    if (h_copy) h_copy[j] = new_h[j];
    if (h_copy2) h_copy2[j] = new_h[j];
  }
}

// The derivative at the point whose activation is y.
template <class T>
T derivative(Act act, T y) {
  switch (act) {
    case Act::linear: return T(1);
    case Act::tanh: return T(1) - y * y;
    case Act::sigmoid: return y * (T(1) - y);
    case Act::relu: return y > T(0) ? T(1) : T(0);
    case Act::hard_sigmoid: return y > T(0) && y < T(1) ? T(1) / T(6) : T(0);
    case Act::hard_sigmoid_keras2: return y > T(0) && y < T(1) ? T(0.2) : T(0);
  }
  return T(1);
}

// The derivatives as functors the compiler inlines: tanh's and sigmoid's (the cells' defaults) as formulas it
// vectorizes, the others through the switch (a call per element, 8 % of an LSTM's train step when it was all).
struct TanhDerivative {
  template <class T>
  T operator()(T y) const { return T(1) - y * y; }
};
struct SigmoidDerivative {
  template <class T>
  T operator()(T y) const { return y * (T(1) - y); }
};
struct AnyDerivative {
  Act act;
  template <class T>
  T operator()(T y) const { return derivative(act, y); }
};

// body(d_act, d_recurrent_act) with the activations' derivatives.
template <class Body>
void with_derivatives(Act act, Act recurrent_act, const Body& body) {
  if (act == Act::tanh && recurrent_act == Act::sigmoid)
    body(TanhDerivative{}, SigmoidDerivative{});
  else
    body(AnyDerivative{act}, AnyDerivative{recurrent_act});
}

// One LSTM row's gate gradients (into dp, [di | df | dc | do]), the previous cell state's gradient, and the
// previous h's zeroed (the recurrent product's gradient adds into it), from the step's activated gates, act(c),
// c_prev and the gradients of the new c and h. The arrays do not overlap.
template <class T, class DA, class DR>
void lstm_row_grad(std::int64_t u, const T* __restrict gates, const T* __restrict act_c, const T* __restrict c_prev,
                   const T* __restrict dc_new, const T* __restrict dh_new, T* __restrict dp, T* __restrict dc_prev,
                   T* __restrict dh_prev, DA d_act, DR d_recurrent) {
  for (std::int64_t j = 0; j < u; ++j) {
    const T i = gates[j], f = gates[u + j], g = gates[2 * u + j], o = gates[3 * u + j];
    const T dcell = dc_new[j] + dh_new[j] * o * d_act(act_c[j]);
    dp[j] = dcell * g * d_recurrent(i);
    dp[u + j] = dcell * c_prev[j] * d_recurrent(f);
    dp[2 * u + j] = dcell * i * d_act(g);
    dp[3 * u + j] = dh_new[j] * act_c[j] * d_recurrent(o);
    dc_prev[j] = dcell * f;
    dh_prev[j] = T(0);
  }
}

// One GRU row's (with reset_after) gradients of its gates' pre-activations (dp, [dz | dr | dcandidate]) and of its
// recurrent products (dr, [dz | dr | dcandidate ∘ r]), and the previous h's (its direct part, to which the
// recurrent product's gradient adds), from the activated gates, the candidate's recurrent part, h_prev and dh.
template <class T, class DA, class DR>
void gru_row_grad(std::int64_t u, const T* __restrict gates, const T* __restrict recurrent_h,
                  const T* __restrict h_prev, const T* __restrict dh_new, T* __restrict dp, T* __restrict dr,
                  T* __restrict dh_prev, DA d_act, DR d_recurrent) {
  for (std::int64_t j = 0; j < u; ++j) {
    const T z = gates[j], reset = gates[u + j], candidate = gates[2 * u + j];
    const T dcandidate = dh_new[j] * (T(1) - z) * d_act(candidate);
    const T dz = dh_new[j] * (h_prev[j] - candidate) * d_recurrent(z);
    const T dreset = dcandidate * recurrent_h[j] * d_recurrent(reset);
    dp[j] = dz;
    dr[j] = dz;
    dp[u + j] = dreset;
    dr[u + j] = dreset;
    dp[2 * u + j] = dcandidate;
    dr[2 * u + j] = dcandidate * reset;
    dh_prev[j] = dh_new[j] * z;
  }
}

// Everything the kernels need to know, from the attributes and the shapes (batch and steps may be unknown
// while a graph is built; the kernels see concrete ones).
struct Setup {
  Cell cell = Cell::lstm;
  Act act = Act::tanh, recurrent_act = Act::sigmoid;
  bool reset_after = true, go_backwards = false, zero_output = false;
  bool has_initial = false, has_mask = false, has_recurrent_masks = false;
  bool records = true;  // every step's records (for backward), or only the last two steps' (inference)
  std::int64_t batch = 0, steps = 0, features = 0, units = 0;
  int gates = 1, states = 1;

  std::int64_t width() const { return gates * units; }  // G·U, a row of the projections
  // Recurrent's inputs: x, kernel, recurrent_kernel, bias[, h0[, c0]][, mask][, recurrent_masks].
  int initial(int which) const { return 4 + which; }
  int mask() const { return 4 + (has_initial ? states : 0); }
  int recurrent_masks() const { return mask() + (has_mask ? 1 : 0); }
  int num_inputs() const { return recurrent_masks() + (has_recurrent_masks ? 1 : 0); }
  // The differentiable ones, which are the gradient's parts.
  int num_parts() const { return 4 + (has_initial ? states : 0); }
  bool recurrent_bias() const { return cell == Cell::gru && reset_after; }

  // The state: the head (B, S + T, U), then per step the records, each of (B, U) planes: h (the state after
  // the step); for LSTM c; then the activated gates as one (B, G·U) plane; then one more (B, U) plane: for LSTM
  // act(c) of the step's new cell state, for GRU with reset_after the recurrent part of the candidate
  // (h·U_h + its bias), without it r ∘ h (the left operand of the candidate's product).
  std::int64_t area() const { return batch * units; }
  std::int64_t head_size() const { return batch * (steps + states) * units; }
  std::int64_t h_plane() const { return 0; }
  std::int64_t c_plane() const { return area(); }
  std::int64_t gate_plane() const { return (cell == Cell::lstm ? 2 : 1) * area(); }
  std::int64_t aux_plane() const { return gate_plane() + gates * area(); }
  std::int64_t record_size() const { return aux_plane() + (cell == Cell::simple_rnn ? 0 : area()); }
  // Without records, two slots take turns: step k reads step k - 1's states from the other one.
  std::int64_t record_slots() const { return records ? steps : std::min<std::int64_t>(steps, 2); }
  std::int64_t state_size() const { return head_size() + record_slots() * record_size(); }
};

// From the attributes, x's shape and the recurrent kernel's (the op's inputs 0 and 2). Kernels call this each
// run, so it must not allocate.
Setup setup_of(const Attributes& attributes, const Shape& x, const Shape& recurrent_kernel) {
  Setup s;
  s.cell = cell_of(attributes.get_string("cell"), nullptr);
  s.act = act_of(attributes.get_string("activation"));
  s.recurrent_act = act_of(attributes.get_string("recurrent_activation"));
  s.reset_after = attributes.get_bool("reset_after");
  s.go_backwards = attributes.get_bool("go_backwards");
  s.zero_output = attributes.get_bool("zero_output_for_mask");
  s.has_initial = attributes.get_bool("has_initial_state");
  s.has_mask = attributes.get_bool("has_mask");
  s.has_recurrent_masks = attributes.get_bool("has_recurrent_masks");
  s.records = attributes.get_bool("records");
  s.gates = s.cell == Cell::lstm ? 4 : s.cell == Cell::gru ? 3 : 1;
  s.states = s.cell == Cell::lstm ? 2 : 1;
  if (x.rank() == 3) {
    s.batch = x[0];
    s.steps = x[1];
    s.features = x[2];
  }
  if (recurrent_kernel.rank() >= 1) s.units = recurrent_kernel.dim(0);
  return s;
}

// The setup of a node whose inputs from `first` on are Recurrent's.
Setup setup_of(const KernelContext& k, int first) {
  return setup_of(k.attributes(), *k.input_shapes[first], *k.input_shapes[first + 2]);
}

Setup setup_of(const std::vector<Shape>& inputs, int first, const Attributes& attributes) {
  const auto at = static_cast<std::size_t>(first);
  return setup_of(attributes, inputs[at], inputs[at + 2]);
}

// ---- shape rules ---------------------------------------------------------------------------------------------

bool fits(std::int64_t dim, std::int64_t wanted) {
  return dim == wanted || dim == Shape::unknown || wanted == Shape::unknown;
}

[[noreturn]] void fail_recurrent(const InferContext& ctx, int first, const std::string& what) {
  static const char* names[] = {"x", "kernel", "recurrent_kernel", "bias"};
  std::string shapes;
  for (int i = first; i < ctx.num_inputs(); ++i) {
    const int position = i - first;
    shapes += (shapes.empty() ? "" : ", ") +
              (position < 4 ? std::string(names[position]) : "input " + std::to_string(position)) + "=" +
              ctx.input_shape(i).to_string();
  }
  ctx.fail_with(what + " (" + shapes + ")");
}

// Recurrent's inputs, from `first` on, checked against each other (with_masks: the mask inputs are there too).
Setup check_inputs(const InferContext& ctx, int first, bool with_masks) {
  cell_of(ctx.attributes().get_string("cell"), &ctx);
  std::vector<const Shape*> shapes;
  for (int i = first; i < ctx.num_inputs(); ++i) shapes.push_back(&ctx.input_shape(i));
  if (shapes.size() < 4) ctx.fail("needs x, kernel, recurrent_kernel and bias");
  Setup s;
  try {
    s = setup_of(ctx.attributes(), ctx.input_shape(first), ctx.input_shape(first + 2));
  } catch (const ConfigError& error) {
    ctx.fail(error.what());
  }
  const int expected = with_masks ? s.num_inputs() : s.num_parts();
  if (static_cast<int>(shapes.size()) != expected)
    fail_recurrent(ctx, first, "takes " + std::to_string(expected) + " inputs for this cell and these options");
  const Shape& x = *shapes[0];
  const Shape& kernel = *shapes[1];
  const Shape& recurrent = *shapes[2];
  if (x.rank() != 3) fail_recurrent(ctx, first, "x must be (batch, steps, features)");
  if (recurrent.rank() != 2 || recurrent[1] != s.width() || s.units == Shape::unknown)
    fail_recurrent(ctx, first, "recurrent_kernel must be (units, gates · units)");
  if (kernel.rank() != 2 || !fits(kernel[0], x[2]) || kernel[1] != s.width())
    fail_recurrent(ctx, first, "kernel must be (features, gates · units), with x's features");
  const Shape expected_bias = s.recurrent_bias() ? Shape{2, s.width()} : Shape{s.width()};
  if (*shapes[3] != expected_bias)
    fail_recurrent(ctx, first, "bias must be " + expected_bias.to_string() + " for this cell");
  for (int which = 0; s.has_initial && which < s.states; ++which) {
    const Shape& initial = *shapes[static_cast<std::size_t>(s.initial(which))];
    if (initial.rank() != 2 || initial[1] != s.units || !fits(initial[0], x[0]))
      fail_recurrent(ctx, first, "an initial state must be (batch, units)");
  }
  if (!with_masks) return s;
  if (s.has_mask) {
    const Shape& mask = *shapes[static_cast<std::size_t>(s.mask())];
    if (mask.rank() != 2 || !fits(mask[0], x[0]) || !fits(mask[1], x[1]))
      fail_recurrent(ctx, first, "the mask must be (batch, steps)");
  }
  if (s.has_recurrent_masks) {
    const Shape& masks = *shapes[static_cast<std::size_t>(s.recurrent_masks())];
    if (masks.rank() != 3 || !fits(masks[0], x[0]) || masks[1] != s.gates || masks[2] != s.units)
      fail_recurrent(ctx, first, "the recurrent dropout masks must be (batch, gates, units)");
  }
  return s;
}

Shape state_shape(const InferContext& ctx) {
  const Setup s = check_inputs(ctx, 0, true);
  if (s.batch == Shape::unknown || s.steps == Shape::unknown) return Shape{Shape::unknown};
  return Shape{s.state_size()};
}

Shape output_shape(const InferContext& ctx) {
  const Setup s = check_inputs(ctx, 1, false);
  const std::int64_t length = s.steps == Shape::unknown ? Shape::unknown : s.steps + s.states;
  return Shape{s.batch, length, s.units};
}

Shape grad_shape(const InferContext& ctx) {
  const Setup s = check_inputs(ctx, 2, true);
  const Shape expected_grad{s.batch, s.steps == Shape::unknown ? Shape::unknown : s.steps + s.states, s.units};
  const Shape& output_grad = ctx.input_shape(1);
  if (output_grad.rank() != 3 || !fits(output_grad[0], s.batch) || !fits(output_grad[1], expected_grad[1]) ||
      output_grad[2] != s.units)
    ctx.fail("the output gradient must have the output's shape " + expected_grad.to_string() + ", got " +
             output_grad.to_string());
  std::int64_t total = 0;
  for (int part = 0; part < s.num_parts(); ++part) {
    const Shape& input = ctx.input_shape(2 + part);
    if (!input.is_fully_defined()) return Shape{Shape::unknown};
    total += input.num_elements();
  }
  return Shape{total};
}

Shape grad_part_shape(const InferContext& ctx) {
  const std::int64_t part = ctx.attributes().get_int("part");
  if (part < 0 || part + 1 >= ctx.num_inputs()) ctx.fail("no gradient part " + std::to_string(part));
  return ctx.input_shape(1 + static_cast<int>(part));
}

// ---- shared by both passes --------------------------------------------------------------------------------

// C (rows × cols) = op(A) · op(B), or += with accumulate.
template <class T>
void product(std::int64_t rows, std::int64_t cols, std::int64_t inner, const T* a, std::int64_t lda, bool ta,
             const T* b, std::int64_t ldb, bool tb, T* c, std::int64_t ldc, bool accumulate) {
  if (rows == 0 || cols == 0) return;
  if (inner == 0) {
    if (!accumulate)
      for (std::int64_t r = 0; r < rows; ++r) std::fill(c + r * ldc, c + r * ldc + cols, T(0));
    return;
  }
  detail::gemm({rows, cols, inner, ta, tb, lda, ldb, ldc, accumulate}, a, b, c);
}

// The rows of B split over workers, for the elementwise work of one step (cost: operations per element).
template <class Body>
void for_rows(const Setup& s, std::int64_t cost, const Body& body) {
  detail::parallel_for(s.batch, detail::workers_for_elements(s.area(), cost),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t b = begin; b < end; ++b) body(b);
                       });
}

// The fewest rows a worker's block takes in for_row_blocks (its products' rows).
constexpr std::int64_t block_min_rows = 8;

// Rows of B are independent through a whole sequence: body(begin, end) runs every step on rows [begin, end), one
// block a worker, each at least block_min_rows rows and a share of the sequence's `work` operations. The threads
// meet once, when the sequence ends.
template <class Body>
void for_row_blocks(const Setup& s, std::int64_t work, const Body& body) {
  const int workers = static_cast<int>(
      std::min<std::int64_t>(std::max<std::int64_t>(1, s.batch / block_min_rows), detail::workers_for_elements(work)));
  detail::parallel_for(s.batch, workers, [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}

// out[j] = the sum of column j of `rows` rows of `width`. Each worker owns a block of columns and walks the rows in
// order, adding each row's block at once: contiguous reads (a column at a time strode a whole row per element, 18 %
// of an LSTM's train step), and each column still sums its rows first to last.
template <class T>
void column_sums(const T* data, std::int64_t rows, std::int64_t width, T* out) {
  detail::parallel_for(width, detail::workers_for_elements(rows * width), [&](std::int64_t begin, std::int64_t end, int) {
    std::fill(out + begin, out + end, T(0));
    for (std::int64_t row = 0; row < rows; ++row) {
      const T* from = data + row * width;
      for (std::int64_t j = begin; j < end; ++j) out[j] += from[j];
    }
  });
}

// A view of the inputs and the state that both passes read.
template <class T>
struct Sequence {
  Setup s;
  const T *x, *kernel, *recurrent, *bias, *mask, *recurrent_masks;
  const T* initial[2];
  const T* zeros;  // (B, U) of zeros, the initial state when none is given

  Sequence(const Setup& setup, const KernelContext& k, int first, const T* zero_state) : s(setup), zeros(zero_state) {
    x = k.in<T>(first);
    kernel = k.in<T>(first + 1);
    recurrent = k.in<T>(first + 2);
    bias = k.in<T>(first + 3);
    for (int which = 0; which < 2; ++which)
      initial[which] = s.has_initial && which < s.states ? k.in<T>(first + s.initial(which)) : zeros;
    mask = s.has_mask ? k.in<T>(first + s.mask()) : nullptr;
    recurrent_masks = s.has_recurrent_masks ? k.in<T>(first + s.recurrent_masks()) : nullptr;
  }

  std::int64_t time_of(std::int64_t k) const { return s.go_backwards ? s.steps - 1 - k : k; }
  bool kept(std::int64_t b, std::int64_t t) const { return !s.has_mask || mask[b * s.steps + t] != T(0); }
  // Gate `gate`'s recurrent dropout mask for row b.
  const T* recurrent_mask(std::int64_t b, int gate) const { return recurrent_masks + (b * s.gates + gate) * s.units; }
};

// The records of step k in the state, and the states before step k (the initial ones for k = 0).
template <class T>
struct Records {
  const Setup& s;
  T* state;
  const T* initial[2];

  T* head(std::int64_t b, std::int64_t position) const {
    return state + (b * (s.steps + s.states) + position) * s.units;
  }
  T* record(std::int64_t k) const { return state + s.head_size() + (k % s.record_slots()) * s.record_size(); }
  const T* previous(std::int64_t k, int which) const {  // h (0) or c (1) before step k
    return k == 0 ? initial[which] : record(k - 1) + (which == 0 ? s.h_plane() : s.c_plane());
  }
};

// from (outer, inner, F) into to (inner, outer, F): x (B, T, F) into time-major rows and back.
template <class T>
void swap_leading(const T* from, T* to, std::int64_t outer, std::int64_t inner, std::int64_t features) {
  const auto bytes = static_cast<std::size_t>(features) * sizeof(T);
  detail::parallel_for(inner, detail::workers_for_elements(outer * inner * features),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t i = begin; i < end; ++i)
                           for (std::int64_t o = 0; o < outer; ++o)
                             std::memcpy(to + (i * outer + o) * features, from + (o * inner + i) * features, bytes);
                       });
}

// Whether x must be copied to be time-major (one step or one sequence is already both).
bool needs_swap(const Setup& s) { return s.batch > 1 && s.steps > 1; }

// left (B, U) under gate `gate`'s recurrent dropout mask, into target; or left itself without masks.
template <class T>
const T* masked_rows(const Sequence<T>& q, const T* left, int gate, T* target) {
  if (!q.s.has_recurrent_masks) return left;
  const std::int64_t u = q.s.units;
  for (std::int64_t b = 0; b < q.s.batch; ++b) {
    const T* m = q.recurrent_mask(b, gate);
    for (std::int64_t j = 0; j < u; ++j) target[b * u + j] = left[b * u + j] * m[j];
  }
  return target;
}

// ---- forward --------------------------------------------------------------------------------------------

// LSTM and SimpleRNN without recurrent dropout take one product a step, [x_t | h]·[kernel; recurrent_kernel],
// and one pass over the rows for the rest of the step (the gates, the mask, the next step's [x_t | h]), each
// worker on a block of rows for the whole sequence (Forward::run_joined).
bool joined(const Setup& s) {
  return (s.cell == Cell::lstm || s.cell == Cell::simple_rnn) && !s.has_recurrent_masks;
}

// Workspace: one step's projections (B, G·U), its recurrent products (B, G·U), h under a gate's dropout mask
// (B, U), the zero state (B, U); when joined, [x_t | h] (B, F + U) and [kernel; recurrent_kernel] (F + U, G·U).
std::int64_t forward_workspace_elements(const Setup& s) {
  return 2 * s.batch * s.width() + 2 * s.area() +
         (joined(s) ? (s.batch + s.width()) * (s.features + s.units) : 0);
}

template <class T>
struct Forward {
  const Sequence<T>& q;
  const Setup& s;
  Records<T> r;
  T* projected;  // (B, G·U): this step's x·kernel + the input bias (and for all but GRU with reset_after, + h·recurrent)
  T* step;       // (B, G·U): this step's recurrent products (GRU with reset_after)
  T* gated_h;    // (B, U)
  T* inputs;     // joined: (B, F + U), [x_t | h]
  T* weights;    // joined: (F + U, G·U), [kernel; recurrent_kernel]

  // Step k's projections: the input bias, then x_t·kernel added (x_t's rows a sequence apart in x).
  T* project(std::int64_t k) {
    const std::int64_t width = s.width();
    for (std::int64_t b = 0; b < s.batch; ++b)
      std::memcpy(projected + b * width, q.bias, static_cast<std::size_t>(width) * sizeof(T));
    product(s.batch, width, s.features, q.x + q.time_of(k) * s.features, s.steps * s.features, false, q.kernel, width,
            false, projected, width, true);
    return projected;
  }

  // target's gate blocks [first, last) (= or +=) h·recurrent_kernel's, each with h under that gate's dropout mask.
  void recurrent_product(const T* h, int first, int last, T* target, bool accumulate) {
    const std::int64_t width = s.width(), u = s.units;
    if (!s.has_recurrent_masks && first == 0 && last == s.gates) {
      product(s.batch, width, u, h, u, false, q.recurrent, width, false, target, width, accumulate);
      return;
    }
    for (int gate = first; gate < last; ++gate)
      product(s.batch, u, u, masked_rows(q, h, gate, gated_h), u, false, q.recurrent + gate * u, width, false,
              target + gate * u, width, accumulate);
  }

  void run() {
    if (joined(s))
      run_joined();
    else
      run_apart();
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (int which = 0; which < s.states; ++which)
        std::memcpy(r.head(b, which), r.previous(s.steps, which) + b * s.units,
                    static_cast<std::size_t>(s.units) * sizeof(T));
  }

  // Rows of B are independent through the whole sequence (row b's states depend only on row b's inputs), so
  // each worker takes a block of rows and runs every step on it alone: one product a step on its rows and the
  // gate pass in cache, and no meeting of the threads until the sequence ends (two a step, product then gates,
  // when the rows of every step were split afresh: the 2-thread LSTM forward spent them waiting).
  void run_joined() {
    const std::int64_t f = s.features, u = s.units, width = s.width(), ld = f + u;
    std::memcpy(weights, q.kernel, static_cast<std::size_t>(f * width) * sizeof(T));
    std::memcpy(weights + f * width, q.recurrent, static_cast<std::size_t>(u * width) * sizeof(T));
    // Row b of [x_t | h] for step k: x at the step's time, and h before it.
    const auto fill_inputs = [&](std::int64_t k, std::int64_t b) {
      std::memcpy(inputs + b * ld, q.x + (b * s.steps + q.time_of(k)) * f, static_cast<std::size_t>(f) * sizeof(T));
      std::memcpy(inputs + b * ld + f, r.previous(k, 0) + b * u, static_cast<std::size_t>(u) * sizeof(T));
    };
    if (s.steps == 0) return;  // (no x to read: the states stay the initial ones)
    const bool default_lstm = s.cell == Cell::lstm && s.act == Act::tanh && s.recurrent_act == Act::sigmoid;
    for_row_blocks(s, s.batch * s.steps * width * (ld + 4 * s.gates), [&](std::int64_t begin, std::int64_t end) {
      const std::int64_t rows = end - begin;
      for (std::int64_t b = begin; b < end; ++b) fill_inputs(0, b);
      for (std::int64_t k = 0; k < s.steps; ++k) {
        product(rows, width, ld, inputs + begin * ld, ld, false, weights, width, false, projected + begin * width,
                width, false);
        for (std::int64_t b = begin; b < end; ++b) {
          if (default_lstm && q.kept(b, q.time_of(k))) {
            // The new h straight into the output and the next step's inputs, where finish_step and fill_inputs
            // would copy it.
            T* next = k + 1 < s.steps ? inputs + b * ld + f : nullptr;
            default_lstm_step(k, b, r.head(b, s.states + k), next);
            if (next)
              std::memcpy(inputs + b * ld, q.x + (b * s.steps + q.time_of(k + 1)) * f,
                          static_cast<std::size_t>(f) * sizeof(T));
            continue;
          }
          if (default_lstm) {
            default_lstm_step(k, b, nullptr, nullptr);
          } else {
            T* row = projected + b * width;
            for (std::int64_t j = 0; j < width; ++j) row[j] += q.bias[j];
            cell_step(k, b);
          }
          finish_step(k, b);
          if (k + 1 < s.steps) fill_inputs(k + 1, b);
        }
      }
    });
  }

  void run_apart() {
    // Without recurrent dropout (whose masked copies of h are made for all rows at once) and but for GRU without
    // reset_after (two products a step with a pass between), a step's work is its rows' alone: each worker takes a
    // block of rows for the whole sequence, as in run_joined.
    if (!s.has_recurrent_masks && !(s.cell == Cell::gru && !s.reset_after)) {
      for_row_blocks(s, s.batch * s.steps * s.width() * (s.features + s.units + 4 * s.gates),
                     [&](std::int64_t begin, std::int64_t end) { run_rows(begin, end); });
      return;
    }
    for (std::int64_t k = 0; k < s.steps; ++k) {
      const T* h = r.previous(k, 0);
      T* block = project(k);
      if (s.cell == Cell::gru && !s.reset_after) {
        gru_reset_before(k, h);
        for_rows(s, 1, [&](std::int64_t b) { finish_step(k, b); });
        continue;
      }
      // GRU with reset_after keeps the recurrent part apart (the reset gate multiplies the candidate's); the
      // others add it into the step's projections.
      if (s.cell == Cell::gru)
        recurrent_product(h, 0, s.gates, step, false);
      else
        recurrent_product(h, 0, s.gates, block, true);
      for_rows(s, 4 * s.gates + 1, [&](std::int64_t b) {
        cell_step(k, b);
        finish_step(k, b);
      });
    }
  }

  // Rows [begin, end) through every step, on the calling thread: the input bias and x_t·kernel, the recurrent
  // product (apart for GRU with reset_after, added in for the others), then the rows' gates.
  void run_rows(std::int64_t begin, std::int64_t end) {
    const std::int64_t rows = end - begin, width = s.width(), u = s.units;
    T* block = projected + begin * width;
    for (std::int64_t k = 0; k < s.steps; ++k) {
      for (std::int64_t b = begin; b < end; ++b)
        std::memcpy(projected + b * width, q.bias, static_cast<std::size_t>(width) * sizeof(T));
      product(rows, width, s.features, q.x + (begin * s.steps + q.time_of(k)) * s.features, s.steps * s.features,
              false, q.kernel, width, false, block, width, true);
      const T* h = r.previous(k, 0) + begin * u;
      if (s.cell == Cell::gru)
        product(rows, width, u, h, u, false, q.recurrent, width, false, step + begin * width, width, false);
      else
        product(rows, width, u, h, u, false, q.recurrent, width, false, block, width, true);
      for (std::int64_t b = begin; b < end; ++b) {
        cell_step(k, b);
        finish_step(k, b);
      }
    }
  }

  // Row b's new state, before masking, and the gates into step k's records: each gate's activation of its
  // pre-activations (for GRU with reset_after, the input part plus the recurrent part).
  void cell_step(std::int64_t k, std::int64_t b) {
    const std::int64_t u = s.units, width = s.width();
    const T* in = projected + b * width;
    T* out = r.record(k);
    T* gates = out + s.gate_plane() + b * width;
    T* new_h = out + s.h_plane() + b * u;
    if (s.cell == Cell::simple_rnn) {
      activate(s.act, in, gates, u);
      std::copy(gates, gates + u, new_h);
    } else if (s.cell == Cell::lstm) {
      activate(s.recurrent_act, in, gates, 2 * u);  // i, f
      activate(s.act, in + 2 * u, gates + 2 * u, u);  // c
      activate(s.recurrent_act, in + 3 * u, gates + 3 * u, u);  // o
      const T* c_prev = r.previous(k, 1) + b * u;
      T* new_c = out + s.c_plane() + b * u;
      T* act_c = out + s.aux_plane() + b * u;
      for (std::int64_t j = 0; j < u; ++j) new_c[j] = gates[u + j] * c_prev[j] + gates[j] * gates[2 * u + j];
      activate(s.act, new_c, act_c, u);
      for (std::int64_t j = 0; j < u; ++j) new_h[j] = gates[3 * u + j] * act_c[j];
    } else {  // GRU with reset_after: the recurrent bias joins the recurrent part, which r multiplies
      const T* rec = step + b * width;
      const T* recurrent_bias = q.bias + width;
      const T* h_prev = r.previous(k, 0) + b * u;
      T* recurrent_h = out + s.aux_plane() + b * u;
      for (std::int64_t j = 0; j < 2 * u; ++j) gates[j] = in[j] + rec[j] + recurrent_bias[j];
      activate(s.recurrent_act, gates, gates, 2 * u);  // z, r
      for (std::int64_t j = 0; j < u; ++j) {
        recurrent_h[j] = rec[2 * u + j] + recurrent_bias[2 * u + j];
        gates[2 * u + j] = in[2 * u + j] + gates[u + j] * recurrent_h[j];
      }
      activate(s.act, gates + 2 * u, gates + 2 * u, u);  // the candidate
      for (std::int64_t j = 0; j < u; ++j) new_h[j] = gates[j] * h_prev[j] + (T(1) - gates[j]) * gates[2 * u + j];
    }
  }

  // cell_step for an LSTM with the default activations, the input bias added in the same pass.
  // (h_copy, h_copy2: where else the new h goes, or null.)
  void default_lstm_step(std::int64_t k, std::int64_t b, T* h_copy, T* h_copy2) {
    const std::int64_t u = s.units;
    T* out = r.record(k);
    lstm_row_default(u, projected + b * s.width(), q.bias, r.previous(k, 1) + b * u, out + s.gate_plane() + b * s.width(),
                     out + s.c_plane() + b * u, out + s.aux_plane() + b * u, out + s.h_plane() + b * u, h_copy, h_copy2);
  }

  // GRU without reset_after: z and r from h·U_z and h·U_r, then the candidate from (r ∘ h)·U_h.
  void gru_reset_before(std::int64_t k, const T* h) {
    const std::int64_t u = s.units, width = s.width();
    T* out = r.record(k);
    T* reset_h = out + s.aux_plane();
    T* projections = projected;  // the recurrent products are added into it
    recurrent_product(h, 0, 2, projections, true);
    for_rows(s, 8, [&](std::int64_t b) {
      const T* in = projections + b * width;
      T* gates = out + s.gate_plane() + b * width;
      activate(s.recurrent_act, in, gates, 2 * u);  // z, r
      for (std::int64_t j = 0; j < u; ++j) reset_h[b * u + j] = gates[u + j] * h[b * u + j];
    });
    product(s.batch, u, u, masked_rows(q, static_cast<const T*>(reset_h), 2, gated_h), u, false, q.recurrent + 2 * u,
            width, false, projections + 2 * u, width, true);
    for_rows(s, 6, [&](std::int64_t b) {
      const T* in = projections + b * width;
      T* gates = out + s.gate_plane() + b * width;
      T* new_h = out + s.h_plane() + b * u;
      activate(s.act, in + 2 * u, gates + 2 * u, u);  // the candidate
      for (std::int64_t j = 0; j < u; ++j) new_h[j] = gates[j] * h[b * u + j] + (T(1) - gates[j]) * gates[2 * u + j];
    });
  }

  // The mask, then the step's output: a masked row keeps its states and outputs the previous h (or zeros).
  void finish_step(std::int64_t k, std::int64_t b) {
    const std::int64_t u = s.units;
    const auto bytes = static_cast<std::size_t>(u) * sizeof(T);
    T* out = r.record(k);
    T* output = r.head(b, s.states + k);
    if (q.kept(b, q.time_of(k))) {
      std::memcpy(output, out + s.h_plane() + b * u, bytes);
      return;
    }
    const T* h_prev = r.previous(k, 0) + b * u;
    std::memcpy(out + s.h_plane() + b * u, h_prev, bytes);
    if (s.cell == Cell::lstm) std::memcpy(out + s.c_plane() + b * u, r.previous(k, 1) + b * u, bytes);
    if (s.zero_output)
      std::fill(output, output + u, T(0));
    else
      std::memcpy(output, h_prev, bytes);
  }
};

template <class T>
void recurrent_kernel(const KernelContext& context) {
  const Setup s = setup_of(context, 0);
  T* projected = context.scratch<T>();
  T* step = projected + s.batch * s.width();
  T* gated_h = step + s.batch * s.width();
  T* zeros = gated_h + s.area();
  T* inputs = zeros + s.area();
  T* weights = inputs + s.batch * (s.features + s.units);
  std::fill(zeros, zeros + s.area(), T(0));
  const Sequence<T> q(s, context, 0, zeros);
  Forward<T> forward{q,     q.s,     {q.s, context.out<T>(), {q.initial[0], q.initial[1]}}, projected, step, gated_h,
                     inputs, weights};
  forward.run();
}

// ---- backward through time -------------------------------------------------------------------------------

// Workspace: the gradients of every step's input projections (T·B, G·U); one step's gradients of its
// recurrent products (B, G·U); dh, dc and the previous step's dh and dc (B, U each); two (B, U) temporaries;
// the zero state (B, U); when x is not already time-major, x and then dx time-major (T·B, F); and
// recurrent_kernelᵀ (G·U, U).
// Whether the backward walks the steps a block of rows per worker (Backward::run_rows): everything a step does is
// its rows' own but the recurrent kernel's gradient, which is then one product after the loop, over every step's
// previous h (kept time-major) and the recurrent products' gradients (dprojected's, or for GRU with reset_after
// every step's own). Not with recurrent dropout (h under each gate's mask), nor GRU without reset_after.
bool rows_backward(const Setup& s) { return !s.has_recurrent_masks && !(s.cell == Cell::gru && !s.reset_after); }

std::int64_t backward_workspace_elements(const Setup& s) {
  const std::int64_t rows = s.batch * s.steps;
  return rows * s.width() + s.batch * s.width() + 7 * s.area() + (needs_swap(s) ? rows * s.features : 0) +
         s.width() * s.units +
         (rows_backward(s) ? rows * s.units + (s.recurrent_bias() ? rows * s.width() : 0) : 0);
}

template <class T>
struct Backward {
  const Sequence<T>& q;
  const Setup& s;
  Records<const T> r;
  const T* output_grad;  // (B, S + T, U), the head's layout
  T *dx, *dkernel, *drecurrent, *dbias, *dinitial[2];
  T* dprojected;  // (T·B, G·U): the gradient of each step's input projection (pre-activations), row t·B + b
  T* drec;        // (B, G·U): of this step's recurrent products (GRU with reset_after; else dprojected's rows)
  T *dh, *dc, *dh_prev, *dc_prev, *temp, *gated;
  T* x_major;  // (T·B, F), when needs_swap: x, then dx, time-major
  T* recurrent_t;  // (G·U, U): recurrent_kernelᵀ, so that each step's dh_prev = dR·recurrent_kernelᵀ is a product
                   // libxsmm has a kernel for (its 1.17 has none for a transposed right operand; OpenBLAS packed
                   // both operands on every call, a sixth of an LSTM's train step)
  T* h_major;   // rows_backward: (T·B, U), row t·B + b the h step t started from
  T* drec_all;  // rows_backward with GRU's reset_after: (T·B, G·U), every step's drec

  const T* dout(std::int64_t b, std::int64_t position) const {
    return output_grad + (b * (s.steps + s.states) + position) * s.units;
  }

  void run() {
    const std::int64_t u = s.units, width = s.width();
    detail::parallel_for(width, detail::workers_for_elements(width * u), [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t j = begin; j < end; ++j)
        for (std::int64_t i = 0; i < u; ++i) recurrent_t[j * u + i] = q.recurrent[i * width + j];
    });
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (int which = 0; which < s.states; ++which)
        std::memcpy((which == 0 ? dh : dc) + b * u, dout(b, which),
                    static_cast<std::size_t>(u) * sizeof(T));
    if (rows_backward(s)) {
      run_rows();  // (which writes drecurrent and the recurrent bias's gradient whole)
    } else {
      std::fill(drecurrent, drecurrent + u * width, T(0));
      if (s.recurrent_bias()) std::fill(dbias + width, dbias + 2 * width, T(0));
      for (std::int64_t k = s.steps - 1; k >= 0; --k) {
        if (s.cell == Cell::gru && !s.reset_after)
          gru_reset_before(k);
        else
          step(k);
        std::swap(dh, dh_prev);
        std::swap(dc, dc_prev);
      }
    }
    // After the loop: dkernel = xᵀ·dP, dx = dP·kernelᵀ (both time-major, dx made batch-major after), the input
    // bias's gradient the columns' sums of dP.
    const std::int64_t rows = s.batch * s.steps;
    const bool swap = needs_swap(s);
    if (swap) swap_leading(q.x, x_major, s.batch, s.steps, s.features);
    product(s.features, width, rows, swap ? x_major : q.x, s.features, true, dprojected, width, false, dkernel, width,
            false);
    product(rows, s.features, width, dprojected, width, false, q.kernel, width, true, swap ? x_major : dx, s.features,
            false);
    if (swap) swap_leading(static_cast<const T*>(x_major), dx, s.steps, s.batch, s.features);
    column_sums(static_cast<const T*>(dprojected), rows, width, dbias);
    for (int which = 0; s.has_initial && which < s.states; ++which)
      std::memcpy(dinitial[which], which == 0 ? dh : dc, static_cast<std::size_t>(s.area()) * sizeof(T));
  }

  // Row b's gradient with respect to the step's new h: what flows back from later steps, and the step's
  // output's own gradient when the row was kept. A masked row passes both to the previous state and has no
  // gate gradients. Returns whether the row was kept.
  bool enter_row(std::int64_t k, std::int64_t b, T* dh_new) {
    return enter_row(k, b, dh_new, planes(), drec + b * s.width());
  }

  // The four (B, U) planes of a step: the gradients of its new h and c, and of the previous ones (being made).
  struct Planes {
    T *dh, *dc, *dh_prev, *dc_prev;
  };
  Planes planes() const { return {dh, dc, dh_prev, dc_prev}; }

  // enter_row on the given planes, with the row's recurrent-products gradient at dr_row (GRU with reset_after).
  bool enter_row(std::int64_t k, std::int64_t b, T* dh_new, const Planes& p, T* dr_row) {
    const std::int64_t u = s.units, width = s.width(), t = q.time_of(k);
    const T* from_later = p.dh + b * u;
    const T* from_output = dout(b, s.states + k);
    T* dp = dprojected + (t * s.batch + b) * width;
    if (q.kept(b, t)) {
      for (std::int64_t j = 0; j < u; ++j) dh_new[j] = from_later[j] + from_output[j];
      return true;
    }
    T* previous = p.dh_prev + b * u;
    for (std::int64_t j = 0; j < u; ++j) previous[j] = from_later[j] + (s.zero_output ? T(0) : from_output[j]);
    if (s.cell == Cell::lstm) std::memcpy(p.dc_prev + b * u, p.dc + b * u, static_cast<std::size_t>(u) * sizeof(T));
    std::fill(dp, dp + width, T(0));
    if (s.recurrent_bias()) std::fill(dr_row, dr_row + width, T(0));
    return false;
  }

  // Row b's gate gradients for step k (SimpleRNN, LSTM, GRU with reset_after): into dprojected's row, dr_row (GRU)
  // and the previous planes' row.
  void row_grad(std::int64_t k, std::int64_t b, const Planes& p, T* dr_row) {
    const std::int64_t u = s.units, width = s.width(), t = q.time_of(k);
    T* dh_new = temp + b * u;
    if (!enter_row(k, b, dh_new, p, dr_row)) return;
    const T* record = r.record(k);
    const T* gates = record + s.gate_plane() + b * width;
    const T* aux = record + s.aux_plane() + b * u;
    T* dp = dprojected + (t * s.batch + b) * width;
    T* previous = p.dh_prev + b * u;
    if (s.cell == Cell::simple_rnn) {
      const auto row = [&](auto d_act) {
        for (std::int64_t j = 0; j < u; ++j) {
          dp[j] = dh_new[j] * d_act(gates[j]);
          previous[j] = T(0);
        }
      };
      if (s.act == Act::tanh)
        row(TanhDerivative{});
      else
        row(AnyDerivative{s.act});
    } else if (s.cell == Cell::lstm) {
      with_derivatives(s.act, s.recurrent_act, [&](auto d_act, auto d_recurrent) {
        lstm_row_grad(u, gates, aux, r.previous(k, 1) + b * u, p.dc + b * u, static_cast<const T*>(dh_new), dp,
                      p.dc_prev + b * u, previous, d_act, d_recurrent);
      });
    } else {
      with_derivatives(s.act, s.recurrent_act, [&](auto d_act, auto d_recurrent) {
        gru_row_grad(u, gates, aux, r.previous(k, 0) + b * u, static_cast<const T*>(dh_new), dp, dr_row, previous,
                     d_act, d_recurrent);
      });
    }
  }

  // rows_backward: each worker walks every step, last to first, on its block of rows: their gate gradients, their
  // dh_prev += dR·recurrent_kernelᵀ, and their previous h copied time-major; the planes alternate by the step's
  // parity (every worker takes the same steps). Then, once: the recurrent kernel's gradient h_majorᵀ·dR over
  // every step, and the recurrent bias's (GRU with reset_after) the columns' sums of every step's dR.
  void run_rows() {
    const std::int64_t u = s.units, width = s.width(), rows_total = s.batch * s.steps;
    const Planes even = planes(), odd{dh_prev, dc_prev, dh, dc};
    for_row_blocks(s, s.batch * s.steps * width * (u + 8), [&](std::int64_t begin, std::int64_t end) {
      const std::int64_t rows = end - begin;
      for (std::int64_t k = s.steps - 1, n = 0; k >= 0; --k, ++n) {
        const Planes& p = n % 2 == 0 ? even : odd;
        const std::int64_t t = q.time_of(k);
        T* dr = s.recurrent_bias() ? drec_all + t * s.batch * width : dprojected + t * s.batch * width;
        for (std::int64_t b = begin; b < end; ++b) row_grad(k, b, p, dr + b * width);
        product(rows, u, width, dr + begin * width, width, false, recurrent_t, u, false, p.dh_prev + begin * u, u,
                true);
        const T* h_prev = r.previous(k, 0);
        std::memcpy(h_major + (t * s.batch + begin) * u, h_prev + begin * u,
                    static_cast<std::size_t>(rows * u) * sizeof(T));
      }
    });
    if (s.steps % 2 == 1) {  // the planes' roles after the last step, as the swaps of the stepwise loop leave them
      std::swap(dh, dh_prev);
      std::swap(dc, dc_prev);
    }
    const T* all_dr = s.recurrent_bias() ? drec_all : dprojected;
    product(u, width, rows_total, static_cast<const T*>(h_major), u, true, all_dr, width, false, drecurrent, width,
            false);
    if (s.recurrent_bias()) column_sums(static_cast<const T*>(drec_all), rows_total, width, dbias + width);
  }

  // SimpleRNN, LSTM and GRU with reset_after: the gate gradients of every row, then one GEMM each for the
  // previous h's gradient (dR·recurrent_kernelᵀ) and the recurrent kernel's (h_prevᵀ·dR).
  void step(std::int64_t k) {
    const std::int64_t width = s.width(), t = q.time_of(k);
    const Planes p = planes();
    for_rows(s, 6 * s.gates, [&](std::int64_t b) { row_grad(k, b, p, drec + b * width); });
    // The recurrent products' gradients: dprojected's block at time t, or drec for GRU with reset_after.
    const T* dr = s.recurrent_bias() ? drec : dprojected + t * s.batch * width;
    back_through_products(r.previous(k, 0), dr, width, 0, s.gates);
    if (s.recurrent_bias())
      for (std::int64_t b = 0; b < s.batch; ++b)
        for (std::int64_t j = 0; j < width; ++j) dbias[width + j] += drec[b * width + j];
  }

  // For gate blocks [first, last) of a step's recurrent products (left · recurrent_kernel), with dr their
  // gradient (leading dimension ld): dh_prev += dr·recurrent_kernelᵀ (under each gate's dropout mask) and
  // drecurrent += leftᵀ·dr. Rows of masked steps have dr = 0.
  void back_through_products(const T* left, const T* dr, std::int64_t ld, int first, int last) {
    const std::int64_t u = s.units, width = s.width();
    if (!s.has_recurrent_masks) {
      const std::int64_t cols = (last - first) * u;
      product(s.batch, u, cols, dr + first * u, ld, false, recurrent_t + first * u * u, u, false, dh_prev, u, true);
      product(u, cols, s.batch, left, u, true, dr + first * u, ld, false, drecurrent + first * u, width, true);
      return;
    }
    for (int gate = first; gate < last; ++gate) {
      product(s.batch, u, u, dr + gate * u, ld, false, recurrent_t + gate * u * u, u, false, gated, u, false);
      for (std::int64_t b = 0; b < s.batch; ++b) {
        const T* m = q.recurrent_mask(b, gate);
        for (std::int64_t j = 0; j < u; ++j) dh_prev[b * u + j] += gated[b * u + j] * m[j];
      }
      product(u, u, s.batch, masked_rows(q, left, gate, gated), u, true, dr + gate * u, ld, false,
              drecurrent + gate * u, width, true);
    }
  }

  // GRU without reset_after: the candidate's gradient first, back through (r ∘ h)·U_h to r and h, then z's
  // and r's through h·U_z and h·U_r.
  void gru_reset_before(std::int64_t k) {
    const std::int64_t u = s.units, width = s.width(), t = q.time_of(k), ld = width;
    T* dblock = dprojected + t * s.batch * width;
    const T* record = r.record(k);
    const T* h_prev_all = r.previous(k, 0);
    for_rows(s, 8, [&](std::int64_t b) {
      T* dh_new = temp + b * u;
      if (!enter_row(k, b, dh_new)) return;
      const T* gates = record + s.gate_plane() + b * width;
      const T* h_prev = h_prev_all + b * u;
      T* dp = dprojected + (t * s.batch + b) * width;
      for (std::int64_t j = 0; j < u; ++j) {
        const T z = gates[j], candidate = gates[2 * u + j];
        dp[j] = dh_new[j] * (h_prev[j] - candidate) * derivative(s.recurrent_act, z);
        dp[2 * u + j] = dh_new[j] * (T(1) - z) * derivative(s.act, candidate);
        dh_prev[b * u + j] = dh_new[j] * z;
      }
    });
    // d(r ∘ h) = dcandidate·U_hᵀ under the candidate's dropout mask, into temp; U_h's gradient from r ∘ h.
    // Masked rows have dcandidate = 0, so their d(r ∘ h) is 0.
    const T* dcandidate = dblock + 2 * u;
    product(s.batch, u, u, dcandidate, ld, false, recurrent_t + 2 * u * u, u, false, temp, u, false);
    if (s.has_recurrent_masks)
      for (std::int64_t b = 0; b < s.batch; ++b) {
        const T* m = q.recurrent_mask(b, 2);
        for (std::int64_t j = 0; j < u; ++j) temp[b * u + j] *= m[j];
      }
    product(u, u, s.batch, masked_rows(q, record + s.aux_plane(), 2, gated), u, true, dcandidate, ld, false,
            drecurrent + 2 * u, width, true);
    for_rows(s, 4, [&](std::int64_t b) {
      if (!q.kept(b, t)) return;
      const T* reset = record + s.gate_plane() + b * width + u;
      const T* h_prev = h_prev_all + b * u;
      const T* dreset_h = temp + b * u;
      T* dp = dprojected + (t * s.batch + b) * width;
      for (std::int64_t j = 0; j < u; ++j) {
        dp[u + j] = dreset_h[j] * h_prev[j] * derivative(s.recurrent_act, reset[j]);
        dh_prev[b * u + j] += dreset_h[j] * reset[j];
      }
    });
    back_through_products(h_prev_all, dblock, ld, 0, 2);
  }
};


template <class T>
void recurrent_grad_kernel(const KernelContext& context) {
  const Setup s = setup_of(context, 2);
  const std::int64_t u = s.units, width = s.width(), area = s.area();
  T* workspace = context.scratch<T>();
  T* zeros = workspace + s.batch * s.steps * width + s.batch * width + 6 * area;
  std::fill(zeros, zeros + area, T(0));
  const Sequence<T> q(s, context, 2, zeros);
  T* dx = context.out<T>();
  T* dkernel = dx + s.batch * s.steps * s.features;
  T* drecurrent = dkernel + s.features * width;
  T* dbias = drecurrent + u * width;
  T* dh0 = dbias + (s.recurrent_bias() ? 2 * width : width);
  T* dprojected = workspace;
  T* drec = dprojected + s.batch * s.steps * width;
  T* planes = drec + s.batch * width;  // six (B, U) planes, then the zeros, then x time-major
  T* x_major = planes + 7 * area;
  T* recurrent_t = x_major + (needs_swap(s) ? s.batch * s.steps * s.features : 0);
  T* h_major = recurrent_t + width * u;                // rows_backward: every step's previous h, time-major
  T* drec_all = h_major + s.batch * s.steps * u;      // and, for GRU with reset_after, every step's drec
  Backward<T> backward{q,
                       q.s,
                       {q.s, context.in<T>(0), {q.initial[0], q.initial[1]}},
                       context.in<T>(1),
                       dx,
                       dkernel,
                       drecurrent,
                       dbias,
                       {dh0, dh0 + area},
                       dprojected,
                       drec,
                       planes,
                       planes + area,
                       planes + 2 * area,
                       planes + 3 * area,
                       planes + 4 * area,
                       planes + 5 * area,
                       x_major,
                       recurrent_t,
                       h_major,
                       drec_all};
  backward.run();
}

// ---- workspace ------------------------------------------------------------------------------------------------

std::size_t forward_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes,
                              DType dtype) {
  return static_cast<std::size_t>(forward_workspace_elements(setup_of(inputs, 0, attributes))) * dtype_size(dtype);
}

std::size_t backward_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes,
                               DType dtype) {
  return static_cast<std::size_t>(backward_workspace_elements(setup_of(inputs, 2, attributes))) * dtype_size(dtype);
}

// ---- backward rule -------------------------------------------------------------------------------------

// RecurrentOutput's inputs are (state, x, kernel, recurrent_kernel, bias[, h0[, c0]]); the gradient op also
// reads the masks, which it finds among the Recurrent node's inputs. A state made without records (an
// inference-mode call) is made again with them, from the same inputs, for the gradient alone.
std::vector<Tensor> recurrent_backward(const GradContext& g) {
  Graph& graph = g.output().graph();
  Tensor state = g.input(0);
  std::vector<Tensor> recurrent_inputs;
  for (NodeId id : state.node().inputs) recurrent_inputs.push_back(graph.tensor(id));
  Attributes attributes = g.attributes();
  attributes.set("records", true);
  if (!g.attributes().get_bool("records"))
    state = graph.add_op("kiln>Recurrent", recurrent_inputs, attributes, "recurrent_recomputed");
  std::vector<Tensor> inputs = {state, g.output_grad()};
  inputs.insert(inputs.end(), recurrent_inputs.begin(), recurrent_inputs.end());
  const Tensor grads = graph.add_op("kiln>RecurrentGrad", inputs, attributes, "recurrent_grad");
  static const char* names[] = {"x_grad", "kernel_grad", "recurrent_kernel_grad", "bias_grad", "h0_grad", "c0_grad"};
  std::vector<Tensor> parts = {grads};
  for (int i = 1; i < g.num_inputs(); ++i) parts.push_back(g.input(i));
  std::vector<Tensor> result(static_cast<std::size_t>(g.num_inputs()));
  for (int part = 0; part + 1 < g.num_inputs(); ++part)
    if (g.needs_grad(1 + part))
      result[static_cast<std::size_t>(1 + part)] =
          graph.add_op("kiln>RecurrentGradPart", parts, Attributes().set("part", part), names[part]);
  return result;
}

constexpr const char* second_order = "second-order gradients of recurrent are not implemented";

const std::vector<std::string>& recurrent_attributes() {
  static const std::vector<std::string> names = {"cell",          "activation",        "recurrent_activation",
                                                 "reset_after",   "go_backwards",      "zero_output_for_mask",
                                                 "has_initial_state", "has_mask",      "has_recurrent_masks",
                                                 "records"};
  return names;
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Recurrent")
                     .inputs(4, 8)
                     .attributes(recurrent_attributes())
                     .infer_shape(state_shape)
                     .forward(recurrent_kernel<float>, recurrent_kernel<double>)
                     .workspace(forward_workspace)
                     .not_differentiable("the internal state of recurrent: gradients flow through "
                                         "kiln>RecurrentOutput"));
KILN_REGISTER_OP(OpDef("kiln>RecurrentOutput")
                     .inputs(5, 7)
                     .attributes(recurrent_attributes())
                     .infer_shape(output_shape)
                     .forward(detail::head_kernel<float>, detail::head_kernel<double>)
                     .backward(recurrent_backward)
                     .non_differentiable_inputs({0}, "the state is recomputed from the inputs")
                     .sharing(Sharing::alias));
KILN_REGISTER_OP(OpDef("kiln>RecurrentGrad")
                     .inputs(6, 10)
                     .attributes(recurrent_attributes())
                     .infer_shape(grad_shape)
                     .forward(recurrent_grad_kernel<float>, recurrent_grad_kernel<double>)
                     .workspace(backward_workspace)
                     .not_differentiable(second_order));
KILN_REGISTER_OP(OpDef("kiln>RecurrentGradPart")
                     .inputs(5, 7)
                     .attributes({"part"})
                     .infer_shape(grad_part_shape)
                     .forward(detail::flat_part_kernel<float>, detail::flat_part_kernel<double>)
                     .sharing(Sharing::alias)
                     .alias_offset(detail::flat_part_offset)
                     .not_differentiable(second_order));

namespace ops {

Tensor recurrent(const Tensor& x, const Tensor& kernel, const Tensor& recurrent_kernel, const Tensor& bias,
                 const std::vector<Tensor>& initial_states, const RecurrentOptions& options, const Tensor& mask,
                 const Tensor& recurrent_masks) {
  std::vector<Tensor> inputs = {x, kernel, recurrent_kernel, bias};
  for (const Tensor& initial : initial_states) inputs.push_back(initial);
  const std::size_t parts = inputs.size();
  if (mask.valid()) inputs.push_back(mask);
  if (recurrent_masks.valid()) inputs.push_back(recurrent_masks);
  const Attributes settings = Attributes()
                                  .set("cell", options.cell)
                                  .set("activation", options.activation)
                                  .set("recurrent_activation", options.recurrent_activation)
                                  .set("reset_after", options.reset_after)
                                  .set("go_backwards", options.go_backwards)
                                  .set("zero_output_for_mask", options.zero_output_for_mask)
                                  .set("has_initial_state", !initial_states.empty())
                                  .set("has_mask", mask.valid())
                                  .set("has_recurrent_masks", recurrent_masks.valid())
                                  .set("records", options.keep_records);
  Graph& graph = x.graph();
  const Tensor state = graph.add_op("kiln>Recurrent", inputs, settings, "recurrent");
  inputs.resize(parts);
  inputs.insert(inputs.begin(), state);
  return graph.add_op("kiln>RecurrentOutput", inputs, settings, "recurrent_output");
}

}  // namespace ops
}  // namespace kiln
