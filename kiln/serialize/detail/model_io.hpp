#pragma once
// What the readers of kiln files and of Keras files share: the boundary that turns any failure into a
// SerializationError saying where, building a model from its config, assigning weights by path, and
// compiling from a compile_config.
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/detail/loading.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/container.hpp>

namespace kiln::detail {

// Runs `body`, turning any failure into a SerializationError that says where: "m.kiln: weights section: ...",
// once (a message that starts with `where` already keeps it as it is). A SerializationError passes unchanged:
// the readers that throw it name the file and the place already. A ConfigError (a whole file that describes a
// class or an argument kiln does not support) becomes a FileConfigError, which is both.
template <class Body>
auto guarded(const std::string& where, Body&& body) -> decltype(body()) {
  const auto named = [&](const char* message) {
    const std::string text = message;
    return text.compare(0, where.size(), where) == 0 ? text : where + ": " + text;
  };
  try {
    return body();
  } catch (const SerializationError&) {
    throw;
  } catch (const ConfigError& error) {
    throw FileConfigError(named(error.what()));
  } catch (const Error& error) {
    throw SerializationError(named(error.what()));
  } catch (const std::bad_alloc&) {
    throw SerializationError(where + ": needs more memory than the file can justify (damaged?)");
  } catch (const std::length_error& error) {
    throw SerializationError(where + ": impossible size (" + std::string(error.what()) + ")");
  }
}

// The boundary of every public function that reads a file (load_model, load_keras_model, verify_file, ...):
// guarded by the path, so one catch clause (SerializationError) takes every failure to read a file.
template <class Body>
auto reading_file(const std::string& path, Body&& body) -> decltype(body()) {
  return guarded(path, std::forward<Body>(body));
}

// The model a serialized config describes (its compile_config ignored); ConfigError when it is a layer.
std::shared_ptr<ModelBase> model_from(const Config& serialized);

// While alive, the model being built on this thread is one a file will fill: its layers skip their
// initializers' draws (layers/detail/loading.hpp), and its arrays may take at most the `weight_bytes` of
// weight data the file holds, plus 64 MiB for what layers make besides weights. A config that declares more
// weight than that is refused (ValueError, which the readers report as a SerializationError), whatever the
// model's size, before the memory is taken.
class BuildFromFile {
 public:
  explicit BuildFromFile(std::uint64_t weight_bytes);

 private:
  SkipInitialDraws skip_;
  AllocationLimit limit_;
};

// An array a file holds, read when asked. kiln's and Keras's readers list their arrays this way, so every
// weight is checked by name and shape before any is read, and then read straight into the weight's own
// storage: no second copy of a model's weights is made.
struct StoredArray {
  std::string name;
  Shape shape;
  std::function<void(Array& into)> read;  // `into` has `shape`, and any dtype: the values are converted
};

// Reads every array into the weight of the same path, after checking them all (every weight has one, of its
// shape, and the file has no other): on any mismatch the model is unchanged. ValueError/ShapeError naming the
// weight and `owner`; what `read` throws passes.
void assign_weights(const std::vector<Weight>& weights, const std::vector<StoredArray>& arrays,
                    const std::string& owner);
// The same for arrays in memory.
void assign_weights(const std::vector<Weight>& weights, const std::vector<NamedArray>& arrays,
                    const std::string& owner);
// The arrays of a kiln file's section (its weights or its optimizer state), each read from the file when
// assigned.
std::vector<StoredArray> stored_arrays(const ReadOnlyFile& file, const SectionIndex& section, const std::string& where);

// Compiles `model` as Keras's compile_config says: {"optimizer", "loss", "metrics", ...}.
void compile_from(ModelBase& model, const Config& config);

// Compiles `model` as a Keras compile_config (or a legacy training_config) says, failures named
// "<where>: ..."; false, with a warning, when the config names no loss (the model stays uncompiled).
bool compile_from_keras(ModelBase& model, const Config& keras, const std::string& where);

// What compile() was given, as {"optimizer", "loss", "loss_weights", "metrics"}: null when the model is not
// compiled, or its loss was made from a C++ function and cannot be rebuilt.
Config compile_config(const ModelBase& model);

}  // namespace kiln::detail
