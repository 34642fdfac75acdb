// attend/attention_path.hpp — which of the two implementations of scaled dot-product attention a module runs.
//
//   direct  the seed's computation: the (batch * heads, queries, keys) scores, a masked softmax over each row, then
//           weights @ values. It keeps the weights (attention_weights()) and applies dropout to them in training.
//   tiled   the attention core (detail/core/attention.hpp), which scaled_dot_product_attention and
//           GroupedQueryAttention also run: blocks of keys streamed past blocks of queries with an online softmax,
//           memory O(queries + keys) per thread instead of O(queries * keys), no weights formed; its backward pass
//           recomputes them block by block from each row's log-sum-exp. Dropout draws the same mask on both paths
//           (detail/attention_dropout.hpp).
//   automatic (the default) tiled when the weights of the whole call would take more than direct_weights_budget
//           bytes (a core's L2 cache here), in evaluation and training alike; direct otherwise. Small calls, the
//           seed's among them, keep their weights; large ones neither store nor compute an n^2 tensor.
//
// After a call that took the tiled path, a module's attention_weights() throws std::logic_error (there are none);
// set_path(AttentionPath::direct) keeps them at any size. Both paths agree to rounding (tests/test_core_paths.cpp,
// tests/test_attention_path.cpp): within 1e-5 relative in float and 1e-12 in double.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/tuning.hpp>

#include <attend/tensor.hpp>

#include <cstddef>
#include <ostream>

namespace attend {
inline namespace ATTEND_ABI {

enum class AttentionPath { automatic, direct, tiled };

inline std::ostream& operator<<(std::ostream& out, AttentionPath path) {
  switch (path) {
    case AttentionPath::automatic: return out << "automatic";
    case AttentionPath::direct: return out << "direct";
    case AttentionPath::tiled: return out << "tiled";
  }
  return out << "AttentionPath(" << static_cast<int>(path) << ")";
}

namespace detail {

// automatic's threshold: the bytes of one call's (batch * heads, queries, keys) weights (tuning.hpp).
constexpr double direct_weights_budget = tuning::direct_path_bytes;

// True when a call should take the tiled path. weights: the number of elements the direct path would form.
template <class Scalar>
bool takes_tiled_path(AttentionPath path, Index weights) {
  switch (path) {
    case AttentionPath::direct: return false;
    case AttentionPath::tiled: return true;
    case AttentionPath::automatic: break;
  }
  return static_cast<double>(weights) * sizeof(Scalar) > direct_weights_budget;
}

// Checks a path given to module's set_path (an enum may hold any integer).
inline AttentionPath checked_path(AttentionPath path, const char* module) {
  require(path == AttentionPath::automatic || path == AttentionPath::direct || path == AttentionPath::tiled, module,
          "::set_path: path must be AttentionPath::automatic, direct or tiled, got AttentionPath(",
          static_cast<int>(path), ")");
  return path;
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
