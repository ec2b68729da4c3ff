// Keras's losses as fused ops: one kernel reduces (y_true, y_pred) to the scalar mean of the per-sample
// loss, and one fused gradient op per loss writes d(loss)/d(y_pred) (or d/d(y_true), chosen by the
// "wrt" attribute) already scaled by the incoming scalar gradient. Sums run in double whatever the
// dtype, since a batch mean adds up many similar terms.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// Keras's backend.epsilon(): probabilities are clipped to [epsilon, 1 - epsilon] before the log.
constexpr double epsilon = 1e-7;

bool clipped(double probability) { return probability < epsilon || probability > 1.0 - epsilon; }
double clip(double probability) { return std::min(std::max(probability, epsilon), 1.0 - epsilon); }
double sign(double value) { return static_cast<double>((value > 0.0) - (value < 0.0)); }

double stable_sigmoid(double z) {
  if (z >= 0.0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

// ---- elementwise losses: the per-sample mean over the last axis, then the batch mean, is the mean over
// every element. Each defines value(t, p) and its derivatives with respect to p and t. ----------------

struct SquaredError {
  explicit SquaredError(const KernelContext&) {}
  double value(double t, double p) const { return (p - t) * (p - t); }
  double d_pred(double t, double p) const { return 2.0 * (p - t); }
  double d_true(double t, double p) const { return -d_pred(t, p); }
};

struct AbsoluteError {
  explicit AbsoluteError(const KernelContext&) {}
  double value(double t, double p) const { return std::abs(p - t); }
  double d_pred(double t, double p) const { return sign(p - t); }
  double d_true(double t, double p) const { return -d_pred(t, p); }
};

struct HuberError {
  double delta;
  explicit HuberError(const KernelContext& k) : delta(k.attributes().get_double("delta")) {}
  double value(double t, double p) const {
    const double error = std::abs(p - t);
    return error <= delta ? 0.5 * error * error : delta * error - 0.5 * delta * delta;
  }
  double d_pred(double t, double p) const {
    const double error = p - t;
    return std::abs(error) <= delta ? error : delta * sign(error);
  }
  double d_true(double t, double p) const { return -d_pred(t, p); }
};

// Outside [epsilon, 1 - epsilon] the clipped loss is flat, so its gradient there is 0, as in Keras.
struct BinaryCrossentropyProbabilities {
  explicit BinaryCrossentropyProbabilities(const KernelContext&) {}
  double value(double t, double p) const {
    const double q = clip(p);
    return -(t * std::log(q) + (1.0 - t) * std::log1p(-q));
  }
  double d_pred(double t, double p) const { return clipped(p) ? 0.0 : (1.0 - t) / (1.0 - p) - t / p; }
  double d_true(double, double p) const {
    const double q = clip(p);
    return std::log1p(-q) - std::log(q);
  }
};

// max(z, 0) - z t + log1p(exp(-|z|)) is log(1 + exp(z)) - z t without overflow for large |z|.
struct BinaryCrossentropyLogits {
  explicit BinaryCrossentropyLogits(const KernelContext&) {}
  double value(double t, double z) const { return std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::abs(z))); }
  double d_pred(double t, double z) const { return stable_sigmoid(z) - t; }
  double d_true(double, double z) const { return -z; }
};

