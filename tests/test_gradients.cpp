// Backward passes and losses against PyTorch autograd (tests/reference/make_training_fixtures.py) and, independently,
// against central finite differences in double (support/finite_difference.hpp): masked_softmax_backward, Linear,
// mse_loss, cross_entropy; and their errors.
#include <attend/linear.hpp>
#include <attend/loss.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/lens.hpp>
#include <support/masks.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

using attend::FullyMasked;
using attend::Index;
using attend::Linear;
using attend::Mask;
using attend::Matrix;
using attend::Tensor3;
using attend::ValidLens;
using attend::Vector;
using attend_test::Fixture;
using attend_test::Near;
using attend_test::random_tensor;
using Catch::Contains;

namespace {

template <class Scalar, class Source>
Tensor3<Scalar> cast(const Tensor3<Source>& X) {
  return X.template cast<Scalar>();
}

Mask mask_of(const Fixture& fixture) {
  if (fixture.has("keep")) return Mask::keep(attend_test::booleans(fixture, "keep"));
  return attend_test::valid_lens(fixture);
}

}  // namespace

// ---- masked_softmax_backward -------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("masked_softmax_backward gives autograd's gradient through d2l's masked_softmax",
                   "[gradients][masked_softmax][golden]", float, double) {
  const std::string name = GENERATE("grad_masked_softmax_none", "grad_masked_softmax_1d", "grad_masked_softmax_2d",
                                    "grad_masked_softmax_keep");
  CAPTURE(name);
  const Fixture fx(name);
  const Mask mask = mask_of(fx);
  const Tensor3<TestType> Y = attend::masked_softmax(fx.tensor3<TestType>("X"), mask);
  REQUIRE_THAT(Y, Near(fx.tensor3<double>("Y"), attend_test::tolerance<TestType>()));
  const Tensor3<TestType> dX = attend::masked_softmax_backward(Y, fx.tensor3<TestType>("grad_Y"), mask);
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_X"), attend_test::tolerance<TestType>()));
}

TEST_CASE("masked_softmax_backward agrees with finite differences for every kind of mask", "[gradients][masked_softmax]") {
  const Index batch = 2, num_queries = 4, num_keys = 6;
  Tensor3<bool> keep(1, num_queries, num_keys);
  keep.setConstant(true);
  keep(0, 1, 2) = keep(0, 2, 0) = keep(0, 3, 5) = false;
  const Mask masks[] = {Mask{},
                        Mask(ValidLens{3, 0}),
                        Mask::causal(),
                        Mask(ValidLens{5, 2}) && Mask::causal() && Mask::keep(keep),
                        Mask(ValidLens{0, 4}).when_fully_masked(FullyMasked::zero)};
  for (std::size_t m = 0; m < std::size(masks); ++m) {
    CAPTURE(m);
    Tensor3<double> X = random_tensor<double>(batch, num_queries, num_keys, 40 + m, -3.0, 3.0);
    const Tensor3<double> dY = random_tensor<double>(batch, num_queries, num_keys, 50 + m);
    const auto loss = [&] { return attend_test::dot(dY, attend::masked_softmax(X, masks[m])); };
    const Tensor3<double> expected = attend_test::finite_difference(X, loss);
    const Tensor3<double> dX = attend::masked_softmax_backward(attend::masked_softmax(X, masks[m]), dY, masks[m]);
    REQUIRE_THAT(dX, Near(expected, attend_test::finite_difference_tolerance()));
  }
}

TEMPLATE_TEST_CASE("masked_softmax_backward: a masked score and a query that sees no key get gradient 0",
                   "[gradients][masked_softmax]", float, double) {
  const Mask mask = ValidLens{2, 0};
  const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 61);
  const Tensor3<TestType> Y = attend::masked_softmax(X, mask);
  const Tensor3<TestType> dX = attend::masked_softmax_backward(Y, random_tensor<TestType>(2, 3, 4, 62), mask);
  for (Index q = 0; q < 3; ++q)
    for (Index j = 0; j < 4; ++j) {
      if (j >= 2) CHECK(dX(0, q, j) == TestType(0));
      CHECK(dX(1, q, j) == TestType(0));
    }
}

