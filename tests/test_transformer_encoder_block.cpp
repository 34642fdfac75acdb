// TransformerEncoderBlock: against d2l's TransformerEncoderBlock and PyTorch's nn.TransformerEncoderLayer in its four
// variants (post- and pre-norm, ReLU and GELU) with a key padding mask or a causal one (fixtures block_encoder_*,
// block_torch_layer_*, made by tests/reference/make_transformer_fixtures.py, autograd for every gradient), loaded
// through transformer_encoder_layer_from_torch; against finite differences in double; and bad input.
#include <attend/from_torch.hpp>
#include <attend/transformer_encoder_block.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/fixture_modules.hpp>
#include <support/gradients.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>
#include <support/random_tensor.hpp>
#include <vector>

using attend::Activation;
using attend::Index;
using attend::Mask;
using attend::StateDict;
using attend::Tensor3;
using attend::TransformerEncoderBlock;
using attend_test::dot;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::random_tensor;
using attend_test::require_invalid;
using attend_test::same_bits;

namespace {

// The fixture's mask: valid lengths, causal, or none.
Mask mask_of(const Fixture& fixture) {
  if (fixture.has("valid_lens")) return attend_test::valid_lens(fixture);
  if (fixture.has("causal")) return Mask::causal();
  return {};
}

// The names of nn.TransformerEncoderLayer's state dict in a fixture.
const std::vector<std::string> torch_names = {"self_attn.in_proj_weight",
                                              "self_attn.in_proj_bias",
                                              "self_attn.out_proj.weight",
                                              "self_attn.out_proj.bias",
                                              "linear1.weight",
                                              "linear1.bias",
                                              "linear2.weight",
                                              "linear2.bias",
                                              "norm1.weight",
                                              "norm1.bias",
                                              "norm2.weight",
                                              "norm2.bias"};

// The block's gradient of a PyTorch parameter, in PyTorch's layout (in_proj: W_q, W_k, W_v stacked).
template <class Scalar>
std::vector<Scalar> torch_gradient(TransformerEncoderBlock<Scalar>& block, const std::string& torch_name) {
  std::map<std::string, std::vector<Scalar>> by_name;
  for (const auto& p : block.parameters()) by_name[p.name].assign(p.grad, p.grad + p.size);
  const auto stacked = [&](const char* part) {
    std::vector<Scalar> all;
    for (const char* head : {"attention.W_q.", "attention.W_k.", "attention.W_v."}) {
      const auto& g = by_name.at(std::string(head) + part);
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  if (torch_name == "self_attn.in_proj_weight") return stacked("weight");
  if (torch_name == "self_attn.in_proj_bias") return stacked("bias");
  const std::map<std::string, std::string> renames = {{"self_attn.out_proj.weight", "attention.W_o.weight"},
                                                      {"self_attn.out_proj.bias", "attention.W_o.bias"},
                                                      {"linear1.weight", "ffn.dense1.weight"},
                                                      {"linear1.bias", "ffn.dense1.bias"},
                                                      {"linear2.weight", "ffn.dense2.weight"},
                                                      {"linear2.bias", "ffn.dense2.bias"},
                                                      {"norm1.weight", "addnorm1.ln.weight"},
                                                      {"norm1.bias", "addnorm1.ln.bias"},
                                                      {"norm2.weight", "addnorm2.ln.weight"},
                                                      {"norm2.bias", "addnorm2.ln.bias"}};
  return by_name.at(renames.at(torch_name));
}

}  // namespace

TEMPLATE_TEST_CASE("TransformerEncoderBlock matches d2l's block, output and gradients", "[encoder_block][golden]",
                   float, double) {
  const auto name = GENERATE(as<std::string>{}, "block_encoder_lens", "block_encoder_bias");
  CAPTURE(name);
  const Fixture fixture(name);
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");
  const auto W1 = fixture.matrix<double>("ffn.dense1.weight");
  TransformerEncoderBlock<TestType> block(X.dimension(2), W1.rows(), fixture.index("num_heads"), TestType(0.5),
                                          fixture.index("use_bias") != 0);
  attend_test::load_fixture_parameters(block, fixture);
  block.eval();
  const Mask mask = mask_of(fixture);
  const Tensor3<TestType> output = block(X, mask);
  REQUIRE_THAT(output, Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  REQUIRE(same_bits(block.forward(X, mask), output));
  REQUIRE_THAT(block.backward(fixture.tensor3<TestType>("grad_output")),
               Near(fixture.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  attend_test::require_fixture_gradients(block, fixture, gradient_tolerance<TestType>());
}

TEMPLATE_TEST_CASE("transformer_encoder_layer_from_torch computes nn.TransformerEncoderLayer, output and gradients",
                   "[encoder_block][golden][from_torch]", float, double) {
  const auto name = GENERATE(
      as<std::string>{}, "block_torch_layer_post_relu_lens", "block_torch_layer_post_relu_causal",
      "block_torch_layer_post_gelu_lens", "block_torch_layer_post_gelu_causal", "block_torch_layer_pre_relu_lens",
      "block_torch_layer_pre_relu_causal", "block_torch_layer_pre_gelu_lens", "block_torch_layer_pre_gelu_causal");
  CAPTURE(name);
  const Fixture fixture(name);
  const StateDict<TestType> dict = attend_test::fixture_state_dict<TestType>(fixture, torch_names, torch_names);
  const Activation activation = fixture.index("activation") == 0 ? Activation::relu : Activation::gelu;
  TransformerEncoderBlock<TestType> block = attend::transformer_encoder_layer_from_torch(
      dict, fixture.index("num_heads"), activation, fixture.index("norm_first") != 0);
  block.eval();
  const Tensor3<TestType> X = fixture.tensor3<TestType>("X");
  const Mask mask = mask_of(fixture);
  const Tensor3<TestType> output = block(X, mask);
  REQUIRE_THAT(output, Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  REQUIRE(same_bits(block.forward(X, mask), output));
  REQUIRE_THAT(block.backward(fixture.tensor3<TestType>("grad_output")),
               Near(fixture.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  for (const std::string& torch_name : torch_names) {
    CAPTURE(torch_name);
    const std::vector<TestType> g = torch_gradient(block, torch_name);
    const auto expected = attend_test::fixture_tensor<double>(fixture, torch_name + "_grad");
    REQUIRE(g.size() == expected.values.size());
    const attend::Vector<TestType> actual = Eigen::Map<const attend::Vector<TestType>>(g.data(), Index(g.size()));
    REQUIRE_THAT(actual, Near(attend::Vector<double>(Eigen::Map<const attend::Vector<double>>(
                                  expected.values.data(), Index(expected.values.size()))),
                              gradient_tolerance<TestType>()));
  }
}

TEST_CASE("TransformerEncoderBlock's gradients agree with finite differences in double", "[encoder_block][gradients]") {
  const bool norm_first = GENERATE(false, true);
  CAPTURE(norm_first);
  attend::Generator generator(81);
  TransformerEncoderBlock<double> block(8, 12, 2, 0.0, true, Activation::gelu, norm_first, 1e-5, generator);
  const Tensor3<double> X = random_tensor<double>(2, 4, 8, 82);
  const Tensor3<double> G = random_tensor<double>(2, 4, 8, 83);
  const Mask mask({3, 4});
  block(X, mask);
  const Tensor3<double> dX = block.backward(G);
  Tensor3<double> X_moved = X;
  const auto loss = [&] { return dot(G, block.forward(X_moved, mask)); };
  REQUIRE_THAT(dX, Near(attend_test::finite_difference(X_moved, loss), attend_test::finite_difference_tolerance()));
  attend_test::require_finite_difference_gradients(block, loss);
}

TEMPLATE_TEST_CASE("TransformerEncoderBlock refuses bad input, naming it", "[encoder_block][bad_input]", float,
                   double) {
  require_invalid([] { TransformerEncoderBlock<TestType> block(10, 16, 4, TestType(0)); },
                  "TransformerEncoderBlock: num_hiddens (10) must be divisible by num_heads (4)");
  require_invalid([] { TransformerEncoderBlock<TestType> block(8, 16, 2, TestType(2)); }, "TransformerEncoderBlock");
  TransformerEncoderBlock<TestType> block(8, 16, 2, TestType(0));
  require_invalid([&] { block(Tensor3<TestType>(2, 3, 6)); },
                  "TransformerEncoderBlock: X must have 8 features (num_hiddens)");
  require_invalid([&] { block(Tensor3<TestType>(2, 3, 8), Mask({1, 2, 3})); }, "TransformerEncoderBlock");
  REQUIRE_THROWS_AS(block.backward(Tensor3<TestType>(2, 3, 8)), std::logic_error);

  const Fixture fixture("block_torch_layer_post_relu_lens");
  StateDict<TestType> dict = attend_test::fixture_state_dict<TestType>(fixture, torch_names, torch_names);
  StateDict<TestType> extra = dict;
  extra["norm3.weight"] = dict.at("norm1.weight");
  require_invalid([&] { attend::transformer_encoder_layer_from_torch(extra, 2); },
                  "unexpected tensor \"norm3.weight\"");
  StateDict<TestType> no_bias = dict;
  no_bias.erase("linear1.bias");
  require_invalid([&] { attend::transformer_encoder_layer_from_torch(no_bias, 2); },
                  "missing \"linear1.bias\" (a layer built with bias=False");
  require_invalid([&] { attend::transformer_encoder_layer_from_torch(dict, 3); }, "divisible by num_heads (3)");
  require_invalid([&] { attend::transformer_encoder_layer_from_torch(dict, 2, Activation::silu); },
                  "activation must be relu or gelu");
}
