// complexity.hpp: the log-log slope on exact power laws and on laws with lower-order terms, the median, and the
// path-length probe on small chains whose path lengths are known by construction.
#include <algorithm>
#include <attend/complexity.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <support/random_tensor.hpp>
#include <vector>

using attend::Generator;
using attend::Index;
using attend::Tensor3;
using Catch::Matchers::Message;
using Catch::Matchers::WithinAbs;

using attend_test::random_tensor;

namespace {

// y = c x^p at every x.
std::vector<double> power_law(const std::vector<double>& x, double c, double p) {
  std::vector<double> y;
  for (double v : x) y.push_back(c * std::pow(v, p));
  return y;
}

// A chain of `stages` stages; each adds to every position p the values of the `reach` positions before it (a causal
// window), so a change moves up to `reach` positions to the right per stage: from position i, position j > i is
// reached after ceil((j - i) / reach) stages, when there are that many, and a position left of i never.
template <class Scalar>
struct WindowChain {
  Index reach, stages;
  Tensor3<Scalar> embed(const Tensor3<Scalar>& X) const { return X; }
  Index sequential_operations(Index /*n*/) const { return stages; }
  void stage(Index /*s*/, Tensor3<Scalar>& H) const {
    for (Index b = 0; b < H.dimension(0); ++b)
      for (Index p = H.dimension(1) - 1; p >= 1; --p)  // from the right, so each reads the old values
        for (Index j = std::max<Index>(0, p - reach); j < p; ++j)
          for (Index f = 0; f < H.dimension(2); ++f) H(b, p, f) += H(b, j, f);
  }
};

// A forgetful recurrence, one stage per step: H[:, s + 1] = 1/2 + 1e-6 H[:, s]. A change of x_1 shrinks a million
// times per step, below the rounding of 1/2 after two steps in float and three in double: only the probe's
// rescaling lets it be followed to the end, n - 1 stages later.
template <class Scalar>
struct ForgetfulChain {
  Tensor3<Scalar> embed(const Tensor3<Scalar>& X) const { return X; }
  Index sequential_operations(Index n) const { return n - 1; }
  void stage(Index s, Tensor3<Scalar>& H) const {
    for (Index b = 0; b < H.dimension(0); ++b)
      for (Index f = 0; f < H.dimension(2); ++f) H(b, s + 1, f) = Scalar(0.5) + Scalar(1e-6) * H(b, s, f);
  }
};

}  // namespace

TEST_CASE("loglog_slope recovers the exponent of an exact power law", "[complexity]") {
  // log y = log c + p log x exactly, so the least-squares slope is p up to rounding, whatever c.
  const std::vector<double> doubling{128, 256, 512, 1024, 2048, 4096};
  const std::vector<double> uneven{3, 7, 10, 55, 300, 1234.5};
  for (double p : {1.0, 2.0, 1.5, 0.5, 3.0}) {
    for (double c : {1.0, 1e-9, 3.7e4}) {
      CAPTURE(p, c);
      CHECK_THAT(attend::loglog_slope(doubling, power_law(doubling, c, p)), WithinAbs(p, 1e-12));
      CHECK_THAT(attend::loglog_slope(uneven, power_law(uneven, c, p)), WithinAbs(p, 1e-12));
    }
  }
  // Two points: the slope of the line through them.
  CHECK_THAT(attend::loglog_slope({2, 8}, {5, 80}), WithinAbs(2.0, 1e-14));  // 80 / 5 = 16 = (8 / 2)^2
}

TEST_CASE("loglog_slope of a law with lower-order terms lies between its local exponents", "[complexity]") {
  // y = x^2 + 100 x has local exponent d log y / d log x = (2x + 100) / (x + 100), rising from 1.9091 at x = 1000 to
  // 1.9877 at x = 8000; the fitted slope is a weighted mean of the slopes between points, so lies in between —
  // the reason compare_encoders fits at sizes where the leading term dominates.
  const std::vector<double> x{1000, 2000, 4000, 8000};
  std::vector<double> y;
  for (double v : x) y.push_back(v * v + 100 * v);
  const double slope = attend::loglog_slope(x, y);
  CHECK(slope > 2100.0 / 1100.0);
  CHECK(slope < 16100.0 / 8100.0);
  // At small x the linear term wins: y = x^2 + 100 x on x in [1, 8] is almost linear (local exponents 1.0099 ..
  // 1.0741).
  const std::vector<double> small{1, 2, 4, 8};
  std::vector<double> y_small;
  for (double v : small) y_small.push_back(v * v + 100 * v);
  const double small_slope = attend::loglog_slope(small, y_small);
  CHECK(small_slope > 102.0 / 101.0);
  CHECK(small_slope < 116.0 / 108.0);
}

