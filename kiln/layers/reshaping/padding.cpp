#include <kiln/layers/reshaping/padding.hpp>

#include <cmath>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

using Margin = std::array<std::int64_t, 2>;

// An int n is (n, n); a list of two ints is (before, after).
Margin margin_of(const Config& value, ConfigReader& args, const std::string& what) {
  if (!value.is_list()) {
    const std::int64_t n = value.as_int(what);
    return {n, n};
  }
  const std::vector<std::int64_t> pair = value.as_ints(what);
  if (pair.size() != 2) args.fail(what + " must be an int or a list of two, got " + value.to_string());
  return {pair[0], pair[1]};
}

}  // namespace

// ---- ZeroPadding and Cropping -------------------------------------------------------------------------

SpatialMarginLayer::SpatialMarginLayer(const Config& config, const std::string& class_name, int rank, const char* key,
                                       bool pad, bool has_data_format)
    : Layer(config, class_name), rank_(rank), key_(key), pad_(pad), has_data_format_(has_data_format) {
  ConfigReader args = config_reader(config);
  const std::int64_t fallback = pad || rank == 1 ? 1 : 0;
  const Config& value = args.value(key);
  const std::string what = "argument '" + key_ + "'";
  if (value.is_null()) {
    margins_.assign(static_cast<std::size_t>(rank), Margin{fallback, fallback});
  } else if (rank == 1) {
    margins_ = {margin_of(value, args, what)};
  } else if (!value.is_list()) {
    const std::int64_t n = value.as_int(what);
    margins_ = {Margin{n, n}, Margin{n, n}};
  } else {
    if (value.as_list(what).size() != 2)
      args.fail(what + " must be an int, two ints or two pairs of ints, got " + value.to_string());
    for (const Config& axis : value.as_list(what)) margins_.push_back(margin_of(axis, args, what));
  }
  if (has_data_format) data_format_ = args.data_format();
  args.finish();
  for (const Margin& m : margins_)
    if (m[0] < 0 || m[1] < 0) args.fail(key_ + " must not be negative, got " + value.to_string());
}

Config SpatialMarginLayer::get_config() const {
  Config config = base_config();
  if (rank_ == 1) {
    config.set(key_, Config::from_ints({margins_[0][0], margins_[0][1]}));
  } else {
    Config pairs = Config::list();
    for (const Margin& m : margins_) pairs.push_back(Config::from_ints({m[0], m[1]}));
    config.set(key_, pairs);
  }
  if (has_data_format_) config.set("data_format", data_format_);
  return config;
}

void SpatialMarginLayer::check_input(const Shape& input_shape) const {
  if (input_shape.rank() != rank_ + 2)
    shape_error(
        "expects inputs of rank " + std::to_string(rank_ + 2) + ", got rank " + std::to_string(input_shape.rank()),
        {{"input", input_shape}});
  for (int axis = 0; axis < rank_; ++axis) {
    const std::int64_t dim = input_shape[first_spatial_axis() + axis];
    const Margin& m = margins_[static_cast<std::size_t>(axis)];
    if (dim == Shape::unknown) {
      if (pad_ ? m[0] + m[1] > 0 : m[1] > 0)
        shape_error("needs spatial axis " + std::to_string(axis) + " to be known to " + (pad_ ? "pad" : "crop") + " it",
                    {{"input", input_shape}});
      continue;
    }
    if (!pad_ && m[0] + m[1] >= dim)
      shape_error("cropping " + std::to_string(m[0]) + " + " + std::to_string(m[1]) + " leaves nothing of an axis of " +
                      std::to_string(dim),
                  {{"input", input_shape}});
  }
}

void SpatialMarginLayer::build(const Shape& input_shape) { check_input(input_shape); }

Tensor SpatialMarginLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  const auto rank = static_cast<std::size_t>(input.rank());
  std::vector<std::int64_t> before(rank, 0), after(rank, 0), size(rank, -1);
  for (int axis = 0; axis < rank_; ++axis) {
    const auto a = static_cast<std::size_t>(first_spatial_axis() + axis);
    const Margin& m = margins_[static_cast<std::size_t>(axis)];
    before[a] = m[0];
    after[a] = m[1];
    const std::int64_t dim = input.shape()[static_cast<int>(a)];
    if (dim != Shape::unknown) size[a] = dim - m[0] - m[1];
  }
  return pad_ ? ops::pad(input, before, after) : ops::slice(input, before, size);
}

