// The dispatched kernels' builds (kiln/ops/detail/isa.hpp): every x86-64 level this CPU runs against the library's
// own build (native by default), so that a portable build's kernels are checked on every machine the suite runs
// on, and the dispatch follows ScopedIsa.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <kiln/ops/detail/attention_rows.hpp>
#include <kiln/ops/detail/group_norm_blocks.hpp>
#include <kiln/ops/detail/isa.hpp>
#include <kiln/ops/detail/norm_rows.hpp>
#include <kiln/ops/detail/random_kernels.hpp>
#include <kiln/ops/detail/transpose_kernels.hpp>
#include <kiln/ops/detail/unary_kernels.hpp>

namespace {

using kiln::detail::Isa;

// The largest difference between another build's results and the own build's, relative where |own| > 1; an
// infinity must match exactly (else the difference is infinite).
template <class T>
double worst_difference(const std::vector<T>& own, const std::vector<T>& other) {
  double worst = 0;
  for (std::size_t i = 0; i < own.size(); ++i) {
    const auto a = static_cast<double>(own[i]), b = static_cast<double>(other[i]);
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(a)));
  }
  return worst;
}

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
        CHECK(worst_difference(own, softmax_rows_of(isa, scores, rows, width, keys, head)) < tolerance);
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

namespace {

// Every norm row kernel of one build on the same (rows, size) inputs, their outputs one after another.
template <class T>
std::vector<T> norm_rows_of(Isa isa, std::int64_t rows, std::int64_t size) {
  const auto count = static_cast<std::size_t>(rows * size);
  std::vector<T> x(count), dy(count), gamma(static_cast<std::size_t>(size)), beta(gamma.size());
  for (std::size_t i = 0; i < count; ++i) {
    x[i] = static_cast<T>(2.0 * std::sin(0.37 * static_cast<double>(i)) + 0.5);
    dy[i] = static_cast<T>(std::cos(0.11 * static_cast<double>(i)));
  }
  for (std::size_t j = 0; j < gamma.size(); ++j) {
    gamma[j] = static_cast<T>(1.0 + 0.1 * static_cast<double>(j % 7));
    beta[j] = static_cast<T>(0.05 * static_cast<double>(j % 5));
  }
  const kiln::detail::NormRows<T>& kernels = kiln::detail::norm_rows<T>(isa);
  std::vector<T> out(count), dx(count), rms(count), rms_dx(count), dgamma(gamma.size(), T(0)),
      dscale(gamma.size(), T(0));
  // In two ranges, the first a multiple of kNormRowUnit rows, as two workers would take them.
  const std::int64_t split = std::min<std::int64_t>(rows, kiln::detail::kNormRowUnit);
  for (const auto& [first, end] : {std::pair<std::int64_t, std::int64_t>{0, split}, {split, rows}}) {
    kernels.layer_norm(x.data(), gamma.data(), beta.data(), out.data(), first, end, size, 1e-3);
    kernels.layer_norm_grad(x.data(), gamma.data(), dy.data(), dx.data(), first, end, size, 1e-3);
    kernels.layer_norm_gamma_grad(x.data(), dy.data(), dgamma.data(), first, end, size, 1e-3);
    kernels.rms_norm(x.data(), gamma.data(), rms.data(), first, end, size, 1e-6);
    kernels.rms_norm_grad(x.data(), gamma.data(), dy.data(), rms_dx.data(), first, end, size, 1e-6);
    kernels.rms_norm_scale_grad(x.data(), dy.data(), dscale.data(), first, end, size, 1e-6);
  }
  std::vector<T> all;
  for (const auto* part : {&out, &dx, &rms, &rms_dx, &dgamma, &dscale}) all.insert(all.end(), part->begin(), part->end());
  return all;
}

template <class T>
void check_norm_rows(double tolerance) {
  for (const auto& [rows, size] : {std::pair<std::int64_t, std::int64_t>{37, 12}, {20, 64}, {5, 3}, {33, 129}}) {
    const std::vector<T> own = norm_rows_of<T>(Isa::own, rows, size);
    for (const Isa isa : kiln::detail::runnable_isas()) {
      INFO(kiln::detail::isa_name(isa) << ", (" << rows << ", " << size << ")");
      const std::vector<T> other = norm_rows_of<T>(isa, rows, size);
      REQUIRE(other.size() == own.size());
      CHECK(worst_difference(own, other) < tolerance);
    }
  }
}

}  // namespace