template <class T, class PerRow>
void mean_loss_kernel(const KernelContext& k) {
  const PerRow loss(k);
  const T* y_true = k.in<T>(0);
  const T* y_pred = k.in<T>(1);
  const std::size_t size = detail::num_elements(k.input_shape(1));
  // The sum in `lanes` running partial sums (element i in partial i mod lanes), added up in a fixed order at the
  // end: one running sum was one dependent chain of adds, 383 µs for the norms workload's 524,288 squared errors
  // (the add's latency per element); independent partials let the compiler vectorize and the core overlap them.
  // The order depends only on the size, so the result is the same on every run.
  constexpr std::size_t lanes = 32;
  std::array<double, lanes> partial{};
  std::size_t i = 0;
  for (; i + lanes <= size; i += lanes)
    for (std::size_t lane = 0; lane < lanes; ++lane) partial[lane] += loss.value(y_true[i + lane], y_pred[i + lane]);
  for (std::size_t lane = 0; i < size; ++i, ++lane) partial[lane] += loss.value(y_true[i], y_pred[i]);
  for (std::size_t width = lanes / 2; width > 0; width /= 2)
    for (std::size_t lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
  *k.out<T>() = static_cast<T>(partial[0] / static_cast<double>(size));
}

// Inputs (y_true, y_pred, output gradient); "wrt" picks the input differentiated: 0 y_true, 1 y_pred.
template <class T, class PerRow>
void mean_loss_grad_kernel(const KernelContext& k) {
  const PerRow loss(k);
  const T* y_true = k.in<T>(0);
  const T* y_pred = k.in<T>(1);
  T* grad = k.out<T>();
  const std::size_t size = k.output_size();
  const double scale = static_cast<double>(*k.in<T>(2)) / static_cast<double>(size);
  if (k.attributes().get_int("wrt") == 0) {
    for (std::size_t i = 0; i < size; ++i) grad[i] = static_cast<T>(scale * loss.d_true(y_true[i], y_pred[i]));
  } else {
    for (std::size_t i = 0; i < size; ++i) grad[i] = static_cast<T>(scale * loss.d_pred(y_true[i], y_pred[i]));
  }
}

template <class T>
void binary_crossentropy_kernel(const KernelContext& k) {
  if (k.attributes().get_bool("from_logits")) {
    mean_loss_kernel<T, BinaryCrossentropyLogits>(k);
  } else {
    mean_loss_kernel<T, BinaryCrossentropyProbabilities>(k);
  }
}

template <class T>
void binary_crossentropy_grad_kernel(const KernelContext& k) {
  if (k.attributes().get_bool("from_logits")) {
    mean_loss_grad_kernel<T, BinaryCrossentropyLogits>(k);
  } else {
    mean_loss_grad_kernel<T, BinaryCrossentropyProbabilities>(k);
  }
}

// ---- row losses: a sum over the classes (the last axis) per sample, then the mean over samples. -------

struct Rows {
  std::int64_t count = 1;
  std::int64_t classes = 1;
};

Rows rows_of(const Shape& y_pred) {
  Rows rows;
  for (int axis = 0; axis + 1 < y_pred.rank(); ++axis) rows.count *= y_pred[axis];
  rows.classes = y_pred[y_pred.rank() - 1];
  return rows;
}

template <class T>
double row_sum(const T* row, std::int64_t classes) {
  double total = 0.0;
  for (std::int64_t c = 0; c < classes; ++c) total += row[c];
  return total;
}

// log(sum(exp(z))) shifted by the row max, so large logits do not overflow.
template <class T>
double log_sum_exp(const T* z, std::int64_t classes) {
  double max = -HUGE_VAL;
  for (std::int64_t c = 0; c < classes; ++c) max = std::max(max, static_cast<double>(z[c]));
  double total = 0.0;
  for (std::int64_t c = 0; c < classes; ++c) total += std::exp(z[c] - max);
  return max + std::log(total);
}

// Like Keras, probabilities are first divided by their row sum (q = p / s), then clipped. With
// g_c = dL/dq_c, dL/dp_j = (g_j - sum_c g_c q_c) / s.
struct CategoricalProbabilities {
  explicit CategoricalProbabilities(const KernelContext&) {}
  static constexpr bool one_hot = true;

  template <class T>
  double value(const T* t, const T* p, std::int64_t classes) const {
    const double s = row_sum(p, classes);
    double loss = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) loss -= t[c] * std::log(clip(p[c] / s));
    return loss;
  }
  template <class T>
  void d_pred(const T* t, const T* p, std::int64_t classes, double scale, T* grad) const {
    const double s = row_sum(p, classes);
    double weighted = 0.0;  // sum_c g_c q_c: -t_c wherever q_c is not clipped
    for (std::int64_t c = 0; c < classes; ++c)
      if (!clipped(p[c] / s)) weighted -= t[c];
    for (std::int64_t c = 0; c < classes; ++c) {
      const double q = p[c] / s;
      const double g = clipped(q) ? 0.0 : -t[c] / q;
      grad[c] = static_cast<T>(scale * (g - weighted) / s);
    }
  }
  template <class T>
  void d_true(const T*, const T* p, std::int64_t classes, double scale, T* grad) const {
    const double s = row_sum(p, classes);
    for (std::int64_t c = 0; c < classes; ++c) grad[c] = static_cast<T>(-scale * std::log(clip(p[c] / s)));
  }
};

// -sum_c t_c log_softmax(z)_c = sum_c t_c (lse - z_c).
struct CategoricalLogits {
  explicit CategoricalLogits(const KernelContext&) {}
  static constexpr bool one_hot = true;

