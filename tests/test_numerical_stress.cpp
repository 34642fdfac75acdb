// Numerical stress: huge scores, tiny inputs, 100000-key rows, overflow, NaN; and float against double.
//
// Through masked_softmax, DotProductAttention and MultiHeadAttention in evaluation mode, in float and double. The
// attention modules run each case on every path (attention_path.hpp: automatic, direct, tiled); outputs are checked
// on all of them, attention_weights() only where the call keeps them (the direct path, or automatic on fewer than
// 10000 weights).
//
// Where the expected values come from:
//   two keys with scores (s, s + g)   weights (1 / (1 + e^g), 1 / (1 + e^-g)), the logistic function, whatever s;
//                                     computed in double from the formula
//   uniform rows                      all scores equal (or all below rounding of 0): every weight 1 / keys, the output
//                                     the mean of the value rows (the softmax's definition)
//   long rows, random cases           a long-double reference of the definition (reference_attention below)
//   a column of ones in V             each output in it is the row's sum of weights: 1 (the softmax's definition)
//
// Tolerances, all from the type's epsilon:
//   one exp, a sum of two terms, a division: 8 eps relative (about 4 roundings, a factor 2 of margin), plus the
//     smallest normal number absolute, below which the softmax flushes exp() to 0 (detail/generic/simd.hpp)
//   a sum of n terms in floating point: sum_tolerance(n) = 2 (sqrt(n) + 1) eps relative to the sum of the absolute
//     values (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., sec. 2.8 and 4.2: rounding errors
//     of a sum behave like a random walk, sqrt(n) eps; 2 is the margin, and the errors measured here are 5 to 10
//     times below it; the worst case n eps is 150 times looser at n = 100000 and would accept a lost block of keys)
//   float against double: the float computation's rounding, a chain of sums (projection, scores, weighted values,
//     output projection) of total length n_chain, bounded a priori by eps_float (n_chain + 8) relative to the scale
//     of the values involved, 8 for the exp and the division (see float_double_tolerance; measured: 40 times below)
//
// NaN, infinity and overflow, the behaviour documented here (and in docs/TESTING.md, "Reliability checks"):
//   1. a NaN in query row i makes output row i NaN (all its features); every other output is bit for bit what the
//      clean input gives;
//   2. a NaN in the key or value row of key j makes NaN the outputs of exactly the queries that see key j (not masked
//      for them), whatever weight the softmax gives it; the queries that mask key j, and every other batch row, are
//      untouched: a masked key's K and V rows are never used (padding may hold anything). Exception, by definition:
//      a query that sees no key at all gets, under FullyMasked::uniform (d2l's rule), the mean of every value row of
//      its batch row, NaN if any is NaN; under FullyMasked::zero, exactly 0;
//   3. scores are computed in Scalar: products past the largest finite value overflow to +-inf. A query whose scores
//      contain +inf or NaN, or are all -inf, gets NaN (inf - inf, as PyTorch's softmax); a -inf score beside a finite
//      maximum gets weight exactly 0; finite scores, however large (even +-max), never give NaN or inf weights.
//   4. never a crash, on any path.
#include <algorithm>
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <support/random_tensor.hpp>
#include <vector>

using attend::AttentionPath;
using attend::DotProductAttention;
using attend::FullyMasked;
using attend::Generator;
using attend::Index;
using attend::Mask;
using attend::Matrix;
using attend::MultiHeadAttention;
using attend::StateDict;
using attend::Tensor3;
using attend::ValidLens;
using attend_test::random_tensor;

