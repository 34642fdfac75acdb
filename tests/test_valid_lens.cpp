// ValidLens: d2l's valid lengths, per batch row or per query, and the checks that guard them.
#include <attend/masked_softmax.hpp>
#include <attend/valid_lens.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

using attend::Index;
using attend::ValidLens;
using Catch::Contains;

TEST_CASE("a default ValidLens masks nothing", "[valid_lens]") {
  const ValidLens none;
  CHECK(none.empty());
  CHECK(none.kind() == ValidLens::Kind::none);
  CHECK(none.batch() == 0);
  CHECK(none.queries() == 0);

  const ValidLens braces{};  // value-initialised, not an empty per-batch list
  CHECK(braces.empty());

  // No shape is wrong for "no masking".
  CHECK_NOTHROW(none.require_shape(2, 4, "test"));
  CHECK_NOTHROW(none.require_shape(0, 0, "test"));
}

TEST_CASE("ValidLens{3, 2} holds one length per batch row, the same for every query", "[valid_lens]") {
  // The seed's example: attention(X, X, X, valid_lens) with valid_lens = torch.tensor([3, 2]).
  const ValidLens lens{3, 2};
  CHECK_FALSE(lens.empty());
  CHECK(lens.kind() == ValidLens::Kind::per_batch);
  CHECK(lens.batch() == 2);
  CHECK(lens.queries() == 1);
  for (Index q = 0; q < 4; ++q) {
    CAPTURE(q);
    CHECK(lens.length(0, q) == 3);
    CHECK(lens.length(1, q) == 2);
  }
}

TEST_CASE("ValidLens::per_batch gives shape (batch,)", "[valid_lens]") {
  const ValidLens lens = ValidLens::per_batch({5, 0, 7});
  CHECK_FALSE(lens.empty());
  CHECK(lens.kind() == ValidLens::Kind::per_batch);
  CHECK(lens.batch() == 3);
  CHECK(lens.queries() == 1);
  for (Index q = 0; q < 3; ++q) {
    CAPTURE(q);
    CHECK(lens.length(0, q) == 5);
    CHECK(lens.length(1, q) == 0);  // 0 is allowed: the row gets uniform weights (d2l's -1e6)
    CHECK(lens.length(2, q) == 7);  // longer than any key count: allowed, masks nothing
  }

  // The initializer-list constructor and per_batch are the same thing.
  const ValidLens braces{5, 0, 7};
  CHECK(braces.kind() == lens.kind());
  CHECK(braces.batch() == lens.batch());
  for (Index b = 0; b < 3; ++b) CHECK(braces.length(b, 0) == lens.length(b, 0));
}

TEST_CASE("ValidLens::per_query gives shape (batch, num_queries), indexed (b, q)", "[valid_lens]") {
  // d2l's second masked_softmax example uses torch.tensor([[1, 3], [2, 4]]); here every entry differs so that a
  // transposed or column-major read would be caught.
  attend::Matrix<Index> per_query(2, 3);  // (batch, num_queries): [[1, 3, 5], [2, 4, 6]]
  for (Index b = 0; b < 2; ++b)
    for (Index q = 0; q < 3; ++q) per_query(b, q) = 2 * q + b + 1;
  const ValidLens lens = ValidLens::per_query(per_query);
  CHECK_FALSE(lens.empty());
  CHECK(lens.kind() == ValidLens::Kind::per_query);
  CHECK(lens.batch() == 2);
  CHECK(lens.queries() == 3);
  for (Index b = 0; b < 2; ++b)
    for (Index q = 0; q < 3; ++q) {
      CAPTURE(b, q);
      CHECK(lens.length(b, q) == per_query(b, q));
    }
}

TEST_CASE("ValidLens::per_query reads a column-major matrix by (b, q) too", "[valid_lens]") {
  Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor> column_major(2, 3);  // (batch, queries)
  column_major << 1, 3, 5, 2, 4, 6;
  const ValidLens lens = ValidLens::per_query(column_major);
  REQUIRE(lens.batch() == 2);
  REQUIRE(lens.queries() == 3);
  for (Index b = 0; b < 2; ++b)
    for (Index q = 0; q < 3; ++q) {
      CAPTURE(b, q);
      CHECK(lens.length(b, q) == column_major(b, q));
    }
}

