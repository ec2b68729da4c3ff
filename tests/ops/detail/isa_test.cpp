// The dispatched kernels' builds (kiln/ops/detail/isa.hpp): every x86-64 level this CPU runs against the library's
// own build (native by default), so that a portable build's kernels are checked on every machine the suite runs
// on, and the dispatch follows ScopedIsa.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <kiln/ops/detail/attention_rows.hpp>
#include <kiln/ops/detail/isa.hpp>
#include <kiln/ops/detail/random_kernels.hpp>

namespace {

using kiln::detail::Isa;

template <class T>
std::vector<T> dropout_of(Isa isa, const std::vector<T>* x, std::int64_t n) {
  std::vector<T> out(static_cast<std::size_t>(n), T(-7));
  const auto& loop = kiln::detail::random_kernels(isa).dropout<T>();
  // Two ranges, as two workers would take them: each element depends on its index only.
  loop.fill(x ? x->data() : nullptr, out.data(), 0, n / 3, 0x1234567890abcdefULL, 99, 0.3, T(1) / T(0.7));
  loop.fill(x ? x->data() : nullptr, out.data(), n / 3, n, 0x1234567890abcdefULL, 99, 0.3, T(1) / T(0.7));
  return out;
}

}  // namespace

TEST_CASE("the dispatched kernels: the library's own build first, the active one among those this CPU runs",
          "[ops][isa]") {
  const std::vector<Isa> runnable = kiln::detail::runnable_isas();
  REQUIRE(!runnable.empty());
  CHECK(runnable.front() == Isa::own);
  CHECK(std::find(runnable.begin(), runnable.end(), kiln::detail::active_isa()) != runnable.end());
#if defined(__x86_64__)
  // Every x86-64 CPU this suite runs on has SSE4.2 (x86-64-v2, 2009 on): a portable level is always tested.
  CHECK(std::find(runnable.begin(), runnable.end(), Isa::x86_64_v2) != runnable.end());
#endif
  for (const Isa isa : runnable) {
    INFO(kiln::detail::isa_name(isa));
    const kiln::detail::ScopedIsa scoped(isa);
    CHECK(kiln::detail::active_isa() == isa);
    CHECK(&kiln::detail::random_kernels() == &kiln::detail::random_kernels(isa));
  }
}

TEST_CASE("each level's random kernels give the library's own draws: dropout bitwise, normals within rounding",
          "[ops][isa]") {
  constexpr std::int64_t n = 10007;
  std::vector<float> xf(n);
  std::vector<double> xd(n);
  for (std::int64_t i = 0; i < n; ++i) xd[static_cast<std::size_t>(i)] = std::sin(0.37 * static_cast<double>(i));
  std::transform(xd.begin(), xd.end(), xf.begin(), [](double v) { return static_cast<float>(v); });
  const auto own_f = dropout_of<float>(Isa::own, &xf, n), own_mask = dropout_of<float>(Isa::own, nullptr, n);
  const auto own_d = dropout_of<double>(Isa::own, &xd, n);
  // The draws: about 30 % dropped, the rest scaled by 1/0.7.
  const auto dropped = std::count(own_mask.begin(), own_mask.end(), 0.0f);
  CHECK(dropped > n / 4);
  CHECK(dropped < n * 7 / 20);

  constexpr std::int64_t pairs = kiln::detail::kNormalBlock - 3;  // a partial last vector
  std::vector<double> own_cos(pairs), own_sin(pairs);
  kiln::detail::random_kernels(Isa::own).normal_pairs(42, 1000, pairs, own_cos.data(), own_sin.data());
  double mean = 0;
  for (std::int64_t j = 0; j < pairs; ++j) mean += own_cos[static_cast<std::size_t>(j)] + own_sin[static_cast<std::size_t>(j)];
  CHECK(std::abs(mean / (2 * pairs)) < 0.2);

  for (const Isa isa : kiln::detail::runnable_isas()) {
    INFO(kiln::detail::isa_name(isa));
    CHECK(dropout_of<float>(isa, &xf, n) == own_f);
    CHECK(dropout_of<float>(isa, nullptr, n) == own_mask);
    CHECK(dropout_of<double>(isa, &xd, n) == own_d);
    std::vector<double> cosine(pairs), sine(pairs);
    kiln::detail::random_kernels(isa).normal_pairs(42, 1000, pairs, cosine.data(), sine.data());
    double worst = 0;
    for (std::size_t j = 0; j < static_cast<std::size_t>(pairs); ++j)
      worst = std::max({worst, std::abs(cosine[j] - own_cos[j]), std::abs(sine[j] - own_sin[j])});
    CHECK(worst < 1e-13);  // xsimd's log, cos and sin, with and without FMA
  }
}

