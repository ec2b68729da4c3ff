#pragma once
// Every error a user can cause is one of these. Messages name the op, node or layer and the shapes,
// so a failure can be traced to the line of model code that caused it.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

class Shape;

/// The base of every kiln error. Thrown as itself for misuse of the API that fits none of the kinds below:
/// an empty Tensor, a tensor of another graph, a fetch a Program does not have.
class Error : public std::runtime_error {
 public:
  /// An error whose what() is `message`.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A shape that an op or layer cannot take. The message lists every input shape by name.
class ShapeError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit ShapeError(const std::string& message) : Error(message) {}
  /// "<who>: <what> (a=(None, 3), b=(4, 5))"
  ShapeError(const std::string& who, const std::string& what, const std::vector<std::pair<std::string, Shape>>& shapes);
};

/// Mixed or unsupported dtypes.
class DTypeError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit DTypeError(const std::string& message) : Error(message) {}
};

/// An unknown op, attribute, registry key or config entry, or a config value of the wrong type.
class ConfigError : public virtual Error {
 public:
  /// An error whose what() is `message`.
  explicit ConfigError(const std::string& message) : Error(message) {}
};

/// A value that is well-shaped but not acceptable: an empty batch, a label out of range, a feed missing.
class ValueError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit ValueError(const std::string& message) : Error(message) {}
};

/// A name looked up where it does not exist (a log key, a History entry). The message lists the names there are.
class KeyError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit KeyError(const std::string& message) : Error(message) {}
};

/// A gradient asked through an op (or an op input) that has none.
class NotDifferentiable : public Error {
 public:
  /// An error whose what() is `message`.
  explicit NotDifferentiable(const std::string& message) : Error(message) {}
};

/// Weights created after build, a layer used in a state it does not allow, a frozen graph changed.
class LayerStateError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit LayerStateError(const std::string& message) : Error(message) {}
};

/// A file that cannot be written or read back whole.
class SerializationError : public virtual Error {
 public:
  /// An error whose what() is `message`.
  explicit SerializationError(const std::string& message) : Error(message) {}
};
/// A whole, undamaged file that describes what kiln does not support or what cannot be: an unknown layer
/// class, an argument kiln does not take, a value out of its range. It is both a SerializationError (every
/// failure to read a file is caught as one) and a ConfigError (the same mistake in code is one). The message
/// names the file and the place in it.
class FileConfigError : public SerializationError, public ConfigError {
 public:
  /// An error whose what() is `message`.
  explicit FileConfigError(const std::string& message)
      : Error(message), SerializationError(message), ConfigError(message) {}
};

/// A path that names no file: a model, a weights file, a CSV file or any other file kiln was asked to read.
/// One type wherever a file is read, so `catch (const kiln::FileNotFoundError&)` tells a wrong path from a
/// damaged file; it is a SerializationError, so every failure to read a file is caught as one. The message
/// names the path.
class FileNotFoundError : public SerializationError {
 public:
  /// An error whose what() is `message`.
  explicit FileNotFoundError(const std::string& message) : Error(message), SerializationError(message) {}
};

/// A dataset's source failed while it was read: a generator threw, a file changed its column count, an
/// element changed shape. The message names the element (the batch, in fit) and the cause; the original
/// exception is nested (std::rethrow_if_nested reaches it).
class DatasetError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit DatasetError(const std::string& message) : Error(message) {}
};

/// A distributed fit failed across its processes: another rank threw (the message names it and carries its
/// message), a rank was lost, the ranks' models or data differ, or the transport (MPI) reported an error.
class DistributedError : public Error {
 public:
  /// An error whose what() is `message`.
  explicit DistributedError(const std::string& message) : Error(message) {}
};

}  // namespace kiln
