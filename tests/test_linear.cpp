// Linear: y = x W^T + b on the last axis (torch.nn.Linear), its PyTorch initialisation, and its checks.
#include <attend/linear.hpp>
#include <attend/random.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

using attend::Generator;
using attend::Index;
using attend::Linear;
using attend::Tensor3;
using Catch::Contains;

using attend_test::random_tensor;

namespace {

// The definition, with explicit loops in double: y[b, t, o] = sum_i x[b, t, i] W[o, i] + bias[o].
template <class Scalar>
Tensor3<double> linear_by_definition(const Tensor3<Scalar>& X, const Linear<Scalar>& layer) {
  const auto& W = layer.weight();                               // (out_features, in_features)
  Tensor3<double> Y(X.dimension(0), X.dimension(1), W.rows());  // (batch, steps, out_features)
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = 0; t < X.dimension(1); ++t)
      for (Index o = 0; o < W.rows(); ++o) {
        double sum = layer.has_bias() ? static_cast<double>(layer.bias()[o]) : 0.0;
        for (Index i = 0; i < W.cols(); ++i) sum += static_cast<double>(X(b, t, i)) * static_cast<double>(W(o, i));
        Y(b, t, o) = sum;
      }
  return Y;
}

template <class Scalar>
bool same_parameters(const Linear<Scalar>& a, const Linear<Scalar>& b) {
  return a.weight() == b.weight() && a.bias() == b.bias();
}

}  // namespace

