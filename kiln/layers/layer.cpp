#include <kiln/layers/layer.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <regex>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/detail/loading.hpp>
#include <kiln/layers/detail/quantization.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/layers/detail/replay.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- CallArgs ---------------------------------------------------------------------------------------

CallArgs& CallArgs::tensor(const std::string& name, const Tensor& value) {
  for (auto& entry : tensors_)
    if (entry.first == name) {
      entry.second = value;
      return *this;
    }
  tensors_.emplace_back(name, value);
  return *this;
}

CallArgs& CallArgs::option(const std::string& name, Config value) {
  options_.set(name, std::move(value));
  return *this;
}

const Tensor* CallArgs::find_tensor(const std::string& name) const {
  for (const auto& entry : tensors_)
    if (entry.first == name && entry.second.valid()) return &entry.second;
  return nullptr;
}

bool CallArgs::flag(const std::string& name, bool fallback) const {
  const Config* value = options_.find(name);
  return value == nullptr || value->is_null() ? fallback : value->as_bool("call option '" + name + "'");
}

// ---- names ------------------------------------------------------------------------------------------

// ---- the global dtype policy ----------------------------------------------------------------------------

namespace {
std::string& global_policy() {
  static std::string policy = "float32";
  return policy;
}
}  // namespace

void set_dtype_policy(const std::string& name) {
  if (name != "float32" && name != "float64" && name != "bfloat16" && name != "mixed_bfloat16")
    throw ConfigError("set_dtype_policy: '" + name +
                      "' is not a policy kiln computes (it has float32, float64, bfloat16 and mixed_bfloat16)");
  global_policy() = name;
}

std::string dtype_policy() { return global_policy(); }

// ---- Layer --------------------------------------------------------------------------------------------

namespace {

// A policy's name of its source dtype: Keras writes null for the global policy (float32).
std::string source_name_of(const Config& policy) {
  const Config* source = policy.find("source_name");
  return source == nullptr || source->is_null() ? std::string("float32") : source->as_string("source_name");
}

}  // namespace

Layer::Layer(const Config& config, std::string class_name, const std::vector<std::string>& quantization_modes)
    : class_name_(std::move(class_name)), quantization_modes_(quantization_modes) {
  if (!config.is_null() && !config.is_map())
    throw ConfigError(class_name_ + ": a config must be a map of arguments, got " + config.to_string());
  name_ = config.get_string("name", "");
  name_given_ = !name_.empty();
  trainable_ = config.get_bool("trainable", true);
  const Config* dtype = config.find("dtype");
  if (dtype == nullptr || dtype->is_null()) {
    // Keras: a layer given no dtype takes the global policy (keras.config.set_dtype_policy) when it is made.
    if (const std::string global = dtype_policy(); global != "float32") {
      apply_policy(Config(global));
      dtype_from_global_ = true;
    }
  } else {
    if (detail::is_dtype_policy_map(*dtype)) {
      // keras-hub's backbones write their quantized layers' policies as one DTypePolicyMap by layer path, and
      // Keras hands the map to every layer: each looks its own path up, once the path is known.
      const Config* arguments = dtype->find("config");
      const Config* entries = arguments != nullptr && arguments->is_map() ? arguments->find("policy_map") : nullptr;
      if (entries == nullptr || !(entries->is_map() || entries->is_null()))
        throw ConfigError(class_name_ + (name_.empty() ? "" : " '" + name_ + "'") +
                          ": a DTypePolicyMap needs a 'policy_map' of layer paths, got " + dtype->to_string());
      policy_map_ = *dtype;
      policy_map_given_ = true;
      if (const Config* fallback = arguments->find("default_policy"); fallback != nullptr && !fallback->is_null())
        apply_policy(*fallback);
    } else {
      apply_policy(*dtype);
    }
  }
  if (const Config* activity = config.find("activity_regularizer"); activity != nullptr)
    activity_regularizer_ = Regularizer::from_config(*activity);
}

std::string Layer::quantization_mode_of(const Config& policy, const std::string& what,
                                        const std::vector<std::string>& modes) const {
  std::string mode;
  if (policy.is_map()) {
    const Config& arguments = policy.at("config");
    if (arguments.contains("mode")) mode = arguments.get_string("mode");
    else if (const std::string name = arguments.get_string("name", ""); name.find("_from_") != std::string::npos)
      mode = name.substr(0, name.find("_from_"));
  } else if (policy.type() == Config::Type::string) {
    const std::string& name = policy.as_string();
    if (const auto from = name.find("_from_"); from != std::string::npos) mode = name.substr(0, from);
  }
  // A mode the layer names, or for int4 "int4/<block size>" (Keras's Int4DTypePolicy; the layer reads the size).
  const bool known = mode.empty() || std::any_of(modes.begin(), modes.end(), [&](const std::string& m) {
                       return mode == m || (m == "int4" && mode.rfind("int4/", 0) == 0);
                     });
  if (!known) {
    std::string listing;
    for (const std::string& m : modes) listing += (listing.empty() ? "" : ", ") + m;
    throw ConfigError(what + ": quantization mode '" + mode + "' is not one kiln runs for this layer (" +
                      (listing.empty() ? std::string("it has none") : "it runs " + listing) + ")");
  }
  return mode;
}

