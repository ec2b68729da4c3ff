#include <catch2/catch.hpp>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>

using kiln::Array;
using kiln::Shape;

TEST_CASE("Array::rows is a view that shares and keeps alive its parent's storage", "[core][array]") {
  Array rows;
  {
    const Array parent = Array::from_vector(std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
    rows = parent.rows(1, 2);
    CHECK(rows.raw() == static_cast<const double*>(parent.raw()) + 2);
  }  // the parent handle is gone; the view still owns the block
  CHECK(rows.shape() == Shape{2, 2});
  CHECK(rows.to_vector<double>() == std::vector<double>{2, 3, 4, 5});
  CHECK(rows.rows(1, 1).to_vector<double>() == std::vector<double>{4, 5});
  CHECK(rows.rows(2, 0).shape() == Shape{0, 2});
  CHECK_THROWS_AS(rows.rows(1, 2), kiln::ShapeError);
  CHECK_THROWS_AS(rows.rows(-1, 1), kiln::ShapeError);
}

TEST_CASE("Array::set_rows copies a block of rows in place", "[core][array]") {
  Array target({3, 2}, kiln::DType::float64);
  target.set_rows(1, Array::full({2, 2}, 7.0, kiln::DType::float64));
  CHECK(target.to_vector<double>() == std::vector<double>{0, 0, 7, 7, 7, 7});
  CHECK_THROWS_AS(target.set_rows(2, Array::full({2, 2}, 1.0, kiln::DType::float64)), kiln::ShapeError);
  CHECK_THROWS_AS(target.set_rows(0, Array::full({1, 3}, 1.0, kiln::DType::float64)), kiln::ShapeError);
  CHECK_THROWS_AS(target.set_rows(0, Array::full({1, 2}, 1.0, kiln::DType::float32)), kiln::DTypeError);
}

TEST_CASE("astype converts every element, and an empty Array stays empty", "[core][array]") {
  const Array values = Array::from_vector(std::vector<double>{0.5, -2, 3}, {3});
  const Array single = values.astype(kiln::DType::float32);
  CHECK(single.dtype() == kiln::DType::float32);
  CHECK(single.to_vector<float>() == std::vector<float>{0.5f, -2.f, 3.f});
  CHECK(Array().astype(kiln::DType::float64).empty());
  CHECK(Array().astype(kiln::DType::float32).empty());
}

TEST_CASE("a large array made after one of its size was freed starts at zero, whatever the freed one held",
          "[core][array]") {
  // Arrays of 1 MiB and more are mappings, and a freed one is kept for the next array of its size: the next one
  // must not see the old values.
  for (int round = 0; round < 3; ++round) {
    {
      kiln::Array used(kiln::Shape({512, 1024}), kiln::DType::float32);  // 2 MiB
      float* values = used.data<float>();
      for (std::size_t i = 0; i < used.size(); ++i) values[i] = 1.5f;
    }
    kiln::Array same_size(kiln::Shape({1024, 512}), kiln::DType::float32);
    float* values = same_size.data<float>();
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < same_size.size(); ++i) nonzero += values[i] != 0.0f;
    CHECK(nonzero == 0);
    kiln::Array doubles(kiln::Shape({256, 1024}), kiln::DType::float64);  // 2 MiB again, as doubles
    std::size_t nonzero_doubles = 0;
    for (std::size_t i = 0; i < doubles.size(); ++i) nonzero_doubles += doubles.data<double>()[i] != 0.0;
    CHECK(nonzero_doubles == 0);
    // Both freed holding values, for the next round's arrays to take.
    for (std::size_t i = 0; i < same_size.size(); ++i) values[i] = -2.0f;
    for (std::size_t i = 0; i < doubles.size(); ++i) doubles.data<double>()[i] = 3.0;
  }
}
