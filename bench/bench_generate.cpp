// Decoding with a whole model: one step of a Llama-shaped CausalLM against the time to read its weights once.
//
//   ./build/bench/bench_generate
//
// Step/<layers>/<width>/<kv_heads>/<ffn>/<vocab>: one token through CausalLM's cached call, float, batch 1, after a
// prompt of 128 tokens (the cache holds 128 to 256 steps): every weight is read once per token, so a step is bound
// by streaming the weights (and the cache, a few MB here) from memory. Weights/<...>: the bound, a sum over the same
// parameter arrays in the model's order (stream_read.hpp), in pieces on as many threads as the step.
// "bytes_per_second" counters compare directly (both count the weights a step reads whole: all but the token embedding,
// of which it reads one row); "tokens_per_second" is the step's rate. The 100 M model is
// examples/generate/make_model.py's Llama (12 layers of 768, 12 heads sharing 4 key/value heads, ffn 2048, vocabulary
// 32000).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <memory>
#include <vector>

#include "stream_read.hpp"

namespace {

using attend::Index;

attend::CausalLMConfig config_of(const benchmark::State& state) {
  return attend::CausalLMConfig::llama(state.range(4), state.range(1), state.range(0), state.range(1) / 64,
                                       state.range(2), state.range(3));
}

// One model per shape, built once (drawing 100 M parameters takes seconds).
attend::CausalLM<float>& model_of(const attend::CausalLMConfig& c) {
  static std::vector<std::pair<std::vector<Index>, std::unique_ptr<attend::CausalLM<float>>>> models;
  const std::vector<Index> key = {c.num_layers, c.num_hiddens, c.num_kv_heads, c.ffn_num_hiddens, c.vocab_size};
  for (auto& m : models)
    if (m.first == key) return *m.second;
  attend::Generator generator(1);
  models.emplace_back(key, std::make_unique<attend::CausalLM<float>>(c, generator));
  models.back().second->eval();
  return *models.back().second;
}

// The parameters a step reads whole: all but the token embedding, of which it reads one row (the head is a
// Linear of its own: these models are untied).
std::vector<attend::Parameter<float>> streamed(attend::CausalLM<float>& model) {
  std::vector<attend::Parameter<float>> read;
  for (const auto& p : model.parameters())
    if (p.name != "embedding.weight") read.push_back(p);
  return read;
}

double weight_bytes(attend::CausalLM<float>& model) {
  double n = 0;
  for (const auto& p : streamed(model)) n += static_cast<double>(p.size);
  return n * sizeof(float);
}

void Step(benchmark::State& state) {
  attend::CausalLM<float>& model = model_of(config_of(state));
  const Index prompt_steps = 128, room = 128;
  attend::CausalLMCache<float> cache = model.make_cache(1, prompt_steps + room);
  attend::Matrix<Index> prompt(1, prompt_steps), next(1, 1);
  for (Index t = 0; t < prompt_steps; ++t) prompt(0, t) = (7 * t + 3) % model.config().vocab_size;
  next(0, 0) = 1;
  model(prompt, cache);
  for (auto _ : state) {
    if (cache.size() == prompt_steps + room) {  // full: back to the prompt, untimed
      state.PauseTiming();
      cache.clear();
      model(prompt, cache);
      state.ResumeTiming();
    }
    const attend::Tensor3<float> logits = model(next, cache);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(state.iterations()) * weight_bytes(model)));
  state.counters["tokens_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void Weights(benchmark::State& state) {
  attend::CausalLM<float>& model = model_of(config_of(state));
  const std::vector<attend::Parameter<float>> parameters = streamed(model);
  constexpr Index piece = 1 << 16;  // floats
  std::vector<std::pair<const float*, Index>> pieces;
  for (const auto& p : parameters)
    for (Index i = 0; i < p.size; i += piece) pieces.emplace_back(p.value + i, std::min(piece, p.size - i));
  std::vector<float> sums(pieces.size());
  for (auto _ : state) {
    attend::detail::parallel_for(static_cast<Index>(pieces.size()), 1e9, [&](Index i, int) {
      const auto& [data, n] = pieces[static_cast<std::size_t>(i)];
      sums[static_cast<std::size_t>(i)] = attend_bench::stream_sum(data, n);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(state.iterations()) * weight_bytes(model)));
}

}  // namespace

// layers, width, key/value heads, ffn, vocabulary: the 100 M Llama, and a 30 M one (examples/generate's).
BENCHMARK(Step)
    ->ArgNames({"layers", "width", "kv_heads", "ffn", "vocab"})
    ->Args({12, 768, 4, 2048, 32000})
    ->Args({8, 512, 4, 1408, 8000})
    ->UseRealTime();
BENCHMARK(Weights)
    ->ArgNames({"layers", "width", "kv_heads", "ffn", "vocab"})
    ->Args({12, 768, 4, 2048, 32000})
    ->Args({8, 512, 4, 1408, 8000})
    ->UseRealTime();

BENCHMARK_MAIN();
