// LayerNorm, RMSNorm and AddNorm: against PyTorch (fixtures block_layer_norm*, block_rms_norm, block_add_norm, made
// by tests/reference/make_transformer_fixtures.py: nn.LayerNorm, nn.RMSNorm and d2l's AddNorm, autograd for every
// gradient), against finite differences in double, AddNorm's dropout against its own backward pass, the
// out-parameter and in-place forms, and bad input.
#include <attend/add_norm.hpp>
#include <attend/layer_norm.hpp>
#include <attend/rms_norm.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>
#include <support/random_tensor.hpp>
#include <type_traits>

using attend::AddNorm;
using attend::AddNormGradients;
using attend::Index;
using attend::LayerNorm;
using attend::RMSNorm;
using attend::Tensor3;
using attend::TensorMap3;
using attend_test::dot;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::random_tensor;
using attend_test::require_invalid;
using attend_test::same_bits;

namespace {

// Random weight and bias (uniform in [-1, 1)), so that a wrong use of either shows.
template <class Norm>
void randomize(Norm& norm, std::uint64_t seed) {
  attend::Generator generator(seed);
  for (const auto& p : norm.parameters())
    for (Index i = 0; i < p.size; ++i) p.value[i] = generator.uniform<attend_test::parameter_scalar<Norm>>(-1, 1);
}

}  // namespace

TEMPLATE_TEST_CASE("LayerNorm and RMSNorm match nn.LayerNorm and nn.RMSNorm, output and gradients", "[norms][golden]",
                   float, double) {
  const auto name = GENERATE(as<std::string>{}, "block_layer_norm", "block_layer_norm_offset", "block_rms_norm");
  CAPTURE(name);
  const Fixture fixture(name);
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");
  const auto eps = static_cast<TestType>(fixture.scalar("eps"));
  // The offset case's rows are 100 + 0.01 u: in float, X itself is rounded by up to 3.8e-6 (half an ulp at 100), 7e-4
  // of a row's deviation (0.0058), and every normalised value carries that. 3e-3 still tells the two-pass variance
  // from E[x^2] - mean^2, which loses all digits there (1e4 - 1e4 for a variance of 3e-5). The input gradient,
  // rstd (about 170) times differences of such values, gets 1e-2.
  const bool rounded_input = std::is_same_v<TestType, float> && name == "block_layer_norm_offset";
  const attend_test::Tolerance<TestType> output_tolerance =
      rounded_input ? attend_test::Tolerance<TestType>{3e-3, 3e-3} : attend_test::tolerance<TestType>();
  const attend_test::Tolerance<TestType> grad_tolerance =
      rounded_input ? attend_test::Tolerance<TestType>{1e-2, 1e-2} : gradient_tolerance<TestType>();
  const auto check = [&](auto& norm) {
    attend_test::load_fixture_parameters(norm, fixture);
    REQUIRE_THAT(norm(X), Near(fixture.tensor3<double>("output"), output_tolerance));
    const Tensor3<TestType> dX = norm.backward(fixture.tensor3<TestType>("grad_output"));
    REQUIRE_THAT(dX, Near(fixture.tensor3<double>("grad_X"), grad_tolerance));
    attend_test::require_fixture_gradients(norm, fixture, grad_tolerance);
  };
  if (name == "block_rms_norm") {
    RMSNorm<TestType> norm(X.dimension(2), eps);
    check(norm);
  } else {
    LayerNorm<TestType> norm(X.dimension(2), eps);
    check(norm);
  }
}