TEST_CASE("each level's LayerNorm and RMSNorm row kernels agree with the library's own, within rounding",
          "[ops][isa]") {
  // Sums in lanes of another width add in another order.
  check_norm_rows<float>(2e-5);
  check_norm_rows<double>(1e-12);
}

namespace {

// GroupNorm's three block kernels of one build over every block of a (batch, pre, channels, post) input.
template <class T>
std::vector<T> group_norm_of(Isa isa, const kiln::detail::GroupLayout& l) {
  const auto count = static_cast<std::size_t>(l.batch * l.pre * l.channels * l.post);
  std::vector<T> x(count), dy(count), gamma(static_cast<std::size_t>(l.channels)), beta(gamma.size());
  for (std::size_t i = 0; i < count; ++i) {
    x[i] = static_cast<T>(1.5 * std::sin(0.29 * static_cast<double>(i)) + 0.25);
    dy[i] = static_cast<T>(std::cos(0.13 * static_cast<double>(i)));
  }
  for (std::size_t c = 0; c < gamma.size(); ++c) {
    gamma[c] = static_cast<T>(0.5 + 0.1 * static_cast<double>(c % 5));
    beta[c] = static_cast<T>(0.02 * static_cast<double>(c % 3));
  }
  const kiln::detail::GroupNormBlocks<T>& kernels = kiln::detail::group_norm_blocks<T>(isa);
  std::vector<T> y(count), dx(count);
  std::vector<double> sums(2 * gamma.size(), 0.0);
  const std::int64_t per_block = kiln::detail::groups_per_block(l, l.groups);
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t g0 = 0; g0 < l.groups; g0 += per_block) {
      const kiln::detail::GroupBlock b{n, g0, std::min(l.groups, g0 + per_block)};
      kernels.forward(l, x.data(), gamma.data(), beta.data(), y.data(), b, 1e-3);
      kernels.grad(l, x.data(), gamma.data(), dy.data(), dx.data(), b, 1e-3);
      kernels.param_grad(l, x.data(), dy.data(), sums.data(), b, 1e-3);
    }
  std::vector<T> all = y;
  all.insert(all.end(), dx.begin(), dx.end());
  for (const double s : sums) all.push_back(static_cast<T>(s));
  return all;
}

template <class T>
void check_group_norm(double tolerance) {
  // channels_last with several groups a block, a group wider than the lanes, and channels_first.
  for (const kiln::detail::GroupLayout l : {kiln::detail::GroupLayout{3, 20, 64, 1, 8},
                                            kiln::detail::GroupLayout{2, 5, 160, 1, 2},
                                            kiln::detail::GroupLayout{2, 1, 12, 30, 3}}) {
    const std::vector<T> own = group_norm_of<T>(Isa::own, l);
    for (const Isa isa : kiln::detail::runnable_isas()) {
      INFO(kiln::detail::isa_name(isa) << ", channels " << l.channels << ", groups " << l.groups);
      CHECK(worst_difference(own, group_norm_of<T>(isa, l)) < tolerance);
    }
  }
}

}  // namespace

TEST_CASE("each level's GroupNorm block kernels agree with the library's own, within rounding", "[ops][isa]") {
  check_group_norm<float>(2e-5);
  check_group_norm<double>(1e-12);
}

