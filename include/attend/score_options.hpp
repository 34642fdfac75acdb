// attend/score_options.hpp — what is done to each score q.k before the mask and the softmax.
//
// In this order, for query head h at aligned position p (query q of Q, K keys: p = q + K - Q) and key j:
//   s = scale * q.k                      scale 0 means 1 / sqrt(head_dim)
//   s = softcap * tanh(s / softcap)      when softcap > 0 (Gemma 2's attention logit softcapping)
//   s = s - alibi_slopes[h] * |p - j|    when alibi_slopes is not empty (ALiBi; one slope per query head)
//   s = s + bias(r, q, j)                when bias is not empty: r = b * num_heads + h for a bias of batch * num_heads
//                                        rows, r = b for one of batch rows, r = 0 for one of a single row; a bias of
//                                        -inf hides the key, like a masked one
// then the mask hides keys, and the softmax runs over the keys the row still sees.
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
struct ScoreOptions {
  Scalar scale = Scalar(0);          // s = scale * q.k; 0 means 1 / sqrt(head_dim)
  Scalar softcap = Scalar(0);        // > 0: s = softcap * tanh(s / softcap)
  std::vector<Scalar> alibi_slopes;  // empty, or one per query head: s -= slope * |p - j|
  Tensor3<Scalar> bias;              // empty, or (batch * num_heads | batch | 1, queries, keys): s += bias

  // True when the scores are scale * q.k and nothing else.
  bool plain() const { return softcap == Scalar(0) && alibi_slopes.empty() && bias.size() == 0; }
};

}  // namespace ATTEND_ABI
}  // namespace attend