TEMPLATE_TEST_CASE("masked_softmax_backward rejects a grad_Y or a mask of another shape", "[gradients][bad_input]",
                   float, double) {
  const Tensor3<TestType> Y(2, 3, 4), dY(2, 3, 5);
  REQUIRE_THROWS_AS(attend::masked_softmax_backward(Y, dY), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::masked_softmax_backward(Y, dY),
                      Contains("masked_softmax_backward") && Contains("grad_Y") && Contains("(2, 3, 4)") &&
                          Contains("(2, 3, 5)"));
  REQUIRE_THROWS_WITH(attend::masked_softmax_backward(Y, Y, ValidLens{1, 2, 3}),
                      Contains("masked_softmax_backward") && Contains("valid_lens"));
}

// ---- Linear --------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Linear::backward gives autograd's gradients, and a second call adds them again",
                   "[gradients][linear][golden]", float, double) {
  const Fixture fx("grad_linear");
  Linear<TestType> layer(4, 3);
  layer.weight() = fx.matrix<TestType>("weight");
  layer.bias() = fx.vector<TestType>("bias");
  const Tensor3<TestType> X = fx.tensor3<TestType>("X"), dY = fx.tensor3<TestType>("grad_output");
  layer(X);
  const Tensor3<TestType> dX = layer.backward(dY);
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_X"), attend_test::tolerance<TestType>()));
  REQUIRE_THAT(layer.weight_grad(), Near(fx.matrix<double>("weight_grad"), attend_test::tolerance<TestType>()));
  REQUIRE_THAT(layer.bias_grad(), Near(fx.vector<double>("bias_grad"), attend_test::tolerance<TestType>()));
  const Matrix<TestType> once = layer.weight_grad();
  const Vector<TestType> bias_once = layer.bias_grad();
  layer.backward(dY);  // PyTorch's accumulation: the record stays, the gradients add up
  REQUIRE(layer.weight_grad() == TestType(2) * once);
  REQUIRE(layer.bias_grad() == TestType(2) * bias_once);
  layer.zero_grad();
  REQUIRE(layer.weight_grad().isZero(0));
  REQUIRE(layer.bias_grad().isZero(0));
}

TEST_CASE("Linear::backward agrees with finite differences, with and without a bias", "[gradients][linear]") {
  for (const bool bias : {true, false}) {
    CAPTURE(bias);
    attend::Generator generator(71);
    Linear<double> layer(5, 7, bias, generator);
    Tensor3<double> X = random_tensor<double>(2, 3, 5, 72);
    const Tensor3<double> dY = random_tensor<double>(2, 3, 7, 73);
    const auto loss = [&] { return attend_test::dot(dY, layer.forward(X)); };
    const Tensor3<double> expected_dX = attend_test::finite_difference(X, loss);
    const Matrix<double> expected_dW = attend_test::finite_difference(layer.weight(), loss);
    layer(X);
    REQUIRE_THAT(layer.backward(dY), Near(expected_dX, attend_test::finite_difference_tolerance()));
    REQUIRE_THAT(layer.weight_grad(), Near(expected_dW, attend_test::finite_difference_tolerance()));
    if (bias) {
      const Vector<double> expected_db = attend_test::finite_difference(layer.bias(), loss);
      REQUIRE_THAT(layer.bias_grad(), Near(expected_db, attend_test::finite_difference_tolerance()));
    }
  }
}

