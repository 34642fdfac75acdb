// Maps of the caller's memory (TensorMap3, ConstTensorMap3) through every module and function that takes a
// (batch, steps, features) tensor: read in place, they give the bits a Tensor3 of the same values gives — forward,
// training-mode calls with dropout, backward and the parameters' gradients — since the Tensor3 call is what the
// fixtures of the other tests check. The out-parameter overloads write the bits the returning calls give, refuse an
// out of another shape or one that overlaps an input (and leave it as it was), and, with a workspace kept between
// calls, allocate nothing from the second call of a shape on (tests/support/allocation_counter.hpp counts).
// Arguments that are not (batch, steps, features) tensors of the call's scalar type do not compile:
// tests/compile_checks/.
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <support/allocation_counter.hpp>
#include <support/checks.hpp>
#include <support/random_tensor.hpp>

#include <string>
#include <vector>

using attend::ConstTensorMap3;
using attend::Generator;
using attend::Index;
using attend::Mask;
using attend::Tensor3;
using attend::TensorMap3;
using attend::ValidLens;
using attend_test::random_tensor;
using attend_test::require_invalid;
using attend_test::same_bits;

namespace {

// A read-only map of X's memory: what a program passes when the data is its own.
template <class Scalar>
ConstTensorMap3<Scalar> view(const Tensor3<Scalar>& X) {
  return ConstTensorMap3<Scalar>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
}
template <class Scalar>
TensorMap3<Scalar> writable(Tensor3<Scalar>& X) {
  return TensorMap3<Scalar>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
}

// The caller's output buffer, of a shape, filled with a value no call writes.
template <class Scalar>
Tensor3<Scalar> buffer(Index a, Index b, Index c) {
  Tensor3<Scalar> out(a, b, c);
  out.setConstant(Scalar(-7.25));
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("Modules read maps of the caller's memory as they read Tensor3s, bit for bit",
                   "[views]", float, double) {
  const Index batch = 2, steps = 5, d = 8;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, d, 901);
  const Tensor3<TestType> K = random_tensor<TestType>(batch, 7, d, 902);
  const Tensor3<TestType> dY = random_tensor<TestType>(batch, steps, d, 903);
  const ValidLens lens{3, 5};

  SECTION("Linear: operator(), forward, backward and the gradients") {
    Generator g1(11), g2(11);
    attend::Linear<TestType> a(d, d, true, g1), b(d, d, true, g2);
    CHECK(same_bits(a(X), b(view(X))));
    CHECK(same_bits(a.backward(dY), b.backward(view(dY))));
    CHECK(same_bits(a.weight_grad(), b.weight_grad()));
    CHECK(same_bits(a.bias_grad(), b.bias_grad()));
    CHECK(same_bits(a.forward(X), b.forward(view(X))));
  }
  SECTION("MultiHeadAttention: self-attention, separate keys, training with dropout, backward") {
    for (const bool tiled : {false, true}) {
      CAPTURE(tiled);
      Generator g1(12), g2(12);
      attend::MultiHeadAttention<TestType> a(d, d, d, d, 2, TestType(0.25), true, g1), b(d, d, d, d, 2,
                                                                                          TestType(0.25), true, g2);
      const auto path = tiled ? attend::AttentionPath::tiled : attend::AttentionPath::direct;
      a.set_path(path);
      b.set_path(path);
      CHECK(same_bits(a(X, X, X, lens), b(view(X), view(X), view(X), lens)));  // training: dropout drawn alike
      const auto ga = a.backward(dY), gb = b.backward(view(dY));
      CHECK(same_bits(ga.queries, gb.queries));
      CHECK(same_bits(ga.keys, gb.keys));
      CHECK(same_bits(ga.values, gb.values));
      CHECK(same_bits(a.W_q().weight_grad(), b.W_q().weight_grad()));
      CHECK(same_bits(a.W_o().weight_grad(), b.W_o().weight_grad()));
      CHECK(same_bits(a(X, K, K, Mask::causal()), b(view(X), view(K), view(K), Mask::causal())));
      CHECK(same_bits(a.forward(X, K, K), b.forward(view(X), view(K), view(K))));
    }
  }
  SECTION("DotProductAttention and AdditiveAttention") {
    Generator g1(13), g2(13);
    attend::DotProductAttention<TestType> a(TestType(0.25), g1), b(TestType(0.25), g2);
    CHECK(same_bits(a(X, K, K, lens), b(view(X), view(K), view(K), lens)));
    const auto ga = a.backward(dY), gb = b.backward(view(dY));
    CHECK(same_bits(ga.keys, gb.keys));
    Generator g3(14), g4(14);
    attend::AdditiveAttention<TestType> c(d, d, 6, TestType(0.25), g3), e(d, d, 6, TestType(0.25), g4);
    CHECK(same_bits(c(X, K, K, lens), e(view(X), view(K), view(K), lens)));
    const auto gc = c.backward(dY), ge = e.backward(view(dY));
    CHECK(same_bits(gc.queries, ge.queries));
    CHECK(same_bits(c.forward(X, K, K), e.forward(view(X), view(K), view(K))));
  }
  SECTION("RNN, Conv1d, PositionalEncoding") {
    Generator g1(15), g2(15);
    attend::RNN<TestType> a(d, d, g1), b(d, d, g2);
    CHECK(same_bits(a(X), b(view(X))));
    CHECK(same_bits(a.backward(dY), b.backward(view(dY))));
    CHECK(same_bits(a.weight_hh_grad(), b.weight_hh_grad()));
    attend::Conv1d<TestType> c(d, d, 3, true, g1), e(d, d, 3, true, g2);
    CHECK(same_bits(c(X), e(view(X))));
    CHECK(same_bits(c.backward(dY), e.backward(view(dY))));
    CHECK(same_bits(c.weight_grad(), e.weight_grad()));
    attend::PositionalEncoding<TestType> p(d, TestType(0.5), 100, g1), q(d, TestType(0.5), 100, g2);
    CHECK(same_bits(p(X), q(view(X))));
    CHECK(same_bits(p.backward(dY), q.backward(view(dY))));
  }
  SECTION("the encoders") {
    Generator g1(16), g2(16);
    attend::SelfAttentionEncoder<TestType> a(d, 2, 2, g1), b(d, 2, 2, g2);
    CHECK(same_bits(a(X), b(view(X))));
    CHECK(same_bits(a.layer(1, X, 1, 4), b.layer(1, view(X), 1, 4)));
    attend::RNNEncoder<TestType> r(d, 2, g1);
    CHECK(same_bits(r(X), r(view(X))));
    attend::CNNEncoder<TestType> c(d, 3, 2, g1);
    CHECK(same_bits(c(X), c(view(X))));
    CHECK(same_bits(c.layer(0, X, 1, 3), c.layer(0, view(X), 1, 3)));
  }
  SECTION("the functions") {
    const Tensor3<TestType> S = random_tensor<TestType>(batch, steps, 7, 904);
    const Tensor3<TestType> dS = random_tensor<TestType>(batch, steps, 7, 905);
    const Tensor3<TestType> P = attend::masked_softmax(S, lens);
    CHECK(same_bits(P, attend::masked_softmax(view(S), lens)));
    CHECK(same_bits(attend::masked_softmax_backward(P, dS, lens),
                    attend::masked_softmax_backward(view(P), view(dS), lens)));
    CHECK(same_bits(attend::transpose_qkv(X, 2), attend::transpose_qkv(view(X), 2)));
    const Tensor3<TestType> H = attend::transpose_qkv(X, 2);
    CHECK(same_bits(attend::transpose_output(H, 2), attend::transpose_output(view(H), 2)));
    const auto l1 = attend::mse_loss(X, dY), l2 = attend::mse_loss(view(X), view(dY));
    CHECK(l1.value == l2.value);
    CHECK(same_bits(l1.grad, l2.grad));
    attend::Matrix<Index> labels(batch, steps);
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < steps; ++t) labels(b, t) = (b + 3 * t) % 7;
    const auto c1 = attend::cross_entropy(S, labels, ValidLens{4, 2}), c2 = attend::cross_entropy(view(S), labels,
                                                                                                   ValidLens{4, 2});
    CHECK(c1.value == c2.value);
    CHECK(same_bits(c1.grad, c2.grad));
  }
}

