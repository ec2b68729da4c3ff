#include <kiln/layers/operation.hpp>

#include <map>
#include <optional>

#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// ---- the call's arguments: Keras's args and kwargs, each tensor a marker ------------------------------------

Config marker(std::size_t index) { return {{"__tensor__", static_cast<std::int64_t>(index)}}; }

bool is_marker(const Config& value) { return value.is_map() && value.size() == 1 && value.contains("__tensor__"); }

Config replace_markers(const Config& value, const std::function<Config(std::size_t)>& tensor) {
  if (is_marker(value)) return tensor(static_cast<std::size_t>(value.get_int("__tensor__")));
  if (value.is_list()) {
    Config list = Config::list();
    for (const Config& item : value.as_list()) list.push_back(replace_markers(item, tensor));
    return list;
  }
  if (value.is_map()) {
    Config map = Config::map();
    for (const auto& [key, item] : value.items()) map.set(key, replace_markers(item, tensor));
    return map;
  }
  return value;
}

// One call of an operation, as its class computes it.
struct OperationCall {
  const Layer& layer;
  const std::vector<Tensor>& inputs;
  const Config& config;  // the class's keys
  const std::vector<Config>& args;
  const Config& kwargs;

  [[noreturn]] void fail(const std::string& what) const { throw ConfigError(layer.describe() + ": " + what); }
  const Config& arg(std::size_t index, const char* what) const {
    if (index >= args.size()) fail(std::string("its call gives no ") + what);
    return args[index];
  }
  Tensor tensor(const Config& value, const char* what) const {
    if (!is_marker(value)) fail(std::string(what) + " is " + value.to_string() + ", not a tensor");
    const std::int64_t index = value.get_int("__tensor__");
    if (index < 0 || static_cast<std::size_t>(index) >= inputs.size())
      fail(std::string(what) + " refers to input " + std::to_string(index) + " of " + std::to_string(inputs.size()));
    return inputs[static_cast<std::size_t>(index)];
  }
  void no_kwargs() const {
    if (kwargs.is_map())
      for (const auto& [key, value] : kwargs.items())
        if (!value.is_null()) fail("keyword argument '" + key + "' is not supported");
  }
};

using Call = std::function<Tensor(const OperationCall&)>;

struct OperationClass {
  std::string module;             // what Keras imports it from
  std::vector<std::string> keys;  // its config's keys besides name
  Call call;
};

// Keras's binary operations: two tensors, or a tensor and a Python number on either side.
enum class Binary { add, subtract, multiply, divide, maximum, minimum };

Tensor binary_call(const OperationCall& c, Binary kind) {
  c.no_kwargs();
  if (c.args.size() != 2) c.fail("takes two arguments, got " + std::to_string(c.args.size()));
  const bool a_tensor = is_marker(c.args[0]), b_tensor = is_marker(c.args[1]);
  auto two = [&](const Tensor& a, const Tensor& b) {
    switch (kind) {
      case Binary::add:
        return ops::add(a, b);
      case Binary::subtract:
        return ops::sub(a, b);
      case Binary::multiply:
        return ops::mul(a, b);
      case Binary::divide:
        return ops::div(a, b);
      case Binary::maximum:
        return ops::maximum(a, b);
      case Binary::minimum:
        return ops::minimum(a, b);
    }
    return Tensor();
  };
  if (a_tensor && b_tensor) return two(c.tensor(c.args[0], "x1"), c.tensor(c.args[1], "x2"));
  if (!a_tensor && !b_tensor)
    c.fail("takes at least one tensor, got " + c.args[0].to_string() + " and " + c.args[1].to_string());
  const Tensor x = c.tensor(c.args[a_tensor ? 0 : 1], a_tensor ? "x1" : "x2");
  const Config& number = c.args[a_tensor ? 1 : 0];
  if (number.type() != Config::Type::integer && number.type() != Config::Type::number)
    c.fail("takes a tensor and a number, got " + number.to_string());
  const double value = number.as_double();
  // The one-node forms where they compute the same bits: x + v, x - v = x + (-v), v - x = (-x) + v, x · v.
  if (kind == Binary::add) return ops::add_scalar(x, value);
  if (kind == Binary::subtract) return a_tensor ? ops::add_scalar(x, -value) : ops::add_scalar(ops::neg(x), value);
  if (kind == Binary::multiply) return ops::scale(x, value);
  const Tensor constant = x.graph().scalar(value, x.dtype());
  return a_tensor ? two(x, constant) : two(constant, x);
}

// ---- GetItem's key: Keras serializes slices as {"class_name": "__slice__", ...}, None as null ---------------

std::optional<std::int64_t> optional_int(const Config& value, const OperationCall& c) {
  if (value.is_null()) return std::nullopt;
  if (value.type() != Config::Type::integer) c.fail("a slice's bound is " + value.to_string() + ", not an integer");
  return value.as_int();
}

