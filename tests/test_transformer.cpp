// TransformerEncoder and TransformerDecoder: against d2l's classes (fixture block_seq2seq, made by
// tests/reference/make_transformer_fixtures.py: logits, every parameter's gradient and the encoder outputs'
// gradient by autograd), decoding token by token through the caches against the whole-sequence logits, finite
// differences in double, and bad input (a decoding call that throws leaves every cache as it was).
#include <attend/transformer_decoder.hpp>
#include <attend/transformer_encoder.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>
#include <support/module_checks.hpp>
#include <support/random_tensor.hpp>

using attend::DecoderState;
using attend::Index;
using attend::Mask;
using attend::Matrix;
using attend::Tensor3;
using attend::TransformerDecoder;
using attend::TransformerEncoder;
using attend_test::dot;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::random_tensor;
using attend_test::require_invalid;

namespace {

// Steps [first, first + count) of tokens.
Matrix<Index> columns(const Matrix<Index>& tokens, Index first, Index count) { return tokens.middleCols(first, count); }

// The logits of decoding tgt in pieces of `piece` steps through a fresh state's caches, side by side.
template <class Scalar>
Tensor3<Scalar> decode_in_pieces(TransformerDecoder<Scalar>& decoder, const Tensor3<Scalar>& enc, const Mask& lens,
                                 const Matrix<Index>& tgt, Index piece) {
  DecoderState<Scalar> state = decoder.init_state(enc, lens, 16);
  Tensor3<Scalar> logits(tgt.rows(), tgt.cols(), decoder.vocab_size());
  for (Index t = 0; t < tgt.cols(); t += piece) {
    const Index count = std::min(piece, tgt.cols() - t);
    const Tensor3<Scalar> part = decoder(columns(tgt, t, count), state);
    for (Index b = 0; b < tgt.rows(); ++b)
      for (Index s = 0; s < count; ++s)
        for (Index v = 0; v < logits.dimension(2); ++v) logits(b, t + s, v) = part(b, s, v);
  }
  REQUIRE(state.steps() == tgt.cols());
  return logits;
}

}  // namespace

TEMPLATE_TEST_CASE("d2l's Transformer: the encoder and decoder's logits and every gradient match autograd",
                   "[transformer][golden]", float, double) {
  const Fixture fixture("block_seq2seq");
  TransformerEncoder<TestType> encoder(11, 8, 12, 2, 2, TestType(0));
  TransformerDecoder<TestType> decoder(13, 8, 12, 2, 2, TestType(0));
  attend_test::load_fixture_parameters(encoder, fixture, "encoder.");
  attend_test::load_fixture_parameters(decoder, fixture, "decoder.");
  const Matrix<Index> src = fixture.index_matrix("src_tokens"), tgt = fixture.index_matrix("tgt_tokens");
  const Mask lens = attend_test::valid_lens(fixture, "enc_valid_lens");

  const Tensor3<TestType> enc = encoder(src, lens);
  REQUIRE_THAT(enc, Near(fixture.tensor3<double>("enc_outputs"), attend_test::tolerance<TestType>()));
  DecoderState<TestType> state = decoder.init_state(enc, lens);
  const Tensor3<TestType> logits = decoder(tgt, state);
  REQUIRE_THAT(logits, Near(fixture.tensor3<double>("logits"), attend_test::tolerance<TestType>()));
  decoder.backward(fixture.tensor3<TestType>("grad_logits"));
  REQUIRE_THAT(*state.enc_outputs_grad,
               Near(fixture.tensor3<double>("enc_outputs_grad"), gradient_tolerance<TestType>()));
  attend_test::require_fixture_gradients(decoder, fixture, gradient_tolerance<TestType>(), "decoder.");
  encoder.backward(*state.enc_outputs_grad);
  attend_test::require_fixture_gradients(encoder, fixture, gradient_tolerance<TestType>(), "encoder.");

  SECTION("decoding token by token, or two at a time, through the caches gives the whole sequence's logits") {
    encoder.eval();
    decoder.eval();
    REQUIRE(attend_test::same_bits(encoder.forward(src, lens), encoder(src, lens)));
    const Tensor3<double> expected = fixture.tensor3<double>("logits");
    REQUIRE_THAT(decode_in_pieces(decoder, enc, lens, tgt, 1), Near(expected, attend_test::tolerance<TestType>()));
    REQUIRE_THAT(decode_in_pieces(decoder, enc, lens, tgt, 2), Near(expected, attend_test::tolerance<TestType>()));
    REQUIRE_THAT(decode_in_pieces(decoder, enc, lens, tgt, 5), Near(expected, attend_test::tolerance<TestType>()));
    // d2l's own loop encodes every step at position 0, so its logits differ from these (by 8e-3 here).
    const Tensor3<double> d2l_stepwise = fixture.tensor3<double>("d2l_stepwise_logits");
    REQUIRE_THAT(d2l_stepwise, !Near(expected, attend_test::tolerance<double>()));
  }
}

