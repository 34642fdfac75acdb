// How long does a forward pass of attend's attention take, and at how many FLOP/s?
//
//   ./build/bench/bench_attention --benchmark_filter=MultiHead
//
// Multi-head self-attention on (batch, n, d) with h heads, eval mode, no mask. Its exact floating-point work:
//   projections  4 GEMMs of (batch*n, d) x (d, d)            8 * batch * n * d^2
//   scores       batch*h GEMMs of (n, d/h) x (d/h, n)         2 * batch * n^2 * d
//   weights @ V  batch*h GEMMs of (n, n) x (n, d/h)           2 * batch * n^2 * d
// (softmax and bias additions are O(batch * h * n^2) and not counted).
#include <attend/attend.hpp>
#include <benchmark/benchmark.h>

namespace {

template <class Scalar>
void MultiHeadSelfAttention(benchmark::State& state) {
  const attend::Index batch = state.range(0), n = state.range(1), d = state.range(2), heads = state.range(3);
  attend::Generator generator(1);
  attend::MultiHeadAttention<Scalar> attention(d, d, d, d, heads, Scalar(0), false, generator);
  attention.eval();
  attend::Tensor3<Scalar> X(batch, n, d);  // (batch, n, d)
  X.setRandom();
  for (auto _ : state) {
    attend::Tensor3<Scalar> Y = attention(X, X, X);  // (batch, n, d)
    benchmark::DoNotOptimize(Y.data());
  }
  const double flops = 8.0 * batch * n * d * d + 4.0 * batch * n * n * d;
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetComplexityN(n);
}

BENCHMARK_TEMPLATE(MultiHeadSelfAttention, float)
    ->ArgNames({"batch", "n", "d", "heads"})
    ->Args({2, 4, 100, 5})
    ->Args({8, 128, 256, 8})
    ->Args({1, 1024, 256, 8})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(MultiHeadSelfAttention, double)
    ->ArgNames({"batch", "n", "d", "heads"})
    ->Args({2, 4, 100, 5})
    ->Args({8, 128, 256, 8})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
