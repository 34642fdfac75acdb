// attend/detail/attention_backward.hpp — the backward pass of scaled_dot_product_heads (attend_rows.hpp), the
// direct path: from the weights P its forward pass kept; and attention_heads_backward, which takes the path the
// forward call took (the tiled one's: the attention core's, detail/core/attention.hpp).
//
// For query head h of batch row b, reading key/value head g = h / group, with scale = 1 / sqrt(d), F the dropout's
// factors (0 or 1 / (1 - p); 1 without dropout; detail/attention_dropout.hpp) and dO the gradient of its output:
//   P~ = P * F                     the weights the values were multiplied by          (queries, keys)
//   dV_g += P~^T dO                                                                    (keys, dv)
//   dP = (dO V_g^T) * F                                                                (queries, keys)
//   dS = softmax_backward(P, dP)   row by row, 0 for a masked key (softmax_backward_row, kernels/softmax-inl.hpp)
//   dQ_h = scale dS K_g,   dK_g += scale dS^T Q_h                                      (queries, d), (keys, d)
// A key/value head's gradients add its query heads' in order h = g * group, g * group + 1, ...; how the work is shared
// among threads is below (scaled_dot_product_heads_backward), and the bits do not depend on it. Every product runs on
// the level's row kernel.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/mask_row.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cmath>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The direct path's backward buffers: a (queries, keys) tile and the right-hand operands of its products, each packed
// once (pack_panel) for every block that reads it; one per thread when each thread takes whole key/value heads, or
// one shared by the threads when the heads go one at a time.
template <class Scalar>
struct AttentionBackwardScratch {
  // Sized for heads of (num_queries, num_keys) weights, queries and keys of d, values of dv, and P~ when `dropped`.
  void resize(Index num_queries, Index num_keys, Index d, Index dv, bool dropped) {
    rows.resize(static_cast<std::size_t>(num_queries));
    A.resize(num_queries, num_keys);
    if (dropped) Pd.resize(num_queries, num_keys);
    VT.resize(dv * padded_to_packets<Scalar>(num_keys));
    K.resize(num_keys * padded_to_packets<Scalar>(d));
    Q.resize(num_queries * padded_to_packets<Scalar>(d));
    dO.resize(num_queries * padded_to_packets<Scalar>(dv));
  }
  PacketMatrix<Scalar> A;   // (queries, keys): dP, then scale dS
  PacketMatrix<Scalar> Pd;  // (queries, keys): P~, with dropout
  // Packed: V_g^T (dv, keys) and K_g (keys, d) of the key/value head; Q_h (queries, d) and dO_h (queries, dv) of the
  // query head
  PacketBuffer<Scalar> VT, K, Q, dO;
  std::vector<VisibleKeys> rows;  // (queries): the keys each query of the batch row sees
};