namespace {

const AttentionPath all_paths[] = {AttentionPath::automatic, AttentionPath::direct, AttentionPath::tiled};

template <class T>
double eps() {
  return static_cast<double>(std::numeric_limits<T>::epsilon());
}
template <class T>
double min_normal() {
  return static_cast<double>(std::numeric_limits<T>::min());
}

// See the top of this file: the rounding of a sum of n terms, relative to the sum of their absolute values.
template <class T>
double sum_tolerance(Index n) {
  return 2.0 * (std::sqrt(static_cast<double>(n)) + 1.0) * eps<T>();
}

// True when a call of this shape on this path keeps its weights and they are small enough to check.
bool weights_kept(AttentionPath path, Index weights) {
  return path == AttentionPath::direct || (path == AttentionPath::automatic && weights < 10000);
}

bool all_finite(const Tensor3<float>& X) {
  for (Index i = 0; i < X.size(); ++i)
    if (!std::isfinite(X.data()[i])) return false;
  return true;
}
bool all_finite(const Tensor3<double>& X) {
  for (Index i = 0; i < X.size(); ++i)
    if (!std::isfinite(X.data()[i])) return false;
  return true;
}

// The first element where |a - e| > abs + rel |e| (NaN anywhere fails), or "" when there is none.
template <class T>
std::string first_mismatch(const Tensor3<T>& actual, const Tensor3<double>& expected, double rel, double abs) {
  if (actual.dimensions() != expected.dimensions()) return "the shapes differ";
  for (Index b = 0; b < actual.dimension(0); ++b)
    for (Index i = 0; i < actual.dimension(1); ++i)
      for (Index f = 0; f < actual.dimension(2); ++f) {
        const double a = static_cast<double>(actual(b, i, f)), e = expected(b, i, f);
        if (!(std::abs(a - e) <= abs + rel * std::abs(e))) {
          std::ostringstream out;
          out.precision(17);
          out << "at (" << b << ", " << i << ", " << f << "): actual " << a << ", expected " << e << ", |a - e| "
              << std::abs(a - e) << " > " << abs + rel * std::abs(e);
          return out.str();
        }
      }
  return "";
}

template <class T>
Tensor3<double> to_double(const Tensor3<T>& X) {
  return X.template cast<double>();
}

// Identity weights (out, in) = (n, n): a projection that changes nothing, exactly.
template <class T>
void identity_projections(MultiHeadAttention<T>& attention) {
  for (auto* layer : {&attention.W_q(), &attention.W_k(), &attention.W_v(), &attention.W_o()})
    layer->weight() = Matrix<T>::Identity(layer->out_features(), layer->in_features());
}

// ---- a long-double reference of the definition -------------------------------------------------------------------

// Scaled dot-product attention of one head, in long double, with d2l's masking (masked scores replaced by -1e6,
// FullyMasked::uniform). Q (q, d), K (k, d), V (k, dv) as row-major vectors of long double; prefix[i]: the keys
// query i sees.
std::vector<long double> reference_head(const std::vector<long double>& Q, const std::vector<long double>& K,
                                        const std::vector<long double>& V, Index q, Index k, Index d, Index dv,
                                        const std::vector<Index>& prefix) {
  std::vector<long double> out(static_cast<std::size_t>(q * dv), 0.0L), scores(static_cast<std::size_t>(k));
  const long double scale = 1.0L / std::sqrt(static_cast<long double>(d));
  for (Index i = 0; i < q; ++i) {
    long double m = -std::numeric_limits<long double>::infinity();
    for (Index j = 0; j < k; ++j) {
      long double s = 0;
      for (Index f = 0; f < d; ++f)
        s += Q[static_cast<std::size_t>(i * d + f)] * K[static_cast<std::size_t>(j * d + f)];
      s = j < prefix[static_cast<std::size_t>(i)] ? s * scale : -1e6L;
      scores[static_cast<std::size_t>(j)] = s;
      m = std::max(m, s);
    }
    long double total = 0;
    for (auto& s : scores) total += (s = std::exp(s - m));
    for (Index j = 0; j < k; ++j)
      for (Index f = 0; f < dv; ++f)
        out[static_cast<std::size_t>(i * dv + f)] +=
            scores[static_cast<std::size_t>(j)] / total * V[static_cast<std::size_t>(j * dv + f)];
  }
  return out;
}

// x W^T (+ b) of rows (n, in) in long double.
template <class T>
std::vector<long double> reference_linear(const Tensor3<T>& X, Index b, const attend::Linear<T>& layer) {
  const Index n = X.dimension(1), in = X.dimension(2), out = layer.out_features();
  std::vector<long double> Y(static_cast<std::size_t>(n * out));
  for (Index i = 0; i < n; ++i)
    for (Index o = 0; o < out; ++o) {
      long double s = layer.has_bias() ? static_cast<long double>(layer.bias()[o]) : 0.0L;
      for (Index f = 0; f < in; ++f) s += static_cast<long double>(X(b, i, f)) * layer.weight()(o, f);
      Y[static_cast<std::size_t>(i * out + o)] = s;
    }
  return Y;
}

// MultiHeadAttention's definition in long double; prefix: the visible keys of query i in batch row b, (batch, q).
template <class T>
Tensor3<double> reference_mha(MultiHeadAttention<T>& m, const Tensor3<T>& queries, const Tensor3<T>& keys,
                              const Tensor3<T>& values, const std::vector<std::vector<Index>>& prefix) {
  const Index batch = queries.dimension(0), q = queries.dimension(1), k = keys.dimension(1);
  const Index h = m.num_hiddens(), heads = m.num_heads(), d = h / heads;
  Tensor3<double> out(batch, q, h);
  for (Index b = 0; b < batch; ++b) {
    const auto Q = reference_linear(queries, b, m.W_q()), K = reference_linear(keys, b, m.W_k()),
               V = reference_linear(values, b, m.W_v());
    std::vector<long double> concat(static_cast<std::size_t>(q * h));
    for (Index head = 0; head < heads; ++head) {
      std::vector<long double> Qh, Kh, Vh;
      for (Index i = 0; i < q; ++i)
        for (Index f = 0; f < d; ++f) Qh.push_back(Q[static_cast<std::size_t>(i * h + head * d + f)]);
      for (Index j = 0; j < k; ++j)
        for (Index f = 0; f < d; ++f) {
          Kh.push_back(K[static_cast<std::size_t>(j * h + head * d + f)]);
          Vh.push_back(V[static_cast<std::size_t>(j * h + head * d + f)]);
        }
      const auto O = reference_head(Qh, Kh, Vh, q, k, d, d, prefix[static_cast<std::size_t>(b)]);
      for (Index i = 0; i < q; ++i)
        for (Index f = 0; f < d; ++f)
          concat[static_cast<std::size_t>(i * h + head * d + f)] = O[static_cast<std::size_t>(i * d + f)];
    }
    for (Index i = 0; i < q; ++i)
      for (Index o = 0; o < h; ++o) {
        long double s = m.W_o().has_bias() ? static_cast<long double>(m.W_o().bias()[o]) : 0.0L;
        for (Index f = 0; f < h; ++f) s += concat[static_cast<std::size_t>(i * h + f)] * m.W_o().weight()(o, f);
        out(b, i, o) = static_cast<double>(s);
      }
  }
  return out;
}

// DotProductAttention's definition in long double (one head, no projection).
template <class T>
Tensor3<double> reference_dpa(const Tensor3<T>& queries, const Tensor3<T>& keys, const Tensor3<T>& values,
                              const std::vector<std::vector<Index>>& prefix) {
  const Index batch = queries.dimension(0), q = queries.dimension(1), k = keys.dimension(1), d = queries.dimension(2),
              dv = values.dimension(2);
  Tensor3<double> out(batch, q, dv);
  for (Index b = 0; b < batch; ++b) {
    std::vector<long double> Q, K, V;
    for (Index i = 0; i < q; ++i)
      for (Index f = 0; f < d; ++f) Q.push_back(queries(b, i, f));
    for (Index j = 0; j < k; ++j) {
      for (Index f = 0; f < d; ++f) K.push_back(keys(b, j, f));
      for (Index f = 0; f < dv; ++f) V.push_back(values(b, j, f));
    }
    const auto O = reference_head(Q, K, V, q, k, d, dv, prefix[static_cast<std::size_t>(b)]);
    for (Index i = 0; i < q; ++i)
      for (Index f = 0; f < dv; ++f) out(b, i, f) = static_cast<double>(O[static_cast<std::size_t>(i * dv + f)]);
  }
  return out;
}

std::vector<std::vector<Index>> all_visible(Index batch, Index q, Index k) {
  return std::vector<std::vector<Index>>(static_cast<std::size_t>(batch),
                                         std::vector<Index>(static_cast<std::size_t>(q), k));
}

// ---- two keys: the logistic function -----------------------------------------------------------------------------

struct TwoScores {
  double s, g;  // scores (s, s + g)
};

// Gaps across both types' exp-underflow thresholds (87.34 in float, 708.40 in double), at scores up to +-1e4.
std::vector<TwoScores> two_scores() {
  const double gaps[] = {0, 0.5, 1, 3, 10, 30, 80, 87, 88, 100, 700, 709, 1000, 1e4, -1, -50, -1e4};
  std::vector<TwoScores> out;
  for (double g : gaps)
    for (double s : {-1e4, -std::floor(g / 2), 0.0, 1e4 - std::max(g, 0.0)})
      if (std::abs(s) <= 1e4 && std::abs(s + g) <= 1e4) out.push_back({s, g});
  return out;
}

// The logistic weights of scores (s, s + g): (1 / (1 + e^g), 1 / (1 + e^-g)), without overflow.
std::pair<double, double> logistic(double g) {
  if (g >= 0) return {std::exp(-g) / (1 + std::exp(-g)), 1 / (1 + std::exp(-g))};
  return {1 / (1 + std::exp(g)), std::exp(g) / (1 + std::exp(g))};
}

// Queries (1, rows, 4) and keys (1, 2, 4) with Q K^T / sqrt(4) = (s, s + g) in every row, exactly:
// q = (s, g, 0, 0), k_0 = (2, 0, 0, 0), k_1 = (2, 2, 0, 0); values (1, 2, 4) one-hot, so that the output row is
// (w_0, w_1, 0, 0).
template <class T>
void two_key_inputs(const std::vector<TwoScores>& rows, Tensor3<T>& Q, Tensor3<T>& K, Tensor3<T>& V) {
  const Index n = static_cast<Index>(rows.size());
  Q = Tensor3<T>(1, n, 4);
  Q.setZero();
  for (Index i = 0; i < n; ++i) {
    Q(0, i, 0) = static_cast<T>(rows[static_cast<std::size_t>(i)].s);
    Q(0, i, 1) = static_cast<T>(rows[static_cast<std::size_t>(i)].g);
  }
  K = Tensor3<T>(1, 2, 4);
  K.setZero();
  K(0, 0, 0) = K(0, 1, 0) = K(0, 1, 1) = T(2);
  V = Tensor3<T>(1, 2, 4);
  V.setZero();
  V(0, 0, 0) = V(0, 1, 1) = T(1);
}

template <class T>
Tensor3<double> two_key_expected(const std::vector<TwoScores>& rows, Index features) {
  Tensor3<double> expected(1, static_cast<Index>(rows.size()), features);
  expected.setZero();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto w = logistic(rows[i].g);
    expected(0, static_cast<Index>(i), 0) = w.first;
    expected(0, static_cast<Index>(i), 1) = w.second;
  }
  return expected;
}

