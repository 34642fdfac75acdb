// The paths of MultiHeadAttention and DotProductAttention (attention_path.hpp) through the public modules: the tiled
// kernel against the direct path (itself tested against d2l's PyTorch code in test_multi_head_attention and
// test_dot_product_attention) with and without masks, the automatic choice, attention_weights() after each path,
// forward() against operator(), and the same bits for 1 and 2 threads.
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <support/checks.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

using attend::AttentionPath;
using attend::FullyMasked;
using attend::Index;
using attend::Mask;
using attend::Tensor3;
using attend::ValidLens;
using attend_test::path_tolerance;
using attend_test::random_tensor;
using attend_test::same_bits;

namespace {

// The masks a caller can give, for batch 2, q queries, k keys.
std::vector<std::pair<std::string, Mask>> masks(Index q, Index k) {
  Tensor3<bool> keep(2, q, k);  // (batch, q, k): a checkerboard, with row 0 of batch row 1 seeing nothing
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < q; ++i)
      for (Index j = 0; j < k; ++j) keep(b, i, j) = (b == 1 && i == 0) ? false : (i + j) % 2 == 0;
  return {{"none", Mask{}},
          {"valid lengths", ValidLens{k / 2, 0}},
          {"causal", Mask::causal()},
          {"keep tensor", Mask::keep(keep)},
          {"keep tensor, zero rule", Mask::keep(keep).when_fully_masked(FullyMasked::zero)},
          {"valid lengths and causal", Mask(ValidLens{k, k / 3}) && Mask::causal()}};
}

}  // namespace

TEMPLATE_TEST_CASE("MultiHeadAttention: the tiled path gives the direct path's output", "[attention_path]", float,
                   double) {
  for (const Index n : {Index(1), Index(7), Index(130), Index(300)}) {
    for (const auto& [name, mask] : masks(n, n)) {
      CAPTURE(n, name);
      attend::Generator generator(42);
      attend::MultiHeadAttention<TestType> attention(24, 24, 24, 24, 3, TestType(0.5), true, generator);
      attention.eval();
      const Tensor3<TestType> X = random_tensor<TestType>(2, n, 24, 7);
      attention.set_path(AttentionPath::direct);
      const Tensor3<TestType> direct = attention(X, X, X, mask);
      attention.set_path(AttentionPath::tiled);
      const Tensor3<TestType> tiled = attention(X, X, X, mask);
      REQUIRE_THAT(tiled, attend_test::Near(direct, path_tolerance<TestType>()));
      // Cross-attention (queries apart from keys and values) takes three projections instead of one pass.
      const Tensor3<TestType> Y = random_tensor<TestType>(2, n, 24, 8);
      const Tensor3<TestType> cross_tiled = attention(Y, X, X, mask);
      attention.set_path(AttentionPath::direct);
      REQUIRE_THAT(cross_tiled, attend_test::Near(attention(Y, X, X, mask), path_tolerance<TestType>()));
    }
  }
}

TEMPLATE_TEST_CASE("DotProductAttention: the tiled path gives the direct path's output", "[attention_path]", float,
                   double) {
  for (const Index n : {Index(3), Index(200), Index(257)}) {
    for (const auto& [name, mask] : masks(n, n + 5)) {
      CAPTURE(n, name);
      attend::DotProductAttention<TestType> attention(TestType(0.1));
      attention.eval();
      const Tensor3<TestType> Q = random_tensor<TestType>(2, n, 16, 1), K = random_tensor<TestType>(2, n + 5, 16, 2),
                              V = random_tensor<TestType>(2, n + 5, 9, 3);
      attention.set_path(AttentionPath::direct);
      const Tensor3<TestType> direct = attention(Q, K, V, mask);
      attention.set_path(AttentionPath::tiled);
      REQUIRE_THAT(attention(Q, K, V, mask), attend_test::Near(direct, path_tolerance<TestType>()));
    }
  }
}

