// state_dict() and load_state_dict() of every module: d2l's and PyTorch's names and shapes, d2l's parameters from
// the golden fixtures loaded by name, round trips (in memory and through a safetensors file), and every way a dict
// can be refused, with its exact message and the module left as it was.
#include <attend/additive_attention.hpp>
#include <attend/conv1d.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/linear.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/safetensors.hpp>
#include <attend/state_dict.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/fixture_modules.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>
#include <support/named_tensors.hpp>
#include <support/random_tensor.hpp>
#include <support/temp_files.hpp>
#include <vector>

using attend::Generator;
using attend::Index;
using attend::NamedTensor;
using attend::StateDict;
using attend::Tensor3;
using Catch::Matchers::Equals;

using attend_test::counting_tensor;
using attend_test::fixture_state_dict;
using attend_test::random_tensor;
using attend_test::same;

namespace {

using Shape = std::vector<Index>;
using Shapes = std::map<std::string, Shape>;

template <class Scalar>
Shapes shapes(const StateDict<Scalar>& dict) {
  Shapes out;
  for (const auto& [name, tensor] : dict) out[name] = tensor.shape;
  return out;
}

// The names visit_parameters() gives, in its order.
template <class Module>
std::vector<std::string> visit_order(const Module& module) {
  std::vector<std::string> names;
  module.visit_parameters([&](const std::string& name, const auto&, const Shape&) { names.push_back(name); });
  return names;
}

// Round trips: a module made from another seed gives other outputs, then, after load_state_dict of the trained
// one's state_dict() (in memory, and through save_safetensors / load_safetensors), exactly the trained one's.
//   make(seed) -> a module;  run(module) -> its output on fixed input
template <class Scalar, class Make, class Run>
void require_round_trip(Make make, Run run, const std::string& stem) {
  auto trained = make(1);
  const Tensor3<Scalar> expected = run(trained);

  auto fresh = make(2);
  REQUIRE_FALSE(same(run(fresh), expected));
  fresh.load_state_dict(trained.state_dict());
  CHECK(same(run(fresh), expected));
  CHECK(same(fresh.state_dict(), trained.state_dict()));

  const std::string path = attend_test::safetensors_path<Scalar>(stem);
  attend::save_safetensors(path, trained.state_dict());
  auto loaded = make(3);
  REQUIRE_FALSE(same(run(loaded), expected));
  loaded.load_state_dict(attend::load_safetensors<Scalar>(path));
  CHECK(same(run(loaded), expected));
}

// load_state_dict(dict) throws std::invalid_argument with exactly `text`, and the module gives the same output and
// the same state_dict() as before.
template <class Scalar, class Module, class Run>
void require_refused(Module& module, Run run, const StateDict<Scalar>& dict, const std::string& text) {
  const Tensor3<Scalar> before = run(module);
  const StateDict<Scalar> parameters = module.state_dict();
  REQUIRE_THROWS_AS(module.load_state_dict(dict), std::invalid_argument);
  REQUIRE_THROWS_WITH(module.load_state_dict(dict), Equals(text));
  CHECK(same(run(module), before));
  CHECK(same(module.state_dict(), parameters));
}

// The modules of these tests, their sizes and inputs.
template <class Scalar>
attend::MultiHeadAttention<Scalar> make_mha(std::uint64_t seed, bool bias) {
  Generator generator(seed);
  attend::MultiHeadAttention<Scalar> attention(6, 5, 4, 12, 3, Scalar(0.5), bias, generator);  // k, q, v, h
  attention.eval();
  return attention;
}

template <class Scalar>
Tensor3<Scalar> run_mha(attend::MultiHeadAttention<Scalar>& attention) {
  return attention(random_tensor<Scalar>(2, 3, 5, 11), random_tensor<Scalar>(2, 7, 6, 12),
                   random_tensor<Scalar>(2, 7, 4, 13), attend::ValidLens{5, 7});
}

template <class Scalar>
attend::AdditiveAttention<Scalar> make_additive(std::uint64_t seed) {
  Generator generator(seed);
  attend::AdditiveAttention<Scalar> attention(3, 5, 8, Scalar(0.1), generator);  // key_size, query_size, hiddens
  attention.eval();
  return attention;
}

template <class Scalar>
Tensor3<Scalar> run_additive(attend::AdditiveAttention<Scalar>& attention) {
  return attention(random_tensor<Scalar>(2, 4, 5, 21), random_tensor<Scalar>(2, 6, 3, 22),
                   random_tensor<Scalar>(2, 6, 7, 23), attend::ValidLens{2, 6});
}

}  // namespace

