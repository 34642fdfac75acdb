// SGD, Adam and AdamW against torch.optim (tests/reference/make_training_fixtures.py: three steps from given
// gradients), on parameters given by hand and on a module's parameters(); their errors; and what they do when the
// modules they update move, are copied, assigned over or destroyed (optim.hpp's top comment; CI runs this under
// AddressSanitizer, which would catch any read of a module that is gone).
#include <attend/linear.hpp>
#include <attend/loss.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/optim.hpp>
#include <attend/parameter.hpp>
#include <catch2/catch.hpp>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../examples/sequence_model.hpp"

using attend::Index;
using attend::Matrix;
using attend::Parameter;
using attend::Vector;
using attend_test::Fixture;
using attend_test::Near;
using Catch::Contains;
using Catch::Matchers::Message;

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

TEMPLATE_TEST_CASE("optimizers check every parameter at construction and name the one that is wrong",
                   "[optim][bad_input]", float, double) {
  using T = TestType;
  using Params = std::vector<Parameter<T>>;
  T value[3] = {}, grad[3] = {};
  const Params no_value{{"w", nullptr, grad, 3, {}}};
  const Params no_grad{{"b", value, grad, 3, {}}, {"w", value, nullptr, 3, {}}};
  const Params negative{{"w", value, grad, -3, {}}};
  REQUIRE_THROWS_MATCHES(attend::SGD<T>(no_value, T(0.1)), std::invalid_argument,
                         Message("SGD: parameter \"w\" has a null value pointer (size 3)"));
  REQUIRE_THROWS_MATCHES(attend::SGD<T>(no_grad, T(0.1), T(0.9)), std::invalid_argument,
                         Message("SGD: parameter \"w\" has a null grad pointer (size 3)"));
  REQUIRE_THROWS_MATCHES(attend::SGD<T>(negative, T(0.1)), std::invalid_argument,
                         Message("SGD: parameter \"w\" must have size >= 0, got -3"));
  REQUIRE_THROWS_MATCHES(attend::Adam<T>(negative), std::invalid_argument,
                         Message("Adam: parameter \"w\" must have size >= 0, got -3"));
  REQUIRE_THROWS_MATCHES(attend::Adam<T>(no_value), std::invalid_argument,
                         Message("Adam: parameter \"w\" has a null value pointer (size 3)"));
  REQUIRE_THROWS_MATCHES(attend::AdamW<T>(no_grad), std::invalid_argument,
                         Message("AdamW: parameter \"w\" has a null grad pointer (size 3)"));
  // An empty parameter may have null pointers, as an empty Eigen object has: nothing is read or written.
  const Params empty{{"e", nullptr, nullptr, 0, {}}, {"w", value, grad, 3, {}}};
  grad[0] = T(1);
  attend::SGD<T> sgd(empty, T(0.5), T(0.9));
  attend::Adam<T> adam(empty);
  attend::AdamW<T> adamw(empty);
  sgd.step();
  adam.step();
  adamw.step();
  sgd.zero_grad();
  REQUIRE(value[0] < T(0));
  REQUIRE(grad[0] == T(0));
}

namespace {

// What step() and zero_grad() say when a parameter's storage is no longer its module's.
std::string refused(const std::string& where, const std::string& name, Index size) {
  return where + ": parameter \"" + name + "\" of " + std::to_string(size) +
         " elements is no longer its module's storage: resized or replaced, or its module destroyed, copied or "
         "assigned over since the optimizer was made (make a new optimizer from the module's parameters())";
}

// Every gradient of `module` set to `value`.
template <class Module, class Scalar>
void fill_gradients(Module& module, Scalar value) {
  module.visit_with_gradients([&](const std::string&, auto&, auto& gradient, const std::vector<Index>&) {
    gradient.setConstant(value);
  });
}

// A Linear whose move constructor is noexcept, so that a std::vector of them moves its elements when it grows (a
// Linear's own is not: see the test below).
template <class Scalar>
struct MovableLinear {
  MovableLinear(Index in, Index out, attend::Generator& generator) : layer(in, out, true, generator) {}
  MovableLinear(MovableLinear&& other) noexcept : layer(std::move(other.layer)) {}
  attend::Linear<Scalar> layer;
};

}  // namespace

