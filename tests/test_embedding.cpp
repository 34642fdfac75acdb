// Embedding: against nn.Embedding (fixture block_embedding, made by tests/reference/make_transformer_fixtures.py:
// its weight, the looked-up rows and the autograd gradient of the weight with repeated tokens), PyTorch's N(0, 1)
// initialisation in distribution, the out-parameter form, and bad input.
#include <attend/embedding.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <support/checks.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>

using attend::Embedding;
using attend::Index;
using attend::Matrix;
using attend::Tensor3;
using attend_test::Fixture;
using attend_test::require_invalid;

TEMPLATE_TEST_CASE("Embedding looks up nn.Embedding's rows and adds their gradients per token", "[embedding][golden]",
                   float, double) {
  const Fixture fixture("block_embedding");
  const Matrix<Index> tokens = fixture.index_matrix("tokens");
  const auto weight = fixture.matrix<double>("weight");
  Embedding<TestType> embedding(weight.rows(), weight.cols());
  attend_test::load_fixture_parameters(embedding, fixture);
  const Tensor3<TestType> output = embedding(tokens);
  // The rows copied: exactly the fixture's output in TestType.
  REQUIRE_THAT(output, Near(fixture.tensor3<TestType>("output"), attend_test::exact<TestType>()));
  Tensor3<TestType> out(tokens.rows(), tokens.cols(), weight.cols());
  embedding.forward(tokens, out);
  REQUIRE(attend_test::same_bits(out, output));
  embedding.backward(fixture.tensor3<TestType>("grad_output"));
  attend_test::require_fixture_gradients(embedding, fixture, attend_test::gradient_tolerance<TestType>());
}

TEST_CASE("Embedding starts from N(0, 1), as nn.Embedding", "[embedding]") {
  attend::Generator generator(7);
  const Embedding<double> embedding(100, 100, generator);
  const auto& W = embedding.weight();
  const double mean = W.mean();
  const double deviation = std::sqrt((W.array() - mean).square().mean());
  // 10000 draws: the mean's standard error is 0.01, the deviation's about 0.007; 4 of each.
  CHECK(std::abs(mean) < 0.04);
  CHECK(std::abs(deviation - 1.0) < 0.03);
  CHECK((W.array().abs() > 3.0).count() < 60);  // P(|z| > 3) = 0.27 %: 27 expected
}

TEMPLATE_TEST_CASE("Embedding refuses a token outside its table, naming it, and keeps nothing",
                   "[embedding][bad_input]", float, double) {
  Embedding<TestType> embedding(10, 4);
  require_invalid([] { Embedding<TestType> e(0, 4); }, "Embedding: num_embeddings must be at least 1, got 0");
  Matrix<Index> tokens(2, 3);
  tokens << 1, 2, 3, 4, 10, 5;
  require_invalid([&] { embedding(tokens); },
                  "Embedding::forward: tokens(1, 1) must be in [0, 10) (num_embeddings), got 10");
  REQUIRE_THROWS_AS(embedding.backward(Tensor3<TestType>(2, 3, 4)), std::logic_error);
  tokens(1, 1) = -1;
  require_invalid([&] { embedding.forward(tokens); }, "got -1");
  tokens(1, 1) = 0;
  embedding(tokens);
  require_invalid([&] { embedding.backward(Tensor3<TestType>(2, 3, 5)); },
                  "Embedding::backward: grad_output must have shape (2, 3, 4)");
  REQUIRE(embedding.weight_grad().isZero());
}
