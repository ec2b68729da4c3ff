#include <kiln/layers/model_base.hpp>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>

namespace kiln {

// ---- InputLayer and Input --------------------------------------------------------------------------------

namespace {

// Keras's integer and boolean inputs (token ids, masks) hold whole numbers, which kiln keeps in float32:
// exact up to 2^24, more than any vocabulary. The declared dtype is kept for get_config, so a model read
// from a Keras file writes "int32" back.
bool is_integer_dtype(const std::string& name) {
  for (const char* integer : {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"})
    if (name == integer) return true;
  return false;
}

std::string declared_dtype(const Config& config) {
  const Config* dtype = config.is_map() ? config.find("dtype") : nullptr;
  return dtype != nullptr && dtype->type() == Config::Type::string ? dtype->as_string() : "";
}

Config as_float_input(const Config& config) {
  return is_integer_dtype(declared_dtype(config)) ? config.with("dtype", "float32") : config;
}

}  // namespace

InputLayer::InputLayer(const Config& config) : Layer(as_float_input(config), "InputLayer") {
  if (is_integer_dtype(declared_dtype(config))) integer_dtype_ = declared_dtype(config);
  ConfigReader args = config_reader(config);
  if (args.has("batch_shape")) {
    batch_shape_ = args.value("batch_shape").as_shape("InputLayer argument 'batch_shape'");
  } else if (args.has("shape")) {  // Keras's InputLayer(shape=(8,)): the batch dimension is implied
    const Shape shape = args.value("shape").as_shape("InputLayer argument 'shape'");
    std::vector<std::int64_t> dims = {args.integer("batch_size", Shape::unknown)};
    dims.insert(dims.end(), shape.dims().begin(), shape.dims().end());
    batch_shape_ = Shape(dims);
  } else {
    args.fail("needs 'batch_shape' (or 'shape' without the batch dimension)");
  }
  args.value("shape");
  args.value("batch_size");
  if (args.boolean("sparse", false) || args.boolean("ragged", false))
    args.fail("sparse and ragged inputs are not supported");
  if (args.boolean("optional", false))
    args.fail("optional inputs (None accepted in place of a tensor) are not supported");
  args.finish();
  build_for(batch_shape_);
}

Config InputLayer::get_config() const {
  Config config = {{"batch_shape", Config::from_shape(batch_shape_)},
                   {"dtype", integer_dtype_.empty() ? dtype_name(dtype()) : integer_dtype_}};
  config.set("name", name());
  return config;
}

Tensor InputLayer::placeholder_in(Graph& graph) {
  LayerPtr self = weak_from_this().lock();
  if (!self) throw LayerStateError(describe() + " is not held by a std::shared_ptr; create it with std::make_shared");
  const Tensor placeholder = graph.placeholder(batch_shape_, dtype(), name());
  auto record = std::make_shared<LayerCall>();
  record->layer = std::move(self);
  record->outputs = {placeholder};
  return placeholder.with_producer(record, 0);
}

Tensor InputLayer::make_input() {
  graphs_.push_back(std::make_shared<Graph>());
  graphs_.back()->set_writes_model(true);
  return placeholder_in(*graphs_.back());
}

Tensor Input(const Shape& shape, DType dtype, const std::string& name) {
  Config config = {{"batch_shape", Config::from_shape(shape)}, {"dtype", dtype_name(dtype)}};
  if (!name.empty()) config.set("name", name);
  return std::make_shared<InputLayer>(config)->make_input();
}

KILN_REGISTER_LAYER("kiln>InputLayer", InputLayer);

}  // namespace kiln
