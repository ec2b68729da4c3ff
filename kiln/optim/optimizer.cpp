#include <kiln/optim/optimizer.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Keras's base arguments, in its get_config order.
const char* const base_keys[] = {"name",
                                 "learning_rate",
                                 "weight_decay",
                                 "clipnorm",
                                 "global_clipnorm",
                                 "clipvalue",
                                 "use_ema",
                                 "ema_momentum",
                                 "ema_overwrite_frequency",
                                 "loss_scale_factor",
                                 "gradient_accumulation_steps"};

Config optional_number(const std::optional<double>& value) { return value ? Config(*value) : Config(); }

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

// ---- construction and config ----------------------------------------------------------------------------------

Optimizer::Optimizer(const Config& config, std::string class_name, const OptimizerDefaults& defaults)
    : class_name_(std::move(class_name)),
      iterations_(Shape{}, DType::float64),
      learning_rate_(Shape{}, DType::float64) {
  step_scalars_.push_back(StepScalar{"learning_rate", 0.0, Array(), Array()});
  read_base_config(config, defaults);
}

Optimizer::~Optimizer() = default;

void Optimizer::read_base_config(const Config& config, const OptimizerDefaults& defaults) {
  ConfigReader args(config, class_name_);
  name_ = args.text("name", defaults.name);
  const Config& learning_rate = args.value("learning_rate");
  if (learning_rate.is_map()) {
    schedule_ = LearningRateSchedule::from_config(learning_rate);
  } else {
    learning_rate_.set_flat(
        0, learning_rate.is_null() ? defaults.learning_rate : learning_rate.as_double(describe() + " learning_rate"));
  }
  // Absent means the class's default; an explicit null means none (AdamW rejects that).
  weight_decay_ = config.find("weight_decay") ? std::nullopt : defaults.weight_decay;
  if (args.has("weight_decay")) weight_decay_ = args.number("weight_decay", 0.0);
  args.value("weight_decay");
  if (args.has("clipnorm")) clipnorm_ = args.number("clipnorm", 0.0);
  if (args.has("clipvalue")) clipvalue_ = args.number("clipvalue", 0.0);
  if (args.has("global_clipnorm")) global_clipnorm_ = args.number("global_clipnorm", 0.0);
  if (args.boolean("use_ema", false)) fail("use_ema is not supported by kiln; leave it false");
  ema_momentum_ = args.number("ema_momentum", 0.99);
  args.unsupported("ema_overwrite_frequency");
  args.unsupported("loss_scale_factor");
  args.unsupported("gradient_accumulation_steps");
  check_clip_options();
}

void Optimizer::check_clip_options() const {
  const int given = int{clipnorm_.has_value()} + int{clipvalue_.has_value()} + int{global_clipnorm_.has_value()};
  if (given > 1)
    fail("only one of clipnorm, clipvalue and global_clipnorm can be set, got clipnorm=" +
         optional_number(clipnorm_).to_string() + ", clipvalue=" + optional_number(clipvalue_).to_string() +
         ", global_clipnorm=" + optional_number(global_clipnorm_).to_string());
  for (const auto& [key, value] : {std::pair{"clipnorm", clipnorm_}, std::pair{"clipvalue", clipvalue_},
                                   std::pair{"global_clipnorm", global_clipnorm_}})
    if (value && !(*value >= 0.0)) fail(std::string(key) + " must be >= 0, got " + std::to_string(*value));
}

ConfigReader Optimizer::config_reader(const Config& config) const {
  ConfigReader reader(config, class_name_);
  for (const char* key : base_keys) reader.value(key);
  return reader;
}

void Optimizer::fail(const std::string& message) const { throw ConfigError(describe() + ": " + message); }

std::string Optimizer::describe() const { return class_name_ + " '" + name_ + "'"; }

Config Optimizer::get_config() const {
  return Config{{"name", name_},
                {"learning_rate", schedule_ ? schedule_->serialize() : Config(learning_rate_.flat(0))},
                {"weight_decay", optional_number(weight_decay_)},
                {"clipnorm", optional_number(clipnorm_)},
                {"global_clipnorm", optional_number(global_clipnorm_)},
                {"clipvalue", optional_number(clipvalue_)},
                {"use_ema", false},
                {"ema_momentum", ema_momentum_},
                {"ema_overwrite_frequency", Config()},
                {"loss_scale_factor", Config()},
                {"gradient_accumulation_steps", Config()}};
}

Config Optimizer::serialize() const {
  const std::string key =
      optimizer_registry().key_where([this](const OptimizerClass& entry) { return entry.type == typeid(*this); });
  if (key.empty())
    throw ConfigError(describe() + " is not registered; register it with KILN_REGISTER_OPTIMIZER to save it by config");
  return Config{
      {"module", "keras.optimizers"}, {"class_name", class_name_}, {"config", get_config()}, {"registered_name", key}};
}