// ---- poisoned inputs ---------------------------------------------------------------------------------------------

// Compares the output on poisoned inputs with the clean one: where poisoned(b, i, f) the element must be NaN,
// elsewhere bit for bit the clean value (and finite). Returns the first violation, or "".
template <class T, class Poisoned>
std::string check_poisoned(const Tensor3<T>& clean, const Tensor3<T>& got, Poisoned poisoned) {
  if (clean.dimensions() != got.dimensions()) return "the shapes differ";
  Index wrong = 0;
  std::string first;
  for (Index b = 0; b < got.dimension(0); ++b)
    for (Index i = 0; i < got.dimension(1); ++i)
      for (Index f = 0; f < got.dimension(2); ++f) {
        const T a = got(b, i, f), c = clean(b, i, f);
        const bool nan_expected = poisoned(b, i, f);
        const bool ok = nan_expected ? std::isnan(a) : (a == c && std::isfinite(a));
        if (!ok) {
          if (wrong++ == 0) {
            std::ostringstream out;
            out << "at (" << b << ", " << i << ", " << f << "): expected "
                << (nan_expected ? "NaN" : "the clean value ") << (nan_expected ? "" : std::to_string(c)) << ", got "
                << a;
            first = out.str();
          }
        }
      }
  if (wrong == 0) return "";
  return std::to_string(wrong) + " wrong elements, the first " + first;
}

}  // namespace

// ==== scores up to +-1e4 ==========================================================================================

TEMPLATE_TEST_CASE("Two keys with score gap g get the logistic weights, at scores up to +-1e4", "[numerical_stress]",
                   float, double) {
  using T = TestType;
  const auto rows = two_scores();
  const double rel = 8 * eps<T>(), abs = min_normal<T>();
  Tensor3<T> Q, K, V;
  two_key_inputs(rows, Q, K, V);
  const Tensor3<double> expected = two_key_expected<T>(rows, 4);

  SECTION("masked_softmax") {
    Tensor3<T> scores(1, static_cast<Index>(rows.size()), 2);
    for (Index i = 0; i < scores.dimension(1); ++i) {
      scores(0, i, 0) = static_cast<T>(rows[static_cast<std::size_t>(i)].s);
      scores(0, i, 1) = static_cast<T>(rows[static_cast<std::size_t>(i)].s + rows[static_cast<std::size_t>(i)].g);
    }
    const Tensor3<T> weights = attend::masked_softmax(scores);
    const Eigen::array<Index, 3> offsets{0, 0, 0}, extents{1, scores.dimension(1), 2};
    const Tensor3<double> two = expected.slice(offsets, extents);
    const std::string mismatch = first_mismatch(weights, two, rel, abs);
    INFO(mismatch);
    CHECK(mismatch.empty());
  }
  SECTION("DotProductAttention and MultiHeadAttention (identity projections), every path") {
    const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
    CAPTURE(path);
    DotProductAttention<T> dpa(T(0));
    dpa.eval();
    dpa.set_path(path);
    const Tensor3<T> out = dpa(Q, K, V);
    std::string mismatch = first_mismatch(out, expected, rel, abs);
    INFO("DotProductAttention " << mismatch);
    CHECK(mismatch.empty());
    if (weights_kept(path, out.dimension(1) * 2)) {
      const Tensor3<T> weights = dpa.attention_weights();
      const Eigen::array<Index, 3> offsets{0, 0, 0}, extents{1, out.dimension(1), 2};
      const Tensor3<double> two = expected.slice(offsets, extents);
      mismatch = first_mismatch(weights, two, rel, abs);
      INFO("DotProductAttention weights " << mismatch);
      CHECK(mismatch.empty());
    }

    MultiHeadAttention<T> mha(4, 4, 4, 4, 1, T(0));
    identity_projections(mha);
    mha.eval();
    mha.set_path(path);
    mismatch = first_mismatch(mha(Q, K, V), expected, rel, abs);
    INFO("MultiHeadAttention " << mismatch);
    CHECK(mismatch.empty());
  }
}

