// bfloat16 products (detail::gemm_bf16): every backend against the float64 product of the operands rounded to
// bfloat16, for every transpose, leading dimensions wider than the matrices, accumulation and a split over threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/detail/gemm.hpp>

using kiln::detail::Bf16GemmBackend;
using kiln::detail::GemmShape;

namespace {
std::vector<float> random_floats(std::size_t size, std::uint64_t seed) {
  kiln::Rng rng(seed);
  std::vector<float> values(size);
  for (float& value : values) value = static_cast<float>(rng.uniform(-2.0, 2.0));
  return values;
}

// C(i, j) as float64 over op(A) and op(B) rounded to bfloat16: what a bfloat16 product computes, up to the order of
// its float32 sums.
double rounded_reference(const GemmShape& s, const std::vector<float>& a, const std::vector<float>& b, std::int64_t i,
                         std::int64_t j) {
  using kiln::detail::round_to_bfloat16;
  double total = 0;
  for (std::int64_t p = 0; p < s.k; ++p)
    total += double(round_to_bfloat16(a[static_cast<std::size_t>(s.transpose_a ? p * s.lda + i : i * s.lda + p)])) *
             double(round_to_bfloat16(b[static_cast<std::size_t>(s.transpose_b ? j * s.ldb + p : p * s.ldb + j)]));
  return total;
}

float bits_to_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
}  // namespace