void Layer::apply_policy(const Config& dtype) {
  // Keras 3 writes "float32", a DTypePolicy {"class_name": "DTypePolicy", "config": {"name": ...}}, or for a
  // quantized layer a QuantizedDTypePolicy {"config": {"mode": "int8", "source_name": "float32"}} (whose name
  // is "int8_from_float32"; a null source or name is the global policy's, float32). Nothing changes unless every
  // check passes.
  const std::string who = class_name_ + (name_.empty() ? "" : " '" + name_ + "'");
  const std::string mode = quantization_mode_of(dtype, who, quantization_modes_);
  std::string dtype_name;
  if (dtype.is_map()) {
    const Config& policy = dtype.at("config");
    dtype_name = policy.contains("mode") ? source_name_of(policy) : policy.get_string("name", "float32");
  } else {
    dtype_name = dtype.as_string(class_name_ + " argument 'dtype'");
  }
  if (const auto from = dtype_name.find("_from_"); from != std::string::npos) dtype_name = dtype_name.substr(from + 6);
  // Keras's bfloat16 policies: kiln's variables stay float32 in memory (see policy_name()).
  const bool bfloat16 = dtype_name == "bfloat16" || dtype_name == "mixed_bfloat16";
  if (dtype_name == "float16" || dtype_name == "mixed_float16")
    throw ConfigError(who + ": the dtype policy '" + dtype_name +
                      "' is not one kiln computes (it has float32, float64, bfloat16 and mixed_bfloat16)");
  const DType parsed = bfloat16 ? DType::float32 : dtype_from_name(dtype_name);
  if (!is_floating(parsed)) throw ConfigError(who + ": computes in float32 or float64, not " + dtype_name);
  quantization_mode_ = mode;
  dtype_ = parsed;
  dtype_given_ = true;
  policy_name_ = bfloat16 ? dtype_name : std::string();
}

namespace {

// Whether a map key can match only itself (Keras's paths: letters, digits, '_', '/'), so that no regex is compiled.
bool literal_key(const std::string& key) { return key.find_first_of(".^$*+?()[]{}|\\") == std::string::npos; }

}  // namespace

Config Layer::policy_for(const std::string& relative) const {
  if (policy_map_.is_null()) return Config();
  const std::string key = relative.empty() ? path() : path() + "/" + relative;
  const Config& arguments = policy_map_.at("config");
  const Config* entries = arguments.find("policy_map");
  const Config fallback = arguments.contains("default_policy") ? arguments.at("default_policy") : Config();
  if (entries == nullptr || entries->is_null()) return fallback;
  if (const Config* exact = entries->find(key)) return *exact;
  // Keras: else the one key that, as a regular expression, matches the whole path (re.fullmatch); two are an error.
  const Config* found = nullptr;
  std::string first;
  for (const auto& [pattern, policy] : entries->items()) {
    if (literal_key(pattern)) continue;  // (it would have matched exactly)
    bool matches = false;
    try {
      matches = std::regex_match(key, std::regex(pattern));
    } catch (const std::regex_error& error) {
      throw ConfigError(describe() + ": the dtype policy map's key '" + pattern +
                        "' is not a regular expression kiln reads (ECMAScript syntax): " + error.what());
    }
    if (!matches) continue;
    if (found != nullptr)
      throw ConfigError(describe() + ": path '" + key + "' matches more than one dtype policy pattern ('" + first +
                        "' and '" + pattern + "')");
    found = &policy;
    first = pattern;
  }
  return found != nullptr ? *found : fallback;
}

void Layer::resolve_policy_map() {
  if (policy_map_.is_null() || policy_map_resolved_) return;
  const Config policy = policy_for("");
  if (!policy.is_null()) apply_policy(policy);
  quantization_resolved();
  policy_map_resolved_ = true;  // (only once everything above held: a failed resolution is tried again)
}