  template <class T>
  double value(const T* t, const T* z, std::int64_t classes) const {
    const double lse = log_sum_exp(z, classes);
    double loss = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) loss += t[c] * (lse - z[c]);
    return loss;
  }
  template <class T>
  void d_pred(const T* t, const T* z, std::int64_t classes, double scale, T* grad) const {
    const double lse = log_sum_exp(z, classes);
    const double total = row_sum(t, classes);
    for (std::int64_t c = 0; c < classes; ++c) grad[c] = static_cast<T>(scale * (std::exp(z[c] - lse) * total - t[c]));
  }
  template <class T>
  void d_true(const T*, const T* z, std::int64_t classes, double scale, T* grad) const {
    const double lse = log_sum_exp(z, classes);
    for (std::int64_t c = 0; c < classes; ++c) grad[c] = static_cast<T>(scale * (lse - z[c]));
  }
};

// y_true holds one class index per row, stored as a float; it is checked on every use because labels
// are data, not shapes.
class SparseLabels {
 public:
  explicit SparseLabels(const KernelContext& k) : k_(k) {}

  template <class T>
  std::int64_t label(const T* t, std::int64_t classes) const {
    const double value = *t;
    if (!(value >= 0.0 && value < static_cast<double>(classes) && value == std::floor(value)))
      out_of_range(value, classes);
    return static_cast<std::int64_t>(value);
  }

 private:
  [[noreturn]] void out_of_range(double value, std::int64_t classes) const {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    throw ValueError(k_.node->describe() + ": class index " + text + " is not an integer in [0, " +
                     std::to_string(classes) + ")");
  }
  const KernelContext& k_;
};

// The categorical probability form with a one-hot y_true: only q_label matters.
struct SparseProbabilities : SparseLabels {
  using SparseLabels::SparseLabels;
  static constexpr bool one_hot = false;

  template <class T>
  double value(const T* t, const T* p, std::int64_t classes) const {
    const std::int64_t l = label(t, classes);
    return -std::log(clip(p[l] / row_sum(p, classes)));
  }
  template <class T>
  void d_pred(const T* t, const T* p, std::int64_t classes, double scale, T* grad) const {
    const std::int64_t l = label(t, classes);
    const double s = row_sum(p, classes);
    const bool flat = clipped(p[l] / s);
    for (std::int64_t c = 0; c < classes; ++c) grad[c] = static_cast<T>(flat ? 0.0 : scale / s);
    if (!flat) grad[l] = static_cast<T>(scale * (1.0 / s - 1.0 / p[l]));
  }
};

struct SparseLogits : SparseLabels {
  using SparseLabels::SparseLabels;
  static constexpr bool one_hot = false;

  template <class T>
  double value(const T* t, const T* z, std::int64_t classes) const {
    const std::int64_t l = label(t, classes);
    return log_sum_exp(z, classes) - z[l];
  }
  template <class T>
  void d_pred(const T* t, const T* z, std::int64_t classes, double scale, T* grad) const {
    const std::int64_t l = label(t, classes);
    const double lse = log_sum_exp(z, classes);
    for (std::int64_t c = 0; c < classes; ++c)
      grad[c] = static_cast<T>(scale * (std::exp(z[c] - lse) - (c == l ? 1.0 : 0.0)));
  }
};

template <class PerRow>
std::int64_t true_stride(std::int64_t classes) {
  return PerRow::one_hot ? classes : 1;
}

template <class T, class PerRow>
void row_loss_kernel(const KernelContext& k) {
  const PerRow loss(k);
  const Rows rows = rows_of(k.input_shape(1));
  const std::int64_t stride = true_stride<PerRow>(rows.classes);
  const T* y_true = k.in<T>(0);
  const T* y_pred = k.in<T>(1);
  double total = 0.0;
  for (std::int64_t r = 0; r < rows.count; ++r)
    total += loss.value(y_true + r * stride, y_pred + r * rows.classes, rows.classes);
  *k.out<T>() = static_cast<T>(total / static_cast<double>(rows.count));
}

template <class T, class PerRow>
void row_loss_grad_kernel(const KernelContext& k) {
  const PerRow loss(k);
  const Rows rows = rows_of(k.input_shape(1));
  const std::int64_t stride = true_stride<PerRow>(rows.classes);
  const T* y_true = k.in<T>(0);
  const T* y_pred = k.in<T>(1);
  const double scale = static_cast<double>(*k.in<T>(2)) / static_cast<double>(rows.count);
  bool wrt_true = false;
  if constexpr (PerRow::one_hot) wrt_true = k.attributes().get_int("wrt") == 0;
  for (std::int64_t r = 0; r < rows.count; ++r) {
    const T* t = y_true + r * stride;
    const T* p = y_pred + r * rows.classes;
    T* grad = k.out<T>() + r * rows.classes;
    if constexpr (PerRow::one_hot) {
      if (wrt_true) {
        loss.d_true(t, p, rows.classes, scale, grad);
        continue;
      }
    }
    loss.d_pred(t, p, rows.classes, scale, grad);
  }
}

