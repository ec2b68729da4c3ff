#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include <kiln/core/error.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/progress.hpp>

using kiln::Logs;
using kiln::ProgressBar;

namespace {

// The escapes Keras's Progbar writes around the count, the ETA and the two halves of the bar.
std::string bold(const std::string& text) { return "\x1b[1m" + text + "\x1b[0m"; }
std::string green(const std::string& text) { return "\x1b[32m" + text + "\x1b[0m"; }
std::string white(const std::string& text) { return "\x1b[37m" + text + "\x1b[0m"; }
std::string cells(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += "\xe2\x94\x81";  // '━'
  return text;
}

// One epoch of 47 steps: the first takes 0.2 s (warm-up), each later one 21 ms.
double elapsed_after(std::int64_t step) { return 0.2 + 0.021 * static_cast<double>(step - 1); }

void run_epoch(ProgressBar& bar, int epoch, int epochs, const Logs& final_logs) {
  bar.epoch_begin(epoch, epochs);
  for (std::int64_t step = 1; step <= 47; ++step) bar.update(step, 47, Logs{{"loss", 0.5}}, elapsed_after(step));
  bar.epoch_end(47, final_logs, elapsed_after(47));
}

const Logs final_logs{{"val_loss", 0.02}, {"loss", 0.0123}};

}  // namespace