TEMPLATE_TEST_CASE("Random scores up to +-1e4 give finite weights in [0, 1] that sum to 1", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  // Q, K uniform in [-70, 70], d = 4: |Q K^T| / sqrt(4) <= 4 * 70^2 / 2 = 9800.
  const Index batch = 2, q = 8, k = 16, d = 4;
  const Tensor3<T> Q = random_tensor<T>(batch, q, d, 101, T(-70), T(70));
  const Tensor3<T> K = random_tensor<T>(batch, k, d, 102, T(-70), T(70));
  Tensor3<T> V = random_tensor<T>(batch, k, 3, 103);
  for (Index b = 0; b < batch; ++b)
    for (Index j = 0; j < k; ++j) V(b, j, 0) = T(1);  // a column of ones: its output is the row's sum of weights
  const ValidLens lens{16, 5};
  const double tol = sum_tolerance<T>(k) + 8 * eps<T>();

  const auto check_output = [&](const Tensor3<T>& out) {
    REQUIRE(all_finite(out));
    for (Index b = 0; b < batch; ++b)
      for (Index i = 0; i < q; ++i) {
        INFO("(" << b << ", " << i << ")");
        CHECK(std::abs(static_cast<double>(out(b, i, 0)) - 1) <= tol);
        for (Index f = 1; f < 3; ++f) {  // a convex combination of the values: inside their range
          T lo = V(b, 0, f), hi = V(b, 0, f);
          for (Index j = 0; j < k; ++j) {
            lo = std::min(lo, V(b, j, f));
            hi = std::max(hi, V(b, j, f));
          }
          CHECK(out(b, i, f) >= lo - T(tol));
          CHECK(out(b, i, f) <= hi + T(tol));
        }
      }
  };
  const auto check_weights = [&](const Tensor3<T>& weights) {
    REQUIRE(all_finite(weights));
    for (Index r = 0; r < weights.dimension(0); ++r)
      for (Index i = 0; i < weights.dimension(1); ++i) {
        double sum = 0;
        for (Index j = 0; j < weights.dimension(2); ++j) {
          CHECK(weights(r, i, j) >= T(0));
          CHECK(weights(r, i, j) <= T(1));
          sum += static_cast<double>(weights(r, i, j));
        }
        CHECK(std::abs(sum - 1) <= tol);
      }
  };

  SECTION("masked_softmax of scores in [-1e4, 1e4]") {
    check_weights(attend::masked_softmax(random_tensor<T>(batch, q, k, 104, T(-1e4), T(1e4)), lens));
  }
  SECTION("the modules, every path") {
    const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
    CAPTURE(path);
    DotProductAttention<T> dpa(T(0.5));
    dpa.eval();
    dpa.set_path(path);
    check_output(dpa(Q, K, V, lens));
    if (weights_kept(path, batch * q * k)) check_weights(dpa.attention_weights());

    MultiHeadAttention<T> mha(4, 4, 3, 4, 1, T(0.5));  // identity projections: the same scores
    for (auto* layer : {&mha.W_q(), &mha.W_k(), &mha.W_o()})
      layer->weight() = Matrix<T>::Identity(layer->out_features(), layer->in_features());
    mha.W_v().weight() = Matrix<T>::Identity(4, 3);  // V's 3 columns, then a zero column
    mha.eval();
    mha.set_path(path);
    const Tensor3<T> out = mha(Q, K, V, lens);
    const Eigen::array<Index, 3> offsets{0, 0, 0}, extents{batch, q, 3};
    check_output(Tensor3<T>(out.slice(offsets, extents)));
    if (weights_kept(path, batch * q * k)) check_weights(mha.attention_weights());
  }
}

TEMPLATE_TEST_CASE("Finite scores never give NaN, even at +-max, and the largest wins", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  const T max = std::numeric_limits<T>::max(), lowest = std::numeric_limits<T>::lowest();
  Tensor3<T> scores(1, 3, 3);
  scores.setValues({{{max, lowest, T(0)}, {lowest, lowest, lowest}, {max, max, T(0)}}});
  const Tensor3<T> weights = attend::masked_softmax(scores);
  // exp(score - max): exp(0) = 1 for the largest, exp(-inf) = 0 below it (lowest - max overflows to -inf, exactly 0).
  CHECK(weights(0, 0, 0) == T(1));
  CHECK(weights(0, 0, 1) == T(0));
  CHECK(weights(0, 0, 2) == T(0));
  for (Index j = 0; j < 3; ++j) CHECK(weights(0, 1, j) == T(1) / T(3));  // all equal: uniform
  CHECK(weights(0, 2, 0) == T(0.5));
  CHECK(weights(0, 2, 1) == T(0.5));
  CHECK(weights(0, 2, 2) == T(0));
}

// ==== tiny inputs ==================================================================================================