template <class T, class Logits, class Probabilities>
void row_loss_dispatch(const KernelContext& k) {
  if (k.attributes().get_bool("from_logits")) {
    row_loss_kernel<T, Logits>(k);
  } else {
    row_loss_kernel<T, Probabilities>(k);
  }
}

template <class T, class Logits, class Probabilities>
void row_loss_grad_dispatch(const KernelContext& k) {
  if (k.attributes().get_bool("from_logits")) {
    row_loss_grad_kernel<T, Logits>(k);
  } else {
    row_loss_grad_kernel<T, Probabilities>(k);
  }
}

// ---- shape rules ---------------------------------------------------------------------------------------

void require_rank(const InferContext& ctx, int index, const char* name) {
  if (ctx.input_shape(index).rank() < 1) ctx.fail(std::string(name) + " must have rank >= 1");
}

Shape paired_loss_shape(const InferContext& ctx) {
  if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("y_true and y_pred must have the same shape");
  require_rank(ctx, 1, "y_pred");
  return Shape{};
}

// Keras accepts labels shaped like y_pred without its last axis, or with a last axis of 1.
Shape sparse_loss_shape(const InferContext& ctx) {
  require_rank(ctx, 1, "y_pred");
  const Shape& labels = ctx.input_shape(0);
  const std::vector<std::int64_t>& pred = ctx.input_shape(1).dims();
  const std::vector<std::int64_t> rows(pred.begin(), pred.end() - 1);
  std::vector<std::int64_t> with_unit_axis = rows;
  with_unit_axis.push_back(1);
  if (labels.dims() != rows && labels.dims() != with_unit_axis)
    ctx.fail("y_true must have y_pred's shape without its last axis (or with a last axis of 1)");
  return Shape{};
}

// Gradient ops: (y_true, y_pred, output gradient) -> the shape of the input being differentiated.
Shape paired_grad_shape(const InferContext& ctx) {
  if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("y_true and y_pred must have the same shape");
  if (!ctx.input_shape(2).is_scalar()) ctx.fail("the loss gradient must be a scalar");
  return ctx.input_shape(1);
}

Shape sparse_grad_shape(const InferContext& ctx) {
  if (!ctx.input_shape(2).is_scalar()) ctx.fail("the loss gradient must be a scalar");
  return ctx.input_shape(1);
}

// ---- backward rules ------------------------------------------------------------------------------------

Tensor loss_grad(const GradContext& g, const char* grad_op, int wrt) {
  Attributes attributes = g.attributes();
  attributes.set("wrt", wrt);
  return g.output().graph().add_op(grad_op, {g.input(0), g.input(1), g.output_grad()}, std::move(attributes), "grad");
}

template <const char* GradOp>
std::vector<Tensor> loss_backward(const GradContext& g) {
  std::vector<Tensor> grads(2);
  for (int wrt : {0, 1})
    if (g.needs_grad(wrt)) grads[static_cast<std::size_t>(wrt)] = loss_grad(g, GradOp, wrt);
  return grads;
}

constexpr char mean_squared_error_grad[] = "kiln>MeanSquaredErrorGrad";
constexpr char mean_absolute_error_grad[] = "kiln>MeanAbsoluteErrorGrad";
constexpr char huber_grad[] = "kiln>HuberGrad";
constexpr char binary_crossentropy_grad[] = "kiln>BinaryCrossentropyGrad";
constexpr char categorical_crossentropy_grad[] = "kiln>CategoricalCrossentropyGrad";
constexpr char sparse_categorical_crossentropy_grad[] = "kiln>SparseCategoricalCrossentropyGrad";

// ---- registration --------------------------------------------------------------------------------------

const char* const second_order = "second-order gradients are not supported";

OpDef loss_op(const char* name, std::vector<std::string> attributes, KernelFn float32_kernel, KernelFn float64_kernel,
              BackwardFn backward) {
  OpDef op(name);
  op.inputs(2).attributes(std::move(attributes)).infer_shape(paired_loss_shape);
  op.forward(float32_kernel, float64_kernel).backward(backward);
  return op;
}

OpDef loss_grad_op(const char* name, std::vector<std::string> attributes, KernelFn float32_kernel,
                   KernelFn float64_kernel) {
  attributes.emplace_back("wrt");
  OpDef op(name);
  op.inputs(3).attributes(std::move(attributes)).infer_shape(paired_grad_shape);
  op.forward(float32_kernel, float64_kernel).not_differentiable(second_order);
  return op;
}

