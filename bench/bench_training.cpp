// What does learning cost? A training step of multi-head self-attention, forward + backward, against the forward pass
// alone, on each path; and the peak memory of a long causal training step on the tiled path.
//
//   ./build/bench/bench_training --benchmark_filter=Step --benchmark_repetitions=5 --benchmark_report_aggregates_only
//   ./build/bench/bench_training --benchmark_filter=LongCausal       (run alone: the peak resident memory it reports
//                                                                      is the process's)
//
// Step/<path>/<pass>: MultiHeadAttention<float> on (batch, n, d) with h heads, training mode, dropout 0, no mask;
// pass 0 is operator() alone, pass 1 operator() then backward(dY). StepCausal: the training step under a causal
// mask, where both paths skip the keys a block of queries does not see. The backward pass makes about 2.5 times the
// forward's products on the direct path (dV, dP, dQ, dK and the four projections' dX and dW) and recomputes the
// weights and dP on the tiled path, so forward + backward takes 3-4 times the forward.
// LongCausal: one causal training step of one head of d = 64 over n = 16384 keys on the tiled path (the direct path
// would hold 16384^2 weights, 1 GiB); the counter peak_MiB is the process's peak resident memory (getrusage).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <attend/attend.hpp>

namespace {

// One training step (or forward pass) on the path asked for, under the mask given.
void time_step(benchmark::State& state, const attend::Mask& mask) {
  const attend::Index batch = state.range(0), n = state.range(1), d = state.range(2), heads = state.range(3);
  const bool tiled = state.range(4) != 0, backward = state.range(5) != 0;
  attend::Generator generator(1);
  attend::MultiHeadAttention<float> attention(d, d, d, d, heads, 0.0f, false, generator);
  attention.set_path(tiled ? attend::AttentionPath::tiled : attend::AttentionPath::direct);
  attend::Tensor3<float> X(batch, n, d), dY(batch, n, d);  // (batch, n, d) each
  X.setRandom();
  dY.setRandom();
  for (auto _ : state) {
    attend::Tensor3<float> Y = attention(X, X, X, mask);  // (batch, n, d)
    benchmark::DoNotOptimize(Y.data());
    if (backward) {
      attend::AttentionGradients<float> g = attention.backward(dY);
      benchmark::DoNotOptimize(g.queries.data());
    }
  }
  state.SetLabel(attend::isa_name(attend::active_isa()));
}

void Step(benchmark::State& state) { time_step(state, attend::Mask()); }
void StepCausal(benchmark::State& state) { time_step(state, attend::Mask::causal()); }

BENCHMARK(Step)
    ->ArgNames({"batch", "n", "d", "heads", "tiled", "backward"})
    ->ArgsProduct({{1}, {1024, 2048, 4096}, {64}, {1}, {0, 1}, {0, 1}})
    ->ArgsProduct({{1}, {1024, 2048}, {256}, {8}, {0, 1}, {0, 1}})
    ->ArgsProduct({{8}, {128}, {256}, {8}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(StepCausal)
    ->ArgNames({"batch", "n", "d", "heads", "tiled", "backward"})
    ->ArgsProduct({{1}, {512, 1024}, {64}, {1}, {0, 1}, {1}})
    ->ArgsProduct({{8}, {128}, {256}, {8}, {0, 1}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void LongCausal(benchmark::State& state) {
  const attend::Index n = state.range(0), d = 64;
  attend::Generator generator(2);
  attend::MultiHeadAttention<float> attention(d, d, d, d, 1, 0.0f, false, generator);
  attention.set_path(attend::AttentionPath::tiled);
  attend::Tensor3<float> X(1, n, d), dY(1, n, d);  // (1, n, d) each
  X.setRandom();
  dY.setRandom();
  for (auto _ : state) {
    attend::Tensor3<float> Y = attention(X, X, X, attend::Mask::causal());  // (1, n, d)
    attend::AttentionGradients<float> g = attention.backward(dY);
    benchmark::DoNotOptimize(g.queries.data());
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

BENCHMARK(LongCausal)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
