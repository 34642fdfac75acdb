// The backward passes of RNN (backpropagation through time) and Conv1d ('same' padding, odd and even kernels): against
// PyTorch autograd (tests/reference/make_training_fixtures.py), against central finite differences in double and
// Conv1d's against its gradients written as loops over several chunks of steps; accumulation, zero_grad(),
// parameters(), the errors, NaN, and 1 and 2 threads bit for bit.
#include <attend/conv1d.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <type_traits>
#include <vector>

using attend::Conv1d;
using attend::Index;
using attend::Matrix;
using attend::RNN;
using attend::Tensor3;
using attend::Vector;
using attend_test::Fixture;
using attend_test::exact;
using attend_test::gradient_tolerance;
using attend_test::gradients_of;
using attend_test::Near;
using attend_test::random_tensor;
using attend_test::Tolerance;
using Catch::Contains;

namespace {

// An RNN with a fixture's parameters.
template <class Scalar>
RNN<Scalar> rnn_from(const Fixture& fx) {
  const Matrix<Scalar> W_ih = fx.matrix<Scalar>("weight_ih");  // (hidden, input)
  RNN<Scalar> rnn(W_ih.cols(), W_ih.rows());
  rnn.weight_ih() = W_ih;
  rnn.weight_hh() = fx.matrix<Scalar>("weight_hh");
  rnn.bias_ih() = fx.vector<Scalar>("bias_ih");
  rnn.bias_hh() = fx.vector<Scalar>("bias_hh");
  return rnn;
}

// A Conv1d with a fixture's parameters.
template <class Scalar>
Conv1d<Scalar> conv_from(const Fixture& fx) {
  const Tensor3<Scalar> W = fx.tensor3<Scalar>("weight");  // (out, in, k)
  REQUIRE(W.dimension(2) == fx.index("kernel_size"));
  Conv1d<Scalar> conv(W.dimension(1), W.dimension(0), W.dimension(2), fx.has("bias"));
  conv.weight() = W;
  if (fx.has("bias")) conv.bias() = fx.vector<Scalar>("bias");
  return conv;
}

// Conv1d's gradients as loops in double, from the definition Y[b, s, o] = bias[o] + sum_{i, t} W[o, i, t]
// X[b, s + t - left, i] (X outside [0, steps) being 0):
//   dX[b, p, i] = sum_{o, t} W[o, i, t] dY[b, p + left - t, o]
//   dW[o, i, t] = sum_{b, s} dY[b, s, o] X[b, s + t - left, i]
struct ConvGradients {
  Tensor3<double> dX;  // (batch, steps, in)
  Tensor3<double> dW;  // (out, in, k)
};

template <class Scalar>
ConvGradients conv_gradients_by_definition(const Conv1d<Scalar>& conv, const Tensor3<Scalar>& X,
                                           const Tensor3<Scalar>& dY) {
  const Index batch = X.dimension(0), steps = X.dimension(1);
  const Index in = conv.in_channels(), out = conv.out_channels(), k = conv.kernel_size(), left = conv.left_padding();
  ConvGradients g{Tensor3<double>(batch, steps, in), Tensor3<double>(out, in, k)};
  g.dX.setZero();
  g.dW.setZero();
  for (Index b = 0; b < batch; ++b)
    for (Index s = 0; s < steps; ++s)
      for (Index t = 0; t < k; ++t) {
        const Index step = s + t - left;  // the input step output step s reads through tap t
        if (step < 0 || step >= steps) continue;
        for (Index o = 0; o < out; ++o)
          for (Index i = 0; i < in; ++i) {
            const double w = static_cast<double>(conv.weight()(o, i, t)), dy = static_cast<double>(dY(b, s, o));
            g.dX(b, step, i) += w * dy;
            g.dW(o, i, t) += dy * static_cast<double>(X(b, step, i));
          }
      }
  return g;
}

const char* const conv_fixtures[] = {"grad_conv1d_k1", "grad_conv1d_k2_nobias", "grad_conv1d_k3",
                                     "grad_conv1d_k4", "grad_conv1d_k5_nobias", "grad_conv1d_k6_short"};

}  // namespace

