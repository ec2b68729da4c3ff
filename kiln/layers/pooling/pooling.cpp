#include <kiln/layers/pooling/pooling.hpp>

#include <limits>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

std::string list_text(const std::vector<std::int64_t>& values) { return Config::from_ints(values).to_string(); }

}  // namespace

// ---- windowed pooling -----------------------------------------------------------------------------------

PoolingLayer::PoolingLayer(const Config& config, const std::string& class_name, int rank, bool max)
    : Layer(config, class_name), rank_(rank), max_(max) {
  ConfigReader args = config_reader(config);
  pool_size_ = args.tuple("pool_size", rank, 2);
  strides_ = args.has("strides") ? args.tuple("strides", rank, 1) : pool_size_;  // Keras: strides=None
  padding_ = to_lower_case(args.text("padding", "valid"));
  data_format_ = args.data_format();
  args.finish();
  for (const auto& [values, key] : {std::pair{&pool_size_, "pool_size"}, std::pair{&strides_, "strides"}})
    for (const std::int64_t value : *values)
      if (value <= 0) args.fail(std::string(key) + " must be positive, got " + list_text(*values));
  if (padding_ != "valid" && padding_ != "same") args.fail("padding must be 'valid' or 'same', got '" + padding_ + "'");
}

Config PoolingLayer::get_config() const {
  Config config = base_config();
  config.set("pool_size", Config::from_ints(pool_size_));
  config.set("padding", padding_);
  config.set("strides", Config::from_ints(strides_));
  config.set("data_format", data_format_);
  return config;
}

void PoolingLayer::check_input(const Shape& input_shape) const {
  if (input_shape.rank() != rank_ + 2)
    shape_error("expects inputs of rank " + std::to_string(rank_ + 2) + " (batch, " +
                    (rank_ == 1 ? "steps" : "height, width") + " and channels), got rank " +
                    std::to_string(input_shape.rank()),
                {{"input", input_shape}});
  try {
    ops::pool_output_shape(input_shape, ops::PoolOptions{pool_size_, strides_, padding_, data_format_});
  } catch (const ShapeError& error) {
    shape_error(std::string("cannot pool its input: ") + error.what(), {{"input", input_shape}});
  }
}

void PoolingLayer::build(const Shape& input_shape) { check_input(input_shape); }

Tensor PoolingLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  const ops::PoolOptions options{pool_size_, strides_, padding_, data_format_};
  return max_ ? ops::max_pool(input, options) : ops::avg_pool(input, options);
}

namespace {
Config pool_config(Config pool_size, const Config& options) { return options.with("pool_size", std::move(pool_size)); }
}  // namespace

MaxPooling1D::MaxPooling1D(std::int64_t pool_size, const Config& options)
    : LayerHandle(std::make_shared<MaxPooling1DLayer>(pool_config(pool_size, options))) {}
MaxPooling2D::MaxPooling2D(std::int64_t pool_size, const Config& options)
    : LayerHandle(std::make_shared<MaxPooling2DLayer>(pool_config(pool_size, options))) {}
MaxPooling2D::MaxPooling2D(const std::vector<std::int64_t>& pool_size, const Config& options)
    : LayerHandle(std::make_shared<MaxPooling2DLayer>(pool_config(Config::from_ints(pool_size), options))) {}
AveragePooling1D::AveragePooling1D(std::int64_t pool_size, const Config& options)
    : LayerHandle(std::make_shared<AveragePooling1DLayer>(pool_config(pool_size, options))) {}
AveragePooling2D::AveragePooling2D(std::int64_t pool_size, const Config& options)
    : LayerHandle(std::make_shared<AveragePooling2DLayer>(pool_config(pool_size, options))) {}
AveragePooling2D::AveragePooling2D(const std::vector<std::int64_t>& pool_size, const Config& options)
    : LayerHandle(std::make_shared<AveragePooling2DLayer>(pool_config(Config::from_ints(pool_size), options))) {}

// ---- global pooling -------------------------------------------------------------------------------------

GlobalPoolingLayer::GlobalPoolingLayer(const Config& config, const std::string& class_name, int rank, bool max)
    : Layer(config, class_name), rank_(rank), max_(max) {
  ConfigReader args = config_reader(config);
  data_format_ = args.data_format();
  keepdims_ = args.boolean("keepdims", false);
  args.finish();
}

