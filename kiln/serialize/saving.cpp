#include <kiln/serialize/saving.hpp>
#include <kiln/serialize/detail/training_backup.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <optional>
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
using detail::ContainerIndex;
using detail::NamedArray;
using detail::read_section;
using detail::ReadOnlyFile;
using detail::SectionIndex;
using detail::stored_arrays;
using detail::StoredArray;

// The config section is small (kilobytes for real models). Parsed, a config takes up to ~60 times its
// text (104 bytes per value): the cap bounds that.
constexpr std::size_t kMaxConfigBytes = 4u << 20;

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

Config parse_config_text(const std::string& text, const std::string& path) {
  Config config = parse_json(text, path + ": config section");
  if (!config.is_map()) throw SerializationError(path + ": config section: not a JSON object");
  return config;
}

}  // namespace

// ---- config -------------------------------------------------------------------------------------------------

Config model_config(const ModelBase& model) { return detail::export_keras_model_config(model); }

std::string model_to_json(const ModelBase& model, int indent) { return to_json(model_config(model), indent); }

std::shared_ptr<ModelBase> model_base_from_config(const Config& config) {
  // Keras's model.to_json() names the Keras version that wrote it; Keras 2's meanings are read as Keras 2's.
  const Config* version = config.is_map() ? config.find("keras_version") : nullptr;
  if (version != nullptr && version->type() == Config::Type::string && detail::written_by_keras2(version->as_string()))
    return model_from(detail::import_keras_model_config(detail::with_keras2_activations(config), "model config"));
  return model_from(detail::import_keras_model_config(config, "model config"));
}

std::shared_ptr<ModelBase> model_base_from_json(const std::string& json) {
  return model_base_from_config(parse_json(json, "model JSON"));
}

// ---- whole models ------------------------------------------------------------------------------------------

namespace {
bool has_extension(const std::string& path, const std::string& extension) {
  return path.size() > extension.size() &&
         path.compare(path.size() - extension.size(), extension.size(), extension) == 0;
}
}  // namespace

namespace {

// save_model's kiln file, its metadata extended with `extra` entries (a backup's progress). The weights and
// the optimizer's slots stream from their own storage into the file: a save takes no second copy of them.
void save_kiln_file(const ModelBase& model, const std::string& path, const Config& extra) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it (or give it an Input) before saving");
  // The config is Keras's config.json for the same model; older kiln files held kiln's own form of it,
  // which load_model reads too.
  const std::string config = to_json(detail::export_keras_model_config(model, compile_config(model)));
  const Trainer* trainer = trainer_of(model);
  const std::vector<NamedArray> weights = named_weights(model);
  const std::vector<NamedArray> state =
      trainer ? named(const_cast<Trainer*>(trainer)->optimizer().variables()) : std::vector<NamedArray>{};
  Config metadata = metadata_of(model);
  if (extra.is_map())
    for (const auto& [key, value] : extra.items()) metadata.set(key, value);
  const std::string meta = to_json(metadata);
  auto text = [](const std::string& bytes) { return [&bytes](detail::ByteSink& sink) { sink.write(bytes); }; };
  auto arrays = [](const std::vector<NamedArray>& list) {
    return [&list](detail::ByteSink& sink) { detail::write_arrays(list, sink); };
  };
  std::vector<detail::SectionWriter> sections = {{"CONF", config.size(), text(config)},
                                                 {"WGHT", detail::arrays_size(weights), arrays(weights)}};
  if (trainer) sections.push_back({"OPTM", detail::arrays_size(state), arrays(state)});
  sections.push_back({"META", meta.size(), text(meta)});
  detail::write_container_file(path, sections);
}

