// attend/detail/kernels/heads-inl.hpp — the scores of a head too small for a GEMM (detail/attend_rows.hpp).
// Compiled once per level (detail/kernels.hpp); no include guard.

// sum_i a[i] b[i] over n entries: packets, then the n % size tail as one packet of which the lanes past n read 0.
template <class Scalar>
Scalar dot_tiny(const Scalar* a, const Scalar* b, Index n) {
  using S = Simd<Scalar>;
  typename S::Packet sum = S::zero();
  Index i = 0;
  for (; i + S::size <= n; i += S::size) sum = S::madd(S::load(a + i), S::load(b + i), sum);
  if (i < n) sum = S::madd(S::load_first(a + i, n - i), S::load_first(b + i, n - i), sum);
  return S::reduce_add(sum);
}

// scores (queries, keys) = scale * Q K^T for one head: Q (queries, d) rows ldq apart, K (keys, d) rows ldk apart,
// scores rows lds apart; each score one dot_tiny.
template <class Scalar>
void tiny_scores(const Scalar* Q, Index ldq, const Scalar* K, Index ldk, Index num_queries, Index num_keys, Index d,
                 Scalar scale, Scalar* scores, Index lds) {
  for (Index i = 0; i < num_queries; ++i)
    for (Index j = 0; j < num_keys; ++j) scores[i * lds + j] = scale * dot_tiny(Q + i * ldq, K + j * ldk, d);
}
