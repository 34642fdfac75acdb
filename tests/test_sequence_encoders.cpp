// sequence_encoders.hpp: the three encoders of the chapter's comparison — built from attend's modules in order,
// their forward as a chain of stages, their operation counts by hand, their path lengths by formula and by the
// probe, and their checks.
#include <attend/complexity.hpp>
#include <attend/conv1d.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/sequence_encoders.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <tuple>
#include <utility>
#include <vector>

using attend::CNNEncoder;
using attend::Generator;
using attend::Index;
using attend::RNNEncoder;
using attend::SelfAttentionEncoder;
using attend::Tensor3;
using Catch::Matchers::Message;

using attend_test::random_tensor;

namespace {

// Bit for bit.
template <class Scalar>
attend_test::Tolerance<Scalar> exactly() {
  return {0.0, 0.0};
}

// embed, then every stage of the chain in order.
template <class Encoder, class Scalar>
Tensor3<Scalar> run_chain(Encoder& encoder, const Tensor3<Scalar>& X) {
  Tensor3<Scalar> H = encoder.embed(X);  // (batch, n, d)
  for (Index s = 0; s < encoder.sequential_operations(X.dimension(1)); ++s) encoder.stage(s, H);
  return H;
}

// Positions [first, last) of every batch row: (batch, last - first, d).
template <class Scalar>
Tensor3<Scalar> positions(const Tensor3<Scalar>& X, Index first, Index last) {
  const Eigen::array<Index, 3> offsets{0, first, 0};
  const Eigen::array<Index, 3> extents{X.dimension(0), last - first, X.dimension(2)};
  return X.slice(offsets, extents);
}

}  // namespace

TEMPLATE_TEST_CASE("Every encoder maps (batch, n, d) to (batch, n, d)", "[encoders]", float, double) {
  const Index batch = GENERATE(1, 3), n = GENERATE(1, 2, 7);
  CAPTURE(batch, n);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, n, 8, 1);  // (batch, n, 8)
  Generator generator(2);
  SelfAttentionEncoder<TestType> attention(8, 2, 2, generator);
  RNNEncoder<TestType> rnn(8, 2, generator);
  CNNEncoder<TestType> cnn(8, 3, 2, generator);
  for (const Tensor3<TestType>& Y : {attention(X), rnn(X), cnn(X)}) {  // (batch, n, 8) each
    CHECK(Y.dimension(0) == batch);
    CHECK(Y.dimension(1) == n);
    CHECK(Y.dimension(2) == 8);
  }
}

TEMPLATE_TEST_CASE("Each encoder is its modules, drawn from the generator in order and applied in order", "[encoders]",
                   float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 6, 4, 3);  // (2, 6, 4)

  SECTION("self-attention: X + P[:n], then MultiHeadAttention(4, 4, 4, 4, 2, 0) twice") {
    Generator a(10), b(10);
    SelfAttentionEncoder<TestType> encoder(4, 2, 2, a);
    attend::PositionalEncoding<TestType> encoding(4, TestType(0), 1000, b);
    attend::MultiHeadAttention<TestType> first(4, 4, 4, 4, 2, TestType(0), false, b);
    attend::MultiHeadAttention<TestType> second(4, 4, 4, 4, 2, TestType(0), false, b);
    Tensor3<TestType> H = encoding(X);  // (2, 6, 4)
    H = first(H, H, H);
    H = second(H, H, H);
    REQUIRE_THAT(encoder(X), attend_test::Near(H, exactly<TestType>()));
  }
  SECTION("RNN: RNN(4, 4) twice") {
    Generator a(11), b(11);
    const RNNEncoder<TestType> encoder(4, 2, a);
    const attend::RNN<TestType> first(4, 4, b), second(4, 4, b);
    REQUIRE_THAT(encoder(X), attend_test::Near(second.forward(first.forward(X)), exactly<TestType>()));
  }
  SECTION("CNN: Conv1d(4, 4, 3), tanh, Conv1d(4, 4, 3) — no tanh after the last layer") {
    Generator a(12), b(12);
    const CNNEncoder<TestType> encoder(4, 3, 2, a);
    const attend::Conv1d<TestType> first(4, 4, 3, true, b), second(4, 4, 3, true, b);
    const Tensor3<TestType> hidden = first.forward(X).tanh();  // (2, 6, 4)
    REQUIRE_THAT(encoder(X), attend_test::Near(second.forward(hidden), exactly<TestType>()));
  }
}