TEST_CASE("The decoder's gradients agree with finite differences in double", "[transformer][gradients]") {
  attend::Generator generator(91);
  TransformerDecoder<double> decoder(7, 8, 10, 2, 1, 0.0, 1000, generator);
  Tensor3<double> enc = random_tensor<double>(2, 4, 8, 92);
  Matrix<Index> tgt(2, 3);
  tgt << 1, 4, 6, 0, 2, 2;
  const Mask lens({3, 4});
  DecoderState<double> state = decoder.init_state(enc, lens);
  const Tensor3<double> logits = decoder(tgt, state);
  const Tensor3<double> G = random_tensor<double>(2, 3, 7, 93);
  decoder.backward(G);
  const Tensor3<double> enc_grad = *state.enc_outputs_grad;
  const auto loss = [&] {
    DecoderState<double> s = decoder.init_state(enc, lens);
    return dot(G, decoder(tgt, s));
  };
  REQUIRE_THAT(enc_grad, Near(attend_test::finite_difference(enc, loss), attend_test::finite_difference_tolerance()));
  // decoder(...) in loss() records again; the gradients were read above and parameters() points at the buffers
  // backward() filled, which loss() does not touch.
  attend_test::require_finite_difference_gradients(decoder, loss);
}

TEMPLATE_TEST_CASE("The Transformer refuses bad input, naming it, and a decoding call that throws changes no cache",
                   "[transformer][bad_input]", float, double) {
  require_invalid([] { TransformerDecoder<TestType> d(10, 8, 16, 3, 1, TestType(0)); },
                  "TransformerDecoder: num_hiddens (8) must be divisible by num_heads (3)");
  require_invalid([] { TransformerEncoder<TestType> e(10, 8, 16, 2, 1, TestType(0), false, 0); },
                  "TransformerEncoder: max_len must be at least 1");
  TransformerDecoder<TestType> decoder(10, 8, 16, 2, 2, TestType(0));
  decoder.eval();
  const Tensor3<TestType> enc = random_tensor<TestType>(2, 3, 8, 101);
  DecoderState<TestType> state = decoder.init_state(enc, Mask({2, 3}), 4);
  Matrix<Index> tokens(2, 3);
  tokens << 1, 2, 3, 4, 5, 6;
  decoder(tokens, state);
  REQUIRE(state.steps() == 3);
  require_invalid([&] { decoder(tokens, state); }, "the cache holds 3 of 4 steps and cannot take 3 more");
  REQUIRE(state.steps() == 3);
  for (const auto& cache : state.caches) REQUIRE(cache.size() == 3);
  Matrix<Index> bad(2, 1);
  bad << 1, 10;
  require_invalid([&] { decoder(bad, state); }, "tokens(1, 0) must be in [0, 10)");
  require_invalid([&] { decoder.init_state(random_tensor<TestType>(2, 3, 6, 102)); },
                  "TransformerDecoder::init_state: enc_outputs must have 8 features (num_hiddens)");
  Matrix<Index> one_row(1, 1);
  one_row << 1;
  require_invalid([&] { decoder(one_row, state); }, "tokens has 1 batch rows, state.enc_outputs 2");

  TransformerDecoder<TestType> other(10, 8, 16, 4, 2, TestType(0));
  DecoderState<TestType> other_state = other.init_state(enc, Mask({2, 3}), 4);
  require_invalid([&] { decoder(one_row.replicate(2, 1), other_state); }, "a state of another decoder?");

  decoder.train();
  REQUIRE_THROWS_AS(decoder.backward(Tensor3<TestType>(2, 3, 10)), std::logic_error);
  {
    DecoderState<TestType> gone = decoder.init_state(enc);
    decoder(tokens, gone);
  }
  REQUIRE_THROWS_AS(decoder.backward(Tensor3<TestType>(2, 3, 10)), std::logic_error);
}
