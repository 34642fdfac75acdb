// attend/detail/flash_attention.hpp — scaled dot-product attention without the (queries, keys) matrix: tiled, with an
// online softmax (the FlashAttention forward pass: Dao et al. 2022, algorithm 1; Dao 2023, the rescaling kept per
// row and the division done once at the end). Evaluation mode only: no dropout, no attention weights.
//
// flash_attention_heads() has the shape contract of scaled_dot_product_heads() (attend_rows.hpp):
//   Q: (batch * num_queries, num_heads * d)   K: (batch * num_keys, num_heads * d)
//   V: (batch * num_keys, num_heads * dv)     output: (batch * num_queries, num_heads * dv)
// head h of batch row b is read and written through strided column blocks (columns h*d .. h*d + d - 1, rows
// b*steps ..); the mask of batch row b applies to all its heads. K is first copied head by head, transposed, a panel
// per key block, and V head by head when there are several heads and query blocks (FlashBuffers below): a head's
// rows inside K and V lie num_heads * d elements apart.
//
// One work item is (batch row b, head h, a block of Br query rows); for it:
//   Qs = Q_blk / sqrt(d)                                      (br, d)    the scale, folded in once
//   O = 0, l = 0, m = (none)                                  (br, dv), (br), (br)
//   for every key block [k0, k0 + bc) between the block's first and last visible key:
//     S = Qs K_blk^T                                          (br, bc)   detail/rows_times_matrix.hpp, on K^T
//     for each row i that sees a key of this block (its visible keys in it: a range, less the keep tensor's holes):
//       1. m' = max(m_i, max_{j visible} S_ij)
//       2. P_ij = exp(S_ij - m') for a visible j (flushed to 0 under exp_underflow), 0 for a masked j
//       3. a = exp(m_i - m'),  l_i = a l_i + sum_j P_ij,  O_i = a O_i,  m_i = m'
//     (with AVX-512 DQ floats, P_ij = 2^((S_ij - m') log2(e)), and a likewise: a shorter polynomial and one exact
//     vscalefps; masked_softmax.hpp, exp_via_exp2. At heads of 32, where the exponential took a fifth of the time:
//     2-9 % less time for MultiHeadAttention at 1 thread, n = 1024 to 8192. Steps 1-3 go in passes over all the rows
//     of the block, online_softmax_step: the factors a as packets, and when every row sees the whole block, the
//     rows' sums reduced 16 at a time: about 2 % less time at (4, 512, 256, 8 heads).)
//     O += P V_blk                                            (br, dv)   detail/rows_times_matrix.hpp
//   output row i = O_i / l_i, or, for a row that sees no key, the mask's FullyMasked rule.
// Extra memory: the per-thread workspace below, O(Br (d + dv + Bc)), whatever the sequence length, and the head-major
// copies of K (transposed) and, with several heads and query blocks or a dv not a multiple of the packet, of V: the
// size of K and V.
// The direct path holds (batch * num_heads, num_queries, num_keys) weights.
//
// Masking, as d2l's -1e6 replacement where it matters (see mask.hpp): in a row that sees at least one key, a masked
// key contributes exactly 0, which is what the direct path gives whenever the row's largest kept score is above
// -1e6 + 87.34 (float) or -1e6 + 708.40 (double), i.e. for any score a model produces. A row that sees no key gets
// FullyMasked::uniform, the mean of all num_keys value rows of its head (every score -1e6, every weight 1/num_keys),
// or FullyMasked::zero, a row of zeros; never NaN. The key loop of a query block runs from the key block that holds
// the first key any of its rows sees to the last key one sees (its last block cut there), so keys past every row's
// visible prefix (valid lengths, the causal limit: half the work of a causal square) and whole key blocks before
// every row's first kept key (a keep tensor) enter no product and no sum. A masked key's score, where one is computed
// (inside a block), is overwritten before it is used, and its value row is read only when every value row of the
// block is finite: K and V rows of masked keys may hold anything, NaN included.
//
// Block sizes, chosen on a Xeon of the Ice Lake server generation (`lscpu`: L1d 48 KiB and L2 1.25 MiB per core; the
// Emerald Rapids Xeon of the README's latest reference run has 48 KiB and 2 MiB, so everything below fits there too).
// In float, Br = 128 query rows by Bc = 256 keys:
//   S/P tile      Br * Bc * 4 B       = 128 KiB   written by Q K^T, rewritten by the exp pass, read by P V
//   K^T, V blocks Bc * (d + dv) * 4 B = 128 KiB at d = dv = 64 (64 KiB at d = 32), streamed
//   Qs, O         Br * (d + dv) * 4 B =  64 KiB at d = dv = 64, kept for the whole key loop
// about 320 KiB at d = 64 (230 KiB at d = 32): inside L2, with room for the next K/V block, so the tile is read from
// L2 (three passes, a fraction of a cycle per element beside the 2 (d + dv) FLOPs per element of the two products)
// and the inputs from memory once per query block. Both products run on rows_times_matrix, whose register block
// (6 rows by 4 packets with AVX-512) reads a 64-key slice of the K^T panel, d * 256 B, from L1 for all Br rows. The
// K^T copy is stored panel by panel, each key block's d x Bc slice contiguous: a block is then one stream for the
// hardware prefetcher instead of d rows num_keys apart, and a head whose keys and values leave L2 between query
// blocks (n = 4096 at d = 32: 1 MiB) lost 10 % less time (a key block begins at a panel's start, so the first one
// may hold keys before every row's first visible key: their scores are computed and then set to 0, never used).
// Tile sizes were measured with Eigen's GEMM for Q K^T, over Br in 32..384 and Bc in 64..1024 on (batch, n, d,
// heads) = (1, 2048, 64, 1), (1, 1024, 256, 8), (1, 2048, 256, 8) and (8, 128, 256, 8): 128 x 256 was within noise
// of the best on each, and with the row kernel for Q K^T, Br in 60..192 by Bc in 128..512, all within noise but Bc =
// 128 (10-20 % slower at d = 32). In double the same 128 KiB tile, 128 x 128. Tiles are clipped to the problem (a
// 4 x 4 problem gets a 4 x 4 workspace). The work items stay numerous enough for threads: n / 128 per (batch row,
// head).
//
// Threads: with OpenMP (the including target compiled with -fopenmp) the work items are shared among the threads,
// each item — and so each output row — computed by exactly one thread in a fixed order, so the result does not
// depend on the number of threads. A work item's products (rows_times_matrix) start no threads of their own.
// Without OpenMP the items run serially.
#pragma once