// The gradients of scaled_dot_product_heads' inputs, written into dQ, dK, dV (views of the shapes of Q, K, V):
//   Q, K, V, mask, dropout: the forward call's; weights: the (batch * Q.count, queries, keys) weights it kept
//   dO: the gradient of its output (as Q, with heads of dv); scratch: resized here (kept by the caller across calls,
//   it makes a repeated call allocation-free)
// With at least tuning::backward_items key/value heads, each thread takes whole ones, with buffers of its own.
// With fewer, they go one at a time, each in two passes shared among the threads: blocks of queries (dP, dS and dQ of
// tuning::direct_block_rows queries), then blocks of keys (dV and dK of as many keys). Either way each element is the
// same chain of multiply-adds in the same order (dV and dK over the queries of each query head in turn, dQ over the
// keys), so the bits do not depend on the way taken, nor on the number of threads.
template <class Scalar>
void scaled_dot_product_heads_backward(const Heads<const Scalar>& Q, const Heads<const Scalar>& K,
                                       const Heads<const Scalar>& V, const Mask& mask, const Tensor3<Scalar>& weights,
                                       const AttentionDropout& dropout, const Heads<const Scalar>& dO,
                                       const Heads<Scalar>& dQ, const Heads<Scalar>& dK, const Heads<Scalar>& dV,
                                       std::vector<AttentionBackwardScratch<Scalar>>& scratch) {
  const Index batch = Q.batch, num_queries = Q.length, num_keys = K.length, num_heads = Q.count;
  const Index kv_heads = K.count, group = num_heads / kv_heads, kv_pairs = batch * kv_heads;
  const Index d = Q.dim, dv = V.dim;
  eigen_assert(weights.dimension(0) == batch * num_heads && weights.dimension(1) == num_queries &&
               weights.dimension(2) == num_keys);
  const auto zero = [](const Heads<Scalar>& heads) {
    if (heads.length == 0) return;
    for (Index b = 0; b < heads.batch; ++b)
      for (Index h = 0; h < heads.count; ++h) heads.head(b, h).setZero();
  };
  if (num_queries == 0 || num_keys == 0) {  // sums over no queries or no keys
    zero(dQ);
    zero(dK);
    zero(dV);
    return;
  }
  const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel regions: it may throw
  const bool whole_heads = kv_pairs >= tuning::backward_items;
  scratch.resize(whole_heads ? static_cast<std::size_t>(num_threads()) : 1);
  for (AttentionBackwardScratch<Scalar>& s : scratch) s.resize(num_queries, num_keys, d, dv, dropout.active());
  const Index block = tuning::direct_block_rows;  // queries, or keys, a piece of work
  const double pair_work = static_cast<double>(num_queries) * static_cast<double>(num_keys) *
                           static_cast<double>(2 * d + 2 * dv);

  // Rows [q0, q0 + rows) of query head h (pair `pair`) of batch row b: dP = (dO V_g^T) * F, then scale dS row by row,
  // into A's rows; dQ = scale dS K_g. dP is formed only over the keys the rows see together (from the micro-panel of
  // V^T that holds the first of them on): dS is 0 elsewhere, as softmax_backward_row writes it.
  const auto query_rows = [&](AttentionBackwardScratch<Scalar>& s, Index b, Index h, Index pair, Index q0,
                              Index rows) {
    const auto dOh = dO.head(b, h).middleRows(q0, rows);                      // (rows, dv)
    auto dQh = dQ.head(b, h).middleRows(q0, rows);                            // (rows, d)
    const Scalar* P = weights.data() + (pair * num_queries + q0) * num_keys;  // (rows, keys)
    Scalar* A = s.A.data() + q0 * num_keys;                                   // (rows, keys)
    const auto seen = [&](Index i) { return s.rows[static_cast<std::size_t>(q0 + i)]; };
    const BlockKeys block = block_keys(rows, num_keys, mask.fully_masked(), seen);
    const Index first = kernel.micro_panel_start(block.first), last = block.last;
    kernel.packed_times_matrix(x_rows(dOh.data(), dOh.outerStride(), rows), dv,
                               b_packed(s.VT.data() + first * dv, dv, num_keys - first), last - first,
                               y_into(A + first, num_keys));
    for (Index i = 0; i < rows; ++i) {
      Scalar* row = A + i * num_keys;  // (keys)
      dropout.apply(row + first, last - first, pair, q0 + i, first);
      kernel.softmax_backward_row(P + i * num_keys, row, row, num_keys, s.rows[static_cast<std::size_t>(q0 + i)],
                                  scale);
    }
    kernel.packed_times_matrix(x_rows(A + first, num_keys, rows), last - first,
                               b_packed(s.K.data(), num_keys, d, first), d, y_into(dQh.data(), dQh.outerStride()));
  };
  // Keys [k0, k0 + keys) of key/value head g of batch row b, from query head h: dV_g += P~^T dO_h, dK_g += (scale dS)^T
  // Q_h, with P~ (queries, keys) read in place (the weights themselves without dropout) and scale dS in A; over the
  // queries whose weights reach these keys (every other row's terms are 0). dO_h and Q_h: packed in s.
  const auto key_rows = [&](const AttentionBackwardScratch<Scalar>& s, const Scalar* dropped, Index b, Index h,
                            Index k0, Index keys) {
    const bool uniform = mask.fully_masked() == FullyMasked::uniform;
    Index q0 = num_queries, q1 = 0;
    for (Index q = 0; q < num_queries; ++q) {
      const VisibleKeys& seen = s.rows[static_cast<std::size_t>(q)];
      if (seen.none() ? uniform : seen.overlaps(k0, keys)) {
        q0 = std::min(q0, q);
        q1 = q + 1;
      }
    }
    if (q0 >= q1) return;
    auto dVg = dV.head(b, h / group).middleRows(k0, keys);  // (keys, dv)
    auto dKg = dK.head(b, h / group).middleRows(k0, keys);  // (keys, d)
    kernel.packed_times_matrix(x_columns(dropped + q0 * num_keys + k0, num_keys, keys), q1 - q0,
                               b_packed(s.dO.data(), num_queries, dv, q0), dv, y_added(dVg.data(), dVg.outerStride()));
    kernel.packed_times_matrix(x_columns(s.A.data() + q0 * num_keys + k0, num_keys, keys), q1 - q0,
                               b_packed(s.Q.data(), num_queries, d, q0), d, y_added(dKg.data(), dKg.outerStride()));
  };
  // Key/value head g of batch row b begins: dK_g = dV_g = 0, V_g^T and K_g packed into s, the keys each query sees
  // into s.rows.
  const auto begin_head = [&](AttentionBackwardScratch<Scalar>& s, Index b, Index g) {
    const auto Kg = K.head(b, g), Vg = V.head(b, g);  // (keys, d), (keys, dv)
    dK.head(b, g).setZero();
    dV.head(b, g).setZero();
    kernel.pack_panel(b_columns(Vg.data(), Vg.outerStride()), dv, num_keys, s.VT.data());
    kernel.pack_panel(b_rows(Kg.data(), Kg.outerStride()), num_keys, d, s.K.data());
    for (Index q = 0; q < num_queries; ++q)
      s.rows[static_cast<std::size_t>(q)] = mask.visible_keys(b, q, num_queries, num_keys);
  };
  // Query head h of batch row b begins: Q_h and dO_h packed into s.
  const auto begin_query_head = [&](AttentionBackwardScratch<Scalar>& s, Index b, Index h) {
    const auto Qh = Q.head(b, h), dOh = dO.head(b, h);  // (queries, d), (queries, dv)
    kernel.pack_panel(b_rows(Qh.data(), Qh.outerStride()), num_queries, d, s.Q.data());
    kernel.pack_panel(b_rows(dOh.data(), dOh.outerStride()), num_queries, dv, s.dO.data());
  };
  // P~ of pair `pair`: the kept weights, or with dropout their copy into `into` with the dropped ones 0.
  const auto dropped_weights = [&](Index pair, PacketMatrix<Scalar>& into) -> const Scalar* {
    const Scalar* P = weights.data() + pair * num_queries * num_keys;  // (queries, keys)
    if (!dropout.active()) return P;
    into.view() = Eigen::Map<const Matrix<Scalar>>(P, num_queries, num_keys);
    for (Index i = 0; i < num_queries; ++i) dropout.apply(into.data() + i * num_keys, num_keys, pair, i, Index(0));
    return into.data();
  };

  if (whole_heads) {
    parallel_for(kv_pairs, pair_work * static_cast<double>(batch * num_heads), [&](Index kv_pair, int thread) {
      AttentionBackwardScratch<Scalar>& s = scratch[static_cast<std::size_t>(thread)];
      const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
      begin_head(s, b, g);
      for (Index h = g * group; h < (g + 1) * group; ++h) {
        const Index pair = b * num_heads + h;
        const Scalar* dropped = dropped_weights(pair, s.Pd);
        begin_query_head(s, b, h);
        for (Index q0 = 0; q0 < num_queries; q0 += block)
          query_rows(s, b, h, pair, q0, std::min(block, num_queries - q0));
        for (Index k0 = 0; k0 < num_keys; k0 += block) key_rows(s, dropped, b, h, k0, std::min(block, num_keys - k0));
      }
    });
    return;
  }
  AttentionBackwardScratch<Scalar>& s = scratch.front();
  const Index query_blocks = (num_queries + block - 1) / block, key_blocks = (num_keys + block - 1) / block;
  for (Index kv_pair = 0; kv_pair < kv_pairs; ++kv_pair) {
    const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
    begin_head(s, b, g);
    for (Index h = g * group; h < (g + 1) * group; ++h) {
      const Index pair = b * num_heads + h;
      const Scalar* dropped = dropped_weights(pair, s.Pd);
      begin_query_head(s, b, h);
      parallel_for(query_blocks, pair_work, [&](Index qb, int) {
        query_rows(s, b, h, pair, qb * block, std::min(block, num_queries - qb * block));
      });
      parallel_for(key_blocks, pair_work, [&](Index kb, int) {
        key_rows(s, dropped, b, h, kb * block, std::min(block, num_keys - kb * block));
      });
    }
  }
}

