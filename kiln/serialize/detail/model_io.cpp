#include <kiln/serialize/detail/model_io.hpp>

#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/train/model.hpp>
#include <kiln/train/trainer.hpp>

namespace kiln::detail {

std::shared_ptr<ModelBase> model_from(const Config& serialized) {
  Config architecture = serialized;
  architecture.erase("compile_config");
  LayerPtr layer = layer_from_config(architecture);
  auto model = std::dynamic_pointer_cast<ModelBase>(layer);
  if (!model) throw ConfigError("the config describes " + layer->describe() + ", a layer, not a model");
  return model;
}

// Copies every array into the weight of the same path, after checking them all: on any mismatch the
// model is unchanged. ValueError/ShapeError naming the weight.
void assign_weights(const std::vector<Weight>& weights, const std::vector<NamedArray>& arrays,
                    const std::string& owner) {
  std::map<std::string, const Array*> by_name;
  for (const NamedArray& array : arrays)
    if (!by_name.emplace(array.name, &array.value).second)
      throw ValueError("the file has two weights named '" + array.name + "'");
  for (const Weight& weight : weights) {
    auto found = by_name.find(weight.path);
    if (found == by_name.end()) throw ValueError("weight '" + weight.path + "' of " + owner + " is not in the file");
    if (found->second->shape() != weight.value.shape())
      throw ShapeError("weight '" + weight.path + "' of " + owner + " has shape " + weight.value.shape().to_string() +
                       ", but the file's has shape " + found->second->shape().to_string());
  }
  if (by_name.size() != weights.size()) {
    std::set<std::string> known;
    for (const Weight& weight : weights) known.insert(weight.path);
    for (const NamedArray& array : arrays)
      if (!known.count(array.name))
        throw ValueError("the file has a weight '" + array.name + "' that " + owner + " does not have");
  }
  for (const Weight& weight : weights) {
    Array source = by_name.at(weight.path)->astype(weight.value.dtype());
    Array target = weight.value;
    std::memcpy(target.raw(), source.raw(), target.nbytes());
  }
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
  detail::compile_model(model, std::move(optimizer), std::move(losses), std::move(metrics), std::move(weighted_metrics));
}

Config compile_config(const ModelBase& model) {
  auto* trainer = static_cast<Trainer*>(model.compiled_state().get());
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
