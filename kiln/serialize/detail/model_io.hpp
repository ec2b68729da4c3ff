#pragma once
// What the readers of kiln files and of Keras files share: the boundary that turns any failure into a
// SerializationError saying where, building a model from its config, assigning weights by path, and
// compiling from a compile_config.
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/model.hpp>
#include <kiln/serialize/detail/arrays.hpp>

namespace kiln::detail {

// Runs `body`, turning any failure into a SerializationError that says where: "m.kiln: weights section: ...".
// A SerializationError passes unchanged: the readers that throw it name the file and the place already. With
// `keep_config_errors`, a ConfigError stays one (prefixed with `where`): a whole file that describes a class or
// an argument kiln does not support, as the Keras readers report it.
template <class Body>
auto guarded(const std::string& where, Body&& body, bool keep_config_errors = false) -> decltype(body()) {
  try {
    return body();
  } catch (const SerializationError&) {
    throw;
  } catch (const ConfigError& error) {
    if (keep_config_errors) throw ConfigError(where + ": " + error.what());
    throw SerializationError(where + ": " + error.what());
  } catch (const Error& error) {
    throw SerializationError(where + ": " + error.what());
  } catch (const std::bad_alloc&) {
    throw SerializationError(where + ": needs more memory than the file can justify (damaged?)");
  } catch (const std::length_error& error) {
    throw SerializationError(where + ": impossible size (" + std::string(error.what()) + ")");
  }
}

// The model a serialized config describes (its compile_config ignored); ConfigError when it is a layer.
std::shared_ptr<ModelBase> model_from(const Config& serialized);

// Copies every array into the weight of the same path, after checking them all: on any mismatch the
// model is unchanged. ValueError/ShapeError naming the weight and `owner`.
void assign_weights(const std::vector<Weight>& weights, const std::vector<NamedArray>& arrays,
                    const std::string& owner);

// Compiles `model` as Keras's compile_config says: {"optimizer", "loss", "metrics", ...}.
void compile_from(ModelBase& model, const Config& config);

// What compile() was given, as {"optimizer", "loss", "loss_weights", "metrics"}: null when the model is not
// compiled, or its loss was made from a C++ function and cannot be rebuilt.
Config compile_config(const ModelBase& model);

}  // namespace kiln::detail