TEMPLATE_TEST_CASE("The automatic path keeps the weights of small calls and forms none for large ones",
                   "[attention_path]", float, double) {
  attend::MultiHeadAttention<TestType> attention(16, 16, 16, 16, 2, TestType(0));
  attention.eval();
  REQUIRE(attention.path() == AttentionPath::automatic);
  // The seed's size: 2 * 2 heads * 4 * 4 weights, far below the budget: direct, weights kept.
  const Tensor3<TestType> small = random_tensor<TestType>(2, 4, 16, 1);
  attention(small, small, small, ValidLens{3, 2});
  REQUIRE(attention.attention_weights().dimension(0) == 4);
  REQUIRE(attention.attention_weights().dimension(2) == 4);
  // 1 * 2 heads * 512 * 512 weights = 2 MiB in float: above the 1 MiB budget, tiled.
  const Tensor3<TestType> large = random_tensor<TestType>(1, 512, 16, 2);
  const Tensor3<TestType> tiled = attention(large, large, large);
  REQUIRE_THROWS_AS(attention.attention_weights(), std::logic_error);
  REQUIRE_THROWS_WITH(attention.attention_weights(), Catch::Contains("tiled path") &&
                                                         Catch::Contains("set_path(AttentionPath::direct)"));
  // Asking for the direct path keeps them at any size, and gives the same output.
  attention.set_path(AttentionPath::direct);
  REQUIRE_THAT(attention(large, large, large), attend_test::Near(tiled, path_tolerance<TestType>()));
  REQUIRE(attention.attention_weights().dimension(1) == 512);
  // Training with dropout takes the tiled path too, and it drops the weights the direct path drops for the same seed
  // (detail/attention_dropout.hpp).
  attend::MultiHeadAttention<TestType> dropping(16, 16, 16, 16, 2, TestType(0.5));
  dropping.set_path(AttentionPath::tiled);
  dropping.generator().seed(7);
  const Tensor3<TestType> tiled_dropped = dropping(small, small, small, ValidLens{3, 2});
  REQUIRE(dropping.last_call_tiled());
  dropping.set_path(AttentionPath::direct);
  dropping.generator().seed(7);
  REQUIRE_THAT(dropping(small, small, small, ValidLens{3, 2}),
               attend_test::Near(tiled_dropped, path_tolerance<TestType>()));
  REQUIRE(dropping.attention_weights().dimension(0) == 4);
  const Tensor3<TestType> evaluated = dropping.forward(small, small, small, ValidLens{3, 2});
  REQUIRE_FALSE(std::equal(evaluated.data(), evaluated.data() + evaluated.size(), tiled_dropped.data()));
}

TEMPLATE_TEST_CASE("set_path rejects a value outside the enumeration", "[attention_path]", float, double) {
  attend::DotProductAttention<TestType> attention(TestType(0));
  REQUIRE_THROWS_AS(attention.set_path(static_cast<AttentionPath>(7)), std::invalid_argument);
  REQUIRE_THROWS_WITH(attention.set_path(static_cast<AttentionPath>(7)),
                      Catch::Contains("path must be AttentionPath::automatic, direct or tiled, got AttentionPath(7)"));
  REQUIRE(attention.path() == AttentionPath::automatic);
}

TEMPLATE_TEST_CASE("forward() gives operator()'s evaluation-mode output and changes nothing", "[attention_path]",
                   float, double) {
  for (const AttentionPath path : {AttentionPath::direct, AttentionPath::tiled, AttentionPath::automatic}) {
    CAPTURE(path);
    attend::MultiHeadAttention<TestType> attention(12, 10, 8, 20, 4, TestType(0.5), false);
    attention.set_path(path);
    const Tensor3<TestType> Q = random_tensor<TestType>(3, 5, 10, 1), K = random_tensor<TestType>(3, 6, 12, 2),
                            V = random_tensor<TestType>(3, 6, 8, 3);
    const Mask mask = ValidLens{2, 6, 0};
    // In training mode forward() still gives the evaluation-mode result, and keeps no weights.
    REQUIRE(attention.is_training());
    const Tensor3<TestType> from_forward = attention.forward(Q, K, V, mask);
    REQUIRE(attention.attention_weights().size() == 0);
    attention.eval();
    REQUIRE(same_bits(from_forward, attention(Q, K, V, mask)));
    // With a workspace of the caller's, reused across shapes.
    attend::AttentionWorkspace<TestType> workspace;
    REQUIRE(same_bits(from_forward, attention.forward(Q, K, V, mask, workspace)));
    const Tensor3<TestType> other = random_tensor<TestType>(1, 3, 10, 4);
    attention.forward(other, random_tensor<TestType>(1, 2, 12, 5), random_tensor<TestType>(1, 2, 8, 6), {}, workspace);
    REQUIRE(same_bits(from_forward, attention.forward(Q, K, V, mask, workspace)));
  }
}

