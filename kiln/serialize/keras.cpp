#include <kiln/serialize/keras.hpp>

#include <algorithm>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/layers/operation.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/byte_source.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/hdf5_writer.hpp>
#include <kiln/serialize/detail/sharded_weights.hpp>
#include <kiln/serialize/detail/keras_assets.hpp>
#include <kiln/serialize/detail/keras_config.hpp>
#include <kiln/serialize/detail/keras_export.hpp>
#include <kiln/serialize/detail/keras_file.hpp>
#include <kiln/serialize/detail/keras_hub_files.hpp>
#include <kiln/serialize/detail/model_io.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/train/trainer.hpp>

namespace kiln {

namespace {

using detail::NamedArray;
namespace hdf5 = detail::hdf5;

// A `.keras` archive's JSON entries are kilobytes; its weights may be gigabytes, but no more than 16 GiB
// is read from one entry whatever it declares.
constexpr std::uint64_t kMaxWeightsBytes = std::uint64_t{16} << 30;

// The Keras version whose format kiln writes (metadata.json's keras_version): the files kiln's tests compare
// with were written by it.
constexpr const char* kKerasFormatVersion = "3.16.0";

bool is_zip(std::string_view bytes) { return bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4); }

Config parse_json_object(const std::string& text, const std::string& where) {
  Config config = parse_json(text, where);
  if (!config.is_map()) throw SerializationError(where + ": not a JSON object");
  return config;
}

// ---- Keras 3: config.json and model.weights.h5 ---------------------------------------------------------------

// Keras's saving_lib names each layer of a model's `layers` by its class in snake_case, with _1, _2, ...
// for repeats, never by its name (names need not be stable between two builds of a model).
class KerasNames {
 public:
  std::string next(const std::string& class_name) {
    const std::string name = to_snake_case(class_name);
    auto [entry, inserted] = used_.emplace(name, 0);
    if (inserted) return name;
    return name + "_" + std::to_string(++entry->second);
  }

 private:
  std::map<std::string, int> used_;
};

// Reads the weights of a model from the groups Keras's saving_lib writes: for a model, layers/<name>/ for
// each of its layers in order; for a layer, its own variables as vars/<i> and its sublayers' under their
// attribute names (Layer::keras_weight_paths). The arrays come out named by kiln's weight paths, in
// Keras's order (which is the order of the optimizer's slots).
class Keras3WeightReader {
 public:
  // `shard`: the file is one shard of weights split over several (Keras's ShardedH5IOStore): what it lacks is
  // in another, and whether everything was found is checked over all of them.
  explicit Keras3WeightReader(std::string where, std::set<const Layer*> skip = {}, bool shard = false)
      : where_(std::move(where)), skip_(std::move(skip)), shard_(shard) {}

  // `config` is the model's imported config ({"class_name", "config"}); `prefix` the kiln path of its weights.
  void read_model(const ModelBase& model, const Config& config, const hdf5::Object& group, const std::string& prefix) {
    const bool sequential = config.get_string("class_name") == "Sequential";
    const std::optional<hdf5::Object> layers = group.find("layers");
    // A functional or sequential config lists the layers; a keras-hub model's holds its arguments, and its
    // layers are the ones its constructor made, in the order Keras's Functional keeps them.
    std::vector<std::pair<LayerPtr, Config>> members;
    if (!model.keras_module().empty()) {
      for (const LayerPtr& layer : detail::keras_layer_order(model)) members.emplace_back(layer, Config());
    } else {
      for (const Config& entry : config.at("config").get_list("layers")) {
        if (sequential && entry.get_string("class_name") == "InputLayer") continue;  // not in Sequential.layers
        members.emplace_back(model.get_layer(entry.at("config").get_string("name")), entry);
      }
    }
    KerasNames names;
    for (const auto& [layer, entry] : members) {
      const std::string class_name = entry.is_null() ? layer->class_name() : entry.get_string("class_name");
      if (is_operation(*layer)) continue;  // keras.ops calls are not among Keras's model.layers
      const std::string keras_name = names.next(class_name);
      if (skip_.count(layer.get())) continue;
      if (!visited_.insert(layer.get()).second) continue;  // a shared layer is saved where it is met first
      const std::string kiln_prefix = prefix + layer->name() + "/";
      if (layer->weights().empty()) continue;
      const std::string path = group.path() + (group.path() == "/" ? "" : "/") + "layers/" + keras_name;
      const std::optional<hdf5::Object> layer_group = layers ? layers->find(keras_name) : std::nullopt;
      if (!layer_group && shard_) continue;
      if (!layer_group)
        throw SerializationError(where_ + ": no weights for " + layer->describe() + " (the file has no " + path + ")");
      if (const auto* nested = dynamic_cast<const ModelBase*>(layer.get())) {
        read_model(*nested, entry.is_null() ? serialize_layer(*nested) : entry, *layer_group, kiln_prefix);
      } else {
        read_layer(*layer, *layer_group, kiln_prefix);
      }
    }
  }

  const std::vector<detail::StoredArray>& arrays() const { return arrays_; }

