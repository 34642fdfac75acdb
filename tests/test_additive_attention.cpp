// AdditiveAttention against d2l's PyTorch code (fixtures) and the book's printed example.
#include <attend/additive_attention.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>

using attend::Index;
using attend::Tensor3;
using attend::ValidLens;

namespace {

// An AdditiveAttention of the fixture's sizes, holding the fixture's parameters, in eval mode.
template <class Scalar>
attend::AdditiveAttention<Scalar> from_fixture(const attend_test::Fixture& fixture) {
  const auto W_q = fixture.matrix<Scalar>("W_q.weight");  // (num_hiddens, query_size)
  const auto W_k = fixture.matrix<Scalar>("W_k.weight");  // (num_hiddens, key_size)
  attend::AdditiveAttention<Scalar> attention(W_k.cols(), W_q.cols(), W_q.rows(), Scalar(0.1));
  attention.W_q().weight() = W_q;
  attention.W_k().weight() = W_k;
  attention.w_v().weight() = fixture.matrix<Scalar>("w_v.weight");
  attention.eval();
  return attention;
}

}  // namespace

TEMPLATE_TEST_CASE("AdditiveAttention matches d2l's", "[additive_attention][golden]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "additive_none", "additive_1d", "additive_2d", "additive_book");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  auto attention = from_fixture<TestType>(fixture);
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), fixture.tensor3<TestType>("keys"),
                                             fixture.tensor3<TestType>("values"), attend_test::valid_lens(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

// d2l's example: AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1) with keys of ones;
// every key scores the same whatever the parameters, and the book prints [[[2, 3, 4, 5]], [[10, 11, 12, 13]]].
TEMPLATE_TEST_CASE("AdditiveAttention gives the book's printed output", "[additive_attention]", float, double) {
  attend::AdditiveAttention<TestType> attention(2, 20, 8, TestType(0.1));
  attention.eval();
  Tensor3<TestType> queries(2, 1, 20), keys(2, 10, 2), values(2, 10, 4);
  queries.setRandom();
  keys.setConstant(1);
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < 40; ++i) values(b, i / 4, i % 4) = static_cast<TestType>(i);
  const Tensor3<TestType> output = attention(queries, keys, values, ValidLens{2, 6});
  Tensor3<double> printed(2, 1, 4);
  printed.setValues({{{2, 3, 4, 5}}, {{10, 11, 12, 13}}});
  REQUIRE_THAT(output, attend_test::Near(printed, attend_test::tolerance<TestType>()));
  // The weights the book draws: 1/2 on the first two keys of row 0, 1/6 on the first six of row 1, 0 elsewhere.
  const auto& weights = attention.attention_weights();
  for (Index j = 0; j < 10; ++j) {
    CHECK_THAT(weights(0, 0, j), Catch::Matchers::WithinAbs(j < 2 ? 0.5 : 0.0, 1e-6));
    CHECK_THAT(weights(1, 0, j), Catch::Matchers::WithinAbs(j < 6 ? 1.0 / 6 : 0.0, 1e-6));
  }
}

TEMPLATE_TEST_CASE("AdditiveAttention rejects bad sizes and shapes", "[additive_attention][errors]", float, double) {
  using Catch::Matchers::Message;
  REQUIRE_THROWS_MATCHES(attend::AdditiveAttention<TestType>(0, 4, 8, 0), std::invalid_argument,
                         Message("AdditiveAttention: key_size must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(attend::AdditiveAttention<TestType>(3, 4, -2, 0), std::invalid_argument,
                         Message("AdditiveAttention: num_hiddens must be at least 1, got -2"));

  attend::AdditiveAttention<TestType> attention(3, 5, 8, TestType(0));
  Tensor3<TestType> queries(2, 4, 5), keys(2, 6, 3), values(2, 6, 7);
  queries.setZero();
  keys.setZero();
  values.setZero();
  REQUIRE_THROWS_MATCHES(attention(keys, keys, values), std::invalid_argument,
                         Message("AdditiveAttention: queries must have 5 features (query_size) (axis 2), got shape "
                                 "(2, 6, 3)"));
  REQUIRE_THROWS_MATCHES(attention(queries, queries, values), std::invalid_argument,
                         Message("AdditiveAttention: keys must have 3 features (key_size) (axis 2), got shape "
                                 "(2, 4, 5)"));
  Tensor3<TestType> short_values(2, 5, 7);
  short_values.setZero();
  REQUIRE_THROWS_MATCHES(attention(queries, keys, short_values), std::invalid_argument,
                         Message("AdditiveAttention: keys and values must have the same number of steps (axis 1), "
                                 "got keys (2, 6, 3) and values (2, 5, 7)"));
  attention.W_k().weight().resize(8, 4);
  REQUIRE_THROWS_MATCHES(attention(queries, keys, values), std::invalid_argument,
                         Message("AdditiveAttention W_k: weight must have shape (8, 3) (out_features, in_features), "
                                 "got (8, 4)"));
}