TEMPLATE_TEST_CASE("Inputs of 1e-30 give uniform weights and the mean of the values", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  // Scores are products of two 1e-30s: 1e-60, 0 in float (below its smallest subnormal), and exp(1e-60) rounds to 1
  // in double: every score equal, every weight 1 / keys (the softmax's definition), the output the mean of V.
  const Index batch = 2, q = 3, k = 5, d = 4;
  const T tiny = T(1e-30);
  const Tensor3<T> Q = random_tensor<T>(batch, q, d, 201, -tiny, tiny);
  const Tensor3<T> K = random_tensor<T>(batch, k, d, 202, -tiny, tiny);
  const Tensor3<T> V = random_tensor<T>(batch, k, d, 203, -tiny, tiny);
  const double uniform = 1.0 / static_cast<double>(k);

  SECTION("masked_softmax") {
    const Tensor3<T> weights = attend::masked_softmax(random_tensor<T>(batch, q, k, 204, -tiny, tiny));
    for (Index i = 0; i < weights.size(); ++i)
      CHECK(std::abs(static_cast<double>(weights.data()[i]) - uniform) <= 2 * eps<T>() * uniform);
  }
  SECTION("the modules, every path") {
    const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
    CAPTURE(path);
    Tensor3<double> mean(batch, q, d);  // (batch, q, d): every query's output, the mean of V's rows
    for (Index b = 0; b < batch; ++b)
      for (Index f = 0; f < d; ++f) {
        long double s = 0;
        for (Index j = 0; j < k; ++j) s += V(b, j, f);
        for (Index i = 0; i < q; ++i) mean(b, i, f) = static_cast<double>(s / k);
      }
    // A sum of k terms of at most 1e-30: (k + 2) eps * 1e-30 absolute.
    const double abs = (k + 2) * eps<T>() * 1e-30;
    DotProductAttention<T> dpa(T(0));
    dpa.eval();
    dpa.set_path(path);
    const Tensor3<T> out = dpa(Q, K, V);
    std::string mismatch = first_mismatch(out, mean, 0, abs);
    INFO("DotProductAttention " << mismatch);
    CHECK(mismatch.empty());
    if (weights_kept(path, batch * q * k)) {
      const Tensor3<T> weights = dpa.attention_weights();
      for (Index i = 0; i < weights.size(); ++i)
        CHECK(std::abs(static_cast<double>(weights.data()[i]) - uniform) <= 2 * eps<T>() * uniform);
    }

    // With random projections (no bias): the output is W_o W_v mean(values), computed in long double by the
    // reference; scale: 1e-30 times the largest |W_o| |W_v| row products (at most 1 here), chain length 4 + 5 + 4.
    Generator generator(205);
    MultiHeadAttention<T> mha(d, d, d, d, 2, T(0), false, generator);
    mha.eval();
    mha.set_path(path);
    const Tensor3<T> got = mha(Q, K, V);
    REQUIRE(all_finite(got));
    const Tensor3<double> expected = reference_mha(mha, Q, K, V, all_visible(batch, q, k));
    mismatch = first_mismatch(got, expected, 0, 4 * (d + k + d + 8) * eps<T>() * 1e-30);
    INFO("MultiHeadAttention " << mismatch);
    CHECK(mismatch.empty());
    for (Index i = 0; i < got.size(); ++i) CHECK(got.data()[i] != T(0));  // not flushed to zero
  }
}

// ==== long rows ====================================================================================================

TEMPLATE_TEST_CASE("Rows of 100000 keys: weights sum to 1 and match the definition", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  const Index q = 2, k = 100000, d = 4;
  const double sum_tol = sum_tolerance<T>(k);

  SECTION("masked_softmax, scores in [-5, 5] and in [-1e4, 1e4], one row cut at 60000 keys") {
    const T range = GENERATE(T(5), T(1e4));
    CAPTURE(range);
    const Tensor3<T> scores = random_tensor<T>(1, q, k, 301, -range, range);
    Matrix<Index> lens(1, q);
    lens << k, 60000;
    const Tensor3<T> weights = attend::masked_softmax(scores, ValidLens::per_query(lens));
    REQUIRE(all_finite(weights));
    for (Index i = 0; i < q; ++i) {
      const Index visible = lens(0, i);
      double m = -1e300;
      for (Index j = 0; j < visible; ++j) m = std::max(m, static_cast<double>(scores(0, i, j)));
      long double total = 0;
      for (Index j = 0; j < visible; ++j) total += std::exp(static_cast<long double>(scores(0, i, j)) - m);
      double sum = 0;
      Index wrong = 0;
      for (Index j = 0; j < k; ++j) {
        const double w = weights(0, i, j);
        sum += w;
        const double expected =
            j < visible ? static_cast<double>(std::exp(static_cast<long double>(scores(0, i, j)) - m) / total) : 0.0;
        // each weight: its exp and the division (8 eps), and the sum's rounding
        if (!(std::abs(w - expected) <= (8 * eps<T>() + sum_tol) * expected + min_normal<T>())) ++wrong;
      }
      INFO("row " << i);
      CHECK(wrong == 0);
      CHECK(std::abs(sum - 1) <= sum_tol);
    }
  }
  SECTION("DotProductAttention and MultiHeadAttention, every path") {
    const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
    CAPTURE(path);
    const Tensor3<T> Q = random_tensor<T>(1, q, d, 311);
    const Tensor3<T> K = random_tensor<T>(1, k, d, 312);
    Tensor3<T> V = random_tensor<T>(1, k, d, 313);
    for (Index j = 0; j < k; ++j) V(0, j, 0) = T(1);  // its outputs: the sums of weights
    Matrix<Index> lens(1, q);
    lens << k, 37000;
    const std::vector<std::vector<Index>> prefix{{k, 37000}};

    DotProductAttention<T> dpa(T(0));
    dpa.eval();
    dpa.set_path(path);
    const Tensor3<T> out = dpa(Q, K, V, ValidLens::per_query(lens));
    REQUIRE(all_finite(out));
    for (Index i = 0; i < q; ++i) CHECK(std::abs(static_cast<double>(out(0, i, 0)) - 1) <= 2 * sum_tol);
    // Scores |q.k| / 2 <= 2 with an error of d eps each: weights off by 2 d eps relatively, then two sums (the
    // weights' and the weighted values'): (2 sum_tol + 2 d eps + 8 eps) max|v|, max|v| = 1.
    const double tol = 2 * sum_tol + (2 * d + 8) * eps<T>();
    std::string mismatch = first_mismatch(out, reference_dpa(Q, K, V, prefix), 0, tol);
    INFO("DotProductAttention " << mismatch);
    CHECK(mismatch.empty());
    if (path == AttentionPath::direct) {
      const Tensor3<T>& weights = dpa.attention_weights();
      for (Index i = 0; i < q; ++i) {
        double sum = 0;
        for (Index j = 0; j < k; ++j) sum += static_cast<double>(weights(0, i, j));
        CHECK(std::abs(sum - 1) <= sum_tol);
      }
    }

    Generator generator(314);
    MultiHeadAttention<T> mha(d, d, d, 8, 2, T(0), true, generator);
    mha.eval();
    mha.set_path(path);
    const Tensor3<T> got = mha(Q, K, V, ValidLens::per_query(lens));
    REQUIRE(all_finite(got));
    // The same chain, with projections of 4 and 8 terms of size <= 1 before and after: scale 4 (|W| <= 1/2).
    mismatch = first_mismatch(got, reference_mha(mha, Q, K, V, prefix), 0, 4 * (tol + (4 + 8 + 8) * eps<T>()));
    INFO("MultiHeadAttention " << mismatch);
    CHECK(mismatch.empty());
  }
}

