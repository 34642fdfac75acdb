// How long does one MultiHeadAttention<float> forward pass take in the build at hand?
//
//   ./build/bench/forward_time [rounds]          one line per shape: the median of `rounds` timed calls, in us
//
// Self-attention, evaluation mode, no mask, 1 thread, on the sweep of bench_vs_libtorch. Built twice by CMake: as
// forward_time with the project's flags and no -m option (what a consumer's default build gets), and as
// forward_time_native with -march=native. bench/compare_builds.sh runs the two in alternation and prints one table.
#include <attend/attend.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  attend::set_num_threads(1);
  struct Shape {
    attend::Index batch, n, d, heads;
  };
  const Shape shapes[] = {{2, 4, 100, 5},   {8, 128, 256, 8},  {4, 512, 256, 8}, {1, 1024, 256, 8},
                          {1, 2048, 64, 1}, {1, 2048, 256, 8}, {1, 8192, 64, 1}};
  std::printf("isa %s\n", attend::isa_name(attend::active_isa()));
  for (const Shape& s : shapes) {
    attend::Generator generator(1);
    attend::MultiHeadAttention<float> attention(s.d, s.d, s.d, s.d, s.heads, 0.0f, false, generator);
    attention.eval();
    attend::Tensor3<float> X(s.batch, s.n, s.d);  // (batch, n, d)
    for (attend::Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform(-1.0f, 1.0f);
    attend::Tensor3<float> Y = attention(X, X, X);  // (batch, n, d); the first call sizes the workspace
    // Calls per timed sample: about 20 ms of work.
    const auto t0 = std::chrono::steady_clock::now();
    Y = attention(X, X, X);
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int calls = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-9)));
    std::vector<double> samples;
    for (int r = 0; r < rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) Y = attention(X, X, X);
      samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                        calls);
    }
    std::sort(samples.begin(), samples.end());
    std::printf("(%ld,%ld,%ld,%ld) %.2f\n", static_cast<long>(s.batch), static_cast<long>(s.n),
                static_cast<long>(s.d), static_cast<long>(s.heads), samples[samples.size() / 2]);
  }
}
