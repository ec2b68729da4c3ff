#include "support/layer_check.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include "support/temp_dir.hpp"

namespace kiln::testing {

namespace {

struct Built {
  std::vector<Tensor> inputs;
  std::vector<std::pair<Tensor, Array>> fed;  // every placeholder with its data
  std::vector<Tensor> outputs;
};

Built build_call(Graph& graph, Layer& layer, const LayerCase& c, bool unknown_batch) {
  Built built;
  const std::int64_t batch = c.inputs.empty() || c.inputs[0].shape().rank() == 0 ? -2 : c.inputs[0].shape()[0];
  auto declared = [&](const Array& a) {
    Shape shape = a.shape();
    if (unknown_batch && shape.rank() > 0 && shape[0] == batch) shape[0] = Shape::unknown;
    return shape;
  };
  for (const Array& input : c.inputs) {
    built.inputs.push_back(graph.placeholder(declared(input), input.dtype(), "x"));
    built.fed.emplace_back(built.inputs.back(), input);
  }
  CallArgs args;
  for (const auto& [name, value] : c.tensor_args) {
    const Tensor placeholder = graph.placeholder(declared(value), value.dtype(), name);
    built.fed.emplace_back(placeholder, value);
    args.tensor(name, placeholder);
  }
  if (c.options.is_map())
    for (const auto& [name, value] : c.options.items()) args.option(name, value);
  args.training(c.training);
  built.outputs = layer(built.inputs, args);
  return built;
}

}  // namespace

Array token_ids(const Shape& shape, std::int64_t vocabulary) {
  Array result(shape, DType::float64);
  for (std::size_t i = 0; i < result.size(); ++i)
    result.set_flat(i, static_cast<double>((i * 7 + 3) % static_cast<std::size_t>(vocabulary)));
  return result;
}

double max_abs_difference(const Array& a, const Array& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a.flat(i) - b.flat(i)));
  return worst;
}

Array random_input(const Shape& shape, std::uint64_t seed, double low, double high) {
  Rng rng(seed);
  return random_array(shape, rng, DType::float64, low, high);
}

std::vector<Array> run_layer(Layer& layer, const LayerCase& c) {
  Graph graph;
  const Built built = build_call(graph, layer, c, false);
  Program program(graph, built.outputs);
  for (const auto& [placeholder, value] : built.fed) program.feed(placeholder, value);
  program.run();
  std::vector<Array> outputs;
  for (const Tensor& output : built.outputs) outputs.push_back(program.fetch(output));
  return outputs;
}

std::vector<Shape> symbolic_output_shapes(Layer& layer, const LayerCase& c) {
  Graph graph;
  const Built built = build_call(graph, layer, c, true);
  std::vector<Shape> shapes;
  for (const Tensor& output : built.outputs) shapes.push_back(output.shape());
  return shapes;
}

GradcheckReport gradcheck_layer(Layer& layer, const LayerCase& c, const LayerGradcheckOptions& options) {
  Graph graph;
  const Built built = build_call(graph, layer, c, true);
  const std::vector<Array> probe = run_layer(layer, c);

  Rng projection_rng(12345);
  Tensor loss;
  std::vector<std::pair<Tensor, Array>> projections;
  for (std::size_t k = 0; k < built.outputs.size(); ++k) {
    const Array projection = random_array(probe[k].shape(), projection_rng, DType::float64);
    const Tensor input = graph.placeholder(built.outputs[k].shape(), DType::float64, "projection");
    projections.emplace_back(input, projection);
    const Tensor term = ops::sum(ops::mul(built.outputs[k], input));
    loss = loss.valid() ? loss + term : term;
  }

  // What to perturb: input arrays (fed without a copy) and weight arrays (shared with the variables).
  struct Target {
    std::string label;
    Tensor tensor;
    Array values;
  };
  std::vector<Target> targets;
  std::vector<int> wrt = options.check_inputs ? options.wrt_inputs : std::vector<int>{};
  if (wrt.empty() && options.check_inputs)
    for (int i = 0; i < static_cast<int>(c.inputs.size()); ++i) wrt.push_back(i);
  for (int i : wrt)
    targets.push_back({"input " + std::to_string(i), built.inputs[static_cast<std::size_t>(i)],
                       c.inputs[static_cast<std::size_t>(i)]});
  if (options.check_weights)
    for (const Weight& weight : layer.trainable_weights()) {
      const Tensor variable = graph.find_variable(weight.value);
      if (!variable.valid()) FAIL("weight '" + weight.path + "' is not used by the call");
      targets.push_back({"weight " + weight.path, variable, weight.value});
    }
  std::vector<Tensor> wrt_tensors;
  for (const Target& target : targets) wrt_tensors.push_back(target.tensor);
  const std::vector<Tensor> grads = gradients(loss, wrt_tensors);

  Program analytic(graph, grads);
  Program forward(graph, {loss});
  for (Program* program : {&analytic, &forward}) {
    for (const auto& [placeholder, value] : built.fed) program->feed(placeholder, value);
    for (const auto& [placeholder, value] : projections) program->feed(placeholder, value);
  }
  analytic.run();

  GradcheckReport report;
  const double h = options.base.step;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    Array& x = targets[t].values;
    const Array grad = analytic.fetch(grads[t]);
    for (std::size_t j = 0; j < x.size(); ++j) {
      const double original = x.flat(j);
      x.set_flat(j, original + h);
      forward.set_run_count(0);
      forward.run();
      const double plus = forward.scalar(loss);
      x.set_flat(j, original - h);
      forward.set_run_count(0);
      forward.run();
      const double minus = forward.scalar(loss);
      x.set_flat(j, original);
      const double numeric = (plus - minus) / (2.0 * h);
      const double analytic_value = grad.flat(j);
      const double error = std::fabs(analytic_value - numeric) /
                           std::max({std::fabs(analytic_value), std::fabs(numeric), options.base.floor});
      ++report.num_checked;
      if (error > report.max_relative_error || std::isnan(error)) {
        report.max_relative_error = std::isnan(error) ? INFINITY : error;
        std::ostringstream entry;
        entry.precision(10);
        entry << layer.describe() << " " << targets[t].label << " [index " << j << "]: analytic " << analytic_value
              << " vs numeric " << numeric;
        report.worst = entry.str();
      }
    }
  }
  return report;
}

