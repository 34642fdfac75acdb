// How long does a forward pass of attend's attention take, and at how many FLOP/s?
//
//   ./build/bench/bench_attention --benchmark_filter=MultiHead
//
// Multi-head self-attention on (batch, n, d) with h heads, eval mode, no mask. Its exact floating-point work:
//   projections  4 GEMMs of (batch*n, d) x (d, d)            8 * batch * n * d^2
//   scores       batch*h GEMMs of (n, d/h) x (d/h, n)         2 * batch * n^2 * d
//   weights @ V  batch*h GEMMs of (n, n) x (n, d/h)           2 * batch * n^2 * d
// (softmax and bias additions are O(batch * h * n^2) and not counted).
//
//   ./build/bench/bench_attention --benchmark_filter=Projection
//
// One projection Y = X W^T of (rows, in) by (out, in), as the attention modules run it (detail/project_rows.hpp):
// kept = 0 reading W^T from W (each panel transposed as the row kernel packs it), kept = 1 from a kept transposed copy
// of W (detail/transposed_weight.hpp), its comparison with W on every call included. 2 * rows * in * out FLOPs.
//
//   ./build/bench/bench_attention --benchmark_filter=RowKernel
//
// The row kernel alone (detail/kernels/products-inl.hpp) on the avx2 level: Y (rows, out) = X (rows, in) B (in, out),
// B's rows `out` apart, in panels of tuning::product_panel_depth by product_panel_width. packed = 1 as attend runs
// it (each panel copied into micro-panels from tuning::packed_product_rows rows on), packed = 0 with each panel read
// in place, as products of fewer rows run, for comparison. Skipped on a CPU without AVX2.
//
//   ./build/bench/bench_attention --benchmark_filter='Conv1dWidth|Conv1dBackwardWidth|LinearWidth'
//
// Conv1d (1, 256, d -> d, k = 3, 'same', with bias) and Linear (1, 256, d -> d, with bias) forward, float, on the
// level chosen, d from 64 to 1024: how close each width comes to the best. 2 * 256 * k * d^2 and 2 * 256 * d^2 FLOPs.
// Conv1dBackwardWidth: Conv1d's backward pass (input and weight gradients, 2 * 2 * 256 * k * d^2 FLOPs).
#include <attend/attend.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/transposed_weight.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>

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

