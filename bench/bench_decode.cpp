// Decoding, grouped-query prefill and windows: how close attend's attention comes to what bounds it.
//
//   ./build/bench/bench_decode --benchmark_filter='Decode|Stream'
//
// Decode/<queries>/<keys>/<heads>/<kv_heads>/<head_dim>: one step of decoding, float, batch 1 — `queries` queries (1,
// or 2-8 as speculative decoding checks) against a KVCache holding `keys` steps, scaled_dot_product_attention's
// cached overload into a preallocated output. A step reads every cached key and value once: bytes = 2 * keys *
// kv_heads * head_dim * 4. The program keeps enough caches (each used in turn) that together they exceed the last-level
// cache, so each step reads its cache from memory, as a model's layers do. Stream/<keys>/<kv_heads>/<head_dim>: the
// bound, a sum over the same bytes of the same rotation of caches (stream_read.hpp, on as many threads as the step,
// in pieces). The "bytes_per_second" counters compare directly. DecodeBf16 and StreamBf16: the same in bfloat16, the
// cache at half the bytes (bytes = 2 * keys * kv_heads * head_dim * 2).
//
//   ./build/bench/bench_decode --benchmark_filter=Window
//
// Window/<n>/<W>: causal self-attention over n steps with Mask::window(W - 1, 0) (Mistral's sliding window), 8 heads of
// 64, 2 key/value heads, forward: the time per step stays flat as n grows (O(n W)); Causal/<n> is the full causal mask.
// Blocks/<n>/<W>: the same n steps cut into n / W independent blocks of W steps, every query of a block seeing all W
// keys of its block and no other (one call of batch n / W, no mask): W keys a query, as the full window, with no
// partly masked tile. Window/16384/512 against Blocks/16384/512 is the price of the window's ragged edges.
//
//   ./build/bench/bench_decode --benchmark_filter=Prefill
//
// Prefill/<n>/<heads>/<kv_heads>/<backward>: causal grouped-query attention over n steps, head_dim 128, batch 1,
// forward (backward = 0) or forward and backward (1). FLOPS counts 4 n^2 d heads / 2 (the causal half) per forward,
// 2.5 times that for both.
#include <benchmark/benchmark.h>

#include <attend/attend.hpp>
#include <memory>
#include <vector>

#include "stream_read.hpp"

namespace {

using attend::Index;

// Caches filled with random steps, used in turn: together at least 1 GiB, more than any last-level cache here.
template <class Scalar>
struct Caches {
  std::vector<std::unique_ptr<attend::KVCache<Scalar>>> caches;
  std::size_t next = 0;