// ---- names and shapes ---------------------------------------------------------------------------------------------

// The expected names are those d2l's classes and PyTorch's nn.Linear, nn.RNN and nn.Conv1d give: printing
// state_dict() of tests/reference/make_fixtures.py's AdditiveAttention(3, 5, 8, 0.1) lists W_k.weight, W_q.weight,
// w_v.weight; of its MultiHeadAttention(..., bias=True) W_q.weight, W_q.bias, W_k.weight, ..., W_o.bias; of its
// DotProductAttention and PositionalEncoding nothing (P is a plain attribute); nn.RNN(3, 5) weight_ih_l0 (5, 3),
// weight_hh_l0 (5, 5), bias_ih_l0 (5), bias_hh_l0 (5); nn.Conv1d(3, 4, 5) weight (4, 3, 5), bias (4).
TEMPLATE_TEST_CASE("state_dict() has d2l's and PyTorch's names and shapes", "[state_dict]", float, double) {
  using T = TestType;

  SECTION("Linear") {
    attend::Linear<T> layer(4, 3);
    const auto dict = layer.state_dict();
    CHECK(shapes(dict) == Shapes{{"weight", {3, 4}}, {"bias", {3}}});
    CHECK(visit_order(layer) == std::vector<std::string>{"weight", "bias"});
    CHECK(attend::to_matrix(dict, "weight") == layer.weight());
    CHECK(attend::to_vector(dict, "bias") == layer.bias());
    CHECK(shapes(attend::Linear<T>(4, 3, false).state_dict()) == Shapes{{"weight", {3, 4}}});
  }
  SECTION("AdditiveAttention") {
    auto attention = make_additive<T>(1);
    const auto dict = attention.state_dict();
    CHECK(shapes(dict) == Shapes{{"W_k.weight", {8, 3}}, {"W_q.weight", {8, 5}}, {"w_v.weight", {1, 8}}});
    CHECK(visit_order(attention) == std::vector<std::string>{"W_k.weight", "W_q.weight", "w_v.weight"});
    CHECK(attend::to_matrix(dict, "W_q.weight") == attention.W_q().weight());
    CHECK(attend::to_matrix(dict, "w_v.weight") == attention.w_v().weight());
  }
  SECTION("MultiHeadAttention") {
    auto attention = make_mha<T>(1, true);
    const auto dict = attention.state_dict();
    CHECK(shapes(dict) == Shapes{{"W_q.weight", {12, 5}},
                                 {"W_q.bias", {12}},
                                 {"W_k.weight", {12, 6}},
                                 {"W_k.bias", {12}},
                                 {"W_v.weight", {12, 4}},
                                 {"W_v.bias", {12}},
                                 {"W_o.weight", {12, 12}},
                                 {"W_o.bias", {12}}});
    CHECK(visit_order(attention) == std::vector<std::string>{"W_q.weight", "W_q.bias", "W_k.weight", "W_k.bias",
                                                             "W_v.weight", "W_v.bias", "W_o.weight", "W_o.bias"});
    CHECK(attend::to_matrix(dict, "W_k.weight") == attention.W_k().weight());
    CHECK(attend::to_vector(dict, "W_v.bias") == attention.W_v().bias());
    CHECK(attend::to_matrix(dict, "W_o.weight") == attention.W_o().weight());
    CHECK(shapes(make_mha<T>(1, false).state_dict()) ==
          Shapes{{"W_q.weight", {12, 5}}, {"W_k.weight", {12, 6}}, {"W_v.weight", {12, 4}}, {"W_o.weight", {12, 12}}});
  }
  SECTION("RNN") {
    attend::RNN<T> rnn(3, 5);
    const auto dict = rnn.state_dict();
    CHECK(shapes(dict) ==
          Shapes{{"weight_ih_l0", {5, 3}}, {"weight_hh_l0", {5, 5}}, {"bias_ih_l0", {5}}, {"bias_hh_l0", {5}}});
    CHECK(visit_order(rnn) == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"});
    CHECK(attend::to_matrix(dict, "weight_hh_l0") == rnn.weight_hh());
    CHECK(attend::to_vector(dict, "bias_ih_l0") == rnn.bias_ih());
  }
  SECTION("Conv1d") {
    attend::Conv1d<T> conv(3, 4, 5);
    const auto dict = conv.state_dict();
    CHECK(shapes(dict) == Shapes{{"weight", {4, 3, 5}}, {"bias", {4}}});
    CHECK(same(attend::to_tensor3(dict, "weight"), conv.weight()));  // (out, in, kernel), PyTorch's layout
    CHECK(shapes(attend::Conv1d<T>(3, 4, 5, false).state_dict()) == Shapes{{"weight", {4, 3, 5}}});
  }
  SECTION("DotProductAttention and PositionalEncoding have none") {
    CHECK(attend::DotProductAttention<T>(T(0.5)).state_dict().empty());
    CHECK(attend::PositionalEncoding<T>(8, T(0.5)).state_dict().empty());
  }
}

// ---- d2l's parameters, by name --------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("load_state_dict takes d2l's and PyTorch's parameters by name (golden fixtures)",
                   "[state_dict][golden]", float, double) {
  using T = TestType;
  const auto tol = attend_test::tolerance<T>();

  SECTION("MultiHeadAttention, bias on and off") {
    for (const std::string name : {"mha_h2_bias_1d", "mha_h3_nobias_1d"}) {
      CAPTURE(name);
      const attend_test::Fixture f(name);
      const bool bias = f.index("bias") != 0;
      std::vector<std::string> names;
      for (const char* layer : {"W_q", "W_k", "W_v", "W_o"}) {
        names.push_back(std::string(layer) + ".weight");
        if (bias) names.push_back(std::string(layer) + ".bias");
      }
      attend::MultiHeadAttention<T> attention(6, 5, 4, 12, f.index("num_heads"), T(0.5), bias);
      attention.eval();
      attention.load_state_dict(fixture_state_dict<T>(f, names, names));
      const auto output =
          attention(f.tensor3<T>("queries"), f.tensor3<T>("keys"), f.tensor3<T>("values"), attend_test::valid_lens(f));
      REQUIRE_THAT(output, attend_test::Near(f.tensor3<double>("output"), tol));
    }
  }
  SECTION("AdditiveAttention") {
    const attend_test::Fixture f("additive_1d");
    const std::vector<std::string> names{"W_k.weight", "W_q.weight", "w_v.weight"};
    attend::AdditiveAttention<T> attention(3, 5, 8, T(0.1));
    attention.eval();
    attention.load_state_dict(fixture_state_dict<T>(f, names, names));
    const auto output =
        attention(f.tensor3<T>("queries"), f.tensor3<T>("keys"), f.tensor3<T>("values"), attend_test::valid_lens(f));
    REQUIRE_THAT(output, attend_test::Near(f.tensor3<double>("output"), tol));
  }
  SECTION("RNN: the fixture stores nn.RNN's weight_ih_l0, ... as weight_ih, ...") {
    const attend_test::Fixture f("rnn_a");
    attend::RNN<T> rnn(3, 5);
    rnn.load_state_dict(fixture_state_dict<T>(f, {"weight_ih", "weight_hh", "bias_ih", "bias_hh"},
                                        {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}));
    REQUIRE_THAT(rnn(f.tensor3<T>("X")), attend_test::Near(f.tensor3<double>("output"), tol));
  }
  SECTION("Conv1d, bias on and off") {
    for (const std::string name : {"conv1d_k3", "conv1d_k4_nobias"}) {
      CAPTURE(name);
      const attend_test::Fixture f(name);
      const bool bias = f.has("bias");
      attend::Conv1d<T> conv(3, 4, f.index("kernel_size"), bias);
      const std::vector<std::string> names =
          bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
      conv.load_state_dict(fixture_state_dict<T>(f, names, names));
      REQUIRE_THAT(conv(f.tensor3<T>("X")), attend_test::Near(f.tensor3<double>("output"), tol));
    }
  }
}