ZeroPadding1D::ZeroPadding1D(std::int64_t padding, const Config& options)
    : LayerHandle(std::make_shared<ZeroPadding1DLayer>(options.with("padding", padding))) {}
ZeroPadding2D::ZeroPadding2D(std::int64_t padding, const Config& options)
    : LayerHandle(std::make_shared<ZeroPadding2DLayer>(options.with("padding", padding))) {}
Cropping1D::Cropping1D(std::int64_t cropping, const Config& options)
    : LayerHandle(std::make_shared<Cropping1DLayer>(options.with("cropping", cropping))) {}
Cropping2D::Cropping2D(std::int64_t cropping, const Config& options)
    : LayerHandle(std::make_shared<Cropping2DLayer>(options.with("cropping", cropping))) {}

ZeroPadding1D::ZeroPadding1D(std::int64_t before, std::int64_t after, const Config& options)
    : LayerHandle(std::make_shared<ZeroPadding1DLayer>(options.with("padding", {before, after}))) {}
ZeroPadding2D::ZeroPadding2D(std::int64_t height, std::int64_t width, const Config& options)
    : LayerHandle(std::make_shared<ZeroPadding2DLayer>(options.with("padding", {height, width}))) {}
ZeroPadding2D::ZeroPadding2D(std::array<std::int64_t, 2> height, std::array<std::int64_t, 2> width,
                             const Config& options)
    : LayerHandle(std::make_shared<ZeroPadding2DLayer>(
          options.with("padding", Config::list({{height[0], height[1]}, {width[0], width[1]}})))) {}
Cropping1D::Cropping1D(std::int64_t start, std::int64_t end, const Config& options)
    : LayerHandle(std::make_shared<Cropping1DLayer>(options.with("cropping", {start, end}))) {}
Cropping2D::Cropping2D(std::int64_t height, std::int64_t width, const Config& options)
    : LayerHandle(std::make_shared<Cropping2DLayer>(options.with("cropping", {height, width}))) {}
Cropping2D::Cropping2D(std::array<std::int64_t, 2> height, std::array<std::int64_t, 2> width, const Config& options)
    : LayerHandle(std::make_shared<Cropping2DLayer>(
          options.with("cropping", Config::list({{height[0], height[1]}, {width[0], width[1]}})))) {}

// ---- UpSampling ---------------------------------------------------------------------------------------

UpSamplingLayer::UpSamplingLayer(const Config& config, const std::string& class_name, int rank)
    : Layer(config, class_name), rank_(rank) {
  ConfigReader args = config_reader(config);
  size_ = args.tuple("size", rank, 2);
  if (rank == 2) {
    data_format_ = args.data_format();
    interpolation_ = to_lower_case(args.text("interpolation", "nearest"));
  }
  args.finish();
  for (const std::int64_t s : size_)
    if (s <= 0) args.fail("size must be positive, got " + Config::from_ints(size_).to_string());
  if (interpolation_ != "nearest" && interpolation_ != "bilinear")
    args.fail("interpolation must be 'nearest' or 'bilinear' (kiln supports those of Keras's), got '" + interpolation_ +
              "'");
}

Config UpSamplingLayer::get_config() const {
  Config config = base_config();
  if (rank_ == 1) {
    config.set("size", size_[0]);
    return config;
  }
  config.set("size", Config::from_ints(size_));
  config.set("data_format", data_format_);
  config.set("interpolation", interpolation_);
  return config;
}

void UpSamplingLayer::check_input(const Shape& input_shape) const {
  if (input_shape.rank() != rank_ + 2)
    shape_error(
        "expects inputs of rank " + std::to_string(rank_ + 2) + ", got rank " + std::to_string(input_shape.rank()),
        {{"input", input_shape}});
  for (int axis = 1; axis < input_shape.rank(); ++axis)
    if (input_shape[axis] == Shape::unknown)
      shape_error("needs every axis but the batch to be known", {{"input", input_shape}});
}

void UpSamplingLayer::build(const Shape& input_shape) { check_input(input_shape); }

Tensor UpSamplingLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  return interpolation_ == "bilinear" ? bilinear(input) : nearest(input);
}