namespace {

template <class T>
void check_gelu(double tolerance) {
  constexpr std::int64_t n = 1037;  // a partial last vector at any width
  std::vector<T> x(n), dy(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = static_cast<T>(-9.0 + 18.0 * static_cast<double>(i) / n);
    dy[static_cast<std::size_t>(i)] = static_cast<T>(std::cos(0.3 * static_cast<double>(i)));
  }
  for (const bool approximate : {true, false}) {
    std::vector<T> own_y(n), own_dx(n);
    kiln::detail::unary_kernels<T>(Isa::own).gelu(x.data(), own_y.data(), n, approximate);
    kiln::detail::unary_kernels<T>(Isa::own).gelu_grad(x.data(), dy.data(), own_dx.data(), n, approximate);
    // The formulas themselves, at a few points.
    for (const std::int64_t i : {std::int64_t{0}, n / 3, n / 2, n - 1}) {
      const double v = static_cast<double>(x[static_cast<std::size_t>(i)]);
      const double expected = approximate ? 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                          : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      CHECK(std::abs(static_cast<double>(own_y[static_cast<std::size_t>(i)]) - expected) <= 1e-5 * std::max(1.0, std::abs(expected)));
    }
    for (const Isa isa : kiln::detail::runnable_isas()) {
      INFO(kiln::detail::isa_name(isa) << (approximate ? ", tanh form" : ", erf form"));
      std::vector<T> y(n), dx(n);
      kiln::detail::unary_kernels<T>(isa).gelu(x.data(), y.data(), n, approximate);
      kiln::detail::unary_kernels<T>(isa).gelu_grad(x.data(), dy.data(), dx.data(), n, approximate);
      double worst = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
        worst = std::max({worst, std::abs(static_cast<double>(y[i]) - static_cast<double>(own_y[i])),
                          std::abs(static_cast<double>(dx[i]) - static_cast<double>(own_dx[i]))});
      CHECK(worst < tolerance);
    }
  }
}

}  // namespace

TEST_CASE("each level's GELU and its gradient agree with the library's own, within rounding", "[ops][isa]") {
  check_gelu<float>(1e-5);
  check_gelu<double>(1e-13);
}

TEST_CASE("each level's transposed copy is exactly the transpose, where the level has one", "[ops][isa]") {
  // Whole 16 × 16 blocks, ragged rows and columns, a matrix inside wider rows (attention's interleaved heads), and
  // one shorter than a block both ways. Levels without a kernel of their own (null) leave it to libxsmm.
  struct Case {
    std::int64_t n, k, ldb;
  };
  int levels_with_a_kernel = 0;
  for (const Isa isa : kiln::detail::runnable_isas()) {
    const auto kernel = kiln::detail::transpose_kernels(isa).transpose;
    if (!kernel) continue;
    ++levels_with_a_kernel;
    for (const Case c : {Case{16, 16, 16}, Case{40, 16, 128}, Case{37, 21, 26}, Case{64, 512, 512}, Case{5, 3, 3}}) {
      INFO(kiln::detail::isa_name(isa) << ": n " << c.n << " k " << c.k << " ldb " << c.ldb);
      std::vector<float> b(static_cast<std::size_t>(c.n * c.ldb));
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) * 0.5f - 7.0f;
      std::vector<float> out(static_cast<std::size_t>(c.k * c.n) + 16, -1.0f);  // 16 past the end must stay
      kernel(b.data(), c.n, c.k, c.ldb, out.data());
      bool exact = true;
      for (std::int64_t p = 0; p < c.k; ++p)
        for (std::int64_t j = 0; j < c.n; ++j)
          exact = exact && out[static_cast<std::size_t>(p * c.n + j)] == b[static_cast<std::size_t>(j * c.ldb + p)];
      CHECK(exact);
      CHECK(std::all_of(out.end() - 16, out.end(), [](float v) { return v == -1.0f; }));
    }
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) CHECK(levels_with_a_kernel > 0);
#endif
}
