// A whole training run against PyTorch's: examples/sequence_model.hpp's model (an embedding, the positional encoding,
// multi-head self-attention, a linear head), from the initial parameters and on the batches of
// tests/reference/make_training_run.py, ten Adam steps in double on each attention path: the loss at every step and
// the parameters at the end must be PyTorch's.
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <support/fixture.hpp>
#include <support/matchers.hpp>

#include "sequence_model.hpp"

using attend::AttentionPath;
using attend::Index;
using attend::Linear;
using attend_test::Fixture;
using attend_test::Near;

namespace {

// Each Linear of the model with its state_dict prefix, as the script names them.
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
