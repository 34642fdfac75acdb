// attend/detail/attention_backward.hpp — the backward pass of scaled_dot_product_heads (attend_rows.hpp), the
// direct path: from the weights P its forward pass kept; and attention_heads_backward, which takes the path the
// forward call took (the tiled one's: detail/flash_backward.hpp).
//
// For query head h of batch row b, reading key/value head g = h / group, with scale = 1 / sqrt(d), F the dropout's
// factors (0 or 1 / (1 - p); 1 without dropout; detail/attention_dropout.hpp) and dO the gradient of its output:
//   P~ = P * F                     the weights the values were multiplied by          (queries, keys)
//   dV_g += P~^T dO                                                                    (keys, dv)
//   dP = (dO V_g^T) * F                                                                (queries, keys)
//   dS = softmax_backward(P, dP)   row by row, 0 for a masked key (softmax_backward_row, kernels/softmax-inl.hpp)
//   dQ_h = scale dS K_g,   dK_g += scale dS^T Q_h                                      (queries, d), (keys, d)
// A key/value head's gradients add its query heads' in order h = g * group, g * group + 1, ...: one thread makes
// them, so the bits do not depend on the number of threads. Every product runs on the level's row kernel.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/flash_backward.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cmath>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// One thread's buffers for the backward pass of one head.
template <class Scalar>
struct AttentionBackwardScratch {
  // Sized for heads of (num_queries, num_keys) weights and values of dv; the padding of VT is 0.
  void resize(Index num_queries, Index num_keys, Index dv) {
    A.resize(num_queries, num_keys);
    if (VT.rows() != dv || VT.cols() != padded_to_packets<Scalar>(num_keys))
      VT = Matrix<Scalar>::Zero(dv, padded_to_packets<Scalar>(num_keys));
  }
  Matrix<Scalar> A;   // (queries, keys): P~ (with dropout), then dP, then scale dS
  Matrix<Scalar> VT;  // (dv, keys padded to whole packets): V_g^T, the padding 0
};

