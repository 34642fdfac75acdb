// Dropout: attend::dropout (torch.nn.Dropout in training mode: zero with probability p, scale the rest by
// 1 / (1 - p)) and the dropout inside the modules (on the attention weights, after they are kept; off in eval()).
#include <attend/additive_attention.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/philox.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/dropout.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <vector>

using attend::Generator;
using attend::Index;
using attend::Tensor3;
using attend::ValidLens;
using Catch::Contains;

using attend_test::random_tensor;

namespace {

template <class Scalar>
bool equal(const Tensor3<Scalar>& a, const Tensor3<Scalar>& b) {
  if (a.dimensions() != b.dimensions()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

// The zero pattern of a tensor: which entries dropout removed (the inputs here have no zeros of their own).
template <class Scalar>
std::vector<bool> zeros(const Tensor3<Scalar>& Y) {
  std::vector<bool> mask(static_cast<std::size_t>(Y.size()));
  for (Index i = 0; i < Y.size(); ++i) mask[static_cast<std::size_t>(i)] = Y.data()[i] == Scalar(0);
  return mask;
}

// weights (batch, q, k) @ values (batch, k, v) -> (batch, q, v), with explicit loops in double.
template <class Scalar>
Tensor3<double> bmm(const Tensor3<Scalar>& weights, const Tensor3<Scalar>& values) {
  Tensor3<double> out(weights.dimension(0), weights.dimension(1), values.dimension(2));  // (batch, q, v)
  for (Index b = 0; b < weights.dimension(0); ++b)
    for (Index q = 0; q < weights.dimension(1); ++q)
      for (Index v = 0; v < values.dimension(2); ++v) {
        double sum = 0;
        for (Index k = 0; k < weights.dimension(2); ++k)
          sum += static_cast<double>(weights(b, q, k)) * static_cast<double>(values(b, k, v));
        out(b, q, v) = sum;
      }
  return out;
}

// Every row of (batch, q, k) weights sums to 1 (the softmax), to a few rounding errors of Scalar.
template <class Scalar>
void check_rows_sum_to_one(const Tensor3<Scalar>& weights) {
  const double tol = 16 * std::numeric_limits<Scalar>::epsilon();
  for (Index b = 0; b < weights.dimension(0); ++b)
    for (Index q = 0; q < weights.dimension(1); ++q) {
      double sum = 0;
      for (Index k = 0; k < weights.dimension(2); ++k) sum += static_cast<double>(weights(b, q, k));
      CAPTURE(b, q);
      CHECK_THAT(sum, Catch::Matchers::WithinAbs(1.0, tol));
    }
}

// (batch, k, k): the identity for every batch row, so that weights @ values is the (dropped) weights themselves.
template <class Scalar>
Tensor3<Scalar> identity_values(Index batch, Index keys) {
  Tensor3<Scalar> V(batch, keys, keys);  // (batch, k, k)
  V.setZero();
  for (Index b = 0; b < batch; ++b)
    for (Index k = 0; k < keys; ++k) V(b, k, k) = Scalar(1);
  return V;
}

}  // namespace

// ---- attend::dropout ------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("dropout with p = 0 is the identity", "[dropout]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 1);
  Generator generator(9);
  const Tensor3<TestType> Y = attend::dropout(X, TestType(0), generator);
  CHECK(equal(X, Y));
}

TEMPLATE_TEST_CASE("dropout with p = 1 zeroes everything", "[dropout]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 1, TestType(1), TestType(2));
  Generator generator(9);
  const Tensor3<TestType> Y = attend::dropout(X, TestType(1), generator);
  REQUIRE(Y.dimensions() == X.dimensions());
  for (Index i = 0; i < Y.size(); ++i) CHECK(Y.data()[i] == TestType(0));
}

TEMPLATE_TEST_CASE("dropout with p = 0.5 keeps each entry as exactly twice itself or zeroes it", "[dropout]", float,
                   double) {
  // Inverted dropout: kept entries are scaled by 1 / (1 - p) = 2, exact in binary floating point.
  const Tensor3<TestType> X = random_tensor<TestType>(4, 5, 6, 2, TestType(1), TestType(2));  // no zeros in X
  Generator generator(10);
  const Tensor3<TestType> Y = attend::dropout(X, TestType(0.5), generator);
  REQUIRE(Y.dimensions() == X.dimensions());
  Index kept = 0;
  for (Index i = 0; i < Y.size(); ++i) {
    CAPTURE(i, X.data()[i], Y.data()[i]);
    const bool dropped = Y.data()[i] == TestType(0);
    CHECK((dropped || Y.data()[i] == 2 * X.data()[i]));
    kept += dropped ? 0 : 1;
  }
  // Both outcomes happen among 120 entries.
  CHECK(kept > 0);
  CHECK(kept < Y.size());
}

TEMPLATE_TEST_CASE("dropout scales kept entries by 1 / (1 - p)", "[dropout]", float, double) {
  const TestType p = GENERATE(TestType(0.1), TestType(0.3), TestType(0.9));
  CAPTURE(p);
  const Tensor3<TestType> X = random_tensor<TestType>(3, 7, 5, 3, TestType(1), TestType(2));
  Generator generator(11);
  const Tensor3<TestType> Y = attend::dropout(X, p, generator);
  const double scale = 1.0 / (1.0 - static_cast<double>(p));
  for (Index i = 0; i < Y.size(); ++i) {
    if (Y.data()[i] == TestType(0)) continue;
    CAPTURE(i);
    // x * (1 / (1 - p)) in Scalar: two roundings away from the exact value.
    CHECK_THAT(static_cast<double>(Y.data()[i]),
               Catch::Matchers::WithinRel(static_cast<double>(X.data()[i]) * scale,
                                          4.0 * std::numeric_limits<TestType>::epsilon()));
  }
}

TEMPLATE_TEST_CASE("dropout keeps a fraction 1 - p of the entries, within 5 sigma", "[dropout]", float, double) {
  const TestType p = GENERATE(TestType(0.1), TestType(0.5), TestType(0.9));
  CAPTURE(p);
  Tensor3<TestType> X(4, 500, 100);  // 200000 entries
  X.setConstant(TestType(1));
  Generator generator(12);
  const Tensor3<TestType> Y = attend::dropout(X, p, generator);
  double kept = 0;
  for (Index i = 0; i < Y.size(); ++i) kept += Y.data()[i] != TestType(0) ? 1 : 0;
  // Each entry is kept independently with probability 1 - p: a binomial count, sigma = sqrt(n p (1 - p)).
  const double n = static_cast<double>(Y.size());
  const double q = 1.0 - static_cast<double>(p);
  const double sigma = std::sqrt(n * q * (1.0 - q));
  CAPTURE(kept, n * q, sigma);
  CHECK(std::abs(kept - n * q) < 5 * sigma);
}

TEMPLATE_TEST_CASE("dropout's mask depends only on the generator's seed", "[dropout]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 8, 16, 4, TestType(1), TestType(2));
  Generator a(123), b(123), c(124);
  const Tensor3<TestType> Ya = attend::dropout(X, TestType(0.5), a);
  const Tensor3<TestType> Yb = attend::dropout(X, TestType(0.5), b);
  const Tensor3<TestType> Yc = attend::dropout(X, TestType(0.5), c);
  CHECK(equal(Ya, Yb));
  CHECK(zeros(Ya) != zeros(Yc));
  // The generator moves on: a second call draws a new mask.
  const Tensor3<TestType> Ya2 = attend::dropout(X, TestType(0.5), a);
  CHECK(zeros(Ya) != zeros(Ya2));
}

TEMPLATE_TEST_CASE("dropout rejects p outside [0, 1] and NaN, naming dropout and the value", "[dropout][errors]", float,
                   double) {
  const Tensor3<TestType> X = random_tensor<TestType>(1, 2, 3, 5);
  Generator generator(1);
  REQUIRE_THROWS_AS(attend::dropout(X, TestType(-0.1), generator), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::dropout(X, TestType(-0.1), generator),
                      Contains("dropout") && Contains("[0, 1]") && Contains("-0.1"));
  REQUIRE_THROWS_WITH(attend::dropout(X, TestType(1.5), generator),
                      Contains("dropout") && Contains("[0, 1]") && Contains("1.5"));
  const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
  REQUIRE_THROWS_AS(attend::dropout(X, nan, generator), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::dropout(X, nan, generator),
                      Contains("dropout") && Contains("[0, 1]") && Contains("nan", Catch::CaseSensitive::No));
  const TestType inf = std::numeric_limits<TestType>::infinity();
  REQUIRE_THROWS_WITH(attend::dropout(X, inf, generator),
                      Contains("dropout") && Contains("inf", Catch::CaseSensitive::No));
}

// ---- the attention weights' mask: Philox-4x32-10 ------------------------------------------------------------------

TEST_CASE("philox4x32_10 gives the published known-answer vectors", "[dropout][philox]") {
  // Random123's kat_vectors for philox4x32 with 10 rounds (Salmon et al., SC 2011): counter, key -> output.
  using attend::detail::philox4x32_10;
  using Words = attend::detail::PhiloxWords;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEMPLATE_TEST_CASE("the attention dropout mask: a pure function of its place, dropping a fraction p",
                   "[dropout][philox]", float, double) {
  const attend::detail::AttentionDropout dropout(0.3, 0x1234567890abcdefULL);
  const Index queries = 64, keys = 203;
  std::vector<TestType> row(static_cast<std::size_t>(keys));
  Index dropped = 0;
  for (Index pair = 0; pair < 3; ++pair)
    for (Index q = 0; q < queries; ++q) {
      std::fill(row.begin(), row.end(), TestType(1));
      dropout.apply(row.data(), keys, pair, q, 0);
      for (Index k = 0; k < keys; ++k) {
        const TestType x = row[static_cast<std::size_t>(k)];
        REQUIRE((x == TestType(0)) == dropout.dropped(pair, q, k));  // entry by entry, the same decision
        REQUIRE((x == TestType(0) || x == TestType(1) / (TestType(1) - TestType(0.3))));
        dropped += x == TestType(0);
      }
      // Any part of a row, from any key on (a block of the tiled path), gets the same factors.
      std::vector<TestType> part(static_cast<std::size_t>(keys - 37), TestType(1));
      dropout.apply(part.data(), keys - 37, pair, q, 37);
      for (Index k = 37; k < keys; ++k)
        REQUIRE(part[static_cast<std::size_t>(k - 37)] == row[static_cast<std::size_t>(k)]);
    }
  // 38976 draws: the fraction within 5 standard deviations (0.0023) of p.
  const double fraction = static_cast<double>(dropped) / static_cast<double>(3 * queries * keys);
  CHECK(std::abs(fraction - 0.3) < 0.012);
  // p = 0 drops nothing and p = 1 everything.
  std::fill(row.begin(), row.end(), TestType(2));
  attend::detail::AttentionDropout(0.0, 5).apply(row.data(), keys, 0, 0, 0);
  for (TestType x : row) REQUIRE(x == TestType(2));
  attend::detail::AttentionDropout(1.0, 5).apply(row.data(), keys, 0, 0, 0);
  for (TestType x : row) REQUIRE(x == TestType(0));
}

// ---- DotProductAttention --------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("DotProductAttention's dropout repeats with a reseeded generator", "[dropout][dot_product]", float,
                   double) {
  Generator init(1);
  attend::DotProductAttention<TestType> attention(TestType(0.5), init);
  REQUIRE(attention.is_training());
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, 31);  // (batch, q, d)
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 4, 32);     // (batch, k, d)
  const Tensor3<TestType> values = random_tensor<TestType>(2, 6, 5, 33);   // (batch, k, v)

  attention.generator().seed(3);
  const Tensor3<TestType> first = attention(queries, keys, values, ValidLens{4, 6});
  attention.generator().seed(3);
  const Tensor3<TestType> second = attention(queries, keys, values, ValidLens{4, 6});
  CHECK(equal(first, second));

  // Without reseeding, the next mask differs.
  const Tensor3<TestType> third = attention(queries, keys, values, ValidLens{4, 6});
  CHECK_FALSE(equal(first, third));
}

