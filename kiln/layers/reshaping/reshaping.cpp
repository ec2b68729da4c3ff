#include <kiln/layers/reshaping/reshaping.hpp>

#include <algorithm>

#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

std::string ints_text(const std::vector<std::int64_t>& values) { return Config::from_ints(values).to_string(); }

// The product of the non-batch dimensions, or Shape::unknown when one of them is unknown.
std::int64_t sample_size(const Shape& shape) {
  std::int64_t size = 1;
  for (int axis = 1; axis < shape.rank(); ++axis) {
    if (shape[axis] == Shape::unknown) return Shape::unknown;
    size *= shape[axis];
  }
  return size;
}

}  // namespace

// ---- Reshape ----------------------------------------------------------------------------------------

ReshapeLayer::ReshapeLayer(const Config& config) : Layer(config, "Reshape") {
  ConfigReader args = config_reader(config);
  const Config& target = args.value("target_shape");
  if (target.is_null()) args.fail("the argument 'target_shape' is required");
  target_shape_ = target.as_ints("Reshape argument 'target_shape'");
  args.finish();
  if (std::count(target_shape_.begin(), target_shape_.end(), -1) > 1)
    args.fail("target_shape may contain at most one -1, got " + ints_text(target_shape_));
  for (std::int64_t dim : target_shape_)
    if (dim == 0 || dim < -1) args.fail("target_shape entries must be positive or -1, got " + ints_text(target_shape_));
}

Config ReshapeLayer::get_config() const {
  Config config = base_config();
  config.set("target_shape", Config::from_ints(target_shape_));
  return config;
}

// target_shape with its -1 resolved from the input's sample size. When that size is unknown, a target
// without -1 is left for the reshape op to check against each batch.
std::vector<std::int64_t> ReshapeLayer::sample_dims(const Shape& input_shape) const {
  if (input_shape.rank() < 1) shape_error("needs inputs with a batch dimension", {{"input", input_shape}});
  std::vector<std::int64_t> dims = target_shape_;
  const auto inferred = std::find(dims.begin(), dims.end(), -1);
  std::int64_t known = 1;
  for (std::int64_t dim : dims)
    if (dim != -1) known *= dim;
  const std::int64_t size = sample_size(input_shape);
  const std::string what = "cannot reshape each sample to target_shape " + ints_text(target_shape_);
  if (size == Shape::unknown) {
    if (inferred != dims.end()) shape_error(what + ": the -1 needs a known sample size", {{"input", input_shape}});
    return dims;
  }
  if (inferred != dims.end()) {
    if (size % known != 0)
      shape_error(what + ": " + std::to_string(size) + " elements do not divide by " + std::to_string(known),
                  {{"input", input_shape}});
    *inferred = size / known;
  } else if (size != known) {
    shape_error(what + ": " + std::to_string(size) + " elements per sample, the target has " + std::to_string(known),
                {{"input", input_shape}});
  }
  return dims;
}

void ReshapeLayer::build(const Shape& input_shape) { sample_dims(input_shape); }

Tensor ReshapeLayer::call(const Tensor& input, const CallArgs&) {
  std::vector<std::int64_t> dims = sample_dims(input.shape());
  dims.insert(dims.begin(), -1);  // the batch, unknown or not
  return ops::reshape(input, dims);
}

Reshape::Reshape(const std::vector<std::int64_t>& target_shape, const Config& options)
    : LayerHandle(std::make_shared<ReshapeLayer>(options.with("target_shape", Config::from_ints(target_shape)))) {}

// ---- Flatten ----------------------------------------------------------------------------------------

FlattenLayer::FlattenLayer(const Config& config) : Layer(config, "Flatten") {
  ConfigReader args = config_reader(config);
  data_format_ = args.data_format();
  args.finish();
}

Config FlattenLayer::get_config() const {
  Config config = base_config();
  config.set("data_format", data_format_);
  return config;
}

std::int64_t FlattenLayer::flattened_size(const Shape& input_shape) const {
  if (input_shape.rank() < 1) shape_error("needs inputs with a batch dimension", {{"input", input_shape}});
  const std::int64_t size = sample_size(input_shape);
  if (size == Shape::unknown) shape_error("needs every dimension but the batch to be known", {{"input", input_shape}});
  return size;
}