TEST_CASE("a negative length throws, naming the value, from every constructor", "[valid_lens][errors]") {
  SECTION("initializer list") {
    REQUIRE_THROWS_AS((ValidLens{3, -1}), std::invalid_argument);
    REQUIRE_THROWS_WITH((ValidLens{3, -1}), Contains("lengths") && Contains(">= 0") && Contains("got -1"));
  }
  SECTION("per_batch") {
    REQUIRE_THROWS_AS(ValidLens::per_batch({-4, 2}), std::invalid_argument);
    REQUIRE_THROWS_WITH(ValidLens::per_batch({-4, 2}),
                        Contains("per_batch") && Contains("lengths") && Contains(">= 0") && Contains("got -4"));
  }
  SECTION("per_query") {
    attend::Matrix<Index> per_query(2, 2);
    per_query << 1, 2, 3, -7;
    REQUIRE_THROWS_AS(ValidLens::per_query(per_query), std::invalid_argument);
    REQUIRE_THROWS_WITH(ValidLens::per_query(per_query),
                        Contains("per_query") && Contains("lengths") && Contains(">= 0") && Contains("got -7"));
  }
}

TEST_CASE("require_shape accepts the shapes the lengths describe", "[valid_lens]") {
  const ValidLens per_batch{3, 2};
  CHECK_NOTHROW(per_batch.require_shape(2, 1, "test"));
  CHECK_NOTHROW(per_batch.require_shape(2, 9, "test"));  // per-batch lengths repeat over any number of queries

  attend::Matrix<Index> m(2, 4);
  m.setConstant(1);
  const ValidLens per_query = ValidLens::per_query(m);
  CHECK_NOTHROW(per_query.require_shape(2, 4, "test"));
}

TEST_CASE("require_shape mismatches throw naming both shapes and the caller", "[valid_lens][errors]") {
  SECTION("per batch: 2 lengths for 3 batch rows") {
    const ValidLens lens{3, 2};
    REQUIRE_THROWS_AS(lens.require_shape(3, 4, "where"), std::invalid_argument);
    REQUIRE_THROWS_WITH(lens.require_shape(3, 4, "where"),
                        Contains("where") && Contains("valid_lens") && Contains("(3,)") && Contains("(2,)"));
  }
  SECTION("per query: wrong number of queries") {
    attend::Matrix<Index> m(2, 3);
    m.setConstant(1);
    const ValidLens lens = ValidLens::per_query(m);
    REQUIRE_THROWS_AS(lens.require_shape(2, 4, "where"), std::invalid_argument);
    REQUIRE_THROWS_WITH(lens.require_shape(2, 4, "where"),
                        Contains("where") && Contains("valid_lens") && Contains("(2, 4)") && Contains("(2, 3)"));
  }
  SECTION("per query: wrong batch") {
    attend::Matrix<Index> m(2, 3);
    m.setConstant(1);
    const ValidLens lens = ValidLens::per_query(m);
    REQUIRE_THROWS_AS(lens.require_shape(5, 3, "where"), std::invalid_argument);
    REQUIRE_THROWS_WITH(lens.require_shape(5, 3, "where"),
                        Contains("where") && Contains("valid_lens") && Contains("(5, 3)") && Contains("(2, 3)"));
  }
}

TEST_CASE("a public entry point passes the shape check through", "[valid_lens][errors]") {
  attend::Tensor3<double> X(3, 2, 4);  // (batch, queries, keys)
  X.setZero();
  REQUIRE_THROWS_AS(attend::masked_softmax(X, ValidLens{3, 2}), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::masked_softmax(X, ValidLens{3, 2}),
                      Contains("masked_softmax") && Contains("(3,)") && Contains("(2,)"));
}
