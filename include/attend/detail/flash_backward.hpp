// attend/detail/flash_backward.hpp — the backward pass of the tiled path (flash_attention.hpp) without the
// (queries, keys) matrix: FlashAttention-2's backward (Dao 2023, algorithm 2), the weights recomputed block by block
// from the log-sum-exp each row kept, deterministic.
//
// For query head h of batch row b (pair = b * heads + h), reading key/value head g, with Qs = Q / sqrt(d), F the
// dropout's factors (detail/attention_dropout.hpp), O the forward pass's output and dO its gradient:
//   D_i = dO_i . O_i                                                    (queries)
//   for a key block [k0, k0 + bc) and a query block [q0, q0 + br):
//     P = exp(Qs K_blk^T - lse)  on the keys each row sees, 0 elsewhere       (br, bc)
//     dV_blk += (P * F)^T dO_blk                                              (bc, dv)
//     dP = (dO_blk V_blk^T) * F;   dS = P * (dP - D), 0 for a masked key      (br, bc)
//     dK_blk += dS^T Qs;   dQ_blk += dS K_blk / sqrt(d)                       (bc, d), (br, d)
// A row that sees no key has dS = 0; under FullyMasked::uniform its weights are 1 / keys, which dV receives.
// (dS = P * (dP - D) is softmax_backward_row's rule: sum_k P_k dP_k = dO . (sum_k P_k F_k V_k) = dO . O.)
//
// Work items: a key/value head's key blocks are dealt, block t to group t mod G, into G groups (G from the shape:
// tuning::backward_items), one item per (key/value head, group). An item owns the dK and dV rows of its key
// blocks, adding its query heads' contributions in order, and adds into its group's own partial dQ; the partials are
// summed in group order at the end. So every bit is fixed by the shape, whatever the number of threads, with no
// atomics. Extra memory: G - 1 partial dQ (group 0 adds into dQ), Q / sqrt(d), D, and each thread's tiles: O(n), not
// O(n^2).
// A key block enters an item's loop only for the query blocks that see one of its keys.
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/mask_row.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cmath>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// One thread's tiles, for tiles of br by bc and heads of d and dv.
template <class Scalar>
struct FlashBackwardScratch {
  void resize(Index br, Index bc, Index d, Index dv) {
    KT.resize(d * padded_to_packets<Scalar>(bc));
    VT.resize(dv * padded_to_packets<Scalar>(bc));
    K.resize(bc * padded_to_packets<Scalar>(d));
    P.resize(br, bc);
    dropped.resize(br, bc);
    dP.resize(br, bc);
    dK.resize(bc, d);
    dV.resize(bc, dv);
    keys.resize(static_cast<std::size_t>(br));
  }
  // The key block's K^T (d, bc), V^T (dv, bc) and K (bc, d), each packed once for the products of every query block
  // (Kernels::pack_panel)
  PacketBuffer<Scalar> KT, VT, K;
  PacketMatrix<Scalar> P;         // (br, bc): the weights
  PacketMatrix<Scalar> dropped;   // (br, bc): P * F
  PacketMatrix<Scalar> dP;        // (br, bc): dP, then dS
  PacketMatrix<Scalar> dK, dV;    // (bc, d), (bc, dv): the key block's gradients
  std::vector<VisibleKeys> keys;  // (br): the keys each row of the query block sees
};

// What flash_attention_heads_backward works in besides its arguments; kept by the caller across calls, it makes a
// repeated call of one shape allocation-free. Its contents between calls mean nothing.
template <class Scalar>
struct FlashBackwardBuffers {
  std::vector<FlashBackwardScratch<Scalar>> threads;  // one per thread
  Vector<Scalar> D;                                   // (pairs * queries): dO_i . O_i
  PacketMatrix<Scalar> Qs;                            // (pairs * queries, d): Q / sqrt(d), pair by pair
};

