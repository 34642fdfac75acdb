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
// scores rows lds apart; each score is dot_tiny's sum, in dot_tiny's order. Four keys at a time, their sums in four
// accumulators: a dot product is a chain of dependent multiply-adds, and four chains keep the FMA units busy where
// one would wait on each result.
template <class Scalar>
void tiny_scores(const Scalar* Q, Index ldq, const Scalar* K, Index ldk, Index num_queries, Index num_keys, Index d,
                 Scalar scale, Scalar* scores, Index lds) {
  using S = Simd<Scalar>;
  using Packet = typename S::Packet;
  for (Index i = 0; i < num_queries; ++i) {
    const Scalar* q = Q + i * ldq;
    Scalar* row = scores + i * lds;
    Index j = 0;
    for (; j + 4 <= num_keys; j += 4) {
      const Scalar* k0 = K + j * ldk;
      const Scalar *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
      Packet s0 = S::zero(), s1 = S::zero(), s2 = S::zero(), s3 = S::zero();
      Index c = 0;
      for (; c + S::size <= d; c += S::size) {
        const Packet x = S::load(q + c);
        s0 = S::madd(x, S::load(k0 + c), s0);
        s1 = S::madd(x, S::load(k1 + c), s1);
        s2 = S::madd(x, S::load(k2 + c), s2);
        s3 = S::madd(x, S::load(k3 + c), s3);
      }
      if (c < d) {
        const Index n = d - c;
        const Packet x = S::load_first(q + c, n);
        s0 = S::madd(x, S::load_first(k0 + c, n), s0);
        s1 = S::madd(x, S::load_first(k1 + c, n), s1);
        s2 = S::madd(x, S::load_first(k2 + c, n), s2);
        s3 = S::madd(x, S::load_first(k3 + c, n), s3);
      }
      row[j] = scale * S::reduce_add(s0);
      row[j + 1] = scale * S::reduce_add(s1);
      row[j + 2] = scale * S::reduce_add(s2);
      row[j + 3] = scale * S::reduce_add(s3);
    }
    for (; j < num_keys; ++j) row[j] = scale * dot_tiny(q, K + j * ldk, d);
  }
}
