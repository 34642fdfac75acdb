// Data-parallel training over MPI: d2l's Transformer encoder and a linear head learn to count, at each position of a
// sequence of tokens, how often its token occurs in the sequence; each rank trains on its share of every batch, the
// gradients averaged before each Adam step (attend/distributed.hpp).
//
//   mpirun -np 2 ./build/examples/train_distributed [output_directory]
//
// Every rank draws the same batches from one seed and takes its rows of each; broadcast_parameters starts the ranks
// from rank 0's model; after backward, average_gradients makes every rank's gradient the mean over the ranks, which
// is the gradient of the whole batch's mean loss (the shares are equal). Rank 0 first trains a copy of the model
// alone on the whole batches, in double: the two loss curves agree to rounding (the sums are taken in another order)
// for as long as training keeps the effect of a rounding error small; once it amplifies them, they part as any two
// runs a rounding apart do, which a third run shows: rank 0 alone again, one weight changed by one unit in the last
// place. The program prints the three curves and draws them (train_distributed_loss.png). A rank that throws calls
// MPI_Abort with its message, so no other rank is left waiting.
#include <attend/attend.hpp>
#include <attend/distributed.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "plot.hpp"

namespace ex = attend_examples;
using attend::Index;
using Scalar = double;

namespace {

constexpr Index vocab = 10, steps = 8, hiddens = 32, ffn_hiddens = 64, heads = 4, blocks = 2;
constexpr Index batch = 64, training_steps = 300;

// The encoder and its head: tokens (batch, steps) -> logits (batch, steps, vocab).
struct Model {
  attend::TransformerEncoder<Scalar> encoder{vocab, hiddens, ffn_hiddens, heads, blocks, Scalar(0)};
  attend::Linear<Scalar> head{hiddens, steps + 1, true};

