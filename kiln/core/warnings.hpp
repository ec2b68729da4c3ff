#pragma once
// Warnings: what kiln tells a user without stopping them, as Python's warnings module does for Keras (a
// layer that drops a mask it cannot use). They go to std::cerr unless a handler takes them.
#include <functional>
#include <string>

namespace kiln {

/// Receives each warning's text (without a trailing newline).
using WarningHandler = std::function<void(const std::string& message)>;

/// Sends warnings to `handler` from now on (an empty one: back to std::cerr) and returns the handler that
/// was there (empty for std::cerr). Thread-safe.
WarningHandler set_warning_handler(WarningHandler handler);

/// Sends `message` to the handler, or to std::cerr as "kiln warning: <message>". Thread-safe.
void warn(const std::string& message);

}  // namespace kiln