 private:
  void read_layer(const Layer& layer, const hdf5::Object& group, const std::string& prefix) {
    const std::vector<Weight> weights = layer.weights();
    const std::vector<std::string> paths = layer.keras_weight_paths();
    std::map<std::string, std::size_t> expected;  // datasets each "vars" group must hold
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const std::string& path = paths.at(i);
      ++expected[path.substr(0, path.rfind('/'))];
      const std::optional<hdf5::Object> dataset = group.find_path(path);
      if (shard_ && !dataset) continue;
      if (!dataset || !dataset->is_dataset())
        throw SerializationError(where_ + ": no " + group.path() + "/" + path + " for weight '" + weights[i].path +
                                 "' of " + layer.describe());
      const Shape shape = dataset->dataset_shape();
      if (shape != weights[i].value.shape())
        throw SerializationError(where_ + ": weight '" + weights[i].path + "' of " + layer.describe() + " has shape " +
                                 weights[i].value.shape().to_string() + ", but " + dataset->path() + " has shape " +
                                 shape.to_string());
      arrays_.push_back({prefix + weights[i].path, shape, [dataset = *dataset](Array& into) { dataset.read_into(into); }});
    }
    for (const auto& [vars, count] : expected) {
      if (shard_) break;
      const std::size_t held = group.at(vars).member_names().size();
      if (held != count)
        throw SerializationError(where_ + ": " + layer.describe() + " has " + std::to_string(count) + " variables in " +
                                 group.path() + "/" + vars + ", but the file holds " + std::to_string(held) +
                                 " (a different architecture?)");
    }
  }

  std::string where_;
  std::set<const Layer*> skip_;
  bool shard_ = false;
  std::set<const Layer*> visited_;
  std::vector<detail::StoredArray> arrays_;
};

// Keras 3's optimizer/vars/<i>: iterations, the learning rate (unless a schedule drives it), then each
// trainable weight's slots, interleaved, in the order of the model's trainable weights as Keras walks them.
// kiln's optimizer holds the same variables by path; this lists them in Keras's order, building the slots
// of `trainable` (kiln's weights, in Keras's order) first.
std::vector<Weight> keras_optimizer_variables(Optimizer& optimizer, const std::vector<Weight>& trainable) {
  optimizer.build(trainable);
  const std::vector<Weight> own = optimizer.variables();
  std::vector<Weight> ordered;
  for (const Weight& variable : own)
    if (variable.path.find('/') == std::string::npos) ordered.push_back(variable);  // iterations, learning_rate
  for (const Weight& weight : trainable)
    for (const Weight& variable : own) {
      const std::size_t slash = variable.path.find('/');
      if (slash != std::string::npos && variable.path.compare(slash + 1, std::string::npos, weight.path) == 0)
        ordered.push_back(variable);
    }
  return ordered;
}

// kiln's trainable weights whose paths `paths` lists, in that order.
std::vector<Weight> trainable_in_order(const ModelBase& model, const std::vector<std::string>& paths) {
  std::map<std::string, Weight> weights;
  for (const Weight& weight : model.weights()) weights.emplace(weight.path, weight);
  std::vector<Weight> trainable;
  for (const std::string& path : paths)
    if (weights.at(path).trainable) trainable.push_back(weights.at(path));
  return trainable;
}

// Keras reads an optimizer state that does not fit the model (an optimizer that never stepped saved 2
// variables; another optimizer's) with a warning, and the optimizer starts from fresh slots: kiln does the same.
void skip_optimizer_state(const Optimizer& optimizer, const std::string& where, const std::string& why) {
  warn(where + ": the optimizer's state is skipped (" + why + "); " + optimizer.describe() +
       " starts with fresh slots, as Keras does");
}

// The optimizer's variables (kiln's, in Keras's order) from the file's `datasets`, one each, read straight into
// the optimizer's storage; skipped with a warning, as Keras skips them, when they do not fit.
void read_optimizer_state(Optimizer& optimizer, const std::vector<Weight>& ordered,
                          const std::vector<hdf5::Object>& datasets, const std::string& where) {
  if (datasets.size() != ordered.size())
    return skip_optimizer_state(optimizer, where, "the file holds " + std::to_string(datasets.size()) +
                                                       " variables, " + optimizer.describe() + " on this model has " +
                                                       std::to_string(ordered.size()));
  for (std::size_t i = 0; i < ordered.size(); ++i)
    if (datasets[i].dataset_shape().num_elements() != ordered[i].value.shape().num_elements())
      return skip_optimizer_state(optimizer, where, datasets[i].path().substr(1) + " has shape " +
                                                         datasets[i].dataset_shape().to_string() + ", but " +
                                                         ordered[i].path + " has shape " +
                                                         ordered[i].value.shape().to_string());
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    Array into = ordered[i].value.reshape(datasets[i].dataset_shape());
    datasets[i].read_into(into);
  }
  optimizer.set_iterations(static_cast<std::int64_t>(optimizer.variables().front().value.flat(0)));
}

void read_keras3_optimizer(ModelBase& model, const std::vector<detail::StoredArray>& model_arrays,
                           const hdf5::Object& root, const std::string& where) {
  const std::optional<hdf5::Object> vars = root.find_path("optimizer/vars");
  if (!vars) return;
  Optimizer& optimizer = compiled_trainer(model).optimizer();
  std::vector<std::string> paths;
  for (const detail::StoredArray& array : model_arrays) paths.push_back(array.name);
  const std::vector<Weight> ordered = keras_optimizer_variables(optimizer, trainable_in_order(model, paths));
  std::vector<hdf5::Object> datasets;
  for (std::size_t i = 0; i < vars->member_names().size(); ++i) datasets.push_back(vars->at(std::to_string(i)));
  read_optimizer_state(optimizer, ordered, datasets, where);
}

