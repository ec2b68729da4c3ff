#include <kiln/layers/model_base.hpp>

#include <algorithm>
#include <optional>
#include <thread>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/layers/detail/model_state.hpp>

namespace kiln {

using detail::is_input_layer;

// ---- ModelBase: running --------------------------------------------------------------------------------------

ModelBase::Use ModelBase::use_for_inference(const char* what) const {
  // A stateful layer's states are written by every call: such a model's inference is exclusive.
  if (carries_state()) return use_for_training(what);
  std::lock_guard<std::mutex> lock(usage_->mutex);
  if (usage_->training > 0 && usage_->trainer != std::this_thread::get_id())
    throw LayerStateError(describe() + "." + what +
                          ": the model is training on another thread; predict and evaluate "
                          "with it once fit returns (or with a copy: load_model of a checkpoint)");
  ++usage_->inferring;
  return Use(this, false);
}

ModelBase::Use ModelBase::use_for_training(const char* what) const {
  std::lock_guard<std::mutex> lock(usage_->mutex);
  const bool trainer_here = usage_->training > 0 && usage_->trainer == std::this_thread::get_id();
  if (usage_->training > 0 && !trainer_here)
    throw LayerStateError(describe() + "." + what + ": the model is already training on another thread");
  if (usage_->inferring > 0 && !trainer_here)
    throw LayerStateError(describe() + "." + what + ": " + std::to_string(usage_->inferring) +
                          " predict or evaluate call(s) are running with this model on other threads; training "
                          "would change the weights they read (start it once they return)");
  ++usage_->training;
  usage_->trainer = std::this_thread::get_id();
  return Use(this, true);
}

ModelBase::Use::~Use() {
  if (!model_) return;
  Usage& usage = *model_->usage_;
  std::lock_guard<std::mutex> lock(usage.mutex);
  if (training_)
    --usage.training;
  else
    --usage.inferring;
}

std::vector<std::vector<Tensor>> ModelBase::replay(const std::vector<Tensor>& inputs, bool training,
                                                   std::size_t last) const {
  if (inputs.size() != input_nodes_.size())
    throw ValueError(describe() + " takes " + std::to_string(input_nodes_.size()) + " inputs, got " +
                     std::to_string(inputs.size()));
  std::vector<std::vector<Tensor>> values(nodes_.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Shape& expected = nodes_[static_cast<std::size_t>(input_nodes_[i])].output_shapes.at(0);
    const Shape& given = inputs[i].shape();
    // Decoding (kiln::generate, CausalLM.generate) feeds a step of one token, or a prompt's tokens at once, of a
    // sequence the model reads whole.
    bool one_step = detail::decoding() != nullptr && given.rank() == expected.rank() && given.rank() >= 2 &&
                    given[1] != Shape::unknown && given[1] >= 1;
    for (std::int64_t axis = 0; one_step && axis < given.rank(); ++axis)
      one_step = axis == 1 || expected[axis] == Shape::unknown || expected[axis] == given[axis];
    if (!one_step && !expected.accepts(given))
      shape_error("input " + std::to_string(i) + " does not fit the model's input '" +
                      nodes_[static_cast<std::size_t>(input_nodes_[i])].layer->name() + "'",
                  {{"expected", expected}, {"given", given}});
    values[static_cast<std::size_t>(input_nodes_[i])] = {inputs[i]};
  }
  auto value_of = [&](const TensorRef& ref) {
    return values.at(static_cast<std::size_t>(ref.node)).at(static_cast<std::size_t>(ref.output));
  };
  for (std::size_t i = 0; i <= last && i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (node.inputs.empty() && is_input_layer(node.layer)) continue;
    std::vector<Tensor> node_inputs;
    for (const TensorRef& ref : node.inputs) node_inputs.push_back(value_of(ref));
    CallArgs args;
    for (const auto& [name, ref] : node.tensor_args) args.tensor(name, value_of(ref));
    if (node.options.is_map())
      for (const auto& [name, value] : node.options.items()) args.option(name, value);
    args.training(training);
    values[i] = (*node.layer)(node_inputs, args);
  }
  return values;
}

std::vector<Tensor> ModelBase::apply(const std::vector<Tensor>& inputs, bool training) const {
  // Layers name themselves and count their calls as they are called: two replays at once (the first
  // predict and the first evaluate on two threads) take turns.
  std::lock_guard<std::mutex> lock(apply_mutex_);
  const std::vector<std::vector<Tensor>> values = replay(inputs, training, nodes_.size());
  std::vector<Tensor> outputs;
  for (const TensorRef& ref : outputs_)
    outputs.push_back(values.at(static_cast<std::size_t>(ref.node)).at(static_cast<std::size_t>(ref.output)));
  return outputs;
}

std::shared_ptr<ModelBase> ModelBase::up_to(const std::string& layer_name) const {
  std::optional<std::size_t> target;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].layer->name() == layer_name) target = i;
  if (!target) get_layer(layer_name);  // ValueError naming the layers there are
  if (!target) throw ValueError(describe() + " never calls its layer '" + layer_name + "'");
  // Fresh placeholders of the model's own input layers, as keras.Model(model.inputs, ...) shares them.
  std::vector<Tensor> inputs;
  for (const int index : input_nodes_)
    inputs.push_back(static_cast<InputLayer&>(*nodes_[static_cast<std::size_t>(index)].layer).make_input());
  std::vector<Tensor> outputs;
  {
    std::lock_guard<std::mutex> lock(apply_mutex_);
    outputs = replay(inputs, false, *target)[*target];
  }
  return std::make_shared<FunctionalModel>(inputs, outputs, name() + "_up_to_" + layer_name);
}

