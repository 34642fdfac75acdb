// attend/detail/kernels/softmax-inl.hpp — the packet passes of the softmax over rows: a row scaled or divided, its
// maximum, exp(x - m) and its sum, the masked softmax of a block of rows, and the softmax's backward pass on a row.
// Compiled once per level (detail/kernels.hpp); no include guard.

// dst = factor * src, or dst = src / divisor, over n entries (dst may be src): the level's packets, the last one
// partial. The operations Eigen's expressions make, at the level's width.
template <class Scalar>
void scale_row(const Scalar* src, Index n, Scalar factor, Scalar* dst) {
  using S = Simd<Scalar>;
  const auto f = S::set1(factor);
  Index j = 0;
  for (; j + S::size <= n; j += S::size) S::store(dst + j, S::mul(f, S::load(src + j)));
  if (j < n) S::store_first(dst + j, S::mul(f, S::load_first(src + j, n - j)), n - j);
}
template <class Scalar>
void divide_row(const Scalar* src, Index n, Scalar divisor, Scalar* dst) {
  using S = Simd<Scalar>;
  const auto by = S::set1(divisor);
  Index j = 0;
  for (; j + S::size <= n; j += S::size) S::store(dst + j, S::div(S::load(src + j), by));
  if (j < n) S::store_first(dst + j, S::div(S::load_first(src + j, n - j), by), n - j);
}

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

// The online softmax's step over one block of n keys for `rows` rows of scores S (rows, n), rows ld apart, the keys a
// row does not see already -inf. For each row r: every score times scale; M = its maximum; when M is -inf (the row
// sees none of these keys) the row becomes 0 and nothing else changes (but a NaN among its scores makes l[r] NaN, as
// a softmax over the whole row would be); otherwise m' = max(m[r], M), a = exp(m[r] - m'), S_r = exp(S_r - m') (0
// for a hidden key), l[r] = a l[r] + sum S_r, acc row r (dv, rows ldacc apart) times a, m[r] = m' (m, l, acc, ldacc
// and dv: state's max, sum, acc, acc_stride and value_dim, detail/operands.hpp). Returns whether
// some row saw a key. In chunks of online_chunk rows: their factors a as packets of exp, and, for blocks of whole
// packets, their sums reduced together (Simd::reduce_add_rows, the bits reduce_add gives each row).
constexpr Index online_chunk = 16;
template <class Scalar>
bool online_softmax_rows(Scalar* S, Index rows, Index n, Index ld, Scalar scale, const OnlineRows<Scalar>& state) {
  Scalar *const m = state.max, *const l = state.sum, *const acc = state.acc;
  const Index ldacc = state.acc_stride, dv = state.value_dim;
  using Sd = Simd<Scalar>;
  constexpr Index size = Sd::size;
  constexpr Scalar none = -std::numeric_limits<Scalar>::infinity();
  constexpr Index padded = (online_chunk + size - 1) / size * size;
  alignas(64) Scalar t[padded];               // each row's exponent m - m', then its factor a
  alignas(64) Scalar shift[online_chunk];     // each row's m'
  alignas(64) Scalar partial[online_chunk * size];
  alignas(64) Scalar sum[online_chunk];
  bool seen[online_chunk];
  bool any = false;
  const bool whole = n % size == 0;
  for (Index r0 = 0; r0 < rows; r0 += online_chunk) {
    const Index count = std::min(online_chunk, rows - r0);
    for (Index i = 0; i < count; ++i) {
      const Index r = r0 + i;
      Scalar* row = S + r * ld;
      if (scale != Scalar(1)) scale_row(row, n, scale, row);
      const Scalar M = row_max(row, n);
      t[i] = Scalar(0);
      seen[i] = M != none;
      if (!seen[i]) {
        if (std::any_of(row, row + n, [](Scalar x) { return std::isnan(x); }))
          l[r] = std::numeric_limits<Scalar>::quiet_NaN();
        std::fill(row, row + n, Scalar(0));
        shift[i] = Scalar(0);
        continue;
      }
      any = true;
      const Scalar m_new = m[r] < M ? M : m[r];
      if (m[r] != m_new) t[i] = m[r] - m_new;  // -inf for a row's first key: a = 0
      m[r] = m_new;
      shift[i] = m_new;
    }
    for (Index i = count; i < padded; ++i) t[i] = Scalar(0);
    for (Index i = 0; i < padded; i += size) Sd::store(t + i, Sd::exp(Sd::load(t + i)));
    if (whole) {
      for (Index i = 0; i < count; ++i)
        Sd::store(partial + i * size,
                  seen[i] ? exp_shifted_packets(S + (r0 + i) * ld, n, Sd::set1(shift[i])) : Sd::zero());
      Sd::reduce_add_rows(partial, count, sum);
    } else {
      for (Index i = 0; i < count; ++i) sum[i] = seen[i] ? exp_shifted(S + (r0 + i) * ld, n, shift[i]) : Scalar(0);
    }
    for (Index i = 0; i < count; ++i) {
      if (!seen[i]) continue;
      const Index r = r0 + i;
      l[r] = t[i] * l[r] + sum[i];
      if (t[i] != Scalar(1)) scale_row(acc + r * ldacc, dv, t[i], acc + r * ldacc);
    }
  }
  return any;
}

// Softmax's backward rule on one row of n keys, in place over dp: dp[j] = p[j] (dp[j] - D), and 0 where p[j] is 0 (a
// key the row does not see, or whose weight underflowed, even when dp[j] is not finite). p: the row's weights;
// D = sum_j p[j] dp[j] (detail/core/attention.hpp). The last n % size entries go through one packet of which the
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