// Keras's saving_lib walk over a model, for writing: for each model (the top one first) and each of its
// layers in Keras's order, `visit(layer, group, prefix)` with the layer's group ("layers/dense_1/", or ""
// for the top model) and the kiln path of its weights ("dense_1/"); a layer met twice is visited once.
class KerasWalk {
 public:
  using Visit = std::function<void(const Layer& layer, const std::string& group, const std::string& prefix)>;
  explicit KerasWalk(Visit visit, std::set<const Layer*> skip = {}) : visit_(std::move(visit)), skip_(std::move(skip)) {}

  void model(const ModelBase& model, const std::string& group = "", const std::string& prefix = "") {
    visit_(model, group, prefix);
    KerasNames names;
    for (const LayerPtr& layer : detail::keras_layer_order(model)) {
      if (is_operation(*layer)) continue;  // keras.ops calls are not among Keras's model.layers
      const std::string path = group + "layers/" + names.next(layer->class_name()) + "/";
      if (skip_.count(layer.get())) continue;
      if (!visited_.insert(layer.get()).second) continue;
      if (const auto* nested = dynamic_cast<const ModelBase*>(layer.get())) {
        this->model(*nested, path, prefix + layer->name() + "/");
        continue;
      }
      visit_(*layer, path, prefix + layer->name() + "/");
    }
  }

 private:
  Visit visit_;
  std::set<const Layer*> visited_;
  std::set<const Layer*> skip_;
};

// kiln's paths of a model's weights in Keras's order: what orders the optimizer's slots.
std::vector<std::string> keras_weight_order(const ModelBase& model) {
  std::vector<std::string> order;
  KerasWalk([&](const Layer& layer, const std::string&, const std::string& prefix) {
    if (dynamic_cast<const ModelBase*>(&layer) != nullptr) return;
    for (const Weight& weight : layer.weights()) order.push_back(prefix + weight.path);
  }).model(model);
  return order;
}

// The compiled model's optimizer, or nullptr.
Optimizer* compiled_optimizer(const ModelBase& model) {
  Trainer* trainer = trainer_of(model);
  return trainer != nullptr ? &trainer->optimizer() : nullptr;
}

