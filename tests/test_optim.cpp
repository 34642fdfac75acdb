// SGD, Adam and AdamW against torch.optim (tests/reference/make_training_fixtures.py: three steps from given
// gradients), on parameters given by hand and on a module's parameters(); and their errors.
#include <attend/linear.hpp>
#include <attend/loss.hpp>
#include <attend/optim.hpp>
#include <attend/parameter.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using attend::Index;
using attend::Matrix;
using attend::Parameter;
using attend::Vector;
using attend_test::Fixture;
using attend_test::Near;
using Catch::Contains;

namespace {

// Runs the fixture's three steps with an optimizer made by make(parameters) and checks the parameters after each.
template <class Scalar, class Make>
void check_steps(const std::string& name, const Make& make) {
  CAPTURE(name);
  const Fixture fx(name);
  Matrix<Scalar> a = fx.matrix<Scalar>("a");  // (3, 4)
  Vector<Scalar> b = fx.vector<Scalar>("b");  // (5)
  Matrix<Scalar> grad_a(a.rows(), a.cols());
  Vector<Scalar> grad_b(b.size());
  // By hand, with no still_valid check (taken on trust).
  std::vector<Parameter<Scalar>> parameters{{"a", a.data(), grad_a.data(), a.size(), {}},
                                            {"b", b.data(), grad_b.data(), b.size(), {}}};
  auto optimizer = make(parameters);
  for (int t = 1; t <= 3; ++t) {
    CAPTURE(t);
    // Into the gradients' own storage (a move assignment would give them another, and leave the Parameters behind).
    grad_a.array() = fx.matrix<Scalar>("grad_a_" + std::to_string(t)).array();
    grad_b.array() = fx.vector<Scalar>("grad_b_" + std::to_string(t)).array();
    optimizer.step();
    REQUIRE(optimizer.steps() == t);
    REQUIRE_THAT(a, Near(fx.matrix<double>("a_" + std::to_string(t)), attend_test::tolerance<Scalar>()));
    REQUIRE_THAT(b, Near(fx.vector<double>("b_" + std::to_string(t)), attend_test::tolerance<Scalar>()));
  }
  optimizer.zero_grad();
  REQUIRE(grad_a.isZero(0));
  REQUIRE(grad_b.isZero(0));
}

}  // namespace

TEMPLATE_TEST_CASE("SGD, Adam and AdamW take torch.optim's steps", "[optim][golden]", float, double) {
  using T = TestType;
  using Params = std::vector<Parameter<T>>;
  check_steps<T>("optim_sgd", [](Params p) { return attend::SGD<T>(p, T(0.1)); });
  check_steps<T>("optim_sgd_momentum", [](Params p) { return attend::SGD<T>(p, T(0.1), T(0.9), T(0.01)); });
  check_steps<T>("optim_adam", [](Params p) { return attend::Adam<T>(p, T(0.01), T(0.9), T(0.999), T(1e-8), T(0.1)); });
  check_steps<T>("optim_adamw", [](Params p) { return attend::AdamW<T>(p, T(0.01), T(0.8), T(0.99), T(1e-6), T(0.1)); });
}

TEMPLATE_TEST_CASE("an optimizer over a module's parameters() updates the module's own weights",
                   "[optim][linear]", float, double) {
  attend::Generator generator(5);
  attend::Linear<TestType> layer(3, 2, true, generator);
  const Matrix<TestType> before = layer.weight();
  attend::SGD<TestType> sgd(layer.parameters(), TestType(0.5));
  layer.weight_grad().setConstant(TestType(2));
  layer.bias_grad().setConstant(TestType(-1));
  sgd.step();
  REQUIRE(layer.weight() == (before.array() - TestType(1)).matrix());
  sgd.zero_grad();
  REQUIRE(layer.weight_grad().isZero(0));
}

TEMPLATE_TEST_CASE("an optimizer refuses to step on a parameter resized under it, and changes nothing",
                   "[optim][bad_input]", float, double) {
  attend::Generator generator(6);
  attend::Linear<TestType> first(3, 2, true, generator), second(4, 4, true, generator);
  std::vector<Parameter<TestType>> parameters = first.parameters();
  for (const auto& p : second.parameters()) parameters.push_back(p);
  attend::Adam<TestType> adam(parameters);
  first.weight_grad().setConstant(TestType(1));
  const Matrix<TestType> kept = first.weight();
  second.bias().resize(9);
  REQUIRE_THROWS_AS(adam.step(), std::invalid_argument);
  REQUIRE_THROWS_WITH(adam.step(), Contains("Adam::step") && Contains("bias") && Contains("resized"));
  REQUIRE(first.weight() == kept);  // the check comes before any update
  REQUIRE(adam.steps() == 0);
  REQUIRE_THROWS_WITH(adam.zero_grad(), Contains("Adam::zero_grad"));
}

TEMPLATE_TEST_CASE("optimizers reject hyperparameters out of range", "[optim][bad_input]", float, double) {
  using T = TestType;
  std::vector<Parameter<T>> none;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  REQUIRE_THROWS_WITH(attend::SGD<T>(none, T(-0.1)), Contains("SGD") && Contains("lr") && Contains("-0.1"));
  REQUIRE_THROWS_WITH(attend::SGD<T>(none, nan), Contains("SGD") && Contains("lr"));
  REQUIRE_THROWS_WITH(attend::SGD<T>(none, T(0.1), T(-1)), Contains("momentum"));
  REQUIRE_THROWS_WITH(attend::Adam<T>(none, T(0.1), T(1)), Contains("Adam") && Contains("beta1") && Contains("[0, 1)"));
  REQUIRE_THROWS_WITH(attend::Adam<T>(none, T(0.1), T(0.9), T(1.5)), Contains("beta2"));
  REQUIRE_THROWS_WITH(attend::AdamW<T>(none, T(0.1), T(0.9), T(0.99), T(-1)), Contains("AdamW") && Contains("eps"));
  REQUIRE_THROWS_WITH(attend::AdamW<T>(none, T(0.1), T(0.9), T(0.99), T(1e-8), T(-1)), Contains("weight_decay"));
}

TEST_CASE("a Linear layer trained with Adam on mse_loss recovers the map that made its targets", "[optim][linear]") {
  // targets = X A^T + c for a known A (3, 4) and c (3): the loss has its minimum, 0, at weight = A, bias = c.
  const attend::Tensor3<double> X = attend_test::random_tensor<double>(4, 16, 4, 141);
  attend::Generator truth_generator(142), start_generator(143);
  attend::Linear<double> truth(4, 3, true, truth_generator);
  const attend::Tensor3<double> target = truth.forward(X);
  attend::Linear<double> layer(4, 3, true, start_generator);
  attend::Adam<double> adam(layer.parameters(), 0.05);
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    const attend::Tensor3<double> prediction = layer(X);
    const attend::Loss<double> loss = attend::mse_loss(prediction, target);
    if (step == 0) first = loss.value;
    last = loss.value;
    adam.zero_grad();
    layer.backward(loss.grad);
    adam.step();
  }
  CAPTURE(first, last);
  REQUIRE(last < 1e-6 * first);
  REQUIRE_THAT(layer.weight(), Near(truth.weight(), attend_test::Tolerance<double>{0, 1e-3}));
  REQUIRE_THAT(layer.bias(), Near(truth.bias(), attend_test::Tolerance<double>{0, 1e-3}));
}
