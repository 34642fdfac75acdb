// average_gradients under mpirun (2 and 3 ranks, tests/CMakeLists.txt): every rank fills its parameters' gradients
// with draws of its own seed; afterwards each gradient is the mean of all ranks' draws, which every rank recomputes in
// double from the same seeds, within the rounding of a sum of `ranks` terms and one division. Parameters larger than a
// bucket and smaller; a communicator of one rank; parameters that differ across ranks, and a rank with a null gradient:
// every rank throws, none hangs. broadcast_parameters: every rank ends with the root's values.
#include <attend/distributed.hpp>
#include <attend/linear.hpp>
#include <attend/random.hpp>
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