// Each spatial axis gets a new axis of size 1 after it, broadcast to the factor and folded back in: the
// gradient of the broadcast sums the copies.
Tensor UpSamplingLayer::nearest(const Tensor& input) const {
  const Shape& shape = input.shape();
  const int first = data_format_ == "channels_last" ? 1 : 2;
  std::vector<std::int64_t> expanded{Shape::unknown}, broadcast{Shape::unknown}, folded{-1};
  for (int axis = 1; axis < shape.rank(); ++axis) {
    const bool spatial = axis >= first && axis < first + rank_;
    expanded.push_back(shape[axis]);
    broadcast.push_back(shape[axis]);
    if (!spatial) {
      folded.push_back(shape[axis]);
      continue;
    }
    const std::int64_t factor = size_[static_cast<std::size_t>(axis - first)];
    expanded.push_back(1);
    broadcast.push_back(factor);
    folded.push_back(shape[axis] * factor);
  }
  expanded[0] = -1;
  const Tensor split = ops::reshape(input, expanded);
  return ops::reshape(ops::broadcast_to(split, Shape(broadcast)), folded);
}

namespace {
// (n, n·factor): column o holds the weights of the inputs for output o, with half-pixel centers and the
// edges clamped, as Keras's (and TensorFlow's and JAX's) bilinear resize computes them when enlarging.
Array interpolation_weights(std::int64_t n, std::int64_t factor, DType dtype) {
  const std::int64_t out = n * factor;
  Array weights = Array::full({n, out}, 0.0, DType::float64);
  for (std::int64_t o = 0; o < out; ++o) {
    const double center = (static_cast<double>(o) + 0.5) / static_cast<double>(factor) - 0.5;
    std::int64_t low = static_cast<std::int64_t>(std::floor(center));
    double fraction = center - static_cast<double>(low);
    if (low < 0) {
      low = 0;
      fraction = 0.0;
    }
    if (low >= n - 1) {
      low = n - 1;
      fraction = 0.0;
    }
    const std::int64_t high = std::min(low + 1, n - 1);
    weights.set_flat(static_cast<std::size_t>(low * out + o),
                     weights.flat(static_cast<std::size_t>(low * out + o)) + (1.0 - fraction));
    weights.set_flat(static_cast<std::size_t>(high * out + o),
                     weights.flat(static_cast<std::size_t>(high * out + o)) + fraction);
  }
  return weights.astype(dtype);
}
}  // namespace

// Two products with interpolation matrices, width then height, on (batch, channels, rows, columns).
Tensor UpSamplingLayer::bilinear(const Tensor& input) const {
  const bool last = data_format_ == "channels_last";
  Graph& graph = input.graph();
  Tensor t = last ? ops::transpose(input, {0, 3, 1, 2}) : input;  // (N, C, H, W)
  const std::int64_t height = t.shape()[2], width = t.shape()[3];
  t = ops::matmul(t, ops::constant(graph, interpolation_weights(width, size_[1], input.dtype()), "width_weights"));
  t = ops::transpose(t, {0, 1, 3, 2});  // (N, C, W', H)
  t = ops::matmul(t, ops::constant(graph, interpolation_weights(height, size_[0], input.dtype()), "height_weights"));
  return last ? ops::transpose(t, {0, 3, 2, 1}) : ops::transpose(t, {0, 1, 3, 2});
}

UpSampling1D::UpSampling1D(std::int64_t size, const Config& options)
    : LayerHandle(std::make_shared<UpSampling1DLayer>(options.with("size", size))) {}
UpSampling2D::UpSampling2D(std::int64_t size, const Config& options)
    : LayerHandle(std::make_shared<UpSampling2DLayer>(options.with("size", size))) {}
UpSampling2D::UpSampling2D(std::int64_t height, std::int64_t width, const Config& options)
    : LayerHandle(std::make_shared<UpSampling2DLayer>(options.with("size", {height, width}))) {}

KILN_REGISTER_LAYER("kiln>ZeroPadding1D", ZeroPadding1DLayer);
KILN_REGISTER_LAYER("kiln>ZeroPadding2D", ZeroPadding2DLayer);
KILN_REGISTER_LAYER("kiln>Cropping1D", Cropping1DLayer);
KILN_REGISTER_LAYER("kiln>Cropping2D", Cropping2DLayer);
KILN_REGISTER_LAYER("kiln>UpSampling1D", UpSampling1DLayer);
KILN_REGISTER_LAYER("kiln>UpSampling2D", UpSampling2DLayer);

}  // namespace kiln
