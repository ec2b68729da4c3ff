#include <kiln/core/rng.hpp>

#include <cmath>
#include <sstream>

#include <kiln/core/error.hpp>

namespace kiln {

std::uint64_t stable_hash(const std::string& text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

Rng Rng::fork(std::uint64_t stream_key) const { return Rng(mix64(seed_ ^ mix64(stream_key))); }
Rng Rng::fork(const std::string& stream_name) const { return fork(stable_hash(stream_name)); }

double Rng::normal() {
  // Box-Muller; 1 - uniform() lies in (0, 1], so the log is finite.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

double Rng::truncated_normal(double mean, double stddev) {
  for (;;) {
    const double z = normal();
    if (std::fabs(z) <= 2.0) return mean + stddev * z;
  }
}

std::uint64_t Rng::below(std::uint64_t bound) {
  if (bound == 0) throw ValueError("Rng::below: the bound must be positive");
  // Rejection keeps every value equally likely (a plain modulo would favour small ones).
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
  for (;;) {
    const std::uint64_t draw = engine_();
    if (draw < limit) return draw % bound;
  }
}

std::string Rng::state() const {
  std::ostringstream out;
  out << seed_ << ' ' << engine_;
  return out.str();
}

void Rng::set_state(const std::string& state) {
  std::istringstream in(state);
  std::uint64_t seed = 0;
  std::mt19937_64 engine;
  in >> seed >> engine;
  if (in.fail()) throw ValueError("Rng::set_state: malformed generator state");
  seed_ = seed;
  engine_ = engine;
}

}  // namespace kiln