// The order Keras's _save_state writes a layer's variables in, given their paths within it
// ("_self_attention_layer/_query_dense/vars/0"): the layer's own first, then each child attribute's, recursively,
// the attributes sorted as _walk_saveable sorts them (public names, then private ones, each by name); a group's
// variables in their own order. Only which shard a variable lands in depends on it.
std::vector<std::size_t> keras_save_order(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> keys;
  for (const std::string& path : paths) {
    std::vector<std::string> key;
    const std::size_t vars = path.rfind("vars/");
    const std::string attributes = vars == std::string::npos ? std::string() : path.substr(0, vars);
    for (std::size_t at = 0, slash; (slash = attributes.find('/', at)) != std::string::npos; at = slash + 1) {
      const std::string name = attributes.substr(at, slash - at);
      key.push_back(!name.empty() && name[0] == '_' ? "~" + name : name);  // Keras's _name_key
    }
    keys.push_back(std::move(key));
  }
  std::vector<std::size_t> order(paths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  return order;
}

// Keras 3's model.weights.h5 of `model`, into `file`.
// `File` is a detail::Hdf5Builder, or a detail::ShardedHdf5Builder for Keras's sharded weights.
template <class File>
void write_keras3_weights(const ModelBase& model, File& file, bool with_optimizer = true,
                          const std::set<const Layer*>& skip = {}) {
  auto named_group = [&](const std::string& path, const std::string& name) {
    file.group(path);
    file.string_attribute(path, "name", name);
  };
  KerasWalk([&](const Layer& layer, const std::string& group, const std::string&) {
    named_group(group + "vars", layer.name());
    if (dynamic_cast<const ModelBase*>(&layer) != nullptr) return;
    for (const auto& [attribute, name] : layer.keras_sublayers()) named_group(group + attribute + "/vars", name);
    const std::vector<Weight> weights = layer.weights();
    const std::vector<std::string> paths = layer.keras_weight_paths();
    for (const std::size_t i : keras_save_order(paths)) {
      if (weights[i].bfloat16)  // a "bfloat16" layer's variables, as Keras stores them
        file.bfloat16_dataset(group + paths.at(i), weights[i].value);
      else
        file.dataset(group + paths.at(i), weights[i].value);
    }
  }, skip).model(model);
  if (Optimizer* compiled = with_optimizer ? compiled_optimizer(model) : nullptr) {
    Optimizer& optimizer = *compiled;
    const std::vector<Weight> variables =
        keras_optimizer_variables(optimizer, trainable_in_order(model, keras_weight_order(model)));
    file.group("optimizer/vars");
    file.string_attribute("optimizer/vars", "name", optimizer.name());
    for (std::size_t i = 0; i < variables.size(); ++i) {
      const std::string path = "optimizer/vars/" + std::to_string(i);
      if (variables[i].path == "iterations")
        file.int64_dataset(path, static_cast<std::int64_t>(variables[i].value.flat(0)));
      else if (variables[i].path == "learning_rate")  // Keras's is float32; kiln's rate, kept whole, reads into it
        file.dataset(path, variables[i].value.reshape(Shape{}));
      else
        file.dataset(path, variables[i].value);
    }
  }

}

std::shared_ptr<ModelBase> load_keras3(const detail::ZipReader& archive, const std::string& path, const LoadOptions& options) {
  const std::string config_text = archive.read("config.json", max_json_bytes);
  Config metadata;
  if (archive.contains("metadata.json"))
    metadata = parse_json_object(archive.read("metadata.json", max_json_bytes), path + ": metadata.json");
  const std::string keras_version = metadata.is_map() ? metadata.get_string("keras_version", "") : "";
  if (!archive.contains("model.weights.h5")) {
    // Keras's npz store saves each layer's variables as a Python dict, which np.savez pickles: reading it
    // means unpickling, which runs code from the file.
    if (archive.contains("model.weights.npz"))
      throw SerializationError(path +
                               ": its weights are in model.weights.npz, where Keras's npz store keeps each "
                               "layer's variables as a pickled Python dict; kiln does not unpickle (it would "
                               "run code from the file). Save it again with Keras's default weights format (h5)");
    throw SerializationError(path + ": the archive has no model.weights.h5");
  }
  // The weights file is read where it is (a stored entry), a structure or a dataset at a time.
  const std::shared_ptr<const detail::ByteSource> weights_source = archive.source("model.weights.h5", kMaxWeightsBytes);
  Config keras = parse_json_object(config_text, path + ": config.json");
  if (detail::written_by_keras2(keras_version)) keras = detail::with_keras2_activations(keras);
  const hdf5::File weights(weights_source, path + ": model.weights.h5");
  keras = detail::guarded(path + ": model.weights.h5", [&] { return detail::with_llama_tying(keras, weights.root()); });
  const Config config = detail::guarded(
      path, [&] { return detail::import_keras_model_config(keras, "config.json"); });
  std::shared_ptr<ModelBase> model = detail::guarded(
      path + ": config.json",
      [&] {
        detail::BuildFromFile scope(weights_source->size());
        return detail::model_from(config);
      });
  Keras3WeightReader reader(path + ": model.weights.h5");
  detail::guarded(path + ": model.weights.h5", [&] {
    reader.read_model(*model, config, weights.root(), "");
    detail::assign_weights(model->weights(), reader.arrays(), model->describe());
  });
  detail::import_keras_assets(*model, metadata, archive, path + ": metadata.json");
  const Config* compiled = config.find("compile_config");
  if (!options.compile || compiled == nullptr) return model;
  if (!detail::compile_from_keras(*model, *compiled, path + ": compile_config")) return model;
  detail::guarded(path + ": model.weights.h5: optimizer",
                  [&] { read_keras3_optimizer(*model, reader.arrays(), weights.root(), path); });
  return model;
}

// ---- legacy HDF5: Keras 2, tf.keras and Keras 3's legacy format --------------------------------------------

// An attribute Keras may have split into name0, name1, ... because HDF5 object headers hold 64 KiB.
std::vector<std::string> chunked_strings(const hdf5::Object& object, const std::string& name) {
  if (object.has_attribute(name)) return object.attribute_strings(name);
  std::vector<std::string> strings;
  for (int chunk = 0; object.has_attribute(name + std::to_string(chunk)); ++chunk)
    for (std::string& text : object.attribute_strings(name + std::to_string(chunk))) strings.push_back(std::move(text));
  return strings;
}

// A layer's weights in the order legacy files list them: Keras 2's layer.weights, its trainable weights
// and then the others, each part in Keras's order.
std::vector<Weight> legacy_order(const Layer& layer) {
  std::vector<Weight> weights = layer.weights(), ordered;
  for (const bool trainable : {true, false})
    for (const Weight& weight : weights)
      if (weight.trainable == trainable) ordered.push_back(weight);
  return ordered;
}

// model_weights/ (or the root of a weights-only file): the attribute layer_names lists the layers; each
// layer's group lists its datasets in weight_names, in the layer's weight order.
std::vector<detail::StoredArray> read_legacy_weights(const ModelBase& model, const hdf5::Object& group) {
  std::vector<detail::StoredArray> arrays;
  for (const std::string& layer_name : chunked_strings(group, "layer_names")) {
    const hdf5::Object layer_group = group.at(layer_name);
    const std::vector<std::string> weight_names = chunked_strings(layer_group, "weight_names");
    if (weight_names.empty()) continue;
    const LayerPtr layer = model.get_layer(layer_name);
    const std::vector<Weight> weights = legacy_order(*layer);
    if (weights.size() != weight_names.size())
      throw ValueError(layer->describe() + " has " + std::to_string(weights.size()) + " weights, but the file holds " +
                       std::to_string(weight_names.size()) + " for it");
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const hdf5::Object dataset = layer_group.at(weight_names[i]);
      if (dataset.dataset_shape() != weights[i].value.shape())
        throw ShapeError("weight '" + weights[i].path + "' of " + layer->describe() + " has shape " +
                         weights[i].value.shape().to_string() + ", but " + dataset.path() + " has shape " +
                         dataset.dataset_shape().to_string());
      arrays.push_back({layer->name() + "/" + weights[i].path, dataset.dataset_shape(),
                        [dataset](Array& into) { dataset.read_into(into); }});
    }
  }
  return arrays;
}

// Keras 3's legacy files hold the optimizer's variables in Keras 3's order, which kiln shares; Keras 2's
// and tf.keras's are in their optimizers' own orders, and are not read (the model trains on from fresh slots).
void read_legacy_optimizer(ModelBase& model, const hdf5::Object& root, const std::string& version,
                           const std::string& where) {
  const std::optional<hdf5::Object> group = root.find("optimizer_weights");
  if (!group || version.rfind("3.", 0) != 0) return;
  Optimizer& optimizer = compiled_trainer(model).optimizer();
  const std::vector<Weight> ordered =
      keras_optimizer_variables(optimizer, trainable_in_order(model, keras_weight_order(model)));
  std::vector<hdf5::Object> datasets;
  for (const std::string& name : chunked_strings(*group, "weight_names")) datasets.push_back(group->at(name));
  read_optimizer_state(optimizer, ordered, datasets, where);
}