TEMPLATE_TEST_CASE("an optimizer keeps updating a module that was moved, at its new address", "[optim][lifetime]",
                   float, double) {
  using T = TestType;
  attend::Generator generator(21);
  attend::Linear<T> layer(3, 2, true, generator);
  attend::SGD<T> sgd(layer.parameters(), T(0.5));
  attend::Adam<T> adam(layer.parameters());
  attend::Linear<T> moved(std::move(layer));
  const Matrix<T> before = moved.weight();
  fill_gradients(moved, T(2));
  sgd.step();
  REQUIRE(moved.weight() == (before.array() - T(1)).matrix());
  adam.step();
  REQUIRE(adam.steps() == 1);

  // Move assignment: the optimizer follows the storage to the target; one over the target's own storage refuses.
  attend::Linear<T> target(3, 2, true, generator);
  attend::SGD<T> over_target(target.parameters(), T(0.5));
  target = std::move(moved);
  const Matrix<T> kept = target.weight();
  sgd.step();
  REQUIRE(target.weight() == (kept.array() - T(1)).matrix());
  REQUIRE_THROWS_MATCHES(over_target.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 6)));

  // In a std::vector that moves its elements when it grows, the optimizer updates the vector's new elements.
  std::vector<MovableLinear<T>> layers;
  layers.emplace_back(3, 2, generator);
  attend::Adam<T> in_vector(layers[0].layer.parameters(), T(0.1));
  const std::size_t capacity = layers.capacity();
  while (layers.capacity() == capacity) layers.emplace_back(3, 2, generator);
  const Matrix<T> first = layers[0].layer.weight();
  fill_gradients(layers[0].layer, T(1));
  in_vector.step();
  for (Index i = 0; i < first.size(); ++i) CHECK(layers[0].layer.weight().data()[i] < first.data()[i]);
}

TEMPLATE_TEST_CASE("an optimizer over modules in a std::vector refuses once the vector grows and copies them",
                   "[optim][lifetime]", float, double) {
  using T = TestType;
  // Eigen 3.4's Tensor has no noexcept move constructor, so neither has a module that holds one: std::vector copies
  // such modules when it reallocates, and destroys the originals. optim.hpp's top comment says so; if this changes,
  // the vector moves them instead, the optimizers below keep working, and that comment and this test must follow.
  STATIC_REQUIRE_FALSE(std::is_nothrow_move_constructible_v<attend::Linear<T>>);
  STATIC_REQUIRE_FALSE(std::is_nothrow_move_constructible_v<attend::MultiHeadAttention<T>>);
  attend::Generator generator(22);
  std::vector<attend::Linear<T>> layers;
  layers.emplace_back(3, 2, true, generator);
  attend::SGD<T> sgd(layers[0].parameters(), T(0.5), T(0.9));
  attend::Adam<T> adam(layers[0].parameters());
  fill_gradients(layers[0], T(1));
  sgd.step();  // works while the vector holds the module where it was
  const std::size_t capacity = layers.capacity();
  while (layers.capacity() == capacity) layers.emplace_back(3, 2, true, generator);
  const Matrix<T> kept = layers[0].weight();
  REQUIRE_THROWS_MATCHES(sgd.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 6)));
  REQUIRE_THROWS_MATCHES(adam.step(), std::invalid_argument, Message(refused("Adam::step", "weight", 6)));
  REQUIRE_THROWS_MATCHES(adam.zero_grad(), std::invalid_argument, Message(refused("Adam::zero_grad", "weight", 6)));
  REQUIRE(layers[0].weight() == kept);
  REQUIRE(sgd.steps() == 1);
  // Parameters made after the last reallocation are the module's own again.
  attend::SGD<T> again(layers[0].parameters(), T(0.5));
  again.step();
  REQUIRE(layers[0].weight() == (kept.array() - T(0.5)).matrix());

  // A module whose parameters are those of modules it holds, the same way.
  std::vector<attend::MultiHeadAttention<T>> attentions;
  attentions.emplace_back(4, 4, 4, 4, 2, T(0), true, generator);
  attend::AdamW<T> adamw(attentions[0].parameters());
  adamw.step();
  const std::size_t heads_capacity = attentions.capacity();
  while (attentions.capacity() == heads_capacity) attentions.emplace_back(4, 4, 4, 4, 2, T(0), true, generator);
  REQUIRE_THROWS_MATCHES(adamw.step(), std::invalid_argument, Message(refused("AdamW::step", "W_q.weight", 16)));
}