TEMPLATE_TEST_CASE("The same seed builds the same encoder", "[encoders]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 6, 4);  // (2, 5, 6)
  Generator a(20), b(20);
  SelfAttentionEncoder<TestType> attention_a(6, 3, 2, a), attention_b(6, 3, 2, b);
  REQUIRE_THAT(attention_a(X), attend_test::Near(attention_b(X), exactly<TestType>()));
  const RNNEncoder<TestType> rnn_a(6, 2, a), rnn_b(6, 2, b);
  REQUIRE_THAT(rnn_a(X), attend_test::Near(rnn_b(X), exactly<TestType>()));
  const CNNEncoder<TestType> cnn_a(6, 4, 3, a), cnn_b(6, 4, 3, b);
  REQUIRE_THAT(cnn_a(X), attend_test::Near(cnn_b(X), exactly<TestType>()));
}

TEMPLATE_TEST_CASE("embed and the stages, in order, are the forward pass", "[encoders][stages]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 7, 6, 5);  // (2, 7, 6)
  Generator generator(30);

  SECTION("self-attention: one stage per layer, bit for bit") {
    SelfAttentionEncoder<TestType> encoder(6, 2, 3, generator);
    REQUIRE(encoder.sequential_operations(7) == 3);
    REQUIRE_THAT(run_chain(encoder, X), attend_test::Near(encoder(X), exactly<TestType>()));
  }
  SECTION("CNN: one stage per layer, bit for bit") {
    CNNEncoder<TestType> encoder(6, 4, 3, generator);
    REQUIRE(encoder.sequential_operations(7) == 3);
    REQUIRE_THAT(run_chain(encoder, X), attend_test::Near(encoder(X), exactly<TestType>()));
  }
  SECTION("RNN: one stage per step of every layer, to rounding (RNN projects all steps in one product)") {
    RNNEncoder<TestType> encoder(6, 3, generator);
    REQUIRE(encoder.sequential_operations(7) == 21);
    REQUIRE_THAT(run_chain(encoder, X), attend_test::Near(encoder(X)));
  }
  SECTION("the chain has no stage past the last") {
    SelfAttentionEncoder<TestType> attention(6, 2, 3, generator);
    const RNNEncoder<TestType> rnn(6, 3, generator);
    const CNNEncoder<TestType> cnn(6, 4, 3, generator);
    Tensor3<TestType> H = X;  // (2, 7, 6)
    REQUIRE_THROWS_MATCHES(attention.stage(3, H), std::invalid_argument,
                           Message("SelfAttentionEncoder: stage must be in [0, 3) for H of shape (2, 7, 6), got 3"));
    REQUIRE_THROWS_MATCHES(rnn.stage(21, H), std::invalid_argument,
                           Message("RNNEncoder: stage must be in [0, 21) for H of shape (2, 7, 6), got 21"));
    REQUIRE_THROWS_MATCHES(cnn.stage(-1, H), std::invalid_argument,
                           Message("CNNEncoder: stage must be in [0, 3) for H of shape (2, 7, 6), got -1"));
  }
}

