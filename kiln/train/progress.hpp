#pragma once
// ProgressBar: Keras 3's training output (keras/src/utils/progbar.py), byte for byte where it can be.
//
//   Epoch 3/10
//   47/47 ━━━━━━━━━━━━━━━━━━━━ 1s 21ms/step - loss: 0.0123 - mae: 0.0812 - val_loss: 0.0200 - val_mae: 0.1001
//
// verbose 1 on a terminal redraws a live bar after each batch (bold count, green done cells, ETA) and ends
// the epoch with that line showing the elapsed time; verbose 2, or verbose 1 when the output is not a
// terminal (logs, CI), prints one plain line per epoch instead:
//
//   47/47 - 1s - 21ms/step - loss: 0.0123 - val_loss: 0.0200
//
// (Keras redraws with \r even into a pipe, which leaves CI logs full of control characters.) Log values
// are shown as given: fit() already passes running epoch means, so they are not averaged again.
//
// The caller passes the seconds since the epoch began, so output is a pure function of its inputs:
//
//   kiln::ProgressBar bar(std::cout, /*verbose=*/1, kiln::ProgressBar::stdout_is_terminal());
//   bar.epoch_begin(epoch, epochs);
//   for (step = 1..steps) bar.update(step, steps, batch_logs, seconds_since_epoch_began);
//   bar.epoch_end(steps, epoch_logs, seconds_since_epoch_began);
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include <kiln/train/callbacks.hpp>

namespace kiln {

/// fit()'s output, as Keras 3's Progbar prints it: a live bar redrawn after each batch on a terminal, or one
/// line per epoch. The caller passes the elapsed time, so the output depends only on the arguments.
class ProgressBar {
 public:
  /// To std::cout, live when stdout is a terminal.
  explicit ProgressBar(int verbose = 1);
  /// verbose: 0 prints nothing, 1 the live bar (or one line per epoch when !is_terminal), 2 one line per
  /// epoch. Throws ConfigError for another value. ANSI colours are written only when is_terminal.
  ProgressBar(std::ostream& out, int verbose, bool is_terminal);

  /// `epoch` counts from 0, as callbacks do; prints "Epoch {epoch + 1}/{epochs}" only when epochs > 1.
  void epoch_begin(int epoch, int epochs);
  /// After batch `step` (counted from 1) of `steps` (0 or less: unknown). Redraws the live bar at most
  /// every 0.05 s, and always at the last step; without a live bar it prints nothing.
  void update(std::int64_t step, std::int64_t steps, const Logs& logs, double elapsed);
  /// The epoch's final line, with every log (val_* included).
  void epoch_end(std::int64_t steps, const Logs& logs, double elapsed);

  /// 0, 1 or 2, as given.
  int verbose() const { return verbose_; }
  /// Whether the output is treated as a terminal: ANSI colours, and at verbose 1 the live bar.
  bool is_terminal() const { return is_terminal_; }

  /// "loss: 0.0123 - val_loss: 2.0000e-04": keys in the logs' (alphabetical) order, values by format_value.
  static std::string format_logs(const Logs& logs);
  /// "%.4f" when |value| > 1e-3, else "%.4e" (so small losses keep their digits); NaN prints "nan".
  static std::string format_value(double value);
  /// Keras's ETA: "42s", "3:07" past a minute, "1:02:03" past an hour (each field truncated).
  static std::string format_eta(double seconds);
  /// "2s/step", "21ms/step" or "822us/step" (0 prints "0s/step").
  static std::string format_step_time(double seconds);
  /// Whether standard output is a terminal (isatty), for the constructor's is_terminal.
  static bool stdout_is_terminal();

 private:
  double step_time(std::int64_t step, double elapsed);
  void draw(std::int64_t step, std::int64_t steps, const Logs& logs, double elapsed, double per_step, bool final);
  void print_summary(std::int64_t steps, const Logs& logs, double elapsed, double per_step);

  std::ostream* out_;
  int verbose_;
  bool is_terminal_;
  std::size_t previous_width_ = 0;   ///< of the live line now on screen, to blank what a shorter one leaves
  std::optional<double> last_draw_;  ///< elapsed time of the last redraw, for the 0.05 s throttle
  std::optional<double> first_step_end_;
};

}  // namespace kiln
