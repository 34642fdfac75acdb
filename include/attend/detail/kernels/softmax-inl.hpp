// attend/detail/kernels/softmax-inl.hpp — the packet passes of the softmax: a row's maximum, exp(x - m) and its sum,
// and the masked softmax of a block of rows. Compiled once per level (detail/kernels.hpp); no include guard.

// max_j row[j] over n >= 1 entries, contiguous: two chains of packets, then the last n % size entries one by one.
// Exact, so the same value whatever the order. A NaN entry is skipped or kept as the level's max does (it keeps a
// NaN of one operand); either way it makes its own exp NaN, and so the row's sum and output. Entries all NaN or -inf
// may give -inf: callers check for it.
template <class Scalar>
Scalar row_max(const Scalar* row, Index n) {
  using S = Simd<Scalar>;
  using Packet = typename S::Packet;
  constexpr Index size = S::size;
  Scalar largest = -std::numeric_limits<Scalar>::infinity();
  Index j = 0;
  if (n >= size) {
    Packet max0 = S::load(row), max1 = max0;
    for (j = size; j + 2 * size <= n; j += 2 * size) {
      max0 = S::max(max0, S::load(row + j));
      max1 = S::max(max1, S::load(row + j + size));
    }
    if (j + size <= n) {
      max0 = S::max(max0, S::load(row + j));
      j += size;
    }
    largest = S::reduce_max(S::max(max0, max1));
  }
  for (; j < n; ++j) largest = largest < row[j] ? row[j] : largest;
  return largest;
}

// exp_shifted's pass over whole packets: row[j] = exp(row[j] - m) for j < n, n a multiple of the packet size, shift
// a packet of m. Returns the packet of partial sums: lane t the sum of the new row[j] over j = t mod size, in order.
template <class Scalar>
typename Simd<Scalar>::Packet exp_shifted_packets(Scalar* row, Index n, const typename Simd<Scalar>::Packet& shift) {
  using S = Simd<Scalar>;
  typename S::Packet sum = S::zero();
  for (Index j = 0; j < n; j += S::size) {
    const typename S::Packet e = S::exp(S::sub(S::load(row + j), shift));
    S::store(row + j, e);
    sum = S::add(sum, e);
  }
  return sum;
}

// row[j] = exp(row[j] - m), flushed to 0 where row[j] - m < exp_underflow; returns the sum of the new row[j].
// row: (n), contiguous; row[j] - m <= 0 or NaN. One pass of packets, the last one partial (a short row, the seed's 4
// keys, costs one packet exp); the sum: the packets' lanes reduced, then the tail's entries added in order.
template <class Scalar>
Scalar exp_shifted(Scalar* row, Index n, Scalar m) {
  using S = Simd<Scalar>;
  const typename S::Packet shift = S::set1(m);
  const Index j = n / S::size * S::size;
  Scalar total = S::reduce_add(exp_shifted_packets(row, j, shift));
  if (j < n) {  // the last n - j < size entries, through one packet of which the lanes past n are not stored
    const Index tail = n - j;
    const typename S::Packet e = S::exp(S::sub(S::load_first(row + j, tail), shift));
    S::store_first(row + j, e, tail);
    Scalar lanes[S::size];
    S::store(lanes, e);
    for (Index t = 0; t < tail; ++t) total += lanes[t];
  }
  return total;
}

// Softmax's backward rule on one row of n keys, in place over dp: dp[j] = p[j] (dp[j] - D), and 0 where p[j] is 0 (a
// key the row does not see, or whose weight underflowed, even when dp[j] is not finite). p: the row's weights;
// D = sum_j p[j] dp[j] (detail/flash_backward.hpp). The last n % size entries go through one packet of which the
// lanes past n are neither read nor written: the same operations on every entry, so the same bits wherever it falls.
// softmax_gradient_packet is the rule on one packet.
template <class Scalar>
typename Simd<Scalar>::Packet softmax_gradient_packet(const typename Simd<Scalar>::Packet& p,
                                                      const typename Simd<Scalar>::Packet& dp,
                                                      const typename Simd<Scalar>::Packet& D) {
  using S = Simd<Scalar>;
  return S::zero_where_zero(p, S::mul(p, S::sub(dp, D)));
}
template <class Scalar>
void softmax_gradient_row(const Scalar* p, Scalar* dp, Index n, Scalar D) {
  using S = Simd<Scalar>;
  const typename S::Packet d = S::set1(D);
  Index j = 0;
  for (; j + S::size <= n; j += S::size)
    S::store(dp + j, softmax_gradient_packet<Scalar>(S::load(p + j), S::load(dp + j), d));
  if (j < n) {  // the last n - j < size entries
    const Index tail = n - j;
    S::store_first(dp + j, softmax_gradient_packet<Scalar>(S::load_first(p + j, tail), S::load_first(dp + j, tail), d),
                   tail);
  }
}

