// attend/detail/flash_attention.hpp — scaled dot-product attention without the (queries, keys) matrix: tiled, with an
// online softmax (the FlashAttention forward pass: Dao et al. 2022, algorithm 1; Dao 2023, the rescaling kept per
// row and the division done once at the end). No attention weights; dropout as the direct path's
// (detail/attention_dropout.hpp), and each row's log-sum-exp kept for the backward pass when asked for.
//
// flash_attention_heads() has the contract of scaled_dot_product_heads() (attend_rows.hpp): Q, K, V and the output
// are views of heads side by side in the columns of row-major matrices (detail/heads.hpp), read and written in place;
// query head h reads key/value head h / (query heads / key/value heads); the mask of batch row b applies to all its
// heads. K^T and V are first copied per (batch row, key/value head) and key block, packed for the row kernel
// (FlashBuffers, detail/flash_workspace.hpp).
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
// Extra memory: the per-thread workspace, O(Br (d + dv + Bc)), whatever the sequence length, and the packed copies
// of K^T and V: the size of K and V, each key block padded to whole packets. The direct path holds
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
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/flash_workspace.hpp>
#include <attend/detail/heads.hpp>
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

// Scaled dot-product attention for every batch row and query head, tiled; see the top of this file.
//   Q: (batch, num_queries) steps of Q.count heads of d    K: (batch, num_keys) steps of K.count heads of d
//   V: (batch, num_keys) steps of K.count heads of dv       output: as Q, with heads of dv; every element written
// The mask is indexed by batch row, its shape checked by the caller (Mask::require_shape); buffers: one workspace per
// thread and the head-major copies, resized here (kept by the caller across calls, they make a call allocation-free);
// blocks: tile sizes, both at least 1. dropout: pair b * Q.count + h's. lse: null, or resized to
// (batch * Q.count * num_queries) and filled with each row's log-sum-exp of its scaled scores, pair by pair (a row
// that sees no key: 0).
template <class Scalar>
void flash_attention_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                           const Mask& mask, const Heads<Scalar>& output, FlashBuffers<Scalar>& buffers,
                           FlashBlocks blocks = flash_blocks<Scalar>(), const AttentionDropout& dropout = {},
                           Vector<Scalar>* lse = nullptr) {
  eigen_assert(blocks.query_rows >= 1 && blocks.key_rows >= 1);
  eigen_assert(K.count >= 1 && Q.count % K.count == 0 && V.count == K.count && output.count == Q.count);
  eigen_assert(Q.batch == K.batch && V.batch == K.batch && output.batch == Q.batch && V.length == K.length);
  eigen_assert(Q.dim == K.dim && output.dim == V.dim && output.length == Q.length);
  const Index batch = Q.batch, num_queries = Q.length, num_keys = K.length, num_heads = Q.count;
  const Index kv_heads = K.count, group = num_heads / kv_heads;  // query heads per key/value head
  const Index d = Q.dim, dv = V.dim;
  // No tile larger than the problem: a short sequence gets a small workspace.
  blocks = {std::min(blocks.query_rows, std::max(num_queries, Index(1))),
            std::min(blocks.key_rows, std::max(num_keys, Index(1)))};
  const Index query_blocks = (num_queries + blocks.query_rows - 1) / blocks.query_rows;
  const Index pairs = batch * num_heads;      // pair = b * num_heads + h: a query head
  const Index kv_pairs = batch * kv_heads;    // kv_pair = b * kv_heads + g: a key/value head, copied once
  const Index items = pairs * query_blocks;   // item = pair * query_blocks + block
  if (lse != nullptr) lse->setZero(pairs * num_queries);
  if (items == 0) return;
  if (num_keys == 0) {  // a sum over no keys; and no view of the empty K and V may be taken (null data)
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < num_heads; ++h) output.head(b, h).setZero();
    return;
  }
  // The packed copies of K^T and V (see FlashBuffers), sized before the parallel region, so that running out of
  // memory throws instead of ending the program there. V's only when more than one work item reads a value block
  // (a head with several query blocks, or several query heads): one item's product packs its blocks as it goes.
  const Index panels = (num_keys + blocks.key_rows - 1) / blocks.key_rows;
  const Index panel_size = d * padded_to_packets<Scalar>(blocks.key_rows);
  const bool pack_values = query_blocks * group > 1;
  const Index value_panel_size = pack_values ? blocks.key_rows * padded_to_packets<Scalar>(dv) : 0;
  buffers.KT.resize(kv_pairs * panels * panel_size);
  buffers.V.resize(kv_pairs * panels * value_panel_size);
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel regions: it may throw
  buffers.threads.resize(static_cast<std::size_t>(num_threads()));
  for (FlashWorkspace<Scalar>& ws : buffers.threads) ws.resize(blocks, d, dv);

  const double all_pairs = static_cast<double>(pairs) * static_cast<double>(num_queries) *
                           static_cast<double>(num_keys);
  const double total_work = all_pairs * static_cast<double>(d + dv);
  parallel_for(kv_pairs, total_work, [&](Index kv_pair, int) {
    const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
    for (Index t = 0; t < panels; ++t) {
      const Index k0 = t * blocks.key_rows, width = std::min(blocks.key_rows, num_keys - k0);
      const Index pair_panel = kv_pair * panels + t;
      // K^T (d, width): entry (c, key) at K[key * row_stride + c]; the values (width, dv) as stored
      kernel.pack_panel(K.at(b, g, k0), 1, K.row_stride, d, width, buffers.KT.data() + pair_panel * panel_size);
      if (pack_values)
        kernel.pack_panel(V.at(b, g, k0), V.row_stride, 1, width, dv,
                          buffers.V.data() + pair_panel * value_panel_size);
    }
  });
  parallel_for(items, total_work, [&](Index item, int thread) {
    const Index qb = item % query_blocks, pair = item / query_blocks;
    const Index b = pair / num_heads, h = pair % num_heads, kv_pair = b * kv_heads + h / group;
    const Index q0 = qb * blocks.query_rows;
    using View = typename HeadKeys<Scalar>::View;
    // With dv = 0, V's data may be null and the offset is 0.
    const HeadKeys<Scalar> keys{buffers.KT.data() + kv_pair * panels * panel_size, panel_size,
                                pack_values ? buffers.V.data() + kv_pair * panels * value_panel_size : nullptr,
                                value_panel_size,
                                View(V.at(b, h / group, 0), num_keys, dv, Eigen::OuterStride<>(V.row_stride))};
    const Index br = std::min(blocks.query_rows, num_queries - q0);
    kernel.flash_attention_block(Q, keys, b, h, q0, br, mask, output, blocks,
                                 buffers.threads[static_cast<std::size_t>(thread)], dropout,
                                 lse != nullptr ? lse->data() + pair * num_queries + q0 : nullptr);
  });
}

// The same with buffers of its own, allocated for this call.
template <class Scalar>
void flash_attention_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                           const Mask& mask, const Heads<Scalar>& output, FlashBlocks blocks = flash_blocks<Scalar>(),
                           const AttentionDropout& dropout = {}, Vector<Scalar>* lse = nullptr) {
  FlashBuffers<Scalar> buffers;
  flash_attention_heads<Scalar>(Q, K, V, mask, output, buffers, blocks, dropout, lse);
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
