// attend/detail/kernels/products-inl.hpp — Y = X B (+ bias), or Y += X B, for a row-major B read a row at a time.
// Compiled once per level (detail/kernels.hpp) against that level's Simd<Scalar>; no include guard.
//
// Each row of Y is a sum of rows of B scaled by X's entries: packets along Y's columns, R rows of X at a time by up to
// C = 4 packets of columns, all R * C accumulators in registers (row_accumulators: 6 x 4, or 12 x 2 for a narrow Y,
// with 32 vector registers; 4 x 3 or 6 x 2 with 16); step k loads C packets of row k of B and R entries of X for
// R * C multiply-adds, with no reduction across lanes. X is never packed. B is read in place for a product of few rows
// (a projection of the seed's 8 rows, an RNN step), in panels that stay in L2 when it is large
// (tuning::product_panel_bytes); with tuning::packed_product_rows rows or more, each panel of B is first copied into
// contiguous micro-panels (below), a copy that costs a few per cent of such a product. A B whose rows end at Y's last
// column (not padded to whole packets) gets its last columns, fewer than a packet, through one packet of which only
// those lanes are loaded and stored.
//
// Every element of Y is one chain of multiply-adds over k in order, from 0 (or from Y's value when accumulating),
// then plus its bias: the same bits whatever the number of rows in a call, so whatever the number of threads, and
// whatever the panels.
//
// X may also be given transposed (times_matrix of x_columns: Y = A^T B with A (in, rows) as stored): the row blocks
// then broadcast their R entries of a step from one row of A, R consecutive values, and no transposed copy is made.
// The same multiply-adds in the same order, so the bits of a product with A^T copied out first.

// How many accumulators a block of Y keeps in registers: all but 8 of the vector registers on a level with 32 (C
// packets of B and a broadcast of X need the others), 12 on one with 16 (the compiler folds the loads of B into the
// multiply-adds; 16 accumulators and the broadcast would not fit, and a spill in the inner loop cost a third of the
// time: docs/PERFORMANCE.md).
template <class Scalar>
constexpr int row_accumulators = Simd<Scalar>::registers >= 32 ? 24 : 12;

// Entry (r, k) of X (rows, in): X[r * ldx + k] as stored, or, Transposed, A[k * ldx + r] of A = X^T (in, rows), rows
// ldx apart.
template <bool Transposed, class Scalar>
const Scalar* x_entry(const Scalar* X, Index ldx, Index r, Index k) {
  return Transposed ? X + k * ldx + r : X + r * ldx + k;
}

