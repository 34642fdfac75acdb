// RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), h_0 = 0 (torch.nn.RNN, tanh, one layer, batch first),
// against PyTorch's fixtures, the formula by hand and an explicit loop; its PyTorch initialisation and its checks.
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

using attend::Generator;
using attend::Index;
using attend::RNN;
using attend::Tensor3;
using Catch::Matchers::Message;

using attend_test::random_tensor;

namespace {

// The recurrence with explicit loops in double, one batch row and one step at a time.
template <class Scalar>
Tensor3<double> rnn_by_definition(const Tensor3<Scalar>& X, const RNN<Scalar>& rnn) {
  const Index batch = X.dimension(0), steps = X.dimension(1), hidden = rnn.hidden_size();
  Tensor3<double> H(batch, steps, hidden);  // (batch, steps, hidden)
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      for (Index j = 0; j < hidden; ++j) {
        double sum = static_cast<double>(rnn.bias_ih()[j]) + static_cast<double>(rnn.bias_hh()[j]);
        for (Index i = 0; i < rnn.input_size(); ++i)
          sum += static_cast<double>(rnn.weight_ih()(j, i)) * static_cast<double>(X(b, t, i));
        if (t > 0)
          for (Index i = 0; i < hidden; ++i) sum += static_cast<double>(rnn.weight_hh()(j, i)) * H(b, t - 1, i);
        H(b, t, j) = std::tanh(sum);
      }
  return H;
}

// An RNN with the parameters of a fixture.
template <class Scalar>
RNN<Scalar> rnn_from(const attend_test::Fixture& f) {
  const auto W_ih = f.matrix<Scalar>("weight_ih");  // (hidden, input)
  RNN<Scalar> rnn(W_ih.cols(), W_ih.rows());
  rnn.weight_ih() = W_ih;
  rnn.weight_hh() = f.matrix<Scalar>("weight_hh");
  rnn.bias_ih() = f.vector<Scalar>("bias_ih");
  rnn.bias_hh() = f.vector<Scalar>("bias_hh");
  return rnn;
}

// W_ih = [[0.5, -1], [0.25, 2]], W_hh = [[1, -0.5], [0.5, 0.25]], b_ih = [0.1, -0.2], b_hh = [0.05, 0.3].
template <class Scalar>
RNN<Scalar> small_rnn() {
  RNN<Scalar> rnn(2, 2);
  rnn.weight_ih() << Scalar(0.5), Scalar(-1), Scalar(0.25), Scalar(2);
  rnn.weight_hh() << Scalar(1), Scalar(-0.5), Scalar(0.5), Scalar(0.25);
  rnn.bias_ih() << Scalar(0.1), Scalar(-0.2);
  rnn.bias_hh() << Scalar(0.05), Scalar(0.3);
  return rnn;
}

}  // namespace