bool ModelBase::build_from_data(const std::vector<Array>&) { return built(); }

std::vector<Tensor> ModelBase::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  return apply(inputs, args.training());
}

std::shared_ptr<ModelBase::Inference> ModelBase::inference() {
  std::lock_guard<std::mutex> lock(inference_mutex_);
  if (!inference_) {
    auto inference = std::make_shared<Inference>();
    for (int index : input_nodes_) {
      const auto& input_layer = static_cast<const InputLayer&>(*nodes_[static_cast<std::size_t>(index)].layer);
      inference->inputs.push_back(
          inference->graph.placeholder(input_layer.batch_shape(), input_layer.dtype(), input_layer.name()));
    }
    inference->outputs = apply(inference->inputs, /*training=*/false);
    // Inference records no training updates; what it does record is state every call carries on (a
    // stateful recurrent layer's final states, the next batch's initial ones).
    inference->programs =
        std::make_unique<detail::ProgramPool>(inference->graph, inference->outputs, inference->graph.state_updates());
    inference_ = inference;
  }
  return inference_;  // a caller's copy keeps it alive if the model is rebuilt meanwhile
}

// The arrays predict (`what`) was given, checked against the inputs: one per input, each fitting it (its row
// count free when `rows_free`: predict feeds rows in batches), all with as many rows.
void ModelBase::check_inputs(const Array* given, std::size_t count, const std::vector<Tensor>& placeholders,
                             const char* what, bool rows_free) const {
  if (count != placeholders.size())
    throw ValueError(describe() + "." + what + " takes " + std::to_string(placeholders.size()) + " arrays, got " +
                     std::to_string(count));
  for (std::size_t i = 0; i < count; ++i) {
    const Shape& expected = placeholders[i].shape();
    const Shape& shape = given[i].shape();
    if (shape.rank() == 0 || !(rows_free ? expected.accepts(shape, 1) : expected.accepts(shape)))
      shape_error(std::string(what) + ": array " + std::to_string(i) + " does not fit the input",
                  {{"input", expected}, {"array", shape}});
    if (shape[0] != given[0].shape()[0])
      shape_error(std::string(what) + ": the arrays have different numbers of rows",
                  {{"array 0", given[0].shape()}, {"array " + std::to_string(i), shape}});
  }
}

// Checked arrays converted to the inputs' dtypes (those of the right dtype shared, not copied).
std::vector<Array> ModelBase::converted_inputs(const Array* given, std::size_t count,
                                               const std::vector<Tensor>& placeholders) const {
  std::vector<Array> inputs;
  for (std::size_t i = 0; i < count; ++i)
    inputs.push_back(given[i].dtype() == placeholders[i].dtype() ? given[i] : given[i].astype(placeholders[i].dtype()));
  return inputs;
}

// Batches are stacked along the first axis, so each output needs a first axis: unknown (the batch), the fixed
// batch of a model whose inputs fix it, or a size an op fixed (Keras's ops.slice writes the whole shape, batch
// included), which each batch run must then give (checked per batch: one row per input row).
void ModelBase::check_stackable(const std::vector<Tensor>& outputs, std::int64_t fixed_batch) const {
  for (const Tensor& output : outputs) {
    const std::vector<std::int64_t>& dims = output.shape().dims();
    if (dims.empty() || (dims[0] != Shape::unknown && fixed_batch >= 0 && dims[0] != fixed_batch))
      throw ValueError(describe() + ": predict needs outputs with a batch dimension, output '" + output.name() +
                       "' has shape " + output.shape().to_string());
  }
}