TEMPLATE_TEST_CASE("The out-parameter overloads write what the returning calls give, into a Tensor3 or a TensorMap3",
                   "[views]", float, double) {
  const Index batch = 2, steps = 5, d = 8;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, d, 911);
  const Tensor3<TestType> K = random_tensor<TestType>(batch, 6, d, 912);
  const ValidLens lens{2, 6};
  attend::Generator init(21);
  attend::MultiHeadAttention<TestType> mha(d, d, d, d, 4, TestType(0), true, init);
  attend::DotProductAttention<TestType> dpa(TestType(0));
  attend::AdditiveAttention<TestType> add(d, d, 6, TestType(0), init);
  attend::Linear<TestType> linear(d, 3, true, init);
  attend::RNN<TestType> rnn(d, 4, init);
  attend::Conv1d<TestType> conv(d, 5, 3, true, init);
  attend::AttentionWorkspace<TestType> ws;
  attend::GroupedQueryAttention<TestType> gqa(d, 4, 2, 0, true, TestType(0), init);
  gqa.set_rotary(attend::RotaryEmbedding<TestType>(2));
  gqa.eval();
  typename attend::GroupedQueryAttention<TestType>::Workspace gqa_ws;

  for (const auto path : {attend::AttentionPath::direct, attend::AttentionPath::tiled}) {
    mha.set_path(path);
    dpa.set_path(path);
    Tensor3<TestType> out = buffer<TestType>(batch, steps, d);
    mha.forward(X, K, K, lens, ws, writable(out));
    CHECK(same_bits(out, mha.forward(X, K, K, lens)));
    out = buffer<TestType>(batch, steps, d);
    mha.forward(view(X), view(X), view(X), lens, ws, out);  // self-attention through maps; a Tensor3 as out
    CHECK(same_bits(out, mha.forward(X, X, X, lens)));
    out = buffer<TestType>(batch, steps, d);
    dpa.forward(X, K, K, lens, ws, writable(out));
    CHECK(same_bits(out, dpa.forward(X, K, K, lens)));
  }
  Tensor3<TestType> out = buffer<TestType>(batch, steps, d);
  add.forward(X, K, K, lens, writable(out));
  CHECK(same_bits(out, add.forward(X, K, K, lens)));
  Tensor3<TestType> y3 = buffer<TestType>(batch, steps, 3), y4 = buffer<TestType>(batch, steps, 4),
                    y5 = buffer<TestType>(batch, steps, 5);
  linear.forward(view(X), writable(y3));
  CHECK(same_bits(y3, linear.forward(X)));
  rnn.forward(X, y4);
  CHECK(same_bits(y4, rnn.forward(X)));
  conv.forward(X, writable(y5));
  CHECK(same_bits(y5, conv.forward(X)));
  for (const Mask& mask : {Mask::causal(), Mask(lens)}) {
    out = buffer<TestType>(batch, steps, d);
    gqa.forward(view(X), mask, gqa_ws, writable(out));  // twice: the second reuses the workspace's memory
    gqa.forward(view(X), mask, gqa_ws, writable(out));
    CHECK(same_bits(out, gqa.forward(X, mask)));
    CHECK(same_bits(out, gqa(X, mask)));  // the training call, in evaluation mode: the same arithmetic
  }
}

