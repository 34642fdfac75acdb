// attend/detail/kernels/flash-inl.hpp — one work item of the tiled kernel (detail/flash_attention.hpp): the online
// softmax over the key blocks of a block of query rows. Compiled once per level (detail/kernels.hpp); no include guard.

// Steps 1-3 for the key block [k0, k0 + bc) of a work item: its scores in ws.S (br, bc), the keys each row sees in
// ws.keys. Row by row: the visible range's part [lo, hi) in the block and the keep row's holes in it (set to -inf),
// the block's maximum and the exponent of the row's factor a; then every row's a as packets; then each row's
// exponentials and their sum, the entries outside [lo, hi) set to 0; then l and O rescaled. When every row sees the
// whole block (every block without a mask) and the block is whole packets wide, the rows' partial sums are reduced
// together (Simd::reduce_add_rows: the bits exp_shifted gives each row). A row that sees no key of the block gets a
// zero row and a = 1: nothing added.
template <class Scalar>
void online_softmax_step(FlashWorkspace<Scalar>& ws, Index br, Index bc, Index k0) {
  using S = Simd<Scalar>;
  constexpr Index size = S::size;
  constexpr Scalar inf = std::numeric_limits<Scalar>::infinity();
  Scalar* scores = ws.S.data();          // (br, bc), rows ld apart
  const Index ld = ws.S.outerStride();
  Scalar* t = ws.rescale.data();         // (br rounded up to whole packets): the exponent of each row's a, then a
  bool all_whole = true;                 // every row sees every key of the block
  for (Index i = 0; i < br; ++i) {
    const VisibleKeys& keys = ws.keys[static_cast<std::size_t>(i)];
    const auto [lo, hi] = keys.within(k0, bc);
    all_whole = all_whole && lo == 0 && hi == bc && keys.is_range();
    Scalar* row = scores + i * ld;  // (bc)
    t[i] = Scalar(0);               // a = 1 unless the maximum grows
    ws.shift(i) = inf;              // until the row is seen to add something: its entries 0, and exp(0 - inf) = 0
    bool kept = lo < hi;
    if (kept && !keys.is_range()) {
      kept = false;
      for (Index j = lo; j < hi; ++j) {
        if (keys.sees(k0 + j)) {
          kept = true;
        } else {
          row[j] = -inf;  // exp(-inf - m) = 0 for any finite maximum m
        }
      }
    }
    if (!kept) {  // no key, or only holes here: nothing to add (a row's first kept key may come in a later block)
      std::fill(row, row + bc, Scalar(0));
      continue;
    }
    const Scalar block_max = row_max(row + lo, hi - lo);
    if (block_max == -inf) {  // every visible score -inf (an overflow) or NaN: a -inf weighs 0 beside any finite
      // score, so the block adds nothing (and -inf - -inf is no max); a NaN makes the row's sum NaN, and so its
      // output, as on the direct path
      for (Index j = lo; j < hi; ++j)
        if (std::isnan(row[j])) ws.l(i) = std::numeric_limits<Scalar>::quiet_NaN();
      std::fill(row, row + bc, Scalar(0));
      continue;
    }
    Scalar& m = ws.m(i);
    if (ws.l(i) == Scalar(0)) {
      m = block_max;
    } else if (block_max > m) {
      t[i] = m - block_max;
      m = block_max;
    }
    ws.shift(i) = m;
  }
  const Index padded = (br + size - 1) / size * size;
  for (Index i = br; i < padded; ++i) t[i] = Scalar(0);  // the last packet's lanes past br
  for (Index i = 0; i < br; i += size) S::store(t + i, S::exp(S::load(t + i)));
  Scalar* sum = ws.block_sum.data();  // (br)
  if (all_whole && bc % size == 0) {  // each row's sum as exp_shifted makes it, the rows' reductions together
    Scalar* partial = ws.partial.data();  // (br, size)
    for (Index i = 0; i < br; ++i)
      S::store(partial + i * size, exp_shifted_packets(scores + i * ld, bc, S::set1(ws.shift(i))));
    S::reduce_add_rows(partial, br, sum);
  } else {
    for (Index i = 0; i < br; ++i) {
      const VisibleKeys& keys = ws.keys[static_cast<std::size_t>(i)];
      const auto [lo, hi] = keys.within(k0, bc);
      Scalar* row = scores + i * ld;
      sum[i] = exp_shifted(row + lo, hi - lo, ws.shift(i));  // lo <= hi
      for (Index j = 0; j < lo; ++j) row[j] = Scalar(0);
      for (Index j = hi; j < bc; ++j) row[j] = Scalar(0);
    }
  }
  for (Index i = 0; i < br; ++i) {
    ws.l(i) = t[i] * ws.l(i) + sum[i];
    Scalar* o = ws.O.data() + i * ws.O.outerStride();  // (dv)
    if (t[i] != Scalar(1)) scale_row(o, ws.O.cols(), t[i], o);
  }
}