std::shared_ptr<ModelBase> load_legacy_h5(const std::shared_ptr<const detail::ByteSource>& bytes, const std::string& path,
                     const LoadOptions& options) {
  const hdf5::File file(bytes, path);
  const hdf5::Object root = file.root();
  if (!root.has_attribute("model_config"))
    throw SerializationError(path +
                             ": an HDF5 file without a model_config: a weights-only file? Build the model and "
                             "use load_keras_weights");
  const std::vector<std::string> texts = root.attribute_strings("model_config");
  if (texts.size() != 1) throw SerializationError(path + ": model_config is not one string");
  Config keras = parse_json_object(texts[0], path + ": model_config");
  const std::string version = root.has_attribute("keras_version") ? root.attribute_strings("keras_version").at(0) : "";
  if (detail::written_by_keras2(version)) keras = detail::with_keras2_activations(keras);
  const Config config = detail::guarded(
      path, [&] { return detail::import_keras_model_config(keras, "model_config"); });
  std::shared_ptr<ModelBase> model = detail::guarded(
      path + ": model_config",
      [&] {
        detail::BuildFromFile scope(bytes->size());
        return detail::model_from(config);
      });
  detail::guarded(path + ": model_weights", [&] {
    const std::optional<hdf5::Object> weights = root.find("model_weights");
    const std::vector<detail::StoredArray> arrays = read_legacy_weights(*model, weights ? *weights : root);
    detail::assign_weights(model->weights(), arrays, model->describe());
  });
  if (!options.compile || !root.has_attribute("training_config")) return model;
  const std::vector<std::string> training = root.attribute_strings("training_config");
  if (training.size() != 1) throw SerializationError(path + ": training_config is not one string");
  const Config keras_compiled = parse_json_object(training[0], path + ": training_config");
  if (!detail::compile_from_keras(*model, keras_compiled, path + ": training_config")) return model;
  detail::guarded(path + ": optimizer_weights", [&] { read_legacy_optimizer(*model, root, version, path); });
  return model;
}

// ---- writing legacy HDF5, as Keras 3's legacy format does ----------------------------------------------------

// A model config Keras 3 reads as kiln means it. Keras 2's hard_sigmoid (read from a Keras 2 file) has no
// Keras 3 name: written as "hard_sigmoid", Keras 3 would compute another function. ConfigError naming the layer.
void check_keras3_meaning(const Config& config, const std::string& layer = "the model") {
  if (config.is_list())
    for (const Config& item : config.as_list()) check_keras3_meaning(item, layer);
  if (!config.is_map()) return;
  std::string name = layer;
  if (const Config* given = config.find("name"); given != nullptr && given->type() == Config::Type::string)
    name = given->as_string();
  for (const auto& [key, value] : config.items()) {
    if ((key == "activation" || key == "recurrent_activation") && value.type() == Config::Type::string &&
        value.as_string() == "hard_sigmoid_keras2")
      throw ConfigError(name + ": its " + key +
                        " is Keras 2's hard_sigmoid (clip(0.2 x + 0.5, 0, 1), read from a Keras 2 file), which "
                        "Keras 3 does not have (its hard_sigmoid is relu6(x + 3) / 6); save the model as .kiln");
    check_keras3_meaning(value, name);
  }
}

// Keras 3's legacy training_config: the compile config with the optimizer as {"class_name", "config"}.
Config legacy_training_config(const Config& compiled) {
  const Config keras = detail::export_keras_compile_config(compiled);
  Config training = Config::map();
  for (const auto& [key, value] : keras.items())
    if (key != "optimizer") training.set(key, value);
  const Config& optimizer = keras.at("optimizer");
  training.set("optimizer_config", {{"class_name", optimizer.at("class_name")}, {"config", optimizer.at("config")}});
  return training;
}

// Keras's legacy HDF5 file of `model`, into `file`.
void write_legacy_h5(const ModelBase& model, detail::Hdf5Builder& file) {
  file.string_attribute("", "keras_version", kKerasFormatVersion);
  file.string_attribute("", "backend", "kiln");
  const Config config = detail::export_keras_legacy_model_config(model);
  check_keras3_meaning(config);
  file.string_attribute("", "model_config", to_json(config, 0));
  const Config compiled = detail::compile_config(model);
  if (!compiled.is_null()) file.string_attribute("", "training_config", to_json(legacy_training_config(compiled), 0));

  // model_weights: layer_names in Keras's order of model.layers (Keras matches the layers that have weights
  // by that order), then a group a layer, holding its weights in Keras 2's order under their names.
  file.group("model_weights");
  std::vector<LayerPtr> layers;
  for (const LayerPtr& layer : detail::keras_layer_order(model))
    if (!is_operation(*layer)) layers.push_back(layer);  // Keras's model.layers leaves keras.ops calls out
  std::vector<std::string> layer_names;
  for (const LayerPtr& layer : layers) layer_names.push_back(layer->name());
  file.strings_attribute("model_weights", "layer_names", layer_names);
  file.string_attribute("model_weights", "backend", "kiln");
  file.string_attribute("model_weights", "keras_version", kKerasFormatVersion);
  for (const LayerPtr& layer : layers) {
    const std::string group = "model_weights/" + layer->name();
    file.group(group);
    std::vector<std::string> names;
    for (const Weight& weight : legacy_order(*layer)) {
      names.push_back(model.name() + "/" + layer->name() + "/" + weight.path);
      file.dataset(group + "/" + names.back(), weight.value);
    }
    file.strings_attribute(group, "weight_names", names);
  }
  file.group("model_weights/top_level_model_weights");
  file.strings_attribute("model_weights/top_level_model_weights", "weight_names", {});

  // optimizer_weights: Keras 3's optimizer.variables in order, by name.
  if (Optimizer* optimizer = compiled_optimizer(model)) {
    const std::vector<Weight> variables =
        keras_optimizer_variables(*optimizer, trainable_in_order(model, keras_weight_order(model)));
    file.group("optimizer_weights");
    std::vector<std::string> names;
    for (const Weight& variable : variables) {
      names.push_back(optimizer->name() + "/" + variable.path);
      if (variable.path == "iterations")
        file.int64_dataset("optimizer_weights/" + names.back(), static_cast<std::int64_t>(variable.value.flat(0)));
      else
        file.dataset("optimizer_weights/" + names.back(), variable.value.reshape(variable.value.shape()));
    }
    file.strings_attribute("optimizer_weights", "weight_names", names);
  }

}

}  // namespace

