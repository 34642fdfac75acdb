// One module, many threads: 8 std::threads call the const, reentrant forward passes — MultiHeadAttention::forward and
// DotProductAttention::forward (direct and tiled paths, with and without a workspace per thread), Linear, RNN and
// Conv1d — many times at once, and every result must equal, bit for bit, the one computed serially before. Run
// under ThreadSanitizer in CI (.ci/run), where a data race is a failure.
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <support/checks.hpp>
#include <support/random_tensor.hpp>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

using attend::AttentionPath;
using attend::Index;
using attend::Mask;
using attend::Tensor3;
using attend::ValidLens;
using attend_test::random_tensor;
using attend_test::same_bits;

namespace {

constexpr int thread_count = 8;
constexpr int calls_per_thread = 20;

// Runs call(thread, i) for every thread and i at once; returns how many results differed from `expected`.
template <class Scalar>
int mismatches(const Tensor3<Scalar>& expected, const std::function<Tensor3<Scalar>(int)>& call) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < calls_per_thread; ++i)
        if (!same_bits(expected, call(t))) ++wrong;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return wrong.load();
}

}  // namespace

TEMPLATE_TEST_CASE("MultiHeadAttention::forward from 8 threads at once equals the serial result", "[threads]", float,
                   double) {
  // Small (the direct path) and large (the tiled one, automatically), self- and cross-attention.
  for (const Index n : {Index(6), Index(400)}) {
    CAPTURE(n);
    attend::MultiHeadAttention<TestType> attention(16, 16, 16, 32, 4, TestType(0.2), true);
    attention.eval();
    const Tensor3<TestType> X = random_tensor<TestType>(2, n, 16, 1), Y = random_tensor<TestType>(2, n / 2 + 1, 16, 2);
    const Mask mask = Mask(ValidLens{n, n / 3}) && Mask::causal();
    const Tensor3<TestType> self = attention.forward(X, X, X, mask);
    const Tensor3<TestType> cross = attention.forward(Y, X, X, ValidLens{n - 1, 1});
    REQUIRE(mismatches<TestType>(self, [&](int) { return attention.forward(X, X, X, mask); }) == 0);
    std::vector<attend::AttentionWorkspace<TestType>> workspaces(thread_count);
    REQUIRE(mismatches<TestType>(cross, [&](int t) {
              return attention.forward(Y, X, X, ValidLens{n - 1, 1}, workspaces[static_cast<std::size_t>(t)]);
            }) == 0);
  }
}

TEMPLATE_TEST_CASE("DotProductAttention::forward from 8 threads at once equals the serial result", "[threads]", float,
                   double) {
  for (const AttentionPath path : {AttentionPath::direct, AttentionPath::tiled}) {
    CAPTURE(path);
    attend::DotProductAttention<TestType> attention(TestType(0.5));  // training mode: forward() ignores dropout
    attention.set_path(path);
    const Tensor3<TestType> Q = random_tensor<TestType>(3, 40, 8, 1), K = random_tensor<TestType>(3, 50, 8, 2),
                            V = random_tensor<TestType>(3, 50, 5, 3);
    const Tensor3<TestType> expected = attention.forward(Q, K, V, ValidLens{50, 7, 0});
    REQUIRE(mismatches<TestType>(expected, [&](int) { return attention.forward(Q, K, V, ValidLens{50, 7, 0}); }) == 0);
  }
}

TEMPLATE_TEST_CASE("Linear, RNN and Conv1d from 8 threads at once equal the serial result", "[threads]", float,
                   double) {
  const attend::Linear<TestType> linear(12, 7);
  const attend::RNN<TestType> rnn(12, 9);
  const attend::Conv1d<TestType> conv(12, 6, 3);
  const Tensor3<TestType> X = random_tensor<TestType>(4, 30, 12, 5);
  const Tensor3<TestType> by_linear = linear.forward(X), by_rnn = rnn.forward(X), by_conv = conv.forward(X);
  REQUIRE(mismatches<TestType>(by_linear, [&](int) { return linear.forward(X); }) == 0);
  REQUIRE(mismatches<TestType>(by_rnn, [&](int) { return rnn.forward(X); }) == 0);
  REQUIRE(mismatches<TestType>(by_conv, [&](int) { return conv.forward(X); }) == 0);
}