OptimizerPtr Optimizer::from_config(const Config& serialized) {
  if (serialized.type() == Config::Type::string) return create_optimizer(serialized.as_string());
  if (!serialized.is_map())
    throw ConfigError("an optimizer is a name or {\"class_name\": ..., \"config\": {...}}, got " +
                      serialized.to_string());
  std::string key = serialized.get_string("class_name");
  if (const Config* registered = serialized.find("registered_name"); registered != nullptr && !registered->is_null())
    key = registered->as_string("key 'registered_name'");
  const Config* config = serialized.find("config");
  return create_optimizer(key, config != nullptr ? *config : Config());
}

// ---- slots and per-step scalars ------------------------------------------------------------------------------

Optimizer::Slot* Optimizer::find_slot(const std::string& slot_name, const std::string& weight_path) {
  for (Slot& slot : slots_)
    if (slot.slot_name == slot_name && slot.weight_path == weight_path) return &slot;
  return nullptr;
}

Optimizer::Slot& Optimizer::ensure_slot(const std::string& slot_name, const std::string& weight_path,
                                        const Shape& shape, DType dtype) {
  if (Slot* slot = find_slot(slot_name, weight_path)) {
    if (slot->value.shape() != shape)
      throw ShapeError(describe(), "slot '" + slot_name + "/" + weight_path + "' was built for another shape",
                       {{"slot", slot->value.shape()}, {"weight", shape}});
    if (slot->value.dtype() != dtype)
      throw DTypeError(describe() + ": slot '" + slot_name + "/" + weight_path + "' is " +
                       dtype_name(slot->value.dtype()) + ", its weight " + dtype_name(dtype));
    return *slot;
  }
  slots_.push_back(Slot{slot_name, weight_path, Array::full(shape, slot_initial_value(slot_name), dtype)});
  return slots_.back();
}

// A graph that already holds the slot (built twice, or a second Program) reads the same variable.
Tensor Optimizer::slot_variable(Graph& graph, Slot& slot) {
  if (Tensor existing = graph.find_variable(slot.value)) return existing;
  return graph.variable(name_ + "/" + slot.slot_name + "/" + slot.weight_path, slot.value, /*trainable=*/false);
}

std::size_t Optimizer::add_step_scalar(const std::string& scalar_name) {
  step_scalars_.push_back(StepScalar{scalar_name, 0.0, Array(), Array()});
  return step_scalars_.size() - 1;
}

void Optimizer::set_step_scalar(std::size_t scalar_id, double value) {
  StepScalar& scalar = step_scalars_.at(scalar_id);
  scalar.value = value;
  if (!scalar.float32.empty()) scalar.float32.set_flat(0, value);
  if (!scalar.float64.empty()) scalar.float64.set_flat(0, value);
}

Tensor Optimizer::scalar_variable(Graph& graph, std::size_t scalar_id, DType dtype) {
  StepScalar& scalar = step_scalars_.at(scalar_id);
  Array& value = dtype == DType::float32 ? scalar.float32 : scalar.float64;
  if (value.empty()) value = Array::full(Shape{}, scalar.value, dtype);
  if (Tensor existing = graph.find_variable(value)) return existing;
  return graph.variable(name_ + "/" + scalar.name, value, /*trainable=*/false);
}

// ---- WeightUpdate
// ------------------------------------------------------------------------------------------------------

Optimizer::WeightUpdate::WeightUpdate(Optimizer& optimizer, Graph& graph, std::vector<Update>& updates)
    : optimizer_(optimizer), graph_(graph), updates_(updates) {}

Tensor Optimizer::WeightUpdate::slot(const std::string& slot_name) const {
  Slot* found = optimizer_.find_slot(slot_name, path_);
  if (found == nullptr)
    throw ValueError(optimizer_.describe() + ": '" + slot_name + "' is not one of its slots (slot_names())");
  return optimizer_.slot_variable(graph_, *found);
}

void Optimizer::WeightUpdate::assign(const std::string& slot_name, const Tensor& value) {
  if (contains(assigned_, slot_name))
    throw ValueError(optimizer_.describe() + ": slot '" + slot_name + "/" + path_ + "' is assigned twice in one step");
  assigned_.push_back(slot_name);
  updates_.push_back({slot(slot_name), value});
}

Tensor Optimizer::WeightUpdate::scalar(std::size_t scalar_id) const {
  return optimizer_.scalar_variable(graph_, scalar_id, weight_.dtype());
}

// ---- the update ------------------------------------------------------------------------------------------------

