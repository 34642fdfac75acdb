// bfloat16 against float: Linear's products, and what bounds them on this CPU.
//
//   ./build/bench/bench_bfloat16
//
// Linear/<rows>/<in>/<out>/<bf16>: Linear<float> (bf16 = 0) or Linear<bfloat16> (1) forward over `rows` rows, batch
// 1, into a preallocated output. Several layers are used in turn, together at least 512 MiB of weights, so that each
// call reads its weight from memory, as a model's layers do when decoding. FLOPS counts 2 rows in out;
// bytes_per_second the weight's bytes.
// MultiHeadAttention/... and Decode/...: the attention modules in float and bfloat16, described where they are defined.
// Stream/<bytes>: the bound of a memory-bound call, a sum over as many bytes of the same rotation of weights
// (stream_read.hpp, one thread).
// Peak/<kind>: the arithmetic bound of one core, independent accumulators and no memory: kind 0 float multiply-adds
// of 16 lanes (32 flops each), kind 1 AVX512-BF16's vdpbf16ps (16 lanes of a pair each, 64 flops), skipped on CPUs
// without it. A product of many rows through vdpbf16ps cannot run faster than Peak/1; through float's kernels, than
// Peak/0.
#include <benchmark/benchmark.h>

#include <attend/attend.hpp>
#include <algorithm>
#include <memory>
#include <vector>

#include "stream_read.hpp"

namespace {

using attend::Index;

// Layers of one shape used in turn, together at least 512 MiB of weights.
template <class Scalar>
struct Layers {
  std::vector<std::unique_ptr<attend::Linear<Scalar>>> layers;
  std::size_t next = 0;

  Layers(Index in, Index out, bool from_memory) {
    const double bytes = static_cast<double>(in) * static_cast<double>(out) * sizeof(Scalar);
    const auto count = from_memory ? static_cast<std::size_t>(std::max(2.0, (512.0 * (1 << 20)) / bytes)) : 1;
    attend::Generator generator(1);
    for (std::size_t i = 0; i < count; ++i)
      layers.push_back(std::make_unique<attend::Linear<Scalar>>(in, out, true, generator));
  }
  const attend::Linear<Scalar>& take() {
    const attend::Linear<Scalar>& layer = *layers[next];
    next = (next + 1) % layers.size();
    return layer;
  }
};

template <class Scalar>
void run_linear(benchmark::State& state, Index rows, Index in, Index out) {
  // A product of more than a few rows is bound by arithmetic: one layer, in cache as far as it fits.
  Layers<Scalar> layers(in, out, rows <= attend::detail::tuning::bf16_in_place_rows);
  attend::Tensor3<Scalar> X(1, rows, in), Y(1, rows, out);  // (1, rows, in), (1, rows, out)
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = Scalar(static_cast<float>(i % 13) / 13.0f - 0.5f);
  for (auto _ : state) {
    layers.take().forward(X, Y);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["FLOPS"] = benchmark::Counter(2.0 * rows * in * out * iterations, benchmark::Counter::kIsRate);
  state.counters["bytes_per_second"] = benchmark::Counter(static_cast<double>(in) * out * sizeof(Scalar) * iterations,
                                                          benchmark::Counter::kIsRate);
}

void BM_Linear(benchmark::State& state) {
  const Index rows = state.range(0), in = state.range(1), out = state.range(2);
  if (state.range(3) != 0)
    run_linear<attend::bfloat16>(state, rows, in, out);
  else
    run_linear<float>(state, rows, in, out);
}

void linear_shapes(benchmark::internal::Benchmark* b) {
  // Decoding steps of Llama-sized projections (1 row; 4 rows as a speculative check), then prefill-sized products.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{1, 4096, 4096},
                                                             {1, 2048, 8192},
                                                             {4, 4096, 4096},
                                                             {32, 2048, 2048},
                                                             {256, 1024, 1024},
                                                             {1024, 512, 512},
                                                             {2048, 768, 2304}})
    for (int64_t bf16 : {0, 1}) b->Args({shape[0], shape[1], shape[2], bf16});
}
BENCHMARK(BM_Linear)->Apply(linear_shapes)->ArgNames({"rows", "in", "out", "bf16"})->Unit(benchmark::kMicrosecond);

template <class Scalar>
void run_attention(benchmark::State& state, Index batch, Index steps, Index hiddens, Index heads) {
  attend::Generator generator(1);
  const attend::MultiHeadAttention<Scalar> attention(hiddens, hiddens, hiddens, hiddens, heads, Scalar(0.0f), false,
                                                     generator);
  attend::Tensor3<Scalar> X(batch, steps, hiddens), Y(batch, steps, hiddens);  // (batch, steps, hiddens) each
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = Scalar(static_cast<float>(i % 13) / 13.0f - 0.5f);
  attend::AttentionWorkspace<Scalar> workspace;
  for (auto _ : state) {
    attention.forward(X, X, X, attend::Mask{}, workspace, Y);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
}

// MultiHeadAttention/<batch>/<steps>/<hiddens>/<heads>/<bf16>: self-attention forward (evaluation), no mask, into a
// preallocated output with a kept workspace.
void BM_MultiHeadAttention(benchmark::State& state) {
  const Index batch = state.range(0), steps = state.range(1), hiddens = state.range(2), heads = state.range(3);
  if (state.range(4) != 0)
    run_attention<attend::bfloat16>(state, batch, steps, hiddens, heads);
  else
    run_attention<float>(state, batch, steps, hiddens, heads);
}
void attention_shapes(benchmark::internal::Benchmark* b) {
  // Mid and large shapes: batch x steps >= 1024, hiddens >= 128.
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {4, 256, 128, 4}, {2, 512, 256, 8}, {1, 1024, 512, 8}, {4, 512, 512, 8}, {1, 2048, 1024, 16}})
    for (int64_t bf16 : {0, 1}) b->Args({shape[0], shape[1], shape[2], shape[3], bf16});
}
BENCHMARK(BM_MultiHeadAttention)
    ->Apply(attention_shapes)
    ->ArgNames({"batch", "steps", "hiddens", "heads", "bf16"})
    ->Unit(benchmark::kMillisecond);