std::vector<ops::Index> index_of(const Config& key, const OperationCall& c) {
  const std::vector<Config> items = key.is_list() ? key.as_list() : std::vector<Config>{key};
  std::vector<ops::Index> index;
  for (const Config& item : items) {
    if (item.is_null()) {
      index.push_back(ops::Index::new_axis());
    } else if (item.type() == Config::Type::integer) {
      index.emplace_back(item.as_int());
    } else if (is_marker(item)) {
      c.fail("indexing with a tensor (NumPy's advanced indexing) is not supported");
    } else if (item.is_map() && item.get_string("class_name", "") == "__slice__") {
      const Config& bounds = item.at("config");
      index.emplace_back(ops::Slice{optional_int(bounds.at("start"), c), optional_int(bounds.at("stop"), c),
                                    optional_int(bounds.at("step"), c)});
    } else if (item.is_map() && item.get_string("class_name", "") == "__ellipsis__") {
      index.push_back(ops::Index::ellipsis());
    } else {
      c.fail("an index entry is " + item.to_string() + "; GetItem takes integers, slices, None and an ellipsis");
    }
  }
  return index;
}

Config optional_config(const std::optional<std::int64_t>& value) { return value ? Config(*value) : Config(); }

Config key_of(const std::vector<ops::Index>& index) {
  Config key = Config::list();
  for (const ops::Index& entry : index) {
    switch (entry.kind()) {
      case ops::Index::Kind::integer:
        key.push_back(entry.position());
        break;
      case ops::Index::Kind::slice:
        key.push_back({{"class_name", "__slice__"},
                       {"config",
                        {{"start", optional_config(entry.slice().start)},
                         {"stop", optional_config(entry.slice().stop)},
                         {"step", optional_config(entry.slice().step)}}}});
        break;
      case ops::Index::Kind::new_axis:
        key.push_back(Config());
        break;
      case ops::Index::Kind::ellipsis:
        key.push_back({{"class_name", "__ellipsis__"}, {"config", Config::map()}});
        break;
    }
  }
  return key;
}

// ---- the classes kiln implements ------------------------------------------------------------------------------

const std::map<std::string, OperationClass>& operation_classes() {
  static const std::map<std::string, OperationClass> classes = [] {
    std::map<std::string, OperationClass> table;
    const std::string numpy = "keras.src.ops.numpy";
    auto binary = [&](const char* name, Binary kind) {
      table[name] = {numpy, {}, [kind](const OperationCall& c) { return binary_call(c, kind); }};
    };
    binary("Add", Binary::add);
    binary("Subtract", Binary::subtract);
    binary("Multiply", Binary::multiply);
    binary("Divide", Binary::divide);
    binary("TrueDivide", Binary::divide);
    binary("Maximum", Binary::maximum);
    binary("Minimum", Binary::minimum);
    table["Negative"] = {numpy, {}, [](const OperationCall& c) {
                           c.no_kwargs();
                           return ops::neg(c.tensor(c.arg(0, "x"), "x"));
                         }};
    table["GetItem"] = {numpy, {}, [](const OperationCall& c) {
                          c.no_kwargs();
                          if (c.args.size() != 2) c.fail("takes a tensor and a key");
                          return ops::get_item(c.tensor(c.args[0], "x"), index_of(c.args[1], c));
                        }};
    // keras.ops.slice(inputs, start_indices, shape): the shape is the operation's, the start the call's.
    table["Slice"] = {"keras.src.ops.core", {"shape"}, [](const OperationCall& c) {
                        c.no_kwargs();
                        const Config& start = c.arg(1, "start_indices");
                        if (is_marker(start)) c.fail("start_indices given as a tensor is not supported");
                        return ops::slice(c.tensor(c.arg(0, "inputs"), "inputs"), start.as_ints("start_indices"),
                                          c.config.at("shape").as_ints("shape"));
                      }};
    return table;
  }();
  return classes;
}

const OperationClass& operation_class(const std::string& keras_class) {
  const auto found = operation_classes().find(keras_class);
  if (found == operation_classes().end()) {
    std::string known;
    for (const auto& [name, entry] : operation_classes()) known += (known.empty() ? "" : ", ") + name;
    throw ConfigError("kiln has no Keras operation '" + keras_class + "' (it has " + known + ")");
  }
  return found->second;
}

// ---- kiln's ops as Keras operations: what a model written in C++ records -----------------------------------------

struct Recording {
  std::string keras_class;
  Config config = Config::map();
  Config args;
};

using Recorder = std::function<Recording(const Attributes& attributes)>;

