#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <limits>
#include <vector>

#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/detail/gemm.hpp>

using kiln::DType;
using kiln::detail::GemmBackend;
using kiln::detail::GemmShape;

namespace {
// op(A)(i, p) and op(B)(p, j) for row-major A and B with leading dimensions.
template <class T>
double reference(const GemmShape& s, const std::vector<T>& a, const std::vector<T>& b, std::int64_t i, std::int64_t j) {
  double total = 0;
  for (std::int64_t p = 0; p < s.k; ++p) {
    const double left = a[static_cast<std::size_t>(s.transpose_a ? p * s.lda + i : i * s.lda + p)];
    const double right = b[static_cast<std::size_t>(s.transpose_b ? j * s.ldb + p : p * s.ldb + j)];
    total += left * right;
  }
  return total;
}

template <class T>
std::vector<T> random_vector(std::size_t size, std::uint64_t seed) {
  kiln::Rng rng(seed);
  std::vector<T> values(size);
  for (T& value : values) value = static_cast<T>(rng.uniform(-1.0, 1.0));
  return values;
}

// Every transpose, a padded C (ldc > n, whose padding must stay untouched), C = and C +=; with operand_pad,
// A and B are rows of a wider matrix too (lda, ldb beyond their widths), as attention's heads are.
template <class T>
void check_gemm(double tolerance, std::int64_t m = 7, std::int64_t n = 5, std::int64_t k = 9,
                std::int64_t operand_pad = 0) {
  const std::int64_t pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool accumulate : {false, true}) {
        GemmShape s{m, n, k, ta, tb, (ta ? m : k) + operand_pad, (tb ? k : n) + operand_pad, n + pad, accumulate};
        const auto a = random_vector<T>(static_cast<std::size_t>((ta ? k : m) * s.lda), 1);
        const auto b = random_vector<T>(static_cast<std::size_t>((tb ? n : k) * s.ldb), 2);
        const auto before = random_vector<T>(static_cast<std::size_t>(m * s.ldc), 3);
        std::vector<T> c = before;
        kiln::detail::gemm(s, a.data(), b.data(), c.data());
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < s.ldc; ++j) {
            const auto at = static_cast<std::size_t>(i * s.ldc + j);
            INFO("ta " << ta << " tb " << tb << " accumulate " << accumulate << " at " << i << ", " << j);
            if (j >= n) {
              if (c[at] != before[at]) REQUIRE(c[at] == before[at]);
              continue;
            }
            const double expected = reference(s, a, b, i, j) + (accumulate ? double(before[at]) : 0.0);
            if (std::abs(c[at] - expected) > tolerance) REQUIRE(std::abs(c[at] - expected) <= tolerance);
          }
      }
}
}  // namespace

TEST_CASE("gemm: every transpose, a padded C, assigning and accumulating", "[gemm]") {
  check_gemm<float>(1e-5);
  check_gemm<double>(1e-12);
}

TEST_CASE("gemm: an inner size of 0 gives zeros, or leaves C alone when accumulating", "[gemm]") {
  std::vector<float> c(6, 2.0f);
  const float unused = 0.0f;
  kiln::detail::gemm(GemmShape{2, 3, 0, false, false, 1, 3, 3, true}, &unused, &unused, c.data());
  REQUIRE(c == std::vector<float>(6, 2.0f));
  kiln::detail::gemm(GemmShape{2, 3, 0, false, false, 1, 3, 3, false}, &unused, &unused, c.data());
  REQUIRE(c == std::vector<float>(6, 0.0f));
}

TEST_CASE("gemm: large products split over threads by rows or by columns give the same result", "[gemm][threads]") {
  const int saved = kiln::get_num_threads();
  for (int threads : {1, 3, 7, 16}) {
    kiln::set_num_threads(threads);
    INFO("threads " << threads);
    check_gemm<float>(1e-3, 200, 30, 300);  // tall: split by rows
    check_gemm<float>(1e-3, 20, 300, 300);  // wide: split by columns
    // Column slices in whole 16-column units but the last: widths just over a unit, and under one more.
    check_gemm<float>(1e-3, 12, 130, 2560);
    check_gemm<float>(1e-3, 12, 127, 2560);
    check_gemm<double>(1e-10, 200, 30, 300);
    check_gemm<double>(1e-10, 12, 130, 2560);
  }
  kiln::set_num_threads(saved);
}