TEMPLATE_TEST_CASE("operator() reuses its workspace: repeated and interleaved shapes give the same bits",
                   "[attention_path]", float, double) {
  attend::MultiHeadAttention<TestType> attention(16, 16, 16, 32, 4, TestType(0));
  attention.eval();
  const Tensor3<TestType> A = random_tensor<TestType>(2, 300, 16, 1), B = random_tensor<TestType>(3, 5, 16, 2);
  const Tensor3<TestType> first_a = attention(A, A, A), first_b = attention(B, B, B);
  for (int round = 0; round < 3; ++round) {
    REQUIRE(same_bits(first_a, attention(A, A, A)));
    REQUIRE(same_bits(first_b, attention(B, B, B)));
  }
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("Both paths give the same bits with 1 and 2 threads", "[attention_path]", float, double) {
  const int before = attend::num_threads();
  for (const AttentionPath path : {AttentionPath::direct, AttentionPath::tiled}) {
    CAPTURE(path);
    attend::MultiHeadAttention<TestType> attention(64, 64, 64, 64, 4, TestType(0), true);
    attention.eval();
    attention.set_path(path);
    // 2 * 600 rows: three chunks of projection rows; 2 * 4 heads * 5 query blocks of tiled work items.
    const Tensor3<TestType> X = random_tensor<TestType>(2, 600, 64, 9);
    const Mask mask = Mask(ValidLens{600, 333}) && Mask::causal();
    attend::set_num_threads(1);
    const Tensor3<TestType> one = attention(X, X, X, mask);
    attend::set_num_threads(2);
    const Tensor3<TestType> two = attention(X, X, X, mask);
    REQUIRE(same_bits(one, two));
    attend::DotProductAttention<TestType> dot(TestType(0));
    dot.eval();
    dot.set_path(path);
    attend::set_num_threads(1);
    const Tensor3<TestType> dot_one = dot(X, X, X, mask);
    attend::set_num_threads(2);
    REQUIRE(same_bits(dot_one, dot(X, X, X, mask)));
  }
  attend::set_num_threads(before);
}

TEMPLATE_TEST_CASE("Linear, RNN and Conv1d give the same bits with 1 and 2 threads", "[attention_path]", float,
                   double) {
  const int before = attend::num_threads();
  const attend::Linear<TestType> linear(48, 40);
  const attend::RNN<TestType> rnn(48, 64);
  const attend::Conv1d<TestType> conv(48, 32, 5);
  const Tensor3<TestType> X = random_tensor<TestType>(3, 300, 48, 4);  // 900 rows: four chunks of 256
  attend::set_num_threads(1);
  const Tensor3<TestType> by_linear = linear.forward(X), by_rnn = rnn.forward(X), by_conv = conv.forward(X);
  attend::set_num_threads(2);
  REQUIRE(same_bits(by_linear, linear.forward(X)));
  REQUIRE(same_bits(by_rnn, rnn.forward(X)));
  REQUIRE(same_bits(by_conv, conv.forward(X)));
  attend::set_num_threads(before);
}
#endif

TEST_CASE("set_num_threads checks its argument", "[attention_path]") {
  REQUIRE_THROWS_AS(attend::set_num_threads(0), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::set_num_threads(-3), Catch::Contains("threads must be at least 1, got -3"));
  const int before = attend::num_threads();
  attend::set_num_threads(1);
  REQUIRE(attend::num_threads() == 1);
  attend::set_num_threads(before);
  REQUIRE(attend::num_threads() == (attend::has_openmp() ? before : 1));
}