const std::map<std::string, Recorder>& recorders() {
  static const std::map<std::string, Recorder> table = [] {
    std::map<std::string, Recorder> map;
    auto tensors = [](const char* keras_class) {
      return [keras_class](const Attributes&) {
        return Recording{keras_class, Config::map(), Config::list({marker(0), marker(1)})};
      };
    };
    map["kiln>Add"] = tensors("Add");
    map["kiln>Sub"] = tensors("Subtract");
    map["kiln>Mul"] = tensors("Multiply");
    map["kiln>Div"] = tensors("Divide");
    map["kiln>Maximum"] = tensors("Maximum");
    map["kiln>Minimum"] = tensors("Minimum");
    map["kiln>Neg"] = [](const Attributes&) { return Recording{"Negative", Config::map(), Config::list({marker(0)})}; };
    map["kiln>Scale"] = [](const Attributes& a) {
      return Recording{"Multiply", Config::map(), Config::list({marker(0), a.get_double("factor")})};
    };
    map["kiln>AddScalar"] = [](const Attributes& a) {
      return Recording{"Add", Config::map(), Config::list({marker(0), a.get_double("value")})};
    };
    map["get_item"] = [](const Attributes& a) {
      return Recording{"GetItem", Config::map(), Config::list({marker(0), key_of(ops::index_from_attributes(a))})};
    };
    // ops::slice as the GetItem it is (Keras's own Slice cannot say "to the end" of an unknown axis).
    map["kiln>Slice"] = [](const Attributes& a) {
      const std::vector<std::int64_t>& begin = a.get_ints("begin");
      const std::vector<std::int64_t>& size = a.get_ints("size");
      std::vector<ops::Index> index;
      for (std::size_t i = 0; i < begin.size() && i < size.size(); ++i)
        index.emplace_back(
            ops::Slice{begin[i], size[i] < 0 ? std::nullopt : std::optional(begin[i] + size[i]), std::nullopt});
      return Recording{"GetItem", Config::map(), Config::list({marker(0), key_of(index)})};
    };
    return map;
  }();
  return table;
}

Tensor record(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attributes) {
  const auto found = recorders().find(op);
  if (found == recorders().end()) return Tensor();
  const Recording recording = found->second(attributes);
  auto layer = std::make_shared<OperationLayer>(recording.keras_class, recording.config);
  layer->set_arguments({{"args", recording.args}, {"kwargs", Config::map()}});
  return (*layer)(inputs);
}

bool register_operations() {
  for (const auto& [name, entry] : operation_classes()) {
    const std::string keras_class = name;
    layer_registry().add(std::string(kOperationPackage) + ">" + keras_class,
                         LayerClass{std::type_index(typeid(OperationLayer)), [keras_class](const Config& config) {
                                      return std::make_shared<OperationLayer>(keras_class, config);
                                    }});
  }
  return detail::set_op_recorder(record);
}

}  // namespace

OperationLayer::OperationLayer(const std::string& keras_class, const Config& config) : Layer(config, keras_class) {
  const OperationClass& entry = operation_class(keras_class);
  ConfigReader args = config_reader(config);
  config_ = Config::map();
  for (const std::string& key : entry.keys) {
    if (!args.has(key)) config_error("needs its '" + key + "'");
    config_.set(key, args.value(key));
  }
  args.finish();
}

void OperationLayer::set_arguments(const Config& arguments) {
  if (!arguments.is_map() || !arguments.contains("args"))
    config_error("an operation's arguments are {\"args\": [...], \"kwargs\": {...}}, got " + arguments.to_string());
  if (!arguments_.is_null() && arguments_ != arguments)
    config_error("is called again with other arguments (" + arguments.to_string() + " after " + arguments_.to_string() +
                 "); an operation is one call");
  arguments_ = arguments;
}

Config OperationLayer::arguments_with(const std::function<Config(std::size_t)>& tensor) const {
  return replace_markers(arguments_, tensor);
}

const std::string& OperationLayer::keras_module() const { return operation_class(class_name()).module; }

Config OperationLayer::get_config() const {
  Config config = {{"name", name()}};
  for (const auto& [key, value] : config_.items()) config.set(key, value);
  return config;
}

std::string OperationLayer::registered_name() const { return std::string(kOperationPackage) + ">" + class_name(); }

std::vector<Tensor> OperationLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  if (arguments_.is_null()) config_error("was called without its arguments (set_arguments)");
  const Config& given = arguments_.at("args");
  const std::vector<Config> args = given.is_list() ? given.as_list() : std::vector<Config>{given};
  const Config kwargs = arguments_.contains("kwargs") ? arguments_.at("kwargs") : Config::map();
  const OperationCall call{*this, inputs, config_, args, kwargs};
  return {operation_class(class_name()).call(call)};
}

bool is_operation(const Layer& layer) { return dynamic_cast<const OperationLayer*>(&layer) != nullptr; }

bool has_keras_operation(const std::string& keras_class) { return operation_classes().count(keras_class) != 0; }

KILN_AT_STARTUP(register_operations());

}  // namespace kiln