TEMPLATE_TEST_CASE("an optimizer refuses a module destroyed, copied over or moved over, and ignores its copies",
                   "[optim][lifetime]", float, double) {
  using T = TestType;
  attend::Generator generator(23);
  auto owned = std::make_unique<attend::Linear<T>>(3, 2, false, generator);
  attend::SGD<T> outlives(owned->parameters(), T(0.5));
  owned.reset();
  REQUIRE_THROWS_MATCHES(outlives.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 6)));
  REQUIRE_THROWS_MATCHES(outlives.zero_grad(), std::invalid_argument, Message(refused("SGD::zero_grad", "weight", 6)));

  attend::Linear<T> layer(3, 2, true, generator), other(3, 2, true, generator);
  attend::SGD<T> sgd(layer.parameters(), T(0.5));
  // A copy has storage of its own: the optimizer still updates the original, and leaves the copy alone.
  const attend::Linear<T> copy(layer);
  fill_gradients(layer, T(2));
  sgd.step();
  REQUIRE(layer.weight() == (copy.weight().array() - T(1)).matrix());
  // Copied over (the same shapes, so the same buffers, but not the values the optimizer's state belongs to).
  layer = other;
  REQUIRE(layer.weight().data() == sgd.parameters()[0].value);
  REQUIRE_THROWS_MATCHES(sgd.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 6)));
  REQUIRE(layer.weight() == other.weight());
  // Moved over: the same.
  attend::SGD<T> second(layer.parameters(), T(0.5));
  layer = attend::Linear<T>(3, 2, true, generator);
  REQUIRE_THROWS_MATCHES(second.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 6)));
}

TEMPLATE_TEST_CASE("an optimizer over a model's concatenated parameters follows the model's moves",
                   "[optim][lifetime]", float, double) {
  // examples/sequence_model.hpp: embedding, attention and head parameters in one list.
  using T = TestType;
  using Model = attend_examples::SequenceModel<T>;
  attend::Generator generator(24);
  Model model(5, 4, 2, T(0), generator);
  attend::Adam<T> adam(model.parameters(), T(0.1));
  Model moved(std::move(model));
  const Matrix<T> embedding = moved.embedding.weight(), W_o = moved.attention.W_o().weight();
  const Matrix<T> head = moved.head.weight();
  fill_gradients(moved.embedding, T(1));
  fill_gradients(moved.attention, T(1));
  fill_gradients(moved.head, T(1));
  adam.step();
  REQUIRE(moved.embedding.weight() != embedding);
  REQUIRE(moved.attention.W_o().weight() != W_o);
  REQUIRE(moved.head.weight() != head);

  std::vector<Model> models;
  models.push_back(std::move(moved));
  attend::SGD<T> sgd(models[0].parameters(), T(0.1));
  const std::size_t capacity = models.capacity();
  while (models.capacity() == capacity) models.emplace_back(5, 4, 2, T(0), generator);
  REQUIRE_THROWS_MATCHES(sgd.step(), std::invalid_argument, Message(refused("SGD::step", "weight", 20)));
}