// ---- round trips ----------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("state_dict() then load_state_dict() into a fresh module gives identical outputs", "[state_dict]",
                   float, double) {
  using T = TestType;
  SECTION("Linear") {
    for (const bool bias : {true, false}) {
      CAPTURE(bias);
      require_round_trip<T>(
          [&](std::uint64_t seed) {
            Generator generator(seed);
            return attend::Linear<T>(4, 3, bias, generator);
          },
          [](const attend::Linear<T>& layer) { return layer.forward(random_tensor<T>(2, 3, 4, 31)); },
          bias ? "linear_bias" : "linear");
    }
  }
  SECTION("AdditiveAttention") { require_round_trip<T>(make_additive<T>, run_additive<T>, "additive"); }
  SECTION("MultiHeadAttention") {
    for (const bool bias : {true, false}) {
      CAPTURE(bias);
      require_round_trip<T>([&](std::uint64_t seed) { return make_mha<T>(seed, bias); }, run_mha<T>,
                            bias ? "mha_bias" : "mha");
    }
  }
  SECTION("RNN") {
    require_round_trip<T>(
        [](std::uint64_t seed) {
          Generator generator(seed);
          return attend::RNN<T>(3, 5, generator);
        },
        [](const attend::RNN<T>& rnn) { return rnn.forward(random_tensor<T>(2, 6, 3, 32)); }, "rnn");
  }
  SECTION("Conv1d") {
    for (const bool bias : {true, false}) {
      CAPTURE(bias);
      require_round_trip<T>(
          [&](std::uint64_t seed) {
            Generator generator(seed);
            return attend::Conv1d<T>(3, 4, 4, bias, generator);
          },
          [](const attend::Conv1d<T>& conv) { return conv.forward(random_tensor<T>(2, 7, 3, 33)); },
          bias ? "conv1d_bias" : "conv1d");
    }
  }
  SECTION("DotProductAttention and PositionalEncoding: an empty dict, through a file too") {
    attend::DotProductAttention<T> attention(T(0));
    attention.load_state_dict(attention.state_dict());
    attend::PositionalEncoding<T> encoding(8, T(0), 20);
    const std::string path = attend_test::safetensors_path<T>("empty");
    attend::save_safetensors(path, encoding.state_dict());
    encoding.load_state_dict(attend::load_safetensors<T>(path));
    CHECK(encoding.P() == attend::positional_encoding_table<T>(20, 8));
  }
}

