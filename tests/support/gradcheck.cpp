#include "support/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/detail/backward_trace.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::testing {

namespace {

Shape declared_shape(const Shape& shape, bool unknown_batch) {
  Shape declared = shape;
  if (unknown_batch && declared.rank() > 0) declared[0] = Shape::unknown;
  return declared;
}

void log_result(const GradcheckOptions& options, const GradcheckReport& report) {
  const char* path = std::getenv("KILN_GRADCHECK_LOG");
  if (path == nullptr || options.label.empty()) return;
  if (FILE* file = std::fopen(path, "a")) {
    std::fprintf(file, "%s\t%.3e\t%zu\n", options.label.c_str(), report.max_relative_error, report.num_checked);
    std::fclose(file);
  }
}

// With KILN_OPS_LOG=file: which ops of the checked function had their backward rule run (and so their
// gradient checked in float64), and the ops each rule made: one line per op,
// "op<TAB>made,...<TAB>test name<TAB>how many of the function's rules the check ran".
// tests/check_ops_table.cmake makes docs/ops.md's table of gradients from these lines.
class BackwardLog final : public detail::BackwardObserver {
 public:
  BackwardLog(NodeId first, NodeId end) : first_(first), end_(end), before_(detail::set_backward_observer(this)) {}
  ~BackwardLog() override { detail::set_backward_observer(before_); }
  BackwardLog(const BackwardLog&) = delete;
  BackwardLog& operator=(const BackwardLog&) = delete;

  void backward_ran(const Graph& graph, NodeId node, NodeId first_new, NodeId end) override {
    if (node < first_ || node >= end_) return;  // the harness's own projection and sum
    std::set<std::string>& made = made_[graph.node(node).op->name()];
    for (NodeId id = first_new; id < end; ++id)
      if (graph.node(id).kind == NodeKind::op) made.insert(graph.node(id).op->name());
  }

  void write() const {
    const char* path = std::getenv("KILN_OPS_LOG");
    if (path == nullptr) return;
    if (FILE* file = std::fopen(path, "a")) {
      const std::string test = Catch::getResultCapture().getCurrentTestName();
      for (const auto& [op, made] : made_) {
        std::string list;
        for (const std::string& name : made) list += (list.empty() ? "" : ",") + name;
        std::fprintf(file, "%s\t%s\t%s\t%zu\n", op.c_str(), list.c_str(), test.c_str(), made_.size());
      }
      std::fclose(file);
    }
  }

 private:
  NodeId first_, end_;
  detail::BackwardObserver* before_;
  std::map<std::string, std::set<std::string>> made_;
};

}  // namespace

Array random_array(const Shape& shape, Rng& rng, DType dtype, double low, double high) {
  Array array(shape, dtype);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(low, high));
  return array;
}

Array random_away_from(const Shape& shape, Rng& rng, const std::vector<double>& kinks, double gap, DType dtype,
                       double low, double high) {
  Array array(shape, dtype);
  for (std::size_t i = 0; i < array.size(); ++i) {
    double value;
    bool near_kink;
    do {
      value = rng.uniform(low, high);
      near_kink = std::any_of(kinks.begin(), kinks.end(), [&](double k) { return std::fabs(value - k) < gap; });
    } while (near_kink);
    array.set_flat(i, value);
  }
  return array;
}

double max_relative_difference(const Array& a, const Array& b) {
  if (a.shape() != b.shape())
    throw ShapeError("max_relative_difference: shapes differ: " + a.shape().to_string() + " vs " +
                     b.shape().to_string());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double difference = std::fabs(a.flat(i) - b.flat(i)) / std::max(1.0, std::fabs(b.flat(i)));
    if (std::isnan(difference)) return difference;
    worst = std::max(worst, difference);
  }
  return worst;
}

Array evaluate(const GraphFunction& f, const std::vector<Array>& inputs) {
  Graph graph;
  std::vector<Tensor> placeholders;
  for (const Array& input : inputs) placeholders.push_back(graph.placeholder(input.shape(), input.dtype(), "x"));
  const Tensor output = f(placeholders);
  Program program(graph, {output});
  for (std::size_t i = 0; i < inputs.size(); ++i) program.feed(placeholders[i], inputs[i]);
  program.run();
  return program.fetch(output);
}

