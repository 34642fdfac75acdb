// How does each encoder's forward time grow with n, with d and, for the CNN, with k — and at how many FLOP/s?
//
//   ./build/bench/bench_encoders
//   ./build/bench/bench_encoders --benchmark_out=encoders.json --benchmark_out_format=json
//   ./build/bench/bench_encoders --benchmark_filter=SelfAttention
//
// The three encoders of attend/sequence_encoders.hpp, float, one layer, one sequence (batch 1), evaluation only.
// Each family varies one size and fits Google Benchmark's complexity to it (the "_BigO" and "_RMS" lines):
//
//   family                  varies   fixed                     fitted against            the chapter says
//   SelfAttention_in_n      n        d = 32, 2 heads of 16     oNSquared                 O(n^2 d)
//   SelfAttention_in_d      d        n = 1448, heads of 16     its exact FLOP count      (the n^2 d term: O(d))
//   RNN_in_n                n        d = 64                    oN                        O(n d^2)
//   RNN_in_d                d        n = 256                   oNSquared                 (O(d^2))
//   CNN_in_n                n        d = 64, k = 3             oN                        O(k n d^2)
//   CNN_in_d                d        n = 256, k = 3            oNSquared                 (O(d^2))
//   CNN_in_k                k        n = 256, d = 256          oN                        (O(k))
//
// The FLOPS counter is the encoder's exact GEMM work per forward (flops(batch, n): multiply-adds count 2; softmax,
// tanh and biases are not counted) divided by the time. Sizes stay where the leading term dominates: self-attention's
// 8 n d^2 projections are at most 1/8 of its 4 n^2 d (n >= 16 d), and the RNN's W_hh (d^2 floats) stays within a
// 1.25 MB L2 cache (d <= 512), past which every step of one sequence streams it from L3 and slows down by a constant
// factor. examples/compare_encoders.cpp fits the same exponents by least squares, with all sizes interleaved, and
// also measures the table's other two columns.
#include <attend/random.hpp>
#include <attend/sequence_encoders.hpp>
#include <benchmark/benchmark.h>
#include <cstdint>

namespace {

using attend::Index;
using attend::Tensor3;

// (batch, n, d), uniform in [-1, 1).
Tensor3<float> random_input(Index batch, Index n, Index d, std::uint64_t seed) {
  attend::Generator generator(seed);
  Tensor3<float> X(batch, n, d);  // (batch, n, d)
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform<float>(-1.0f, 1.0f);
  return X;
}

// Times encoder(X) on X (1, n, d), and reports its FLOP rate.
template <class Encoder>
void time_forward(benchmark::State& state, Encoder& encoder, Index n, Index d) {
  const Tensor3<float> X = random_input(1, n, d, 1);  // (1, n, d)
  for (auto _ : state) {
    Tensor3<float> Y = encoder(X);  // (1, n, d)
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(encoder.flops(1, n), benchmark::Counter::kIsIterationInvariantRate);
}

constexpr Index head_width = 16;

// ---- self-attention ---------------------------------------------------------------------------------------------

void SelfAttention_in_n(benchmark::State& state) {
  const Index n = state.range(0), d = 32;
  attend::Generator generator(1);
  attend::SelfAttentionEncoder<float> encoder(d, d / head_width, 1, n, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(n);
}
BENCHMARK(SelfAttention_in_n)
    ->ArgNames({"n"})
    ->RangeMultiplier(2)
    ->Range(512, 4096)
    ->Complexity(benchmark::oNSquared)
    ->Unit(benchmark::kMillisecond);

// At fixed n = 1448 the exact count 4 n^2 d + 8 n d^2 is linear in d up to the projections' share; the fit is
// against that count itself.
constexpr Index attention_d_n = 1448;
double attention_flops_in_d(benchmark::IterationCount d) {
  const double n = attention_d_n, width = static_cast<double>(d);
  return 4 * n * n * width + 8 * n * width * width;
}

void SelfAttention_in_d(benchmark::State& state) {
  const Index d = state.range(0);
  attend::Generator generator(2);
  attend::SelfAttentionEncoder<float> encoder(d, d / head_width, 1, attention_d_n, generator);
  time_forward(state, encoder, attention_d_n, d);
  state.SetComplexityN(d);
}
BENCHMARK(SelfAttention_in_d)
    ->ArgNames({"d"})
    ->DenseRange(16, 128, 16)
    ->Complexity(attention_flops_in_d)
    ->Unit(benchmark::kMillisecond);

// ---- RNN --------------------------------------------------------------------------------------------------------

void RNN_in_n(benchmark::State& state) {
  const Index n = state.range(0), d = 64;
  attend::Generator generator(3);
  const attend::RNNEncoder<float> encoder(d, 1, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(n);
}
BENCHMARK(RNN_in_n)
    ->ArgNames({"n"})
    ->RangeMultiplier(2)
    ->Range(256, 4096)
    ->Complexity(benchmark::oN)
    ->Unit(benchmark::kMicrosecond);

void RNN_in_d(benchmark::State& state) {
  const Index n = 256, d = state.range(0);
  attend::Generator generator(4);
  const attend::RNNEncoder<float> encoder(d, 1, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(d);
}
BENCHMARK(RNN_in_d)
    ->ArgNames({"d"})
    ->DenseRange(128, 512, 64)
    ->Complexity(benchmark::oNSquared)
    ->Unit(benchmark::kMicrosecond);

// ---- CNN --------------------------------------------------------------------------------------------------------

void CNN_in_n(benchmark::State& state) {
  const Index n = state.range(0), d = 64, k = 3;
  attend::Generator generator(5);
  const attend::CNNEncoder<float> encoder(d, k, 1, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(n);
}
BENCHMARK(CNN_in_n)
    ->ArgNames({"n"})
    ->RangeMultiplier(2)
    ->Range(256, 4096)
    ->Complexity(benchmark::oN)
    ->Unit(benchmark::kMicrosecond);

void CNN_in_d(benchmark::State& state) {
  const Index n = 256, d = state.range(0), k = 3;
  attend::Generator generator(6);
  const attend::CNNEncoder<float> encoder(d, k, 1, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(d);
}
BENCHMARK(CNN_in_d)
    ->ArgNames({"d"})
    ->RangeMultiplier(2)
    ->Range(128, 1024)
    ->Complexity(benchmark::oNSquared)
    ->Unit(benchmark::kMicrosecond);

void CNN_in_k(benchmark::State& state) {
  const Index n = 256, d = 256, k = state.range(0);
  attend::Generator generator(7);
  const attend::CNNEncoder<float> encoder(d, k, 1, generator);
  time_forward(state, encoder, n, d);
  state.SetComplexityN(k);
}
BENCHMARK(CNN_in_k)
    ->ArgNames({"k"})
    ->Arg(1)
    ->Arg(3)
    ->Arg(5)
    ->Arg(9)
    ->Arg(17)
    ->Complexity(benchmark::oN)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
