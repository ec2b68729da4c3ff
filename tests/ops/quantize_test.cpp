// The int8 ops (ops/quantize.cpp) and the int8 product under them (ops/detail/gemm.cpp's gemm_s8s8s32): against
// plain references written from Keras's formulas, on both product backends and several thread counts; the
// straight-through gradient; and the int8 dtype's rules in the graph and in Arrays.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/isa.hpp>
#include <kiln/ops/ops.hpp>

#include "support/gradcheck.hpp"

using kiln::Array;
using kiln::DType;
using kiln::Shape;
using kiln::detail::Int8GemmBackend;

namespace {

std::vector<std::int8_t> random_int8(std::size_t count, kiln::Rng& rng) {
  std::vector<std::int8_t> values(count);
  for (auto& value : values) value = static_cast<std::int8_t>(static_cast<int>(rng.uniform(0.0, 256.0)) - 128);
  return values;
}

Array int8_array(const Shape& shape, kiln::Rng& rng) {
  return Array::from_vector(random_int8(static_cast<std::size_t>(shape.num_elements()), rng), shape);
}

// Keras's int8 Dense product in T, written out: each row's AbsMaxQuantizer, the int32 product, the division.
template <class T>
std::vector<T> keras_int8_product(const std::vector<T>& x, std::int64_t rows, std::int64_t k, const Array& kernel,
                                  const std::vector<T>& kernel_scale) {
  const std::int64_t n = kernel.shape().dim(1);
  std::vector<T> y(static_cast<std::size_t>(rows * n));
  for (std::int64_t i = 0; i < rows; ++i) {
    T largest = 0;
    for (std::int64_t p = 0; p < k; ++p) largest = std::max(largest, std::abs(x[i * k + p]));
    const T scale = T(127) / (largest + T(1e-7));
    std::vector<std::int32_t> q(static_cast<std::size_t>(k));
    for (std::int64_t p = 0; p < k; ++p)
      q[p] = static_cast<std::int32_t>(std::clamp(std::nearbyint(x[i * k + p] * scale), T(-127), T(127)));
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t sum = 0;
      for (std::int64_t p = 0; p < k; ++p) sum += q[p] * static_cast<std::int64_t>(kernel.flat(p * n + j));
      y[i * n + j] = static_cast<T>(sum) / (kernel_scale[j] * scale);
    }
  }
  return y;
}

template <class T>
void check_quantized_matmul(const Shape& x_shape, std::int64_t n, int threads) {
  kiln::Rng rng(static_cast<std::uint64_t>(x_shape.num_elements() * 31 + n));
  const std::int64_t k = x_shape.dim(-1), rows = x_shape.num_elements() / k;
  const DType dtype = kiln::dtype_of<T>::value;
  const Array x = kiln::testing::random_array(x_shape, rng, dtype, -3.0, 3.0);
  const Array kernel = int8_array(Shape{k, n}, rng);
  const Array scale = kiln::testing::random_array(Shape{n}, rng, dtype, 20.0, 400.0);
  const std::vector<T> expected = keras_int8_product(x.to_vector<T>(), rows, k, kernel, scale.to_vector<T>());
  const int before = kiln::get_num_threads();
  kiln::set_num_threads(threads);
  kiln::Graph graph;
  const kiln::Tensor input = graph.placeholder(x_shape, dtype, "x");
  const kiln::Tensor y = kiln::ops::quantized_matmul(input, graph.variable("kernel", kernel, false),
                                                     graph.variable("scale", scale, false));
  kiln::Program program(graph, {y});
  program.feed(input, x);
  program.run();
  const Array out = program.fetch(y);
  kiln::set_num_threads(before);
  std::vector<std::int64_t> dims = x_shape.dims();
  dims.back() = n;
  REQUIRE(out.shape() == Shape(dims));
  // Exact: the same operations in T, the int32 sums exact on every backend and split.
  for (std::size_t i = 0; i < expected.size(); ++i) REQUIRE(static_cast<T>(out.flat(i)) == expected[i]);
}

}  // namespace

TEST_CASE("gemm_s8s8s32 sums exactly on every backend", "[ops][quantize][gemm]") {
  kiln::Rng rng(3);
  struct Case {
    std::int64_t m, n, k, lda, ldb, ldc;
  };
  // (the VNNI kernel's cases: whole and partial 64-column blocks, k not a multiple of 4, 1 to 4 rows and more)
  for (const Case c : {Case{1, 1, 1, 1, 1, 1}, Case{1, 300, 64, 64, 300, 300}, Case{3, 17, 33, 40, 20, 19},
                       Case{16, 64, 40, 40, 64, 64}, Case{5, 130, 129, 129, 130, 131}, Case{7, 3, 0, 1, 3, 3},
                       Case{2, 64, 7, 7, 64, 64}, Case{4, 200, 1030, 1030, 200, 200}, Case{1, 65, 3, 3, 65, 65},
                       // one row over 1024 columns and more: B streamed in order, then the partial last block
                       Case{1, 1100, 130, 130, 1110, 1105}, Case{1, 2048, 3, 3, 2048, 2048}}) {
    INFO(c.m << "x" << c.n << "x" << c.k);
    const std::vector<std::int8_t> a = random_int8(static_cast<std::size_t>(c.m * c.lda), rng);
    const std::vector<std::int8_t> b = random_int8(static_cast<std::size_t>(std::max<std::int64_t>(c.k, 1) * c.ldb), rng);
    std::vector<std::int32_t> expected(static_cast<std::size_t>(c.m * c.ldc), -7);
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        std::int32_t sum = 0;
        for (std::int64_t p = 0; p < c.k; ++p) sum += a[i * c.lda + p] * b[p * c.ldb + j];
        expected[i * c.ldc + j] = sum;
      }
    for (const Int8GemmBackend backend : {Int8GemmBackend::onednn, Int8GemmBackend::plain, Int8GemmBackend::vnni_rows}) {
      std::vector<std::int32_t> c_out(expected.size(), -7);  // between rows (ldc > n) stays untouched
      kiln::detail::gemm_s8s8s32_with(backend, c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, c_out.data(), c.ldc);
      CHECK(c_out == expected);
    }
  }
  // The extremes: -128 · -128 summed over a long row.
  const std::int64_t k = 4096;
  std::vector<std::int8_t> a(k, -128), b(k * 2, -128);
  std::vector<std::int32_t> c(2);
  for (const Int8GemmBackend backend : {Int8GemmBackend::onednn, Int8GemmBackend::plain, Int8GemmBackend::vnni_rows}) {
    kiln::detail::gemm_s8s8s32_with(backend, 1, 2, k, a.data(), k, b.data(), 2, c.data(), 2);
    CHECK(c[0] == 128 * 128 * 4096);
    CHECK(c[1] == 128 * 128 * 4096);
  }
}

