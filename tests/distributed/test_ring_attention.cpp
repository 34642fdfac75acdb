// ring_attention and ring_attention_backward under mpirun (2 and 3 ranks, tests/CMakeLists.txt): every rank draws the
// whole sequence from one seed, passes its own contiguous shard (uneven lengths), and compares its shard of the output,
// lse and gradients with scaled_dot_product_attention and its backward pass over the whole sequence in one process
// (which test_attention_gradients and test_core_paths check against PyTorch's fixtures and finite differences). Double:
// within 1e-12; float: within 2e-5. One case of the gradients is also checked against central finite differences of
// the ring's own forward pass, in double. Then the bad input: every rank throws the same message, none hangs.
#include <attend/distributed.hpp>
#include <attend/random.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi_world.hpp"

using attend::Index;
using attend::Mask;
using attend::ScoreOptions;
using attend::Tensor3;

namespace {

template <class Scalar>
Tensor3<Scalar> draw(Index batch, Index n, Index columns, std::uint64_t seed) {
  attend::Generator generator(seed);
  Tensor3<Scalar> x(batch, n, columns);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = generator.uniform(Scalar(-1), Scalar(1));
  return x;
}

// Uneven shards of n positions over the ranks: rank r gets n (r + 2) / sum, the last what is left.
std::vector<Index> shard_starts(Index n, int ranks) {
  Index weights = 0;
  for (int r = 0; r < ranks; ++r) weights += r + 2;
  std::vector<Index> starts(static_cast<std::size_t>(ranks) + 1, 0);
  for (int r = 0; r < ranks; ++r)
    starts[static_cast<std::size_t>(r) + 1] = starts[static_cast<std::size_t>(r)] + n * (r + 2) / weights;
  starts.back() = n;
  return starts;
}

template <class Scalar>
Tensor3<Scalar> shard_of(const Tensor3<Scalar>& x, Index begin, Index end) {
  Tensor3<Scalar> s(x.dimension(0), end - begin, x.dimension(2));
  for (Index b = 0; b < x.dimension(0); ++b)
    for (Index t = begin; t < end; ++t)
      for (Index c = 0; c < x.dimension(2); ++c) s(b, t - begin, c) = x(b, t, c);
  return s;
}

template <class Scalar>
double largest_difference(const Tensor3<Scalar>& a, const Tensor3<Scalar>& b) {
  REQUIRE(a.dimensions() == b.dimensions());
  double worst = 0;
  for (Index i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a.data()[i]), y = static_cast<double>(b.data()[i]);
    if (std::isinf(x) && x == y) continue;
    worst = std::max(worst, std::abs(x - y));
  }
  return worst;
}

template <class Scalar>
double tolerance() {
  return std::is_same<Scalar, double>::value ? 1e-12 : 2e-5;
}

struct Case {
  const char* name;
  Index batch, n, heads, kv_heads, dim, value_dim;
  Mask mask;
  bool softcap_and_alibi;
};

std::vector<Case> cases() {
  return {
      {"no mask, multi-head", 2, 37, 4, 4, 8, 8, Mask{}, false},
      {"causal, grouped-query", 2, 41, 4, 2, 8, 6, Mask::causal(), false},
      {"causal, multi-query, softcap and ALiBi", 1, 50, 4, 1, 16, 16, Mask::causal(), true},
      {"valid lengths, one of them 0 (d2l's uniform rows)", 3, 29, 2, 1, 8, 4, Mask({21, 0, 29}), false},
      {"valid lengths and causal, FullyMasked::zero", 2, 33, 2, 2, 4, 4,
       (Mask({9, 0}) && Mask::causal()).when_fully_masked(attend::FullyMasked::zero), false},
      {"no mask, softcap and ALiBi", 1, 23, 2, 2, 8, 8, Mask{}, true},
      {"fewer positions than chunks", 1, 3, 2, 1, 4, 4, Mask::causal(), false},
      // Longer than one call of the core (tuning::ring_query_rows = 1024 queries): the pieces and their masks.
      {"no mask, shards longer than one call", 1, 2600, 2, 1, 4, 4, Mask{}, false},
      {"causal, chunks longer than one call", 1, 5000, 2, 1, 4, 4, Mask::causal(), false},
  };
}

template <class Scalar>
ScoreOptions<Scalar> options_of(const Case& c) {
  ScoreOptions<Scalar> options;
  if (!c.softcap_and_alibi) return options;
  options.softcap = Scalar(2.5);
  options.scale = Scalar(0.3);
  for (Index h = 0; h < c.heads; ++h) options.alibi_slopes.push_back(std::pow(Scalar(2), -Scalar(h + 1)));
  return options;
}

}  // namespace

