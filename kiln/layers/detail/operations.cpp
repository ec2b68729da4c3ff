// The keras.ops classes kiln reads: each Keras operation class (keras/src/ops/numpy.py, nn.py, math.py,
// core.py), its module and config keys with Keras's defaults, and the kiln ops that compute one call of it.
#include <kiln/layers/detail/operations.hpp>

#include <algorithm>
#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::detail {

Config tensor_marker(std::size_t index) { return {{"__tensor__", static_cast<std::int64_t>(index)}}; }

bool is_tensor_marker(const Config& value) {
  return value.is_map() && value.size() == 1 && value.contains("__tensor__");
}

void OperationCall::fail(const std::string& what) const { throw ConfigError(layer.describe() + ": " + what); }

const Config& OperationCall::arg(std::size_t index, const char* what) const {
  if (index >= args.size()) fail(std::string("its call gives no ") + what);
  return args[index];
}

Tensor OperationCall::tensor(const Config& value, const char* what) const {
  if (!is_tensor_marker(value)) fail(std::string(what) + " is " + value.to_string() + ", not a tensor");
  const std::int64_t index = value.get_int("__tensor__");
  if (index < 0 || static_cast<std::size_t>(index) >= inputs.size())
    fail(std::string(what) + " refers to input " + std::to_string(index) + " of " + std::to_string(inputs.size()));
  return inputs[static_cast<std::size_t>(index)];
}

Tensor OperationCall::operand(std::size_t index, const char* what, const Tensor& like) const {
  const Config& value = arg(index, what);
  if (is_tensor_marker(value)) return tensor(value, what);
  if (value.type() != Config::Type::integer && value.type() != Config::Type::number)
    fail(std::string(what) + " is " + value.to_string() + ", neither a tensor nor a number");
  return like.graph().scalar(value.as_double(), like.dtype());
}