std::vector<Layer::ProjectionQuantization> Layer::projection_quantizations(const std::vector<std::string>& names) const {
  std::vector<ProjectionQuantization> out;
  for (const std::string& name : names) {
    const std::string what = describe() + " projection '" + name + "'";
    ProjectionQuantization q;
    q.mode = quantization_mode_of(policy_for(name), what, {"int8", "int4"});
    if (q.mode.rfind("int4", 0) == 0) {
      ConfigReader args(Config::map(), what);
      q.int4_block = detail::read_int4_config(args, Config(), q.mode).block_size;
      q.mode = "int4/" + std::to_string(q.int4_block);  // (as Keras names it again: "int4/None" is "int4/-1")
    }
    out.push_back(q);
  }
  return out;
}

void Layer::add_int4_scales(const std::string& prefix, std::int64_t rows, std::int64_t columns,
                            ProjectionQuantization& q) {
  if (q.int4_block < 0) {
    q.scale = add_weight(prefix + "kernel_scale", {columns}, Initializer::get("ones"), false);
    return;
  }
  const std::int64_t block = q.int4_block, groups = rows == 0 ? 0 : (rows - 1) / block + 1;
  q.scale = add_weight(prefix + "kernel_scale", {groups, columns}, Initializer::get("ones"), false);
  q.zero = add_int8_weight(prefix + "kernel_zero", {groups, columns});
  // Each row's group, floor(row / block_size), as Keras's _int4_build assigns it.
  q.g_idx = add_weight(prefix + "g_idx", {rows}, [block](const Shape& shape, DType dtype, Rng&) {
    return detail::block_indices(shape, dtype, block);
  }, false);
}

Tensor Layer::int4_projection(const Tensor& x, WeightId packed, const ProjectionQuantization& q,
                              std::int64_t columns) const {
  if (q.int4_block < 0) return ops::matmul(x, ops::dequantize(variable(packed, x), variable(q.scale, x), false, columns));
  return detail::int4_groups_product(x, variable(packed, x), variable(q.scale, x), variable(q.zero, x),
                                     variable(q.g_idx, x), columns);
}

std::vector<std::pair<std::string, Config>> Layer::quantized_policies() const {
  std::vector<std::pair<std::string, Config>> policies;
  if (!quantization_mode_.empty()) policies.emplace_back(path(), detail::quantized_dtype_policy(quantization_mode_, policy_name()));
  const std::vector<std::string> projections = quantizable_projections();
  for (std::size_t i = 0; i < projections.size(); ++i)
    if (projection_quantized(i))
      policies.emplace_back(path() + "/" + projections[i], detail::quantized_dtype_policy(projection_mode(i), policy_name()));
  return policies;
}

Layer::~Layer() = default;

void Layer::set_trainable(bool trainable) {
  trainable_ = trainable;
  for (const LayerPtr& child : children_) child->set_trainable(trainable);
}

ConfigReader Layer::config_reader(const Config& config) const {
  // Messages name the layer when its config does: "GRU 'encoder': units must be positive".
  ConfigReader reader(config, name_given_ ? describe() : class_name_);
  reader.value("name");
  reader.value("trainable");
  reader.value("dtype");
  reader.value("activity_regularizer");
  return reader;
}

Config Layer::base_config() const {
  Config config = {{"name", name_.empty() ? Config() : Config(name_)}, {"trainable", trainable_}};
  if (policy_map_given_)  // Keras writes the layer's policy as it was given: the map
    config.set("dtype", policy_map_);
  else if (!quantization_mode_.empty())  // Keras's QuantizedDTypePolicy, as it writes it
    config.set("dtype", detail::quantized_dtype_policy(quantization_mode_, policy_name()));
  else
    config.set("dtype", dtype_given_ || built_ ? Config(policy_name()) : Config());
  // As Keras: written only when set.
  if (activity_regularizer_) config.set("activity_regularizer", activity_regularizer_.get_config());
  return config;
}

Config Layer::with_activity_regularizer(const Config& config) const {
  Config result = Config::map();
  const Config activity = activity_regularizer_.get_config();
  bool placed = false;
  for (const auto& [key, value] : config.items()) {
    if (key == "activity_regularizer") continue;
    const bool constraint = key.size() > 11 && key.compare(key.size() - 11, 11, "_constraint") == 0;
    if (constraint && !placed) {
      result.set("activity_regularizer", activity);
      placed = true;
    }
    result.set(key, value);
  }
  if (!placed) result.set("activity_regularizer", activity);
  return result;
}

std::string Layer::registered_name() const {
  return layer_registry().key_where([this](const LayerClass& entry) { return entry.type == typeid(*this); });
}

