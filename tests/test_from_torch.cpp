// multi_head_attention_from_torch: PyTorch's nn.MultiheadAttention, converted, gives PyTorch's outputs — on the
// example's files (examples/from_pytorch/, written by export.py: float32, and a float64 copy) and on the golden
// fixtures of every layout (packed or kdim/vdim, with or without biases, key padding masks); and every dict it must
// refuse, with its exact message.
#include <algorithm>
#include <attend/from_torch.hpp>
#include <attend/random.hpp>
#include <attend/safetensors.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <vector>

#ifndef ATTEND_FROM_PYTORCH_DIR
#error "ATTEND_FROM_PYTORCH_DIR must be defined as a string literal naming examples/from_pytorch (a compile definition)"
#endif

using attend::Index;
using attend::NamedTensor;
using attend::StateDict;
using attend::Tensor3;
using Catch::Matchers::Equals;

namespace {

using Shape = std::vector<Index>;

// max |a - e| / max |e| over every element: what examples/from_pytorch prints.
template <class Scalar>
double relative_difference(const Tensor3<Scalar>& actual, const Tensor3<Scalar>& expected) {
  double largest_difference = 0, largest_expected = 0;
  for (Index i = 0; i < expected.size(); ++i) {
    const double a = actual.data()[i], e = expected.data()[i];
    largest_difference = std::max(largest_difference, std::abs(a - e));
    largest_expected = std::max(largest_expected, std::abs(e));
  }
  return largest_difference / largest_expected;
}

// A key_padding_mask stored as numbers, 1 = ignore (PyTorch's polarity), as booleans.
template <class Matrix>
attend::Matrix<bool> as_bool(const Matrix& key_padding_mask) {
  return (key_padding_mask.array() != typename Matrix::Scalar(0)).matrix();
}

// A tensor of the given shape with values 0.5, 1.5, ... (where only the shape matters).
NamedTensor<float> filled(Shape shape) {
  NamedTensor<float> t{std::move(shape), {}};
  for (Index i = 0; i < t.numel(); ++i) t.values.push_back(0.5f + static_cast<float>(i));
  return t;
}

// The state dict of nn.MultiheadAttention(16, 4) (packed, with biases), shapes only.
StateDict<float> packed_dict() {
  return {{"in_proj_weight", filled({48, 16})},
          {"in_proj_bias", filled({48})},
          {"out_proj.weight", filled({16, 16})},
          {"out_proj.bias", filled({16})}};
}

// ... of nn.MultiheadAttention(16, 4, kdim=12, vdim=10, bias=False).
StateDict<float> separate_dict() {
  return {{"q_proj_weight", filled({16, 16})},
          {"k_proj_weight", filled({16, 12})},
          {"v_proj_weight", filled({16, 10})},
          {"out_proj.weight", filled({16, 16})}};
}

void refused(const StateDict<float>& dict, Index num_heads, const std::string& text, float dropout = 0.0f) {
  REQUIRE_THROWS_AS(attend::multi_head_attention_from_torch<float>(dict, num_heads, dropout), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::multi_head_attention_from_torch<float>(dict, num_heads, dropout),
                      Equals("multi_head_attention_from_torch: " + text));
}

}  // namespace

// ---- the example's files --------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("nn.MultiheadAttention(16, 4) exported by examples/from_pytorch/export.py gives PyTorch's outputs",
                   "[from_torch][golden]", float, double) {
  using T = TestType;
  // float: the float32 module and PyTorch's float32 outputs; double: its float64 copy and float64 outputs.
  const std::string data = ATTEND_FROM_PYTORCH_DIR;
  const std::string suffix = sizeof(T) == 4 ? "" : "_float64";
  const auto weights = attend::load_safetensors<T>(data + "/mha" + suffix + ".safetensors");
  auto attention = attend::multi_head_attention_from_torch<T>(weights, 4);
  attention.eval();
  CHECK(attention.num_heads() == 4);
  CHECK(attention.num_hiddens() == 16);
  CHECK(attention.W_o().has_bias());

  const auto io = attend::load_safetensors<T>(data + "/io" + suffix + ".safetensors");
  const Tensor3<T> X = attend::to_tensor3(io, "X");  // (2, 5, 16)
  const Tensor3<T> expected = attend::to_tensor3(io, "output");
  const Tensor3<T> expected_masked = attend::to_tensor3(io, "output_masked");
  const auto padding = as_bool(attend::to_matrix(io, "key_padding_mask"));  // (2, 5), true = ignore
  REQUIRE(padding.rows() == 2);
  REQUIRE(padding.cols() == 5);

  const Tensor3<T> Y = attention(X, X, X);
  const Tensor3<T> Y_masked = attention(X, X, X, attend::key_padding_mask_from_torch(padding, X.dimension(1)));
  if constexpr (sizeof(T) == 4) {
    // Both in float32: rounding differences only, within what the example promises.
    CHECK(relative_difference(Y, expected) <= 1e-5);
    CHECK(relative_difference(Y_masked, expected_masked) <= 1e-5);
  }
  REQUIRE_THAT(Y, attend_test::Near(expected, attend_test::tolerance<T>()));
  REQUIRE_THAT(Y_masked, attend_test::Near(expected_masked, attend_test::tolerance<T>()));

  // The padding is a suffix of each row (3 real keys, then 5): the same as d2l's valid lengths.
  CHECK(padding.row(0) == (attend::Matrix<bool>(1, 5) << false, false, false, true, true).finished());
  CHECK_FALSE(padding.row(1).any());
  REQUIRE_THAT(attention(X, X, X, attend::ValidLens{3, 5}), attend_test::Near(Y_masked, attend_test::tolerance<T>()));
}

