// attend/detail/flash_attention.hpp — scaled dot-product attention without the (queries, keys) matrix: tiled, with an
// online softmax (the FlashAttention forward pass: Dao et al. 2022, algorithm 1; Dao 2023, the rescaling kept per
// row and the division done once at the end). Evaluation mode only: no dropout, no attention weights.
//
// flash_attention_heads() has the shape contract of scaled_dot_product_heads() (attend_rows.hpp):
//   Q: (batch * num_queries, num_heads * d)   K: (batch * num_keys, num_heads * d)
//   V: (batch * num_keys, num_heads * dv)     output: (batch * num_queries, num_heads * dv)
// head h of batch row b is read and written through strided column blocks (columns h*d .. h*d + d - 1, rows
// b*steps ..); the mask of batch row b applies to all its heads. K is first copied head by head, transposed, a panel
// per key block, and V head by head when its rows are far apart (FlashBuffers, detail/flash_workspace.hpp).
//
// One work item is (batch row b, head h, a block of Br query rows); for it (detail/kernels/flash-inl.hpp):
//   Qs = Q_blk / sqrt(d)                                      (br, d)    the scale, folded in once
//   O = 0, l = 0, m = (none)                                  (br, dv), (br), (br)
//   for every key block [k0, k0 + bc) between the block's first and last visible key:
//     S = Qs K_blk^T                                          (br, bc)   the row kernel, on K^T
//     for each row i that sees a key of this block (its visible keys in it: a range, less the keep tensor's holes):
//       1. m' = max(m_i, max_{j visible} S_ij)
//       2. P_ij = exp(S_ij - m') for a visible j (flushed to 0 under exp_underflow), 0 for a masked j
//       3. a = exp(m_i - m'),  l_i = a l_i + sum_j P_ij,  O_i = a O_i,  m_i = m'
//     O += P V_blk                                            (br, dv)   the row kernel
//   output row i = O_i / l_i, or, for a row that sees no key, the mask's FullyMasked rule.
// Extra memory: the per-thread workspace, O(Br (d + dv + Bc)), whatever the sequence length, and the head-major
// copies of K (transposed) and, when made, of V: the size of K and V. The direct path holds
// (batch * num_heads, num_queries, num_keys) weights.
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
// Tile sizes: detail/tuning.hpp (an S tile of 128 KiB; with the K^T and V blocks and Qs and O inside L2). Threads:
// with OpenMP the work items are shared among the threads, each item — and so each output row — computed by exactly
// one thread in a fixed order, so the result does not depend on the number of threads.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/flash_workspace.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

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
  const bool copy_values = (num_heads > 1 && query_blocks > 1 && value_span > tuning::flash_value_copy_span) ||
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
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel regions: it may throw
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
      kernel.transpose_into(keys, K.outerStride(), width, d, panel, panel_width);
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
    kernel.flash_attention_block(Q, keys, num_queries, num_keys, b, h, q0, br, mask, output, blocks,
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
}  // namespace ATTEND_ABI
}  // namespace attend