// ==== overflow and NaN =============================================================================================

TEMPLATE_TEST_CASE("masked_softmax: a NaN or +inf score makes its row NaN, -inf gets weight 0, masked ones vanish",
                   "[numerical_stress]", float, double) {
  using T = TestType;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  // Batch row 0 is poisoned row by row; batch row 1 is clean: it must come out bit for bit as alone.
  Tensor3<T> scores(2, 5, 3);
  scores.setValues({{{nan, 1, 2}, {inf, 1, 2}, {-inf, 1, 2}, {-inf, -inf, -inf}, {1, 2, 3}},
                    {{1, 2, 3}, {0, 0, 0}, {-1, 4, 2}, {3, 3, -2}, {5, -5, 0}}});
  const Tensor3<T> weights = attend::masked_softmax(scores);
  for (Index j = 0; j < 3; ++j) {
    CHECK(std::isnan(weights(0, 0, j)));  // NaN score: the row is NaN
    CHECK(std::isnan(weights(0, 1, j)));  // +inf: inf - inf
    CHECK(std::isnan(weights(0, 3, j)));  // all -inf: -inf - (-inf)
  }
  // -inf beside finite scores: weight 0, the others the softmax of (1, 2): the logistic of a gap of 1.
  const auto w = logistic(1.0);
  CHECK(weights(0, 2, 0) == T(0));
  CHECK(std::abs(static_cast<double>(weights(0, 2, 1)) - w.first) <= 8 * eps<T>() * w.first);
  CHECK(std::abs(static_cast<double>(weights(0, 2, 2)) - w.second) <= 8 * eps<T>() * w.second);
  // The clean rows: as when computed without the poisoned ones.
  const Eigen::array<Index, 3> row4{0, 4, 0}, one_row{1, 1, 3}, batch1{1, 0, 0}, whole{1, 5, 3};
  const Tensor3<T> alone = attend::masked_softmax(Tensor3<T>(scores.slice(row4, one_row)));
  for (Index j = 0; j < 3; ++j) CHECK(weights(0, 4, j) == alone(0, 0, j));
  const Tensor3<T> batch_alone = attend::masked_softmax(Tensor3<T>(scores.slice(batch1, whole)));
  for (Index i = 0; i < 5; ++i)
    for (Index j = 0; j < 3; ++j) CHECK(weights(1, i, j) == batch_alone(0, i, j));

  // Masked NaN, +inf or -inf scores are replaced (d2l's -1e6): the row is as if they were any finite score.
  const T poison = GENERATE(std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                            -std::numeric_limits<T>::infinity());
  CAPTURE(poison);
  Tensor3<T> masked(1, 1, 4), clean(1, 1, 4);
  masked.setValues({{{T(0.5), T(-1), poison, poison}}});
  clean.setValues({{{T(0.5), T(-1), T(7), T(-3)}}});
  const Tensor3<T> got = attend::masked_softmax(masked, ValidLens{2}),
                   want = attend::masked_softmax(clean, ValidLens{2});
  for (Index j = 0; j < 4; ++j) CHECK(got(0, 0, j) == want(0, 0, j));
  CHECK(got(0, 0, 2) == T(0));
  CHECK(got(0, 0, 3) == T(0));
}