void OperationCall::no_kwargs(const std::vector<std::string>& allowed) const {
  if (kwargs.is_map())
    for (const auto& [key, value] : kwargs.items())
      if (!value.is_null() && std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail("keyword argument '" + key + "' is not supported");
}

void OperationCall::takes(std::size_t count) const {
  if (args.size() != count)
    fail("takes " + std::to_string(count) + " argument" + (count == 1 ? "" : "s") + ", got " +
         std::to_string(args.size()));
}

namespace {

using Call = std::function<Tensor(const OperationCall&)>;
using Keys = std::vector<std::pair<std::string, std::optional<Config>>>;

// ---- the config's values ----------------------------------------------------------------------------------------

double number(const OperationCall& c, const std::string& key) {
  const Config& value = c.config.at(key);
  if (value.type() != Config::Type::integer && value.type() != Config::Type::number)
    c.fail("'" + key + "' is " + value.to_string() + ", not a number");
  return value.as_double();
}

int integer(const OperationCall& c, const Config& value, const std::string& what) {
  if (value.type() != Config::Type::integer) c.fail(what + " is " + value.to_string() + ", not an integer");
  const std::int64_t v = value.as_int();
  if (v < -1024 || v > 1024) c.fail(what + " is " + value.to_string() + ", out of any tensor's range");
  return static_cast<int>(v);
}

int integer(const OperationCall& c, const std::string& key) { return integer(c, c.config.at(key), "'" + key + "'"); }

// An axis of `x` (Keras allows negative ones), checked against its rank.
int axis_of(const OperationCall& c, const Tensor& x, int axis, int rank_plus = 0) {
  const int rank = x.rank() + rank_plus;
  if (axis < -rank || axis >= rank)
    c.fail("axis " + std::to_string(axis) + " is outside an input of shape " + x.shape().to_string());
  return axis < 0 ? axis + rank : axis;
}

// Keras's axis argument: null (every axis), an integer or a list of them. Empty: every axis.
std::vector<int> axes_of(const OperationCall& c, const Tensor& x, const std::string& key) {
  const Config& value = c.config.at(key);
  std::vector<int> axes;
  if (value.is_null()) return axes;
  if (value.is_list()) {
    if (value.size() == 0) c.fail("'" + key + "' is an empty list; kiln reduces over at least one axis");
    for (const Config& item : value.as_list()) axes.push_back(axis_of(c, x, integer(c, item, "'" + key + "'")));
  } else {
    axes.push_back(axis_of(c, x, integer(c, value, "'" + key + "'")));
  }
  std::vector<int> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    c.fail("'" + key + "' " + value.to_string() + " names an axis twice");
  return axes;
}

std::vector<std::int64_t> ints_of(const OperationCall& c, const std::string& key) {
  const Config& value = c.config.at(key);
  if (value.type() == Config::Type::integer) return {value.as_int()};
  if (!value.is_list()) c.fail("'" + key + "' is " + value.to_string() + ", not a list of integers");
  return value.as_ints(key);
}

void null_key(const OperationCall& c, const std::string& key) {
  if (!c.config.at(key).is_null()) c.fail("'" + key + "' " + c.config.at(key).to_string() + " is not supported");
}

// ---- the classes' calls -----------------------------------------------------------------------------------------

// Keras's binary operations and comparisons: two tensors, or a tensor and a Python number on either side.
// kiln's comparisons are 1 or 0 in the operands' dtype (Keras's bool).
using BinaryOp = Tensor (*)(const Tensor&, const Tensor&);

Tensor binary_call(const OperationCall& c, BinaryOp f) {
  c.no_kwargs();
  c.takes(2);
  const bool a_tensor = is_tensor_marker(c.args[0]), b_tensor = is_tensor_marker(c.args[1]);
  if (a_tensor && b_tensor) return f(c.tensor(c.args[0], "x1"), c.tensor(c.args[1], "x2"));
  if (!a_tensor && !b_tensor)
    c.fail("takes at least one tensor, got " + c.args[0].to_string() + " and " + c.args[1].to_string());
  const Tensor x = c.tensor(c.args[a_tensor ? 0 : 1], a_tensor ? "x1" : "x2");
  const Config& number = c.args[a_tensor ? 1 : 0];
  if (number.type() != Config::Type::integer && number.type() != Config::Type::number)
    c.fail("takes a tensor and a number, got " + number.to_string());
  const double value = number.as_double();
  // The one-node forms where they compute the same bits: x + v, x - v = x + (-v), v - x = (-x) + v, x · v, x ** v.
  static const BinaryOp add = ops::add, sub = ops::sub, mul = ops::mul, pow = ops::pow;
  if (f == add) return ops::add_scalar(x, value);
  if (f == sub) return a_tensor ? ops::add_scalar(x, -value) : ops::add_scalar(ops::neg(x), value);
  if (f == mul) return ops::scale(x, value);
  if (f == pow && a_tensor) return ops::pow_scalar(x, value);
  const Tensor constant = x.graph().scalar(value, x.dtype());
  return a_tensor ? f(x, constant) : f(constant, x);
}

// GetItem's key: Keras serializes slices as {"class_name": "__slice__", ...}, None as null.
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
    } else if (is_tensor_marker(item)) {
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

// A list of tensors: Concatenate's and Stack's one argument.
std::vector<Tensor> tensor_list(const OperationCall& c) {
  c.takes(1);
  const Config& list = c.args[0];
  if (!list.is_list() || list.size() == 0) c.fail("takes a list of tensors, got " + list.to_string());
  std::vector<Tensor> tensors;
  for (const Config& item : list.as_list()) tensors.push_back(c.tensor(item, "xs"));
  return tensors;
}

using Reduce = Tensor (*)(const Tensor&, const ops::Axes&, bool);

Tensor reduce_call(const OperationCall& c, Reduce reduce) {
  c.no_kwargs();
  c.takes(1);
  const Tensor x = c.x();
  const std::vector<int> axes = axes_of(c, x, "axis");
  return reduce(x, ops::Axes(axes.begin(), axes.end()), c.config.at("keepdims").as_bool("keepdims"));
}

// NumPy's var: the mean of the squared distances from the mean, over the axes.
Tensor variance(const OperationCall& c) {
  c.no_kwargs();
  c.takes(1);
  const Tensor x = c.x();
  const std::vector<int> list = axes_of(c, x, "axis");
  const ops::Axes axes(list.begin(), list.end());
  const Tensor centred = ops::sub(x, ops::mean(x, axes, /*keepdims=*/true));
  return ops::mean(ops::square(centred), axes, c.config.at("keepdims").as_bool("keepdims"));
}

// A permutation of x's axes that moves `source` axes to `destination` positions (NumPy's moveaxis).
std::vector<std::int64_t> moved_axes(const OperationCall& c, const Tensor& x) {
  std::vector<std::int64_t> source = ints_of(c, "source"), destination = ints_of(c, "destination");
  if (source.size() != destination.size()) c.fail("'source' and 'destination' differ in length");
  std::vector<std::pair<int, int>> moves;
  for (std::size_t i = 0; i < source.size(); ++i)
    moves.emplace_back(axis_of(c, x, static_cast<int>(destination[i])), axis_of(c, x, static_cast<int>(source[i])));
  std::vector<std::int64_t> order;
  for (int axis = 0; axis < x.rank(); ++axis)
    if (std::none_of(moves.begin(), moves.end(), [&](const auto& m) { return m.second == axis; }))
      order.push_back(axis);
  std::sort(moves.begin(), moves.end());
  for (const auto& [to, from] : moves) {
    if (static_cast<std::size_t>(to) > order.size()) c.fail("moves an axis outside the input");
    order.insert(order.begin() + to, from);
  }
  return order;
}

// Pad's pad_width, NumPy's forms: n, [n], [before, after], [[before, after]] or one pair per axis.
void pad_widths(const OperationCall& c, const Tensor& x, std::vector<std::int64_t>& before,
                std::vector<std::int64_t>& after) {
  const Config& width = c.config.at("pad_width");
  const std::size_t rank = static_cast<std::size_t>(x.rank());
  std::vector<std::vector<std::int64_t>> pairs;
  if (width.type() == Config::Type::integer) {
    pairs.push_back({width.as_int(), width.as_int()});
  } else if (width.is_list() && width.size() > 0 && !width.as_list().front().is_list()) {
    std::vector<std::int64_t> flat = width.as_ints("pad_width");
    if (flat.size() == 1) flat.push_back(flat.front());
    if (flat.size() != 2) c.fail("'pad_width' " + width.to_string() + " is not a pair");
    pairs.push_back(flat);
  } else if (width.is_list()) {
    for (const Config& pair : width.as_list()) {
      std::vector<std::int64_t> p = pair.as_ints("pad_width");
      if (p.size() == 1) p.push_back(p.front());
      if (p.size() != 2) c.fail("'pad_width' " + width.to_string() + " holds " + pair.to_string() + ", not a pair");
      pairs.push_back(p);
    }
  } else {
    c.fail("'pad_width' is " + width.to_string());
  }
  if (pairs.size() != 1 && pairs.size() != rank)
    c.fail("'pad_width' " + width.to_string() + " does not fit an input of shape " + x.shape().to_string());
  for (std::size_t axis = 0; axis < rank; ++axis) {
    const std::vector<std::int64_t>& p = pairs[pairs.size() == 1 ? 0 : axis];
    if (p[0] < 0 || p[1] < 0) c.fail("'pad_width' " + width.to_string() + " is negative");
    before.push_back(p[0]);
    after.push_back(p[1]);
  }
}

Tensor pad_call(const OperationCall& c) {
  c.no_kwargs({"constant_values"});
  c.takes(1);
  if (c.config.get_string("mode") != "constant")
    c.fail("mode '" + c.config.get_string("mode") + "' is not supported: kiln pads with zeros ('constant')");
  if (c.kwargs.is_map() && c.kwargs.contains("constant_values")) {
    const Config& value = c.kwargs.at("constant_values");
    if (!value.is_null() && !((value.type() == Config::Type::integer || value.type() == Config::Type::number) &&
                              value.as_double() == 0.0))
      c.fail("constant_values " + value.to_string() + " is not supported: kiln pads with zeros");
  }
  const Tensor x = c.x();
  std::vector<std::int64_t> before, after;
  pad_widths(c, x, before, after);
  return ops::pad(x, before, after);
}

// Keras's normalize: x · rsqrt(max(Σx², ε²)) for order 2, else x / max(‖x‖ₚ, ε).
Tensor normalize_call(const OperationCall& c) {
  c.no_kwargs();
  c.takes(1);
  const Tensor x = c.x();
  const int order = integer(c, "order");
  if (order < 1) c.fail("'order' must be an integer of 1 or more, got " + std::to_string(order));
  const double epsilon = c.config.at("epsilon").is_null() ? 1e-7 : number(c, "epsilon");
  const ops::Axes axes = {axis_of(c, x, integer(c, "axis"))};
  if (order == 2) {
    const Tensor square_sum = ops::sum(ops::square(x), axes, true);
    return ops::mul(x, ops::rsqrt(ops::maximum(square_sum, ops::scalar_like(square_sum, epsilon * epsilon))));
  }
  Tensor norm = order == 1 ? ops::sum(ops::abs(x), axes, true)
                           : ops::pow_scalar(ops::sum(ops::pow_scalar(ops::abs(x), order), axes, true), 1.0 / order);
  return ops::div(x, ops::maximum(norm, ops::scalar_like(norm, epsilon)));
}

// Sparsemax along any axis: kiln's runs along the last.
Tensor sparsemax_call(const OperationCall& c) {
  c.no_kwargs();
  c.takes(1);
  const Tensor x = c.x();
  const int axis = axis_of(c, x, integer(c, "axis"));
  if (axis == x.rank() - 1) return ops::sparsemax(x);
  std::vector<std::int64_t> perm;
  for (int a = 0; a < x.rank(); ++a) perm.push_back(a);
  std::swap(perm[static_cast<std::size_t>(axis)], perm.back());
  return ops::transpose(ops::sparsemax(ops::transpose(x, perm)), perm);
}

// ---- the table --------------------------------------------------------------------------------------------------

struct Table {
  std::map<std::string, OperationClass> classes;

  void add(const std::string& name, const std::string& module, Keys keys, Call call) {
    classes[name] = {"keras.src.ops." + module, std::move(keys), std::move(call)};
  }
  // x → f(x), no keys.
  void unary(const std::string& name, const std::string& module, Tensor (*f)(const Tensor&)) {
    add(name, module, {}, [f](const OperationCall& c) {
      c.no_kwargs();
      c.takes(1);
      return f(c.x());
    });
  }
  // x → f(x, the number under `key`).
  void with_number(const std::string& name, const std::string& key, double fallback,
                   Tensor (*f)(const Tensor&, double)) {
    add(name, "nn", {{key, Config(fallback)}}, [f, key](const OperationCall& c) {
      c.no_kwargs();
      c.takes(1);
      return f(c.x(), number(c, key));
    });
  }
  // x → f(x, the axis under "axis").
  void with_axis(const std::string& name, const std::string& module, Config fallback, Tensor (*f)(const Tensor&, int)) {
    add(name, module, {{"axis", std::move(fallback)}}, [f](const OperationCall& c) {
      c.no_kwargs();
      c.takes(1);
      const Tensor x = c.x();
      return f(x, axis_of(c, x, integer(c, "axis")));
    });
  }
};

void numpy_classes(Table& t) {
  for (const auto& [name, f] : std::vector<std::pair<const char*, BinaryOp>>{
           {"Add", ops::add},
           {"Subtract", ops::sub},
           {"Multiply", ops::mul},
           {"Divide", ops::div},
           {"TrueDivide", ops::div},
           {"Power", ops::pow},
           {"Maximum", ops::maximum},
           {"Minimum", ops::minimum},
           {"Greater", ops::greater},
           {"GreaterEqual", ops::greater_equal},
           {"Less", ops::less},
           {"LessEqual", ops::less_equal},
           {"Equal", ops::equal}})
    t.add(name, "numpy", {}, [f = f](const OperationCall& c) { return binary_call(c, f); });
  t.unary("Negative", "numpy", ops::neg);
  t.unary("Exp", "numpy", ops::exp);
  t.unary("Log", "numpy", ops::log);
  t.unary("Sqrt", "numpy", ops::sqrt);
  t.unary("Square", "numpy", ops::square);
  t.unary("Absolute", "numpy", ops::abs);
  t.unary("Sin", "numpy", ops::sin);
  t.unary("Cos", "numpy", ops::cos);
  t.unary("Tanh", "numpy", ops::tanh);
  t.unary("Rsqrt", "math", ops::rsqrt);
  t.add("Reciprocal", "numpy", {}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    return ops::div(ops::scalar_like(x, 1.0), x);
  });
  t.add("Clip", "numpy", {{"x_min", std::nullopt}, {"x_max", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    Tensor x = c.x();
    if (!c.config.at("x_min").is_null()) x = ops::maximum(x, ops::scalar_like(x, number(c, "x_min")));
    if (!c.config.at("x_max").is_null()) x = ops::minimum(x, ops::scalar_like(x, number(c, "x_max")));
    return x;
  });
  t.add("Matmul", "numpy", {}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(2);
    return ops::matmul(c.tensor(c.args[0], "x1"), c.tensor(c.args[1], "x2"));
  });
  t.add("Where", "numpy", {}, [](const OperationCall& c) {
    c.no_kwargs();
    if (c.args.size() != 3) c.fail("takes a condition and two values (kiln has no one-argument where)");
    const Tensor condition = c.tensor(c.args[0], "condition");
    const Tensor like = is_tensor_marker(c.args[1]) ? c.tensor(c.args[1], "x1")
                        : is_tensor_marker(c.args[2]) ? c.tensor(c.args[2], "x2")
                                                      : condition;
    return ops::where(condition, c.operand(1, "x1", like), c.operand(2, "x2", like));
  });
  t.add("Concatenate", "numpy", {{"axis", Config(0)}}, [](const OperationCall& c) {
    c.no_kwargs();
    const std::vector<Tensor> xs = tensor_list(c);
    return ops::concat(xs, axis_of(c, xs.front(), integer(c, "axis")));
  });
  t.add("Stack", "numpy", {{"axis", Config(0)}}, [](const OperationCall& c) {
    c.no_kwargs();
    std::vector<Tensor> xs = tensor_list(c);
    const int axis = axis_of(c, xs.front(), integer(c, "axis"), 1);
    for (Tensor& x : xs) x = ops::expand_dims(x, axis);
    return ops::concat(xs, axis);
  });
  t.add("Mean", "numpy", {{"axis", Config()}, {"keepdims", Config(false)}},
        [](const OperationCall& c) { return reduce_call(c, ops::mean); });
  t.add("Sum", "numpy", {{"axis", Config()}, {"keepdims", Config(false)}},
        [](const OperationCall& c) { return reduce_call(c, ops::sum); });
  for (const auto& [name, f] : {std::pair<const char*, Reduce>{"Max", ops::max}, {"Min", ops::min}})
    t.add(name, "numpy", {{"axis", Config()}, {"keepdims", Config(false)}, {"initial", Config()}},
          [f = f](const OperationCall& c) {
            null_key(c, "initial");
            return reduce_call(c, f);
          });
  t.add("Var", "numpy", {{"axis", Config()}, {"keepdims", Config(false)}}, variance);
  t.add("Std", "numpy", {{"axis", Config()}, {"keepdims", Config(false)}},
        [](const OperationCall& c) { return ops::sqrt(variance(c)); });
  t.add("ExpandDims", "numpy", {{"axis", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    Tensor x = c.x();
    const Config& value = c.config.at("axis");
    const std::vector<Config> list = value.is_list() ? value.as_list() : std::vector<Config>{value};
    std::vector<int> axes;
    for (const Config& item : list)
      axes.push_back(axis_of(c, x, integer(c, item, "'axis'"), static_cast<int>(list.size())));
    std::sort(axes.begin(), axes.end());
    for (int axis : axes) x = ops::expand_dims(x, axis);
    return x;
  });
  t.add("Squeeze", "numpy", {{"axis", Config()}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    const std::vector<int> axes = axes_of(c, x, "axis");
    return ops::squeeze(x, ops::Axes(axes.begin(), axes.end()));
  });
  t.add("Reshape", "numpy", {{"newshape", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    return ops::reshape(c.x(), ints_of(c, "newshape"));
  });
  t.add("Transpose", "numpy", {{"axes", Config()}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    std::vector<std::int64_t> perm;
    if (!c.config.at("axes").is_null())
      for (std::int64_t axis : ints_of(c, "axes")) perm.push_back(axis_of(c, x, static_cast<int>(axis)));
    return ops::transpose(x, perm);
  });
  t.add("Swapaxes", "numpy", {{"axis1", std::nullopt}, {"axis2", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    std::vector<std::int64_t> perm;
    for (int axis = 0; axis < x.rank(); ++axis) perm.push_back(axis);
    std::swap(perm[static_cast<std::size_t>(axis_of(c, x, integer(c, "axis1")))],
              perm[static_cast<std::size_t>(axis_of(c, x, integer(c, "axis2")))]);
    return ops::transpose(x, perm);
  });
  t.add("Moveaxis", "numpy", {{"source", std::nullopt}, {"destination", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    return ops::transpose(x, moved_axes(c, x));
  });
  t.add("Flip", "numpy", {{"axis", Config()}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    Tensor x = c.x();
    std::vector<int> axes = axes_of(c, x, "axis");
    if (axes.empty())
      for (int axis = 0; axis < x.rank(); ++axis) axes.push_back(axis);
    for (int axis : axes) x = ops::flip(x, axis);
    return x;
  });
  t.add("Pad", "numpy", {{"pad_width", std::nullopt}, {"mode", Config("constant")}}, pad_call);
  t.add("BroadcastTo", "numpy", {{"shape", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    return ops::broadcast_to(c.x(), c.config.at("shape").as_shape("shape"));
  });
  for (const auto& [name, f] : {std::pair<const char*, Tensor (*)(const Tensor&)>{"ZerosLike", ops::zeros_like},
                                {"OnesLike", ops::ones_like}})
    t.add(name, "numpy", {{"dtype", Config()}}, [f = f](const OperationCall& c) {
      c.no_kwargs();
      c.takes(1);
      null_key(c, "dtype");
      return f(c.x());
    });
}

void nn_classes(Table& t) {
  t.unary("Relu", "nn", ops::relu);
  t.unary("Relu6", "nn", ops::relu6);
  t.unary("Sigmoid", "nn", ops::sigmoid);
  t.unary("Softplus", "nn", ops::softplus);
  t.unary("Softsign", "nn", ops::softsign);
  t.unary("Silu", "nn", ops::swish);
  t.unary("LogSigmoid", "nn", ops::log_sigmoid);
  t.unary("HardSigmoid", "nn", ops::hard_sigmoid);
  t.unary("HardSilu", "nn", ops::hard_silu);
  t.unary("HardTanh", "nn", ops::hard_tanh);
  t.unary("TanhShrink", "nn", ops::tanh_shrink);
  t.unary("SparsePlus", "nn", ops::sparse_plus);
  t.unary("SparseSigmoid", "nn", ops::sparse_sigmoid);
  t.unary("Selu", "nn", ops::selu);
  t.with_number("LeakyRelu", "negative_slope", 0.2, ops::leaky_relu);
  t.with_number("Elu", "alpha", 1.0, ops::elu);
  t.with_number("Celu", "alpha", 1.0, ops::celu);
  t.with_number("SoftShrink", "threshold", 0.5, ops::soft_shrink);
  t.with_number("HardShrink", "threshold", 0.5, ops::hard_shrink);
  t.with_number("Squareplus", "b", 4.0, ops::squareplus);
  t.add("Gelu", "nn", {{"approximate", Config(true)}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    return ops::gelu(c.x(), c.config.at("approximate").as_bool("approximate"));
  });
  t.add("Threshold", "nn", {{"threshold", std::nullopt}, {"default_value", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    c.takes(1);
    const Tensor x = c.x();
    return ops::where(ops::greater(x, ops::scalar_like(x, number(c, "threshold"))), x,
                      ops::scalar_like(x, number(c, "default_value")));
  });
  t.with_axis("Glu", "nn", Config(-1), ops::glu);
  t.with_axis("Softmax", "nn", Config(-1), ops::softmax);
  t.with_axis("LogSoftmax", "nn", Config(-1), ops::log_softmax);
  t.add("Sparsemax", "nn", {{"axis", Config(-1)}}, sparsemax_call);
  t.add("Normalize", "nn", {{"axis", Config(-1)}, {"order", Config(2)}, {"epsilon", Config()}}, normalize_call);
}

void core_classes(Table& t) {
  t.add("GetItem", "numpy", {}, [](const OperationCall& c) {
    c.no_kwargs();
    if (c.args.size() != 2) c.fail("takes a tensor and a key");
    return ops::get_item(c.tensor(c.args[0], "x"), index_of(c.args[1], c));
  });
  // keras.ops.slice(inputs, start_indices, shape): the shape is the operation's, the start the call's.
  t.add("Slice", "core", {{"shape", std::nullopt}}, [](const OperationCall& c) {
    c.no_kwargs();
    const Config& start = c.arg(1, "start_indices");
    if (is_tensor_marker(start)) c.fail("start_indices given as a tensor is not supported");
    return ops::slice(c.tensor(c.arg(0, "inputs"), "inputs"), start.as_ints("start_indices"), ints_of(c, "shape"));
  });
}

}  // namespace

const std::map<std::string, OperationClass>& operation_classes() {
  static const std::map<std::string, OperationClass> classes = [] {
    Table table;
    numpy_classes(table);
    nn_classes(table);
    core_classes(table);
    return table.classes;
  }();
  return classes;
}

}  // namespace kiln::detail