// The softmax's backward pass on one row, the rule of masked_softmax_backward and of the direct path's backward pass:
// with s = sum_k y_k dy_k over the keys the row sees, dx_j = (y_j (dy_j - s)) scale for a key j it sees and 0 for one
// it does not (its score was replaced before the softmax, so nothing depends on it); a row that sees no key gets a
// zero row, whatever its FullyMasked rule. A masked key's dy (0 * NaN, for one) never enters s. y, dy, dx:
// (num_keys); dx may be dy; keys: from Mask::visible_keys. scale: the scores' factor (1 / sqrt(d) for dot-product
// attention's, 1 for masked_softmax's), folded in here so that dS needs no pass of its own. A row whose visible keys
// are a range takes whole packets (s's lanes summed, then reduced; the last packet partial); a keep row with holes,
// one key at a time.
template <class Scalar>
void softmax_backward_row(const Scalar* y, const Scalar* dy, Scalar* dx, Index num_keys, const VisibleKeys& keys,
                          Scalar scale) {
  using S = Simd<Scalar>;
  constexpr Index size = S::size;
  const auto [first, last] = keys.within(0, num_keys);
  if (!keys.is_range()) {
    Scalar s = Scalar(0);
    keys.for_each(first, last, [&](Index k) { s += y[k] * dy[k]; });
    for (Index j = 0; j < num_keys; ++j) dx[j] = keys.sees(j) ? y[j] * (dy[j] - s) * scale : Scalar(0);
    return;
  }
  const Index n = last - first, whole = n / size * size;
  const Scalar *yr = y + first, *dyr = dy + first;
  typename S::Packet sum = S::zero();
  for (Index j = 0; j < whole; j += size) sum = S::madd(S::load(yr + j), S::load(dyr + j), sum);
  if (whole < n) sum = S::madd(S::load_first(yr + whole, n - whole), S::load_first(dyr + whole, n - whole), sum);
  const typename S::Packet s = S::set1(S::reduce_add(sum)), factor = S::set1(scale);
  std::fill(dx, dx + first, Scalar(0));
  Scalar* dxr = dx + first;
  for (Index j = 0; j < whole; j += size)
    S::store(dxr + j, S::mul(S::mul(S::load(yr + j), S::sub(S::load(dyr + j), s)), factor));
  if (whole < n) {
    const Index tail = n - whole;
    S::store_first(dxr + whole,
                   S::mul(S::mul(S::load_first(yr + whole, tail), S::sub(S::load_first(dyr + whole, tail), s)), factor),
                   tail);
  }
  std::fill(dx + last, dx + num_keys, Scalar(0));
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

// The scores of row's visible range times scale (the others are replaced by the masked score before they are read,
// so they need not hold a number).
template <class Scalar>
void scale_visible(Scalar* row, Index num_keys, const VisibleKeys& keys, Scalar scale) {
  const auto [first, last] = keys.within(0, num_keys);
  if (scale != Scalar(1)) scale_row(row + first, last - first, scale, row + first);
}

// A block of `rows` rows of scores, rows `stride` apart, in place, each first multiplied by scale (the scores' factor,
// 1 / sqrt(d) on the direct path: one pass over a row while it is in cache) where the row sees its keys; row q sees
// keys[q] (the mask resolved by the caller), and a row that sees none follows `rule`. The scores of keys a row does not
// see are never read: they may hold anything.
// Rows shorter than a packet (the seed's have 4 keys), when the block is contiguous, go through steps 0 and 1 of
// masked_softmax_row row by row, storing row[j] - m in place, then step 2 as one pass of packets over the whole block,
// then step 3 row by row: one exp for every packet of the block, not one per row, each a chain of dependent
// instructions. The same bits as masked_softmax_row, NaNs aside (any NaN stays NaN, its sign and payload may differ):
// each exp is of the same row[j] - m, each sum over the row in order from 0, as exp_shifted sums a row shorter than a
// packet. A row that the FullyMasked::zero rule empties is filled with -inf, whose exp is 0, and keeps that 0 (every
// other row's sum is at least exp(0) = 1, or NaN).
template <class Scalar>
void masked_softmax_block(Scalar* scores, Index rows, Index num_keys, Index stride, const VisibleKeys* keys,
                          FullyMasked rule, Scalar scale) {
  if (num_keys == 0 || rows == 0) return;  // nothing to normalise (and no row to point into)
  if (num_keys >= Simd<Scalar>::size || rows == 1 || stride != num_keys) {
    for (Index q = 0; q < rows; ++q) {
      Scalar* row = scores + q * stride;
      scale_visible(row, num_keys, keys[q], scale);
      masked_softmax_row<Scalar>(row, num_keys, keys[q], rule);
    }
    return;
  }
  for (Index q = 0; q < rows; ++q) {
    Scalar* row = scores + q * num_keys;
    scale_visible(row, num_keys, keys[q], scale);
    if (!mask_scores_row(row, num_keys, keys[q], rule)) {
      std::fill(row, row + num_keys, -std::numeric_limits<Scalar>::infinity());
      continue;
    }
    const Scalar m = row_max(row, num_keys);
    for (Index j = 0; j < num_keys; ++j) row[j] -= m;
  }
  exp_shifted(scores, rows * num_keys, Scalar(0));
  for (Index q = 0; q < rows; ++q) {
    Scalar* row = scores + q * num_keys;
    Scalar sum = Scalar(0);
    for (Index j = 0; j < num_keys; ++j) sum += row[j];
    if (sum == Scalar(0)) continue;  // emptied by the rule: already 0
    const Scalar inverse = Scalar(1) / sum;
    for (Index j = 0; j < num_keys; ++j) row[j] *= inverse;
  }
}
