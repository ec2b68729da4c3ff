// kiln's ops as Keras operations: what a model written in C++ records for each kiln::ops call on its tensors,
// the node Keras itself writes for the keras.ops call that computes the same (class, config, args, kwargs).
#include <kiln/layers/detail/operations.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln::detail {

namespace {

using Recorder = std::function<OperationRecording(const Attributes& attributes, std::size_t inputs)>;

Config optional_config(const std::optional<std::int64_t>& value) { return value ? Config(*value) : Config(); }

// GetItem's key as Keras serializes it: slices as {"class_name": "__slice__", ...}, None as null.
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

// The markers of a call's tensors, in order.
Config markers(std::size_t count) {
  Config list = Config::list();
  for (std::size_t i = 0; i < count; ++i) list.push_back(tensor_marker(i));
  return list;
}

// An axis list as Keras writes one: null for every axis, an integer for one, else the list.
Config axis_config(const std::vector<std::int64_t>& axes) {
  if (axes.empty()) return Config();
  if (axes.size() == 1) return Config(axes.front());
  return Config::from_ints(axes);
}

struct Recorders {
  std::map<std::string, Recorder> table;

  // An op whose tensors are the call's positional arguments, with no keys.
  void plain(const std::string& op, const char* keras_class) {
    table[op] = [keras_class](const Attributes&, std::size_t inputs) {
      return OperationRecording{keras_class, Config::map(), markers(inputs)};
    };
  }
  // One tensor, and the config's keys drawn from the op's attributes.
  void keyed(const std::string& op, const char* keras_class, std::function<Config(const Attributes&)> keys) {
    table[op] = [keras_class, keys = std::move(keys)](const Attributes& a, std::size_t inputs) {
      return OperationRecording{keras_class, keys(a), markers(inputs)};
    };
  }
  // One tensor and one number attribute as the config's `key`.
  void number(const std::string& op, const char* keras_class, const char* key, const char* attribute) {
    keyed(op, keras_class, [key, attribute](const Attributes& a) { return Config{{key, a.get_double(attribute)}}; });
  }
};

void elementwise(Recorders& r) {
  for (const auto& [op, keras_class] : std::vector<std::pair<std::string, const char*>>{
           {"kiln>Add", "Add"},
           {"kiln>Sub", "Subtract"},
           {"kiln>Mul", "Multiply"},
           {"kiln>Div", "Divide"},
           {"kiln>Pow", "Power"},
           {"kiln>Maximum", "Maximum"},
           {"kiln>Minimum", "Minimum"},
           {"kiln>Greater", "Greater"},
           {"kiln>GreaterEqual", "GreaterEqual"},
           {"kiln>Less", "Less"},
           {"kiln>LessEqual", "LessEqual"},
           {"kiln>Equal", "Equal"},
           {"kiln>Where", "Where"},
           {"kiln>MatMul", "Matmul"},
           {"kiln>Neg", "Negative"},
           {"kiln>Exp", "Exp"},
           {"kiln>Log", "Log"},
           {"kiln>Sqrt", "Sqrt"},
           {"kiln>Rsqrt", "Rsqrt"},
           {"kiln>Square", "Square"},
           {"kiln>Abs", "Absolute"},
           {"kiln>Sin", "Sin"},
           {"kiln>Cos", "Cos"},
           {"kiln>Tanh", "Tanh"},
           {"kiln>Sigmoid", "Sigmoid"},
           {"kiln>Relu", "Relu"},
           {"kiln>Swish", "Silu"},
           {"kiln>Softplus", "Softplus"},
           {"kiln>Relu6", "Relu6"},
           {"kiln>Selu", "Selu"},
           {"kiln>Softsign", "Softsign"},
           {"kiln>LogSigmoid", "LogSigmoid"},
           {"kiln>HardSigmoid", "HardSigmoid"},
           {"kiln>HardSilu", "HardSilu"},
           {"kiln>HardTanh", "HardTanh"},
           {"kiln>TanhShrink", "TanhShrink"},
           {"kiln>SparsePlus", "SparsePlus"},
           {"kiln>SparseSigmoid", "SparseSigmoid"},
       })
    r.plain(op, keras_class);
  r.number("kiln>LeakyRelu", "LeakyRelu", "negative_slope", "negative_slope");
  r.number("kiln>Elu", "Elu", "alpha", "alpha");
  r.number("kiln>Celu", "Celu", "alpha", "parameter");
  r.number("kiln>SoftShrink", "SoftShrink", "threshold", "parameter");
  r.number("kiln>HardShrink", "HardShrink", "threshold", "parameter");
  r.number("kiln>Squareplus", "Squareplus", "b", "parameter");
  r.keyed("kiln>Gelu", "Gelu", [](const Attributes& a) { return Config{{"approximate", a.get_bool("approximate")}}; });
  // x ⊙ v and x + v: Keras's Multiply and Add of a tensor and a Python number; x ** v likewise.
  r.table["kiln>Scale"] = [](const Attributes& a, std::size_t) {
    return OperationRecording{"Multiply", Config::map(), Config::list({tensor_marker(0), a.get_double("factor")})};
  };
  r.table["kiln>AddScalar"] = [](const Attributes& a, std::size_t) {
    return OperationRecording{"Add", Config::map(), Config::list({tensor_marker(0), a.get_double("value")})};
  };
  r.table["kiln>PowScalar"] = [](const Attributes& a, std::size_t) {
    return OperationRecording{"Power", Config::map(), Config::list({tensor_marker(0), a.get_double("exponent")})};
  };
}

void axes_and_shapes(Recorders& r) {
  for (const auto& [op, keras_class] : std::vector<std::pair<std::string, const char*>>{
           {"kiln>Softmax", "Softmax"}, {"kiln>LogSoftmax", "LogSoftmax"}, {"glu", "Glu"}, {"kiln>Flip", "Flip"},
           {"kiln>ExpandDims", "ExpandDims"}})
    r.keyed(op, keras_class, [](const Attributes& a) { return Config{{"axis", a.get_int("axis")}}; });
  r.keyed("kiln>Sparsemax", "Sparsemax", [](const Attributes&) { return Config{{"axis", -1}}; });
  for (const auto& [op, keras_class] : std::vector<std::pair<std::string, const char*>>{
           {"kiln>Sum", "Sum"}, {"kiln>Mean", "Mean"}, {"kiln>Max", "Max"}, {"kiln>Min", "Min"}}) {
    const bool initial = op == "kiln>Max" || op == "kiln>Min";
    r.keyed(op, keras_class, [initial](const Attributes& a) {
      Config keys{{"axis", axis_config(a.get_ints("axes"))}, {"keepdims", a.get_bool("keepdims")}};
      if (initial) keys.set("initial", Config());
      return keys;
    });
  }
  r.keyed("kiln>Squeeze", "Squeeze", [](const Attributes& a) { return Config{{"axis", axis_config(a.get_ints("axes"))}}; });
  r.keyed("kiln>Reshape", "Reshape", [](const Attributes& a) {
    return Config{{"newshape", Config::from_ints(a.get_ints("shape"))}};
  });
  r.keyed("kiln>Transpose", "Transpose", [](const Attributes& a) {
    return Config{{"axes", Config::from_ints(a.get_ints("perm"))}};
  });
  r.keyed("kiln>BroadcastTo", "BroadcastTo", [](const Attributes& a) {
    return Config{{"shape", Config::from_ints(a.get_ints("shape"))}};
  });
  r.table["kiln>Pad"] = [](const Attributes& a, std::size_t) {
    const std::vector<std::int64_t>& before = a.get_ints("before");
    const std::vector<std::int64_t>& after = a.get_ints("after");
    Config widths = Config::list();
    for (std::size_t i = 0; i < before.size() && i < after.size(); ++i)
      widths.push_back(Config::from_ints({before[i], after[i]}));
    return OperationRecording{"Pad", Config{{"pad_width", widths}, {"mode", "constant"}}, markers(1),
                              Config{{"constant_values", Config()}}};
  };
  // A list of tensors, Keras's one argument.
  r.table["kiln>Concat"] = [](const Attributes& a, std::size_t inputs) {
    return OperationRecording{"Concatenate", Config{{"axis", a.get_int("axis")}}, Config::list({markers(inputs)})};
  };
  r.table["get_item"] = [](const Attributes& a, std::size_t) {
    return OperationRecording{"GetItem", Config::map(),
                              Config::list({tensor_marker(0), key_of(ops::index_from_attributes(a))})};
  };
  // ops::slice as the GetItem it is (Keras's own Slice cannot say "to the end" of an unknown axis).
  r.table["kiln>Slice"] = [](const Attributes& a, std::size_t) {
    const std::vector<std::int64_t>& begin = a.get_ints("begin");
    const std::vector<std::int64_t>& size = a.get_ints("size");
    std::vector<ops::Index> index;
    for (std::size_t i = 0; i < begin.size() && i < size.size(); ++i)
      index.emplace_back(
          ops::Slice{begin[i], size[i] < 0 ? std::nullopt : std::optional(begin[i] + size[i]), std::nullopt});
    return OperationRecording{"GetItem", Config::map(), Config::list({tensor_marker(0), key_of(index)})};
  };
}

}  // namespace

std::optional<OperationRecording> operation_recording(const std::string& op, const Attributes& attributes,
                                                      std::size_t inputs) {
  static const std::map<std::string, Recorder> table = [] {
    Recorders recorders;
    elementwise(recorders);
    axes_and_shapes(recorders);
    return recorders.table;
  }();
  const auto found = table.find(op);
  if (found == table.end()) return std::nullopt;
  return found->second(attributes, inputs);
}

}  // namespace kiln::detail