std::vector<Array> evaluate_with_gradients(const GraphFunction& f, const std::vector<Array>& inputs,
                                           const Array& weights) {
  Graph graph;
  std::vector<Tensor> variables;
  for (const Array& input : inputs) variables.push_back(graph.variable("x", input.copy()));
  const Tensor output = f(variables);
  std::vector<Tensor> fetches{output};
  for (const Tensor& grad : gradients(ops::sum(output * graph.constant(weights.copy())), variables))
    fetches.push_back(grad);
  Program program(graph, fetches);
  program.run();
  std::vector<Array> results;
  for (const Tensor& fetch : fetches) results.push_back(program.fetch(fetch));
  return results;
}

std::vector<Array> evaluate_with_gradients_on(int threads, const GraphFunction& f, const std::vector<Array>& inputs,
                                              const Array& weights) {
  struct Restore {
    int saved = get_num_threads();
    ~Restore() { set_num_threads(saved); }
  } restore;
  set_num_threads(threads);
  return evaluate_with_gradients(f, inputs, weights);
}

GradcheckReport gradcheck(const GraphFunction& f, const std::vector<Array>& inputs, const GradcheckOptions& options,
                          bool unknown_batch) {
  Graph graph;
  std::vector<Tensor> placeholders;
  std::vector<Array> values;
  for (const Array& input : inputs) {
    values.push_back(input.astype(DType::float64));
    const bool batched = unknown_batch && placeholders.empty();
    placeholders.push_back(graph.placeholder(declared_shape(input.shape(), batched), DType::float64, "x"));
  }
  const auto first_checked = static_cast<NodeId>(graph.num_nodes());
  const Tensor output = f(placeholders);
  const auto end_checked = static_cast<NodeId>(graph.num_nodes());
  const Array probe = evaluate(f, values);
  Rng projection_rng(12345);
  const Array projection = random_array(probe.shape(), projection_rng, DType::float64, -1.0, 1.0);
  const Tensor projection_input = graph.placeholder(output.shape(), DType::float64, "projection");
  const Tensor loss = ops::sum(ops::mul(output, projection_input));

  std::vector<int> wrt = options.wrt;
  if (wrt.empty())
    for (int i = 0; i < static_cast<int>(inputs.size()); ++i) wrt.push_back(i);
  std::vector<Tensor> targets;
  for (int i : wrt) targets.push_back(placeholders[static_cast<std::size_t>(i)]);
  BackwardLog backward_log(first_checked, end_checked);
  const std::vector<Tensor> grads = gradients(loss, targets);

  std::vector<Tensor> fetches = grads;
  fetches.push_back(loss);
  Program analytic(graph, fetches);
  Program forward(graph, {loss});
  for (std::size_t i = 0; i < values.size(); ++i) {
    analytic.feed(placeholders[i], values[i]);
    forward.feed(placeholders[i], values[i]);
  }
  analytic.feed(projection_input, projection);
  forward.feed(projection_input, projection);
  analytic.run();

  GradcheckReport report;
  for (std::size_t w = 0; w < wrt.size(); ++w) {
    Array& x = values[static_cast<std::size_t>(wrt[w])];
    const Array grad = analytic.fetch(grads[w]);
    for (std::size_t j = 0; j < x.size(); ++j) {
      const double original = x.flat(j);
      // The same step as the analytic run, so per-step randomness (dropout) sees the same mask.
      x.set_flat(j, original + options.step);
      forward.set_run_count(0);
      forward.run();
      const double plus = forward.scalar(loss);
      x.set_flat(j, original - options.step);
      forward.set_run_count(0);
      forward.run();
      const double minus = forward.scalar(loss);
      x.set_flat(j, original);
      const double numeric = (plus - minus) / (2.0 * options.step);
      const double analytic_value = grad.flat(j);
      const double error = std::fabs(analytic_value - numeric) /
                           std::max({std::fabs(analytic_value), std::fabs(numeric), options.floor});
      ++report.num_checked;
      if (error > report.max_relative_error || std::isnan(error)) {
        report.max_relative_error = std::isnan(error) ? INFINITY : error;
        std::ostringstream entry;
        entry.precision(10);
        entry << options.label << " input " << wrt[w] << " [index " << j << "]: analytic " << analytic_value
              << " vs numeric " << numeric;
        report.worst = entry.str();
      }
    }
  }
  log_result(options, report);
  backward_log.write();
  return report;
}

GradcheckReport gradcheck(const GraphFunction& f, const std::vector<Shape>& shapes, Rng& rng,
                          const GradcheckOptions& options) {
  std::vector<Array> inputs;
  for (const Shape& shape : shapes)
    inputs.push_back(random_array(shape, rng, DType::float64, options.low, options.high));
  return gradcheck(f, inputs, options);
}

}  // namespace kiln::testing
