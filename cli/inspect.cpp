// `kiln summary`, `kiln config`, `kiln verify`, `kiln convert` and `kiln quantize`: reading a model file without
// running it.
#include <cinttypes>
#include <cstdio>
#include <ostream>
#include <string>

#include <kiln/core/error.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include "commands.hpp"

namespace kiln::cli {
namespace {

// "  weights      offset       1234  length      5678  crc32 0x1a2b3c4d"
std::string section_line(const FileSection& section) {
  char line[160];
  std::snprintf(line, sizeof line, "  %-16s offset %10" PRIu64 "  length %10" PRIu64 "  crc32 0x%08" PRIx32,
                section.name.c_str(), section.offset, section.length, section.crc32);
  return line;
}

std::string plural(std::size_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

}  // namespace

Model load_uncompiled(const std::string& file) {
  LoadOptions options;
  options.compile = false;  // the optimizer's state is not needed to inspect or run a model
  return load_model(file, options);
}

void summary(const std::string& file, std::ostream& out) { out << load_uncompiled(file).summary_string(); }

void config(const std::string& file, std::ostream& out) { out << to_json(read_model_config(file), 2) << '\n'; }

void verify(const std::string& file, std::ostream& out) {
  if (is_keras_file(file)) {
    const KerasFileInfo info = verify_keras_file(file);
    out << file << ": " << info.format;
    if (!info.keras_version.empty()) out << " (keras_version " << info.keras_version << ")";
    out << ", " << plural(info.size, "byte") << ", OK\n";
    for (const std::string& entry : info.entries) out << "  " << entry << '\n';
    out << "  " << plural(info.weights.size(), "weight dataset") << ", every one read; the model builds from it\n";
    return;
  }
  const FileInfo info = verify_file(file);
  out << file << ": kiln file format " << info.format_version << ", " << plural(info.size, "byte") << ", "
      << plural(info.sections.size(), "section") << ", OK\n";
  for (const FileSection& section : info.sections) out << section_line(section) << '\n';
  out << "  " << plural(info.weights.size(), "weight") << '\n';
}

void convert(const std::string& file, const std::string& output, std::ostream& out) {
  const Model model = load_model(file);
  model.save(output);
  out << file << " -> " << output << '\n';
}

void quantize(const std::string& file, const std::string& output, const std::string& mode, std::ostream& out) {
  const Model model = load_uncompiled(file);
  QuantizationReport report;
  const Model quantized = kiln::quantize(model, mode, &report);
  quantized.save(output);
  out << file << " -> " << output << ": " << report.quantized.size() << " layer(s) in " << mode << "\n";
  for (const std::string& layer : report.quantized) out << "  " << layer << '\n';
  if (!report.skipped.empty()) out << "left as they were:\n";
  for (const auto& [layer, why] : report.skipped) out << "  " << layer << ": " << why << '\n';
}

}  // namespace kiln::cli