TEST_CASE("gemm: float32 runs on libxsmm's kernels, float64 and large products on OpenBLAS", "[gemm]") {
  if (!kiln::detail::gemm_has_xsmm()) {  // built without libxsmm: small products on OpenBLAS
    CHECK(kiln::detail::gemm_backend(GemmShape{40, 16, 40, false, false, 40, 16, 16}, DType::float32) ==
          GemmBackend::openblas);
    return;
  }
  const bool dnnl = kiln::detail::gemm_has_dnnl();
  const GemmShape head{40, 16, 40, false, false, 40, 16, 16};        // attention's p·v
  const GemmShape scores{40, 40, 16, false, true, 16, 16, 40};       // q·kᵀ: B transposed
  const GemmShape weights{128, 12, 2560, true, false, 128, 12, 12};  // a Dense layer's weight gradient
  CHECK(kiln::detail::gemm_backend(head, DType::float32) == GemmBackend::xsmm);
  CHECK(kiln::detail::gemm_backend(weights, DType::float32) == GemmBackend::xsmm);
  CHECK(kiln::detail::gemm_backend(scores, DType::float32) == GemmBackend::xsmm_transposed_b);
  CHECK(kiln::detail::gemm_backend(head, DType::float64) == GemmBackend::openblas);
  // A C at most 128 columns wide stays on libxsmm at any size (a convolution's im2col product, its kernel
  // gradient), and so does a transposed B that fits the copy (its input gradient).
  CHECK(kiln::detail::gemm_backend(GemmShape{1815, 64, 288, false, false, 288, 64, 64}, DType::float32) ==
        GemmBackend::xsmm);
  CHECK(kiln::detail::gemm_backend(GemmShape{288, 64, 1815, true, false, 288, 64, 64}, DType::float32) ==
        GemmBackend::xsmm);
  CHECK(kiln::detail::gemm_backend(GemmShape{1815, 288, 64, false, true, 64, 64, 288}, DType::float32) ==
        GemmBackend::xsmm_transposed_b);
  // Wider products: oneDNN when kiln has it, else OpenBLAS (or libxsmm: see the next test).
  CHECK(kiln::detail::gemm_backend(GemmShape{2048, 2048, 2048, false, false, 2048, 2048, 2048}, DType::float32) ==
        (dnnl ? GemmBackend::onednn : GemmBackend::openblas));
  CHECK(kiln::detail::gemm_backend(GemmShape{64, 512, 160, false, false, 160, 512, 512}, DType::float32) ==
        (dnnl ? GemmBackend::onednn : GemmBackend::xsmm));  // an LSTM's step
  // A transposed B larger than the per-thread copy is copied a slice of 64 of C's columns at a time while its rows
  // are at most 512 long (and with slices of 32 up to 1024 where openblas_below_cpu); longer, oneDNN, else
  // OpenBLAS. Too short a product for the copy to pay, a C too narrow for libxsmm's vectors: OpenBLAS.
  CHECK(kiln::detail::gemm_backend(GemmShape{64, 256, 256, false, true, 256, 256, 256}, DType::float32) ==
        GemmBackend::xsmm_transposed_b);
  CHECK(kiln::detail::gemm_backend(GemmShape{64, 256, 1024, false, true, 1024, 1024, 256}, DType::float32) ==
        (kiln::detail::openblas_below_cpu() ? GemmBackend::xsmm_transposed_b
         : dnnl                             ? GemmBackend::onednn
                                            : GemmBackend::openblas));
  CHECK(kiln::detail::gemm_backend(GemmShape{1, 12, 128, false, true, 128, 128, 12}, DType::float32) ==
        GemmBackend::openblas);
  CHECK(kiln::detail::gemm_backend(GemmShape{64, 2, 480, false, false, 480, 2, 2}, DType::float32) ==
        GemmBackend::openblas);
  CHECK(kiln::detail::gemm_backend(GemmShape{2, 3, 0, false, false, 1, 3, 3}, DType::float32) == GemmBackend::none);
}