// One row of scores, in place:
//   0. every key the row does not see (keys: from Mask::visible_keys) is replaced by -1e6; if it sees none and rule
//      is FullyMasked::zero, the row becomes 0 and we stop;
//   1. m = max_j row[j]          2. row[j] = exp(row[j] - m)          3. row[j] /= sum_j row[j]
// row: (num_keys), contiguous.
template <class Scalar>
void masked_softmax_row(Scalar* row, Index num_keys, const VisibleKeys& keys, FullyMasked rule) {
  if (num_keys == 0) return;
  if (!mask_scores_row(row, num_keys, keys, rule)) {
    std::fill(row, row + num_keys, Scalar(0));
    return;
  }
  const Scalar inverse = Scalar(1) / exp_shifted(row, num_keys, row_max(row, num_keys));
  for (Index j = 0; j < num_keys; ++j) row[j] *= inverse;
}

// Every row of a (queries, keys) block of scores, rows `stride` apart, in place; the block belongs to batch row b of
// the mask, whose shape the caller checked (Mask::require_shape).
// Rows shorter than a packet (the seed's have 4 keys), when the block is contiguous, go through steps 0 and 1 of
// masked_softmax_row row by row, storing row[j] - m in place, then step 2 as one pass of packets over the whole block,
// then step 3 row by row: one exp for every packet of the block, not one per row, each a chain of dependent
// instructions. The same bits as masked_softmax_row, NaNs aside (any NaN stays NaN, its sign and payload may differ):
// each exp is of the same row[j] - m, each sum over the row in order from 0, as exp_shifted sums a row shorter than a
// packet. A row that the FullyMasked::zero rule empties is filled with -inf, whose exp is 0, and keeps that 0 (every
// other row's sum is at least exp(0) = 1, or NaN).
template <class Scalar>
void masked_softmax_block(Scalar* scores, Index num_queries, Index num_keys, Index stride, const Mask& mask, Index b) {
  if (num_keys == 0 || num_queries == 0) return;  // nothing to normalise (and no row to point into)
  if (num_keys >= Simd<Scalar>::size || num_queries == 1 || stride != num_keys) {
    for (Index q = 0; q < num_queries; ++q)
      masked_softmax_row<Scalar>(scores + q * stride, num_keys, mask.visible_keys(b, q, num_queries, num_keys),
                                 mask.fully_masked());
    return;
  }
  for (Index q = 0; q < num_queries; ++q) {
    Scalar* row = scores + q * num_keys;
    if (!mask_scores_row(row, num_keys, mask.visible_keys(b, q, num_queries, num_keys), mask.fully_masked())) {
      std::fill(row, row + num_keys, -std::numeric_limits<Scalar>::infinity());
      continue;
    }
    const Scalar m = row_max(row, num_keys);
    for (Index j = 0; j < num_keys; ++j) row[j] -= m;
  }
  exp_shifted(scores, num_queries * num_keys, Scalar(0));
  for (Index q = 0; q < num_queries; ++q) {
    Scalar* row = scores + q * num_keys;
    Scalar sum = Scalar(0);
    for (Index j = 0; j < num_keys; ++j) sum += row[j];
    if (sum == Scalar(0)) continue;  // emptied by the rule: already 0
    const Scalar inverse = Scalar(1) / sum;
    for (Index j = 0; j < num_keys; ++j) row[j] *= inverse;
  }
}