TEST_CASE("gemm_s8s8s32 with B stored transposed sums exactly on every backend", "[ops][quantize][gemm]") {
  // A tied embedding read in reverse: B is (n × k), one row of it per output column.
  kiln::Rng rng(4);
  struct Case {
    std::int64_t m, n, k, lda, ldb, ldc;
  };
  // (the VNNI kernel's cases: k a multiple of 64 or not, below 64, long; 1 to 4 rows and more)
  for (const Case c : {Case{1, 1, 1, 1, 1, 1}, Case{1, 300, 64, 64, 64, 300}, Case{3, 17, 33, 40, 35, 19},
                       Case{5, 130, 129, 129, 130, 131}, Case{7, 3, 0, 1, 1, 3}, Case{2, 50, 200, 200, 200, 50},
                       Case{4, 70, 1030, 1030, 1030, 70}, Case{1, 257, 768, 768, 768, 257}}) {
    INFO(c.m << "x" << c.n << "x" << c.k);
    const std::vector<std::int8_t> a = random_int8(static_cast<std::size_t>(c.m * c.lda), rng);
    const std::vector<std::int8_t> b = random_int8(static_cast<std::size_t>(c.n * c.ldb), rng);
    std::vector<std::int32_t> expected(static_cast<std::size_t>(c.m * c.ldc), -7);
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        std::int32_t sum = 0;
        for (std::int64_t p = 0; p < c.k; ++p) sum += a[i * c.lda + p] * b[j * c.ldb + p];
        expected[i * c.ldc + j] = sum;
      }
    for (const Int8GemmBackend backend : {Int8GemmBackend::onednn, Int8GemmBackend::plain, Int8GemmBackend::vnni_rows}) {
      std::vector<std::int32_t> c_out(expected.size(), -7);
      kiln::detail::gemm_s8s8s32_with(backend, c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, c_out.data(), c.ldc,
                                      true);
      CHECK(c_out == expected);
    }
    std::vector<std::int32_t> c_out(expected.size(), -7);  // and as the op picks the backend
    kiln::detail::gemm_s8s8s32(c.m, c.n, c.k, a.data(), c.lda, b.data(), c.ldb, c_out.data(), c.ldc, true);
    CHECK(c_out == expected);
  }
  // The extremes, past the point where (a + 128)·b sums leave int32.
  const std::int64_t k = 70000;
  std::vector<std::int8_t> a(k, -128), b(k * 2, -128);
  for (std::int64_t p = 0; p < k; p += 3) b[p] = 127;
  std::int64_t expected = 0;
  for (std::int64_t p = 0; p < k; ++p) expected += -128 * static_cast<std::int64_t>(b[p]);
  REQUIRE(expected > std::numeric_limits<std::int32_t>::min());
  std::vector<std::int32_t> c(2);
  for (const Int8GemmBackend backend : {Int8GemmBackend::onednn, Int8GemmBackend::plain, Int8GemmBackend::vnni_rows}) {
    kiln::detail::gemm_s8s8s32_with(backend, 1, 2, k, a.data(), k, b.data(), k, c.data(), 2, true);
    CHECK(c[0] == expected);
    CHECK(c[1] == 128 * 128 * k);
  }
}

TEST_CASE("QuantizedMatMul runs Keras's EinsumDense kernels and a tied table in reverse", "[ops][quantize]") {
  // (d_model, heads, depth) with one input axis, (heads, depth, d_model) with two, and a (vocabulary, features)
  // table read transposed: each the same as the (K, N) product of the kernel laid out as Dense's.
  kiln::Rng rng(6);
  // On this CPU's kernels, and held at x86-64-v3 (no AVX-512: oneDNN or kiln's loop instead of the VNNI kernel).
  std::vector<kiln::detail::Isa> isas = {kiln::detail::active_isa()};
  for (const kiln::detail::Isa isa : kiln::detail::runnable_isas())
    if (isa == kiln::detail::Isa::x86_64_v3) isas.push_back(isa);
  for (const kiln::detail::Isa isa : isas)
  for (const int threads : {1, 2}) {
    const kiln::detail::ScopedIsa scoped(isa);
    INFO(kiln::detail::isa_name(isa));
    const int before = kiln::get_num_threads();
    kiln::set_num_threads(threads);
    for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{6}}) {
      INFO(rows << " rows, " << threads << " threads");
      const Array x = kiln::testing::random_array(Shape{rows, 24}, rng, DType::float32, -2.0, 2.0);
      const Array query = int8_array(Shape{24, 3, 4}, rng);  // K = 24, N = 12
      const Array query_scale = kiln::testing::random_array(Shape{1, 1, 3, 4}, rng, DType::float32, 20.0, 400.0);
      const Array output = int8_array(Shape{2, 12, 5}, rng);  // K = 24, N = 5
      const Array output_scale = kiln::testing::random_array(Shape{1, 1, 5}, rng, DType::float32, 20.0, 400.0);
      const Array table = int8_array(Shape{70, 24}, rng);  // N = 70, K = 24, transposed
      const Array table_scale = kiln::testing::random_array(Shape{70}, rng, DType::float32, 20.0, 400.0);
      Array table_t(Shape{24, 70}, DType::int8);
      for (std::int64_t v = 0; v < 70; ++v)
        for (std::int64_t p = 0; p < 24; ++p) table_t.set_flat(static_cast<std::size_t>(p * 70 + v), table.flat(v * 24 + p));
      struct Form {
        const Array *kernel, *scale;
        int input_axes;
        bool transposed;
        Array as_dense;  // (K, N)
      };
      const Form forms[] = {{&query, &query_scale, 1, false, query.reshape(Shape{24, 12})},
                            {&output, &output_scale, 2, false, output.reshape(Shape{24, 5})},
                            {&table, &table_scale, 1, true, table_t}};
      for (const Form& form : forms) {
        const std::int64_t n = form.as_dense.shape().dim(1);
        const std::vector<float> expected =
            keras_int8_product(x.to_vector<float>(), rows, 24, form.as_dense, form.scale->reshape(Shape{n}).to_vector<float>());
        const Array out = kiln::testing::evaluate(
            [&](const std::vector<kiln::Tensor>& in) {
              kiln::Graph& g = in[0].graph();
              return kiln::ops::quantized_matmul(in[0], g.variable("k", *form.kernel, false),
                                                 g.variable("s", *form.scale, false), true, form.input_axes,
                                                 form.transposed);
            },
            {x});
        REQUIRE(out.shape() == Shape({rows, n}));
        for (std::size_t i = 0; i < expected.size(); ++i) REQUIRE(static_cast<float>(out.flat(i)) == expected[i]);
      }
    }
    kiln::set_num_threads(before);
  }
}