TEMPLATE_TEST_CASE("RNN matches torch.nn.RNN on the fixtures", "[rnn][golden]", float, double) {
  const std::string name = GENERATE("rnn_a", "rnn_b");
  CAPTURE(name);
  const attend_test::Fixture f(name);
  const RNN<TestType> rnn = rnn_from<TestType>(f);
  const Tensor3<TestType> H = rnn.forward(f.tensor3<TestType>("X"));
  REQUIRE_THAT(H, attend_test::Near(f.tensor3<double>("output"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("RNN follows the recurrence, checked by hand", "[rnn]", float, double) {
  const RNN<TestType> rnn = small_rnn<TestType>();
  const attend_test::Tolerance<TestType> tol = attend_test::tolerance<TestType>();

  SECTION("one step: h_1 = tanh(W_ih x_1 + b_ih + b_hh)") {
    Tensor3<TestType> X(1, 1, 2);  // (batch, steps, input)
    X.setValues({{{1, 2}}});
    Tensor3<double> expected(1, 1, 2);
    expected(0, 0, 0) = std::tanh(0.5 * 1 - 1 * 2 + 0.1 + 0.05);  // tanh(-1.35)
    expected(0, 0, 1) = std::tanh(0.25 * 1 + 2 * 2 - 0.2 + 0.3);  // tanh(4.35)
    REQUIRE_THAT(rnn.forward(X), attend_test::Near(expected, tol));
  }

  SECTION("two steps, two batch rows: h_2 = tanh(W_ih x_2 + b_ih + W_hh h_1 + b_hh)") {
    Tensor3<TestType> X(2, 2, 2);  // (batch, steps, input)
    X.setValues({{{1, 2}, {-1, 0.5}}, {{0, -1}, {2, 0.25}}});
    Tensor3<double> expected(2, 2, 2);
    // batch row 0
    const double a1 = std::tanh(0.5 * 1 - 1 * 2 + 0.1 + 0.05);
    const double a2 = std::tanh(0.25 * 1 + 2 * 2 - 0.2 + 0.3);
    expected(0, 0, 0) = a1;
    expected(0, 0, 1) = a2;
    expected(0, 1, 0) = std::tanh(0.5 * -1 - 1 * 0.5 + 0.1 + (1 * a1 - 0.5 * a2) + 0.05);
    expected(0, 1, 1) = std::tanh(0.25 * -1 + 2 * 0.5 - 0.2 + (0.5 * a1 + 0.25 * a2) + 0.3);
    // batch row 1: its own h_1, never row 0's
    const double c1 = std::tanh(0.5 * 0 - 1 * -1 + 0.1 + 0.05);
    const double c2 = std::tanh(0.25 * 0 + 2 * -1 - 0.2 + 0.3);
    expected(1, 0, 0) = c1;
    expected(1, 0, 1) = c2;
    expected(1, 1, 0) = std::tanh(0.5 * 2 - 1 * 0.25 + 0.1 + (1 * c1 - 0.5 * c2) + 0.05);
    expected(1, 1, 1) = std::tanh(0.25 * 2 + 2 * 0.25 - 0.2 + (0.5 * c1 + 0.25 * c2) + 0.3);
    REQUIRE_THAT(rnn.forward(X), attend_test::Near(expected, tol));
  }
}

TEMPLATE_TEST_CASE("RNN agrees with the recurrence written as loops", "[rnn]", float, double) {
  Generator generator(31);
  const RNN<TestType> rnn(4, 6, generator);
  const Index batch = GENERATE(1, 3), steps = GENERATE(1, 2, 9);
  CAPTURE(batch, steps);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, 4, 32);
  REQUIRE_THAT(rnn.forward(X), attend_test::Near(rnn_by_definition(X, rnn), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("RNN's output does not depend on the mode (no dropout)", "[rnn]", float, double) {
  Generator generator(33);
  RNN<TestType> rnn(3, 5, generator);
  REQUIRE(rnn.is_training());
  const Tensor3<TestType> X = random_tensor<TestType>(2, 4, 3, 34);
  const Tensor3<TestType> in_training = rnn(X);
  rnn.eval();
  REQUIRE_FALSE(rnn.is_training());
  const Tensor3<TestType> in_evaluation = rnn(X);
  REQUIRE(in_training.size() == in_evaluation.size());
  for (Index i = 0; i < in_training.size(); ++i) CHECK(in_training.data()[i] == in_evaluation.data()[i]);
}

TEMPLATE_TEST_CASE("RNN gives an empty result of the right shape for zero steps or zero batch rows", "[rnn]", float,
                   double) {
  const RNN<TestType> rnn(3, 5);
  const Tensor3<TestType> no_steps = rnn.forward(Tensor3<TestType>(2, 0, 3));
  CHECK(no_steps.dimension(0) == 2);
  CHECK(no_steps.dimension(1) == 0);
  CHECK(no_steps.dimension(2) == 5);
  const Tensor3<TestType> no_rows = rnn.forward(Tensor3<TestType>(0, 4, 3));
  CHECK(no_rows.dimension(0) == 0);
  CHECK(no_rows.dimension(1) == 4);
  CHECK(no_rows.dimension(2) == 5);
}

TEMPLATE_TEST_CASE("RNN counts its multiply-adds", "[rnn]", float, double) {
  const RNN<TestType> rnn(3, 5);
  // 2 * 6 * 5 * 3 for the input projection, 2 * 5 * 5 * 5 for the recurrence (no product at the first step).
  CHECK(rnn.multiply_adds(2, 6) == 180 + 250);
  CHECK(rnn.multiply_adds(2, 1) == 30);
  CHECK(rnn.multiply_adds(2, 0) == 0);
}

TEMPLATE_TEST_CASE("RNN is initialised uniformly within 1/sqrt(hidden), as PyTorch", "[rnn][init]", float, double) {
  // torch.nn.RNNBase.reset_parameters: every parameter uniform in +-1/sqrt(hidden_size). input_size = 400 and
  // hidden_size = 4 make 1/sqrt(hidden) = 1/2 and 1/sqrt(input) = 1/20 far apart.
  Generator generator(3);
  const RNN<TestType> rnn(400, 4, generator);
  const TestType bound = TestType(0.5);
  REQUIRE(rnn.weight_ih().rows() == 4);
  REQUIRE(rnn.weight_ih().cols() == 400);
  REQUIRE(rnn.weight_hh().rows() == 4);
  REQUIRE(rnn.weight_hh().cols() == 4);
  REQUIRE(rnn.bias_ih().size() == 4);
  REQUIRE(rnn.bias_hh().size() == 4);

  const auto& W = rnn.weight_ih();
  CHECK(W.minCoeff() >= -bound);
  CHECK(W.maxCoeff() < bound);
  // 1600 uniform draws: the extremes come within 1% of the bound (for a random seed the chance they do not is
  // 2 * 0.995^1600, about 7e-4; the seed here is fixed, so the outcome is too) and the mean is within 5 sigma of 0
  // (sigma = bound / sqrt(3 * 1600)). A bound of 1/sqrt(input_size) or a range [0, bound) fails these.
  CHECK(W.minCoeff() < TestType(-0.99) * bound);
  CHECK(W.maxCoeff() > TestType(0.99) * bound);
  CHECK(std::abs(static_cast<double>(W.mean())) < 5 * static_cast<double>(bound) / std::sqrt(3.0 * 1600));

  CHECK(rnn.weight_hh().minCoeff() >= -bound);
  CHECK(rnn.weight_hh().maxCoeff() < bound);
  CHECK(rnn.bias_ih().minCoeff() >= -bound);
  CHECK(rnn.bias_ih().maxCoeff() < bound);
  CHECK(rnn.bias_hh().minCoeff() >= -bound);
  CHECK(rnn.bias_hh().maxCoeff() < bound);
}

TEMPLATE_TEST_CASE("RNN draws weight_ih, weight_hh, bias_ih, bias_hh in PyTorch's order", "[rnn][init]", float,
                   double) {
  Generator generator(42);
  const RNN<TestType> rnn(3, 2, generator);
  Generator replay(42);
  const TestType bound = TestType(1) / std::sqrt(TestType(2));
  for (Index j = 0; j < 2; ++j)
    for (Index i = 0; i < 3; ++i) {
      CAPTURE(j, i);
      CHECK(rnn.weight_ih()(j, i) == replay.uniform<TestType>(-bound, bound));
    }
  for (Index j = 0; j < 2; ++j)
    for (Index i = 0; i < 2; ++i) {
      CAPTURE(j, i);
      CHECK(rnn.weight_hh()(j, i) == replay.uniform<TestType>(-bound, bound));
    }
  for (Index j = 0; j < 2; ++j) {
    CAPTURE(j);
    CHECK(rnn.bias_ih()[j] == replay.uniform<TestType>(-bound, bound));
  }
  for (Index j = 0; j < 2; ++j) {
    CAPTURE(j);
    CHECK(rnn.bias_hh()[j] == replay.uniform<TestType>(-bound, bound));
  }
}

TEMPLATE_TEST_CASE("RNN's parameters are deterministic for a given generator seed", "[rnn][init]", float, double) {
  Generator seven_a(7), seven_b(7), eight(8);
  const RNN<TestType> a(3, 5, seven_a);
  const RNN<TestType> b(3, 5, seven_b);
  const RNN<TestType> c(3, 5, eight);
  CHECK(a.weight_ih() == b.weight_ih());
  CHECK(a.weight_hh() == b.weight_hh());
  CHECK(a.bias_ih() == b.bias_ih());
  CHECK(a.bias_hh() == b.bias_hh());
  CHECK(a.weight_ih() != c.weight_ih());
  CHECK(a.weight_hh() != c.weight_hh());

  attend::manual_seed(99);
  const RNN<TestType> from_default(3, 5);
  Generator ninety_nine(99);
  const RNN<TestType> from_explicit(3, 5, ninety_nine);
  CHECK(from_default.weight_ih() == from_explicit.weight_ih());
  CHECK(from_default.bias_hh() == from_explicit.bias_hh());
}

TEMPLATE_TEST_CASE("RNN rejects sizes below 1", "[rnn][errors]", float, double) {
  REQUIRE_THROWS_MATCHES(RNN<TestType>(0, 5), std::invalid_argument,
                         Message("RNN: input_size must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(RNN<TestType>(3, -2), std::invalid_argument,
                         Message("RNN: hidden_size must be at least 1, got -2"));
}

TEMPLATE_TEST_CASE("RNN rejects X with the wrong feature count, naming X and both counts", "[rnn][errors]", float,
                   double) {
  const RNN<TestType> rnn(3, 5);
  Tensor3<TestType> X(2, 6, 4);
  X.setZero();
  REQUIRE_THROWS_MATCHES(rnn.forward(X), std::invalid_argument,
                         Message("RNN: X must have 3 features (input_size) (axis 2), got shape (2, 6, 4)"));
  REQUIRE_THROWS_MATCHES(rnn.forward(Tensor3<TestType>(0, 6, 2)), std::invalid_argument,
                         Message("RNN: X must have 3 features (input_size) (axis 2), got shape (0, 6, 2)"));
}

TEMPLATE_TEST_CASE("RNN parameters resized from outside make the call throw, naming both shapes", "[rnn][errors]",
                   float, double) {
  RNN<TestType> rnn(3, 5);
  Tensor3<TestType> X(2, 6, 3);
  X.setZero();
  SECTION("weight_ih transposed") {
    rnn.weight_ih().resize(3, 5);
    REQUIRE_THROWS_MATCHES(rnn(X), std::invalid_argument,
                           Message("RNN: weight_ih must have shape (5, 3) (hidden_size, input_size), got (3, 5)"));
  }
  SECTION("weight_hh smaller") {
    rnn.weight_hh().resize(4, 4);
    REQUIRE_THROWS_MATCHES(rnn(X), std::invalid_argument,
                           Message("RNN: weight_hh must have shape (5, 5) (hidden_size, hidden_size), got (4, 4)"));
  }
  SECTION("bias_ih shorter") {
    rnn.bias_ih().resize(4);
    REQUIRE_THROWS_MATCHES(rnn(X), std::invalid_argument, Message("RNN: bias_ih must have shape (5,), got (4,)"));
  }
  SECTION("bias_hh emptied") {
    rnn.bias_hh().resize(0);
    REQUIRE_THROWS_MATCHES(rnn(X), std::invalid_argument, Message("RNN: bias_hh must have shape (5,), got (0,)"));
  }
}