// The scratch of both paths' backward passes, kept by a module between calls: a repeated training step reuses its
// memory (blocks this large, freed and taken again, go back to the system and are faulted in again on every step).
// Its contents between calls mean nothing.
template <class Scalar>
struct HeadsBackwardBuffers {
  std::vector<AttentionBackwardScratch<Scalar>> direct;  // one per thread, or one (scaled_dot_product_heads_backward)
  core::Buffers<Scalar> tiled;                           // the attention core's
};

// The backward pass of either path: the direct one's when the forward call kept its weights (weights not null),
// otherwise the attention core's, from that call's output O and log-sum-exp lse (batch, Q, heads). Arguments as
// scaled_dot_product_heads_backward above.
template <class Scalar>
void attention_heads_backward(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                              const Mask& mask, const AttentionDropout& dropout, const Tensor3<Scalar>* weights,
                              const Heads<const Scalar>& O, const Tensor3<Scalar>& lse, const Heads<const Scalar>& dO,
                              const Heads<Scalar>& dQ, const Heads<Scalar>& dK, const Heads<Scalar>& dV,
                              HeadsBackwardBuffers<Scalar>& buffers) {
  if (weights != nullptr) {
    scaled_dot_product_heads_backward<Scalar>(Q, K, V, mask, *weights, dropout, dO, dQ, dK, dV, buffers.direct);
  } else {
    core::backward(core::scaled_call<Scalar>(Q, K, V, mask, dropout), O, lse.data(), dO, dQ, dK, dV, buffers.tiled);
  }
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