TEMPLATE_TEST_CASE("Linear::parameters lists weight and bias with their gradients, in state_dict order",
                   "[gradients][linear]", float, double) {
  Linear<TestType> layer(4, 3);
  auto params = layer.parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "weight");
  CHECK(params[0].value == layer.weight().data());
  CHECK(params[0].grad == layer.weight_grad().data());
  CHECK(params[0].size == 12);
  CHECK(params[1].name == "bias");
  CHECK(params[1].size == 3);
  CHECK(params[0].still_valid());
  layer.weight().resize(2, 6);  // same size, maybe the same storage: no longer the construction shape either way
  layer.weight().resize(5, 5);
  CHECK_FALSE(params[0].still_valid());
  REQUIRE_THROWS_WITH(layer.parameters(), Contains("Linear::parameters") && Contains("weight") && Contains("(3, 4)"));
  REQUIRE(Linear<TestType>(4, 3, false).parameters().size() == 1);
}

TEMPLATE_TEST_CASE("Linear::parameters stay valid through a move; not for a copy, an assignment or a destroyed module",
                   "[gradients][linear]", float, double) {
  auto layer = std::make_unique<Linear<TestType>>(4, 3);
  const auto params = layer->parameters();
  Linear<TestType> moved(std::move(*layer));
  CHECK(params[0].value == moved.weight().data());  // the storage moved with the module
  CHECK(params[1].grad == moved.bias_grad().data());
  CHECK(params[0].still_valid());
  CHECK(params[1].still_valid());
  const Linear<TestType> copy(moved);  // storage of its own
  CHECK(copy.weight().data() != params[0].value);
  CHECK(params[0].still_valid());
  layer.reset();  // the moved-from module: its destruction does not concern the Parameters that followed the move
  CHECK(params[0].still_valid());
  auto last = std::make_unique<Linear<TestType>>(std::move(moved));
  CHECK(params[1].still_valid());
  *last = copy;  // assigned over
  CHECK_FALSE(params[0].still_valid());
  CHECK_FALSE(params[1].still_valid());
  const auto again = last->parameters();
  CHECK(again[0].still_valid());
  last.reset();  // destroyed: false, without reading the module
  CHECK_FALSE(again[0].still_valid());
  CHECK_FALSE(again[1].still_valid());
}

TEMPLATE_TEST_CASE("Linear::backward: a clear error for a call in the wrong state or a wrong shape, nothing changed",
                   "[gradients][linear][bad_input]", float, double) {
  Linear<TestType> layer(4, 3);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 4, 81);
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 5, 3, 82);
  REQUIRE_THROWS_AS(layer.backward(dY), std::logic_error);
  REQUIRE_THROWS_WITH(layer.backward(dY), Contains("Linear::backward") && Contains("no recorded call"));
  layer.forward(X);  // records nothing
  REQUIRE_THROWS_AS(layer.backward(dY), std::logic_error);

  layer(X);
  const Tensor3<TestType> wrong = random_tensor<TestType>(2, 5, 4, 83);
  REQUIRE_THROWS_AS(layer.backward(wrong), std::invalid_argument);
  REQUIRE_THROWS_WITH(layer.backward(wrong),
                      Contains("grad_output") && Contains("(2, 5, 3)") && Contains("(2, 5, 4)"));
  REQUIRE(layer.weight_grad().isZero(0));
  REQUIRE(layer.bias_grad().isZero(0));
  layer.weight_grad().resize(1, 1);
  REQUIRE_THROWS_WITH(layer.backward(dY), Contains("gradient") && Contains("weight") && Contains("(3, 4)"));
  REQUIRE(layer.bias_grad().isZero(0));
}

