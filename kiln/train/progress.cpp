#include <kiln/train/progress.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <kiln/core/error.hpp>

namespace kiln {
namespace {

constexpr int bar_cells = 20;
constexpr double redraw_interval = 0.05;  // seconds; Keras's Progbar default
const char* const bold = "\x1b[1m";
const char* const green = "\x1b[32m";
const char* const white = "\x1b[37m";
const char* const reset = "\x1b[0m";
const char* const cell = "\xe2\x94\x81";  // U+2501 '━'

std::string printf_string(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string repeat(const char* text, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) out += text;
  return out;
}

// Columns the text takes on screen: UTF-8 code points (the bar cells are 3 bytes but one column).
std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// "%{digits}d/%d": the step right-aligned to the width of the total, so the line does not jitter.
std::string step_count(std::int64_t step, std::int64_t steps) {
  const std::string total = std::to_string(steps);
  const std::string current = std::to_string(step);
  return std::string(current.size() < total.size() ? total.size() - current.size() : 0, ' ') + current + "/" + total;
}

std::string seconds_text(double seconds) { return printf_string("%.0fs", seconds); }

}  // namespace

ProgressBar::ProgressBar(int verbose) : ProgressBar(std::cout, verbose, stdout_is_terminal()) {}

ProgressBar::ProgressBar(std::ostream& out, int verbose, bool is_terminal)
    : out_(&out), verbose_(verbose), is_terminal_(is_terminal) {
  if (verbose < 0 || verbose > 2)
    throw ConfigError("ProgressBar: verbose must be 0, 1 or 2, got " + std::to_string(verbose));
}

bool ProgressBar::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

std::string ProgressBar::format_value(double value) {
  if (std::isnan(value)) return "nan";  // printf writes "-nan" for a NaN with its sign bit set; Python never does
  return printf_string(std::abs(value) > 1e-3 ? "%.4f" : "%.4e", value);
}

std::string ProgressBar::format_logs(const Logs& logs) {
  std::string text;
  for (const auto& [key, value] : logs) text += (text.empty() ? "" : " - ") + key + ": " + format_value(value);
  return text;
}

std::string ProgressBar::format_eta(double seconds) {
  // Python's "%d" truncates a float; casting NaN or infinity would be undefined, so those show as 0.
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const auto whole = [](double value) { return static_cast<long long>(value); };
  char buffer[64];
  if (seconds > 3600)
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", whole(seconds / 3600),
                  whole(std::fmod(seconds, 3600) / 60), whole(std::fmod(seconds, 60)));
  else if (seconds > 60)
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld", whole(seconds / 60), whole(std::fmod(seconds, 60)));
  else
    std::snprintf(buffer, sizeof buffer, "%llds", whole(seconds));
  return buffer;
}

std::string ProgressBar::format_step_time(double seconds) {
  if (seconds >= 1 || seconds == 0) return printf_string("%.0fs/step", seconds);
  if (seconds >= 1e-3) return printf_string("%.0fms/step", seconds * 1e3);
  return printf_string("%.0fus/step", seconds * 1e6);
}

void ProgressBar::epoch_begin(int epoch, int epochs) {
  previous_width_ = 0;
  last_draw_.reset();
  first_step_end_.reset();
  if (verbose_ > 0 && epochs > 1) *out_ << "Epoch " << epoch + 1 << "/" << epochs << "\n" << std::flush;
}

// Seconds per step. The first step (tracing, planning, cold caches) is left out once there are others.
double ProgressBar::step_time(std::int64_t step, double elapsed) {
  if (step <= 0) return 0.0;
  const double per_step = first_step_end_ && step > 1 ? (elapsed - *first_step_end_) / static_cast<double>(step - 1)
                                                      : elapsed / static_cast<double>(step);
  if (step == 1) first_step_end_ = elapsed;
  return per_step;
}

void ProgressBar::update(std::int64_t step, std::int64_t steps, const Logs& logs, double elapsed) {
  // Keras feeds its Progbar batches only at verbose 1, so at verbose 2 the first step counts in the step time.
  if (verbose_ != 1) return;
  const double per_step = step_time(step, elapsed);
  if (!is_terminal_) return;
  const bool last = steps > 0 && step >= steps;
  if (!last && last_draw_ && elapsed - *last_draw_ < redraw_interval) return;
  draw(step, steps, logs, elapsed, per_step, /*final=*/false);
  last_draw_ = elapsed;
}

void ProgressBar::epoch_end(std::int64_t steps, const Logs& logs, double elapsed) {
  if (verbose_ == 0) return;
  const double per_step = step_time(steps, elapsed);
  if (verbose_ == 1 && is_terminal_)
    draw(steps, steps, logs, elapsed, per_step, /*final=*/true);
  else
    print_summary(steps, logs, elapsed, per_step);
}

void ProgressBar::draw(std::int64_t step, std::int64_t steps, const Logs& logs, double elapsed, double per_step,
                       bool final) {
  // Backspaces then a carriage return, as Keras writes on POSIX, so the new line overwrites the old one.
  std::string line(previous_width_, '\b');
  line += '\r';
  std::size_t width = 0;
  if (steps > 0) {
    const std::string count = step_count(step, steps);
    const double done_fraction = static_cast<double>(step) / static_cast<double>(steps);
    const int done = std::clamp(static_cast<int>(bar_cells * done_fraction), 0, bar_cells);
    line += bold + count + reset + " ";
    if (done > 0) line += green + repeat(cell, done) + reset;
    line += white + repeat(cell, bar_cells - done) + reset;
    width += count.size() + 1 + bar_cells;
  } else {
    char count_buffer[32];
    std::snprintf(count_buffer, sizeof count_buffer, "%7lld/Unknown", static_cast<long long>(step));
    const std::string count = count_buffer;
    line += count;
    width += count.size();
  }
  const std::string timing =
      final || steps <= 0 ? seconds_text(elapsed) : format_eta(per_step * static_cast<double>(steps - step));
  const std::string metrics = logs.empty() ? "" : " - " + format_logs(logs);
  line += " " + (bold + timing + reset) + " " + format_step_time(per_step) + metrics;
  width += display_width(" " + timing + " " + format_step_time(per_step) + metrics);
  if (previous_width_ > width) line += std::string(previous_width_ - width, ' ');
  if (final) line += '\n';
  *out_ << line << std::flush;
  previous_width_ = width;
}

void ProgressBar::print_summary(std::int64_t steps, const Logs& logs, double elapsed, double per_step) {
  *out_ << step_count(steps, steps) << " - " << seconds_text(elapsed) << " - " << format_step_time(per_step)
        << (logs.empty() ? "" : " - " + format_logs(logs)) << "\n"
        << std::flush;
}

}  // namespace kiln