// One work item: rows q0 .. q0 + br - 1 of query head h of batch row b, its key/value head's keys and values in
// `keys`; the views and the rest as flash_attention_heads (detail/flash_attention.hpp). dropout: on the weights that
// multiply the values, after each row's sum (which is over the weights before it); lse: (br) for each row's
// log-sum-exp, m + log(l) (left as it is for a row that sees no key), or null.
template <class Scalar>
void flash_attention_block(const Heads<const Scalar>& Q, const HeadKeys<Scalar>& keys, Index b, Index h, Index q0,
                           Index br, const Mask& mask, const Heads<Scalar>& output, FlashBlocks blocks,
                           FlashWorkspace<Scalar>& ws, const AttentionDropout& dropout, Scalar* lse) {
  const Index pair = b * Q.count + h;
  const Index d = ws.Qs.cols(), dv = ws.O.cols();
  const Index num_queries = Q.length, num_keys = keys.V.rows();
  const auto& V = keys.V;  // (num_keys, dv)
  auto out = output.head(b, h).middleRows(q0, br);  // (br, dv)

  // The keys each row sees, kept for the value loop and the last pass; the key loop covers the union of their ranges.
  const BlockKeys block = block_keys(br, num_keys, mask.fully_masked(), [&](Index i) {
    return ws.keys[static_cast<std::size_t>(i)] = mask.visible_keys(b, q0 + i, num_queries, num_keys);
  });
  const Index block_first = block.first, block_last = block.last;

  auto Qs = ws.Qs.topRows(br);  // (br, d)
  auto O = ws.O.topRows(br);    // (br, dv)
  if (block_first < block_last) {
    const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
    for (Index i = 0; i < br; ++i) scale_row(Q.at(b, h, q0 + i), d, scale, Qs.data() + i * Qs.outerStride());
    O.setZero();
    ws.l.head(br).setZero();
  }
  // Key blocks are the K^T copy's panels: the first one is the panel that holds the block's first visible key.
  for (Index k0 = block_first / blocks.key_rows * blocks.key_rows; k0 < block_last; k0 += blocks.key_rows) {
    const Index bc = std::min(blocks.key_rows, block_last - k0);
    auto S = ws.S.topLeftCorner(br, bc);                                      // (br, bc)
    const Index t = k0 / blocks.key_rows, stored = std::min(blocks.key_rows, num_keys - k0);  // block t's keys
    packed_times_matrix_entry<Scalar>(false, false, Qs.data(), Qs.outerStride(), br, 0, d, bc,
                                      keys.KT + t * keys.panel_size, d, stored, nullptr, S.data(), S.outerStride());
    online_softmax_step(ws, br, bc, k0);
    for (Index i = 0; dropout.active() && i < br; ++i)
      dropout.apply(S.data() + i * S.outerStride(), bc, pair, q0 + i, k0);
    const auto Vb = V.middleRows(k0, bc);  // (bc, dv)
    if (mask.empty() || all_finite(Vb)) {  // with no mask every key is visible: a product over all of them is right
      if (keys.VP != nullptr) {
        packed_times_matrix_entry<Scalar>(true, false, S.data(), S.outerStride(), br, 0, bc, dv,
                                          keys.VP + t * keys.value_panel_size, stored, dv, nullptr, O.data(),
                                          O.outerStride());
      } else {
        rows_times_matrix<true, Scalar>(S.data(), S.outerStride(), br, bc, Vb.data(), Vb.outerStride(), dv, false,
                                        nullptr, O.data(), O.outerStride());
      }
    } else {  // 0 * NaN is NaN: each row adds its visible keys only, so a masked key's value row is never read; one
      // multiply-add of the row kernel per key, the chain of the whole product less the keys of weight 0
      for (Index i = 0; i < br; ++i) {
        ws.keys[static_cast<std::size_t>(i)].for_each(k0, k0 + bc, [&](Index key) {
          const Index j = key - k0;
          rows_times_matrix<true, Scalar>(S.data() + i * S.outerStride() + j, 1, 1, 1,
                                          Vb.data() + j * Vb.outerStride(), Vb.outerStride(), dv, false, nullptr,
                                          O.data() + i * O.outerStride(), O.outerStride());
        });
      }
    }
  }

  // The head's mean value row, only when some row needs FullyMasked::uniform.
  const bool uniform = mask.fully_masked() == FullyMasked::uniform && num_keys > 0;
  if (block.uniform_row && uniform) ws.mean.transpose() = V.colwise().sum() / static_cast<Scalar>(num_keys);
  for (Index i = 0; i < br; ++i) {
    if (!ws.keys[static_cast<std::size_t>(i)].none()) {
      divide_row(O.data() + i * O.outerStride(), dv, ws.l(i), out.data() + i * out.outerStride());
      if (lse != nullptr) lse[i] = ws.m(i) + std::log(ws.l(i));
    } else if (uniform && dropout.active()) {  // weights 1 / num_keys, dropped as the direct path drops them
      out.row(i).setZero();
      for (Index j = 0; j < num_keys; ++j) {
        Scalar w = Scalar(1) / static_cast<Scalar>(num_keys);
        dropout.apply(&w, 1, pair, q0 + i, j);
        out.row(i) += w * V.row(j);
      }
    } else if (uniform) {
      out.row(i) = ws.mean.transpose();
    } else {
      out.row(i).setZero();
    }
  }
}
