// average_gradients under mpirun (2 and 3 ranks, tests/CMakeLists.txt): every rank fills its parameters' gradients
// with draws of its own seed; afterwards each gradient is the mean of all ranks' draws, which every rank recomputes in
// double from the same seeds, within the rounding of a sum of `ranks` terms and one division. Parameters larger than a
// bucket and smaller; a communicator of one rank; parameters that differ across ranks, and a rank with a null gradient:
// every rank throws, none hangs. broadcast_parameters: every rank ends with the root's values.
#include <attend/distributed.hpp>
#include <attend/linear.hpp>
#include <attend/loss.hpp>
#include <attend/optim.hpp>
#include <attend/random.hpp>
#include <attend/transformer_encoder.hpp>
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "mpi_world.hpp"

using attend::Index;
using attend::Parameter;

namespace {

// The gradient values rank r draws for parameter i, element k: the same on every rank that asks.
template <class Scalar>
std::vector<Scalar> draws(int rank, Index size, std::size_t i) {
  attend::Generator generator(1000 + 97 * static_cast<std::uint64_t>(rank) + i);
  std::vector<Scalar> values(static_cast<std::size_t>(size));
  for (Scalar& v : values) v = generator.uniform(Scalar(-1), Scalar(1));
  return values;
}

// The modules a rank trains: small and larger than a bucket of tuning::gradient_bucket_bytes (a float bucket holds
// 1048576 elements, a double one 524288; the large weight has 1126400).
template <class Scalar>
struct Model {
  attend::Linear<Scalar> small{5, 3, true};
  attend::Linear<Scalar> large{1100, 1024, false};
  std::vector<Parameter<Scalar>> parameters() {
    std::vector<Parameter<Scalar>> all = small.parameters(), more = large.parameters();
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }
};

template <class Scalar>
void fill(const std::vector<Parameter<Scalar>>& params, int rank) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<Scalar> values = draws<Scalar>(rank, params[i].size, i);
    std::copy(values.begin(), values.end(), params[i].grad);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("average_gradients gives every rank the mean of the ranks' gradients", "[distributed]", float,
                   double) {
  using Scalar = TestType;
  const int rank = world_rank(), ranks = world_size();
  Model<Scalar> model;
  const std::vector<Parameter<Scalar>> params = model.parameters();
  fill(params, rank);
  attend::average_gradients(MPI_COMM_WORLD, params);
  // Bound: the sum of `ranks` values in Scalar within (ranks - 1) u of the sum of their magnitudes, the division
  // within u of the result (u = 2^-24 for float, 2^-53 for double).
  const double u = std::numeric_limits<Scalar>::epsilon() / 2;
  double worst = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::vector<double> sum(static_cast<std::size_t>(params[i].size), 0.0), magnitude(sum.size(), 0.0);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<Scalar> values = draws<Scalar>(r, params[i].size, i);
      for (std::size_t k = 0; k < sum.size(); ++k) {
        sum[k] += static_cast<double>(values[k]);
        magnitude[k] += std::abs(static_cast<double>(values[k]));
      }
    }
    for (std::size_t k = 0; k < sum.size(); ++k) {
      const double mean = sum[k] / ranks;
      const double bound = (ranks - 1) * u * magnitude[k] / ranks + u * std::abs(mean) + 1e-300;
      worst = std::max(worst, std::abs(static_cast<double>(params[i].grad[k]) - mean) / bound);
    }
  }
  CHECK(worst <= 1.0);
}

TEMPLATE_TEST_CASE("average_gradients over a communicator of one rank leaves the gradients as they are",
                   "[distributed]", float, double) {
  attend::Linear<TestType> layer(4, 3, true);
  const std::vector<Parameter<TestType>> params = layer.parameters();
  fill(params, world_rank());
  const attend::Matrix<TestType> before = layer.weight_grad();
  attend::average_gradients(MPI_COMM_SELF, params);
  CHECK(layer.weight_grad() == before);
}

TEMPLATE_TEST_CASE(
    "average_gradients refuses parameters that differ across ranks, on every rank, the gradients "
    "unchanged",
    "[distributed]", float, double) {
  const int rank = world_rank();
  Model<TestType> model;
  std::vector<Parameter<TestType>> params = model.parameters();
  fill(params, rank);
  const attend::Matrix<TestType> before = model.small.weight_grad();
  SECTION("rank 0 passes one parameter fewer") {
    if (rank == 0) params.pop_back();
    REQUIRE_THROWS_AS(attend::average_gradients(MPI_COMM_WORLD, params), std::invalid_argument);
  }
  SECTION("the last rank passes its parameters in another order") {
    if (rank == world_size() - 1) std::swap(params[0], params[1]);
    REQUIRE_THROWS_WITH(attend::average_gradients(MPI_COMM_WORLD, params), Catch::Contains("differ in size or order"));
  }
  SECTION("rank 1 has a parameter without gradient storage") {
    if (rank == 1) params[0].grad = nullptr;
    REQUIRE_THROWS_WITH(attend::average_gradients(MPI_COMM_WORLD, params),
                        Catch::Contains(rank == 1 ? "null grad pointer" : "rank 1's parameters are not usable"));
  }
  CHECK(model.small.weight_grad() == before);
}