std::vector<std::size_t> Optimizer::checked_inputs(const Graph& graph, const std::vector<Tensor>& weights,
                                                   const std::vector<Tensor>& grads,
                                                   const std::vector<std::string>& paths) const {
  if (weights.size() != grads.size() || weights.size() != paths.size())
    throw ValueError(describe() + ": build_updates got " + std::to_string(weights.size()) + " weights, " +
                     std::to_string(grads.size()) + " gradients and " + std::to_string(paths.size()) + " paths");
  std::vector<std::size_t> active;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const Tensor& weight = weights[i];
    if (!weight.valid() || &weight.graph() != &graph || weight.node().kind != NodeKind::variable)
      throw ValueError(describe() + ": weight '" + paths[i] + "' is not a variable of the graph being built");
    for (std::size_t j = 0; j < i; ++j)
      if (weights[j] == weight || paths[j] == paths[i])
        throw ValueError(describe() + ": weight '" + paths[i] + "' is given twice");
    if (!grads[i].valid()) continue;
    if (&grads[i].graph() != &graph)
      throw ValueError(describe() + ": the gradient of '" + paths[i] + "' belongs to another graph");
    if (grads[i].shape() != weight.shape())
      throw ShapeError(describe(), "the gradient of '" + paths[i] + "' does not fit its weight",
                       {{"weight", weight.shape()}, {"gradient", grads[i].shape()}});
    if (grads[i].dtype() != weight.dtype())
      throw DTypeError(describe() + ": the gradient of '" + paths[i] + "' is " + dtype_name(grads[i].dtype()) +
                       ", its weight " + dtype_name(weight.dtype()));
    active.push_back(i);
  }
  if (active.empty()) throw ValueError(describe() + ": no gradients provided for any weight");
  return active;
}

namespace {

// g·c / max(‖g‖, c): unchanged when the norm is within c.
Tensor clip_by_norm(const Tensor& grad, double clipnorm) {
  const Tensor norm = ops::sqrt(ops::sum(ops::square(grad)));
  return ops::div(grad * clipnorm, ops::maximum(norm, ops::scalar_like(norm, clipnorm)));
}

Tensor clip_by_value(const Tensor& grad, double clipvalue) {
  return ops::minimum(ops::maximum(grad, ops::scalar_like(grad, -clipvalue)), ops::scalar_like(grad, clipvalue));
}

// Every gradient times c·min(1/‖G‖, 1/c), ‖G‖ over all of them. The (‖G‖ − ‖G‖) term is 0 for a finite
// norm and NaN otherwise, so an overflowing gradient poisons the step visibly instead of being scaled to 0.
std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& grads, double clipnorm) {
  Tensor squared = ops::sum(ops::square(grads[0]));
  for (std::size_t i = 1; i < grads.size(); ++i) squared = squared + ops::sum(ops::square(grads[i]));
  const Tensor norm = ops::sqrt(squared);
  const Tensor inverse_norm = ops::div(ops::scalar_like(norm, 1.0), norm);
  const Tensor scale = ops::minimum(inverse_norm, ops::scalar_like(norm, 1.0 / clipnorm)) * clipnorm + (norm - norm);
  std::vector<Tensor> clipped;
  for (const Tensor& grad : grads) clipped.push_back(grad * scale);
  return clipped;
}

}  // namespace

// Keras applies at most one clip, and a value of 0 means none.
std::vector<Tensor> Optimizer::clip_gradients(const std::vector<Tensor>& grads) const {
  if (clipnorm_ && *clipnorm_ > 0.0) {
    std::vector<Tensor> clipped;
    for (const Tensor& grad : grads) clipped.push_back(clip_by_norm(grad, *clipnorm_));
    return clipped;
  }
  if (global_clipnorm_ && *global_clipnorm_ > 0.0) return clip_by_global_norm(grads, *global_clipnorm_);
  if (clipvalue_ && *clipvalue_ > 0.0) {
    std::vector<Tensor> clipped;
    for (const Tensor& grad : grads) clipped.push_back(clip_by_value(grad, *clipvalue_));
    return clipped;
  }
  return grads;
}

// Decoupled weight decay, before the optimizer's own rule: w − (w·wd)·lr.
Tensor Optimizer::decayed_weight(Graph& graph, const Tensor& weight) {
  if (!weight_decay_) return weight;
  return weight - ops::mul(weight * *weight_decay_, scalar_variable(graph, learning_rate_scalar, weight.dtype()));
}