#include <attend/detail/rows_times_matrix.hpp>
#include <attend/detail/transpose.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attend {
namespace detail {

// Tile sizes of the kernel: Br query rows by Bc keys (see the top of this file).
struct FlashBlocks {
  Index query_rows;  // Br
  Index key_rows;    // Bc
};

// The tile sizes for Scalar: an S tile of 128 KiB, a tenth of L2 (see the top of this file).
template <class Scalar>
constexpr FlashBlocks flash_blocks() {
  return sizeof(Scalar) <= 4 ? FlashBlocks{128, 256} : FlashBlocks{128, 128};
}

// One thread's buffers, sized for the largest work item; resize() reallocates only when a size changes, so a
// workspace kept across calls of the same shape allocates nothing.
template <class Scalar>
struct FlashWorkspace {
  void resize(FlashBlocks blocks, Index d, Index dv) {
    const auto rows = static_cast<std::size_t>(blocks.query_rows);
    Qs.resize(blocks.query_rows, d);
    S.resize(blocks.query_rows, blocks.key_rows);
    O.resize(blocks.query_rows, dv);
    m.resize(blocks.query_rows);
    l.resize(blocks.query_rows);
    shift.resize(blocks.query_rows);
    partial.resize(blocks.query_rows, row_packet_size<Scalar>);
    block_sum.resize(blocks.query_rows);
    rescale.resize(padded_to_packets<Scalar>(blocks.query_rows));
    mean.resize(dv);
    first.resize(rows);
    last.resize(rows);
    keep.resize(rows);
  }