namespace detail {

bool is_keras_bytes(std::string_view bytes) { return is_zip(bytes) || hdf5::looks_like_hdf5(bytes); }

namespace {
// The config of a legacy file: its model_config, with its training_config under "training_config".
Config legacy_config(const hdf5::File& file, const std::string& path) {
  const hdf5::Object root = file.root();
  if (!root.has_attribute("model_config")) throw SerializationError(path + ": an HDF5 file without a model_config");
  Config config = parse_json_object(root.attribute_strings("model_config").at(0), path + ": model_config");
  if (root.has_attribute("training_config"))
    config.set("training_config",
               parse_json_object(root.attribute_strings("training_config").at(0), path + ": training_config"));
  return config;
}

[[noreturn]] void not_keras(const std::string& path) {
  throw SerializationError(path + ": neither a Keras 3 .keras archive (a zip) nor a legacy Keras .h5 file (HDF5)");
}
}  // namespace

Config read_keras_config(const std::string& bytes, const std::string& path) {
  if (is_zip(bytes)) {
    const detail::ZipReader archive(bytes, path);
    return parse_json_object(archive.read("config.json", max_json_bytes), path + ": config.json");
  }
  return legacy_config(hdf5::File(bytes, path), path);
}

std::shared_ptr<ModelBase> load_keras_bytes(const std::string& bytes, const std::string& path, const LoadOptions& options) {
  if (is_zip(bytes)) return load_keras3(detail::ZipReader(bytes, path), path, options);
  if (hdf5::looks_like_hdf5(bytes)) return load_legacy_h5(memory_source(bytes), path, options);
  not_keras(path);
}

namespace {
std::string first_bytes(const ReadOnlyFile& file) {
  std::string start(static_cast<std::size_t>(std::min<std::uint64_t>(file.size(), 8)), '\0');
  file.read(0, start.data(), start.size(), "the first bytes");
  return start;
}
}  // namespace

bool is_keras_source(const ReadOnlyFile& file) { return is_keras_bytes(first_bytes(file)); }

std::shared_ptr<ModelBase> load_keras_file(const ReadOnlyFile& file, const LoadOptions& options) {
  const std::string start = first_bytes(file);
  if (is_zip(start)) return load_keras3(detail::ZipReader(file), file.path(), options);
  if (hdf5::looks_like_hdf5(start)) return load_legacy_h5(file_source(file, 0, file.size()), file.path(), options);
  not_keras(file.path());
}

Config read_keras_config(const ReadOnlyFile& file) {
  const std::string start = first_bytes(file);
  if (is_zip(start)) {
    const detail::ZipReader archive(file);
    return parse_json_object(archive.read("config.json", max_json_bytes), file.path() + ": config.json");
  }
  return legacy_config(hdf5::File(file_source(file, 0, file.size()), file.path()), file.path());
}

}  // namespace detail

// The date as Keras's metadata.json writes it: "2026-12-01@14:57:29", local time.
std::string keras_date() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d@%H:%M:%S", &local);
  return text;
}

namespace {
// About the size of a model's files: its weights and optimizer state, and a megabyte for the rest. Checked
// against the process's file-size limit before anything is written.
std::uint64_t expected_size(const ModelBase& model) {
  std::uint64_t bytes = std::uint64_t{1} << 20;
  for (const Weight& weight : model.weights()) bytes += weight.value.nbytes();
  if (const Optimizer* optimizer = compiled_optimizer(model))
    for (const Weight& variable : optimizer->variables()) bytes += variable.value.nbytes();
  return bytes;
}
}  // namespace

namespace {

// The layers to leave out for `objects_to_skip`: those, and the model's input layers that belong to them (Keras
// skips what the skipped objects' _flatten_layers() hold, their input layers among them).
std::set<const Layer*> skipped_layers(const ModelBase& model, const std::vector<const Layer*>& objects_to_skip) {
  std::set<const Layer*> skip(objects_to_skip.begin(), objects_to_skip.end());
  if (skip.empty()) return skip;
  for (const LayerPtr& layer : detail::keras_layer_order(model)) {
    bool owned = false;
    for (const Layer* skipped : objects_to_skip) {
      const auto* nested = dynamic_cast<const ModelBase*>(skipped);
      owned = owned || (nested != nullptr && layer->class_name() == "InputLayer");
    }
    if (owned) skip.insert(layer.get());
  }
  return skip;
}

}  // namespace

