#include <kiln/train/detail/step_graph.hpp>

#include <utility>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::detail {
namespace {

// A target placeholder's shape: y's rows, unknown where the output's matching axis is (a sequence's length),
// so one graph takes batches of any length; the output's batch when the model fixes it.
Shape target_shape(const Array& y, const Shape& output) {
  std::vector<std::int64_t> dims = with_unknown_batch(y).dims();
  if (output.rank() > 0) dims[0] = output[0];
  for (int axis = 1; axis < static_cast<int>(dims.size()) && axis < output.rank(); ++axis)
    if (output[axis] == Shape::unknown) dims[static_cast<std::size_t>(axis)] = Shape::unknown;
  return Shape(dims);
}

using NamedSums = std::vector<std::pair<std::string, MetricSums>>;

// 1. The model's calls on input placeholders of the model's own input shapes: unknown batch and lengths stay
// unknown (a fixed batch, a stateful model's, stays fixed), so one graph, planned per fed shapes, takes every
// batch.
std::vector<Tensor> add_model(StepGraph& step, ModelBase& model, const std::vector<Array>& x) {
  const std::vector<Shape> input_shapes = model.input_shapes();
  for (std::size_t i = 0; i < x.size(); ++i)
    step.inputs.push_back(step.graph.placeholder(input_shapes.at(i), x[i].dtype(), "x"));
  return model.apply(step.inputs, step.training);
}

// 2. The losses and metrics of each output, against a target placeholder (and a sample-weight one when w is
// given) per output: the summed loss, and each metric's batch sums under its logged name (prefixed
// output_<k>_ when the model has several outputs). Keras names a weighted metric as the metric, or
// weighted_<name> when a plain one has that name.
Tensor add_losses_and_metrics(StepGraph& step, const StepRecipe& recipe, const std::vector<Tensor>& outputs,
                              const std::vector<Array>& y, const std::vector<Array>& w, NamedSums& sums) {
  auto weights_of = [&](std::size_t k) { return step.sample_weights.empty() ? Tensor() : step.sample_weights[k]; };
  auto prefix_of = [&](std::size_t k) { return outputs.size() > 1 ? "output_" + std::to_string(k) + "_" : ""; };
  Tensor total;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    step.targets.push_back(step.graph.placeholder(target_shape(y[k], outputs[k].shape()), outputs[k].dtype(), "y"));
    if (!w.empty())
      step.sample_weights.push_back(
          step.graph.placeholder(target_shape(w[k], outputs[k].shape()), outputs[k].dtype(), "sample_weight"));
    const Loss& loss = recipe.losses.size() == 1 ? recipe.losses[0] : recipe.losses[k];
    const Tensor value = loss(step.targets[k], outputs[k], weights_of(k));
    total = total.valid() ? total + value : value;
    for (const Metric& metric : recipe.metrics) {
      const Metric resolved = metric.resolve(step.targets[k].shape(), outputs[k].shape());
      sums.emplace_back(prefix_of(k) + metric.name(), resolved.accumulated(step.targets[k], outputs[k]));
    }
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    for (const Metric& metric : recipe.weighted_metrics) {
      std::string name = prefix_of(k) + metric.name();
      for (const auto& taken : sums)
        if (taken.first == name) name = prefix_of(k) + "weighted_" + metric.name();
      const Metric resolved = metric.resolve(step.targets[k].shape(), outputs[k].shape());
      sums.emplace_back(name, resolved.accumulated(step.targets[k], outputs[k], weights_of(k)));
    }
  }
  return total;
}

// 3. The penalties: Keras's model.losses join the loss minimized and reported: each trainable weight's
// regularizer, and the activity penalties the layers' calls recorded in this graph.
Tensor add_penalties(StepGraph& step, const std::vector<Weight>& trainable, Tensor total) {
  for (const Weight& weight : trainable)
    if (weight.regularizer)
      if (const Tensor variable = step.graph.find_variable(weight.value); variable.valid())
        total = total + weight.regularizer(variable);
  for (const Tensor& loss : step.graph.losses()) total = total + loss;
  return total;
}