TEMPLATE_TEST_CASE("AddNorm matches d2l's AddNorm, output and both inputs' gradients", "[norms][golden]", float,
                   double) {
  const Fixture fixture("block_add_norm");
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X"), Y = fixture.tensor3<TestType>("Y");
  AddNorm<TestType> add_norm(X.dimension(2), TestType(0.5));
  attend_test::load_fixture_parameters(add_norm, fixture);
  add_norm.eval();
  REQUIRE_THAT(add_norm(X, Y), Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  REQUIRE(same_bits(add_norm.forward(X, Y), add_norm(X, Y)));
  const AddNormGradients<TestType> g = add_norm.backward(fixture.tensor3<TestType>("grad_output"));
  REQUIRE_THAT(g.X, Near(fixture.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(g.Y, Near(fixture.tensor3<double>("grad_Y"), gradient_tolerance<TestType>()));
  attend_test::require_fixture_gradients(add_norm, fixture, gradient_tolerance<TestType>());
}

// Rows enough that normalize_rows and its backward share them among threads (pieces of about 16384 elements, and
// work over tuning::worth_a_team): LayerNorm's formula computed here in double for the output, and every result, the
// parameters' gradients included, the same bits on one thread and on two.
TEMPLATE_TEST_CASE("The norms give the same bits on 1 and 2 threads, on rows enough to share", "[norms][threads]",
                   float, double) {
  const Index batch = 4, steps = 512, features = 512;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, features, 31, -2.0, 3.0);
  const Tensor3<TestType> dY = random_tensor<TestType>(batch, steps, features, 32);
  struct Run {
    Tensor3<TestType> Y, dX;
    attend::Matrix<TestType> weight_grad, bias_grad;
  };
  const auto run = [&](auto norm, int threads) {
    randomize(norm, 33);
    attend::set_num_threads(threads);
    Run r{norm(X), {}, {}, {}};
    r.dX = norm.backward(dY);
    const auto grads = norm.parameters();
    r.weight_grad = Eigen::Map<const attend::Matrix<TestType>>(grads[0].grad, 1, features);
    if (grads.size() > 1) r.bias_grad = Eigen::Map<const attend::Matrix<TestType>>(grads[1].grad, 1, features);
    return r;
  };
  const int threads = attend::num_threads();
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    const Run one = kind == 0 ? run(LayerNorm<TestType>(features), 1) : run(RMSNorm<TestType>(features), 1);
    const Run two = kind == 0 ? run(LayerNorm<TestType>(features), 2) : run(RMSNorm<TestType>(features), 2);
    attend::set_num_threads(threads);
    REQUIRE(same_bits(one.Y, two.Y));
    REQUIRE(same_bits(one.dX, two.dX));
    REQUIRE(same_bits(one.weight_grad, two.weight_grad));
    REQUIRE(same_bits(one.bias_grad, two.bias_grad));
    if (kind == 1) continue;
    LayerNorm<TestType> norm(features);
    randomize(norm, 33);
    const auto p = norm.parameters();
    Tensor3<double> expected(batch, steps, features);  // (x - mean) / sqrt(var + eps) w + b, var biased, in double
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < steps; ++t) {
        double mean = 0, var = 0;
        for (Index j = 0; j < features; ++j) mean += X(b, t, j);
        mean /= features;
        for (Index j = 0; j < features; ++j) var += (X(b, t, j) - mean) * (X(b, t, j) - mean);
        const double rstd = 1 / std::sqrt(var / features + 1e-5);
        for (Index j = 0; j < features; ++j)
          expected(b, t, j) = (X(b, t, j) - mean) * rstd * p[0].value[j] + p[1].value[j];
      }
    REQUIRE_THAT(one.Y, Near(expected, attend_test::tolerance<TestType>()));
  }
}

TEST_CASE("The norms' gradients agree with finite differences in double", "[norms][gradients]") {
  const Tensor3<double> X = random_tensor<double>(2, 3, 7, 11, -2.0, 3.0);
  const Tensor3<double> Y = random_tensor<double>(2, 3, 7, 12);
  const Tensor3<double> G = random_tensor<double>(2, 3, 7, 13);
  const auto check = [&](auto& norm, std::uint64_t seed) {
    randomize(norm, seed);
    norm(X);
    const Tensor3<double> dX = norm.backward(G);
    Tensor3<double> X_moved = X;
    const auto loss = [&] { return dot(G, norm.forward(X_moved)); };
    REQUIRE_THAT(dX, Near(attend_test::finite_difference(X_moved, loss), attend_test::finite_difference_tolerance()));
    attend_test::require_finite_difference_gradients(norm, loss);
  };
  SECTION("LayerNorm") {
    LayerNorm<double> norm(7);
    check(norm, 14);
  }
  SECTION("RMSNorm") {
    RMSNorm<double> norm(7);
    check(norm, 15);
  }
  SECTION("AddNorm") {
    AddNorm<double> add_norm(7, 0.0);
    randomize(add_norm, 16);
    add_norm(X, Y);
    const AddNormGradients<double> g = add_norm.backward(G);
    Tensor3<double> X_moved = X, Y_moved = Y;
    const auto loss = [&] { return dot(G, add_norm.forward(X_moved, Y_moved)); };
    REQUIRE_THAT(g.X, Near(attend_test::finite_difference(X_moved, loss), attend_test::finite_difference_tolerance()));
    REQUIRE_THAT(g.Y, Near(attend_test::finite_difference(Y_moved, loss), attend_test::finite_difference_tolerance()));
    attend_test::require_finite_difference_gradients(add_norm, loss);
  }
}