TEMPLATE_TEST_CASE("Linear computes y = x W^T + b on the last axis", "[linear]", float, double) {
  const bool bias = GENERATE(true, false);
  CAPTURE(bias);
  Generator generator(11);
  const Linear<TestType> layer(4, 5, bias, generator);
  REQUIRE(layer.weight().rows() == 5);
  REQUIRE(layer.weight().cols() == 4);
  REQUIRE(layer.in_features() == 4);
  REQUIRE(layer.out_features() == 5);

  SECTION("(2, 3, 4) -> (2, 3, 5)") {
    const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 21);
    const Tensor3<TestType> Y = layer.forward(X);
    REQUIRE_THAT(Y, attend_test::Near(linear_by_definition(X, layer), attend_test::tolerance<TestType>()));
  }
  SECTION("one step: (2, 1, 4) -> (2, 1, 5)") {
    const Tensor3<TestType> X = random_tensor<TestType>(2, 1, 4, 22);
    const Tensor3<TestType> Y = layer.forward(X);
    REQUIRE_THAT(Y, attend_test::Near(linear_by_definition(X, layer), attend_test::tolerance<TestType>()));
  }
  SECTION("one row: (1, 1, 4) -> (1, 1, 5)") {
    const Tensor3<TestType> X = random_tensor<TestType>(1, 1, 4, 23);
    const Tensor3<TestType> Y = layer.forward(X);
    REQUIRE_THAT(Y, attend_test::Near(linear_by_definition(X, layer), attend_test::tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Linear uses the parameters set through weight() and bias()", "[linear]", float, double) {
  Linear<TestType> layer(3, 2);
  // W = [[1, 2, 3], [-1, 0, 4]], b = [10, -20]: y = [x0 + 2 x1 + 3 x2 + 10, -x0 + 4 x2 - 20].
  layer.weight() << 1, 2, 3, -1, 0, 4;
  layer.bias() << 10, -20;
  Tensor3<TestType> X(1, 2, 3);  // (batch, steps, in_features)
  X.setValues({{{1, 0, 0}, {2, -1, 5}}});
  const Tensor3<TestType> Y = layer(X);
  REQUIRE(Y.dimension(0) == 1);
  REQUIRE(Y.dimension(1) == 2);
  REQUIRE(Y.dimension(2) == 2);
  // Small integers: exact in float and double.
  CHECK(Y(0, 0, 0) == TestType(11));   // 1 + 10
  CHECK(Y(0, 0, 1) == TestType(-21));  // -1 - 20
  CHECK(Y(0, 1, 0) == TestType(25));   // 2 - 2 + 15 + 10
  CHECK(Y(0, 1, 1) == TestType(-2));   // -2 + 20 - 20
}

TEMPLATE_TEST_CASE("Linear without bias has an empty bias and adds nothing", "[linear]", float, double) {
  Generator generator(5);
  Linear<TestType> layer(3, 2, false, generator);
  CHECK_FALSE(layer.has_bias());
  CHECK(layer.bias().size() == 0);
  layer.weight() << 1, 2, 3, -1, 0, 4;
  Tensor3<TestType> X(1, 1, 3);
  X.setValues({{{2, -1, 5}}});
  const Tensor3<TestType> Y = layer(X);
  CHECK(Y(0, 0, 0) == TestType(15));  // 2 - 2 + 15
  CHECK(Y(0, 0, 1) == TestType(18));  // -2 + 20

  const Linear<TestType> with_bias(3, 2, true, generator);
  CHECK(with_bias.has_bias());
  CHECK(with_bias.bias().size() == 2);
}

TEMPLATE_TEST_CASE("Linear is initialised uniformly within 1/sqrt(in), as PyTorch", "[linear][init]", float, double) {
  // torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) on W gives bound 1/sqrt(fan_in), and the bias
  // bound is 1/sqrt(fan_in) too. in = 9 and out = 400 make 1/sqrt(in) = 1/3 and 1/sqrt(out) = 1/20 far apart.
  Generator generator(3);
  const Linear<TestType> layer(9, 400, true, generator);
  const TestType bound = TestType(1) / std::sqrt(TestType(9));

  const auto& W = layer.weight();
  CHECK(W.minCoeff() >= -bound);
  CHECK(W.maxCoeff() < bound);
  // 3600 uniform draws: the extremes come within 1% of the bound (for a random seed the chance they do not is
  // 2 * 0.995^3600, about 3e-8) and the mean is within 5 sigma of 0 (sigma = bound / sqrt(3 * 3600)). A bound of
  // 1/sqrt(out) or a range [0, bound) fails these.
  CHECK(W.minCoeff() < TestType(-0.99) * bound);
  CHECK(W.maxCoeff() > TestType(0.99) * bound);
  CHECK(std::abs(static_cast<double>(W.mean())) < 5 * static_cast<double>(bound) / std::sqrt(3.0 * 3600));

  const auto& b = layer.bias();
  REQUIRE(b.size() == 400);
  CHECK(b.minCoeff() >= -bound);
  CHECK(b.maxCoeff() < bound);
  // 400 draws: the extremes come within 5% of the bound (for a random seed the chance they do not is
  // 2 * 0.975^400, about 8e-5; the seed here is fixed, so the outcome is too).
  CHECK(b.minCoeff() < TestType(-0.95) * bound);
  CHECK(b.maxCoeff() > TestType(0.95) * bound);
}

TEMPLATE_TEST_CASE("Linear draws W row by row, then b, from its generator", "[linear][init]", float, double) {
  // The order attend/linear.hpp documents: a Generator with the same seed reproduces every parameter.
  Generator generator(42);
  const Linear<TestType> layer(4, 3, true, generator);
  Generator replay(42);
  const TestType bound = TestType(1) / std::sqrt(TestType(4));
  for (Index o = 0; o < 3; ++o)
    for (Index i = 0; i < 4; ++i) {
      CAPTURE(o, i);
      CHECK(layer.weight()(o, i) == replay.uniform<TestType>(-bound, bound));
    }
  for (Index o = 0; o < 3; ++o) {
    CAPTURE(o);
    CHECK(layer.bias()[o] == replay.uniform<TestType>(-bound, bound));
  }
}

TEMPLATE_TEST_CASE("Linear's parameters are deterministic for a given generator seed", "[linear][init]", float,
                   double) {
  Generator seven_a(7), seven_b(7), eight(8);
  const Linear<TestType> a(4, 5, true, seven_a);
  const Linear<TestType> b(4, 5, true, seven_b);
  const Linear<TestType> c(4, 5, true, eight);
  CHECK(same_parameters(a, b));
  CHECK(a.weight() != c.weight());
  CHECK(a.bias() != c.bias());

  // The generator moves on: a second layer from the same generator differs from the first.
  const Linear<TestType> d(4, 5, true, seven_a);
  CHECK_FALSE(same_parameters(a, d));
}

TEMPLATE_TEST_CASE("manual_seed makes the default generator reproducible, as torch.manual_seed", "[linear][init]",
                   float, double) {
  attend::manual_seed(2024);
  const Linear<TestType> first(6, 3);
  const Linear<TestType> second(6, 3);
  attend::manual_seed(2024);
  const Linear<TestType> first_again(6, 3);
  const Linear<TestType> second_again(6, 3);
  CHECK(same_parameters(first, first_again));
  CHECK(same_parameters(second, second_again));
  CHECK_FALSE(same_parameters(first, second));

  // manual_seed(s) reseeds the default generator: it then draws what Generator(s) draws.
  Generator explicit_generator(2024);
  const Linear<TestType> from_explicit(6, 3, true, explicit_generator);
  CHECK(same_parameters(first, from_explicit));

  attend::manual_seed(2025);
  const Linear<TestType> other_seed(6, 3);
  CHECK_FALSE(same_parameters(first, other_seed));
}

TEMPLATE_TEST_CASE("Linear rejects X with the wrong feature count, naming X and both counts", "[linear][errors]", float,
                   double) {
  const Linear<TestType> layer(7, 5);
  Tensor3<TestType> X(2, 3, 9);
  X.setZero();
  REQUIRE_THROWS_AS(layer.forward(X), std::invalid_argument);
  REQUIRE_THROWS_WITH(layer.forward(X), Contains("Linear") && Contains("X") && Contains("7") && Contains("(2, 3, 9)"));
}

TEMPLATE_TEST_CASE("Linear rejects in_features or out_features below 1", "[linear][errors]", float, double) {
  REQUIRE_THROWS_AS(Linear<TestType>(0, 5), std::invalid_argument);
  REQUIRE_THROWS_WITH(Linear<TestType>(0, 5), Contains("in_features") && Contains("at least 1") && Contains("got 0"));
  REQUIRE_THROWS_WITH(Linear<TestType>(-3, 5), Contains("in_features") && Contains("at least 1") && Contains("got -3"));
  REQUIRE_THROWS_AS(Linear<TestType>(5, 0), std::invalid_argument);
  REQUIRE_THROWS_WITH(Linear<TestType>(5, 0), Contains("out_features") && Contains("at least 1") && Contains("got 0"));
}

TEMPLATE_TEST_CASE("a weight resized from outside makes the call throw, naming both shapes", "[linear][errors]", float,
                   double) {
  Linear<TestType> layer(4, 5);
  Tensor3<TestType> X(2, 3, 4);
  X.setZero();
  SECTION("fewer columns") {
    layer.weight().resize(5, 3);
    REQUIRE_THROWS_AS(layer(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer(X), Contains("weight") && Contains("(5, 4)") && Contains("(5, 3)"));
  }
  SECTION("transposed") {
    layer.weight().resize(4, 5);
    REQUIRE_THROWS_AS(layer(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer(X), Contains("weight") && Contains("(5, 4)") && Contains("(4, 5)"));
  }
}

TEMPLATE_TEST_CASE("a bias resized from outside makes the call throw, naming both shapes", "[linear][errors]", float,
                   double) {
  Tensor3<TestType> X(2, 3, 4);
  X.setZero();
  SECTION("with bias: wrong length") {
    Linear<TestType> layer(4, 5);
    layer.bias().resize(3);
    REQUIRE_THROWS_AS(layer(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer(X), Contains("bias") && Contains("(5,)") && Contains("(3,)"));
  }
  SECTION("with bias: emptied") {
    Linear<TestType> layer(4, 5);
    layer.bias().resize(0);
    REQUIRE_THROWS_AS(layer(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer(X), Contains("bias") && Contains("(5,)") && Contains("(0,)"));
  }
  SECTION("without bias: given one") {
    Linear<TestType> layer(4, 5, false);
    layer.bias().setOnes(5);
    REQUIRE_THROWS_AS(layer(X), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer(X), Contains("bias") && Contains("(0,)") && Contains("(5,)"));
  }
}