TEMPLATE_TEST_CASE("A layer's positions can be computed in separate pieces", "[encoders][parallel]", float, double) {
  const Tensor3<TestType> H = random_tensor<TestType>(2, 9, 6, 6);  // (2, 9, 6)
  Generator generator(40);
  // Pieces at the edges and inside; for the CNN with k = 4 (left 1, right 2) and k = 5 (left 2, right 2) the
  // inside pieces need a window of real neighbours on both sides.
  const std::vector<std::pair<Index, Index>> pieces{{0, 4}, {4, 9}, {2, 3}, {0, 9}, {8, 9}, {5, 5}};

  SECTION("self-attention: the pieces' rows as queries, all of H as keys and values") {
    SelfAttentionEncoder<TestType> encoder(6, 3, 2, generator);
    for (Index l = 0; l < 2; ++l) {
      const Tensor3<TestType> whole = encoder.layer(l, H);  // (2, 9, 6)
      for (const auto& [first, last] : pieces) {
        CAPTURE(l, first, last);
        REQUIRE_THAT(encoder.layer(l, H, first, last), attend_test::Near(positions(whole, first, last)));
      }
    }
  }
  SECTION("CNN: the pieces with their halo of neighbours") {
    for (Index k : {1, 2, 3, 4, 5}) {
      const CNNEncoder<TestType> encoder(6, k, 2, generator);
      for (Index l = 0; l < 2; ++l) {
        const Tensor3<TestType> whole = encoder.layer(l, H);  // (2, 9, 6)
        for (const auto& [first, last] : pieces) {
          CAPTURE(k, l, first, last);
          REQUIRE_THAT(encoder.layer(l, H, first, last), attend_test::Near(positions(whole, first, last)));
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("An RNN step can be split across hidden units, and its steps are the layer's forward",
                   "[encoders][parallel]", float, double) {
  Generator generator(50);
  const RNNEncoder<TestType> encoder(6, 2, generator);
  const Tensor3<TestType> X = random_tensor<TestType>(3, 5, 6, 7);  // (3, 5, 6): the layer's input
  for (Index l = 0; l < 2; ++l) {
    Tensor3<TestType> whole(3, 5, 6), split(3, 5, 6);  // (3, 5, 6): h_1 .. h_5, step by step
    for (Index t = 0; t < 5; ++t) {
      encoder.step(l, t, X, whole, 0, 6);
      encoder.step(l, t, X, split, 0, 2);
      encoder.step(l, t, X, split, 2, 5);
      encoder.step(l, t, X, split, 5, 6);
    }
    CAPTURE(l);
    REQUIRE_THAT(split, attend_test::Near(whole));
    REQUIRE_THAT(whole, attend_test::Near(encoder.rnn(l).forward(X)));
  }
}

TEMPLATE_TEST_CASE("flops counts every GEMM's multiply-adds twice, checked by hand", "[encoders][cost]", float,
                   double) {
  SECTION("self-attention") {
    // d = 4, h = 2 heads of width 2, one layer, batch 1, n = 3:
    //   W_q, W_k, W_v, W_o: 4 products (3, 4) x (4, 4)      4 * 3*4*4 = 192 multiply-adds
    //   scores: 2 heads (3, 2) x (2, 3)                     2 * 3*2*3 =  36
    //   weights @ V: 2 heads (3, 3) x (3, 2)                2 * 3*3*2 =  36
    //   264 multiply-adds = 528 flops  (= 8*1*3*16 + 4*1*9*4)
    SelfAttentionEncoder<TestType> one(4, 2, 1);
    CHECK(one.flops(1, 3) == 528);
    // d = 6, h = 3, two layers, batch 2, n = 5: per layer 8*2*5*36 + 4*2*25*6 = 2880 + 1200 = 4080; twice 8160.
    SelfAttentionEncoder<TestType> two(6, 3, 2);
    CHECK(two.flops(2, 5) == 8160);
    // The heads do not change the count: h (n, d/h) x (d/h, n) products are n^2 d multiply-adds however split.
    SelfAttentionEncoder<TestType> six_heads(6, 6, 2);
    CHECK(six_heads.flops(2, 5) == 8160);
  }
  SECTION("RNN") {
    // d = 3, one layer, batch 1, n = 4: the input projection (4, 3) x (3, 3) = 36 multiply-adds, then steps 2..4
    // each (1, 3) x (3, 3) = 9, h_0 = 0 needing none: 36 + 27 = 63 multiply-adds = 126 flops.
    const RNNEncoder<TestType> one(3, 1);
    CHECK(one.flops(1, 4) == 126);
    // Two layers, batch 2, n = 4: per layer 2 * (2*4*9 + 2*3*9) = 252, twice 504; as RNN counts its own work.
    const RNNEncoder<TestType> two(3, 2);
    CHECK(two.flops(2, 4) == 504);
    CHECK(two.flops(2, 4) ==
          2.0 * static_cast<double>(two.rnn(0).multiply_adds(2, 4) + two.rnn(1).multiply_adds(2, 4)));
    CHECK(two.flops(2, 1) == 2 * 2 * (2 * 1 * 9));  // one step: the projection only
  }
  SECTION("CNN") {
    // d = 3, k = 4, one layer, batch 1, n = 5: each output position is a window of 4 steps x 3 channels against
    // 3 filters, 36 multiply-adds, padding zeros included: 5 * 36 = 180 multiply-adds = 360 flops.
    const CNNEncoder<TestType> one(3, 4, 1);
    CHECK(one.flops(1, 5) == 360);
    // Two layers, batch 2: 2 * 2 * 360 = 1440; as Conv1d counts its own work.
    const CNNEncoder<TestType> two(3, 4, 2);
    CHECK(two.flops(2, 5) == 1440);
    CHECK(two.flops(2, 5) ==
          2.0 * static_cast<double>(two.conv(0).multiply_adds(2, 5) + two.conv(1).multiply_adds(2, 5)));
  }
}

TEMPLATE_TEST_CASE("sequential_operations: layers for self-attention and the CNN, layers times steps for the RNN",
                   "[encoders][cost]", float, double) {
  SelfAttentionEncoder<TestType> attention(4, 2, 3);
  const RNNEncoder<TestType> rnn(4, 3);
  const CNNEncoder<TestType> cnn(4, 3, 3);
  for (Index n : {1, 10, 1000}) {
    CAPTURE(n);
    CHECK(attention.sequential_operations(n) == 3);
    CHECK(cnn.sequential_operations(n) == 3);
    CHECK(rnn.sequential_operations(n) == 3 * n);
  }
}

TEMPLATE_TEST_CASE("Self-attention: one hop between any two positions, measured", "[encoders][path]", float, double) {
  for (Index layers : {1, 2}) {
    SelfAttentionEncoder<TestType> encoder(4, 2, layers);
    for (Index n : {1, 2, 3, 16}) {
      CAPTURE(layers, n);
      const Index expected = n == 1 ? 0 : 1;
      CHECK(encoder.max_path_length_formula(n) == expected);
      CHECK(attend::measured_path_length(encoder, random_tensor<TestType>(2, n, 4, 60)) == expected);
    }
  }
}

TEMPLATE_TEST_CASE("RNN: n - 1 hops from x_1 to y_n whatever the depth, measured; none backwards", "[encoders][path]",
                   float, double) {
  for (Index layers : {1, 3}) {
    const RNNEncoder<TestType> encoder(4, layers);
    // n = 40: the change of x_1 fades by a factor of about 0.6 per step, below float rounding long before y_40;
    // the probe still follows it.
    for (Index n : {1, 2, 5, 12, 40}) {
      CAPTURE(layers, n);
      CHECK(encoder.max_path_length_formula(n) == n - 1);
      CHECK(attend::measured_path_length(encoder, random_tensor<TestType>(2, n, 4, 61)) == n - 1);
    }
    const Tensor3<TestType> X = random_tensor<TestType>(1, 6, 4, 62);  // (1, 6, 4)
    CHECK(attend::measured_path_length(encoder, X, 2, 4) == 2);
    CHECK(attend::measured_path_length(encoder, X, 4, 2) == attend::unreachable);  // causal
  }
}

TEMPLATE_TEST_CASE("CNN: ceil((n - 1) / floor((k - 1) / 2)) layers from x_1 to y_n, for odd and even k, measured",
                   "[encoders][path]", float, double) {
  // y_s reads x_{s - left} .. x_{s + right}, left = floor((k - 1) / 2), right = k - 1 - left: x_1 reaches
  // positions 1 .. 1 + left after one layer, 1 .. 1 + l left after l layers, so y_n after ceil((n - 1) / left).
  //   (n, k, L)     left   layers needed               expected
  //   (9, 3, 8)     1      ceil(8 / 1) = 8             8
  //   (9, 3, 12)    1      8 (more layers: no change)  8
  //   (9, 3, 7)     1      8 > 7                       unreachable
  //   (9, 4, 8)     1      8: even k = 4 still moves 1 to the right (its extra step is on the right)
  //   (9, 4, 7)     1      8 > 7                       unreachable
  //   (9, 5, 4)     2      ceil(8 / 2) = 4             4
  //   (10, 5, 5)    2      ceil(9 / 2) = 5             5
  //   (10, 6, 5)    2      5                           5
  //   (10, 6, 4)    2      5 > 4                       unreachable
  //   (13, 7, 4)    3      ceil(12 / 3) = 4            4
  //   (13, 8, 4)    3      4                           4
  //   (6, 2, 10)    0      never: k = 2 reads x_s, x_{s+1} only    unreachable
  //   (6, 1, 10)    0      never                       unreachable
  //   (2, 4, 1)     1      1                           1
  //   (1, 3, 1)     -      n = 1                       0
  const std::vector<std::tuple<Index, Index, Index, Index>> cases{{9, 3, 8, 8},
                                                                  {9, 3, 12, 8},
                                                                  {9, 3, 7, attend::unreachable},
                                                                  {9, 4, 8, 8},
                                                                  {9, 4, 7, attend::unreachable},
                                                                  {9, 5, 4, 4},
                                                                  {10, 5, 5, 5},
                                                                  {10, 6, 5, 5},
                                                                  {10, 6, 4, attend::unreachable},
                                                                  {13, 7, 4, 4},
                                                                  {13, 8, 4, 4},
                                                                  {6, 2, 10, attend::unreachable},
                                                                  {6, 1, 10, attend::unreachable},
                                                                  {2, 4, 1, 1},
                                                                  {1, 3, 1, 0}};
  for (const auto& [n, k, layers, expected] : cases) {
    CAPTURE(n, k, layers);
    const CNNEncoder<TestType> encoder(4, k, layers);
    CHECK(encoder.max_path_length_formula(n) == expected);
    CHECK(attend::measured_path_length(encoder, random_tensor<TestType>(2, n, 4, 63)) == expected);
  }
}

TEMPLATE_TEST_CASE("Encoders reject inputs of the wrong width, naming the argument and both shapes",
                   "[encoders][errors]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 7, 70);  // (2, 5, 7): d = 7, not 8
  SelfAttentionEncoder<TestType> attention(8, 2, 1);
  const RNNEncoder<TestType> rnn(8, 1);
  const CNNEncoder<TestType> cnn(8, 3, 1);
  REQUIRE_THROWS_MATCHES(attention(X), std::invalid_argument,
                         Message("SelfAttentionEncoder: X must have 8 features (num_hiddens) (axis 2), "
                                 "got shape (2, 5, 7)"));
  REQUIRE_THROWS_MATCHES(rnn(X), std::invalid_argument,
                         Message("RNNEncoder: X must have 8 features (num_hiddens) (axis 2), got shape (2, 5, 7)"));
  REQUIRE_THROWS_MATCHES(cnn(X), std::invalid_argument,
                         Message("CNNEncoder: X must have 8 features (num_hiddens) (axis 2), got shape (2, 5, 7)"));
  REQUIRE_THROWS_MATCHES(attend::measured_path_length(cnn, X), std::invalid_argument,
                         Message("CNNEncoder: X must have 8 features (num_hiddens) (axis 2), got shape (2, 5, 7)"));
}

TEMPLATE_TEST_CASE("Self-attention rejects sequences longer than its positional encoding", "[encoders][errors]", float,
                   double) {
  SelfAttentionEncoder<TestType> short_encoder(4, 1, 1, 10);  // max_len 10
  CHECK(short_encoder.max_len() == 10);
  REQUIRE_THROWS_MATCHES(short_encoder(Tensor3<TestType>(1, 11, 4)), std::invalid_argument,
                         Message("SelfAttentionEncoder: X has 11 steps, more than max_len (10), shape (1, 11, 4)"));
  SelfAttentionEncoder<TestType> long_encoder(4, 1, 1, 2000);
  const Tensor3<TestType> Y = long_encoder(random_tensor<TestType>(1, 1500, 4, 71));  // (1, 1500, 4)
  CHECK(Y.dimension(1) == 1500);
  CHECK(SelfAttentionEncoder<TestType>(4, 1, 1).max_len() == 1000);  // d2l's default
}

TEMPLATE_TEST_CASE("Encoders reject bad configurations and indices, naming them", "[encoders][errors]", float, double) {
  REQUIRE_THROWS_MATCHES(SelfAttentionEncoder<TestType>(6, 4, 1), std::invalid_argument,
                         Message("SelfAttentionEncoder: num_hiddens (6) must be divisible by num_heads (4)"));
  REQUIRE_THROWS_MATCHES(SelfAttentionEncoder<TestType>(6, 2, 0), std::invalid_argument,
                         Message("SelfAttentionEncoder: num_layers must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(SelfAttentionEncoder<TestType>(6, 2, 1, 0), std::invalid_argument,
                         Message("SelfAttentionEncoder: max_len must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(RNNEncoder<TestType>(0, 1), std::invalid_argument,
                         Message("RNNEncoder: num_hiddens must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(RNNEncoder<TestType>(4, -1), std::invalid_argument,
                         Message("RNNEncoder: num_layers must be at least 1, got -1"));
  REQUIRE_THROWS_MATCHES(CNNEncoder<TestType>(4, 0, 1), std::invalid_argument,
                         Message("CNNEncoder: kernel_size must be at least 1, got 0"));

  SelfAttentionEncoder<TestType> attention(4, 2, 2);
  const RNNEncoder<TestType> rnn(4, 2);
  const CNNEncoder<TestType> cnn(4, 3, 2);
  const Tensor3<TestType> H = random_tensor<TestType>(1, 5, 4, 72);  // (1, 5, 4)
  REQUIRE_THROWS_MATCHES(attention.layer(2, H), std::invalid_argument,
                         Message("SelfAttentionEncoder: layer must be in [0, 2), got 2"));
  REQUIRE_THROWS_MATCHES(cnn.layer(0, H, 3, 6), std::invalid_argument,
                         Message("CNNEncoder: positions [first, last) must lie in [0, 5], got [3, 6)"));
  Tensor3<TestType> out(1, 5, 4);  // (1, 5, 4)
  REQUIRE_THROWS_MATCHES(rnn.step(0, 5, H, out, 0, 4), std::invalid_argument,
                         Message("RNNEncoder: t must be in [0, 5), got 5"));
  REQUIRE_THROWS_MATCHES(rnn.step(0, 0, H, out, 2, 5), std::invalid_argument,
                         Message("RNNEncoder: hidden units [first, last) must lie in [0, 4], got [2, 5)"));
  Tensor3<TestType> shorter(1, 4, 4);  // (1, 4, 4)
  REQUIRE_THROWS_MATCHES(rnn.step(0, 0, H, shorter, 0, 4), std::invalid_argument,
                         Message("RNNEncoder: X and H must have the same number of steps (axis 1), got X (1, 5, 4) "
                                 "and H (1, 4, 4)"));
  REQUIRE_THROWS_MATCHES(cnn.max_path_length_formula(0), std::invalid_argument,
                         Message("CNNEncoder: n must be at least 1, got 0"));
}