TEST_CASE("QuantizedMatMul's gradient through EinsumDense kernels and a transposed table", "[ops][quantize]") {
  kiln::Rng rng(10);
  const Array x = kiln::testing::random_array(Shape{3, 8}, rng, DType::float64);
  const Array weights = kiln::testing::random_array(Shape{3, 6}, rng, DType::float64);
  const Array kernel3 = int8_array(Shape{2, 4, 6}, rng);  // two input axes
  const Array scale3 = kiln::testing::random_array(Shape{1, 1, 6}, rng, DType::float64, 20.0, 200.0);
  const Array table = int8_array(Shape{6, 8}, rng);  // transposed
  const Array table_scale = kiln::testing::random_array(Shape{6}, rng, DType::float64, 20.0, 200.0);
  for (const bool transposed : {false, true}) {
    INFO((transposed ? "transposed" : "two input axes"));
    const Array& kernel = transposed ? table : kernel3;
    const Array& scale = transposed ? table_scale : scale3;
    const auto quantized = kiln::testing::evaluate_with_gradients(
        [&](const std::vector<kiln::Tensor>& in) {
          kiln::Graph& g = in[0].graph();
          return kiln::ops::quantized_matmul(in[0], g.variable("k", kernel, false), g.variable("s", scale, false), true,
                                             transposed ? 1 : 2, transposed);
        },
        {x}, weights);
    const auto dequantized = kiln::testing::evaluate_with_gradients(
        [&](const std::vector<kiln::Tensor>& in) {
          kiln::Graph& g = in[0].graph();
          const kiln::Tensor floats =
              kiln::ops::dequantize(g.variable("k", kernel, false), g.variable("s", scale, false), transposed);
          return transposed ? kiln::ops::matmul(in[0], floats, false, true)
                            : kiln::ops::matmul(in[0], kiln::ops::reshape(floats, {8, 6}));
        },
        {x}, weights);
    REQUIRE(quantized.size() == 2);
    CHECK(kiln::testing::max_relative_difference(quantized[1], dequantized[1]) <= 1e-14);
    CHECK(kiln::testing::max_relative_difference(quantized[0], dequantized[0]) <= 2e-2);
  }
}

TEST_CASE("QuantizedMatMul computes Keras's int8 Dense product exactly, on any thread count", "[ops][quantize]") {
  for (const int threads : {1, 3}) {
    INFO(threads << " threads");
    check_quantized_matmul<float>(Shape{2, 3, 20}, 9, threads);
    check_quantized_matmul<double>(Shape{2, 3, 20}, 9, threads);
    check_quantized_matmul<float>(Shape{64, 96}, 40, threads);   // rows split over workers
    check_quantized_matmul<float>(Shape{3, 2048}, 512, threads);  // few rows: columns split in blocks of 64
    check_quantized_matmul<float>(Shape{1, 7}, 1, threads);
    check_quantized_matmul<float>(Shape{1, 768}, 3072, threads);  // one row: the VNNI kernel, columns split
    check_quantized_matmul<double>(Shape{1, 100}, 70, threads);
  }
}

TEST_CASE("QuantizedMatMul is as exact on the kernels of a CPU without AVX-512", "[ops][quantize]") {
  // One row (the VNNI kernel's case on this CPU) and many, with the dispatch held at x86-64-v3 (no AVX-512): the
  // products then run on oneDNN or kiln's loop.
  for (const kiln::detail::Isa isa : kiln::detail::runnable_isas()) {
    if (isa != kiln::detail::Isa::x86_64_v3 && isa != kiln::detail::Isa::x86_64_v2) continue;
    INFO(kiln::detail::isa_name(isa));
    const kiln::detail::ScopedIsa scoped(isa);
    check_quantized_matmul<float>(Shape{1, 300}, 200, 1);
    check_quantized_matmul<float>(Shape{64, 96}, 40, 1);
  }
}

TEST_CASE("QuantizedMatMul without input quantization divides x times the int8 kernel by its scale", "[ops][quantize]") {
  kiln::Rng rng(5);
  const Array x = kiln::testing::random_array(Shape{4, 12}, rng, DType::float64);
  const Array kernel = int8_array(Shape{12, 5}, rng);
  const Array scale = kiln::testing::random_array(Shape{5}, rng, DType::float64, 20.0, 200.0);
  const Array out = kiln::testing::evaluate(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::quantized_matmul(in[0], g.variable("k", kernel, false), g.variable("s", scale, false), false);
      },
      {x});
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 5; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < 12; ++p) sum += x.flat(i * 12 + p) * kernel.flat(p * 5 + j);
      CHECK(out.flat(i * 5 + j) == Approx(sum / scale.flat(j)).epsilon(1e-12));
    }
}

