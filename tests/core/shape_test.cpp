#include <catch2/catch.hpp>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>

using namespace kiln;

TEST_CASE("Shape prints unknown dimensions as None, like Keras", "[core][shape]") {
  CHECK(Shape({Shape::unknown, 150, 512}).to_string() == "(None, 150, 512)");
  CHECK(Shape({3}).to_string() == "(3,)");
  CHECK(Shape{}.to_string() == "()");
  CHECK(Shape({2, 3}).num_elements() == 6);
  CHECK_THROWS_AS(Shape({Shape::unknown, 3}).num_elements(), ShapeError);
  CHECK(Shape({Shape::unknown, 3}).with_batch(7) == Shape({7, 3}));
  CHECK(Shape({2, 3, 4}).dim(-1) == 4);
  CHECK_THROWS_WITH(Shape({2, 3}).dim(5), Catch::Contains("axis 5 is out of range for rank 2"));
}

TEST_CASE("broadcast_shapes follows NumPy", "[core][shape]") {
  CHECK(broadcast_shapes({4, 1, 3}, {5, 1}, "t") == Shape({4, 5, 3}));
  CHECK(broadcast_shapes({Shape::unknown, 3}, {3}, "t") == Shape({Shape::unknown, 3}));
  CHECK(broadcast_shapes({Shape::unknown, 3}, {1, 3}, "t") == Shape({Shape::unknown, 3}));
  CHECK_THROWS_WITH(broadcast_shapes({2, 3}, {4, 3}, "add 'x'"),
                    Catch::Contains("add 'x'") && Catch::Contains("(2, 3)") && Catch::Contains("(4, 3)"));
}

TEST_CASE("Array converts to and from std::vector and keeps 64-byte aligned storage", "[core][array]") {
  const Array a = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.shape() == Shape({2, 3}));
  CHECK(a.dtype() == DType::float32);
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(reinterpret_cast<std::uintptr_t>(a.raw()) % 64 == 0);
  CHECK_THROWS_AS(a.data<double>(), DTypeError);
  CHECK_THROWS_AS(Array::from_vector(std::vector<float>{1, 2}, {3}), ShapeError);
  CHECK_THROWS_AS(Array(Shape{Shape::unknown, 2}), ShapeError);

  const Array shared = a;
  Array deep = a.copy();
  deep.set_flat(0, 9.0);
  CHECK(shared.flat(0) == 1.0);
  CHECK(a.astype(DType::float64).dtype() == DType::float64);
  CHECK(a.reshape({3, 2}).shape() == Shape({3, 2}));
  CHECK_THROWS_AS(a.reshape({4, 2}), ShapeError);
  CHECK(a.bitwise_equal(a.copy()));
  CHECK_FALSE(a.bitwise_equal(deep));
}

TEST_CASE("Rng streams are reproducible, independent of draw order, and resumable", "[core][rng]") {
  Rng a(42), b(42);
  for (int i = 0; i < 5; ++i) CHECK(a.uniform() == b.uniform());
  Rng root(7);
  const double first = root.fork("dense").uniform();
  root.next();  // drawing from the parent does not shift a forked stream
  CHECK(root.fork("dense").uniform() == first);
  CHECK(root.fork("dense").uniform() != root.fork("dense_1").uniform());

  Rng saved(9);
  saved.normal();
  const std::string state = saved.state();
  const double next = saved.normal();
  Rng restored(0);
  restored.set_state(state);
  CHECK(restored.normal() == next);
  CHECK_THROWS_AS(restored.set_state("not a state"), ValueError);

  Rng uniform(1);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) sum += uniform.normal();
  CHECK(std::abs(sum / 10000) < 0.05);
  CHECK(stable_hash("dense") == 0x3fd80475e188c550ULL);
}