TEMPLATE_TEST_CASE("An out of another shape, or one that overlaps an input, is refused and left as it was", "[views]",
                   float, double) {
  const Index batch = 2, steps = 4, d = 8;
  Tensor3<TestType> X = random_tensor<TestType>(batch, steps, d, 921);
  attend::Generator init(22);
  attend::MultiHeadAttention<TestType> mha(d, d, d, d, 2, TestType(0), false, init);
  attend::DotProductAttention<TestType> dpa(TestType(0));
  attend::Linear<TestType> linear(d, d, false, init);
  attend::RNN<TestType> rnn(d, d, init);
  attend::Conv1d<TestType> conv(d, d, 3, false, init);
  attend::AttentionWorkspace<TestType> ws;

  Tensor3<TestType> wrong = buffer<TestType>(batch, steps + 1, d);
  const Tensor3<TestType> before = wrong;
  require_invalid([&] { mha.forward(X, X, X, Mask{}, ws, writable(wrong)); },
                  {"MultiHeadAttention::forward", "out must have shape (2, 4, 8)", "got (2, 5, 8)"});
  require_invalid([&] { dpa.forward(X, X, X, Mask{}, ws, writable(wrong)); }, {"DotProductAttention::forward", "out"});
  require_invalid([&] { linear.forward(X, writable(wrong)); }, {"Linear::forward", "out must have shape (2, 4, 8)"});
  require_invalid([&] { rnn.forward(X, wrong); }, {"RNN::forward", "out must have shape"});
  require_invalid([&] { conv.forward(X, wrong); }, {"Conv1d::forward", "out must have shape"});
  CHECK(same_bits(wrong, before));

  // X's own memory as the output: the kernels would read what they have just written.
  const Tensor3<TestType> X_before = X;
  require_invalid([&] { linear.forward(view(X), writable(X)); }, {"Linear::forward", "out must not overlap X"});
  require_invalid([&] { rnn.forward(view(X), writable(X)); }, {"RNN::forward", "out must not overlap X"});
  require_invalid([&] { conv.forward(view(X), writable(X)); }, {"Conv1d::forward", "out must not overlap X"});
  require_invalid([&] { dpa.forward(view(X), view(X), view(X), Mask{}, ws, writable(X)); },
                  {"DotProductAttention::forward", "out must not overlap queries"});
  require_invalid([&] { mha.forward(view(X), view(X), view(X), Mask{}, ws, writable(X)); },
                  {"MultiHeadAttention::forward", "out must not overlap queries"});
  // Keys and values over all of X's memory, seen as one batch row of 2 * steps keys; out over its second half.
  const ConstTensorMap3<TestType> keys(X.data(), 1, 2 * steps, d);
  TensorMap3<TestType> second_half(X.data() + steps * d, 1, steps, d);
  const Tensor3<TestType> Q1 = random_tensor<TestType>(1, steps, d, 922);
  require_invalid(
      [&] {
        attend::scaled_dot_product_attention(view(Q1), keys, keys, 2, 2, Mask{}, attend::ScoreOptions<TestType>{},
                                             nullptr, second_half);
      },
      {"scaled_dot_product_attention", "out must not overlap keys"});
  CHECK(same_bits(X, X_before));
}

