// attend/detail/transpose.hpp — B = A^T between row-major buffers, a packet-square block at a time.
//
// Eigen's assignment of a transposed block (dst = src.transpose()) moves one scalar at a time. Here P x P blocks (P
// the packet size: 16 floats with AVX-512) go through registers, P loads, Eigen's ptranspose and P stores; the edges,
// fewer than P rows or columns, by scalars. For the tiled kernel's copy of K^T (detail/flash_attention.hpp): 10 % off
// the kernel's time alone at (batch, n, d, heads) = (8, 128, 256, 8), 1 thread, float.
#pragma once

#include <attend/tensor.hpp>

namespace attend {
namespace detail {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // PacketBlock<__m512>: a vector type's alignment attribute
#endif

// B (cols, rows) = A (rows, cols)^T. A's rows lda apart, B's ldb apart; the two may not overlap. Exact (a copy).
template <class Scalar>
void transpose_into(const Scalar* A, Index lda, Index rows, Index cols, Scalar* B, Index ldb) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<Scalar>::type;
  constexpr Index P = ei::packet_traits<Scalar>::size;
  const Index block_rows = rows / P * P, block_cols = cols / P * P;
  for (Index i = 0; i < block_rows; i += P) {
    for (Index j = 0; j < block_cols; j += P) {
      ei::PacketBlock<Packet> block;  // P packets: rows i .. i + P - 1 of A, columns j .. j + P - 1
      for (Index r = 0; r < P; ++r) block.packet[r] = ei::ploadu<Packet>(A + (i + r) * lda + j);
      ei::ptranspose(block);  // now rows j .. j + P - 1 of B, columns i .. i + P - 1
      for (Index c = 0; c < P; ++c) ei::pstoreu(B + (j + c) * ldb + i, block.packet[c]);
    }
  }
  for (Index i = 0; i < rows; ++i)  // the edges: columns past the blocks, then rows past them
    for (Index j = i < block_rows ? block_cols : 0; j < cols; ++j) B[j * ldb + i] = A[i * lda + j];
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace detail
}  // namespace attend