  Matrix<Scalar> Qs;                // (Br, d): the query block, scaled by 1 / sqrt(d)
  Matrix<Scalar> S;                 // (Br, Bc): scores, then unnormalised probabilities
  Matrix<Scalar> O;                 // (Br, dv): unnormalised output
  Vector<Scalar> m;                 // (Br): running maximum of each row's visible scores
  Vector<Scalar> l;                 // (Br): running sum of exp(score - m); 0 until the row has seen a key
  Vector<Scalar> shift;             // (Br): the maximum each row's exponentials of a key block take
  Vector<Scalar> rescale;           // (Br rounded up to whole packets): each row's a for a key block
  Matrix<Scalar> partial;           // (Br, packet size): each row's partial sums of exp over a key block
  Vector<Scalar> block_sum;         // (Br): each row's sum of exp over a key block
  Vector<Scalar> mean;              // (dv): mean of the head's value rows, for FullyMasked::uniform
  std::vector<Index> first, last;   // (Br): each row's visible keys lie in [first, last); first == last: none
  std::vector<const bool*> keep;    // (Br): each row's keep row (num_keys), or null
};

// Everything a call keeps between calls: one workspace per thread, and the head-major copies of K and V that all
// threads read. K's is transposed, so that S = Qs K^T is a sum of rows of K^T scaled by Qs's entries, the product
// rows_times_matrix makes without packing either operand (Eigen's GEMM, used before, repacked K_blk for every query
// block and Qs for every key block, and cleared S before adding to it: the copy and the row kernel took 1-12 % off
// MultiHeadAttention's time, 1 thread, float, the most at n = 4096 with heads of 32). With several heads, head h's rows
// of K and V lie num_heads * d elements apart in K and V, so a work item, which reads one head, uses one cache line in
// num_heads of every stretch of memory it crosses: 1/num_heads of the L2's sets, and of the lines each page brings. A
// head of 4096 keys (d = dv = 32, 1 MiB of keys and values) then no longer stays in L2 from one query block to the
// next. The copies put each (batch row, head) pair's rows next to one another, V's rows padded with zeros to whole
// packets for the row kernel. Measured (MultiHeadAttention, float, 1 thread, 8 heads of 32): 17-20 % less time at n =
// 4096, 28 % at n = 8192. V is copied only when a pair has more than one query block: with one, each value row is read
// once, and the copy would only read it once more (the kernel alone at (8, 128, 256, 8): 3 % less time without it);
// and only when the rows it reads again span more than 1 MiB of V (half this L2), num_keys rows num_heads * dv apart:
// below that they stay in L2 as they are (MultiHeadAttention at (4, 512, 256, 8 heads), 512 KiB: 1.7 % less time
// without the copy; (1, 1024, 256, 8), 1 MiB: no difference; (1, 2048, 256, 8): 3 % more time without it).
// K^T is copied P x P blocks at a time (detail/transpose.hpp: 10 % off the kernel alone at (8, 128, 256, 8)).
template <class Scalar>
struct FlashBuffers {
  std::vector<FlashWorkspace<Scalar>> threads;  // one per thread
  // (batch * num_heads * panels * d, Bc rounded up to whole packets): K^T in panels, one per key block; pair
  // (b, h)'s panel t, K^T of keys [t Bc, t Bc + Bc), in rows ((b * num_heads + h) * panels + t) * d .., padding 0
  Matrix<Scalar> KT;
  Matrix<Scalar> V;  // (batch * num_heads * num_keys, dv rounded up to whole packets): its values, the padding 0
};

// One (batch row, head) pair's keys and values, as the work items read them.
template <class Scalar>
struct HeadKeys {
  using View = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  const Scalar* KT;   // (panels, d, panel_width): key block t's K^T at KT + t * panel_size, rows panel_width apart
  Index panel_width;  // Bc rounded up to whole packets
  Index panel_size;   // d * panel_width
  View V;             // (num_keys, dv), rows readable in whole packets
};

// sums[r] = predux(partial row r) for r < rows, partial: (rows, packet size) contiguous. The same bits as Eigen's
// predux row by row (lanes j and j + 8 first, then j and j + 4, j and j + 2, j and j + 1); with AVX-512 DQ floats 16
// rows at a time, as a transposed tree: 15 adds and 31 shuffles where 16 preduxes take 128 instructions and their
// latencies.
template <class Scalar>
void predux_rows(const Scalar* partial, Index rows, Scalar* sums) {
  namespace ei = Eigen::internal;
  using Packet = RowPacket<Scalar>;
  constexpr Index size = row_packet_size<Scalar>;
  Index r = 0;
#ifdef EIGEN_VECTORIZE_AVX512DQ
  if constexpr (std::is_same<Scalar, float>::value && size == 16) {  // DQ: Eigen's predux<Packet16f> in this order
    for (; r + 16 <= rows; r += 16) {
      const float* p = partial + r * 16;
      __m512 half[8], quarter[4], eighth[2];
      for (int k = 0; k < 8; ++k) {  // rows 2k, 2k + 1: lanes j + (j + 8), j < 8, in 256-bit halves
        const __m512 a = _mm512_loadu_ps(p + 32 * k), b = _mm512_loadu_ps(p + 32 * k + 16);
        half[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
      }
      for (int k = 0; k < 4; ++k)  // rows 4k .. 4k + 3, one per 128-bit lane: j + (j + 4), j < 4
        quarter[k] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
      for (int k = 0; k < 2; ++k)  // lane c: rows 8k + c and 8k + c + 4, two entries each: j + (j + 2), j < 2
        eighth[k] = _mm512_add_ps(_mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
      // element 4c + q: row c + 4q (0 + 1); the permutation puts row i at element i
      const __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(eighth[0], eighth[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(eighth[0], eighth[1], _MM_SHUFFLE(3, 1, 3, 1)));
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      _mm512_storeu_ps(sums + r, _mm512_permutexvar_ps(order, sum));
    }
  }
#endif
  for (; r < rows; ++r) sums[r] = ei::predux(ei::ploadu<Packet>(partial + r * size));
}

// Steps 1-3 for the key block [k0, k0 + bc) of a work item: its scores in ws.S (br, bc), each row's visible keys and
// keep row in ws.first, ws.last and ws.keep. Row by row: the visible range [lo, hi) and the keep row's holes (set to
// -inf), the block's maximum and the exponent of the row's factor a; then every row's a as packets; then each row's
// exponentials and their sum, the entries outside [lo, hi) set to 0; then l and O rescaled. When every row sees the
// whole block (every block without a mask) and the block is whole packets wide, the rows' partial sums are reduced
// 16 at a time (predux_rows: the bits exp_shifted gives each row). A row that sees no key of the block gets a zero
// row and a = 1: nothing added.
template <class Scalar>
void online_softmax_step(FlashWorkspace<Scalar>& ws, Index br, Index bc, Index k0) {
  namespace ei = Eigen::internal;
  using Packet = RowPacket<Scalar>;
  constexpr Index size = row_packet_size<Scalar>;
  constexpr bool via_exp2 = exp_via_exp2<Scalar>;
  constexpr Scalar inf = std::numeric_limits<Scalar>::infinity();
  auto S = ws.S.topLeftCorner(br, bc);  // (br, bc)
  Scalar* t = ws.rescale.data();        // (br): the exponent of each row's a, then a
  const auto visible = [&](Index i) {   // row i's visible columns [lo, hi)
    const auto r = static_cast<std::size_t>(i);
    return std::make_pair(std::clamp(ws.first[r] - k0, Index(0), bc), std::clamp(ws.last[r] - k0, Index(0), bc));
  };
  bool all_whole = true;  // every row sees every key of the block
  for (Index i = 0; i < br; ++i) {
    const auto [lo, hi] = visible(i);
    const bool* keep = ws.keep[static_cast<std::size_t>(i)];
    all_whole = all_whole && lo == 0 && hi == bc && keep == nullptr;
    auto row = S.row(i).array();  // (bc)
    t[i] = Scalar(0);             // a = 1 unless the maximum grows
    ws.shift(i) = inf;            // until the row is seen to add something: its entries 0, and exp(0 - inf) = 0
    bool kept = lo < hi;
    if (kept && keep != nullptr) {
      kept = false;
      for (Index j = lo; j < hi; ++j) {
        if (keep[k0 + j]) {
          kept = true;
        } else {
          row(j) = -inf;  // exp(-inf - m) = 0 for any finite maximum m
        }
      }
    }
    if (!kept) {  // no key, or only holes here: nothing to add (a row's first kept key may come in a later block)
      row.setZero();
      continue;
    }
    const Scalar block_max = row_max(&S.coeffRef(i, lo), hi - lo);
    if (block_max == -inf) {  // every visible score -inf (an overflow) or NaN: a -inf weighs 0 beside any finite
      // score, so the block adds nothing (and -inf - -inf is no max); a NaN makes the row's sum NaN, and so its
      // output, as on the direct path
      if (row.segment(lo, hi - lo).isNaN().any()) ws.l(i) = std::numeric_limits<Scalar>::quiet_NaN();
      row.setZero();
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
  for (Index i = br; i < padded_to_packets<Scalar>(br); ++i) t[i] = Scalar(0);  // the last packet's lanes past br
  for (Index i = 0; i < br; i += size)
    ei::pstoreu(t + i, flushed_exp_packet_by<via_exp2>(ei::ploadu<Packet>(t + i)));
  Scalar* sum = ws.block_sum.data();  // (br)
  if (all_whole && bc % size == 0) {  // each row's sum as exp_shifted makes it, the rows' preduxes together
    for (Index i = 0; i < br; ++i) {
      const Packet shift = ei::pset1<Packet>(ws.shift(i));
      ei::pstoreu(&ws.partial.coeffRef(i, 0), exp_shifted_packets<via_exp2>(&S.coeffRef(i, 0), bc, shift));
    }
    predux_rows(ws.partial.data(), br, sum);
  } else {
    for (Index i = 0; i < br; ++i) {
      const auto [lo, hi] = visible(i);
      sum[i] = exp_shifted<Scalar, via_exp2>(&S.coeffRef(i, 0) + lo, hi - lo, ws.shift(i));  // lo <= hi
      auto row = S.row(i).array();
      if (lo > 0) row.head(lo).setZero();  // (Eigen may call memset even for no element: 2 calls a row add up)
      if (hi < bc) row.tail(bc - hi).setZero();
    }
  }
  for (Index i = 0; i < br; ++i) {
    ws.l(i) = t[i] * ws.l(i) + sum[i];
    if (t[i] != Scalar(1)) ws.O.row(i) *= t[i];
  }
}

// One work item: rows q0 .. q0 + br - 1 of head h of batch row b, its keys and values in `keys`. Every other argument
// as flash_attention_heads.
template <class Scalar>
void flash_attention_block(const Eigen::Ref<const Matrix<Scalar>>& Q, const HeadKeys<Scalar>& keys, Index num_queries,
                           Index num_keys, Index b, Index h, Index q0, Index br, const Mask& mask,
                           Eigen::Ref<Matrix<Scalar>> output, FlashBlocks blocks, FlashWorkspace<Scalar>& ws) {
  const Index d = ws.Qs.cols(), dv = ws.O.cols();
  const auto& V = keys.V;  // (num_keys, dv)
  auto out = output.block(b * num_queries + q0, h * dv, br, dv);  // (br, dv)

  // Each row's visible range [first, last): the visible prefix, narrowed to the first and last kept key when there
  // is a keep row. The block's key loop covers the union of the rows' ranges.
  Index block_first = num_keys, block_last = 0;
  bool any_fully_masked = false;
  for (Index i = 0; i < br; ++i) {
    const auto r = static_cast<std::size_t>(i);
    const Index prefix = mask.visible_prefix(b, q0 + i, num_queries, num_keys);
    const bool* keep = mask.keep_row(b, q0 + i);
    Index first = 0, last = prefix;
    if (keep != nullptr) {
      while (first < last && !keep[first]) ++first;
      while (last > first && !keep[last - 1]) --last;
    }
    ws.first[r] = first;
    ws.last[r] = last;
    ws.keep[r] = keep;
    if (first < last) {
      block_first = std::min(block_first, first);
      block_last = std::max(block_last, last);
    } else {
      any_fully_masked = true;
    }
  }

  auto Qs = ws.Qs.topRows(br);  // (br, d)
  auto O = ws.O.topRows(br);    // (br, dv)
  if (block_first < block_last) {
    const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
    Qs.noalias() = scale * Q.block(b * num_queries + q0, h * d, br, d);
    O.setZero();
    ws.l.head(br).setZero();
  }
  // Key blocks are the K^T copy's panels: the first one is the panel that holds the block's first visible key.
  for (Index k0 = block_first / blocks.key_rows * blocks.key_rows; k0 < block_last; k0 += blocks.key_rows) {
    const Index bc = std::min(blocks.key_rows, block_last - k0);
    auto S = ws.S.topLeftCorner(br, bc);                                      // (br, bc)
    const Scalar* panel = keys.KT + k0 / blocks.key_rows * keys.panel_size;  // (d, panel_width); d = 0: null + 0
    rows_times_matrix<false, Scalar>(Qs.data(), Qs.outerStride(), br, d, panel, keys.panel_width, bc, true, nullptr,
                                     S.data(), S.outerStride());
    online_softmax_step(ws, br, bc, k0);
    const auto Vb = V.middleRows(k0, bc);  // (bc, dv)
    if (mask.empty() || all_finite(Vb)) {  // with no mask every key is visible: a product over all of them is right
      rows_times_matrix<true, Scalar>(S.data(), S.outerStride(), br, bc, Vb.data(), Vb.outerStride(), dv, true,
                                      nullptr, O.data(), O.outerStride());
    } else {  // 0 * NaN is NaN: each row adds its visible keys only, so a masked key's value row is never read
      for (Index i = 0; i < br; ++i) {
        const auto r = static_cast<std::size_t>(i);
        const Index lo = std::clamp(ws.first[r] - k0, Index(0), bc), hi = std::clamp(ws.last[r] - k0, Index(0), bc);
        for (Index j = lo; j < hi; ++j)
          if (ws.keep[r] == nullptr || ws.keep[r][k0 + j]) O.row(i) += S(i, j) * Vb.row(j);
      }
    }
  }

  // The head's mean value row, only when some row needs FullyMasked::uniform.
  const bool uniform = mask.fully_masked() == FullyMasked::uniform && num_keys > 0;
  if (any_fully_masked && uniform)
    ws.mean.transpose() = V.colwise().sum() / static_cast<Scalar>(num_keys);
  for (Index i = 0; i < br; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (ws.first[r] < ws.last[r]) {
      out.row(i) = O.row(i) / ws.l(i);
    } else if (uniform) {
      out.row(i) = ws.mean.transpose();
    } else {
      out.row(i).setZero();
    }
  }
}

// Scaled dot-product attention for every batch row and head, tiled; see the top of this file.
//   Q: (batch * num_queries, num_heads * d)   K: (batch * num_keys, num_heads * d)
//   V: (batch * num_keys, num_heads * dv)     output: (batch * num_queries, num_heads * dv), every element written
// The mask is indexed by batch row, its shape checked by the caller (Mask::require_shape); buffers: one workspace per
// thread and the head-major copies, resized here (kept by the caller across calls, they make a call allocation-free);
// blocks: tile sizes, both at least 1.
template <class Scalar>
void flash_attention_heads(const Eigen::Ref<const Matrix<Scalar>>& Q, const Eigen::Ref<const Matrix<Scalar>>& K,
                           const Eigen::Ref<const Matrix<Scalar>>& V, Index batch, Index num_queries, Index num_keys,
                           Index num_heads, const Mask& mask, Eigen::Ref<Matrix<Scalar>> output,
                           FlashBuffers<Scalar>& buffers, FlashBlocks blocks = flash_blocks<Scalar>()) {
  eigen_assert(blocks.query_rows >= 1 && blocks.key_rows >= 1 && num_heads >= 1);
  eigen_assert(Q.rows() == batch * num_queries && K.rows() == batch * num_keys && V.rows() == K.rows());
  eigen_assert(Q.cols() % num_heads == 0 && Q.cols() == K.cols() && V.cols() % num_heads == 0);
  eigen_assert(output.rows() == Q.rows() && output.cols() == V.cols());
  const Index d = Q.cols() / num_heads, dv = V.cols() / num_heads;
  // No tile larger than the problem: a short sequence gets a small workspace.
  blocks = {std::min(blocks.query_rows, std::max(num_queries, Index(1))),
            std::min(blocks.key_rows, std::max(num_keys, Index(1)))};
  const Index query_blocks = (num_queries + blocks.query_rows - 1) / blocks.query_rows;
  const Index pairs = batch * num_heads;         // pair = b * num_heads + h
  const Index items = pairs * query_blocks;      // item = pair * query_blocks + block
  if (items == 0) return;
  if (num_keys == 0) {  // a sum over no keys; and no view of the empty K and V may be taken (null data)
    output.setZero();
    return;
  }
  // Head-major copies (see FlashBuffers): K^T always; V's when a head's value rows, spread over more than 1 MiB, are
  // read again by the pair's later query blocks, or whenever the row kernel could not read them in whole packets in
  // place.
  const double value_span = static_cast<double>(num_keys) * static_cast<double>(V.outerStride()) * sizeof(Scalar);
  const bool copy_values = (num_heads > 1 && query_blocks > 1 && value_span > double(1 << 20)) ||
                           dv % row_packet_size<Scalar> != 0;
  // Sized before the parallel region, so that running out of memory throws instead of ending the program there.
  const Index panels = (num_keys + blocks.key_rows - 1) / blocks.key_rows;
  const Index panel_width = padded_to_packets<Scalar>(blocks.key_rows), panel_size = d * panel_width;
  buffers.KT.resize(pairs * panels * d, panel_width);  // panel t of pair p: panel_size elements from (p panels + t)
  const Index padded_dv = padded_to_packets<Scalar>(dv);
  if (copy_values) {
    buffers.V.resize(pairs * num_keys, padded_dv);
    buffers.V.rightCols(padded_dv - dv).setZero();  // the copies below write columns [0, dv)
  }
  buffers.threads.resize(static_cast<std::size_t>(num_threads()));
  for (FlashWorkspace<Scalar>& ws : buffers.threads) ws.resize(blocks, d, dv);

  const double tile = static_cast<double>(blocks.query_rows) * static_cast<double>(blocks.key_rows);
  const double all_pairs = static_cast<double>(pairs) * static_cast<double>(num_queries) *
                           static_cast<double>(num_keys);
  const double largest_product = tile * static_cast<double>(std::max(d, dv));
  const double total_work = all_pairs * static_cast<double>(d + dv);
  parallel_for(pairs, largest_product, total_work, [&](Index pair, int) {
    const Index b = pair / num_heads, h = pair % num_heads;
    for (Index t = 0; d > 0 && t < panels; ++t) {
      const Index k0 = t * blocks.key_rows, width = std::min(blocks.key_rows, num_keys - k0);
      Scalar* panel = buffers.KT.data() + (pair * panels + t) * panel_size;  // (d, panel_width)
      const Scalar* keys = K.data() + (b * num_keys + k0) * K.outerStride() + h * d;  // (width, d)
      transpose_into(keys, K.outerStride(), width, d, panel, panel_width);
      for (Index c = 0; c < d; ++c)  // the padding of a last, narrower panel
        std::fill(panel + c * panel_width + width, panel + (c + 1) * panel_width, Scalar(0));
    }
    if (copy_values)
      buffers.V.block(pair * num_keys, 0, num_keys, dv) = V.block(b * num_keys, h * dv, num_keys, dv);
  });
  parallel_for(items, largest_product, total_work, [&](Index item, int thread) {
    const Index qb = item % query_blocks, pair = item / query_blocks;
    const Index b = pair / num_heads, h = pair % num_heads;
    const Index q0 = qb * blocks.query_rows;
    using View = typename HeadKeys<Scalar>::View;
    // The pair's K^T and first value: in the copies, or in V (data() arithmetic: with d or dv 0, data() is null and
    // the offset 0).
    const Scalar* values_at = copy_values ? buffers.V.data() + pair * num_keys * buffers.V.outerStride()
                                          : V.data() + b * num_keys * V.outerStride() + h * dv;
    const Index value_stride = copy_values ? buffers.V.outerStride() : V.outerStride();
    const HeadKeys<Scalar> keys{buffers.KT.data() + pair * panels * panel_size, panel_width, panel_size,
                                View(values_at, num_keys, dv, Eigen::OuterStride<>(value_stride))};
    const Index br = std::min(blocks.query_rows, num_queries - q0);
    flash_attention_block<Scalar>(Q, keys, num_queries, num_keys, b, h, q0, br, mask, output, blocks,
                                  buffers.threads[static_cast<std::size_t>(thread)]);
  });
}

// The same with buffers of its own, allocated for this call.
template <class Scalar>
void flash_attention_heads(const Eigen::Ref<const Matrix<Scalar>>& Q, const Eigen::Ref<const Matrix<Scalar>>& K,
                           const Eigen::Ref<const Matrix<Scalar>>& V, Index batch, Index num_queries, Index num_keys,
                           Index num_heads, const Mask& mask, Eigen::Ref<Matrix<Scalar>> output,
                           FlashBlocks blocks = flash_blocks<Scalar>()) {
  FlashBuffers<Scalar> buffers;
  flash_attention_heads<Scalar>(Q, K, V, batch, num_queries, num_keys, num_heads, mask, output, buffers, blocks);
}

}  // namespace detail
}  // namespace attend