TEST_CASE("loglog_slope rejects what it cannot fit, naming the argument and the values", "[complexity][errors]") {
  REQUIRE_THROWS_MATCHES(attend::loglog_slope({1, 2, 3}, {1, 2}), std::invalid_argument,
                         Message("loglog_slope: x and y must have the same size, got 3 and 2"));
  REQUIRE_THROWS_MATCHES(attend::loglog_slope({1}, {1}), std::invalid_argument,
                         Message("loglog_slope: needs at least 2 points, got 1"));
  REQUIRE_THROWS_MATCHES(attend::loglog_slope({1, 0}, {1, 2}), std::invalid_argument,
                         Message("loglog_slope: x must be positive and finite, got x[1] = 0"));
  REQUIRE_THROWS_MATCHES(attend::loglog_slope({1, 2}, {-3, 2}), std::invalid_argument,
                         Message("loglog_slope: y must be positive and finite, got y[0] = -3"));
  REQUIRE_THROWS_MATCHES(attend::loglog_slope({4, 4, 4}, {1, 2, 3}), std::invalid_argument,
                         Message("loglog_slope: x must take at least 2 different values, got 3 times 4"));
}

TEST_CASE("median is the middle value, or the mean of the two middle values", "[complexity]") {
  CHECK(attend::median({5}) == 5);
  CHECK(attend::median({3, 1, 2}) == 2);
  CHECK(attend::median({9, 1, 100, 2}) == 5.5);     // sorted 1 2 9 100: (2 + 9) / 2
  CHECK(attend::median({1, 1, 1, 50, 1000}) == 1);  // outliers do not move it
  REQUIRE_THROWS_MATCHES(attend::median({}), std::invalid_argument,
                         Message("median: values must not be empty, got 0 values"));
}

TEMPLATE_TEST_CASE("measured_path_length counts the stages a change needs to travel", "[complexity][path]", float,
                   double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 10, 3, 7);  // (batch, n, d) = (2, 10, 3)

  SECTION("a reach of 1 per stage: 9 stages from x_1 to y_10") {
    WindowChain<TestType> chain{1, 12};
    CHECK(attend::measured_path_length(chain, X) == 9);
    CHECK(attend::measured_path_length(chain, X, 2, 5) == 3);
    CHECK(attend::measured_path_length(chain, X, 4, 4) == 0);  // a position is 0 hops from itself
  }
  SECTION("a reach of 3 per stage: ceil(9 / 3) = 3 stages, ceil(8 / 3) = 3, ceil(4 / 3) = 2") {
    WindowChain<TestType> chain{3, 12};
    CHECK(attend::measured_path_length(chain, X) == 3);
    CHECK(attend::measured_path_length(chain, X, 1, 9) == 3);
    CHECK(attend::measured_path_length(chain, X, 0, 4) == 2);
  }
  SECTION("too few stages, or the wrong direction: unreachable") {
    WindowChain<TestType> short_chain{1, 8};  // 8 stages for a distance of 9
    CHECK(attend::measured_path_length(short_chain, X) == attend::unreachable);
    WindowChain<TestType> chain{1, 12};
    CHECK(attend::measured_path_length(chain, X, 9, 0) == attend::unreachable);  // only moves right
  }
  SECTION("a recurrence that forgets a million-fold per step is still followed to its end") {
    ForgetfulChain<TestType> chain;
    CHECK(attend::measured_path_length(chain, X) == 9);
  }
}

TEST_CASE("measured_path_length rejects positions outside the sequence", "[complexity][path][errors]") {
  WindowChain<double> chain{1, 4};
  const Tensor3<double> X = random_tensor<double>(1, 5, 2, 8);  // (1, 5, 2)
  REQUIRE_THROWS_MATCHES(attend::measured_path_length(chain, X, 5, 0), std::invalid_argument,
                         Message("measured_path_length: from must be a position in [0, 5), got 5"));
  REQUIRE_THROWS_MATCHES(attend::measured_path_length(chain, X, 0, -1), std::invalid_argument,
                         Message("measured_path_length: to must be a position in [0, 5), got -1"));
  REQUIRE_THROWS_MATCHES(attend::measured_path_length(chain, Tensor3<double>(1, 0, 2)), std::invalid_argument,
                         Message("measured_path_length: X must have at least 1 batch row, 1 step and 1 feature, "
                                 "got shape (1, 0, 2)"));
}
