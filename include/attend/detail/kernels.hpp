// attend/detail/kernels.hpp — attend's kernels, compiled once per instruction-set level, and the table of the level
// the process runs on.
//
// Each file under detail/kernels/ is written once against the operations of Simd<Scalar> (detail/generic/simd.hpp)
// and included here three times: into namespace generic (Eigen's packets at the file's own flags), avx2 and avx512
// (their Simd, the functions compiled for that instruction set by detail/target.hpp). kernels<Scalar>() hands out the
// entry points of the level active_isa() chose (attend/isa.hpp), as a table of function pointers: the algorithms
// that share work among threads (core/attention.hpp, project_rows.hpp, ...) fetch the table once per call, before
// their parallel region, and call through it for each piece of work, so no code of a level the CPU lacks runs.
//
// Adding a level: a Simd of its own in detail/<level>/simd.hpp, a target macro in detail/target.hpp, a CPU check in
// isa.hpp, and one more inclusion block and table below.
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/avx2/simd.hpp>
#include <attend/detail/avx512/few_rows_projection.hpp>
#include <attend/detail/avx512/simd.hpp>
#include <attend/detail/avx512_bf16/attention.hpp>
#include <attend/detail/generic/simd.hpp>
#include <attend/detail/mask_row.hpp>
#include <attend/detail/operands.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/target.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/isa.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace generic {
#include <attend/detail/kernels/products-inl.hpp>
#include <attend/detail/kernels/softmax-inl.hpp>
#include <attend/detail/kernels/heads-inl.hpp>
}  // namespace generic
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend

#ifdef ATTEND_X86_DISPATCH
ATTEND_TARGET_AVX2_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx2 {
#include <attend/detail/kernels/products-inl.hpp>
#include <attend/detail/kernels/softmax-inl.hpp>
#include <attend/detail/kernels/heads-inl.hpp>
}  // namespace avx2
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END