void save_keras_weights(const ModelBase& model, const std::string& path) { save_keras_weights(model, path, {}); }

void save_keras_weights(const ModelBase& model, const std::string& path, const std::vector<const Layer*>& objects_to_skip) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  const std::set<const Layer*> skip = skipped_layers(model, objects_to_skip);
  detail::write_file_atomically_at(path, expected_size(model), [&](const std::string& temporary) {
    detail::Hdf5Builder file(temporary);
    write_keras3_weights(model, file, /*with_optimizer=*/false, skip);
    file.close();
  });
}

void save_keras_weights_sharded(const ModelBase& model, const std::string& path, double max_shard_size,
                                const std::vector<const Layer*>& objects_to_skip) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  std::string index = path;
  if (index.size() < 5 || index.compare(index.size() - 5, 5, ".json") != 0) {
    // Keras renames the path so, with a warning.
    const std::size_t dot = index.rfind('.'), slash = index.rfind('/');
    index = (dot != std::string::npos && (slash == std::string::npos || dot > slash) ? index.substr(0, dot) : index) +
            ".json";
    warn("Saving sharded weights requires `*.json` as the extension. The original path: " + path +
         " will be renamed to " + index + ".");
  }
  if (!(max_shard_size > 0))
    throw ValueError(path + ": max_shard_size is in GB and more than 0, not " + std::to_string(max_shard_size));
  const std::set<const Layer*> skip = skipped_layers(model, objects_to_skip);
  detail::ShardedHdf5Builder file(index, max_shard_size * 1024.0 * 1024.0 * 1024.0, expected_size(model));
  write_keras3_weights(model, file, /*with_optimizer=*/false, skip);
  file.close();
}

void save_keras_model(const ModelBase& model, const std::string& path) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  const Config config = detail::export_keras_model_config(model, detail::compile_config(model));
  check_keras3_meaning(config);
  const std::string config_text = to_json(config, 0);
  const detail::KerasAssets assets = detail::export_keras_assets(model);
  Config metadata_config = {
      {"keras_version", kKerasFormatVersion}, {"date_saved", keras_date()}, {"kiln_version", KILN_VERSION_STRING}};
  if (!assets.metadata.is_null()) metadata_config.set("kiln_assets", assets.metadata);
  const std::string metadata = to_json(metadata_config, 0);
  // The weights go to a scratch file beside the target as libhdf5 writes them, then libzip streams it into the
  // archive: no copy of the weights is held in memory. A failure leaves the old file as it was.
  const detail::ScratchFile weights(path);
  {
    detail::Hdf5Builder file(weights.path());
    write_keras3_weights(model, file);
    file.close();
  }
  detail::write_file_atomically_at(path, expected_size(model), [&](const std::string& temporary) {
    std::vector<detail::ZipEntry> entries{{"metadata.json", metadata, ""},
                                          {"config.json", config_text, ""},
                                          {"model.weights.h5", {}, weights.path()}};
    for (const auto& [name, text] : assets.files) entries.push_back({name, text, ""});
    detail::write_zip_file(temporary, entries);
  });
}

void save_keras_h5(const ModelBase& model, const std::string& path) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  if (!model.assets().empty()) {
    std::string names;
    for (const auto& [name, asset] : model.assets()) names += (names.empty() ? "'" : ", '") + name + "'";
    warn(path + ": Keras's legacy .h5 format has no place for " + model.describe() + "'s attached assets (" + names +
         "); they are not written. Save as .keras or .kiln to keep them");
  }
  detail::write_file_atomically_at(path, expected_size(model), [&](const std::string& temporary) {
    detail::Hdf5Builder file(temporary);
    write_legacy_h5(model, file);
    file.close();
  });
}

namespace {

// Every dataset under `object`, each object once: "layers/dense/vars/0 (8, 16)".
void list_datasets(const hdf5::Object& object, std::set<std::uint64_t>& seen, int depth,
                   std::vector<std::string>& out) {
  if (depth > 64 || !seen.insert(object.address()).second) return;
  if (object.is_dataset()) {
    object.check_data();  // every value read, so damage to the data shows
    out.push_back(object.path().substr(1) + " " + object.dataset_shape().to_string());
    return;
  }
  if (object.is_group())
    for (const std::string& name : object.member_names()) list_datasets(*object.find(name), seen, depth + 1, out);
}

}  // namespace

KerasFileInfo verify_keras_file(const std::string& path) {
  return detail::reading_file(path, [&] {
    const detail::ReadOnlyFile file(path);
    const std::string start = detail::first_bytes(file);
    KerasFileInfo info;
    info.size = file.size();
    std::set<std::uint64_t> seen;
    if (is_zip(start)) {
      info.format = "Keras 3 .keras archive";
      const detail::ZipReader archive(file);
      for (const std::string& name : archive.names())
        info.entries.push_back(name + " (" + std::to_string(archive.check(name, kMaxWeightsBytes)) + " bytes)");
      if (archive.contains("metadata.json")) {
        const Config metadata = parse_json_object(archive.read("metadata.json", 1 << 20), path + ": metadata.json");
        info.keras_version = metadata.get_string("keras_version", "");
      }
      const hdf5::File weights(archive.source("model.weights.h5", kMaxWeightsBytes), path + ": model.weights.h5");
      list_datasets(weights.root(), seen, 0, info.weights);
    } else if (hdf5::looks_like_hdf5(start)) {
      info.format = "legacy Keras HDF5";
      const hdf5::File h5(detail::file_source(file, 0, file.size()), path);
      if (h5.root().has_attribute("keras_version")) info.keras_version = h5.root().attribute_strings("keras_version").at(0);
      list_datasets(h5.root(), seen, 0, info.weights);
    } else {
      detail::not_keras(path);
    }
    LoadOptions options;
    options.compile = false;
    detail::load_keras_file(file, options);
    return info;
  });
}

