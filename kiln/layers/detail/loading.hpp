#pragma once
// Models built to be filled from a file. load_model builds the model its file describes, then assigns every
// weight from the file: drawing the initializers first would cost the weights' bytes again (in float64) and
// the time to draw them, for values the file overwrites. While a scope is alive on a thread, layers built on
// it leave their weights zero (large arrays are lazily zeroed pages, so they cost memory only as the file's
// values arrive); the reader must then assign every weight, which kiln's and Keras's readers check.
namespace kiln::detail {

class SkipInitialDraws {
 public:
  SkipInitialDraws();
  ~SkipInitialDraws();
  SkipInitialDraws(const SkipInitialDraws&) = delete;
  SkipInitialDraws& operator=(const SkipInitialDraws&) = delete;

 private:
  bool outer_;
};

// Whether a SkipInitialDraws scope is alive on this thread.
bool skipping_initial_draws();

}  // namespace kiln::detail