std::vector<Update> Optimizer::build_updates(Graph& graph, const std::vector<Tensor>& weights,
                                             const std::vector<Tensor>& grads, const std::vector<std::string>& paths) {
  const std::vector<std::size_t> active = checked_inputs(graph, weights, grads, paths);
  std::vector<Tensor> active_grads;
  for (std::size_t i : active) active_grads.push_back(grads[i]);
  const std::vector<Tensor> clipped = clip_gradients(active_grads);

  std::vector<Update> updates;
  WeightUpdate update(*this, graph, updates);
  for (std::size_t k = 0; k < active.size(); ++k) {
    const Tensor& weight = weights[active[k]];
    for (const std::string& slot_name : slot_names())
      ensure_slot(slot_name, paths[active[k]], weight.shape(), weight.dtype());
    update.weight_ = decayed_weight(graph, weight);
    update.grad_ = clipped[k];
    update.path_ = paths[active[k]];
    update.assigned_.clear();
    updates.push_back({weight, update_step(update)});
  }
  prepare_step();  // so a first run is right even before the caller's own prepare_step()
  return updates;
}

void Optimizer::build(const std::vector<Weight>& weights) {
  for (const Weight& weight : weights)
    for (const std::string& slot_name : slot_names())
      ensure_slot(slot_name, weight.path, weight.value.shape(), weight.value.dtype());
}

// ---- around each run -------------------------------------------------------------------------------------------

void Optimizer::prepare_step() {
  const double learning_rate = current_learning_rate();
  set_step_scalar(learning_rate_scalar, learning_rate);
  compute_step_scalars(iterations() + 1, learning_rate);
}

void Optimizer::finish_step() { iterations_.set_flat(0, iterations_.flat(0) + 1.0); }

std::int64_t Optimizer::iterations() const { return static_cast<std::int64_t>(iterations_.flat(0)); }

void Optimizer::set_iterations(std::int64_t iterations) {
  if (iterations < 0) throw ValueError(describe() + ": iterations must be >= 0, got " + std::to_string(iterations));
  iterations_.set_flat(0, static_cast<double>(iterations));
}

// Keras evaluates the schedule at `iterations` (the steps done), while its bias corrections use t = iterations + 1.
double Optimizer::current_learning_rate() const {
  return schedule_ ? (*schedule_)(iterations()) : learning_rate_.flat(0);
}

void Optimizer::set_learning_rate(double learning_rate) {
  if (schedule_)
    throw ValueError(describe() + ": the learning rate follows a " + schedule_->class_name() +
                     " schedule and cannot be set; create the optimizer with a number to change it");
  learning_rate_.set_flat(0, learning_rate);
}

// ---- state -------------------------------------------------------------------------------------------------------

std::vector<Weight> Optimizer::variables() const {
  std::vector<Weight> result{{"iterations", iterations_, false}};
  if (!schedule_) result.push_back({"learning_rate", learning_rate_, false});
  for (const Slot& slot : slots_) result.push_back({slot.slot_name + "/" + slot.weight_path, slot.value, false});
  return result;
}

void Optimizer::set_variable(const Weight& variable, std::vector<std::string>& restored) {
  if (contains(restored, variable.path))
    throw ValueError(describe() + ": variable '" + variable.path + "' is given twice");
  const bool counter = variable.path == "iterations" || variable.path == "learning_rate";
  if (counter && variable.value.size() != 1)
    throw ShapeError(describe(), "'" + variable.path + "' must be a scalar", {{variable.path, variable.value.shape()}});
  if (variable.path == "iterations") {
    set_iterations(static_cast<std::int64_t>(variable.value.flat(0)));
  } else if (variable.path == "learning_rate") {
    set_learning_rate(variable.value.flat(0));
  } else {
    const std::size_t split = variable.path.find('/');
    const std::string slot_name = variable.path.substr(0, split);
    if (split == std::string::npos || !contains(slot_names(), slot_name))
      throw ValueError(describe() + ": '" + variable.path + "' is not one of its variables");
    const std::string weight_path = variable.path.substr(split + 1);
    Slot& slot = ensure_slot(slot_name, weight_path, variable.value.shape(), variable.value.dtype());
    // Copied into the existing storage: graphs already built keep reading it.
    std::memcpy(slot.value.raw(), variable.value.raw(), slot.value.nbytes());
  }
  restored.push_back(variable.path);
}

void Optimizer::set_variables(const std::vector<Weight>& variables) {
  std::vector<std::string> restored;
  for (const Weight& variable : variables) set_variable(variable, restored);
  for (const Weight& own : this->variables())
    if (!contains(restored, own.path)) throw ValueError(describe() + ": variable '" + own.path + "' was not given");
}

// ---- the registry ------------------------------------------------------------------------------------------------

Registry<OptimizerClass>& optimizer_registry() {
  static Registry<OptimizerClass> registry("optimizer");
  return registry;
}

OptimizerPtr create_optimizer(const std::string& name, const Config& config) {
  return optimizer_registry().get(name).create(config);
}

}  // namespace kiln