TEMPLATE_TEST_CASE("broadcast_parameters gives every rank the root's values", "[distributed]", float, double) {
  using Scalar = TestType;
  const int rank = world_rank(), root = world_size() - 1;
  Model<Scalar> model;
  const std::vector<Parameter<Scalar>> params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {  // each rank's own values
    const std::vector<Scalar> values = draws<Scalar>(rank, params[i].size, i);
    std::copy(values.begin(), values.end(), params[i].value);
  }
  attend::broadcast_parameters(MPI_COMM_WORLD, params, root);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<Scalar> expected = draws<Scalar>(root, params[i].size, i);
    CHECK(std::equal(expected.begin(), expected.end(), params[i].value));
  }
  REQUIRE_THROWS_WITH(attend::broadcast_parameters(MPI_COMM_WORLD, params, world_size()),
                      Catch::Contains("broadcast_parameters: root must be a rank of comm"));
  if (rank == 0) params[0].value[0] = Scalar(7);
  std::vector<Parameter<Scalar>> fewer = params;
  if (rank == 1) fewer.pop_back();
  REQUIRE_THROWS_AS(attend::broadcast_parameters(MPI_COMM_WORLD, fewer, root), std::invalid_argument);
  if (rank == 0) CHECK(params[0].value[0] == Scalar(7));  // a refused call leaves the values as they were
}

// Data-parallel training as examples/train_distributed.cpp does it: a small d2l Transformer encoder and a linear head,
// started from rank 0's model by broadcast_parameters, each rank on its equal share of every batch, then
// average_gradients and Adam. The losses of five steps (the mean over the ranks of their shares' mean losses) equal
// those of one process training the same start on the whole batches, to the rounding of sums taken in another order.
TEST_CASE("average_gradients: data-parallel training takes the steps of one process, in double", "[distributed]") {
  const int rank = world_rank(), ranks = world_size();
  const Index vocab = 7, steps = 5, batch = 12, classes = 4;
  struct Net {
    attend::TransformerEncoder<double> encoder{7, 8, 16, 2, 1, 0.0};
    attend::Linear<double> head{8, 4, true};
    std::vector<Parameter<double>> parameters() {
      std::vector<Parameter<double>> all = encoder.parameters(), more = head.parameters();
      all.insert(all.end(), more.begin(), more.end());
      return all;
    }
  };
  const auto batch_of = [&](int step) {
    attend::Generator generator(500 + static_cast<std::uint64_t>(step));
    attend::Matrix<Index> tokens(batch, steps), labels(batch, steps);
    for (Index i = 0; i < tokens.size(); ++i)
      tokens.data()[i] = static_cast<Index>(generator.uniform(0.0, 1.0) * vocab);
    for (Index i = 0; i < labels.size(); ++i) labels.data()[i] = tokens.data()[i] % classes;
    return std::make_pair(tokens, labels);
  };
  // Trains over comm on rows [first, first + rows) of each batch; the loss of each step.
  const auto train = [&](Net& net, MPI_Comm comm, Index first, Index rows) {
    const std::vector<Parameter<double>> params = net.parameters();
    attend::Adam<double> adam(params, 1e-2);
    int size = 1;
    MPI_Comm_size(comm, &size);
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      const auto [tokens, labels] = batch_of(step);
      const attend::Matrix<Index> x = tokens.middleRows(first, rows), y = labels.middleRows(first, rows);
      const attend::Loss<double> loss = attend::cross_entropy(net.head(net.encoder(x)), y);
      adam.zero_grad();
      net.encoder.backward(net.head.backward(loss.grad));
      attend::average_gradients(comm, params);
      adam.step();
      double total = 0;
      MPI_Allreduce(&loss.value, &total, 1, MPI_DOUBLE, MPI_SUM, comm);
      losses.push_back(total / size);
    }
    return losses;
  };
  Net net;
  attend::broadcast_parameters(MPI_COMM_WORLD, net.parameters());
  Net alone_net = net;
  const std::vector<double> alone = train(alone_net, MPI_COMM_SELF, 0, batch);
  const Index share = batch / ranks;
  const std::vector<double> together = train(net, MPI_COMM_WORLD, rank * share, share);
  for (std::size_t k = 0; k < alone.size(); ++k) CHECK(std::abs(together[k] - alone[k]) <= 1e-13 * alone[k]);
  CHECK(alone.back() < alone.front());  // it trains
}