TEST_CASE("bfloat16 rounding is to nearest, ties to even, and keeps NaN and infinities", "[ops][gemm][bfloat16]") {
  using kiln::detail::from_bfloat16;
  using kiln::detail::to_bfloat16;
  CHECK(to_bfloat16(1.0f) == 0x3f80);
  CHECK(to_bfloat16(bits_to_float(0x3f808000u)) == 0x3f80);  // a tie: to the even 0x3f80
  CHECK(to_bfloat16(bits_to_float(0x3f818000u)) == 0x3f82);  // a tie: to the even 0x3f82
  CHECK(to_bfloat16(bits_to_float(0x3f808001u)) == 0x3f81);  // above the tie: up
  CHECK(to_bfloat16(bits_to_float(0x7f7fffffu)) == 0x7f80);  // float32's largest rounds to infinity
  CHECK(to_bfloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(to_bfloat16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(std::isnan(from_bfloat16(to_bfloat16(bits_to_float(0x7f800001u)))));  // a NaN whose high bits read as inf
  CHECK(std::isnan(from_bfloat16(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(from_bfloat16(0x4049) == 3.140625f);
  // The array form agrees with the scalar one.
  const std::vector<float> values = random_floats(1000, 5);
  std::vector<std::uint16_t> packed(values.size());
  kiln::detail::to_bfloat16(values.data(), packed.data(), static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) REQUIRE(packed[i] == to_bfloat16(values[i]));
}

TEST_CASE("bfloat16 products equal the float64 product of the rounded operands on every backend",
          "[ops][gemm][bfloat16]") {
  struct Case {
    std::int64_t m, n, k;
    bool ta, tb, accumulate;
    std::int64_t pad;  // extra columns in every leading dimension
  };
  const std::vector<Case> cases = {{5, 7, 3, false, false, false, 0},   {33, 17, 65, true, false, false, 2},
                                   {31, 40, 64, false, true, false, 1}, {16, 48, 19, true, true, true, 3},
                                   {1, 300, 128, false, false, true, 0}, {129, 1, 70, false, true, false, 4},
                                   {64, 64, 0, false, false, false, 0},
                                   // a token's products (the few-row kernel): 1 to 4 rows, B as stored or
                                   // transposed, partial vectors of columns and of k, accumulating
                                   {1, 77, 37, false, false, false, 1}, {2, 130, 16, false, true, false, 0},
                                   {3, 64, 129, false, false, true, 2}, {4, 50, 33, false, true, true, 3},
                                   {4, 1, 5, false, false, false, 0}, {2, 9, 4, true, false, false, 0}};
  for (const Bf16GemmBackend backend : {Bf16GemmBackend::onednn, Bf16GemmBackend::rounded, Bf16GemmBackend::few_rows}) {
    for (const Case& c : cases) {
      INFO("backend " << int(backend) << ": " << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb
                      << " accumulate " << c.accumulate << " pad " << c.pad);
      GemmShape s{c.m, c.n, c.k, c.ta, c.tb, (c.ta ? c.m : c.k) + c.pad, (c.tb ? c.k : c.n) + c.pad, c.n + c.pad};
      s.accumulate = c.accumulate;
      const std::vector<float> a = random_floats(static_cast<std::size_t>((c.ta ? c.k : c.m) * s.lda + 1), 11);
      const std::vector<float> b = random_floats(static_cast<std::size_t>((c.tb ? c.n : c.k) * s.ldb + 1), 12);
      std::vector<float> out = random_floats(static_cast<std::size_t>(c.m * s.ldc), 13);
      const std::vector<float> before = out;
      kiln::detail::gemm_bf16_with(backend, s, a.data(), b.data(), out.data());
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < s.ldc; ++j) {
          const std::size_t at = static_cast<std::size_t>(i * s.ldc + j);
          if (j >= c.n) {  // outside C: untouched
            REQUIRE(out[at] == before[at]);
            continue;
          }
          const double expected = rounded_reference(s, a, b, i, j) + (c.accumulate ? double(before[at]) : 0.0);
          // float32 sums of k exact products (bfloat16 × bfloat16 fits float32's mantissa).
          REQUIRE(std::abs(out[at] - expected) <= 1e-5 * (1.0 + double(c.k)));
        }
    }
  }
}

TEST_CASE("bfloat16 products leave oneDNN when it may not use AVX512_BF16", "[ops][gemm][bfloat16]") {
  // The ctest bfloat16_without_avx512bf16 holds oneDNN at AVX512_CORE_VNNI: every [bfloat16] test then runs the
  // fallback.
  const char* held = std::getenv("DNNL_MAX_CPU_ISA");
  if (held != nullptr && std::string(held) == "AVX512_CORE_VNNI")
    CHECK(kiln::detail::bf16_gemm_backend() == Bf16GemmBackend::rounded);
  const GemmShape s{40, 48, 64, false, true, 64, 64, 48};
  const std::vector<float> a = random_floats(40 * 64, 31), b = random_floats(48 * 64, 32);
  std::vector<float> out(40 * 48);
  kiln::detail::gemm_bf16(s, a.data(), b.data(), out.data());
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j)
      REQUIRE(std::abs(out[static_cast<std::size_t>(i * s.n + j)] - rounded_reference(s, a, b, i, j)) < 1e-5 * 65);
}

TEST_CASE("the few-row bfloat16 kernel keeps NaN and infinities as the rounding does", "[ops][gemm][bfloat16]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const GemmShape s{1, 3, 2, false, false, 2, 3, 3};
  const std::vector<float> a = {1.0f, 2.0f}, b = {nan, inf, 1.0f, 0.0f, 1.0f, 3.0f};
  std::vector<float> out(3);
  kiln::detail::gemm_bf16_with(Bf16GemmBackend::few_rows, s, a.data(), b.data(), out.data());
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == inf);
  CHECK(out[2] == 7.0f);
}

TEST_CASE("a bfloat16 product split over threads equals it on one", "[ops][gemm][bfloat16]") {
  const int before = kiln::get_num_threads();
  for (const bool wide : {false, true}) {
    const GemmShape s = wide ? GemmShape{24, 1000, 300, false, true, 300, 300, 1000}
                             : GemmShape{700, 96, 256, true, false, 700, 96, 96};
    const std::vector<float> a = random_floats(static_cast<std::size_t>(700 * 300), 21);
    const std::vector<float> b = random_floats(static_cast<std::size_t>(1000 * 300), 22);
    std::vector<float> one(static_cast<std::size_t>(s.m * s.ldc)), four(one.size());
    kiln::set_num_threads(1);
    kiln::detail::gemm_bf16(s, a.data(), b.data(), one.data());
    kiln::set_num_threads(4);
    kiln::detail::gemm_bf16(s, a.data(), b.data(), four.data());
    kiln::set_num_threads(before);
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; j += 7) {
        const std::size_t at = static_cast<std::size_t>(i * s.ldc + j);
        REQUIRE(four[at] == Approx(one[at]).margin(1e-4));
        REQUIRE(std::abs(one[at] - rounded_reference(s, a, b, i, j)) <= 1e-5 * (1.0 + double(s.k)));
      }
  }
  kiln::set_num_threads(before);
}