// 4. What is logged: "loss" (as Keras's loss tracker logs it: batch means weighted by the batch's rows), then
// the metrics; each value's statistics are fetched, and its result computed from their totals. Returns the
// fetches.
std::vector<Tensor> add_logged(StepGraph& step, const ModelBase& model, const Tensor& total, const Tensor& output,
                               NamedSums& sums) {
  sums.insert(sums.begin(), {"loss", MetricSums::batch_mean(total, ops::dim_size(output, 0))});
  std::vector<Tensor> fetches;
  for (const auto& [name, value] : sums) {
    StepGraph::Logged logged{name, value.statistics, {}, Tensor()};
    for (const Tensor& statistic : value.statistics) {
      fetches.push_back(statistic);
      logged.totals.push_back(step.graph.placeholder(statistic.shape(), DType::float64, "total"));
    }
    logged.result = value.result(logged.totals);
    if (logged.result.rank() > 1 || !logged.result.shape().is_fully_defined())
      throw ShapeError(model.describe() + ": metric '" + name +
                       "' must give one value or a vector of known size, got " + logged.result.shape().to_string());
    step.logged.push_back(std::move(logged));
  }
  return fetches;
}

// 5. The updates of a training step: the gradients of the total loss, the optimizer's assignments from them
// (in a distributed step, from placeholders fed the gradients summed across processes) and the weights'
// constraints, which project each new value as Keras applies them after the optimizer's assignment.
std::vector<Update> add_updates(StepGraph& step, const StepRecipe& recipe, const std::vector<Weight>& trainable,
                                const Tensor& total) {
  std::vector<Tensor> weights;
  std::vector<std::string> paths;
  std::vector<const Weight*> sources;
  for (const Weight& weight : trainable) {
    const Tensor variable = step.graph.find_variable(weight.value);
    if (!variable.valid()) continue;  // a weight this model's outputs never read
    weights.push_back(variable);
    paths.push_back(weight.path);
    sources.push_back(&weight);
  }
  GradientOptions options;
  options.allow_unused = true;
  std::vector<Tensor> grads = gradients(total, weights, options);
  if (step.distributed) {
    step.gradients = grads;
    for (Tensor& grad : grads) {
      if (grad.valid()) grad = step.graph.placeholder(grad.shape(), grad.dtype(), "reduced_gradient");
      step.reduced.push_back(grad);
    }
  }
  std::vector<Update> updates = recipe.optimizer.build_updates(step.graph, weights, grads, paths);
  for (Update& update : updates)
    for (std::size_t i = 0; i < weights.size(); ++i)
      if (update.variable.id() == weights[i].id()) {
        if (sources[i]->constraint) update.value = sources[i]->constraint(update.value);
        // A "bfloat16" layer's variable holds bfloat16 values (kiln keeps them in float32 memory).
        if (sources[i]->bfloat16) update.value = ops::round_to_bfloat16(update.value);
      }
  return updates;
}

// 6. The programs: the fetches and updates, with what the layers' calls assign besides the weights (in
// training, BatchNormalization's moving statistics, assigned with the optimizer's updates; in training and
// evaluation, a stateful recurrent layer's final states). A distributed step fetches its gradients too, and
// runs the optimizer's updates in a program of their own (StepGraph::apply).
void plan_programs(StepGraph& step, std::vector<Tensor> fetches, std::vector<Update> updates) {
  const std::vector<Update>& state = step.graph.state_updates();
  if (step.distributed) {
    for (const Tensor& grad : step.gradients)
      if (grad.valid()) fetches.push_back(grad);
    step.apply = std::make_unique<Program>(step.graph, std::vector<Tensor>{}, updates);
    updates.clear();
  }
  updates.insert(updates.end(), state.begin(), state.end());
  step.programs = std::make_unique<ProgramPool>(step.graph, fetches, updates);
}

}  // namespace

Shape with_unknown_batch(const Array& array) {
  std::vector<std::int64_t> dims = array.shape().dims();
  if (!dims.empty()) dims[0] = Shape::unknown;
  return Shape(dims);
}

std::shared_ptr<StepGraph> build_step_graph(const StepRecipe& recipe, const std::vector<Array>& x,
                                            const std::vector<Array>& y, const std::vector<Array>& w, bool training,
                                            bool distributed) {
  auto step = std::make_shared<StepGraph>();
  step->training = training;
  step->distributed = training && distributed;
  const std::vector<Tensor> outputs = add_model(*step, recipe.model, x);
  NamedSums sums;
  Tensor total = add_losses_and_metrics(*step, recipe, outputs, y, w, sums);
  const std::vector<Weight> trainable = recipe.model.trainable_weights();
  total = add_penalties(*step, trainable, total);
  const std::vector<Tensor> fetches = add_logged(*step, recipe.model, total, outputs[0], sums);
  std::vector<Update> updates;
  if (training) updates = add_updates(*step, recipe, trainable, total);
  plan_programs(*step, fetches, std::move(updates));
  return step;
}

}  // namespace kiln::detail