TEST_CASE("values print with four decimals, tiny ones in exponent form", "[train][progress]") {
  CHECK(ProgressBar::format_value(0.0123) == "0.0123");
  CHECK(ProgressBar::format_value(-0.5) == "-0.5000");
  CHECK(ProgressBar::format_value(1234.56789) == "1234.5679");
  CHECK(ProgressBar::format_value(0.0002) == "2.0000e-04");
  CHECK(ProgressBar::format_value(0.001) == "1.0000e-03");  // not above 1e-3
  CHECK(ProgressBar::format_value(-0.0002) == "-2.0000e-04");
  CHECK(ProgressBar::format_value(0.0) == "0.0000e+00");
  CHECK(ProgressBar::format_value(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(ProgressBar::format_value(-std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(ProgressBar::format_value(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(ProgressBar::format_logs(Logs{{"val_loss", 0.02}, {"accuracy", 0.873}, {"loss", 1e-4}}) ==
        "accuracy: 0.8730 - loss: 1.0000e-04 - val_loss: 0.0200");
  CHECK(ProgressBar::format_logs(Logs{}).empty());
}

TEST_CASE("ETA and step times use Keras's units", "[train][progress]") {
  CHECK(ProgressBar::format_eta(5.7) == "5s");
  CHECK(ProgressBar::format_eta(60.0) == "60s");
  CHECK(ProgressBar::format_eta(61.5) == "1:01");
  CHECK(ProgressBar::format_eta(3600.0) == "60:00");
  CHECK(ProgressBar::format_eta(3725.0) == "1:02:05");
  CHECK(ProgressBar::format_eta(9999.0) == "2:46:39");
  CHECK(ProgressBar::format_step_time(2.4) == "2s/step");
  CHECK(ProgressBar::format_step_time(1.0) == "1s/step");
  CHECK(ProgressBar::format_step_time(0.0) == "0s/step");
  CHECK(ProgressBar::format_step_time(0.021) == "21ms/step");
  CHECK(ProgressBar::format_step_time(0.000822) == "822us/step");
}

TEST_CASE("verbose 1 without a terminal prints one plain line per epoch", "[train][progress]") {
  std::ostringstream out;
  ProgressBar bar(out, 1, /*is_terminal=*/false);
  run_epoch(bar, 0, 3, final_logs);
  run_epoch(bar, 1, 3, final_logs);
  // The step time leaves out the slow first step: (1.166 s - 0.2 s) / 46 steps.
  CHECK(out.str() ==
        "Epoch 1/3\n47/47 - 1s - 21ms/step - loss: 0.0123 - val_loss: 0.0200\n"
        "Epoch 2/3\n47/47 - 1s - 21ms/step - loss: 0.0123 - val_loss: 0.0200\n");
}

TEST_CASE("verbose 2 prints one line per epoch, counting the first step", "[train][progress]") {
  for (bool terminal : {false, true}) {
    std::ostringstream out;
    ProgressBar bar(out, 2, terminal);
    bar.epoch_begin(1, 2);
    for (std::int64_t step = 1; step <= 10; ++step)
      bar.update(step, 10, Logs{{"loss", 1.0}}, 0.5 + 0.01 * static_cast<double>(step - 1));
    bar.epoch_end(10, Logs{{"loss", 0.0002}}, 0.59);
    // As Keras at verbose 2 (whose Progbar never sees the batches): 0.59 s / 10 steps.
    CHECK(out.str() == "Epoch 2/2\n10/10 - 1s - 59ms/step - loss: 2.0000e-04\n");
  }
}

TEST_CASE("verbose 0 prints nothing, and a single epoch has no Epoch line", "[train][progress]") {
  std::ostringstream silent;
  ProgressBar quiet(silent, 0, true);
  run_epoch(quiet, 0, 5, final_logs);
  CHECK(silent.str().empty());

  std::ostringstream out;
  ProgressBar bar(out, 1, false);
  run_epoch(bar, 0, 1, Logs{});
  CHECK(out.str() == "47/47 - 1s - 21ms/step\n");
  CHECK(out.str().find('\x1b') == std::string::npos);

  CHECK_THROWS_AS(ProgressBar(out, 3, false), kiln::ConfigError);
}

TEST_CASE("on a terminal the bar is redrawn in place, throttled, and finished with the elapsed time",
          "[train][progress]") {
  std::ostringstream out;
  ProgressBar bar(out, 1, /*is_terminal=*/true);
  bar.epoch_begin(0, 1);

  bar.update(1, 47, Logs{{"loss", 0.5}}, elapsed_after(1));
  // 0.2 s for the first step, 46 to go: ETA 9 s. No cell is done yet.
  const std::string first =
      "\r" + bold(" 1/47") + " " + white(cells(20)) + " " + bold("9s") + " 200ms/step - loss: 0.5000";
  REQUIRE(out.str() == first);
  const std::size_t first_width = 5 + 1 + 20 + std::string(" 9s 200ms/step - loss: 0.5000").size();

  bar.update(2, 47, Logs{{"loss", 0.4}}, elapsed_after(1) + 0.02);  // within 0.05 s of the last draw
  CHECK(out.str() == first);

  bar.update(24, 47, Logs{{"loss", 0.25}}, elapsed_after(24));
  // 24/47 of 20 cells is 10.2: ten green. The line is one column shorter, so one space blanks the old end.
  const std::string middle = std::string(first_width, '\b') + "\r" + bold("24/47") + " " + green(cells(10)) +
                             white(cells(10)) + " " + bold("0s") + " 21ms/step - loss: 0.2500" + " ";
  REQUIRE(out.str() == first + middle);
  const std::size_t middle_width = 5 + 1 + 20 + std::string(" 0s 21ms/step - loss: 0.2500").size();
  CHECK(middle_width + 1 == first_width);

  bar.epoch_end(47, final_logs, elapsed_after(47));
  const std::string last = std::string(middle_width, '\b') + "\r" + bold("47/47") + " " + green(cells(20)) + white("") +
                           " " + bold("1s") + " 21ms/step - loss: 0.0123 - val_loss: 0.0200\n";
  CHECK(out.str() == first + middle + last);
}

TEST_CASE("the live bar always draws the last step and formats long ETAs", "[train][progress]") {
  std::ostringstream out;
  ProgressBar bar(out, 1, true);
  bar.epoch_begin(0, 1);
  bar.update(1, 10000, Logs{}, 1.0);
  CHECK(out.str() == "\r" + bold("    1/10000") + " " + white(cells(20)) + " " + bold("2:46:39") + " 1s/step");

  std::ostringstream end;
  ProgressBar last(end, 1, true);
  last.epoch_begin(0, 1);
  last.update(1, 2, Logs{}, 0.5);
  const std::size_t before = end.str().size();
  last.update(2, 2, Logs{}, 0.51);  // inside the throttle interval, but the last step
  CHECK(end.str().size() > before);
  CHECK(end.str().substr(before).find(bold("2/2") + " " + green(cells(20))) != std::string::npos);
}

TEST_CASE("an unknown number of steps shows the count and the elapsed time", "[train][progress]") {
  std::ostringstream out;
  ProgressBar bar(out, 1, true);
  bar.epoch_begin(0, 1);
  bar.update(5, 0, Logs{{"loss", 1.0}}, 1.0);
  CHECK(out.str() == "\r      5/Unknown " + bold("1s") + " 200ms/step - loss: 1.0000");
}
