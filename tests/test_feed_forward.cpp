// The activations, PositionWiseFFN and GatedFFN: against PyTorch (fixtures block_activation_*, block_ffn_*,
// block_gated_ffn_*, made by tests/reference/make_transformer_fixtures.py: F.relu, F.gelu in both forms, F.silu,
// d2l's PositionWiseFFN and transformers' LlamaMLP, autograd for every gradient), against finite differences in
// double, and bad input.
#include <attend/activation.hpp>
#include <attend/gated_ffn.hpp>
#include <attend/position_wise_ffn.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>
#include <support/random_tensor.hpp>

using attend::Activation;
using attend::GatedFFN;
using attend::Index;
using attend::PositionWiseFFN;
using attend::Tensor3;
using attend_test::dot;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::random_tensor;
using attend_test::require_invalid;
using attend_test::same_bits;

namespace {

constexpr Activation activations[] = {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu};

}  // namespace

TEMPLATE_TEST_CASE("Each activation and its derivative match PyTorch's", "[activation][golden]", float, double) {
  const auto index = GENERATE(0, 1, 2, 3);
  const Activation activation = activations[index];
  const std::string name = std::string("block_activation_") + attend::detail::activation_name(activation);
  CAPTURE(name);
  const Fixture fixture(name);
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");
  REQUIRE_THAT(attend::activate(X, activation),
               Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  REQUIRE_THAT(attend::activate_backward(X, fixture.tensor3<TestType>("grad_output"), activation),
               Near(fixture.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
}

TEST_CASE("Each activation's derivative agrees with finite differences in double", "[activation][gradients]") {
  // Away from 0, where ReLU has its kink.
  Tensor3<double> X = random_tensor<double>(1, 4, 9, 51, 0.05, 4.0);
  for (Index i = 0; i < X.size(); i += 2) X.data()[i] = -X.data()[i];
  const Tensor3<double> G = random_tensor<double>(1, 4, 9, 52);
  for (const Activation activation : activations) {
    CAPTURE(attend::detail::activation_name(activation));
    const Tensor3<double> dX = attend::activate_backward(X, G, activation);
    Tensor3<double> X_moved = X;
    REQUIRE_THAT(
        dX, Near(attend_test::finite_difference(X_moved, [&] { return dot(G, attend::activate(X_moved, activation)); }),
                 attend_test::finite_difference_tolerance()));
  }
}

TEMPLATE_TEST_CASE("PositionWiseFFN matches d2l's and GatedFFN transformers' LlamaMLP, output and gradients",
                   "[ffn][golden]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "block_ffn_relu", "block_ffn_gelu", "block_gated_ffn_silu",
                             "block_gated_ffn_gelu_tanh");
  CAPTURE(name);
  const Fixture fixture(name);
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");
  const Activation activation = activations[fixture.index("activation")];
  const auto check = [&](auto& ffn) {
    attend_test::load_fixture_parameters(ffn, fixture);
    const Tensor3<TestType> output = ffn(X);
    REQUIRE_THAT(output, Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
    REQUIRE(same_bits(ffn.forward(X), output));
    REQUIRE_THAT(ffn.backward(fixture.tensor3<TestType>("grad_output")),
                 Near(fixture.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
    attend_test::require_fixture_gradients(ffn, fixture, gradient_tolerance<TestType>());
  };
  if (name.find("gated") != std::string::npos) {
    const Index hidden = fixture.matrix<double>("gate_proj.weight").rows();
    GatedFFN<TestType> ffn(X.dimension(2), hidden, activation, fixture.index("bias") != 0);
    check(ffn);
  } else {
    const auto W1 = fixture.matrix<double>("dense1.weight"), W2 = fixture.matrix<double>("dense2.weight");
    PositionWiseFFN<TestType> ffn(W1.cols(), W1.rows(), W2.rows(), activation);
    check(ffn);
  }
}

TEST_CASE("The feed-forward networks' gradients agree with finite differences in double", "[ffn][gradients]") {
  const Tensor3<double> X = random_tensor<double>(2, 3, 5, 61);
  const Tensor3<double> G = random_tensor<double>(2, 3, 4, 62);
  const auto check = [&](auto& ffn, const Tensor3<double>& grad_output) {
    ffn(X);
    const Tensor3<double> dX = ffn.backward(grad_output);
    Tensor3<double> X_moved = X;
    const auto loss = [&] { return dot(grad_output, ffn.forward(X_moved)); };
    REQUIRE_THAT(dX, Near(attend_test::finite_difference(X_moved, loss), attend_test::finite_difference_tolerance()));
    attend_test::require_finite_difference_gradients(ffn, loss);
  };
  SECTION("PositionWiseFFN, GELU") {
    PositionWiseFFN<double> ffn(5, 7, 4, Activation::gelu);
    check(ffn, G);
  }
  SECTION("GatedFFN, SiLU, with biases") {
    GatedFFN<double> ffn(5, 6, Activation::silu, true);
    check(ffn, random_tensor<double>(2, 3, 5, 63));
  }
  SECTION("GatedFFN, tanh GELU") {
    GatedFFN<double> ffn(5, 6, Activation::gelu_tanh);
    check(ffn, random_tensor<double>(2, 3, 5, 64));
  }
}

TEMPLATE_TEST_CASE("The feed-forward networks refuse bad input, naming it", "[ffn][bad_input]", float, double) {
  require_invalid([] { attend::activate(Tensor3<TestType>(1, 1, 1), static_cast<Activation>(7)); },
                  "activate: activation must be relu, gelu, gelu_tanh or silu, got Activation(7)");
  require_invalid(
      [] { attend::activate_backward(Tensor3<TestType>(1, 1, 2), Tensor3<TestType>(1, 1, 3), Activation::relu); },
      "activate_backward: grad_output must have shape (1, 1, 2)");
  attend::Generator generator(5);
  const attend::Generator before = generator;
  require_invalid([&] { PositionWiseFFN<TestType> ffn(4, 8, 0, Activation::relu, generator); },
                  "PositionWiseFFN: ffn_num_outputs must be at least 1, got 0");
  require_invalid([&] { GatedFFN<TestType> ffn(4, 8, static_cast<Activation>(-1), false, generator); },
                  "GatedFFN: activation must be");
  attend::Generator untouched = before;
  REQUIRE(generator.next() == untouched.next());  // nothing was drawn
  PositionWiseFFN<TestType> ffn(4, 8, 4);
  require_invalid([&] { ffn(Tensor3<TestType>(2, 3, 5)); }, "PositionWiseFFN: X must have 4 features (ffn_num_input)");
  REQUIRE_THROWS_AS(ffn.backward(Tensor3<TestType>(2, 3, 4)), std::logic_error);
  ffn(random_tensor<TestType>(2, 3, 4, 71));
  require_invalid([&] { ffn.backward(Tensor3<TestType>(2, 3, 5)); },
                  "PositionWiseFFN::backward: grad_output must have shape (2, 3, 4)");
  GatedFFN<TestType> gated(4, 8);
  require_invalid([&] { gated.forward(Tensor3<TestType>(2, 3, 3)); }, "GatedFFN::forward: X must have 4 features");
}