// Decode/<context>/<bf16>: one decoding step of a Llama-shaped GroupedQueryAttention (hiddens 2048, 32 query heads on
// 8 key/value heads of 64, rotary positions) against a cache of `context` steps: four projections and attention.
template <class Scalar>
void run_decode(benchmark::State& state, Index context) {
  constexpr Index hiddens = 2048, heads = 32, kv_heads = 8, head_dim = 64, room = 64;
  attend::Generator generator(1);
  attend::GroupedQueryAttention<Scalar> attention(hiddens, heads, kv_heads, 0, false, Scalar(0.0f), generator);
  attention.set_rotary(attend::RotaryEmbedding<Scalar>(head_dim));
  attend::KVCache<Scalar> cache(1, kv_heads, head_dim, context + room);
  attend::Tensor3<Scalar> prefix(1, context, kv_heads * head_dim);  // (1, context, kv_heads * head_dim)
  for (Index i = 0; i < prefix.size(); ++i) prefix.data()[i] = Scalar(static_cast<float>(i % 7) / 7.0f - 0.5f);
  attend::Tensor3<Scalar> x(1, 1, hiddens), y(1, 1, hiddens);  // one step in and out
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = Scalar(static_cast<float>(i % 13) / 13.0f - 0.5f);
  for (auto _ : state) {
    if (cache.size() == 0 || cache.size() == cache.capacity()) {  // back to `context` steps, untimed
      state.PauseTiming();
      cache.clear();
      cache.append(prefix, prefix);
      state.ResumeTiming();
    }
    attention(x, cache, attend::Mask::causal(), y);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}
void BM_Decode(benchmark::State& state) {
  if (state.range(1) != 0)
    run_decode<attend::bfloat16>(state, state.range(0));
  else
    run_decode<float>(state, state.range(0));
}
BENCHMARK(BM_Decode)
    ->ArgsProduct({{512, 4096}, {0, 1}})
    ->ArgNames({"context", "bf16"})
    ->Unit(benchmark::kMicrosecond);

void BM_Stream(benchmark::State& state) {
  const Index bytes = state.range(0);
  Layers<attend::bfloat16> layers(bytes / 2 / 4096, 4096, true);  // the weights of the bf16 decoding step above
  for (auto _ : state) {
    const attend::Linear<attend::bfloat16>& layer = layers.take();
    benchmark::DoNotOptimize(attend_bench::stream_sum(reinterpret_cast<const float*>(layer.weight().data()),
                                                      layer.weight().size() / 2));
  }
  state.counters["bytes_per_second"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Stream)->Arg(4096 * 4096 * 2)->ArgName("bytes")->Unit(benchmark::kMicrosecond);

#if defined(__x86_64__) && defined(__GNUC__)
// The sum of every lane of the accumulators: what keeps their work from being optimized away.
__attribute__((target("avx512f"))) float lane_total(const __m512 (&acc)[12]) {
  alignas(64) float lanes[16];
  float total = 0;
  for (const __m512& a : acc) {
    _mm512_store_ps(lanes, a);
    for (float lane : lanes) total += lane;
  }
  return total;
}

// 12 independent accumulators (more than either instruction's latency times its throughput), `steps` rounds.
__attribute__((target("avx512f,fma"))) float fma_rounds(long steps) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512 x = _mm512_set1_ps(1e-8f);
  for (long s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(x, x, acc[i]);
    __asm__ volatile("" : "+v"(x));  // x unknown to the compiler each round: no folding
  }
  return lane_total(acc);
}
__attribute__((target("avx512f,avx512bf16"))) float pair_rounds(long steps) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x32ab32ab);  // pairs of about 2e-8
  for (long s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
    __asm__ volatile("" : "+v"(x));
  }
  return lane_total(acc);
}
#endif

void BM_Peak(benchmark::State& state) {
  const bool pairs = state.range(0) != 0;
#if defined(__x86_64__) && defined(__GNUC__)
  const attend::Isa needed = pairs ? attend::Isa::avx512_bf16 : attend::Isa::avx512;
  if (!attend::detail::cpu_has(needed)) {
    state.SkipWithError(pairs ? "this CPU has no AVX512-BF16" : "this CPU has no AVX-512");
    return;
  }
  constexpr long steps = 1 << 20;
  for (auto _ : state) benchmark::DoNotOptimize(pairs ? pair_rounds(steps) : fma_rounds(steps));
  const double flops_per_instruction = pairs ? 64 : 32;
  state.counters["FLOPS"] = benchmark::Counter(12.0 * steps * flops_per_instruction *
                                                   static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
#else
  state.SkipWithError("x86-64 only");
#endif
}
BENCHMARK(BM_Peak)->Arg(0)->Arg(1)->ArgName("kind")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