TEMPLATE_TEST_CASE("Attention with a workspace into the caller's buffer allocates nothing from the second call on",
                   "[views][allocation]", float, double) {
  ATTEND_TEST_START_COUNTING();
  const Index batch = 2, steps = 48, d = 32;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, d, 931);
  attend::Generator init(23);
  attend::MultiHeadAttention<TestType> mha(d, d, d, d, 4, TestType(0), true, init);
  attend::DotProductAttention<TestType> dpa(TestType(0));
  attend::Linear<TestType> linear(d, d, true, init);
  attend::GroupedQueryAttention<TestType> gqa(d, 4, 2, 0, true, TestType(0), init);
  gqa.set_rotary(attend::RotaryEmbedding<TestType>(8));
  gqa.eval();
  typename attend::GroupedQueryAttention<TestType>::Workspace ws_gqa;
  std::vector<TestType> memory(static_cast<std::size_t>(batch * steps * d));
  TensorMap3<TestType> out(memory.data(), batch, steps, d);
  const ConstTensorMap3<TestType> in = view(X);
  const Mask causal = Mask::causal(), lens = ValidLens{40, 48};  // made before counting: a Mask holds vectors
  for (const bool tiled : {false, true}) {
    const auto path = tiled ? attend::AttentionPath::tiled : attend::AttentionPath::direct;
    for (const bool self : {true, false}) {
      CAPTURE(tiled, self);
      mha.set_path(path);
      dpa.set_path(path);
      attend::AttentionWorkspace<TestType> ws_mha, ws_dpa;  // one per call shape, as the contract has it
      const auto run = [&] {
        if (self) {
          mha.forward(in, in, in, causal, ws_mha, out);
        } else {
          const ConstTensorMap3<TestType> queries(X.data(), batch, steps / 2, d);
          TensorMap3<TestType> half(memory.data(), batch, steps / 2, d);
          mha.forward(queries, in, in, causal, ws_mha, half);
        }
        dpa.forward(in, in, in, lens, ws_dpa, out);
        linear.forward(in, out);
        gqa.forward(in, causal, ws_gqa, out);
      };
      run();  // the warm-up call of this shape
      alloc_counter::reset();
      alloc_counter::counting = true;
      run();
      run();
      alloc_counter::counting = false;
      CHECK(alloc_counter::operator_news == 0);
      CHECK(alloc_counter::mallocs == 0);
    }
  }
}