TEMPLATE_TEST_CASE("DotProductAttention keeps the weights before dropout", "[dropout][dot_product]", float, double) {
  Generator init(2);
  attend::DotProductAttention<TestType> attention(TestType(0.5), init);
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, 41);  // (batch, q, d)
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 4, 42);     // (batch, k, d)
  const Tensor3<TestType> values = identity_values<TestType>(2, 6);        // (batch, k, k)
  const ValidLens lens{4, 6};

  const Tensor3<TestType> trained = attention(queries, keys, values, lens);
  const Tensor3<TestType> trained_weights = attention.attention_weights();  // (batch, q, k)
  check_rows_sum_to_one(trained_weights);

  attention.eval();
  const Tensor3<TestType> evaluated = attention(queries, keys, values, lens);
  REQUIRE_THAT(trained_weights, attend_test::Near(attention.attention_weights(), attend_test::tolerance<TestType>()));

  // With identity values the training output is the dropped weights: each entry 0 or exactly 2 * weight (p = 0.5).
  REQUIRE(trained.dimensions() == trained_weights.dimensions());
  Index dropped = 0, kept = 0;
  for (Index i = 0; i < trained.size(); ++i) {
    const TestType w = trained_weights.data()[i], y = trained.data()[i];
    if (w == TestType(0)) continue;  // masked keys (past the valid length) have weight 0 either way
    CAPTURE(i, w, y);
    CHECK((y == TestType(0) || y == 2 * w));
    (y == TestType(0) ? dropped : kept) += 1;
  }
  CHECK(dropped > 0);
  CHECK(kept > 0);
  // In evaluation the output is the weights themselves.
  CHECK(equal(evaluated, attention.attention_weights()));
}

