// CausalLM: small Llama, Mistral and GPT-2 models saved by transformers (tests/golden/models/, made by
// tests/reference/make_causal_lm_fixtures.py) loaded through causal_lm_from_transformers, against the script's
// float64 recomputation (fixtures causal_lm_*: logits, every parameter's gradient by autograd, greedy generation
// checked there against transformers' generate()); decoding through the cache against whole sequences; finite
// differences in double (a tied embedding gets both of its gradients); bad input; and the greedy tokens of each model
// in bfloat16 on every level.
#include <attend/causal_lm.hpp>
#include <attend/from_transformers.hpp>
#include <attend/safetensors.hpp>
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/levels.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>
#include <support/random_tensor.hpp>
#include <vector>

using attend::CausalLM;
using attend::CausalLMCache;
using attend::CausalLMConfig;
using attend::Index;
using attend::Matrix;
using attend::StateDict;
using attend::Tensor3;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::require_invalid;

namespace {

const std::string models_dir = std::string(ATTEND_GOLDEN_DIR) + "/models/";

template <class Scalar>
CausalLM<Scalar> load_model(const std::string& name) {
  const CausalLMConfig config = attend::causal_lm_config_from_file(models_dir + name + "/config.json");
  return attend::causal_lm_from_transformers(
      config, attend::load_safetensors<Scalar>(models_dir + name + "/model.safetensors"));
}

// The largest logit's index at step t of row b.
template <class Scalar>
Index argmax(const Tensor3<Scalar>& logits, Index b, Index t) {
  Index best = 0;
  for (Index v = 1; v < logits.dimension(2); ++v)
    if (logits(b, t, v) > logits(b, t, best)) best = v;
  return best;
}

// The prompt (rows, p) and greedy tokens after it through the cache, `length` steps in all; the last call's logits in
// `logits` (rows, 1, vocab_size).
template <class Scalar>
Matrix<Index> greedy(CausalLM<Scalar>& model, CausalLMCache<Scalar>& cache, const Matrix<Index>& prompt, Index length,
                     Tensor3<Scalar>& logits) {
  Matrix<Index> sequence = prompt;
  logits = model(prompt, cache);
  while (sequence.cols() < length) {
    Matrix<Index> next(sequence.rows(), 1);
    for (Index b = 0; b < sequence.rows(); ++b) next(b, 0) = argmax(logits, b, logits.dimension(1) - 1);
    Matrix<Index> longer(sequence.rows(), sequence.cols() + 1);
    longer << sequence, next;
    sequence = longer;
    logits = model(next, cache);
  }
  return sequence;
}

}  // namespace