TEMPLATE_TEST_CASE("Linear::backward: a NaN in grad_output reaches the gradients, and nothing crashes",
                   "[gradients][linear]", float, double) {
  Linear<TestType> layer(4, 3);
  Tensor3<TestType> dY = random_tensor<TestType>(1, 2, 3, 85);
  dY(0, 1, 2) = std::numeric_limits<TestType>::quiet_NaN();
  layer(random_tensor<TestType>(1, 2, 4, 84));
  const Tensor3<TestType> dX = layer.backward(dY);
  for (Index i = 0; i < 4; ++i) CHECK(std::isnan(dX(0, 1, i)));
  CHECK(std::isnan(layer.bias_grad()[2]));
  CHECK_FALSE(std::isnan(layer.bias_grad()[0]));
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("Linear::backward gives the same bits on 1 and 2 threads", "[gradients][linear][threads]", float,
                   double) {
  // More rows than one chunk (tuning::rows_per_chunk) and a weight larger than a product panel.
  const Tensor3<TestType> X = random_tensor<TestType>(3, 300, 200, 91);
  const Tensor3<TestType> dY = random_tensor<TestType>(3, 300, 170, 92);
  Tensor3<TestType> dX[2];
  Matrix<TestType> dW[2];
  for (int threads : {1, 2}) {
    attend::set_num_threads(threads);
    attend::Generator generator(93);
    Linear<TestType> layer(200, 170, true, generator);
    layer(X);
    dX[threads - 1] = layer.backward(dY);
    dW[threads - 1] = layer.weight_grad();
  }
  attend::set_num_threads(2);
  REQUIRE_THAT(dX[1], Near(dX[0], attend_test::Tolerance<TestType>{0, 0}));
  REQUIRE(dW[1] == dW[0]);
}
#endif

// ---- losses --------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("mse_loss gives F.mse_loss and autograd's gradient", "[gradients][loss][golden]", float, double) {
  const Fixture fx("loss_mse");
  const auto loss = attend::mse_loss(fx.tensor3<TestType>("prediction"), fx.tensor3<TestType>("target"));
  REQUIRE(static_cast<double>(loss.value) == Approx(fx.scalar("loss")).epsilon(attend_test::tolerance<TestType>().rel));
  REQUIRE_THAT(loss.grad, Near(fx.tensor3<double>("grad"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("cross_entropy gives d2l's MaskedSoftmaxCELoss (mean over the batch) and autograd's gradient",
                   "[gradients][loss][golden]", float, double) {
  const std::string name = GENERATE("loss_cross_entropy_lens", "loss_cross_entropy_full");
  CAPTURE(name);
  const Fixture fx(name);
  const auto loss = attend::cross_entropy(fx.tensor3<TestType>("logits"), fx.index_matrix("labels"),
                                          attend_test::valid_lens(fx));
  REQUIRE(static_cast<double>(loss.value) == Approx(fx.scalar("loss")).epsilon(attend_test::tolerance<TestType>().rel));
  REQUIRE_THAT(loss.grad, Near(fx.tensor3<double>("grad"), attend_test::tolerance<TestType>()));
}

TEST_CASE("mse_loss and cross_entropy agree with finite differences", "[gradients][loss]") {
  Tensor3<double> prediction = random_tensor<double>(2, 3, 4, 101);
  const Tensor3<double> target = random_tensor<double>(2, 3, 4, 102);
  const Tensor3<double> expected_mse =
      attend_test::finite_difference(prediction, [&] { return attend::mse_loss(prediction, target).value; });
  REQUIRE_THAT(attend::mse_loss(prediction, target).grad, Near(expected_mse, attend_test::finite_difference_tolerance()));

  Tensor3<double> logits = random_tensor<double>(3, 4, 5, 103, -4.0, 4.0);
  Matrix<Index> labels(3, 4);
  labels << 0, 4, 2, 1, 3, 3, 0, 4, 1, 2, 2, 0;
  for (const ValidLens& lens : {ValidLens{}, ValidLens{4, 0, 2}}) {
    const Tensor3<double> expected = attend_test::finite_difference(
        logits, [&] { return attend::cross_entropy(logits, labels, lens).value; });
    REQUIRE_THAT(attend::cross_entropy(logits, labels, lens).grad,
                 Near(expected, attend_test::finite_difference_tolerance()));
  }
}

TEMPLATE_TEST_CASE("the losses reject a label out of range and shapes that do not fit", "[gradients][loss][bad_input]",
                   float, double) {
  const Tensor3<TestType> logits = random_tensor<TestType>(2, 3, 4, 111);
  Matrix<Index> labels = Matrix<Index>::Zero(2, 3);
  labels(1, 2) = 4;
  REQUIRE_THROWS_AS(attend::cross_entropy(logits, labels), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::cross_entropy(logits, labels),
                      Contains("cross_entropy") && Contains("labels(1, 2)") && Contains("[0, 4)") && Contains("4"));
  labels(1, 2) = -1;
  REQUIRE_THROWS_WITH(attend::cross_entropy(logits, labels), Contains("labels(1, 2)") && Contains("-1"));
  REQUIRE_THROWS_WITH(attend::cross_entropy(logits, Matrix<Index>::Zero(3, 2)),
                      Contains("labels") && Contains("(2, 3)") && Contains("(3, 2)"));
  REQUIRE_THROWS_WITH(attend::cross_entropy(logits, Matrix<Index>::Zero(2, 3), ValidLens{1, 2, 3}),
                      Contains("cross_entropy") && Contains("valid_lens"));
  REQUIRE_THROWS_WITH(attend::cross_entropy(logits, Matrix<Index>::Zero(2, 3), ValidLens::per_query(Matrix<Index>::Ones(2, 3))),
                      Contains("one length per batch row"));
  REQUIRE_THROWS_WITH(attend::mse_loss(logits, random_tensor<TestType>(2, 3, 5, 112)),
                      Contains("mse_loss") && Contains("target") && Contains("(2, 3, 4)") && Contains("(2, 3, 5)"));
  REQUIRE_THROWS_WITH(attend::mse_loss(Tensor3<TestType>(0, 3, 4), Tensor3<TestType>(0, 3, 4)),
                      Contains("at least one element"));
}

// ---- PositionalEncoding ----------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("PositionalEncoding::backward: the identity in evaluation mode, dropout's factors in training",
                   "[gradients][positional_encoding]", float, double) {
  attend::Generator generator(121);
  attend::PositionalEncoding<TestType> encoding(6, TestType(0.5), 50, generator);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 7, 6, 122);
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 7, 6, 123);
  encoding.eval();
  encoding(X);
  REQUIRE_THAT(encoding.backward(dY), Near(dY, attend_test::Tolerance<TestType>{0, 0}));

  // Inverted dropout's definition: Y = (X + P) * f with f = 0 or 1 / (1 - p), so dX = dY * f, f read off Y.
  encoding.train();
  const Tensor3<TestType> Y = encoding(X);
  const Tensor3<TestType> dX = encoding.backward(dY);
  Index dropped = 0;
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 7; ++t)
      for (Index j = 0; j < 6; ++j) {
        const TestType factor = Y(b, t, j) == TestType(0) ? TestType(0) : TestType(2);
        dropped += factor == TestType(0);
        CHECK(dX(b, t, j) == dY(b, t, j) * factor);
        if (factor != TestType(0))
          CHECK(Y(b, t, j) == (X(b, t, j) + encoding.P()(t, j)) * TestType(2));
      }
  CHECK(dropped > 10);  // about half of 84
  CHECK(dropped < 74);
  REQUIRE(encoding.parameters().empty());
}

TEMPLATE_TEST_CASE("PositionalEncoding::backward: no recorded call, or a grad_output of another shape",
                   "[gradients][positional_encoding][bad_input]", float, double) {
  attend::PositionalEncoding<TestType> encoding(6, TestType(0), 50);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 7, 6, 131);
  REQUIRE_THROWS_AS(encoding.backward(X), std::logic_error);
  encoding(X);
  REQUIRE_THROWS_AS(encoding.backward(random_tensor<TestType>(2, 6, 6, 132)), std::invalid_argument);
  REQUIRE_THROWS_WITH(encoding.backward(random_tensor<TestType>(2, 6, 6, 132)),
                      Contains("PositionalEncoding::backward") && Contains("(2, 7, 6)") && Contains("(2, 6, 6)"));
}