Config Layer::build_config() const {
  if (!built_) return Config();
  if (build_shapes_.size() == 1) return {{"input_shape", Config::from_shape(build_shapes_[0])}};
  Config shapes = Config::list();
  for (const Shape& shape : build_shapes_) shapes.push_back(Config::from_shape(shape));
  return {{"input_shapes", shapes}};
}

std::string Layer::describe() const {
  return class_name_ + " '" + (name_.empty() ? to_snake_case(class_name_) : name_) + "'";
}

void Layer::shape_error(const std::string& what, const std::vector<std::pair<std::string, Shape>>& shapes) const {
  throw ShapeError(describe(), what, shapes);
}

void Layer::config_error(const std::string& what) const { throw ConfigError(describe() + ": " + what); }

// ---- building ---------------------------------------------------------------------------------------

void Layer::build_for(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  if (name_.empty()) name_ = to_snake_case(class_name_);
  if (seed_path_.empty()) seed_path_ = name_;
  resolve_policy_map();  // (a model's member: its path is its name)
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (child_is_part_[i]) adopt(*children_[i]);
  check_input_count(input_shapes.size());
  building_ = true;
  const std::size_t num_children = children_.size(), num_weights = weights_.size();
  try {
    build(input_shapes);
  } catch (...) {
    // A failed build leaves no half-made weights or children behind, so a corrected call can build again
    // (a child tracked twice would take the name "dense_1" and its weights another path).
    building_ = false;
    weights_.erase(weights_.begin() + static_cast<std::ptrdiff_t>(num_weights),
                   weights_.end());  // a constructor's stay
    children_.resize(num_children);
    child_is_part_.resize(num_children);
    throw;
  }
  building_ = false;
  build_shapes_ = input_shapes;
  built_ = true;
  if (!detail::skipping_initial_draws()) initialize_own_weights(0);
}

void Layer::build(const std::vector<Shape>& input_shapes) { build(input_shapes.at(0)); }
void Layer::build(const Shape&) {}

std::vector<Tensor> Layer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  return {call(inputs.at(0), args)};
}

Tensor Layer::call(const Tensor&, const CallArgs&) {
  throw LayerStateError(describe() + " overrides neither call(Tensor) nor call(std::vector<Tensor>)");
}

WeightId Layer::add_weight(const std::string& name, const Shape& shape, const Initializer& initializer,
                           bool trainable) {
  return add_weight(name, shape, initializer, compute_fans(shape), trainable);
}

WeightId Layer::add_weight(const std::string& name, const Shape& shape, const Initializer& initializer,
                           const Fans& fans, bool trainable) {
  if (built_ && !building_)
    throw LayerStateError(describe() + ": add_weight('" + name + "') after build(); create weights in build()");
  for (std::int64_t dim : shape.dims())
    if (dim < 0) shape_error("weight '" + name + "' needs a known shape", {{name, shape}});
  for (const OwnWeight& weight : weights_)
    if (weight.name == name) config_error("two weights named '" + name + "'");
  weights_.push_back({name, Array(shape, dtype_), initializer, fans, nullptr, trainable, {}, {}});
  return weights_.size() - 1;
}

WeightId Layer::add_int8_weight(const std::string& name, const Shape& shape) {
  const WeightId id = add_weight(name, shape, Initializer::get("zeros"), /*trainable=*/false);
  weights_[id].value = Array(shape, DType::int8);
  return id;
}

WeightId Layer::add_weight(const std::string& name, const Shape& shape, WeightFill fill, bool trainable) {
  const WeightId id = add_weight(name, shape, Initializer::get("zeros"), trainable);
  weights_[id].fill = std::move(fill);
  return id;
}

WeightRegularization WeightRegularization::from_arguments(ConfigReader& args, const std::string& prefix) {
  return {Regularizer::from_argument(args, prefix + "_regularizer"),
          Constraint::from_argument(args, prefix + "_constraint")};
}

void WeightRegularization::write(Config& config, const std::string& prefix) const {
  config.set(prefix + "_regularizer", regularizer.get_config());
  config.set(prefix + "_constraint", constraint.get_config());
}

void WeightRegularization::write(Config& config, const std::string& a, const WeightRegularization& first,
                                 const std::string& b, const WeightRegularization& second) {
  config.set(a + "_regularizer", first.regularizer.get_config());
  config.set(b + "_regularizer", second.regularizer.get_config());
  config.set(a + "_constraint", first.constraint.get_config());
  config.set(b + "_constraint", second.constraint.get_config());
}

void Layer::regularize(WeightId weight, const Regularizer& regularizer, const Constraint& constraint) {
  OwnWeight& own = weights_.at(weight);
  own.regularizer = regularizer;
  own.constraint = constraint;
}

