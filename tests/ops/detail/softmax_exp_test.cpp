#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <kiln/ops/detail/softmax_exp.hpp>

namespace {
template <class T>
std::vector<T> exps_of(const std::vector<T>& x) {
  std::vector<T> out(x.size());
  kiln::detail::softmax_exps(x.data(), out.data(), static_cast<std::int64_t>(x.size()));
  return out;
}
}  // namespace

// Through the library (compiled for this machine's vectors), not this file's own instantiation.
TEST_CASE("softmax_exp: within an ulp or so of exp, 0 for -inf, NaN for NaN", "[softmax]") {
  std::vector<float> x;
  for (double value = -110.0; value <= 80.0; value += 0.000731) x.push_back(static_cast<float>(value));
  const std::vector<float> special = {
      0.0f,    -0.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -87.0f,
      -103.5f, -1e30f};
  x.insert(x.end(), special.begin(), special.end());
  const std::vector<float> y = exps_of(x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double expected = std::exp(static_cast<double>(x[i]));
    INFO("x = " << x[i] << ": exp " << expected << ", got " << y[i]);
    if (std::isnan(x[i])) {
      REQUIRE(std::isnan(y[i]));
    } else if (expected < std::numeric_limits<float>::min()) {  // subnormal or 0 (a build may flush it to 0)
      REQUIRE(y[i] >= 0.0f);
      REQUIRE(y[i] < std::numeric_limits<float>::min());
    } else {
      worst = std::max(worst, std::abs(y[i] - expected) / expected);
    }
  }
  CHECK(worst < 2.5e-7);  // (float's ulp is 6e-8 to 1.2e-7 relative)
  CHECK(exps_of<float>({0.0f})[0] == 1.0f);
  CHECK(exps_of<float>({-std::numeric_limits<float>::infinity()})[0] == 0.0f);
  const std::vector<double> wide = exps_of<double>({-1.0, 0.0, -std::numeric_limits<double>::infinity()});
  CHECK(wide[0] == Approx(std::exp(-1.0)).epsilon(1e-15));
  CHECK(wide[1] == 1.0);
  CHECK(wide[2] == 0.0);
}