bool is_keras_file(const std::string& path) { return detail::is_keras_source(detail::ReadOnlyFile(path)); }

std::shared_ptr<ModelBase> load_keras_model_base(const std::string& path, const LoadOptions& options) {
  return detail::reading_file(path, [&] {
    return detail::load_keras_file(detail::ReadOnlyFile(path), options);
  });
}

void load_keras_weights(ModelBase& model, const std::string& path) { load_keras_weights(model, path, {}); }

namespace {

// The weights of the model's layers not skipped (a skipped layer's keep their values).
std::vector<Weight> weights_to_assign(const ModelBase& model, const std::vector<const Layer*>& objects_to_skip) {
  std::vector<Weight> assigned;
  for (const Weight& weight : model.weights()) {
    bool skipped = false;
    for (const Layer* layer : objects_to_skip) skipped = skipped || weight.path.rfind(layer->name() + "/", 0) == 0;
    if (!skipped) assigned.push_back(weight);
  }
  return assigned;
}

// Keras's sharded weights (save_weights("x.weights.json", max_shard_size=...), keras-hub's presets of large
// models): the index's weight_map names the shards (files beside it), each a model.weights.h5 holding some of
// the groups; every shard is read, and every weight must be found in one of them.
void load_sharded_keras_weights(ModelBase& model, const std::string& path,
                                const std::vector<const Layer*>& objects_to_skip) {
  const std::string text = detail::read_whole_file(path);
  const Config index = parse_json(text, path);
  const Config* map = index.is_map() ? index.find("weight_map") : nullptr;
  if (map == nullptr || !map->is_map())
    throw SerializationError(path + ": not Keras's sharded weights index (no \"weight_map\" object)");
  std::set<std::string> shards;
  for (const auto& [group, files] : map->items()) {
    std::vector<Config> names = files.is_list() ? files.as_list() : std::vector<Config>{files};
    for (const Config& name : names) {
      if (name.type() != Config::Type::string)
        throw SerializationError(path + ": weight_map[\"" + group + "\"] is not a file name");
      const std::string& file = name.as_string();
      // A shard is a file beside the index: no folders, nothing above it.
      if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
          file == "." || file == ".." || file.size() < 11 || file.compare(file.size() - 11, 11, ".weights.h5") != 0)
        throw SerializationError(path + ": weight_map names '" + file +
                                 "', not a .weights.h5 file beside the index");
      shards.insert(file);
    }
  }
  if (shards.empty()) throw SerializationError(path + ": the sharded weights index names no shard");
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const Config config = detail::import_keras_model_config(detail::export_keras_model_config(model), path);
  std::vector<std::unique_ptr<detail::ReadOnlyFile>> files;
  std::vector<detail::StoredArray> arrays;
  for (const std::string& shard : shards) {
    const std::string where = folder + shard;
    files.push_back(std::make_unique<detail::ReadOnlyFile>(where));
    const hdf5::File weights(detail::file_source(*files.back(), 0, files.back()->size()), where);
    Keras3WeightReader reader(where, skipped_layers(model, objects_to_skip), /*shard=*/true);
    detail::guarded(where, [&] { reader.read_model(model, config, weights.root(), ""); });
    arrays.insert(arrays.end(), reader.arrays().begin(), reader.arrays().end());
  }
  detail::guarded(path, [&] { detail::assign_weights(weights_to_assign(model, objects_to_skip), arrays, model.describe()); });
}

}  // namespace

void load_keras_weights(ModelBase& model, const std::string& path, const std::vector<const Layer*>& objects_to_skip) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it before loading weights into it");
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    detail::reading_file(path, [&] { load_sharded_keras_weights(model, path, objects_to_skip); });
    return;
  }
  detail::reading_file(path, [&] {
    const detail::ReadOnlyFile file(path);
    std::shared_ptr<const detail::ByteSource> weights_source;
    std::string where = path;
    if (is_zip(detail::first_bytes(file))) {
      weights_source = detail::ZipReader(file).source("model.weights.h5", kMaxWeightsBytes);
      where = path + ": model.weights.h5";
    } else {
      weights_source = detail::file_source(file, 0, file.size());
    }
    const hdf5::File weights(weights_source, where);
    const hdf5::Object root = weights.root();
    if (root.find("layers")) {
      // The model's layers in Keras's order, as Keras's own config of it would list them.
      const Config config = detail::import_keras_model_config(detail::export_keras_model_config(model), where);
      Keras3WeightReader reader(where, skipped_layers(model, objects_to_skip));
      detail::guarded(where, [&] { reader.read_model(model, config, root, ""); });
      detail::assign_weights(weights_to_assign(model, objects_to_skip), reader.arrays(), model.describe());
      return;
    }
    const std::optional<hdf5::Object> group = root.find("model_weights");
    const std::vector<detail::StoredArray> arrays =
        detail::guarded(where, [&] { return read_legacy_weights(model, group ? *group : root); });
    detail::assign_weights(model.weights(), arrays, model.describe());
  });
}

}  // namespace kiln