void Layer::track_layer(const LayerPtr& child, bool part_of_this) {
  if (!child) throw ValueError(describe() + ": track() of an empty layer");
  if (child.get() == this) config_error("cannot contain itself");
  if (part_of_this && built_ && !building_)
    throw LayerStateError(describe() + ": track() of '" + child->name() + "' after build(); create children earlier");
  if (part_of_this && child->name_.empty()) {
    const std::string base = to_snake_case(child->class_name_);
    std::string name = base;
    for (int suffix = 1;; ++suffix) {
      const bool taken =
          std::any_of(children_.begin(), children_.end(), [&](const LayerPtr& c) { return c->name_ == name; });
      if (!taken) break;
      name = base + "_" + std::to_string(suffix);
    }
    child->name_ = name;
  }
  for (const LayerPtr& existing : children_)
    if (!child->name_.empty() && existing->name_ == child->name_)
      config_error("two layers named '" + child->name_ + "'; layer names must be unique within a model");
  if (part_of_this && building_) adopt(*child);
  children_.push_back(child);
  child_is_part_.push_back(part_of_this);
}

void Layer::adopt(Layer& child) const {
  // A part follows its parent: the dtype and policy the parent builds in (Keras's layers pass
  // dtype=self.dtype_policy to the sublayers they make; a policy a part took from the global one yields to its
  // parent's), and a random stream under its path.
  if ((!child.dtype_given_ || child.dtype_from_global_) && !child.built_ && !child.policy_kept_) {
    child.dtype_ = dtype_;
    child.policy_name_ = policy_name_;
  } else if (!child.dtype_given_ && !child.built_ && child.policy_name_.empty() && policy_name_.empty()) {
    child.dtype_ = dtype_;  // a wrapped layer of no policy of its own builds in its wrapper's float, as before
  }
  child.seed_path_ = seed_path_ + "/" + child.name_;
  // Keras's layers hand their dtype policy to their sublayers: a DTypePolicyMap too, which each sublayer reads at
  // its own path.
  if (!child.built_ && !child.dtype_given_ && child.policy_map_.is_null() && !policy_map_.is_null())
    child.policy_map_ = policy_map_;
  if (!child.built_) child.resolve_policy_map();
}

void Layer::clear_tracked_layers() {
  children_.clear();
  child_is_part_.clear();
}

void Layer::rename_automatic(const std::string& name) {
  if (name_given_) throw ConfigError(describe() + ": cannot rename a layer whose name was given");
  // Weights still holding their first draw are drawn again for the new name (two "dense" layers made in
  // different input graphs would otherwise start equal); weights that were set or trained are kept.
  const bool first_draw = built_ && holds_first_draw();
  name_ = name;
  if (!built_) return;
  seed_path_ = name_;
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (child_is_part_[i]) adopt(*children_[i]);
  if (first_draw) initialize_weights(0);
}

Array Layer::draw(const OwnWeight& weight, Rng& rng) const {
  const Shape& shape = weight.value.shape();
  Array values = weight.fill ? weight.fill(shape, weight.value.dtype(), rng)
                             : weight.initializer.sample(shape, weight.value.dtype(), rng, weight.fans);
  if (values.shape() != shape || values.dtype() != weight.value.dtype())
    throw Error(describe() + ": the values drawn for weight '" + weight.name + "' are " + values.shape().to_string() +
                " " + dtype_name(values.dtype()) + ", not the weight's " + shape.to_string());
  if (bfloat16_variables() && values.dtype() == DType::float32) values = ops::round_to_bfloat16(values);
  return values;
}

bool Layer::holds_first_draw() const {
  const Rng root(0);
  for (const OwnWeight& weight : weights_) {
    Rng rng = root.fork(seed_path_ + "/" + weight.name);
    if (!draw(weight, rng).bitwise_equal(weight.value))
      return false;
  }
  return std::all_of(children_.begin(), children_.end(),
                     [](const LayerPtr& child) { return child->holds_first_draw(); });
}

bool Layer::carries_state() const {
  return std::any_of(children_.begin(), children_.end(), [](const LayerPtr& child) { return child->carries_state(); });
}

void Layer::reset_state() {
  for (const LayerPtr& child : children_) child->reset_state();
}

const Array& Layer::weight_value(WeightId weight) const { return weights_.at(weight).value; }

Tensor Layer::variable(WeightId weight, const Tensor& like) const {
  const OwnWeight& own = weights_.at(weight);
  Graph& graph = like.graph();
  if (Tensor existing = graph.find_variable(own.value)) return existing;
  return graph.variable(own.name, own.value, own.trainable && trainable_);
}

