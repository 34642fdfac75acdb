// Training in C++: a positional encoding, multi-head self-attention and a linear head learn to reverse a sequence of
// tokens. Each step draws a batch of random sequences; the label at position t is the token at position
// steps - 1 - t, which the model can only find by attending to the right position: at the start every position's
// guess is chance (1 / vocab), at the end every token lands where it should.
//
//   ./build/examples/train_attention [output_directory]
//
// Prints the loss (d2l's MaskedSoftmaxCELoss, here over every position) and the accuracy of each epoch, and draws
// the loss curve (train_attention_loss.png). The model is examples/sequence_model.hpp;
// tests/test_attention_gradients.cpp trains it in double beside PyTorch and matches the loss at every step.
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "plot.hpp"
#include "sequence_model.hpp"

namespace ex = attend_examples;
using attend::Index;

namespace {

// (batch, steps) tokens uniform in [0, vocab).
attend::Matrix<Index> random_tokens(Index batch, Index steps, Index vocab, attend::Generator& generator) {
  attend::Matrix<Index> tokens(batch, steps);
  for (Index i = 0; i < tokens.size(); ++i)
    tokens.data()[i] = static_cast<Index>(generator.uniform01<double>() * static_cast<double>(vocab));
  return tokens;
}

// The fraction of positions whose largest logit is the label. logits: (batch, steps, vocab).
double accuracy(const attend::Tensor3<float>& logits, const attend::Matrix<Index>& labels) {
  Index right = 0;
  for (Index b = 0; b < labels.rows(); ++b)
    for (Index t = 0; t < labels.cols(); ++t) {
      Index best = 0;
      for (Index v = 1; v < logits.dimension(2); ++v)
        if (logits(b, t, v) > logits(b, t, best)) best = v;
      right += best == labels(b, t);
    }
  return static_cast<double>(right) / static_cast<double>(labels.size());
}

std::string loss_script(double chance) {
  std::ostringstream gp;
  gp << ex::png_preamble(720, 360, "train_attention_loss.png")
     << "set title 'Learning to reverse a sequence: self-attention trained with attend (Adam)'\n"
     << "set xlabel 'step'\n"
     << "set ylabel 'cross-entropy loss'\n"
     << "set logscale y\n"
     << "set format y '10^{%L}'\n"
     << "set grid\n"
     << "set key top right\n"
     << "plot 'train_attention_loss.csv' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'training loss', \\\n"
     << "     " << chance << " with lines dt 2 lc rgb '#808080' title 'chance: log(vocab)'\n";
  return gp.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const ex::fs::path dir = ex::output_directory(argc, argv);
  const Index vocab = 10, steps = 8, d = 32, heads = 4, batch = 64, epochs = 12, steps_per_epoch = 25;
  attend::Generator generator(7);
  ex::SequenceModel<float> model(vocab, d, heads, 0.0f, generator);  // no dropout: nothing here to overfit
  attend::Adam<float> adam(model.parameters(), 1e-2f);
  std::printf(
      "reversing sequences of %ld tokens from a vocabulary of %ld: embedding (%ld), positional encoding,\n"
      "%ld-head self-attention, linear head; Adam, lr 0.01, batches of %ld; kernels: %s, %d thread(s)\n\n",
      static_cast<long>(steps), static_cast<long>(vocab), static_cast<long>(d), static_cast<long>(heads),
      static_cast<long>(batch), attend::isa_name(attend::active_isa()), attend::num_threads());
  std::printf("epoch   loss     accuracy   (chance: loss %.3f, accuracy %.3f)\n", std::log(double(vocab)),
              1.0 / double(vocab));

  ex::Table curve{{"step", "loss"}, {}};
  const auto start = std::chrono::steady_clock::now();
  for (Index epoch = 1; epoch <= epochs; ++epoch) {
    double loss_sum = 0, accuracy_sum = 0;
    for (Index s = 0; s < steps_per_epoch; ++s) {
      const attend::Matrix<Index> tokens = random_tokens(batch, steps, vocab, generator);  // (batch, steps)
      const attend::Matrix<Index> labels = tokens.rowwise().reverse();                     // (batch, steps)
      const attend::Tensor3<float> logits = model(ex::one_hot<float>(tokens, vocab));      // (batch, steps, vocab)
      const attend::Loss<float> loss = attend::cross_entropy(logits, labels);
      adam.zero_grad();
      model.backward(loss.grad);
      adam.step();
      loss_sum += loss.value;
      accuracy_sum += accuracy(logits, labels);
      curve.rows.push_back({double((epoch - 1) * steps_per_epoch + s), double(loss.value)});
    }
    std::printf("%5ld   %.4f   %.3f\n", static_cast<long>(epoch), loss_sum / steps_per_epoch,
                accuracy_sum / steps_per_epoch);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%ld training steps in %.1f s\n", static_cast<long>(epochs * steps_per_epoch), seconds);

  // A sequence it has not seen, in evaluation mode.
  model.train(false);
  const attend::Matrix<Index> tokens = random_tokens(1, steps, vocab, generator);
  const attend::Tensor3<float> logits = model(ex::one_hot<float>(tokens, vocab));
  std::cout << "a new sequence, in evaluation mode:\n  input    ";
  for (Index t = 0; t < steps; ++t) std::cout << ' ' << tokens(0, t);
  std::cout << "\n  output   ";
  for (Index t = 0; t < steps; ++t) {
    Index best = 0;
    for (Index v = 1; v < vocab; ++v)
      if (logits(0, t, v) > logits(0, t, best)) best = v;
    std::cout << ' ' << best;
  }
  std::cout << "\n\n";

  ex::write_csv(dir / "train_attention_loss.csv", curve);
  ex::draw(dir, "train_attention_loss", loss_script(std::log(double(vocab))));
  return 0;
} catch (const std::exception& e) {
  std::cerr << "train_attention: " << e.what() << '\n';
  return 1;
}
