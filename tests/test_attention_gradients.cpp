// The backward passes of the attention modules, on both paths: against PyTorch autograd through d2l's code
// (tests/reference/make_training_fixtures.py), against central finite differences in double with dropout and every
// kind of mask, the tiled path against the direct one over many blocks, 1 and 2 threads bit for bit, and the errors;
// then a whole training run against PyTorch's: examples/sequence_model.hpp's model (an embedding, the positional
// encoding, multi-head self-attention, a linear head), from the initial parameters and on the batches of
// tests/reference/make_training_run.py, ten Adam steps in double on each path, the loss at every step and the
// parameters at the end PyTorch's.
#include <attend/additive_attention.hpp>
#include <attend/attention_gradients.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/loss.hpp>
#include <attend/mask.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/optim.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/lens.hpp>
#include <support/masks.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <vector>

#include "sequence_model.hpp"

using attend::AdditiveAttention;
using attend::AttentionGradients;
using attend::AttentionPath;
using attend::DotProductAttention;
using attend::FullyMasked;
using attend::Index;
using attend::Linear;
using attend::Mask;
using attend::Matrix;
using attend::MultiHeadAttention;
using attend::Tensor3;
using attend::ValidLens;
using attend::Vector;
using attend_test::exact;
using attend_test::Fixture;
using attend_test::gradient_tolerance;
using attend_test::gradients_of;
using attend_test::mask_from;
using attend_test::Near;
using attend_test::random_tensor;
using attend_test::Tolerance;
using Catch::Contains;

namespace {

constexpr AttentionPath both_paths[] = {AttentionPath::direct, AttentionPath::tiled};

// A MultiHeadAttention with a fixture's parameters (key_size 6, query_size 5, value_size 4, num_hiddens 12, or the
// self-attention case's 8s).
template <class Scalar>
MultiHeadAttention<Scalar> mha_from(const Fixture& fx, Index key_size, Index query_size, Index value_size,
                                    Index num_hiddens) {
  const bool bias = fx.index("bias") != 0;
  MultiHeadAttention<Scalar> attention(key_size, query_size, value_size, num_hiddens, fx.index("num_heads"),
                                       Scalar(0.5), bias);
  attention.eval();
  for (const char* layer : {"W_q", "W_k", "W_v", "W_o"}) {
    attend::Linear<Scalar>& linear = layer == std::string("W_q")   ? attention.W_q()
                                     : layer == std::string("W_k") ? attention.W_k()
                                     : layer == std::string("W_v") ? attention.W_v()
                                                                   : attention.W_o();
    linear.weight() = fx.matrix<Scalar>(std::string(layer) + ".weight");
    if (bias) linear.bias() = fx.vector<Scalar>(std::string(layer) + ".bias");
  }
  return attention;
}

template <class Scalar>
void check_parameter_gradients(MultiHeadAttention<Scalar>& attention, const Fixture& fx) {
  const bool bias = fx.index("bias") != 0;
  const auto check = [&](attend::Linear<Scalar>& linear, const std::string& layer) {
    CAPTURE(layer);
    REQUIRE_THAT(linear.weight_grad(), Near(fx.matrix<double>(layer + ".weight_grad"), gradient_tolerance<Scalar>()));
    if (bias)
      REQUIRE_THAT(linear.bias_grad(), Near(fx.vector<double>(layer + ".bias_grad"), gradient_tolerance<Scalar>()));
  };
  check(attention.W_q(), "W_q");
  check(attention.W_k(), "W_k");
  check(attention.W_v(), "W_v");
  check(attention.W_o(), "W_o");
}

}  // namespace

