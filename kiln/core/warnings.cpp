#include <kiln/core/warnings.hpp>

#include <iostream>
#include <mutex>
#include <utility>

namespace kiln {

namespace {
std::mutex& warning_mutex() {
  static std::mutex mutex;
  return mutex;
}
WarningHandler& current_handler() {
  static WarningHandler handler;
  return handler;
}
}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) {
  const std::lock_guard<std::mutex> lock(warning_mutex());
  return std::exchange(current_handler(), std::move(handler));
}

void warn(const std::string& message) {
  WarningHandler handler;
  {
    const std::lock_guard<std::mutex> lock(warning_mutex());
    handler = current_handler();
    if (!handler) {
      std::cerr << "kiln warning: " << message << std::endl;
      return;
    }
  }
  handler(message);  // outside the lock: a handler may warn again
}

}  // namespace kiln
