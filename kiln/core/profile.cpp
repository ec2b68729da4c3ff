// KILN_PROFILE: kernel times per op and output shape, summed over plans and printed at exit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/planner.hpp>

namespace kiln::detail {
namespace {

struct Entry {
  double seconds = 0;
  std::int64_t calls = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
};

void print_table();

// Never destroyed: plans owned by static objects may flush after exit handlers have run.
Table& table() {
  static Table* instance = [] {
    auto* created = new Table;
    std::atexit(print_table);
    return created;
  }();
  return *instance;
}

void print_table() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::pair<std::string, Entry>> rows(t.entries.begin(), t.entries.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& row : rows) total += row.second.seconds;
  std::fprintf(stderr, "kiln profile (KILN_PROFILE): %.3f s in kernels\n%10s %6s %9s %10s  %s\n", total, "ms", "%",
               "calls", "us/call", "op (output shape)");
  for (const auto& [label, entry] : rows)
    std::fprintf(stderr, "%10.2f %5.1f%% %9lld %10.2f  %s\n", entry.seconds * 1e3,
                 total > 0 ? 100 * entry.seconds / total : 0.0, static_cast<long long>(entry.calls),
                 entry.calls > 0 ? entry.seconds * 1e6 / static_cast<double>(entry.calls) : 0.0, label.c_str());
}

}  // namespace

bool profiling() {
  static const bool enabled = [] {
    const char* value = std::getenv("KILN_PROFILE");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

KernelProfile::~KernelProfile() {
  if (labels.empty()) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (calls[i] == 0) continue;
    Entry& entry = t.entries[labels[i]];
    entry.seconds += seconds[i];
    entry.calls += calls[i];
  }
}

}  // namespace kiln::detail
