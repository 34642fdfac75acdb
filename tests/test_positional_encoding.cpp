// PositionalEncoding: the seed's sinusoidal table P against d2l's PyTorch code (fixtures), its formula, its
// relative-position property, the seed's example, and the checks on bad input.
#include <algorithm>
#include <attend/positional_encoding.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/matchers.hpp>

using attend::Index;
using attend::Matrix;
using attend::PositionalEncoding;
using attend::Tensor3;
using Catch::Contains;

namespace {

// P as d2l's float64 fixtures hold it: agreement to rounding error. Measured with glibc's sin/cos/pow: attend's
// double P differs from positional_encoding_32's by at most 1.1e-16 (1 ulp; 45 of 1920 entries differ at all) and
// from positional_encoding_odd's by at most 1.1e-16, far inside the project's double tolerance (1e-9 rel, 1e-12
// abs). A float P is compared to the float64 fixtures only at the project's float tolerance (2e-5 rel, 2e-6 abs):
// it computes its angles in float, and for the odd table differs by up to 3.5e-7.
//
// Against positional_encoding_float32 (the book's code run literally in float32) attend's float P is held to
// 2 float epsilons relative: measured, 98 of its 1920 entries differ, each by exactly 1 ulp (at most 1.13e-7
// relative, 5.96e-8 absolute), the last-bit differences between PyTorch's and glibc's float sin/cos; the angles
// themselves agree (a 1-ulp difference in an angle near 59 would show as up to 3.8e-6 in a value near zero).
attend_test::Tolerance<float> float32_fixture_tolerance() { return {2 * std::numeric_limits<float>::epsilon(), 0.0}; }

// The seed's formula, evaluated in long double: P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(...).
long double frequency(Index j, Index d) {
  return 1.0L / std::pow(10000.0L, static_cast<long double>(2 * j) / static_cast<long double>(d));
}

}  // namespace

TEMPLATE_TEST_CASE("P matches d2l's PositionalEncoding(32, 0, max_len=60)", "[positional_encoding][golden]", float,
                   double) {
  const attend_test::Fixture fixture("positional_encoding_32");
  const Index num_hiddens = fixture.index("num_hiddens"), max_len = fixture.index("max_len");
  const PositionalEncoding<TestType> encoding(num_hiddens, TestType(0), max_len);
  CHECK(encoding.num_hiddens() == 32);
  CHECK(encoding.max_len() == 60);
  REQUIRE_THAT(encoding.P(), attend_test::Near(fixture.matrix<double>("P"), attend_test::tolerance<TestType>()));
  REQUIRE_THAT(attend::positional_encoding_table<TestType>(max_len, num_hiddens),
               attend_test::Near(fixture.matrix<double>("P"), attend_test::tolerance<TestType>()));
}

TEST_CASE("float P matches the book's code run in float32", "[positional_encoding][golden]") {
  const attend_test::Fixture fixture("positional_encoding_float32");
  const PositionalEncoding<float> encoding(fixture.index("num_hiddens"), 0.0f, fixture.index("max_len"));
  REQUIRE_THAT(encoding.P(), attend_test::Near(fixture.matrix<float>("P"), float32_fixture_tolerance()));
}