ATTEND_TARGET_AVX512_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512 {
#include <attend/detail/kernels/products-inl.hpp>
#include <attend/detail/kernels/softmax-inl.hpp>
#include <attend/detail/kernels/heads-inl.hpp>
}  // namespace avx512
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END
#endif

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The entry points of one level, for Scalar.
template <class Scalar>
struct Kernels {
  Isa isa;
  Index packet_size;  // the level's packet: Scalars a register holds
  // Y (X.rows, columns) (+)= X (X.rows, steps) B (steps, columns) + Y.bias, B read in place: X by rows or
  // transposed, B by rows or in any layout (detail/operands.hpp: x_rows, x_columns, b_rows, b_padded_rows, b_columns,
  // b_strided, y_into, y_added); detail/kernels/products-inl.hpp, times_matrix
  void (*times_matrix)(const LeftOperand<Scalar>& X, Index steps, const RightOperand<Scalar>& B, Index columns,
                       const Output<Scalar>& Y);
  // Y (X.rows, columns) (+)= the taps of a 'same' correlation over a chunk of one sequence (X.rows by `steps`
  // channels) + Y.bias: products-inl.hpp, correlate_rows
  void (*correlate_rows)(const SequenceRows<Scalar>& X, Index steps, const TapsOperand<Scalar>& B, Index columns,
                         const Output<Scalar>& Y);
  // packed (micro-panels of this level) = B's (steps, columns) panel (b_rows, b_columns or b_strided):
  // products-inl.hpp, pack_panel; at most steps * padded_to_packets(columns) elements
  void (*pack_panel)(const RightOperand<Scalar>& B, Index steps, Index columns, Scalar* packed);
  // Y (X.rows, columns) (+)= X (X.rows, steps) B + Y.bias, B the steps from B.first and the first columns of a panel
  // pack_panel packed (b_packed): products-inl.hpp, packed_times_matrix
  void (*packed_times_matrix)(const LeftOperand<Scalar>& X, Index steps, const PackedOperand<Scalar>& B, Index columns,
                              const Output<Scalar>& Y);
  // Columns of pack_panel's micro-panels: a packed panel's columns from a multiple c0 of it on are a panel of their
  // own, at packed + c0 * depth
  Index packed_width;
  // B (cols, rows) = A (rows, cols)^T
  void (*transpose_into)(const Scalar* A, Index lda, Index rows, Index cols, Scalar* B, Index ldb);
  Scalar (*row_max)(const Scalar* row, Index n);
  Scalar (*exp_shifted)(Scalar* row, Index n, Scalar m);
  // the online softmax's step over a block of keys for a block of rows: online_softmax_rows
  bool (*online_softmax_rows)(Scalar* S, Index rows, Index n, Index ld, Scalar scale, const OnlineRows<Scalar>& state);
  // dp = p (dp - D), 0 where p is 0: softmax_gradient_row
  void (*softmax_gradient_row)(const Scalar* p, Scalar* dp, Index n, Scalar D);
  // dx = (y (dy - s)) scale on the keys the row sees, 0 elsewhere, s = sum y dy over them: softmax_backward_row
  void (*softmax_backward_row)(const Scalar* y, const Scalar* dy, Scalar* dx, Index num_keys, const VisibleKeys& keys,
                               Scalar scale);
  void (*masked_softmax_row)(Scalar* row, Index num_keys, const VisibleKeys& keys, FullyMasked rule);
  // a block of rows of scores, row q seeing keys[q]: each times scale, then masked_softmax_row
  void (*masked_softmax_block)(Scalar* scores, Index rows, Index num_keys, Index stride, const VisibleKeys* keys,
                               FullyMasked rule, Scalar scale);
  void (*tiny_scores)(const Scalar* Q, Index ldq, const Scalar* K, Index ldk, Index num_queries, Index num_keys,
                      Index d, Scalar scale, Scalar* scores, Index lds);
  // For each of `count` projections, Y (rows <= tuning::few_rows, out) = X W^T + bias reading W (out, in) in place,
  // X copied once for all of them; or null where the level has none (avx512/few_rows_projection.hpp)
  void (*few_rows_projection)(const Scalar* X, Index ldx, Index rows, Index in, const Projection<Scalar>* projections,
                              Index count);
  // Y (rows <= tuning::few_rows, n) = X (rows, d) K^T reading K (n, d) in place, rows ldk apart, prefetching the keys
  // that follow up to `available` rows from K, on the calling thread; or null where the level has none
  // (avx512/few_rows_projection.hpp)
  void (*few_rows_scores)(const Scalar* X, Index ldx, Index rows, Index d, const Scalar* K, Index ldk, Index n,
                          Index available, Scalar* Y, Index ldy);
  // Attention on queries, keys and values stored in bfloat16 (avx512_bf16/attention.hpp); null where the level has
  // no bfloat16 dot products, and for double. A decoding step reads them in place: bf16_scores, few_rows_scores's
  // product on bfloat16 X and K; bf16_weighted_values, Y (rows, columns) += P (rows, n) V (n, columns), V's rows ldv
  // apart. More rows: a block of keys (n, d) or values (n, dv) packed into pairs (bf16_pack_keys, bf16_pack_values),
  // the scores X (rows, d) K^T from the keys' pairs (bf16_packed_scores), and P (rows, n, rows n apart) rounded to
  // bfloat16 in place times the values' pairs (bf16_rounded_weights_times_values).
  void (*bf16_scores)(const bfloat16* X, Index ldx, Index rows, Index d, const bfloat16* K, Index ldk, Index n,
                      Index available, Scalar* Y, Index ldy);
  void (*bf16_weighted_values)(const Scalar* P, Index ldp, Index rows, Index n, const bfloat16* V, Index ldv,
                               Index columns, Scalar* Y, Index ldy);
  void (*bf16_pack_keys)(const bfloat16* K, Index ldk, Index n, Index d, std::uint32_t* packed);
  void (*bf16_pack_values)(const bfloat16* V, Index ldv, Index n, Index dv, std::uint32_t* packed);
  void (*bf16_packed_scores)(const bfloat16* X, Index ldx, Index rows, Index d, const std::uint32_t* keys, Index n,
                             const Output<Scalar>& Y);
  void (*bf16_rounded_weights_times_values)(Scalar* P, Index rows, Index n, const std::uint32_t* values, Index dv,
                                            const Output<Scalar>& Y);

