// DotProductAttention against d2l's PyTorch code (fixtures) and the book's printed example.
#include <attend/dot_product_attention.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>

using attend::Index;
using attend::Tensor3;
using attend::ValidLens;

TEMPLATE_TEST_CASE("DotProductAttention matches d2l's", "[dot_product_attention][golden]", float, double) {
  const auto name =
      GENERATE(as<std::string>{}, "dot_product_none", "dot_product_1d", "dot_product_2d", "dot_product_book");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  attend::DotProductAttention<TestType> attention(TestType(0.5));
  attention.eval();
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), fixture.tensor3<TestType>("keys"),
                                             fixture.tensor3<TestType>("values"), attend_test::valid_lens(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

// d2l's example: keys are all ones, so every key scores the same and the output is the mean of the first
// valid_len rows of values = arange(40).reshape(10, 4); the book prints [[[2, 3, 4, 5]], [[10, 11, 12, 13]]].
TEMPLATE_TEST_CASE("DotProductAttention gives the book's printed output", "[dot_product_attention]", float, double) {
  const attend_test::Fixture fixture("dot_product_book");
  attend::DotProductAttention<TestType> attention(TestType(0.5));
  attention.eval();
  Tensor3<TestType> keys(2, 10, 2), values(2, 10, 4);
  keys.setConstant(1);
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < 40; ++i) values(b, i / 4, i % 4) = static_cast<TestType>(i);
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), keys, values, ValidLens{2, 6});
  Tensor3<double> printed(2, 1, 4);
  printed.setValues({{{2, 3, 4, 5}}, {{10, 11, 12, 13}}});
  REQUIRE_THAT(output, attend_test::Near(printed, attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("DotProductAttention rejects inconsistent shapes", "[dot_product_attention][errors]", float,
                   double) {
  attend::DotProductAttention<TestType> attention(TestType(0));
  Tensor3<TestType> queries(2, 3, 4), keys(2, 5, 4), values(2, 5, 6);
  queries.setZero();
  keys.setZero();
  values.setZero();
  Tensor3<TestType> wrong_width(2, 5, 3), wrong_batch(3, 5, 4), wrong_steps(2, 4, 6), no_features(2, 3, 0);
  wrong_width.setZero();
  wrong_batch.setZero();
  wrong_steps.setZero();
  using Catch::Matchers::Message;
  REQUIRE_THROWS_MATCHES(attention(queries, wrong_width, values), std::invalid_argument,
                         Message("DotProductAttention: queries and keys must have the same feature size (axis 2), got "
                                 "queries (2, 3, 4) and keys (2, 5, 3)"));
  REQUIRE_THROWS_MATCHES(attention(queries, wrong_batch, values), std::invalid_argument,
                         Message("DotProductAttention: queries and keys must have the same batch size (axis 0), got "
                                 "queries (2, 3, 4) and keys (3, 5, 4)"));
  REQUIRE_THROWS_MATCHES(attention(queries, keys, wrong_steps), std::invalid_argument,
                         Message("DotProductAttention: keys and values must have the same number of steps (axis 1), "
                                 "got keys (2, 5, 4) and values (2, 4, 6)"));
  REQUIRE_THROWS_MATCHES(attention(no_features, Tensor3<TestType>(2, 5, 0), values), std::invalid_argument,
                         Message("DotProductAttention: queries must have at least 1 feature, got shape (2, 3, 0)"));
  REQUIRE_THROWS_MATCHES(attention(queries, keys, values, ValidLens{1}), std::invalid_argument,
                         Message("DotProductAttention: valid_lens must have shape (2,) (one per batch row), got (1,)"));
}

TEMPLATE_TEST_CASE("DotProductAttention keeps its last weights when a call throws", "[dot_product_attention][errors]",
                   float, double) {
  attend::DotProductAttention<TestType> attention(TestType(0));
  Tensor3<TestType> queries(1, 2, 3), keys(1, 4, 3), values(1, 4, 2);
  queries.setRandom();
  keys.setRandom();
  values.setRandom();
  const Tensor3<TestType> first = attention(queries, keys, values, ValidLens{3});
  const Tensor3<TestType> weights = attention.attention_weights();
  REQUIRE_THROWS_AS(attention(queries, keys, values, ValidLens{3, 1}), std::invalid_argument);
  REQUIRE_THAT(attention.attention_weights(), attend_test::Near(weights, attend_test::Tolerance<TestType>{0, 0}));
  REQUIRE_THAT(attention(queries, keys, values, ValidLens{3}),
               attend_test::Near(first, attend_test::Tolerance<TestType>{0, 0}));
}
