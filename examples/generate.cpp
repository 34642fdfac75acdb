// examples/generate.cpp — text generation with decoder-only models in Llama's and GPT-2's shapes, assembled from
// attend's blocks (attend::CausalLM): a prompt through the model at once (prefill), then one token at a time through
// the key/value cache (decode), greedy and sampled (temperature 0.8, top 40).
//
//   ./build/examples/generate [output_directory] [model_directory]
//
// Without a model directory it builds two models with random weights (Llama: RMSNorm, grouped-query attention with
// RoPE, SiLU-gated FFN; GPT-2: LayerNorm, learned positions, tanh GELU, head tied to the embedding), about 30 M
// parameters each. With one, it loads a model saved by Hugging Face transformers (config.json and
// model.safetensors: Llama, Mistral or GPT-2 shapes; examples/generate/make_model.py writes small random ones,
// and a model of your own of those shapes loads the same way). Tokens are printed as ids: no tokenizer here.
// Prints the prefill and decode speeds in tokens per second; docs/PERFORMANCE.md compares them with other engines.
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

using attend::Index;
using attend::Matrix;
using attend::Tensor3;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Generates `count` tokens after `prompt` (batch 1) through the cache; prints them and the speeds.
void generate(attend::CausalLM<float>& model, const std::vector<Index>& prompt, Index count,
              const attend::SamplingOptions& sampling, attend::Generator& generator, const char* label) {
  const Index vocab = model.config().vocab_size;
  attend::CausalLMCache<float> cache = model.make_cache(1, Index(prompt.size()) + count);
  Matrix<Index> tokens(1, Index(prompt.size()));
  for (std::size_t i = 0; i < prompt.size(); ++i) tokens(0, Index(i)) = prompt[i];

  const auto prefill_start = Clock::now();
  Tensor3<float> logits = model(tokens, cache);  // (1, prompt, vocab)
  const double prefill = seconds_since(prefill_start);
  std::vector<Index> out;
  Matrix<Index> next(1, 1);
  const auto decode_start = Clock::now();
  for (Index i = 0; i < count; ++i) {
    next(0, 0) = attend::sample_token(&logits(0, logits.dimension(1) - 1, 0), vocab, sampling, generator);
    out.push_back(next(0, 0));
    if (i + 1 < count) logits = model(next, cache);  // (1, 1, vocab)
  }
  const double decode = seconds_since(decode_start);
  std::printf("  %-8s", label);
  for (std::size_t i = 0; i < out.size() && i < 16; ++i) std::printf(" %ld", static_cast<long>(out[i]));
  std::printf("%s\n           prefill %ld tokens: %.1f tokens/s; decode %ld tokens: %.1f tokens/s (%.2f ms each)\n",
              out.size() > 16 ? " ..." : "", static_cast<long>(prompt.size()), double(prompt.size()) / prefill,
              static_cast<long>(count), double(count - 1) / decode, 1e3 * decode / double(count - 1));
}

Index parameter_count(attend::CausalLM<float>& model) {
  Index n = 0;
  for (const auto& p : model.parameters()) n += p.size;
  return n;
}

// transformers' initialisation of the token and position tables, N(0, 0.02) (initializer_range), in place of
// nn.Embedding's N(0, 1), which makes a random tied head pick one token whatever the input.
void scale_embeddings(attend::CausalLM<float>& model) {
  for (const auto& p : model.parameters())
    if (p.name == "embedding.weight" || p.name == "positions.weight")
      for (Index i = 0; i < p.size; ++i) p.value[i] *= 0.02f;
}

void run(attend::CausalLM<float>& model, const char* name, attend::Generator& generator) {
  model.eval();
  const auto& c = model.config();
  std::printf("%s: %.1f M parameters; vocab %ld, %ld layers, width %ld, %ld heads (%ld key/value), ffn %ld\n", name,
              double(parameter_count(model)) / 1e6, static_cast<long>(c.vocab_size), static_cast<long>(c.num_layers),
              static_cast<long>(c.num_hiddens), static_cast<long>(c.num_heads), static_cast<long>(c.kv_heads()),
              static_cast<long>(c.ffn_num_hiddens));
  std::vector<Index> prompt;
  for (Index i = 0; i < 32; ++i) prompt.push_back((7 * i + 3) % c.vocab_size);
  generate(model, prompt, 64, attend::SamplingOptions{}, generator, "greedy");
  generate(model, prompt, 64, attend::SamplingOptions{0.8, 40}, generator, "sampled");
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 3) throw std::invalid_argument(std::string("usage: ") + argv[0] + " [output_directory] [model_directory]");
  std::printf("kernels: %s, %d thread(s); float; batch 1\n\n", attend::isa_name(attend::active_isa()),
              attend::num_threads());
  attend::Generator generator(42);
  if (argc == 3) {
    const std::string dir = argv[2];
    const attend::CausalLMConfig config = attend::causal_lm_config_from_file(dir + "/config.json");
    attend::CausalLM<float> model =
        attend::causal_lm_from_transformers(config, attend::load_safetensors<float>(dir + "/model.safetensors"));
    run(model, dir.c_str(), generator);
    return 0;
  }
  attend::CausalLM<float> llama(attend::CausalLMConfig::llama(/*vocab_size=*/8000, /*num_hiddens=*/512,
                                                              /*num_layers=*/8, /*num_heads=*/8, /*num_kv_heads=*/4,
                                                              /*ffn_num_hiddens=*/1408),
                                generator);
  scale_embeddings(llama);
  run(llama, "Llama-shaped, random weights", generator);
  attend::CausalLM<float> gpt2(attend::CausalLMConfig::gpt2(/*vocab_size=*/8000, /*num_hiddens=*/512,
                                                            /*num_layers=*/8, /*num_heads=*/8, /*max_positions=*/256),
                               generator);
  scale_embeddings(gpt2);
  run(gpt2, "GPT-2-shaped, random weights", generator);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "generate: " << e.what() << '\n';
  return 1;
}