TEMPLATE_TEST_CASE("ring_attention gives each rank its shard of one process's attention, output and lse",
                   "[distributed]", float, double) {
  using Scalar = TestType;
  const int rank = world_rank(), ranks = world_size();
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor3<Scalar> q = draw<Scalar>(c.batch, c.n, c.heads * c.dim, 11);
    const Tensor3<Scalar> k = draw<Scalar>(c.batch, c.n, c.kv_heads * c.dim, 12);
    const Tensor3<Scalar> v = draw<Scalar>(c.batch, c.n, c.kv_heads * c.value_dim, 13);
    const ScoreOptions<Scalar> options = options_of<Scalar>(c);
    Tensor3<Scalar> lse;
    const Tensor3<Scalar> whole =
        attend::scaled_dot_product_attention(q, k, v, c.heads, c.kv_heads, c.mask, options, &lse);
    const std::vector<Index> starts = shard_starts(c.n, ranks);
    const Index begin = starts[static_cast<std::size_t>(rank)], end = starts[static_cast<std::size_t>(rank) + 1];
    Tensor3<Scalar> ring_lse;
    const Tensor3<Scalar> out =
        attend::ring_attention(MPI_COMM_WORLD, shard_of(q, begin, end), shard_of(k, begin, end),
                               shard_of(v, begin, end), c.heads, c.kv_heads, c.mask, options, &ring_lse);
    CHECK(largest_difference(out, shard_of(whole, begin, end)) <= tolerance<Scalar>());
    CHECK(largest_difference(ring_lse, shard_of(lse, begin, end)) <= tolerance<Scalar>());
  }
}

TEMPLATE_TEST_CASE("ring_attention_backward gives each rank its shard of one process's dQ, dK and dV", "[distributed]",
                   float, double) {
  using Scalar = TestType;
  const int rank = world_rank(), ranks = world_size();
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor3<Scalar> q = draw<Scalar>(c.batch, c.n, c.heads * c.dim, 21);
    const Tensor3<Scalar> k = draw<Scalar>(c.batch, c.n, c.kv_heads * c.dim, 22);
    const Tensor3<Scalar> v = draw<Scalar>(c.batch, c.n, c.kv_heads * c.value_dim, 23);
    const Tensor3<Scalar> dout = draw<Scalar>(c.batch, c.n, c.heads * c.value_dim, 24);
    const ScoreOptions<Scalar> options = options_of<Scalar>(c);
    Tensor3<Scalar> lse;
    const Tensor3<Scalar> out =
        attend::scaled_dot_product_attention(q, k, v, c.heads, c.kv_heads, c.mask, options, &lse);
    const attend::AttentionGradients<Scalar> whole =
        attend::scaled_dot_product_attention_backward(q, k, v, out, lse, dout, c.heads, c.kv_heads, c.mask, options);
    const std::vector<Index> starts = shard_starts(c.n, ranks);
    const Index begin = starts[static_cast<std::size_t>(rank)], end = starts[static_cast<std::size_t>(rank) + 1];
    const attend::AttentionGradients<Scalar> ring =
        attend::ring_attention_backward(MPI_COMM_WORLD, shard_of(q, begin, end), shard_of(k, begin, end),
                                        shard_of(v, begin, end), shard_of(out, begin, end), shard_of(lse, begin, end),
                                        shard_of(dout, begin, end), c.heads, c.kv_heads, c.mask, options);
    CHECK(largest_difference(ring.queries, shard_of(whole.queries, begin, end)) <= tolerance<Scalar>());
    CHECK(largest_difference(ring.keys, shard_of(whole.keys, begin, end)) <= tolerance<Scalar>());
    CHECK(largest_difference(ring.values, shard_of(whole.values, begin, end)) <= tolerance<Scalar>());
  }
}