// Keras 3 divides each output's activity penalty by its batch size, so its strength does not depend on it.
void Layer::add_activity_loss(const Regularizer& regularizer, const Tensor& output) const {
  const Tensor penalty = regularizer(output);
  output.graph().add_loss(output.rank() > 0 ? penalty / ops::dim_size(output, 0) : penalty);
}

void Layer::add_update(WeightId weight, const Tensor& value) const {
  value.graph().add_state_update(variable(weight, value), value);
}

// ---- calling ------------------------------------------------------------------------------------------

void Layer::assign_name(Graph& graph) {
  if (name_.empty()) name_ = graph.unique_name(to_snake_case(class_name_));
}

void Layer::check_input_count(std::size_t count) const {
  const auto [min_inputs, max_inputs] = input_count();
  if (count >= min_inputs && count <= max_inputs) return;
  std::string expected = std::to_string(min_inputs);
  if (max_inputs == std::numeric_limits<std::size_t>::max())
    expected = "at least " + expected;
  else if (max_inputs != min_inputs)
    expected += " to " + std::to_string(max_inputs);
  config_error("takes " + expected + " inputs, got " + std::to_string(count));
}

void Layer::check_call(const std::vector<Tensor>& inputs, const CallArgs& args) const {
  if (inputs.empty()) config_error("called with no inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].valid()) config_error("input " + std::to_string(i) + " is an empty Tensor");
  check_input_count(inputs.size());
  const std::vector<std::string> known = call_argument_names();
  auto check_name = [&](const std::string& name) {
    if (std::find(known.begin(), known.end(), name) != known.end()) return;
    std::string message = "does not take the call argument '" + name + "'";
    if (known.empty()) config_error(message + "; it takes none");
    message += "; it takes";
    for (std::size_t i = 0; i < known.size(); ++i) message += (i ? ", '" : " '") + known[i] + "'";
    config_error(message);
  };
  for (const auto& entry : args.tensors()) check_name(entry.first);
  if (args.options().is_map())
    for (const std::string& key : args.options().keys()) check_name(key);
}

Outputs::operator Tensor() const {
  if (size() != 1)
    throw ValueError("a layer call with " + std::to_string(size()) + " outputs used as one Tensor; index the outputs");
  return front();
}

Outputs Layer::operator()(const std::vector<Tensor>& given_inputs, const CallArgs& given_args) {
  check_call(given_inputs, given_args);
  const LayerPtr self = weak_from_this().lock();
  if (!self)
    throw LayerStateError(describe() +
                          " is not held by a std::shared_ptr; create layers through their handles "
                          "(kiln::Dense(...)) or std::make_shared");
  // Inputs from different graphs (two kiln::Input()s) meet in the first input's graph.
  Graph& graph = given_inputs[0].graph();
  std::vector<Tensor> inputs = given_inputs;
  CallArgs args = given_args;
  for (Tensor& input : inputs) input = detail::import_tensor(input, graph);
  for (const auto& entry : given_args.tensors())
    if (entry.second.valid()) args.tensor(entry.first, detail::import_tensor(entry.second, graph));

  assign_name(graph);
  if (!built_) {
    take_input_dtype(inputs[0].dtype());
    build_for(build_shapes_for(inputs, args));
  }
  // Only a layer with weights of its own has a dtype to enforce; models and weightless layers pass through.
  if (!weights_.empty() && inputs[0].dtype() != dtype_)
    throw DTypeError(describe() + " holds " + dtype_name(dtype_) + " weights but was called on " +
                     dtype_name(inputs[0].dtype()) + " input " + inputs[0].shape().to_string() +
                     "; layers do not cast: give the layer a dtype or feed " + dtype_name(dtype_));
  // Keras's masks: the call's "mask" argument, else the first input's. The mask arguments the call does not
  // give are filled from the inputs' masks (not recorded: a replay finds them again on its own inputs).
  const std::vector<std::string> names = call_argument_names();
  const bool takes_mask = std::find(names.begin(), names.end(), "mask") != names.end();
  const Tensor* given_mask = args.find_tensor("mask");
  const Tensor previous_mask = given_mask ? *given_mask : graph.mask_of(inputs[0]);
  CallArgs call_args = args;
  const std::vector<std::string> fills = input_mask_arguments();
  bool mask_taken = false;
  for (std::size_t i = 0; i < fills.size() && i < inputs.size(); ++i) {
    if (fills[i].empty()) continue;
    const Tensor mask = graph.mask_of(inputs[i]);
    mask_taken = mask_taken || (i == 0 && mask.valid());
    if (mask.valid() && args.find_tensor(fills[i]) == nullptr) call_args.tensor(fills[i], mask);
  }
  std::vector<Tensor> outputs;
  {
    Graph::NameScope scope(graph, name_);
    // A layer computes its products in its own policy's precision, as Keras fixes a layer's policy when it is made
    // (its parts have their parent's: adopt); a layer wrapped by another keeps its own.
    Graph::ProductPrecision precision(graph, bfloat16_products());
    outputs = call(inputs, call_args);
    if (activity_regularizer_)
      for (const Tensor& output : outputs) add_activity_loss(activity_regularizer_, output);
    if (supports_masking()) {
      const std::vector<Tensor> masks = compute_mask(inputs, previous_mask);
      for (std::size_t i = 0; i < outputs.size() && i < masks.size(); ++i)
        if (masks[i].valid() && !graph.mask_of(outputs[i]).valid()) graph.set_mask(outputs[i], masks[i]);
    } else if (previous_mask.valid() && !takes_mask && !mask_taken && !warned_about_mask_) {
      warned_about_mask_ = true;
      warn(describe() + " was passed an input with a mask, but does not support masking: the mask stops here " +
           "and the layers after it do not see it");
    }
  }
  if (output_shapes_.empty())
    for (const Tensor& output : outputs) output_shapes_.push_back(output.shape());

  auto record = std::make_shared<LayerCall>();
  record->layer = self;
  record->inputs = inputs;
  record->args = args;
  for (const Tensor& output : outputs) record->outputs.push_back(Tensor(&output.graph(), output.id()));
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    result.push_back(outputs[i].with_producer(record, static_cast<int>(i)));
  return result;
}

std::vector<Tensor> Layer::compute_mask(const std::vector<Tensor>&, const Tensor& mask) const { return {mask}; }

std::vector<std::string> Layer::input_mask_arguments() const {
  const std::vector<std::string> names = call_argument_names();
  if (std::find(names.begin(), names.end(), "mask") == names.end()) return {};
  return {"mask"};
}

std::vector<Shape> Layer::build_shapes_for(const std::vector<Tensor>& inputs, const CallArgs&) const {
  std::vector<Shape> shapes;
  for (const Tensor& input : inputs) shapes.push_back(input.shape());
  return shapes;
}

Tensor Layer::operator()(const Tensor& input, const CallArgs& args) {
  std::vector<Tensor> outputs = (*this)(std::vector<Tensor>{input}, args);
  if (outputs.size() != 1)
    throw ValueError(describe() + " returned " + std::to_string(outputs.size()) +
                     " outputs; call it with a list of inputs to get them all");
  return outputs[0];
}

// ---- weights ----------------------------------------------------------------------------------------

void Layer::collect_weights(const std::string& prefix, bool frozen_by_parent, std::vector<Weight>& out) const {
  // Keras 3's order: the layer's own weights in creation order, then each child's, whatever the
  // trainable flags, so freezing a layer never reorders get_weights().
  const bool frozen = frozen_by_parent || !trainable_;
  for (const OwnWeight& weight : weights_) {
    out.push_back(
        {prefix + weight.name, weight.value, weight.trainable && !frozen, weight.regularizer, weight.constraint});
    out.back().bfloat16 = bfloat16_variables() && weight.value.dtype() == DType::float32;
  }
  for (const LayerPtr& child : children_) child->collect_weights(prefix + child->name_ + "/", frozen, out);
}

namespace {
// A layer reached twice (directly and inside a nested model) holds its weights once, at the first path,
// as Keras deduplicates variables: set_weights counts and optimizers update each array once.
std::vector<Weight> without_repeats(std::vector<Weight> weights) {
  std::vector<const void*> seen;
  std::vector<Weight> result;
  for (Weight& weight : weights) {
    const void* storage = weight.value.raw();
    if (storage != nullptr && std::find(seen.begin(), seen.end(), storage) != seen.end()) continue;
    seen.push_back(storage);
    result.push_back(std::move(weight));
  }
  return result;
}
}  // namespace

std::vector<Weight> Layer::weights() const {
  std::vector<Weight> out;
  collect_weights("", false, out);
  return without_repeats(std::move(out));
}

std::vector<std::string> Layer::keras_weight_paths() const {
  std::vector<std::string> paths(weights_.size());
  std::size_t next = 0;
  for (const bool trainable : {true, false})
    for (std::size_t i = 0; i < weights_.size(); ++i)
      if (weights_[i].trainable == trainable) paths[i] = "vars/" + std::to_string(next++);
  for (const LayerPtr& child : children_)
    for (const std::string& path : child->keras_weight_paths()) paths.push_back(child->name_ + "/" + path);
  return paths;
}

std::vector<std::pair<std::string, std::string>> Layer::keras_sublayers() const {
  std::vector<std::pair<std::string, std::string>> sublayers;
  for (const LayerPtr& child : children_) sublayers.emplace_back(child->name_, child->name_);
  return sublayers;
}

std::vector<Weight> Layer::trainable_weights() const {
  std::vector<Weight> out;
  for (Weight& weight : weights())
    if (weight.trainable) out.push_back(std::move(weight));
  return out;
}

std::vector<Weight> Layer::non_trainable_weights() const {
  std::vector<Weight> out;
  for (Weight& weight : weights())
    if (!weight.trainable) out.push_back(std::move(weight));
  return out;
}

std::vector<Array> Layer::get_weights() const {
  std::vector<Array> values;
  for (const Weight& weight : weights()) values.push_back(weight.value.copy());
  return values;
}

void Layer::set_weights(const std::vector<Array>& values) {
  std::vector<Weight> targets = weights();
  if (values.size() != targets.size())
    throw ValueError(describe() + ": set_weights got " + std::to_string(values.size()) + " arrays for " +
                     std::to_string(targets.size()) + " weights" + (built_ ? "" : " (the layer is not built yet)"));
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i].shape() != targets[i].value.shape())
      shape_error("set_weights: weight '" + targets[i].path + "' has another shape",
                  {{"expected", targets[i].value.shape()}, {"given", values[i].shape()}});
  for (std::size_t i = 0; i < values.size(); ++i) {
    Array converted =
        values[i].dtype() == targets[i].value.dtype() ? values[i] : values[i].astype(targets[i].value.dtype());
    if (targets[i].bfloat16 && converted.dtype() == DType::float32) converted = ops::round_to_bfloat16(converted);
    std::memcpy(targets[i].value.raw(), converted.raw(), targets[i].value.nbytes());
  }
}