TEST_CASE("QuantizedMatMul's gradient is Keras's: through the float kernel the int8 one stands for", "[ops][quantize]") {
  // Keras's custom gradient ignores the rounding (a straight-through estimator): dx = dy · (kernel / scale)ᵀ, which
  // is the gradient of x · dequantize(kernel, scale). Central differences of the rounded function would not be.
  kiln::Rng rng(9);
  const Array x = kiln::testing::random_array(Shape{3, 2, 6}, rng, DType::float64);
  const Array kernel = int8_array(Shape{6, 4}, rng);
  const Array scale = kiln::testing::random_array(Shape{4}, rng, DType::float64, 20.0, 200.0);
  const Array weights = kiln::testing::random_array(Shape{3, 2, 4}, rng, DType::float64);
  const auto quantized = kiln::testing::evaluate_with_gradients(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::quantized_matmul(in[0], g.variable("k", kernel, false), g.variable("s", scale, false));
      },
      {x}, weights);
  const auto dequantized = kiln::testing::evaluate_with_gradients(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::matmul(in[0], kiln::ops::dequantize(g.variable("k", kernel, false), g.variable("s", scale, false)));
      },
      {x}, weights);
  REQUIRE(quantized.size() == 2);
  CHECK(kiln::testing::max_relative_difference(quantized[1], dequantized[1]) <= 1e-14);
  // And the forward is close to the float product (Keras's own int8 error: a few parts in a thousand).
  CHECK(kiln::testing::max_relative_difference(quantized[0], dequantized[0]) <= 2e-2);
}

TEST_CASE("Dequantize divides each column by its scale", "[ops][quantize]") {
  const Array q = Array::from_vector(std::vector<std::int8_t>{-128, 0, 127, 5, -5, 64}, Shape{2, 3});
  const Array scale = Array::from_vector(std::vector<float>{2.0f, 4.0f, 127.0f}, Shape{3});
  kiln::Graph graph;
  const kiln::Tensor out = kiln::ops::dequantize(graph.variable("q", q, false), graph.variable("s", scale, false));
  kiln::Program program(graph, {out});
  program.run();
  const Array value = program.fetch(out);
  CHECK(value.dtype() == DType::float32);
  CHECK(value.to_vector<float>() == std::vector<float>{-64.0f, 0.0f, 1.0f, 2.5f, -1.25f, 64.0f / 127.0f});
}

TEST_CASE("int8 is for quantized weights: ops refuse it where they compute, variables where they train",
          "[ops][quantize]") {
  using Catch::Matchers::Contains;
  kiln::Graph graph;
  const kiln::Tensor x = graph.placeholder(Shape{2, 4}, DType::float32, "x");
  const kiln::Tensor q = graph.variable("q", Array(Shape{4, 3}, DType::int8), false);
  const kiln::Tensor scale = graph.variable("scale", Array::full(Shape{3}, 1.0), false);
  CHECK_THROWS_WITH(kiln::ops::relu(q), Contains("relu") && Contains("computes in float32 or float64") && Contains("int8(4, 3)"));
  CHECK_THROWS_AS(x + q, kiln::DTypeError);
  // The kernel must be int8, its scale x's dtype, and the shapes must agree.
  const kiln::Tensor float_kernel = graph.variable("w", Array(Shape{4, 3}), false);
  CHECK_THROWS_WITH(kiln::ops::quantized_matmul(x, float_kernel, scale), Contains("input 1 must be int8"));
  CHECK_THROWS_AS(kiln::ops::quantized_matmul(x, q, graph.variable("s64", Array(Shape{3}, DType::float64), false)),
                  kiln::DTypeError);
  const kiln::Tensor wide = graph.variable("q5", Array(Shape{5, 3}, DType::int8), false);
  CHECK_THROWS_WITH(kiln::ops::quantized_matmul(x, wide, scale), Contains("quantized_matmul") && Contains("input_dim"));
  CHECK_THROWS_WITH(kiln::ops::quantized_matmul(x, q, graph.variable("s4", Array(Shape{4}), false)),
                    Contains("kernel_scale must be (units,)"));
  CHECK_THROWS_WITH(graph.variable("trained", Array(Shape{2}, DType::int8)), Contains("cannot be trainable"));
}

TEST_CASE("int8 Arrays round to nearest, ties to even, and saturate", "[core][quantize]") {
  Array a(Shape{8}, DType::int8);
  const std::vector<double> given = {2.5, 3.5, -2.5, 126.7, 300.0, -200.0, std::nan(""), -0.4};
  for (std::size_t i = 0; i < given.size(); ++i) a.set_flat(i, given[i]);
  CHECK(a.to_vector<int>() == std::vector<int>{2, 4, -2, 127, 127, -128, 0, 0});
  CHECK(a.nbytes() == 8);
  CHECK(kiln::dtype_from_name("int8") == DType::int8);
  CHECK(std::string(kiln::dtype_name(DType::int8)) == "int8");
  CHECK(a.astype(DType::float32).to_vector<float>() == std::vector<float>{2, 4, -2, 127, 127, -128, 0, 0});
  CHECK_THROWS_AS(a.data<float>(), kiln::DTypeError);
}

TEST_CASE("QuantizedMatMul's gradient rule against central differences where the op is linear", "[ops][quantize][gradcheck]") {
  // Without input quantization the op is x · (kernel / scale), and Keras's gradient is its true derivative.
  kiln::Rng rng(17);
  const Array kernel = int8_array(Shape{5, 3}, rng);
  const Array scale = kiln::testing::random_array(Shape{3}, rng, DType::float64, 20.0, 200.0);
  kiln::testing::GradcheckOptions options;
  options.label = "quantized_matmul";
  const auto report = kiln::testing::gradcheck(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::quantized_matmul(in[0], g.variable("k", kernel, false), g.variable("s", scale, false), false);
      },
      {kiln::testing::random_array(Shape{2, 4, 5}, rng, DType::float64)}, options);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-7);
  CHECK(report.num_checked > 0);
}

