// attend/detail/heads.hpp — attention heads side by side in the columns of a row-major matrix, as the projections
// make them: the view both attention paths (attend_rows.hpp, core/attention.hpp) read their queries, keys and
// values through and write their output through, so that no head is ever copied out (the layout transpose_qkv
// would build).
//
// Step t of head h of batch row b is the `dim` elements at data + (b * batch_rows + t) * row_stride + h * head_stride:
// heads side by side in each row (head_stride = dim, as projections make them), or each head's steps one after
// another (row_stride = dim, head_stride the rows of a head times dim, as KVCache keeps them, so that a head's block
// of steps is one contiguous read). batch_rows, the rows from one batch row to the next, may exceed `length`, the
// steps in use: a key/value cache with room for steps still to come is read in place. Queries and keys may have
// different numbers of heads: query head h reads key/value head h / (query heads / key/value heads), grouped-query
// attention (one key/value head: multi-query attention); d2l's multi-head attention has as many of each.
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

#include <Eigen/Core>
#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Element>  // Scalar or const Scalar
struct Heads {
  using Scalar = std::remove_const_t<Element>;
  using HeadMap = Eigen::Map<std::conditional_t<std::is_const_v<Element>, const Matrix<Scalar>, Matrix<Scalar>>, 0,
                             Eigen::OuterStride<>>;

  Element* data = nullptr;
  Index row_stride = 0;  // elements from one step to the next (count * dim or more; dim for a head's steps in a run)
  Index batch_rows = 0;  // rows from one batch row to the next (at least length)
  Index batch = 0;       // batch rows
  Index length = 0;      // steps of each batch row in use
  Index count = 0;       // heads
  Index dim = 0;         // features of a head
  Index head_stride = 0;  // elements from one head to the next within a step's row (dim: heads side by side)

  // Step t of head h of batch row b, (dim) contiguous. Only called with rows to point into: with dim 0, data may be
  // null, and then row_stride and h * dim are 0 too.
  Element* at(Index b, Index h, Index t) const { return data + (b * batch_rows + t) * row_stride + h * head_stride; }
  // Head h of batch row b, (length, dim), rows row_stride apart. Only with length >= 1.
  HeadMap head(Index b, Index h) const { return HeadMap(at(b, h, 0), length, dim, Eigen::OuterStride<>(row_stride)); }
};

// The heads of a (batch * length, count * dim) row-major matrix (a Matrix, Map or Ref; const for a read-only view):
// batch rows one after another, no spare rows.
template <class RowMajor>
auto heads_of(RowMajor&& matrix, Index batch, Index length, Index count) {
  using Element = std::remove_pointer_t<decltype(matrix.data())>;
  static_assert(std::decay_t<RowMajor>::IsRowMajor, "heads are columns of a row-major matrix");
  const Index dim = count > 0 ? matrix.cols() / count : 0;
  return Heads<Element>{matrix.data(), matrix.outerStride(), length, batch, length, count, dim, dim};
}

// The read-only view of the same heads.
template <class Scalar>
Heads<const Scalar> as_const(const Heads<Scalar>& heads) {
  return {heads.data,  heads.row_stride, heads.batch_rows, heads.batch,
          heads.length, heads.count,      heads.dim,        heads.head_stride};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