// ---- RNN -----------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("RNN::backward gives autograd's gradients through time, and a second call adds them again",
                   "[gradients][rnn][golden]", float, double) {
  const std::string name = GENERATE("grad_rnn_steps", "grad_rnn_one_step");
  CAPTURE(name);
  const Fixture fx(name);
  RNN<TestType> rnn = rnn_from<TestType>(fx);
  const Tensor3<TestType> dH = fx.tensor3<TestType>("grad_output");
  REQUIRE_THAT(rnn(fx.tensor3<TestType>("X")), Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const Tensor3<TestType> dX = rnn.backward(dH);
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(rnn.weight_ih_grad(), Near(fx.matrix<double>("weight_ih_grad"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(rnn.weight_hh_grad(), Near(fx.matrix<double>("weight_hh_grad"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(rnn.bias_ih_grad(), Near(fx.vector<double>("bias_ih_grad"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(rnn.bias_hh_grad(), Near(fx.vector<double>("bias_hh_grad"), gradient_tolerance<TestType>()));

  // PyTorch's accumulation: the record stays, the gradients add up.
  const std::vector<TestType> once = gradients_of(rnn);
  REQUIRE_THAT(rnn.backward(dH), Near(dX, exact<TestType>()));
  const std::vector<TestType> twice = gradients_of(rnn);
  for (std::size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == TestType(2) * once[i]);
  rnn.zero_grad();
  for (TestType x : gradients_of(rnn)) REQUIRE(x == TestType(0));
}

TEST_CASE("RNN::backward agrees with finite differences", "[gradients][rnn]") {
  attend::Generator generator(301);
  RNN<double> rnn(3, 4, generator);
  Tensor3<double> X = random_tensor<double>(2, 5, 3, 302);
  const Tensor3<double> dH = random_tensor<double>(2, 5, 4, 303);
  const auto loss = [&] { return attend_test::dot(dH, rnn.forward(X)); };
  const auto tolerance = attend_test::finite_difference_tolerance();
  const Tensor3<double> expected_dX = attend_test::finite_difference(X, loss);
  rnn(X);
  REQUIRE_THAT(rnn.backward(dH), Near(expected_dX, tolerance));
  REQUIRE_THAT(rnn.weight_ih_grad(), Near(attend_test::finite_difference(rnn.weight_ih(), loss), tolerance));
  REQUIRE_THAT(rnn.weight_hh_grad(), Near(attend_test::finite_difference(rnn.weight_hh(), loss), tolerance));
  REQUIRE_THAT(rnn.bias_ih_grad(), Near(attend_test::finite_difference(rnn.bias_ih(), loss), tolerance));
  REQUIRE_THAT(rnn.bias_hh_grad(), Near(attend_test::finite_difference(rnn.bias_hh(), loss), tolerance));
}

TEMPLATE_TEST_CASE("RNN::parameters lists the four parameters with their gradients, in state_dict order",
                   "[gradients][rnn]", float, double) {
  RNN<TestType> rnn(3, 5);
  const auto params = rnn.parameters();
  REQUIRE(params.size() == 4);
  const std::string names[] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"};
  const TestType* values[] = {rnn.weight_ih().data(), rnn.weight_hh().data(), rnn.bias_ih().data(),
                              rnn.bias_hh().data()};
  const TestType* grads[] = {rnn.weight_ih_grad().data(), rnn.weight_hh_grad().data(), rnn.bias_ih_grad().data(),
                             rnn.bias_hh_grad().data()};
  const Index sizes[] = {15, 25, 5, 5};
  const attend::StateDict<TestType> dict = rnn.state_dict();
  for (std::size_t p = 0; p < 4; ++p) {
    CAPTURE(p);
    CHECK(params[p].name == names[p]);
    CHECK(dict.count(names[p]) == 1);
    CHECK(params[p].value == values[p]);
    CHECK(params[p].grad == grads[p]);
    CHECK(params[p].size == sizes[p]);
    CHECK(params[p].still_valid());
  }
  CHECK(rnn.weight_hh_grad().isZero(0));  // zero at construction
  rnn.bias_hh_grad().resize(6);
  CHECK_FALSE(params[3].still_valid());
  REQUIRE_THROWS_WITH(rnn.parameters(), Contains("RNN::parameters") && Contains("bias_hh_l0") && Contains("(5)"));
}

TEMPLATE_TEST_CASE("RNN::backward: no recorded call, a grad_output of another shape, a resized buffer",
                   "[gradients][rnn][bad_input]", float, double) {
  RNN<TestType> rnn(3, 4);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 3, 311);
  const Tensor3<TestType> dH = random_tensor<TestType>(2, 5, 4, 312);
  REQUIRE_THROWS_AS(rnn.backward(dH), std::logic_error);
  REQUIRE_THROWS_WITH(rnn.backward(dH), Contains("RNN::backward") && Contains("no recorded call"));
  rnn.forward(X);  // records nothing
  REQUIRE_THROWS_AS(rnn.backward(dH), std::logic_error);

  rnn(X);
  const Tensor3<TestType> wrong = random_tensor<TestType>(2, 4, 4, 313);
  REQUIRE_THROWS_AS(rnn.backward(wrong), std::invalid_argument);
  REQUIRE_THROWS_WITH(rnn.backward(wrong), Contains("RNN::backward") && Contains("grad_output") &&
                                               Contains("(2, 5, 4)") && Contains("(2, 4, 4)"));
  for (TestType x : gradients_of(rnn)) REQUIRE(x == TestType(0));

  rnn.weight_hh_grad().resize(2, 2);
  REQUIRE_THROWS_AS(rnn.backward(dH), std::invalid_argument);
  REQUIRE_THROWS_WITH(rnn.backward(dH), Contains("RNN::backward") && Contains("weight_hh_l0") && Contains("(4, 4)") &&
                                            Contains("resized"));
  rnn.weight_hh_grad().setZero(4, 4);
  for (TestType x : gradients_of(rnn)) REQUIRE(x == TestType(0));
  rnn.weight_ih().resize(4, 4);
  REQUIRE_THROWS_WITH(rnn.backward(dH), Contains("RNN::backward") && Contains("weight_ih") && Contains("(4, 3)"));
  rnn.weight_ih().setZero(4, 3);
  rnn.backward(dH);  // with both back in shape it runs
}

TEMPLATE_TEST_CASE("RNN::backward: a NaN in grad_output reaches the earlier steps and the gradients only",
                   "[gradients][rnn][numerical]", float, double) {
  RNN<TestType> rnn(3, 4);
  Tensor3<TestType> dH = random_tensor<TestType>(2, 5, 4, 322);
  dH(0, 2, 1) = std::numeric_limits<TestType>::quiet_NaN();
  rnn(random_tensor<TestType>(2, 5, 3, 321));
  const Tensor3<TestType> dX = rnn.backward(dH);
  for (Index t = 0; t < 5; ++t)
    for (Index i = 0; i < 3; ++i) {
      CAPTURE(t, i);
      CHECK(std::isnan(dX(0, t, i)) == (t <= 2));  // through W_hh to every earlier step, none later
      CHECK_FALSE(std::isnan(dX(1, t, i)));        // batch row 1 never meets it
    }
  CHECK(std::isnan(rnn.weight_ih_grad()(1, 0)));
  CHECK(std::isnan(rnn.weight_hh_grad()(0, 0)));
  CHECK(std::isnan(rnn.bias_hh_grad()[1]));
}

TEMPLATE_TEST_CASE("RNN::backward on zero steps or zero batch rows: an empty gradient, nothing added",
                   "[gradients][rnn]", float, double) {
  RNN<TestType> rnn(3, 4);
  for (const Index batch : {0, 2}) {
    const Index steps = batch == 0 ? 5 : 0;
    rnn(Tensor3<TestType>(batch, steps, 3));
    const Tensor3<TestType> dX = rnn.backward(Tensor3<TestType>(batch, steps, 4));
    REQUIRE(dX.dimensions() == Tensor3<TestType>(batch, steps, 3).dimensions());
    for (TestType x : gradients_of(rnn)) REQUIRE(x == TestType(0));
  }
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("RNN::backward gives the same bits on 1 and 2 threads", "[gradients][rnn][threads]", float, double) {
  // More rows than one chunk (tuning::rows_per_chunk) in dX and in both weights' gradients, and each product worth a
  // team of threads (tuning::worth_a_team).
  const Tensor3<TestType> X = random_tensor<TestType>(2, 150, 64, 331);
  const Tensor3<TestType> dH = random_tensor<TestType>(2, 150, 260, 332);
  Tensor3<TestType> dX[2];
  std::vector<TestType> gradients[2];
  for (int threads : {1, 2}) {
    attend::set_num_threads(threads);
    attend::Generator generator(333);
    RNN<TestType> rnn(64, 260, generator);
    rnn(X);
    dX[threads - 1] = rnn.backward(dH);
    gradients[threads - 1] = gradients_of(rnn);
  }
  attend::set_num_threads(2);
  REQUIRE_THAT(dX[1], Near(dX[0], exact<TestType>()));
  REQUIRE(gradients[1] == gradients[0]);
}
#endif

// ---- Conv1d --------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Conv1d::backward gives autograd's gradients for odd and even kernels, and a second call adds them",
                   "[gradients][conv1d][golden]", float, double) {
  const std::string name = GENERATE(from_range(std::begin(conv_fixtures), std::end(conv_fixtures)));
  CAPTURE(name);
  const Fixture fx(name);
  Conv1d<TestType> conv = conv_from<TestType>(fx);
  const Tensor3<TestType> dY = fx.tensor3<TestType>("grad_output");
  REQUIRE_THAT(conv(fx.tensor3<TestType>("X")), Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const Tensor3<TestType> dX = conv.backward(dY);
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(conv.weight_grad(), Near(fx.tensor3<double>("weight_grad"), gradient_tolerance<TestType>()));
  if (conv.has_bias()) {
    REQUIRE_THAT(conv.bias_grad(), Near(fx.vector<double>("bias_grad"), gradient_tolerance<TestType>()));
  } else {
    REQUIRE(conv.bias_grad().size() == 0);
  }

  const std::vector<TestType> once = gradients_of(conv);
  REQUIRE_THAT(conv.backward(dY), Near(dX, exact<TestType>()));
  const std::vector<TestType> twice = gradients_of(conv);
  for (std::size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == TestType(2) * once[i]);
  conv.zero_grad();
  for (TestType x : gradients_of(conv)) REQUIRE(x == TestType(0));
}

TEST_CASE("Conv1d::backward agrees with finite differences, kernels 1 to 6, with and without a bias",
          "[gradients][conv1d]") {
  for (Index k = 1; k <= 6; ++k)
    for (const bool bias : {true, false}) {
      CAPTURE(k, bias);
      attend::Generator generator(340 + static_cast<std::uint64_t>(k));
      Conv1d<double> conv(3, 2, k, bias, generator);
      Tensor3<double> X = random_tensor<double>(2, 5, 3, 350 + static_cast<std::uint64_t>(k));
      const Tensor3<double> dY = random_tensor<double>(2, 5, 2, 360 + static_cast<std::uint64_t>(k));
      const auto loss = [&] { return attend_test::dot(dY, conv.forward(X)); };
      const auto tolerance = attend_test::finite_difference_tolerance();
      const Tensor3<double> expected_dX = attend_test::finite_difference(X, loss);
      conv(X);
      REQUIRE_THAT(conv.backward(dY), Near(expected_dX, tolerance));
      REQUIRE_THAT(conv.weight_grad(), Near(attend_test::finite_difference(conv.weight(), loss), tolerance));
      if (bias) REQUIRE_THAT(conv.bias_grad(), Near(attend_test::finite_difference(conv.bias(), loss), tolerance));
    }
}

TEMPLATE_TEST_CASE("Conv1d::backward agrees with its gradients written as loops over several chunks of steps",
                   "[gradients][conv1d]", float, double) {
  // 600 steps: chunks of tuning::rows_per_chunk at both ends of a batch row (windows past it) and between them.
  for (const Index k : {4, 5}) {
    CAPTURE(k);
    attend::Generator generator(370);
    Conv1d<TestType> conv(5, 3, k, true, generator);
    const Tensor3<TestType> X = random_tensor<TestType>(2, 600, 5, 371);
    const Tensor3<TestType> dY = random_tensor<TestType>(2, 600, 3, 372);
    const ConvGradients expected = conv_gradients_by_definition(conv, X, dY);
    conv(X);
    REQUIRE_THAT(conv.backward(dY), Near(expected.dX, attend_test::tolerance<TestType>()));
    // dW sums 1200 terms of order 1 per element: float rounding grows with them.
    REQUIRE_THAT(conv.weight_grad(), Near(expected.dW, gradient_tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Conv1d::parameters lists weight and bias with their gradients, in state_dict order",
                   "[gradients][conv1d]", float, double) {
  Conv1d<TestType> conv(3, 4, 2);
  const auto params = conv.parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "weight");
  CHECK(params[0].value == conv.weight().data());
  CHECK(params[0].grad == conv.weight_grad().data());
  CHECK(params[0].size == 24);
  CHECK(params[1].name == "bias");
  CHECK(params[1].value == conv.bias().data());
  CHECK(params[1].grad == conv.bias_grad().data());
  CHECK(params[1].size == 4);
  CHECK(conv.state_dict().size() == 2);
  CHECK(conv.weight_grad().dimensions() == conv.weight().dimensions());
  for (TestType x : gradients_of(conv)) CHECK(x == TestType(0));  // zero at construction

  Conv1d<TestType> plain(3, 4, 2, false);
  const auto only_weight = plain.parameters();
  REQUIRE(only_weight.size() == 1);
  CHECK(only_weight[0].name == "weight");
  plain.weight_grad().resize(4, 3, 3);
  CHECK_FALSE(only_weight[0].still_valid());
  REQUIRE_THROWS_WITH(plain.parameters(),
                      Contains("Conv1d::parameters") && Contains("weight") && Contains("(4, 3, 2)"));
}

TEMPLATE_TEST_CASE("Conv1d::backward: no recorded call, a grad_output of another shape, a resized buffer",
                   "[gradients][conv1d][bad_input]", float, double) {
  Conv1d<TestType> conv(3, 4, 2);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 3, 381);
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 5, 4, 382);
  REQUIRE_THROWS_AS(conv.backward(dY), std::logic_error);
  REQUIRE_THROWS_WITH(conv.backward(dY), Contains("Conv1d::backward") && Contains("no recorded call"));
  conv.forward(X);  // records nothing
  REQUIRE_THROWS_AS(conv.backward(dY), std::logic_error);

  conv(X);
  const Tensor3<TestType> wrong = random_tensor<TestType>(2, 5, 3, 383);
  REQUIRE_THROWS_AS(conv.backward(wrong), std::invalid_argument);
  REQUIRE_THROWS_WITH(conv.backward(wrong), Contains("Conv1d::backward") && Contains("grad_output") &&
                                                Contains("(2, 5, 4)") && Contains("(2, 5, 3)"));
  for (TestType x : gradients_of(conv)) REQUIRE(x == TestType(0));

  conv.bias_grad().resize(3);
  REQUIRE_THROWS_AS(conv.backward(dY), std::invalid_argument);
  REQUIRE_THROWS_WITH(conv.backward(dY),
                      Contains("Conv1d::backward") && Contains("bias") && Contains("(4)") && Contains("resized"));
  conv.bias_grad().setZero(4);
  for (TestType x : gradients_of(conv)) REQUIRE(x == TestType(0));
  conv.weight().resize(4, 3, 3);
  REQUIRE_THROWS_WITH(conv.backward(dY), Contains("Conv1d::backward") && Contains("weight") && Contains("(4, 3, 2)"));
  conv.weight().resize(4, 3, 2);
  conv.weight().setZero();
  conv.backward(dY);  // with both back in shape it runs
}

TEMPLATE_TEST_CASE("Conv1d::backward: a NaN in grad_output reaches the steps and the gradients it touches only",
                   "[gradients][conv1d][numerical]", float, double) {
  Conv1d<TestType> conv(3, 4, 3);  // left 1, right 1: output step 4 reads input steps 3 .. 5
  Tensor3<TestType> dY = random_tensor<TestType>(2, 8, 4, 392);
  dY(0, 4, 2) = std::numeric_limits<TestType>::quiet_NaN();
  conv(random_tensor<TestType>(2, 8, 3, 391));
  const Tensor3<TestType> dX = conv.backward(dY);
  for (Index p = 0; p < 8; ++p)
    for (Index i = 0; i < 3; ++i) {
      CAPTURE(p, i);
      CHECK(std::isnan(dX(0, p, i)) == (p >= 3 && p <= 5));
      CHECK_FALSE(std::isnan(dX(1, p, i)));
    }
  for (Index o = 0; o < 4; ++o) {
    CAPTURE(o);
    CHECK(std::isnan(conv.weight_grad()(o, 1, 0)) == (o == 2));
    CHECK(std::isnan(conv.bias_grad()[o]) == (o == 2));
  }
}

TEMPLATE_TEST_CASE("Conv1d::backward on zero steps or zero batch rows: an empty gradient, nothing added",
                   "[gradients][conv1d]", float, double) {
  for (const Index k : {1, 4}) {
    Conv1d<TestType> conv(3, 4, k);
    for (const Index batch : {0, 2}) {
      CAPTURE(k, batch);
      const Index steps = batch == 0 ? 5 : 0;
      conv(Tensor3<TestType>(batch, steps, 3));
      const Tensor3<TestType> dX = conv.backward(Tensor3<TestType>(batch, steps, 4));
      REQUIRE(dX.dimensions() == Tensor3<TestType>(batch, steps, 3).dimensions());
      for (TestType x : gradients_of(conv)) REQUIRE(x == TestType(0));
    }
  }
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("Conv1d::backward gives the same bits on 1 and 2 threads", "[gradients][conv1d][threads]", float,
                   double) {
  // Two chunks of steps per batch row in dX, more rows than one chunk (out_channels) in the weight's gradient, and
  // each product worth a team of threads (tuning::worth_a_team).
  const Tensor3<TestType> X = random_tensor<TestType>(2, 400, 16, 401);
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 400, 260, 402);
  Tensor3<TestType> dX[2];
  std::vector<TestType> gradients[2];
  for (int threads : {1, 2}) {
    attend::set_num_threads(threads);
    attend::Generator generator(403);
    Conv1d<TestType> conv(16, 260, 4, true, generator);
    conv(X);
    dX[threads - 1] = conv.backward(dY);
    gradients[threads - 1] = gradients_of(conv);
  }
  attend::set_num_threads(2);
  REQUIRE_THAT(dX[1], Near(dX[0], exact<TestType>()));
  REQUIRE(gradients[1] == gradients[0]);
}
#endif