KILN_REGISTER_OP(loss_op("kiln>MeanSquaredError", {}, mean_loss_kernel<float, SquaredError>,
                         mean_loss_kernel<double, SquaredError>, loss_backward<mean_squared_error_grad>));
KILN_REGISTER_OP(loss_grad_op(mean_squared_error_grad, {}, mean_loss_grad_kernel<float, SquaredError>,
                              mean_loss_grad_kernel<double, SquaredError>));

KILN_REGISTER_OP(loss_op("kiln>MeanAbsoluteError", {}, mean_loss_kernel<float, AbsoluteError>,
                         mean_loss_kernel<double, AbsoluteError>, loss_backward<mean_absolute_error_grad>));
KILN_REGISTER_OP(loss_grad_op(mean_absolute_error_grad, {}, mean_loss_grad_kernel<float, AbsoluteError>,
                              mean_loss_grad_kernel<double, AbsoluteError>));

KILN_REGISTER_OP(loss_op("kiln>Huber", {"delta"}, mean_loss_kernel<float, HuberError>,
                         mean_loss_kernel<double, HuberError>, loss_backward<huber_grad>));
KILN_REGISTER_OP(loss_grad_op(huber_grad, {"delta"}, mean_loss_grad_kernel<float, HuberError>,
                              mean_loss_grad_kernel<double, HuberError>));

KILN_REGISTER_OP(loss_op("kiln>BinaryCrossentropy", {"from_logits"}, binary_crossentropy_kernel<float>,
                         binary_crossentropy_kernel<double>, loss_backward<binary_crossentropy_grad>));
KILN_REGISTER_OP(loss_grad_op(binary_crossentropy_grad, {"from_logits"}, binary_crossentropy_grad_kernel<float>,
                              binary_crossentropy_grad_kernel<double>));

KILN_REGISTER_OP(loss_op("kiln>CategoricalCrossentropy", {"from_logits"},
                         row_loss_dispatch<float, CategoricalLogits, CategoricalProbabilities>,
                         row_loss_dispatch<double, CategoricalLogits, CategoricalProbabilities>,
                         loss_backward<categorical_crossentropy_grad>));
KILN_REGISTER_OP(loss_grad_op(categorical_crossentropy_grad, {"from_logits"},
                              row_loss_grad_dispatch<float, CategoricalLogits, CategoricalProbabilities>,
                              row_loss_grad_dispatch<double, CategoricalLogits, CategoricalProbabilities>));

KILN_REGISTER_OP(loss_op("kiln>SparseCategoricalCrossentropy", {"from_logits"},
                         row_loss_dispatch<float, SparseLogits, SparseProbabilities>,
                         row_loss_dispatch<double, SparseLogits, SparseProbabilities>,
                         loss_backward<sparse_categorical_crossentropy_grad>)
                     .infer_shape(sparse_loss_shape)
                     .non_differentiable_inputs({0}, "class indices"));
KILN_REGISTER_OP(loss_grad_op(sparse_categorical_crossentropy_grad, {"from_logits"},
                              row_loss_grad_dispatch<float, SparseLogits, SparseProbabilities>,
                              row_loss_grad_dispatch<double, SparseLogits, SparseProbabilities>)
                     .infer_shape(sparse_grad_shape));

Tensor loss(const char* op_name, const Tensor& y_true, const Tensor& y_pred, Attributes attributes,
            const char* node_name) {
  return y_pred.graph().add_op(op_name, {y_true, y_pred}, std::move(attributes), node_name);
}

}  // namespace

namespace ops {

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
  return loss("kiln>MeanSquaredError", y_true, y_pred, {}, "mean_squared_error");
}

Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred) {
  return loss("kiln>MeanAbsoluteError", y_true, y_pred, {}, "mean_absolute_error");
}

Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta) {
  return loss("kiln>Huber", y_true, y_pred, Attributes().set("delta", delta), "huber");
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  return loss("kiln>BinaryCrossentropy", y_true, y_pred, Attributes().set("from_logits", from_logits),
              "binary_crossentropy");
}

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  return loss("kiln>CategoricalCrossentropy", y_true, y_pred, Attributes().set("from_logits", from_logits),
              "categorical_crossentropy");
}

Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  return loss("kiln>SparseCategoricalCrossentropy", y_true, y_pred, Attributes().set("from_logits", from_logits),
              "sparse_categorical_crossentropy");
}

}  // namespace ops
}  // namespace kiln
