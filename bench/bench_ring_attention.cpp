// Ring attention across MPI ranks against one process, causal grouped-query attention over one long sequence.
//
//   mpirun -np 2 ./build/bench/bench_ring_attention [--n=16384] [--heads=8] [--kv-heads=2] [--dim=64] [--rounds=3]
//
// Every rank runs one thread. Each round times, in turn: scaled_dot_product_attention and its backward pass over the
// whole sequence on rank 0 alone (the others wait at a barrier), then ring_attention and ring_attention_backward with
// each rank holding a contiguous shard (the time of the slowest rank), then the ring's traffic alone: P - 1 steps of
// sending the keys and values (and, backward, their gradients) to the next rank, as the calls do, without computing.
// Prints the medians over the rounds and the ratios, and the bytes each rank sends per call.
#include <attend/distributed.hpp>
#include <attend/random.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/threads.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using attend::Index;
using attend::Tensor3;

namespace {

Index option(int argc, char** argv, const char* name, Index fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return std::atol(argv[i] + prefix.size());
  return fallback;
}

Tensor3<float> draw(Index batch, Index n, Index columns, std::uint64_t seed, Index begin, Index end) {
  attend::Generator generator(seed);
  Tensor3<float> x(batch, end - begin, columns);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < n; ++t)
      for (Index c = 0; c < columns; ++c) {
        const float value = generator.uniform(-1.0f, 1.0f);
        if (t >= begin && t < end) x(b, t - begin, c) = value;
      }
  return x;
}

// Seconds of body() on the slowest rank, all ranks starting together.
template <class Body>
double timed(Body&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  body();
  double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// P - 1 steps of passing `count` floats to the next rank, as the ring does.
void ring_traffic(std::vector<float>& send, std::vector<float>& receive, int steps) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  for (int s = 0; s < steps; ++s) {
    MPI_Sendrecv(send.data(), static_cast<int>(send.size()), MPI_FLOAT, (rank + 1) % ranks, s, receive.data(),
                 static_cast<int>(receive.size()), MPI_FLOAT, (rank + ranks - 1) % ranks, s, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    std::swap(send, receive);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  attend::set_num_threads(1);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Index n = option(argc, argv, "n", 16384), H = option(argc, argv, "heads", 8);
  const Index G = option(argc, argv, "kv-heads", 2), d = option(argc, argv, "dim", 64);
  const int rounds = static_cast<int>(option(argc, argv, "rounds", 3));
  const Index begin = n * rank / ranks, end = n * (rank + 1) / ranks;
  const attend::Mask causal = attend::Mask::causal();

  // The shards, and on rank 0 the whole sequence.
  const Tensor3<float> q = draw(1, n, H * d, 1, begin, end), k = draw(1, n, G * d, 2, begin, end);
  const Tensor3<float> v = draw(1, n, G * d, 3, begin, end), dout = draw(1, n, H * d, 4, begin, end);
  Tensor3<float> wq, wk, wv, wdout;
  if (rank == 0) {
    wq = draw(1, n, H * d, 1, 0, n), wk = draw(1, n, G * d, 2, 0, n);
    wv = draw(1, n, G * d, 3, 0, n), wdout = draw(1, n, H * d, 4, 0, n);
  }
  // The ring's messages: the largest rank's keys and values, and as many gradients.
  const Index largest = (n + 2 * ranks - 1) / (2 * ranks) * 2;
  std::vector<float> send(static_cast<std::size_t>(largest * G * d * 2)), receive(send.size());

  std::vector<double> one_forward, one_backward, ring_forward, ring_backward, traffic_forward, traffic_backward;
  for (int round = 0; round < rounds; ++round) {
    Tensor3<float> out, lse;
    one_forward.push_back(timed([&] {
      if (rank == 0) out = attend::scaled_dot_product_attention(wq, wk, wv, H, G, causal, {}, &lse);
    }));
    one_backward.push_back(timed([&] {
      if (rank == 0) attend::scaled_dot_product_attention_backward(wq, wk, wv, out, lse, wdout, H, G, causal);
    }));
    Tensor3<float> ring_out, ring_lse;
    ring_forward.push_back(
        timed([&] { ring_out = attend::ring_attention(MPI_COMM_WORLD, q, k, v, H, G, causal, {}, &ring_lse); }));
    ring_backward.push_back(timed(
        [&] { attend::ring_attention_backward(MPI_COMM_WORLD, q, k, v, ring_out, ring_lse, dout, H, G, causal); }));
    traffic_forward.push_back(timed([&] { ring_traffic(send, receive, ranks - 1); }));
    traffic_backward.push_back(timed([&] { ring_traffic(send, receive, 2 * ranks - 1); }));
  }
  if (rank == 0) {
    const double mib = static_cast<double>(send.size()) * sizeof(float) / (1 << 20);
    std::printf(
        "causal grouped-query attention, float: n = %ld, %ld query heads, %ld key/value heads, head_dim %ld; "
        "%d ranks of 1 thread against 1 process of 1 thread; medians of %d rounds\n",
        static_cast<long>(n), static_cast<long>(H), static_cast<long>(G), static_cast<long>(d), ranks, rounds);
    std::printf("%-10s %14s %14s %10s %22s\n", "pass", "1 process (s)", "ring (s)", "speedup",
                "ring traffic alone (s)");
    std::printf("%-10s %14.3f %14.3f %9.2fx %22.4f\n", "forward", median(one_forward), median(ring_forward),
                median(one_forward) / median(ring_forward), median(traffic_forward));
    std::printf("%-10s %14.3f %14.3f %9.2fx %22.4f\n", "backward", median(one_backward), median(ring_backward),
                median(one_backward) / median(ring_backward), median(traffic_backward));
    std::printf(
        "each rank sends %.2f MiB of keys and values per ring step (forward: %d steps; backward: %d of them "
        "and %d of their gradients)\n",
        mib, ranks - 1, ranks - 1, ranks);
  }
  MPI_Finalize();
  return 0;
}