TEST_CASE("DequantizeInt4 unpacks two values a byte and applies each block's scale and zero point", "[ops][quantize]") {
  // Keras's pack_int4 along the units: column 2i in the low nibble, 2i + 1 in the high one; 3 units pad to 2 bytes.
  const std::vector<int> values = {-3, 7, 2, /**/ -8, 1, 0, /**/ 5, -1, -6};  // (3 rows, 3 units)
  std::vector<std::int8_t> packed;
  for (int row = 0; row < 3; ++row)
    for (int pair = 0; pair < 2; ++pair) {
      const int low = values[row * 3 + 2 * pair] & 0x0f;
      const int high = 2 * pair + 1 < 3 ? values[row * 3 + 2 * pair + 1] & 0x0f : 0;
      packed.push_back(static_cast<std::int8_t>(static_cast<std::uint8_t>(low | (high << 4))));
    }
  const Array kernel = Array::from_vector(packed, Shape{3, 2});
  const Array scale = Array::from_vector(std::vector<double>{0.5, 0.25, 2.0, 1.0, 0.125, 4.0}, Shape{2, 3});
  const Array zero = Array::from_vector(std::vector<std::int8_t>{1, 0, -1, 2, -2, 0}, Shape{2, 3});
  const Array g_idx = Array::from_vector(std::vector<double>{0, 0, 1}, Shape{3});
  kiln::Graph graph;
  const kiln::Tensor out = kiln::ops::dequantize_int4(graph.variable("k", kernel, false), graph.variable("s", scale, false),
                                                      graph.variable("z", zero, false), graph.variable("g", g_idx, false), 3);
  kiln::Program program(graph, {out});
  program.run();
  const Array value = program.fetch(out);
  REQUIRE(value.shape() == Shape({3, 3}));
  for (int row = 0; row < 3; ++row)
    for (int unit = 0; unit < 3; ++unit) {
      const int group = row < 2 ? 0 : 1;
      const double expected = (values[row * 3 + unit] - zero.flat(group * 3 + unit)) * scale.flat(group * 3 + unit);
      CHECK(value.flat(row * 3 + unit) == expected);
    }
  // A g_idx entry outside the groups is refused when the step runs; bad shapes when the node is made.
  kiln::Graph bad;
  const kiln::Tensor wrong = kiln::ops::dequantize_int4(
      bad.variable("k", kernel, false), bad.variable("s", scale, false), bad.variable("z", zero, false),
      bad.variable("g", Array::from_vector(std::vector<double>{0, 2, 1}, Shape{3}), false), 3);
  kiln::Program failing(bad, {wrong});
  CHECK_THROWS_WITH(failing.run(), Catch::Matchers::Contains("g_idx[1] = 2") && Catch::Matchers::Contains("2 groups"));
  CHECK_THROWS_WITH(kiln::ops::dequantize_int4(bad.variable("k2", kernel, false), bad.variable("s2", scale, false),
                                               bad.variable("z2", zero, false), bad.variable("g2", g_idx, false), 5),
                    Catch::Matchers::Contains("ceil(5 / 2)"));
}

namespace {
// Keras's pack_int4 along the last axis of a (rows, columns) array of values in [-8, 7].
Array pack_int4(const Array& values) {
  const std::int64_t rows = values.shape().dim(0), columns = values.shape().dim(1), bytes = (columns + 1) / 2;
  std::vector<std::int8_t> packed;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < bytes; ++b) {
      const int low = static_cast<int>(values.flat(r * columns + 2 * b)) & 0x0f;
      const int high = 2 * b + 1 < columns ? static_cast<int>(values.flat(r * columns + 2 * b + 1)) & 0x0f : 0;
      packed.push_back(static_cast<std::int8_t>(static_cast<std::uint8_t>(low | (high << 4))));
    }
  return Array::from_vector(packed, Shape{rows, bytes});
}

// Keras's AbsMaxQuantizer scale of row `row` of x (rows of `width` values), or 1 without input quantization; and a
// value of that row as the product multiplies it.
float keras_row_scale(const Array& x, std::int64_t row, std::int64_t width, bool quantize_inputs) {
  float largest = 0;
  for (std::int64_t c = 0; c < width; ++c) largest = std::max(largest, std::abs(static_cast<float>(x.flat(row * width + c))));
  return quantize_inputs ? 127.0f / (largest + 1e-7f) : 1.0f;
}
float as_multiplied(float value, float scale, bool quantize_inputs) {
  return quantize_inputs ? std::clamp(std::nearbyint(value * scale), -127.0f, 127.0f) : value;
}

Array int4_values(const Shape& shape, kiln::Rng& rng) {
  std::vector<std::int8_t> values(static_cast<std::size_t>(shape.num_elements()));
  for (auto& value : values) value = static_cast<std::int8_t>(static_cast<int>(rng.uniform(0.0, 16.0)) - 8);
  return Array::from_vector(values, shape);
}
}  // namespace