TEMPLATE_TEST_CASE("P with an odd num_hiddens (7) matches the fixture", "[positional_encoding][golden]", float,
                   double) {
  // The seed's code fails on odd widths; the fixture's reference gives the sine columns all ceil(d/2) frequencies
  // and the cosine columns the first floor(d/2): the last column, 6, is sin(i / 10000^(6/7)).
  const attend_test::Fixture fixture("positional_encoding_odd");
  const Index num_hiddens = fixture.index("num_hiddens"), max_len = fixture.index("max_len");
  REQUIRE(num_hiddens == 7);
  const PositionalEncoding<TestType> encoding(num_hiddens, TestType(0), max_len);
  REQUIRE(encoding.P().rows() == 50);
  REQUIRE(encoding.P().cols() == 7);
  REQUIRE_THAT(encoding.P(), attend_test::Near(fixture.matrix<double>("P"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("the forward pass in eval() is X + P[:steps], as d2l's", "[positional_encoding][golden]", float,
                   double) {
  const auto name = GENERATE(as<std::string>{}, "positional_encoding_32", "positional_encoding_odd");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  // The fixtures were made with dropout 0; a dropout of 0.5 checks that eval() turns it off.
  PositionalEncoding<TestType> encoding(fixture.index("num_hiddens"), TestType(0.5), fixture.index("max_len"));
  encoding.eval();
  const Tensor3<TestType> Y = encoding(fixture.tensor3<TestType>("X"));
  REQUIRE_THAT(Y, attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));

  // Dropout 0 in training mode changes nothing either.
  PositionalEncoding<TestType> no_dropout(fixture.index("num_hiddens"), TestType(0), fixture.index("max_len"));
  REQUIRE(no_dropout.is_training());
  REQUIRE_THAT(no_dropout(fixture.tensor3<TestType>("X")),
               attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("P follows the seed's formula entry by entry", "[positional_encoding]", float, double) {
  const Index d = 32;
  const PositionalEncoding<TestType> encoding(d, TestType(0));  // max_len 1000, the seed's default
  REQUIRE(encoding.P().rows() == 1000);
  REQUIRE(encoding.P().cols() == d);
  const auto& P = encoding.P();

  // Exact values: row 0 is sin(0) = 0, cos(0) = 1 in every pair.
  for (Index c = 0; c < d; ++c) CHECK(P(0, c) == TestType(c % 2 == 0 ? 0 : 1));
  // Column pair 0 has frequency 1: P[i, 0] = sin(i), P[i, 1] = cos(i) (values as d2l's float64 fixture prints them).
  CHECK_THAT(static_cast<double>(P(1, 0)), Catch::Matchers::WithinRel(0.8414709848078965, 1e-6));   // sin(1)
  CHECK_THAT(static_cast<double>(P(1, 1)), Catch::Matchers::WithinRel(0.5403023058681398, 1e-6));   // cos(1)
  CHECK_THAT(static_cast<double>(P(2, 1)), Catch::Matchers::WithinRel(-0.4161468365471424, 1e-6));  // cos(2)

  // A sample of entries against the formula in long double. P's angle i / 10000^(2j/d) is computed in Scalar: the
  // exponent 2j/d is rounded (0.5 eps), the power multiplies that by ln 10000 = 9.2 and rounds itself, the division
  // rounds once more, so the angle is off by at most ~6.5 eps * angle; sin and cos add about 1 eps. The tolerance,
  // 8 eps * (angle + 1), covers that; measured, the largest error is 0.07 of it (float and double).
  const double eps = std::numeric_limits<TestType>::epsilon();
  for (const Index i : {1, 2, 3, 10, 59, 123, 500, 999})
    for (Index j = 0; 2 * j < d; ++j) {
      const long double angle = static_cast<long double>(i) * frequency(j, d);
      const double tol = 8 * eps * (static_cast<double>(angle) + 1);
      CAPTURE(i, j);
      CHECK_THAT(static_cast<double>(P(i, 2 * j)),
                 Catch::Matchers::WithinAbs(static_cast<double>(std::sin(angle)), tol));
      CHECK_THAT(static_cast<double>(P(i, 2 * j + 1)),
                 Catch::Matchers::WithinAbs(static_cast<double>(std::cos(angle)), tol));
    }
}

TEMPLATE_TEST_CASE("P encodes relative positions: a fixed rotation maps row i to row i + delta",
                   "[positional_encoding]", float, double) {
  // The seed: for any fixed offset delta, (P[i, 2j], P[i, 2j+1]) -> (P[i+delta, 2j], P[i+delta, 2j+1]) is the
  // linear map [[cos(delta w_j), sin(delta w_j)], [-sin(delta w_j), cos(delta w_j)]], w_j = 1 / 10000^(2j/d),
  // which does not depend on i.
  //
  // Tolerance: the identity is exact for exact sines and cosines, so the residual is rounding. P's angle for row i
  // is theta_i = fl(i / D) with D = fl(10000^fl(2j/d)) = 10000^(2j/d) (1 + rho): the exponent is rounded to
  // 0.5 eps and the power multiplies that by ln 10000 = 9.2, and the power itself rounds, so |rho| <= ~6 eps.
  // That error is common to rows i and i + delta: it shifts theta_(i+delta) - theta_i away from delta w_j by only
  // delta w_j |rho| <= 6 eps delta w_j. The divisions round each angle on its own, by 0.5 eps theta, and sin, cos
  // and the rotation add about 1 eps for each of the unit-sized values involved. Hence, with a margin of 2 on the
  // rounding terms:
  //   |residual| <= eps * (theta_i + theta_(i+delta) + 8 delta w_j + 4)
  // (the rotation itself is computed here in long double). Measured with glibc, the largest residual is 0.33 of
  // this bound for d = 32 and 0.22 for d = 7, in float and in double alike. A double table whose angles are
  // computed in float, or whose frequencies are off by a relative 1e-9, fails it.
  const Index d = GENERATE(32, 7);
  CAPTURE(d);
  const PositionalEncoding<TestType> encoding(d, TestType(0));  // max_len 1000
  const auto& P = encoding.P();
  const double eps = std::numeric_limits<TestType>::epsilon();
  for (const Index i : {0, 1, 2, 7, 50, 333, 600, 900})
    for (const Index delta : {1, 2, 5, 37, 99})
      for (Index j = 0; 2 * j + 1 < d; ++j) {
        const long double w = frequency(j, d);
        const long double c = std::cos(static_cast<long double>(delta) * w);
        const long double s = std::sin(static_cast<long double>(delta) * w);
        const long double x = P(i, 2 * j), y = P(i, 2 * j + 1);
        const long double rotated_sin = c * x + s * y;   // sin(a + b) = sin a cos b + cos a sin b
        const long double rotated_cos = -s * x + c * y;  // cos(a + b) = cos a cos b - sin a sin b
        const double theta_i = static_cast<double>(static_cast<long double>(i) * w);
        const double theta_next = static_cast<double>(static_cast<long double>(i + delta) * w);
        const double bound =
            eps * (theta_i + theta_next + 8 * static_cast<double>(static_cast<long double>(delta) * w) + 4);
        const double residual = static_cast<double>(
            std::max(std::abs(rotated_sin - P(i + delta, 2 * j)), std::abs(rotated_cos - P(i + delta, 2 * j + 1))));
        CAPTURE(i, delta, j, residual, bound);
        CHECK(residual <= bound);
      }
}

TEMPLATE_TEST_CASE("the seed's example: PositionalEncoding(32, 0) on zeros (1, 60, 32) gives P[:60]",
                   "[positional_encoding][golden]", float, double) {
  // d2l: encoding_dim, num_steps = 32, 60; pos_encoding = PositionalEncoding(encoding_dim, 0); pos_encoding.eval();
  //      X = pos_encoding(torch.zeros((1, num_steps, encoding_dim))); P = pos_encoding.P[:, :X.shape[1], :]
  PositionalEncoding<TestType> encoding(32, TestType(0));
  encoding.eval();
  Tensor3<TestType> zeros(1, 60, 32);
  zeros.setZero();
  const Tensor3<TestType> X = encoding(zeros);
  REQUIRE(X.dimension(0) == 1);
  REQUIRE(X.dimension(1) == 60);
  REQUIRE(X.dimension(2) == 32);
  for (Index i = 0; i < 60; ++i)
    for (Index c = 0; c < 32; ++c) {
      CAPTURE(i, c);
      REQUIRE(X(0, i, c) == encoding.P()(i, c));  // 0 + P is P exactly
    }
  // And those rows are d2l's P of the 60-row fixture.
  const attend_test::Fixture fixture("positional_encoding_32");
  const Matrix<TestType> first_rows = encoding.P().topRows(60);
  REQUIRE_THAT(first_rows, attend_test::Near(fixture.matrix<double>("P"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("PositionalEncoding broadcasts P over the batch", "[positional_encoding]", float, double) {
  PositionalEncoding<TestType> encoding(6, TestType(0), 10);
  Tensor3<TestType> X(3, 4, 6);  // (batch, steps, num_hiddens)
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = static_cast<TestType>(i % 11) - TestType(5);
  const Tensor3<TestType> Y = encoding(X);
  for (Index b = 0; b < 3; ++b)
    for (Index t = 0; t < 4; ++t)
      for (Index c = 0; c < 6; ++c) {
        CAPTURE(b, t, c);
        CHECK(Y(b, t, c) == X(b, t, c) + encoding.P()(t, c));
      }
  // steps == max_len is allowed.
  Tensor3<TestType> full(1, 10, 6);
  full.setZero();
  CHECK_NOTHROW(encoding(full));
}

TEMPLATE_TEST_CASE("PositionalEncoding rejects bad input, naming the argument and both values",
                   "[positional_encoding][errors]", float, double) {
  SECTION("X with the wrong feature count") {
    PositionalEncoding<TestType> encoding(32, TestType(0), 60);
    Tensor3<TestType> X(1, 10, 31);
    X.setZero();
    REQUIRE_THROWS_AS(encoding(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(encoding(X),
                        Contains("PositionalEncoding") && Contains("X") && Contains("32") && Contains("(1, 10, 31)"));
  }
  SECTION("more steps than max_len") {
    PositionalEncoding<TestType> encoding(32, TestType(0), 60);
    Tensor3<TestType> X(1, 61, 32);
    X.setZero();
    REQUIRE_THROWS_AS(encoding(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(encoding(X),
                        Contains("PositionalEncoding") && Contains("max_len") && Contains("61") && Contains("60"));
  }
  SECTION("num_hiddens 0") {
    REQUIRE_THROWS_AS(PositionalEncoding<TestType>(0, TestType(0)), std::invalid_argument);
    REQUIRE_THROWS_WITH(PositionalEncoding<TestType>(0, TestType(0)),
                        Contains("num_hiddens") && Contains("at least 1") && Contains("got 0"));
  }
  SECTION("max_len 0") {
    REQUIRE_THROWS_AS(PositionalEncoding<TestType>(32, TestType(0), 0), std::invalid_argument);
    REQUIRE_THROWS_WITH(PositionalEncoding<TestType>(32, TestType(0), 0),
                        Contains("max_len") && Contains("at least 1") && Contains("got 0"));
  }
  SECTION("negative sizes") {
    REQUIRE_THROWS_WITH(PositionalEncoding<TestType>(-4, TestType(0)), Contains("num_hiddens") && Contains("got -4"));
    REQUIRE_THROWS_WITH(PositionalEncoding<TestType>(32, TestType(0), -1), Contains("max_len") && Contains("got -1"));
  }
}