TEMPLATE_TEST_CASE("CausalLM loads transformers' Llama, Mistral and GPT-2, and matches their logits and gradients",
                   "[causal_lm][golden]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "llama", "llama_tied_bias", "mistral", "gpt2");
  CAPTURE(name);
  const Fixture fixture("causal_lm_" + name);
  CausalLM<TestType> model = load_model<TestType>(name);
  const Matrix<Index> tokens = fixture.index_matrix("tokens");
  const Tensor3<TestType> logits = model(tokens);
  REQUIRE_THAT(logits, Near(fixture.tensor3<double>("logits"), attend_test::tolerance<TestType>()));
  REQUIRE(attend_test::same_bits(model.forward(tokens), logits));
  model.backward(fixture.tensor3<TestType>("grad_logits"));

  // The expected gradients under transformers' names, mapped to attend's by the loader's own rules.
  StateDict<double> grads;
  for (const std::string& entry : fixture.names())
    if (entry.size() > 5 && entry.compare(entry.size() - 5, 5, "_grad") == 0)
      grads[entry.substr(0, entry.size() - 5)] = attend_test::fixture_tensor<double>(fixture, entry);
  const StateDict<double> expected = attend::causal_lm_state_dict_from_transformers(model.config(), grads);
  REQUIRE(expected.size() == model.parameters().size());
  for (const auto& p : model.parameters()) {
    CAPTURE(p.name);
    const auto& e = expected.at(p.name);
    REQUIRE(static_cast<Index>(e.values.size()) == p.size);
    const attend::Vector<TestType> actual = Eigen::Map<const attend::Vector<TestType>>(p.grad, p.size);
    REQUIRE_THAT(actual, Near(attend::Vector<double>(Eigen::Map<const attend::Vector<double>>(e.values.data(), p.size)),
                              gradient_tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Greedy generation through the cache gives transformers' tokens, and the whole sequence's logits",
                   "[causal_lm][generate]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "llama", "llama_tied_bias", "mistral", "gpt2");
  CAPTURE(name);
  const Fixture fixture("causal_lm_" + name);
  CausalLM<TestType> model = load_model<TestType>(name);
  model.eval();
  const Matrix<Index> prompt = fixture.index_matrix("prompt"), generated = fixture.index_matrix("generated");
  CausalLMCache<TestType> cache = model.make_cache(prompt.rows(), generated.cols());
  Tensor3<TestType> logits;
  const Matrix<Index> sequence = greedy(model, cache, prompt, generated.cols(), logits);
  REQUIRE(sequence == generated);
  REQUIRE(cache.size() == generated.cols());
  // The last step's logits, decoded one token at a time, are those of the whole sequence.
  const Tensor3<TestType> whole = model.forward(sequence);
  Tensor3<double> last(sequence.rows(), 1, whole.dimension(2));
  for (Index b = 0; b < sequence.rows(); ++b)
    for (Index v = 0; v < whole.dimension(2); ++v) last(b, 0, v) = whole(b, whole.dimension(1) - 1, v);
  REQUIRE_THAT(logits, Near(last, attend_test::path_tolerance<TestType>()));
}

TEST_CASE("CausalLM's gradients agree with finite differences in double, a tied embedding's included",
          "[causal_lm][gradients]") {
  const auto name = GENERATE(as<std::string>{}, "llama_tied_bias", "gpt2");
  CAPTURE(name);
  CausalLM<double> model = load_model<double>(name);
  Matrix<Index> tokens(2, 4);
  tokens << 3, 17, 17, 39, 0, 8, 21, 5;
  const Tensor3<double> G = attend_test::random_tensor<double>(2, 4, model.config().vocab_size, 111);
  model(tokens);
  model.backward(G);
  attend_test::require_finite_difference_gradients(model, [&] { return attend_test::dot(G, model.forward(tokens)); });
}

TEMPLATE_TEST_CASE("CausalLM refuses bad input, naming it, and a decoding call that throws changes no cache",
                   "[causal_lm][bad_input]", float, double) {
  require_invalid(
      [] {
        attend::causal_lm_config_from_json(nlohmann::json{{"model_type", "bert"}});
      },
      "model_type must be \"llama\", \"mistral\" or \"gpt2\", got \"bert\"");
  require_invalid(
      [] {
        attend::causal_lm_config_from_json(nlohmann::json{{"model_type", "llama"},
                                                          {"vocab_size", 10},
                                                          {"hidden_size", 16},
                                                          {"num_hidden_layers", 1},
                                                          {"num_attention_heads", 4},
                                                          {"num_key_value_heads", 3},
                                                          {"intermediate_size", 8}});
      },
      "config.num_kv_heads (3) must divide config.num_heads (4)");
  CausalLMConfig no_layers = CausalLMConfig::gpt2(10, 8, 0, 2, 4);
  require_invalid([&] { CausalLM<TestType> m(no_layers); }, "config.num_layers must be at least 1, got 0");
  CausalLMConfig plain_without_bias = CausalLMConfig::gpt2(10, 8, 1, 2, 4);
  plain_without_bias.ffn_bias = false;
  require_invalid([&] { CausalLM<TestType> m(plain_without_bias); }, "config.ffn_bias must be true");
  attend::Generator generator(3);
  require_invalid([&] { attend::CausalLMLayer<TestType> layer(plain_without_bias, generator); },
                  "CausalLMLayer: a plain feed-forward network");
  REQUIRE(generator.uniform(0.0, 1.0) == attend::Generator(3).uniform(0.0, 1.0));  // nothing drawn
  const CausalLMConfig config = attend::causal_lm_config_from_file(models_dir + "llama/config.json");
  StateDict<TestType> dict = attend::load_safetensors<TestType>(models_dir + "llama/model.safetensors");
  StateDict<TestType> extra = dict;
  extra["model.layers.0.self_attn.q_norm.weight"] = dict.at("model.norm.weight");
  require_invalid([&] { attend::causal_lm_from_transformers(config, extra); },
                  "unexpected tensor \"model.layers.0.self_attn.q_norm.weight\"");
  StateDict<TestType> missing = dict;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  require_invalid([&] { attend::causal_lm_from_transformers(config, missing); }, "layers.1.ffn.up_proj.weight");

  CausalLM<TestType> model = attend::causal_lm_from_transformers(config, dict);
  model.eval();
  CausalLMCache<TestType> cache = model.make_cache(2, 5);
  Matrix<Index> tokens(2, 3);
  tokens << 1, 2, 3, 4, 5, 6;
  model(tokens, cache);
  require_invalid([&] { model(tokens, cache); }, "the cache holds 3 of 5 steps and cannot take 3 more");
  REQUIRE(cache.size() == 3);
  for (const auto& layer : cache.layers) REQUIRE(layer.size() == 3);
  tokens(1, 2) = 40;
  require_invalid([&] { model.forward(tokens); }, "tokens(1, 2) must be in [0, 40)");
  REQUIRE_THROWS_AS(CausalLM<TestType>(config).backward(Tensor3<TestType>(2, 3, 40)), std::logic_error);
  CausalLMCache<TestType> wrong = CausalLM<TestType>(CausalLMConfig::llama(40, 16, 2, 4, 4, 24)).make_cache(2, 5);
  tokens(1, 2) = 0;
  require_invalid([&] { model(tokens, wrong); }, "the cache must hold 2 key/value heads of 4, got 4 of 4");
}

TEST_CASE("CausalLM<bfloat16>, transformers' weights rounded, generates transformers' greedy tokens", "[causal_lm]") {
  // Evaluation in bfloat16 on every level: greedy decoding through the cache, against the tokens of
  // transformers' float64 model, step by step until the first step whose two largest logits (of the float64 model,
  // recomputed here in double) lie closer than bfloat16 can tell apart: 2^-5 of the largest |logit|, eight roundings of
  // 2^-8. Every row is compared for at least its first generated token; the smallest such gap of each model is in the
  // fixture's header (mistral's, 0.0082, ends its second row's comparison after one token).
  const auto name = GENERATE(as<std::string>{}, "llama", "llama_tied_bias", "mistral", "gpt2");
  CAPTURE(name);
  const Fixture fixture("causal_lm_" + name);
  const Matrix<Index> prompt = fixture.index_matrix("prompt"), generated = fixture.index_matrix("generated");
  const Tensor3<double> exact = load_model<double>(name).forward(generated);  // (rows, steps, vocab)
  std::vector<Index> compared(static_cast<std::size_t>(prompt.rows()), 0);  // steps of each row told apart
  for (Index b = 0; b < prompt.rows(); ++b) {
    for (Index t = prompt.cols(); t < generated.cols(); ++t) {
      double largest = -INFINITY, second = -INFINITY, magnitude = 0;
      for (Index v = 0; v < exact.dimension(2); ++v) {
        const double logit = exact(b, t - 1, v);
        magnitude = std::max(magnitude, std::abs(logit));
        second = std::max(second, std::min(largest, logit));
        largest = std::max(largest, logit);
      }
      if (largest - second < std::ldexp(magnitude, -5)) break;
      ++compared[static_cast<std::size_t>(b)];
    }
    REQUIRE(compared[static_cast<std::size_t>(b)] >= 1);
  }
  const CausalLM<attend::bfloat16> model = load_model<attend::bfloat16>(name);
  for (attend::Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const attend_test::ForcedLevel level(isa);
    CausalLM<attend::bfloat16> decoder = model;
    CausalLMCache<attend::bfloat16> cache = decoder.make_cache(prompt.rows(), generated.cols());
    Tensor3<attend::bfloat16> logits;
    const Matrix<Index> sequence = greedy(decoder, cache, prompt, generated.cols(), logits);
    for (Index b = 0; b < prompt.rows(); ++b) {
      CAPTURE(b, compared[static_cast<std::size_t>(b)]);
      const Index steps = prompt.cols() + compared[static_cast<std::size_t>(b)];
      CHECK(sequence.row(b).head(steps) == generated.row(b).head(steps));
    }
  }
}
