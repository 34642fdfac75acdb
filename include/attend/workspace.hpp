// attend/workspace.hpp — buffers that a forward pass reuses from one call to the next.
//
// A module's operator() keeps one of its own, so that a call with the shapes of the previous one allocates only its
// output. The const forward(..., workspace) takes one from the caller instead: one workspace per calling thread
// makes repeated calls from many threads allocate only their outputs, and forward(..., workspace, out) nothing. Its
// contents between calls mean nothing; it holds no state of the module, and may move between modules of the same
// Scalar.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/attend_rows.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/transposed_weight.hpp>
#include <attend/tensor.hpp>

#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
struct AttentionWorkspace {
  Matrix<Scalar> Q, K, V;    // projections: (batch * q, hiddens), (batch * k, hiddens), (batch * k, hiddens)
  Matrix<Scalar> heads;      // (batch * q, hiddens): concatenated head outputs, before W_o
  Tensor3<Scalar> weights;   // (batch * heads, q, k): the direct path's weights, when the caller keeps none
  detail::core::Buffers<Scalar> core;  // the tiled path's (the attention core's): per thread scratch
  detail::DirectBuffers<Scalar> direct;  // the direct path's: packed copies of K and V, per thread dropped weights
  // W_q^T, W_k^T, W_v^T, W_o^T kept for small weights (detail/transposed_weight.hpp); each compared with its weight on
  // every call and rebuilt when the weight changed, so the workspace may move between modules.
  detail::TransposedWeight<Scalar> W_q, W_k, W_v, W_o;
};

}  // namespace ATTEND_ABI
}  // namespace attend