TEST_CASE("gemm: large products go to libxsmm only where OpenBLAS runs kernels narrower than the CPU's", "[gemm]") {
  if (!kiln::detail::gemm_has_xsmm()) return;
  const bool below = kiln::detail::openblas_below_cpu();
  const bool dnnl = kiln::detail::gemm_has_dnnl();
  INFO("openblas_below_cpu " << below << ", oneDNN " << dnnl);
  const GemmShape projection{1500, 512, 512, false, false, 512, 512, 512};   // seed_mha's q = x·w
  const GemmShape weight_grad{512, 512, 1500, true, false, 512, 512, 512};   // its dW = xᵀ·dy
  const GemmShape input_grad{1500, 512, 512, false, true, 512, 512, 512};    // dx = dy·wᵀ: B transposed
  const GemmShape long_rows{1500, 512, 2048, false, true, 2048, 2048, 512};  // only 16 columns' copy fits
  const GemmShape huge_b{64, 4096, 4096, false, false, 4096, 4096, 4096};    // B of 64 MB
  const GemmBackend large = dnnl ? GemmBackend::onednn : GemmBackend::openblas;
  CHECK(kiln::detail::gemm_backend(projection, DType::float32) == (dnnl ? large : below ? GemmBackend::xsmm : large));
  CHECK(kiln::detail::gemm_backend(weight_grad, DType::float32) ==
        (dnnl ? large : below ? GemmBackend::xsmm : large));
  CHECK(kiln::detail::gemm_backend(input_grad, DType::float32) == GemmBackend::xsmm_transposed_b);  // slices of 64
  CHECK(kiln::detail::gemm_backend(long_rows, DType::float32) == large);
  CHECK(kiln::detail::gemm_backend(huge_b, DType::float32) == large);
  CHECK(kiln::detail::gemm_backend(projection, DType::float64) == GemmBackend::openblas);
}

TEST_CASE("gemm: every backend runs every transpose, padded operands and C, assigning and accumulating", "[gemm]") {
  // gemm_with runs a product on a backend whatever gemm_backend would choose (a backend this build lacks, or one
  // that cannot take the shape, falls back to OpenBLAS): each must give the product, within float32's rounding,
  // leave C's padding alone, and overwrite C's NaNs when assigning.
  struct Case {
    std::int64_t m, n, k;
  };
  for (const GemmBackend backend :
       {GemmBackend::openblas, GemmBackend::xsmm, GemmBackend::xsmm_transposed_b, GemmBackend::onednn})
    for (const Case c : {Case{7, 5, 9}, Case{40, 40, 16}, Case{33, 130, 70}, Case{150, 64, 150}, Case{1, 200, 64}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool accumulate : {false, true}) {
            INFO("backend " << static_cast<int>(backend) << " " << c.m << "x" << c.n << "x" << c.k << " ta " << ta
                            << " tb " << tb << " accumulate " << accumulate);
            const std::int64_t pad = 3;
            const GemmShape s{c.m,     c.n, c.k, ta, tb, (ta ? c.m : c.k) + pad, (tb ? c.k : c.n) + pad,
                              c.n + pad, accumulate};
            const auto a = random_vector<float>(static_cast<std::size_t>((ta ? c.k : c.m) * s.lda), 11);
            const auto b = random_vector<float>(static_cast<std::size_t>((tb ? c.n : c.k) * s.ldb), 12);
            auto before = random_vector<float>(static_cast<std::size_t>(c.m * s.ldc), 13);
            if (!accumulate)
              for (std::int64_t i = 0; i < c.m; ++i) before[static_cast<std::size_t>(i * s.ldc)] = std::nanf("");
            std::vector<float> out = before;
            kiln::detail::gemm_with(backend, s, a.data(), b.data(), out.data());
            for (std::int64_t i = 0; i < c.m; ++i)
              for (std::int64_t j = 0; j < s.ldc; ++j) {
                const auto at = static_cast<std::size_t>(i * s.ldc + j);
                if (j >= c.n) {
                  if (std::memcmp(&out[at], &before[at], sizeof(float)) != 0) REQUIRE(out[at] == before[at]);
                  continue;
                }
                const double expected = reference(s, a, b, i, j) + (accumulate ? double(before[at]) : 0.0);
                if (!(std::abs(out[at] - expected) <= 1e-4)) REQUIRE(out[at] == Approx(expected).margin(1e-4));
              }
          }
}

TEST_CASE("gemm: a product on oneDNN runs on the calling thread and leaves no OpenMP threads behind",
          "[gemm][threads]") {
  if (!kiln::detail::gemm_has_dnnl()) return;
  // Debian's oneDNN runs on OpenMP, whose team would be omp_get_max_threads() threads (and stay, waiting, after):
  // kiln holds the calling thread's OpenMP count at 1 for the call.
  auto threads = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return -1;
  };
  const GemmShape s{256, 512, 512, false, false, 512, 512, 512};
  REQUIRE(kiln::detail::gemm_backend(s, DType::float32) == GemmBackend::onednn);
  const auto a = random_vector<float>(256 * 512, 14);
  const auto b = random_vector<float>(512 * 512, 15);
  std::vector<float> c(256 * 512);
  // On a thread of its own, which OpenMP has not seen: a team started from it would still be there after.
  int before = 0, after = 0;
  std::thread caller([&] {
    before = threads();
    for (int i = 0; i < 3; ++i) kiln::detail::gemm_with(GemmBackend::onednn, s, a.data(), b.data(), c.data());
    after = threads();
  });
  caller.join();
  CHECK(after == before);
  CHECK(c[0] == Approx(reference(s, a, b, 0, 0)).margin(1e-3));
}