TEMPLATE_TEST_CASE("AddNorm's dropout: the output is ln(X + Y f) for the factors its backward pass applies",
                   "[norms][dropout]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(3, 8, 16, 21), Y = random_tensor<TestType>(3, 8, 16, 22);
  AddNorm<TestType> add_norm(16, TestType(0.5));
  const Tensor3<TestType> out = add_norm(X, Y);
  const AddNormGradients<TestType> g = add_norm.backward(random_tensor<TestType>(3, 8, 16, 23));
  // dY = dX f with f in {0, 2} (1 / (1 - p)): recover f and rebuild the output from it.
  Tensor3<TestType> Y_dropped = Y;
  Index dropped = 0;
  for (Index i = 0; i < Y.size(); ++i) {
    const TestType f = g.Y.data()[i] == TestType(0) ? TestType(0) : TestType(2);
    REQUIRE(g.Y.data()[i] == g.X.data()[i] * f);
    Y_dropped.data()[i] *= f;
    dropped += f == TestType(0) ? 1 : 0;
  }
  CHECK(dropped > Y.size() / 4);  // 384 entries at p = 0.5: far more than a quarter dropped, far fewer than all
  CHECK(dropped < 3 * Y.size() / 4);
  REQUIRE_THAT(out, Near(add_norm.ln().forward(Tensor3<TestType>(X + Y_dropped)), attend_test::exact<TestType>()));
}

TEMPLATE_TEST_CASE("forward() const keeps nothing and writes into the caller's memory, in place too", "[norms]", float,
                   double) {
  LayerNorm<TestType> norm(5);
  randomize(norm, 31);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 4, 5, 32);
  const Tensor3<TestType> Y = norm.forward(X);
  REQUIRE_THROWS_AS(norm.backward(Y), std::logic_error);
  REQUIRE(same_bits(norm(X), Y));
  Tensor3<TestType> in_place = X;
  norm.forward(in_place, TensorMap3<TestType>(in_place.data(), 2, 4, 5));
  REQUIRE(same_bits(in_place, Y));
}

TEMPLATE_TEST_CASE("The norms refuse bad input, naming it, and change nothing", "[norms][bad_input]", float, double) {
  require_invalid([] { LayerNorm<TestType> norm(0); }, "LayerNorm: normalized_shape must be at least 1, got 0");
  require_invalid([] { RMSNorm<TestType> norm(4, TestType(-1)); }, "RMSNorm: eps must be finite and at least 0");
  require_invalid([] { AddNorm<TestType> norm(4, TestType(1.5)); }, "AddNorm");
  LayerNorm<TestType> norm(4);
  require_invalid([&] { norm(Tensor3<TestType>(2, 3, 5)); }, "LayerNorm: X must have 4 features (normalized_shape)");
  REQUIRE_THROWS_AS(norm.backward(Tensor3<TestType>(2, 3, 4)), std::logic_error);
  norm(random_tensor<TestType>(2, 3, 4, 41));
  require_invalid([&] { norm.backward(Tensor3<TestType>(2, 3, 5)); },
                  "LayerNorm::backward: grad_output must have shape (2, 3, 4)");
  REQUIRE(norm.weight_grad().isZero());
  norm.weight().resize(3);
  require_invalid([&] { norm.forward(Tensor3<TestType>(2, 3, 4)); }, "\"weight\" must have shape (4)");
  AddNorm<TestType> add_norm(4, TestType(0));
  require_invalid([&] { add_norm(Tensor3<TestType>(2, 3, 4), Tensor3<TestType>(2, 2, 4)); },
                  "AddNorm: Y must have shape (2, 3, 4)");
}
