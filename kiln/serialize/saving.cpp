#include <kiln/serialize/saving.hpp>
#include <kiln/serialize/detail/training_backup.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <set>
#include <stdexcept>
#include <utility>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/detail/keras_config.hpp>
#include <kiln/serialize/detail/keras_export.hpp>
#include <kiln/serialize/detail/keras_file.hpp>
#include <kiln/serialize/detail/model_io.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/train/trainer.hpp>

namespace kiln {
namespace {

using detail::assign_weights;
using detail::compile_config;
using detail::compile_from;
using detail::guarded;
using detail::model_from;
using detail::NamedArray;

// The config section is small (kilobytes for real models). Parsed, a config takes up to ~60 times its
// text (104 bytes per value): the cap bounds that.
constexpr std::size_t kMaxConfigBytes = 4u << 20;

Trainer* trainer_of(const ModelBase& model) { return static_cast<Trainer*>(model.compiled_state().get()); }

std::vector<NamedArray> named_weights(const ModelBase& model) {
  std::vector<NamedArray> arrays;
  std::set<std::string> seen;
  for (const Weight& weight : model.weights()) {
    if (!seen.insert(weight.path).second)
      throw ValueError(model.describe() + " has two weights named '" + weight.path + "'; rename a layer to save it");
    arrays.push_back({weight.path, weight.value});
  }
  return arrays;
}

std::vector<NamedArray> named(const std::vector<Weight>& weights) {
  std::vector<NamedArray> arrays;
  for (const Weight& weight : weights) arrays.push_back({weight.path, weight.value});
  return arrays;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Config metadata_of(const ModelBase& model) {
  const Trainer* trainer = trainer_of(model);
  Config metadata{{"kiln_version", KILN_VERSION_STRING},
                  {"format_version", static_cast<std::int64_t>(detail::kFormatVersion)},
                  {"config_version", static_cast<std::int64_t>(detail::kConfigVersion)},
                  {"date_saved", utc_now()},
                  {"epochs_trained", trainer ? trainer->epochs_trained() : 0}};
  if (!model.assets().empty()) {
    Config assets = Config::map();
    for (const auto& [name, value] : model.assets()) assets.set(name, value);
    metadata.set("assets", assets);
  }
  return metadata;
}

std::vector<detail::Section> sections_of(const std::vector<std::pair<std::string, std::string>>& payloads) {
  std::vector<detail::Section> sections;
  for (const auto& [tag, payload] : payloads) sections.push_back({tag, payload});
  return sections;
}

Config parse_config_section(const detail::Container& container, const std::string& path) {
  const detail::Section* section = container.find("CONF");
  if (!section) throw SerializationError(path + ": has no config section (a weights-only file? use load_weights)");
  if (section->payload.size() > kMaxConfigBytes)
    throw SerializationError(path + ": the config section is " + std::to_string(section->payload.size()) +
                             " bytes, more than kiln's limit of " + std::to_string(kMaxConfigBytes));
  Config config = parse_json(std::string(section->payload), path + ": config section");
  if (!config.is_map()) throw SerializationError(path + ": config section: not a JSON object");
  return config;
}

}  // namespace

// ---- config -------------------------------------------------------------------------------------------------

Config model_config(const ModelBase& model) { return detail::export_keras_model_config(model); }

std::string model_to_json(const ModelBase& model, int indent) { return to_json(model_config(model), indent); }

Model model_from_config(const Config& config) {
  return Model(model_from(detail::import_keras_model_config(config, "model config")));
}

Model model_from_json(const std::string& json) { return model_from_config(parse_json(json, "model JSON")); }

// ---- whole models ------------------------------------------------------------------------------------------

namespace {
bool has_extension(const std::string& path, const std::string& extension) {
  return path.size() > extension.size() &&
         path.compare(path.size() - extension.size(), extension.size(), extension) == 0;
}
}  // namespace

namespace {

// save_model's kiln file, its metadata extended with `extra` entries (a backup's progress).
void save_kiln_file(const ModelBase& model, const std::string& path, const Config& extra) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  // Everything is serialized in memory first: a failure here never touches the file.
  // The config is Keras's config.json for the same model; older kiln files held kiln's own form of it,
  // which load_model reads too.
  const Config config = detail::export_keras_model_config(model, compile_config(model));
  const Trainer* trainer = trainer_of(model);
  std::vector<std::pair<std::string, std::string>> payloads = {
      {"CONF", to_json(config)},
      {"WGHT", detail::write_arrays(named_weights(model))},
  };
  if (trainer)
    payloads.emplace_back("OPTM", detail::write_arrays(named(const_cast<Trainer*>(trainer)->optimizer().variables())));
  Config metadata = metadata_of(model);
  if (extra.is_map())
    for (const auto& [key, value] : extra.items()) metadata.set(key, value);
  payloads.emplace_back("META", to_json(metadata));
  detail::write_file_atomically(path, detail::write_container(sections_of(payloads)));
}

// The optimizer's slots and iteration count from a file's optimizer state section into `trainer`.
void restore_optimizer(Trainer& trainer, const ModelBase& model, const detail::Section& state, const std::string& path) {
  const std::vector<NamedArray> slots = detail::read_arrays(state.payload, path + ": optimizer state section");
  guarded(path + ": optimizer state section", [&] {
    std::vector<Weight> variables;
    for (const NamedArray& slot : slots) variables.push_back({slot.name, slot.value, false});
    // An optimizer that never stepped saved no slots: it builds them at its first step, as it would have.
    const bool has_slots = std::any_of(variables.begin(), variables.end(),
                                       [](const Weight& v) { return v.path.find('/') != std::string::npos; });
    if (has_slots) trainer.optimizer().build(model.trainable_weights());
    trainer.optimizer().set_variables(variables);
  });
}

}  // namespace

void save_model(const ModelBase& model, const std::string& path) {
  if (has_extension(path, ".keras")) return save_keras_model(model, path);
  if (has_extension(path, ".h5")) return save_keras_h5(model, path);
  save_kiln_file(model, path, Config());
}

namespace detail {

void save_training_backup(const ModelBase& model, const std::string& path, const Config& progress) {
  if (kiln::trainer_of(model) == nullptr)
    throw LayerStateError(model.describe() + " is not compiled: nothing to back up");
  save_kiln_file(model, path, Config{{"backup", progress}});
}

Config restore_training_backup(ModelBase& model, const std::string& path) {
  Trainer* trainer = kiln::trainer_of(model);
  if (trainer == nullptr) throw LayerStateError(model.describe() + " is not compiled: cannot restore a backup into it");
  const std::string bytes = read_whole_file(path);
  const Container container = read_container(bytes, path);
  const Section* weights = container.find("WGHT");
  const Section* meta = container.find("META");
  const Section* state = container.find("OPTM");
  if (!weights || !meta || !state) throw SerializationError(path + ": is not a training backup (a section is missing)");
  const Config metadata = parse_json(std::string(meta->payload), path + ": metadata section");
  const Config* progress = metadata.is_map() ? metadata.find("backup") : nullptr;
  if (progress == nullptr || !progress->is_map()) throw SerializationError(path + ": is not a training backup");
  const std::vector<NamedArray> arrays = read_arrays(weights->payload, path + ": weights section");
  const std::int64_t epoch = progress->get_int("epoch", -1), batch = progress->get_int("batch", -1);
  if (epoch < 0 || epoch > 1'000'000'000 || batch < 0)
    throw SerializationError(path + ": the backup's progress is " + progress->to_string());
  // The weights and the optimizer's state as they are, put back if either part of the backup does not fit
  // (a backup of another model, or of another optimizer): a failed restore changes nothing.
  std::vector<Array> old_weights;
  for (const Weight& weight : model.weights()) old_weights.push_back(weight.value.copy());
  std::vector<Weight> old_state = trainer->optimizer().variables();
  for (Weight& variable : old_state) variable.value = variable.value.copy();
  try {
    assign_weights(model.weights(), arrays, model.describe());
    restore_optimizer(*trainer, model, *state, path);
  } catch (...) {
    const std::vector<Weight> now = model.weights();
    for (std::size_t i = 0; i < now.size() && i < old_weights.size(); ++i) {
      Array target = now[i].value;
      std::memcpy(target.raw(), old_weights[i].raw(), old_weights[i].nbytes());
    }
    try {
      trainer->optimizer().set_variables(old_state);
    } catch (...) {  // an optimizer built by the failed restore keeps its fresh slots
    }
    throw;
  }
  // The epochs finished are the backup's epoch: a backup after an epoch's last batch is the next one's start.
  trainer->set_epochs_trained(static_cast<int>(epoch));
  return *progress;
}

}  // namespace detail

Model load_model(const std::string& path, const LoadOptions& options) {
  const std::string bytes = detail::read_whole_file(path);
  if (!detail::is_kiln_container(bytes) && detail::is_keras_bytes(bytes))
    return detail::load_keras_bytes(bytes, path, options);
  const detail::Container container = detail::read_container(bytes, path);
  const Config config = parse_config_section(container, path);
  const detail::Section* weights = container.find("WGHT");
  if (!weights) throw SerializationError(path + ": has no weights section");
  const detail::Section* meta = container.find("META");
  const Config metadata = meta ? parse_json(std::string(meta->payload), path + ": metadata section") : Config();

  // The model's weights are what the weights section holds: building it may not take much more.
  std::shared_ptr<ModelBase> model = guarded(path + ": config section", [&] {
    detail::AllocationLimit limit(2 * weights->payload.size() + (16u << 20), "building the model");
    detail::ConfigVersionScope version(static_cast<int>(metadata.is_map() ? metadata.get_int("config_version", 1) : 1));
    return model_from(detail::import_keras_model_config(config, "config"));
  });
  const std::vector<NamedArray> arrays = detail::read_arrays(weights->payload, path + ": weights section");
  guarded(path + ": weights section", [&] { assign_weights(model->weights(), arrays, model->describe()); });
  if (const Config* assets = metadata.is_map() ? metadata.find("assets") : nullptr; assets != nullptr) {
    guarded(path + ": metadata section", [&] {
      if (!assets->is_map()) throw ValueError("assets is " + assets->to_string() + ", not a map");
      for (const auto& [name, value] : assets->items()) model->set_asset(name, value);
    });
  }

  const Config* compiled = config.find("compile_config");
  if (!options.compile || !compiled || compiled->is_null() || compiled->size() == 0) return Model(model);
  guarded(path + ": compile_config",
          [&] { compile_from(*model, detail::import_keras_compile_config(*compiled, "compile_config")); });
  Trainer& trainer = detail::trainer_of(*model);
  if (const detail::Section* state = container.find("OPTM")) restore_optimizer(trainer, *model, *state, path);
  if (meta) {
    guarded(path + ": metadata section", [&] {
      const std::int64_t epochs = metadata.is_map() ? metadata.get_int("epochs_trained", 0) : 0;
      if (epochs < 0 || epochs > 1'000'000'000) throw ValueError("epochs_trained is " + std::to_string(epochs));
      trainer.set_epochs_trained(static_cast<int>(epochs));
    });
  }
  return Model(model);
}

// ---- weights only ----------------------------------------------------------------------------------------

void save_weights(const ModelBase& model, const std::string& path) {
  if (!model.built()) throw LayerStateError(model.describe() + " is not built; it has no weights to save yet");
  std::vector<std::pair<std::string, std::string>> payloads = {
      {"WGHT", detail::write_arrays(named_weights(model))},
      {"META", to_json(metadata_of(model))},
  };
  detail::write_file_atomically(path, detail::write_container(sections_of(payloads)));
}

void load_weights(ModelBase& model, const std::string& path) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it before loading weights into it");
  const std::string bytes = detail::read_whole_file(path);
  const detail::Container container = detail::read_container(bytes, path);
  const detail::Section* weights = container.find("WGHT");
  if (!weights) throw SerializationError(path + ": has no weights section");
  const std::vector<NamedArray> arrays = detail::read_arrays(weights->payload, path + ": weights section");
  // A file that does not fit the model is the caller's mistake, not damage: ValueError or ShapeError.
  assign_weights(model.weights(), arrays, model.describe());
}

// ---- inspection ------------------------------------------------------------------------------------------

FileInfo verify_file(const std::string& path) {
  const std::string bytes = detail::read_whole_file(path);
  const detail::Container container = detail::read_container(bytes, path);
  FileInfo info;
  info.size = bytes.size();
  info.format_version = container.format_version;
  for (const detail::Section& section : container.sections)
    info.sections.push_back(
        {section.tag, detail::section_name(section.tag), section.offset, section.payload.size(), section.crc32});
  if (container.find("CONF")) parse_config_section(container, path);
  if (const detail::Section* weights = container.find("WGHT")) {
    for (const NamedArray& array : detail::read_arrays(weights->payload, path + ": weights section"))
      info.weights.push_back(array.name + " " + array.value.shape().to_string() + " " +
                             dtype_name(array.value.dtype()));
  } else {
    throw SerializationError(path + ": has no weights section");
  }
  if (const detail::Section* state = container.find("OPTM"))
    detail::read_arrays(state->payload, path + ": optimizer state section");
  if (const detail::Section* meta = container.find("META"))
    info.metadata = parse_json(std::string(meta->payload), path + ": metadata section");
  return info;
}

Config read_model_config(const std::string& path) {
  const std::string bytes = detail::read_whole_file(path);
  if (!detail::is_kiln_container(bytes) && detail::is_keras_bytes(bytes)) return detail::read_keras_config(bytes, path);
  return parse_config_section(detail::read_container(bytes, path), path);
}

// ---- the members of kiln::Model and kiln::Sequential ---------------------------------------------------

namespace detail {
void save_model_file(const ModelBase& model, const std::string& path) { kiln::save_model(model, path); }
void save_weights_file(const ModelBase& model, const std::string& path) { kiln::save_weights(model, path); }
void load_weights_file(ModelBase& model, const std::string& path) { kiln::load_weights(model, path); }
std::string model_json(const ModelBase& model, int indent) { return kiln::model_to_json(model, indent); }
}  // namespace detail

}  // namespace kiln
