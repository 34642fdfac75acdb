// attend/distributed.hpp — attention and training across processes over MPI. The CMake target attend::distributed
// (attend::attend plus MPI::MPI_CXX) is defined where CMake finds MPI; nothing else in attend includes this header.
//
//   ring_attention(comm, q, k, v, ...)            sequence-parallel attention over shards of one sequence
//   ring_attention_backward(comm, ...)            its gradients, shard by shard
//   average_gradients(comm, params)               every parameter's gradient replaced by its mean over the ranks
#pragma once

#include <attend/distributed/average_gradients.hpp>
#include <attend/distributed/ring_attention.hpp>