void check_config_round_trip(const LayerPtr& layer, const LayerCase& c) {
  const std::vector<Array> expected = run_layer(*layer, c);  // builds it if it was not
  const Config serialized = serialize_layer(*layer);
  INFO(serialized.to_string());
  const LayerPtr copy = layer_from_config(serialized);
  REQUIRE(copy->built());  // the build_config rebuilt every weight before any call
  REQUIRE(copy->get_config() == layer->get_config());
  REQUIRE(copy->registered_name() == layer->registered_name());
  const std::vector<Weight> original_weights = layer->weights(), copied_weights = copy->weights();
  REQUIRE(copied_weights.size() == original_weights.size());
  for (std::size_t i = 0; i < original_weights.size(); ++i) {
    CHECK(copied_weights[i].path == original_weights[i].path);
    CHECK(copied_weights[i].value.shape() == original_weights[i].value.shape());
  }
  copy->set_weights(layer->get_weights());
  const std::vector<Array> actual = run_layer(*copy, c);
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) CHECK(actual[i].bitwise_equal(expected[i]));
}

namespace {

// A functional model around one call of `layer`: an Input per input and per tensor argument (their
// batch unknown), the call's options, float64 data. Returns the model and its inputs' data, in order.
std::pair<Model, std::vector<Array>> model_around(const LayerPtr& layer, const LayerCase& c) {
  std::vector<Tensor> inputs;
  std::vector<Array> data;
  auto input_for = [&](const Array& array, const std::string& name) {
    std::vector<std::int64_t> dims = array.shape().dims();
    if (!dims.empty()) dims[0] = Shape::unknown;
    inputs.push_back(Input(Shape(dims), array.dtype(), name));
    data.push_back(array);
    return inputs.back();
  };
  std::vector<Tensor> call_inputs;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    call_inputs.push_back(input_for(c.inputs[i], "input_" + std::to_string(i)));
  CallArgs args;
  for (const auto& [name, value] : c.tensor_args) args.tensor(name, input_for(value, name));
  if (c.options.is_map())
    for (const auto& [name, value] : c.options.items()) args.option(name, value);
  const std::vector<Tensor> outputs = (*layer)(call_inputs, args);
  return {Model(inputs, outputs), data};
}

void check_identical(const std::vector<Array>& actual, const std::vector<Array>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) CHECK(actual[i].bitwise_equal(expected[i]));
}

void check_file_round_trips(const LayerSpec& spec) {
  TempDir dir;
  const LayerPtr layer = spec.make();
  auto [model, data] = model_around(layer, spec.call);
  const std::vector<Array> expected = model.predict(data);
  model.save(dir.file("model.kiln"));
  check_identical(load_model(dir.file("model.kiln")).predict(data), expected);
  // Weights only: a model rebuilt from the JSON has its own weights until load_weights.
  model.save_weights(dir.file("weights.kiln"));
  const Model fresh = model_from_json(model.to_json());
  fresh.load_weights(dir.file("weights.kiln"));
  check_identical(fresh.predict(data), expected);
}

void check_bad_input(const LayerSpec& spec, const LayerSpec::BadInput& bad) {
  const LayerPtr layer = spec.make();
  run_layer(*layer, spec.call);  // built from the good call first, as a model would have it
  std::vector<Tensor> inputs;
  for (const Shape& shape : bad.shapes) inputs.push_back(Input(shape, DType::float64));
  CallArgs args;
  if (spec.call.options.is_map())
    for (const auto& [name, value] : spec.call.options.items()) args.option(name, value);
  try {
    (*layer)(inputs, args);
    FAIL_CHECK(bad.label + ": the call was accepted");
  } catch (const Error& error) {
    CHECK_THAT(error.what(), Catch::Contains(layer->describe()) && Catch::Contains(bad.message));
  }
}

}  // namespace

std::set<std::string>& harnessed_layers() {
  static std::set<std::string> keys;
  return keys;
}

void check_layer(const LayerSpec& spec) {
  REQUIRE(spec.make);
  const std::string who = spec.make()->class_name();
  {
    INFO(who << ": output shapes with an unknown batch");
    const LayerPtr layer = spec.make();
    CHECK(symbolic_output_shapes(*layer, spec.call) == spec.output_shapes);
  }
  if (spec.differentiable) {
    const LayerPtr layer = spec.make();
    const GradcheckReport report = gradcheck_layer(*layer, spec.call, spec.gradients);
    INFO(who << ": float64 gradients of the inputs and every weight: " << report.worst_entry());
    CHECK(report.num_checked > 0);
    CHECK(report.max_relative_error <= spec.tolerance);
  }
  {
    INFO(who << ": config round trip");
    check_config_round_trip(spec.make(), spec.call);
  }
  {
    INFO(who << ": save and load through a file, whole and weights only");
    check_file_round_trips(spec);
  }
  for (const LayerSpec::BadInput& bad : spec.bad_inputs) {
    INFO(who << ": bad input: " << bad.label);
    check_bad_input(spec, bad);
  }
}

}  // namespace kiln::testing