TEMPLATE_TEST_CASE("DotProductAttention in eval() is deterministic and equals weights @ values",
                   "[dropout][dot_product]", float, double) {
  Generator init(3);
  attend::DotProductAttention<TestType> attention(TestType(0.5), init);
  attention.eval();
  REQUIRE_FALSE(attention.is_training());
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, 51);  // (batch, q, d)
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 4, 52);     // (batch, k, d)
  const Tensor3<TestType> values = random_tensor<TestType>(2, 6, 5, 53);   // (batch, k, v)

  const Tensor3<TestType> first = attention(queries, keys, values, ValidLens{2, 5});
  attention.generator().seed(999);  // the mask generator plays no part in evaluation
  const Tensor3<TestType> second = attention(queries, keys, values, ValidLens{2, 5});
  CHECK(equal(first, second));
  check_rows_sum_to_one(attention.attention_weights());
  REQUIRE_THAT(first,
               attend_test::Near(bmm(attention.attention_weights(), values), attend_test::tolerance<TestType>()));

  // train() turns dropout back on.
  attention.train();
  REQUIRE(attention.is_training());
  const Tensor3<TestType> trained = attention(queries, keys, values, ValidLens{2, 5});
  CHECK_FALSE(equal(first, trained));
}

TEMPLATE_TEST_CASE("DotProductAttention with dropout 1 outputs zeros in training", "[dropout][dot_product]", float,
                   double) {
  Generator init(4);
  attend::DotProductAttention<TestType> attention(TestType(1), init);
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, 61);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 4, 62);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 6, 5, 63, TestType(1), TestType(2));
  const Tensor3<TestType> Y = attention(queries, keys, values);
  REQUIRE(Y.dimension(0) == 2);
  REQUIRE(Y.dimension(1) == 3);
  REQUIRE(Y.dimension(2) == 5);
  for (Index i = 0; i < Y.size(); ++i) CHECK(Y.data()[i] == TestType(0));
  check_rows_sum_to_one(attention.attention_weights());  // the kept weights are those before dropout

  attention.eval();
  const Tensor3<TestType> evaluated = attention(queries, keys, values);
  REQUIRE_THAT(evaluated,
               attend_test::Near(bmm(attention.attention_weights(), values), attend_test::tolerance<TestType>()));
}

