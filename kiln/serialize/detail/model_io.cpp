#include <kiln/serialize/detail/model_io.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <kiln/core/warnings.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/serialize/detail/keras_config.hpp>
#include <kiln/train/trainer.hpp>
#include <kiln/train/training.hpp>

namespace kiln::detail {

std::shared_ptr<ModelBase> model_from(const Config& serialized) {
  Config architecture = serialized;
  architecture.erase("compile_config");
  LayerPtr layer = layer_from_config(architecture);
  auto model = std::dynamic_pointer_cast<ModelBase>(layer);
  if (!model) throw ConfigError("the config describes " + layer->describe() + ", a layer, not a model");
  return model;
}

namespace {
constexpr std::uint64_t kBuildSlack = std::uint64_t{64} << 20;

std::size_t build_limit(std::uint64_t weight_bytes) {
  const std::uint64_t limit = weight_bytes > std::numeric_limits<std::size_t>::max() - kBuildSlack
                                  ? std::numeric_limits<std::size_t>::max()
                                  : weight_bytes + kBuildSlack;
  return static_cast<std::size_t>(limit);
}
}  // namespace

BuildFromFile::BuildFromFile(std::uint64_t weight_bytes)
    : limit_(build_limit(weight_bytes), "building the model, whose arrays may take the " +
                                            std::to_string(weight_bytes) +
                                            " bytes of weight data the file holds and 64 MiB more") {}

void assign_weights(const std::vector<Weight>& weights, const std::vector<StoredArray>& arrays,
                    const std::string& owner) {
  std::map<std::string, const StoredArray*> by_name;
  for (const StoredArray& array : arrays)
    if (!by_name.emplace(array.name, &array).second) throw ValueError("the file has two weights named '" + array.name + "'");
  for (const Weight& weight : weights) {
    auto found = by_name.find(weight.path);
    if (found == by_name.end()) throw ValueError("weight '" + weight.path + "' of " + owner + " is not in the file");
    if (found->second->shape != weight.value.shape())
      throw ShapeError("weight '" + weight.path + "' of " + owner + " has shape " + weight.value.shape().to_string() +
                       ", but the file's has shape " + found->second->shape.to_string());
  }
  if (by_name.size() != weights.size()) {
    std::set<std::string> known;
    for (const Weight& weight : weights) known.insert(weight.path);
    for (const StoredArray& array : arrays)
      if (!known.count(array.name))
        throw ValueError("the file has a weight '" + array.name + "' that " + owner + " does not have");
  }
  // Each weight is read once: a weight two layers share appears once in a model's weights.
  for (const Weight& weight : weights) {
    Array target = weight.value;
    by_name.at(weight.path)->read(target);
    if (weight.bfloat16 && target.dtype() == DType::float32) {  // a "bfloat16" layer's float32 data, as Keras assigns it
      const Array rounded = ops::round_to_bfloat16(target);
      std::memcpy(target.raw(), rounded.raw(), target.nbytes());
    }
  }
}

void assign_weights(const std::vector<Weight>& weights, const std::vector<NamedArray>& arrays,
                    const std::string& owner) {
  std::vector<StoredArray> stored;
  for (const NamedArray& array : arrays)
    stored.push_back({array.name, array.value.shape(), [value = array.value](Array& into) {
                        const Array source = value.astype(into.dtype());
                        std::memcpy(into.raw(), source.raw(), into.nbytes());
                      }});
  assign_weights(weights, stored, owner);
}

std::vector<StoredArray> stored_arrays(const ReadOnlyFile& file, const SectionIndex& section, const std::string& where) {
  std::vector<StoredArray> stored;
  for (ArrayEntry& entry : list_arrays(file, section.offset, section.length, where)) {
    const Shape shape = entry.shape;
    std::string name = entry.name;
    stored.push_back({std::move(name), shape, [&file, offset = section.offset, entry = std::move(entry)](Array& into) {
                        read_array(file, offset, entry, into);
                      }});
  }
  return stored;
}

void compile_from(ModelBase& model, const Config& config) {
  OptimizerPtr optimizer = Optimizer::from_config(config.at("optimizer"));
  std::vector<Loss> losses;
  const Config& loss = config.at("loss");
  if (loss.is_list()) {
    for (const Config& one : loss.as_list("key 'loss'")) losses.push_back(Loss::from_config(one));
  } else {
    losses.push_back(Loss::from_config(loss));
  }
  std::vector<Metric> metrics;
  if (const Config* given = config.find("metrics"); given && !given->is_null())
    for (const Config& metric : given->as_list("key 'metrics'")) metrics.push_back(Metric::from_config(metric));
  std::vector<Metric> weighted_metrics;
  if (const Config* given = config.find("weighted_metrics"); given && !given->is_null())
    for (const Config& metric : given->as_list("key 'weighted_metrics'"))
      weighted_metrics.push_back(Metric::from_config(metric));
  compile_model(model, std::move(optimizer), std::move(losses), std::move(metrics), std::move(weighted_metrics));
}

bool compile_from_keras(ModelBase& model, const Config& keras, const std::string& where) {
  const Config compiled = guarded(where, [&] { return import_keras_compile_config(keras); });
  if (compiled.is_null()) {
    warn(where + ": names no loss; " + model.describe() + " is loaded uncompiled (compile it to train it)");
    return false;
  }
  guarded(where, [&] { compile_from(model, compiled); });
  return true;
}

Config compile_config(const ModelBase& model) {
  const Trainer* trainer = trainer_of(model);
  if (trainer == nullptr) return Config();
  Config losses = Config::list();
  for (const Loss& loss : trainer->losses()) {
    if (loss.custom()) return Config();
    losses.push_back(loss.serialize());
  }
  Config metrics = Config::list();
  for (const Metric& metric : trainer->metrics()) metrics.push_back(metric.serialize());
  Config weighted_metrics;  // null when none, as Keras writes it
  for (const Metric& metric : trainer->weighted_metrics()) {
    if (weighted_metrics.is_null()) weighted_metrics = Config::list();
    weighted_metrics.push_back(metric.serialize());
  }
  Config loss = losses.size() == 1 ? losses.as_list().front() : losses;
  return Config{{"optimizer", trainer->optimizer().serialize()},
                {"loss", loss},
                {"loss_weights", Config()},
                {"metrics", metrics},
                {"weighted_metrics", weighted_metrics}};
}

}  // namespace kiln::detail