TEST_CASE("packed int4 kernels and tables: the same results as their unpacked int8 values", "[ops][quantize]") {
  // Per-channel int4 (Keras's "int4/-1") is int8's arithmetic on values in [-8, 7] stored two a byte: QuantizedMatMul
  // (with and without input quantization, and its gradient), Dequantize and QuantizedGather give, bitwise, what
  // they give for the unpacked int8 array. An odd unit count pads the last byte.
  kiln::Rng rng(29);
  for (const std::int64_t units : {std::int64_t{7}, std::int64_t{64}}) {
    INFO(units << " units");
    const Array values = int4_values(Shape{9, units}, rng);
    const Array packed = pack_int4(values);
    const Array scale = kiln::testing::random_array(Shape{units}, rng, DType::float32, 2.0, 9.0);
    const Array x = kiln::testing::random_array(Shape{3, 4, 9}, rng, DType::float32, -2.0, 2.0);
    for (const bool quantize_inputs : {true, false}) {
      INFO("quantize_inputs " << quantize_inputs);
      auto run = [&](const Array& kernel, std::int64_t int4_units) {
        kiln::Graph graph;
        const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
        const kiln::Tensor y = kiln::ops::quantized_matmul(input, graph.variable("k", kernel, false),
                                                           graph.variable("s", scale, false), quantize_inputs, 1,
                                                           false, int4_units);
        const kiln::Tensor dx = kiln::gradients(kiln::ops::sum(kiln::ops::square(y)), {input}).front();
        kiln::Program program(graph, {y, dx});
        program.feed(input, x);
        program.run();
        return std::make_pair(program.fetch(y), program.fetch(dx));
      };
      const auto [y4, dx4] = run(packed, units);
      const auto [y8, dx8] = run(values, 0);
      CHECK(y4.bitwise_equal(y8));
      CHECK(dx4.bitwise_equal(dx8));
    }
    // Dequantize of the packed values, against the int8 ones.
    kiln::Graph graph;
    const kiln::Tensor d4 = kiln::ops::dequantize(graph.variable("p", packed, false), graph.variable("s", scale, false),
                                                  false, units);
    const kiln::Tensor d8 = kiln::ops::dequantize(graph.variable("v", values, false), graph.variable("s8", scale, false));
    kiln::Program program(graph, {d4, d8});
    program.run();
    CHECK(program.fetch(d4).bitwise_equal(program.fetch(d8)));
  }
  // A packed table: per row, value / scale[id]; by groups of columns, (value - zero[id, g]) · scale[id, g].
  const Array table_values = int4_values(Shape{6, 5}, rng);
  const Array table = pack_int4(table_values);
  const Array row_scale = kiln::testing::random_array(Shape{6}, rng, DType::float32, 2.0, 9.0);
  const Array group_scale = kiln::testing::random_array(Shape{6, 2}, rng, DType::float32, 0.01, 0.2);
  const Array zero = int4_values(Shape{6, 2}, rng);
  const Array g_idx = Array::from_vector(std::vector<float>{0, 0, 0, 1, 1}, Shape{5});
  const Array ids = Array::from_vector(std::vector<float>{5, 0, 3, 3}, Shape{2, 2});
  kiln::Graph graph;
  const kiln::Tensor id = graph.placeholder(ids.shape(), DType::float32, "ids");
  const kiln::Tensor per_row = kiln::ops::quantized_gather_int4(graph.variable("t", table, false),
                                                                graph.variable("s", row_scale, false), id, 5);
  const kiln::Tensor grouped = kiln::ops::quantized_gather_int4(
      graph.variable("t2", table, false), graph.variable("gs", group_scale, false), id, 5,
      graph.variable("z", zero, false), graph.variable("g", g_idx, false));
  kiln::Program program(graph, {per_row, grouped});
  program.feed(id, ids);
  program.run();
  const Array a = program.fetch(per_row), b = program.fetch(grouped);
  REQUIRE(a.shape() == Shape({2, 2, 5}));
  REQUIRE(b.shape() == Shape({2, 2, 5}));
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 5; ++j) {
      const auto row = static_cast<std::int64_t>(ids.flat(i));
      const float v = static_cast<float>(table_values.flat(row * 5 + j));
      const std::int64_t g = j < 3 ? 0 : 1;
      CHECK(static_cast<float>(a.flat(i * 5 + j)) == v / static_cast<float>(row_scale.flat(row)));
      CHECK(static_cast<float>(b.flat(i * 5 + j)) ==
            (v - static_cast<float>(zero.flat(row * 2 + g))) * static_cast<float>(group_scale.flat(row * 2 + g)));
    }
  // Shapes that disagree are refused when the node is made.
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(kiln::ops::quantized_gather_int4(graph.variable("t3", table, false),
                                                     graph.variable("s3", row_scale, false), id, 7),
                    Contains("ceil(7 / 2)"));
  CHECK_THROWS_WITH(kiln::ops::quantized_matmul(graph.placeholder(Shape{2, 6}, DType::float32, "x"),
                                                graph.variable("k3", table, false), graph.variable("s4", row_scale, false),
                                                true, 1, false, 9),
                    Contains("not ceil(9 / 2)"));
}

TEST_CASE("QuantizedMatMul by int4 groups: a ReversibleEmbedding's tied table and untied map in reverse",
          "[ops][quantize]") {
  // The float kernel (value - zero) · scale, groups along the packed features; the inputs quantized per row (q,
  // then / s), or not. Tied: the table (V, ceil(D/2)) read transposed, scale and zero (V, G); untied: the map packed
  // along its rows (ceil(D/2), V), scale and zero (G, V).
  kiln::Rng rng(41);
  const std::int64_t V = 7, D = 5;
  const Array values = int4_values(Shape{V, D}, rng);  // table[v][d]
  const Array g_idx = Array::from_vector(std::vector<float>{0, 0, 1, 1, 2}, Shape{D});
  const Array scale_vg = kiln::testing::random_array(Shape{V, 3}, rng, DType::float32, 0.01, 0.2);
  const Array zero_vg = kiln::testing::random_array(Shape{V, 3}, rng, DType::float32, -3.0, 3.0);
  const Array x = kiln::testing::random_array(Shape{2, 3, D}, rng, DType::float32, -2.0, 2.0);
  // The untied map holds the same values transposed, (D, V), packed along its rows; its scale and zero (G, V).
  Array values_dv(Shape{D, V}, DType::int8), scale_gv(Shape{3, V}), zero_gv(Shape{3, V});
  for (std::int64_t v = 0; v < V; ++v) {
    for (std::int64_t d = 0; d < D; ++d) values_dv.set_flat(d * V + v, values.flat(v * D + d));
    for (std::int64_t g = 0; g < 3; ++g) {
      scale_gv.set_flat(g * V + v, scale_vg.flat(v * 3 + g));
      zero_gv.set_flat(g * V + v, zero_vg.flat(v * 3 + g));
    }
  }
  Array rows_packed(Shape{(D + 1) / 2, V}, DType::int8);  // Keras's pack_int4(axis=0)
  for (std::int64_t i = 0; i < (D + 1) / 2; ++i)
    for (std::int64_t v = 0; v < V; ++v) {
      const int low = static_cast<int>(values_dv.flat(2 * i * V + v)) & 0x0f;
      const int high = 2 * i + 1 < D ? static_cast<int>(values_dv.flat((2 * i + 1) * V + v)) & 0x0f : 0;
      rows_packed.set_flat(i * V + v, static_cast<std::int8_t>(static_cast<std::uint8_t>(low | (high << 4))));
    }
  for (const bool quantize_inputs : {true, false}) {
    INFO("quantize_inputs " << quantize_inputs);
    kiln::Graph graph;
    const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
    const kiln::Tensor tied = kiln::ops::quantized_matmul_int4_groups(
        input, graph.variable("t", pack_int4(values), false), graph.variable("s", scale_vg, false),
        graph.variable("z", zero_vg, false), graph.variable("g", g_idx, false), D, false, 1, quantize_inputs, true);
    const kiln::Tensor untied = kiln::ops::quantized_matmul_int4_groups(
        input, graph.variable("r", rows_packed, false), graph.variable("s2", scale_gv, false),
        graph.variable("z2", zero_gv, false), graph.variable("g2", g_idx, false), D, true, 0, quantize_inputs, false);
    kiln::Program program(graph, {tied, untied});
    program.feed(input, x);
    program.run();
    const Array a = program.fetch(tied), b = program.fetch(untied);
    REQUIRE(a.shape() == Shape({2, 3, V}));
    CHECK(a.bitwise_equal(b));
    for (std::int64_t row = 0; row < 6; ++row) {
      const float s = keras_row_scale(x, row, D, quantize_inputs);
      for (std::int64_t v = 0; v < V; ++v) {
        double sum = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          const auto g = static_cast<std::int64_t>(g_idx.flat(d));
          const float w = (static_cast<float>(values.flat(v * D + d)) - static_cast<float>(zero_vg.flat(v * 3 + g))) *
                          static_cast<float>(scale_vg.flat(v * 3 + g));
          sum += static_cast<double>(as_multiplied(static_cast<float>(x.flat(row * D + d)), s, quantize_inputs)) * w;
        }
        CHECK(a.flat(row * V + v) == Approx(sum / s).margin(1e-5));
      }
    }
  }
  // Without input quantization the product is linear in x: its gradient rule against central differences.
  kiln::testing::GradcheckOptions options;
  options.label = "quantized_matmul int4 groups";
  const auto report = kiln::testing::gradcheck(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::quantized_matmul_int4_groups(in[0], g.variable("r", rows_packed, false),
                                                       g.variable("s", scale_gv.astype(DType::float64), false),
                                                       g.variable("z", zero_gv.astype(DType::float64), false),
                                                       g.variable("g", g_idx.astype(DType::float64), false), D, true,
                                                       0, false, false);
      },
      {kiln::testing::random_array(Shape{2, D}, rng, DType::float64)}, options);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-7);
  CHECK(report.num_checked > 0);
}