void FlattenLayer::build(const Shape& input_shape) { flattened_size(input_shape); }

Tensor FlattenLayer::call(const Tensor& input, const CallArgs&) {
  const std::int64_t size = flattened_size(input.shape());
  Tensor channels_last = input;
  if (data_format_ == "channels_first" && input.rank() > 2) {
    std::vector<std::int64_t> perm{0};
    for (std::int64_t axis = 2; axis < input.rank(); ++axis) perm.push_back(axis);
    perm.push_back(1);
    channels_last = ops::transpose(input, perm);
  }
  return ops::reshape(channels_last, {-1, size});
}

Flatten::Flatten(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<FlattenLayer>(options.with("data_format", data_format))) {}

// ---- Permute ----------------------------------------------------------------------------------------

PermuteLayer::PermuteLayer(const Config& config) : Layer(config, "Permute") {
  ConfigReader args = config_reader(config);
  if (!args.has("dims")) args.fail("argument 'dims' is required");
  dims_ = args.value("dims").as_ints("Permute argument 'dims'");
  args.finish();
  std::vector<std::int64_t> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<std::int64_t>(i) + 1)
      args.fail("dims must be a permutation of 1.." + std::to_string(dims_.size()) + ", got " +
                Config::from_ints(dims_).to_string());
  if (dims_.empty()) args.fail("dims must not be empty");
}

Config PermuteLayer::get_config() const {
  Config config = base_config();
  config.set("dims", Config::from_ints(dims_));
  return config;
}

void PermuteLayer::check_rank(const Shape& input_shape) const {
  if (input_shape.rank() != static_cast<int>(dims_.size()) + 1)
    shape_error("permutes " + std::to_string(dims_.size()) + " sample axes, so it needs inputs of rank " +
                    std::to_string(dims_.size() + 1),
                {{"input", input_shape}});
}

void PermuteLayer::build(const Shape& input_shape) { check_rank(input_shape); }

Tensor PermuteLayer::call(const Tensor& input, const CallArgs&) {
  check_rank(input.shape());
  std::vector<std::int64_t> perm{0};
  perm.insert(perm.end(), dims_.begin(), dims_.end());
  return ops::transpose(input, perm);
}

Permute::Permute(const std::vector<std::int64_t>& dims, const Config& options)
    : LayerHandle(std::make_shared<PermuteLayer>(options.with("dims", Config::from_ints(dims)))) {}

// ---- RepeatVector -----------------------------------------------------------------------------------

RepeatVectorLayer::RepeatVectorLayer(const Config& config) : Layer(config, "RepeatVector") {
  ConfigReader args = config_reader(config);
  n_ = args.integer("n");
  args.finish();
  if (n_ <= 0) args.fail("n must be positive, got " + std::to_string(n_));
}

Config RepeatVectorLayer::get_config() const {
  Config config = base_config();
  config.set("n", n_);
  return config;
}

void RepeatVectorLayer::check_rank(const Shape& input_shape) const {
  if (input_shape.rank() != 2 || input_shape[1] == Shape::unknown)
    shape_error("needs inputs of shape (batch, features) with known features", {{"input", input_shape}});
}

void RepeatVectorLayer::build(const Shape& input_shape) { check_rank(input_shape); }

Tensor RepeatVectorLayer::call(const Tensor& input, const CallArgs&) {
  check_rank(input.shape());
  // (batch, 1, features) broadcast to (batch, n, features); its gradient sums the n copies.
  return ops::broadcast_to(ops::expand_dims(input, 1), Shape{Shape::unknown, n_, input.shape()[1]});
}

RepeatVector::RepeatVector(std::int64_t n, const Config& options)
    : LayerHandle(std::make_shared<RepeatVectorLayer>(options.with("n", n))) {}

KILN_REGISTER_LAYER("kiln>Reshape", ReshapeLayer);
KILN_REGISTER_LAYER("kiln>Flatten", FlattenLayer);
KILN_REGISTER_LAYER("kiln>Permute", PermuteLayer);
KILN_REGISTER_LAYER("kiln>RepeatVector", RepeatVectorLayer);

}  // namespace kiln