TEMPLATE_TEST_CASE("DotProductAttention: NaN reaches exactly the queries that see it", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
  CAPTURE(path);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Index batch = 2, n = 4, d = 4, dv = 3;  // queries = keys = n: causal is the lower triangle j <= i
  const Tensor3<T> Q = random_tensor<T>(batch, n, d, 401), K = random_tensor<T>(batch, n, d, 402),
                   V = random_tensor<T>(batch, n, dv, 403);
  DotProductAttention<T> dpa(T(0));
  dpa.eval();
  dpa.set_path(path);
  const auto run = [&](const Tensor3<T>& q, const Tensor3<T>& k, const Tensor3<T>& v, const Mask& mask) {
    return dpa(q, k, v, mask);
  };
  const Mask causal = Mask::causal();

  SECTION("a NaN in query row (0, 1): output row (0, 1), nothing else") {
    Tensor3<T> poisoned = Q;
    poisoned(0, 1, 2) = nan;
    const std::string wrong = check_poisoned(run(Q, K, V, {}), run(poisoned, K, V, {}),
                                             [](Index b, Index i, Index) { return b == 0 && i == 1; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in key row (0, 2), causal: the queries i >= 2 of batch row 0, nothing else") {
    Tensor3<T> poisoned = K;
    poisoned(0, 2, 1) = nan;
    const std::string wrong = check_poisoned(run(Q, K, V, causal), run(Q, poisoned, V, causal),
                                             [](Index b, Index i, Index) { return b == 0 && i >= 2; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in key row (0, 3), masked by valid length 2: nothing") {
    Tensor3<T> poisoned = K;
    poisoned(0, 3, 0) = nan;
    const std::string wrong = check_poisoned(run(Q, K, V, ValidLens{2, 4}), run(Q, poisoned, V, ValidLens{2, 4}),
                                             [](Index, Index, Index) { return false; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in value (0, 2, 1), causal: feature 1 of the queries i >= 2, nothing else") {
    Tensor3<T> poisoned = V;
    poisoned(0, 2, 1) = nan;
    const std::string wrong = check_poisoned(run(Q, K, V, causal), run(Q, K, poisoned, causal),
                                             [](Index b, Index i, Index f) { return b == 0 && i >= 2 && f == 1; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in value row (0, 3), masked for every query by valid length 2: nothing") {
    Tensor3<T> poisoned = V;
    poisoned(0, 3, 0) = nan;
    const std::string wrong = check_poisoned(run(Q, K, V, ValidLens{2, 4}), run(Q, K, poisoned, ValidLens{2, 4}),
                                             [](Index, Index, Index) { return false; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in value row (0, 1), masked for queries 0 and 2 by a keep tensor: queries 1 and 3 only") {
    Tensor3<bool> keep(1, n, n);
    keep.setConstant(true);
    keep(0, 0, 1) = keep(0, 2, 1) = false;
    const Mask mask = Mask::keep(keep);
    Tensor3<T> poisoned = V;
    poisoned(0, 1, 2) = nan;
    const std::string wrong =
        check_poisoned(run(Q, K, V, mask), run(Q, K, poisoned, mask),
                       [](Index b, Index i, Index f) { return b == 0 && (i == 1 || i == 3) && f == 2; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a query that sees no key: the mean of every value row under FullyMasked::uniform, 0 under zero") {
    Tensor3<T> poisoned = V;
    poisoned(0, 3, 0) = nan;
    const std::string uniform = check_poisoned(run(Q, K, V, ValidLens{0, 4}), run(Q, K, poisoned, ValidLens{0, 4}),
                                               [](Index b, Index, Index f) { return b == 0 && f == 0; });
    INFO("uniform: " << uniform);
    CHECK(uniform.empty());
    const Mask zero = Mask(ValidLens{0, 4}).when_fully_masked(FullyMasked::zero);
    const Tensor3<T> out = run(Q, K, poisoned, zero);
    for (Index i = 0; i < n; ++i)
      for (Index f = 0; f < dv; ++f) CHECK(out(0, i, f) == T(0));
  }
}

TEMPLATE_TEST_CASE("MultiHeadAttention: NaN reaches exactly the queries that see it", "[numerical_stress]", float,
                   double) {
  using T = TestType;
  const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
  CAPTURE(path);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Index batch = 2, n = 4, size = 4;
  const Tensor3<T> X = random_tensor<T>(batch, n, size, 501);
  Generator generator(502);
  MultiHeadAttention<T> mha(size, size, size, 8, 2, T(0), true, generator);
  mha.eval();
  mha.set_path(path);
  const Mask causal = Mask::causal();
  Tensor3<T> poisoned = X;
  poisoned(0, 2, 3) = nan;
  // W_o mixes the heads and W_v the features: a NaN reaching a query reaches all its num_hiddens outputs.
  const auto queries_from_2 = [](Index b, Index i, Index) { return b == 0 && i >= 2; };

  SECTION("a NaN in query row (0, 2): output row (0, 2), nothing else") {
    const std::string wrong =
        check_poisoned(mha(X, X, X), mha(poisoned, X, X), [](Index b, Index i, Index) { return b == 0 && i == 2; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in key row (0, 2), causal: the queries i >= 2 of batch row 0") {
    const std::string wrong = check_poisoned(mha(X, X, X, causal), mha(X, poisoned, X, causal), queries_from_2);
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("a NaN in value row (0, 2), causal: the queries i >= 2 of batch row 0") {
    const std::string wrong = check_poisoned(mha(X, X, X, causal), mha(X, X, poisoned, causal), queries_from_2);
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("self-attention, a NaN at position (0, 2), causal: the queries i >= 2 of batch row 0") {
    const std::string wrong =
        check_poisoned(mha(X, X, X, causal), mha(poisoned, poisoned, poisoned, causal), queries_from_2);
    INFO(wrong);
    CHECK(wrong.empty());
  }
  SECTION("self-attention, a NaN at position (0, 2), valid lengths (2, 4): query 2 of batch row 0 only") {
    const std::string wrong =
        check_poisoned(mha(X, X, X, ValidLens{2, 4}), mha(poisoned, poisoned, poisoned, ValidLens{2, 4}),
                       [](Index b, Index i, Index) { return b == 0 && i == 2; });
    INFO(wrong);
    CHECK(wrong.empty());
  }
}

TEMPLATE_TEST_CASE("Overflowing inputs: +inf scores give NaN rows, -inf scores weight 0, the rest is untouched",
                   "[numerical_stress]", float, double) {
  using T = TestType;
  const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
  CAPTURE(path);
  // a^2 = 4 max: a product of two a's overflows (1e30 * 1e30 would in float; this is the same in double).
  const T a = 2 * std::sqrt(std::numeric_limits<T>::max());
  const Index batch = 2, n = 4, d = 4;
  const Tensor3<T> Q = random_tensor<T>(batch, n, d, 601), K = random_tensor<T>(batch, n, d, 602),
                   V = random_tensor<T>(batch, n, 3, 603);
  DotProductAttention<T> dpa(T(0));
  dpa.eval();
  dpa.set_path(path);
  MultiHeadAttention<T> mha(d, d, 3, d, 1, T(0));  // identity projections (W_v pads V with a zero column)
  for (auto* layer : {&mha.W_q(), &mha.W_k(), &mha.W_o()})
    layer->weight() = Matrix<T>::Identity(layer->out_features(), layer->in_features());
  mha.W_v().weight() = Matrix<T>::Identity(d, 3);
  mha.eval();
  mha.set_path(path);

  Tensor3<T> huge_q = Q, huge_k = K;
  for (Index f = 0; f < d; ++f) huge_q(0, 1, f) = huge_k(0, 2, f) = T(0);
  huge_q(0, 1, 0) = a;  // query (0, 1) = (a, 0, 0, 0)
  const T sign = GENERATE(T(1), T(-1));
  CAPTURE(sign);
  huge_k(0, 2, 0) = sign * a;  // key (0, 2) = (+-a, 0, 0, 0): score (1, 2) = +-a^2 / 2 = +-inf

  for (int module = 0; module < 2; ++module) {
    INFO((module == 0 ? "DotProductAttention" : "MultiHeadAttention"));
    const Tensor3<T> clean = module == 0 ? dpa(Q, K, V) : mha(Q, K, V);
    const Tensor3<T> out = module == 0 ? dpa(huge_q, huge_k, V) : mha(huge_q, huge_k, V);
    // Query (0, 1)'s other scores are a k / 2, huge but finite; the other queries' scores with key 2 too.
    for (Index i = 0; i < n; ++i)
      for (Index f = 0; f < out.dimension(2); ++f) {
        INFO("(0, " << i << ", " << f << ")");
        if (i == 1 && sign > 0)
          CHECK(std::isnan(out(0, i, f)));  // +inf in the row: inf - inf
        else
          CHECK(std::isfinite(out(0, i, f)));  // -inf beside finite scores: weight 0
      }
    for (Index i = 0; i < n; ++i)
      for (Index f = 0; f < out.dimension(2); ++f) CHECK(out(1, i, f) == clean(1, i, f));  // the other batch row
  }
}

TEMPLATE_TEST_CASE("A row whose first 280 of 300 scores are -inf attends to the last 20 on every path",
                   "[numerical_stress]", float, double) {
  using T = TestType;
  const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
  CAPTURE(path);
  // q = (a, 0, 0, 0); keys 0..279 = (-a, 0, 0, 0): scores -a^2 / 2 = -inf; keys 280..299 = 0: scores 0. The weights
  // are 0 on the -inf keys and 1/20 on the others (rule 3 at the top): the output is the mean of V's last 20 rows.
  // 300 keys span more than one of the tiled kernel's key blocks (256 in float, 128 in double).
  const T a = 2 * std::sqrt(std::numeric_limits<T>::max());
  const Index k = 300, d = 4;
  Tensor3<T> Q(1, 1, d), K(1, k, d);
  Q.setZero();
  K.setZero();
  Q(0, 0, 0) = a;
  for (Index j = 0; j < 280; ++j) K(0, j, 0) = -a;
  const Tensor3<T> V = random_tensor<T>(1, k, 2, 701);
  Tensor3<double> expected(1, 1, 2);
  for (Index f = 0; f < 2; ++f) {
    long double s = 0;
    for (Index j = 280; j < k; ++j) s += V(0, j, f);
    expected(0, 0, f) = static_cast<double>(s / 20);
  }
  DotProductAttention<T> dpa(T(0));
  dpa.eval();
  dpa.set_path(path);
  const std::string mismatch = first_mismatch(dpa(Q, K, V), expected, 0, (20 + 8) * eps<T>());
  INFO(mismatch);
  CHECK(mismatch.empty());
}

// ==== float against double =========================================================================================

namespace {

StateDict<float> to_float(const StateDict<double>& dict) {
  StateDict<float> out;
  for (const auto& [name, tensor] : dict) {
    out[name].shape = tensor.shape;
    for (double v : tensor.values) out[name].values.push_back(static_cast<float>(v));
  }
  return out;
}

// float's rounding on a chain of sums of total length n_chain, on values of size <= scale: eps_float (n_chain + 8)
// scale (the a priori bound n eps per sum of n terms; the softmax's exp and division in the 8).
double float_double_tolerance(Index n_chain, double scale) {
  return eps<float>() * static_cast<double>(n_chain + 8) * scale;
}

}  // namespace

TEST_CASE("float and double agree to float precision on random cases", "[numerical_stress]") {
  const AttentionPath path = GENERATE(from_range(std::begin(all_paths), std::end(all_paths)));
  CAPTURE(path);
  const Index batch = 3, q = 5, k = 7;
  const ValidLens lens{7, 3, 0};

  SECTION("masked_softmax") {
    const Tensor3<double> scores = random_tensor<double>(batch, q, k, 801, -4, 4);
    const Tensor3<float> weights = attend::masked_softmax(Tensor3<float>(scores.cast<float>()), lens);
    // the input's rounding (4 * eps / 2 absolute on each score) moves each weight by twice that, relatively
    const std::string mismatch =
        first_mismatch(weights, to_double(attend::masked_softmax(scores, lens)), 0, float_double_tolerance(k, 1));
    INFO(mismatch);
    CHECK(mismatch.empty());
  }
  SECTION("DotProductAttention") {
    const Tensor3<double> Q = random_tensor<double>(batch, q, 6, 811), K = random_tensor<double>(batch, k, 6, 812),
                          V = random_tensor<double>(batch, k, 4, 813);
    DotProductAttention<double> dpa_d(0.0);
    DotProductAttention<float> dpa_f(0.0f);
    dpa_d.eval();
    dpa_f.eval();
    dpa_d.set_path(path);
    dpa_f.set_path(path);
    const Tensor3<double> expected = dpa_d(Q, K, V, lens);
    const Tensor3<float> Qf = Q.cast<float>(), Kf = K.cast<float>(), Vf = V.cast<float>();  // evaluated
    const Tensor3<float> got = dpa_f(Qf, Kf, Vf, lens);
    const std::string mismatch = first_mismatch(got, expected, 0, float_double_tolerance(6 + k, 1));
    INFO(mismatch);
    CHECK(mismatch.empty());
  }
  SECTION("MultiHeadAttention, the double module's weights copied through state_dict") {
    const Index query_size = 5, key_size = 6, value_size = 3, hiddens = 12, heads = 3;
    const Tensor3<double> Q = random_tensor<double>(batch, q, query_size, 821),
                          K = random_tensor<double>(batch, k, key_size, 822),
                          V = random_tensor<double>(batch, k, value_size, 823);
    Generator generator(824);
    MultiHeadAttention<double> mha_d(key_size, query_size, value_size, hiddens, heads, 0.0, true, generator);
    MultiHeadAttention<float> mha_f(key_size, query_size, value_size, hiddens, heads, 0.0f, true);
    mha_f.load_state_dict(to_float(mha_d.state_dict()));
    mha_d.eval();
    mha_f.eval();
    mha_d.set_path(path);
    mha_f.set_path(path);
    const Tensor3<double> expected = mha_d(Q, K, V, lens);
    const Tensor3<float> Qf = Q.cast<float>(), Kf = K.cast<float>(), Vf = V.cast<float>();  // evaluated
    const Tensor3<float> got = mha_f(Qf, Kf, Vf, lens);
    // chain: a projection (<= 6 terms), the scores (4), the weighted values (7), W_o (12); values of size <= 1
    const std::string mismatch = first_mismatch(got, expected, 0, float_double_tolerance(6 + 4 + k + hiddens, 1));
    INFO(mismatch);
    CHECK(mismatch.empty());
    if (weights_kept(path, batch * heads * q * k)) {
      const std::string weights = first_mismatch(mha_f.attention_weights(), to_double(mha_d.attention_weights()), 0,
                                                 float_double_tolerance(6 + 4, 1));
      INFO("weights " << weights);
      CHECK(weights.empty());
    }
  }
}