// Columns [0, C packets) of R rows of Y, all of them present: Y[r, o] (+)= sum_k X[r, k] B[k, o] (+ bias[o]).
// X: (R, in), entries at x_entry<Transposed>; B: (in, >= C packets), rows ldb apart; bias: (C packets) or null; Y rows
// ldy apart. Only whole packets here, so that the compiler keeps every accumulator in a register.
template <int R, int C, bool Accumulate, bool Transposed = false, class Scalar>
void rows_times_packets(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, const Scalar* bias, Scalar* Y,
                        Index ldy) {
  using S = Simd<Scalar>;
  using Packet = typename S::Packet;
  constexpr Index P = S::size;
  Packet acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = Accumulate ? S::load(Y + r * ldy + c * P) : S::zero();
  for (Index k = 0; k < in; ++k) {
    const Scalar* b = B + k * ldb;
    Packet bk[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bk[c] = S::load(b + c * P);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Packet x = S::set1(*x_entry<Transposed>(X, ldx, r, k));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = S::madd(x, bk[c], acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    if (bias != nullptr) {
      const Packet add = S::load(bias + c * P);
      for (int r = 0; r < R; ++r) acc[r][c] = S::add(acc[r][c], add);
    }
    for (int r = 0; r < R; ++r) S::store(Y + r * ldy + c * P, acc[r][c]);
  }
}

// Columns [o0, o0 + C packets) of R rows of Y, those below `out` written: as rows_times_packets, B read in whole
// packets. When the last packet runs past `out`, Y's and the bias's entries go through a padded copy.
template <int R, int C, bool Accumulate, bool Transposed = false, class Scalar>
void rows_times_matrix_block(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index o0, Index out,
                             const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index width = C * Simd<Scalar>::size;
  const Scalar* bias_o0 = bias != nullptr ? bias + o0 : nullptr;
  const Scalar* B_o0 = in > 0 ? B + o0 : B;  // B is never read when in = 0, and may then be null
  if (o0 + width <= out) {
    rows_times_packets<R, C, Accumulate, Transposed>(X, ldx, in, B_o0, ldb, bias_o0, Y + o0, ldy);
    return;
  }
  const Index present = out - o0;  // 1 .. width - 1 columns
  Scalar tile[R * width] = {};     // (R, width): the block of Y, zero past `out`
  Scalar bias_tile[width] = {};    // (width)
  if constexpr (Accumulate)
    for (int r = 0; r < R; ++r)
      for (Index o = 0; o < present; ++o) tile[r * width + o] = Y[r * ldy + o0 + o];
  if (bias_o0 != nullptr)
    for (Index o = 0; o < present; ++o) bias_tile[o] = bias_o0[o];
  rows_times_packets<R, C, Accumulate, Transposed>(X, ldx, in, B_o0, ldb, bias_o0 != nullptr ? bias_tile : nullptr,
                                                  tile, width);
  for (int r = 0; r < R; ++r)
    for (Index o = 0; o < present; ++o) Y[r * ldy + o0 + o] = tile[r * width + o];
}

// Columns [o0, out) of R rows of Y, fewer than a packet: as rows_times_packets on one packet whose lanes past `out`
// are neither read nor written (load_first, store_first), for a B whose rows end at `out`. The same operations as the
// whole packets, so an element's bits do not depend on where it falls.
template <int R, bool Accumulate, class Scalar>
void rows_times_tail(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index o0, Index out,
                     const Scalar* bias, Scalar* Y, Index ldy) {
  using S = Simd<Scalar>;
  using Packet = typename S::Packet;
  const Index n = out - o0;  // 1 .. size - 1
  Packet acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Accumulate ? S::load_first(Y + r * ldy + o0, n) : S::zero();
  for (Index k = 0; k < in; ++k) {
    const Packet b = S::load_first(B + k * ldb + o0, n);
    for (int r = 0; r < R; ++r) acc[r] = S::madd(S::set1(X[r * ldx + k]), b, acc[r]);
  }
  if (bias != nullptr) {
    const Packet add = S::load_first(bias + o0, n);
    for (int r = 0; r < R; ++r) acc[r] = S::add(acc[r], add);
  }
  for (int r = 0; r < R; ++r) S::store_first(Y + r * ldy + o0, acc[r], n);
}

// R rows of Y, every column: blocks of C = min(4, row_accumulators / R) packets, then the rest; see
// rows_times_matrix for `padded`.
template <int R, bool Accumulate, class Scalar>
void rows_times_matrix_rows(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index out, bool padded,
                            const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = Simd<Scalar>::size;
  constexpr int C = std::min(4, row_accumulators<Scalar> / R);
  static_assert(C >= 1, "at most row_accumulators rows a block");
  const Index packets = padded ? (out + P - 1) / P : out / P;
  Index p = 0;
  for (; p + C <= packets; p += C)
    rows_times_matrix_block<R, C, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
  switch (packets - p) {
    case 3:
      if constexpr (C > 3) rows_times_matrix_block<R, 3, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    case 2:
      if constexpr (C > 2) rows_times_matrix_block<R, 2, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    case 1:
      if constexpr (C > 1) rows_times_matrix_block<R, 1, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    default: break;
  }
  if (packets * P < out) rows_times_tail<R, Accumulate>(X, ldx, in, B, ldb, packets * P, out, bias, Y, ldy);
}

// Blocks of `wide` rows to take before the 4-row ones and the single rows: rows / wide, less one when taking its rows
// as 4-row blocks leaves fewer rows alone (128 rows of 6: 20 x 6 + 2 x 4, not 21 x 6 + 2 x 1; a row alone makes as
// many loads of B as a whole block).
constexpr Index wide_row_blocks(Index rows, Index wide) {
  const Index blocks = rows / wide, left = rows % wide;
  return blocks > 0 && (left + wide) % 4 < left % 4 ? blocks - 1 : blocks;
}

// rows_times_matrix below for a B that stays in cache. Rows go row_accumulators / 4 at a time (6 with 32
// registers, C up to 4 packets of columns), or row_accumulators / 2 and then 8 when out is at most 2 packets (a head
// of 32 floats: with few rows there, a step would make 2 loads of B and as many broadcasts as rows for only 2
// multiply-adds a row); the rows left over 4 at a time, then one at a time. A row alone makes C loads of B for C
// multiply-adds, so 8 rows go as 4 + 4, not 6 + 1 + 1 (the seed's projections have 8 rows), and 9 as 4 + 4 + 1.
template <bool Accumulate, class Scalar>
void rows_times_panel(const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                      bool padded, const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = Simd<Scalar>::size;
  constexpr int wide = row_accumulators<Scalar> / 4, narrow = row_accumulators<Scalar> / 2;
  Index r = 0;
  if (out <= 2 * P) {
    for (; r + narrow <= rows; r += narrow)
      rows_times_matrix_rows<narrow, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
    if constexpr (narrow > 8)
      for (; r + 8 <= rows; r += 8)
        rows_times_matrix_rows<8, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  } else if constexpr (wide > 4) {
    for (const Index end = wide_row_blocks(rows, wide) * wide; r < end; r += wide)
      rows_times_matrix_rows<wide, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  }
  for (; r + 4 <= rows; r += 4)
    rows_times_matrix_rows<4, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  for (; r < rows; ++r)
    rows_times_matrix_rows<1, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
}

// ---- packed panels: B copied into contiguous micro-panels, for a product with many rows ----------------------------
//
// Read in place, a row-major B whose rows are a power of two apart (a kept W^T of 256 columns, a panel of K^T) maps
// each step's few cache lines onto a handful of L1 sets: the panel that a block of rows walks over does not stay in
// L1, and every load of B goes to L2. With at least tuning::packed_product_rows rows, each panel of B (at most
// product_panel_depth rows by product_panel_width columns) is first copied into micro-panels of packed_packets
// packets, each (steps, packets * size) contiguous, which the row blocks then stream in order. The copy moves values
// only: each element of Y is the same chain of multiply-adds, so the bits are those of the in-place kernel.

// Packets of columns in a micro-panel, and rows of X a block: 6 x 4 accumulators with 32 registers, 6 x 2 with 16.
template <class Scalar>
constexpr int packed_packets = Simd<Scalar>::registers >= 32 ? 4 : 2;
template <class Scalar>
constexpr int packed_rows = row_accumulators<Scalar> / packed_packets<Scalar>;

// Columns of a whole micro-panel.
template <class Scalar>
constexpr Index packed_width = packed_packets<Scalar> * Simd<Scalar>::size;

// The width of the micro-panel that holds `present` columns (at most packed_width): whole packets.
template <class Scalar>
constexpr Index micro_panel_width(Index present) {
  return (present + Simd<Scalar>::size - 1) / Simd<Scalar>::size * Simd<Scalar>::size;
}

// B (cols, rows) = A (rows, cols)^T. A's rows lda apart, B's ldb apart; the two may not overlap. Exact (a copy):
// tile x tile blocks through registers (Simd::transpose_tile), the edges by scalars.
template <class Scalar>
void transpose_into(const Scalar* A, Index lda, Index rows, Index cols, Scalar* B, Index ldb) {
  constexpr Index T = Simd<Scalar>::tile;
  const Index block_rows = rows / T * T, block_cols = cols / T * T;
  for (Index i = 0; i < block_rows; i += T)
    for (Index j = 0; j < block_cols; j += T) Simd<Scalar>::transpose_tile(A + i * lda + j, lda, B + j * ldb + i, ldb);
  for (Index i = 0; i < rows; ++i)  // the edges: columns past the blocks, then rows past them
    for (Index j = i < block_rows ? block_cols : 0; j < cols; ++j) B[j * ldb + i] = A[i * lda + j];
}

// Micro-panels of B's (steps, columns) panel, its entry (k, o) at B[k * ldb + o * column_stride], into `packed`:
// each of packed_width columns but the last, which has the columns left rounded up to whole packets; each
// (steps, its width), contiguous, zero past `columns`. Reads only B's first `columns` columns. A B stored by rows
// (column_stride 1) is copied a row at a time in packets, one stored by columns (ldb 1: W^T read from W) transposed
// through registers (transpose_into); any other layout element by element, along the smaller stride (down the
// columns in blocks of steps, so that the part of the micro-panel being written stays in L1).
template <class Scalar>
void pack_panel(const Scalar* B, Index ldb, Index column_stride, Index steps, Index columns, Scalar* packed) {
  for (Index j0 = 0; j0 < columns; j0 += packed_width<Scalar>) {
    const Index present = std::min(packed_width<Scalar>, columns - j0);
    const Index width = micro_panel_width<Scalar>(present);
    const Scalar* B_j0 = B + j0 * column_stride;
    if (column_stride == 1) {  // in packets: a library call a row would cost about as much as the row's copy
      using S = Simd<Scalar>;
      constexpr Index P = S::size;
      for (Index k = 0; k < steps; ++k) {
        const Scalar* from = B_j0 + k * ldb;  // (present)
        Scalar* to = packed + k * width;      // (width)
        Index c = 0;
        for (; c + P <= present; c += P) S::store(to + c, S::load(from + c));
        if (c < present) S::store_first(to + c, S::load_first(from + c, present - c), present - c);
      }
    } else if (ldb == 1) {
      transpose_into(B_j0, column_stride, present, steps, packed, width);
    } else if (column_stride < ldb) {
      for (Index k = 0; k < steps; ++k)
        for (Index o = 0; o < present; ++o) packed[k * width + o] = B_j0[k * ldb + o * column_stride];
    } else {  // a column at a time, down tuning::pack_block_steps steps: the block written stays in L1
      for (Index k0 = 0; k0 < steps; k0 += tuning::pack_block_steps) {
        const Index k1 = std::min(k0 + tuning::pack_block_steps, steps);
        for (Index o = 0; o < present; ++o)
          for (Index k = k0; k < k1; ++k) packed[k * width + o] = B_j0[k * ldb + o * column_stride];
      }
    }
    for (Index k = 0; k < steps; ++k) std::fill(packed + k * width + present, packed + (k + 1) * width, Scalar(0));
    packed += steps * width;
  }
}

// R rows of Y, columns [0, columns): Y (+)= X (R, steps) times the packed panel (+ bias), micro-panel by micro-panel.
// The panel was packed `depth` steps deep and `stored` columns wide (pack_panel); the product reads its steps
// [first, first + steps) and its first columns.
template <int R, bool Accumulate, bool Transposed, class Scalar>
void packed_rows_times_panel(const Scalar* X, Index ldx, Index steps, const Scalar* packed, Index first, Index depth,
                             Index stored, Index columns, const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = Simd<Scalar>::size, W = packed_width<Scalar>;
  constexpr int C = packed_packets<Scalar>;
  for (Index j0 = 0; j0 < columns; j0 += W) {
    const Index present = std::min(W, columns - j0);
    const Scalar* bias_j0 = bias != nullptr ? bias + j0 : nullptr;
    const Index ldb = micro_panel_width<Scalar>(std::min(W, stored - j0));  // the micro-panel's width as packed
    const Scalar* B = packed + first * ldb;                                   // its step `first`
    switch (micro_panel_width<Scalar>(present) / P) {  // the packets read: C but for the last
      case 1:
        rows_times_matrix_block<R, 1, Accumulate, Transposed>(X, ldx, steps, B, ldb, 0, present, bias_j0,
                                                              Y + j0, ldy);
        break;
      case 2:
        if constexpr (C >= 2)
          rows_times_matrix_block<R, 2, Accumulate, Transposed>(X, ldx, steps, B, ldb, 0, present, bias_j0,
                                                                Y + j0, ldy);
        break;
      case 3:
        if constexpr (C >= 3)
          rows_times_matrix_block<R, 3, Accumulate, Transposed>(X, ldx, steps, B, ldb, 0, present, bias_j0,
                                                                Y + j0, ldy);
        break;
      case 4:
        if constexpr (C >= 4)
          rows_times_matrix_block<R, 4, Accumulate, Transposed>(X, ldx, steps, B, ldb, 0, present, bias_j0,
                                                                Y + j0, ldy);
        break;
      default: break;
    }
    packed += depth * ldb;
  }
}

// Every row of Y over one packed panel (as packed_rows_times_panel): packed_rows at a time (wide_row_blocks), then 4,
// then one.
template <bool Accumulate, bool Transposed, class Scalar>
void packed_times_panel(const Scalar* X, Index ldx, Index rows, Index steps, const Scalar* packed, Index first,
                        Index depth, Index stored, Index columns, const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr int R = packed_rows<Scalar>;
  Index r = 0;
  for (const Index end = wide_row_blocks(rows, R) * R; r < end; r += R)
    packed_rows_times_panel<R, Accumulate, Transposed>(x_entry<Transposed>(X, ldx, r, 0), ldx, steps, packed, first,
                                                       depth, stored, columns, bias, Y + r * ldy, ldy);
  for (; r + 4 <= rows; r += 4)
    packed_rows_times_panel<4, Accumulate, Transposed>(x_entry<Transposed>(X, ldx, r, 0), ldx, steps, packed, first,
                                                       depth, stored, columns, bias, Y + r * ldy, ldy);
  for (; r < rows; ++r)
    packed_rows_times_panel<1, Accumulate, Transposed>(x_entry<Transposed>(X, ldx, r, 0), ldx, steps, packed, first,
                                                       depth, stored, columns, bias, Y + r * ldy, ldy);
}

// This thread's buffer for one packed panel, (product_panel_depth, product_panel_width): allocated on a thread's
// first packed product, kept until the thread ends, packet-aligned (detail/packet_buffer.hpp).
template <class Scalar>
Scalar* packed_panel_buffer() {
  static_assert(tuning::product_panel_width<Scalar> % packed_width<Scalar> == 0, "a panel holds whole micro-panels");
  thread_local PacketArray<Scalar> buffer =
      allocate_packets<Scalar>(tuning::product_panel_depth<Scalar> * tuning::product_panel_width<Scalar>);
  return buffer.get();
}

// The product over an inner dimension of 0: Y (rows, out) = 0 + bias (0 without one), or Y += bias when
// accumulating (unchanged without one), the operations of the row blocks on an empty sum. X and B have no entry to
// read, and no pointer into them is formed: either may be null.
template <bool Accumulate, class Scalar>
void product_over_no_steps(Index rows, Index out, const Scalar* bias, Scalar* Y, Index ldy) {
  for (Index r = 0; r < rows; ++r) {
    Scalar* y = Y + r * ldy;  // (out)
    for (Index o = 0; o < out; ++o) {
      const Scalar sum = Accumulate ? y[o] : Scalar(0);
      y[o] = bias != nullptr ? sum + bias[o] : sum;
    }
  }
}

// Y (rows, out) (+)= X (rows, in) B (in, out) + bias over panels of B of at most product_panel_depth rows by
// product_panel_width columns, X's entries at x_entry<Transposed>, B's entry (k, o) at B[k * ldb + o * column_stride]:
// each panel packed first (packs), then every row of X passes over it; or, X not Transposed and B stored by rows
// (column_stride 1), read in place. The depth slices of a panel in order, the bias with the last, so each element's
// chain is that of one pass.
template <bool Accumulate, bool Transposed, class Scalar>
void panels_times_matrix(bool packs, const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb,
                         Index column_stride, Index out, bool padded, const Scalar* bias, Scalar* Y, Index ldy) {
  eigen_assert(packs || (!Transposed && column_stride == 1));  // the in-place path reads X and B by rows
  if (in == 0) {
    product_over_no_steps<Accumulate>(rows, out, bias, Y, ldy);
    return;
  }
  constexpr Index depth = tuning::product_panel_depth<Scalar>, width = tuning::product_panel_width<Scalar>;
  Scalar* packed = packs ? packed_panel_buffer<Scalar>() : nullptr;
  for (Index o0 = 0; o0 < out; o0 += width) {
    const Index columns = std::min(width, out - o0);
    for (Index k0 = 0; k0 < in; k0 += depth) {
      const Index steps = std::min(depth, in - k0);
      const Scalar* panel_bias = k0 + steps == in && bias != nullptr ? bias + o0 : nullptr;
      const Scalar* panel = B + k0 * ldb + o0 * column_stride;  // (steps, columns)
      const Scalar* X_k0 = x_entry<Transposed>(X, ldx, 0, k0);
      const bool accumulate = Accumulate || k0 > 0;
      if (packs) {
        pack_panel(panel, ldb, column_stride, steps, columns, packed);
        if (accumulate) {
          packed_times_panel<true, Transposed>(X_k0, ldx, rows, steps, packed, 0, steps, columns, columns,
                                               panel_bias, Y + o0, ldy);
        } else {
          packed_times_panel<false, Transposed>(X_k0, ldx, rows, steps, packed, 0, steps, columns, columns,
                                                panel_bias, Y + o0, ldy);
        }
      } else if constexpr (!Transposed) {
        if (accumulate) {
          rows_times_panel<true>(X_k0, ldx, rows, steps, panel, ldb, columns, padded, panel_bias, Y + o0, ldy);
        } else {
          rows_times_panel<false>(X_k0, ldx, rows, steps, panel, ldb, columns, padded, panel_bias, Y + o0, ldy);
        }
      }
    }
  }
}

// Y (rows, out) = X (rows, in) B (in, out) + bias, or Y += X B + bias when Accumulate. X rows ldx apart, B rows ldb
// apart, Y rows ldy apart; bias (out) or null. With in = 0, Y = bias (0 without one), or Y += bias when
// accumulating: X and B are then never read, and either may be null.
// padded: B's rows may be read in whole packets, out rounded up to a multiple of the packet (a padded copy, or out a
// multiple of the packet); false: B's rows end at `out`, and the last out % packet columns of Y go through one packet
// whose other lanes are not touched.
// At least tuning::packed_product_rows rows: B in packed panels (above). Fewer: B read in place, in panels of
// product_panel_depth rows by product_panel_width columns when it is over tuning::product_panel_bytes. Either way each
// panel's depth slices are accumulated in order (the bias with the last), so each element's chain is unchanged.
template <bool Accumulate, class Scalar>
void rows_times_matrix(const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                       bool padded, const Scalar* bias, Scalar* Y, Index ldy) {
  if (in == 0) {
    product_over_no_steps<Accumulate>(rows, out, bias, Y, ldy);
    return;
  }
  const bool packs = rows >= tuning::packed_product_rows;
  const double bytes = static_cast<double>(in) * static_cast<double>(out) * sizeof(Scalar);
  if (!packs && bytes <= tuning::product_panel_bytes) {
    rows_times_panel<Accumulate>(X, ldx, rows, in, B, ldb, out, padded, bias, Y, ldy);
    return;
  }
  panels_times_matrix<Accumulate, false>(packs, X, ldx, rows, in, B, ldb, 1, out, padded, bias, Y, ldy);
}

// The table's entry: pack_panel of a right operand (detail/operands.hpp; its `padded` does not matter here).
template <class Scalar>
void pack_operand(const RightOperand<Scalar>& B, Index steps, Index columns, Scalar* packed) {
  pack_panel(B.data, B.row_stride, B.column_stride, steps, columns, packed);
}

// Y (rows, columns) (+)= X (rows, steps) B + bias, B the steps [first, first + steps) and the first columns of a panel
// that pack_panel packed on this level, `depth` steps deep and `stored` columns wide: an operand packed once and read
// by many products (a kept W^T, the core's K^T and V blocks, a head's K^T, K, V^T, V, Q or dO on the direct
// path). X's entries at x_entry<Transposed>: with Transposed, X = A^T for A (steps, rows) as stored, rows ldx apart.
// The panel's columns from a multiple c0 of packed_width on are the panel at packed + c0 * depth, `stored - c0` wide.
// In panels of at most product_panel_depth steps by product_panel_width columns, each passed over by every row block,
// as panels_times_matrix does: the same bits. With steps = 0: Y = bias (0 without one), or Y += bias when
// accumulating.
template <bool Transposed, class Scalar>
void packed_product(bool accumulate, const Scalar* X, Index ldx, Index rows, Index first, Index steps, Index columns,
                    const Scalar* packed, Index depth, Index stored, const Scalar* bias, Scalar* Y, Index ldy) {
  eigen_assert(first >= 0 && first + steps <= depth && columns <= stored);
  if (steps == 0) {
    if (accumulate) {
      product_over_no_steps<true>(rows, columns, bias, Y, ldy);
    } else {
      product_over_no_steps<false>(rows, columns, bias, Y, ldy);
    }
    return;
  }
  constexpr Index slice = tuning::product_panel_depth<Scalar>, width = tuning::product_panel_width<Scalar>;
  static_assert(width % packed_width<Scalar> == 0, "a panel holds whole micro-panels");
  for (Index o0 = 0; o0 < columns; o0 += width) {
    const Index present = std::min(width, columns - o0);
    const Scalar* panel = packed + o0 * depth;  // after o0 / packed_width whole micro-panels
    for (Index k0 = 0; k0 < steps; k0 += slice) {
      const Index s = std::min(slice, steps - k0);
      const Scalar* panel_bias = k0 + s == steps && bias != nullptr ? bias + o0 : nullptr;
      const Scalar* X_k0 = x_entry<Transposed>(X, ldx, 0, k0);
      if (accumulate || k0 > 0) {
        packed_times_panel<true, Transposed>(X_k0, ldx, rows, s, panel, first + k0, depth, stored - o0, present,
                                             panel_bias, Y + o0, ldy);
      } else {
        packed_times_panel<false, Transposed>(X_k0, ldx, rows, s, panel, first + k0, depth, stored - o0, present,
                                              panel_bias, Y + o0, ldy);
      }
    }
  }
}

// The table's entry: Y (X.rows, columns) (+)= X (X.rows, steps) B (the steps from B.first, the first columns of a
// packed panel) + Y.bias (detail/operands.hpp).
template <class Scalar>
void packed_times_matrix(const LeftOperand<Scalar>& X, Index steps, const PackedOperand<Scalar>& B, Index columns,
                         const Output<Scalar>& Y) {
  if (X.transposed) {
    packed_product<true>(Y.accumulate, X.data, X.stride, X.rows, B.first, steps, columns, B.data, B.depth, B.stored,
                         Y.bias, Y.data, Y.stride);
  } else {
    packed_product<false>(Y.accumulate, X.data, X.stride, X.rows, B.first, steps, columns, B.data, B.depth, B.stored,
                          Y.bias, Y.data, Y.stride);
  }
}

// The table's entry: Y (X.rows, columns) (+)= X (X.rows, steps) B (steps, columns) + Y.bias, B read in place
// (detail/operands.hpp). X by rows and B by rows: rows_times_matrix (in place for few rows, packed panels for many).
// X transposed (A^T, A read in place) or B in another layout (W^T read from W, a tap of Conv1d's weight): always
// through packed panels, since the in-place path reads X and B by rows; the bits of rows_times_matrix on a copy of
// A^T or a row-major copy of B. With steps = 0: Y = bias (0 without one), or Y += bias when accumulating; X and B
// are then never read.
template <class Scalar>
void times_matrix(const LeftOperand<Scalar>& X, Index steps, const RightOperand<Scalar>& B, Index columns,
                  const Output<Scalar>& Y) {
  if (!X.transposed && B.column_stride == 1) {
    if (Y.accumulate) {
      rows_times_matrix<true>(X.data, X.stride, X.rows, steps, B.data, B.row_stride, columns, B.padded, Y.bias, Y.data,
                              Y.stride);
    } else {
      rows_times_matrix<false>(X.data, X.stride, X.rows, steps, B.data, B.row_stride, columns, B.padded, Y.bias, Y.data,
                               Y.stride);
    }
    return;
  }
  if (X.rows == 0) return;
  const auto run = [&](auto accumulate, auto transposed) {
    panels_times_matrix<decltype(accumulate)::value, decltype(transposed)::value>(
        true, X.data, X.stride, X.rows, steps, B.data, B.row_stride, B.column_stride, columns, B.padded, Y.bias, Y.data,
        Y.stride);
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (Y.accumulate && X.transposed) {
    run(yes{}, yes{});
  } else if (Y.accumulate) {
    run(yes{}, no{});
  } else if (X.transposed) {
    run(no{}, yes{});
  } else {
    run(no{}, no{});
  }
}

// ---- the taps of a 'same' correlation: Conv1d's forward pass and its input gradient --------------------------------
//
// Over a chunk of rows of one sequence, output row r adds, for each tap t, X's row r + t - left (counted from the
// chunk's first row) times B_t (in, out), where that row lies in the sequence: X's rows run from -before to
// rows + after - 1, and the sequence's zero padding beyond them adds nothing. The taps' panels are packed together,
// row i * taps + t of a micro-panel holding channel i of tap t, and a block of rows keeps its accumulators in
// registers over every tap: Y is read and written once per panel of input channels, not once per tap.

// Columns [0, C packets) of R rows of Y += the taps [first, last) of a micro-panel of `taps` interleaved taps over
// `steps` input channels: X points at the block's first row for tap `first` (the row for tap t of block row r at
// X + (r + t - first) * ldx); packed (steps * taps, C packets), contiguous. The sum runs over the channels in order,
// within each over the taps in order.
template <int R, int C, class Scalar>
void taps_times_packets(const Scalar* X, Index ldx, Index steps, Index taps, Index first, Index last,
                        const Scalar* packed, Scalar* Y, Index ldy) {
  using S = Simd<Scalar>;
  using Packet = typename S::Packet;
  constexpr Index P = S::size, width = C * P;
  Packet acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = S::load(Y + r * ldy + c * P);
  for (Index i = 0; i < steps; ++i) {
    for (Index t = first; t < last; ++t) {
      const Scalar* b = packed + (i * taps + t) * width;  // (C packets)
      const Scalar* x = X + (t - first) * ldx + i;        // (R), ldx apart
      Packet bk[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) bk[c] = S::load(b + c * P);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Packet xr = S::set1(x[r * ldx]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r][c] = S::madd(xr, bk[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) S::store(Y + r * ldy + c * P, acc[r][c]);
}

// The same over a micro-panel of which only the first `present` columns are Y's: those go through a tile.
template <int R, int C, class Scalar>
void taps_times_micro_panel(const Scalar* X, Index ldx, Index steps, Index taps, Index first, Index last,
                            const Scalar* packed, Index present, Scalar* Y, Index ldy) {
  constexpr Index width = C * Simd<Scalar>::size;
  if (present == width) {
    taps_times_packets<R, C>(X, ldx, steps, taps, first, last, packed, Y, ldy);
    return;
  }
  Scalar tile[R * width] = {};  // (R, width): the block of Y, zero past `present`
  for (int r = 0; r < R; ++r)
    for (Index o = 0; o < present; ++o) tile[r * width + o] = Y[r * ldy + o];
  taps_times_packets<R, C>(X, ldx, steps, taps, first, last, packed, tile, width);
  for (int r = 0; r < R; ++r)
    for (Index o = 0; o < present; ++o) Y[r * ldy + o] = tile[r * width + o];
}

// R rows of Y, columns [0, columns), over every micro-panel of a packed panel of taps (pack_taps).
template <int R, class Scalar>
void taps_times_panel(const Scalar* X, Index ldx, Index steps, Index taps, Index first, Index last,
                      const Scalar* packed, Index columns, Scalar* Y, Index ldy) {
  constexpr Index P = Simd<Scalar>::size, W = packed_width<Scalar>;
  constexpr int C = packed_packets<Scalar>;
  for (Index j0 = 0; j0 < columns; j0 += W) {
    const Index present = std::min(W, columns - j0);
    const Index width = micro_panel_width<Scalar>(present);
    switch (width / P) {  // the micro-panel's packets: C but for the last
      case 1:
        taps_times_micro_panel<R, 1>(X, ldx, steps, taps, first, last, packed, present, Y + j0, ldy);
        break;
      case 2:
        if constexpr (C >= 2)
          taps_times_micro_panel<R, 2>(X, ldx, steps, taps, first, last, packed, present, Y + j0, ldy);
        break;
      case 3:
        if constexpr (C >= 3)
          taps_times_micro_panel<R, 3>(X, ldx, steps, taps, first, last, packed, present, Y + j0, ldy);
        break;
      case 4:
        if constexpr (C >= 4)
          taps_times_micro_panel<R, 4>(X, ldx, steps, taps, first, last, packed, present, Y + j0, ldy);
        break;
      default: break;
    }
    packed += steps * taps * width;
  }
}

// The micro-panels of `taps` taps' (steps, columns) panels, interleaved: as pack_panel's, each (steps * taps, its
// width) with row i * taps + t holding step i of tap t, B_t's entry (i, o) at
// B[i * row_stride + t * tap_stride + o * column_stride]. When those rows are evenly spaced (one tap, or
// row_stride = taps * tap_stride: Conv1d's forward taps, read from W (out, in * k) as W^T) they are one matrix for
// pack_panel (transposed through registers for W^T); otherwise gathered a row at a time.
template <class Scalar>
void pack_taps(const Scalar* B, Index row_stride, Index tap_stride, Index column_stride, Index taps, Index steps,
               Index columns, Scalar* packed) {
  if (taps == 1 || row_stride == taps * tap_stride) {
    pack_panel(B, taps == 1 ? row_stride : tap_stride, column_stride, steps * taps, columns, packed);
    return;
  }
  for (Index j0 = 0; j0 < columns; j0 += packed_width<Scalar>) {
    const Index present = std::min(packed_width<Scalar>, columns - j0);
    const Index width = micro_panel_width<Scalar>(present);
    const Scalar* B_j0 = B + j0 * column_stride;
    for (Index i = 0; i < steps; ++i)
      for (Index t = 0; t < taps; ++t) {
        Scalar* row = packed + (i * taps + t) * width;                // (width)
        const Scalar* source = B_j0 + i * row_stride + t * tap_stride;  // (present), column_stride apart
        for (Index o = 0; o < present; ++o) row[o] = source[o * column_stride];
        std::fill(row + present, row + width, Scalar(0));
      }
    packed += steps * taps * width;
  }
}

// Y (rows, out) += the correlation's products over a chunk of rows of one sequence (above), B_t's entry (i, o) at
// B[i * row_stride + t * tap_stride + o * column_stride]; X's rows ldx apart, `before` of them before the chunk's
// first row and `after` after its last; Y's rows ldy apart. Per panel of product_panel_width output columns, per group
// of at most product_panel_depth taps, per panel of product_panel_depth / (taps in the group) input channels, each
// element adds over the channels in order and within each over the taps in order: an order fixed by the shape. Rows
// whose steps for some tap lie outside the sequence (at most k - 1 of a sequence) go one at a time over the taps they
// reach.
template <class Scalar>
void correlate_rows(const Scalar* X, Index ldx, Index rows, Index before, Index after, Index in, Index taps,
                    Index left, const Scalar* B, Index row_stride, Index tap_stride, Index column_stride, Index out,
                    Scalar* Y, Index ldy) {
  if (rows == 0 || in == 0 || taps == 0 || out == 0) return;
  constexpr Index depth = tuning::product_panel_depth<Scalar>, width = tuning::product_panel_width<Scalar>;
  constexpr int R = packed_rows<Scalar>;
  Scalar* packed = packed_panel_buffer<Scalar>();
  const Index group = std::min(taps, depth);
  for (Index o0 = 0; o0 < out; o0 += width) {
    const Index columns = std::min(width, out - o0);
    for (Index t0 = 0; t0 < taps; t0 += group) {
      const Index t1 = std::min(t0 + group, taps), g = t1 - t0, channels = depth / g;
      // Row r reads tap t's step r + t - left, inside the sequence when -before <= r + t - left < rows + after:
      // rows [lo, hi) do for every tap of the group.
      const Index lo = std::clamp<Index>(left - t0 - before, 0, rows);
      const Index hi = std::clamp<Index>(rows + after + left - t1 + 1, lo, rows);
      for (Index i0 = 0; i0 < in; i0 += channels) {
        const Index steps = std::min(channels, in - i0);
        pack_taps(B + i0 * row_stride + t0 * tap_stride + o0 * column_stride, row_stride, tap_stride, column_stride, g,
                  steps, columns, packed);
        const Scalar* X_i0 = X + i0;
        Scalar* Y_o0 = Y + o0;
        const auto edge_row = [&](Index r) {  // the group's taps that row r reaches, relative to t0
          const Index first = std::clamp<Index>(left - before - r - t0, 0, g);
          const Index last = std::clamp<Index>(rows + after + left - r - t0, first, g);
          if (first < last)
            taps_times_panel<1>(X_i0 + (r + t0 + first - left) * ldx, ldx, steps, g, first, last, packed, columns,
                                Y_o0 + r * ldy, ldy);
        };
        for (Index r = 0; r < lo; ++r) edge_row(r);
        Index r = lo;
        for (; r + R <= hi; r += R)
          taps_times_panel<R>(X_i0 + (r + t0 - left) * ldx, ldx, steps, g, 0, g, packed, columns, Y_o0 + r * ldy, ldy);
        for (; r + 4 <= hi; r += 4)
          taps_times_panel<4>(X_i0 + (r + t0 - left) * ldx, ldx, steps, g, 0, g, packed, columns, Y_o0 + r * ldy, ldy);
        for (; r < hi; ++r)
          taps_times_panel<1>(X_i0 + (r + t0 - left) * ldx, ldx, steps, g, 0, g, packed, columns, Y_o0 + r * ldy, ldy);
        for (r = hi; r < rows; ++r) edge_row(r);
      }
    }
  }
}

// The table's entry: Y (X.rows, columns) = the correlation + Y.bias, or Y += it (detail/operands.hpp); the bias is
// added last, after every tap.
template <class Scalar>
void correlate_operands(const SequenceRows<Scalar>& X, Index steps, const TapsOperand<Scalar>& B, Index columns,
                        const Output<Scalar>& Y) {
  if (!Y.accumulate)
    for (Index r = 0; r < X.rows; ++r) std::fill(Y.data + r * Y.stride, Y.data + r * Y.stride + columns, Scalar(0));
  correlate_rows(X.data, X.stride, X.rows, X.before, X.after, steps, B.count, B.left, B.data, B.row_stride,
                 B.tap_stride, B.column_stride, columns, Y.data, Y.stride);
  if (Y.bias != nullptr)
    for (Index r = 0; r < X.rows; ++r)
      for (Index o = 0; o < columns; ++o) Y.data[r * Y.stride + o] += Y.bias[o];
}