template <class Scalar>
void Projection(benchmark::State& state) {
  const attend::Index rows = state.range(0), in = state.range(1), out = state.range(2);
  const bool kept = state.range(3) != 0;
  const attend::Matrix<Scalar> X = attend::Matrix<Scalar>::Random(rows, in);  // (rows, in)
  const attend::Matrix<Scalar> W = attend::Matrix<Scalar>::Random(out, in);   // (out, in)
  const attend::Vector<Scalar> no_bias;
  attend::Matrix<Scalar> Y(rows, out);  // (rows, out)
  attend::detail::TransposedWeight<Scalar> transposed;
  for (auto _ : state) {
    attend::detail::project_rows<Scalar>(X, {attend::detail::projection(W, no_bias, Y.data(),
                                                                        kept ? &transposed : nullptr)});
    benchmark::DoNotOptimize(Y.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate);
}

// Times module.forward(X) on X (1, 256, d); flops_per_call its multiply-adds times 2.
template <class Module>
void time_width(benchmark::State& state, const Module& module, attend::Index d, double flops_per_call) {
  attend::Tensor3<float> X(1, 256, d);  // (1, 256, d)
  X.setRandom();
  for (auto _ : state) {
    attend::Tensor3<float> Y = module.forward(X);  // (1, 256, d)
    benchmark::DoNotOptimize(Y.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(flops_per_call, benchmark::Counter::kIsIterationInvariantRate);
}

void Conv1dWidth(benchmark::State& state) {
  const attend::Index d = state.range(0), k = 3;
  attend::Generator generator(3);
  const attend::Conv1d<float> conv(d, d, k, true, generator);
  time_width(state, conv, d, 2.0 * 256 * k * d * d);
}

// Conv1d's backward pass at the same widths: the input gradient (a correlation of dY with the flipped taps, as many
// products as the forward) and the weight gradient, after one recorded forward call outside the timing.
void Conv1dBackwardWidth(benchmark::State& state) {
  const attend::Index d = state.range(0), k = 3;
  attend::Generator generator(3);
  attend::Conv1d<float> conv(d, d, k, true, generator);
  attend::Tensor3<float> X(1, 256, d), dY(1, 256, d);  // (1, 256, d) each
  X.setRandom();
  dY.setRandom();
  benchmark::DoNotOptimize(conv(X).data());
  for (auto _ : state) benchmark::DoNotOptimize(conv.backward(dY).data());
  state.counters["FLOPS"] =
      benchmark::Counter(2 * 2.0 * 256 * k * d * d, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(attend::isa_name(attend::active_isa()));
}

void LinearWidth(benchmark::State& state) {
  const attend::Index d = state.range(0);
  attend::Generator generator(4);
  const attend::Linear<float> linear(d, d, true, generator);
  time_width(state, linear, d, 2.0 * 256 * d * d);
}

template <class Scalar>
void RowKernel(benchmark::State& state) {
  const attend::Index rows = state.range(0), in = state.range(1), out = state.range(2);
  const bool packed = state.range(3) != 0;
#ifdef ATTEND_X86_DISPATCH
  if (!attend::detail::cpu_has(attend::Isa::avx2)) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  const attend::Matrix<Scalar> X = attend::Matrix<Scalar>::Random(rows, in);  // (rows, in)
  const attend::Matrix<Scalar> B = attend::Matrix<Scalar>::Random(in, out);   // (in, out)
  attend::Matrix<Scalar> Y(rows, out);                                          // (rows, out)
  const auto& kernel = attend::detail::kernels_for<Scalar>(attend::Isa::avx2);
  for (auto _ : state) {
    if (packed) {
      kernel.times_matrix(attend::detail::x_rows(X.data(), in, rows), in, attend::detail::b_rows(B.data(), out), out,
                          attend::detail::y_into(Y.data(), out));
    } else {  // the same panels of B, read in place
      constexpr attend::Index depth = attend::detail::tuning::product_panel_depth<Scalar>;
      constexpr attend::Index width = attend::detail::tuning::product_panel_width<Scalar>;
      for (attend::Index o0 = 0; o0 < out; o0 += width)
        for (attend::Index k0 = 0; k0 < in; k0 += depth) {
          const attend::Index columns = std::min(width, out - o0), steps = std::min(depth, in - k0);
          const Scalar* panel = B.data() + k0 * out + o0;
          if (k0 > 0) {
            attend::detail::avx2::rows_times_panel<true, Scalar>(X.data() + k0, in, rows, steps, panel, out, columns,
                                                                 false, nullptr, Y.data() + o0, out);
          } else {
            attend::detail::avx2::rows_times_panel<false, Scalar>(X.data() + k0, in, rows, steps, panel, out, columns,
                                                                  false, nullptr, Y.data() + o0, out);
          }
        }
    }
    benchmark::DoNotOptimize(Y.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate);
#else
  static_cast<void>(rows + in + out + packed);
  state.SkipWithError("the avx2 level exists on x86-64 only");
#endif
}

BENCHMARK_TEMPLATE(RowKernel, float)
    ->ArgNames({"rows", "in", "out", "packed"})
    ->ArgsProduct({{64, 256}, {256}, {256}, {0, 1}})
    ->ArgsProduct({{256}, {1024}, {1024}, {0, 1}})
    ->ArgsProduct({{128}, {64}, {256}, {0, 1}})
    ->ArgsProduct({{128}, {256}, {64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(RowKernel, double)
    ->ArgNames({"rows", "in", "out", "packed"})
    ->ArgsProduct({{256}, {256, 1024}, {256}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(Conv1dWidth)->ArgName("d")->Arg(64)->Arg(128)->Arg(256)->Arg(384)->Arg(512)->Arg(768)->Arg(1024)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(Conv1dBackwardWidth)->ArgName("d")->Arg(64)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(LinearWidth)->ArgName("d")->Arg(64)->Arg(128)->Arg(256)->Arg(384)->Arg(512)->Arg(768)->Arg(1024)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_TEMPLATE(Projection, float)
    ->ArgNames({"rows", "in", "out", "kept"})
    ->ArgsProduct({{8, 256}, {100}, {100}, {0, 1}})
    ->ArgsProduct({{8, 256}, {256}, {256}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

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