// The gradients of flash_attention_heads' inputs, written into dQ, dK, dV (views of the shapes of Q, K, V):
//   Q, K, V, mask, dropout: the forward call's; O: its output; lse: (batch * Q.count * num_queries), its rows'
//   log-sum-exp (flash_attention_heads' lse); dO: the gradient of O; buffers: resized here.
template <class Scalar>
void flash_attention_heads_backward(const Heads<const Scalar>& Q, const Heads<const Scalar>& K,
                                    const Heads<const Scalar>& V, const Mask& mask, const AttentionDropout& dropout,
                                    const Heads<const Scalar>& O, const Vector<Scalar>& lse,
                                    const Heads<const Scalar>& dO, const Heads<Scalar>& dQ, const Heads<Scalar>& dK,
                                    const Heads<Scalar>& dV, FlashBackwardBuffers<Scalar>& buffers) {
  const Index batch = Q.batch, num_queries = Q.length, num_keys = K.length, num_heads = Q.count;
  const Index kv_heads = K.count, group = num_heads / kv_heads, d = Q.dim, dv = V.dim;
  const Index pairs = batch * num_heads, kv_pairs = batch * kv_heads;
  eigen_assert(lse.size() == pairs * num_queries);
  const auto zero = [](const Heads<Scalar>& heads) {
    if (heads.length == 0) return;
    for (Index b = 0; b < heads.batch; ++b)
      for (Index h = 0; h < heads.count; ++h) heads.head(b, h).setZero();
  };
  if (num_queries == 0 || num_keys == 0 || pairs == 0) {  // sums over no queries or no keys
    zero(dQ);
    zero(dK);
    zero(dV);
    return;
  }
  const Index br = std::min(tuning::flash_backward_query_rows<Scalar>, num_queries);
  const Index bc = std::min(tuning::flash_backward_key_rows<Scalar>, num_keys);
  const Index query_blocks = (num_queries + br - 1) / br, key_blocks = (num_keys + bc - 1) / bc;
  const Index groups =
      std::min(key_blocks, std::max(Index(1), (tuning::backward_items + kv_pairs - 1) / kv_pairs));
  const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
  const bool uniform = mask.fully_masked() == FullyMasked::uniform;

  // D_i = dO_i . O_i and Qs = Q / sqrt(d), pair by pair: each read by every key block.
  Vector<Scalar>& D = buffers.D;  // (pairs * queries)
  D.resize(pairs * num_queries);
  buffers.Qs.resize(pairs * num_queries, d);
  for (Index pair = 0; pair < pairs; ++pair) {
    const Index b = pair / num_heads, h = pair % num_heads;
    D.segment(pair * num_queries, num_queries) = (dO.head(b, h).array() * O.head(b, h).array()).rowwise().sum();
    buffers.Qs.view().middleRows(pair * num_queries, num_queries).noalias() = scale * Q.head(b, h);
  }
  // Partial dQ of group s for pair p: rows (s * pairs + p) * num_queries .., not yet scaled.
  // Group 0 adds into dQ itself, group s > 0 into rows ((s - 1) * pairs + pair) * num_queries .. of partial_dQ; both
  // unscaled until the end. Allocated per call: kept, its G - 1 times Q's size would stay beside the next call's
  // gradients.
  for (Index pair = 0; pair < pairs; ++pair) dQ.head(pair / num_heads, pair % num_heads).setZero();
  Matrix<Scalar> partial_dQ = Matrix<Scalar>::Zero((groups - 1) * pairs * num_queries, d);
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  std::vector<FlashBackwardScratch<Scalar>>& scratch = buffers.threads;
  scratch.resize(static_cast<std::size_t>(num_threads()));
  for (FlashBackwardScratch<Scalar>& s : scratch) s.resize(br, bc, d, dv);
  const double total = static_cast<double>(pairs) * static_cast<double>(num_queries) * static_cast<double>(num_keys) *
                       static_cast<double>(3 * d + 2 * dv);
  parallel_for(kv_pairs * groups, total, [&](Index item, int thread) {
    FlashBackwardScratch<Scalar>& s = scratch[static_cast<std::size_t>(thread)];
    const Index kv_pair = item / groups, split = item % groups;
    const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
    for (Index t = split; t < key_blocks; t += groups) {
      const Index k0 = t * bc, kc = std::min(bc, num_keys - k0);  // keys [k0, k0 + kc)
      kernel.pack_panel(K.at(b, g, k0), 1, K.row_stride, d, kc, s.KT.data());
      kernel.pack_panel(V.at(b, g, k0), 1, V.row_stride, dv, kc, s.VT.data());
      kernel.pack_panel(K.at(b, g, k0), K.row_stride, 1, kc, d, s.K.data());
      auto dKb = s.dK.topRows(kc);  // (kc, d)
      auto dVb = s.dV.topRows(kc);  // (kc, dv)
      dKb.setZero();
      dVb.setZero();
      for (Index h = g * group; h < (g + 1) * group; ++h) {
        const Index pair = b * num_heads + h;
        for (Index qb = 0; qb < query_blocks; ++qb) {
          const Index q0 = qb * br, rows = std::min(br, num_queries - q0);
          bool any = false;  // a row that sees a key of this block, or one whose uniform weights reach it
          for (Index i = 0; i < rows; ++i) {
            const VisibleKeys keys = mask.visible_keys(b, q0 + i, num_queries, num_keys);
            s.keys[static_cast<std::size_t>(i)] = keys;
            any = any || (keys.none() ? uniform : keys.overlaps(k0, kc));
          }
          if (!any) continue;
          const auto Qs = buffers.Qs.view().middleRows(pair * num_queries + q0, rows);  // (rows, d)
          const auto dOb = dO.head(b, h).middleRows(q0, rows);                         // (rows, dv)
          auto P = s.P.topLeftCorner(rows, kc);
          kernel.packed_times_matrix(false, false, Qs.data(), Qs.outerStride(), rows, 0, d, kc, s.KT.data(), d, kc,
                                     nullptr, P.data(), P.outerStride());
          for (Index i = 0; i < rows; ++i) {
            const VisibleKeys& keys = s.keys[static_cast<std::size_t>(i)];
            Scalar* row = P.data() + i * P.outerStride();  // (kc)
            if (keys.none()) {
              std::fill(row, row + kc, uniform ? Scalar(1) / static_cast<Scalar>(num_keys) : Scalar(0));
              continue;
            }
            const auto [lo, hi] = keys.within(k0, kc);
            kernel.exp_shifted(row + lo, hi - lo, lse(pair * num_queries + q0 + i));
            std::fill(row, row + lo, Scalar(0));
            std::fill(row + hi, row + kc, Scalar(0));
            if (!keys.is_range())
              for (Index j = lo; j < hi; ++j)
                if (!keys.sees(k0 + j)) row[j] = Scalar(0);
          }
          // dV_blk += (P * F)^T dO_blk, (P * F)^T read in place
          const Scalar* Pd = P.data();  // (rows, kc): P * F, rows P.outerStride() apart
          if (dropout.active()) {
            auto dropped = s.dropped.topLeftCorner(rows, kc);  // as P, rows as far apart
            dropped = P;
            for (Index i = 0; i < rows; ++i)
              dropout.apply(dropped.data() + i * dropped.outerStride(), kc, pair, q0 + i, k0);
            Pd = dropped.data();
          }
          kernel.transposed_times_matrix(true, Pd, P.outerStride(), kc, rows, dOb.data(), dOb.outerStride(), dv,
                                         nullptr, dVb.data(), dVb.outerStride());
          // dP = (dO_blk V_blk^T) * F, then dS = P * (dP - D) on the visible keys
          auto dP = s.dP.topLeftCorner(rows, kc);
          kernel.packed_times_matrix(false, false, dOb.data(), dOb.outerStride(), rows, 0, dv, kc, s.VT.data(), dv, kc,
                                     nullptr, dP.data(), dP.outerStride());
          for (Index i = 0; i < rows; ++i) {
            const VisibleKeys& keys = s.keys[static_cast<std::size_t>(i)];
            Scalar* row = dP.data() + i * dP.outerStride();    // (kc)
            const Scalar* p = P.data() + i * P.outerStride();  // (kc)
            if (keys.none()) {
              std::fill(row, row + kc, Scalar(0));
              continue;
            }
            dropout.apply(row, kc, pair, q0 + i, k0);
            const Scalar Di = D(pair * num_queries + q0 + i);
            kernel.softmax_gradient_row(p, row, kc, Di);
          }
          // dK_blk += dS^T Qs;  dQ_blk += dS K_blk (scaled at the end)
          kernel.transposed_times_matrix(true, dP.data(), dP.outerStride(), kc, rows, Qs.data(), Qs.outerStride(), d,
                                         nullptr, dKb.data(), dKb.outerStride());
          Scalar* dQ_rows = split == 0 ? dQ.at(b, h, q0)
                                       : partial_dQ.data() + (((split - 1) * pairs + pair) * num_queries + q0) * d;
          kernel.packed_times_matrix(true, false, dP.data(), dP.outerStride(), rows, 0, kc, d, s.K.data(), kc, d,
                                     nullptr, dQ_rows, split == 0 ? dQ.row_stride : d);  // (rows, d)
        }
      }
      dK.head(b, g).middleRows(k0, kc) = dKb;
      dV.head(b, g).middleRows(k0, kc) = dVb;
    }
  });
  // dQ = (group 0's + group 1's + ...) / sqrt(d), in group order.
  parallel_for(pairs, static_cast<double>(groups * pairs * num_queries * d), [&](Index pair, int) {
    auto dQh = dQ.head(pair / num_heads, pair % num_heads);  // (queries, d)
    for (Index split = 1; split < groups; ++split)
      dQh += partial_dQ.middleRows(((split - 1) * pairs + pair) * num_queries, num_queries);
    dQh *= scale;
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