// ---- AdditiveAttention ----------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("AdditiveAttention keeps the weights before dropout, and repeats with a reseeded generator",
                   "[dropout][additive]", float, double) {
  Generator init(5);
  attend::AdditiveAttention<TestType> attention(4, 3, 8, TestType(0.5), init);  // key_size 4, query_size 3
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 3, 71);       // (batch, q, query_size)
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 4, 72);          // (batch, k, key_size)
  const Tensor3<TestType> values = identity_values<TestType>(2, 6);             // (batch, k, k)

  attention.generator().seed(3);
  const Tensor3<TestType> first = attention(queries, keys, values, ValidLens{6, 4});
  const Tensor3<TestType> trained_weights = attention.attention_weights();
  attention.generator().seed(3);
  CHECK(equal(first, attention(queries, keys, values, ValidLens{6, 4})));
  check_rows_sum_to_one(trained_weights);
  for (Index i = 0; i < first.size(); ++i) {
    CAPTURE(i);
    CHECK((first.data()[i] == TestType(0) || first.data()[i] == 2 * trained_weights.data()[i]));
  }

  attention.eval();
  const Tensor3<TestType> evaluated = attention(queries, keys, values, ValidLens{6, 4});
  REQUIRE_THAT(trained_weights, attend_test::Near(attention.attention_weights(), attend_test::tolerance<TestType>()));
  CHECK(equal(evaluated, attention.attention_weights()));
  CHECK_FALSE(equal(first, evaluated));
}