  Caches(Index keys, Index kv_heads, Index head_dim) {
    const double bytes = 2.0 * keys * kv_heads * head_dim * sizeof(Scalar);
    const auto count = static_cast<std::size_t>(std::max(2.0, (1 << 30) / bytes));
    attend::Tensor3<float> K(1, keys, kv_heads * head_dim), V(1, keys, kv_heads * head_dim);  // (1, keys, G * d)
    K.setRandom();
    V.setRandom();
    const attend::Tensor3<Scalar> k = K.cast<Scalar>(), v = V.cast<Scalar>();
    for (std::size_t i = 0; i < count; ++i) {
      caches.push_back(std::make_unique<attend::KVCache<Scalar>>(1, kv_heads, head_dim, keys + 8));
      caches.back()->append(k, v);
    }
  }
  attend::KVCache<Scalar>& take() {
    attend::KVCache<Scalar>& cache = *caches[next];
    next = (next + 1) % caches.size();
    return cache;
  }
};

template <class Scalar>
void Decode(benchmark::State& state) {
  const Index queries = state.range(0), keys = state.range(1), heads = state.range(2), kv_heads = state.range(3),
              d = state.range(4);
  Caches<Scalar> caches(keys, kv_heads, d);
  attend::Tensor3<float> q(1, queries, heads * d);
  q.setRandom();
  const attend::Tensor3<Scalar> Q = q.cast<Scalar>();
  attend::Tensor3<Scalar> out(1, queries, heads * d);  // (1, queries, H * d), as Q
  const attend::Mask causal = attend::Mask::causal();
  const attend::ScoreOptions<Scalar> options;
  for (auto _ : state) {
    attend::scaled_dot_product_attention(Q, caches.take(), heads, causal, options, nullptr, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * keys * kv_heads * d *
                          static_cast<std::int64_t>(sizeof(Scalar)));
}

// The bytes of a cache of Scalar read as floats: a row of kv_heads * d Scalars is `width` floats.
template <class Scalar>
void Stream(benchmark::State& state) {
  const Index keys = state.range(0), kv_heads = state.range(1), d = state.range(2);
  Caches<Scalar> caches(keys, kv_heads, d);
  const Index width = kv_heads * d * static_cast<Index>(sizeof(Scalar)) / 4, pieces = 8;
  std::vector<float> sums(static_cast<std::size_t>(pieces));
  for (auto _ : state) {
    const attend::KVCache<Scalar>& cache = caches.take();
    const float* storage[2] = {reinterpret_cast<const float*>(cache.key_storage().data()),
                               reinterpret_cast<const float*>(cache.value_storage().data())};
    attend::detail::parallel_for(pieces, 1e9, [&](Index piece, int) {
      const Index rows = (keys + pieces - 1) / pieces, r0 = piece * rows, n = std::min(rows, keys - r0);
      float total = 0;
      for (const float* s : storage) total += attend_bench::stream_sum(s + r0 * width, std::max(n, Index(0)) * width);
      sums[static_cast<std::size_t>(piece)] = total;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * keys * kv_heads * d *
                          static_cast<std::int64_t>(sizeof(Scalar)));
}

void Window(benchmark::State& state) {
  const Index n = state.range(0), window = state.range(1), heads = 8, kv_heads = 2, d = 64;
  attend::Tensor3<float> Q(1, n, heads * d), K(1, n, kv_heads * d), V(1, n, kv_heads * d), out(1, n, heads * d);
  Q.setRandom();
  K.setRandom();
  V.setRandom();
  const attend::Mask mask =
      window > 0 ? attend::Mask::causal() && attend::Mask::window(window - 1, 0) : attend::Mask::causal();
  const attend::ScoreOptions<float> options;
  for (auto _ : state) {
    attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, mask, options, nullptr, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(n) / 1e6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void Blocks(benchmark::State& state) {
  const Index n = state.range(0), window = state.range(1), heads = 8, kv_heads = 2, d = 64, blocks = n / window;
  attend::Tensor3<float> Q(blocks, window, heads * d), K(blocks, window, kv_heads * d);    // (n / W, W, h * d)
  attend::Tensor3<float> V(blocks, window, kv_heads * d), out(blocks, window, heads * d);  // (n / W, W, h * d)
  Q.setRandom();
  K.setRandom();
  V.setRandom();
  const attend::ScoreOptions<float> options;
  for (auto _ : state) {
    attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, attend::Mask(), options, nullptr, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(n) / 1e6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void Prefill(benchmark::State& state) {
  const Index n = state.range(0), heads = state.range(1), kv_heads = state.range(2), d = 128;
  const bool backward = state.range(3) != 0;
  attend::Tensor3<float> Q(1, n, heads * d), K(1, n, kv_heads * d), V(1, n, kv_heads * d), dO(1, n, heads * d);
  Q.setRandom();
  K.setRandom();
  V.setRandom();
  dO.setRandom();
  attend::Tensor3<float> out(1, n, heads * d), lse;
  const attend::Mask causal = attend::Mask::causal();
  const attend::ScoreOptions<float> options;
  for (auto _ : state) {
    attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, causal, options, &lse, out);
    if (backward) {
      auto grads = attend::scaled_dot_product_attention_backward(Q, K, V, out, lse, dO, heads, kv_heads, causal);
      benchmark::DoNotOptimize(grads.queries.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 2.0 * n * n * d * heads * (backward ? 3.5 : 1.0);
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// Llama-3-8B's attention (32 heads, 8 key/value heads, head_dim 128) and a narrower GQA shape.
void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"queries", "keys", "heads", "kv_heads", "head_dim"})
      ->Args({1, 4096, 32, 8, 128})
      ->Args({4, 4096, 32, 8, 128})
      ->Args({8, 4096, 32, 8, 128})
      ->Args({1, 16384, 32, 8, 128})
      ->Args({1, 4096, 8, 2, 64})
      ->Args({1, 4096, 16, 1, 64})
      ->UseRealTime();
}
void stream_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"keys", "kv_heads", "head_dim"})
      ->Args({4096, 8, 128})
      ->Args({16384, 8, 128})
      ->Args({4096, 2, 64})
      ->Args({4096, 1, 64})
      ->UseRealTime();
}
BENCHMARK_TEMPLATE(Decode, float)->Name("Decode")->Apply(decode_shapes);
BENCHMARK_TEMPLATE(Stream, float)->Name("Stream")->Apply(stream_shapes);
BENCHMARK_TEMPLATE(Decode, attend::bfloat16)->Name("DecodeBf16")->Apply(decode_shapes);
BENCHMARK_TEMPLATE(Stream, attend::bfloat16)->Name("StreamBf16")->Apply(stream_shapes);
BENCHMARK(Window)
    ->ArgNames({"n", "W"})
    ->Args({1024, 256})
    ->Args({4096, 256})
    ->Args({16384, 256})
    ->Args({16384, 512})
    ->UseRealTime();
BENCHMARK(Blocks)->ArgNames({"n", "W"})->Args({16384, 512})->UseRealTime();
BENCHMARK(Window)->Name("Causal")->ArgNames({"n", "W"})->Args({1024, 0})->Args({4096, 0})->UseRealTime();
BENCHMARK(Prefill)
    ->ArgNames({"n", "heads", "kv_heads", "backward"})
    ->Args({1024, 32, 8, 0})
    ->Args({1024, 32, 8, 1})
    ->Args({2048, 8, 2, 0})
    ->UseRealTime();
BENCHMARK_MAIN();