// ---- against PyTorch autograd --------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("DotProductAttention::backward gives autograd's gradients on both paths",
                   "[gradients][dot_product][golden]", float, double) {
  const std::string name = GENERATE("grad_dot_product_lens", "grad_dot_product_mask");
  const AttentionPath path = GENERATE(AttentionPath::direct, AttentionPath::tiled);
  CAPTURE(name, path);
  const Fixture fx(name);
  DotProductAttention<TestType> attention(TestType(0.5));
  attention.eval();
  attention.set_path(path);
  const Tensor3<TestType> queries = fx.tensor3<TestType>("queries"), keys = fx.tensor3<TestType>("keys"),
                          values = fx.tensor3<TestType>("values");
  const Tensor3<TestType> output = attention(queries, keys, values, mask_from(fx));
  REQUIRE(attention.last_call_tiled() == (path == AttentionPath::tiled));
  REQUIRE_THAT(output, Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const AttentionGradients<TestType> g = attention.backward(fx.tensor3<TestType>("grad_output"));
  REQUIRE_THAT(g.queries, Near(fx.tensor3<double>("grad_queries"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(g.keys, Near(fx.tensor3<double>("grad_keys"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(g.values, Near(fx.tensor3<double>("grad_values"), gradient_tolerance<TestType>()));
  REQUIRE(attention.parameters().empty());
}

TEMPLATE_TEST_CASE("MultiHeadAttention::backward gives autograd's gradients on both paths, parameters included",
                   "[gradients][multi_head][golden]", float, double) {
  const std::string name = GENERATE("grad_mha_lens", "grad_mha_mask");
  const AttentionPath path = GENERATE(AttentionPath::direct, AttentionPath::tiled);
  CAPTURE(name, path);
  const Fixture fx(name);
  MultiHeadAttention<TestType> attention = mha_from<TestType>(fx, 6, 5, 4, 12);
  attention.set_path(path);
  const Tensor3<TestType> queries = fx.tensor3<TestType>("queries"), keys = fx.tensor3<TestType>("keys"),
                          values = fx.tensor3<TestType>("values");
  const Tensor3<TestType> output = attention(queries, keys, values, mask_from(fx));
  REQUIRE_THAT(output, Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const AttentionGradients<TestType> g = attention.backward(fx.tensor3<TestType>("grad_output"));
  REQUIRE_THAT(g.queries, Near(fx.tensor3<double>("grad_queries"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(g.keys, Near(fx.tensor3<double>("grad_keys"), gradient_tolerance<TestType>()));
  REQUIRE_THAT(g.values, Near(fx.tensor3<double>("grad_values"), gradient_tolerance<TestType>()));
  check_parameter_gradients(attention, fx);

  // The record stays: a second backward adds the same parameter gradients again, as PyTorch's .grad does.
  const std::vector<TestType> once = gradients_of(attention);
  attention.backward(fx.tensor3<TestType>("grad_output"));
  const std::vector<TestType> twice = gradients_of(attention);
  for (std::size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == TestType(2) * once[i]);
  attention.zero_grad();
  for (TestType x : gradients_of(attention)) REQUIRE(x == TestType(0));
}

TEMPLATE_TEST_CASE("MultiHeadAttention::backward on self-attention: the three gradients add up to autograd's",
                   "[gradients][multi_head][golden]", float, double) {
  const AttentionPath path = GENERATE(AttentionPath::direct, AttentionPath::tiled);
  CAPTURE(path);
  const Fixture fx("grad_mha_self");
  MultiHeadAttention<TestType> attention = mha_from<TestType>(fx, 8, 8, 8, 8);
  attention.set_path(path);
  const Tensor3<TestType> X = fx.tensor3<TestType>("X");
  REQUIRE_THAT(attention(X, X, X, attend_test::valid_lens(fx)),
               Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const AttentionGradients<TestType> g = attention.backward(fx.tensor3<TestType>("grad_output"));
  const Tensor3<TestType> dX = g.queries + g.keys + g.values;
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_X"), gradient_tolerance<TestType>()));
  check_parameter_gradients(attention, fx);
}

// ---- against finite differences ------------------------------------------------------------------------------------

TEST_CASE("MultiHeadAttention::backward agrees with finite differences, with dropout, on both paths, every mask",
          "[gradients][multi_head][dropout]") {
  Tensor3<bool> keep(1, 3, 6);
  keep.setConstant(true);
  keep(0, 1, 2) = keep(0, 2, 0) = keep(0, 2, 5) = false;
  const Mask masks[] = {Mask{}, Mask(ValidLens{4, 0}), Mask::causal(), Mask(ValidLens{5, 2}) && Mask::keep(keep),
                        Mask(ValidLens{0, 3}).when_fully_masked(FullyMasked::zero)};
  const Tensor3<double> queries = random_tensor<double>(2, 3, 4, 201), keys = random_tensor<double>(2, 6, 5, 202),
                        values = random_tensor<double>(2, 6, 3, 203), dY = random_tensor<double>(2, 3, 8, 204);
  for (const double p : {0.0, 0.4})
    for (std::size_t m = 0; m < std::size(masks); ++m)
      for (const AttentionPath path : both_paths) {
        CAPTURE(p, m, path);
        attend::Generator init(205);
        MultiHeadAttention<double> attention(5, 4, 3, 8, 2, p, true, init);
        attention.set_path(path);
        Tensor3<double> q = queries, k = keys, v = values;
        // L = <dY, attention(q, k, v)>, each evaluation with the same dropout mask (the generator reseeded).
        const std::function<double()> loss = [&] {
          attention.generator().seed(206);
          return attend_test::dot(dY, attention(q, k, v, masks[m]));
        };
        loss();
        const AttentionGradients<double> g = attention.backward(dY);
        REQUIRE_THAT(g.queries,
                     Near(attend_test::finite_difference(q, loss), attend_test::finite_difference_tolerance()));
        REQUIRE_THAT(g.keys, Near(attend_test::finite_difference(k, loss), attend_test::finite_difference_tolerance()));
        REQUIRE_THAT(g.values,
                     Near(attend_test::finite_difference(v, loss), attend_test::finite_difference_tolerance()));
        for (attend::Linear<double>* linear :
             {&attention.W_q(), &attention.W_k(), &attention.W_v(), &attention.W_o()}) {
          const Matrix<double> dW = linear->weight_grad();
          const Vector<double> db = linear->bias_grad();
          REQUIRE_THAT(dW, Near(attend_test::finite_difference(linear->weight(), loss),
                                attend_test::finite_difference_tolerance()));
          REQUIRE_THAT(db, Near(attend_test::finite_difference(linear->bias(), loss),
                                attend_test::finite_difference_tolerance()));
        }
      }
}

TEST_CASE("DotProductAttention::backward agrees with finite differences, with dropout, on both paths",
          "[gradients][dot_product][dropout]") {
  const Tensor3<double> queries = random_tensor<double>(2, 5, 4, 211), keys = random_tensor<double>(2, 7, 4, 212),
                        values = random_tensor<double>(2, 7, 3, 213), dY = random_tensor<double>(2, 5, 3, 214);
  for (const Mask& mask : {Mask::causal(), Mask(ValidLens{2, 7})})
    for (const AttentionPath path : both_paths) {
      CAPTURE(path);
      DotProductAttention<double> attention(0.3);
      attention.set_path(path);
      Tensor3<double> q = queries, k = keys, v = values;
      const std::function<double()> loss = [&] {
        attention.generator().seed(215);
        return attend_test::dot(dY, attention(q, k, v, mask));
      };
      loss();
      const AttentionGradients<double> g = attention.backward(dY);
      REQUIRE_THAT(g.queries,
                   Near(attend_test::finite_difference(q, loss), attend_test::finite_difference_tolerance()));
      REQUIRE_THAT(g.keys, Near(attend_test::finite_difference(k, loss), attend_test::finite_difference_tolerance()));
      REQUIRE_THAT(g.values, Near(attend_test::finite_difference(v, loss), attend_test::finite_difference_tolerance()));
    }
}

TEST_CASE("AdditiveAttention::backward agrees with finite differences, with dropout and masks",
          "[gradients][additive][dropout]") {
  const Tensor3<double> queries = random_tensor<double>(2, 3, 4, 261), keys = random_tensor<double>(2, 6, 5, 262),
                        values = random_tensor<double>(2, 6, 3, 263), dY = random_tensor<double>(2, 3, 3, 264);
  for (const double p : {0.0, 0.4})
    for (const Mask& mask : {Mask{}, Mask(ValidLens{4, 0}), Mask::causal()}) {
      CAPTURE(p);
      attend::Generator init(265);
      AdditiveAttention<double> attention(5, 4, 7, p, init);  // key_size 5, query_size 4, num_hiddens 7
      Tensor3<double> q = queries, k = keys, v = values;
      const std::function<double()> loss = [&] {
        attention.generator().seed(266);
        return attend_test::dot(dY, attention(q, k, v, mask));
      };
      loss();
      const AttentionGradients<double> g = attention.backward(dY);
      REQUIRE_THAT(g.queries,
                   Near(attend_test::finite_difference(q, loss), attend_test::finite_difference_tolerance()));
      REQUIRE_THAT(g.keys, Near(attend_test::finite_difference(k, loss), attend_test::finite_difference_tolerance()));
      REQUIRE_THAT(g.values, Near(attend_test::finite_difference(v, loss), attend_test::finite_difference_tolerance()));
      for (attend::Linear<double>* linear : {&attention.W_q(), &attention.W_k(), &attention.w_v()}) {
        const Matrix<double> dW = linear->weight_grad();
        REQUIRE_THAT(dW, Near(attend_test::finite_difference(linear->weight(), loss),
                              attend_test::finite_difference_tolerance()));
      }
    }
}

// ---- the tiled path over many blocks, and threads ------------------------------------------------------------------

// Longer than a few of the core's blocks in both directions (tuning::core_query_rows, core_key_rows), with a last
// partial block, so that dK and dV add many query blocks and dQ many key blocks; a row that sees no key (valid length
// 0: uniform weights, dropped) included.
TEMPLATE_TEST_CASE("the tiled backward gives the direct path's gradients over many blocks, with dropout",
                   "[gradients][multi_head][tiled]", float, double) {
  const Index n = 600;
  Tensor3<bool> keep(1, n, n);
  for (Index i = 0; i < keep.size(); ++i) keep.data()[i] = (i * 7919) % 5 != 0;
  const Mask masks[] = {Mask::causal(), Mask(ValidLens{500, 0}) && Mask::keep(keep), Mask{}};
  const Tensor3<TestType> X = random_tensor<TestType>(2, n, 16, 221), dY = random_tensor<TestType>(2, n, 16, 222);
  for (const Mask& mask : masks) {
    AttentionGradients<TestType> g[2];
    std::vector<TestType> parameters[2];
    for (int tiled = 0; tiled < 2; ++tiled) {
      attend::Generator init(223);
      MultiHeadAttention<TestType> attention(16, 16, 16, 16, 2, TestType(0.25), false, init);
      attention.set_path(tiled ? AttentionPath::tiled : AttentionPath::direct);
      attention.generator().seed(224);
      attention(X, X, X, mask);
      g[tiled] = attention.backward(dY);
      parameters[tiled] = gradients_of(attention);
    }
    const Tolerance<TestType> tol =
        std::is_same_v<TestType, float> ? Tolerance<TestType>{1e-4f, 1e-5f} : Tolerance<TestType>{1e-10, 1e-12};
    REQUIRE_THAT(g[1].queries, Near(g[0].queries, tol));
    REQUIRE_THAT(g[1].keys, Near(g[0].keys, tol));
    REQUIRE_THAT(g[1].values, Near(g[0].values, tol));
    for (std::size_t i = 0; i < parameters[0].size(); ++i) {
      CAPTURE(i);
      REQUIRE(std::abs(parameters[1][i] - parameters[0][i]) <= tol.abs + tol.rel * std::abs(parameters[0][i]));
    }
  }
}

TEMPLATE_TEST_CASE("the direct backward gives the same bits taking whole heads or one head at a time",
                   "[gradients][multi_head]", float, double) {
  // Eight batch rows of one head each make tuning::backward_items key/value heads: each taken whole. One batch row
  // alone goes in blocks of queries, then of keys (tuning::direct_block_rows, 150 steps: three blocks, the last
  // partial). Every step of the module works row by row, so each batch row's input gradients must be the bits of the
  // same row run alone. Causal, and valid lengths from 150 down to 0 (a row that sees nothing: uniform weights), so
  // that the blocks see different numbers of keys and the products are cut to them.
  const Index batch = 8, n = 150, d = 16;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, n, d, 241), dY = random_tensor<TestType>(batch, n, d, 242);
  const auto run = [&](const Tensor3<TestType>& x, const Tensor3<TestType>& dy, const Mask& mask) {
    attend::Generator init(243);
    MultiHeadAttention<TestType> attention(d, d, d, d, 1, TestType(0), false, init);
    attention.set_path(AttentionPath::direct);
    attention(x, x, x, mask);
    return attention.backward(dy);
  };
  std::vector<Index> lens(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b) lens[static_cast<std::size_t>(b)] = b == batch - 1 ? 0 : n - 23 * b;
  for (const bool causal : {true, false}) {
    CAPTURE(causal);
    const Mask together_mask = causal ? Mask::causal() : Mask(ValidLens::per_batch(lens));
    const AttentionGradients<TestType> together = run(X, dY, together_mask);
    for (Index b = 0; b < batch; ++b) {
      CAPTURE(b);
      const Eigen::array<Index, 3> offsets{b, 0, 0}, extents{1, n, d};
      const Tensor3<TestType> x = X.slice(offsets, extents), dy = dY.slice(offsets, extents);
      const Mask alone_mask = causal ? Mask::causal() : Mask(ValidLens{lens[static_cast<std::size_t>(b)]});
      const AttentionGradients<TestType> alone = run(x, dy, alone_mask);
      const Tensor3<TestType> q = together.queries.slice(offsets, extents), k = together.keys.slice(offsets, extents),
                              v = together.values.slice(offsets, extents);
      REQUIRE_THAT(alone.queries, Near(q, exact<TestType>()));
      REQUIRE_THAT(alone.keys, Near(k, exact<TestType>()));
      REQUIRE_THAT(alone.values, Near(v, exact<TestType>()));
    }
  }
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("MultiHeadAttention::backward gives the same bits on 1 and 2 threads, on both paths",
                   "[gradients][multi_head][threads]", float, double) {
  // One batch row and one head on the tiled path: its work split over key blocks; several on the direct path.
  const Tensor3<TestType> X = random_tensor<TestType>(1, 400, 32, 231), dY = random_tensor<TestType>(1, 400, 32, 232);
  for (const AttentionPath path : both_paths) {
    CAPTURE(path);
    AttentionGradients<TestType> g[2];
    std::vector<TestType> parameters[2];
    for (int threads : {1, 2}) {
      attend::set_num_threads(threads);
      attend::Generator init(233);
      MultiHeadAttention<TestType> attention(32, 32, 32, 32, path == AttentionPath::tiled ? 1 : 4, TestType(0.1), true,
                                             init);
      attention.set_path(path);
      attention(X, X, X, Mask::causal());
      g[threads - 1] = attention.backward(dY);
      parameters[threads - 1] = gradients_of(attention);
    }
    attend::set_num_threads(2);
    REQUIRE_THAT(g[1].queries, Near(g[0].queries, exact<TestType>()));
    REQUIRE_THAT(g[1].keys, Near(g[0].keys, exact<TestType>()));
    REQUIRE_THAT(g[1].values, Near(g[0].values, exact<TestType>()));
    REQUIRE(parameters[1] == parameters[0]);
  }
}
#endif

// ---- errors
// ----------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("attention backward: no recorded call, a grad_output of another shape, a resized parameter",
                   "[gradients][bad_input]", float, double) {
  MultiHeadAttention<TestType> attention(4, 4, 4, 8, 2, TestType(0));
  const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 241);
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 3, 8, 242);
  REQUIRE_THROWS_AS(attention.backward(dY), std::logic_error);
  REQUIRE_THROWS_WITH(attention.backward(dY), Contains("MultiHeadAttention::backward") && Contains("no recorded call"));
  attention.forward(X, X, X);  // records nothing
  REQUIRE_THROWS_AS(attention.backward(dY), std::logic_error);

  attention(X, X, X, ValidLens{2, 3});
  const Tensor3<TestType> wrong = random_tensor<TestType>(2, 3, 7, 243);
  REQUIRE_THROWS_AS(attention.backward(wrong), std::invalid_argument);
  REQUIRE_THROWS_WITH(attention.backward(wrong), Contains("MultiHeadAttention::backward") && Contains("grad_output") &&
                                                     Contains("(2, 3, 8)") && Contains("(2, 3, 7)"));
  for (TestType x : gradients_of(attention)) REQUIRE(x == TestType(0));  // nothing added by the failed calls

  attention.W_k().weight_grad().resize(3, 3);
  REQUIRE_THROWS_AS(attention.backward(dY), std::invalid_argument);
  REQUIRE_THROWS_WITH(attention.backward(dY),
                      Contains("MultiHeadAttention::backward") && Contains("weight") && Contains("resized"));
  attention.W_k().weight_grad().setZero(8, 4);
  for (TestType x : gradients_of(attention)) REQUIRE(x == TestType(0));
  attention.backward(dY);  // and with the buffer back in shape it runs

  AdditiveAttention<TestType> additive(4, 4, 5, TestType(0));
  REQUIRE_THROWS_AS(additive.backward(X), std::logic_error);
  REQUIRE_THROWS_WITH(additive.backward(X), Contains("AdditiveAttention::backward") && Contains("no recorded call"));
  additive.forward(X, X, X);  // records nothing
  REQUIRE_THROWS_AS(additive.backward(X), std::logic_error);
  additive(X, X, X);
  REQUIRE_THROWS_WITH(additive.backward(dY),
                      Contains("AdditiveAttention::backward") && Contains("(2, 3, 4)") && Contains("(2, 3, 8)"));
  for (TestType x : gradients_of(additive)) REQUIRE(x == TestType(0));

  DotProductAttention<TestType> plain(TestType(0));
  REQUIRE_THROWS_WITH(plain.backward(dY), Contains("DotProductAttention::backward") && Contains("no recorded call"));
  plain(X, X, X);
  REQUIRE_THROWS_WITH(plain.backward(dY), Contains("DotProductAttention::backward") && Contains("(2, 3, 4)"));
}

TEMPLATE_TEST_CASE("attention backward: a NaN in grad_output reaches the gradients, and nothing crashes",
                   "[gradients][numerical]", float, double) {
  const AttentionPath path = GENERATE(AttentionPath::direct, AttentionPath::tiled);
  CAPTURE(path);
  MultiHeadAttention<TestType> attention(4, 4, 4, 8, 2, TestType(0));
  attention.set_path(path);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 3, 4, 251);
  Tensor3<TestType> dY = random_tensor<TestType>(2, 3, 8, 252);
  dY(0, 1, 2) = std::numeric_limits<TestType>::quiet_NaN();
  attention(X, X, X);
  const AttentionGradients<TestType> g = attention.backward(dY);
  REQUIRE(std::isnan(g.queries(0, 1, 0)));
  REQUIRE(std::isnan(attention.W_o().weight_grad()(2, 0)));
  REQUIRE_FALSE(std::isnan(g.queries(1, 1, 0)));  // batch row 1 never meets the NaN
}

// ---- a training run ------------------------------------------------------------------------------------------------

namespace {

// Each Linear of examples/sequence_model.hpp's model with its state_dict prefix, as the script names them.
template <class Model, class Visit>
void for_each_linear(Model& model, Visit&& visit) {
  visit(model.embedding, "embedding.");
  visit(model.attention.W_q(), "attention.W_q.");
  visit(model.attention.W_k(), "attention.W_k.");
  visit(model.attention.W_v(), "attention.W_v.");
  visit(model.attention.W_o(), "attention.W_o.");
  visit(model.head, "head.");
}

}  // namespace

TEST_CASE("ten Adam steps of self-attention give PyTorch's loss at every step, on both paths", "[training][golden]") {
  const Fixture fx("training_run");
  const Index vocab = fx.index("vocab"), d = fx.index("d");
  const AttentionPath path = GENERATE(AttentionPath::direct, AttentionPath::tiled);
  CAPTURE(path);
  attend::Generator generator(1);  // drawn from, then overwritten by the script's parameters
  attend_examples::SequenceModel<double> model(vocab, d, fx.index("heads"), 0.0, generator);
  model.attention.set_path(path);
  for_each_linear(model, [&](Linear<double>& linear, const std::string& prefix) {
    linear.weight() = fx.matrix<double>(prefix + "weight");
    if (linear.has_bias()) linear.bias() = fx.vector<double>(prefix + "bias");
  });
  attend::Adam<double> adam(model.parameters(), fx.scalar("lr"));
  for (Index step = 1; step <= fx.index("training_steps"); ++step) {
    CAPTURE(step);
    const attend::Matrix<Index> tokens = fx.index_matrix("tokens_" + std::to_string(step));  // (batch, steps)
    const attend::Matrix<Index> labels = tokens.rowwise().reverse();
    const attend::Loss<double> loss =
        attend::cross_entropy(model(attend_examples::one_hot<double>(tokens, vocab)), labels);
    REQUIRE(loss.value == Approx(fx.scalar("loss_" + std::to_string(step))).epsilon(1e-9).margin(0));
    adam.zero_grad();
    model.backward(loss.grad);
    adam.step();
  }
  // Ten updates later, every parameter is PyTorch's.
  for_each_linear(model, [&](Linear<double>& linear, const std::string& prefix) {
    CAPTURE(prefix);
    REQUIRE_THAT(linear.weight(),
                 Near(fx.matrix<double>(prefix + "weight_final"), attend_test::Tolerance<double>{1e-9, 1e-12}));
    if (linear.has_bias())
      REQUIRE_THAT(linear.bias(),
                   Near(fx.vector<double>(prefix + "bias_final"), attend_test::Tolerance<double>{1e-9, 1e-12}));
  });
}