TEST_CASE("QuantizedMatMul by int4 groups: a token's few rows, read packed, equal the dequantized kernel's product",
          "[ops][quantize]") {
  // 1 to 4 rows (generation) run kiln's int4_rows kernels where the CPU has AVX-512: a Dense kernel (groups along its
  // rows, any g_idx) and a tied table in reverse (groups of 16 or 32 columns, Keras's g_idx), with partial vectors;
  // against the float64 sum of x times the float32 kernel values (value - zero) · scale, and the same rows through
  // the general path (more rows).
  kiln::Rng rng(53);
  const std::int64_t K = 70, N = 100;
  const Array values = int4_values(Shape{K, N}, rng);
  Array g_idx(Shape{K});
  for (std::int64_t p = 0; p < K; ++p) g_idx.set_flat(p, static_cast<double>((p * 7) % 5));  // any group of 5
  const Array scale = kiln::testing::random_array(Shape{5, N}, rng, DType::float32, 0.01, 0.2);
  const Array zero = kiln::testing::random_array(Shape{5, N}, rng, DType::float32, -4.0, 4.0);
  const auto weight = [&](std::int64_t p, std::int64_t j) {
    const auto g = static_cast<std::int64_t>(g_idx.flat(p));
    return (static_cast<float>(values.flat(p * N + j)) - static_cast<float>(zero.flat(g * N + j))) *
           static_cast<float>(scale.flat(g * N + j));
  };
  for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{4}, std::int64_t{6}}) {
    INFO(rows << " rows");
    const Array x = kiln::testing::random_array(Shape{rows, K}, rng, DType::float32, -2.0, 2.0);
    kiln::Graph graph;
    const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
    const kiln::Tensor y = kiln::ops::quantized_matmul_int4_groups(
        input, graph.variable("k", pack_int4(values), false), graph.variable("s", scale, false),
        graph.variable("z", zero, false), graph.variable("g", g_idx, false), N, false, 0, false, false);
    kiln::Program program(graph, {y});
    program.feed(input, x);
    program.run();
    const Array out = program.fetch(y);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < K; ++p) sum += x.flat(i * K + p) * static_cast<double>(weight(p, j));
        REQUIRE(out.flat(i * N + j) == Approx(sum).margin(2e-5));
      }
  }
  // A tied table (V, K) in reverse, groups of `block` columns.
  for (const std::int64_t block : {std::int64_t{16}, std::int64_t{32}, std::int64_t{48}}) {
    const std::int64_t V = 37, D = 48, groups = (D - 1) / block + 1;
    const Array table = int4_values(Shape{V, D}, rng);
    Array columns(Shape{D});
    for (std::int64_t c = 0; c < D; ++c) columns.set_flat(c, static_cast<double>(c / block));
    const Array table_scale = kiln::testing::random_array(Shape{V, groups}, rng, DType::float32, 0.01, 0.2);
    const Array table_zero = kiln::testing::random_array(Shape{V, groups}, rng, DType::float32, -4.0, 4.0);
    for (const bool quantize_inputs : {true, false})
      for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{4}, std::int64_t{5}}) {
        INFO("block " << block << ", quantize_inputs " << quantize_inputs << ", " << rows << " rows");
        const Array x = kiln::testing::random_array(Shape{rows, D}, rng, DType::float32, -2.0, 2.0);
        kiln::Graph graph;
        const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
        const kiln::Tensor y = kiln::ops::quantized_matmul_int4_groups(
            input, graph.variable("t", pack_int4(table), false), graph.variable("s", table_scale, false),
            graph.variable("z", table_zero, false), graph.variable("g", columns, false), D, false, 1, quantize_inputs,
            true);
        kiln::Program program(graph, {y});
        program.feed(input, x);
        program.run();
        const Array out = program.fetch(y);
        for (std::int64_t i = 0; i < rows; ++i) {
          const float s = keras_row_scale(x, i, D, quantize_inputs);
          for (std::int64_t v = 0; v < V; ++v) {
            double sum = 0;
            for (std::int64_t c = 0; c < D; ++c) {
              const std::int64_t g = c / block;
              const float w = (static_cast<float>(table.flat(v * D + c)) - static_cast<float>(table_zero.flat(v * groups + g))) *
                              static_cast<float>(table_scale.flat(v * groups + g));
              sum += static_cast<double>(as_multiplied(static_cast<float>(x.flat(i * D + c)), s, quantize_inputs)) * w;
            }
            REQUIRE(out.flat(i * V + v) == Approx(sum / s).margin(2e-5));
          }
        }
      }
  }
}