// ---- every layout, against the golden fixtures ----------------------------------------------------------------------

TEMPLATE_TEST_CASE("nn.MultiheadAttention in every layout gives PyTorch's outputs (golden fixtures)",
                   "[from_torch][golden]", float, double) {
  using T = TestType;
  const std::string name = GENERATE(as<std::string>{}, "torch_mha_packed", "torch_mha_packed_nobias",
                                    "torch_mha_kdim_vdim", "torch_mha_kdim_vdim_nobias");
  CAPTURE(name);
  const attend_test::Fixture f(name);
  // The entries under PyTorch's names are the module's state_dict().
  StateDict<T> dict;
  for (const std::string torch_name : {"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                       "in_proj_bias", "out_proj.weight", "out_proj.bias"}) {
    if (!f.has(torch_name)) continue;
    if (f.shape(torch_name).size() == 1)
      dict[torch_name] = attend::named_tensor(f.vector<T>(torch_name));
    else
      dict[torch_name] = attend::named_tensor(f.matrix<T>(torch_name));
  }
  const Index num_heads = f.index("num_heads");
  auto attention = attend::multi_head_attention_from_torch<T>(dict, num_heads);
  attention.eval();
  const auto queries = f.tensor3<T>("queries"), keys = f.tensor3<T>("keys"), values = f.tensor3<T>("values");
  CHECK(attention.num_heads() == num_heads);
  CHECK(attention.W_k().in_features() == keys.dimension(2));    // kdim
  CHECK(attention.W_v().in_features() == values.dimension(2));  // vdim
  CHECK(attention.W_o().has_bias() == f.has("in_proj_bias"));

  const auto tol = attend_test::tolerance<T>();
  REQUIRE_THAT(attention(queries, keys, values), attend_test::Near(f.tensor3<double>("output"), tol));
  // Row 0 ignores keys 1, 5 and 6 — not a suffix, so no valid lengths could say it.
  const auto padding = as_bool(f.index_matrix("key_padding_mask"));
  const auto keep = attend::key_padding_mask_from_torch(padding, queries.dimension(1));
  REQUIRE_THAT(attention(queries, keys, values, keep), attend_test::Near(f.tensor3<double>("output_masked"), tol));
}

// The outputs cannot tell where W_k.bias went: a bias added to every key adds q . b_k to every score of query q,
// which the softmax cancels. So the mapping itself is checked, tensor by tensor.
TEST_CASE("PyTorch's tensors land in d2l's parameters: in_proj rows [0, E), [E, 2E), [2E, 3E) are q, k, v",
          "[from_torch]") {
  const Index E = 16;
  const StateDict<float> packed = packed_dict();  // every value different
  auto attention = attend::multi_head_attention_from_torch<float>(packed, 4);
  const attend::Matrix<float> in_proj = attend::to_matrix(packed, "in_proj_weight");  // (3E, E)
  const attend::Vector<float> in_bias = attend::to_vector(packed, "in_proj_bias");    // (3E)
  CHECK(attention.W_q().weight() == in_proj.topRows(E));
  CHECK(attention.W_k().weight() == in_proj.middleRows(E, E));
  CHECK(attention.W_v().weight() == in_proj.bottomRows(E));
  CHECK(attention.W_q().bias() == in_bias.head(E));
  CHECK(attention.W_k().bias() == in_bias.segment(E, E));
  CHECK(attention.W_v().bias() == in_bias.tail(E));
  CHECK(attention.W_o().weight() == attend::to_matrix(packed, "out_proj.weight"));
  CHECK(attention.W_o().bias() == attend::to_vector(packed, "out_proj.bias"));

  const StateDict<float> separate = separate_dict();
  auto projected = attend::multi_head_attention_from_torch<float>(separate, 4);
  CHECK(projected.W_q().weight() == attend::to_matrix(separate, "q_proj_weight"));
  CHECK(projected.W_k().weight() == attend::to_matrix(separate, "k_proj_weight"));  // (E, kdim)
  CHECK(projected.W_v().weight() == attend::to_matrix(separate, "v_proj_weight"));  // (E, vdim)
  CHECK(projected.W_o().weight() == attend::to_matrix(separate, "out_proj.weight"));
  CHECK_FALSE(projected.W_o().has_bias());
}

TEST_CASE("key_padding_mask_from_torch inverts PyTorch's polarity for every query", "[from_torch]") {
  attend::Matrix<bool> padding(2, 4);   // (batch, keys), true = ignore
  padding << false, true, false, true,  //
      true, true, false, false;
  const attend::Mask mask = attend::key_padding_mask_from_torch(padding, 3);
  REQUIRE(mask.has_elementwise());
  REQUIRE_NOTHROW(mask.require_shape(2, 3, 4, "test"));
  for (Index b = 0; b < 2; ++b)
    for (Index q = 0; q < 3; ++q)
      for (Index j = 0; j < 4; ++j) {
        CAPTURE(b, q, j);
        CHECK(mask.keeps(b, q, j, 3, 4) == !padding(b, j));
      }
  const Index negative = GENERATE(Index(-1), Index(-7));
  REQUIRE_THROWS_WITH(
      attend::key_padding_mask_from_torch(padding, negative),
      Equals("key_padding_mask_from_torch: num_queries must be at least 0, got " + std::to_string(negative)));
}

TEST_CASE("Converting leaves the default generator where it was", "[from_torch]") {
  attend::Generator before = attend::default_generator();  // a copy of its state
  const auto attention = attend::multi_head_attention_from_torch<float>(packed_dict(), 4);
  CHECK(attention.num_hiddens() == 16);
  CHECK(before.next() == attend::default_generator().next());
}

// ---- refusals -------------------------------------------------------------------------------------------------------

TEST_CASE("multi_head_attention_from_torch refuses what is not an nn.MultiheadAttention it can run", "[from_torch]") {
  SECTION("no input projection") {
    refused({}, 4,
            "missing \"in_proj_weight\" (or \"q_proj_weight\", \"k_proj_weight\" and \"v_proj_weight\"): the dict is "
            "not an nn.MultiheadAttention's state dict; its tensors are none");
    StateDict<float> dict = packed_dict();
    dict.erase("in_proj_weight");
    refused(dict, 4,
            "missing \"in_proj_weight\" (or \"q_proj_weight\", \"k_proj_weight\" and \"v_proj_weight\"): the dict is "
            "not an nn.MultiheadAttention's state dict; its tensors are \"in_proj_bias\", \"out_proj.bias\", "
            "\"out_proj.weight\"");
    // A layer of a larger model: its names carry the layer's prefix.
    StateDict<float> prefixed;
    for (const auto& [name, tensor] : packed_dict()) prefixed["encoder.attention." + name] = tensor;
    refused(prefixed, 4,
            "missing \"in_proj_weight\" (or \"q_proj_weight\", \"k_proj_weight\" and \"v_proj_weight\"): the dict is "
            "not an nn.MultiheadAttention's state dict; its tensors are \"encoder.attention.in_proj_bias\", "
            "\"encoder.attention.in_proj_weight\", \"encoder.attention.out_proj.bias\", "
            "\"encoder.attention.out_proj.weight\"");
  }
  SECTION("wrong shapes, packed") {
    StateDict<float> dict = packed_dict();
    dict["in_proj_weight"] = filled({47, 16});
    refused(dict, 4, "\"in_proj_weight\" must have shape (3 * embed_dim, embed_dim), got (47, 16)");
    dict["in_proj_weight"] = filled({768});
    refused(dict, 4, "\"in_proj_weight\" must have shape (3 * embed_dim, embed_dim), got (768)");
    dict = packed_dict();
    dict["out_proj.weight"] = filled({16, 15});
    refused(dict, 4, "\"out_proj.weight\" must have shape (16, 16) (embed_dim, embed_dim), got (16, 15)");
    dict = packed_dict();
    dict["in_proj_bias"] = filled({47});
    refused(dict, 4, "\"in_proj_bias\" must have shape (48) (3 * embed_dim), got (47)");
    dict = packed_dict();
    dict["out_proj.bias"] = filled({1, 16});
    refused(dict, 4, "\"out_proj.bias\" must have shape (16) (embed_dim), got (1, 16)");
    dict = packed_dict();
    dict["in_proj_weight"].values.pop_back();
    refused(dict, 4, "\"in_proj_weight\" has shape (48, 16) but 767 values");
  }
  SECTION("wrong shapes, kdim and vdim") {
    StateDict<float> dict = separate_dict();
    dict["q_proj_weight"] = filled({16, 12});
    refused(dict, 4, "\"q_proj_weight\" must have shape (embed_dim, embed_dim), got (16, 12)");
    dict = separate_dict();
    dict["k_proj_weight"] = filled({15, 12});
    refused(dict, 4, "\"k_proj_weight\" must have shape (16, kdim) (embed_dim, kdim), got (15, 12)");
    dict = separate_dict();
    dict.erase("v_proj_weight");
    refused(dict, 4,
            "\"q_proj_weight\" is present but \"v_proj_weight\" is missing (nn.MultiheadAttention with kdim or vdim "
            "has q_proj_weight, k_proj_weight and v_proj_weight)");
  }
  SECTION("out_proj.weight missing") {
    StateDict<float> dict = packed_dict();
    dict.erase("out_proj.weight");
    refused(dict, 4, "missing \"out_proj.weight\" of shape (16, 16)");
  }
  SECTION("num_heads that does not divide embed_dim, and other bad arguments") {
    refused(packed_dict(), 3, "embed_dim (16) must be divisible by num_heads (3)");
    refused(separate_dict(), 5, "embed_dim (16) must be divisible by num_heads (5)");
    refused(packed_dict(), 0, "num_heads must be at least 1, got 0");
    refused(packed_dict(), 4, "dropout must be in [0, 1], got 1.5", 1.5f);
  }
  SECTION("add_bias_kv=True: bias_k and bias_v") {
    StateDict<float> dict = packed_dict();
    dict["bias_k"] = filled({1, 1, 16});
    dict["bias_v"] = filled({1, 1, 16});
    refused(dict, 4,
            "\"bias_k\" is present: nn.MultiheadAttention(add_bias_kv=True) appends a learned key and value to every "
            "sequence, which attend's MultiHeadAttention does not support");
    dict.erase("bias_k");
    refused(dict, 4,
            "\"bias_v\" is present: nn.MultiheadAttention(add_bias_kv=True) appends a learned key and value to every "
            "sequence, which attend's MultiHeadAttention does not support");
  }
  SECTION("one bias without the other") {
    StateDict<float> dict = packed_dict();
    dict.erase("out_proj.bias");
    refused(dict, 4,
            "\"in_proj_bias\" is present but \"out_proj.bias\" is not: attend's MultiHeadAttention has a bias on all "
            "four projections or on none");
    dict = separate_dict();
    dict["out_proj.bias"] = filled({16});
    refused(dict, 4,
            "\"out_proj.bias\" is present but \"in_proj_bias\" is not: attend's MultiHeadAttention has a bias on all "
            "four projections or on none");
  }
  SECTION("unexpected names") {
    StateDict<float> dict = packed_dict();
    dict["q_proj_weight"] = filled({16, 16});
    refused(dict, 4,
            "unexpected tensor \"q_proj_weight\" (nn.MultiheadAttention(16, 4) has exactly \"in_proj_weight\", "
            "\"in_proj_bias\", \"out_proj.weight\", \"out_proj.bias\")");
    dict = separate_dict();
    dict["extra"] = filled({1});
    refused(dict, 4,
            "unexpected tensor \"extra\" (nn.MultiheadAttention(16, 4, kdim=12, vdim=10, bias=False) has exactly "
            "\"q_proj_weight\", \"k_proj_weight\", \"v_proj_weight\", \"out_proj.weight\")");
  }
  SECTION("the good dicts convert") {
    auto packed = attend::multi_head_attention_from_torch<float>(packed_dict(), 4);
    CHECK(packed.W_q().has_bias());
    const auto separate = attend::multi_head_attention_from_torch<float>(separate_dict(), 2, 0.25f);
    CHECK(separate.dropout() == 0.25f);
    CHECK(separate.num_heads() == 2);
  }
}
