// transpose_qkv / transpose_output against d2l's functions (fixture) and the layout rule of the seed:
// row b * num_heads + h of the result is head h of batch row b.
#include <attend/transpose_qkv.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/matchers.hpp>

using attend::Index;
using attend::Tensor3;

TEMPLATE_TEST_CASE("transpose_qkv and transpose_output match d2l's", "[transpose_qkv][golden]", float, double) {
  const attend_test::Fixture fixture("transpose_qkv");
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");  // (2, 3, 12)
  const Index num_heads = fixture.index("num_heads");          // 4
  const Tensor3<TestType> heads = attend::transpose_qkv(X, num_heads);
  REQUIRE_THAT(heads, attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  REQUIRE_THAT(attend::transpose_output(heads, num_heads),
               attend_test::Near(fixture.tensor3<double>("inverse"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("transpose_qkv puts head h of batch row b in row b * num_heads + h", "[transpose_qkv]", float,
                   double) {
  const Index batch = 3, steps = 5, num_heads = GENERATE(1, 2, 3, 6), width = 6;
  const Index d = width / num_heads;
  Tensor3<TestType> X(batch, steps, width);
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = static_cast<TestType>(i);  // every entry distinct
  const Tensor3<TestType> heads = attend::transpose_qkv(X, num_heads);
  REQUIRE(heads.dimension(0) == batch * num_heads);
  REQUIRE(heads.dimension(1) == steps);
  REQUIRE(heads.dimension(2) == d);
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < num_heads; ++h)
      for (Index s = 0; s < steps; ++s)
        for (Index i = 0; i < d; ++i) REQUIRE(heads(b * num_heads + h, s, i) == X(b, s, h * d + i));
  // transpose_output is the exact inverse.
  const Tensor3<TestType> back = attend::transpose_output(heads, num_heads);
  REQUIRE(back.dimensions() == X.dimensions());
  for (Index i = 0; i < X.size(); ++i) REQUIRE(back.data()[i] == X.data()[i]);
}

TEMPLATE_TEST_CASE("transpose_qkv and transpose_output reject bad head counts", "[transpose_qkv][errors]", float,
                   double) {
  Tensor3<TestType> X(2, 3, 10);
  X.setZero();
  REQUIRE_THROWS_MATCHES(attend::transpose_qkv(X, 3), std::invalid_argument,
                         Catch::Matchers::Message("transpose_qkv: X's features (10) must be divisible by num_heads "
                                                  "(3), got shape (2, 3, 10)"));
  REQUIRE_THROWS_MATCHES(attend::transpose_qkv(X, 0), std::invalid_argument,
                         Catch::Matchers::Message("transpose_qkv: num_heads must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(attend::transpose_output(X, 4), std::invalid_argument,
                         Catch::Matchers::Message("transpose_output: X's first axis (2) must be divisible by "
                                                  "num_heads (4), got shape (2, 3, 10)"));
  REQUIRE_THROWS_MATCHES(attend::transpose_output(X, -1), std::invalid_argument,
                         Catch::Matchers::Message("transpose_output: num_heads must be at least 1, got -1"));
}
