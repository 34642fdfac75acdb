// attend/detail/modules/transformer_sizes.hpp — what d2l's TransformerEncoder and TransformerDecoder share around
// their blocks: the check of their sizes, and the sqrt(num_hiddens) scale of the token embeddings (and of its
// gradient).
#pragma once

#include <attend/config.hpp>

#include <attend/tensor.hpp>
#include <cmath>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Every size of an encoder or decoder, checked before any parameter is drawn; returns num_hiddens. where: the class.
template <class Scalar>
Index checked_transformer_sizes(const char* where, Index num_hiddens, Index ffn_num_hiddens, Index num_heads,
                                Index num_blks, Scalar dropout, Index max_len) {
  require_at_least(num_hiddens, 1, where, "num_hiddens");
  require_at_least(ffn_num_hiddens, 1, where, "ffn_num_hiddens");
  require_at_least(num_heads, 1, where, "num_heads");
  require_at_least(num_blks, 0, where, "num_blks");
  require(num_hiddens % num_heads == 0, where, ": num_hiddens (", num_hiddens, ") must be divisible by num_heads (",
          num_heads, ")");
  require_probability(dropout, where);
  require_at_least(max_len, 1, where, "max_len");
  return num_hiddens;
}

// E * sqrt(num_hiddens), in place: d2l's scale of the token embeddings before the positions are added; the same
// factor takes their gradient back. E: (batch, steps, num_hiddens).
template <class Scalar>
Tensor3<Scalar> scaled_by_sqrt_width(Tensor3<Scalar> E) {
  const Scalar scale = std::sqrt(static_cast<Scalar>(E.dimension(2)));
  for (Index i = 0; i < E.size(); ++i) E.data()[i] *= scale;
  return E;
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