// The optimizer's slots and iteration count from a file's optimizer state section into `trainer`, read
// straight into the slots.
void restore_optimizer(Trainer& trainer, const ModelBase& model, const detail::ReadOnlyFile& file,
                       const detail::SectionIndex& state) {
  const std::string where = file.path() + ": optimizer state section";
  const std::vector<detail::StoredArray> slots = detail::stored_arrays(file, state, where);
  guarded(where, [&] {
    Optimizer& optimizer = trainer.optimizer();
    // An optimizer that never stepped saved no slots: it builds them at its first step, as it would have.
    const bool has_slots = std::any_of(slots.begin(), slots.end(), [](const detail::StoredArray& slot) {
      return slot.name.find('/') != std::string::npos;
    });
    if (has_slots) optimizer.build(model.trainable_weights());
    assign_weights(optimizer.variables(), slots, optimizer.describe());
    // The counters pass the optimizer's own checks (a whole, non-negative step count).
    optimizer.set_iterations(static_cast<std::int64_t>(optimizer.variables().front().value.flat(0)));
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
  if (trainer_of(model) == nullptr)
    throw LayerStateError(model.describe() + " is not compiled: nothing to back up");
  save_kiln_file(model, path, Config{{"backup", progress}});
}

Config restore_training_backup(ModelBase& model, const std::string& path) {
  Trainer* trainer = trainer_of(model);
  if (trainer == nullptr) throw LayerStateError(model.describe() + " is not compiled: cannot restore a backup into it");
  return detail::reading_file(path, [&] {
    const ReadOnlyFile file(path);
    const ContainerIndex container = index_container(file);
    const SectionIndex* weights = container.find("WGHT");
    const SectionIndex* meta = container.find("META");
    const SectionIndex* state = container.find("OPTM");
    if (!weights || !meta || !state) throw SerializationError(path + ": is not a training backup (a section is missing)");
    const Config metadata = parse_json(read_section(file, *meta, kMaxConfigBytes), path + ": metadata section");
    const Config* progress = metadata.is_map() ? metadata.find("backup") : nullptr;
    if (progress == nullptr || !progress->is_map()) throw SerializationError(path + ": is not a training backup");
    const std::vector<StoredArray> arrays = stored_arrays(file, *weights, path + ": weights section");
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
      restore_optimizer(*trainer, model, file, *state);
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
  });
}

}  // namespace detail

std::shared_ptr<ModelBase> load_model_base(const std::string& path, const LoadOptions& options) {
  return detail::reading_file(path, [&] {
    const ReadOnlyFile file(path);
    if (detail::is_keras_source(file)) return detail::load_keras_file(file, options);
    // The frame and every checksum first, a chunk at a time; then the small sections, then the weights, read
    // straight into the model's own arrays.
    const ContainerIndex container = index_container(file);
    const SectionIndex* conf = container.find("CONF");
    if (!conf) throw SerializationError(path + ": has no config section (a weights-only file? use load_weights)");
    const Config config = parse_config_text(read_section(file, *conf, kMaxConfigBytes), path);
    const SectionIndex* weights = container.find("WGHT");
    if (!weights) throw SerializationError(path + ": has no weights section");
    const SectionIndex* meta = container.find("META");
    const Config metadata =
        meta ? parse_json(read_section(file, *meta, kMaxConfigBytes), path + ": metadata section") : Config();

    // The model's weights are what the weights section holds: building it may not take more (its weights are
    // left zero for the file to fill, not drawn).
    std::shared_ptr<ModelBase> model = guarded(path + ": config section", [&] {
      detail::BuildFromFile scope(weights->length);
      detail::ConfigVersionScope version(static_cast<int>(metadata.is_map() ? metadata.get_int("config_version", 1) : 1));
      return model_from(detail::import_keras_model_config(config, "config"));
    });
    const std::vector<StoredArray> arrays = stored_arrays(file, *weights, path + ": weights section");
    guarded(path + ": weights section", [&] { assign_weights(model->weights(), arrays, model->describe()); });
    if (const Config* assets = metadata.is_map() ? metadata.find("assets") : nullptr; assets != nullptr) {
      guarded(path + ": metadata section", [&] {
        if (!assets->is_map()) throw ValueError("assets is " + assets->to_string() + ", not a map");
        for (const auto& [name, value] : assets->items()) model->set_asset(name, value);
      });
    }

    const Config* compiled = config.find("compile_config");
    if (!options.compile || !compiled || compiled->is_null() || compiled->size() == 0) return model;
    if (!detail::compile_from_keras(*model, *compiled, path + ": compile_config")) return model;
    Trainer& trainer = compiled_trainer(*model);
    if (const SectionIndex* state = container.find("OPTM")) restore_optimizer(trainer, *model, file, *state);
    if (meta) {
      guarded(path + ": metadata section", [&] {
        const std::int64_t epochs = metadata.is_map() ? metadata.get_int("epochs_trained", 0) : 0;
        if (epochs < 0 || epochs > 1'000'000'000) throw ValueError("epochs_trained is " + std::to_string(epochs));
        trainer.set_epochs_trained(static_cast<int>(epochs));
      });
    }
    return model;
  });
}

// ---- weights only ----------------------------------------------------------------------------------------

void save_weights(const ModelBase& model, const std::string& path) {
  if (!model.built()) throw LayerStateError(model.describe() + " is not built; it has no weights to save yet");
  const std::vector<NamedArray> weights = named_weights(model);
  const std::string meta = to_json(metadata_of(model));
  detail::write_container_file(
      path, {{"WGHT", detail::arrays_size(weights), [&](detail::ByteSink& sink) { detail::write_arrays(weights, sink); }},
             {"META", meta.size(), [&](detail::ByteSink& sink) { sink.write(meta); }}});
}

void load_weights(ModelBase& model, const std::string& path) {
  if (!model.built())
    throw LayerStateError(model.describe() + " is not built; build it before loading weights into it");
  // The stored arrays read from `file` when they are assigned: it outlives them.
  std::optional<detail::ReadOnlyFile> file;
  const std::vector<detail::StoredArray> arrays = detail::reading_file(path, [&] {
    file.emplace(path);
    const detail::ContainerIndex container = detail::index_container(*file);
    const detail::SectionIndex* weights = container.find("WGHT");
    if (!weights) throw SerializationError(path + ": has no weights section");
    return detail::stored_arrays(*file, *weights, path + ": weights section");
  });
  // A file that does not fit the model is the caller's mistake, not damage: ValueError or ShapeError, as
  // Keras's load_weights raises ValueError.
  assign_weights(model.weights(), arrays, model.describe());
}

// ---- inspection ------------------------------------------------------------------------------------------

FileInfo verify_file(const std::string& path) {
  return detail::reading_file(path, [&] {
    const detail::ReadOnlyFile file(path);
    const detail::ContainerIndex container = detail::index_container(file);
    FileInfo info;
    info.size = file.size();
    info.format_version = container.format_version;
    for (const detail::SectionIndex& section : container.sections)
      info.sections.push_back({section.tag, detail::section_name(section.tag), section.offset, section.length, section.crc32});
    if (const detail::SectionIndex* conf = container.find("CONF"))
      parse_config_text(detail::read_section(file, *conf, kMaxConfigBytes), path);
    if (const detail::SectionIndex* weights = container.find("WGHT")) {
      for (const detail::ArrayEntry& array :
           detail::list_arrays(file, weights->offset, weights->length, path + ": weights section"))
        info.weights.push_back(array.name + " " + array.shape.to_string() + " " + dtype_name(array.dtype));
    } else {
      throw SerializationError(path + ": has no weights section");
    }
    if (const detail::SectionIndex* state = container.find("OPTM"))
      detail::list_arrays(file, state->offset, state->length, path + ": optimizer state section");
    if (const detail::SectionIndex* meta = container.find("META"))
      info.metadata = parse_json(detail::read_section(file, *meta, kMaxConfigBytes), path + ": metadata section");
    return info;
  });
}

Config read_model_config(const std::string& path) {
  return detail::reading_file(path, [&] {
    const detail::ReadOnlyFile file(path);
    if (detail::is_keras_source(file)) return detail::read_keras_config(file);
    const detail::ContainerIndex container = detail::index_container(file);
    const detail::SectionIndex* conf = container.find("CONF");
    if (!conf) throw SerializationError(path + ": has no config section (a weights-only file? use load_weights)");
    return parse_config_text(detail::read_section(file, *conf, kMaxConfigBytes), path);
  });
}

}  // namespace kiln