TEST_CASE("QuantizedMatMul by int4 groups: a kernel larger than a block is made float a block at a time",
          "[ops][quantize]") {
  // Past ~2^18 floats of kernel the general path dequantizes it in blocks of rows: a Dense kernel (3000 × 100, its
  // sums added up block after block) and a tied table (20000 × 16 in reverse, its columns of y block after block).
  kiln::Rng rng(59);
  for (const bool transposed : {false, true}) {
    INFO("transposed " << transposed);
    const std::int64_t R = transposed ? 20000 : 3000, C = transposed ? 16 : 100, rows = 5;
    const Array values = int4_values(Shape{R, C}, rng);
    const std::int64_t grouped = transposed ? C : R, groups = (grouped - 1) / 16 + 1;
    Array g_idx(Shape{grouped});
    for (std::int64_t i = 0; i < grouped; ++i) g_idx.set_flat(i, static_cast<double>(i / 16));
    const Shape per_group = transposed ? Shape{R, groups} : Shape{groups, C};
    const Array scale = kiln::testing::random_array(per_group, rng, DType::float32, 0.01, 0.2);
    const Array zero = kiln::testing::random_array(per_group, rng, DType::float32, -4.0, 4.0);
    const std::int64_t K = transposed ? C : R, N = transposed ? R : C;
    const Array x = kiln::testing::random_array(Shape{rows, K}, rng, DType::float32, -1.0, 1.0);
    kiln::Graph graph;
    const kiln::Tensor input = graph.placeholder(x.shape(), DType::float32, "x");
    const kiln::Tensor y = kiln::ops::quantized_matmul_int4_groups(
        input, graph.variable("k", pack_int4(values), false), graph.variable("s", scale, false),
        graph.variable("z", zero, false), graph.variable("g", g_idx, false), C, false, transposed ? 1 : 0, false,
        transposed);
    kiln::Program program(graph, {y});
    program.feed(input, x);
    program.run();
    const Array out = program.fetch(y);
    REQUIRE(out.shape() == Shape({rows, N}));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < N; j += (transposed ? 97 : 1)) {
        double sum = 0;
        for (std::int64_t p = 0; p < K; ++p) {
          const std::int64_t r = transposed ? j : p, c = transposed ? p : j;
          const std::int64_t at = transposed ? r * groups + c / 16 : (r / 16) * C + c;
          const float w = (static_cast<float>(values.flat(r * C + c)) - static_cast<float>(zero.flat(at))) *
                          static_cast<float>(scale.flat(at));
          sum += x.flat(i * K + p) * static_cast<double>(w);
        }
        REQUIRE(out.flat(i * N + j) == Approx(sum).margin(1e-4));
      }
  }
}

TEST_CASE("QuantizedMatMul's edge cases: no input features, NaN rows, sums past int32 before the correction",
          "[ops][quantize]") {
  // No input features: an empty sum, zeros (Keras's matmul), on both forms.
  for (const bool quantize_inputs : {true, false}) {
    const Array out = kiln::testing::evaluate(
        [&](const std::vector<kiln::Tensor>& in) {
          kiln::Graph& g = in[0].graph();
          return kiln::ops::quantized_matmul(in[0], g.variable("k", Array(Shape{0, 3}, DType::int8), false),
                                             g.variable("s", Array::full(Shape{3}, 2.0, DType::float64), false),
                                             quantize_inputs);
        },
        {Array(Shape{2, 0}, DType::float64)});
    REQUIRE(out.shape() == Shape({2, 3}));
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out.flat(i) == 0.0);
  }
  // A row holding a NaN gives NaNs, as Keras's (its max and scale are NaN); the other rows are untouched.
  Array x = Array::full(Shape{2, 4}, 0.5, DType::float64);
  x.set_flat(1, std::nan(""));
  kiln::Rng rng(2);
  const Array kernel = int8_array(Shape{4, 3}, rng);
  const Array out = kiln::testing::evaluate(
      [&](const std::vector<kiln::Tensor>& in) {
        kiln::Graph& g = in[0].graph();
        return kiln::ops::quantized_matmul(in[0], g.variable("k", kernel, false),
                                           g.variable("s", Array::full(Shape{3}, 50.0, DType::float64), false));
      },
      {x});
  for (std::size_t j = 0; j < 3; ++j) {
    CHECK(std::isnan(out.flat(j)));
    CHECK(std::isfinite(out.flat(3 + j)));
  }
  // One row of 70 000 values of 127 by columns of 127: the VNNI kernel's sums of (b + 128)·q pass 2^31 on the way.
  const std::int64_t k = 70000;
  std::vector<std::int8_t> a(k, 127), b(k * 2, 127);
  std::vector<std::int32_t> c(2);
  for (const Int8GemmBackend backend : {Int8GemmBackend::vnni_rows, Int8GemmBackend::plain}) {
    kiln::detail::gemm_s8s8s32_with(backend, 1, 2, k, a.data(), k, b.data(), 2, c.data(), 2);
    CHECK(c[0] == 127 * 127 * 70000);
    CHECK(c[1] == 127 * 127 * 70000);
  }
}

TEST_CASE("RoundToBfloat16 rounds float32 values as Keras assigns a bfloat16 variable, float64 passes",
          "[ops][quantize][bfloat16]") {
  kiln::Rng rng(81);
  const kiln::Array x = kiln::testing::random_array({7, 9}, rng, kiln::DType::float32, -3.0, 3.0);
  const kiln::Array rounded =
      kiln::testing::evaluate([](const std::vector<kiln::Tensor>& in) { return kiln::ops::round_to_bfloat16(in[0]); },
                              {x});
  CHECK(rounded.bitwise_equal(kiln::ops::round_to_bfloat16(x)));
  CHECK_FALSE(rounded.bitwise_equal(x));
  const kiln::Array wide = x.astype(kiln::DType::float64);
  CHECK(kiln::testing::evaluate([](const std::vector<kiln::Tensor>& in) { return kiln::ops::round_to_bfloat16(in[0]); },
                                {wide})
            .bitwise_equal(wide));
  CHECK_THROWS_AS(kiln::ops::round_to_bfloat16(wide), kiln::DTypeError);  // the Array form takes float32 only
}