// ---- MultiHeadAttention ---------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("MultiHeadAttention's dropout repeats with a reseeded generator and keeps the weights before it",
                   "[dropout][multi_head]", float, double) {
  Generator init(6);
  // key_size 5, query_size 4, value_size 3, num_hiddens 8, 2 heads.
  attend::MultiHeadAttention<TestType> attention(5, 4, 3, 8, 2, TestType(0.5), false, init);
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, 81);  // (batch, q, query_size)
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 6, 5, 82);     // (batch, k, key_size)
  const Tensor3<TestType> values = random_tensor<TestType>(2, 6, 3, 83);   // (batch, k, value_size)
  const ValidLens lens{3, 6};

  attention.generator().seed(3);
  const Tensor3<TestType> first = attention(queries, keys, values, lens);
  const Tensor3<TestType> trained_weights = attention.attention_weights();  // (batch * num_heads, q, k)
  attention.generator().seed(3);
  const Tensor3<TestType> second = attention(queries, keys, values, lens);
  CHECK(equal(first, second));
  const Tensor3<TestType> third = attention(queries, keys, values, lens);
  CHECK_FALSE(equal(first, third));

  REQUIRE(trained_weights.dimension(0) == 4);
  check_rows_sum_to_one(trained_weights);

  attention.eval();
  const Tensor3<TestType> evaluated = attention(queries, keys, values, lens);
  REQUIRE_THAT(trained_weights, attend_test::Near(attention.attention_weights(), attend_test::tolerance<TestType>()));
  CHECK_FALSE(equal(first, evaluated));

  attention.generator().seed(77);  // no part in evaluation
  CHECK(equal(evaluated, attention(queries, keys, values, lens)));
}

// ---- constructors ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("modules reject a dropout outside [0, 1], naming the module, dropout and the value",
                   "[dropout][errors]", float, double) {
  const TestType bad = GENERATE(TestType(-0.1), TestType(1.5));
  const char* shown = bad < 0 ? "-0.1" : "1.5";
  CAPTURE(bad);
  using Dot = attend::DotProductAttention<TestType>;
  using Additive = attend::AdditiveAttention<TestType>;
  using MultiHead = attend::MultiHeadAttention<TestType>;
  using Encoding = attend::PositionalEncoding<TestType>;

  REQUIRE_THROWS_AS(Dot(bad), std::invalid_argument);
  REQUIRE_THROWS_WITH(Dot(bad),
                      Contains("DotProductAttention") && Contains("dropout") && Contains("[0, 1]") && Contains(shown));
  REQUIRE_THROWS_AS(Additive(4, 3, 8, bad), std::invalid_argument);
  REQUIRE_THROWS_WITH(Additive(4, 3, 8, bad),
                      Contains("AdditiveAttention") && Contains("dropout") && Contains("[0, 1]") && Contains(shown));
  REQUIRE_THROWS_AS(MultiHead(5, 4, 3, 8, 2, bad), std::invalid_argument);
  REQUIRE_THROWS_WITH(MultiHead(5, 4, 3, 8, 2, bad),
                      Contains("MultiHeadAttention") && Contains("dropout") && Contains("[0, 1]") && Contains(shown));
  REQUIRE_THROWS_AS(Encoding(32, bad), std::invalid_argument);
  REQUIRE_THROWS_WITH(Encoding(32, bad),
                      Contains("PositionalEncoding") && Contains("dropout") && Contains("[0, 1]") && Contains(shown));
}

TEMPLATE_TEST_CASE("modules accept dropout 0 and 1", "[dropout]", float, double) {
  for (const TestType p : {TestType(0), TestType(1)}) {
    CAPTURE(p);
    CHECK_NOTHROW(attend::DotProductAttention<TestType>(p));
    CHECK_NOTHROW(attend::AdditiveAttention<TestType>(4, 3, 8, p));
    CHECK_NOTHROW(attend::MultiHeadAttention<TestType>(5, 4, 3, 8, 2, p));
    CHECK_NOTHROW(attend::PositionalEncoding<TestType>(32, p, 60));
  }
}

// ---- PositionalEncoding ---------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("PositionalEncoding applies dropout to X + P in training only", "[dropout][positional_encoding]",
                   float, double) {
  Generator init(7);
  attend::PositionalEncoding<TestType> encoding(8, TestType(0.5), 20, init);
  // X + P has no zeros: X in [3, 4), |P| <= 1.
  const Tensor3<TestType> X = random_tensor<TestType>(2, 10, 8, 91, TestType(3), TestType(4));
  encoding.generator().seed(3);
  const Tensor3<TestType> trained = encoding(X);
  encoding.generator().seed(3);
  CHECK(equal(trained, encoding(X)));

  encoding.eval();
  const Tensor3<TestType> evaluated = encoding(X);  // X + P[:10]
  Index dropped = 0;
  for (Index i = 0; i < trained.size(); ++i) {
    CAPTURE(i);
    REQUIRE(evaluated.data()[i] != TestType(0));
    CHECK((trained.data()[i] == TestType(0) || trained.data()[i] == 2 * evaluated.data()[i]));
    dropped += trained.data()[i] == TestType(0) ? 1 : 0;
  }
  CHECK(dropped > 0);
  CHECK(dropped < trained.size());
}