std::vector<Array> ModelBase::predict(const std::vector<Array>& given, std::int64_t batch_size) {
  if (batch_size <= 0)
    throw ValueError(describe() + ": predict batch_size must be positive, got " + std::to_string(batch_size));
  if (!build_from_data(given) || input_nodes_.empty())
    throw LayerStateError(describe() + " is not built; call it on a tensor, give it an Input, or build it first");
  const Use use = use_for_inference("predict");
  const std::shared_ptr<Inference> inference_graph = inference();
  const Inference& run = *inference_graph;
  check_inputs(given.data(), given.size(), run.inputs, "predict", true);
  const std::vector<Array> inputs = converted_inputs(given.data(), given.size(), run.inputs);
  const std::int64_t rows = inputs[0].shape()[0];
  // Inputs with a fixed batch size (a stateful model's) take batches of exactly that size.
  const std::int64_t fixed_batch = run.inputs[0].shape()[0];
  if (fixed_batch != Shape::unknown) {
    if (rows % fixed_batch != 0)
      throw ValueError(describe() + ": predict: the model's inputs take batches of " + std::to_string(fixed_batch) +
                       " rows, and " + std::to_string(rows) + " rows do not split into them");
    batch_size = fixed_batch;
  }
  check_stackable(run.outputs, fixed_batch);
  // Whether an input has an unknown dimension besides the batch (a sequence length).
  bool has_lengths = false;
  for (const Tensor& input : run.inputs)
    for (int axis = 1; axis < input.rank(); ++axis) has_lengths |= input.shape()[axis] == Shape::unknown;
  const detail::ProgramPool::Lease program = run.programs->lease(std::min(batch_size, rows));

  std::vector<Array> results(run.outputs.size());
  for (std::size_t o = 0; o < results.size(); ++o) {  // what zero rows give; real batches reallocate below
    std::vector<std::int64_t> dims = run.outputs[o].shape().dims();
    for (std::int64_t& dim : dims)
      if (dim == Shape::unknown) dim = 0;
    results[o] = Array(Shape(dims), run.outputs[o].dtype());
  }
  for (std::int64_t start = 0; start < rows; start += batch_size) {
    const std::int64_t count = std::min(batch_size, rows - start);
    for (std::size_t i = 0; i < inputs.size(); ++i) program->feed(run.inputs[i], inputs[i].rows(start, count));
    program->run();
    for (std::size_t o = 0; o < results.size(); ++o) {
      const Array batch = program->view(run.outputs[o]);
      if (start == 0) {
        std::vector<std::int64_t> dims = batch.shape().dims();
        dims[0] = rows;
        results[o] = Array(Shape(dims), batch.dtype());
      }
      if (batch.shape()[0] != count)
        shape_error("predict: output '" + run.outputs[o].name() + "' does not have one row per input row (" +
                        std::to_string(count) + " rows in, " + batch.shape().to_string() + " out)",
                    {{"output", run.outputs[o].shape()}});
      // Another unknown dimension follows the batch size (a Gram matrix), which only a single batch can
      // stack, when the inputs have no other unknown dimension; else it may follow a sequence length, the
      // same in every batch, and only a batch shaped unlike the first shows it follows the batch.
      bool follows_batch = !std::equal(batch.shape().dims().begin() + 1, batch.shape().dims().end(),
                                       results[o].shape().dims().begin() + 1, results[o].shape().dims().end());
      for (int axis = 1; rows > batch_size && !has_lengths && axis < batch.shape().rank(); ++axis)
        follows_batch |= run.outputs[o].shape()[axis] == Shape::unknown;
      if (follows_batch)
        shape_error("predict: output '" + run.outputs[o].name() + "' has a dimension that follows the batch size (" +
                        batch.shape().to_string() + " in a batch of " + std::to_string(count) +
                        " rows), so its batches cannot be stacked; predict with batch_size >= " + std::to_string(rows),
                    {{"output", run.outputs[o].shape()}});
      results[o].set_rows(start, batch);
    }
  }
  return results;
}

Array ModelBase::predict(const Array& input, std::int64_t batch_size) {
  std::vector<Array> outputs = predict(std::vector<Array>{input}, batch_size);
  if (outputs.size() != 1)
    throw ValueError(describe() + " has " + std::to_string(outputs.size()) +
                     " outputs; use predict with a list of arrays");
  return outputs[0];
}

