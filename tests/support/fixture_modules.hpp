// A golden fixture's parameters, as a module or as a state dict.
//
//   auto attention = attend_test::mha_from_fixture<T>(fixture);            // its sizes, its parameters, eval mode
//   rnn.load_state_dict(attend_test::fixture_state_dict<T>(f, {"weight_ih"}, {"weight_ih_l0"}));
#pragma once

#include <attend/linear.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/state_dict.hpp>
#include <support/fixture.hpp>

#include <string>
#include <utility>
#include <vector>

namespace attend_test {

// A MultiHeadAttention of the fixture's sizes holding its parameters ("W_q.weight", "W_q.bias", ...), in eval mode.
template <class Scalar>
attend::MultiHeadAttention<Scalar> mha_from_fixture(const Fixture& fixture) {
  const auto W_q = fixture.matrix<Scalar>("W_q.weight");  // (num_hiddens, query_size)
  const auto W_k = fixture.matrix<Scalar>("W_k.weight");  // (num_hiddens, key_size)
  const auto W_v = fixture.matrix<Scalar>("W_v.weight");  // (num_hiddens, value_size)
  const bool bias = fixture.index("bias") != 0;
  attend::MultiHeadAttention<Scalar> attention(W_k.cols(), W_q.cols(), W_v.cols(), W_q.rows(),
                                               fixture.index("num_heads"), Scalar(0.5), bias);
  const std::pair<const char*, attend::Linear<Scalar>*> layers[] = {
      {"W_q", &attention.W_q()}, {"W_k", &attention.W_k()}, {"W_v", &attention.W_v()}, {"W_o", &attention.W_o()}};
  for (const auto& [name, layer] : layers) {
    layer->weight() = fixture.matrix<Scalar>(std::string(name) + ".weight");
    if (bias) layer->bias() = fixture.vector<Scalar>(std::string(name) + ".bias");
  }
  attention.eval();
  return attention;
}

// Entry `name` of a fixture as a NamedTensor, whatever its rank (1 to 3).
template <class Scalar>
attend::NamedTensor<Scalar> fixture_tensor(const Fixture& fixture, const std::string& name) {
  switch (fixture.shape(name).size()) {
    case 1:
      return attend::named_tensor(fixture.vector<Scalar>(name));
    case 2:
      return attend::named_tensor(fixture.matrix<Scalar>(name));
    default:
      return attend::named_tensor(fixture.tensor3<Scalar>(name));
  }
}

// The parameters of a fixture as a state dict: entry fixture_names[i] under module_names[i].
template <class Scalar>
attend::StateDict<Scalar> fixture_state_dict(const Fixture& fixture, const std::vector<std::string>& fixture_names,
                                             const std::vector<std::string>& module_names) {
  attend::StateDict<Scalar> dict;
  for (std::size_t i = 0; i < fixture_names.size(); ++i)
    dict[module_names[i]] = fixture_tensor<Scalar>(fixture, fixture_names[i]);
  return dict;
}

}  // namespace attend_test