std::int64_t Layer::count_params() const {
  std::int64_t total = 0;
  for (const Weight& weight : weights()) total += static_cast<std::int64_t>(weight.value.size());
  return total;
}

void Layer::initialize_own_weights(std::uint64_t seed) {
  const Rng root(seed);
  for (OwnWeight& weight : weights_) {
    Rng rng = root.fork(seed_path_ + "/" + weight.name);
    const Array fresh = draw(weight, rng);
    std::memcpy(weight.value.raw(), fresh.raw(), weight.value.nbytes());
  }
}

void Layer::initialize_weights(std::uint64_t seed) {
  initialize_own_weights(seed);
  for (const LayerPtr& child : children_) child->initialize_weights(seed);
}

namespace detail {
namespace {
thread_local bool skip_initial_draws = false;
}  // namespace
SkipInitialDraws::SkipInitialDraws() : outer_(skip_initial_draws) { skip_initial_draws = true; }
SkipInitialDraws::~SkipInitialDraws() { skip_initial_draws = outer_; }
bool skipping_initial_draws() { return skip_initial_draws; }
}  // namespace detail

// ---- registry ---------------------------------------------------------------------------------------------

Registry<LayerClass>& layer_registry() {
  static Registry<LayerClass> registry("layer");
  return registry;
}