// The gradients of scaled_dot_product_heads' inputs, written into dQ, dK, dV (views of the shapes of Q, K, V):
//   Q, K, V, mask, dropout: the forward call's; weights: the (batch * Q.count, queries, keys) weights it kept
//   dO: the gradient of its output (as Q, with heads of dv); scratch: one per thread, resized here (kept by the
//   caller across calls, they make a repeated call allocation-free)
template <class Scalar>
void scaled_dot_product_heads_backward(const Heads<const Scalar>& Q, const Heads<const Scalar>& K,
                                       const Heads<const Scalar>& V, const Mask& mask, const Tensor3<Scalar>& weights,
                                       const AttentionDropout& dropout, const Heads<const Scalar>& dO,
                                       const Heads<Scalar>& dQ, const Heads<Scalar>& dK, const Heads<Scalar>& dV,
                                       std::vector<AttentionBackwardScratch<Scalar>>& scratch) {
  const Index batch = Q.batch, num_queries = Q.length, num_keys = K.length, num_heads = Q.count;
  const Index kv_heads = K.count, group = num_heads / kv_heads;
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
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  scratch.resize(static_cast<std::size_t>(num_threads()));
  for (AttentionBackwardScratch<Scalar>& s : scratch) s.resize(num_queries, num_keys, dv);
  const double total = static_cast<double>(num_queries) * static_cast<double>(num_keys) *
                       static_cast<double>(batch * num_heads) * static_cast<double>(2 * d + 2 * dv);
  parallel_for(batch * kv_heads, total,
               [&](Index kv_pair, int thread) {
                 AttentionBackwardScratch<Scalar>& s = scratch[static_cast<std::size_t>(thread)];
                 const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
                 const auto Kg = K.head(b, g);  // (keys, d)
                 const auto Vg = V.head(b, g);  // (keys, dv)
                 auto dKg = dK.head(b, g);      // (keys, d)
                 auto dVg = dV.head(b, g);      // (keys, dv)
                 dKg.setZero();
                 dVg.setZero();
                 kernel.transpose_into(Vg.data(), Vg.outerStride(), num_keys, dv, s.VT.data(), s.VT.outerStride());
                 for (Index h = g * group; h < (g + 1) * group; ++h) {
                   const Index pair = b * num_heads + h;
                   const auto Qh = Q.head(b, h);                                      // (queries, d)
                   const auto dOh = dO.head(b, h);                                    // (queries, dv)
                   auto dQh = dQ.head(b, h);                                          // (queries, d)
                   const Scalar* P = weights.data() + pair * num_queries * num_keys;  // (queries, keys)
                   // dV_g += P~^T dO, P~ = P without dropout, read in place
                   const Scalar* dropped = P;  // (queries, keys)
                   if (dropout.active()) {
                     s.A = Eigen::Map<const Matrix<Scalar>>(P, num_queries, num_keys);
                     for (Index i = 0; i < num_queries; ++i)
                       dropout.apply(s.A.data() + i * num_keys, num_keys, pair, i, Index(0));
                     dropped = s.A.data();
                   }
                   kernel.transposed_times_matrix(true, dropped, num_keys, num_keys, num_queries, dOh.data(),
                                                  dOh.outerStride(), dv, nullptr, dVg.data(), dVg.outerStride());
                   // dP = (dO V_g^T) * F, then scale dS row by row
                   kernel.rows_times_matrix(false, dOh.data(), dOh.outerStride(), num_queries, dv, s.VT.data(),
                                            s.VT.outerStride(), num_keys, true, nullptr, s.A.data(), num_keys);
                   for (Index i = 0; i < num_queries; ++i) {
                     Scalar* row = s.A.data() + i * num_keys;  // (keys)
                     dropout.apply(row, num_keys, pair, i, Index(0));
                     kernel.softmax_backward_row(P + i * num_keys, row, row, num_keys,
                                                 mask.visible_keys(b, i, num_queries, num_keys), scale);
                   }
                   // dQ_h = scale dS K_g;  dK_g += scale dS^T Q_h
                   kernel.rows_times_matrix(false, s.A.data(), num_keys, num_queries, num_keys, Kg.data(),
                                            Kg.outerStride(), d, false, nullptr, dQh.data(), dQh.outerStride());
                   kernel.transposed_times_matrix(true, s.A.data(), num_keys, num_keys, num_queries, Qh.data(),
                                                  Qh.outerStride(), d, nullptr, dKg.data(), dKg.outerStride());
                 }
               });
}

// The scratch of both paths' backward passes, kept by a module between calls: a repeated training step reuses its
// memory (blocks this large, freed and taken again, go back to the system and are faulted in again on every step).
// Its contents between calls mean nothing.
template <class Scalar>
struct HeadsBackwardBuffers {
  std::vector<AttentionBackwardScratch<Scalar>> direct;  // one per thread
  FlashBackwardBuffers<Scalar> tiled;
};

// The backward pass of either path: the direct one's when the forward call kept its weights (weights not null),
// otherwise the tiled one's, from that call's output O and log-sum-exp lse. Arguments as the two above.
template <class Scalar>
void attention_heads_backward(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                              const Mask& mask, const AttentionDropout& dropout, const Tensor3<Scalar>* weights,
                              const Heads<const Scalar>& O, const Vector<Scalar>& lse, const Heads<const Scalar>& dO,
                              const Heads<Scalar>& dQ, const Heads<Scalar>& dK, const Heads<Scalar>& dV,
                              HeadsBackwardBuffers<Scalar>& buffers) {
  if (weights != nullptr) {
    scaled_dot_product_heads_backward<Scalar>(Q, K, V, mask, *weights, dropout, dO, dQ, dK, dV, buffers.direct);
  } else {
    flash_attention_heads_backward<Scalar>(Q, K, V, mask, dropout, O, lse, dO, dQ, dK, dV, buffers.tiled);
  }
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