// ---- refusals -------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("MultiHeadAttention::load_state_dict refuses every mismatch and stays as it was", "[state_dict]",
                   float, double) {
  using T = TestType;
  auto attention = make_mha<T>(1, true);
  const StateDict<T> good = make_mha<T>(2, true).state_dict();  // other values, the right names and shapes
  const std::string where = "MultiHeadAttention::load_state_dict: ";
  const auto refused = [&](const StateDict<T>& dict, const std::string& text) {
    require_refused<T>(attention, run_mha<T>, dict, where + text);
  };

  SECTION("a missing tensor") {
    StateDict<T> dict = good;
    dict.erase("W_v.bias");
    refused(dict, "missing tensor \"W_v.bias\" of shape (12)");
  }
  SECTION("a tensor of another shape, or of another rank") {
    StateDict<T> dict = good;
    dict["W_k.weight"] = counting_tensor<T>({12, 5});
    refused(dict, "\"W_k.weight\" must have shape (12, 6), got (12, 5)");
    dict = good;
    dict["W_k.weight"] = counting_tensor<T>({6, 12});  // transposed
    refused(dict, "\"W_k.weight\" must have shape (12, 6), got (6, 12)");
    dict = good;
    dict["W_o.bias"] = counting_tensor<T>({1, 12});
    refused(dict, "\"W_o.bias\" must have shape (12), got (1, 12)");
  }
  SECTION("a tensor whose values do not fill its shape") {
    StateDict<T> dict = good;
    dict["W_o.weight"].values.pop_back();
    refused(dict, "\"W_o.weight\" has shape (12, 12) but 143 values");
  }
  SECTION("an unexpected tensor") {
    StateDict<T> dict = good;
    dict["W_o.scale"] = counting_tensor<T>({12});
    refused(dict,
            "unexpected tensor \"W_o.scale\" (the module's tensors are \"W_q.weight\", \"W_q.bias\", \"W_k.weight\", "
            "\"W_k.bias\", \"W_v.weight\", \"W_v.bias\", \"W_o.weight\", \"W_o.bias\")");
  }
  SECTION("a dict without biases into a module with them, and the other way round") {
    refused(make_mha<T>(2, false).state_dict(), "missing tensor \"W_q.bias\" of shape (12)");
    auto no_bias = make_mha<T>(3, false);
    require_refused<T>(no_bias, run_mha<T>, good,
                       where +
                           "unexpected tensor \"W_k.bias\" (the module's tensors are \"W_q.weight\", "
                           "\"W_k.weight\", \"W_v.weight\", \"W_o.weight\")");
  }
  SECTION("several problems: the first in the module's order, then unexpected names in the dict's order") {
    StateDict<T> dict = good;
    dict["A"] = counting_tensor<T>({1});               // unexpected, first by name
    dict["W_v.weight"] = counting_tensor<T>({12, 5});  // wrong shape, sixth in the module's order
    dict.erase("W_k.bias");                   // missing, fourth in the module's order
    refused(dict, "missing tensor \"W_k.bias\" of shape (12)");
    dict["W_k.bias"] = good.at("W_k.bias");
    refused(dict, "\"W_v.weight\" must have shape (12, 4), got (12, 5)");
    dict["W_v.weight"] = good.at("W_v.weight");
    dict["Z"] = counting_tensor<T>({1});
    refused(dict,
            "unexpected tensor \"A\" (the module's tensors are \"W_q.weight\", \"W_q.bias\", \"W_k.weight\", "
            "\"W_k.bias\", \"W_v.weight\", \"W_v.bias\", \"W_o.weight\", \"W_o.bias\")");
    dict.erase("A");
    dict.erase("Z");
    attention.load_state_dict(dict);  // now it is good
    CHECK(same(attention.state_dict(), good));
  }
  SECTION("nothing is assigned before everything is checked: only the last tensor is wrong") {
    StateDict<T> dict = good;
    dict["W_o.bias"] = counting_tensor<T>({11});
    refused(dict, "\"W_o.bias\" must have shape (12), got (11)");
  }
  SECTION("names are quoted, control characters escaped, bytes that are not UTF-8 replaced") {
    StateDict<T> dict = good;
    dict["W_o.bias\n\"x\"\xff"] = counting_tensor<T>({12});
    refused(dict,
            "unexpected tensor \"W_o.bias\\n\\\"x\\\"\xef\xbf\xbd\" (the module's tensors are \"W_q.weight\", "
            "\"W_q.bias\", \"W_k.weight\", \"W_k.bias\", \"W_v.weight\", \"W_v.bias\", \"W_o.weight\", \"W_o.bias\")");
  }
}

