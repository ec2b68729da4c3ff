// The opt-in bridge to xtensor: a view without a copy, and a copy back from any expression.
#include <catch2/catch.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include <kiln/core/xtensor_interop.hpp>

using namespace kiln;

TEST_CASE("an Array is viewed as xtensor without a copy, and any expression becomes an Array", "[core][array]") {
  Array array = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto view = as_xarray<float>(array);
  CHECK(view.shape()[0] == 2);
  CHECK(view(1, 2) == 6.0f);
  view(0, 0) = 10.0f;  // writes through to the array's storage
  CHECK(array.flat(0) == 10.0);

  const Array doubled = from_xtensor<double>(xt::arange<double>(6.0) * 2.0);
  CHECK(doubled.shape() == Shape({6}));
  CHECK(doubled.dtype() == DType::float64);
  CHECK(doubled.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
}