  // The first column of the micro-panel that holds `column`: where a product over a packed panel's columns from
  // `column` on can start (packed_times_matrix at packed + start * depth).
  Index micro_panel_start(Index column) const { return column / packed_width * packed_width; }
};

#define ATTEND_KERNELS_OF(level, few_rows, few_scores)                                                       \
  Kernels<Scalar> {                                                                                          \
    Isa::level, level::Simd<Scalar>::size, &level::times_matrix<Scalar>, &level::correlate_operands<Scalar>, \
        &level::pack_operand<Scalar>, &level::packed_times_matrix<Scalar>, level::packed_width<Scalar>,      \
        &level::transpose_into<Scalar>, &level::row_max<Scalar>, &level::exp_shifted<Scalar>,                \
        &level::online_softmax_rows<Scalar>, &level::softmax_gradient_row<Scalar>,                           \
        &level::softmax_backward_row<Scalar>, &level::masked_softmax_row<Scalar>,                            \
        &level::masked_softmax_block<Scalar>, &level::tiny_scores<Scalar>, few_rows, few_scores, nullptr,    \
        nullptr, nullptr, nullptr, nullptr, nullptr                                                          \
  }

// The table of `isa` (which the CPU must be able to run). The levels above avx512 add bfloat16 products only: their
// table is float_level(isa)'s (isa included: the float kernels and their packing are that level's) with the entries
// on bfloat16 storage set; the rest of their bfloat16 work is in detail/bf16_products.hpp.
template <class Scalar>
const Kernels<Scalar>& kernels_for(Isa isa) {
  static const Kernels<Scalar> generic_kernels = ATTEND_KERNELS_OF(generic, nullptr, nullptr);
#ifdef ATTEND_X86_DISPATCH
  static const Kernels<Scalar> avx2_kernels = ATTEND_KERNELS_OF(avx2, nullptr, nullptr);
  static const Kernels<Scalar> avx512_kernels =
      ATTEND_KERNELS_OF(avx512, avx512::few_rows_projection_of<Scalar>(), avx512::few_rows_scores_of<Scalar>());
  static const Kernels<Scalar> avx512_bf16_kernels = [] {
    Kernels<Scalar> table = avx512_kernels;
    if constexpr (std::is_same<Scalar, float>::value) {  // attention on bfloat16 storage computes in float
      table.bf16_scores = &avx512_bf16::pairs_scores;
      table.bf16_weighted_values = &avx512_bf16::weighted_values;
      table.bf16_pack_keys = &avx512_bf16::pack_key_pairs;
      table.bf16_pack_values = &avx512_bf16::pack_pairs_of_rows;
      table.bf16_packed_scores = &avx512_bf16::times_packed_float;
      table.bf16_rounded_weights_times_values = &avx512_bf16::rounded_weights_times_values;
    }
    return table;
  }();
  if (isa == Isa::avx512_bf16) return avx512_bf16_kernels;
  if (isa == Isa::avx512) return avx512_kernels;
  if (isa == Isa::avx2) return avx2_kernels;
#endif
  static_cast<void>(isa);
  return generic_kernels;
}

#undef ATTEND_KERNELS_OF

// With ATTEND_SEPARATE_KERNELS defined, a translation unit does not compile the kernels: it uses the tables that the
// one file including <attend/separate_kernels.hpp> compiles.
#ifdef ATTEND_SEPARATE_KERNELS
extern template const Kernels<float>& kernels_for<float>(Isa);
extern template const Kernels<double>& kernels_for<double>(Isa);
#endif

// The table of the level the process runs on: active_isa() (which throws std::invalid_argument for a bad
// ATTEND_ISA: call it outside parallel regions).
template <class Scalar>
const Kernels<Scalar>& kernels() {
  return kernels_for<Scalar>(active_isa());
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