  attend::Tensor3<Scalar> operator()(const attend::Matrix<Index>& tokens) { return head(encoder(tokens)); }
  void backward(const attend::Tensor3<Scalar>& grad_logits) { encoder.backward(head.backward(grad_logits)); }
  std::vector<attend::Parameter<Scalar>> parameters() {
    std::vector<attend::Parameter<Scalar>> all = encoder.parameters(), more = head.parameters();
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }
};

// Batch `step` of the run, (batch, steps) tokens uniform in [0, vocab): the same on every rank.
attend::Matrix<Index> batch_of(Index step) {
  attend::Generator generator(1000 + static_cast<std::uint64_t>(step));
  attend::Matrix<Index> tokens(batch, steps);
  for (Index i = 0; i < tokens.size(); ++i)
    tokens.data()[i] = static_cast<Index>(generator.uniform01<double>() * static_cast<double>(vocab));
  return tokens;
}

// The task: for each position, how many times its token occurs in its sequence (1 .. steps). tokens (rows, steps).
attend::Matrix<Index> histogram(const attend::Matrix<Index>& tokens) {
  attend::Matrix<Index> counts(tokens.rows(), tokens.cols());
  for (Index b = 0; b < tokens.rows(); ++b)
    for (Index t = 0; t < tokens.cols(); ++t) counts(b, t) = (tokens.row(b).array() == tokens(b, t)).count();
  return counts;
}

// Trains `model` on rows [first, first + rows) of every batch, over comm (a communicator of one rank: alone), and
// returns the loss of each step, the mean over the ranks of their shares' mean losses.
std::vector<double> train(Model& model, MPI_Comm comm, Index first, Index rows) {
  const std::vector<attend::Parameter<Scalar>> parameters = model.parameters();
  attend::Adam<Scalar> adam(parameters, Scalar(3e-3));
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<double> curve;
  for (Index step = 0; step < training_steps; ++step) {
    const attend::Matrix<Index> tokens = batch_of(step).middleRows(first, rows);  // (rows, steps)
    const attend::Matrix<Index> labels = histogram(tokens);                       // (rows, steps)
    const attend::Loss<Scalar> loss = attend::cross_entropy(model(tokens), labels);
    adam.zero_grad();
    model.backward(loss.grad);
    attend::average_gradients(comm, parameters);
    adam.step();
    double value = loss.value, total = 0;
    MPI_Allreduce(&value, &total, 1, MPI_DOUBLE, MPI_SUM, comm);
    curve.push_back(total / ranks);
  }
  return curve;
}

std::string loss_script(int ranks) {
  std::ostringstream gp;
  gp << ex::png_preamble(720, 620, "train_distributed_loss.png") << "set multiplot layout 2,1\n"
     << "set title 'Data-parallel training over MPI: 1 process against " << ranks << " ranks'\n"
     << "set ylabel 'cross-entropy loss'\n"
     << "set grid\n"
     << "set key top right\n"
     << "plot 'train_distributed_loss.csv' using 1:2 with lines lw 4 lc rgb '#9ecae1' title '1 process, whole "
        "batches', "
        "\\\n"
     << "     '' using 1:3 with lines lw 1.5 lc rgb '#08519c' title '" << ranks << " ranks, a share each'\n"
     << "set title 'Relative difference from the 1-process run'\n"
     << "set xlabel 'step'\n"
     << "set ylabel 'relative difference'\n"
     << "set logscale y\n"
     << "set format y '10^{%L}'\n"
     << "set key top left\n"
     << "plot [][1e-17:1] '' using 1:($4 > 0 ? $4 : 1e-17) with lines lw 1.5 lc rgb '#08519c' title '" << ranks
     << " ranks', \\\n"
     << "     '' using 1:($6 > 0 ? $6 : 1e-17) with lines lw 1.5 dt 2 lc rgb '#d62728' "
        "title '1 process, one weight one ulp away'\n"
     << "unset multiplot\n";
  return gp.str();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  attend::run_or_abort(MPI_COMM_WORLD, [&] {
    attend::set_num_threads(1);
    const ex::fs::path dir = ex::output_directory(argc, argv);
    if (batch % ranks != 0)
      throw std::invalid_argument("the batch of " + std::to_string(batch) + " does not split evenly over " +
                                  std::to_string(ranks) + " ranks");
    // One starting model: rank 0's initialisation on every rank, and the copy rank 0 trains alone.
    Model model;
    attend::broadcast_parameters(MPI_COMM_WORLD, model.parameters());
    std::vector<double> alone, nudged;
    if (rank == 0) {
      std::printf(
          "counting each token's occurrences in sequences of %ld tokens: d2l's Transformer encoder (%ld blocks, %ld "
          "hidden, %ld heads) "
          "and a linear head; Adam, batches of %ld; %d rank(s) of 1 thread\n",
          static_cast<long>(steps), static_cast<long>(blocks), static_cast<long>(hiddens), static_cast<long>(heads),
          static_cast<long>(batch), ranks);
      Model copy = model, nudged_copy = model;
      alone = train(copy, MPI_COMM_SELF, 0, batch);
      Scalar& weight = nudged_copy.head.parameters().front().value[0];
      weight = std::nextafter(weight, Scalar(1));
      nudged = train(nudged_copy, MPI_COMM_SELF, 0, batch);
    }
    const Index share = batch / ranks;
    const std::vector<double> together = train(model, MPI_COMM_WORLD, rank * share, share);
    if (rank == 0) {
      std::printf(
          "\nloss of 1 process, of %d ranks, and their relative difference; the same for 1 process with one "
          "weight one unit in the last place away\n step   1 process   %d ranks   difference   one ulp away   "
          "difference\n",
          ranks, ranks);
      ex::Table curve{{"step", "alone", "ranks", "ranks_difference", "nudged", "nudged_difference"}, {}};
      for (Index s = 0; s < training_steps; ++s) {
        const auto k = static_cast<std::size_t>(s);
        const double apart = std::abs(together[k] - alone[k]) / alone[k];
        const double nudge = std::abs(nudged[k] - alone[k]) / alone[k];
        curve.rows.push_back({static_cast<double>(s), alone[k], together[k], apart, nudged[k], nudge});
        if (s % 25 == 0 || s + 1 == training_steps)
          std::printf("%5ld   %9.6f   %8.6f   %10.1e   %12.6f   %10.1e\n", static_cast<long>(s), alone[k], together[k],
                      apart, nudged[k], nudge);
      }
      std::printf("(double's rounding unit: %.1e)\n\n",
                  static_cast<double>(std::numeric_limits<Scalar>::epsilon()) / 2);
      ex::write_csv(dir / "train_distributed_loss.csv", curve);
      ex::draw(dir, "train_distributed_loss", loss_script(ranks));
    }
  });
  MPI_Finalize();
  return 0;
}