namespace {

// A head's score rows through one build's softmax_rows (rows of `keys` keys padded to `width`), with their
// log-sum-exps appended.
template <class T>
std::vector<T> softmax_rows_of(Isa isa, const std::vector<T>& scores, std::int64_t rows, std::int64_t width,
                               std::int64_t keys, const kiln::detail::RowsHead<T>& head) {
  std::vector<T> p = scores, row_max(static_cast<std::size_t>(rows + 16)), row_sum(row_max.size()),
                 lse(static_cast<std::size_t>(rows));
  kiln::detail::attention_rows<T>(isa).softmax_rows(p.data(), rows, width, head, keys, row_max.data(),
                                                    row_sum.data(), lse.data());
  for (std::int64_t r = 0; r < rows; ++r)  // the padding past the keys is scratch: not compared
    std::fill(p.begin() + r * width + keys, p.begin() + (r + 1) * width, T(0));
  p.insert(p.end(), lse.begin(), lse.end());
  return p;
}

template <class T>
void check_attention_rows(double tolerance) {
  for (const std::int64_t keys : {5, 40, 64, 100}) {
    const std::int64_t width = (keys + 15) / 16 * 16, rows = 37;
    std::vector<T> scores(static_cast<std::size_t>(rows * width)), mask(static_cast<std::size_t>(rows * width));
    for (std::size_t i = 0; i < scores.size(); ++i) {
      scores[i] = static_cast<T>(3.0 * std::sin(0.731 * static_cast<double>(i)) + 0.5 * std::cos(0.07 * static_cast<double>(i)));
      mask[i] = (i * 7 + i / 3) % 5 == 0 ? T(0) : T(1);
    }
    for (int variant = 0; variant < 3; ++variant) {  // plain, causal, masked
      const kiln::detail::RowsHead<T> head{variant == 2 ? mask.data() : nullptr, width, variant == 1, T(0.125)};
      const std::vector<T> own = softmax_rows_of(Isa::own, scores, rows, width, keys, head);
      for (const Isa isa : kiln::detail::runnable_isas()) {
        INFO(kiln::detail::isa_name(isa) << ", " << keys << " keys, variant " << variant);
        const std::vector<T> other = softmax_rows_of(isa, scores, rows, width, keys, head);
        double worst = 0;
        for (std::size_t i = 0; i < own.size(); ++i) {
          if (std::isinf(own[i]) || std::isinf(other[i])) {
            CHECK(own[i] == other[i]);
            continue;
          }
          worst = std::max(worst, std::abs(static_cast<double>(own[i]) - static_cast<double>(other[i])) /
                                      std::max(1.0, std::abs(static_cast<double>(own[i]))));
        }
        CHECK(worst < tolerance);
      }
    }
  }
}

}  // namespace

TEST_CASE("each level's attention row kernels give the library's own probabilities and log-sum-exps",
          "[ops][isa]") {
  // The exps differ by an ulp or two between builds (AVX-512's own exp, xsimd's elsewhere).
  check_attention_rows<float>(2e-6);
  check_attention_rows<double>(1e-14);
}
