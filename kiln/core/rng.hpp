#pragma once
// A seeded random generator passed explicitly: kiln has no hidden global random state. The
// transforms are written here (not std::*_distribution) so draws are identical with every
// standard library.
#include <cstdint>
#include <random>
#include <string>

namespace kiln {

/// A seeded random generator (std::mt19937_64), passed explicitly: kiln has no hidden global random
/// state. Its transforms are kiln's own, so the same seed draws the same numbers with every standard library.
class Rng {
 public:
  /// A generator seeded with `seed`.
  explicit Rng(std::uint64_t seed = 0) : seed_(seed), engine_(seed) {}

  /// An independent stream keyed by `stream_key`; it depends on the seed only, not on past draws,
  /// so adding a consumer shifts no other stream.
  Rng fork(std::uint64_t stream_key) const;
  /// The stream keyed by stable_hash(`stream_name`), e.g. a layer's name.
  Rng fork(const std::string& stream_name) const;

  /// The next raw 64-bit draw.
  std::uint64_t next() { return engine_(); }
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  ///< [0, 1)
  /// Uniform in [low, high).
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  double normal();  ///< Box-Muller over uniform()
  /// Normal with this mean and standard deviation.
  double normal(double mean, double stddev) { return mean + stddev * normal(); }
  double truncated_normal(double mean, double stddev);  ///< redrawn beyond two standard deviations
  std::uint64_t below(std::uint64_t bound);             ///< uniform in [0, bound), unbiased

  /// The seed the generator was made with, or restored by set_state(); fork() derives streams from it.
  std::uint64_t seed() const { return seed_; }
  /// The seed and engine state as text (the seed, then std::mt19937_64's stream format), for saving and
  /// resuming a run.
  std::string state() const;
  void set_state(const std::string& state);  ///< throws ValueError on malformed state

 private:
  std::uint64_t seed_;
  std::mt19937_64 engine_;
};

/// FNV-1a: a stable hash of a name (std::hash may differ between runs and libraries).
std::uint64_t stable_hash(const std::string& text);
/// splitmix64 finalizer: a well-mixed 64-bit value from any 64-bit value. Inline: the random ops call it
/// once an element.
inline std::uint64_t mix64(std::uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

}  // namespace kiln