TEST_CASE("gemm: every backend against a double-precision reference, operands inside wider rows", "[gemm]") {
  check_gemm<float>(1e-5, 7, 5, 9, 4);        // narrow: OpenBLAS
  check_gemm<float>(2e-5, 40, 40, 16, 32);    // attention heads interleaved (heads_last): libxsmm, B copied
  check_gemm<float>(2e-5, 24, 13, 40, 3);     // libxsmm with a ragged vector of columns
  check_gemm<float>(1e-4, 200, 256, 256, 0);  // the transposed B does not fit the copy: OpenBLAS, or slices
  check_gemm<float>(2e-4, 40, 200, 600, 3);   // slices of 48 columns and a ragged one of 8 (openblas_below_cpu)
  check_gemm<float>(1e-4, 1, 12, 128, 0);     // one sample through a Dense layer
  check_gemm<float>(2e-4, 300, 256, 256, 5);  // above libxsmm's small-product limit (openblas_below_cpu decides)
  check_gemm<double>(1e-12, 40, 40, 16, 32);
}

TEST_CASE("gemm: C = A·B overwrites whatever C held, NaN included", "[gemm]") {
  // 6×5 on OpenBLAS (C zeroed first); 24×16 on libxsmm (beta = 0, C never read), as is and with B copied.
  for (const std::int64_t m : {6, 24})
    for (bool tb : {false, true}) {
      const std::int64_t n = m == 6 ? 5 : 16, k = 4;
      const GemmShape s{m, n, k, false, tb, k, tb ? k : n, n};
      const auto a = random_vector<float>(static_cast<std::size_t>(m * k), 4);
      const auto b = random_vector<float>(static_cast<std::size_t>(k * n), 5);
      std::vector<float> c(static_cast<std::size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
      kiln::detail::gemm(s, a.data(), b.data(), c.data());
      for (float value : c) REQUIRE(std::isfinite(value));
    }
}

TEST_CASE("gemm: a product gives the same bits every time, for a given thread count", "[gemm][threads]") {
  const int saved = kiln::get_num_threads();
  const GemmShape s{600, 40, 256, false, true, 256, 256, 40};  // split over 3 threads: libxsmm slices, B copied
  const auto a = random_vector<float>(600 * 256, 6);
  const auto b = random_vector<float>(40 * 256, 7);
  for (int threads : {1, 3}) {
    kiln::set_num_threads(threads);
    kiln::detail::prepare_gemm(s, DType::float32);
    std::vector<float> first(600 * 40), second(600 * 40);
    kiln::detail::gemm(s, a.data(), b.data(), first.data());
    kiln::detail::gemm(s, a.data(), b.data(), second.data());
    REQUIRE(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
  }
  kiln::set_num_threads(saved);
}

TEST_CASE("gemm: a transposed B gives the bits of the same product with B transposed beforehand", "[gemm]") {
  // The copy of a transposed B is made in 16 × 16 blocks (with AVX-512): whole blocks, ragged rows and columns, and
  // B inside wider rows (attention's interleaved heads). It must be exactly the transpose, so the product must be
  // exactly the one on a B laid out as op(B) by hand, which runs the same libxsmm kernel.
  struct Case {
    std::int64_t m, n, k, pad;
  };
  for (const Case c :
       {Case{16, 16, 16, 0}, Case{40, 40, 16, 112}, Case{20, 37, 21, 5}, Case{33, 50, 40, 0}, Case{17, 12, 100, 3}}) {
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " pad " << c.pad);
    const std::int64_t ldb = c.k + c.pad;
    const auto a = random_vector<float>(static_cast<std::size_t>(c.m * c.k), 8);
    const auto b = random_vector<float>(static_cast<std::size_t>(c.n * ldb), 9);
    std::vector<float> op_b(static_cast<std::size_t>(c.k * c.n));
    for (std::int64_t p = 0; p < c.k; ++p)
      for (std::int64_t j = 0; j < c.n; ++j)
        op_b[static_cast<std::size_t>(p * c.n + j)] = b[static_cast<std::size_t>(j * ldb + p)];
    const GemmShape transposed{c.m, c.n, c.k, false, true, c.k, ldb, c.n};
    const GemmShape laid_out{c.m, c.n, c.k, false, false, c.k, c.n, c.n};
    if (kiln::detail::gemm_has_xsmm()) {
      REQUIRE(kiln::detail::gemm_backend(transposed, DType::float32) == GemmBackend::xsmm_transposed_b);
      REQUIRE(kiln::detail::gemm_backend(laid_out, DType::float32) == GemmBackend::xsmm);
    }
    std::vector<float> expected(static_cast<std::size_t>(c.m * c.n)), actual(expected.size());
    kiln::detail::gemm(laid_out, a.data(), op_b.data(), expected.data());
    kiln::detail::gemm(transposed, a.data(), b.data(), actual.data());
    REQUIRE(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("gemm_batch_reduce: the sum of a batch of products, assigning or accumulating, empty batches", "[gemm]") {
  // A convolution's taps: A_i rows of an image, ld wider than k (pixels strided), B_i blocks of one kernel. Shapes on
  // libxsmm's batch-reduce kernel (float32, 12 or more columns) and off it (float64, few columns); C padded.
  for (const bool single : {true, false})
    for (const std::int64_t n : {4, 32})
      for (const std::int64_t count : {0, 1, 5, 70})  // 70: more than libxsmm's group of 64
        for (const bool accumulate : {false, true}) {
          const std::int64_t m = 11, k = 16, lda = 2 * k, ldc = n + 3;
          GemmShape s{m, n, k, false, false, lda, n, ldc, accumulate};
          INFO((single ? "float32" : "float64") << " n " << n << " count " << count << " accumulate " << accumulate
                                                 << " fused " << kiln::detail::gemm_batch_reduce_fused(s, single ? DType::float32 : DType::float64));
          const auto run = [&](auto zero) {
            using T = decltype(zero);
            const auto a = random_vector<T>(static_cast<std::size_t>((m + 70) * lda), 11);
            const auto b = random_vector<T>(static_cast<std::size_t>(70 * k * n), 12);
            const auto before = random_vector<T>(static_cast<std::size_t>(m * ldc), 13);
            std::vector<const T*> as, bs;
            for (std::int64_t i = 0; i < count; ++i) {
              as.push_back(a.data() + i * lda);  // each A starts a row further on, as a window's taps do
              bs.push_back(b.data() + i * k * n);
            }
            std::vector<T> c = before;
            const std::vector<const T*> as_before = as, bs_before = bs;
            kiln::detail::gemm_batch_reduce(s, as.data(), bs.data(), count, c.data());
            CHECK((as == as_before && bs == bs_before));  // the address arrays are left as they were
            for (std::int64_t i = 0; i < m; ++i)
              for (std::int64_t j = 0; j < ldc; ++j) {
                const auto at = static_cast<std::size_t>(i * ldc + j);
                if (j >= n) {
                  CHECK(c[at] == before[at]);  // the padding is left alone
                  continue;
                }
                double expected = accumulate ? static_cast<double>(before[at]) : 0.0;
                for (std::int64_t t = 0; t < count; ++t)
                  for (std::int64_t p = 0; p < k; ++p)
                    expected += static_cast<double>(as[static_cast<std::size_t>(t)][i * lda + p]) *
                                static_cast<double>(bs[static_cast<std::size_t>(t)][p * n + j]);
                CHECK(static_cast<double>(c[at]) == Approx(expected).margin(single ? 1e-4 : 1e-12));
              }
          };
          if (single)
            run(0.0f);
          else
            run(0.0);
        }
  CHECK(kiln::detail::gemm_batch_reduce_fused(GemmShape{11, 32, 16, false, false, 32, 32, 32, false}, DType::float32) ==
        kiln::detail::gemm_has_xsmm());
  CHECK_FALSE(kiln::detail::gemm_batch_reduce_fused(GemmShape{11, 32, 16, false, false, 32, 32, 32, false}, DType::float64));
}