LayerPtr create_layer(const std::string& class_name, const Config& config) {
  return layer_registry().get(class_name).create(config);
}

Config serialize_layer(const Layer& layer) {
  const std::string key = layer.registered_name();
  if (key.empty())
    throw ConfigError(layer.describe() +
                      " is not registered; register it with KILN_REGISTER_LAYER to save it by config");
  Config result = {{"class_name", layer.class_name()}, {"config", layer.get_config()}, {"registered_name", key}};
  if (layer.built()) result.set("build_config", layer.build_config());
  return result;
}

LayerPtr layer_from_config(const Config& serialized) {
  if (!serialized.is_map()) throw ConfigError("a serialized layer is a map, got " + serialized.to_string());
  std::string key = serialized.get_string("class_name");
  if (const Config* registered = serialized.find("registered_name"); registered != nullptr && !registered->is_null())
    key = registered->as_string("key 'registered_name'");
  const Config* config = serialized.find("config");
  LayerPtr layer = create_layer(key, config ? *config : Config());
  if (const Config* build = serialized.find("build_config"); build != nullptr && !build->is_null() && !layer->built()) {
    if (const Config* shape = build->find("input_shape"))
      layer->build_for(shape->as_shape("build_config input_shape"));
    else if (const Config* shapes = build->find("input_shapes")) {
      std::vector<Shape> list;
      for (const Config& item : shapes->as_list("build_config input_shapes"))
        list.push_back(item.as_shape("build_config input_shapes"));
      layer->build_for(list);
    }
  }
  return layer;
}

}  // namespace kiln