Config GlobalPoolingLayer::get_config() const {
  Config config = base_config();
  config.set("data_format", data_format_);
  config.set("keepdims", keepdims_);
  return config;
}

void GlobalPoolingLayer::check_rank(const Shape& input_shape) const {
  if (input_shape.rank() == rank_ + 2) return;
  const std::string spatial = rank_ == 1 ? "steps" : "height, width";
  shape_error(data_format_ == "channels_last" ? "needs inputs of shape (batch, " + spatial + ", features)"
                                              : "needs inputs of shape (batch, features, " + spatial + ")",
              {{"input", input_shape}});
}

void GlobalPoolingLayer::build(const Shape& input_shape) { check_rank(input_shape); }

Tensor GlobalPoolingLayer::call(const Tensor& input, const CallArgs& args) {
  check_rank(input.shape());
  const std::int64_t first = data_format_ == "channels_last" ? 1 : 2;
  ops::Axes axes;
  for (std::int64_t axis = first; axis < first + rank_; ++axis) axes.push_back(axis);
  const Tensor* given = args.find_tensor("mask");
  if (given == nullptr) return max_ ? ops::max(input, axes, keepdims_) : ops::mean(input, axes, keepdims_);
  const Shape& shape = input.shape();
  const Shape& mask_shape = given->shape();
  const std::int64_t steps = shape[static_cast<int>(first)];
  auto differ = [](std::int64_t a, std::int64_t b) { return a != b && a != Shape::unknown && b != Shape::unknown; };
  if (given->rank() != 2 || differ(mask_shape[0], shape[0]) || differ(mask_shape[1], steps))
    shape_error("the mask must be (batch, steps)", {{"input", shape}, {"mask", mask_shape}});
  // The mask (batch, steps) as a column along the features' side: (batch, steps, 1) or (batch, 1, steps).
  const Tensor kept = ops::expand_dims(*given, data_format_ == "channels_last" ? 2 : 1);
  if (!max_)  // Keras's: sum(x · mask) / sum(mask), which broadcasts over the features
    return ops::sum(input * kept, axes, keepdims_) / ops::sum(kept, axes, keepdims_);
  // The maximum over kept steps: the others count as -inf; a row without any gives 0.
  const Tensor zero = ops::scalar_like(input, 0.0);
  const Tensor is_kept = ops::scalar_like(kept, 1.0) - ops::equal(kept, zero);
  const Tensor masked = ops::where(is_kept, input, ops::scalar_like(input, -std::numeric_limits<double>::infinity()));
  return ops::where(ops::max(is_kept, axes, keepdims_), ops::max(masked, axes, keepdims_), zero);
}

GlobalAveragePooling1D::GlobalAveragePooling1D(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<GlobalAveragePooling1DLayer>(options.with("data_format", data_format))) {}
GlobalAveragePooling2D::GlobalAveragePooling2D(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<GlobalAveragePooling2DLayer>(options.with("data_format", data_format))) {}
GlobalMaxPooling1D::GlobalMaxPooling1D(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<GlobalMaxPooling1DLayer>(options.with("data_format", data_format))) {}
GlobalMaxPooling2D::GlobalMaxPooling2D(const std::string& data_format, const Config& options)
    : LayerHandle(std::make_shared<GlobalMaxPooling2DLayer>(options.with("data_format", data_format))) {}

KILN_REGISTER_LAYER("kiln>MaxPooling1D", MaxPooling1DLayer);
KILN_REGISTER_LAYER("kiln>MaxPooling2D", MaxPooling2DLayer);
KILN_REGISTER_LAYER("kiln>AveragePooling1D", AveragePooling1DLayer);
KILN_REGISTER_LAYER("kiln>AveragePooling2D", AveragePooling2DLayer);
KILN_REGISTER_LAYER("kiln>GlobalAveragePooling1D", GlobalAveragePooling1DLayer);
KILN_REGISTER_LAYER("kiln>GlobalAveragePooling2D", GlobalAveragePooling2DLayer);
KILN_REGISTER_LAYER("kiln>GlobalMaxPooling1D", GlobalMaxPooling1DLayer);
KILN_REGISTER_LAYER("kiln>GlobalMaxPooling2D", GlobalMaxPooling2DLayer);

}  // namespace kiln