// One batch through the inference graph. With `into`, each output is copied into the caller's array, checked as
// far as it can be before the model runs (dtype, rank, the dimensions the model fixes: a stateful model's batch
// among them), and every array before any is written; else each output is fetched into a new array. Nothing
// here allocates with `into` once the batch size is planned and the inputs have the model's dtypes: the claim,
// the inference graph and a leased Program are found under locks, the inputs are fed by pointer, and the
// outputs copied out.
void ModelBase::predict_batch(const Array* given, std::size_t count, Array* outputs, std::size_t output_count,
                              bool into) {
  if ((!built() && !build_from_data(std::vector<Array>(given, given + count))) || input_nodes_.empty())
    throw LayerStateError(describe() + " is not built; call it on a tensor, give it an Input, or build it first");
  const Use use = use_for_inference("predict_on_batch");
  const std::shared_ptr<Inference> inference_graph = inference();
  const Inference& run = *inference_graph;
  check_inputs(given, count, run.inputs, "predict_on_batch", false);
  if (output_count != run.outputs.size())
    throw ValueError(describe() + ".predict_on_batch writes " + std::to_string(run.outputs.size()) +
                     " outputs, given " + std::to_string(output_count) + " arrays");
  const std::int64_t rows = given[0].shape()[0];
  if (rows == 0) throw ValueError(describe() + ".predict_on_batch: the batch has no rows");
  for (std::size_t o = 0; into && o < output_count; ++o) {
    const Tensor& output = run.outputs[o];
    if (outputs[o].dtype() != output.dtype())
      throw DTypeError(describe() + ".predict_on_batch: output " + std::to_string(o) + " ('" + output.name() +
                       "') is " + dtype_name(output.dtype()) + ", the array " + dtype_name(outputs[o].dtype()));
    const Shape& expected = output.shape();
    const Shape& shape = outputs[o].shape();
    bool fits = !outputs[o].empty() && shape.rank() == expected.rank();
    for (int axis = 0; fits && axis < shape.rank(); ++axis)
      fits = expected[axis] == Shape::unknown || shape[axis] == expected[axis];
    if (!fits)
      shape_error("predict_on_batch: output " + std::to_string(o) + " ('" + output.name() + "') does not fit the array",
                  {{"output", expected}, {"array", shape}});
  }
  bool converts = false;
  for (std::size_t i = 0; i < count; ++i) converts |= given[i].dtype() != run.inputs[i].dtype();
  const std::vector<Array> converted = converts ? converted_inputs(given, count, run.inputs) : std::vector<Array>();
  const Array* inputs = converts ? converted.data() : given;
  const detail::ProgramPool::Lease program = run.programs->lease(rows);
  for (std::size_t i = 0; i < count; ++i) program->feed(run.inputs[i], inputs[i]);
  program->run();
  if (!into) {
    for (std::size_t o = 0; o < output_count; ++o) outputs[o] = program->fetch(run.outputs[o]);
    return;
  }
  for (std::size_t o = 0; o < output_count; ++o)  // a dimension only the plan knew (a sequence's length)
    if (program->planned_shape(run.outputs[o]) != outputs[o].shape())
      shape_error("predict_on_batch: output " + std::to_string(o) + " ('" + run.outputs[o].name() + "') has shape " +
                      program->planned_shape(run.outputs[o]).to_string() + " for these inputs",
                  {{"output", run.outputs[o].shape()}, {"array", outputs[o].shape()}});
  for (std::size_t o = 0; o < output_count; ++o) program->fetch_into(run.outputs[o], outputs[o]);
}

void ModelBase::predict_on_batch(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  predict_batch(inputs.data(), inputs.size(), outputs.data(), outputs.size(), true);
}

void ModelBase::predict_on_batch(const Array& input, Array& output) { predict_batch(&input, 1, &output, 1, true); }

std::vector<Array> ModelBase::predict_on_batch(const std::vector<Array>& inputs) {
  if (!built()) build_from_data(inputs);  // (an unbuilt Sequential: its outputs are known once built)
  std::vector<Array> outputs(num_outputs());
  predict_batch(inputs.data(), inputs.size(), outputs.data(), outputs.size(), false);
  return outputs;
}

Array ModelBase::predict_on_batch(const Array& input) {
  if (!built()) build_from_data({input});
  if (built() && num_outputs() != 1)
    throw ValueError(describe() + " has " + std::to_string(num_outputs()) +
                     " outputs; use predict_on_batch with a list of arrays");
  Array output;
  predict_batch(&input, 1, &output, 1, false);
  return output;
}

}  // namespace kiln
