// MultiHeadAttention against d2l's PyTorch code (fixtures), against the literal d2l route built from attend's own
// pieces, and on the seed's example.
#include <attend/dot_product_attention.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/transpose_qkv.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/fixture_modules.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>

using attend::Index;
using attend::Tensor3;
using attend::ValidLens;

namespace {

// d2l: valid_lens = torch.repeat_interleave(valid_lens, repeats=num_heads, dim=0).
ValidLens repeat_interleave(const ValidLens& lens, Index num_heads) {
  if (lens.empty()) return lens;
  if (lens.kind() == ValidLens::Kind::per_batch) {
    std::vector<Index> repeated;
    for (Index b = 0; b < lens.batch(); ++b)
      for (Index h = 0; h < num_heads; ++h) repeated.push_back(lens.length(b, 0));
    return ValidLens::per_batch(repeated);
  }
  attend::Matrix<Index> repeated(lens.batch() * num_heads, lens.queries());
  for (Index b = 0; b < lens.batch(); ++b)
    for (Index h = 0; h < num_heads; ++h)
      for (Index q = 0; q < lens.queries(); ++q) repeated(b * num_heads + h, q) = lens.length(b, q);
  return ValidLens::per_query(repeated);
}

const char* const golden_cases[] = {"mha_h1_nobias_none", "mha_h2_bias_1d",    "mha_h3_nobias_1d", "mha_h4_bias_2d",
                                    "mha_h6_nobias_2d",   "mha_h12_bias_none", "mha_h2_nobias_1d", "mha_h3_bias_2d"};

}  // namespace