TEST_CASE("ring_attention_backward agrees with central differences of ring_attention, in double", "[distributed]") {
  const int rank = world_rank(), ranks = world_size();
  const Index batch = 1, n = 13, heads = 2, kv_heads = 1, dim = 4;
  const Mask mask = Mask::causal();
  ScoreOptions<double> options;
  options.softcap = 3.0;
  options.alibi_slopes = {0.5, 0.25};
  const std::vector<Index> starts = shard_starts(n, ranks);
  const Index begin = starts[static_cast<std::size_t>(rank)], end = starts[static_cast<std::size_t>(rank) + 1];
  Tensor3<double> q = shard_of(draw<double>(batch, n, heads * dim, 31), begin, end);
  Tensor3<double> k = shard_of(draw<double>(batch, n, kv_heads * dim, 32), begin, end);
  Tensor3<double> v = shard_of(draw<double>(batch, n, kv_heads * dim, 33), begin, end);
  const Tensor3<double> weights = shard_of(draw<double>(batch, n, heads * dim, 34), begin, end);
  // The loss sum(output * weights) over the whole sequence: its gradient at the output is `weights`.
  const auto loss = [&]() {
    const Tensor3<double> out = attend::ring_attention(MPI_COMM_WORLD, q, k, v, heads, kv_heads, mask, options);
    double mine = 0, total = 0;
    for (Index i = 0; i < out.size(); ++i) mine += out.data()[i] * weights.data()[i];
    MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return total;
  };
  Tensor3<double> lse;
  const Tensor3<double> out = attend::ring_attention(MPI_COMM_WORLD, q, k, v, heads, kv_heads, mask, options, &lse);
  const attend::AttentionGradients<double> grads =
      attend::ring_attention_backward(MPI_COMM_WORLD, q, k, v, out, lse, weights, heads, kv_heads, mask, options);
  // Every rank perturbs, in turn, the first and last entries of its shard of Q, K and V; all ranks run each loss.
  const double h = 1e-6;
  double worst = 0;
  for (int owner = 0; owner < ranks; ++owner)
    for (int which = 0; which < 3; ++which)
      for (int end_of = 0; end_of < 2; ++end_of) {
        Tensor3<double>& x = which == 0 ? q : which == 1 ? k : v;
        const Tensor3<double>& g = which == 0 ? grads.queries : which == 1 ? grads.keys : grads.values;
        const Index at = end_of == 0 ? 0 : x.size() - 1;
        const bool mine = owner == rank && x.size() > 0;
        const double saved = mine ? x.data()[at] : 0;
        if (mine) x.data()[at] = saved + h;
        const double up = loss();
        if (mine) x.data()[at] = saved - h;
        const double down = loss();
        if (mine) {
          x.data()[at] = saved;
          worst = std::max(worst, std::abs((up - down) / (2 * h) - g.data()[at]));
        }
      }
  CHECK(worst <= 1e-8);
}

TEMPLATE_TEST_CASE("ring_attention over a communicator of one rank is scaled_dot_product_attention", "[distributed]",
                   float, double) {
  using Scalar = TestType;
  const Tensor3<Scalar> q = draw<Scalar>(2, 9, 8, 41), k = draw<Scalar>(2, 9, 4, 42), v = draw<Scalar>(2, 9, 4, 43);
  Tensor3<Scalar> lse, ring_lse;
  const Tensor3<Scalar> whole = attend::scaled_dot_product_attention(q, k, v, 2, 1, Mask::causal(), {}, &lse);
  const Tensor3<Scalar> ring = attend::ring_attention(MPI_COMM_SELF, q, k, v, 2, 1, Mask::causal(), {}, &ring_lse);
  CHECK(largest_difference(ring, whole) == 0);
  CHECK(largest_difference(ring_lse, lse) == 0);
}

TEMPLATE_TEST_CASE("ring_attention refuses bad or inconsistent shards on every rank, none waiting", "[distributed]",
                   float, double) {
  using Scalar = TestType;
  const int rank = world_rank();
  Tensor3<Scalar> q = draw<Scalar>(2, 5, 8, 51), k = draw<Scalar>(2, 5, 4, 52), v = draw<Scalar>(2, 5, 4, 53);
  Mask mask;
  ScoreOptions<Scalar> options;
  Index heads = 2;
  std::string expected;
  SECTION("rank 1's heads are wider than the others'") {
    if (rank == 1) q = draw<Scalar>(2, 5, 16, 51), k = draw<Scalar>(2, 5, 8, 52), v = draw<Scalar>(2, 5, 8, 53);
    expected = "ring_attention: queries.dimension(2) must be the same on every rank; rank 0 has 8, rank 1 has 16";
  }
  SECTION("the last rank asks for other head counts") {
    if (rank == world_size() - 1) heads = 4;
    expected = "ring_attention: queries.dimension(2)";
  }
  SECTION("rank 1's keys hold another number of positions than its queries") {
    if (rank == 1) k = draw<Scalar>(2, 4, 4, 52), v = draw<Scalar>(2, 4, 4, 53);
    expected = "ring_attention: keys must hold the queries' shard of the sequence, 5 positions, got 4 (rank 1)";
  }
  SECTION("a window mask") {
    mask = Mask::window(2, 0);
    expected = "ring_attention: mask must be none, per-batch valid lengths, causal or both";
  }
  SECTION("an additive bias") {
    options.bias = Tensor3<Scalar>(1, 5, 5);
    options.bias.setZero();
    expected = "ring_attention: options.bias must be empty";
  }
  SECTION("valid lengths that differ across ranks") {
    mask = Mask({3, rank == 0 ? 4 : 5});
    expected = "ring_attention: the sum of the valid lengths must be the same on every rank";
  }
  INFO(expected);
  if (expected.find("queries.dimension(2)") != std::string::npos) {
    // Rank r's 8 features split into `heads` heads: 4 heads of 2 against the keys' 4 features, refused where it is
    // passed; every rank reports it.
    REQUIRE_THROWS_AS(attend::ring_attention(MPI_COMM_WORLD, q, k, v, heads, 1, mask, options), std::invalid_argument);
  } else {
    REQUIRE_THROWS_WITH(attend::ring_attention(MPI_COMM_WORLD, q, k, v, heads, 1, mask, options),
                        Catch::Contains(expected));
  }
}
