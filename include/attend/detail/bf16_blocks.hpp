// attend/detail/bf16_blocks.hpp — the order in which a bfloat16 product read in place visits its register blocks.
//
// Each level's in-place kernel (detail/avx512_bf16/products.hpp, detail/avx512/bf16_rows.hpp,
// detail/avx2/bf16_rows.hpp) computes a block of R <= 4 rows of Y by C = 4 or 1 columns at a time, each output a
// sum over the whole depth, rounded to bfloat16 once; this loop takes a product in those blocks: rows by 4, then
// columns by 4, the last few one at a time. An output's sum does not depend on its block, so neither do its bits.
#pragma once

#include <attend/config.hpp>

#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Y (R, C) = X (R, depth) W (C, depth)^T + bias (C, in float, or null), X, W and Y rows ldx, ldw and ldy apart.
using Bf16Block = void (*)(const bfloat16* X, Index ldx, const bfloat16* W, Index ldw, Index depth, const float* bias,
                           bfloat16* Y, Index ldy);

// A level's blocks: four_columns[R - 1] of R rows by 4 columns, one_column[R - 1] of R rows by 1.
struct Bf16Blocks {
  Bf16Block four_columns[4];
  Bf16Block one_column[4];
};

// Y (rows, columns) = X (rows, depth) W (columns, depth)^T + bias (columns, in float, or null), in `blocks`.
inline void in_bf16_blocks(const Bf16Blocks& blocks, const bfloat16* X, Index ldx, Index rows, Index depth,
                           const bfloat16* W, Index ldw, const float* bias, bfloat16* Y, Index ldy, Index columns) {
  for (Index r0 = 0; r0 < rows; r0 += 4) {
    const Index n = rows - r0 < 4 ? rows - r0 : 4;
    const bfloat16* x = X + r0 * ldx;
    bfloat16* y = Y + r0 * ldy;
    Index c0 = 0;
    for (; c0 + 4 <= columns; c0 += 4)
      blocks.four_columns[n - 1](x, ldx, W + c0 * ldw, ldw, depth, bias != nullptr ? bias + c0 : nullptr, y + c0, ldy);
    for (; c0 < columns; ++c0)
      blocks.one_column[n - 1](x, ldx, W + c0 * ldw, ldw, depth, bias != nullptr ? bias + c0 : nullptr, y + c0, ldy);
  }
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