TEMPLATE_TEST_CASE("MultiHeadAttention matches d2l's (cross-attention, heads, bias, lengths)",
                   "[multi_head_attention][golden]", float, double) {
  const std::string name = GENERATE(from_range(std::begin(golden_cases), std::end(golden_cases)));
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  auto attention = attend_test::mha_from_fixture<TestType>(fixture);
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), fixture.tensor3<TestType>("keys"),
                                             fixture.tensor3<TestType>("values"), attend_test::valid_lens(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

TEMPLATE_TEST_CASE("MultiHeadAttention matches d2l's on the seed's self-attention", "[multi_head_attention][golden]",
                   float, double) {
  const attend_test::Fixture fixture("mha_self_seed");
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");  // (2, 4, 100)
  auto attention = attend_test::mha_from_fixture<TestType>(fixture);
  REQUIRE(attention.num_heads() == 5);
  const Tensor3<TestType> output = attention(X, X, X, attend_test::valid_lens(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

// The seed's forward, literally: project, transpose_qkv, DotProductAttention on (batch * heads) rows with the
// lengths repeated per head, transpose_output, W_o. The module computes the same without building the copies.
TEMPLATE_TEST_CASE("MultiHeadAttention's strided heads equal the literal transpose_qkv route", "[multi_head_attention]",
                   float, double) {
  const std::string name = GENERATE(from_range(std::begin(golden_cases), std::end(golden_cases)));
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  auto attention = attend_test::mha_from_fixture<TestType>(fixture);
  const auto queries = fixture.tensor3<TestType>("queries");  // (2, 3, 5)
  const auto keys = fixture.tensor3<TestType>("keys");        // (2, 7, 6)
  const auto values = fixture.tensor3<TestType>("values");    // (2, 7, 4)
  const ValidLens lens = attend_test::valid_lens(fixture);
  const Index h = attention.num_heads();

  const Tensor3<TestType> q = attend::transpose_qkv(attention.W_q()(queries), h);  // (2h, 3, 12/h)
  const Tensor3<TestType> k = attend::transpose_qkv(attention.W_k()(keys), h);     // (2h, 7, 12/h)
  const Tensor3<TestType> v = attend::transpose_qkv(attention.W_v()(values), h);   // (2h, 7, 12/h)
  attend::DotProductAttention<TestType> dot(TestType(0.5));
  dot.eval();
  const Tensor3<TestType> heads = dot(q, k, v, repeat_interleave(lens, h));               // (2h, 3, 12/h)
  const Tensor3<TestType> literal = attention.W_o()(attend::transpose_output(heads, h));  // (2, 3, 12)

  const Tensor3<TestType> fast = attention(queries, keys, values, lens);
  // Same operations in the same order on the same numbers: equal up to the GEMM kernels' summation order.
  const attend_test::Tolerance<TestType> same{16 * std::numeric_limits<TestType>::epsilon(),
                                              16 * std::numeric_limits<TestType>::epsilon()};
  REQUIRE_THAT(fast, attend_test::Near(literal, same));
  REQUIRE_THAT(attention.attention_weights(), attend_test::Near(dot.attention_weights(), same));
}

// The seed's example, as the contract states it: output shape (2, 4, 100), printed by the seed as
// torch.Size([2, 4, 100]).
TEMPLATE_TEST_CASE("the seed's example gives shape (2, 4, 100)", "[multi_head_attention]", float, double) {
  const Index num_hiddens = 100, num_heads = 5;
  attend::MultiHeadAttention<TestType> attention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads,
                                                 TestType(0.5));
  attention.eval();
  Tensor3<TestType> X(2, 4, num_hiddens);
  X.setConstant(1);
  const Tensor3<TestType> Y = attention(X, X, X, ValidLens{3, 2});
  CHECK(Y.dimension(0) == 2);
  CHECK(Y.dimension(1) == 4);
  CHECK(Y.dimension(2) == 100);
  const auto& weights = attention.attention_weights();  // (10, 4, 4)
  REQUIRE(weights.dimension(0) == 10);
  // Identical rows score equally: uniform over the valid keys, 0 past them, in every head.
  for (Index b = 0; b < 2; ++b)
    for (Index head = 0; head < num_heads; ++head)
      for (Index q = 0; q < 4; ++q)
        for (Index j = 0; j < 4; ++j) {
          const Index valid = b == 0 ? 3 : 2;
          CHECK_THAT(weights(b * num_heads + head, q, j),
                     Catch::Matchers::WithinAbs(j < valid ? 1.0 / valid : 0.0, 1e-6));
        }
}

TEMPLATE_TEST_CASE("MultiHeadAttention rejects bad configurations", "[multi_head_attention][errors]", float, double) {
  using Catch::Matchers::Message;
  using MHA = attend::MultiHeadAttention<TestType>;
  REQUIRE_THROWS_MATCHES(MHA(6, 5, 4, 100, 3, 0), std::invalid_argument,
                         Message("MultiHeadAttention: num_hiddens (100) must be divisible by num_heads (3)"));
  REQUIRE_THROWS_MATCHES(MHA(6, 5, 4, 12, 0, 0), std::invalid_argument,
                         Message("MultiHeadAttention: num_heads must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(MHA(6, 0, 4, 12, 2, 0), std::invalid_argument,
                         Message("MultiHeadAttention: query_size must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(MHA(6, 5, 4, 12, 2, TestType(1.5)), std::invalid_argument,
                         Message("MultiHeadAttention: dropout must be in [0, 1], got 1.5"));
}

TEMPLATE_TEST_CASE("MultiHeadAttention rejects bad inputs and stays unchanged", "[multi_head_attention][errors]", float,
                   double) {
  using Catch::Matchers::Message;
  attend::MultiHeadAttention<TestType> attention(6, 5, 4, 12, 3, TestType(0), true);
  Tensor3<TestType> queries(2, 3, 5), keys(2, 7, 6), values(2, 7, 4);
  queries.setRandom();
  keys.setRandom();
  values.setRandom();
  const Tensor3<TestType> first = attention(queries, keys, values, ValidLens{2, 5});
  const Tensor3<TestType> weights = attention.attention_weights();

  REQUIRE_THROWS_MATCHES(attention(keys, keys, values), std::invalid_argument,
                         Message("MultiHeadAttention: queries must have 5 features (query_size) (axis 2), got shape "
                                 "(2, 7, 6)"));
  REQUIRE_THROWS_MATCHES(attention(queries, queries, values), std::invalid_argument,
                         Message("MultiHeadAttention: keys must have 6 features (key_size) (axis 2), got shape "
                                 "(2, 3, 5)"));
  REQUIRE_THROWS_MATCHES(attention(queries, keys, keys), std::invalid_argument,
                         Message("MultiHeadAttention: values must have 4 features (value_size) (axis 2), got shape "
                                 "(2, 7, 6)"));
  Tensor3<TestType> one_row(1, 3, 5);
  one_row.setZero();
  REQUIRE_THROWS_MATCHES(attention(one_row, keys, values), std::invalid_argument,
                         Message("MultiHeadAttention: queries and keys must have the same batch size (axis 0), got "
                                 "queries (1, 3, 5) and keys (2, 7, 6)"));
  attend::Matrix<Index> per_query(2, 7);
  per_query.setOnes();
  REQUIRE_THROWS_MATCHES(attention(queries, keys, values, ValidLens::per_query(per_query)), std::invalid_argument,
                         Message("MultiHeadAttention: valid_lens must have shape (2, 3) (batch, queries), got (2, 7)"));
  const attend::Matrix<TestType> W_o = attention.W_o().weight();
  attention.W_o().weight().resize(12, 6);
  REQUIRE_THROWS_MATCHES(attention(queries, keys, values), std::invalid_argument,
                         Message("MultiHeadAttention W_o: weight must have shape (12, 12) (out_features, "
                                 "in_features), got (12, 6)"));
  attention.W_o().weight() = W_o;
  const attend::Vector<TestType> b_v = attention.W_v().bias();
  attention.W_v().bias().resize(3);
  REQUIRE_THROWS_MATCHES(attention(queries, keys, values), std::invalid_argument,
                         Message("MultiHeadAttention W_v: bias must have shape (12,), got (3,)"));
  attention.W_v().bias() = b_v;

  // Nothing above touched the module's state: the last weights are still there and a good call still works.
  const attend_test::Tolerance<TestType> exact{0, 0};
  REQUIRE_THAT(attention.attention_weights(), attend_test::Near(weights, exact));
  REQUIRE_THAT(attention(queries, keys, values, ValidLens{2, 5}), attend_test::Near(first, exact));
}