TEMPLATE_TEST_CASE("Every module's load_state_dict names the problem and stays as it was", "[state_dict]", float,
                   double) {
  using T = TestType;
  SECTION("Linear") {
    Generator generator(1);
    attend::Linear<T> with_bias(4, 3, true, generator), without_bias(4, 3, false, generator);
    const auto run = [](const attend::Linear<T>& layer) { return layer.forward(random_tensor<T>(2, 3, 4, 41)); };
    StateDict<T> dict = with_bias.state_dict();
    dict.erase("bias");
    require_refused<T>(with_bias, run, dict, "Linear::load_state_dict: missing tensor \"bias\" of shape (3)");
    require_refused<T>(without_bias, run, with_bias.state_dict(),
                       "Linear::load_state_dict: unexpected tensor \"bias\" (the module's tensors are \"weight\")");
  }
  SECTION("AdditiveAttention") {
    auto attention = make_additive<T>(1);
    StateDict<T> dict = make_additive<T>(2).state_dict();
    dict["w_v.weight"] = counting_tensor<T>({8});
    require_refused<T>(attention, run_additive<T>, dict,
                       "AdditiveAttention::load_state_dict: \"w_v.weight\" must have shape (1, 8), got (8)");
  }
  SECTION("RNN: PyTorch's names end in _l0") {
    Generator generator(1);
    attend::RNN<T> rnn(3, 5, generator);
    const auto run = [](const attend::RNN<T>& module) { return module.forward(random_tensor<T>(2, 6, 3, 42)); };
    StateDict<T> dict;
    for (const auto& [name, tensor] : rnn.state_dict()) dict[name.substr(0, name.size() - 3)] = tensor;
    require_refused<T>(rnn, run, dict, "RNN::load_state_dict: missing tensor \"weight_ih_l0\" of shape (5, 3)");
    dict = rnn.state_dict();
    dict["weight_hh_l0"] = counting_tensor<T>({5, 3});
    require_refused<T>(rnn, run, dict, "RNN::load_state_dict: \"weight_hh_l0\" must have shape (5, 5), got (5, 3)");
  }
  SECTION("Conv1d") {
    Generator generator(1);
    attend::Conv1d<T> conv(3, 4, 5, true, generator);
    const auto run = [](const attend::Conv1d<T>& module) { return module.forward(random_tensor<T>(2, 7, 3, 43)); };
    StateDict<T> dict = conv.state_dict();
    dict["weight"] = counting_tensor<T>({4, 3, 3});
    require_refused<T>(conv, run, dict, "Conv1d::load_state_dict: \"weight\" must have shape (4, 3, 5), got (4, 3, 3)");
  }
  SECTION("DotProductAttention and PositionalEncoding take nothing, not even P") {
    attend::DotProductAttention<T> attention(T(0));
    const auto run = [](attend::DotProductAttention<T>& module) {
      return module(random_tensor<T>(2, 3, 4, 44), random_tensor<T>(2, 5, 4, 45), random_tensor<T>(2, 5, 2, 46));
    };
    require_refused<T>(attention, run, StateDict<T>{{"x", counting_tensor<T>({1})}},
                       "DotProductAttention::load_state_dict: unexpected tensor \"x\" (the module has no parameters)");

    attend::PositionalEncoding<T> encoding(8, T(0), 20);
    const auto encode = [](attend::PositionalEncoding<T>& module) { return module(random_tensor<T>(2, 5, 8, 47)); };
    StateDict<T> dict;
    dict["P"] = attend::named_tensor(attend::Matrix<T>(attend::Matrix<T>::Zero(20, 8)));
    require_refused<T>(encoding, encode, dict,
                       "PositionalEncoding::load_state_dict: unexpected tensor \"P\" (the module has no parameters)");
    CHECK(encoding.P() == attend::positional_encoding_table<T>(20, 8));
  }
}

TEMPLATE_TEST_CASE("state_dict() refuses a parameter resized from outside; load_state_dict() restores it",
                   "[state_dict]", float, double) {
  using T = TestType;
  Generator generator(1);
  attend::Linear<T> layer(4, 3, true, generator);
  const StateDict<T> good = layer.state_dict();
  layer.weight().resize(2, 2);
  REQUIRE_THROWS_AS(layer.state_dict(), std::invalid_argument);
  REQUIRE_THROWS_WITH(layer.state_dict(),
                      Equals("Linear::state_dict: parameter \"weight\" must have shape (3, 4), got (2, 2) (was it "
                             "resized?)"));
  layer.load_state_dict(good);
  CHECK(layer.weight().rows() == 3);
  CHECK(same(layer.state_dict(), good));
  CHECK(layer(random_tensor<T>(1, 2, 4, 51)).dimension(2) == 3);
}
